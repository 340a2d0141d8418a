//! A thin typed client for the Kafka Connect REST API. Knows nothing of ClueCDC's tables.
//! Timeouts on every call; 409 (rebalance in progress) retried with backoff; errors mapped to
//! messages a person can act on.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("Kafka Connect at {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("Kafka Connect answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("Kafka Connect is rebalancing; still busy after retries")]
    Rebalancing,
    #[error("unexpected answer from Kafka Connect: {0}")]
    Decode(String),
}

impl ConnectError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ConnectError::Status { status: 404, .. })
    }
}

/// One partition's position for a sink connector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SinkOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

#[derive(Clone)]
pub struct ConnectClient {
    base: String,
    auth: Option<(String, String)>,
    agent: String,
    /// Err: the cluster's CA certificate cannot be used (every call answers that).
    http: Result<reqwest::Client, String>,
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(20))
        // Below Jetty's 30 s idle timeout, so that an idle connection is dropped here
        // before the worker closes it under a request.
        .pool_idle_timeout(Duration::from_secs(20))
}

/// One HTTP client for every Connect call of the process that trusts the built-in roots:
/// building one (TLS roots, a connection pool) cost more than the rest of an unchanged
/// reconcile pass, and a shared pool keeps connections to each worker open between passes.
fn http() -> &'static reqwest::Client {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    HTTP.get_or_init(|| builder().build().unwrap_or_else(|_| reqwest::Client::new()))
}

/// The client for clusters behind a private CA: one per CA certificate, kept for the process
/// for the same reason as [`http`] (a handful of distinct CAs at most).
fn http_trusting(pem: &str) -> Result<reqwest::Client, String> {
    static BY_CA: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<String, reqwest::Client>>,
    > = std::sync::OnceLock::new();
    let cache = BY_CA.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(pem) {
        return Ok(c.clone());
    }
    let client = trust_only(builder(), pem)?
        .build()
        .map_err(|e| format!("the CA certificate cannot be used: {}", chain(&e)))?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pem.to_string(), client.clone());
    Ok(client)
}

/// Makes `builder` trust the CA certificates in `pem` and nothing else: none of the built-in
/// roots, so a private CA's clients accept only what it signed.
pub fn trust_only(
    builder: reqwest::ClientBuilder,
    pem: &str,
) -> Result<reqwest::ClientBuilder, String> {
    let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
        .map_err(|e| format!("the CA certificate cannot be read: {}", chain(&e)))?;
    if certs.is_empty() {
        return Err("no certificate in the PEM".into());
    }
    Ok(certs
        .into_iter()
        .fold(builder.tls_built_in_root_certs(false), |b, c| {
            b.add_root_certificate(c)
        }))
}

/// Validates a CA certificate given for an https endpoint: PEM, and usable as the only root.
pub fn check_ca_certificate(pem: &str) -> Result<(), String> {
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err("paste a PEM certificate (it starts with -----BEGIN CERTIFICATE-----)".into());
    }
    trust_only(reqwest::Client::builder(), pem)?
        .build()
        .map(|_| ())
        .map_err(|e| {
            format!(
                "this PEM is not a usable CA certificate ({}); paste the CA's certificate as it is",
                chain(&e)
            )
        })
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ServerInfo {
    pub version: String,
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub kafka_cluster_id: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct StateInfo {
    pub state: String,
    #[serde(default)]
    pub worker_id: String,
    #[serde(default)]
    pub trace: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct TaskState {
    pub id: i32,
    pub state: String,
    #[serde(default)]
    pub worker_id: String,
    #[serde(default)]
    pub trace: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ConnectorStatus {
    pub name: String,
    pub connector: StateInfo,
    #[serde(default)]
    pub tasks: Vec<TaskState>,
    #[serde(rename = "type", default)]
    pub kind: String,
}

/// Connect's `tasks` here (each task's connector and number) is not read: every pass lists
/// every connector, and the task ids come with the status.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ConnectorInfo {
    pub name: String,
    pub config: BTreeMap<String, String>,
    #[serde(rename = "type", default)]
    pub kind: String,
}

/// One entry of `GET /connectors?expand=status&expand=info`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Expanded {
    pub status: Option<ConnectorStatus>,
    pub info: Option<ConnectorInfo>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct TaskConfig {
    pub id: Value,
    pub config: BTreeMap<String, String>,
}

/// A connector plugin installed on a Connect cluster, as Connect lists it.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ConnectPlugin")]
pub struct PluginInfo {
    /// The plugin's Java class.
    pub class: String,
    /// Connect's plugin type: `source`, `sink`, `converter`, `transformation`, ….
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub version: String,
}

/// Keys of `config` that neither the plugin nor Connect defines. Prefixed families are
/// pass-throughs that validation does not list: converter settings (`key.converter.*` when
/// `key.converter` is defined), client overrides, transforms, predicates, Debezium's
/// schema history settings (`schema.history.internal.kafka.*` and its clients), and
/// MirrorMaker's clients of its two clusters (`source.cluster.*`, `target.cluster.*`).
pub fn unknown_keys(config: &BTreeMap<String, String>, defined: &[&str]) -> Vec<String> {
    const PASS_THROUGH: &[&str] = &[
        "consumer.override.",
        "producer.override.",
        "admin.override.",
        "transforms.",
        "predicates.",
        "schema.history.internal.",
        "source.cluster.",
        "target.cluster.",
    ];
    config
        .keys()
        .filter(|k| k.as_str() != "name" && !defined.contains(&k.as_str()))
        .filter(|k| !PASS_THROUGH.iter().any(|p| k.starts_with(p)))
        .filter(|k| {
            !defined
                .iter()
                .any(|d| d.ends_with("converter") && k.starts_with(&format!("{d}.")))
        })
        .cloned()
        .collect()
}

impl ConnectClient {
    pub fn new(base: &str, auth: Option<(String, String)>) -> Self {
        Self::with_agent(base, auth, concat!("cluecdc/", env!("CARGO_PKG_VERSION")))
    }

    /// `agent` names the caller in Connect's request log (the reconciler adds its lease holder).
    pub fn with_agent(base: &str, auth: Option<(String, String)>, agent: &str) -> Self {
        ConnectClient {
            base: base.trim_end_matches('/').to_string(),
            auth,
            agent: agent.to_string(),
            http: Ok(http().clone()),
        }
    }

    /// Trusts only `ca` (PEM) for an https URL; None keeps the built-in roots.
    pub fn trusting(mut self, ca: Option<&str>) -> Self {
        if let Some(pem) = ca {
            self.http = http_trusting(pem);
        }
        self
    }

    /// The same client (trust, agent) for another address of the cluster: one of its
    /// workers, whose address Connect reports, not the user. Without the cluster's
    /// credentials: the basic-auth password goes only to the URL the user registered (a worker
    /// that wants it answers 401, which still says it is alive).
    pub fn at(&self, base: &str) -> Self {
        ConnectClient {
            base: base.trim_end_matches('/').to_string(),
            auth: None,
            ..self.clone()
        }
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String), ConnectError> {
        let http = self
            .http
            .as_ref()
            .map_err(|why| ConnectError::Unreachable {
                url: self.base.clone(),
                reason: why.clone(),
            })?;
        let mut delay = Duration::from_millis(250);
        for attempt in 0..5 {
            let mut req = http
                .request(method.clone(), format!("{}{path}", self.base))
                .header(reqwest::header::USER_AGENT, &self.agent);
            if let Some((u, p)) = &self.auth {
                req = req.basic_auth(u, Some(p));
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let res = req.send().await.map_err(|e| ConnectError::Unreachable {
                url: self.base.clone(),
                reason: explain(&e),
            })?;
            let status = res.status().as_u16();
            let text = res.text().await.unwrap_or_default();
            let message = || {
                serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(String::from))
                    .unwrap_or_else(|| text.chars().take(300).collect())
            };
            // 409 means a rebalance is in progress, except "already exists" on create; some
            // workers answer 500 "… because a rebalance is expected" for the same condition.
            let rebalancing = (status == 409 && !message().contains("already exists"))
                || (status >= 500 && message().to_lowercase().contains("rebalance"));
            if rebalancing && attempt < 4 {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(4));
                continue;
            }
            if rebalancing {
                return Err(ConnectError::Rebalancing);
            }
            if status >= 400 {
                return Err(ConnectError::Status {
                    status,
                    message: message(),
                });
            }
            return Ok((status, text));
        }
        Err(ConnectError::Rebalancing)
    }

    async fn get_json<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, ConnectError> {
        let (_, text) = self.send(reqwest::Method::GET, path, None).await?;
        serde_json::from_str(&text).map_err(|e| ConnectError::Decode(e.to_string()))
    }

    pub async fn server_info(&self) -> Result<ServerInfo, ConnectError> {
        self.get_json("/").await
    }

    /// One call for every connector with its status and config (the reconciler's list).
    pub async fn list_expanded(&self) -> Result<BTreeMap<String, Expanded>, ConnectError> {
        self.get_json("/connectors?expand=status&expand=info").await
    }

    pub async fn task_configs(&self, name: &str) -> Result<Vec<TaskConfig>, ConnectError> {
        self.get_json(&format!("/connectors/{}/tasks", enc(name)))
            .await
    }

    pub async fn connector_config(
        &self,
        name: &str,
    ) -> Result<BTreeMap<String, String>, ConnectError> {
        self.get_json(&format!("/connectors/{}/config", enc(name)))
            .await
    }

    pub async fn status(&self, name: &str) -> Result<ConnectorStatus, ConnectError> {
        self.get_json(&format!("/connectors/{}/status", enc(name)))
            .await
    }

    /// Every plugin the worker lists: connectors, converters, transformations, predicates.
    pub async fn plugins_all(&self) -> Result<Vec<PluginInfo>, ConnectError> {
        self.get_json("/connector-plugins?connectorsOnly=false")
            .await
    }

    pub async fn plugins(&self) -> Result<Vec<PluginInfo>, ConnectError> {
        self.get_json("/connector-plugins?connectorsOnly=true")
            .await
    }

    pub async fn put_config(
        &self,
        name: &str,
        config: &BTreeMap<String, String>,
    ) -> Result<(), ConnectError> {
        self.send(
            reqwest::Method::PUT,
            &format!("/connectors/{}/config", enc(name)),
            Some(&serde_json::to_value(config).unwrap_or_default()),
        )
        .await
        .map(|_| ())
    }

    /// `POST /connectors` with `initial_state` (KIP-980); an existing connector's config is
    /// replaced instead.
    pub async fn create(
        &self,
        name: &str,
        config: &BTreeMap<String, String>,
        initial_state: &str,
    ) -> Result<(), ConnectError> {
        let body =
            serde_json::json!({"name": name, "config": config, "initial_state": initial_state});
        match self
            .send(reqwest::Method::POST, "/connectors", Some(&body))
            .await
        {
            Err(ConnectError::Status { status: 409, .. }) => self.put_config(name, config).await,
            other => other.map(|_| ()),
        }
    }

    pub async fn pause(&self, name: &str) -> Result<(), ConnectError> {
        self.send(
            reqwest::Method::PUT,
            &format!("/connectors/{}/pause", enc(name)),
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn resume(&self, name: &str) -> Result<(), ConnectError> {
        self.send(
            reqwest::Method::PUT,
            &format!("/connectors/{}/resume", enc(name)),
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn stop(&self, name: &str) -> Result<(), ConnectError> {
        self.send(
            reqwest::Method::PUT,
            &format!("/connectors/{}/stop", enc(name)),
            None,
        )
        .await
        .map(|_| ())
    }

    /// Committed offsets: for sinks the consumer group's, for sources the connector's own.
    pub async fn offsets(&self, name: &str) -> Result<Value, ConnectError> {
        self.get_json(&format!("/connectors/{}/offsets", enc(name)))
            .await
    }

    /// A sink connector's committed offsets as (topic, partition, offset), sorted: Connect's
    /// `{"offsets": [{"partition": {"kafka_topic", "kafka_partition"}, "offset":
    /// {"kafka_offset"}}]}`. Partitions with nothing committed are absent.
    pub async fn sink_offsets(&self, name: &str) -> Result<Vec<SinkOffset>, ConnectError> {
        let v = self.offsets(name).await?;
        let mut out: Vec<SinkOffset> = v["offsets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| {
                Some(SinkOffset {
                    topic: o["partition"]["kafka_topic"].as_str()?.to_string(),
                    partition: o["partition"]["kafka_partition"].as_i64()? as i32,
                    offset: o["offset"]["kafka_offset"].as_i64()?,
                })
            })
            .collect();
        out.sort_by(|a, b| (a.topic.as_str(), a.partition).cmp(&(b.topic.as_str(), b.partition)));
        Ok(out)
    }

    /// Sets a STOPPED sink connector's consumer-group offsets (`PATCH /connectors/{name}/offsets`,
    /// Connect 3.6+); Connect refuses for a connector in any other state.
    pub async fn alter_sink_offsets(
        &self,
        name: &str,
        offsets: &[SinkOffset],
    ) -> Result<(), ConnectError> {
        let body = serde_json::json!({"offsets": offsets.iter().map(|o| serde_json::json!({
            "partition": {"kafka_topic": o.topic, "kafka_partition": o.partition},
            "offset": {"kafka_offset": o.offset},
        })).collect::<Vec<_>>()});
        self.send(
            reqwest::Method::PATCH,
            &format!("/connectors/{}/offsets", enc(name)),
            Some(&body),
        )
        .await
        .map(|_| ())
    }

    /// Removes every offset of a STOPPED connector (`DELETE /connectors/{name}/offsets`): a source
    /// starts as if new (a snapshot first), a sink from its consumer's reset policy.
    pub async fn reset_offsets(&self, name: &str) -> Result<(), ConnectError> {
        self.send(
            reqwest::Method::DELETE,
            &format!("/connectors/{}/offsets", enc(name)),
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn delete(&self, name: &str) -> Result<(), ConnectError> {
        match self
            .send(
                reqwest::Method::DELETE,
                &format!("/connectors/{}", enc(name)),
                None,
            )
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    pub async fn restart(
        &self,
        name: &str,
        include_tasks: bool,
        only_failed: bool,
    ) -> Result<(), ConnectError> {
        self.send(
            reqwest::Method::POST,
            &format!(
                "/connectors/{}/restart?includeTasks={include_tasks}&onlyFailed={only_failed}",
                enc(name)
            ),
            None,
        )
        .await
        .map(|_| ())
    }

    /// Validates a config with the plugin itself (`PUT /connector-plugins/{class}/config/validate`).
    /// Returns each key's errors; empty when valid. Config providers are resolved first.
    /// Connect does not flag keys nobody defines (a misspelt or invented key would be silently
    /// ignored), so each key must also be one the response defines (see `unknown_keys`).
    pub async fn validate(
        &self,
        class: &str,
        config: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, Vec<String>>, ConnectError> {
        let short = class.rsplit('.').next().unwrap_or(class);
        let v = self.validation(class, config).await?;
        let mut errors = BTreeMap::new();
        for c in v["configs"].as_array().cloned().unwrap_or_default() {
            let errs: Vec<String> = c["value"]["errors"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|e| e.as_str().map(String::from))
                .collect();
            if !errs.is_empty() {
                errors.insert(c["value"]["name"].as_str().unwrap_or("?").to_string(), errs);
            }
        }
        let defined: Vec<&str> = v["configs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["definition"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        for key in unknown_keys(config, &defined) {
            errors.entry(key).or_default().push(format!(
                "not a setting of {short}: Connect would accept and ignore it"
            ));
        }
        Ok(errors)
    }

    /// The value Connect validated for `key` (after config providers resolved `config`), as
    /// its validation answer shows it.
    pub async fn validated_value(
        &self,
        class: &str,
        config: &BTreeMap<String, String>,
        key: &str,
    ) -> Result<Option<String>, ConnectError> {
        let v = self.validation(class, config).await?;
        Ok(v["configs"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["value"]["name"] == key))
            .and_then(|c| c["value"]["value"].as_str().map(String::from)))
    }

    /// Connect's validation answer for `config` (`PUT /connector-plugins/{class}/config/validate`).
    async fn validation(
        &self,
        class: &str,
        config: &BTreeMap<String, String>,
    ) -> Result<Value, ConnectError> {
        let short = class.rsplit('.').next().unwrap_or(class);
        let (_, text) = self
            .send(
                reqwest::Method::PUT,
                &format!("/connector-plugins/{}/config/validate", enc(short)),
                Some(&serde_json::to_value(config).unwrap_or_default()),
            )
            .await?;
        serde_json::from_str(&text).map_err(|e| ConnectError::Decode(e.to_string()))
    }

    /// `true` when the deprecated `tasks-config` endpoint answers for this connector.
    pub async fn has_tasks_config_endpoint(&self, name: &str) -> bool {
        matches!(
            self.send(
                reqwest::Method::GET,
                &format!("/connectors/{}/tasks-config", enc(name)),
                None
            )
            .await,
            Ok((200, _))
        )
    }
}

fn enc(name: &str) -> String {
    url::form_urlencoded::byte_serialize(name.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// An error with its sources: reqwest's own text ("error sending request") leaves out the
/// cause, e.g. the TLS verdict.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A failed HTTP call in words a person can act on (the TLS verdict named when there is one).
pub fn explain(e: &reqwest::Error) -> String {
    let full = chain(e);
    if let Some(why) = crate::connections::tls_problem(&full) {
        let cause = full.rsplit(": ").next().unwrap_or(&full);
        format!(
            "TLS: {} ({cause})",
            why.replace("the connection's CA certificate", "tls_ca_certificate")
        )
    } else if e.is_connect() {
        let lower = full.to_lowercase();
        if lower.contains("tls") || lower.contains("certificate") || lower.contains("handshake") {
            let cause = full.rsplit(": ").next().unwrap_or(&full);
            format!("the TLS handshake failed ({cause}): check that the URL's scheme matches the worker's listener and tls_ca_certificate")
        } else {
            "connection refused or host unreachable".into()
        }
    } else if e.is_timeout() {
        "timed out".into()
    } else {
        e.to_string().chars().take(200).collect()
    }
}

/// Kafka versions before 4.0 still serve `GET /connectors/{name}/tasks-config` (deprecated by
/// KIP-970, removed in 4.0), which returns task configurations as the connector produced them.
pub fn version_serves_tasks_config(version: &str) -> bool {
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(0);
    major < 4
}

#[cfg(test)]
mod tests {
    /// A worker address taken from Connect's statuses never receives the cluster's password:
    /// the request `at` a worker carries no Authorization header, the registered URL's does.
    #[tokio::test]
    async fn a_worker_address_is_asked_without_the_clusters_password() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heard = tokio::spawn(async move {
            let mut requests = Vec::new();
            for _ in 0..2 {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap();
                requests.push(String::from_utf8_lossy(&buf[..n]).to_lowercase());
                let body = r#"{"version":"4.1.1","commit":"x","kafka_cluster_id":"k"}"#;
                let reply = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                sock.write_all(reply.as_bytes()).await.unwrap();
            }
            requests
        });
        let cluster = ConnectClient::new(&url, Some(("admin".into(), "hunter2".into())));
        cluster.server_info().await.unwrap();
        cluster.at(&url).server_info().await.unwrap();
        let requests = heard.await.unwrap();
        assert!(
            requests[0].contains("authorization: basic"),
            "{}",
            requests[0]
        );
        assert!(!requests[1].contains("authorization"), "{}", requests[1]);
    }

    use super::*;

    #[test]
    fn workers_before_kafka_4_serve_the_tasks_config_endpoint() {
        assert!(version_serves_tasks_config("3.9.1"));
        assert!(version_serves_tasks_config("2.8.0"));
        assert!(!version_serves_tasks_config("4.0.0"));
        assert!(!version_serves_tasks_config("4.3.1"));
    }

    #[test]
    fn connector_names_are_escaped_in_paths() {
        assert_eq!(enc("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn a_key_nobody_defines_is_unknown_but_pass_throughs_are_not() {
        let config: BTreeMap<String, String> = [
            "name",
            "topics",
            "flush.size",
            "key.converter",
            "key.converter.schemas.enable",
            "value.converter.schemas.enable",
            "consumer.override.auto.offset.reset",
            "transforms.unwrap.type",
        ]
        .iter()
        .map(|k| (k.to_string(), "x".to_string()))
        .collect();
        let defined = [
            "topics",
            "key.converter",
            "value.converter",
            "file.max.records",
        ];
        assert_eq!(unknown_keys(&config, &defined), vec!["flush.size"]);
        assert_eq!(
            unknown_keys(&config, &["topics", "key.converter"]),
            vec!["flush.size", "value.converter.schemas.enable"],
            "a converter's settings pass only when the converter itself is defined"
        );
    }
}

#[cfg(test)]
mod client_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use poem::listener::{Acceptor, Listener};

    use super::*;

    /// A stand-in Connect that answers 409 (rebalancing) `busy` times, then 200.
    async fn flaky(busy: usize, message: &'static str) -> (String, Arc<AtomicUsize>) {
        flaky_with(busy, 409, message).await
    }

    async fn flaky_with(
        busy: usize,
        code: u16,
        message: &'static str,
    ) -> (String, Arc<AtomicUsize>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
            .into_acceptor()
            .await
            .unwrap();
        let addr = acceptor.local_addr()[0].as_socket_addr().copied().unwrap();
        let ep = poem::endpoint::make(move |_req: poem::Request| {
            let n = h.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < busy {
                    poem::Response::builder()
                        .status(poem::http::StatusCode::from_u16(code).unwrap())
                        .body(format!(
                            "{{\"error_code\":{code},\"message\":\"{message}\"}}"
                        ))
                } else {
                    poem::Response::builder()
                        .body("{\"version\":\"4.3.1\",\"commit\":\"c\",\"kafka_cluster_id\":\"k\"}")
                }
            }
        });
        tokio::spawn(async move { poem::Server::new_with_acceptor(acceptor).run(ep).await });
        (format!("http://{addr}"), hits)
    }

    #[tokio::test]
    async fn a_rebalance_409_is_retried_with_backoff_until_it_clears() {
        let (url, hits) = flaky(2, "Cannot complete request momentarily due to stale configuration (typically caused by a concurrent config change)").await;
        let info = ConnectClient::new(&url, None).server_info().await.unwrap();
        assert_eq!(info.version, "4.3.1");
        assert_eq!(hits.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_rebalance_that_does_not_clear_is_reported_as_such() {
        let (url, hits) = flaky(100, "rebalance in progress").await;
        let err = ConnectClient::new(&url, None)
            .server_info()
            .await
            .unwrap_err();
        assert!(matches!(err, ConnectError::Rebalancing), "{err}");
        assert_eq!(hits.load(Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn a_500_that_says_a_rebalance_is_expected_is_retried_too() {
        let (url, hits) = flaky_with(
            1,
            500,
            "Request cannot be completed because a rebalance is expected",
        )
        .await;
        assert!(ConnectClient::new(&url, None).server_info().await.is_ok());
        assert_eq!(hits.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn already_exists_is_not_mistaken_for_a_rebalance() {
        let (url, hits) = flaky(1, "Connector x already exists").await;
        let err = ConnectClient::new(&url, None)
            .server_info()
            .await
            .unwrap_err();
        assert!(matches!(err, ConnectError::Status { status: 409, .. }));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_unreachable_connect_is_named_with_its_url() {
        let err = ConnectClient::new("http://127.0.0.1:9", None)
            .server_info()
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("Kafka Connect at http://127.0.0.1:9 is unreachable"),
            "{err}"
        );
    }
}
