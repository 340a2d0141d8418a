//! Login rate limiting, per account and per client address, over a sliding window kept in the
//! metadata store (`login_failures`), so that every `serve` replica on one store counts the
//! same failures: three replicas behind a load balancer give an attacker the attempts of one.
//!
//! Cost: a check is one indexed count over both keys; a failure is one insert of two rows and
//! one indexed delete of rows the window has passed; a success is one indexed delete.
//! Replicas' clocks are assumed to agree to well under the window (15 minutes); a skew of a few
//! seconds only moves when a failure stops counting by as much.

use std::time::Duration;

use crate::db::{self, Pool};
use crate::error::Result;

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

/// Longest key stored: a name is what a stranger typed, so an unbounded one would be an
/// unbounded row. Longer names share the key of their first bytes, which only limits sooner.
const MAX_KEY_BYTES: usize = 256;

#[derive(Debug, Default)]
pub struct LoginLimiter {
    limits: Limits,
}

impl LoginLimiter {
    pub fn new(limits: Limits) -> Self {
        LoginLimiter { limits }
    }

    /// `Some(seconds to wait)` when either the account or the address is at its limit.
    pub async fn check(&self, pool: &Pool, account: &str, address: &str) -> Result<Option<u64>> {
        self.check_at(pool, account, address, now_ms()).await
    }

    pub async fn record_failure(&self, pool: &Pool, account: &str, address: &str) -> Result<()> {
        self.record_failure_at(pool, account, address, now_ms())
            .await
    }

    /// A successful login clears the account's failures (not the address's).
    pub async fn record_success(&self, pool: &Pool, account: &str) -> Result<()> {
        db::query("DELETE FROM login_failures WHERE key = $1")
            .bind(account_key(account))
            .execute(pool)
            .await?;
        Ok(())
    }

    fn window_ms(&self) -> i64 {
        i64::try_from(self.limits.window.as_millis()).unwrap_or(i64::MAX)
    }

    async fn check_at(
        &self,
        pool: &Pool,
        account: &str,
        address: &str,
        now: i64,
    ) -> Result<Option<u64>> {
        let (a, ip) = (account_key(account), address_key(address));
        // A failure counts while `now - at < window`, so a counted one always leaves a wait > 0.
        let rows: Vec<(String, i64, i64)> = db::query_as(
            "SELECT key, COUNT(*), MIN(at_ms) FROM login_failures \
             WHERE key IN ($1, $2) AND at_ms > $3 GROUP BY key",
        )
        .bind(&a)
        .bind(&ip)
        .bind(now.saturating_sub(self.window_ms()))
        .fetch_all(pool)
        .await?;
        let mut wait_ms = 0i64;
        for (key, count, oldest) in rows {
            let limit = if key == a {
                self.limits.per_account
            } else {
                self.limits.per_address
            };
            if usize::try_from(count).unwrap_or(usize::MAX) >= limit {
                // Free again when the oldest failure leaves the window.
                wait_ms = wait_ms.max(self.window_ms() - (now - oldest));
            }
        }
        Ok((wait_ms > 0).then(|| (wait_ms as u64).div_ceil(1000).max(1)))
    }

    async fn record_failure_at(
        &self,
        pool: &Pool,
        account: &str,
        address: &str,
        now: i64,
    ) -> Result<()> {
        db::query("INSERT INTO login_failures (key, at_ms) VALUES ($1, $3), ($2, $3)")
            .bind(account_key(account))
            .bind(address_key(address))
            .bind(now)
            .execute(pool)
            .await?;
        // Whatever replica sees a failure prunes for all: rows past the window never count.
        db::query("DELETE FROM login_failures WHERE at_ms <= $1")
            .bind(now.saturating_sub(self.window_ms()))
            .execute(pool)
            .await?;
        Ok(())
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn account_key(account: &str) -> String {
    bounded(format!("a:{account}"))
}

fn address_key(address: &str) -> String {
    bounded(format!("ip:{address}"))
}

fn bounded(mut key: String) -> String {
    if key.len() > MAX_KEY_BYTES {
        let mut end = MAX_KEY_BYTES;
        while !key.is_char_boundary(end) {
            end -= 1;
        }
        key.truncate(end);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000;

    async fn store() -> (tempfile::TempDir, Pool) {
        let dir = tempfile::tempdir().unwrap();
        let pool = db::open(&dir.path().join("t.db")).await.unwrap();
        db::migrate(&pool).await.unwrap();
        (dir, pool)
    }

    fn limiter(per_account: usize, per_address: usize) -> LoginLimiter {
        LoginLimiter::new(Limits {
            per_account,
            per_address,
            window: Duration::from_secs(60),
        })
    }

    #[tokio::test]
    async fn an_account_is_locked_after_its_limit_and_others_are_not() {
        let (_d, pool) = store().await;
        let l = limiter(3, 100);
        let t = 1_000 * MINUTE;
        for i in 0..3 {
            assert_eq!(
                l.check_at(&pool, "alice", "1.1.1.1", t + i).await.unwrap(),
                None
            );
            l.record_failure_at(&pool, "alice", "1.1.1.1", t + i)
                .await
                .unwrap();
        }
        assert!(
            l.check_at(&pool, "alice", "2.2.2.2", t + 3)
                .await
                .unwrap()
                .is_some(),
            "per account, whatever the address"
        );
        assert_eq!(
            l.check_at(&pool, "bob", "1.1.1.1", t + 3).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn an_address_is_locked_after_its_limit_across_accounts() {
        let (_d, pool) = store().await;
        let l = limiter(100, 3);
        let t = 1_000 * MINUTE;
        for name in ["a", "b", "c"] {
            l.record_failure_at(&pool, name, "9.9.9.9", t)
                .await
                .unwrap();
        }
        let wait = l.check_at(&pool, "d", "9.9.9.9", t + 1).await.unwrap();
        assert_eq!(wait, Some(60), "the whole window less 1 ms, rounded up");
        assert_eq!(
            l.check_at(&pool, "d", "8.8.8.8", t + 1).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn the_wait_is_until_the_oldest_failure_leaves_the_window() {
        let (_d, pool) = store().await;
        let l = limiter(2, 100);
        let t = 1_000 * MINUTE;
        l.record_failure_at(&pool, "a", "x", t).await.unwrap();
        l.record_failure_at(&pool, "a", "x", t + 20_000)
            .await
            .unwrap();
        assert_eq!(
            l.check_at(&pool, "a", "x", t + 30_000).await.unwrap(),
            Some(30)
        );
        assert_eq!(
            l.check_at(&pool, "a", "x", t + MINUTE - 1).await.unwrap(),
            Some(1),
            "still inside on the window's last millisecond"
        );
        assert_eq!(
            l.check_at(&pool, "a", "x", t + MINUTE).await.unwrap(),
            None,
            "the oldest has left: one failure in the window, under the limit"
        );
    }

    #[tokio::test]
    async fn success_clears_the_account_and_not_the_address() {
        let (_d, pool) = store().await;
        let l = limiter(1, 1);
        let t = 1_000 * MINUTE;
        l.record_failure_at(&pool, "a", "x", t).await.unwrap();
        assert!(l.check_at(&pool, "a", "y", t).await.unwrap().is_some());
        l.record_success(&pool, "a").await.unwrap();
        assert_eq!(l.check_at(&pool, "a", "y", t).await.unwrap(), None);
        assert!(l.check_at(&pool, "b", "x", t).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn two_limiters_on_one_store_count_the_same_failures() {
        let (_d, pool) = store().await;
        let (one, two) = (limiter(4, 100), limiter(4, 100));
        let t = 1_000 * MINUTE;
        for i in 0..4 {
            let l = if i % 2 == 0 { &one } else { &two };
            l.record_failure_at(&pool, "ada", "x", t + i).await.unwrap();
        }
        assert!(one
            .check_at(&pool, "ada", "x", t + 5)
            .await
            .unwrap()
            .is_some());
        assert!(two
            .check_at(&pool, "ada", "x", t + 5)
            .await
            .unwrap()
            .is_some());
    }

    #[tokio::test]
    async fn failures_past_the_window_are_pruned_by_the_next_failure() {
        let (_d, pool) = store().await;
        let l = limiter(100, 100);
        let t = 1_000 * MINUTE;
        for name in ["a", "b", "c"] {
            l.record_failure_at(&pool, name, "x", t).await.unwrap();
        }
        l.record_failure_at(&pool, "d", "y", t + MINUTE)
            .await
            .unwrap();
        let keys: Vec<String> = db::query_scalar("SELECT key FROM login_failures ORDER BY key")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(keys, ["a:d", "ip:y"]);
    }

    #[tokio::test]
    async fn a_very_long_name_is_stored_bounded_and_still_limited() {
        let (_d, pool) = store().await;
        let l = limiter(1, 100);
        let name = "é".repeat(10_000);
        l.record_failure_at(&pool, &name, "x", 0).await.unwrap();
        let longest: i64 = db::query_scalar("SELECT MAX(LENGTH(key)) FROM login_failures")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(longest <= MAX_KEY_BYTES as i64);
        assert!(l.check_at(&pool, &name, "x", 1).await.unwrap().is_some());
    }
}
