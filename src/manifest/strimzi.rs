//! Strimzi hand-over, both ways: every pipeline and delivery as a `KafkaConnector` (seed 004's
//! shape: class, tasksMax, state, config with secrets as config-provider references) and the
//! topics ClueCDC created as `KafkaTopic`s; and `KafkaConnector`s read back into the
//! declarative form, with what does not carry over reported by path.
//!
//! Invariants: the export holds no secret value (configs keep `${cluecdc:…}` references, which
//! a Strimzi Connect resolves with the same provider); annotations carry what a connector's
//! config does not (names of the ClueCDC resources, topic settings), so ClueCDC's own export
//! imports back to what it came from.

use crate::db;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::doc::{self, Problem, SecretSource};
use crate::auth::{Principal, Role};
use crate::error::Result;
use crate::kafka::TopicSpec;

pub const API_VERSION: &str = "kafka.strimzi.io/v1";
const A: &str = "cluecdc.io/";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectorSpec {
    pub class: String,
    pub tasks_max: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default)]
    pub config: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicResourceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    pub partitions: i32,
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource<S> {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: S,
}

/// What `cluecdc export --format strimzi` needs besides the stored setup.
#[derive(Debug, Clone)]
pub struct Target {
    pub namespace: String,
    /// The `KafkaConnect` resource the connectors belong to (`strimzi.io/cluster`).
    pub connect_cluster: String,
    /// The `Kafka` resource topics belong to; default: the ClueCDC Kafka cluster's name.
    pub kafka_cluster: Option<String>,
}

/// A Kubernetes resource name for `name` (lowercase letters, digits, '-' and '.', starting and
/// ending with a letter or digit): `name` itself when it is one, else a cleaned form with a
/// short hash of the original so that two names never clean to the same one.
pub fn k8s_name(name: &str) -> String {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !name.is_empty()
        && name.len() <= 253
        && name.chars().all(|c| ok(c) || c == '-' || c == '.')
        && name.starts_with(ok)
        && name.ends_with(ok)
    {
        return name.to_string();
    }
    use sha2::{Digest, Sha256};
    let cleaned: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if ok(c) || c == '.' { c } else { '-' })
        .collect();
    let cleaned = cleaned.trim_matches(|c: char| !ok(c));
    let hash = hex::encode(Sha256::digest(name.as_bytes()));
    let base: String = cleaned.chars().take(200).collect();
    if base.is_empty() {
        format!("x-{}", &hash[..8])
    } else {
        format!("{base}-{}", &hash[..8])
    }
}

/// One connector as exported: everything its resource holds.
#[derive(Debug, Clone)]
pub struct Connector {
    pub name: String,
    pub config: BTreeMap<String, String>,
    pub state: String,
    pub annotations: BTreeMap<String, String>,
}

fn connector_resource(
    c: &Connector,
    t: &Target,
    warnings: &mut Vec<String>,
) -> Resource<ConnectorSpec> {
    let mut config: BTreeMap<String, Value> = c
        .config
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let class = config
        .remove("connector.class")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let tasks_max = config
        .remove("tasks.max")
        .and_then(|v| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(1);
    config.remove("name");
    let name = k8s_name(&c.name);
    if name != c.name {
        warnings.push(format!("connector {:?} is named {name:?} under Strimzi (Kubernetes names are lowercase letters, digits, '-' and '.'); a source connector's offsets stay under its old name, so it snapshots again unless they are moved", c.name));
    }
    Resource {
        api_version: API_VERSION.into(),
        kind: "KafkaConnector".into(),
        metadata: Metadata {
            name,
            namespace: Some(t.namespace.clone()),
            labels: [("strimzi.io/cluster".to_string(), t.connect_cluster.clone())].into(),
            annotations: c.annotations.clone(),
        },
        spec: ConnectorSpec {
            class,
            tasks_max,
            state: Some(c.state.clone()),
            config,
        },
    }
}

fn topic_resource(s: &TopicSpec, t: &Target, kafka: &str) -> Resource<TopicResourceSpec> {
    let name = k8s_name(&s.name);
    Resource {
        api_version: API_VERSION.into(),
        kind: "KafkaTopic".into(),
        metadata: Metadata {
            name: name.clone(),
            namespace: Some(t.namespace.clone()),
            labels: [(
                "strimzi.io/cluster".to_string(),
                t.kafka_cluster.clone().unwrap_or_else(|| k8s_name(kafka)),
            )]
            .into(),
            annotations: BTreeMap::new(),
        },
        spec: TopicResourceSpec {
            topic_name: (name != s.name).then(|| s.name.clone()),
            partitions: s.partitions,
            replicas: s.replication_factor,
            config: s
                .configs
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        },
    }
}

/// Renders topics then connectors as one YAML stream, in a fixed order.
pub fn render(
    topics: &[(String, TopicSpec)],
    connectors: &[Connector],
    t: &Target,
) -> (String, Vec<String>) {
    let mut warnings = Vec::new();
    let mut docs: Vec<String> = Vec::new();
    let mut topics: Vec<&(String, TopicSpec)> = topics.iter().collect();
    topics.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    topics.dedup_by(|a, b| a.1.name == b.1.name);
    for (kafka, s) in topics {
        docs.push(serde_yaml::to_string(&topic_resource(s, t, kafka)).unwrap_or_default());
    }
    let mut connectors: Vec<&Connector> = connectors.iter().collect();
    connectors.sort_by(|a, b| a.name.cmp(&b.name));
    for c in connectors {
        docs.push(
            serde_yaml::to_string(&connector_resource(c, t, &mut warnings)).unwrap_or_default(),
        );
    }
    (docs.join("---\n"), warnings)
}

/// What a pipeline's config does not say: the names of the ClueCDC resources it uses, and the
/// settings of its topics.
pub fn pipeline_annotations(spec: &doc::Pipeline) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    a.insert(format!("{A}kind"), "pipeline".to_string());
    a.insert(format!("{A}name"), spec.name.clone());
    a.insert(format!("{A}source"), spec.source.clone());
    a.insert(format!("{A}kafka-cluster"), spec.kafka_cluster.clone());
    a.insert(format!("{A}connect-cluster"), spec.connect_cluster.clone());
    for (k, v) in [
        ("partitions", spec.partitions),
        ("replication-factor", spec.replication_factor),
        ("retention-ms", spec.retention_ms),
    ] {
        if let Some(v) = v {
            a.insert(format!("{A}{k}"), v.to_string());
        }
    }
    a
}

/// What a delivery's config does not say: the names it uses, and its key template on its own
/// (the config holds the connection's prefix and the extension around it).
pub fn delivery_annotations(spec: &doc::Delivery) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    a.insert(format!("{A}kind"), "delivery".to_string());
    a.insert(format!("{A}name"), spec.name.clone());
    a.insert(format!("{A}pipeline"), spec.pipeline.clone());
    a.insert(format!("{A}destination"), spec.destination.clone());
    if let Some(c) = &spec.connect_cluster {
        a.insert(format!("{A}connect-cluster"), c.clone());
    }
    if let Some(k) = &spec.options.key_template {
        a.insert(format!("{A}key-template"), k.clone());
    }
    a
}

/// Every pipeline and delivery of the stored setup as Strimzi resources.
pub async fn export(
    ctx: &crate::ctx::Ctx,
    who: &Principal,
    t: &Target,
) -> Result<(String, Vec<String>)> {
    who.require(Role::Admin, "export the configuration")?;
    let pool = &ctx.pool;
    let cur = super::export::current(ctx, who).await?;
    let configs: HashMap<String, String> =
        db::query_as::<(String, String)>("SELECT id, config FROM connectors")
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
    let config_of = |id: &str| -> BTreeMap<String, String> {
        configs
            .get(id)
            .and_then(|c| serde_json::from_str(c).ok())
            .unwrap_or_default()
    };
    let mut topics = Vec::new();
    let mut connectors = Vec::new();
    for p in crate::pipelines::list(pool, who).await? {
        let Some(spec) = cur.doc.pipelines.iter().find(|x| x.name == p.name) else {
            continue; // being deleted
        };
        let source = crate::connections::load(pool, &p.source_connection_id).await?;
        for s in crate::pipelines::topic_specs(&source, &crate::pipelines::TopicSettings::of(&p)) {
            topics.push((spec.kafka_cluster.clone(), s));
        }
        let annotations = pipeline_annotations(spec);
        connectors.push(Connector {
            name: crate::pipelines::connector_name(&p.topic_prefix),
            config: config_of(&p.connector_id),
            state: spec.state.clone(),
            annotations,
        });
    }
    let pipelines = crate::pipelines::list(pool, who).await?;
    for d in crate::deliveries::list(pool, who).await? {
        let Some(spec) = cur.doc.deliveries.iter().find(|x| x.name == d.name) else {
            continue;
        };
        let config = config_of(&d.connector_id);
        if let (Some(dlq), Some(p)) = (
            config.get("errors.deadletterqueue.topic.name"),
            pipelines.iter().find(|p| p.id == d.pipeline_id),
        ) {
            let kafka = cur
                .doc
                .pipelines
                .iter()
                .find(|x| x.name == p.name)
                .map(|x| x.kafka_cluster.clone())
                .unwrap_or_default();
            topics.push((
                kafka,
                TopicSpec {
                    name: dlq.clone(),
                    partitions: 1,
                    replication_factor: p.replication_factor as i32,
                    configs: [("cleanup.policy".to_string(), "delete".to_string())].into(),
                },
            ));
        }
        let annotations = delivery_annotations(spec);
        connectors.push(Connector {
            name: crate::deliveries::connector_name(&d.name),
            config,
            state: spec.state.clone(),
            annotations,
        });
    }
    Ok(render(&topics, &connectors, t))
}

// ---- import ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyResource {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Value,
}

const POSTGRES: &str = "io.debezium.connector.postgresql.PostgresConnector";
const MYSQL: &str = "io.debezium.connector.mysql.MySqlConnector";
const MARIADB: &str = "io.debezium.connector.mariadb.MariaDbConnector";

/// What the importer knows of the instance it imports for: a secret reference's connection.
pub type RefNames<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads `KafkaConnector` resources (other kinds are skipped, `KafkaTopic` settings are used
/// for the pipelines whose topics they are) into the declarative form. Everything that does
/// not carry over is reported by its path (`items[3].spec.config."database.password"`).
pub fn import(text: &str, ref_names: RefNames<'_>) -> (doc::Document, Vec<Problem>) {
    let mut out = doc::Document {
        api_version: doc::API_VERSION.into(),
        ..Default::default()
    };
    let mut problems = Vec::new();
    if text.len() > doc::MAX_BYTES {
        problems.push(Problem::new(
            "(document)",
            format!("more than {} MiB", doc::MAX_BYTES / (1024 * 1024)),
        ));
        return (out, problems);
    }
    let mut resources: Vec<(String, AnyResource)> = Vec::new();
    for (n, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let path = format!("items[{n}]");
        match Value::deserialize(de) {
            // A `kind: List` holds its resources under items.
            Ok(v) if v["kind"] == "List" => {
                for (i, item) in v["items"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .enumerate()
                {
                    match serde_json::from_value::<AnyResource>(item) {
                        Ok(r) => resources.push((format!("{path}.items[{i}]"), r)),
                        Err(e) => {
                            problems.push(Problem::new(format!("{path}.items[{i}]"), e.to_string()))
                        }
                    }
                }
            }
            Ok(Value::Null) => {}
            Ok(v) => match serde_json::from_value::<AnyResource>(v) {
                Ok(r) => resources.push((path, r)),
                Err(e) => problems.push(Problem::new(path, e.to_string())),
            },
            Err(e) => {
                problems.push(Problem::new(path, e.to_string()));
                return (out, problems);
            }
        }
    }
    let topics: HashMap<String, TopicResourceSpec> = resources
        .iter()
        .filter(|(_, r)| r.kind == "KafkaTopic")
        .filter_map(|(_, r)| {
            let spec: TopicResourceSpec = serde_json::from_value(r.spec.clone()).ok()?;
            Some((
                spec.topic_name
                    .clone()
                    .unwrap_or_else(|| r.metadata.name.clone()),
                spec,
            ))
        })
        .collect();
    let mut connections: BTreeMap<String, doc::Connection> = BTreeMap::new();
    for (path, r) in &resources {
        if r.kind != "KafkaConnector" {
            continue;
        }
        if !r.api_version.starts_with("kafka.strimzi.io/") {
            problems.push(Problem::new(
                format!("{path}.apiVersion"),
                format!("{:?} is not a Strimzi API version", r.api_version),
            ));
            continue;
        }
        let spec: ConnectorSpec = match serde_json::from_value(r.spec.clone()) {
            Ok(s) => s,
            Err(e) => {
                problems.push(Problem::new(format!("{path}.spec"), e.to_string()));
                continue;
            }
        };
        let config: BTreeMap<String, String> = spec
            .config
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                )
            })
            .collect();
        let cpath = |k: &str| format!("{path}.spec.config.{k:?}");
        // References to other config providers do not resolve under ClueCDC.
        for (k, v) in &config {
            if v.contains("${") && !v.contains("${cluecdc:") {
                problems.push(Problem::new(cpath(k), "a config-provider reference other than ${cluecdc:…} is not portable: ClueCDC keeps secrets in its own store (the declarative form reads them from {env} or {file}); the value is left out"));
            }
        }
        let ann = |k: &str| r.metadata.annotations.get(&format!("{A}{k}")).cloned();
        let state = spec.state.clone().unwrap_or_else(|| "running".into());
        if !["running", "paused", "stopped"].contains(&state.as_str()) {
            problems.push(Problem::new(
                format!("{path}.spec.state"),
                "running, paused or stopped",
            ));
        }
        let connect = ann("connect-cluster")
            .or_else(|| r.metadata.labels.get("strimzi.io/cluster").cloned())
            .unwrap_or_default();
        match spec.class.as_str() {
            POSTGRES | MYSQL | MARIADB => {
                let provider = match spec.class.as_str() {
                    POSTGRES => "POSTGRESQL",
                    MYSQL => "MYSQL",
                    _ => "MARIADB",
                };
                let source = match ann("source") {
                    Some(s) => s,
                    None => {
                        let (name, c) = source_connection(&config, provider, &r.metadata.name, ref_names);
                        if let Some(c) = c {
                            connections.entry(name.clone()).or_insert(c);
                        }
                        name
                    }
                };
                for k in ["database.sslrootcert", "database.ssl.truststore"] {
                    if config.get(k).is_some_and(|v| !v.contains("${cluecdc:")) {
                        problems.push(Problem::new(cpath(k), "a CA file on the worker is not portable: give the source connection's ca_certificate (the PEM) and ClueCDC's config provider writes the file"));
                    }
                }
                let prefix = config.get("topic.prefix").cloned().unwrap_or_default();
                if prefix.is_empty() {
                    problems.push(Problem::new(cpath("topic.prefix"), "required: it names the pipeline's topics"));
                }
                let signal = config.get("signal.data.collection").cloned().unwrap_or_default();
                let heartbeat = config.contains_key("heartbeat.action.query");
                let tables: Vec<String> = config
                    .get("table.include.list")
                    .map(|l| l.split(',').map(unescape).filter(|t| !t.is_empty()).collect())
                    .unwrap_or_default();
                let hb_table = tables.iter().find(|t| t.ends_with(&format!(".{}", crate::pipelines::config::HEARTBEAT_TABLE))).cloned();
                let tables: Vec<String> = tables
                    .into_iter()
                    .filter(|t| *t != signal && Some(t) != hb_table.as_ref())
                    .collect();
                let topic = tables.first().map(|t| crate::pipelines::config::table_topic(&prefix, t));
                let from_topic = topic.as_ref().and_then(|t| topics.get(t));
                let num = |k: &str| ann(k).and_then(|v| v.parse::<i64>().ok());
                let kafka = ann("kafka-cluster").unwrap_or_else(|| {
                    problems.push(Problem::new(format!("{path}.metadata.annotations"), "no cluecdc.io/kafka-cluster: name the Kafka cluster the pipeline's topics live on in the imported document (kafka_cluster)"));
                    String::new()
                });
                let mut options = BTreeMap::new();
                for (k, v) in &config {
                    if let Some(o) = pipeline_option(k, v, provider, heartbeat) {
                        options.insert(k.clone(), Value::String(o));
                    }
                }
                out.pipelines.push(doc::Pipeline {
                    name: ann("name").unwrap_or_else(|| r.metadata.name.clone()),
                    source,
                    kafka_cluster: kafka,
                    connect_cluster: connect,
                    tables,
                    topic_prefix: Some(prefix),
                    partitions: num("partitions").or(from_topic.map(|t| i64::from(t.partitions))),
                    replication_factor: num("replication-factor").or(from_topic.map(|t| i64::from(t.replicas))),
                    retention_ms: num("retention-ms").or_else(|| {
                        from_topic.and_then(|t| t.config.get("retention.ms")).and_then(|v| match v {
                            Value::String(s) => s.parse().ok(),
                            other => other.as_i64(),
                        })
                    }),
                    snapshot_mode: config.get("snapshot.mode").cloned(),
                    publication_mode: (provider == "POSTGRESQL").then(|| config.get("publication.autocreate.mode").cloned().unwrap_or_else(|| "filtered".into())),
                    heartbeat: Some(heartbeat),
                    options,
                    state,
                });
            }
            crate::deliveries::config::JDBC_SINK | crate::deliveries::config::S3_SINK => {
                let jdbc = spec.class == crate::deliveries::config::JDBC_SINK;
                let Some(pipeline) = ann("pipeline") else {
                    problems.push(Problem::new(format!("{path}.metadata.annotations"), "no cluecdc.io/pipeline: a delivery reads a pipeline's topics; name the pipeline in the imported document"));
                    continue;
                };
                let destination = ann("destination").unwrap_or_else(|| {
                    problems.push(Problem::new(format!("{path}.metadata.annotations"), "no cluecdc.io/destination: name the destination connection in the imported document"));
                    String::new()
                });
                let policy = match config.get("errors.tolerance").map(String::as_str) {
                    Some("all") => "continue",
                    _ => "fail",
                };
                let mut o = doc::DeliveryOptions {
                    error_policy: Some(policy.into()),
                    dead_letter_topic: config.get("errors.deadletterqueue.topic.name").cloned(),
                    ..Default::default()
                };
                if jdbc {
                    o.insert_mode = config.get("insert.mode").cloned();
                    o.delete_enabled = config.get("delete.enabled").map(|v| v == "true");
                    o.table_name_format = config.get("collection.name.format").cloned();
                    o.schema_evolution = config.get("schema.evolution").cloned();
                } else {
                    o.format = config.get("format.output.type").cloned();
                    o.compression = config.get("file.compression.type").cloned();
                    o.records_per_file = config.get("file.max.records").and_then(|v| v.parse().ok());
                    o.tasks = Some(u64::from(spec.tasks_max));
                    o.key_template = ann("key-template").or_else(|| {
                        let t = config.get("file.name.template")?;
                        Some(t.trim_end_matches(".gz").trim_end_matches(".jsonl").to_string())
                    });
                }
                for (k, v) in &config {
                    if !delivery_key_carried(k, jdbc) {
                        problems.push(Problem::new(cpath(k), format!("not carried over: ClueCDC's {} deliveries have no option for it (value {v:?})", if jdbc { "database" } else { "object-storage" })));
                    }
                }
                out.deliveries.push(doc::Delivery {
                    name: ann("name").unwrap_or_else(|| r.metadata.name.clone()),
                    pipeline,
                    destination,
                    connect_cluster: Some(connect),
                    topics: config.get("topics").map(|t| t.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()),
                    options: o,
                    state,
                });
            }
            other => problems.push(Problem::new(format!("{path}.spec.class"), format!("{other:?} is not a connector ClueCDC manages (Debezium PostgreSQL, MySQL and MariaDB sources; the Debezium JDBC sink; the Aiven S3 sink); the resource is left out"))),
        }
    }
    out.connections = connections.into_values().collect();
    super::export::sort(&mut out);
    (out, problems)
}

/// `public\.orders` or `public[.]orders` → `public.orders`.
fn unescape(t: &str) -> String {
    t.trim().replace("[.]", ".").replace('\\', "")
}

/// A config key of a source connector that is the user's own option (not one ClueCDC renders
/// from the pipeline, its connection or its Kafka cluster): its value.
fn pipeline_option(k: &str, v: &str, provider: &str, heartbeat: bool) -> Option<String> {
    if crate::pipelines::config::managed_keys().contains(&k) || k == "include.schema.changes" {
        return None;
    }
    if k == "heartbeat.interval.ms" {
        let rendered = if heartbeat {
            crate::pipelines::config::FRESHNESS_HEARTBEAT_MS
        } else {
            crate::pipelines::config::HEARTBEAT_MS
        };
        return (v != rendered).then(|| v.to_string());
    }
    if provider != "POSTGRESQL" {
        if let Some(rest) = k
            .strip_prefix("schema.history.internal.producer.")
            .or_else(|| k.strip_prefix("schema.history.internal.consumer."))
        {
            if rest.starts_with("security.")
                || rest.starts_with("sasl.")
                || rest.starts_with("ssl.")
            {
                return None;
            }
        }
    }
    Some(v.to_string())
}

/// Keys of a sink's config that an imported delivery carries (as an option, its topics, or
/// because ClueCDC renders the same key itself).
fn delivery_key_carried(k: &str, jdbc: bool) -> bool {
    const COMMON: &[&str] = &[
        "topics",
        "key.converter",
        "value.converter",
        "key.converter.schemas.enable",
        "value.converter.schemas.enable",
        "consumer.override.auto.offset.reset",
        "errors.log.enable",
        "errors.tolerance",
        "errors.deadletterqueue.topic.name",
        "errors.deadletterqueue.context.headers.enable",
    ];
    const JDBC: &[&str] = &[
        "connection.url",
        "connection.username",
        "connection.password",
        "insert.mode",
        "primary.key.mode",
        "delete.enabled",
        "collection.name.format",
        "schema.evolution",
    ];
    const S3: &[&str] = &[
        "aws.s3.bucket.name",
        "aws.s3.region",
        "aws.s3.endpoint",
        "aws.s3.path.style.access.enabled",
        "aws.access.key.id",
        "aws.secret.access.key",
        "aws.session.token",
        "format.output.type",
        "format.output.fields",
        "file.compression.type",
        "file.max.records",
        "file.name.template",
        "file.name.timestamp.timezone",
    ];
    COMMON.contains(&k)
        || if jdbc {
            JDBC.contains(&k)
        } else {
            S3.contains(&k)
        }
}

/// A source connection for a connector without ClueCDC annotations, from its config: named
/// after the connector, its password read from an environment variable at apply time.
fn source_connection(
    config: &BTreeMap<String, String>,
    provider: &str,
    connector: &str,
    ref_names: RefNames<'_>,
) -> (String, Option<doc::Connection>) {
    // A ClueCDC reference names the connection it belongs to on this instance.
    if let Some(name) = config
        .get("database.password")
        .and_then(|v| v.strip_prefix("${cluecdc:"))
        .and_then(|v| v.split(':').next())
        .and_then(ref_names)
    {
        return (name, None);
    }
    let name = format!("{connector}-source");
    let mut settings = BTreeMap::new();
    let mut put = |k: &str, v: Option<&String>| {
        if let Some(v) = v {
            settings.insert(
                k.to_string(),
                match k {
                    "port" | "server_id" => v
                        .parse::<i64>()
                        .map(Value::from)
                        .unwrap_or(Value::String(v.clone())),
                    _ => Value::String(v.clone()),
                },
            );
        }
    };
    put("host", config.get("database.hostname"));
    put("port", config.get("database.port"));
    put("user", config.get("database.user"));
    put(
        "database",
        config
            .get("database.dbname")
            .or(config.get("database.include.list")),
    );
    put("slot_name", config.get("slot.name"));
    put("publication_name", config.get("publication.name"));
    put("server_id", config.get("database.server.id"));
    let tls = match config
        .get("database.sslmode")
        .or(config.get("database.ssl.mode"))
        .map(String::as_str)
    {
        Some("verify-full" | "verify_identity") => "verify-full",
        Some("verify-ca" | "verify_ca") => "verify-ca",
        _ => "disable",
    };
    settings.insert("tls_mode".into(), Value::String(tls.into()));
    let env = format!(
        "CLUECDC_CONNECTION_{}_PASSWORD",
        name.to_ascii_uppercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect::<String>()
    );
    (
        name.clone(),
        Some(doc::Connection {
            name,
            provider: provider.into(),
            capabilities: Some(vec!["SOURCE".into()]),
            settings,
            secrets: [("password".to_string(), SecretSource::Env(env))].into(),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::settings::{
        DatabaseSettings, ObjectStorageSettings, Settings, TlsMode,
    };
    use crate::connections::{Capability, Connection, Provider};

    fn connection(
        name: &str,
        provider: Provider,
        settings: Settings,
        cap: Capability,
    ) -> Connection {
        Connection {
            id: format!("con_{name}"),
            name: name.into(),
            provider,
            capabilities: vec![cap],
            settings,
            secret_ref: format!("sec_{name}"),
            generation: 1,
            created_at: String::new(),
            updated_at: String::new(),
            last_test: None,
        }
    }

    fn source() -> Connection {
        connection(
            "orders db",
            Provider::Postgresql,
            Settings::Database(DatabaseSettings {
                host: "orders-db.internal".into(),
                port: 5432,
                database: "orders".into(),
                user: "debezium".into(),
                tls_mode: TlsMode::VerifyFull,
                ca_certificate: Some(
                    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
                ),
                slot_name: Some("debezium_orders".into()),
                publication_name: Some("debezium_orders_pub".into()),
                server_id: None,
            }),
            Capability::Source,
        )
    }

    fn pipeline() -> doc::Pipeline {
        doc::Pipeline {
            name: "orders".into(),
            source: "orders db".into(),
            kafka_cluster: "my-cluster".into(),
            connect_cluster: "connect".into(),
            tables: vec!["public.orders".into(), "public.order_items".into()],
            topic_prefix: Some("orders-db".into()),
            partitions: Some(3),
            replication_factor: Some(3),
            retention_ms: Some(604_800_000),
            snapshot_mode: Some("initial".into()),
            publication_mode: Some("filtered".into()),
            heartbeat: Some(false),
            options: [("max.batch.size".to_string(), Value::String("4096".into()))].into(),
            state: "running".into(),
        }
    }

    /// Seed 004's source and sink, rendered by ClueCDC: topics, then connectors.
    fn rendered() -> (String, Vec<String>) {
        let src = source();
        let p = pipeline();
        let spec = crate::pipelines::config::CaptureSpec {
            tables: p.tables.clone(),
            topic_prefix: "orders-db".into(),
            snapshot_mode: "initial".into(),
            publication_mode: "filtered".into(),
            kafka_bootstrap: "my-cluster-kafka-bootstrap:9093".into(),
            kafka_client: Default::default(),
            options: [("max.batch.size".to_string(), "4096".to_string())].into(),
            heartbeat: false,
        };
        let stored = crate::pipelines::Pipeline {
            id: "pl_1".into(),
            name: p.name.clone(),
            source_connection_id: src.id.clone(),
            kafka_cluster_id: "kc_1".into(),
            connect_cluster_id: "cc_1".into(),
            tables: p.tables.clone(),
            topic_prefix: "orders-db".into(),
            partitions: 3,
            replication_factor: 3,
            retention_ms: Some(604_800_000),
            snapshot_mode: "initial".into(),
            publication_mode: "filtered".into(),
            options: Default::default(),
            connector_id: "cn_1".into(),
            heartbeat: false,
            created_at: String::new(),
            updated_at: String::new(),
        };
        let topics: Vec<(String, TopicSpec)> =
            crate::pipelines::topic_specs(&src, &crate::pipelines::TopicSettings::of(&stored))
                .into_iter()
                .map(|t| ("my-cluster".to_string(), t))
                .collect();
        let lake = connection(
            "lake",
            Provider::AwsS3,
            Settings::ObjectStorage(ObjectStorageSettings {
                bucket: "orders-archive".into(),
                region: "ap-northeast-2".into(),
                prefix: "cdc/".into(),
                endpoint: None,
                path_style: false,
                use_ssl: true,
                ca_certificate: None,
            }),
            Capability::Destination,
        );
        let options = crate::deliveries::config::ObjectStorageOptions {
            tasks: 3,
            ..Default::default()
        };
        let delivery = doc::Delivery {
            name: "orders s3".into(),
            pipeline: "orders".into(),
            destination: "lake".into(),
            connect_cluster: Some("connect".into()),
            topics: Some(vec!["orders-db.public.orders".into()]),
            options: serde_json::from_value(serde_json::json!(options)).unwrap(),
            state: "paused".into(),
        };
        let connectors = vec![
            Connector {
                name: crate::pipelines::connector_name("orders-db"),
                config: crate::pipelines::config::build(&src, &spec),
                state: "running".into(),
                annotations: pipeline_annotations(&p),
            },
            Connector {
                name: crate::deliveries::connector_name("orders s3"),
                config: crate::deliveries::config::s3(
                    &lake,
                    &["orders-db.public.orders".into()],
                    &options,
                    false,
                ),
                state: "paused".into(),
                annotations: delivery_annotations(&delivery),
            },
        ];
        render(
            &topics,
            &connectors,
            &Target {
                namespace: "kafka".into(),
                connect_cluster: "connect-cluster".into(),
                kafka_cluster: None,
            },
        )
    }

    fn golden(name: &str, text: &str) {
        let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var("UPDATE_GOLDEN").is_ok() {
            std::fs::write(&path, text).unwrap();
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("missing golden file {path}; run with UPDATE_GOLDEN=1"));
        assert_eq!(text, want, "{name} differs from its golden file");
    }

    #[test]
    fn the_strimzi_export_matches_its_golden_file_and_holds_no_secret() {
        let (text, warnings) = rendered();
        golden("strimzi-export.yaml", &text);
        assert!(warnings.is_empty(), "{warnings:?}");
        // Seed 004's shape: v1 resources, class, tasksMax and the config without class or
        // tasks; credentials only as references.
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).unwrap())
            .collect();
        let source = docs
            .iter()
            .find(|d| d["kind"] == "KafkaConnector" && d["spec"]["class"] == POSTGRES)
            .unwrap();
        assert_eq!(source["apiVersion"], "kafka.strimzi.io/v1");
        assert_eq!(
            source["metadata"]["labels"]["strimzi.io/cluster"],
            "connect-cluster"
        );
        assert_eq!(source["spec"]["tasksMax"], 1);
        assert_eq!(
            source["spec"]["config"]["database.password"],
            "${cluecdc:sec_orders db:password}"
        );
        assert!(source["spec"]["config"].get("connector.class").is_none());
        let sink = docs
            .iter()
            .find(|d| d["spec"]["class"] == crate::deliveries::config::S3_SINK)
            .unwrap();
        assert_eq!(sink["spec"]["tasksMax"], 3);
        assert_eq!(sink["spec"]["state"], "paused");
        assert_eq!(
            sink["spec"]["config"]["aws.secret.access.key"],
            "${cluecdc:sec_lake:secret_access_key}"
        );
        let topics: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "KafkaTopic").collect();
        let orders = topics
            .iter()
            .find(|t| t["metadata"]["name"] == "orders-db.public.orders")
            .unwrap();
        assert_eq!(orders["spec"]["partitions"], 3);
        assert_eq!(orders["spec"]["replicas"], 3);
        assert_eq!(orders["spec"]["config"]["retention.ms"], "604800000");
        // A topic name Kubernetes does not allow keeps its name in spec.topicName.
        let heartbeat = topics
            .iter()
            .find(|t| t["spec"]["topicName"] == "__debezium-heartbeat.orders-db")
            .unwrap();
        assert!(heartbeat["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("debezium-heartbeat.orders-db-"));
    }

    #[test]
    fn a_pipeline_and_a_delivery_exported_import_back_as_they_were() {
        let (text, _) = rendered();
        let (doc, problems) = import(&text, &|_| None);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(
            doc.connections.is_empty(),
            "the source is named by the annotation: no connection is made up"
        );
        assert_eq!(doc.pipelines, vec![pipeline()]);
        let d = &doc.deliveries[0];
        assert_eq!(d.name, "orders s3");
        assert_eq!(d.state, "paused");
        assert_eq!(d.topics, Some(vec!["orders-db.public.orders".to_string()]));
        assert_eq!(d.options.tasks, Some(3));
        assert_eq!(
            d.options.key_template.as_deref(),
            Some(crate::deliveries::config::DEFAULT_KEY_TEMPLATE)
        );
        assert_eq!(d.options.compression.as_deref(), Some("gzip"));
    }

    /// Seed 004's own KafkaConnector resources, as a team on Strimzi has them.
    const SEED_004: &str = r#"apiVersion: kafka.strimzi.io/v1
kind: KafkaConnector
metadata:
  name: orders-db-source
  namespace: kafka
  labels:
    strimzi.io/cluster: connect-cluster
spec:
  class: io.debezium.connector.postgresql.PostgresConnector
  tasksMax: 1
  config:
    database.hostname: orders-db.REPLACE.ap-northeast-2.rds.amazonaws.com
    database.port: 5432
    database.user: debezium
    database.password: "${dir:/mnt/debezium:password}"
    database.dbname: orders
    database.sslmode: verify-full
    database.sslrootcert: /mnt/rds-ca/ca.crt
    topic.prefix: orders-db
    plugin.name: pgoutput
    slot.name: debezium_orders
    publication.name: debezium_orders_pub
    publication.autocreate.mode: disabled
    table.include.list: 'public[.]orders,public[.]order_items'
    snapshot.mode: initial
---
apiVersion: kafka.strimzi.io/v1
kind: KafkaConnector
metadata:
  name: orders-s3-sink
  namespace: kafka
  labels:
    strimzi.io/cluster: connect-cluster
spec:
  class: io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector
  tasksMax: 3
  config:
    topics: orders-db.public.orders
    aws.s3.bucket.name: REPLACE-WITH-YOUR-BUCKET
---
apiVersion: kafka.strimzi.io/v1
kind: KafkaConnector
metadata:
  name: legacy
spec:
  class: io.aiven.kafka.connect.s3.S3SinkConnector
  tasksMax: 1
  config: {}
"#;

    #[test]
    fn seed_004s_connectors_import_with_every_non_portable_field_reported_by_path() {
        let (doc, problems) = import(SEED_004, &|_| None);
        golden("strimzi-import-seed-004.yaml", &doc::to_yaml(&doc));
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert!(
            paths.contains(&"items[0].spec.config.\"database.password\""),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"items[0].spec.config.\"database.sslrootcert\""),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"items[0].metadata.annotations"),
            "the Kafka cluster is not in the resource: {paths:?}"
        );
        assert!(
            paths.contains(&"items[1].metadata.annotations"),
            "a sink without its pipeline: {paths:?}"
        );
        assert!(paths.contains(&"items[2].spec.class"), "{paths:?}");
        let dir = problems
            .iter()
            .find(|p| p.path.ends_with("\"database.password\""))
            .unwrap();
        assert!(dir.message.contains("not portable"), "{dir:?}");
        assert!(
            !format!("{problems:?}{doc:?}").contains("/mnt/debezium:password"),
            "a reference's target is not copied"
        );
        let p = &doc.pipelines[0];
        assert_eq!(p.tables, vec!["public.orders", "public.order_items"]);
        assert_eq!(p.publication_mode.as_deref(), Some("disabled"));
        assert_eq!(p.source, "orders-db-source-source");
        let c = &doc.connections[0];
        assert_eq!(c.settings["tls_mode"], "verify-full");
        assert_eq!(
            c.secrets["password"],
            SecretSource::Env("CLUECDC_CONNECTION_ORDERS_DB_SOURCE_SOURCE_PASSWORD".into())
        );
    }

    #[test]
    fn kubernetes_names_are_kept_when_valid_and_cleaned_with_a_hash_otherwise() {
        assert_eq!(k8s_name("shop.public.orders"), "shop.public.orders");
        let a = k8s_name("__debezium-heartbeat.shop");
        assert!(a.starts_with("debezium-heartbeat.shop-"), "{a}");
        assert_ne!(k8s_name("Shop_1"), k8s_name("shop-1"));
        assert!(k8s_name("Shop_1").starts_with("shop-1-"));
    }

    #[test]
    fn table_lists_unescape_both_regex_spellings() {
        assert_eq!(unescape("public\\.orders"), "public.orders");
        assert_eq!(unescape(" public[.]order_items"), "public.order_items");
    }
}
