//! What the service functions work with: one [`Ctx`] (the pool, the secret store, the
//! reconciler's wake-up handle), passed with the principal as `(&Ctx, &Principal, …)`.
//!
//! Invariant: this module sits below every domain and names none (the reconciler's [`Handle`]
//! lives here for that reason, `crate::reconcile` re-exports it), so domains, engines and the
//! web layer may all import it and the arrows still point down. A new dependency of the
//! services is one field here, not a parameter added across every domain.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::Pool;
use tokio::sync::Notify;

use crate::secrets::store::SecretStore;

/// The service context. Cheap to clone (three shared handles).
#[derive(Clone)]
pub struct Ctx {
    pub pool: Pool,
    pub secrets: Arc<SecretStore>,
    pub reconciler: Arc<Handle>,
}

impl Ctx {
    /// A context over `pool` and `secrets` with a new reconciler handle (one a process).
    pub fn new(pool: Pool, secrets: Arc<SecretStore>) -> Self {
        Ctx {
            pool,
            secrets,
            reconciler: Arc::new(Handle::default()),
        }
    }
}

/// Shared between the reconciler task and the web layer: wake-ups and counters.
#[derive(Default)]
pub struct Handle {
    pub(crate) wake: Notify,
    pub passes: AtomicU64,
    pub actions: AtomicU64,
    /// Passes, actions and errors not written to `counters` yet (see [`RECORD_EVERY`]).
    pub(crate) unrecorded: std::sync::Mutex<Unrecorded>,
    /// Each Connect cluster's passes in this process, by cluster id.
    pub clusters: std::sync::Mutex<std::collections::HashMap<String, ClusterPasses>>,
}

/// One Connect cluster's reconcile passes in the process running them: how often they come
/// and how long they take, so that a slow cluster shows as slow, and the others' period can be
/// seen not to suffer from it.
#[derive(Debug, Default, Clone)]
pub struct ClusterPasses {
    /// Parts of passes finished (answered, failed or out of budget).
    pub passes: u64,
    /// When the running one started (None: none running).
    pub running_since: Option<Instant>,
    /// The last finished one: when it ended, and how long it took.
    pub last_ended: Option<(Instant, Duration)>,
    /// When the last few finished ones started, oldest first ([`PERIOD_WINDOW`] at most).
    pub starts: std::collections::VecDeque<Instant>,
}

/// How many passes a cluster's pass period is the mean spacing of.
pub const PERIOD_WINDOW: usize = 10;

impl ClusterPasses {
    /// The mean time between the starts of the last passes (None before two).
    pub fn period(&self) -> Option<Duration> {
        let (first, last) = (self.starts.front()?, self.starts.back()?);
        let gaps = self.starts.len().checked_sub(1).filter(|n| *n > 0)?;
        Some(last.duration_since(*first) / gaps as u32)
    }
}

#[derive(Default)]
pub(crate) struct Unrecorded {
    pub(crate) passes: i64,
    pub(crate) actions: i64,
    pub(crate) errors: i64,
    /// When the last pass record was written (None: none yet by this process).
    pub(crate) recorded_at: Option<Instant>,
}

/// An unchanged pass writes nothing: its record (`reconcile_passes`, the counters) waits until
/// a pass changes something or fails, or this long has passed. A commit ends every snapshot
/// of the database (see [`crate::snapshots`]), and a pass runs every second.
pub(crate) const RECORD_EVERY: Duration = Duration::from_secs(30);

impl Handle {
    /// Called after every desired-state change in this process; other processes notice the
    /// `desired_version` bump within a second.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The passes, actions and errors (in that order) this process ran but has not recorded
    /// yet: `/metrics` adds them to the recorded counters.
    pub fn unrecorded(&self) -> [(&'static str, i64); 3] {
        let u = self.unrecorded.lock().unwrap_or_else(|e| e.into_inner());
        [
            ("reconcile_passes", u.passes),
            ("reconcile_actions", u.actions),
            ("reconcile_errors", u.errors),
        ]
    }
}

#[cfg(test)]
impl Ctx {
    /// A context over `pool` with a fresh master key, for unit tests.
    pub fn for_test(pool: &Pool) -> Self {
        let key = crate::secrets::keyring::MasterKey::generate().to_base64();
        let keyring = crate::secrets::keyring::Keyring::from_env(&key).unwrap();
        Ctx::new(
            pool.clone(),
            Arc::new(SecretStore::new(pool.clone(), keyring)),
        )
    }
}
