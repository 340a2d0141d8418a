//! Pipelines: a Debezium source connector capturing selected tables of a source connection
//! into topics ClueCDC creates first. The pipeline owns its connector (through the
//! reconciler) and never deletes its topics silently.

pub mod config;
pub mod source;

use crate::db;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use self::config::{build, schema_history_topic, signal_collection, table_topic, CaptureSpec};
use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::clusters::kafka as kclusters;
use crate::connections::{self, Connection, Provider};
use crate::connectors::{self, ConnectorView};
use crate::connectors::{restart_pause_resume, Action};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::kafka::TopicSpec;
use crate::listing::{self, ListSql, Page, Window};
use crate::reconcile::plan::DesiredState;
use crate::secrets::store::SecretStore;

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct PipelineInput {
    pub name: Option<String>,
    pub source_connection_id: Option<String>,
    pub kafka_cluster_id: Option<String>,
    pub connect_cluster_id: Option<String>,
    /// Tables to capture, `schema.table` (PostgreSQL) or `database.table` (MySQL/MariaDB).
    pub tables: Option<Vec<String>>,
    /// Starts every topic name (letters, digits, `.`, `_`, `-`).
    pub topic_prefix: Option<String>,
    pub partitions: Option<i64>,
    pub replication_factor: Option<i64>,
    /// Topic retention; -1 keeps forever (default 7 days).
    pub retention_ms: Option<i64>,
    /// How the connector starts: `initial` (default: snapshot, then stream), `no_data` (stream
    /// only), `when_needed`, `always` or `initial_only` (Debezium's `snapshot.mode`).
    #[schemars(with = "Option<SnapshotMode>")]
    pub snapshot_mode: Option<String>,
    /// PostgreSQL: `filtered` (default: the connector keeps the publication) or `disabled` (a
    /// table owner creates it; the preview gives the SQL).
    #[schemars(with = "Option<PublicationMode>")]
    pub publication_mode: Option<String>,
    /// Further Debezium connector settings (key to value), checked by the plugin; keys ClueCDC
    /// sets itself and TLS keys are refused.
    pub options: Option<Map<String, Value>>,
    /// Opt in to end-to-end freshness: ClueCDC creates `cluecdc_heartbeat` in the source and
    /// Debezium writes the time into it every second (`FRESHNESS_HEARTBEAT_MS`).
    pub heartbeat: Option<bool>,
}

/// Everything checked and derived, before anything is created.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "PipelinePreview")]
pub struct Preview {
    pub connector_name: String,
    pub connector_class: String,
    /// The exact config; secrets only as `${cluecdc:…}` references.
    pub config: BTreeMap<String, String>,
    /// Errors from the plugin's own validation, by config key (empty when valid).
    pub validation_errors: BTreeMap<String, Vec<String>>,
    pub topics: Vec<String>,
    /// PostgreSQL with publication_mode=disabled: what the table owner must run.
    pub publication_sql: Option<String>,
    pub warnings: Vec<String>,
}

struct Checked {
    name: String,
    source: Connection,
    kafka: kclusters::KafkaCluster,
    connect: crate::clusters::ConnectCluster,
    tables: Vec<String>,
    prefix: String,
    partitions: i32,
    rf: i32,
    retention_ms: Option<i64>,
    snapshot_mode: String,
    publication_mode: String,
    options: BTreeMap<String, String>,
    heartbeat: bool,
}

const SNAPSHOT_MODES: [&str; 5] = [
    "initial",
    "no_data",
    "when_needed",
    "always",
    "initial_only",
];

fn check_prefix(p: &str) -> std::result::Result<(), String> {
    if p.is_empty()
        || p.len() > 100
        || !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(
            "1–100 characters: letters, digits, '.', '_' and '-' (it starts every topic name)"
                .into(),
        );
    }
    Ok(())
}

/// A pipeline's own fields, checked and with their defaults: everything `check` decides
/// without asking a database, Kafka or Connect (the declarative plan normalizes with it too).
#[derive(Debug, Clone, PartialEq)]
pub struct Fields {
    pub tables: Vec<String>,
    pub prefix: String,
    pub partitions: i32,
    pub rf: i32,
    pub retention_ms: Option<i64>,
    pub snapshot_mode: String,
    pub publication_mode: String,
    pub options: BTreeMap<String, String>,
    pub heartbeat: bool,
}

pub fn check_fields(input: &PipelineInput, errors: &mut FieldErrors) -> Fields {
    let name = input.name.clone().unwrap_or_default().trim().to_string();
    let mut tables: Vec<String> = input
        .tables
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.trim().to_string())
        .collect();
    tables.dedup();
    if tables.is_empty() {
        errors.insert(
            "tables".into(),
            "choose at least one table, as schema.table".into(),
        );
    } else if let Some(bad) = tables
        .iter()
        .find(|t| t.split('.').count() != 2 || t.split('.').any(str::is_empty))
    {
        errors.insert(
            "tables".into(),
            format!("{bad:?}: write schema.table (for MySQL and MariaDB: database.table)"),
        );
    } else if tables
        .iter()
        .any(|t| t.ends_with(&format!(".{}", config::SIGNAL_TABLE)))
    {
        errors.insert(
            "tables".into(),
            "the signal table is captured automatically; leave it out".into(),
        );
    }
    let prefix = input
        .topic_prefix
        .clone()
        .unwrap_or_else(|| connections::settings::slug(&name).replace('_', "-"));
    if let Err(why) = check_prefix(&prefix) {
        errors.insert("topic_prefix".into(), why);
    }
    let partitions = input.partitions.unwrap_or(1);
    if !(1..=1000).contains(&partitions) {
        errors.insert("partitions".into(), "1 to 1000".into());
    }
    let rf = input.replication_factor.unwrap_or(1);
    if !(1..=10).contains(&rf) {
        errors.insert(
            "replication_factor".into(),
            "1 to 10, at most the number of brokers".into(),
        );
    }
    let retention_ms = Some(input.retention_ms.unwrap_or(7 * 24 * 3_600_000));
    if retention_ms.is_some_and(|r| r != -1 && r < 60_000) {
        errors.insert(
            "retention_ms".into(),
            "at least 60000 (one minute), or -1 to keep forever".into(),
        );
    }
    let snapshot_mode = input
        .snapshot_mode
        .clone()
        .unwrap_or_else(|| "initial".into());
    if !SNAPSHOT_MODES.contains(&snapshot_mode.as_str()) {
        errors.insert(
            "snapshot_mode".into(),
            format!("choose one of {}", SNAPSHOT_MODES.join(", ")),
        );
    }
    let publication_mode = input
        .publication_mode
        .clone()
        .unwrap_or_else(|| "filtered".into());
    if !["filtered", "disabled"].contains(&publication_mode.as_str()) {
        errors.insert("publication_mode".into(), "filtered (ClueCDC's connector creates and updates the publication) or disabled (a table owner creates it)".into());
    }
    let options = parse_options(input.options.as_ref(), errors);
    Fields {
        tables,
        prefix,
        partitions: partitions as i32,
        rf: rf as i32,
        retention_ms,
        snapshot_mode,
        publication_mode,
        options,
        heartbeat: input.heartbeat.unwrap_or(false),
    }
}

/// A pipeline's extra Debezium keys: flat text, secrets only as references, none of the keys
/// ClueCDC sets, and no TLS key at all (the connection's tls_mode and CA certificate decide).
/// Errors under `options.<key>`.
fn parse_options(raw: Option<&Map<String, Value>>, errors: &mut FieldErrors) -> config::Config {
    let mut rest = Map::new();
    for (k, v) in raw.into_iter().flatten() {
        if connectors::tls_key(k) {
            errors.insert(
                format!("options.{k}"),
                format!("TLS is set by the connection's tls_mode and CA certificate; remove {k}"),
            );
        } else if config::managed_keys().contains(&k.as_str()) {
            errors.insert(
                format!("options.{k}"),
                "ClueCDC sets this key itself; use the pipeline's own field".into(),
            );
        } else {
            rest.insert(k.clone(), v.clone());
        }
    }
    rest.insert("connector.class".into(), json!("x"));
    let mut option_errors = FieldErrors::new();
    let mut options = connectors::validate_config(&rest, &mut option_errors);
    for (k, v) in option_errors {
        errors.insert(k.replacen("config.", "options.", 1), v);
    }
    options.remove("connector.class");
    options
}

async fn check(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    input: &PipelineInput,
    existing_id: Option<&str>,
) -> Result<(Checked, source::Session)> {
    let mut errors = FieldErrors::new();
    let name = input.name.clone().unwrap_or_default().trim().to_string();
    if let Err(why) = connections::validate_name(&name) {
        errors.insert("name".into(), why);
    }
    let source =
        match connections::load(pool, input.source_connection_id.as_deref().unwrap_or("")).await {
            Ok(c) if !c.is_source() => {
                errors.insert(
                    "source_connection_id".into(),
                    format!("{} is not a SOURCE connection", c.name),
                );
                None
            }
            Ok(c) if c.database().is_none() => {
                errors.insert(
                    "source_connection_id".into(),
                    "object storage cannot be a capture source".into(),
                );
                None
            }
            Ok(c) if c.unverified_tls() => {
                errors.insert(
                    "source_connection_id".into(),
                    format!("{}: {}", c.name, connections::settings::UNVERIFIED_WARNING),
                );
                None
            }
            Ok(c) => Some(c),
            Err(_) => {
                errors.insert(
                    "source_connection_id".into(),
                    "no connection has this id".into(),
                );
                None
            }
        };
    let kafka = kclusters::get(pool, who, input.kafka_cluster_id.as_deref().unwrap_or(""))
        .await
        .ok();
    if kafka.is_none() {
        errors.insert(
            "kafka_cluster_id".into(),
            "no Kafka cluster has this id".into(),
        );
    }
    let connect =
        crate::clusters::get(pool, who, input.connect_cluster_id.as_deref().unwrap_or(""))
            .await
            .ok();
    match &connect {
        None => {
            errors.insert(
                "connect_cluster_id".into(),
                "no Connect cluster has this id".into(),
            );
        }
        Some(c) if c.managed_by == "strimzi" => {
            errors.insert(
                "connect_cluster_id".into(),
                format!("{} is managed by Strimzi; ClueCDC only observes it", c.name),
            );
        }
        _ => {}
    }
    let fields = check_fields(input, &mut errors);
    let Fields {
        tables,
        prefix,
        partitions,
        rf,
        retention_ms,
        snapshot_mode,
        publication_mode,
        options,
        heartbeat,
    } = fields;
    let taken: Option<String> =
        db::query_scalar("SELECT name FROM pipelines WHERE topic_prefix = $1 AND id <> $2")
            .bind(&prefix)
            .bind(existing_id.unwrap_or(""))
            .fetch_optional(pool)
            .await?;
    if let Some(other) = taken.filter(|_| !errors.contains_key("topic_prefix")) {
        errors.insert(
            "topic_prefix".into(),
            format!("pipeline {other} uses this prefix; topics would collide"),
        );
    }
    // The tables must exist in the source: one query for just these names, on the session
    // the create then runs its source statements on.
    let mut session = None;
    if let (Some(src), true) = (
        &source,
        !errors.contains_key("tables") && !tables.is_empty(),
    ) {
        let checked = async {
            let mut s = source::Session::open(store, src).await?;
            let missing = s.missing_tables(&tables).await?;
            Ok::<_, Error>((s, missing))
        };
        match checked.await {
            Ok((s, missing)) => {
                if !missing.is_empty() {
                    errors.insert(
                        "tables".into(),
                        format!("not found in {}: {}", src.name, missing.join(", ")),
                    );
                }
                session = Some(s);
            }
            Err(e) => {
                errors.insert(
                    "source_connection_id".into(),
                    format!("cannot check its tables: {e}"),
                );
            }
        }
    }
    Error::check(errors)?;
    let (Some(source), Some(kafka), Some(connect), Some(session)) =
        (source, kafka, connect, session)
    else {
        return Err(Error::Unexpected(anyhow::anyhow!(
            "checked input lost a reference"
        )));
    };
    Ok((
        Checked {
            name,
            source,
            kafka,
            connect,
            tables,
            prefix,
            partitions,
            rf,
            retention_ms,
            snapshot_mode,
            publication_mode,
            options,
            heartbeat,
        },
        session,
    ))
}

pub fn connector_name(prefix: &str) -> String {
    format!("cluecdc-capture-{prefix}")
}

fn spec_of(c: &Checked) -> CaptureSpec {
    CaptureSpec {
        tables: c.tables.clone(),
        topic_prefix: c.prefix.clone(),
        snapshot_mode: c.snapshot_mode.clone(),
        publication_mode: c.publication_mode.clone(),
        kafka_bootstrap: c.kafka.bootstrap_servers.clone(),
        kafka_client: c.kafka.java_client_settings(),
        options: c.options.clone(),
        heartbeat: c.heartbeat,
    }
}

fn topics_of(c: &Checked) -> Vec<TopicSpec> {
    topic_specs(
        &c.source,
        &TopicSettings {
            prefix: &c.prefix,
            tables: &c.tables,
            partitions: c.partitions,
            rf: c.rf,
            retention_ms: c.retention_ms,
            heartbeat: c.heartbeat,
        },
    )
}

/// What decides a pipeline's topics.
pub struct TopicSettings<'a> {
    pub prefix: &'a str,
    pub tables: &'a [String],
    pub partitions: i32,
    pub rf: i32,
    pub retention_ms: Option<i64>,
    pub heartbeat: bool,
}

impl<'a> TopicSettings<'a> {
    pub fn of(p: &'a Pipeline) -> Self {
        TopicSettings {
            prefix: &p.topic_prefix,
            tables: &p.tables,
            partitions: p.partitions as i32,
            rf: p.replication_factor as i32,
            retention_ms: p.retention_ms,
            heartbeat: p.heartbeat,
        }
    }
}

/// Every topic a pipeline's create makes, with its settings: a topic per table, the signal
/// table's and (opted in) the heartbeat table's, Debezium's heartbeat and notification topics,
/// and for MySQL/MariaDB the schema history.
pub fn topic_specs(source: &Connection, t: &TopicSettings<'_>) -> Vec<TopicSpec> {
    let d = source.database().cloned();
    let signal = d
        .as_ref()
        .map(|d| signal_collection(source.provider, d, t.tables))
        .unwrap_or_default();
    let data = |name: String| TopicSpec {
        name,
        partitions: t.partitions,
        replication_factor: t.rf,
        configs: [
            ("cleanup.policy".to_string(), "delete".to_string()),
            (
                "retention.ms".to_string(),
                t.retention_ms.unwrap_or(-1).to_string(),
            ),
        ]
        .into(),
    };
    let mut out: Vec<TopicSpec> = t
        .tables
        .iter()
        .map(|table| data(table_topic(t.prefix, table)))
        .collect();
    out.push(data(table_topic(t.prefix, &signal)));
    if t.heartbeat {
        if let Some(d) = &d {
            out.push(data(table_topic(
                t.prefix,
                &config::heartbeat_collection(source.provider, d, t.tables),
            )));
        }
    }
    out.push(TopicSpec {
        name: config::heartbeat_topic(t.prefix),
        partitions: 1,
        replication_factor: t.rf,
        configs: [
            ("cleanup.policy".to_string(), "delete".to_string()),
            ("retention.ms".to_string(), "86400000".to_string()),
        ]
        .into(),
    });
    // Debezium's notifications (snapshot progress, read by the monitor): a week is far longer
    // than the monitor takes to read them; the per-table state they give is kept in SQLite.
    out.push(TopicSpec {
        name: config::notification_topic(t.prefix),
        partitions: 1,
        replication_factor: t.rf,
        configs: [
            ("cleanup.policy".to_string(), "delete".to_string()),
            ("retention.ms".to_string(), "604800000".to_string()),
        ]
        .into(),
    });
    if source.provider != Provider::Postgresql {
        // Debezium needs the whole schema history: one partition, kept forever.
        out.push(TopicSpec {
            name: schema_history_topic(t.prefix),
            partitions: 1,
            replication_factor: t.rf,
            configs: [
                ("cleanup.policy".to_string(), "delete".to_string()),
                ("retention.ms".to_string(), "-1".to_string()),
            ]
            .into(),
        });
    }
    out
}

async fn validate_with_plugin(
    store: &SecretStore,
    c: &Checked,
    name: &str,
    config: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Vec<String>>> {
    let client = crate::clusters::connect::client_for(store, &c.connect).await?;
    let mut with_name = config.clone();
    with_name.insert("name".into(), name.into());
    crate::secrets::resolve::grant_for_validation(store.pool(), &c.connect.id, config).await?;
    client
        .validate(&config["connector.class"], &with_name)
        .await
        .map_err(|e| Error::Unavailable(format!("cannot validate with Connect: {e}")))
}

async fn preview_of(store: &SecretStore, c: &Checked) -> Result<Preview> {
    let spec = spec_of(c);
    let config = build(&c.source, &spec);
    let name = connector_name(&c.prefix);
    let validation_errors = validate_with_plugin(store, c, &name, &config).await?;
    let d = c.source.database().cloned();
    let publication_sql = match (&d, c.source.provider, c.publication_mode.as_str()) {
        (Some(d), Provider::Postgresql, "disabled") => Some(config::publication_sql(
            d.publication_name.as_deref().unwrap_or(""),
            &c.tables,
            &signal_collection(c.source.provider, d, &c.tables),
        )),
        _ => None,
    };
    let mut warnings = Vec::new();
    if c.source.provider == Provider::Postgresql && c.publication_mode == "filtered" {
        warnings.push("The connector creates and updates the publication; its user must own the captured tables.".to_string());
    }
    Ok(Preview {
        connector_class: config["connector.class"].clone(),
        connector_name: name,
        config,
        validation_errors,
        topics: topics_of(c).into_iter().map(|t| t.name).collect(),
        publication_sql,
        warnings,
    })
}

/// Checks everything (including the plugin's own validation) and creates nothing.
pub async fn preview(ctx: &Ctx, who: &Principal, input: &PipelineInput) -> Result<Preview> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Operator, "create pipelines")?;
    let (c, _) = check(pool, store, who, input, None).await?;
    preview_of(store, &c).await
}

fn plugin_errors(errors: &BTreeMap<String, Vec<String>>) -> Error {
    let fields: FieldErrors = errors
        .iter()
        .map(|(k, v)| (format!("config.{k}"), v.join("; ")))
        .collect();
    Error::Invalid {
        message: format!(
            "the connector plugin refused the config: {}",
            fields
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        fields,
    }
}

async fn create_topics(
    store: &SecretStore,
    kafka: &kclusters::KafkaCluster,
    topics: &[TopicSpec],
) -> Result<()> {
    let access = kclusters::access(store, kafka).await?;
    let answers = crate::kafka::create_topics(&access, topics)
        .await
        .map_err(|e| Error::Unavailable(format!("creating topics on {}: {e}", kafka.name)))?;
    for (name, answer) in answers {
        if let Err(e) = answer {
            if !crate::kafka::already_exists(&e) {
                return Err(Error::Unavailable(format!("creating topic {name}: {e}")));
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Pipeline {
    pub id: String,
    pub name: String,
    pub source_connection_id: String,
    pub kafka_cluster_id: String,
    pub connect_cluster_id: String,
    pub tables: Vec<String>,
    pub topic_prefix: String,
    pub partitions: i64,
    pub replication_factor: i64,
    pub retention_ms: Option<i64>,
    #[schemars(with = "SnapshotMode")]
    pub snapshot_mode: String,
    #[schemars(with = "PublicationMode")]
    pub publication_mode: String,
    /// Further Debezium connector settings given at creation (key to value).
    pub options: BTreeMap<String, String>,
    pub connector_id: String,
    pub heartbeat: bool,
    pub created_at: String,
    pub updated_at: String,
}

impl Pipeline {
    /// The topic carrying heartbeat rows, when the pipeline has opted in.
    pub fn heartbeat_topic(&self, source: &Connection) -> Option<String> {
        let d = source.database()?;
        self.heartbeat.then(|| {
            table_topic(
                &self.topic_prefix,
                &config::heartbeat_collection(source.provider, d, &self.tables),
            )
        })
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    name: String,
    source_connection_id: String,
    kafka_cluster_id: String,
    connect_cluster_id: String,
    tables: String,
    topic_prefix: String,
    partitions: i64,
    replication_factor: i64,
    retention_ms: Option<i64>,
    snapshot_mode: String,
    publication_mode: String,
    options: String,
    connector_id: String,
    #[sqlx(try_from = "crate::db::Flag")]
    heartbeat: bool,
    created_at: String,
    updated_at: String,
}

impl From<Row> for Pipeline {
    fn from(r: Row) -> Self {
        Pipeline {
            tables: serde_json::from_str(&r.tables).unwrap_or_default(),
            options: serde_json::from_str(&r.options).unwrap_or_default(),
            id: r.id,
            name: r.name,
            source_connection_id: r.source_connection_id,
            kafka_cluster_id: r.kafka_cluster_id,
            connect_cluster_id: r.connect_cluster_id,
            topic_prefix: r.topic_prefix,
            partitions: r.partitions,
            replication_factor: r.replication_factor,
            retention_ms: r.retention_ms,
            snapshot_mode: r.snapshot_mode,
            publication_mode: r.publication_mode,
            connector_id: r.connector_id,
            heartbeat: r.heartbeat,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

pub async fn load(pool: &Pool, id: &str) -> Result<Pipeline> {
    let row: Option<Row> = db::query_as("SELECT * FROM pipelines WHERE id = $1 OR name = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.map(Pipeline::from)
        .ok_or_else(|| Error::NotFound(format!("pipeline {id}")))
}

pub async fn list(pool: &Pool, who: &Principal) -> Result<Vec<Pipeline>> {
    who.require(Role::Viewer, "see pipelines")?;
    let rows: Vec<Row> = db::query_as("SELECT * FROM pipelines ORDER BY name")
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(Pipeline::from).collect())
}

/// One page of pipelines: `q` matches the name, `state` its connector's phase (UNKNOWN when
/// the connector is gone), `cluster` the Connect cluster's id or name.
pub async fn page(ctx: &Ctx, who: &Principal, w: &Window) -> Result<Page<Pipeline>> {
    let pool = &ctx.pool;
    who.require(Role::Viewer, "see pipelines")?;
    let ids = listing::page_ids(
        pool,
        &ListSql {
            with: crate::connectors::PHASES,
            from: "pipelines p JOIN connect_clusters pc ON pc.id = p.connect_cluster_id LEFT JOIN phases ph ON ph.id = p.connector_id",
            id: "p.id",
            name: "p.name",
            order: "p.name",
            state: "COALESCE(ph.phase, 'UNKNOWN')",
            cluster: Some(("p.connect_cluster_id", "pc.name")),
        },
        w,
    )
    .await?;
    let rows =
        listing::rows_by_id::<Row, String>(pool, "SELECT * FROM pipelines", "id", &ids.items)
            .await?
            .into_iter()
            .map(Pipeline::from)
            .collect();
    let items = listing::in_order(&ids.items, rows, |p: &Pipeline| p.id.clone());
    Ok(ids.with_items(items))
}

/// Creates a pipeline: plugin validation first (nothing is created when it fails), then the
/// signal table and every topic, then the desired connector the reconciler deploys.
pub async fn create(ctx: &Ctx, who: &Principal, input: &PipelineInput) -> Result<Pipeline> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    who.require(Role::Operator, "create pipelines")?;
    let (c, mut session) = check(pool, store, who, input, None).await?;
    if db::query_scalar::<i64>("SELECT COUNT(*) FROM pipelines WHERE name = $1")
        .bind(&c.name)
        .fetch_one(pool)
        .await?
        > 0
    {
        return Err(Error::Conflict(format!(
            "a pipeline named {:?} already exists",
            c.name
        )));
    }
    // A cluster whose workers cannot resolve references would run it without credentials.
    crate::clusters::provider_check::gate(pool, store, &c.connect, None).await?;
    let d = c
        .source
        .database()
        .cloned()
        .ok_or_else(|| Error::field("source_connection_id", "not a database"))?;
    // The plugin's validation and the publication check are independent reads; the signal
    // and heartbeat tables and the topics are created only once both passed, side by side.
    let publication = async {
        match c.source.provider == Provider::Postgresql && c.publication_mode == "disabled" {
            true => session
                .publication_exists(d.publication_name.as_deref().unwrap_or(""))
                .await
                .map(Some),
            false => Ok(None),
        }
    };
    let (preview, published) = tokio::join!(preview_of(store, &c), publication);
    let preview = preview?;
    if !preview.validation_errors.is_empty() {
        return Err(plugin_errors(&preview.validation_errors));
    }
    if let (Some(sql), Some(false)) = (&preview.publication_sql, published?) {
        return Err(Error::field(
            "publication_mode",
            format!("the publication does not exist yet; a table owner must run: {sql}"),
        ));
    }
    let tables = async {
        session
            .ensure_signal_table(&signal_collection(c.source.provider, &d, &c.tables))
            .await?;
        if c.heartbeat {
            session
                .ensure_heartbeat_table(&config::heartbeat_collection(
                    c.source.provider,
                    &d,
                    &c.tables,
                ))
                .await?;
        }
        Ok(())
    };
    let topics = topics_of(&c);
    tokio::try_join!(tables, create_topics(store, &c.kafka, &topics))?;
    let id = format!("pl_{}", uuid::Uuid::new_v4().simple());
    let connector_id = format!("cn_{}", uuid::Uuid::new_v4().simple());
    let now = crate::time::now();
    let gate = crate::db::write_gate(pool).await;
    let mut tx = pool.begin().await?;
    audit::record(&mut tx, Entry { actor: who.into(), action: "pipeline.create", target_kind: "pipeline", target_id: &id, outcome: Outcome::Success, summary: json!({"name": c.name, "source": c.source.name, "tables": c.tables, "topic_prefix": c.prefix, "topics": preview.topics}) }).await?;
    connectors::insert(
        &mut tx,
        &connectors::NewConnector {
            id: &connector_id,
            name: &preview.connector_name,
            cluster_id: &c.connect.id,
            config: &preview.config,
            state: DesiredState::Running,
            owner: Some(("pipeline", &id)),
        },
    )
    .await?;
    db::query("INSERT INTO pipelines (id, name, source_connection_id, kafka_cluster_id, connect_cluster_id, tables, topic_prefix, partitions, replication_factor, retention_ms, snapshot_mode, publication_mode, options, connector_id, created_at, updated_at, heartbeat) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)")
        .bind(&id)
        .bind(&c.name)
        .bind(&c.source.id)
        .bind(&c.kafka.id)
        .bind(&c.connect.id)
        .bind(json!(c.tables).to_string())
        .bind(&c.prefix)
        .bind(i64::from(c.partitions))
        .bind(i64::from(c.rf))
        .bind(c.retention_ms)
        .bind(&c.snapshot_mode)
        .bind(&c.publication_mode)
        .bind(json!(c.options).to_string())
        .bind(&connector_id)
        .bind(&now)
        .bind(&now)
        .bind(i64::from(c.heartbeat))
        .execute(&mut *tx)
        .await?;
    crate::reconcile::bump_desired_version(&mut *tx).await?;
    tx.commit().await?;
    drop(gate);
    wake.wake();
    load(pool, &id).await
}

/// A table change checked as `set_tables` checks it (the tables in the source, the plugin's
/// validation), without storing anything.
async fn checked_tables(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    tables: Vec<String>,
) -> Result<(Pipeline, Checked, Preview)> {
    who.require(Role::Operator, "change pipelines")?;
    let p = load(pool, id).await?;
    crate::operations::refuse_if_held(pool, &p.connector_id, "change the pipeline's tables")
        .await?;
    let input = PipelineInput {
        name: Some(p.name.clone()),
        source_connection_id: Some(p.source_connection_id.clone()),
        kafka_cluster_id: Some(p.kafka_cluster_id.clone()),
        connect_cluster_id: Some(p.connect_cluster_id.clone()),
        tables: Some(tables),
        topic_prefix: Some(p.topic_prefix.clone()),
        partitions: Some(p.partitions),
        replication_factor: Some(p.replication_factor),
        retention_ms: p.retention_ms,
        snapshot_mode: Some(p.snapshot_mode.clone()),
        publication_mode: Some(p.publication_mode.clone()),
        options: Some(
            p.options
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect(),
        ),
        heartbeat: Some(p.heartbeat),
    };
    let (c, _) = check(pool, store, who, &input, Some(&p.id)).await?;
    let preview = preview_of(store, &c).await?;
    if !preview.validation_errors.is_empty() {
        return Err(plugin_errors(&preview.validation_errors));
    }
    Ok((p, c, preview))
}

/// What `set_tables` would deploy, checked the same way; changes nothing.
pub async fn preview_tables(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    tables: Vec<String>,
) -> Result<Preview> {
    Ok(checked_tables(pool, store, who, id, tables).await?.2)
}

/// Adds and removes tables on a running pipeline as one action: topics for added tables, the
/// new include list (the connector updates its filtered publication when it restarts), and
/// an incremental snapshot of only the added tables, signalled once the new config runs.
pub async fn set_tables(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    tables: Vec<String>,
) -> Result<(Pipeline, Vec<String>)> {
    let pool = &ctx.pool;
    let store: &Arc<SecretStore> = &ctx.secrets;
    let wake: &Arc<crate::reconcile::Handle> = &ctx.reconciler;
    let (p, c, preview) = checked_tables(pool, store, who, id, tables).await?;
    let added: Vec<String> = c
        .tables
        .iter()
        .filter(|t| !p.tables.contains(t))
        .cloned()
        .collect();
    let removed: Vec<String> = p
        .tables
        .iter()
        .filter(|t| !c.tables.contains(t))
        .cloned()
        .collect();
    create_topics(store, &c.kafka, &topics_of(&c)).await?;
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "pipeline.tables",
            target_kind: "pipeline",
            target_id: &p.id,
            outcome: Outcome::Success,
            summary: json!({"name": p.name, "added": added, "removed": removed}),
        },
    )
    .await?;
    db::query("UPDATE pipelines SET tables = $1, updated_at = $2 WHERE id = $3")
        .bind(json!(c.tables).to_string())
        .bind(crate::time::now())
        .bind(&p.id)
        .execute(&mut *tx)
        .await?;
    db::query("UPDATE connectors SET config = $1, generation = generation + 1, updated_at = $2 WHERE id = $3").bind(json!(preview.config).to_string()).bind(crate::time::now()).bind(&p.connector_id).execute(&mut *tx).await?;
    if !added.is_empty() {
        // Committed with the change: the signal is sent even if this process dies next.
        let d = c
            .source
            .database()
            .cloned()
            .ok_or_else(|| Error::field("source_connection_id", "not a database"))?;
        let signal = signal_collection(c.source.provider, &d, &c.tables);
        crate::operations::insert(
            &mut tx,
            who,
            crate::operations::NewOperation {
                kind: "snapshot_signal",
                target_kind: "pipeline",
                target_id: &p.id,
                target_name: &p.name,
                params: json!({"connector_id": p.connector_id, "signal": signal, "tables": added}),
            },
        )
        .await?;
    }
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    Ok((load(pool, &p.id).await?, added))
}

/// Whether the connector runs its current config (observed at its generation and RUNNING),
/// and its phase as last observed (PENDING before any observation). A signal sent before then
/// would not be read by the config it was meant for.
async fn runs_current_config(pool: &Pool, connector_id: &str) -> Result<(bool, String)> {
    let row: Option<(i64, Option<i64>, Option<String>)> = db::query_as("SELECT c.generation, s.observed_generation, s.phase FROM connectors c LEFT JOIN connector_status s ON s.connector_id = c.id WHERE c.id = $1")
        .bind(connector_id)
        .fetch_optional(pool)
        .await?;
    Ok(match row {
        Some((generation, Some(observed), Some(phase))) => {
            (observed >= generation && phase == "RUNNING", phase)
        }
        Some((_, _, phase)) => (false, phase.unwrap_or_else(|| "PENDING".into())),
        None => (false, "PENDING".into()),
    })
}

/// How long the confirm step waits for Debezium's first notice of a signal before sending it
/// again: six monitor cycles at the default interval (the monitor reads the notices).
const SIGNAL_ACK_WAIT_MS: i64 = 90_000;
/// Signals sent for one table change before the operation gives up.
const SIGNALS_MAX: usize = 3;
/// A signal Debezium missed is sent again this long after the last one: time for Connect to
/// replace a task still running the old config (about a second on the stack), so the next
/// one does not meet that task too.
const SIGNAL_AGAIN_AFTER_MS: i64 = 10_000;

/// The durable half of a table change: once the reconciler has applied the new config and the
/// connector runs it, sends the incremental snapshot signal for the added tables, then confirms
/// from Debezium's notices that it scans them. Recorded as an operation before the change
/// request returns, so a process killed right after still gets the snapshot sent.
///
/// Why confirm: right after a config change Connect may still show the task of the old config
/// RUNNING while it restarts it, so the signal can reach a task that does not capture the
/// added tables; Debezium then reports them `UNKNOWN_SCHEMA`, or says nothing, and the new
/// task never sees the signal again. The signal is sent again (at most [`SIGNALS_MAX`] times)
/// until Debezium scans the tables.
pub async fn snapshot_signal_step(
    ctx: &crate::operations::Ctx<'_>,
    op: &crate::operations::Operation,
) -> crate::operations::Step {
    use crate::operations::Step;
    let p = &op.params;
    let connector_id = p["connector_id"].as_str().unwrap_or_default();
    let tables: Vec<String> = serde_json::from_value(p["tables"].clone()).unwrap_or_default();
    let sent: Vec<String> = serde_json::from_value(p["signals"].clone()).unwrap_or_default();
    if let Err(Error::NotFound(_)) = load(&ctx.pool, &op.target_id).await {
        return Step::Interrupted("the pipeline was deleted".into());
    }
    match op.step.as_str() {
        "wait_running" => match runs_current_config(&ctx.pool, connector_id).await {
            Ok((true, _)) => Step::Next("signal"),
            Ok((false, phase)) => Step::Wait(format!(
                "waiting for the connector to run its new config (it is {phase})"
            )),
            Err(e) => Step::Wait(e.to_string()),
        },
        "signal" => {
            let Ok(pipeline) = load(&ctx.pool, &op.target_id).await else {
                return Step::Interrupted("the pipeline was deleted".into());
            };
            let source = match connections::load(&ctx.pool, &pipeline.source_connection_id).await {
                Ok(s) => s,
                Err(e) => return Step::Wait(e.to_string()),
            };
            let signal = p["signal"].as_str().unwrap_or_default();
            let id =
                match source::signal_incremental_snapshot(&ctx.secrets, &source, signal, &tables)
                    .await
                {
                    Ok(id) => id,
                    Err(e) => {
                        return Step::Wait(format!("could not write the snapshot signal: {e}"))
                    }
                };
            tracing::info!(signal = %id, tables = ?tables, "incremental snapshot requested");
            let recorded =
                match crate::tables::progress::requested(&ctx.pool, &pipeline.id, &id, &tables)
                    .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(error = %e, "snapshot not recorded for its progress");
                        false
                    }
                };
            // Without Debezium's notices (a config from before them) there is nothing to confirm.
            if !recorded {
                return Step::Done;
            }
            let mut params = p.clone();
            params["signals"] = json!(sent.iter().chain([&id]).collect::<Vec<_>>());
            match crate::operations::set_params(ctx, op, &params).await {
                Ok(()) => Step::Next("confirm"),
                Err(e) => Step::Wait(e.to_string()),
            }
        }
        "confirm" => {
            let Some(last) = sent.last() else {
                return Step::Done;
            };
            let now = crate::reconcile::lease::now_ms();
            let acked = crate::tables::progress::acknowledgement(
                &ctx.pool,
                &op.target_id,
                last,
                &tables,
                now,
            );
            match acked.await {
                Ok(Some(ack)) => confirm(&ack, now - op.step_started_at, sent.len(), last),
                // Trimmed away by newer snapshots: it was read long ago.
                Ok(None) => Step::Done,
                Err(e) => Step::Wait(e.to_string()),
            }
        }
        other => Step::Fail(format!("unknown step {other}")),
    }
}

/// The confirm step's verdict on Debezium's notices so far, `waited_ms` after the last of
/// `sent` signals (`last`).
fn confirm(
    ack: &crate::tables::progress::Ack,
    waited_ms: i64,
    sent: usize,
    last: &str,
) -> crate::operations::Step {
    use crate::operations::Step;
    use crate::tables::progress::Ack;
    let again = |why: String| {
        if sent < SIGNALS_MAX {
            tracing::warn!(signal = %last, "{why}; sending the snapshot signal again");
            Step::Next("signal")
        } else {
            Step::Fail(format!("{why}, after {sent} signals; check the connector's log, then change the tables again or re-snapshot them"))
        }
    };
    match ack {
        Ack::Started => Step::Done,
        Ack::Refused(table, status) => {
            Step::Fail(format!("Debezium could not snapshot {table}: {status}"))
        }
        Ack::Missed(tables) if waited_ms >= SIGNAL_AGAIN_AFTER_MS => again(format!(
            "Debezium read snapshot signal {last} without scanning {}",
            tables.join(", ")
        )),
        Ack::Missed(tables) => Step::Wait(format!(
            "Debezium read snapshot signal {last} without scanning {}; sending it again in {} s",
            tables.join(", "),
            (SIGNAL_AGAIN_AFTER_MS - waited_ms + 999) / 1000
        )),
        Ack::Pending if waited_ms >= SIGNAL_ACK_WAIT_MS => again(format!(
            "no notice from Debezium for snapshot signal {last} in {} s",
            waited_ms / 1000
        )),
        Ack::Pending => Step::Wait(format!(
            "waiting for Debezium to start the snapshot (signal {last})"
        )),
    }
}

/// What a re-snapshot request sent: the signal's id (the row in the source's signal table)
/// and the tables it names.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "PipelineResnapshot")]
pub struct Resnapshot {
    pub signal_id: String,
    pub tables: Vec<String>,
}

/// An incremental re-snapshot of some of a running pipeline's tables: Debezium's
/// `execute-snapshot` signal through the signal table, as after a table change. The connector
/// reads those tables' rows again as `r` events in chunks while it keeps streaming every table;
/// nothing is stopped, no offset or slot changes. The gentle alternative to a reset, for a
/// destination that lost rows: upserting destinations converge, an object store gets the rows
/// again as new objects. The connector must be running its current config (it reads the signal
/// from the change stream; a paused one would act on it only when resumed).
pub async fn resnapshot(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    tables: Vec<String>,
) -> Result<Resnapshot> {
    who.require(Role::Operator, "re-snapshot pipelines")?;
    let p = load(pool, id).await?;
    let mut chosen: Vec<String> = Vec::new();
    for t in tables.into_iter().map(|t| t.trim().to_string()) {
        if !t.is_empty() && !chosen.contains(&t) {
            chosen.push(t);
        }
    }
    if chosen.is_empty() {
        return Err(Error::field(
            "tables",
            "choose at least one of the pipeline's tables to read again",
        ));
    }
    let unknown: Vec<&str> = chosen
        .iter()
        .filter(|t| !p.tables.contains(t))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(Error::field(
            "tables",
            format!(
                "not captured by this pipeline: {}; add a table with Change tables (its snapshot comes with it)",
                unknown.join(", ")
            ),
        ));
    }
    let (running, phase) = runs_current_config(pool, &p.connector_id).await?;
    if !running {
        return Err(Error::Conflict(format!(
            "the pipeline's connector is {phase}, not RUNNING its current config; resume it (or wait until it runs), then re-snapshot"
        )));
    }
    let source = connections::load(pool, &p.source_connection_id).await?;
    let d = source
        .database()
        .cloned()
        .ok_or_else(|| Error::field("source_connection_id", "not a database"))?;
    let signal = signal_collection(source.provider, &d, &p.tables);
    let signal_id = source::signal_incremental_snapshot(store, &source, &signal, &chosen).await?;
    // Shown as waiting until Debezium's notices for this signal (they carry its id) arrive.
    if let Err(e) = crate::tables::progress::requested(pool, &p.id, &signal_id, &chosen).await {
        tracing::warn!(error = %e, "re-snapshot not recorded for its progress");
    }
    audit::record_alone(
        pool,
        Entry {
            actor: who.into(),
            action: "pipeline.resnapshot",
            target_kind: "pipeline",
            target_id: &p.id,
            outcome: Outcome::Success,
            summary: json!({"name": p.name, "tables": chosen, "signal_id": signal_id}),
        },
    )
    .await?;
    Ok(Resnapshot {
        signal_id,
        tables: chosen,
    })
}

/// What a reset does, in the words the confirmation page and the README use.
pub const RESET_EXPLAINED: &[&str] = &[
    "The connector is stopped, the source offsets Connect holds (the LSN, or binlog file, position and GTIDs) are saved in ClueCDC's offset history and then removed, and the connector starts as if new: a full snapshot of every table first, then streaming.",
    "PostgreSQL: the replication slot is kept, so the server keeps its WAL while the connector is stopped and streaming goes on from the slot after the snapshot. MySQL/MariaDB: streaming starts from the binlog position at the end of the new snapshot.",
    "The topics keep every record they hold; the snapshot adds every row again as r events. Database deliveries upsert them (rows converge); object-storage deliveries write them again as new objects.",
    "Changes made while the connector is stopped are not lost, but some may be delivered twice (at least once).",
];

/// A full reset and re-snapshot: the connector's source offsets removed through the offset
/// workflow (see [`crate::operations::offsets`]) so it snapshots everything again. The louder
/// alternative to [`resnapshot`]; the pipeline's name must be typed.
pub async fn reset(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    confirm: Option<&str>,
) -> Result<String> {
    who.require(Role::Operator, "reset pipelines")?;
    let p = load(pool, id).await?;
    if confirm.map(str::trim) != Some(p.name.as_str()) {
        return Err(Error::field(
            "confirm",
            format!("type the pipeline's name, {}, to confirm the reset", p.name),
        ));
    }
    let c = connectors::views(pool, std::slice::from_ref(&p.connector_id))
        .await?
        .remove(&p.connector_id)
        .ok_or_else(|| Error::Conflict(format!("pipeline {} has no connector", p.name)))?;
    let resume_to = crate::operations::resume_to(&c.desired_state, "pipeline", &p.name)?;
    let mut tx = pool.begin().await?;
    let op = crate::operations::hold(
        &mut tx,
        who,
        crate::operations::NewOperation {
            kind: "reset",
            target_kind: "pipeline",
            target_id: &p.id,
            target_name: &p.name,
            params: json!({
                "connector_id": p.connector_id,
                "connector_name": c.name,
                "connect_cluster_id": p.connect_cluster_id,
                "resume_to": resume_to.as_str(),
                "reason": "reset and re-snapshot",
            }),
        },
        &p.connector_id,
    )
    .await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "pipeline.reset",
            target_kind: "pipeline",
            target_id: &p.id,
            outcome: Outcome::Success,
            summary: json!({"name": p.name, "operation_id": op}),
        },
    )
    .await?;
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    Ok(op)
}

/// What `POST /api/v1/pipelines/{id}/<action>` and the page buttons ask: restart, pause or
/// resume (see [`crate::connectors::restart_pause_resume`]).
pub async fn act(ctx: &Ctx, who: &Principal, id: &str, action: Action) -> Result<ConnectorView> {
    let (pool, wake) = (&ctx.pool, &*ctx.reconciler);
    let restart = restart(pool, wake, who, id, false);
    restart_pause_resume(action, restart, |to| set_state(pool, wake, who, id, to)).await
}

pub async fn set_state(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    state: DesiredState,
) -> Result<ConnectorView> {
    who.require(Role::Operator, "pause or resume pipelines")?;
    let p = load(pool, id).await?;
    connectors::set_state(pool, wake, who, &p.connector_id, state).await
}

pub async fn restart(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    only_failed: bool,
) -> Result<ConnectorView> {
    who.require(Role::Operator, "restart pipelines")?;
    let p = load(pool, id).await?;
    connectors::request_restart(pool, wake, who, &p.connector_id, only_failed).await
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "PipelineDeleted")]
pub struct Deleted {
    pub connector_removed: bool,
    pub slot_dropped: bool,
    /// Topics are kept; deleting them is a separate, explicit action.
    pub topics_kept: Vec<String>,
}

/// Deletes the pipeline's connector; drops the replication slot only when asked (a dropped
/// slot loses the stream's position); never deletes topics.
pub async fn delete(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    drop_slot: bool,
) -> Result<Deleted> {
    who.require(Role::Operator, "delete pipelines")?;
    let p = load(pool, id).await?;
    let users = crate::deliveries::of_pipeline(pool, &p.id).await?;
    if !users.is_empty() {
        return Err(Error::Conflict(format!(
            "pipeline {} is read by delivery {}; delete those first",
            p.name,
            users.join(", ")
        )));
    }
    crate::operations::refuse_if_held(pool, &p.connector_id, "delete the pipeline").await?;
    let mut tx = pool.begin().await?;
    let op = crate::operations::insert(
        &mut tx,
        who,
        crate::operations::NewOperation {
            kind: "pipeline_delete",
            target_kind: "pipeline",
            target_id: &p.id,
            target_name: &p.name,
            params: json!({"connector_id": p.connector_id, "drop_slot": drop_slot}),
        },
    )
    .await?;
    db::query("UPDATE connectors SET desired_state = 'deleted', generation = generation + 1, updated_at = $1 WHERE id = $2")
        .bind(crate::time::now())
        .bind(&p.connector_id)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "pipeline.delete",
            target_kind: "pipeline",
            target_id: &p.id,
            outcome: Outcome::Success,
            summary: json!({"name": p.name, "drop_slot": drop_slot, "operation_id": op}),
        },
    )
    .await?;
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    // The operation removes the connector, drops the slot when asked and forgets the
    // pipeline, in whichever process holds the operations lease; this request waits for it.
    let op = crate::operations::delete_finished(pool, &op, "the connector").await?;
    Ok(Deleted {
        connector_removed: true,
        slot_dropped: op.params["slot_dropped"].as_bool().unwrap_or(false),
        topics_kept: p
            .tables
            .iter()
            .map(|t| table_topic(&p.topic_prefix, t))
            .collect(),
    })
}

/// The steps of a pipeline delete: wait until the reconciler has removed the connector (it
/// forgets its row then), drop the replication slot if asked, forget the pipeline.
pub async fn delete_step(
    ctx: &crate::operations::Ctx<'_>,
    op: &crate::operations::Operation,
) -> crate::operations::Step {
    use crate::operations::Step;
    let connector_id = op.params["connector_id"].as_str().unwrap_or_default();
    match op.step.as_str() {
        "remove" => match crate::operations::connector_gone(&ctx.pool, connector_id).await {
            Ok(true) => Step::Next("forget"),
            Ok(false) => {
                Step::Wait("waiting for the reconciler to remove the connector from Connect".into())
            }
            Err(e) => Step::Wait(e.to_string()),
        },
        "forget" => {
            let Ok(p) = load(&ctx.pool, &op.target_id).await else {
                return Step::Done;
            };
            if op.params["drop_slot"].as_bool() == Some(true) && op.params["slot_dropped"].is_null()
            {
                let dropped = match connections::load(&ctx.pool, &p.source_connection_id).await {
                    Ok(source) => match source.database().and_then(|d| d.slot_name.clone()) {
                        Some(slot) if source.provider == Provider::Postgresql => {
                            source::drop_slot(&ctx.secrets, &source, &slot).await
                        }
                        _ => Ok(false),
                    },
                    Err(e) => Err(e),
                };
                match dropped {
                    Ok(b) => {
                        let mut params = op.params.clone();
                        params["slot_dropped"] = json!(b);
                        if let Err(e) = db::query("UPDATE operations SET params = $1 WHERE id = $2")
                            .bind(params.to_string())
                            .bind(&op.id)
                            .execute(&ctx.pool)
                            .await
                        {
                            return Step::Wait(e.to_string());
                        }
                    }
                    Err(e) => {
                        return Step::Wait(format!("could not drop the replication slot: {e}"))
                    }
                }
            }
            match db::query("DELETE FROM pipelines WHERE id = $1")
                .bind(&p.id)
                .execute(&ctx.pool)
                .await
            {
                Ok(_) => Step::Done,
                Err(e) => Step::Wait(e.to_string()),
            }
        }
        other => Step::Fail(format!("unknown step {other}")),
    }
}

/// The pipeline page's live facts.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "PipelineDetail")]
pub struct Detail {
    pub pipeline: Pipeline,
    pub connector: Option<ConnectorView>,
    pub topics: Vec<TopicSize>,
    pub slot: Option<source::SlotInfo>,
    /// MySQL/MariaDB: the connector's binlog position and its distances.
    pub binlog: Option<source::BinlogInfo>,
    /// The position Connect holds for the connector (LSN, binlog file and position, GTIDs),
    /// from its committed offsets as last read, with when they were read.
    pub source_position: Option<source::SourcePosition>,
    pub source_position_read_at: Option<String>,
    /// Sum of the end offsets of the pipeline's topics: grows with every change captured.
    pub end_offsets: i64,
    /// Age of the newest record in any of the pipeline's topics (heartbeats included).
    pub newest_record_age_secs: Option<f64>,
    /// The newest snapshot (initial or incremental) per table, from Debezium's notifications,
    /// with live rows scanned (see [`crate::tables::progress`]); None: none was ever seen.
    pub snapshot: Option<crate::tables::progress::Snapshot>,
    /// Why ClueCDC could not read the source (slots or binlogs) just now: the connector uses
    /// the same connection, so it is most likely failing the same way.
    pub source_error: Option<String>,
    /// Per captured table: its topic's last change and the source's change counter as the
    /// monitor saw them, and its stall state (see [`crate::tables::freshness`]).
    pub tables: Vec<crate::tables::freshness::TableFreshness>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TopicSize {
    pub name: String,
    pub records: i64,
    pub partitions: usize,
    pub end_offset: i64,
    /// Time of the newest record (RFC 3339).
    pub newest_record_at: Option<String>,
}

pub async fn detail(ctx: &Ctx, who: &Principal, id: &str) -> Result<Detail> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    detail_with(pool, store, who, id, &mut TopicsMemo::default()).await
}

/// What the pipelines of one monitoring cycle share, read once each: every topic of a Kafka
/// cluster with its watermarks (by cluster id), and every slot of a PostgreSQL source (by
/// connection id), instead of one metadata read and one database session per pipeline.
/// None: it could not be read.
#[derive(Default)]
pub struct TopicsMemo {
    topics: HashMap<String, Option<std::sync::Arc<Vec<crate::kafka::TopicInfo>>>>,
    slots: HashMap<String, std::result::Result<std::sync::Arc<Vec<source::SlotInfo>>, String>>,
}

impl TopicsMemo {
    /// A Kafka cluster's topics as read this cycle (None: not read, or it did not answer).
    pub fn cluster(
        &self,
        kafka_cluster_id: &str,
    ) -> Option<std::sync::Arc<Vec<crate::kafka::TopicInfo>>> {
        self.topics.get(kafka_cluster_id).cloned().flatten()
    }
}

/// [`detail`], reading each Kafka cluster's topics through `memo`.
pub async fn detail_with(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    memo: &mut TopicsMemo,
) -> Result<Detail> {
    who.require(Role::Viewer, "see pipelines")?;
    let p = load(pool, id).await?;
    let connector = connectors::get(pool, who, &p.connector_id).await.ok();
    let source = connections::load(pool, &p.source_connection_id).await?;
    let mut source_error = None;
    let slot = match (
        source.provider,
        source.database().and_then(|d| d.slot_name.clone()),
    ) {
        (Provider::Postgresql, Some(name)) => {
            let all = match memo.slots.get(&source.id) {
                Some(all) => all.clone(),
                None => {
                    let all = source::slots(store, &source)
                        .await
                        .map(std::sync::Arc::new)
                        .map_err(|e| e.to_string());
                    memo.slots.insert(source.id.clone(), all.clone());
                    all
                }
            };
            let all = all.map_err(|e| source_error = Some(e)).ok();
            all.map(|all| {
                all.iter()
                    .find(|s| s.name == name)
                    .cloned()
                    .unwrap_or_else(|| source::SlotInfo {
                        name,
                        ..Default::default()
                    })
            })
        }
        _ => None,
    };
    let binlog = match source.provider {
        Provider::Mysql | Provider::Mariadb => {
            let position = connector
                .as_ref()
                .and_then(|c| c.offsets.as_ref())
                .and_then(source::binlog_position);
            let files = source::binlogs(store, &source)
                .await
                .map_err(|e| source_error = Some(e.to_string()))
                .ok();
            files.map(|files| {
                source::binlog_distance(&files, position.as_ref().map(|(f, p)| (f.as_str(), *p)))
            })
        }
        _ => None,
    };
    let mut topics = Vec::new();
    let mut newest_ms: Option<i64> = None;
    if let Ok(kafka) = kclusters::get(pool, who, &p.kafka_cluster_id).await {
        let access = kclusters::access(store, &kafka).await?;
        let all = match memo.topics.get(&kafka.id) {
            Some(all) => all.clone(),
            None => {
                let all = crate::kafka::topics(&access, None)
                    .await
                    .ok()
                    .map(std::sync::Arc::new);
                memo.topics.insert(kafka.id.clone(), all.clone());
                all
            }
        };
        if let Some(all) = all {
            let mut wanted: BTreeSet<String> = p
                .tables
                .iter()
                .map(|t| table_topic(&p.topic_prefix, t))
                .collect();
            wanted.extend(p.heartbeat_topic(&source));
            let mine: Vec<crate::kafka::TopicInfo> = all
                .iter()
                .filter(|t| wanted.contains(&t.name))
                .cloned()
                .collect();
            // The newest record of each non-empty partition is the one just below its end.
            let at: Vec<crate::kafka::RecordAt> = mine
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .filter(|p| p.high_watermark > p.low_watermark)
                        .map(|p| crate::kafka::RecordAt {
                            topic: t.name.clone(),
                            partition: p.id,
                            offset: p.high_watermark - 1,
                        })
                })
                .collect();
            let times = crate::kafka::record_times(&access, &at)
                .await
                .unwrap_or_default();
            for t in mine {
                let newest = at
                    .iter()
                    .zip(&times)
                    .filter(|(a, _)| a.topic == t.name)
                    .filter_map(|(_, ms)| *ms)
                    .max();
                newest_ms = newest_ms.max(newest);
                topics.push(TopicSize {
                    records: t.messages(),
                    partitions: t.partitions.len(),
                    end_offset: t.partitions.iter().map(|p| p.high_watermark.max(0)).sum(),
                    newest_record_at: newest
                        .and_then(chrono::DateTime::from_timestamp_millis)
                        .map(crate::time::format),
                    name: t.name,
                });
            }
        }
    }
    let end_offsets = topics.iter().map(|t| t.end_offset).sum();
    let newest_record_age_secs =
        newest_ms.map(|ms| ((crate::reconcile::lease::now_ms() - ms).max(0) as f64) / 1000.0);
    // Live at read time: a scanning table's rows are its topic's end offset just read minus
    // where its scan started, so the page moves between monitor cycles.
    let snapshot = crate::tables::progress::for_detail(pool, &p, &topics)
        .await
        .map_err(|e| tracing::warn!(error = %e, "snapshot progress not read"))
        .ok()
        .flatten();
    let source_position = connector
        .as_ref()
        .and_then(|c| c.offsets.as_ref())
        .and_then(source::position);
    let source_position_read_at = source_position
        .as_ref()
        .and_then(|_| connector.as_ref()?.offsets_at.clone());
    // From SQLite (the monitor's observations) and the topics just read: no source query.
    let tables = crate::tables::freshness::pipeline_tables(pool, &p, &topics)
        .await
        .map_err(|e| tracing::warn!(error = %e, "per-table freshness not read"))
        .unwrap_or_default();
    Ok(Detail {
        pipeline: p,
        connector,
        topics,
        slot,
        binlog,
        source_position,
        source_position_read_at,
        end_offsets,
        newest_record_age_secs,
        snapshot,
        source_error,
        tables,
    })
}

/// A replication slot on a source, and the pipeline that owns it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "SourceSlot")]
pub struct OwnedSlot {
    #[serde(flatten)]
    pub slot: source::SlotInfo,
    /// The pipeline that owns the slot; null: an orphan (an admin may drop it).
    pub pipeline: Option<String>,
}

/// The logical slots in a PostgreSQL source's database, each with its owning pipeline.
pub async fn source_slots(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    connection_id: &str,
) -> Result<Vec<OwnedSlot>> {
    who.require(Role::Viewer, "see replication slots")?;
    let c = connections::load(pool, connection_id).await?;
    if c.provider != Provider::Postgresql || !c.is_source() {
        return Err(Error::Conflict(format!(
            "{} is not a PostgreSQL source; only those have replication slots",
            c.name
        )));
    }
    let owner: Option<String> =
        db::query_scalar("SELECT name FROM pipelines WHERE source_connection_id = $1 LIMIT 1")
            .bind(&c.id)
            .fetch_optional(pool)
            .await?;
    let own_slot = c.database().and_then(|d| d.slot_name.clone());
    Ok(source::slots(store, &c)
        .await?
        .into_iter()
        .map(|slot| {
            let pipeline = if Some(&slot.name) == own_slot.as_ref() {
                owner.clone()
            } else {
                None
            };
            OwnedSlot { slot, pipeline }
        })
        .collect())
}

/// Drops a slot no pipeline owns: an explicit, confirmed (name repeated), audited action.
pub async fn drop_orphan_slot(
    ctx: &Ctx,
    who: &Principal,
    connection_id: &str,
    name: &str,
    confirm: &str,
) -> Result<()> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "drop replication slots")?;
    if confirm != name {
        return Err(Error::field("confirm", format!("type the slot name {name} to confirm: whatever reads it loses its position for good")));
    }
    let slots = source_slots(pool, store, who, connection_id).await?;
    let Some(found) = slots.iter().find(|s| s.slot.name == name) else {
        return Err(Error::NotFound(format!("replication slot {name}")));
    };
    if let Some(p) = &found.pipeline {
        return Err(Error::Conflict(format!(
            "slot {name} belongs to pipeline {p}; delete the pipeline with its slot option instead"
        )));
    }
    if found.slot.active {
        return Err(Error::Conflict(format!(
            "slot {name} is in use by a connection right now; stop that reader first"
        )));
    }
    let c = connections::load(pool, connection_id).await?;
    let dropped = source::drop_slot(store, &c, name).await;
    audit::record_alone(pool, Entry { actor: who.into(), action: "slot.drop", target_kind: "replication_slot", target_id: name, outcome: if dropped.is_ok() { Outcome::Success } else { Outcome::Failure }, summary: json!({"connection": c.name, "retained_wal_bytes": found.slot.retained_wal_bytes}) }).await?;
    dropped.map(|_| ())
}

/// How a pipeline's connector starts (Debezium's `snapshot.mode`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum SnapshotMode {
    Initial,
    NoData,
    WhenNeeded,
    Always,
    InitialOnly,
}

/// Who keeps a PostgreSQL pipeline's publication.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum PublicationMode {
    /// The connector creates and updates it.
    Filtered,
    /// A table owner creates it (the preview gives the SQL).
    Disabled,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_confirm_step_sends_the_signal_again_when_debezium_missed_it_and_gives_up_after_three() {
        use crate::operations::Step;
        use crate::tables::progress::Ack;
        let step =
            |ack: &Ack, waited_ms: i64, sent: usize| match confirm(ack, waited_ms, sent, "sig") {
                Step::Next(s) => format!("next {s}"),
                Step::Wait(_) => "wait".into(),
                Step::Done => "done".into(),
                Step::Fail(why) => format!("fail: {why}"),
                Step::Interrupted(why) => format!("interrupted: {why}"),
            };
        let missed = Ack::Missed(vec!["s.t".into()]);
        assert_eq!(step(&Ack::Started, 0, 1), "done");
        assert_eq!(step(&Ack::Pending, SIGNAL_ACK_WAIT_MS - 1, 1), "wait");
        assert_eq!(
            step(&Ack::Pending, SIGNAL_ACK_WAIT_MS, 1),
            "next signal",
            "no notice in time"
        );
        assert_eq!(
            step(&missed, SIGNAL_AGAIN_AFTER_MS - 1, 1),
            "wait",
            "not at once: the old task may still run"
        );
        assert_eq!(step(&missed, SIGNAL_AGAIN_AFTER_MS, 1), "next signal");
        assert_eq!(
            step(&missed, SIGNAL_AGAIN_AFTER_MS, SIGNALS_MAX - 1),
            "next signal"
        );
        let gave_up = step(&missed, SIGNAL_AGAIN_AFTER_MS, SIGNALS_MAX);
        assert!(
            gave_up.starts_with(
                "fail: Debezium read snapshot signal sig without scanning s.t, after 3 signals"
            ),
            "{gave_up}"
        );
        let silent = step(&Ack::Pending, SIGNAL_ACK_WAIT_MS, SIGNALS_MAX);
        assert!(
            silent.starts_with("fail: no notice from Debezium"),
            "{silent}"
        );
        assert_eq!(
            step(&Ack::Refused("s.t".into(), "NO_PRIMARY_KEY".into()), 0, 1),
            "fail: Debezium could not snapshot s.t: NO_PRIMARY_KEY",
            "not sent again: another signal would meet the same table"
        );
    }

    use super::*;

    fn options(v: Value) -> (config::Config, FieldErrors) {
        let mut e = FieldErrors::new();
        let o = parse_options(v.as_object(), &mut e);
        (o, e)
    }

    #[test]
    fn options_that_set_tls_are_refused_whatever_their_value() {
        for key in [
            "database.sslmode",
            "database.sslrootcert",
            "database.sslfactory",
            "database.ssl.mode",
            "database.ssl.truststore",
            "database.trustServerCertificate",
            "schema.history.internal.producer.ssl.endpoint.identification.algorithm",
            "database.TLS.version",
        ] {
            let (o, e) = options(json!({key: "verify-full", "max.batch.size": "4096"}));
            assert_eq!(
                e.get(&format!("options.{key}")).map(String::as_str),
                Some(
                    format!(
                        "TLS is set by the connection's tls_mode and CA certificate; remove {key}"
                    )
                    .as_str()
                ),
                "{key}: {e:?}"
            );
            assert!(!o.contains_key(key));
            assert_eq!(o["max.batch.size"], "4096", "other options stay");
        }
    }

    #[test]
    fn options_cannot_replace_managed_keys_or_hold_plain_secrets() {
        let (o, e) = options(
            json!({"slot.name": "x", "notification.sink.token": "hunter2", "poll.interval.ms": 100}),
        );
        assert!(e["options.slot.name"].contains("ClueCDC sets this key itself"));
        assert!(e["options.notification.sink.token"].contains("${cluecdc:"));
        assert_eq!(o.keys().collect::<Vec<_>>(), ["poll.interval.ms"]);
        let (o, e) = options(Value::Null);
        assert!(o.is_empty() && e.is_empty());
    }
}
