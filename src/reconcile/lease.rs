//! The reconciler lease: one row in SQLite. Only its holder acts on Connect; the holder renews
//! it well before it expires, and a crashed holder's lease simply runs out.

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
        }
    }

    /// Takes the lease if it is free or expired, or renews it if held; true when held after.
    pub async fn try_hold(&self) -> anyhow::Result<bool> {
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO leases (name, holder, expires_at, acquired_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
               acquired_at = CASE WHEN leases.holder = excluded.holder THEN leases.acquired_at ELSE excluded.acquired_at END
             WHERE leases.holder = excluded.holder OR leases.expires_at < ?4",
        )
        .bind(self.name)
        .bind(&self.holder)
        .bind(now + self.ttl_ms)
        .bind(now)
        .execute(&self.pool)
        .await;
        let held = matches!(&done, Ok(d) if d.rows_affected() == 1);
        self.held_until
            .store(if held { now + self.ttl_ms } else { 0 }, Ordering::SeqCst);
        Ok(done?.rows_affected() == 1)
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
        let _ = sqlx::query("UPDATE leases SET expires_at = 0 WHERE name = ? AND holder = ?")
            .bind(self.name)
            .bind(&self.holder)
            .execute(&self.pool)
            .await;
    }

    /// Who holds it now (if anyone does).
    pub async fn current(pool: &Pool, name: &str) -> anyhow::Result<Option<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT holder, expires_at FROM leases WHERE name = ? AND expires_at > ?",
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
