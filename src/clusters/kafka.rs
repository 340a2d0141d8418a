//! Kafka clusters: bootstrap servers and security settings (the SASL password in the secret
//! store), health from broker metadata, and topics managed explicitly through the admin API.

use crate::db;
use std::collections::BTreeMap;

use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::kafka::{self, check_topic_name, KafkaAccess, TopicInfo, TopicSpec};
use crate::secrets::binding::{self, Binding};
use crate::secrets::store::{new_ref, SecretStore};
use crate::secrets::Secret;

/// A Kafka cluster ClueCDC knows (its SASL password is write-only and never shown).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct KafkaCluster {
    pub id: String,
    pub name: String,
    /// `host:port` pairs separated by commas.
    pub bootstrap_servers: String,
    #[schemars(with = "SecurityProtocol")]
    pub security_protocol: String,
    #[schemars(with = "Option<SaslMechanism>")]
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    /// The PEM CA certificate the brokers' TLS certificates are checked against (public
    /// roots when null).
    pub tls_ca_certificate: Option<String>,
    /// Connect configs refer to this cluster's secrets as `${cluecdc:<secret_ref>:<field>}`.
    pub secret_ref: String,
    /// The last health check, as JSON text of a `KafkaHealth` object (null before the first).
    pub health: Option<String>,
    pub health_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A Kafka cluster with its health checked now (`GET /api/v1/kafka-clusters/{id}`): the
/// fields of `KafkaCluster`, `health` as an object.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct KafkaClusterDetail {
    pub id: String,
    pub name: String,
    /// `host:port` pairs separated by commas.
    pub bootstrap_servers: String,
    #[schemars(with = "SecurityProtocol")]
    pub security_protocol: String,
    #[schemars(with = "Option<SaslMechanism>")]
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    pub tls_ca_certificate: Option<String>,
    pub secret_ref: String,
    pub health: kafka::Health,
    pub health_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl KafkaClusterDetail {
    pub fn new(c: KafkaCluster, health: kafka::Health) -> Self {
        KafkaClusterDetail {
            id: c.id,
            name: c.name,
            bootstrap_servers: c.bootstrap_servers,
            security_protocol: c.security_protocol,
            sasl_mechanism: c.sasl_mechanism,
            sasl_username: c.sasl_username,
            tls_ca_certificate: c.tls_ca_certificate,
            secret_ref: c.secret_ref,
            health,
            health_at: c.health_at,
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// How clients talk to the brokers (Kafka's `security.protocol`).
#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

/// The SASL mechanism (with `SASL_PLAINTEXT` or `SASL_SSL` only; `PLAIN` only over TLS).
#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl KafkaCluster {
    /// Java client settings for a connector's own clients of this cluster (Debezium's schema
    /// history for MySQL/MariaDB): the password and the CA only as `${cluecdc:…}` references,
    /// resolved on the worker (the CA as a file). Empty for a plain-text cluster.
    pub fn java_client_settings(&self) -> BTreeMap<String, String> {
        let mut c = BTreeMap::new();
        if self.security_protocol == "PLAINTEXT" {
            return c;
        }
        let reference = |field: &str| format!("${{cluecdc:{}:{field}}}", self.secret_ref);
        c.insert("security.protocol".into(), self.security_protocol.clone());
        if let (Some(m), Some(u)) = (&self.sasl_mechanism, &self.sasl_username) {
            let module = match m.as_str() {
                "PLAIN" => "org.apache.kafka.common.security.plain.PlainLoginModule",
                _ => "org.apache.kafka.common.security.scram.ScramLoginModule",
            };
            c.insert("sasl.mechanism".into(), m.clone());
            c.insert(
                "sasl.jaas.config".into(),
                format!(
                    "{module} required username=\"{}\" password=\"{}\";",
                    u.replace('\\', "\\\\").replace('"', "\\\""),
                    reference("sasl_password")
                ),
            );
        }
        if self.security_protocol.ends_with("SSL") && self.tls_ca_certificate.is_some() {
            c.insert("ssl.truststore.type".into(), "PEM".into());
            c.insert("ssl.truststore.location".into(), reference("ca_cert_file"));
        }
        c
    }
}

/// A Kafka cluster to register (`POST`), or the fields to change (`PATCH`: fields left out
/// stay as they are).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct KafkaClusterInput {
    pub name: Option<String>,
    /// `host:port` pairs separated by commas, e.g. `kafka-1:9092,kafka-2:9092`.
    pub bootstrap_servers: Option<String>,
    /// Default `PLAINTEXT`.
    #[serde(
        default,
        deserialize_with = "crate::wire::enum_string::<_, SecurityProtocol>"
    )]
    #[schemars(with = "Option<SecurityProtocol>")]
    pub security_protocol: Option<String>,
    /// Required with a SASL protocol.
    #[serde(
        default,
        deserialize_with = "crate::wire::enum_string::<_, SaslMechanism>"
    )]
    #[schemars(with = "Option<SaslMechanism>")]
    pub sasl_mechanism: Option<String>,
    /// Required with a SASL protocol.
    pub sasl_username: Option<String>,
    /// A PEM CA certificate for the brokers' TLS; an empty string removes it (`PATCH`).
    pub tls_ca_certificate: Option<String>,
    /// Required with a SASL protocol; stored encrypted, never returned.
    #[schemars(with = "Option<String>", extend("writeOnly" = true))]
    pub sasl_password: Option<Secret<String>>,
}

/// The SASL password goes to the brokers named by the bootstrap servers, by the mechanism, for
/// the user: changing any of them needs it again (`crate::secrets::binding`).
pub const BINDINGS: &[Binding] = &[Binding {
    secret: "sasl_password",
    settings: &["bootstrap_servers", "sasl_mechanism", "sasl_username"],
}];

const PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];
const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

fn check_bootstrap(s: &str) -> std::result::Result<String, String> {
    let parts: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return Err(
            "required: host:port pairs separated by commas, e.g. kafka-1:9092,kafka-2:9092".into(),
        );
    }
    for p in &parts {
        let (host, port) = p
            .rsplit_once(':')
            .ok_or_else(|| format!("{p}: write host:port"))?;
        crate::connections::settings::check_host(
            host.trim_start_matches('[').trim_end_matches(']'),
        )
        .map_err(|_| format!("{p}: the host must be a hostname or IP address"))?;
        port.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{p}: the port must be 1–65535"))?;
    }
    Ok(parts.join(","))
}

/// Name, bootstrap servers, protocol and mechanism, checked and normalized; nothing stored.
pub fn validate(input: &KafkaClusterInput) -> Result<(String, String, String, Option<String>)> {
    let mut errors = FieldErrors::new();
    let name = input.name.clone().unwrap_or_default().trim().to_string();
    if let Err(why) = crate::connections::validate_name(&name) {
        errors.insert("name".into(), why);
    }
    let bootstrap = check_bootstrap(input.bootstrap_servers.as_deref().unwrap_or(""))
        .unwrap_or_else(|why| {
            errors.insert("bootstrap_servers".into(), why);
            String::new()
        });
    let protocol = input
        .security_protocol
        .clone()
        .unwrap_or_else(|| "PLAINTEXT".into())
        .to_ascii_uppercase();
    if !PROTOCOLS.contains(&protocol.as_str()) {
        errors.insert(
            "security_protocol".into(),
            "choose PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL".into(),
        );
    }
    let sasl = protocol.starts_with("SASL");
    let mechanism = input
        .sasl_mechanism
        .clone()
        .map(|m| m.to_ascii_uppercase())
        .filter(|m| !m.is_empty());
    match (&mechanism, sasl) {
        (None, true) => {
            errors.insert(
                "sasl_mechanism".into(),
                "required with SASL: choose PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512".into(),
            );
        }
        (Some(m), true) if !MECHANISMS.contains(&m.as_str()) => {
            errors.insert(
                "sasl_mechanism".into(),
                "choose PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512".into(),
            );
        }
        (Some(_), false) => {
            errors.insert(
                "sasl_mechanism".into(),
                "only SASL_PLAINTEXT and SASL_SSL use a SASL mechanism".into(),
            );
        }
        _ => {}
    }
    if sasl
        && input
            .sasl_username
            .as_deref()
            .is_none_or(|u| u.trim().is_empty())
    {
        errors.insert("sasl_username".into(), "required with SASL".into());
    }
    if sasl && input.sasl_password.is_none() {
        errors.insert(
            "sasl_password".into(),
            "required with SASL; stored encrypted, never shown".into(),
        );
    }
    if !sasl && (input.sasl_username.is_some() || input.sasl_password.is_some()) {
        errors.insert(
            "sasl_username".into(),
            "only SASL_PLAINTEXT and SASL_SSL take SASL credentials".into(),
        );
    }
    if let Err(why) = kafka::check_plain_over_tls(&protocol, mechanism.as_deref()) {
        errors.insert("sasl_mechanism".into(), why.into());
    }
    if let Some(pem) = &input.tls_ca_certificate {
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            errors.insert(
                "tls_ca_certificate".into(),
                "paste a PEM certificate (it starts with -----BEGIN CERTIFICATE-----)".into(),
            );
        }
    }
    Error::check(errors)?;
    Ok((name, bootstrap, protocol, mechanism))
}

const SELECT: &str = "SELECT id, name, bootstrap_servers, security_protocol, sasl_mechanism, sasl_username, tls_ca_certificate, secret_ref, health, health_at, created_at, updated_at FROM kafka_clusters";

pub async fn create(ctx: &Ctx, who: &Principal, input: &KafkaClusterInput) -> Result<KafkaCluster> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage clusters")?;
    let (name, bootstrap, protocol, mechanism) = validate(input)?;
    let id = format!("kc_{}", uuid::Uuid::new_v4().simple());
    let secret_ref = new_ref();
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    audit::record(&mut tx, Entry { actor: who.into(), action: "kafka_cluster.create", target_kind: "kafka_cluster", target_id: &id, outcome: Outcome::Success, summary: json!({"name": name, "bootstrap_servers": bootstrap, "security_protocol": protocol, "sasl_mechanism": mechanism, "secret_fields_set": if input.sasl_password.is_some() { vec!["sasl_password"] } else { vec![] }}) }).await?;
    db::query("INSERT INTO kafka_clusters (id, name, bootstrap_servers, security_protocol, sasl_mechanism, sasl_username, tls_ca_certificate, secret_ref, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
        .bind(&id)
        .bind(&name)
        .bind(&bootstrap)
        .bind(&protocol)
        .bind(&mechanism)
        .bind(input.sasl_username.as_deref().map(str::trim))
        .bind(&input.tls_ca_certificate)
        .bind(&secret_ref)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .map_err(|e| if crate::db::is_unique_violation(&e) { Error::Conflict(format!("a Kafka cluster named {name:?} already exists")) } else { e.into() })?;
    if let Some(pw) = &input.sasl_password {
        store
            .put(
                &mut tx,
                &secret_ref,
                &[("sasl_password".to_string(), pw.clone())].into(),
            )
            .await?;
    }
    tx.commit().await?;
    get(pool, who, &id).await
}

/// Changes some settings; absent fields keep their value. Switching to a protocol without
/// SASL drops the SASL settings and the stored password (unless the patch sets them, which is
/// then refused). A new `sasl_password` replaces the stored one under the same reference.
pub async fn update(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    patch: &KafkaClusterInput,
) -> Result<KafkaCluster> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage clusters")?;
    let cur = get(pool, who, id).await?;
    let protocol = patch
        .security_protocol
        .clone()
        .unwrap_or_else(|| cur.security_protocol.clone());
    let sasl = protocol.to_ascii_uppercase().starts_with("SASL");
    let stored_password = store.get(&cur.secret_ref, "sasl_password").await?.is_some();
    let merged = KafkaClusterInput {
        name: Some(patch.name.clone().unwrap_or_else(|| cur.name.clone())),
        bootstrap_servers: Some(
            patch
                .bootstrap_servers
                .clone()
                .unwrap_or_else(|| cur.bootstrap_servers.clone()),
        ),
        security_protocol: Some(protocol),
        sasl_mechanism: patch
            .sasl_mechanism
            .clone()
            .or_else(|| cur.sasl_mechanism.clone().filter(|_| sasl)),
        sasl_username: patch
            .sasl_username
            .clone()
            .or_else(|| cur.sasl_username.clone().filter(|_| sasl)),
        // An empty certificate removes it (the public roots are trusted again).
        tls_ca_certificate: match &patch.tls_ca_certificate {
            Some(pem) if pem.trim().is_empty() => None,
            Some(pem) => Some(pem.clone()),
            None => cur.tls_ca_certificate.clone(),
        },
        // The stored password counts as given (validation only; it is not rewritten).
        sasl_password: patch
            .sasl_password
            .clone()
            .or_else(|| (sasl && stored_password).then(|| Secret::new(String::new()))),
    };
    let (name, bootstrap, protocol, mechanism) = validate(&merged)?;
    let user = merged.sasl_username.as_deref().map(str::trim);
    let rebound = binding::rebound(
        BINDINGS,
        &[
            ("bootstrap_servers", bootstrap != cur.bootstrap_servers),
            ("sasl_mechanism", mechanism != cur.sasl_mechanism),
            ("sasl_username", user != cur.sasl_username.as_deref()),
        ]
        .into_iter()
        .filter_map(|(f, changed)| changed.then_some(f))
        .collect::<Vec<_>>(),
        &if sasl && stored_password {
            vec!["sasl_password".to_string()]
        } else {
            vec![]
        },
    );
    Error::check(binding::refusals(
        &rebound,
        |_| patch.sasl_password.is_some(),
        "",
    ))?;
    let mut changed: Vec<&str> = Vec::new();
    for (field, given) in [
        ("name", patch.name.is_some()),
        ("bootstrap_servers", patch.bootstrap_servers.is_some()),
        ("security_protocol", patch.security_protocol.is_some()),
        ("sasl_mechanism", patch.sasl_mechanism.is_some()),
        ("sasl_username", patch.sasl_username.is_some()),
        ("tls_ca_certificate", patch.tls_ca_certificate.is_some()),
    ] {
        if given {
            changed.push(field);
        }
    }
    let mut tx = pool.begin().await?;
    audit::record(&mut tx, Entry { actor: who.into(), action: "kafka_cluster.update", target_kind: "kafka_cluster", target_id: id, outcome: Outcome::Success, summary: json!({"name": name, "changed": changed, "secret_fields_set": if patch.sasl_password.is_some() { vec!["sasl_password"] } else { vec![] }, "rebound": rebound}) }).await?;
    db::query("UPDATE kafka_clusters SET name = $1, bootstrap_servers = $2, security_protocol = $3, sasl_mechanism = $4, sasl_username = $5, tls_ca_certificate = $6, health = NULL, health_at = NULL, updated_at = $7 WHERE id = $8")
        .bind(&name)
        .bind(&bootstrap)
        .bind(&protocol)
        .bind(&mechanism)
        .bind(user)
        .bind(&merged.tls_ca_certificate)
        .bind(crate::time::now())
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(|e| if crate::db::is_unique_violation(&e) { Error::Conflict(format!("a Kafka cluster named {name:?} already exists")) } else { e.into() })?;
    match (&patch.sasl_password, protocol.starts_with("SASL")) {
        (Some(pw), true) => {
            store
                .put(
                    &mut tx,
                    &cur.secret_ref,
                    &[("sasl_password".to_string(), pw.clone())].into(),
                )
                .await?
        }
        (_, false) => {
            store
                .remove(&mut tx, &cur.secret_ref, "sasl_password")
                .await?
        }
        _ => {}
    }
    tx.commit().await?;
    get(pool, who, id).await
}

pub async fn list(ctx: &Ctx, who: &Principal) -> Result<Vec<KafkaCluster>> {
    let pool = &ctx.pool;
    who.require(Role::Viewer, "see Kafka clusters")?;
    Ok(db::query_as(&format!("{SELECT} ORDER BY name"))
        .fetch_all(pool)
        .await?)
}

pub async fn get(pool: &Pool, who: &Principal, id: &str) -> Result<KafkaCluster> {
    who.require(Role::Viewer, "see Kafka clusters")?;
    db::query_as(&format!("{SELECT} WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| Error::NotFound(format!("Kafka cluster {id}")))
}

/// The pipelines and replications whose topics live on a Kafka cluster; deleting it is refused
/// while this is not empty.
pub async fn used_by(pool: &Pool, id: &str) -> Result<Vec<String>> {
    let users: Vec<String> = db::query_scalar(
        "SELECT 'pipeline ' || name FROM pipelines WHERE kafka_cluster_id = $1 \
         UNION ALL SELECT 'replication ' || name FROM replications \
         WHERE source_kafka_cluster_id = $1 OR target_kafka_cluster_id = $1",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok(users)
}

pub async fn delete(ctx: &Ctx, who: &Principal, id: &str) -> Result<()> {
    let pool = &ctx.pool;
    who.require(Role::Admin, "manage clusters")?;
    let c = get(pool, who, id).await?;
    let users: Vec<String> =
        db::query_scalar("SELECT name FROM connect_clusters WHERE kafka_cluster_id = $1")
            .bind(id)
            .fetch_all(pool)
            .await?;
    if !users.is_empty() {
        return Err(Error::Conflict(format!(
            "Kafka cluster {} is used by Connect cluster{} {}; change or forget {} first",
            c.name,
            if users.len() == 1 { "" } else { "s" },
            users.join(", "),
            if users.len() == 1 { "it" } else { "them" }
        )));
    }
    let users = used_by(pool, id).await?;
    if !users.is_empty() {
        return Err(Error::Conflict(format!(
            "Kafka cluster {} is used by {}; delete or move those first",
            c.name,
            users.join(", ")
        )));
    }
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "kafka_cluster.delete",
            target_kind: "kafka_cluster",
            target_id: id,
            outcome: Outcome::Success,
            summary: json!({"name": c.name}),
        },
    )
    .await?;
    db::query("DELETE FROM secret_values WHERE secret_ref = $1")
        .bind(&c.secret_ref)
        .execute(&mut *tx)
        .await?;
    db::query("DELETE FROM kafka_clusters WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

pub async fn access(store: &SecretStore, c: &KafkaCluster) -> Result<KafkaAccess> {
    Ok(KafkaAccess {
        bootstrap_servers: c.bootstrap_servers.clone(),
        security_protocol: c.security_protocol.clone(),
        sasl_mechanism: c.sasl_mechanism.clone(),
        sasl_username: c.sasl_username.clone(),
        sasl_password: store.get(&c.secret_ref, "sasl_password").await?,
        tls_ca_pem: c.tls_ca_certificate.clone(),
    })
}

/// Checks the cluster now and stores the result with its time.
pub async fn check_health(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
) -> Result<kafka::Health> {
    let c = get(pool, who, id).await?;
    let h = kafka::health(&access(store, &c).await?).await;
    // Only over the settings that were checked: a change made during the check cleared the
    // health, and the old address's answer must not come back over the new one.
    db::query("UPDATE kafka_clusters SET health = $1, health_at = $2 WHERE id = $3 AND bootstrap_servers = $4 AND updated_at = $5")
        .bind(json!(h).to_string())
        .bind(crate::time::now())
        .bind(id)
        .bind(&c.bootstrap_servers)
        .bind(&c.updated_at)
        .execute(pool)
        .await?;
    Ok(h)
}

/// The cluster with its health, checked now (`GET /api/v1/kafka-clusters/{id}`): the check
/// stores the health and its time, which the cluster then shows, so it runs first.
pub async fn detail(ctx: &Ctx, who: &Principal, id: &str) -> Result<KafkaClusterDetail> {
    let health = check_health(&ctx.pool, &ctx.secrets, who, id).await?;
    let cluster = get(&ctx.pool, who, id).await?;
    Ok(KafkaClusterDetail::new(cluster, health))
}

pub async fn topics(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
) -> Result<Vec<TopicInfo>> {
    let c = get(pool, who, id).await?;
    kafka::topics(&access(store, &c).await?, None)
        .await
        .map_err(|e| Error::Unavailable(format!("Kafka cluster {}: {e}", c.name)))
}

pub async fn topic(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    name: &str,
) -> Result<TopicInfo> {
    let c = get(pool, who, id).await?;
    if check_topic_name(name).is_err() {
        // Kafka refuses such a name outright (TOPIC_EXCEPTION); no such topic can exist.
        return Err(Error::NotFound(format!("topic {name}")));
    }
    let mut found = kafka::topics(&access(store, &c).await?, Some(name.to_string()))
        .await
        .map_err(|e| {
            if unknown_topic(&e) {
                Error::NotFound(format!("topic {name}"))
            } else {
                Error::Unavailable(format!("Kafka cluster {}: {e}", c.name))
            }
        })?;
    found
        .pop()
        .ok_or_else(|| Error::NotFound(format!("topic {name}")))
}

/// A topic to create: every setting explicit, nothing left to broker defaults by accident.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "NewTopic")]
pub struct NewTopicInput {
    /// 1–249 characters: letters, digits, `.`, `_` and `-` (not `.` or `..`).
    pub name: Option<String>,
    /// Required.
    #[schemars(range(min = 1, max = 1000))]
    pub partitions: Option<i64>,
    /// Required; at most the number of brokers.
    #[schemars(range(min = 1, max = 10))]
    pub replication_factor: Option<i64>,
    /// At least 60000 (one minute), or -1 to keep records forever; the broker's default when
    /// left out.
    #[schemars(extend("anyOf" = [{"const": -1}, {"minimum": 60000}]))]
    pub retention_ms: Option<i64>,
    /// Default `delete`.
    #[serde(
        default,
        deserialize_with = "crate::wire::enum_string::<_, CleanupPolicy>"
    )]
    #[schemars(with = "Option<CleanupPolicy>")]
    pub cleanup_policy: Option<String>,
}

/// Kafka's `cleanup.policy` for a new topic.
#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub enum CleanupPolicy {
    #[serde(rename = "delete")]
    Delete,
    #[serde(rename = "compact")]
    Compact,
    #[serde(rename = "compact,delete")]
    CompactDelete,
}

/// Validates a topic request; pure, shared with pipelines (which create their topics).
pub fn topic_spec(input: &NewTopicInput) -> Result<TopicSpec> {
    let mut errors = FieldErrors::new();
    let name = input.name.clone().unwrap_or_default();
    if let Err(why) = check_topic_name(&name) {
        errors.insert("name".into(), why);
    }
    let partitions = input.partitions.unwrap_or(0);
    if !(1..=1000).contains(&partitions) {
        errors.insert("partitions".into(), "required: 1 to 1000".into());
    }
    let rf = input.replication_factor.unwrap_or(0);
    if !(1..=10).contains(&rf) {
        errors.insert(
            "replication_factor".into(),
            "required: 1 to 10, and at most the number of brokers".into(),
        );
    }
    let policy = input
        .cleanup_policy
        .clone()
        .unwrap_or_else(|| "delete".into());
    if !["delete", "compact", "compact,delete"].contains(&policy.as_str()) {
        errors.insert(
            "cleanup_policy".into(),
            "choose delete, compact or compact,delete".into(),
        );
    }
    let mut configs = BTreeMap::new();
    configs.insert("cleanup.policy".to_string(), policy);
    match input.retention_ms {
        Some(ms) if ms == -1 || ms >= 60_000 => {
            configs.insert("retention.ms".to_string(), ms.to_string());
        }
        Some(_) => {
            errors.insert(
                "retention_ms".into(),
                "at least 60000 (one minute), or -1 to keep forever".into(),
            );
        }
        None => {}
    }
    Error::check(errors)?;
    Ok(TopicSpec {
        name,
        partitions: partitions as i32,
        replication_factor: rf as i32,
        configs,
    })
}

pub async fn create_topic(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    input: &NewTopicInput,
) -> Result<TopicInfo> {
    who.require(Role::Operator, "create topics")?;
    let spec = topic_spec(input)?;
    let c = get(pool, who, id).await?;
    let access = access(store, &c).await?;
    let health = kafka::health(&access).await;
    if health.reachable && spec.replication_factor as usize > health.brokers.len() {
        return Err(Error::field(
            "replication_factor",
            format!(
                "the cluster has {} broker{}; the replication factor cannot exceed that",
                health.brokers.len(),
                if health.brokers.len() == 1 { "" } else { "s" }
            ),
        ));
    }
    kafka::create_topic(&access, &spec).await.map_err(|e| {
        if crate::kafka::already_exists(&e) {
            Error::Conflict(format!("topic {} already exists", spec.name))
        } else {
            Error::Unavailable(e)
        }
    })?;
    audit::record_alone(pool, Entry { actor: who.into(), action: "topic.create", target_kind: "topic", target_id: &spec.name, outcome: Outcome::Success, summary: json!({"cluster": c.name, "partitions": spec.partitions, "replication_factor": spec.replication_factor, "configs": spec.configs}) }).await?;
    // A partition just created may not have a leader that answers offset requests yet (its
    // watermarks read -1, unknown): the answer waits for them a little, then says what it has.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let t = topic(pool, store, who, id, &spec.name).await?;
        let known = t
            .partitions
            .iter()
            .all(|p| p.low_watermark >= 0 && p.high_watermark >= 0);
        if known || std::time::Instant::now() >= deadline {
            return Ok(t);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Deletes a topic: an explicit, confirmed action (the caller repeats the name) that is audited.
pub async fn delete_topic(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    name: &str,
    confirm: &str,
) -> Result<()> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "delete topics")?;
    if confirm != name {
        return Err(Error::field(
            "confirm",
            format!("type the topic name {name} to confirm: its records are deleted for good"),
        ));
    }
    let c = get(pool, who, id).await?;
    if check_topic_name(name).is_err() {
        return Err(Error::NotFound(format!("topic {name}")));
    }
    let result = kafka::delete_topic(&access(store, &c).await?, name).await;
    audit::record_alone(
        pool,
        Entry {
            actor: who.into(),
            action: "topic.delete",
            target_kind: "topic",
            target_id: name,
            outcome: if result.is_ok() {
                Outcome::Success
            } else {
                Outcome::Failure
            },
            summary: json!({"cluster": c.name, "error": result.as_ref().err()}),
        },
    )
    .await?;
    result.map_err(|e| {
        if unknown_topic(&e) {
            Error::NotFound(format!("topic {name}"))
        } else {
            Error::Unavailable(e)
        }
    })
}

/// librdkafka names it UnknownTopicOrPartition or RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART.
fn unknown_topic(e: &str) -> bool {
    let e = e.to_ascii_lowercase().replace('_', "");
    e.contains("unknowntopic")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipeline whose connector is already gone still references both clusters: deleting
    /// either answers a conflict naming the pipeline (it was a 500 from the foreign key).
    #[tokio::test]
    async fn deleting_a_cluster_a_pipeline_still_references_is_a_conflict_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        for sql in [
            "INSERT INTO kafka_clusters (id, name, bootstrap_servers, secret_ref, created_at, updated_at) VALUES ('kc', 'k', 'k:9092', 'sec_k', $1, $1)",
            "INSERT INTO connect_clusters (id, name, url, created_at, updated_at) VALUES ('cc', 'c', 'http://127.0.0.1:1', $1, $1)",
            "INSERT INTO connections (id, name, provider, capabilities, settings, secret_ref, created_at, updated_at) VALUES ('cn', 'src', 'POSTGRESQL', '[\"SOURCE\"]', '{}', 'sec_cn', $1, $1)",
            "INSERT INTO pipelines (id, name, source_connection_id, kafka_cluster_id, connect_cluster_id, tables, topic_prefix, partitions, replication_factor, snapshot_mode, publication_mode, options, connector_id, created_at, updated_at) VALUES ('pl', 'orders', 'cn', 'kc', 'cc', '[]', 'orders', 1, 1, 'initial', 'filtered', '{}', 'gone', $1, $1)",
        ] {
            db::query(sql)
                .bind(crate::time::now())
                .execute(&pool)
                .await
                .unwrap();
        }
        let who = Principal::cli();
        let ctx = crate::ctx::Ctx::for_test(&pool);
        match crate::clusters::connect::delete(&ctx, &who, "cc").await {
            Err(Error::Conflict(m)) => {
                assert!(m.contains("pipeline orders") && m.contains("first"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        match delete(&ctx, &who, "kc").await {
            Err(Error::Conflict(m)) => {
                assert!(m.contains("pipeline orders") && m.contains("first"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        db::query("DELETE FROM pipelines")
            .execute(&pool)
            .await
            .unwrap();
        crate::clusters::connect::delete(&ctx, &who, "cc")
            .await
            .unwrap();
        delete(&ctx, &who, "kc").await.unwrap();
    }

    fn cluster(protocol: &str, mechanism: Option<&str>, ca: bool) -> KafkaCluster {
        KafkaCluster {
            id: "kc_1".into(),
            name: "k".into(),
            bootstrap_servers: "k:9094".into(),
            security_protocol: protocol.into(),
            sasl_mechanism: mechanism.map(str::to_string),
            sasl_username: mechanism.map(|_| "cdc \"user\"".to_string()),
            tls_ca_certificate: ca.then(|| "-----BEGIN CERTIFICATE-----".to_string()),
            secret_ref: "sec_k".into(),
            health: None,
            health_at: None,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    #[test]
    fn java_client_settings_carry_references_never_the_password_or_the_pem() {
        assert!(cluster("PLAINTEXT", None, false)
            .java_client_settings()
            .is_empty());
        let c = cluster("SASL_SSL", Some("SCRAM-SHA-512"), true).java_client_settings();
        assert_eq!(c["security.protocol"], "SASL_SSL");
        assert_eq!(c["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(
            c["sasl.jaas.config"],
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"cdc \\\"user\\\"\" password=\"${cluecdc:sec_k:sasl_password}\";"
        );
        assert_eq!(c["ssl.truststore.type"], "PEM");
        assert_eq!(
            c["ssl.truststore.location"],
            "${cluecdc:sec_k:ca_cert_file}"
        );
        let plain = cluster("SASL_PLAINTEXT", Some("PLAIN"), false).java_client_settings();
        assert!(plain["sasl.jaas.config"]
            .starts_with("org.apache.kafka.common.security.plain.PlainLoginModule"));
        assert!(!plain.contains_key("ssl.truststore.location"));
    }

    #[test]
    fn bootstrap_servers_are_host_port_pairs() {
        assert_eq!(
            check_bootstrap(" a:9092, b.example:19092 ").unwrap(),
            "a:9092,b.example:19092"
        );
        assert!(check_bootstrap("").is_err());
        assert!(check_bootstrap("kafka").unwrap_err().contains("host:port"));
        assert!(check_bootstrap("kafka:0").unwrap_err().contains("1–65535"));
        assert!(check_bootstrap("http://kafka:9092").is_err());
    }

    #[test]
    fn sasl_needs_a_mechanism_user_and_password() {
        let input = KafkaClusterInput {
            name: Some("k".into()),
            bootstrap_servers: Some("k:9092".into()),
            security_protocol: Some("SASL_SSL".into()),
            ..Default::default()
        };
        let Err(Error::Invalid { fields, .. }) = validate(&input) else {
            panic!()
        };
        assert!(
            fields.contains_key("sasl_mechanism")
                && fields.contains_key("sasl_username")
                && fields.contains_key("sasl_password")
        );
    }

    #[test]
    fn sasl_plain_is_refused_without_tls_and_allowed_over_it_or_with_scram() {
        let input = |protocol: &str, mechanism: &str| KafkaClusterInput {
            name: Some("k".into()),
            bootstrap_servers: Some("k:9092".into()),
            security_protocol: Some(protocol.into()),
            sasl_mechanism: Some(mechanism.into()),
            sasl_username: Some("cdc".into()),
            sasl_password: Some(Secret::new("p".into())),
            ..Default::default()
        };
        let Err(Error::Invalid { fields, .. }) = validate(&input("sasl_plaintext", "plain")) else {
            panic!("SASL_PLAINTEXT with PLAIN was accepted")
        };
        assert_eq!(
            fields["sasl_mechanism"],
            "PLAIN sends the password in clear text; use SASL_SSL (TLS) for PLAIN, or SCRAM-SHA-256/SCRAM-SHA-512"
        );
        assert_eq!(fields.len(), 1, "{fields:?}");
        for (protocol, mechanism) in [
            ("SASL_SSL", "PLAIN"),
            ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
            ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
        ] {
            assert!(
                validate(&input(protocol, mechanism)).is_ok(),
                "{protocol} {mechanism}"
            );
        }
    }

    #[test]
    fn topic_specs_are_explicit_and_checked() {
        let ok = topic_spec(&NewTopicInput {
            name: Some("cdc.public.orders".into()),
            partitions: Some(3),
            replication_factor: Some(1),
            retention_ms: Some(604_800_000),
            cleanup_policy: None,
        })
        .unwrap();
        assert_eq!(ok.configs["cleanup.policy"], "delete");
        assert_eq!(ok.configs["retention.ms"], "604800000");
        let Err(Error::Invalid { fields, .. }) = topic_spec(&NewTopicInput {
            name: Some("bad name".into()),
            partitions: Some(0),
            replication_factor: None,
            retention_ms: Some(5),
            cleanup_policy: Some("keep".into()),
        }) else {
            panic!()
        };
        for f in [
            "name",
            "partitions",
            "replication_factor",
            "retention_ms",
            "cleanup_policy",
        ] {
            assert!(fields.contains_key(f), "{f}");
        }
    }
}
