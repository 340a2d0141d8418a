//! Replications: MirrorMaker 2 on Kafka Connect, copying CDC topics from one Kafka cluster to
//! another for disaster recovery. A replication owns three connectors (source, checkpoint,
//! heartbeat; see [`config`]) that the reconciler keeps running like any other, and reports
//! what it measures on both clusters: per source partition how far the target has copied
//! (from MirrorMaker's offset syncs and the target's end offsets), the lag in records and in
//! seconds, the newest checkpoint per consumer group, and the newest heartbeat, which proves
//! only that the heartbeat connector runs, not that topics are copied.

pub mod config;
pub mod measure;

use crate::db;
use std::collections::BTreeMap;

use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::clusters::kafka::KafkaCluster;
use crate::connectors;
use crate::connectors::{restart_pause_resume, Action};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::reconcile::plan::DesiredState;
use crate::secrets::store::SecretStore;

/// A replication to create or preview, or a change to one (`PATCH`: only `topics` or
/// `pipeline_ids`, `groups` and `sync_group_offsets` can change in place; the others must be
/// left out or equal).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct ReplicationInput {
    pub name: Option<String>,
    /// The Kafka cluster (id or name) the topics are copied from.
    pub source_kafka_cluster_id: Option<String>,
    /// The Kafka cluster (id or name) they are copied to.
    pub target_kafka_cluster_id: Option<String>,
    /// The Connect cluster (id or name) that runs MirrorMaker's three connectors.
    pub connect_cluster_id: Option<String>,
    /// A regular expression (or a comma-separated list of them) over the source's topics…
    pub topics: Option<String>,
    /// …or the topics of these pipelines (each pipeline's topic prefix).
    pub pipeline_ids: Option<Vec<String>>,
    /// Consumer groups whose offsets are checkpointed; default every group (`.*`).
    pub groups: Option<String>,
    /// `default` (topics renamed `<source alias><separator><topic>`) or `identity`.
    #[schemars(with = "Option<ReplicationPolicy>")]
    pub replication_policy: Option<String>,
    /// With the default policy: one to three of `.`, `_` or `-` (default `.`).
    pub separator: Option<String>,
    /// `target` (default) or `source`.
    #[schemars(with = "Option<OffsetSyncsLocation>")]
    pub offset_syncs_location: Option<String>,
    /// Whether MirrorMaker writes the translated offsets into the target's consumer groups.
    pub sync_group_offsets: Option<bool>,
    /// Create even though the pattern matches no topic now (topics created later are
    /// picked up within 10 s).
    pub confirm_empty: Option<bool>,
}

/// How a replication names the copies on the target (documents `replication_policy`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum ReplicationPolicy {
    /// `<source alias><separator><topic>`.
    Default,
    /// The same name as on the source.
    Identity,
}

/// Which cluster MirrorMaker keeps its offset syncs on (documents `offset_syncs_location`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum OffsetSyncsLocation {
    Target,
    Source,
}

/// A replication: MirrorMaker 2 copying topics from one Kafka cluster to another.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Replication {
    pub id: String,
    pub name: String,
    pub source_kafka_cluster_id: String,
    pub target_kafka_cluster_id: String,
    pub connect_cluster_id: String,
    /// The topic pattern MirrorMaker gets (from `pipeline_ids` when those are set).
    pub topics: String,
    /// The pipelines whose topics are copied (empty: `topics` is the user's pattern).
    pub pipeline_ids: Vec<String>,
    pub groups: String,
    #[schemars(with = "ReplicationPolicy")]
    pub replication_policy: String,
    pub separator: String,
    #[schemars(with = "OffsetSyncsLocation")]
    pub offset_syncs_location: String,
    pub sync_group_offsets: bool,
    pub source_alias: String,
    pub target_alias: String,
    /// Source, checkpoint and heartbeat connector ids.
    pub connector_ids: Vec<String>,
    pub created_at: String,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    name: String,
    source_kafka_cluster_id: String,
    target_kafka_cluster_id: String,
    connect_cluster_id: String,
    topics: String,
    pipeline_ids: String,
    groups: String,
    replication_policy: String,
    separator: String,
    offset_syncs_location: String,
    #[sqlx(try_from = "crate::db::Flag")]
    sync_group_offsets: bool,
    source_alias: String,
    target_alias: String,
    connector_ids: String,
    created_at: String,
}

impl From<Row> for Replication {
    fn from(r: Row) -> Self {
        Replication {
            pipeline_ids: serde_json::from_str(&r.pipeline_ids).unwrap_or_default(),
            connector_ids: serde_json::from_str(&r.connector_ids).unwrap_or_default(),
            id: r.id,
            name: r.name,
            source_kafka_cluster_id: r.source_kafka_cluster_id,
            target_kafka_cluster_id: r.target_kafka_cluster_id,
            connect_cluster_id: r.connect_cluster_id,
            topics: r.topics,
            groups: r.groups,
            replication_policy: r.replication_policy,
            separator: r.separator,
            offset_syncs_location: r.offset_syncs_location,
            sync_group_offsets: r.sync_group_offsets,
            source_alias: r.source_alias,
            target_alias: r.target_alias,
            created_at: r.created_at,
        }
    }
}

const SELECT: &str = "SELECT id, name, source_kafka_cluster_id, target_kafka_cluster_id, connect_cluster_id, topics, pipeline_ids, groups, replication_policy, separator, offset_syncs_location, sync_group_offsets, source_alias, target_alias, connector_ids, created_at FROM replications";

pub async fn load(pool: &Pool, id: &str) -> Result<Replication> {
    let row: Option<Row> = db::query_as(&format!("{SELECT} WHERE id = $1 OR name = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.map(Replication::from)
        .ok_or_else(|| Error::NotFound(format!("replication {id}")))
}

pub async fn list(ctx: &Ctx, who: &Principal) -> Result<Vec<Replication>> {
    let pool = &ctx.pool;
    who.require(Role::Viewer, "see replications")?;
    let rows: Vec<Row> = db::query_as(&format!("{SELECT} ORDER BY name"))
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(Replication::from).collect())
}

/// A cluster's alias in MirrorMaker's terms: its name as a slug (letters, digits, '-').
fn alias(k: &KafkaCluster) -> String {
    crate::connections::settings::slug(&k.name).replace('_', "-")
}

/// Everything checked; what would be created.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReplicationPreview")]
pub struct Preview {
    pub name: String,
    /// The pattern as MirrorMaker gets it.
    pub topics: String,
    /// The source's topics it matches now (internal topics left out), each as a pair
    /// `[source name, name on the target]`.
    pub matched: Vec<(String, String)>,
    /// How many topics the source has (to show a pattern that takes too much).
    pub source_topics: usize,
    pub connectors: Vec<PreviewConnector>,
    /// The plugin's refusals by `<connector>.<key>`.
    pub validation_errors: BTreeMap<String, String>,
    pub warnings: Vec<String>,
    pub internal_topics: Vec<String>,
}

/// One of the three connectors a replication runs, with the config Connect would get.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReplicationPreviewConnector")]
pub struct PreviewConnector {
    pub name: String,
    /// The connector class (MirrorSourceConnector, MirrorCheckpointConnector or
    /// MirrorHeartbeatConnector).
    pub class: String,
    /// The connector's config as Connect gets it (secrets as config provider references).
    pub config: BTreeMap<String, String>,
}

struct Checked {
    name: String,
    source_alias: String,
    target_alias: String,
    source: KafkaCluster,
    target: KafkaCluster,
    connect: crate::clusters::ConnectCluster,
    topics: String,
    pipeline_ids: Vec<String>,
    groups: String,
    identity: bool,
    separator: String,
    offset_syncs_location: String,
    sync_group_offsets: bool,
}

impl Checked {
    fn spec(&self) -> config::Spec<'_> {
        config::Spec {
            source: &self.source,
            target: &self.target,
            connect_kafka_cluster_id: self.connect.kafka_cluster_id.as_deref(),
            source_alias: &self.source_alias,
            target_alias: &self.target_alias,
            topics: &self.topics,
            groups: &self.groups,
            identity: self.identity,
            separator: &self.separator,
            offset_syncs_location: &self.offset_syncs_location,
            sync_group_offsets: self.sync_group_offsets,
        }
    }
}

/// Topics MirrorMaker never copies (its own, Connect's and Kafka's internal ones).
fn internal(topic: &str) -> bool {
    topic.starts_with("__")
        || topic.ends_with(".internal")
        || topic.starts_with("mm2-")
        || topic == "heartbeats"
        || topic.ends_with(".heartbeats")
        || topic.starts_with("cluecdc-connect-")
}

/// MirrorMaker's `topics`: comma-separated regular expressions, each matching whole names.
fn matcher(patterns: &str) -> std::result::Result<regex::Regex, String> {
    let parts: Vec<String> = patterns
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| format!("^(?:{p})$"))
        .collect();
    if parts.is_empty() {
        return Err("give a regular expression for the topics, e.g. shop\\..*".into());
    }
    regex::Regex::new(&parts.join("|")).map_err(|e| format!("not a regular expression: {e}"))
}

/// What an input names, looked up; [`judge`] decides on it without further I/O.
struct Found {
    /// The source cluster, or why the field is refused.
    source: std::result::Result<KafkaCluster, String>,
    target: std::result::Result<KafkaCluster, String>,
    connect: Option<crate::clusters::ConnectCluster>,
    /// Each pipeline given, in order: found, or its id when there is none.
    pipelines: Vec<std::result::Result<PipelineRef, String>>,
    /// A replication from the target back to the source: (name, policy).
    reverse: Option<(String, String)>,
}

/// What a replication needs of a pipeline it takes the topics of.
#[derive(Debug, Clone)]
struct PipelineRef {
    name: String,
    kafka_cluster_id: String,
    topic_prefix: String,
}

/// An input's settings once judged sound.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    name: String,
    topics: String,
    pipeline_ids: Vec<String>,
    groups: String,
    identity: bool,
    separator: String,
    offset_syncs_location: String,
    sync_group_offsets: bool,
}

/// Every refusal of a replication's settings, each by field: pure, so each rule is
/// unit-tested. A pattern matching no topic is refused later, against the source's topic list.
fn judge(input: &ReplicationInput, found: &Found) -> std::result::Result<Settings, FieldErrors> {
    let mut errors = FieldErrors::new();
    let name = input.name.as_deref().unwrap_or("").trim().to_string();
    if name.is_empty() || name.len() > 64 {
        errors.insert("name".into(), "give a name of 1–64 characters".into());
    }
    if found.connect.is_none() {
        errors.insert(
            "connect_cluster_id".into(),
            "choose the Connect cluster that runs the replication (ideally one attached to the target cluster)".into(),
        );
    }
    for (field, r) in [
        ("source_kafka_cluster_id", &found.source),
        ("target_kafka_cluster_id", &found.target),
    ] {
        if let Err(why) = r {
            errors.insert(field.into(), why.clone());
        }
    }
    if let (Ok(s), Ok(t)) = (&found.source, &found.target) {
        if s.id == t.id {
            errors.insert(
                "target_kafka_cluster_id".into(),
                format!(
                    "{} is the source too; a replication copies to another cluster",
                    t.name
                ),
            );
        } else if alias(s) == alias(t) {
            errors.insert(
                "target_kafka_cluster_id".into(),
                "the two clusters' names give the same alias; rename one".into(),
            );
        }
    }
    let policy = input.replication_policy.as_deref().unwrap_or("default");
    if !matches!(policy, "default" | "identity") {
        errors.insert(
            "replication_policy".into(),
            "choose default or identity".into(),
        );
    }
    // Identity names topics the same on both sides: with a replication the other way too,
    // each cluster would copy the other's copies back, forever (seed 004).
    if let (Some((other, other_policy)), Ok(s), Ok(t)) =
        (&found.reverse, &found.source, &found.target)
    {
        if policy == "identity" || other_policy == "identity" {
            errors.insert(
                "replication_policy".into(),
                format!(
                    "replication {other} copies {} back to {}: with the identity policy on a two-way pair, records loop between the clusters; use the default policy (prefixed topic names) for both directions",
                    t.name, s.name
                ),
            );
        }
    }
    let separator = input.separator.clone().unwrap_or_else(|| ".".into());
    if policy == "default"
        && (separator.is_empty()
            || separator.len() > 3
            || separator
                .chars()
                .any(|c| !(c == '.' || c == '_' || c == '-')))
    {
        errors.insert("separator".into(), "one to three of '.', '_' or '-'".into());
    }
    let location = input
        .offset_syncs_location
        .clone()
        .unwrap_or_else(|| "target".into());
    if !matches!(location.as_str(), "target" | "source") {
        errors.insert(
            "offset_syncs_location".into(),
            "choose target or source".into(),
        );
    }
    let groups = input
        .groups
        .clone()
        .filter(|g| !g.trim().is_empty())
        .unwrap_or_else(|| ".*".into());
    if let Err(e) = matcher(&groups) {
        errors.insert("groups".into(), e);
    }
    // The topics: a pattern, or the pipelines' topic prefixes.
    let pipeline_ids = input.pipeline_ids.clone().unwrap_or_default();
    let pattern = input
        .topics
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let topics = match (pattern, pipeline_ids.is_empty()) {
        (Some(t), true) => t.to_string(),
        (_, false) => {
            if pattern.is_some() {
                errors.insert(
                    "topics".into(),
                    "give a pattern or pipelines, not both".into(),
                );
            }
            let mut prefixes = Vec::new();
            for p in &found.pipelines {
                match p {
                    Ok(p) => {
                        if let Ok(s) = &found.source {
                            if p.kafka_cluster_id != s.id {
                                errors.insert(
                                    "pipeline_ids".into(),
                                    format!("pipeline {} writes to another Kafka cluster than the source", p.name),
                                );
                            }
                        }
                        prefixes.push(format!("{}\\..*", regex::escape(&p.topic_prefix)));
                    }
                    Err(id) => {
                        errors.insert("pipeline_ids".into(), format!("no pipeline {id}"));
                    }
                }
            }
            prefixes.join(",")
        }
        (None, true) => {
            errors.insert(
                "topics".into(),
                "give a regular expression for the topics, or choose pipelines".into(),
            );
            String::new()
        }
    };
    if !topics.is_empty() {
        if let Err(e) = matcher(&topics) {
            errors.insert("topics".into(), e);
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Settings {
        name,
        topics,
        pipeline_ids,
        groups,
        identity: policy == "identity",
        separator,
        offset_syncs_location: location,
        sync_group_offsets: input.sync_group_offsets.unwrap_or(false),
    })
}

/// Looks up what the input names, then [`judge`]s it.
async fn check(pool: &Pool, who: &Principal, input: &ReplicationInput) -> Result<Checked> {
    let kafka = |id: &Option<String>| {
        let id = id.clone().unwrap_or_default();
        async move {
            match crate::clusters::kafka::get(pool, who, &id).await {
                Ok(k) => Ok(k),
                Err(Error::NotFound(_)) => Err("choose a registered Kafka cluster".to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    let source = kafka(&input.source_kafka_cluster_id).await;
    let target = kafka(&input.target_kafka_cluster_id).await;
    let connect =
        crate::clusters::get(pool, who, input.connect_cluster_id.as_deref().unwrap_or(""))
            .await
            .ok();
    let mut pipelines = Vec::new();
    for id in input.pipeline_ids.iter().flatten() {
        pipelines.push(match crate::pipelines::load(pool, id).await {
            Ok(p) => Ok(PipelineRef {
                name: p.name,
                kafka_cluster_id: p.kafka_cluster_id,
                topic_prefix: p.topic_prefix,
            }),
            Err(_) => Err(id.clone()),
        });
    }
    let reverse = match (&source, &target) {
        (Ok(s), Ok(t)) => db::query_as::<(String, String)>("SELECT name, replication_policy FROM replications WHERE source_kafka_cluster_id = $1 AND target_kafka_cluster_id = $2 ORDER BY replication_policy = 'identity' DESC, name LIMIT 1")
            .bind(&t.id)
            .bind(&s.id)
            .fetch_optional(pool)
            .await?,
        _ => None,
    };
    let found = Found {
        source,
        target,
        connect,
        pipelines,
        reverse,
    };
    let settings = judge(input, &found).map_err(|fields| match Error::check(fields) {
        Err(e) => e,
        Ok(()) => Error::Unexpected(anyhow::anyhow!("refused without a reason")),
    })?;
    let (Ok(source), Ok(target), Some(connect)) = (found.source, found.target, found.connect)
    else {
        return Err(Error::Unexpected(anyhow::anyhow!(
            "judged without its clusters"
        )));
    };
    Ok(Checked {
        name: settings.name,
        source_alias: alias(&source),
        target_alias: alias(&target),
        source,
        target,
        connect,
        topics: settings.topics,
        pipeline_ids: settings.pipeline_ids,
        groups: settings.groups,
        identity: settings.identity,
        separator: settings.separator,
        offset_syncs_location: settings.offset_syncs_location,
        sync_group_offsets: settings.sync_group_offsets,
    })
}

async fn preview_of(pool: &Pool, store: &SecretStore, c: &Checked) -> Result<Preview> {
    let spec = c.spec();
    let access = crate::clusters::kafka::access(store, &c.source).await?;
    let all = crate::kafka::topics(&access, None)
        .await
        .map_err(|e| Error::Unavailable(format!("Kafka cluster {}: {e}", c.source.name)))?;
    let m = matcher(&c.topics).map_err(|e| Error::field("topics", e))?;
    let names: Vec<&str> = all
        .iter()
        .map(|t| t.name.as_str())
        .filter(|t| !internal(t))
        .collect();
    let matched: Vec<(String, String)> = names
        .iter()
        .filter(|t| m.is_match(t))
        .map(|t| (t.to_string(), spec.remote_topic(t)))
        .collect();
    let names3 = config::connector_names(&c.name);
    let rendered = config::connectors(&spec, [&names3[0], &names3[1], &names3[2]]);
    let client = crate::clusters::connect::client_for(store, &c.connect).await?;
    let mut validation_errors = BTreeMap::new();
    let mut connectors = Vec::new();
    for (name, cfg) in rendered {
        let mut with_name = cfg.clone();
        with_name.insert("name".into(), name.clone());
        crate::secrets::resolve::grant_for_validation(pool, &c.connect.id, &cfg).await?;
        let class = cfg["connector.class"].clone();
        let errs = client
            .validate(&class, &with_name)
            .await
            .map_err(|e| Error::Unavailable(format!("cannot validate with Connect: {e}")))?;
        for (k, v) in errs {
            validation_errors.insert(format!("{name}.{k}"), v.join("; "));
        }
        connectors.push(PreviewConnector {
            name,
            class,
            config: cfg,
        });
    }
    let mut warnings = Vec::new();
    if c.identity {
        warnings.push("Identity policy: topics keep their names on the target. Never add a replication back from the target with it (records would loop), and consumers cannot tell copies from originals by name.".to_string());
    }
    if c.connect.kafka_cluster_id.as_deref() != Some(c.target.id.as_str()) {
        warnings.push(format!("Connect cluster {} is not attached to the target {}: the connectors' producers are pointed at the target (producer.override.*), and their offsets stay in Connect's own Kafka cluster. Seed 004 runs MirrorMaker on a Connect cluster of the target.", c.connect.name, c.target.name));
    }
    if !matched.is_empty() && matched.len() == names.len() && names.len() > 20 {
        warnings.push(format!(
            "the pattern takes every one of the source's {} topics",
            names.len()
        ));
    }
    Ok(Preview {
        name: c.name.clone(),
        topics: c.topics.clone(),
        source_topics: names.len(),
        matched,
        connectors,
        validation_errors,
        warnings,
        internal_topics: spec
            .internal_topics()
            .into_iter()
            .map(|(n, _, _)| n)
            .collect(),
    })
}

/// The preview of a replication about to be stored, refused when its pattern matches no topic
/// now (unless `confirmed`: topics created later are picked up) or the plugin refuses a config.
async fn accepted(
    pool: &Pool,
    store: &SecretStore,
    c: &Checked,
    confirmed: bool,
) -> Result<Preview> {
    let p = preview_of(pool, store, c).await?;
    if p.matched.is_empty() && !confirmed {
        return Err(Error::field(
            "topics",
            format!(
                "{} matches none of the source's {} topics; fix the pattern, or confirm to use it anyway (topics created later are picked up)",
                c.topics, p.source_topics
            ),
        ));
    }
    if !p.validation_errors.is_empty() {
        return Err(Error::Invalid {
            message: "the MirrorMaker plugin refused the config".into(),
            fields: p.validation_errors.clone(),
        });
    }
    Ok(p)
}

pub async fn preview(ctx: &Ctx, who: &Principal, input: &ReplicationInput) -> Result<Preview> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Operator, "create replications")?;
    let c = check(pool, who, input).await?;
    preview_of(pool, store, &c).await
}

/// Checks, shows the pattern against the source's topics, validates the three connectors with
/// the plugin, creates MirrorMaker's internal topics, then stores the replication and its
/// connectors for the reconciler.
pub async fn create(ctx: &Ctx, who: &Principal, input: &ReplicationInput) -> Result<Replication> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    who.require(Role::Operator, "create replications")?;
    let c = check(pool, who, input).await?;
    if db::query_scalar::<i64>("SELECT COUNT(*) FROM replications WHERE name = $1")
        .bind(&c.name)
        .fetch_one(pool)
        .await?
        > 0
    {
        return Err(Error::Conflict(format!(
            "a replication named {:?} already exists",
            c.name
        )));
    }
    let p = accepted(pool, store, &c, input.confirm_empty == Some(true)).await?;
    // The internal topics, compacted, created here rather than by MirrorMaker on first use.
    let spec = c.spec();
    let (on_target, on_source) = (
        crate::clusters::kafka::access(store, &c.target).await?,
        crate::clusters::kafka::access(store, &c.source).await?,
    );
    for (topic, target_side, compact) in spec.internal_topics() {
        let mut configs = BTreeMap::new();
        if compact {
            configs.insert("cleanup.policy".to_string(), "compact".to_string());
        }
        let t = crate::kafka::TopicSpec {
            name: topic.clone(),
            partitions: 1,
            replication_factor: 1,
            configs,
        };
        let access = if target_side { &on_target } else { &on_source };
        if let Err(e) = crate::kafka::create_topic(access, &t).await {
            if !crate::kafka::already_exists(&e) {
                return Err(Error::Unavailable(format!(
                    "cannot create {topic}: {}",
                    crate::kafka::explain(&e)
                )));
            }
        }
    }
    let id = format!("rp_{}", uuid::Uuid::new_v4().simple());
    let connector_ids: Vec<String> = (0..3)
        .map(|_| format!("cn_{}", uuid::Uuid::new_v4().simple()))
        .collect();
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    for (pc, cid) in p.connectors.iter().zip(&connector_ids) {
        connectors::insert(
            &mut tx,
            &connectors::NewConnector {
                id: cid,
                name: &pc.name,
                cluster_id: &c.connect.id,
                config: &pc.config,
                state: DesiredState::Running,
                owner: Some(("replication", &id)),
            },
        )
        .await?;
    }
    db::query("INSERT INTO replications (id, name, source_kafka_cluster_id, target_kafka_cluster_id, connect_cluster_id, topics, pipeline_ids, groups, replication_policy, separator, offset_syncs_location, sync_group_offsets, source_alias, target_alias, connector_ids, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)")
        .bind(&id)
        .bind(&c.name)
        .bind(&c.source.id)
        .bind(&c.target.id)
        .bind(&c.connect.id)
        .bind(&c.topics)
        .bind(json!(c.pipeline_ids).to_string())
        .bind(&c.groups)
        .bind(if c.identity { "identity" } else { "default" })
        .bind(&c.separator)
        .bind(&c.offset_syncs_location)
        .bind(i64::from(c.sync_group_offsets))
        .bind(spec.source_alias)
        .bind(spec.target_alias)
        .bind(json!(connector_ids).to_string())
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
    audit::record(&mut tx, Entry { actor: who.into(), action: "replication.create", target_kind: "replication", target_id: &id, outcome: Outcome::Success, summary: json!({"name": c.name, "source": c.source.name, "target": c.target.name, "topics": c.topics, "matched": p.matched.len(), "policy": if c.identity { "identity" } else { "default" }}) }).await?;
    crate::reconcile::bump_desired_version(&mut *tx).await?;
    tx.commit().await?;
    wake.wake();
    load(pool, &id).await
}

/// What `POST /api/v1/replications/{id}/<action>` and the page buttons ask: restart, pause or
/// resume (see [`crate::connectors::restart_pause_resume`]).
pub async fn act(ctx: &Ctx, who: &Principal, id: &str, action: Action) -> Result<Replication> {
    let (pool, wake) = (&ctx.pool, &*ctx.reconciler);
    let restart = restart(pool, wake, who, id, false);
    restart_pause_resume(action, restart, |to| set_state(pool, wake, who, id, to)).await
}

/// Pause or resume: all three connectors.
pub async fn set_state(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    state: DesiredState,
) -> Result<Replication> {
    who.require(Role::Operator, "pause or resume replications")?;
    let r = load(pool, id).await?;
    for c in &r.connector_ids {
        connectors::set_state(pool, wake, who, c, state).await?;
    }
    Ok(r)
}

/// The settings that fix a replication's remote topic names, where its offset syncs live and
/// where its connectors run: changing one means a new replication, and each says why.
const FIXED: [(&str, &str); 7] = [
    ("name", "it names the three connectors; create a new replication instead"),
    ("source_kafka_cluster_id", "the copies on the target come from this cluster; create a new replication instead"),
    ("target_kafka_cluster_id", "the copies and MirrorMaker's internal topics are on this cluster; create a new replication instead"),
    ("connect_cluster_id", "the connectors and their offsets live on this Connect cluster; create a new replication instead"),
    ("replication_policy", "it decides the copies' names on the target: the copies made so far would be abandoned and every record copied again under new names; create a new replication instead"),
    ("separator", "it is part of the copies' names on the target: the copies made so far would be abandoned and every record copied again under new names; create a new replication instead"),
    ("offset_syncs_location", "it moves the offset syncs to the other cluster: the checkpoints would lose the syncs that translate them; create a new replication instead"),
];

/// The replication's settings with `patch` over them. Only the topics (a pattern or
/// pipelines), the groups and whether to sync group offsets change in place; a different value
/// of any [`FIXED`] setting is refused by field.
fn merged(r: &Replication, patch: &ReplicationInput) -> Result<ReplicationInput> {
    let mut errors = FieldErrors::new();
    for (field, why) in FIXED {
        let (given, current) = match field {
            "name" => (&patch.name, &r.name),
            "source_kafka_cluster_id" => {
                (&patch.source_kafka_cluster_id, &r.source_kafka_cluster_id)
            }
            "target_kafka_cluster_id" => {
                (&patch.target_kafka_cluster_id, &r.target_kafka_cluster_id)
            }
            "connect_cluster_id" => (&patch.connect_cluster_id, &r.connect_cluster_id),
            "replication_policy" => (&patch.replication_policy, &r.replication_policy),
            "separator" => (&patch.separator, &r.separator),
            _ => (&patch.offset_syncs_location, &r.offset_syncs_location),
        };
        if given.as_deref().is_some_and(|g| g.trim() != current) {
            errors.insert(field.into(), format!("cannot change: {why}"));
        }
    }
    Error::check(errors)?;
    // A pattern given replaces the pipelines and pipelines replace a pattern; neither keeps
    // what the replication has.
    let (topics, pipeline_ids) = match (&patch.topics, &patch.pipeline_ids) {
        (None, None) if !r.pipeline_ids.is_empty() => (None, Some(r.pipeline_ids.clone())),
        (None, None) => (Some(r.topics.clone()), None),
        (t, p) => (t.clone(), p.clone()),
    };
    Ok(ReplicationInput {
        name: Some(r.name.clone()),
        source_kafka_cluster_id: Some(r.source_kafka_cluster_id.clone()),
        target_kafka_cluster_id: Some(r.target_kafka_cluster_id.clone()),
        connect_cluster_id: Some(r.connect_cluster_id.clone()),
        topics,
        pipeline_ids,
        groups: patch.groups.clone().or_else(|| Some(r.groups.clone())),
        replication_policy: Some(r.replication_policy.clone()),
        separator: Some(r.separator.clone()),
        offset_syncs_location: Some(r.offset_syncs_location.clone()),
        sync_group_offsets: patch.sync_group_offsets.or(Some(r.sync_group_offsets)),
        confirm_empty: patch.confirm_empty,
    })
}

/// What a change would make of the replication: its topics against the source's list and the
/// three configs as validated by the plugin. Changes nothing.
pub async fn preview_update(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    patch: &ReplicationInput,
) -> Result<Preview> {
    who.require(Role::Operator, "change replications")?;
    let r = load(pool, id).await?;
    let c = check(pool, who, &merged(&r, patch)?).await?;
    preview_of(pool, store, &c).await
}

/// Changes a replication's topics, groups or group-offset sync in place: the three connectors
/// are rendered again from the same policy, separator and offset-syncs location (so they still
/// agree), validated by the plugin, and each whose config changed gets its next generation for
/// the reconciler to apply. Nothing changes when a field is refused.
pub async fn update(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    patch: &ReplicationInput,
) -> Result<Replication> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    who.require(Role::Operator, "change replications")?;
    let r = load(pool, id).await?;
    for c in &r.connector_ids {
        crate::operations::refuse_if_held(pool, c, "change the replication").await?;
    }
    let c = check(pool, who, &merged(&r, patch)?).await?;
    let p = accepted(pool, store, &c, patch.confirm_empty == Some(true)).await?;
    let mut changes = serde_json::Map::new();
    for (field, from, to) in [
        ("topics", json!(r.topics), json!(c.topics)),
        ("pipeline_ids", json!(r.pipeline_ids), json!(c.pipeline_ids)),
        ("groups", json!(r.groups), json!(c.groups)),
        (
            "sync_group_offsets",
            json!(r.sync_group_offsets),
            json!(c.sync_group_offsets),
        ),
    ] {
        if from != to {
            changes.insert(field.into(), json!({"from": from, "to": to}));
        }
    }
    if changes.is_empty() {
        return Ok(r);
    }
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    for (pc, cid) in p.connectors.iter().zip(&r.connector_ids) {
        let before: Option<String> =
            db::query_scalar("SELECT config FROM connectors WHERE id = $1")
                .bind(cid)
                .fetch_optional(&mut *tx)
                .await?;
        let before = before.and_then(|c| serde_json::from_str::<BTreeMap<String, String>>(&c).ok());
        // Only a connector whose config changed is given to Connect again (a new config
        // restarts its tasks).
        if before.as_ref() == Some(&pc.config) {
            continue;
        }
        db::query("UPDATE connectors SET config = $1, generation = generation + 1, updated_at = $2 WHERE id = $3")
            .bind(json!(pc.config).to_string())
            .bind(&now)
            .bind(cid)
            .execute(&mut *tx)
            .await?;
    }
    db::query("UPDATE replications SET topics = $1, pipeline_ids = $2, groups = $3, sync_group_offsets = $4, updated_at = $5 WHERE id = $6")
        .bind(&c.topics)
        .bind(json!(c.pipeline_ids).to_string())
        .bind(&c.groups)
        .bind(i64::from(c.sync_group_offsets))
        .bind(&now)
        .bind(&r.id)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "replication.update",
            target_kind: "replication",
            target_id: &r.id,
            outcome: Outcome::Success,
            summary: json!({"name": r.name, "changes": changes, "matched": p.matched.len()}),
        },
    )
    .await?;
    crate::reconcile::bump_desired_version(&mut *tx).await?;
    tx.commit().await?;
    wake.wake();
    load(pool, &r.id).await
}

/// Restarts all three connectors and their tasks once (the reconciler asks Connect).
pub async fn restart(
    pool: &Pool,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    only_failed: bool,
) -> Result<Replication> {
    who.require(Role::Operator, "restart replications")?;
    let r = load(pool, id).await?;
    for c in &r.connector_ids {
        crate::operations::refuse_if_held(pool, c, "restart the replication").await?;
    }
    for c in &r.connector_ids {
        connectors::request_restart(pool, wake, who, c, only_failed).await?;
    }
    Ok(r)
}

/// Removes the three connectors (the reconciler deletes them from Connect), then the
/// replication. The copied topics stay on the target.
pub async fn delete(ctx: &Ctx, who: &Principal, id: &str) -> Result<()> {
    let pool = &ctx.pool;
    let wake: &crate::reconcile::Handle = &ctx.reconciler;
    who.require(Role::Operator, "delete replications")?;
    let r = load(pool, id).await?;
    let mut tx = pool.begin().await?;
    let op = crate::operations::insert(
        &mut tx,
        who,
        crate::operations::NewOperation {
            kind: "replication_delete",
            target_kind: "replication",
            target_id: &r.id,
            target_name: &r.name,
            params: json!({"connector_ids": r.connector_ids}),
        },
    )
    .await?;
    for c in &r.connector_ids {
        db::query("UPDATE connectors SET desired_state = 'deleted', generation = generation + 1, updated_at = $1 WHERE id = $2")
            .bind(crate::time::now())
            .bind(c)
            .execute(&mut *tx)
            .await?;
    }
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "replication.delete",
            target_kind: "replication",
            target_id: &r.id,
            outcome: Outcome::Success,
            summary: json!({"name": r.name, "operation_id": op}),
        },
    )
    .await?;
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    crate::operations::delete_finished(pool, &op, "the MirrorMaker connectors").await?;
    Ok(())
}

/// The steps of a replication delete: every connector gone, then the row.
pub async fn delete_step(
    ctx: &crate::operations::Ctx<'_>,
    op: &crate::operations::Operation,
) -> crate::operations::Step {
    use crate::operations::Step;
    let ids: Vec<String> =
        serde_json::from_value(op.params["connector_ids"].clone()).unwrap_or_default();
    match op.step.as_str() {
        "remove" => {
            for id in &ids {
                match crate::operations::connector_gone(&ctx.pool, id).await {
                    Ok(true) => {}
                    Ok(false) => return Step::Wait("waiting for the reconciler to remove the MirrorMaker connectors from Connect".into()),
                    Err(e) => return Step::Wait(e.to_string()),
                }
            }
            Step::Next("forget")
        }
        "forget" => match db::query("DELETE FROM replications WHERE id = $1")
            .bind(&op.target_id)
            .execute(&ctx.pool)
            .await
        {
            Ok(_) => Step::Done,
            Err(e) => Step::Wait(e.to_string()),
        },
        other => Step::Fail(format!("unknown step {other}")),
    }
}

/// A replication with its connectors and what was measured just now.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReplicationDetail")]
pub struct Detail {
    pub replication: Replication,
    /// The source cluster's name.
    pub source_cluster: String,
    /// The target cluster's name.
    pub target_cluster: String,
    pub connectors: Vec<connectors::ConnectorView>,
    pub progress: measure::Progress,
}

pub async fn detail(ctx: &Ctx, who: &Principal, id: &str) -> Result<Detail> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Viewer, "see replications")?;
    let r = load(pool, id).await?;
    let source = crate::clusters::kafka::get(pool, who, &r.source_kafka_cluster_id).await?;
    let target = crate::clusters::kafka::get(pool, who, &r.target_kafka_cluster_id).await?;
    let mut views = connectors::views(pool, &r.connector_ids).await?;
    let connectors = r
        .connector_ids
        .iter()
        .filter_map(|c| views.remove(c))
        .collect();
    let progress = measure::progress(store, &r, &source, &target).await;
    Ok(Detail {
        source_cluster: source.name,
        target_cluster: target.name,
        connectors,
        progress,
        replication: r,
    })
}

/// Seed 004's checks before anyone resumes consumers on the target; ClueCDC cannot verify
/// them, so they are shown unchecked, every time.
pub const CHECKLIST: &[&str] = &[
    "Old writers are fenced: the pipelines and producers that write to the source are stopped, so nothing lands there after the switch.",
    "Consumers have permission on the target: ACLs for the copied topic names and for their consumer groups.",
    "The schemas the records need are available on the target side (a schema registry, if one is used, is reachable from there).",
    "Clients have the target's endpoints ready: bootstrap servers, credentials and CA certificate.",
];

/// A check a person makes before a failover; ClueCDC cannot verify it (always unchecked).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ChecklistItem {
    pub item: &'static str,
    pub checked: bool,
}

/// Failover readiness for one consumer group: per partition where it would resume on the
/// target and what that resume would replay or miss. ClueCDC performs no cutover.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "FailoverReadiness")]
pub struct Readiness {
    /// The replication's name.
    pub replication: String,
    /// The consumer group.
    pub group: String,
    pub newest_checkpoint_age_secs: Option<f64>,
    pub partitions: Vec<measure::Checkpoint>,
    pub replay: i64,
    pub miss: i64,
    /// Records on the source not copied yet: lost to a failover now.
    pub not_copied: i64,
    pub checklist: Vec<ChecklistItem>,
    /// Groups with checkpoints, to choose from.
    pub groups: Vec<String>,
}

pub async fn readiness(ctx: &Ctx, who: &Principal, id: &str, group: &str) -> Result<Readiness> {
    let _pool = &ctx.pool;
    let _store: &SecretStore = &ctx.secrets;
    let d = detail(ctx, who, id).await?;
    let groups: Vec<String> = d
        .progress
        .checkpoints
        .iter()
        .map(|g| g.group.clone())
        .collect();
    let Some(g) = d
        .progress
        .checkpoints
        .into_iter()
        .find(|g| g.group == group)
    else {
        return Err(Error::NotFound(format!(
            "a checkpoint of group {group} in replication {} (checkpointed groups: {})",
            d.replication.name,
            if groups.is_empty() {
                "none yet".to_string()
            } else {
                groups.join(", ")
            }
        )));
    };
    Ok(Readiness {
        replication: d.replication.name,
        group: g.group,
        newest_checkpoint_age_secs: g.age_secs,
        replay: g.partitions.iter().filter_map(|p| p.replay).sum(),
        miss: g.partitions.iter().filter_map(|p| p.miss).sum(),
        not_copied: d.progress.lag_records,
        partitions: g.partitions,
        checklist: CHECKLIST
            .iter()
            .map(|item| ChecklistItem {
                item,
                checked: false,
            })
            .collect(),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(id: &str, name: &str) -> KafkaCluster {
        KafkaCluster {
            id: id.into(),
            name: name.into(),
            bootstrap_servers: format!("{id}:9092"),
            security_protocol: "PLAINTEXT".into(),
            sasl_mechanism: None,
            sasl_username: None,
            tls_ca_certificate: None,
            secret_ref: format!("ref_{id}"),
            health: None,
            health_at: None,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    fn connect() -> crate::clusters::ConnectCluster {
        crate::clusters::ConnectCluster {
            id: "cc_1".into(),
            name: "dr connect".into(),
            url: "http://connect:8083".into(),
            kafka_cluster_id: Some("kc_b".into()),
            managed_by: "cluecdc".into(),
            provider_token_at: None,
            basic_auth_user: None,
            secret_ref: None,
            tls_ca_certificate: None,
            health: None,
            health_at: None,
            observed_at: None,
            last_error: None,
            next_attempt_at: None,
            created_at: String::new(),
            updated_at: String::new(),
            last_pass_at: None,
            last_pass_ms: None,
            last_pass_age_secs: None,
            slow: false,
        }
    }

    fn found() -> Found {
        Found {
            source: Ok(kafka("kc_a", "primary")),
            target: Ok(kafka("kc_b", "dr")),
            connect: Some(connect()),
            pipelines: Vec::new(),
            reverse: None,
        }
    }

    fn input() -> ReplicationInput {
        ReplicationInput {
            name: Some("dr copy".into()),
            topics: Some("shop\\..*".into()),
            ..Default::default()
        }
    }

    /// The refusals as (field, message).
    fn refused(input: &ReplicationInput, found: &Found) -> FieldErrors {
        judge(input, found).expect_err("refused")
    }

    #[test]
    fn sound_settings_take_the_defaults_of_mirror_maker() {
        let s = judge(&input(), &found()).unwrap();
        assert_eq!(
            s,
            Settings {
                name: "dr copy".into(),
                topics: "shop\\..*".into(),
                pipeline_ids: Vec::new(),
                groups: ".*".into(),
                identity: false,
                separator: ".".into(),
                offset_syncs_location: "target".into(),
                sync_group_offsets: false,
            }
        );
    }

    #[test]
    fn the_same_cluster_as_source_and_target_is_refused_on_the_target_field() {
        let mut f = found();
        f.target = Ok(kafka("kc_a", "primary"));
        let e = refused(&input(), &f);
        assert!(
            e["target_kafka_cluster_id"].contains("is the source too"),
            "{e:?}"
        );
        // Two clusters whose names give one alias would share MirrorMaker's topic names.
        let mut f = found();
        f.target = Ok(kafka("kc_c", "Primary"));
        let e = refused(&input(), &f);
        assert!(e["target_kafka_cluster_id"].contains("same alias"), "{e:?}");
    }

    #[test]
    fn the_identity_policy_on_a_two_way_pair_is_refused_whichever_side_has_it() {
        let mut f = found();
        f.reverse = Some(("back".into(), "default".into()));
        let identity = ReplicationInput {
            replication_policy: Some("identity".into()),
            ..input()
        };
        let e = refused(&identity, &f);
        assert!(
            e["replication_policy"].contains("replication back copies dr back to primary")
                && e["replication_policy"].contains("loop"),
            "{e:?}"
        );
        // The other way round: this one default, the existing one identity.
        f.reverse = Some(("back".into(), "identity".into()));
        let e = refused(&input(), &f);
        assert!(e["replication_policy"].contains("loop"), "{e:?}");
        // Default on both sides is sound: the copies are named after their source.
        f.reverse = Some(("back".into(), "default".into()));
        assert!(judge(&input(), &f).is_ok());
        // Identity one way only is sound too.
        f.reverse = None;
        assert!(judge(&identity, &f).unwrap().identity);
    }

    #[test]
    fn each_setting_is_refused_by_its_own_field_with_how_to_fix_it() {
        let mut f = found();
        f.connect = None;
        f.source = Err("choose a registered Kafka cluster".into());
        let bad = ReplicationInput {
            name: Some(" ".into()),
            topics: Some("(unclosed".into()),
            groups: Some("[".into()),
            replication_policy: Some("mirror".into()),
            separator: Some("/".into()),
            offset_syncs_location: Some("middle".into()),
            ..Default::default()
        };
        let e = refused(&bad, &f);
        for (field, says) in [
            ("name", "1–64 characters"),
            ("connect_cluster_id", "choose the Connect cluster"),
            ("source_kafka_cluster_id", "registered Kafka cluster"),
            ("topics", "not a regular expression"),
            ("groups", "not a regular expression"),
            ("replication_policy", "default or identity"),
            ("offset_syncs_location", "target or source"),
        ] {
            assert!(
                e.get(field).is_some_and(|m| m.contains(says)),
                "{field}: {e:?}"
            );
        }
        // The separator only matters to the default policy.
        assert!(!e.contains_key("separator"), "{e:?}");
        let e = refused(
            &ReplicationInput {
                separator: Some("/".into()),
                ..input()
            },
            &found(),
        );
        assert!(e["separator"].contains("'.', '_' or '-'"), "{e:?}");
        let e = refused(
            &ReplicationInput {
                topics: None,
                ..input()
            },
            &found(),
        );
        assert!(e["topics"].contains("or choose pipelines"), "{e:?}");
    }

    #[test]
    fn pipelines_give_their_topic_prefixes_and_must_write_to_the_source() {
        let mut f = found();
        f.pipelines = vec![Ok(PipelineRef {
            name: "shop".into(),
            kafka_cluster_id: "kc_a".into(),
            topic_prefix: "shop.db".into(),
        })];
        let by_pipeline = ReplicationInput {
            topics: None,
            pipeline_ids: Some(vec!["pl_1".into()]),
            ..input()
        };
        assert_eq!(judge(&by_pipeline, &f).unwrap().topics, "shop\\.db\\..*");
        let both = ReplicationInput {
            pipeline_ids: Some(vec!["pl_1".into()]),
            ..input()
        };
        assert!(refused(&both, &f)["topics"].contains("not both"));
        f.pipelines = vec![
            Ok(PipelineRef {
                name: "shop".into(),
                kafka_cluster_id: "kc_b".into(),
                topic_prefix: "shop".into(),
            }),
            Err("pl_gone".into()),
        ];
        let e = refused(&by_pipeline, &f);
        assert!(e["pipeline_ids"].contains("no pipeline pl_gone"), "{e:?}");
        f.pipelines.pop();
        let e = refused(&by_pipeline, &f);
        assert!(
            e["pipeline_ids"].contains("shop writes to another Kafka cluster"),
            "{e:?}"
        );
    }

    fn replication() -> Replication {
        Replication {
            id: "rp_1".into(),
            name: "dr copy".into(),
            source_kafka_cluster_id: "kc_a".into(),
            target_kafka_cluster_id: "kc_b".into(),
            connect_cluster_id: "cc_1".into(),
            topics: "shop\\..*".into(),
            pipeline_ids: Vec::new(),
            groups: ".*".into(),
            replication_policy: "default".into(),
            separator: ".".into(),
            offset_syncs_location: "target".into(),
            sync_group_offsets: false,
            source_alias: "primary".into(),
            target_alias: "dr".into(),
            connector_ids: Vec::new(),
            created_at: String::new(),
        }
    }

    #[test]
    fn a_change_keeps_what_it_does_not_name_and_refuses_what_renames_the_copies() {
        let r = replication();
        let m = merged(
            &r,
            &ReplicationInput {
                groups: Some("billing".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(m.topics.as_deref(), Some("shop\\..*"));
        assert_eq!(m.groups.as_deref(), Some("billing"));
        assert_eq!(m.sync_group_offsets, Some(false));
        assert_eq!(m.replication_policy.as_deref(), Some("default"));
        // Pipelines given replace the pattern.
        let m = merged(
            &r,
            &ReplicationInput {
                pipeline_ids: Some(vec!["pl_1".into()]),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            (m.topics, m.pipeline_ids),
            (None, Some(vec!["pl_1".into()]))
        );
        // The same value of a fixed setting is no change.
        assert!(merged(
            &r,
            &ReplicationInput {
                separator: Some(".".into()),
                name: Some("dr copy".into()),
                ..Default::default()
            }
        )
        .is_ok());
        for (patch, field, says) in [
            (
                ReplicationInput {
                    replication_policy: Some("identity".into()),
                    ..Default::default()
                },
                "replication_policy",
                "copied again under new names",
            ),
            (
                ReplicationInput {
                    separator: Some("_".into()),
                    ..Default::default()
                },
                "separator",
                "copied again under new names",
            ),
            (
                ReplicationInput {
                    offset_syncs_location: Some("source".into()),
                    ..Default::default()
                },
                "offset_syncs_location",
                "checkpoints would lose the syncs",
            ),
            (
                ReplicationInput {
                    target_kafka_cluster_id: Some("kc_c".into()),
                    ..Default::default()
                },
                "target_kafka_cluster_id",
                "create a new replication",
            ),
        ] {
            match merged(&r, &patch) {
                Err(Error::Invalid { fields, .. }) => assert!(
                    fields[field].starts_with("cannot change") && fields[field].contains(says),
                    "{fields:?}"
                ),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
