//! Retention of the event tables that grow with uptime rather than with what is configured:
//! resolved alerts, connector restarts and drift events (`--history-retention`). Without it a
//! connector that fails now and then, or churn of connectors, grew the database forever: the
//! 2-hour soak left 2,698 restarts and 3,367 drift events behind, most of deleted connectors.
//!
//! Invariants:
//! - A firing alert is never dropped, however old; a resolved one goes once it has been resolved
//!   for the retention.
//! - Each call drops at most [`BATCH`] rows a table, oldest first, one short write transaction a
//!   table: no page waits on a long one, and a backlog (the first start with a long history, a
//!   shortened retention) is worked off over the next monitor cycles.
//! - Restarts and drift events are read oldest first by id, which grows with their time: only
//!   the first [`BATCH`] rows are looked at, so a call costs the same on any table size. A row
//!   whose time is a little out of id order goes a call later.
//! - A drift that persists on an observe-only cluster is recorded once (the reconciler compares
//!   with the last event); once that event is dropped, the next pass records it again, once.
//! - The audit trail has a retention of its own (`--audit-retention`, [`trim_audit`]): it stays
//!   append-only otherwise. The database refuses to delete an audit row unless it is older than
//!   the cut in `audit_retention` (migration 0034), which a trim moves in the same transaction
//!   as its delete, and each trim that removes rows records itself in the trail (`audit.trim`:
//!   how many, up to when, under which retention), so the trail says where its gap comes from.

use serde::Serialize;

use crate::audit;
use crate::db::{self, Pool};

/// Rows a table loses at most per call.
const BATCH: i64 = 2_000;

/// Rows dropped by one [`trim`], by table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Trimmed {
    pub alerts: u64,
    pub restarts: u64,
    pub drift_events: u64,
}

impl Trimmed {
    /// Whether a table had a full batch to drop: more may be waiting.
    pub fn more(&self) -> bool {
        [self.alerts, self.restarts, self.drift_events]
            .iter()
            .any(|&n| n >= BATCH as u64)
    }
}

/// Drops the resolved alerts resolved before `before`, and the restarts and drift events from
/// before it (RFC 3339, as [`crate::time::format`] writes), [`BATCH`] at most of each.
pub async fn trim(pool: &Pool, before: &str) -> sqlx::Result<Trimmed> {
    let alerts = delete(
        pool,
        "DELETE FROM alerts WHERE id IN (SELECT id FROM alerts WHERE state = 'resolved' AND resolved_at < $1 ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    let restarts = delete(
        pool,
        "DELETE FROM connector_restarts WHERE id IN (SELECT id FROM (SELECT id, at FROM connector_restarts ORDER BY id LIMIT $2) AS oldest WHERE at < $1)",
        before,
    )
    .await?;
    let drift_events = delete(
        pool,
        "DELETE FROM drift_events WHERE id IN (SELECT id FROM (SELECT id, detected_at FROM drift_events ORDER BY id LIMIT $2) AS oldest WHERE detected_at < $1)",
        before,
    )
    .await?;
    Ok(Trimmed {
        alerts,
        restarts,
        drift_events,
    })
}

/// `now` less `d`, or None when `d` is too long to subtract: such a retention keeps everything.
pub fn minus(
    now: chrono::DateTime<chrono::Utc>,
    d: std::time::Duration,
) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| now.checked_sub_signed(d))
}

/// How long past the retention an audit row may stay: a 24th of the retention, at most an
/// hour. Removals then come in batches, so their records (one per removal) stay few: at most
/// one an hour at the default retention, however busy the trail.
pub fn audit_slack(retention: std::time::Duration) -> std::time::Duration {
    (retention / 24).min(std::time::Duration::from_secs(3_600))
}

/// Drops the audit rows older than `retention` at `now`, [`BATCH`] at most, oldest first by
/// id, once the oldest is older than that by [`audit_slack`] (or rows older than the last cut
/// are left: a backlog); returns how many. Writes nothing when nothing is due and the recorded
/// retention is `retention` already (the common case: two indexed reads a cycle).
pub async fn trim_audit(
    pool: &Pool,
    now: chrono::DateTime<chrono::Utc>,
    retention: std::time::Duration,
) -> crate::error::Result<u64> {
    let Some(before) = minus(now, retention) else {
        return Ok(0);
    };
    let late = minus(before, audit_slack(retention)).unwrap_or(before);
    let (before, late) = (crate::time::format(before), crate::time::format(late));
    let retention_secs = retention.as_secs() as i64;
    let cut = audit::cut(pool).await?;
    let oldest: Option<String> = db::query_scalar("SELECT at FROM audit_log ORDER BY id LIMIT 1")
        .fetch_optional(pool)
        .await?;
    let due = oldest.is_some_and(|at| at < before && (at < late || at < cut.before));
    if !due && cut.retention_secs == Some(retention_secs) {
        return Ok(0);
    }
    let _gate = db::write_gate(pool).await;
    let mut tx = db::begin_write(pool).await?;
    // The cut first: the delete trigger refuses any row at or after it.
    db::query("UPDATE audit_retention SET before = $1, retention_secs = $2 WHERE id = 1")
        .bind(if due { &before } else { &cut.before })
        .bind(retention_secs)
        .execute(&mut *tx)
        .await?;
    let removed = if due {
        db::query("DELETE FROM audit_log WHERE id IN (SELECT id FROM (SELECT id, at FROM audit_log ORDER BY id LIMIT $2) AS oldest WHERE at < $1)")
            .bind(&before)
            .bind(BATCH)
            .execute(&mut *tx)
            .await?
            .rows_affected()
    } else {
        0
    };
    if removed > 0 {
        audit::record(
            &mut tx,
            audit::Entry {
                actor: audit::Actor::system(),
                action: "audit.trim",
                target_kind: "audit_log",
                target_id: &before,
                outcome: audit::Outcome::Success,
                summary: serde_json::json!({"removed": removed, "before": before, "retention_secs": retention_secs}),
            },
        )
        .await?;
    }
    tx.commit().await?;
    Ok(removed)
}

async fn delete(pool: &Pool, sql: &str, before: &str) -> sqlx::Result<u64> {
    let _gate = db::write_gate(pool).await;
    Ok(db::query(sql)
        .bind(before)
        .bind(BATCH)
        .execute(pool)
        .await?
        .rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn count(pool: &Pool, table: &str) -> i64 {
        db::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// Old restarts, drift events and resolved alerts go in batches, oldest first; a firing
    /// alert stays however old, and so does everything younger than the retention.
    #[tokio::test]
    async fn old_events_go_in_batches_and_firing_alerts_and_recent_events_stay() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        let (old, cut, new) = (
            "2026-01-01T00:00:00Z",
            "2026-02-01T00:00:00Z",
            "2026-03-01T00:00:00Z",
        );
        let n = BATCH + 500;
        for i in 0..n {
            db::query("INSERT INTO connector_restarts (connector_id, at, reason, triggered_by, attempt, outcome) VALUES ('c', $1, 'r', 'reconciler', 1, 'ok')")
                .bind(old).execute(&pool).await.unwrap();
            db::query("INSERT INTO drift_events (connect_cluster_id, connector_name, connector_id, kind, diff, detected_at, action) VALUES ('k', 'c', NULL, 'deleted', '[]', $1, 'repaired')")
                .bind(old).execute(&pool).await.unwrap();
            let (state, resolved) = if i % 2 == 0 {
                ("resolved", Some(old))
            } else {
                ("firing", None)
            };
            db::query("INSERT INTO alerts (kind, subject, severity, message, state, first_seen, last_seen, resolved_at) VALUES ('connector_failed', $1, 'critical', 'm', $2, $3, $3, $4)")
                .bind(format!("c{i}")).bind(state).bind(old).bind(resolved).execute(&pool).await.unwrap();
        }
        db::query("INSERT INTO connector_restarts (connector_id, at, reason, triggered_by, attempt, outcome) VALUES ('c', $1, 'r', 'reconciler', 1, 'ok')")
            .bind(new).execute(&pool).await.unwrap();
        db::query("INSERT INTO drift_events (connect_cluster_id, connector_name, connector_id, kind, diff, detected_at, action) VALUES ('k', 'c', NULL, 'deleted', '[]', $1, 'repaired')")
            .bind(new).execute(&pool).await.unwrap();
        db::query("INSERT INTO alerts (kind, subject, severity, message, state, first_seen, last_seen, resolved_at) VALUES ('connector_failed', 'late', 'critical', 'm', 'resolved', $1, $2, $2)")
            .bind(old).bind(new).execute(&pool).await.unwrap();

        let first = trim(&pool, cut).await.unwrap();
        assert_eq!(
            first,
            Trimmed {
                alerts: (n as u64).div_ceil(2),
                restarts: BATCH as u64,
                drift_events: BATCH as u64
            }
        );
        assert!(first.more());
        let second = trim(&pool, cut).await.unwrap();
        assert_eq!((second.restarts, second.drift_events), (500, 500));
        assert!(!second.more());
        assert_eq!(trim(&pool, cut).await.unwrap(), Trimmed::default());

        assert_eq!(count(&pool, "connector_restarts").await, 1, "the new one");
        assert_eq!(count(&pool, "drift_events").await, 1, "the new one");
        let firing: i64 = db::query_scalar("SELECT COUNT(*) FROM alerts WHERE state = 'firing'")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(firing, n / 2, "every firing alert, however old");
        assert_eq!(
            count(&pool, "alerts").await,
            n / 2 + 1,
            "and the one resolved after the cut"
        );
    }

    async fn audit_row(pool: &Pool, at: &str) {
        db::query("INSERT INTO audit_log (at, actor, actor_kind, action, target_kind, target_id, outcome, summary) VALUES ($1, 'ada', 'session', 'user.create', 'user', 'u', 'success', '{}')")
            .bind(at)
            .execute(pool)
            .await
            .unwrap();
    }

    /// Audit rows older than the retention go in batches, oldest first, once the oldest is
    /// older than that by the slack (or a batch left some); each removal is a row of the trail;
    /// the database keeps refusing to delete anything at or after the cut, and to change any row.
    #[tokio::test]
    async fn old_audit_rows_go_in_batches_recorded_and_the_rest_stays_undeletable() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        // Whole seconds, as rows are written; the trims' own records are written at the clock's
        // now, so the test's rows are placed around it, in id order as they would be.
        let now = crate::time::parse(&crate::time::now()).unwrap();
        let ago = |d: chrono::Duration| crate::time::format(now - d);
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(audit_slack(day), std::time::Duration::from_secs(3_600));
        for _ in 0..BATCH + 10 {
            audit_row(&pool, &ago(chrono::Duration::days(40))).await;
        }
        audit_row(&pool, &ago(chrono::Duration::days(2))).await;
        // Newer than the retention's cut at `now` by 10 minutes.
        let near = ago(chrono::Duration::days(1) - chrono::Duration::minutes(10));
        audit_row(&pool, &near).await;
        assert!(
            db::query("DELETE FROM audit_log WHERE at < $1")
                .bind(&near)
                .execute(&pool)
                .await
                .is_err(),
            "before any trim no row may go, however old"
        );
        assert_eq!(audit::cut(&pool).await.unwrap(), audit::Cut::default());

        assert_eq!(trim_audit(&pool, now, day).await.unwrap(), BATCH as u64);
        let cut = audit::Cut {
            before: ago(chrono::Duration::days(1)),
            retention_secs: Some(86_400),
        };
        assert_eq!(audit::cut(&pool).await.unwrap(), cut);
        assert_eq!(
            trim_audit(&pool, now, day).await.unwrap(),
            11,
            "the batch's backlog, at once"
        );
        // A row a little past the retention waits for the slack: removals come in batches.
        let later = |m| now + chrono::Duration::minutes(m);
        assert_eq!(trim_audit(&pool, later(30), day).await.unwrap(), 0);
        assert_eq!(trim_audit(&pool, later(69), day).await.unwrap(), 0);
        assert_eq!(trim_audit(&pool, later(71), day).await.unwrap(), 1);

        let trims: Vec<String> = db::query_scalar(
            "SELECT summary FROM audit_log WHERE action = 'audit.trim' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let removed: Vec<i64> = trims
            .iter()
            .map(|s| {
                serde_json::from_str::<serde_json::Value>(s).unwrap()["removed"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert_eq!(removed, [BATCH, 11, 1], "one record per removal");
        assert_eq!(count(&pool, "audit_log").await, 3, "the three records");

        assert!(
            db::query("DELETE FROM audit_log")
                .execute(&pool)
                .await
                .is_err(),
            "rows after the cut stay"
        );
        assert!(db::query("UPDATE audit_log SET actor = 'eve'")
            .execute(&pool)
            .await
            .is_err());
        assert_eq!(count(&pool, "audit_log").await, 3);

        // A new retention with nothing due is recorded; the cut stays where the trims left it.
        let two_days = 2 * day;
        assert_eq!(trim_audit(&pool, later(71), two_days).await.unwrap(), 0);
        assert_eq!(
            audit::cut(&pool).await.unwrap(),
            audit::Cut {
                before: ago(chrono::Duration::days(1) - chrono::Duration::minutes(71)),
                retention_secs: Some(2 * 86_400),
            }
        );
    }
}
