//! A thin rdkafka admin client: health, topics with broker metadata and watermarks, topic
//! configs, create and delete. Knows nothing of ClueCDC's tables. librdkafka calls block, so
//! they run on the blocking pool with timeouts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use serde::Serialize;

use crate::secrets::Secret;

const TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach a cluster. The SASL password is decrypted only to build a client.
#[derive(Clone, Debug)]
pub struct KafkaAccess {
    pub bootstrap_servers: String,
    pub security_protocol: String,
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    pub sasl_password: Option<Secret<String>>,
    pub tls_ca_pem: Option<String>,
}

impl KafkaAccess {
    pub fn plain(bootstrap: &str) -> Self {
        KafkaAccess {
            bootstrap_servers: bootstrap.into(),
            security_protocol: "PLAINTEXT".into(),
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            tls_ca_pem: None,
        }
    }

    /// A digest of every setting a client is built from (the password too, never kept).
    fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [
            Some(self.bootstrap_servers.as_str()),
            Some(self.security_protocol.as_str()),
            self.sasl_mechanism.as_deref(),
            self.sasl_username.as_deref(),
            self.sasl_password.as_ref().map(|p| p.expose().as_str()),
            self.tls_ca_pem.as_deref(),
        ] {
            // Length-prefixed, so that no two different settings hash alike.
            let part = part.unwrap_or("\u{0}none");
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.finalize().into()
    }

    /// The client's configuration; refused for SASL PLAIN without TLS, also for a cluster
    /// stored before that rule, so that ClueCDC never sends its password in clear text.
    fn config(&self) -> Result<ClientConfig, String> {
        check_plain_over_tls(&self.security_protocol, self.sasl_mechanism.as_deref())?;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("security.protocol", self.security_protocol.to_lowercase())
            .set("socket.connection.setup.timeout.ms", "5000")
            .set("client.id", "cluecdc")
            .set("log_level", "3");
        if let Some(m) = &self.sasl_mechanism {
            c.set("sasl.mechanism", m);
        }
        if let Some(u) = &self.sasl_username {
            c.set("sasl.username", u);
        }
        if let Some(p) = &self.sasl_password {
            c.set("sasl.password", p.expose());
        }
        if let Some(pem) = &self.tls_ca_pem {
            c.set("ssl.ca.pem", pem);
        }
        Ok(c)
    }
}

/// SASL PLAIN hands the broker the password as it is: only inside TLS.
pub fn check_plain_over_tls(
    security_protocol: &str,
    sasl_mechanism: Option<&str>,
) -> Result<(), &'static str> {
    let plain = sasl_mechanism.is_some_and(|m| m.eq_ignore_ascii_case("PLAIN"));
    if plain && security_protocol.eq_ignore_ascii_case("SASL_PLAINTEXT") {
        Err("PLAIN sends the password in clear text; use SASL_SSL (TLS) for PLAIN, or SCRAM-SHA-256/SCRAM-SHA-512")
    } else {
        Ok(())
    }
}

/// What a Kafka cluster looked like at a health check.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "KafkaHealth")]
pub struct Health {
    pub reachable: bool,
    pub brokers: Vec<BrokerInfo>,
    /// How many topics the cluster has.
    pub topics: usize,
    /// Why the cluster could not be reached (sanitized).
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "KafkaBroker")]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: i32,
}

/// One partition: its replicas by broker id, and its offsets (metadata only, never records).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "KafkaTopicPartition")]
pub struct PartitionInfo {
    pub id: i32,
    /// The leader's broker id (-1 without a leader).
    pub leader: i32,
    pub replicas: Vec<i32>,
    /// The in-sync replicas' broker ids.
    pub isr: Vec<i32>,
    pub low_watermark: i64,
    pub high_watermark: i64,
}

/// A topic's broker metadata (never record payloads).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "KafkaTopic")]
pub struct TopicInfo {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    /// The topic's configs (`cleanup.policy`, `retention.ms`, …); left out where not read.
    // `default` only so that the document does not list it as required (left out when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub configs: BTreeMap<String, String>,
    /// Kafka's own topics (`__consumer_offsets`, …).
    pub internal: bool,
}

impl TopicInfo {
    pub fn replication_factor(&self) -> usize {
        self.partitions
            .first()
            .map(|p| p.replicas.len())
            .unwrap_or(0)
    }

    pub fn fully_replicated(&self) -> bool {
        self.partitions
            .iter()
            .all(|p| p.isr.len() == p.replicas.len())
    }

    pub fn messages(&self) -> i64 {
        self.partitions
            .iter()
            .map(|p| p.high_watermark - p.low_watermark)
            .sum()
    }
}

/// A topic to create: everything explicit, nothing left to broker defaults by accident.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
    pub configs: BTreeMap<String, String>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| e.to_string())?
}

/// How long an admin client is kept after its last use (see [`admin`]).
const ADMIN_IDLE: Duration = Duration::from_secs(60);

type Admin = AdminClient<DefaultClientContext>;

/// An admin client for this access, reused while requests keep coming. A new client costs its
/// threads and a bootstrap (connection, API versions, metadata) before its first request, and
/// joining its threads when dropped; a burst of pipeline creates paid both once per create.
/// Clients are keyed by a digest of everything they were built from, the password included,
/// so changed credentials or settings get a new client; one idle for [`ADMIN_IDLE`] is closed.
fn admin(access: &KafkaAccess) -> Result<Arc<Admin>, String> {
    type Clients = Mutex<HashMap<[u8; 32], (Arc<Admin>, Instant)>>;
    static CLIENTS: OnceLock<Clients> = OnceLock::new();
    let key = access.fingerprint();
    let now = Instant::now();
    let mut clients = CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let idle: Vec<[u8; 32]> = clients
        .iter()
        .filter(|(k, (_, used))| **k != key && now.duration_since(*used) > ADMIN_IDLE)
        .map(|(k, _)| *k)
        .collect();
    let closed: Vec<_> = idle.iter().filter_map(|k| clients.remove(k)).collect();
    if !closed.is_empty() {
        // Dropping a client joins its threads: not on the caller's (async) thread.
        std::thread::spawn(move || drop(closed));
    }
    if let Some((client, used)) = clients.get_mut(&key) {
        *used = now;
        return Ok(client.clone());
    }
    let client: Arc<Admin> = Arc::new(access.config()?.create().map_err(|e| e.to_string())?);
    clients.insert(key, (client.clone(), now));
    Ok(client)
}

/// Keeps the last connection-level error librdkafka reported beside a call: a refused SASL
/// login or a failed TLS handshake reaches the call itself only as "BrokerTransportFailure".
#[derive(Default)]
pub struct Errors(Mutex<Option<String>>);

impl rdkafka::ClientContext for Errors {
    fn error(&self, _error: rdkafka::error::KafkaError, reason: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
    }

    /// librdkafka reports a refused login or handshake as an error-level log line ("FAIL").
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        if matches!(level, L::Emerg | L::Alert | L::Critical | L::Error) {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.to_string());
        }
        tracing::debug!(target: "rdkafka", fac, message);
    }
}

impl rdkafka::consumer::ConsumerContext for Errors {}

impl Errors {
    /// Whether the broker refused the login or the TLS handshake failed: waiting longer will
    /// not change the answer.
    fn refused(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
            .is_some_and(|m| {
                let m = m.to_lowercase();
                m.contains("sasl authentication error") || m.contains("ssl handshake failed")
            })
    }

    /// The call's error, with the connection error that caused it and what fixes that.
    fn explain(&self, e: &rdkafka::error::KafkaError) -> String {
        let call = e.to_string();
        match self.0.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            Some(reason) => explain(&format!("{call}: {reason}")),
            None => explain(&call),
        }
    }
}

/// A Kafka client error in the words of the cluster's settings (never a credential: librdkafka
/// does not put one in its messages).
pub fn explain(message: &str) -> String {
    let m = message.to_lowercase();
    if m.contains("sasl authentication error") || m.contains("authentication failed") {
        format!("SASL authentication failed: the broker refused the user name or password; check sasl_username, sasl_password and sasl_mechanism ({message})")
    } else if m.contains("certificate verify failed") || m.contains("ssl handshake failed") {
        let why = crate::connections::tls_problem(&m).unwrap_or(
            "the TLS handshake failed: check security_protocol and tls_ca_certificate against the listener",
        );
        format!(
            "TLS: {} ({message})",
            why.replace("the connection's CA certificate", "tls_ca_certificate")
        )
    } else {
        message.to_string()
    }
}

/// Cluster (or one topic's) metadata. librdkafka retries a refused login or handshake until
/// the call's timeout; asking in one-second steps lets a known cause answer at once instead of
/// after [`TIMEOUT`]. Polling hands the client's queued error events to [`Errors`].
fn metadata(
    c: &BaseConsumer<Errors>,
    topic: Option<&str>,
) -> Result<rdkafka::metadata::Metadata, String> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let step = left.min(Duration::from_secs(1));
        match c.fetch_metadata(topic, step) {
            Ok(md) => return Ok(md),
            Err(e) => {
                let _ = c.poll(Duration::ZERO);
                if left <= step || c.context().refused() {
                    return Err(c.context().explain(&e));
                }
            }
        }
    }
}

fn consumer(access: &KafkaAccess) -> Result<BaseConsumer<Errors>, String> {
    access
        .config()?
        .set("group.id", "cluecdc-metadata")
        .set("enable.auto.commit", "false")
        .create_with_context(Errors::default())
        .map_err(|e| e.to_string())
}

pub async fn health(access: &KafkaAccess) -> Health {
    let access = access.clone();
    match blocking(move || {
        let c = consumer(&access)?;
        let md = metadata(&c, None)?;
        Ok(Health {
            reachable: true,
            brokers: md
                .brokers()
                .iter()
                .map(|b| BrokerInfo {
                    id: b.id(),
                    host: b.host().to_string(),
                    port: b.port(),
                })
                .collect(),
            topics: md.topics().len(),
            error: None,
        })
    })
    .await
    {
        Ok(h) => h,
        Err(e) => Health {
            reachable: false,
            brokers: vec![],
            topics: 0,
            error: Some(e),
        },
    }
}

/// Every topic (or one), with partition metadata and watermarks; configs only for a single topic.
pub async fn topics(access: &KafkaAccess, only: Option<String>) -> Result<Vec<TopicInfo>, String> {
    let a = access.clone();
    let single = only.clone();
    let mut topics = blocking(move || {
        let c = consumer(&a)?;
        let md = metadata(&c, single.as_deref())?;
        let wanted: Vec<(String, i32)> = md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .flat_map(|t| {
                t.partitions()
                    .iter()
                    .map(|p| (t.name().to_string(), p.id()))
            })
            .collect();
        let marks = watermarks(&c, &wanted);
        let mut out = Vec::new();
        for t in md.topics() {
            if let Some(err) = t.error() {
                if single.is_some() {
                    return Err(format!("topic {}: {err:?}", t.name()));
                }
                continue;
            }
            let mut partitions = Vec::new();
            for p in t.partitions() {
                let (low, high) = marks
                    .get(&(t.name().to_string(), p.id()))
                    .copied()
                    .unwrap_or((-1, -1));
                partitions.push(PartitionInfo {
                    id: p.id(),
                    leader: p.leader(),
                    replicas: p.replicas().to_vec(),
                    isr: p.isr().to_vec(),
                    low_watermark: low,
                    high_watermark: high,
                });
            }
            partitions.sort_by_key(|p| p.id);
            out.push(TopicInfo {
                name: t.name().to_string(),
                internal: t.name().starts_with("__"),
                partitions,
                configs: BTreeMap::new(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    })
    .await?;
    if let (Some(name), Some(t)) = (only, topics.first_mut()) {
        t.configs = topic_configs(access, &name).await?;
    }
    Ok(topics)
}

pub async fn topic_configs(
    access: &KafkaAccess,
    name: &str,
) -> Result<BTreeMap<String, String>, String> {
    let admin = admin(access)?;
    let opts = AdminOptions::new().request_timeout(Some(TIMEOUT));
    let results = admin
        .describe_configs(&[ResourceSpecifier::Topic(name)], &opts)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for r in results {
        let r = r.map_err(|e| format!("{e:?}"))?;
        for e in r.entries {
            if let Some(v) = e.value {
                if !e.is_sensitive {
                    out.insert(e.name, v);
                }
            }
        }
    }
    Ok(out)
}

/// Whether a create error says the topic is there already (librdkafka's text for
/// `TopicAlreadyExists`, "Broker: Topic already exists"), which creating callers accept.
pub fn already_exists(error: &str) -> bool {
    error.to_lowercase().contains("already exists")
}

pub async fn create_topic(access: &KafkaAccess, spec: &TopicSpec) -> Result<(), String> {
    create_topics(access, std::slice::from_ref(spec))
        .await?
        .into_iter()
        .try_for_each(|(name, r)| r.map_err(|e| format!("creating topic {name}: {e}")))
}

/// Creates the topics with one client and one request; per topic, the broker's error if any
/// (an existing topic is one: "Broker: Topic already exists"; callers decide).
pub async fn create_topics(
    access: &KafkaAccess,
    specs: &[TopicSpec],
) -> Result<Vec<(String, Result<(), String>)>, String> {
    let admin = admin(access)?;
    let topics: Vec<NewTopic> = specs
        .iter()
        .map(|spec| {
            spec.configs.iter().fold(
                NewTopic::new(
                    &spec.name,
                    spec.partitions,
                    TopicReplication::Fixed(spec.replication_factor),
                ),
                |t, (k, v)| t.set(k, v),
            )
        })
        .collect();
    let opts = AdminOptions::new()
        .request_timeout(Some(TIMEOUT))
        .operation_timeout(Some(TIMEOUT));
    let results = admin
        .create_topics(&topics, &opts)
        .await
        .map_err(|e| e.to_string())?;
    Ok(results
        .into_iter()
        .map(|r| match r {
            Ok(name) => (name, Ok(())),
            Err((name, code)) => (name, Err(code.to_string())),
        })
        .collect())
}

pub async fn delete_topic(access: &KafkaAccess, name: &str) -> Result<(), String> {
    let admin = admin(access)?;
    let opts = AdminOptions::new()
        .request_timeout(Some(TIMEOUT))
        .operation_timeout(Some(TIMEOUT));
    for r in admin
        .delete_topics(&[name], &opts)
        .await
        .map_err(|e| e.to_string())?
    {
        r.map_err(|(name, code)| format!("deleting topic {name}: {code}"))?;
    }
    Ok(())
}

/// Kafka's rules for topic names.
pub fn check_topic_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err("use 1–249 characters: letters, digits, '.', '_' and '-' (not '.' or '..')".into())
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset (None: nothing committed yet).
    pub committed: Option<i64>,
    pub end_offset: i64,
    pub lag: i64,
}

/// Low and high watermarks of many partitions: two batched ListOffsets reads (earliest and
/// latest, one request per leader) instead of two round trips per partition, which on a
/// cluster of a thousand topics took both cores for half a second. A partition whose leader
/// did not answer is missing from the map.
fn watermarks<C: rdkafka::consumer::ConsumerContext>(
    c: &BaseConsumer<C>,
    wanted: &[(String, i32)],
) -> HashMap<(String, i32), (i64, i64)> {
    use rdkafka::{Offset, TopicPartitionList};
    let read = |at: Offset| -> HashMap<(String, i32), i64> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in wanted {
            // librdkafka takes the "timestamp" from the offset field; -2 and -1 are Kafka's
            // earliest and latest.
            let _ = tpl.add_partition_offset(t, *p, at);
        }
        match c.offsets_for_times(tpl, TIMEOUT) {
            Ok(found) => found
                .elements()
                .iter()
                .filter(|e| e.error().is_ok())
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                    _ => None,
                })
                .collect(),
            Err(_) => HashMap::new(),
        }
    };
    if wanted.is_empty() {
        return HashMap::new();
    }
    let low = read(Offset::Beginning);
    let high = read(Offset::End);
    low.into_iter()
        .filter_map(|(k, l)| high.get(&k).map(|&h| (k, (l, h))))
        .collect()
}

/// A consumer group's lag per partition of the given topics, without joining the group.
pub async fn group_lag(
    access: &KafkaAccess,
    group: &str,
    topics: &[String],
) -> Result<Vec<PartitionLag>, String> {
    Ok(positions(access, group, topics, None)
        .await?
        .into_iter()
        .map(|p| PartitionLag {
            lag: (p.high - p.committed.unwrap_or(p.low)).max(0),
            topic: p.topic,
            partition: p.partition,
            committed: p.committed,
            end_offset: p.high,
        })
        .collect())
}

/// Where a consumer group stands in one partition, beside the partition's retained range.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionPosition {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset (None: nothing committed yet).
    pub committed: Option<i64>,
    /// The log start: the oldest offset retention has kept.
    pub low: i64,
    /// The end: the offset the next record will get.
    pub high: i64,
    /// With a time asked for: the offset of the first record at or after it (the end when
    /// every record is older), from the brokers' offsets-for-times.
    pub at_time: Option<i64>,
}

/// Every partition of the given topics (those that exist) with the group's committed offset and
/// the retained range, sorted by topic and partition; with `at` (unix ms) also the first offset
/// at or after that time. Reads only: joins no group, commits nothing.
pub async fn positions(
    access: &KafkaAccess,
    group: &str,
    topics: &[String],
    at: Option<i64>,
) -> Result<Vec<PartitionPosition>, String> {
    let access = access.clone();
    let group = group.to_string();
    let topics = topics.to_vec();
    blocking(move || {
        let c: BaseConsumer = access
            .config()?
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| e.to_string())?;
        let mut tpl = rdkafka::TopicPartitionList::new();
        let md = c.fetch_metadata(None, TIMEOUT).map_err(|e| e.to_string())?;
        for t in md
            .topics()
            .iter()
            .filter(|t| topics.iter().any(|w| w == t.name()))
        {
            for p in t.partitions() {
                tpl.add_partition(t.name(), p.id());
            }
        }
        let committed = c
            .committed_offsets(tpl, TIMEOUT)
            .map_err(|e| e.to_string())?;
        let wanted: Vec<(String, i32)> = committed
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let marks = watermarks(&c, &wanted);
        let times = match at {
            Some(ms) => Some(offsets_at(&c, &wanted, ms)?),
            None => None,
        };
        let mut out = Vec::new();
        for e in committed.elements() {
            let key = (e.topic().to_string(), e.partition());
            let Some(&(low, high)) = marks.get(&key) else {
                return Err(format!(
                    "no end offset for {}[{}] from the brokers",
                    e.topic(),
                    e.partition()
                ));
            };
            out.push(PartitionPosition {
                committed: match e.offset() {
                    rdkafka::Offset::Offset(o) => Some(o),
                    _ => None,
                },
                at_time: times
                    .as_ref()
                    .map(|t| t.get(&key).copied().unwrap_or(high).clamp(low, high)),
                topic: key.0,
                partition: key.1,
                low,
                high,
            });
        }
        out.sort_by(|a, b| (a.topic.as_str(), a.partition).cmp(&(b.topic.as_str(), b.partition)));
        Ok(out)
    })
    .await
}

/// The first offset at or after `ms` per partition; a partition whose records are all older
/// is missing (the caller takes its end).
fn offsets_at<C: rdkafka::consumer::ConsumerContext>(
    c: &BaseConsumer<C>,
    wanted: &[(String, i32)],
    ms: i64,
) -> Result<HashMap<(String, i32), i64>, String> {
    use rdkafka::{Offset, TopicPartitionList};
    let mut tpl = TopicPartitionList::new();
    for (t, p) in wanted {
        tpl.add_partition_offset(t, *p, Offset::Offset(ms))
            .map_err(|e| e.to_string())?;
    }
    let found = c
        .offsets_for_times(tpl, TIMEOUT)
        .map_err(|e| e.to_string())?;
    Ok(found
        .elements()
        .iter()
        .filter(|e| e.error().is_ok())
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
            _ => None,
        })
        .collect())
}

/// Where to look for one record: a partition and the offset of the record wanted.
#[derive(Debug, Clone)]
pub struct RecordAt {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// The timestamps (unix ms) of the records at the given positions, read without joining a
/// group or committing anything. None where no record came within 5 s (deleted, compacted
/// away, or only a transaction marker there). Callers ask only for offsets below the end.
pub async fn record_times(
    access: &KafkaAccess,
    at: &[RecordAt],
) -> Result<Vec<Option<i64>>, String> {
    use rdkafka::message::Message;
    if at.is_empty() {
        return Ok(vec![]);
    }
    let access = access.clone();
    let at = at.to_vec();
    blocking(move || {
        let c: BaseConsumer = access
            .config()?
            .set("group.id", "cluecdc-peek")
            .set("enable.auto.commit", "false")
            .set("fetch.max.bytes", "1048576")
            .set("max.partition.fetch.bytes", "262144")
            .create()
            .map_err(|e| e.to_string())?;
        let mut tpl = rdkafka::TopicPartitionList::new();
        for a in &at {
            tpl.add_partition_offset(&a.topic, a.partition, rdkafka::Offset::Offset(a.offset))
                .map_err(|e| e.to_string())?;
        }
        c.assign(&tpl).map_err(|e| e.to_string())?;
        let mut out: Vec<Option<i64>> = vec![None; at.len()];
        let mut done = vec![false; at.len()];
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while done.iter().any(|d| !d) && std::time::Instant::now() < deadline {
            match c.poll(Duration::from_millis(200)) {
                None => {}
                Some(Ok(m)) => {
                    if let Some(i) = at
                        .iter()
                        .position(|a| a.topic == m.topic() && a.partition == m.partition())
                    {
                        if !done[i] {
                            out[i] = m.timestamp().to_millis();
                            done[i] = true;
                        }
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
            }
        }
        Ok(out)
    })
    .await
}

/// One record as read: key, value (None for a tombstone) and timestamp (unix ms).
#[derive(Debug, Clone)]
pub struct RawRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: Option<i64>,
}

/// Every record of a (small, usually compacted) topic, from the log start to the end as of
/// the call, read without joining a group. For MirrorMaker's internal topics (offset syncs,
/// checkpoints); refuses a topic with more than `max` records. An absent topic has none.
pub async fn read_topic(
    access: &KafkaAccess,
    topic: &str,
    max: i64,
) -> Result<Vec<RawRecord>, String> {
    use rdkafka::message::Message;
    let access = access.clone();
    let topic = topic.to_string();
    blocking(move || {
        let c: BaseConsumer = access
            .config()?
            .set("group.id", "cluecdc-peek")
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| e.to_string())?;
        let Some(marks) = topic_marks(&c, &topic)? else {
            return Ok(vec![]);
        };
        let total: i64 = marks.values().map(|(l, h)| h - l).sum();
        if total > max {
            return Err(format!(
                "{topic} holds {total} records, more than the {max} read here"
            ));
        }
        let mut tpl = rdkafka::TopicPartitionList::new();
        let mut left: HashMap<i32, i64> = HashMap::new();
        for ((_, p), (low, high)) in &marks {
            if high > low {
                tpl.add_partition_offset(&topic, *p, rdkafka::Offset::Offset(*low))
                    .map_err(|e| e.to_string())?;
                left.insert(*p, *high);
            }
        }
        if left.is_empty() {
            return Ok(vec![]);
        }
        c.assign(&tpl).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !left.is_empty() && Instant::now() < deadline {
            match c.poll(Duration::from_millis(200)) {
                None => {}
                Some(Ok(m)) => {
                    out.push(RawRecord {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        value: m.payload().map(<[u8]>::to_vec),
                        timestamp: m.timestamp().to_millis(),
                    });
                    if left
                        .get(&m.partition())
                        .is_some_and(|h| m.offset() + 1 >= *h)
                    {
                        left.remove(&m.partition());
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
            }
        }
        Ok(out)
    })
    .await
}

/// What [`read_new`] read: the records, and where the next read starts (partition → offset).
#[derive(Debug, Clone, Default)]
pub struct NewRecords {
    pub records: Vec<RawRecord>,
    pub next: HashMap<i32, i64>,
}

/// The records of a small operational topic (Debezium's notifications) after `from`
/// (partition → next offset to read; a partition missing there, or whose offset the log no
/// longer holds, is read from its log start), at most `max` records and for at most `wait`,
/// without joining a group or committing anything. Not for change events: ClueCDC never
/// reads those. None when the topic does not exist. Offsets past a partition's end are kept
/// as they are (a recreated topic starts again from its log start once it is below).
pub async fn read_new(
    access: &KafkaAccess,
    topic: &str,
    from: &HashMap<i32, i64>,
    max: usize,
    wait: Duration,
) -> Result<Option<NewRecords>, String> {
    use rdkafka::message::Message;
    let access = access.clone();
    let topic = topic.to_string();
    let from = from.clone();
    blocking(move || {
        let c: BaseConsumer = access
            .config()?
            .set("group.id", "cluecdc-peek")
            .set("enable.auto.commit", "false")
            .set("fetch.max.bytes", "1048576")
            .create()
            .map_err(|e| e.to_string())?;
        let Some(marks) = topic_marks(&c, &topic)? else {
            return Ok(None);
        };
        let mut next: HashMap<i32, i64> = HashMap::new();
        let mut tpl = rdkafka::TopicPartitionList::new();
        let mut left: HashMap<i32, i64> = HashMap::new();
        for ((_, p), (low, high)) in &marks {
            let at = from
                .get(p)
                .copied()
                .filter(|o| *o >= *low && *o <= *high)
                .unwrap_or(*low);
            next.insert(*p, at);
            if *high > at {
                tpl.add_partition_offset(&topic, *p, rdkafka::Offset::Offset(at))
                    .map_err(|e| e.to_string())?;
                left.insert(*p, *high);
            }
        }
        let mut out = Vec::new();
        if left.is_empty() {
            return Ok(Some(NewRecords { records: out, next }));
        }
        c.assign(&tpl).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + wait;
        while !left.is_empty() && out.len() < max && Instant::now() < deadline {
            match c.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(m)) => {
                    next.insert(m.partition(), m.offset() + 1);
                    out.push(RawRecord {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        value: m.payload().map(<[u8]>::to_vec),
                        timestamp: m.timestamp().to_millis(),
                    });
                    if left
                        .get(&m.partition())
                        .is_some_and(|h| m.offset() + 1 >= *h)
                    {
                        left.remove(&m.partition());
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
            }
        }
        Ok(Some(NewRecords { records: out, next }))
    })
    .await
}

/// Sum over a topic's partitions of the first offset whose record timestamp is at or after
/// `ms` (the partition's end where none is): Kafka's ListOffsets by timestamp, broker
/// metadata only. Where a table's scan started in its topic, given the time Debezium said so.
pub async fn offset_at_time(access: &KafkaAccess, topic: &str, ms: i64) -> Result<i64, String> {
    use rdkafka::Offset;
    let access = access.clone();
    let topic = topic.to_string();
    blocking(move || {
        let c: BaseConsumer = access
            .config()?
            .set("group.id", "cluecdc-peek")
            .create()
            .map_err(|e| e.to_string())?;
        let md = c
            .fetch_metadata(Some(&topic), TIMEOUT)
            .map_err(|e| e.to_string())?;
        let Some(t) = md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
        else {
            return Err(format!("topic {topic} does not exist"));
        };
        let wanted: Vec<(String, i32)> = t
            .partitions()
            .iter()
            .map(|p| (topic.clone(), p.id()))
            .collect();
        let marks = watermarks(&c, &wanted);
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (_, p) in &wanted {
            tpl.add_partition_offset(&topic, *p, Offset::Offset(ms))
                .map_err(|e| e.to_string())?;
        }
        let found = c
            .offsets_for_times(tpl, TIMEOUT)
            .map_err(|e| e.to_string())?;
        let mut sum = 0;
        for e in found.elements() {
            let high = marks
                .get(&(topic.clone(), e.partition()))
                .map(|(_, h)| *h)
                .ok_or_else(|| format!("no watermarks for {topic}/{}", e.partition()))?;
            sum += match (e.error(), e.offset()) {
                (Ok(()), Offset::Offset(o)) if o >= 0 => o.min(high),
                (Ok(()), _) => high,
                (Err(err), _) => return Err(err.to_string()),
            };
        }
        Ok(sum)
    })
    .await
}

/// (low, high) watermarks by (topic, partition).
type Marks = HashMap<(String, i32), (i64, i64)>;

/// Low and high watermarks of every partition of `topic`; None when it does not exist.
fn topic_marks(c: &BaseConsumer, topic: &str) -> Result<Option<Marks>, String> {
    let md = c
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(|e| e.to_string())?;
    let Some(t) = md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
    else {
        return Ok(None);
    };
    let wanted: Vec<(String, i32)> = t
        .partitions()
        .iter()
        .map(|p| (topic.to_string(), p.id()))
        .collect();
    Ok(Some(watermarks(c, &wanted)))
}

/// Low and high watermarks of the given partitions (those whose leader answered).
pub async fn partition_marks(
    access: &KafkaAccess,
    wanted: &[(String, i32)],
) -> Result<HashMap<(String, i32), (i64, i64)>, String> {
    let access = access.clone();
    let wanted = wanted.to_vec();
    blocking(move || {
        let c: BaseConsumer = access
            .config()?
            .set("group.id", "cluecdc-peek")
            .create()
            .map_err(|e| e.to_string())?;
        Ok(watermarks(&c, &wanted))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_clients_are_shared_only_by_identical_access() {
        let plain = KafkaAccess::plain("127.0.0.1:1");
        let scram = |password: &str| KafkaAccess {
            security_protocol: "SASL_SSL".into(),
            sasl_mechanism: Some("SCRAM-SHA-512".into()),
            sasl_username: Some("cdc".into()),
            sasl_password: Some(Secret::new(password.to_string())),
            ..KafkaAccess::plain("127.0.0.1:1")
        };
        assert_eq!(
            plain.fingerprint(),
            KafkaAccess::plain("127.0.0.1:1").fingerprint()
        );
        assert_ne!(
            plain.fingerprint(),
            KafkaAccess::plain("127.0.0.1:2").fingerprint()
        );
        assert_eq!(scram("one").fingerprint(), scram("one").fingerprint());
        assert_ne!(
            scram("one").fingerprint(),
            scram("two").fingerprint(),
            "a new password, a new client"
        );
        // No setting may stand in for another: an empty CA is not a missing one.
        let empty_ca = KafkaAccess {
            tls_ca_pem: Some(String::new()),
            ..plain.clone()
        };
        assert_ne!(plain.fingerprint(), empty_ca.fingerprint());

        let a = admin(&plain).unwrap_or_else(|e| panic!("{e}"));
        let b = admin(&plain).unwrap_or_else(|e| panic!("{e}"));
        assert!(Arc::ptr_eq(&a, &b), "the same access reuses its client");
        let c = admin(&scram("one")).unwrap_or_else(|e| panic!("{e}"));
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[tokio::test]
    async fn a_stored_cluster_with_sasl_plain_without_tls_is_never_contacted() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let access = KafkaAccess {
            security_protocol: "SASL_PLAINTEXT".into(),
            sasl_mechanism: Some("PLAIN".into()),
            sasl_username: Some("cdc".into()),
            sasl_password: Some(Secret::new("kafka-canary".into())),
            ..KafkaAccess::plain(&listener.local_addr().unwrap().to_string())
        };
        let h = health(&access).await;
        assert!(!h.reachable);
        assert_eq!(
            h.error.as_deref(),
            Some("PLAIN sends the password in clear text; use SASL_SSL (TLS) for PLAIN, or SCRAM-SHA-256/SCRAM-SHA-512")
        );
        assert!(topics(&access, None).await.is_err());
        assert!(admin(&access).is_err());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(listener.accept().is_err(), "no client connected");
        let over_tls = KafkaAccess {
            security_protocol: "SASL_SSL".into(),
            ..access.clone()
        };
        assert!(over_tls.config().is_ok());
    }
}
