//! The reconciler lease: one row in SQLite. Only its holder acts on Connect; the holder renews
//! it well before it expires, and a crashed holder's lease simply runs out.

use crate::db;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::db::Pool;

pub const RECONCILER: &str = "reconciler";

#[derive(Clone)]
pub struct Lease {
    pool: Pool,
    name: &'static str,
    pub holder: String,
    ttl_ms: i64,
    /// Until when this holder's last successful take or renewal holds (unix ms; 0: not held).
    /// Nobody else can take the lease before the `expires_at` that write stored, so this is
    /// what the row says without a query (same machine, same clock).
    held_until: Arc<AtomicI64>,
    /// The lease's epoch when this holder last took or renewed it: grows at every take-over,
    /// so a write fenced with it ([`Lease::fence`]) is refused once someone else took over.
    epoch: Arc<AtomicI64>,
}

/// A write refused because the lease it was fenced with is no longer this holder's.
#[derive(Debug, thiserror::Error)]
#[error("the {name} lease is no longer held by {holder} (epoch {epoch}): write refused")]
pub struct Fenced {
    pub name: &'static str,
    pub holder: String,
    pub epoch: i64,
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Lease {
    pub fn new(pool: Pool, name: &'static str, holder: String, ttl_ms: i64) -> Self {
        Lease {
            pool,
            name,
            holder,
            ttl_ms,
            held_until: Arc::new(AtomicI64::new(0)),
            epoch: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Takes the lease if it is free or expired, or renews it if held; true when held after.
    pub async fn try_hold(&self) -> anyhow::Result<bool> {
        let now = now_ms();
        let done: sqlx::Result<Option<i64>> = db::query_scalar(
            "INSERT INTO leases (name, holder, expires_at, acquired_at, epoch) VALUES ($1, $2, $3, $4, 1)
             ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
               acquired_at = CASE WHEN leases.holder = excluded.holder THEN leases.acquired_at ELSE excluded.acquired_at END,
               epoch = CASE WHEN leases.holder = excluded.holder THEN leases.epoch ELSE leases.epoch + 1 END
             WHERE leases.holder = excluded.holder OR leases.expires_at < $4
             RETURNING epoch",
        )
        .bind(self.name)
        .bind(&self.holder)
        .bind(now + self.ttl_ms)
        .bind(now)
        .fetch_optional(&self.pool)
        .await;
        let epoch = match &done {
            Ok(Some(e)) => *e,
            _ => 0,
        };
        self.epoch.store(epoch, Ordering::SeqCst);
        self.held_until.store(
            if epoch > 0 { now + self.ttl_ms } else { 0 },
            Ordering::SeqCst,
        );
        Ok(done?.is_some())
    }

    /// The first statement of every transaction the holder writes in: confirms (and, on
    /// PostgreSQL, locks until commit, so a take-over waits for it) that the lease is still
    /// this holder's at the epoch it took, unexpired. Refused with [`Fenced`] otherwise, and
    /// the caller's transaction must then roll back: a holder that was paused (a stopped
    /// process, a long GC, a partitioned host) past its lease writes nothing after waking.
    ///
    /// On SQLite the check is a read, so that a transaction that ends up writing nothing (most
    /// of a reconcile pass's, one per cluster) commits nothing: a written fence was a commit per
    /// cluster per pass, and every commit ends the snapshots requests reuse (their credentials
    /// among them), 20 to 40 times a pass at 20 clusters. The read fences as well as the write
    /// did because the transaction is begun IMMEDIATE ([`Lease::begin`]): it holds SQLite's one
    /// write lock from its start, so nobody can take the lease over before it commits.
    async fn fence(&self, tx: &mut db::Tx<'_>) -> anyhow::Result<()> {
        let epoch = self.epoch.load(Ordering::SeqCst);
        let postgres = tx.backend_name() == "PostgreSQL";
        let sql = if postgres {
            "UPDATE leases SET expires_at = expires_at WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > $4"
        } else {
            "SELECT 1 FROM leases WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > $4"
        };
        let q = db::query(sql)
            .bind(self.name)
            .bind(&self.holder)
            .bind(epoch)
            .bind(now_ms());
        let held = if postgres {
            q.execute(&mut **tx).await?.rows_affected()
        } else {
            q.fetch_all(&mut **tx).await?.len() as u64
        };
        if held != 1 {
            self.held_until.store(0, Ordering::SeqCst);
            return Err(Fenced {
                name: self.name,
                holder: self.holder.clone(),
                epoch,
            }
            .into());
        }
        Ok(())
    }

    /// A write transaction fenced with this lease (see [`Lease::fence`]): every transaction the
    /// holder writes in begins here.
    pub async fn begin(&self) -> anyhow::Result<db::Tx<'static>> {
        let mut tx = db::begin_write(&self.pool).await?;
        self.fence(&mut tx).await?;
        Ok(tx)
    }

    /// Held, with at least two thirds of the lifetime left: renewing now would change nothing
    /// but the expiry (and commit, ending every snapshot of the database).
    pub fn fresh(&self) -> bool {
        self.held_until.load(Ordering::SeqCst) > now_ms() + self.ttl_ms * 2 / 3
    }

    /// Checked right before every mutating call: held, with a margin before expiry so a
    /// slow call cannot overlap a successor. No query: the expiry this holder last wrote is
    /// the earliest moment anyone else may take over.
    pub fn still_held(&self) -> bool {
        self.held_until.load(Ordering::SeqCst) > now_ms() + self.ttl_ms / 3
    }

    pub async fn release(&self) {
        self.held_until.store(0, Ordering::SeqCst);
        let _ = db::query("UPDATE leases SET expires_at = 0 WHERE name = $1 AND holder = $2")
            .bind(self.name)
            .bind(&self.holder)
            .execute(&self.pool)
            .await;
    }

    /// Who holds it now (if anyone does).
    pub async fn current(pool: &Pool, name: &str) -> anyhow::Result<Option<(String, i64)>> {
        Ok(db::query_as(
            "SELECT holder, expires_at FROM leases WHERE name = $1 AND expires_at > $2",
        )
        .bind(name)
        .bind(now_ms())
        .fetch_optional(pool)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pool() -> (tempfile::TempDir, Pool) {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        (dir, pool)
    }

    #[tokio::test]
    async fn only_one_holder_at_a_time_and_an_expired_lease_can_be_taken() {
        let (_d, pool) = pool().await;
        let a = Lease::new(pool.clone(), RECONCILER, "a".into(), 300);
        let b = Lease::new(pool.clone(), RECONCILER, "b".into(), 300);
        assert!(a.try_hold().await.unwrap());
        assert!(a.still_held(), "a holds it, well before expiry");
        assert!(!b.try_hold().await.unwrap(), "b must wait while a holds it");
        assert!(!b.still_held(), "a refused take is not held");
        assert!(a.try_hold().await.unwrap(), "a renews");
        tokio::time::sleep(std::time::Duration::from_millis(350)).await;
        assert!(
            b.try_hold().await.unwrap(),
            "a stopped renewing (crashed): b takes over"
        );
        assert!(!a.still_held());
        assert!(!a.try_hold().await.unwrap());
    }

    /// A holder paused past its lease (it still believes it holds it: nothing told it) has
    /// every write it fences refused once another took over, and its row is not written.
    #[tokio::test]
    async fn a_paused_holder_cannot_write_after_a_take_over() {
        let (_d, pool) = pool().await;
        let a = Lease::new(pool.clone(), RECONCILER, "a".into(), 200);
        let b = Lease::new(pool.clone(), RECONCILER, "b".into(), 60_000);
        assert!(a.try_hold().await.unwrap());
        a.begin().await.unwrap().commit().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        assert!(
            b.try_hold().await.unwrap(),
            "a's lease ran out: b takes over"
        );
        let e = a.begin().await.err().unwrap();
        assert!(e.downcast_ref::<Fenced>().is_some(), "{e}");
        // Renewing does not bring a back either: b holds it.
        assert!(!a.try_hold().await.unwrap());
        let mut tx = b.begin().await.unwrap();
        let epochs: i64 = db::query_scalar("SELECT epoch FROM leases WHERE name = $1")
            .bind(RECONCILER)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(epochs, 2, "one take-over, one epoch more");
    }

    /// On SQLite a fenced transaction that writes nothing commits nothing another connection
    /// can see (its `data_version`, like the WAL index the snapshots key on, stays), and one
    /// that writes does.
    #[tokio::test]
    async fn a_fenced_transaction_that_writes_nothing_commits_nothing() {
        let (_d, pool) = pool().await;
        let a = Lease::new(pool.clone(), RECONCILER, "a".into(), 60_000);
        assert!(a.try_hold().await.unwrap());
        let mut other = pool.acquire().await.unwrap();
        let mut version = async || -> i64 {
            db::query_scalar("PRAGMA data_version")
                .fetch_one(&mut *other)
                .await
                .unwrap()
        };
        let before = version().await;
        let mut tx = a.begin().await.unwrap();
        let _: i64 = db::query_scalar("SELECT COUNT(*) FROM leases")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            version().await,
            before,
            "nothing written, nothing committed"
        );
        let mut tx = a.begin().await.unwrap();
        db::query("INSERT INTO counters (name, value) VALUES ('fenced', 1)")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_ne!(version().await, before, "a write is a commit");
    }

    #[tokio::test]
    async fn a_released_lease_is_free_at_once() {
        let (_d, pool) = pool().await;
        let a = Lease::new(pool.clone(), RECONCILER, "a".into(), 60_000);
        let b = Lease::new(pool.clone(), RECONCILER, "b".into(), 60_000);
        assert!(a.try_hold().await.unwrap());
        a.release().await;
        assert!(!a.still_held(), "released means no further changes");
        assert!(b.try_hold().await.unwrap());
    }
}
