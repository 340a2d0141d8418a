//! The reconciler lease: one row in SQLite. Only its holder acts on Connect; the holder renews
//! it well before it expires, and a crashed holder's lease simply runs out.

use sqlx::SqlitePool;

pub const RECONCILER: &str = "reconciler";

#[derive(Clone)]
pub struct Lease {
    pool: SqlitePool,
    name: &'static str,
    pub holder: String,
    ttl_ms: i64,
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Lease {
    pub fn new(pool: SqlitePool, name: &'static str, holder: String, ttl_ms: i64) -> Self {
        Lease {
            pool,
            name,
            holder,
            ttl_ms,
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
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Checked right before every mutating call: held, with a margin before expiry so a
    /// slow call cannot overlap a successor.
    pub async fn still_held(&self) -> anyhow::Result<bool> {
        let row: Option<(String, i64)> =
            sqlx::query_as("SELECT holder, expires_at FROM leases WHERE name = ?")
                .bind(self.name)
                .fetch_optional(&self.pool)
                .await?;
        Ok(matches!(row, Some((h, exp)) if h == self.holder && exp > now_ms() + self.ttl_ms / 3))
    }

    pub async fn release(&self) {
        let _ = sqlx::query("UPDATE leases SET expires_at = 0 WHERE name = ? AND holder = ?")
            .bind(self.name)
            .bind(&self.holder)
            .execute(&self.pool)
            .await;
    }

    /// Who holds it now (if anyone does).
    pub async fn current(pool: &SqlitePool, name: &str) -> anyhow::Result<Option<(String, i64)>> {
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

    async fn pool() -> (tempfile::TempDir, SqlitePool) {
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
        assert!(!b.try_hold().await.unwrap(), "b must wait while a holds it");
        assert!(a.try_hold().await.unwrap(), "a renews");
        tokio::time::sleep(std::time::Duration::from_millis(350)).await;
        assert!(
            b.try_hold().await.unwrap(),
            "a stopped renewing (crashed): b takes over"
        );
        assert!(!a.still_held().await.unwrap());
        assert!(!a.try_hold().await.unwrap());
    }

    #[tokio::test]
    async fn a_released_lease_is_free_at_once() {
        let (_d, pool) = pool().await;
        let a = Lease::new(pool.clone(), RECONCILER, "a".into(), 60_000);
        let b = Lease::new(pool.clone(), RECONCILER, "b".into(), 60_000);
        assert!(a.try_hold().await.unwrap());
        a.release().await;
        assert!(b.try_hold().await.unwrap());
    }
}
