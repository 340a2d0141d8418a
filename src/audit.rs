//! The audit trail: append-only rows written in the caller's transaction, so a change and its
//! record commit or roll back together. Summaries are sanitized: never a secret.

use crate::db;
use crate::db::{Pool, Tx};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::auth::{Principal, Role};
use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    Denied,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Denied => "denied",
        }
    }
}

/// Who did it, as recorded. Built from a principal, or for events with no principal yet
/// (a failed login) from what is known.
#[derive(Debug, Clone)]
pub struct Actor {
    pub name: String,
    pub kind: &'static str,
}

impl From<&Principal> for Actor {
    fn from(p: &Principal) -> Self {
        Actor {
            name: p.user_name.clone(),
            kind: p.actor_kind(),
        }
    }
}

impl Actor {
    pub fn system() -> Self {
        Actor {
            name: "cluecdc".into(),
            kind: "system",
        }
    }
    pub fn anonymous(claimed_name: &str) -> Self {
        Actor {
            name: claimed_name.chars().take(64).collect(),
            kind: "anonymous",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub actor: Actor,
    pub action: &'a str,
    pub target_kind: &'a str,
    pub target_id: &'a str,
    pub outcome: Outcome,
    pub summary: Value,
}

/// Keys whose values are dropped from summaries whatever the caller passed.
const SECRET_KEY_MARKERS: [&str; 6] = [
    "password",
    "secret",
    "token",
    "credential",
    "private",
    "key_material",
];

/// Removes secret-looking keys at any depth. Callers build summaries from non-secret fields
/// already; this is the second line of defence.
pub fn sanitize(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| {
                    let k = k.to_ascii_lowercase();
                    !SECRET_KEY_MARKERS.iter().any(|m| k.contains(m))
                        || k.ends_with("_set")
                        || k.ends_with("_ref")
                })
                .map(|(k, v)| (k, sanitize(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(sanitize).collect()),
        other => other,
    }
}

/// Appends one row inside the caller's transaction.
pub async fn record(tx: &mut Tx<'_>, entry: Entry<'_>) -> Result<()> {
    let summary = sanitize(entry.summary).to_string();
    db::query(
        "INSERT INTO audit_log (at, actor, actor_kind, action, target_kind, target_id, outcome, summary, request_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(crate::time::now())
    .bind(&entry.actor.name)
    .bind(entry.actor.kind)
    .bind(entry.action)
    .bind(entry.target_kind)
    .bind(entry.target_id)
    .bind(entry.outcome.as_str())
    .bind(summary)
    .bind(crate::telemetry::current_request_id())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Records an event that is not part of a change (a failed login, a denied action) in a
/// transaction of its own.
pub async fn record_alone(pool: &Pool, entry: Entry<'_>) -> Result<()> {
    let mut tx = pool.begin().await?;
    record(&mut tx, entry).await?;
    tx.commit().await?;
    Ok(())
}

/// The retention's cut, which the database enforces (migration 0034): rows before `before`
/// may go (`''` before any trim); and the retention the monitor last applied (seconds), for
/// the audit page to say.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Cut {
    pub before: String,
    pub retention_secs: Option<i64>,
}

pub async fn cut(pool: &Pool) -> sqlx::Result<Cut> {
    Ok(
        db::query_as("SELECT before, retention_secs FROM audit_retention WHERE id = 1")
            .fetch_optional(pool)
            .await?
            .unwrap_or_default(),
    )
}

/// The kind of actor an audit row names (documents `AuditEntry.actor_kind`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum ActorKind {
    /// A person signed in to the pages.
    Session,
    /// An API token.
    Token,
    /// The `cluecdc` command line on the server.
    Cli,
    /// ClueCDC itself (the reconciler, operations).
    System,
    /// A Kafka Connect worker resolving a secret through the config provider.
    Connect,
    /// Nobody signed in (a failed sign-in: the name is what was claimed).
    Anonymous,
}

/// How an audited action ended (documents `AuditEntry.outcome`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum AuditOutcome {
    Success,
    Failure,
    Denied,
}

/// Every action the audit trail records, `<target kind>.<verb>` (documents
/// `AuditEntry.action`). A new audited action is added here.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
enum AuditAction {
    #[serde(rename = "alert.acknowledge")]
    AlertAcknowledge,
    #[serde(rename = "alert_channel.create")]
    AlertChannelCreate,
    #[serde(rename = "alert_channel.delete")]
    AlertChannelDelete,
    #[serde(rename = "alert_channel.test")]
    AlertChannelTest,
    #[serde(rename = "alert_channel.update")]
    AlertChannelUpdate,
    #[serde(rename = "alert_rule.update")]
    AlertRuleUpdate,
    /// The monitor removed rows older than the audit retention (`summary`: `removed`,
    /// `before`, `retention_secs`).
    #[serde(rename = "audit.trim")]
    AuditTrim,
    #[serde(rename = "auth.login")]
    AuthLogin,
    #[serde(rename = "auth.logout")]
    AuthLogout,
    #[serde(rename = "bulk.pause")]
    BulkPause,
    #[serde(rename = "bulk.resume")]
    BulkResume,
    #[serde(rename = "bulk.restart")]
    BulkRestart,
    #[serde(rename = "bulk.delete")]
    BulkDelete,
    #[serde(rename = "config.apply")]
    ConfigApply,
    #[serde(rename = "connect_cluster.create")]
    ConnectClusterCreate,
    #[serde(rename = "connect_cluster.delete")]
    ConnectClusterDelete,
    #[serde(rename = "connect_cluster.provider_token")]
    ConnectClusterProviderToken,
    #[serde(rename = "connect_cluster.update")]
    ConnectClusterUpdate,
    #[serde(rename = "connection.create")]
    ConnectionCreate,
    #[serde(rename = "connection.delete")]
    ConnectionDelete,
    #[serde(rename = "connection.rotate")]
    ConnectionRotate,
    #[serde(rename = "connection.test")]
    ConnectionTest,
    #[serde(rename = "connection.update")]
    ConnectionUpdate,
    #[serde(rename = "connector.adopt")]
    ConnectorAdopt,
    #[serde(rename = "connector.create")]
    ConnectorCreate,
    #[serde(rename = "connector.update_config")]
    ConnectorUpdateConfig,
    #[serde(rename = "connector.pause")]
    ConnectorPause,
    #[serde(rename = "connector.resume")]
    ConnectorResume,
    #[serde(rename = "connector.stop")]
    ConnectorStop,
    #[serde(rename = "connector.restart")]
    ConnectorRestart,
    #[serde(rename = "connector.delete")]
    ConnectorDelete,
    #[serde(rename = "connector.forget")]
    ConnectorForget,
    #[serde(rename = "delivery.create")]
    DeliveryCreate,
    #[serde(rename = "delivery.delete")]
    DeliveryDelete,
    #[serde(rename = "delivery.replay")]
    DeliveryReplay,
    #[serde(rename = "delivery.schema_change")]
    DeliverySchemaChange,
    #[serde(rename = "delivery.schema_pause")]
    DeliverySchemaPause,
    #[serde(rename = "delivery.update")]
    DeliveryUpdate,
    #[serde(rename = "kafka_cluster.create")]
    KafkaClusterCreate,
    #[serde(rename = "kafka_cluster.delete")]
    KafkaClusterDelete,
    #[serde(rename = "kafka_cluster.update")]
    KafkaClusterUpdate,
    #[serde(rename = "keys.rotate")]
    KeysRotate,
    #[serde(rename = "operation.done")]
    OperationDone,
    #[serde(rename = "operation.failed")]
    OperationFailed,
    #[serde(rename = "operation.interrupted")]
    OperationInterrupted,
    #[serde(rename = "pipeline.create")]
    PipelineCreate,
    #[serde(rename = "pipeline.delete")]
    PipelineDelete,
    #[serde(rename = "pipeline.reset")]
    PipelineReset,
    #[serde(rename = "pipeline.resnapshot")]
    PipelineResnapshot,
    #[serde(rename = "pipeline.tables")]
    PipelineTables,
    #[serde(rename = "replication.create")]
    ReplicationCreate,
    #[serde(rename = "replication.delete")]
    ReplicationDelete,
    #[serde(rename = "replication.update")]
    ReplicationUpdate,
    #[serde(rename = "secret.resolve")]
    SecretResolve,
    #[serde(rename = "session.revoke")]
    SessionRevoke,
    #[serde(rename = "slot.drop")]
    SlotDrop,
    #[serde(rename = "token.create")]
    TokenCreate,
    #[serde(rename = "token.revoke")]
    TokenRevoke,
    #[serde(rename = "topic.create")]
    TopicCreate,
    #[serde(rename = "topic.delete")]
    TopicDelete,
    #[serde(rename = "user.create")]
    UserCreate,
    #[serde(rename = "user.disable")]
    UserDisable,
    #[serde(rename = "user.enable")]
    UserEnable,
    #[serde(rename = "user.reset_password")]
    UserResetPassword,
    #[serde(rename = "user.role_from_groups")]
    UserRoleFromGroups,
    #[serde(rename = "user.set_role")]
    UserSetRole,
    #[serde(rename = "webhook.create")]
    WebhookCreate,
    #[serde(rename = "webhook.delete")]
    WebhookDelete,
}

/// One audit row: who did what to which target, when, and how it ended.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct Row {
    pub id: i64,
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
    /// The user, token owner, `cluecdc`/`reconciler` (system) or `connect:<cluster>`.
    pub actor: String,
    #[schemars(with = "ActorKind")]
    pub actor_kind: String,
    #[schemars(with = "AuditAction")]
    pub action: String,
    /// What kind of thing was acted on (`connection`, `pipeline`, `user`…).
    pub target_kind: String,
    pub target_id: String,
    #[schemars(with = "AuditOutcome")]
    pub outcome: String,
    #[sqlx(rename = "summary")]
    #[serde(skip)]
    pub summary_json: String,
    /// The request (or the apply's change set) that wrote it.
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "AuditEntry")]
pub struct Item {
    #[serde(flatten)]
    pub row: Row,
    /// What changed, by the action's own fields (never a secret); free-form JSON.
    pub summary: Value,
}

impl From<Row> for Item {
    fn from(row: Row) -> Self {
        let summary = serde_json::from_str(&row.summary_json).unwrap_or(Value::Null);
        Item { row, summary }
    }
}

/// Filters shared by the page, the API and the export. Empty strings mean "any".
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub actor: String,
    pub action: String,
    pub target: String,
    pub outcome: String,
    /// The request (or apply change set) that wrote the rows.
    pub request: String,
    pub since: String,
    pub until: String,
    /// Paging: rows older than this id (newest first).
    pub before_id: Option<i64>,
    pub limit: u32,
}

pub const MAX_PAGE: u32 = 500;
pub const MAX_EXPORT: u32 = 100_000;

/// A page of audit rows, newest first; older pages by `before_id`.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
#[schemars(rename = "AuditPage")]
pub struct Page {
    pub items: Vec<Item>,
    /// Pass as `before_id` for the next (older) page; absent on the last page.
    pub next_before_id: Option<i64>,
    /// Rows matching the filters, on every page.
    pub total: u64,
    /// Rows matching the filters other than `outcome`, by outcome (`success`, `failure`,
    /// `denied`; an outcome with no row is left out).
    pub counts: std::collections::BTreeMap<String, u64>,
}

/// The filter's conditions (all but paging) as ` AND …` text with `$1…` placeholders, and
/// their values in order; `outcome` too unless counting by outcome.
fn filters(filter: &Filter, outcome: bool) -> (String, Vec<String>) {
    let mut sql = String::new();
    let mut binds: Vec<String> = Vec::new();
    let mut bind = |sql: &mut String, text: &str, value: String| {
        binds.push(value);
        sql.push_str(&text.replace('#', &format!("${}", binds.len())));
    };
    if !filter.actor.is_empty() {
        bind(&mut sql, " AND actor = #", filter.actor.clone());
    }
    if !filter.action.is_empty() {
        bind(
            &mut sql,
            " AND action LIKE #",
            format!("{}%", filter.action.replace('%', "")),
        );
    }
    if !filter.target.is_empty() {
        bind(
            &mut sql,
            " AND (target_id = # OR target_kind = #)",
            filter.target.clone(),
        );
    }
    if !filter.request.is_empty() {
        bind(&mut sql, " AND request_id = #", filter.request.clone());
    }
    if outcome && !filter.outcome.is_empty() {
        bind(&mut sql, " AND outcome = #", filter.outcome.clone());
    }
    if !filter.since.is_empty() {
        bind(&mut sql, " AND at >= #", filter.since.clone());
    }
    if !filter.until.is_empty() {
        bind(&mut sql, " AND at < #", filter.until.clone());
    }
    (sql, binds)
}

/// Anyone signed in may read the audit trail; it holds no secrets.
pub async fn list(pool: &Pool, who: &Principal, filter: &Filter, max: u32) -> Result<Page> {
    who.require(Role::Viewer, "read the audit trail")?;
    let limit = filter.limit.clamp(1, max);
    let (conds, binds) = filters(filter, true);
    // The paging values are integers, written into the text.
    let before = filter
        .before_id
        .map(|b| format!(" AND id < {b}"))
        .unwrap_or_default();
    let sql = format!(
        "SELECT id, at, actor, actor_kind, action, target_kind, target_id, outcome, summary, request_id FROM audit_log WHERE 1=1{conds}{before} ORDER BY id DESC LIMIT {}",
        i64::from(limit) + 1
    );
    let mut q = db::query_as::<Row>(&sql);
    for b in &binds {
        q = q.bind(b);
    }
    let mut rows: Vec<Row> = q.fetch_all(pool).await?;
    let next_before_id = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|r| r.id)
    } else {
        None
    };
    let (conds, binds) = filters(filter, false);
    let sql = format!("SELECT outcome, COUNT(*) FROM audit_log WHERE 1=1{conds} GROUP BY outcome");
    let mut q = db::query_as::<(String, i64)>(&sql);
    for b in &binds {
        q = q.bind(b);
    }
    let counts: std::collections::BTreeMap<String, u64> = q
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(o, n)| (o, n as u64))
        .collect();
    let total = counts
        .iter()
        .filter(|(o, _)| filter.outcome.is_empty() || **o == filter.outcome)
        .map(|(_, n)| n)
        .sum();
    Ok(Page {
        items: rows.into_iter().map(Item::from).collect(),
        next_before_id,
        total,
        counts,
    })
}

/// CSV with a header row; the summary column holds its JSON.
pub fn to_csv(items: &[Item]) -> String {
    fn cell(s: &str) -> String {
        // Quote every cell; neutralise spreadsheet formulas.
        let s = if s.starts_with(['=', '+', '-', '@']) {
            format!("'{s}")
        } else {
            s.to_string()
        };
        format!("\"{}\"", s.replace('"', "\"\""))
    }
    let mut out = String::from(
        "id,at,actor,actor_kind,action,target_kind,target_id,outcome,summary,request_id\n",
    );
    for i in items {
        let r = &i.row;
        let fields = [
            r.id.to_string(),
            r.at.clone(),
            r.actor.clone(),
            r.actor_kind.clone(),
            r.action.clone(),
            r.target_kind.clone(),
            r.target_id.clone(),
            r.outcome.clone(),
            i.summary.to_string(),
            r.request_id.clone().unwrap_or_default(),
        ];
        out.push_str(&fields.iter().map(|f| cell(f)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sanitize_drops_secret_looking_keys_at_any_depth_but_keeps_set_markers() {
        let v = sanitize(json!({
            "name": "pg", "password": "x", "nested": {"secret_access_key": "y", "ok": 1},
            "secret_fields_set": ["password"], "secret_ref": "ref_1", "list": [{"api_token": "z"}]
        }));
        assert_eq!(
            v,
            json!({"name": "pg", "nested": {"ok": 1}, "secret_fields_set": ["password"], "secret_ref": "ref_1", "list": [{}]})
        );
    }

    #[test]
    fn csv_quotes_cells_and_defuses_formulas() {
        let row = Row {
            id: 1,
            at: "t".into(),
            actor: "=cmd".into(),
            actor_kind: "session".into(),
            action: "a".into(),
            target_kind: "k".into(),
            target_id: "i\"d".into(),
            outcome: "success".into(),
            summary_json: "{}".into(),
            request_id: None,
        };
        let csv = to_csv(&[Item::from(row)]);
        assert!(csv.contains("\"'=cmd\""));
        assert!(csv.contains("\"i\"\"d\""));
    }
}
