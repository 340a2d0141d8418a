//! Alerts: one firing row per (kind, subject) until it resolves; history is kept.

use crate::db;
use crate::db::Pool;
use serde::Serialize;

use crate::auth::{Principal, Role};
use crate::error::Result;
use crate::listing::{self, ListSql, Page, Window};

/// One alert: open (`firing`) from when its rule's condition held for the rule's duration until
/// the condition goes away (`resolved`); one open alert per kind and subject.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct Alert {
    pub id: i64,
    /// The rule (or built-in check) that fired.
    #[schemars(with = "AlertKind")]
    pub kind: String,
    /// What it is about, e.g. a pipeline, delivery or connector name (`<delivery>/<table>` for
    /// per-table rules).
    pub subject: String,
    #[schemars(with = "AlertSeverity")]
    pub severity: String,
    pub message: String,
    #[schemars(with = "AlertState")]
    pub state: String,
    /// When it started firing.
    #[schemars(extend("format" = "date-time"))]
    pub first_seen: String,
    /// When its condition was last seen to hold.
    #[schemars(extend("format" = "date-time"))]
    pub last_seen: String,
    pub resolved_at: Option<String>,
    pub acknowledged_by: Option<String>,
    pub acknowledged_at: Option<String>,
}

/// What fires alerts: the alert rules (`/api/v1/alert-rules`) and the two built-in secret
/// checks (`secret_leak`, `connect_exposes_task_configs`). Documents `Alert.kind`.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum AlertKind {
    DeliveryLagRecords,
    DeliveryLagSeconds,
    DeliveryFreshnessSeconds,
    DeliveryStalledSeconds,
    SlotRetainedWalBytes,
    SlotInactive,
    OrphanSlot,
    ConnectorFailed,
    ConnectorMissingOrDrifted,
    ConnectUnreachable,
    ConnectWorkerLost,
    KafkaUnreachable,
    PipelineNoNewDataSeconds,
    PipelineSourceUnreachable,
    BinlogBehindBytes,
    BinlogPositionLost,
    ReplicationLagRecords,
    ReplicationLagSeconds,
    ReplicationCheckpointAgeSeconds,
    SnapshotStalled,
    TableStalled,
    SchemaChange,
    SecretLeak,
    ConnectExposesTaskConfigs,
}

/// How urgent an alert is (documents `Alert.severity`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum AlertSeverity {
    Critical,
    Warning,
}

/// Documents `Alert.state`.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum AlertState {
    Firing,
    Resolved,
}

/// Opens an alert, or refreshes the open one for the same kind and subject.
pub async fn fire(
    pool: &Pool,
    kind: &str,
    subject: &str,
    severity: &str,
    message: &str,
) -> Result<()> {
    let now = crate::time::now();
    let updated = db::query("UPDATE alerts SET last_seen = $1, message = $2, severity = $3 WHERE kind = $4 AND subject = $5 AND state = 'firing'")
        .bind(&now)
        .bind(message)
        .bind(severity)
        .bind(kind)
        .bind(subject)
        .execute(pool)
        .await?;
    if updated.rows_affected() == 0 {
        tracing::warn!(kind, subject, "alert firing");
        db::query("INSERT INTO alerts (kind, subject, severity, message, state, first_seen, last_seen) VALUES ($1, $2, $3, $4, 'firing', $5, $6)")
            .bind(kind)
            .bind(subject)
            .bind(severity)
            .bind(message)
            .bind(&now)
            .bind(&now)
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Resolves open alerts of `kind` whose subject starts with `scope` and is not in `still`.
pub async fn resolve_absent(pool: &Pool, kind: &str, scope: &str, still: &[String]) -> Result<()> {
    let open: Vec<(i64, String)> = db::query_as("SELECT id, subject FROM alerts WHERE kind = $1 AND state = 'firing' AND substr(subject, 1, length($2)) = $3")
        .bind(kind)
        .bind(scope)
        .bind(scope)
        .fetch_all(pool)
        .await?;
    for (id, subject) in open {
        if !still.contains(&subject) {
            tracing::info!(kind, subject, "alert resolved");
            db::query("UPDATE alerts SET state = 'resolved', resolved_at = $1 WHERE id = $2")
                .bind(crate::time::now())
                .bind(id)
                .execute(pool)
                .await?;
        }
    }
    Ok(())
}

/// Like `fire`, and returns the alert when this call opened it (a transition to notify).
pub async fn fire_returning(
    pool: &Pool,
    kind: &str,
    subject: &str,
    severity: &str,
    message: &str,
) -> Result<Option<Alert>> {
    let db::Flag(open) = db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM alerts WHERE kind = $1 AND subject = $2 AND state = 'firing')",
    )
    .bind(kind)
    .bind(subject)
    .fetch_one(pool)
    .await?;
    fire(pool, kind, subject, severity, message).await?;
    if open {
        return Ok(None);
    }
    Ok(
        db::query_as("SELECT * FROM alerts WHERE kind = $1 AND subject = $2 AND state = 'firing'")
            .bind(kind)
            .bind(subject)
            .fetch_optional(pool)
            .await?,
    )
}

/// Resolves the open alert for (kind, subject); returns it when there was one.
pub async fn resolve(pool: &Pool, kind: &str, subject: &str) -> Result<Option<Alert>> {
    let open: Option<Alert> =
        db::query_as("SELECT * FROM alerts WHERE kind = $1 AND subject = $2 AND state = 'firing'")
            .bind(kind)
            .bind(subject)
            .fetch_optional(pool)
            .await?;
    let Some(mut a) = open else { return Ok(None) };
    let now = crate::time::now();
    tracing::info!(kind, subject, "alert resolved");
    db::query("UPDATE alerts SET state = 'resolved', resolved_at = $1 WHERE id = $2")
        .bind(&now)
        .bind(a.id)
        .execute(pool)
        .await?;
    a.state = "resolved".into();
    a.resolved_at = Some(now);
    Ok(Some(a))
}

/// A person says they have seen it; it stays firing until its cause goes away.
pub async fn acknowledge(pool: &Pool, who: &Principal, id: &str) -> Result<()> {
    who.require(Role::Operator, "acknowledge alerts")?;
    let id: i64 = id
        .parse()
        .map_err(|_| crate::error::Error::NotFound(format!("alert {id}")))?;
    let n = db::query("UPDATE alerts SET acknowledged_by = $1, acknowledged_at = $2 WHERE id = $3 AND state = 'firing'").bind(&who.user_name).bind(crate::time::now()).bind(id).execute(pool).await?.rows_affected();
    if n == 0 {
        return Err(crate::error::Error::NotFound(format!("firing alert {id}")));
    }
    crate::audit::record_alone(
        pool,
        crate::audit::Entry {
            actor: who.into(),
            action: "alert.acknowledge",
            target_kind: "alert",
            target_id: &id.to_string(),
            outcome: crate::audit::Outcome::Success,
            summary: serde_json::json!({}),
        },
    )
    .await?;
    Ok(())
}

pub async fn list(pool: &Pool, who: &Principal, only_firing: bool) -> Result<Vec<Alert>> {
    who.require(Role::Viewer, "see alerts")?;
    let sql = if only_firing {
        "SELECT * FROM alerts WHERE state = 'firing' ORDER BY severity, first_seen DESC"
    } else {
        "SELECT * FROM alerts ORDER BY state = 'resolved', last_seen DESC LIMIT 500"
    };
    Ok(db::query_as(sql).fetch_all(pool).await?)
}

/// What the alerts list filters by.
pub const STATES: &[&str] = &["FIRING", "RESOLVED"];

/// One page of alerts, open ones first, then newest first: `q` matches subject, kind and
/// message, `state` firing or resolved.
pub async fn page(pool: &Pool, who: &Principal, w: &Window) -> Result<Page<Alert>> {
    who.require(Role::Viewer, "see alerts")?;
    let ids = listing::page_ids(
        pool,
        &ListSql {
            with: "",
            from: "alerts",
            id: "CAST(id AS TEXT)",
            name: "(subject || ' ' || kind || ' ' || message)",
            order: "state = 'resolved', last_seen DESC",
            state: "UPPER(state)",
            cluster: None,
        },
        w,
    )
    .await?;
    // `page_ids` hands ids over as text; alerts.id is an integer column.
    let int_ids: Vec<i64> = ids.items.iter().filter_map(|id| id.parse().ok()).collect();
    let rows =
        listing::rows_by_id::<Alert, i64>(pool, "SELECT * FROM alerts", "id", &int_ids).await?;
    let items = listing::in_order(&ids.items, rows, |a: &Alert| a.id.to_string());
    Ok(ids.with_items(items))
}

pub async fn firing_count(pool: &Pool) -> Result<i64> {
    Ok(
        db::query_scalar("SELECT COUNT(*) FROM alerts WHERE state = 'firing'")
            .fetch_one(pool)
            .await?,
    )
}
