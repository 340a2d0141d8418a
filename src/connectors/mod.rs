//! Connectors: ClueCDC's record of a concrete Kafka Connect resource. The spec (desired config
//! and state) is written here by people and, later, by pipelines and deliveries; the status is
//! written only by the reconciler. Views join the two with drift and restart history.

use crate::db;
use std::collections::BTreeMap;

use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::listing::{self, ListSql, Page, Window};
use crate::reconcile::plan::{diff, DesiredState};

/// `POST /api/v1/connectors`: a connector added by hand (owner `manual`).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "NewConnector")]
pub struct ConnectorInput {
    /// The connector's name in Connect (letters, digits, `.`, `_`, `-`).
    pub name: Option<String>,
    /// The Connect cluster (id) that runs it.
    pub connect_cluster_id: Option<String>,
    /// The connector's Connect config, as Connect takes it (`connector.class` required).
    /// Values are strings (numbers and booleans are written as text); secrets must be
    /// `${cluecdc:<secret_ref>:<field>}` references, never plain text.
    #[schemars(extend("additionalProperties" = {"type": ["string", "number", "boolean"]}))]
    pub config: Option<serde_json::Map<String, Value>>,
    /// The state to create it in (default `running`).
    #[serde(
        default,
        deserialize_with = "crate::wire::enum_string::<_, InitialState>"
    )]
    #[schemars(with = "Option<InitialState>")]
    pub desired_state: Option<String>,
}

/// The states a connector can be created in (documents `NewConnector.desired_state`).
#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "NewConnectorState")]
pub enum InitialState {
    Running,
    Paused,
    Stopped,
}

/// A connector's or task's state as Kafka Connect reports it.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
#[allow(dead_code)]
pub(crate) enum ConnectState {
    Unassigned,
    Running,
    Paused,
    Stopped,
    Failed,
    Restarting,
    /// Connect's internal state of a connector being removed.
    Destroyed,
}

/// A connector's phase: Connect's state at the last observation, or `PENDING` (a new
/// generation not yet observed), `DRIFTED` (Connect's live config differs from the desired
/// one), `UNKNOWN` (the observation is stale or the cluster unreachable). The words of
/// `crate::listing::CONNECTOR_STATES`.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
#[schemars(rename = "ConnectorPhase")]
#[allow(dead_code)]
pub(crate) enum Phase {
    Failed,
    Drifted,
    Unknown,
    Unassigned,
    Pending,
    Restarting,
    Paused,
    Stopped,
    Running,
}

/// Who a connector belongs to.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "ConnectorOwner")]
#[allow(dead_code)]
enum OwnerKind {
    Pipeline,
    Delivery,
    Replication,
    /// Added by hand (`POST /api/v1/connectors`) or adopted.
    Manual,
}

/// One task of a connector, as Connect last reported it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ConnectorTask")]
pub struct TaskView {
    pub id: i64,
    #[schemars(with = "ConnectState")]
    pub state: String,
    pub worker_id: String,
    /// The Java stack trace of a failed task.
    pub trace: Option<String>,
}

/// A connector as the API and pages show it: desired next to observed.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Connector")]
pub struct ConnectorView {
    pub id: String,
    pub name: String,
    pub connect_cluster_id: String,
    /// The Connect cluster's name.
    pub connect_cluster: String,
    /// The pipeline that owns it (owner `pipeline`).
    pub pipeline_id: Option<String>,
    /// The delivery that owns it (owner `delivery`).
    pub delivery_id: Option<String>,
    #[schemars(with = "OwnerKind")]
    pub owner_kind: String,
    /// The desired Connect config (secrets only as `${cluecdc:…}` references).
    pub config: BTreeMap<String, String>,
    #[schemars(with = "DesiredState")]
    pub desired_state: String,
    /// Bumped on every change of the desired config or state.
    pub generation: i64,
    /// The generation the reconciler last applied and observed.
    pub observed_generation: i64,
    /// ClueCDC's vocabulary: Connect's states plus PENDING, DRIFTED and UNKNOWN.
    #[schemars(with = "Phase")]
    pub phase: String,
    /// Connect's own state at the last observation, e.g. RUNNING.
    #[schemars(with = "Option<ConnectState>")]
    pub observed_state: Option<String>,
    pub tasks: Vec<TaskView>,
    /// The Java stack trace of a failed connector.
    pub trace: Option<String>,
    /// The reconciler's last word on it (an error, or why it waits).
    pub message: Option<String>,
    pub observed_at: Option<String>,
    /// Seconds since the last successful observation.
    pub observed_age_secs: Option<i64>,
    /// The last observation is older than a minute (the phase is then UNKNOWN).
    pub stale: bool,
    /// Automatic restarts since it last ran healthy.
    pub restart_attempts: i64,
    /// Connect's committed offsets of the connector, as Connect's offsets API returns them.
    pub offsets: Option<Value>,
    pub offsets_at: Option<String>,
    /// Keys where Connect's live config differs from the desired one (empty when in sync).
    pub drift: Vec<crate::reconcile::plan::DiffLine>,
    /// Who asked for the restart not yet carried out.
    pub restart_requested_by: Option<String>,
}

impl ConnectorView {
    /// Pretty JSON of the committed offsets, for the detail page (not every list row).
    pub fn offsets_text(&self) -> Option<String> {
        self.offsets
            .as_ref()
            .and_then(|v| serde_json::to_string_pretty(v).ok())
    }
}

/// Observations older than this are marked stale.
pub const STALE_AFTER_SECS: i64 = 60;

fn age(t: &Option<String>) -> Option<i64> {
    t.as_deref()
        .and_then(crate::time::parse)
        .map(|t| (chrono::Utc::now() - t).num_seconds().max(0))
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    name: String,
    cluster_id: String,
    cluster: String,
    owner_kind: String,
    config: String,
    desired_state: String,
    generation: i64,
    owner_id: Option<String>,
    restart_requested_by: Option<String>,
    observed_generation: Option<i64>,
    phase: Option<String>,
    phase_now: String,
    state: Option<String>,
    tasks: Option<String>,
    trace: Option<String>,
    message: Option<String>,
    observed_at: Option<String>,
    live: Option<String>,
    attempts: Option<i64>,
    offsets: Option<String>,
    offsets_at: Option<String>,
    applied: Option<String>,
    cluster_error: Option<String>,
}

/// When a connector was last seen as its status row says: the reconciler rewrites the row only
/// when the observation changed, and stamps the cluster's `observed_at` on every pass that
/// listed it, so the later of the two is when ClueCDC last confirmed it.
macro_rules! observed_at_sql {
    () => {
        "CASE WHEN cc.observed_at > s.observed_at THEN cc.observed_at ELSE s.observed_at END"
    };
}

/// A connector's phase as every page and the API show it: Connect's state at the last
/// observation, UNKNOWN when that observation is stale (the cluster's last poll failed or it is
/// older than [`STALE_AFTER_SECS`]), PENDING while a new generation is not yet observed (FAILED
/// and DRIFTED stay). The one definition, in SQL so that lists filter and sort by it.
macro_rules! phase_sql {
    () => {
        concat!("CASE WHEN s.observed_at IS NOT NULL AND (cc.last_error IS NOT NULL OR ", observed_at_sql!(), " < (SELECT at FROM stale_before)) THEN 'UNKNOWN' \
         WHEN COALESCE(s.observed_generation, 0) < c.generation AND COALESCE(s.phase, 'PENDING') NOT IN ('FAILED', 'DRIFTED') THEN 'PENDING' \
         ELSE COALESCE(s.phase, 'PENDING') END")
    };
}

const SELECT: &str = concat!("SELECT c.id, c.name, c.connect_cluster_id AS cluster_id, cc.name AS cluster, c.owner_kind, c.config, c.desired_state, c.generation, c.owner_id, c.restart_requested_by,
    s.observed_generation, s.phase, ", phase_sql!(), " AS phase_now, s.connector_state AS state, s.tasks, s.trace, s.message, ", observed_at_sql!(), " AS observed_at, s.live_config AS live, s.restart_attempts AS attempts, s.offsets, s.offsets_at, s.applied_config AS applied, cc.last_error AS cluster_error
    FROM connectors c JOIN connect_clusters cc ON cc.id = c.connect_cluster_id LEFT JOIN connector_status s ON s.connector_id = c.id");

/// Every connector's id, name, cluster and phase, as `phases` — for the lists of connectors,
/// pipelines and deliveries, which filter and sort by their connector's phase.
pub const PHASES: &str = concat!("WITH phases AS (SELECT c.id, c.name, c.connect_cluster_id AS cluster_id, cc.name AS cluster, ", phase_sql!(), " AS phase
    FROM connectors c JOIN connect_clusters cc ON cc.id = c.connect_cluster_id LEFT JOIN connector_status s ON s.connector_id = c.id)");

fn view(r: Row) -> ConnectorView {
    let Row {
        id,
        name,
        cluster_id,
        cluster,
        owner_kind,
        config,
        desired_state,
        generation,
        owner_id,
        restart_requested_by,
        observed_generation,
        phase,
        phase_now,
        state,
        tasks,
        trace,
        message,
        observed_at,
        live,
        attempts,
        offsets,
        offsets_at,
        applied,
        cluster_error,
    } = r;
    let config: BTreeMap<String, String> = serde_json::from_str(&config).unwrap_or_default();
    let live: Option<BTreeMap<String, String>> = live.and_then(|l| serde_json::from_str(&l).ok());
    let applied: Option<BTreeMap<String, String>> =
        applied.and_then(|a| serde_json::from_str(&a).ok());
    let observed_age_secs = age(&observed_at);
    // Stale: the last attempt to observe the cluster failed, or the observation is old.
    let stale = cluster_error.is_some() || observed_age_secs.is_none_or(|a| a > STALE_AFTER_SECS);
    let tasks: Vec<TaskView> = tasks
        .and_then(|t| serde_json::from_str::<Vec<Value>>(&t).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|t| TaskView {
            id: t["id"].as_i64().unwrap_or(0),
            state: t["state"].as_str().unwrap_or("").into(),
            worker_id: t["worker_id"].as_str().unwrap_or("").into(),
            trace: t["trace"].as_str().map(String::from),
        })
        .collect();
    let observed_generation = observed_generation.unwrap_or(0);
    let message = said(
        cluster_error.as_deref(),
        observed_at.is_some(),
        phase,
        message,
    );
    let phase = phase_now;
    ConnectorView {
        drift: live
            .as_ref()
            .map(|l| diff(&config, applied.as_ref(), l))
            .unwrap_or_default(),
        pipeline_id: (owner_kind == "pipeline")
            .then(|| owner_id.clone())
            .flatten(),
        delivery_id: (owner_kind == "delivery")
            .then(|| owner_id.clone())
            .flatten(),
        id,
        name,
        connect_cluster_id: cluster_id,
        connect_cluster: cluster,
        owner_kind,
        config,
        desired_state,
        generation,
        observed_generation,
        phase,
        observed_state: state,
        tasks,
        trace,
        message,
        observed_at,
        observed_age_secs,
        stale,
        restart_attempts: attempts.unwrap_or(0),
        offsets: offsets.and_then(|o| serde_json::from_str(&o).ok()),
        offsets_at,
        restart_requested_by,
    }
}

/// A connector ClueCDC wants, as stored: `owner` is the (kind, id) of the pipeline or delivery
/// that owns it; None for one added by hand.
pub struct NewConnector<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub cluster_id: &'a str,
    pub config: &'a BTreeMap<String, String>,
    pub state: DesiredState,
    pub owner: Option<(&'a str, &'a str)>,
}

/// Stores a desired connector in the caller's transaction; a name taken on that cluster is a
/// conflict.
pub async fn insert(tx: &mut crate::db::Tx<'_>, c: &NewConnector<'_>) -> Result<()> {
    let now = crate::time::now();
    db::query("INSERT INTO connectors (id, name, connect_cluster_id, config, desired_state, owner_kind, owner_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")
        .bind(c.id)
        .bind(c.name)
        .bind(c.cluster_id)
        .bind(json!(c.config).to_string())
        .bind(c.state.as_str())
        .bind(c.owner.map_or("manual", |(kind, _)| kind))
        .bind(c.owner.map(|(_, id)| id))
        .bind(&now)
        .bind(&now)
        .execute(&mut **tx)
        .await
        .map_err(|e| if crate::db::is_unique_violation(&e) { Error::Conflict(format!("a connector named {} already exists on this Connect cluster", c.name)) } else { e.into() })?;
    Ok(())
}

/// The reconciler's last word on a connector, or, when its cluster's last poll failed after it
/// was seen, what it last was and why it is not known now.
fn said(
    cluster_error: Option<&str>,
    seen: bool,
    phase: Option<String>,
    message: Option<String>,
) -> Option<String> {
    match cluster_error {
        Some(e) if seen => Some(format!(
            "last seen {}; now: {e}",
            phase.as_deref().unwrap_or("PENDING")
        )),
        _ => message,
    }
}

/// What the monitor judges every connector by, each cycle: a [`ConnectorView`] less its
/// configs, offsets and drift. (Full views of 10,000 connectors were about 30 MB held for a
/// moment every cycle.)
pub struct Health {
    pub name: String,
    pub desired_state: String,
    /// As [`ConnectorView::phase`].
    pub phase: String,
    pub observed_state: Option<String>,
    pub task_failed: bool,
    pub message: Option<String>,
}

#[derive(sqlx::FromRow)]
struct HealthRow {
    name: String,
    desired_state: String,
    phase: Option<String>,
    phase_now: String,
    state: Option<String>,
    tasks: Option<String>,
    message: Option<String>,
    #[sqlx(try_from = "crate::db::Flag")]
    seen: bool,
    cluster_error: Option<String>,
}

/// Every connector's [`Health`].
pub async fn health(pool: &Pool, who: &Principal) -> Result<Vec<Health>> {
    #[derive(serde::Deserialize)]
    struct TaskState {
        state: String,
    }
    who.require(Role::Viewer, "see connectors")?;
    let rows: Vec<HealthRow> = db::query_as(concat!(
        "SELECT c.name, c.desired_state, s.phase, ",
        phase_sql!(),
        " AS phase_now, s.connector_state AS state, s.tasks, s.message, s.observed_at IS NOT NULL AS seen, cc.last_error AS cluster_error
        FROM connectors c JOIN connect_clusters cc ON cc.id = c.connect_cluster_id LEFT JOIN connector_status s ON s.connector_id = c.id
        ORDER BY cc.name, c.name"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Health {
            task_failed: r
                .tasks
                .and_then(|t| serde_json::from_str::<Vec<TaskState>>(&t).ok())
                .is_some_and(|ts| ts.iter().any(|t| t.state == "FAILED")),
            message: said(r.cluster_error.as_deref(), r.seen, r.phase, r.message),
            name: r.name,
            desired_state: r.desired_state,
            phase: r.phase_now,
            observed_state: r.state,
        })
        .collect())
}

/// One page of connectors: `q` matches the name, `state` the phase, `cluster` the Connect
/// cluster's id or name.
pub async fn page(pool: &Pool, who: &Principal, w: &Window) -> Result<Page<ConnectorView>> {
    who.require(Role::Viewer, "see connectors")?;
    let ids = listing::page_ids(
        pool,
        &ListSql {
            with: PHASES,
            from: "phases",
            id: "id",
            name: "name",
            order: "name",
            state: "phase",
            cluster: Some(("cluster_id", "cluster")),
        },
        w,
    )
    .await?;
    let mut found = views(pool, &ids.items).await?;
    let items = ids.items.iter().filter_map(|id| found.remove(id)).collect();
    Ok(ids.with_items(items))
}

/// The connectors with these ids, by id (ids not found are left out): the connectors of a page
/// of pipelines or deliveries.
pub async fn views(
    pool: &Pool,
    ids: &[String],
) -> Result<std::collections::HashMap<String, ConnectorView>> {
    let rows = listing::rows_by_id::<Row, String>(pool, SELECT, "c.id", ids).await?;
    Ok(rows.into_iter().map(|r| (r.id.clone(), view(r))).collect())
}

async fn load(pool: &Pool, key: &str) -> Result<ConnectorView> {
    let row: Option<Row> = db::query_as(&format!(
        "{SELECT} WHERE c.id = $1 OR c.name = $1 ORDER BY c.id = $1 DESC LIMIT 1"
    ))
    .bind(key)
    .fetch_optional(pool)
    .await?;
    row.map(view)
        .ok_or_else(|| Error::NotFound(format!("connector {key}")))
}

/// By id or by name.
pub async fn get(pool: &Pool, who: &Principal, key: &str) -> Result<ConnectorView> {
    who.require(Role::Viewer, "see connectors")?;
    load(pool, key).await
}

pub fn validate_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty()
        || name.len() > 200
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err("use 1–200 characters: letters, digits, '.', '_' or '-'".into());
    }
    Ok(())
}

/// Keys whose values must be `${…}` references, never plain text.
pub fn looks_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "credential",
        "token",
        "private.key",
        "sasl.jaas.config",
    ]
    .iter()
    .any(|m| k.contains(m))
}

/// Keys that set how a connector uses TLS. A pipeline's options may hold none of them: its
/// connection's tls_mode and CA certificate decide.
pub fn tls_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "ssl",
        "tls",
        "trustservercertificate",
        "endpoint.identification",
    ]
    .iter()
    .any(|m| k.contains(m))
}

/// Why a setting turns TLS certificate verification off, if it does: the settings of
/// PostgreSQL, MySQL, MariaDB, SQL Server and Kafka clients that do, as connector keys or as
/// parameters of a JDBC URL. Verification cannot be turned off anywhere (seed 000).
pub fn turns_verification_off(key: &str, value: &str) -> Option<String> {
    if value.trim_start().starts_with("jdbc:") {
        return value
            .split(['?', ';', '&'])
            .skip(1)
            .filter_map(|pair| pair.split_once('='))
            .find_map(|(k, v)| turns_verification_off(k.trim(), v.trim()))
            .map(|why| format!("the JDBC URL {why}"));
    }
    let k = key.to_ascii_lowercase();
    let v = value.trim().to_ascii_lowercase();
    let off = "turns TLS certificate verification off, and verification cannot be turned off";
    if (k.ends_with("sslmode") || k.ends_with("ssl.mode"))
        && [
            "require",
            "prefer",
            "allow",
            "required",
            "preferred",
            "trust",
        ]
        .contains(&v.as_str())
    {
        Some(format!("{key}={value} {off}: use verify-full (PostgreSQL, MariaDB) or verify_identity (MySQL) with the server's CA"))
    } else if k.contains("sslfactory") && v.contains("nonvalidatingfactory") {
        Some(format!(
            "{key}={value} {off}: remove it and give the server's CA (sslrootcert)"
        ))
    } else if (k.ends_with("trustservercertificate") && v == "true")
        || (k.ends_with("verifyservercertificate") && v == "false")
    {
        Some(format!(
            "{key}={value} {off}: remove it and give the server's CA in a truststore"
        ))
    } else if k.ends_with("ssl.endpoint.identification.algorithm") && v.is_empty() {
        Some(format!("{key} set empty turns host name verification off, and verification cannot be turned off: remove it (the default, https, checks the broker's name)"))
    } else {
        None
    }
}

/// Whether `value` under `key` holds a secret in plain text rather than as a
/// `${cluecdc:<secret_ref>:<field>}` reference. A JAAS line (`*sasl.jaas.config`) names its
/// login module and user in clear; only its password and secret attributes must be references.
pub fn plain_secret(key: &str, value: &str) -> bool {
    if !looks_secret(key) || value.is_empty() {
        return false;
    }
    if !key.to_ascii_lowercase().ends_with("sasl.jaas.config") {
        return !value.starts_with("${");
    }
    // Every `name="value"` whose name says password or secret.
    value.split('"').collect::<Vec<_>>().chunks(2).any(|pair| {
        let [before, quoted] = pair else { return false };
        let name = before
            .trim_end()
            .trim_end_matches('=')
            .trim_end()
            .rsplit(|c: char| c.is_whitespace() || c == ';')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        (name.contains("password") || name.contains("secret")) && !quoted.starts_with("${")
    })
}

pub fn validate_config(
    map: &serde_json::Map<String, Value>,
    errors: &mut FieldErrors,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let s = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                errors.insert(
                    format!("config.{k}"),
                    "Connect configs are flat: write this value as text".into(),
                );
                continue;
            }
        };
        if plain_secret(k, &s) {
            errors.insert(format!("config.{k}"), "looks like a secret: store it in a connection and write ${cluecdc:<secret_ref>:<field>} here instead".into());
            continue;
        }
        if let Some(why) = turns_verification_off(k, &s) {
            errors.insert(format!("config.{k}"), why);
            continue;
        }
        out.insert(k.clone(), s);
    }
    if !out.contains_key("connector.class") {
        errors.insert(
            "config.connector.class".into(),
            "required: the connector plugin's class".into(),
        );
    }
    out.remove("name");
    out
}

async fn changed(pool: &Pool, wake: &crate::reconcile::Handle) -> Result<()> {
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    Ok(())
}

pub async fn create(ctx: &Ctx, who: &Principal, input: &ConnectorInput) -> Result<ConnectorView> {
    let pool = &ctx.pool;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    who.require(Role::Admin, "add connectors by hand")?;
    let mut errors = FieldErrors::new();
    let name = input.name.clone().unwrap_or_default();
    if let Err(why) = validate_name(&name) {
        errors.insert("name".into(), why);
    }
    let config = validate_config(
        input.config.as_ref().unwrap_or(&serde_json::Map::new()),
        &mut errors,
    );
    let state = DesiredState::parse(input.desired_state.as_deref().unwrap_or("running"))
        .filter(|s| *s != DesiredState::Deleted);
    if state.is_none() {
        errors.insert(
            "desired_state".into(),
            "choose running, paused or stopped".into(),
        );
    }
    let cluster_id = input.connect_cluster_id.clone().unwrap_or_default();
    let cluster: Option<(String, String)> =
        db::query_as("SELECT name, managed_by FROM connect_clusters WHERE id = $1")
            .bind(&cluster_id)
            .fetch_optional(pool)
            .await?;
    match &cluster {
        None => {
            errors.insert(
                "connect_cluster_id".into(),
                "no Connect cluster has this id".into(),
            );
        }
        Some((cname, managed)) if managed == "strimzi" => {
            errors.insert("connect_cluster_id".into(), format!("{cname} is managed by Strimzi: ClueCDC only observes it; create a KafkaConnector resource instead"));
        }
        _ => {}
    }
    Error::check(errors)?;
    let state = state.unwrap_or(DesiredState::Running);
    let id = format!("cn_{}", uuid::Uuid::new_v4().simple());
    let mut tx = pool.begin().await?;
    audit::record(&mut tx, Entry { actor: who.into(), action: "connector.create", target_kind: "connector", target_id: &id, outcome: Outcome::Success, summary: json!({"name": name, "cluster": cluster.map(|c| c.0), "desired_state": state.as_str(), "config": config}) }).await?;
    insert(
        &mut tx,
        &NewConnector {
            id: &id,
            name: &name,
            cluster_id: &cluster_id,
            config: &config,
            state,
            owner: None,
        },
    )
    .await?;
    tx.commit().await?;
    changed(pool, wake).await?;
    load(pool, &id).await
}

/// The connector plugin's verdict on a config written by hand, before it is stored (the same
/// `PUT /connector-plugins/{class}/config/validate` the pipeline and delivery previews use):
/// errors by `config.<key>`, empty when the plugin accepts it. Stores nothing.
pub async fn check_with_plugin(
    pool: &Pool,
    store: &crate::secrets::store::SecretStore,
    who: &Principal,
    cluster_id: &str,
    name: &str,
    config: &BTreeMap<String, String>,
) -> Result<FieldErrors> {
    who.require(Role::Admin, "add connectors by hand")?;
    let cluster = crate::clusters::get(pool, who, cluster_id).await?;
    let class = config.get("connector.class").cloned().unwrap_or_default();
    let client = crate::clusters::connect::client_for(store, &cluster).await?;
    let mut with_name = config.clone();
    with_name.insert("name".into(), name.into());
    crate::secrets::resolve::grant_for_validation(pool, &cluster.id, config).await?;
    let errors = client
        .validate(&class, &with_name)
        .await
        .map_err(|e| Error::Unavailable(format!("cannot validate with Connect: {e}")))?;
    Ok(errors
        .into_iter()
        .map(|(k, v)| (format!("config.{k}"), v.join("; ")))
        .collect())
}

/// Pause, resume, stop or delete: recorded as the desired state; the reconciler acts.
pub async fn set_state(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    key: &str,
    state: DesiredState,
) -> Result<ConnectorView> {
    who.require(Role::Operator, "pause, resume, stop or delete connectors")?;
    let c = load(pool, key).await?;
    crate::operations::refuse_if_held(
        pool,
        &c.id,
        &format!("make the connector {}", state.as_str()),
    )
    .await?;
    // A connector added by hand is deleted by admins only; a pipeline's or a delivery's goes
    // with its owner, which operators may delete (the owner's delete checked that already).
    if state == DesiredState::Deleted && c.owner_kind == "manual" {
        who.require(Role::Admin, "delete connectors")?;
    }
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: &format!(
                "connector.{}",
                match state {
                    DesiredState::Running => "resume",
                    DesiredState::Paused => "pause",
                    DesiredState::Stopped => "stop",
                    DesiredState::Deleted => "delete",
                }
            ),
            target_kind: "connector",
            target_id: &c.id,
            outcome: Outcome::Success,
            summary: json!({"name": c.name, "from": c.desired_state, "to": state.as_str()}),
        },
    )
    .await?;
    db::query("UPDATE connectors SET desired_state = $1, generation = generation + 1, updated_at = $2 WHERE id = $3").bind(state.as_str()).bind(crate::time::now()).bind(&c.id).execute(&mut *tx).await?;
    tx.commit().await?;
    changed(pool, wake).await?;
    load(pool, &c.id).await.or_else(|_| Ok(c))
}

/// Asks the reconciler to restart the connector and all its tasks once, or (`only_failed`)
/// only the connector and tasks that failed.
pub async fn request_restart(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    key: &str,
    only_failed: bool,
) -> Result<ConnectorView> {
    who.require(Role::Operator, "restart connectors")?;
    let c = load(pool, key).await?;
    crate::operations::refuse_if_held(pool, &c.id, "restart the connector").await?;
    let by = format!("user:{}", who.user_name);
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connector.restart",
            target_kind: "connector",
            target_id: &c.id,
            outcome: Outcome::Success,
            summary: json!({"name": c.name, "only_failed": only_failed}),
        },
    )
    .await?;
    db::query(
        "UPDATE connectors SET restart_requested_by = $1, restart_only_failed = $2 WHERE id = $3",
    )
    .bind(&by)
    .bind(i64::from(only_failed))
    .bind(&c.id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    changed(pool, wake).await?;
    load(pool, &c.id).await
}

/// Takes the live config from Connect, read now, as the desired one (an admin accepting a
/// change made directly in Connect), instead of letting the reconciler put ClueCDC's back.
pub async fn adopt_live(
    pool: &Pool,
    store: &crate::secrets::store::SecretStore,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    key: &str,
) -> Result<ConnectorView> {
    who.require(Role::Admin, "adopt live configs")?;
    let c = load(pool, key).await?;
    let cluster = crate::clusters::all(pool)
        .await?
        .into_iter()
        .find(|k| k.id == c.connect_cluster_id)
        .ok_or_else(|| Error::NotFound(format!("Connect cluster {}", c.connect_cluster_id)))?;
    let client = crate::clusters::connect::client_for(store, &cluster).await?;
    let live_map =
        crate::reconcile::plan::normalize(client.connector_config(&c.name).await.map_err(|e| {
            if e.is_not_found() {
                Error::Conflict(format!(
                    "connector {} is not in Connect; there is no live config to adopt",
                    c.name
                ))
            } else {
                Error::Unavailable(e.to_string())
            }
        })?);
    let live = json!(live_map).to_string();
    let mut errors = FieldErrors::new();
    validate_config(
        &serde_json::to_value(&live_map)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default(),
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(Error::Invalid { message: "the live config holds plain-text secrets or turns TLS verification off; fix it in Connect or let ClueCDC restore its own".into(), fields: errors });
    }
    let diff = diff(&c.config, None, &live_map);
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connector.adopt",
            target_kind: "connector",
            target_id: &c.id,
            outcome: Outcome::Success,
            summary: json!({"name": c.name, "diff": diff}),
        },
    )
    .await?;
    db::query("UPDATE connectors SET config = $1, generation = generation + 1, updated_at = $2 WHERE id = $3").bind(&live).bind(crate::time::now()).bind(&c.id).execute(&mut *tx).await?;
    // The live config becomes what ClueCDC has applied: no repair, no new drift.
    db::query("UPDATE connector_status SET applied_config = $1 WHERE connector_id = $2")
        .bind(&live)
        .bind(&c.id)
        .execute(&mut *tx)
        .await?;
    db::query("INSERT INTO drift_events (connect_cluster_id, connector_name, connector_id, kind, diff, detected_at, action) VALUES ($1, $2, $3, 'config_changed', $4, $5, 'adopted')")
        .bind(&c.connect_cluster_id)
        .bind(&c.name)
        .bind(&c.id)
        .bind(json!(diff).to_string())
        .bind(crate::time::now())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    changed(pool, wake).await?;
    load(pool, &c.id).await
}

/// What `POST /api/v1/connectors/{key}/<action>` and the page buttons ask: every action, as
/// the connector's desired state or a restart or adopting its live config.
pub async fn act(ctx: &Ctx, who: &Principal, key: &str, action: Action) -> Result<ConnectorView> {
    let (pool, wake) = (&ctx.pool, &*ctx.reconciler);
    match (action, action.desired_state()) {
        (Action::Restart, _) => request_restart(pool, wake, who, key, false).await,
        (Action::Adopt, _) => adopt_live(pool, &ctx.secrets, wake, who, key).await,
        (_, Some(to)) => set_state(pool, wake, who, key, to).await,
        (_, None) => Err(action.refused()),
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DriftEvent {
    pub id: i64,
    pub connect_cluster_id: String,
    pub connector_name: String,
    pub connector_id: Option<String>,
    pub kind: String,
    #[serde(skip)]
    pub diff: String,
    pub detected_at: String,
    pub action: String,
}

impl DriftEvent {
    pub fn diff_lines(&self) -> Vec<crate::reconcile::plan::DiffLine> {
        serde_json::from_str::<Vec<Value>>(&self.diff)
            .unwrap_or_default()
            .into_iter()
            .map(|v| crate::reconcile::plan::DiffLine {
                key: v["key"].as_str().unwrap_or("").into(),
                desired: v["desired"].as_str().map(String::from),
                applied: v["applied"].as_str().map(String::from),
                live: v["live"].as_str().map(String::from),
            })
            .collect()
    }
}

/// One restart of a connector or its tasks, by the reconciler's policy or on request.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct RestartRecord {
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
    /// Why it was restarted (e.g. failed tasks, or requested).
    pub reason: String,
    /// Who: the reconciler's policy or the person who asked.
    pub triggered_by: String,
    /// The attempt number since the connector last ran healthy.
    pub attempt: i64,
    /// `requested`, or `failed: <why>` when Connect refused the restart.
    pub outcome: String,
}

/// A connector with its drift and restart history (`GET /api/v1/connectors/{name}`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ConnectorDetail {
    #[serde(flatten)]
    pub connector: ConnectorView,
    /// The last 50 drift events, newest first.
    pub drift_events: Vec<DriftView>,
    /// The last 50 restarts, newest first.
    pub restarts: Vec<RestartRecord>,
}

pub async fn history(
    pool: &Pool,
    who: &Principal,
    key: &str,
) -> Result<(ConnectorView, Vec<DriftEvent>, Vec<RestartRecord>)> {
    let c = get(pool, who, key).await?;
    let drift: Vec<DriftEvent> = db::query_as("SELECT id, connect_cluster_id, connector_name, connector_id, kind, diff, detected_at, action FROM drift_events WHERE connect_cluster_id = $1 AND connector_name = $2 ORDER BY id DESC LIMIT 50")
        .bind(&c.connect_cluster_id)
        .bind(&c.name)
        .fetch_all(pool)
        .await?;
    let restarts: Vec<RestartRecord> = db::query_as("SELECT at, reason, triggered_by, attempt, outcome FROM connector_restarts WHERE connector_id = $1 ORDER BY id DESC LIMIT 50").bind(&c.id).fetch_all(pool).await?;
    Ok((c, drift, restarts))
}

/// The connector with its history, as the API answers it.
pub async fn detail(ctx: &Ctx, who: &Principal, key: &str) -> Result<ConnectorDetail> {
    let pool = &ctx.pool;
    let (connector, drift, restarts) = history(pool, who, key).await?;
    Ok(ConnectorDetail {
        connector,
        drift_events: drift_views(&drift),
        restarts,
    })
}

/// A drift event as the API shows it: the differing keys as a list.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "DriftEvent")]
pub struct DriftView {
    pub id: i64,
    pub connect_cluster_id: String,
    pub connector_name: String,
    /// None for a connector ClueCDC does not manage.
    pub connector_id: Option<String>,
    #[schemars(with = "DriftKind")]
    pub kind: String,
    /// Keys whose desired, last applied and live values differ.
    pub diff: Vec<crate::reconcile::plan::DiffLine>,
    pub detected_at: String,
    #[schemars(with = "DriftAction")]
    pub action: String,
}

/// What drifted (documents `DriftEvent.kind`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum DriftKind {
    /// Connect's live config differs from the applied one.
    ConfigChanged,
    /// The connector was removed from Connect behind ClueCDC's back.
    Deleted,
    /// A connector ClueCDC does not manage appeared on the cluster.
    UnknownAdded,
}

/// What ClueCDC did about a drift (documents `DriftEvent.action`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum DriftAction {
    /// Shown only (observe-only clusters, unmanaged connectors).
    Reported,
    /// The desired config was applied again.
    Repaired,
    /// Connect's live config became the desired one (adopt).
    Adopted,
}

pub fn drift_views(events: &[DriftEvent]) -> Vec<DriftView> {
    events
        .iter()
        .map(|e| DriftView {
            id: e.id,
            connect_cluster_id: e.connect_cluster_id.clone(),
            connector_name: e.connector_name.clone(),
            connector_id: e.connector_id.clone(),
            kind: e.kind.clone(),
            diff: e.diff_lines(),
            detected_at: e.detected_at.clone(),
            action: e.action.clone(),
        })
        .collect()
}

/// A connector found on a Connect cluster that ClueCDC does not manage.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
#[schemars(rename = "UnmanagedConnector")]
pub struct Unmanaged {
    pub connect_cluster_id: String,
    pub name: String,
    /// Connect's state when last seen.
    #[schemars(with = "Option<ConnectState>")]
    pub state: Option<String>,
    #[schemars(extend("format" = "date-time"))]
    pub first_seen: String,
    #[schemars(extend("format" = "date-time"))]
    pub last_seen: String,
}

pub async fn unmanaged(pool: &Pool, who: &Principal) -> Result<Vec<Unmanaged>> {
    who.require(Role::Viewer, "see connectors")?;
    Ok(db::query_as("SELECT connect_cluster_id, name, state, first_seen, last_seen FROM unmanaged_connectors ORDER BY name").fetch_all(pool).await?)
}

pub async fn all_drift(pool: &Pool, who: &Principal) -> Result<Vec<DriftEvent>> {
    who.require(Role::Viewer, "see drift")?;
    Ok(db::query_as("SELECT id, connect_cluster_id, connector_name, connector_id, kind, diff, detected_at, action FROM drift_events ORDER BY id DESC LIMIT 200").fetch_all(pool).await?)
}

// ---- actions ----------------------------------------------------------------------------------

/// What can be asked of something that runs as Kafka Connect connectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Stop,
    Restart,
    /// Take the live connector's config as the desired one (connectors only).
    Adopt,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Stop => "stop",
            Action::Restart => "restart",
            Action::Adopt => "adopt",
        }
    }

    /// The desired state a state change asks for; `None` for the actions that are not one.
    pub fn desired_state(self) -> Option<DesiredState> {
        match self {
            Action::Pause => Some(DesiredState::Paused),
            Action::Resume => Some(DesiredState::Running),
            Action::Stop => Some(DesiredState::Stopped),
            Action::Restart | Action::Adopt => None,
        }
    }

    /// What answers an action the collection does not offer: 404.
    pub fn refused(self) -> Error {
        Error::NotFound(format!("action {}", self.as_str()))
    }
}

/// Restart, pause or resume: what a pipeline, a delivery or a replication offers (each runs as
/// connectors it owns). `restart` is only awaited for a restart; any other action is refused
/// as not found, naming it.
pub async fn restart_pause_resume<T, S, F>(
    action: Action,
    restart: impl std::future::Future<Output = Result<T>>,
    set_state: S,
) -> Result<T>
where
    S: FnOnce(DesiredState) -> F,
    F: std::future::Future<Output = Result<T>>,
{
    match (action, action.desired_state()) {
        (Action::Restart, _) => restart.await,
        (Action::Pause | Action::Resume, Some(to)) => set_state(to).await,
        _ => Err(action.refused()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_secrets_are_refused_in_connector_configs() {
        let mut e = FieldErrors::new();
        let m = serde_json::json!({"connector.class": "x", "database.password": "hunter2", "aws.secret.access.key": "${cluecdc:sec_1:secret_access_key}", "tasks.max": 1})
            .as_object()
            .cloned()
            .unwrap();
        let c = validate_config(&m, &mut e);
        assert!(e["config.database.password"].contains("${cluecdc:"));
        assert_eq!(c["tasks.max"], "1");
        assert!(!e.contains_key("config.aws.secret.access.key"));
        let mut e = FieldErrors::new();
        validate_config(&serde_json::Map::new(), &mut e);
        assert!(e.contains_key("config.connector.class"));
    }

    #[test]
    fn a_jaas_line_may_name_its_user_but_its_password_must_be_a_reference() {
        let module = "org.apache.kafka.common.security.scram.ScramLoginModule required";
        for (value, plain) in [
            (format!("{module} username=\"cdc\" password=\"${{cluecdc:sec_k:sasl_password}}\";"), false),
            (format!("{module} username=\"cdc\" password=\"hunter2\";"), true),
            (format!("{module} username=\"cdc\" password = \"hunter2\";"), true),
            ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId=\"x\" clientSecret=\"s3cr3t\";".to_string(), true),
            ("${cluecdc:sec_k:jaas}".to_string(), false),
        ] {
            assert_eq!(
                plain_secret("producer.override.sasl.jaas.config", &value),
                plain,
                "{value}"
            );
        }
        assert!(plain_secret("database.password", "hunter2"));
        assert!(!plain_secret(
            "database.password",
            "${cluecdc:sec_1:password}"
        ));
        assert!(!plain_secret("topics", "hunter2"));
    }

    #[test]
    fn settings_that_turn_tls_verification_off_are_refused_in_connector_configs() {
        for (k, v) in [
            ("database.sslmode", "require"),
            ("database.sslmode", "prefer"),
            ("sslmode", "allow"),
            ("database.ssl.mode", "required"),
            ("database.ssl.mode", "preferred"),
            ("database.ssl.mode", "trust"),
            (
                "database.sslfactory",
                "org.postgresql.ssl.NonValidatingFactory",
            ),
            ("database.trustServerCertificate", "true"),
            ("connection.verifyServerCertificate", "false"),
            (
                "producer.override.ssl.endpoint.identification.algorithm",
                "",
            ),
            (
                "connection.url",
                "jdbc:postgresql://db:5432/app?sslmode=require",
            ),
            (
                "connection.url",
                "jdbc:mariadb://db:3306/app?user=x&sslMode=trust",
            ),
            (
                "connection.url",
                "jdbc:sqlserver://db:1433;databaseName=app;trustServerCertificate=true",
            ),
        ] {
            let mut e = FieldErrors::new();
            let m = serde_json::json!({"connector.class": "x", k: v})
                .as_object()
                .cloned()
                .unwrap();
            let c = validate_config(&m, &mut e);
            let why = e
                .get(&format!("config.{k}"))
                .unwrap_or_else(|| panic!("{k}={v} accepted"));
            assert!(why.contains("cannot be turned off"), "{k}: {why}");
            assert!(!c.contains_key(k), "{k}");
        }
        // Verifying settings, and plain text for a local fixture, pass.
        for (k, v) in [
            ("database.sslmode", "verify-full"),
            ("database.sslmode", "disable"),
            ("database.ssl.mode", "verify_identity"),
            ("database.ssl.mode", "verify-ca"),
            (
                "producer.override.ssl.endpoint.identification.algorithm",
                "https",
            ),
            (
                "connection.url",
                "jdbc:postgresql://db:5432/app?sslmode=verify-full&sslrootcert=/ca.pem",
            ),
            (
                "database.sslfactory",
                "org.postgresql.ssl.DefaultJavaSSLFactory",
            ),
        ] {
            let mut e = FieldErrors::new();
            let m = serde_json::json!({"connector.class": "x", k: v})
                .as_object()
                .cloned()
                .unwrap();
            validate_config(&m, &mut e);
            assert!(e.is_empty(), "{k}={v}: {e:?}");
        }
    }

    #[test]
    fn tls_keys_are_recognised_whatever_their_case() {
        for k in [
            "database.sslmode",
            "database.ssl.truststore",
            "database.sslrootcert",
            "database.sslfactory",
            "database.trustServerCertificate",
            "producer.override.ssl.endpoint.identification.algorithm",
            "database.TLS.version",
            "database.SSLMode",
        ] {
            assert!(tls_key(k), "{k}");
        }
        for k in [
            "max.batch.size",
            "snapshot.mode",
            "database.initial.statements",
        ] {
            assert!(!tls_key(k), "{k}");
        }
    }

    /// The monitor's lean list says what the full views say: phase, Connect's state, a failed
    /// task, and the message (with the cluster's error once its poll failed).
    #[tokio::test]
    async fn health_says_what_the_views_say() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        let now = crate::time::now();
        for (id, error) in [("ok", None), ("down", Some("connection refused"))] {
            db::query("INSERT INTO connect_clusters (id, name, url, created_at, updated_at, observed_at, last_error) VALUES ($1, $1, 'http://x', $2, $2, $2, $3)")
                .bind(id).bind(&now).bind(error).execute(&pool).await.unwrap();
        }
        let failed_task = r#"[{"id":0,"state":"RUNNING","worker_id":"w"},{"id":1,"state":"FAILED","worker_id":"w","trace":"boom"}]"#;
        let running = r#"[{"id":0,"state":"RUNNING","worker_id":"w"}]"#;
        // Observed: (phase, state, tasks, message).
        type Observed<'a> = Option<(&'a str, &'a str, &'a str, Option<&'a str>)>;
        let rows: [(&str, &str, Observed); 4] = [
            ("new", "ok", None),
            ("fine", "ok", Some(("RUNNING", "RUNNING", running, None))),
            (
                "task",
                "ok",
                Some(("RUNNING", "RUNNING", failed_task, Some("task 1 failed"))),
            ),
            ("away", "down", Some(("RUNNING", "RUNNING", running, None))),
        ];
        for (name, cluster, observed) in rows {
            db::query("INSERT INTO connectors (id, name, connect_cluster_id, config, desired_state, created_at, updated_at) VALUES ($1, $1, $2, '{\"a\":\"b\"}', 'running', $3, $3)")
                .bind(name).bind(cluster).bind(&now).execute(&pool).await.unwrap();
            if let Some((phase, state, tasks, message)) = observed {
                db::query("INSERT INTO connector_status (connector_id, observed_generation, phase, connector_state, tasks, message, observed_at, offsets) VALUES ($1, 1, $2, $3, $4, $5, $6, '{\"offsets\":[]}')")
                    .bind(name).bind(phase).bind(state).bind(tasks).bind(message).bind(&now).execute(&pool).await.unwrap();
            }
        }
        let health = health(&pool, &Principal::cli()).await.unwrap();
        let ids: Vec<String> = health.iter().map(|h| h.name.clone()).collect();
        assert_eq!(
            ids,
            ["away", "fine", "new", "task"],
            "by cluster, then name"
        );
        let mut views = views(&pool, &ids).await.unwrap();
        for h in &health {
            let v = views.remove(&h.name).unwrap();
            assert_eq!(
                (&h.desired_state, &h.phase, &h.observed_state, &h.message),
                (&v.desired_state, &v.phase, &v.observed_state, &v.message),
                "{}",
                h.name
            );
            assert_eq!(
                h.task_failed,
                v.tasks.iter().any(|t| t.state == "FAILED"),
                "{}",
                h.name
            );
        }
        let by = |n: &str| health.iter().find(|h| h.name == n).unwrap();
        assert!(by("task").task_failed && !by("fine").task_failed && !by("new").task_failed);
        assert_eq!(
            (by("new").phase.as_str(), by("fine").phase.as_str()),
            ("PENDING", "RUNNING")
        );
        assert_eq!(by("away").phase, "UNKNOWN");
        assert_eq!(
            by("away").message.as_deref(),
            Some("last seen RUNNING; now: connection refused")
        );
    }
}
