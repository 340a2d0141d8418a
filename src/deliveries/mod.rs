//! Deliveries: a pipeline's topics written to a destination by one sink connector with its
//! own consumer group, from the earliest retained offsets. Database deliveries use the Debezium
//! JDBC sink (upsert by primary key, deletes applied); object-storage deliveries use the Aiven
//! S3 sink (raw CDC export as JSON Lines; deleting a delivery never deletes objects).

pub mod config;
pub mod objects;
pub mod replay;

use crate::db;
use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::json;

use self::config::{jdbc, JdbcOptions, ObjectStorageOptions, JDBC_SINK, S3_SINK};
use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::connections::{self, Capability, CheckStatus};
use crate::connectors::{self, ConnectorView};
use crate::connectors::{restart_pause_resume, Action};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::listing::{self, ListSql, Page, Window};
use crate::pipelines::{self, config::table_topic};
use crate::reconcile::plan::DesiredState;
use crate::secrets::store::SecretStore;

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct DeliveryInput {
    pub name: Option<String>,
    pub pipeline_id: Option<String>,
    pub destination_connection_id: Option<String>,
    /// Defaults to the pipeline's Connect cluster.
    pub connect_cluster_id: Option<String>,
    /// Defaults to every table topic of the pipeline.
    pub topics: Option<Vec<String>>,
    // Database deliveries.
    #[schemars(with = "Option<config::InsertMode>")]
    pub insert_mode: Option<String>,
    pub delete_enabled: Option<bool>,
    pub table_name_format: Option<String>,
    #[schemars(with = "Option<config::SchemaEvolution>")]
    pub schema_evolution: Option<String>,
    // Object-storage deliveries.
    #[schemars(with = "Option<config::Format>")]
    pub format: Option<String>,
    #[schemars(with = "Option<config::Compression>")]
    pub compression: Option<String>,
    pub records_per_file: Option<u64>,
    /// Refused with an explanation: the sink has no such key (see `ObjectStorageOptions`).
    pub flush_interval_ms: Option<u64>,
    pub tasks: Option<u64>,
    pub key_template: Option<String>,
    // Both.
    #[schemars(with = "Option<config::ErrorPolicy>")]
    pub error_policy: Option<String>,
    pub dead_letter_topic: Option<String>,
    /// At a breaking schema change: warn (default) or pause (`tables::schema`).
    #[schemars(with = "Option<config::SchemaPolicy>")]
    pub schema_policy: Option<String>,
}

/// What kind of destination a delivery writes to (API name), from its connection's provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "DeliveryKind")]
pub enum Kind {
    Database,
    ObjectStorage,
}

impl Kind {
    pub fn of(provider: connections::Provider) -> Kind {
        if provider.is_object_storage() {
            Kind::ObjectStorage
        } else {
            Kind::Database
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Database => "database",
            Kind::ObjectStorage => "object_storage",
        }
    }
    /// The value of the `deliveries.kind` column.
    fn column(self) -> &'static str {
        match self {
            Kind::Database => "jdbc",
            Kind::ObjectStorage => "object_storage",
        }
    }
    pub fn sink_class(self) -> &'static str {
        match self {
            Kind::Database => JDBC_SINK,
            Kind::ObjectStorage => S3_SINK,
        }
    }
    pub fn semantics(self) -> &'static str {
        match self {
            Kind::Database => SEMANTICS,
            Kind::ObjectStorage => OBJECT_STORAGE_SEMANTICS,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Database => "database",
            Kind::ObjectStorage => "object storage",
        })
    }
}

/// A delivery's settings, by kind (stored as the JSON of the inner struct).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "DeliveryOptions")]
pub enum Options {
    Database(JdbcOptions),
    ObjectStorage(ObjectStorageOptions),
}

impl Options {
    fn error_policy(&self) -> (&str, Option<&String>) {
        match self {
            Options::Database(o) => (&o.error_policy, o.dead_letter_topic.as_ref()),
            Options::ObjectStorage(o) => (&o.error_policy, o.dead_letter_topic.as_ref()),
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Delivery {
    pub id: String,
    pub name: String,
    pub pipeline_id: String,
    pub destination_connection_id: String,
    pub connect_cluster_id: String,
    pub kind: Kind,
    pub topics: Vec<String>,
    /// The delivery's settings, as stored, by its `kind`.
    #[schemars(with = "Options")]
    pub options: serde_json::Value,
    pub connector_id: String,
    /// The sink's consumer group: Connect names it after the connector.
    pub consumer_group: String,
    pub created_at: String,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    name: String,
    pipeline_id: String,
    destination_connection_id: String,
    connect_cluster_id: String,
    kind: String,
    topics: String,
    options: String,
    connector_id: String,
    created_at: String,
}

pub fn connector_name(delivery_name: &str) -> String {
    format!(
        "cluecdc-deliver-{}",
        connections::settings::slug(delivery_name).replace('_', "-")
    )
}

impl From<Row> for Delivery {
    fn from(r: Row) -> Self {
        Delivery {
            topics: serde_json::from_str(&r.topics).unwrap_or_default(),
            options: serde_json::from_str(&r.options).unwrap_or_default(),
            consumer_group: format!("connect-{}", connector_name(&r.name)),
            id: r.id,
            name: r.name,
            pipeline_id: r.pipeline_id,
            destination_connection_id: r.destination_connection_id,
            connect_cluster_id: r.connect_cluster_id,
            kind: if r.kind == "object_storage" {
                Kind::ObjectStorage
            } else {
                Kind::Database
            },
            connector_id: r.connector_id,
            created_at: r.created_at,
        }
    }
}

const SELECT: &str = "SELECT id, name, pipeline_id, destination_connection_id, connect_cluster_id, kind, topics, options, connector_id, created_at FROM deliveries";

pub async fn load(pool: &Pool, id: &str) -> Result<Delivery> {
    let row: Option<Row> = db::query_as(&format!("{SELECT} WHERE id = $1 OR name = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.map(Delivery::from)
        .ok_or_else(|| Error::NotFound(format!("delivery {id}")))
}

pub async fn list(pool: &Pool, who: &Principal) -> Result<Vec<Delivery>> {
    who.require(Role::Viewer, "see deliveries")?;
    let rows: Vec<Row> = db::query_as(&format!("{SELECT} ORDER BY name"))
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(Delivery::from).collect())
}

/// One page of deliveries: `q` matches the name, `state` its connector's phase (UNKNOWN when
/// the connector is gone), `cluster` the Connect cluster's id or name.
pub async fn page(ctx: &Ctx, who: &Principal, w: &Window) -> Result<Page<Delivery>> {
    let pool = &ctx.pool;
    who.require(Role::Viewer, "see deliveries")?;
    let ids = listing::page_ids(
        pool,
        &ListSql {
            with: crate::connectors::PHASES,
            from: "deliveries d JOIN connect_clusters dc ON dc.id = d.connect_cluster_id LEFT JOIN phases ph ON ph.id = d.connector_id",
            id: "d.id",
            name: "d.name",
            order: "d.name",
            state: "COALESCE(ph.phase, 'UNKNOWN')",
            cluster: Some(("d.connect_cluster_id", "dc.name")),
        },
        w,
    )
    .await?;
    let rows = listing::rows_by_id::<Row, String>(pool, SELECT, "id", &ids.items)
        .await?
        .into_iter()
        .map(Delivery::from)
        .collect();
    let items = listing::in_order(&ids.items, rows, |d: &Delivery| d.id.clone());
    Ok(ids.with_items(items))
}

/// Everything checked; what would be deployed. Creates nothing.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "DeliveryPreview")]
pub struct Preview {
    pub kind: Kind,
    pub connector_name: String,
    pub connector_class: String,
    /// The sink plugin's version on the chosen Connect cluster.
    pub plugin_version: String,
    /// The config Connect will store: credentials only as `${cluecdc:…}` references.
    pub config: std::collections::BTreeMap<String, String>,
    /// The plugin's refusals (and keys it does not define), by config key.
    pub validation_errors: std::collections::BTreeMap<String, Vec<String>>,
    pub topics: Vec<String>,
    /// The destination's connection test, run now.
    pub destination_checks: Vec<connections::Check>,
    /// Object storage: the key a file of the first topic would get now.
    pub example_key: Option<String>,
    /// What this delivery promises, in plain words.
    pub statements: Vec<&'static str>,
    /// Database deliveries: what in destination tables that exist already would break it
    /// (missing key columns, narrower types, NOT NULL columns the source lacks); also listed
    /// as a warning among `destination_checks`.
    pub schema_mismatches: Vec<String>,
}

impl Preview {
    /// Deployable: the plugin accepts the config and the destination passed its test.
    pub fn ok(&self) -> bool {
        self.validation_errors.is_empty()
            && self
                .destination_checks
                .iter()
                .all(|k| k.status != CheckStatus::Fail)
    }
}

pub const OBJECT_STORAGE_STATEMENTS: &[&str] = &[
    "Raw CDC export: every change event (snapshot reads r, creates c, updates u, deletes d and the tombstone after each delete) is written as it is, one JSON line with key, value, offset and timestamp; value is the untouched Debezium envelope. It is not a current-state copy of the tables.",
    "At least once: after a restart, a worker failure or a retry, some records are written again into new objects.",
    "Deduplicate by topic, partition and offset: each object key carries the topic, partition and start offset, and each line its offset. After a Connect worker crash the capture connector may also send changes again at new offsets (the same source position: LSN and operation in PostgreSQL, binlog file and position in MySQL/MariaDB), so consumers that need each change once also compare value.source.",
    "No exactly-once export is claimed.",
    "Objects are written when records_per_file records have gathered for one file, or at each offset commit of the Connect worker (offset.flush.interval.ms, a worker setting; 60 s by default). Fewer, larger objects mean later data; low-volume topics wait for the flush.",
];

struct Checked {
    name: String,
    pipeline: pipelines::Pipeline,
    cluster: crate::clusters::ConnectCluster,
    dest: connections::Connection,
    topics: Vec<String>,
    options: Options,
}

impl Checked {
    fn kind(&self) -> Kind {
        Kind::of(self.dest.provider)
    }
}

async fn check(pool: &Pool, who: &Principal, input: &DeliveryInput) -> Result<Checked> {
    let mut errors = FieldErrors::new();
    let name = input.name.clone().unwrap_or_default().trim().to_string();
    if let Err(why) = connections::validate_name(&name) {
        errors.insert("name".into(), why);
    }
    let pipeline = pipelines::load(pool, input.pipeline_id.as_deref().unwrap_or(""))
        .await
        .ok();
    if pipeline.is_none() {
        errors.insert("pipeline_id".into(), "no pipeline has this id".into());
    }
    let dest = match connections::load(
        pool,
        input.destination_connection_id.as_deref().unwrap_or(""),
    )
    .await
    {
        Ok(c) if !c.capabilities.contains(&Capability::Destination) => {
            errors.insert(
                "destination_connection_id".into(),
                format!("{} is not a DESTINATION connection", c.name),
            );
            None
        }
        Ok(c) if c.unverified_tls() => {
            errors.insert(
                "destination_connection_id".into(),
                format!("{}: {}", c.name, connections::settings::UNVERIFIED_WARNING),
            );
            None
        }
        Ok(c) => Some(c),
        Err(_) => {
            errors.insert(
                "destination_connection_id".into(),
                "no connection has this id".into(),
            );
            None
        }
    };
    let cluster_id = input
        .connect_cluster_id
        .clone()
        .or_else(|| pipeline.as_ref().map(|p| p.connect_cluster_id.clone()))
        .unwrap_or_default();
    let cluster = crate::clusters::get(pool, who, &cluster_id).await.ok();
    match &cluster {
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
    let available = match &pipeline {
        Some(p) => topics_of(pool, p).await,
        None => vec![],
    };
    let topics = input.topics.clone().unwrap_or_else(|| available.clone());
    if topics.is_empty() {
        errors.insert(
            "topics".into(),
            "choose at least one of the pipeline's topics".into(),
        );
    } else if let Some(t) = topics.iter().find(|t| !available.contains(t)) {
        errors.insert(
            "topics".into(),
            format!(
                "{t} is not a table topic of this pipeline; choose from {}",
                available.join(", ")
            ),
        );
    }
    // Without a valid destination the kind is unknown: check the options of the kind the
    // input's fields suggest, so that their errors show at once too.
    let kind = dest.as_ref().map(|d| Kind::of(d.provider)).unwrap_or(
        if input.key_template.is_some() || input.compression.is_some() {
            Kind::ObjectStorage
        } else {
            Kind::Database
        },
    );
    let options = options_of(kind, input, &mut errors);
    if let (Options::ObjectStorage(o), Some(s)) =
        (&options, dest.as_ref().and_then(|d| d.object_storage()))
    {
        // S3 keys are at most 1024 bytes; the longest topic makes the longest key.
        let now = chrono::Utc::now();
        if let Some(key) = topics
            .iter()
            .map(|t| config::example_key(&s.prefix, o, t, now))
            .max_by_key(String::len)
            .filter(|k| k.len() > 1024)
        {
            errors.insert(
                "key_template".into(),
                format!("keys would be up to {} bytes, over the 1024 bytes S3 allows; shorten the template or the connection's prefix", key.len()),
            );
        }
    }
    Error::check(errors)?;
    let (Some(pipeline), Some(cluster), Some(dest)) = (pipeline, cluster, dest) else {
        return Err(Error::Unexpected(anyhow::anyhow!(
            "checked input lost a reference"
        )));
    };
    Ok(Checked {
        name,
        pipeline,
        cluster,
        dest,
        topics,
        options,
    })
}

/// A kind's options from the input, with their defaults and the error-policy rules; the
/// fields of the other kind are refused.
fn options_of(kind: Kind, input: &DeliveryInput, errors: &mut FieldErrors) -> Options {
    let options = match kind {
        Kind::Database => Options::Database(database_options(input, errors)),
        Kind::ObjectStorage => Options::ObjectStorage(object_storage_options(input, errors)),
    };
    if let Some(p) = input.schema_policy.as_deref() {
        if !["warn", "pause"].contains(&p) {
            errors.insert(
                "schema_policy".into(),
                crate::tables::schema::POLICY_HELP.into(),
            );
        }
    }
    let (policy, dlq) = options.error_policy();
    if !["fail", "continue"].contains(&policy) {
        errors.insert(
            "error_policy".into(),
            "fail (default: stop at a bad record) or continue (skip it, an explicit choice)".into(),
        );
    }
    if let Some(dlq) = dlq {
        if policy != "continue" {
            errors.insert(
                "dead_letter_topic".into(),
                "only with error_policy continue: with fail, nothing is skipped".into(),
            );
        } else if let Err(why) = crate::kafka::check_topic_name(dlq) {
            errors.insert("dead_letter_topic".into(), why);
        }
    }
    options
}

/// The options as stored (defaults filled in), or the field errors `create` would give: the
/// declarative plan normalizes with it.
pub fn normalize_options(
    kind: Kind,
    input: &DeliveryInput,
) -> std::result::Result<serde_json::Value, FieldErrors> {
    let mut errors = FieldErrors::new();
    let options = options_of(kind, input, &mut errors);
    if errors.is_empty() {
        Ok(json!(options))
    } else {
        Err(errors)
    }
}

/// The topics a delivery of this pipeline may read: its table topics and its heartbeat topic.
pub async fn topics_of(pool: &Pool, p: &pipelines::Pipeline) -> Vec<String> {
    let mut available: Vec<String> = p
        .tables
        .iter()
        .map(|t| table_topic(&p.topic_prefix, t))
        .collect();
    if let Ok(source) = connections::load(pool, &p.source_connection_id).await {
        available.extend(p.heartbeat_topic(&source));
    }
    available
}

/// Fields of the other kind are refused rather than ignored: the user meant something by them.
fn refuse_fields(errors: &mut FieldErrors, given: &[(&str, bool)], kind: &str) {
    for (field, set) in given {
        if *set {
            errors.insert(
                (*field).into(),
                format!("only for {kind} deliveries; remove it or choose a matching destination"),
            );
        }
    }
}

fn database_options(input: &DeliveryInput, errors: &mut FieldErrors) -> JdbcOptions {
    refuse_fields(
        errors,
        &[
            ("format", input.format.is_some()),
            ("compression", input.compression.is_some()),
            ("records_per_file", input.records_per_file.is_some()),
            ("flush_interval_ms", input.flush_interval_ms.is_some()),
            ("tasks", input.tasks.is_some()),
            ("key_template", input.key_template.is_some()),
        ],
        "object-storage",
    );
    let d = JdbcOptions::default();
    let options = JdbcOptions {
        insert_mode: input.insert_mode.clone().unwrap_or(d.insert_mode),
        delete_enabled: input.delete_enabled.unwrap_or(d.delete_enabled),
        table_name_format: input
            .table_name_format
            .clone()
            .unwrap_or(d.table_name_format),
        schema_evolution: input.schema_evolution.clone().unwrap_or(d.schema_evolution),
        error_policy: input.error_policy.clone().unwrap_or(d.error_policy),
        dead_letter_topic: input.dead_letter_topic.clone().filter(|t| !t.is_empty()),
        schema_policy: input.schema_policy.clone().unwrap_or(d.schema_policy),
    };
    if !["insert", "upsert", "update"].contains(&options.insert_mode.as_str()) {
        errors.insert(
            "insert_mode".into(),
            "choose insert, upsert (default: replays are harmless) or update".into(),
        );
    }
    if !["none", "basic"].contains(&options.schema_evolution.as_str()) {
        errors.insert(
            "schema_evolution".into(),
            "basic (create missing tables and columns) or none (tables must exist)".into(),
        );
    }
    if options.table_name_format.trim().is_empty() || options.table_name_format.len() > 200 {
        errors.insert(
            "table_name_format".into(),
            "e.g. ${source.table}, or a literal name; at most 200 characters".into(),
        );
    }
    options
}

pub const MAX_RECORDS_PER_FILE: u64 = 1_000_000;
pub const MAX_TASKS: u64 = 64;

fn object_storage_options(input: &DeliveryInput, errors: &mut FieldErrors) -> ObjectStorageOptions {
    refuse_fields(
        errors,
        &[
            ("insert_mode", input.insert_mode.is_some()),
            ("delete_enabled", input.delete_enabled.is_some()),
            ("table_name_format", input.table_name_format.is_some()),
            ("schema_evolution", input.schema_evolution.is_some()),
        ],
        "database",
    );
    if input.flush_interval_ms.is_some() {
        errors.insert(
            "flush_interval_ms".into(),
            "the S3 sink has no per-connector flush setting: objects are written at each offset commit of the Connect worker (offset.flush.interval.ms, set on the workers) or when records_per_file is reached; remove this field".into(),
        );
    }
    let d = ObjectStorageOptions::default();
    let records_per_file = input
        .records_per_file
        .unwrap_or(u64::from(d.records_per_file));
    if !(1..=MAX_RECORDS_PER_FILE).contains(&records_per_file) {
        errors.insert(
            "records_per_file".into(),
            format!(
                "a whole number from 1 to {MAX_RECORDS_PER_FILE}; default {}",
                d.records_per_file
            ),
        );
    }
    let tasks = input.tasks.unwrap_or(u64::from(d.tasks));
    if !(1..=MAX_TASKS).contains(&tasks) {
        errors.insert(
            "tasks".into(),
            format!("a whole number from 1 to {MAX_TASKS}; more tasks than the topics' partitions stay idle"),
        );
    }
    let options = ObjectStorageOptions {
        format: input.format.clone().unwrap_or(d.format),
        compression: input.compression.clone().unwrap_or(d.compression),
        records_per_file: u32::try_from(records_per_file).unwrap_or(d.records_per_file),
        tasks: u32::try_from(tasks).unwrap_or(d.tasks),
        key_template: input
            .key_template
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .unwrap_or(d.key_template),
        error_policy: input.error_policy.clone().unwrap_or(d.error_policy),
        dead_letter_topic: input.dead_letter_topic.clone().filter(|t| !t.is_empty()),
        schema_policy: input.schema_policy.clone().unwrap_or(d.schema_policy),
    };
    if options.format != "jsonl" {
        errors.insert(
            "format".into(),
            "jsonl (JSON Lines: key, value, offset and timestamp per record) is the one format ClueCDC writes".into(),
        );
    }
    if !["gzip", "none"].contains(&options.compression.as_str()) {
        errors.insert(
            "compression".into(),
            "gzip (default, .jsonl.gz) or none (.jsonl)".into(),
        );
    }
    if let Err(why) = config::check_key_template(&options.key_template) {
        errors.insert("key_template".into(), why);
    }
    options
}

/// Builds the sink config of a checked input (pure but for the secret store's field list).
async fn config_of(store: &SecretStore, c: &Checked) -> Result<config::Config> {
    Ok(match &c.options {
        Options::Database(o) => jdbc(&c.dest, &c.topics, o),
        Options::ObjectStorage(o) => {
            let fields = store.fields_set(&c.dest.secret_ref).await?;
            config::s3(
                &c.dest,
                &c.topics,
                o,
                fields.iter().any(|f| f == "session_token"),
            )
        }
    })
}

/// The plugin on the cluster, its validation of the config, and the destination's test.
async fn preview_of(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    c: &Checked,
) -> Result<Preview> {
    let kind = c.kind();
    let class = kind.sink_class();
    let config = config_of(store, c).await?;
    let name = connector_name(&c.name);
    let client = crate::clusters::connect::client_for(store, &c.cluster).await?;
    let plugins = client
        .plugins()
        .await
        .map_err(|e| Error::Unavailable(format!("cannot read Connect's plugins: {e}")))?;
    let Some(plugin) = plugins.iter().find(|p| p.class == class) else {
        let what = match kind {
            Kind::Database => "the Debezium JDBC sink",
            Kind::ObjectStorage => "the Aiven S3 sink",
        };
        return Err(Error::field(
            "connect_cluster_id",
            format!(
                "{what} plugin ({class}) is not installed on {}; install it on every worker",
                c.cluster.name
            ),
        ));
    };
    let mut with_name = config.clone();
    with_name.insert("name".into(), name.clone());
    crate::secrets::resolve::grant_for_validation(store.pool(), &c.cluster.id, &config).await?;
    let mut validation_errors = client
        .validate(class, &with_name)
        .await
        .map_err(|e| Error::Unavailable(format!("cannot validate with Connect: {e}")))?;
    if let Some(why) = validation_errors.get_mut("aws.session.token") {
        *why = vec![format!("the S3 sink {} has no session-token setting, so temporary credentials cannot be handed to it: rotate the connection to long-lived keys scoped to the bucket", plugin.version)];
    }
    let mut destination_checks = connections::test(pool, store, who, &c.dest.id)
        .await?
        .checks;
    if let (Options::ObjectStorage(o), Some(s)) = (&c.options, c.dest.object_storage()) {
        let passed = destination_checks
            .iter()
            .all(|k| k.status != CheckStatus::Fail);
        if let (true, Some(longest)) = (
            passed,
            config::longest_key(&s.prefix, o, &c.topics, chrono::Utc::now()),
        ) {
            let secrets = store.get_all(&c.dest.secret_ref).await?;
            destination_checks.push(
                crate::connections::s3::long_key_check(s, &secrets, longest.len(), &longest).await,
            );
        }
    }
    let mut schema_mismatches = Vec::new();
    if let Options::Database(o) = &c.options {
        let source = connections::load(pool, &c.pipeline.source_connection_id).await?;
        let hint = "change or drop those destination tables, or choose another table_name_format, before the delivery writes to them";
        match crate::tables::schema::preview_mismatches(
            store,
            &source,
            &c.dest,
            &c.pipeline,
            &c.topics,
            &o.table_name_format,
        )
        .await
        {
            Ok(m) if m.is_empty() => {}
            Ok(m) => {
                destination_checks.push(connections::Check::warn(
                    "existing destination tables",
                    m.join("; "),
                    hint,
                ));
                schema_mismatches = m;
            }
            Err(e) => destination_checks.push(connections::Check::warn(
                "existing destination tables",
                format!("not compared with the source: {e}"),
                hint,
            )),
        }
    }
    let example_key = match (&c.options, c.dest.object_storage(), c.topics.first()) {
        (Options::ObjectStorage(o), Some(s), Some(topic)) => {
            Some(config::example_key(&s.prefix, o, topic, chrono::Utc::now()))
        }
        _ => None,
    };
    Ok(Preview {
        kind,
        connector_name: name,
        connector_class: class.into(),
        plugin_version: plugin.version.clone(),
        config,
        validation_errors,
        topics: c.topics.clone(),
        destination_checks,
        example_key,
        statements: match kind {
            Kind::Database => vec![SEMANTICS],
            Kind::ObjectStorage => OBJECT_STORAGE_STATEMENTS.to_vec(),
        },
        schema_mismatches,
    })
}

pub async fn preview(ctx: &Ctx, who: &Principal, input: &DeliveryInput) -> Result<Preview> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Operator, "create deliveries")?;
    let c = check(pool, who, input).await?;
    preview_of(pool, store, who, &c).await
}

/// Checks the destination (a database reachable and writable; a bucket that takes, returns and
/// deletes a probe) and the config with the plugin, then records the desired sink connector.
/// Nothing is deployed when a check fails.
pub async fn create(ctx: &Ctx, who: &Principal, input: &DeliveryInput) -> Result<Delivery> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    who.require(Role::Operator, "create deliveries")?;
    let c = check(pool, who, input).await?;
    if db::query_scalar::<i64>("SELECT COUNT(*) FROM deliveries WHERE name = $1")
        .bind(&c.name)
        .fetch_one(pool)
        .await?
        > 0
    {
        return Err(Error::Conflict(format!(
            "a delivery named {:?} already exists",
            c.name
        )));
    }
    // A cluster whose workers cannot resolve references would run it without credentials.
    crate::clusters::provider_check::gate(pool, store, &c.cluster, None).await?;
    let preview = accepted_preview(pool, store, who, &c).await?;
    ensure_dead_letter_topic(pool, store, who, &c).await?;
    let id = format!("dl_{}", uuid::Uuid::new_v4().simple());
    let connector_id = format!("cn_{}", uuid::Uuid::new_v4().simple());
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    audit::record(&mut tx, Entry { actor: who.into(), action: "delivery.create", target_kind: "delivery", target_id: &id, outcome: Outcome::Success, summary: json!({"name": c.name, "kind": c.kind(), "pipeline": c.pipeline.name, "destination": c.dest.name, "topics": c.topics, "options": c.options}) }).await?;
    connectors::insert(
        &mut tx,
        &connectors::NewConnector {
            id: &connector_id,
            name: &preview.connector_name,
            cluster_id: &c.cluster.id,
            config: &preview.config,
            state: DesiredState::Running,
            owner: Some(("delivery", &id)),
        },
    )
    .await?;
    db::query("INSERT INTO deliveries (id, name, pipeline_id, destination_connection_id, connect_cluster_id, kind, topics, options, connector_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)")
        .bind(&id)
        .bind(&c.name)
        .bind(&c.pipeline.id)
        .bind(&c.dest.id)
        .bind(&c.cluster.id)
        .bind(c.kind().column())
        .bind(json!(c.topics).to_string())
        .bind(json!(c.options).to_string())
        .bind(&connector_id)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    load(pool, &id).await
}

/// The preview, when the destination passed its test and the sink plugin accepts the config;
/// a refusal names the failed checks or each refused config key.
async fn accepted_preview(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    c: &Checked,
) -> Result<Preview> {
    let preview = preview_of(pool, store, who, c).await?;
    let failed: Vec<String> = preview
        .destination_checks
        .iter()
        .filter(|k| k.status == CheckStatus::Fail)
        .map(|k| {
            format!(
                "{}: {}{}",
                k.name,
                k.message,
                k.hint
                    .as_deref()
                    .map(|h| format!(" (fix: {h})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if !failed.is_empty() {
        return Err(Error::field(
            "destination_connection_id",
            format!("the destination check failed: {}", failed.join("; ")),
        ));
    }
    if !preview.validation_errors.is_empty() {
        let fields: FieldErrors = preview
            .validation_errors
            .iter()
            .map(|(k, v)| (format!("config.{k}"), v.join("; ")))
            .collect();
        return Err(Error::Invalid {
            message: "the sink plugin refused the config".into(),
            fields,
        });
    }
    Ok(preview)
}

/// Creates the dead-letter topic when one is configured (an existing one is fine).
async fn ensure_dead_letter_topic(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    c: &Checked,
) -> Result<()> {
    if let (_, Some(dlq)) = c.options.error_policy() {
        let kafka = crate::clusters::kafka::get(pool, who, &c.pipeline.kafka_cluster_id).await?;
        let access = crate::clusters::kafka::access(store, &kafka).await?;
        let spec = crate::kafka::TopicSpec {
            name: dlq.clone(),
            partitions: 1,
            replication_factor: c.pipeline.replication_factor as i32,
            configs: [("cleanup.policy".to_string(), "delete".to_string())].into(),
        };
        if let Err(e) = crate::kafka::create_topic(&access, &spec).await {
            if !crate::kafka::already_exists(&e) {
                return Err(Error::Unavailable(format!(
                    "creating the dead-letter topic {dlq}: {e}"
                )));
            }
        }
    }
    Ok(())
}

/// The stored settings with a patch's fields laid over them; the identity fields stay.
fn merged(d: &Delivery, patch: &DeliveryInput) -> DeliveryInput {
    let mut input = DeliveryInput {
        name: Some(d.name.clone()),
        pipeline_id: Some(d.pipeline_id.clone()),
        destination_connection_id: Some(d.destination_connection_id.clone()),
        connect_cluster_id: Some(d.connect_cluster_id.clone()),
        topics: Some(patch.topics.clone().unwrap_or_else(|| d.topics.clone())),
        ..patch.clone()
    };
    match d.kind {
        Kind::Database => {
            let o: JdbcOptions = serde_json::from_value(d.options.clone()).unwrap_or_default();
            input.insert_mode = patch.insert_mode.clone().or(Some(o.insert_mode));
            input.delete_enabled = patch.delete_enabled.or(Some(o.delete_enabled));
            input.table_name_format = patch
                .table_name_format
                .clone()
                .or(Some(o.table_name_format));
            input.schema_evolution = patch.schema_evolution.clone().or(Some(o.schema_evolution));
            input.error_policy = patch.error_policy.clone().or(Some(o.error_policy));
            input.dead_letter_topic = patch.dead_letter_topic.clone().or(o.dead_letter_topic);
            input.schema_policy = patch.schema_policy.clone().or(Some(o.schema_policy));
        }
        Kind::ObjectStorage => {
            let o: ObjectStorageOptions =
                serde_json::from_value(d.options.clone()).unwrap_or_default();
            input.format = patch.format.clone().or(Some(o.format));
            input.compression = patch.compression.clone().or(Some(o.compression));
            input.records_per_file = patch
                .records_per_file
                .or(Some(u64::from(o.records_per_file)));
            input.tasks = patch.tasks.or(Some(u64::from(o.tasks)));
            input.key_template = patch.key_template.clone().or(Some(o.key_template));
            input.error_policy = patch.error_policy.clone().or(Some(o.error_policy));
            input.dead_letter_topic = patch.dead_letter_topic.clone().or(o.dead_letter_topic);
            input.schema_policy = patch.schema_policy.clone().or(Some(o.schema_policy));
        }
    }
    input
}

/// A change checked as `update` checks it (the plugin's validation and the destination's test
/// included), without storing anything.
async fn checked_update(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    patch: &DeliveryInput,
) -> Result<(Delivery, Checked, Preview)> {
    who.require(Role::Operator, "change deliveries")?;
    let d = load(pool, id).await?;
    crate::operations::refuse_if_held(pool, &d.connector_id, "change the delivery").await?;
    let mut errors = FieldErrors::new();
    for (field, given, current) in [
        ("name", &patch.name, &d.name),
        ("pipeline_id", &patch.pipeline_id, &d.pipeline_id),
        (
            "destination_connection_id",
            &patch.destination_connection_id,
            &d.destination_connection_id,
        ),
        (
            "connect_cluster_id",
            &patch.connect_cluster_id,
            &d.connect_cluster_id,
        ),
    ] {
        if given.as_ref().is_some_and(|g| g != current) {
            errors.insert(
                field.into(),
                "cannot change on an existing delivery; create a new delivery instead".into(),
            );
        }
    }
    Error::check(errors)?;
    let c = check(pool, who, &merged(&d, patch)).await?;
    let preview = accepted_preview(pool, store, who, &c).await?;
    Ok((d, c, preview))
}

/// What `update` would deploy, checked the same way; changes nothing.
pub async fn preview_update(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    patch: &DeliveryInput,
) -> Result<Preview> {
    Ok(checked_update(pool, store, who, id, patch).await?.2)
}

/// Changes a delivery's topics or settings: the new sink config is validated by the plugin,
/// then becomes the connector's next generation (the reconciler applies it). The pipeline,
/// destination, cluster and name stay: those make a new delivery.
pub async fn update(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    patch: &DeliveryInput,
) -> Result<Delivery> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    let (d, c, preview) = checked_update(pool, store, who, id, patch).await?;
    ensure_dead_letter_topic(pool, store, who, &c).await?;
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "delivery.update",
            target_kind: "delivery",
            target_id: id,
            outcome: Outcome::Success,
            summary: json!({"name": d.name, "topics": c.topics, "options": c.options}),
        },
    )
    .await?;
    db::query("UPDATE deliveries SET topics = $1, options = $2, updated_at = $3 WHERE id = $4")
        .bind(json!(c.topics).to_string())
        .bind(json!(c.options).to_string())
        .bind(crate::time::now())
        .bind(id)
        .execute(&mut *tx)
        .await?;
    db::query("UPDATE connectors SET config = $1, generation = generation + 1, updated_at = $2 WHERE id = $3").bind(json!(preview.config).to_string()).bind(crate::time::now()).bind(&d.connector_id).execute(&mut *tx).await?;
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    load(pool, id).await
}

/// What `POST /api/v1/deliveries/{id}/<action>` and the page buttons ask: restart, pause or
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
    who.require(Role::Operator, "pause or resume deliveries")?;
    let d = load(pool, id).await?;
    let view = connectors::set_state(pool, wake, who, &d.connector_id, state).await?;
    // A person resuming it has dealt with its open schema changes (the guard paused it, or
    // warned): their tables' current versions become its baseline.
    if state == DesiredState::Running {
        crate::tables::schema::accept(pool, &d.id).await?;
    }
    Ok(view)
}

pub async fn restart(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    only_failed: bool,
) -> Result<ConnectorView> {
    who.require(Role::Operator, "restart deliveries")?;
    let d = load(pool, id).await?;
    connectors::request_restart(pool, wake, who, &d.connector_id, only_failed).await
}

pub async fn delete(ctx: &Ctx, who: &Principal, id: &str) -> Result<()> {
    let pool = &ctx.pool;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    who.require(Role::Operator, "delete deliveries")?;
    let d = load(pool, id).await?;
    crate::operations::refuse_if_held(pool, &d.connector_id, "delete the delivery").await?;
    let mut tx = pool.begin().await?;
    let op = crate::operations::insert(
        &mut tx,
        who,
        crate::operations::NewOperation {
            kind: "delivery_delete",
            target_kind: "delivery",
            target_id: &d.id,
            target_name: &d.name,
            params: json!({"connector_id": d.connector_id}),
        },
    )
    .await?;
    db::query("UPDATE connectors SET desired_state = 'deleted', generation = generation + 1, updated_at = $1 WHERE id = $2")
        .bind(crate::time::now())
        .bind(&d.connector_id)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "delivery.delete",
            target_kind: "delivery",
            target_id: &d.id,
            outcome: Outcome::Success,
            summary: json!({"name": d.name, "operation_id": op}),
        },
    )
    .await?;
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    crate::operations::delete_finished(pool, &op, "the sink connector").await?;
    Ok(())
}

/// The steps of a delivery delete: wait until the reconciler has removed the connector, then
/// forget the delivery and its offset history.
pub async fn delete_step(
    ctx: &crate::operations::Ctx<'_>,
    op: &crate::operations::Operation,
) -> crate::operations::Step {
    use crate::operations::Step;
    let connector_id = op.params["connector_id"].as_str().unwrap_or_default();
    match op.step.as_str() {
        "remove" => match crate::operations::connector_gone(&ctx.pool, connector_id).await {
            Ok(true) => Step::Next("forget"),
            Ok(false) => Step::Wait(
                "waiting for the reconciler to remove the sink connector from Connect".into(),
            ),
            Err(e) => Step::Wait(e.to_string()),
        },
        "forget" => {
            let forget = async {
                let mut tx = ctx.pool.begin().await?;
                db::query("DELETE FROM offset_history WHERE target_id = $1")
                    .bind(&op.target_id)
                    .execute(&mut *tx)
                    .await?;
                // Its destination tables' schema versions (its verdicts and baselines go with
                // the row, by foreign key).
                db::query(
                    "DELETE FROM schema_versions WHERE side = 'destination' AND owner_id = $1",
                )
                .bind(&op.target_id)
                .execute(&mut *tx)
                .await?;
                db::query("DELETE FROM deliveries WHERE id = $1")
                    .bind(&op.target_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await
            };
            match forget.await {
                Ok(()) => Step::Done,
                Err(e) => Step::Wait(e.to_string()),
            }
        }
        other => Step::Fail(format!("unknown step {other}")),
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "DeliveryDetail")]
pub struct Detail {
    pub delivery: Delivery,
    pub connector: Option<ConnectorView>,
    /// Age of the newest heartbeat found in the destination: how current its data is, measured
    /// at the destination itself. None without a heartbeat or before the first arrives.
    pub freshness_secs: Option<f64>,
    /// The source time that newest heartbeat carries (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub current_as_of: Option<String>,
    /// Consumer-group lag per partition: end offset minus the group's committed offset.
    pub lag: Vec<crate::kafka::PartitionLag>,
    /// Lag in time: the age of the oldest record the delivery has not consumed yet (0 when it
    /// has consumed everything; None when the lag could not be read).
    pub lag_secs: Option<f64>,
    pub lag_error: Option<String>,
    /// Plain words about what this delivery promises.
    pub semantics: &'static str,
    /// Per table of the pipeline this delivery takes: its lag in records (the group's lag per
    /// partition summed per table topic) and in time (from the monitor's end-offset marks, no
    /// record read; see [`crate::tables::freshness::DeliveryTable`]). Empty when the lag could
    /// not be read.
    pub tables: Vec<crate::tables::freshness::DeliveryTable>,
    /// When the sink has failed and a schema change of one of its tables explains it: which
    /// change, and what the sink does with it (`tables::schema`).
    pub schema_failure: Option<String>,
}

pub const SEMANTICS: &str = "At-least-once: after a restart or a retry some records are written again. Upserts by primary key make replays harmless for rows; deletes are applied by key.";
pub const OBJECT_STORAGE_SEMANTICS: &str = "Raw CDC export, at least once: after a restart or a retry some records are written again into new objects, so deduplicate by topic, partition and offset. No exactly-once export is claimed. Deleting this delivery never deletes its objects.";

pub async fn detail(ctx: &Ctx, who: &Principal, id: &str) -> Result<Detail> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Viewer, "see deliveries")?;
    let d = load(pool, id).await?;
    let connector = connectors::get(pool, who, &d.connector_id).await.ok();
    let pipeline = pipelines::load(pool, &d.pipeline_id).await?;
    let kafka = crate::clusters::kafka::get(pool, who, &pipeline.kafka_cluster_id).await?;
    let access = crate::clusters::kafka::access(store, &kafka).await?;
    let (lag, lag_error) =
        match crate::kafka::group_lag(&access, &d.consumer_group, &d.topics).await {
            Ok(l) => (l, None),
            Err(e) => (vec![], Some(e)),
        };
    let lag_secs = if lag_error.is_none() {
        lag_in_time(&access, &lag).await
    } else {
        None
    };
    let newest = heartbeat_at(pool, store, &d, &pipeline).await?;
    let freshness_secs =
        newest.map(|ms| ((crate::reconcile::lease::now_ms() - ms).max(0) as f64) / 1000.0);
    let current_as_of = newest
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(crate::time::format);
    let tables = if lag_error.is_none() {
        crate::tables::freshness::delivery_tables(pool, &pipeline, &d.topics, &lag)
            .await
            .map_err(|e| tracing::warn!(error = %e, "per-table lag not read"))
            .unwrap_or_default()
    } else {
        vec![]
    };
    let failed = connector.as_ref().filter(|c| {
        c.phase == "FAILED"
            || c.observed_state.as_deref() == Some("FAILED")
            || c.tasks.iter().any(|t| t.state == "FAILED")
    });
    let schema_failure = match failed {
        Some(c) => {
            let trace = c
                .trace
                .clone()
                .or_else(|| c.tasks.iter().find_map(|t| t.trace.clone()));
            crate::tables::schema::failure_cause(pool, &d.id, trace.as_deref()).await?
        }
        None => None,
    };
    Ok(Detail {
        schema_failure,
        connector,
        freshness_secs,
        current_as_of,
        lag,
        lag_secs,
        lag_error,
        tables,
        semantics: d.kind.semantics(),
        delivery: d,
    })
}

/// The age of the oldest unconsumed record over the lagging partitions: the first record after
/// the committed offset is the one the sink has waited longest to write.
async fn lag_in_time(
    access: &crate::kafka::KafkaAccess,
    lag: &[crate::kafka::PartitionLag],
) -> Option<f64> {
    let at: Vec<crate::kafka::RecordAt> = lag
        .iter()
        .filter(|l| l.lag > 0)
        .map(|l| crate::kafka::RecordAt {
            topic: l.topic.clone(),
            partition: l.partition,
            offset: l.end_offset - l.lag,
        })
        .collect();
    let now = crate::reconcile::lease::now_ms();
    let times = crate::kafka::record_times(access, &at).await.ok()?;
    Some(
        times
            .into_iter()
            .flatten()
            .map(|ms| ((now - ms).max(0) as f64) / 1000.0)
            .fold(0.0, f64::max),
    )
}

/// Reads the newest heartbeat in the destination, when the pipeline has a heartbeat and the
/// delivery carries its topic: the newest row of the heartbeat table in a database (when the
/// table name can be told from the name format), the newest heartbeat line in the newest
/// objects of the heartbeat topic in object storage.
async fn heartbeat_at(
    pool: &Pool,
    store: &SecretStore,
    d: &Delivery,
    pipeline: &pipelines::Pipeline,
) -> Result<Option<i64>> {
    let source = connections::load(pool, &pipeline.source_connection_id).await?;
    let Some(topic) = pipeline.heartbeat_topic(&source) else {
        return Ok(None);
    };
    if !d.topics.contains(&topic) {
        return Ok(None);
    }
    let dest = connections::load(pool, &d.destination_connection_id).await?;
    match d.kind {
        Kind::Database => {
            let format = d.options["table_name_format"]
                .as_str()
                .unwrap_or("${source.table}");
            let table =
                format.replace("${source.table}", crate::pipelines::config::HEARTBEAT_TABLE);
            if table.contains("${") {
                return Ok(None);
            }
            crate::pipelines::source::newest_heartbeat(store, &dest, &table).await
        }
        Kind::ObjectStorage => {
            let Some(s) = dest.object_storage() else {
                return Ok(None);
            };
            let o: ObjectStorageOptions =
                serde_json::from_value(d.options.clone()).unwrap_or_default();
            let scope = config::topic_scope(&s.prefix, &o, &topic);
            objects::newest_heartbeat(store, &dest, &scope).await
        }
    }
}

/// The newest objects an object-storage delivery wrote, across its topics (metadata only).
pub async fn objects(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    limit: usize,
) -> Result<objects::ObjectList> {
    who.require(Role::Viewer, "see deliveries")?;
    let d = load(pool, id).await?;
    if d.kind != Kind::ObjectStorage {
        return Err(Error::Conflict(format!(
            "{} is a database delivery: it writes rows, not objects",
            d.name
        )));
    }
    if !(1..=1000).contains(&limit) {
        return Err(Error::field("limit", "a whole number from 1 to 1000"));
    }
    let dest = connections::load(pool, &d.destination_connection_id).await?;
    let Some(s) = dest.object_storage() else {
        return Err(Error::Unexpected(anyhow::anyhow!(
            "object-storage delivery {} has a database destination",
            d.id
        )));
    };
    let o: ObjectStorageOptions = serde_json::from_value(d.options.clone()).unwrap_or_default();
    let mut prefixes: Vec<String> = d
        .topics
        .iter()
        .map(|t| config::topic_scope(&s.prefix, &o, t))
        .collect();
    prefixes.sort();
    prefixes.dedup();
    // A scope that contains another lists its objects already.
    let nested: Vec<String> = prefixes
        .iter()
        .filter(|p| {
            prefixes
                .iter()
                .any(|q| q != *p && p.starts_with(q.as_str()))
        })
        .cloned()
        .collect();
    prefixes.retain(|p| !nested.contains(p));
    objects::newest(store, &dest, &prefixes, limit).await
}

/// Deliveries that read a pipeline's topics (to refuse deleting the pipeline under them).
pub async fn of_pipeline(pool: &Pool, pipeline_id: &str) -> Result<Vec<String>> {
    Ok(
        db::query_scalar("SELECT name FROM deliveries WHERE pipeline_id = $1 ORDER BY name")
            .bind(pipeline_id)
            .fetch_all(pool)
            .await?,
    )
}
