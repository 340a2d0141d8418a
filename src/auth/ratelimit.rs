//! Login rate limiting, per account and per client address, over a sliding window.
//! In memory: a restart forgets counts, which is acceptable for a brute-force brake.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub per_account: usize,
    pub per_address: usize,
    pub window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_account: 5,
            per_address: 20,
            window: Duration::from_secs(15 * 60),
        }
    }
}

#[derive(Default)]
pub struct LoginLimiter {
    limits: Limits,
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl LoginLimiter {
    pub fn new(limits: Limits) -> Self {
        LoginLimiter {
            limits,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(seconds to wait)` when either the account or the address is over its limit.
    pub fn check(&self, account: &str, address: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let mut wait = 0u64;
        for (key, limit) in [
            (format!("a:{account}"), self.limits.per_account),
            (format!("ip:{address}"), self.limits.per_address),
        ] {
            if let Some(q) = map.get_mut(&key) {
                while q
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > self.limits.window)
                {
                    q.pop_front();
                }
                if q.len() >= limit {
                    if let Some(oldest) = q.front() {
                        let left = self
                            .limits
                            .window
                            .saturating_sub(now.duration_since(*oldest));
                        wait = wait.max(left.as_secs().max(1));
                    }
                }
            }
        }
        if wait > 0 {
            Err(wait)
        } else {
            Ok(())
        }
    }

    pub fn record_failure(&self, account: &str, address: &str) {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        // Bound memory under a spray of distinct names: forget everything past a size.
        if map.len() > 100_000 {
            map.clear();
        }
        for key in [format!("a:{account}"), format!("ip:{address}")] {
            map.entry(key).or_default().push_back(now);
        }
    }

    /// A successful login clears the account's failures (not the address's).
    pub fn record_success(&self, account: &str) {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&format!("a:{account}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_is_locked_after_its_limit_and_others_are_not() {
        let l = LoginLimiter::new(Limits {
            per_account: 3,
            per_address: 100,
            window: Duration::from_secs(60),
        });
        for _ in 0..3 {
            assert!(l.check("alice", "1.1.1.1").is_ok());
            l.record_failure("alice", "1.1.1.1");
        }
        assert!(
            l.check("alice", "2.2.2.2").is_err(),
            "per account, whatever the address"
        );
        assert!(l.check("bob", "1.1.1.1").is_ok());
    }

    #[test]
    fn an_address_is_locked_after_its_limit_across_accounts() {
        let l = LoginLimiter::new(Limits {
            per_account: 100,
            per_address: 3,
            window: Duration::from_secs(60),
        });
        for name in ["a", "b", "c"] {
            l.record_failure(name, "9.9.9.9");
        }
        let wait = l.check("d", "9.9.9.9").unwrap_err();
        assert!((1..=60).contains(&wait));
        assert!(l.check("d", "8.8.8.8").is_ok());
    }

    #[test]
    fn success_clears_the_account() {
        let l = LoginLimiter::new(Limits {
            per_account: 1,
            per_address: 100,
            window: Duration::from_secs(60),
        });
        l.record_failure("a", "x");
        assert!(l.check("a", "y").is_err());
        l.record_success("a");
        assert!(l.check("a", "y").is_ok());
    }
}
