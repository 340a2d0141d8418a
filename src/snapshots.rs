//! Read results reused while the database has not changed, so that a list page or a signed-in
//! request costs a lookup instead of queries when many people (or one dashboard refreshing
//! every few seconds) ask the same thing.
//!
//! Invariants:
//! - An entry is served only while the database is at the commit it was loaded after: the WAL
//!   index header, which every commit rewrites (its frame count and running checksum change;
//!   see SQLite's WAL format, "the WAL-index header"), is read from `<db>-shm` on every lookup.
//!   Any commit, in this process or another (`cluecdc worker`, a CLI command such as
//!   `token revoke`), ends every entry; a write and the page after it never disagree.
//! - No entry is older than [`MAX_AGE`]: results that depend on the clock (an observation that
//!   turns stale, a session's idle limit) are at most that late, and so is anything the
//!   header check could miss.
//! - [`Snapshots::recent`] (list pages and their API twins) relaxes the first rule: its entries
//!   also outlive commits made elsewhere (the reconciler's observations, the monitor's samples,
//!   another process) for up to [`MAX_AGE`], but never a write request this process has
//!   answered ([`Snapshots::wrote`], called after every POST, PUT, PATCH and DELETE) nor an
//!   observation its reconciler committed ([`Writes`]): what a person just changed, and what
//!   Connect did about it, shows on the next page; the monitor's samples may be a second late.
//!   With 500 pipelines the background commits came several times a second, and every page
//!   view paid for a fresh load. When such an entry ages out with nothing written since, the
//!   first caller loads it again while the others keep the previous value (so it can be up to
//!   about twice [`MAX_AGE`] old).
//! - Concurrent lookups of one key at one version share one load (no stampede after a commit).
//! - Without a readable `-shm` (no WAL yet, another journal mode) nothing is cached.

use std::any::Any;
use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

use crate::error::Result;

pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Distinct keys kept at once (list views × filters, signed-in credentials); past this, entries
/// of older versions are dropped first, then all.
const MAX_ENTRIES: usize = 1024;
/// The first copy of the WAL-index header.
const HEADER_BYTES: usize = 48;

type Header = [u8; HEADER_BYTES];
type Value = Arc<dyn Any + Send + Sync>;

struct Slot {
    version: Header,
    /// [`Snapshots::writes`] when the entry was made.
    writes: u64,
    at: Instant,
    cell: Arc<OnceCell<Value>>,
    /// For a [`Snapshots::recent`] entry that aged out with nothing written since: the value
    /// before, served while `cell` loads, so that one caller waits for the new one, not all.
    stale: Option<Value>,
}

pub struct Snapshots {
    shm: Option<PathBuf>,
    file: OnceLock<File>,
    slots: Mutex<HashMap<String, Slot>>,
    external: Mutex<HashMap<String, External>>,
    writes: Writes,
}

/// Changes this process made that lists show at once: write requests it answered, and the
/// reconciler's committed observations (a connector turning RUNNING). Cheap to clone; the
/// counter is shared.
#[derive(Clone, Default)]
pub struct Writes(Arc<std::sync::atomic::AtomicU64>);

impl Writes {
    /// Something was committed: no [`Snapshots::recent`] entry made before it is served again.
    pub fn mark(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn current(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A value read from outside the database (broker metadata): see [`Snapshots::external`].
#[derive(Default)]
struct External {
    value: Option<(Value, Instant)>,
    /// When a reload started (another caller's, still running unless older than a minute:
    /// a reload whose request was dropped must not keep the old value forever).
    reloading: Option<Instant>,
    /// Held by the caller that reads the source: callers with no value to show wait on it
    /// instead of all reading at once.
    gate: Arc<tokio::sync::Mutex<()>>,
    /// Bumped by `forget`: a read that started before is not kept.
    generation: u64,
}

impl Snapshots {
    /// For the database file at `db`.
    pub fn new(db: &Path) -> Self {
        let mut shm = db.as_os_str().to_owned();
        shm.push("-shm");
        Snapshots {
            shm: Some(PathBuf::from(shm)),
            file: OnceLock::new(),
            slots: Mutex::new(HashMap::new()),
            external: Mutex::new(HashMap::new()),
            writes: Default::default(),
        }
    }

    /// Caches nothing (every lookup loads).
    pub fn disabled() -> Self {
        Snapshots {
            shm: None,
            file: OnceLock::new(),
            slots: Mutex::new(HashMap::new()),
            external: Mutex::new(HashMap::new()),
            writes: Default::default(),
        }
    }

    /// The database's current WAL-index header, or None when it cannot be read.
    fn version(&self) -> Option<Header> {
        let file = match self.file.get() {
            Some(f) => f,
            None => {
                let f = File::open(self.shm.as_ref()?).ok()?;
                self.file.get_or_init(|| f)
            }
        };
        let mut header = [0u8; HEADER_BYTES];
        file.read_exact_at(&mut header, 0).ok()?;
        // isInit (byte 12) is set once the header has been written.
        (header[12] != 0).then_some(header)
    }

    /// A write request has been answered (see [`Writes::mark`]).
    pub fn wrote(&self) {
        self.writes.mark();
    }

    /// The counter [`Snapshots::wrote`] moves, for the reconciler to move too.
    pub fn writes(&self) -> Writes {
        self.writes.clone()
    }

    /// The value of `key` at the database's current version, loading it when there is none.
    /// A failed load is not kept. `key` must name everything the value depends on besides the
    /// database (the filter, the page); values of different types never share a key.
    pub async fn get<T, F, Fut>(&self, key: &str, load: F) -> Result<Arc<T>>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.lookup(key, load, false).await
    }

    /// Like [`Snapshots::get`], but the entry also outlives commits other than this process's
    /// write requests, for up to [`MAX_AGE`] (see the module's invariants): for views of what
    /// the data plane was seen doing, which are never more current than the last observation.
    pub async fn recent<T, F, Fut>(&self, key: &str, load: F) -> Result<Arc<T>>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.lookup(key, load, true).await
    }

    async fn lookup<T, F, Fut>(&self, key: &str, load: F, relaxed: bool) -> Result<Arc<T>>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let Some(version) = self.version() else {
            return load().await.map(Arc::new);
        };
        let key = format!("{}\u{0}{key}", std::any::type_name::<T>());
        // The key carries the type's name, so this cannot fail.
        let typed = |v: Value| {
            v.downcast::<T>().map_err(|_| {
                crate::error::Error::Unexpected(anyhow::anyhow!("snapshot of another type"))
            })
        };
        let writes = self.writes.current();
        let current = |s: &Slot| {
            s.at.elapsed() < MAX_AGE
                && if relaxed {
                    s.writes == writes
                } else {
                    s.version == version
                }
        };
        let cell = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            match slots.get(&key) {
                Some(s) if current(s) => match s.cell.get().or(s.stale.as_ref()) {
                    Some(v) => return typed(v.clone()),
                    None => s.cell.clone(),
                },
                old => {
                    let stale = old
                        .filter(|s| relaxed && s.writes == writes)
                        .and_then(|s| s.cell.get().cloned());
                    if slots.len() >= MAX_ENTRIES {
                        slots.retain(|_, s| current(s));
                        if slots.len() >= MAX_ENTRIES {
                            slots.clear();
                        }
                    }
                    let cell = Arc::new(OnceCell::new());
                    slots.insert(
                        key,
                        Slot {
                            version,
                            writes,
                            at: Instant::now(),
                            cell: cell.clone(),
                            stale,
                        },
                    );
                    cell
                }
            }
        };
        let value = cell
            .get_or_try_init(|| async { load().await.map(|v| Arc::new(v) as Value) })
            .await?
            .clone();
        typed(value)
    }
}

impl Snapshots {
    /// A value that lives outside the database (a Kafka cluster's topics): served for up to
    /// `max_age` after it was read; after that the first caller reads it again while the others
    /// keep getting the previous value, so a slow or failing source slows one request, not
    /// every one. A failed read is returned to its caller and keeps the previous value. After
    /// ClueCDC changes the source itself, [`Snapshots::forget`] makes the next caller wait for
    /// the new value.
    pub async fn external<T, F, Fut>(&self, key: &str, max_age: Duration, load: F) -> Result<Arc<T>>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let typed = |v: Value| {
            v.downcast::<T>().map_err(|_| {
                crate::error::Error::Unexpected(anyhow::anyhow!("snapshot of another type"))
            })
        };
        let all = || self.external.lock().unwrap_or_else(|e| e.into_inner());
        let gate = {
            let mut all = all();
            let e = all.entry(key.to_string()).or_default();
            let reloading = e
                .reloading
                .is_some_and(|t| t.elapsed() < Duration::from_secs(60));
            match &e.value {
                Some((v, at)) if at.elapsed() < max_age || reloading => return typed(v.clone()),
                _ => e.gate.clone(),
            }
        };
        let _reader = gate.lock().await;
        let generation = {
            let mut all = all();
            let e = all.entry(key.to_string()).or_default();
            // Read by the caller this one waited for.
            if let Some((v, at)) = &e.value {
                if at.elapsed() < max_age {
                    return typed(v.clone());
                }
            }
            e.reloading = Some(Instant::now());
            e.generation
        };
        let result = load().await;
        let mut all = all();
        let e = all.entry(key.to_string()).or_default();
        e.reloading = None;
        let v: Value = Arc::new(result?);
        if e.generation == generation {
            e.value = Some((v.clone(), Instant::now()));
        }
        typed(v)
    }

    /// Drops the external value of `key`: ClueCDC has just changed what it describes.
    pub fn forget(&self, key: &str) {
        let mut all = self.external.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = all.get_mut(key) {
            e.value = None;
            e.generation += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn db() -> (tempfile::TempDir, crate::db::Pool, Snapshots) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let pool = crate::db::open(&path).await.unwrap();
        crate::db::query("CREATE TABLE t (v INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        (dir, pool, Snapshots::new(&path))
    }

    async fn insert(pool: &crate::db::Pool, v: i64) {
        crate::db::query("INSERT INTO t VALUES ($1)")
            .bind(v)
            .execute(pool)
            .await
            .unwrap();
    }

    async fn count(pool: &crate::db::Pool, loads: &AtomicUsize) -> Result<i64> {
        loads.fetch_add(1, Ordering::SeqCst);
        Ok(crate::db::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(pool)
            .await?)
    }

    #[tokio::test]
    async fn a_value_is_reused_until_a_commit_then_reloaded() {
        let (_d, pool, snaps) = db().await;
        let loads = AtomicUsize::new(0);
        let a = snaps.get("n", || count(&pool, &loads)).await.unwrap();
        let b = snaps.get("n", || count(&pool, &loads)).await.unwrap();
        assert_eq!((*a, *b, loads.load(Ordering::SeqCst)), (0, 0, 1));
        insert(&pool, 1).await;
        let c = snaps.get("n", || count(&pool, &loads)).await.unwrap();
        assert_eq!(
            (*c, loads.load(Ordering::SeqCst)),
            (1, 2),
            "a commit ends the entry"
        );
    }

    #[tokio::test]
    async fn a_recent_view_outlives_other_commits_but_not_a_write_request() {
        let (_d, pool, snaps) = db().await;
        let loads = AtomicUsize::new(0);
        snaps.recent("n", || count(&pool, &loads)).await.unwrap();
        insert(&pool, 1).await;
        let kept = snaps.recent("n", || count(&pool, &loads)).await.unwrap();
        assert_eq!(
            (*kept, loads.load(Ordering::SeqCst)),
            (0, 1),
            "a background commit"
        );
        snaps.wrote();
        let fresh = snaps.recent("n", || count(&pool, &loads)).await.unwrap();
        assert_eq!(
            (*fresh, loads.load(Ordering::SeqCst)),
            (1, 2),
            "after a write request the next view loads"
        );
        insert(&pool, 2).await;
        tokio::time::sleep(MAX_AGE + Duration::from_millis(50)).await;
        let aged = snaps.recent("n", || count(&pool, &loads)).await.unwrap();
        assert_eq!(*aged, 2, "older than MAX_AGE: loaded again");
    }

    #[tokio::test]
    async fn an_aged_out_recent_view_is_reloaded_by_one_caller_while_the_others_keep_it() {
        let (_d, pool, snaps) = db().await;
        let loads = AtomicUsize::new(0);
        snaps.recent("n", || count(&pool, &loads)).await.unwrap();
        insert(&pool, 1).await;
        tokio::time::sleep(MAX_AGE + Duration::from_millis(50)).await;
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let reloading = snaps.recent("n", || async {
            wait.await.ok();
            count(&pool, &loads).await
        });
        let meanwhile = async {
            tokio::task::yield_now().await;
            let v = snaps.recent("n", || count(&pool, &loads)).await.unwrap();
            go.send(()).ok();
            v
        };
        let (fresh, old) = tokio::join!(reloading, meanwhile);
        assert_eq!(
            (*old, *fresh.unwrap(), loads.load(Ordering::SeqCst)),
            (0, 1, 2),
            "the other caller got the previous value without loading"
        );
        // After a write request nobody gets the previous value.
        tokio::time::sleep(MAX_AGE + Duration::from_millis(50)).await;
        snaps.wrote();
        insert(&pool, 2).await;
        assert_eq!(
            *snaps.recent("n", || count(&pool, &loads)).await.unwrap(),
            2
        );
    }

    #[tokio::test]
    async fn a_commit_from_another_connection_pool_is_seen() {
        let (dir, pool, snaps) = db().await;
        let loads = AtomicUsize::new(0);
        snaps.get("n", || count(&pool, &loads)).await.unwrap();
        // Another process's pool (as `cluecdc worker` or a CLI command has).
        let other = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        insert(&other, 1).await;
        let n = snaps.get("n", || count(&pool, &loads)).await.unwrap();
        assert_eq!(*n, 1);
    }

    #[tokio::test]
    async fn entries_expire_and_keys_and_failures_are_separate() {
        let (_d, pool, snaps) = db().await;
        let loads = AtomicUsize::new(0);
        snaps.get("a", || count(&pool, &loads)).await.unwrap();
        snaps.get("b", || count(&pool, &loads)).await.unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 2, "keys are separate");
        let failed: Result<Arc<i64>> = snaps
            .get("c", || async {
                Err(crate::error::Error::NotFound("x".into()))
            })
            .await;
        assert!(failed.is_err());
        snaps.get("c", || count(&pool, &loads)).await.unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 3, "a failure is not kept");
        tokio::time::sleep(MAX_AGE + Duration::from_millis(50)).await;
        snaps.get("a", || count(&pool, &loads)).await.unwrap();
        assert_eq!(
            loads.load(Ordering::SeqCst),
            4,
            "older than MAX_AGE: loaded again"
        );
    }

    #[tokio::test]
    async fn concurrent_misses_share_one_load() {
        let (_d, pool, snaps) = db().await;
        let loads = AtomicUsize::new(0);
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            count(&pool, &loads).await
        };
        let (a, b) = tokio::join!(snaps.get("n", slow), snaps.get("n", slow));
        assert_eq!((*a.unwrap(), *b.unwrap()), (0, 0));
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_external_value_is_kept_for_its_age_then_reread_once_and_forgotten_on_request() {
        let snaps = Snapshots::disabled();
        let loads = AtomicUsize::new(0);
        let read = || async { Ok::<_, crate::error::Error>(loads.fetch_add(1, Ordering::SeqCst)) };
        let age = Duration::from_millis(100);
        assert_eq!(*snaps.external("t", age, read).await.unwrap(), 0);
        assert_eq!(
            *snaps.external("t", age, read).await.unwrap(),
            0,
            "within its age"
        );
        tokio::time::sleep(age + Duration::from_millis(20)).await;
        // Stale: one caller reads again; one that comes meanwhile gets the old value.
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            read().await
        };
        let (a, b) = tokio::join!(snaps.external("t", age, slow), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            snaps.external("t", age, read).await
        });
        assert_eq!((*a.unwrap(), *b.unwrap()), (1, 0));
        let failed: Result<Arc<usize>> = snaps
            .external("t", Duration::ZERO, || async {
                Err(crate::error::Error::Unavailable("broker down".into()))
            })
            .await;
        assert!(failed.is_err(), "a failed read is its caller's error");
        let long = Duration::from_secs(60);
        assert_eq!(
            *snaps.external("t", long, read).await.unwrap(),
            1,
            "and the previous value stays"
        );
        snaps.forget("t");
        assert_eq!(
            *snaps.external("t", long, read).await.unwrap(),
            2,
            "forgotten: read again"
        );
    }

    #[tokio::test]
    async fn callers_with_no_external_value_yet_wait_for_one_read() {
        let snaps = Snapshots::disabled();
        let loads = AtomicUsize::new(0);
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, crate::error::Error>(loads.fetch_add(1, Ordering::SeqCst))
        };
        let age = Duration::from_secs(60);
        let (a, b, c) = tokio::join!(
            snaps.external("t", age, slow),
            snaps.external("t", age, slow),
            snaps.external("t", age, slow)
        );
        assert_eq!((*a.unwrap(), *b.unwrap(), *c.unwrap()), (0, 0, 0));
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_read_that_started_before_forget_is_not_kept() {
        let snaps = Snapshots::disabled();
        let age = Duration::from_secs(60);
        let (old, _) = tokio::join!(
            snaps.external("t", age, || async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, crate::error::Error>("before the change")
            }),
            async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                snaps.forget("t");
            }
        );
        assert_eq!(
            *old.unwrap(),
            "before the change",
            "its own caller still gets it"
        );
        let now = snaps
            .external("t", age, || async {
                Ok::<_, crate::error::Error>("after the change")
            })
            .await
            .unwrap();
        assert_eq!(*now, "after the change");
    }

    #[tokio::test]
    async fn without_a_wal_index_nothing_is_cached() {
        let (_d, pool, _) = db().await;
        let snaps = Snapshots::disabled();
        let loads = AtomicUsize::new(0);
        snaps.get("n", || count(&pool, &loads)).await.unwrap();
        snaps.get("n", || count(&pool, &loads)).await.unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }
}
