//! The declarative document (`apiVersion: cluecdc/v1`): its types, and reading it from YAML
//! with every refusal naming the path of what it refuses.
//!
//! Invariants:
//! - Resources are named, never identified by id; names are what `plan` matches on.
//! - A secret is never a value here: a secret field names where `apply` reads it
//!   (`{env: VARIABLE}` or `{file: PATH}`), and a plain value is refused without echoing it.
//! - Unknown fields are refused (`deny_unknown_fields` everywhere), so a typo never silently
//!   becomes "not managed".

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub const API_VERSION: &str = "cluecdc/v1";

/// The most YAML read at once (one file, or a folder's files together). A setup of hundreds of
/// pipelines is well under it; a document larger than this is refused before it is parsed.
pub const MAX_BYTES: usize = 1024 * 1024;

/// What a refusal says: where (a path such as `pipelines[2].tables`, after the file's name
/// when the document came from a folder) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    #[serde(default)]
    pub kafka_clusters: Vec<KafkaCluster>,
    #[serde(default)]
    pub connect_clusters: Vec<ConnectCluster>,
    #[serde(default)]
    pub connections: Vec<Connection>,
    #[serde(default)]
    pub pipelines: Vec<Pipeline>,
    #[serde(default)]
    pub deliveries: Vec<Delivery>,
    #[serde(default)]
    pub alert_rules: Vec<AlertRule>,
    #[serde(default)]
    pub webhooks: Vec<Webhook>,
    /// Slack, Teams, PagerDuty and e-mail channels (written only when there are some).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alert_channels: Vec<AlertChannel>,
}

/// Where `apply` reads a secret. Written `{env: NAME}` or `{file: PATH}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    Env(String),
    File(String),
}

impl SecretSource {
    /// Reads the value now. The error says which variable or file, never a value.
    pub fn read(&self) -> Result<crate::secrets::Secret<String>, String> {
        match self {
            SecretSource::Env(name) => match std::env::var(name) {
                Ok(v) if !v.is_empty() => Ok(crate::secrets::Secret::new(v)),
                Ok(_) => Err(format!("the environment variable {name} is empty")),
                Err(_) => Err(format!(
                    "the environment variable {name} is not set; set it where plan and apply run"
                )),
            },
            SecretSource::File(path) => match std::fs::read_to_string(path) {
                // A trailing newline is how files end, not part of the secret.
                Ok(v) if !v.trim_end_matches(['\r', '\n']).is_empty() => Ok(
                    crate::secrets::Secret::new(v.trim_end_matches(['\r', '\n']).to_string()),
                ),
                Ok(_) => Err(format!("the file {path} is empty")),
                Err(e) => Err(format!("cannot read the file {path}: {}", e.kind())),
            },
        }
    }
}

impl SecretSource {
    /// The reference as a caller names it when giving its value over HTTP: the variable's name
    /// or the file's path, as written.
    pub fn key(&self) -> &str {
        match self {
            SecretSource::Env(n) => n,
            SecretSource::File(p) => p,
        }
    }
}

impl Serialize for SecretSource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        match self {
            SecretSource::Env(n) => m.serialize_entry("env", n)?,
            SecretSource::File(p) => m.serialize_entry("file", p)?,
        }
        m.end()
    }
}

const SECRET_AS_VALUE: &str = "a secret is never written in the document: give {env: VARIABLE} or {file: PATH}, read when the document is applied";

impl<'de> Deserialize<'de> for SecretSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read as a generic value first, so that a plain value is refused by what it is,
        // without its text appearing in the error.
        let v = Value::deserialize(d).map_err(|_| D::Error::custom(SECRET_AS_VALUE))?;
        let Value::Object(m) = v else {
            return Err(D::Error::custom(SECRET_AS_VALUE));
        };
        let mut entries = m.into_iter();
        match (entries.next(), entries.next()) {
            (Some((k, Value::String(s))), None) if k == "env" => {
                let ok = !s.is_empty()
                    && s.len() <= 128
                    && !s.starts_with(|c: char| c.is_ascii_digit())
                    && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if ok {
                    Ok(SecretSource::Env(s))
                } else {
                    Err(D::Error::custom(
                        "env: an environment variable name (letters, digits and '_', not starting with a digit)",
                    ))
                }
            }
            (Some((k, Value::String(s))), None) if k == "file" => {
                if s.is_empty() || s.contains('\0') {
                    Err(D::Error::custom(
                        "file: a path to a file holding the secret",
                    ))
                } else {
                    Ok(SecretSource::File(s))
                }
            }
            _ => Err(D::Error::custom(
                "give exactly one of {env: VARIABLE} or {file: PATH}",
            )),
        }
    }
}

fn plaintext() -> String {
    "PLAINTEXT".into()
}
fn cluecdc() -> String {
    "cluecdc".into()
}
fn running() -> String {
    "running".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaCluster {
    pub name: String,
    pub bootstrap_servers: String,
    #[serde(default = "plaintext")]
    pub security_protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_mechanism: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_password: Option<SecretSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_certificate: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectCluster {
    pub name: String,
    pub url: String,
    /// The Kafka cluster its workers use, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_cluster: Option<String>,
    #[serde(default = "cluecdc")]
    pub managed_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth_password: Option<SecretSource>,
    /// A private CA (PEM) the Connect REST endpoint's certificate is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_certificate: Option<String>,
    /// The token the cluster's `cluecdc` config provider presents. Absent: one is issued when
    /// the cluster is created, and printed once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_token: Option<SecretSource>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    pub name: String,
    pub provider: String,
    /// Default: SOURCE for databases, DESTINATION for object storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    #[serde(default)]
    pub settings: BTreeMap<String, Value>,
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretSource>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    pub name: String,
    /// The source connection, by name.
    pub source: String,
    pub kafka_cluster: String,
    pub connect_cluster: String,
    pub tables: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publication_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<bool>,
    /// Extra Debezium keys, validated by the plugin.
    #[serde(default)]
    pub options: BTreeMap<String, Value>,
    /// running, paused or stopped.
    #[serde(default = "running")]
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    pub name: String,
    /// The pipeline whose topics it reads, by name.
    pub pipeline: String,
    /// The destination connection, by name.
    pub destination: String,
    /// Default: the pipeline's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_cluster: Option<String>,
    /// Default: every table topic of the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<Vec<String>>,
    #[serde(default)]
    pub options: DeliveryOptions,
    #[serde(default = "running")]
    pub state: String,
}

/// The options of the delivery's kind (database or object storage), as in the API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insert_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_name_format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_evolution: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_per_file: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
    /// warn (default) or pause at a breaking schema change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_policy: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertRule {
    pub kind: String,
    pub threshold: f64,
    pub for_secs: i64,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub url: String,
    /// The shared signing secret (at least 16 characters).
    pub secret: SecretSource,
    /// A private CA (PEM) for an https URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_certificate: Option<String>,
}

/// An alert channel (`monitor::channels`): identified by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertChannel {
    pub name: String,
    /// slack, teams, pagerduty or email.
    pub kind: String,
    /// pagerduty: endpoint; email: host, port, tls, username, from, to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    /// The kind's secret: the Slack/Teams webhook URL, the PagerDuty routing key or the SMTP
    /// password.
    pub secret: SecretSource,
    /// Alert rules sent (empty: every rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub severities: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_wait_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_certificate: Option<String>,
    #[serde(default = "enabled", skip_serializing_if = "is_enabled")]
    pub enabled: bool,
}

fn enabled() -> bool {
    true
}

fn is_enabled(b: &bool) -> bool {
    *b
}

/// A document read from one or more files, with where each resource came from.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub doc: Document,
    /// Per kind, the path of each resource in the same order as in `doc` (for messages).
    pub paths: BTreeMap<&'static str, Vec<String>>,
}

impl Loaded {
    pub fn path(&self, kind: &'static str, i: usize) -> String {
        self.paths
            .get(kind)
            .and_then(|p| p.get(i))
            .cloned()
            .unwrap_or_else(|| format!("{kind}[{i}]"))
    }

    /// Every secret reference of the document, each once (a variable or file named twice is
    /// one value), in document order: what a caller over HTTP may give values for.
    pub fn references(&self) -> Vec<SecretSource> {
        let d = &self.doc;
        let all = d
            .kafka_clusters
            .iter()
            .filter_map(|k| k.sasl_password.as_ref())
            .chain(
                d.connect_clusters
                    .iter()
                    .flat_map(|c| c.basic_auth_password.iter().chain(c.provider_token.iter())),
            )
            .chain(d.connections.iter().flat_map(|c| c.secrets.values()))
            .chain(d.webhooks.iter().map(|w| &w.secret))
            .chain(d.alert_channels.iter().map(|c| &c.secret));
        let mut out: Vec<SecretSource> = Vec::new();
        for r in all {
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
        out
    }

    fn add(&mut self, doc: Document, origin: &str) {
        fn push<T>(
            paths: &mut BTreeMap<&'static str, Vec<String>>,
            kind: &'static str,
            into: &mut Vec<T>,
            items: Vec<T>,
            origin: &str,
        ) {
            let list = paths.entry(kind).or_default();
            for (i, item) in items.into_iter().enumerate() {
                list.push(format!("{origin}{kind}[{i}]"));
                into.push(item);
            }
        }
        let d = &mut self.doc;
        let p = &mut self.paths;
        push(
            p,
            "kafka_clusters",
            &mut d.kafka_clusters,
            doc.kafka_clusters,
            origin,
        );
        push(
            p,
            "connect_clusters",
            &mut d.connect_clusters,
            doc.connect_clusters,
            origin,
        );
        push(
            p,
            "connections",
            &mut d.connections,
            doc.connections,
            origin,
        );
        push(p, "pipelines", &mut d.pipelines, doc.pipelines, origin);
        push(p, "deliveries", &mut d.deliveries, doc.deliveries, origin);
        push(
            p,
            "alert_rules",
            &mut d.alert_rules,
            doc.alert_rules,
            origin,
        );
        push(p, "webhooks", &mut d.webhooks, doc.webhooks, origin);
        push(
            p,
            "alert_channels",
            &mut d.alert_channels,
            doc.alert_channels,
            origin,
        );
        d.api_version = API_VERSION.into();
    }
}

fn too_large(bytes: usize) -> Problem {
    Problem::new(
        "(document)",
        format!(
            "{:.1} MiB of YAML; ClueCDC reads at most {} MiB at once",
            bytes as f64 / (1024.0 * 1024.0),
            MAX_BYTES / (1024 * 1024)
        ),
    )
}

/// A serde path, shortened: a deeply nested document would otherwise make a path as long as
/// the document.
fn short_path(path: &str) -> String {
    const MAX: usize = 120;
    if path.len() <= MAX {
        path.to_string()
    } else {
        let cut = path
            .char_indices()
            .take_while(|(i, _)| *i < MAX)
            .last()
            .map(|(i, c)| i + c.len_utf8())
            .unwrap_or(0);
        format!("{}…", &path[..cut])
    }
}

/// Parses YAML text (one or more `---` documents); `origin` prefixes paths (a file's name and
/// ": " when reading a folder, else empty).
pub fn parse_into(out: &mut Loaded, text: &str, origin: &str) -> Result<(), Vec<Problem>> {
    if text.len() > MAX_BYTES {
        return Err(vec![too_large(text.len())]);
    }
    if text.trim().is_empty() {
        return Err(vec![Problem::new(
            format!("{origin}(document)"),
            format!("empty: a document starts with apiVersion: {API_VERSION}"),
        )]);
    }
    let mut problems = Vec::new();
    let mut any = false;
    for (n, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        any = true;
        let prefix = if n == 0 {
            origin.to_string()
        } else {
            format!("{origin}(document {}) ", n + 1)
        };
        match serde_path_to_error::deserialize::<_, Document>(de) {
            Ok(doc) if doc.api_version != API_VERSION => problems.push(Problem::new(
                format!("{prefix}apiVersion"),
                format!("must be {API_VERSION}"),
            )),
            Ok(doc) => out.add(doc, &prefix),
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner().to_string();
                // serde_yaml starts its message with the path of the value it was reading (the
                // field's parent for an unknown field): the path is said once, in full.
                let message = match inner.split_once(": ") {
                    Some((head, rest)) if path.starts_with(head) => rest.to_string(),
                    _ => inner.clone(),
                };
                let path = if path == "." {
                    "(document)".to_string()
                } else {
                    short_path(&path)
                };
                problems.push(Problem::new(format!("{prefix}{path}"), message));
                // After a refusal the stream's later documents cannot be trusted to parse (a
                // syntax error repeats for each of them): one refusal per stream.
                break;
            }
        }
    }
    if !any {
        problems.push(Problem::new(
            format!("{origin}(document)"),
            format!("empty: a document starts with apiVersion: {API_VERSION}"),
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

pub fn parse(text: &str) -> Result<Loaded, Vec<Problem>> {
    let mut out = Loaded::default();
    parse_into(&mut out, text, "")?;
    Ok(out)
}

/// Reads a file, or every `*.yaml`/`*.yml` file of a folder (not its subfolders) in name order.
pub fn read(path: &Path) -> Result<Loaded, Vec<Problem>> {
    let fail = |m: String| vec![Problem::new(path.display().to_string(), m)];
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read: {}", e.kind())))?;
    if !meta.is_dir() {
        if meta.len() as usize > MAX_BYTES {
            return Err(vec![too_large(meta.len() as usize)]);
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| fail(format!("cannot read: {}", e.kind())))?;
        return parse(&text);
    }
    let mut files: Vec<_> = std::fs::read_dir(path)
        .map_err(|e| fail(format!("cannot list: {}", e.kind())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(fail("no .yaml or .yml file in this folder".into()));
    }
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    if total as usize > MAX_BYTES {
        return Err(vec![too_large(total as usize)]);
    }
    let mut out = Loaded::default();
    let mut problems = Vec::new();
    for f in files {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        match std::fs::read_to_string(&f) {
            Ok(text) => {
                if let Err(p) = parse_into(&mut out, &text, &format!("{name}: ")) {
                    problems.extend(p);
                }
            }
            Err(e) => problems.push(Problem::new(name, format!("cannot read: {}", e.kind()))),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// The document as YAML. Sections and fields in a fixed order, maps sorted by key: the same
/// state always gives the same bytes.
pub fn to_yaml(doc: &Document) -> String {
    serde_yaml::to_string(doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<Problem> {
        parse(text).err().unwrap_or_default()
    }

    #[test]
    fn an_unknown_field_is_refused_with_its_path() {
        let p = problems("apiVersion: cluecdc/v1\npipelines:\n- name: a\n  source: s\n  kafka_cluster: k\n  connect_cluster: c\n  tables: [public.t]\n  tablez: [x]\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].path, "pipelines[0].tablez");
        assert!(p[0].message.starts_with("unknown field `tablez`"), "{p:?}");
    }

    #[test]
    fn a_wrong_type_names_the_field_and_the_type_expected() {
        let p = problems("apiVersion: cluecdc/v1\npipelines:\n- name: a\n  source: s\n  kafka_cluster: k\n  connect_cluster: c\n  tables: [public.t]\n  partitions: many\n");
        assert_eq!(p[0].path, "pipelines[0].partitions");
        assert!(p[0].message.contains("expected i64"), "{p:?}");
    }

    #[test]
    fn a_secret_given_as_a_value_is_refused_without_echoing_it() {
        let p = problems("apiVersion: cluecdc/v1\nconnections:\n- name: db\n  provider: POSTGRESQL\n  secrets:\n    password: hunter2-hunter2\n");
        assert_eq!(p[0].path, "connections[0].secrets.password");
        assert!(p[0].message.contains("{env: VARIABLE}"), "{p:?}");
        assert!(!format!("{p:?}").contains("hunter2"));
        let p = problems("apiVersion: cluecdc/v1\nwebhooks:\n- url: https://h.example/x\n  secret: {env: A, file: /b}\n");
        assert_eq!(p[0].path, "webhooks[0].secret");
        let p = problems("apiVersion: cluecdc/v1\nwebhooks:\n- url: https://h.example/x\n  secret: {env: 9BAD}\n");
        assert!(p[0].message.contains("environment variable name"), "{p:?}");
    }

    #[test]
    fn the_api_version_must_be_cluecdc_v1() {
        let p = problems("apiVersion: cluecdc/v2\n");
        assert_eq!(p[0].path, "apiVersion");
        let p = problems("kafka_clusters: []\n");
        assert!(p[0].message.contains("apiVersion"), "{p:?}");
        let p = problems("\n");
        assert!(p[0].message.contains("empty"), "{p:?}");
        let p = problems("apiVersion: cluecdc/v1\nwebhooks: [\n");
        assert_eq!(p.len(), 1, "a syntax error is reported once: {p:?}");
    }

    #[test]
    fn deep_nesting_and_alias_bombs_are_refused_with_a_short_path() {
        let mut deep = String::from("apiVersion: cluecdc/v1\nconnections:\n- name: a\n  provider: MINIO\n  settings:\n    x: ");
        deep.push_str(&"[".repeat(10_000));
        deep.push_str(&"]".repeat(10_000));
        let p = problems(&deep);
        assert!(p[0].path.starts_with("connections[0].settings.x"), "{p:?}");
        assert!(p[0].path.len() < 200);
        assert!(p[0].message.contains("recursion limit"), "{p:?}");
        let mut bomb = String::from("apiVersion: cluecdc/v1\nconnections:\n- name: a\n  provider: MINIO\n  settings:\n    a: &a [x,x,x,x,x,x,x,x,x]\n");
        for (i, c) in ["b", "c", "d", "e", "f", "g", "h", "i"].iter().enumerate() {
            let prev = ["a", "b", "c", "d", "e", "f", "g", "h"][i];
            bomb.push_str(&format!("    {c}: &{c} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        let p = problems(&bomb);
        assert!(p[0].message.contains("repetition limit"), "{p:?}");
    }

    #[test]
    fn more_than_the_size_limit_is_refused_before_parsing() {
        let big = format!("apiVersion: cluecdc/v1\n#{}\n", "x".repeat(5 * 1024 * 1024));
        let p = problems(&big);
        assert_eq!(p[0].path, "(document)");
        assert!(p[0].message.contains("5.0 MiB"), "{p:?}");
    }

    #[test]
    fn several_documents_and_files_merge_with_their_origin_in_paths() {
        let l = parse("apiVersion: cluecdc/v1\nwebhooks:\n- url: https://a.example/\n  secret: {env: A}\n---\napiVersion: cluecdc/v1\nwebhooks:\n- url: https://b.example/\n  secret: {file: /run/b}\n").unwrap();
        assert_eq!(l.doc.webhooks.len(), 2);
        assert_eq!(l.path("webhooks", 1), "(document 2) webhooks[0]");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "apiVersion: cluecdc/v1\nwebhooks:\n- url: https://a.example/\n  secret: {env: A}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.yml"),
            "apiVersion: cluecdc/v1\nwebhooks: [{url: x, secret: {env: B}, extra: 1}]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not read").unwrap();
        let p = read(dir.path()).unwrap_err();
        assert_eq!(p[0].path, "b.yml: webhooks[0].extra");
    }

    #[test]
    fn secrets_round_trip_as_env_or_file_maps() {
        let d = Document {
            api_version: API_VERSION.into(),
            webhooks: vec![Webhook {
                url: "https://h.example/x".into(),
                secret: SecretSource::Env("HOOK".into()),
                tls_ca_certificate: None,
            }],
            ..Default::default()
        };
        let y = to_yaml(&d);
        assert!(y.contains("secret:\n    env: HOOK"), "{y}");
        assert_eq!(parse(&y).unwrap().doc, d);
    }
}
