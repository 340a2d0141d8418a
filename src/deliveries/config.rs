//! Sink connector config builders: pure functions, golden-file tested, and validated against
//! the real plugin before anything is deployed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::connections::settings::TlsMode;
use crate::connections::{Connection, Provider};

pub type Config = BTreeMap<String, String>;

pub const JDBC_SINK: &str = "io.debezium.connector.jdbc.JdbcSinkConnector";
pub const S3_SINK: &str = "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector";

/// The relative key template users start from: one folder per topic and UTC day, and a file
/// name that carries partition and start offset (so objects never overwrite each other). The
/// extension follows the compression and is not part of the template.
pub const DEFAULT_KEY_TEMPLATE: &str = "{{topic}}/year={{timestamp:unit=yyyy}}/month={{timestamp:unit=MM}}/day={{timestamp:unit=dd}}/{{topic}}-{{partition:padding=true}}-{{start_offset:padding=true}}";
/// The Aiven sink's own default for `file.max.records` is unlimited; seed 004 uses 10 000.
pub const DEFAULT_RECORDS_PER_FILE: u32 = 10_000;

/// Database delivery settings (API names), with the defaults a CDC replica wants.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "DatabaseDeliveryOptions")]
pub struct JdbcOptions {
    /// insert, upsert or update.
    #[schemars(with = "InsertMode")]
    pub insert_mode: String,
    /// Deletes (and tombstones) remove rows.
    pub delete_enabled: bool,
    /// Destination table name; `${source.table}` keeps the source's table name.
    pub table_name_format: String,
    /// basic: create missing tables and add missing columns; none: tables must exist.
    #[schemars(with = "SchemaEvolution")]
    pub schema_evolution: String,
    /// fail (default) or continue.
    #[schemars(with = "ErrorPolicy")]
    pub error_policy: String,
    pub dead_letter_topic: Option<String>,
    /// ClueCDC's reaction to a breaking schema change (`tables::schema`): warn or pause. Not
    /// a sink key; stored options from before it read as warn.
    #[serde(default = "warn")]
    #[schemars(with = "SchemaPolicy")]
    pub schema_policy: String,
}

fn warn() -> String {
    "warn".into()
}

impl Default for JdbcOptions {
    fn default() -> Self {
        JdbcOptions {
            insert_mode: "upsert".into(),
            delete_enabled: true,
            table_name_format: "${source.table}".into(),
            schema_evolution: "basic".into(),
            error_policy: "fail".into(),
            dead_letter_topic: None,
            schema_policy: warn(),
        }
    }
}

/// Object-storage delivery settings (API names). Flushing has no per-connector key: objects are
/// written at each offset commit of the Connect worker (`offset.flush.interval.ms`) or when
/// `records_per_file` records have gathered for one file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "ObjectStorageDeliveryOptions")]
pub struct ObjectStorageOptions {
    /// jsonl: one JSON line per record with key, value, offset and timestamp.
    #[schemars(with = "Format")]
    pub format: String,
    /// gzip (default, `.jsonl.gz`) or none (`.jsonl`).
    #[schemars(with = "Compression")]
    pub compression: String,
    pub records_per_file: u32,
    pub tasks: u32,
    /// Relative to the connection's prefix, without the extension.
    pub key_template: String,
    /// fail (default) or continue.
    #[schemars(with = "ErrorPolicy")]
    pub error_policy: String,
    pub dead_letter_topic: Option<String>,
    /// warn or pause, as for database deliveries.
    #[serde(default = "warn")]
    #[schemars(with = "SchemaPolicy")]
    pub schema_policy: String,
}

impl Default for ObjectStorageOptions {
    fn default() -> Self {
        ObjectStorageOptions {
            format: "jsonl".into(),
            compression: "gzip".into(),
            records_per_file: DEFAULT_RECORDS_PER_FILE,
            tasks: 1,
            key_template: DEFAULT_KEY_TEMPLATE.into(),
            error_policy: "fail".into(),
            dead_letter_topic: None,
            schema_policy: warn(),
        }
    }
}

impl ObjectStorageOptions {
    pub fn extension(&self) -> &'static str {
        if self.compression == "none" {
            ".jsonl"
        } else {
            ".jsonl.gz"
        }
    }
}

/// One `{{name:param=value}}` token of a key template.
struct Token<'a> {
    name: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

/// Splits a template into literal text and tokens; an unclosed or empty token is an error.
fn tokens(template: &str) -> Result<Vec<Result<&str, Token<'_>>>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            out.push(Ok(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or("a {{ without its closing }}")?;
        let inner = after[..end].trim();
        if inner.contains("{{") {
            return Err("a {{ without its closing }}".into());
        }
        let mut parts = inner.split(':');
        let name = parts.next().unwrap_or("").trim();
        if name.is_empty() {
            return Err("an empty {{}} token".into());
        }
        let mut params = Vec::new();
        for p in parts {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("{{{{{inner}}}}}: parameters are written name=value"))?;
            params.push((k.trim(), v.trim()));
        }
        out.push(Err(Token { name, params }));
        rest = &after[end + 2..];
    }
    if rest.contains("}}") {
        return Err("a }} without its opening {{".into());
    }
    if !rest.is_empty() {
        out.push(Ok(rest));
    }
    Ok(out)
}

/// Checks a relative key template: the tokens the sink knows (topic, partition, start_offset,
/// timestamp with a unit), topic, partition and start offset all present so that two files
/// never get one key, safe literal characters, and no extension (it follows the compression).
pub fn check_key_template(t: &str) -> Result<(), String> {
    let example = format!("e.g. {DEFAULT_KEY_TEMPLATE}");
    if t.trim().is_empty() {
        return Err(format!("write a key template, {example}"));
    }
    if t.len() > 512 {
        return Err("at most 512 characters".into());
    }
    let parts = tokens(t)?;
    let mut seen = std::collections::BTreeSet::new();
    for part in &parts {
        match part {
            Ok(text) => {
                if let Some(c) = text
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || "!-_.*'()=/".contains(*c)))
                {
                    return Err(format!("{c:?} is not allowed in a key; use letters, digits and ! - _ . * ' ( ) = /"));
                }
            }
            Err(tok) => {
                let allowed: &[&str] = match tok.name {
                    "topic" => &[],
                    "partition" | "start_offset" => &["padding"],
                    "timestamp" => &["unit"],
                    other => {
                        return Err(format!("{{{{{other}}}}} is not a token of the sink; use topic, partition, start_offset or timestamp"))
                    }
                };
                for (k, v) in &tok.params {
                    if !allowed.contains(k) {
                        return Err(format!("{{{{{}}}}} takes no parameter {k}", tok.name));
                    }
                    let ok = match *k {
                        "padding" => ["true", "false"].contains(v),
                        _ => ["yyyy", "MM", "dd", "HH"].contains(v),
                    };
                    if !ok {
                        return Err(format!(
                            "{{{{{}:{k}={v}}}}}: {k} is {}",
                            tok.name,
                            if *k == "padding" {
                                "true or false"
                            } else {
                                "yyyy, MM, dd or HH"
                            }
                        ));
                    }
                }
                if tok.name == "timestamp" && tok.params.is_empty() {
                    return Err("{{timestamp}} needs a unit, e.g. {{timestamp:unit=yyyy}}".into());
                }
                seen.insert(tok.name);
            }
        }
    }
    let missing: Vec<&str> = ["topic", "partition", "start_offset"]
        .into_iter()
        .filter(|n| !seen.contains(n))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "add {}: without topic, partition and start offset two files can get the same key and overwrite each other; {example}",
            missing.iter().map(|n| format!("{{{{{n}}}}}")).collect::<Vec<_>>().join(", ")
        ));
    }
    if t.starts_with('/') || t.contains("//") || t.split('/').any(|s| s == ".." || s == ".") {
        return Err("a relative key: no leading '/', no '//', '.' or '..'".into());
    }
    let lower = t.to_ascii_lowercase();
    if [".gz", ".jsonl", ".json"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        return Err(
            "leave out the extension: ClueCDC appends .jsonl.gz (gzip) or .jsonl (no compression)"
                .into(),
        );
    }
    Ok(())
}

/// The full `file.name.template`: the connection's prefix, the relative template and the
/// extension. The prefix goes into the template because the sink's own `aws.s3.prefix`
/// switches the template off (3.4.2 falls back to its legacy names).
pub fn file_name_template(prefix: &str, o: &ObjectStorageOptions) -> String {
    format!("{prefix}{}{}", o.key_template, o.extension())
}

/// The key one file of `topic` would get now (partition 0, start offset 0): what the user will
/// find in the bucket.
pub fn example_key(
    prefix: &str,
    o: &ObjectStorageOptions,
    topic: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    render_key(&file_name_template(prefix, o), topic, 0, 0, now)
}

/// The longest key the delivery writes for any of `topics`: partition and start offset at their
/// widest; `None` without topics.
pub fn longest_key(
    prefix: &str,
    o: &ObjectStorageOptions,
    topics: &[String],
    now: chrono::DateTime<chrono::Utc>,
) -> Option<String> {
    let template = file_name_template(prefix, o);
    topics
        .iter()
        .map(|t| render_key(&template, t, i32::MAX, i64::MAX, now))
        .max_by_key(String::len)
}

fn render_key(
    template: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let Ok(parts) = tokens(template) else {
        return template.to_string();
    };
    let padded = |t: &Token, v: String, width: usize| {
        if t.params.contains(&("padding", "true")) {
            format!("{v:0>width$}")
        } else {
            v
        }
    };
    parts
        .iter()
        .map(|p| match p {
            Ok(text) => text.to_string(),
            Err(t) => match t.name {
                "topic" => topic.to_string(),
                "partition" => padded(t, partition.to_string(), 10),
                "start_offset" => padded(t, offset.to_string(), 20),
                _ => {
                    let unit = t.params.first().map(|(_, v)| *v).unwrap_or("yyyy");
                    let f = match unit {
                        "yyyy" => "%Y",
                        "MM" => "%m",
                        "dd" => "%d",
                        _ => "%H",
                    };
                    now.format(f).to_string()
                }
            },
        })
        .collect()
}

/// Where a topic's objects live: the key up to the last `/` before the first token that is not
/// the topic. Listing under it finds this delivery's objects of that topic and nothing wider.
pub fn topic_scope(prefix: &str, o: &ObjectStorageOptions, topic: &str) -> String {
    let template = file_name_template(prefix, o);
    let Ok(parts) = tokens(&template) else {
        return prefix.to_string();
    };
    let mut fixed = String::new();
    for p in &parts {
        match p {
            Ok(text) => fixed.push_str(text),
            Err(t) if t.name == "topic" => fixed.push_str(topic),
            Err(_) => break,
        }
    }
    match fixed.rfind('/') {
        Some(i) => fixed[..=i].to_string(),
        None => String::new(),
    }
}

/// The Aiven S3 sink config: JSON Lines with key, value (the untouched Debezium envelope),
/// offset and timestamp; JSON converters with schemas, as the pipeline writes them; credentials
/// only as references. Every key here is one the plugin defines (3.4.2 and 3.4.3 alike).
/// `session_token`: the connection has temporary credentials (a session token is set).
pub fn s3(
    dest: &Connection,
    topics: &[String],
    o: &ObjectStorageOptions,
    session_token: bool,
) -> Config {
    let mut c = Config::new();
    let mut set = |k: &str, v: String| {
        c.insert(k.to_string(), v);
    };
    let Some(s) = dest.object_storage() else {
        return c;
    };
    let secret = |field: &str| format!("${{cluecdc:{}:{field}}}", dest.secret_ref);
    set("connector.class", S3_SINK.into());
    set("tasks.max", o.tasks.to_string());
    set("topics", topics.join(","));
    set("aws.s3.bucket.name", s.bucket.clone());
    set("aws.s3.region", s.region.clone());
    // An endpoint (MinIO, any S3-compatible server) makes the sink use path-style access.
    if let Some(endpoint) = &s.endpoint {
        set(
            "aws.s3.endpoint",
            endpoint.trim_end_matches('/').to_string(),
        );
    }
    set("aws.access.key.id", secret("access_key_id"));
    set("aws.secret.access.key", secret("secret_access_key"));
    if session_token {
        set("aws.session.token", secret("session_token"));
    }
    set("format.output.type", o.format.clone());
    set("format.output.fields", "key,value,offset,timestamp".into());
    set("file.compression.type", o.compression.clone());
    set("file.max.records", o.records_per_file.to_string());
    set("file.name.template", file_name_template(&s.prefix, o));
    set("file.name.timestamp.timezone", "UTC".into());
    set_sink_common(&mut c, &o.error_policy, o.dead_letter_topic.as_deref());
    c
}

/// What every sink shares: JSON converters with schemas (as the pipelines write), its own
/// consumer group (connect-<connector name>) from the earliest retained offsets, and
/// Connect's error handling: fail stops at a bad record; continue skips it (into the
/// dead-letter topic when one is named).
fn set_sink_common(c: &mut Config, policy: &str, dead_letter_topic: Option<&str>) {
    for side in ["key", "value"] {
        c.insert(
            format!("{side}.converter"),
            "org.apache.kafka.connect.json.JsonConverter".into(),
        );
        c.insert(format!("{side}.converter.schemas.enable"), "true".into());
    }
    c.insert(
        "consumer.override.auto.offset.reset".into(),
        "earliest".into(),
    );
    c.insert("errors.log.enable".into(), "true".into());
    if policy == "continue" {
        c.insert("errors.tolerance".into(), "all".into());
        if let Some(dlq) = dead_letter_topic {
            c.insert("errors.deadletterqueue.topic.name".into(), dlq.into());
            c.insert(
                "errors.deadletterqueue.context.headers.enable".into(),
                "true".into(),
            );
        }
    } else {
        c.insert("errors.tolerance".into(), "none".into());
    }
}

/// The JDBC URL of a database connection (no credentials in it: those are separate keys).
/// With verify-ca/verify-full the driver gets the connection's CA as a file on the worker,
/// through the config provider: PostgreSQL and MariaDB read the PEM, MySQL's driver a PKCS12
/// truststore.
pub fn jdbc_url(c: &Connection) -> String {
    let Some(d) = c.database() else {
        return String::new();
    };
    let ca = |param: &str| match d.verifies_ca() {
        true => format!(
            "&{param}={}",
            crate::pipelines::config::reference(c, "ca_cert_file")
        ),
        false => String::new(),
    };
    match c.provider {
        Provider::Postgresql => format!(
            "jdbc:postgresql://{}:{}/{}?sslmode={}{}",
            d.host,
            d.port,
            d.database,
            d.tls_mode.as_str(),
            ca("sslrootcert")
        ),
        Provider::Mariadb => format!(
            "jdbc:mariadb://{}:{}/{}?sslMode={}{}",
            d.host,
            d.port,
            d.database,
            match d.tls_mode {
                TlsMode::Disable => "disable",
                TlsMode::Require => "trust",
                TlsMode::VerifyCa => "verify-ca",
                TlsMode::VerifyFull => "verify-full",
            },
            ca("serverSslCert")
        ),
        _ => format!(
            "jdbc:mysql://{}:{}/{}?sslMode={}{}",
            d.host,
            d.port,
            d.database,
            match d.tls_mode {
                TlsMode::Disable => "DISABLED",
                TlsMode::Require => "REQUIRED",
                TlsMode::VerifyCa => "VERIFY_CA",
                TlsMode::VerifyFull => "VERIFY_IDENTITY",
            },
            match d.verifies_ca() {
                true => format!(
                    "&trustCertificateKeyStoreType=PKCS12&trustCertificateKeyStoreUrl=file:{}&trustCertificateKeyStorePassword={}",
                    crate::pipelines::config::reference(c, "ca_truststore_file"),
                    crate::pipelines::config::reference(c, "ca_truststore_password")
                ),
                false => String::new(),
            }
        ),
    }
}

pub fn jdbc(dest: &Connection, topics: &[String], o: &JdbcOptions) -> Config {
    let mut c = Config::new();
    let mut set = |k: &str, v: String| {
        c.insert(k.to_string(), v);
    };
    let user = dest.database().map(|d| d.user.clone()).unwrap_or_default();
    set("connector.class", JDBC_SINK.into());
    set("tasks.max", "1".into());
    set("topics", topics.join(","));
    set("connection.url", jdbc_url(dest));
    set("connection.username", user);
    set(
        "connection.password",
        format!("${{cluecdc:{}:password}}", dest.secret_ref),
    );
    set("insert.mode", o.insert_mode.clone());
    // Upserts and deletes need the row's key: the Kafka record key Debezium wrote.
    set("primary.key.mode", "record_key".into());
    set("delete.enabled", o.delete_enabled.to_string());
    set("collection.name.format", o.table_name_format.clone());
    set("schema.evolution", o.schema_evolution.clone());
    set_sink_common(&mut c, &o.error_policy, o.dead_letter_topic.as_deref());
    c
}

/// How a database delivery writes rows.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum InsertMode {
    Insert,
    /// Default: replays are harmless.
    Upsert,
    Update,
}

/// Whether a database delivery creates missing tables and columns.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum SchemaEvolution {
    /// Create missing tables and add missing columns.
    Basic,
    /// Tables must exist.
    None,
}

/// What a delivery does at a record it cannot write.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
#[schemars(rename = "DeliveryErrorPolicy")]
pub(crate) enum ErrorPolicy {
    /// Default: stop at a bad record.
    Fail,
    /// Skip it (to `dead_letter_topic` when set).
    Continue,
}

/// ClueCDC's reaction to a breaking schema change.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
#[schemars(rename = "SchemaChangePolicy")]
pub(crate) enum SchemaPolicy {
    /// Default: record and show it.
    Warn,
    /// Pause the delivery.
    Pause,
}

/// What an object-storage delivery writes.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
#[schemars(rename = "ObjectFormat")]
pub(crate) enum Format {
    /// JSON Lines: key, value, offset and timestamp per record.
    Jsonl,
}

/// How objects are compressed.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
#[schemars(rename = "ObjectCompression")]
pub(crate) enum Compression {
    /// Default: `.jsonl.gz`.
    Gzip,
    /// `.jsonl`.
    None,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::settings::{DatabaseSettings, Settings};
    use crate::connections::Capability;

    fn dest(provider: Provider) -> Connection {
        Connection {
            id: "con_2".into(),
            name: "replica".into(),
            provider,
            capabilities: vec![Capability::Destination],
            settings: Settings::Database(DatabaseSettings {
                host: "replica.internal".into(),
                port: 5432,
                database: "analytics".into(),
                user: "writer".into(),
                tls_mode: TlsMode::VerifyFull,
                ca_certificate: None,
                slot_name: None,
                publication_name: None,
                server_id: None,
            }),
            secret_ref: "sec_dest".into(),
            generation: 1,
            created_at: String::new(),
            updated_at: String::new(),
            last_test: None,
        }
    }

    #[test]
    fn the_jdbc_sink_config_matches_its_golden_file() {
        let c = jdbc(
            &dest(Provider::Postgresql),
            &["orders.public.orders".into(), "orders.public.items".into()],
            &JdbcOptions::default(),
        );
        let path = format!(
            "{}/tests/golden/jdbc-postgres.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = serde_json::to_string_pretty(&c).unwrap() + "\n";
        if std::env::var("UPDATE_GOLDEN").is_ok() {
            std::fs::write(&path, &text).unwrap();
        }
        assert_eq!(text, std::fs::read_to_string(&path).unwrap());
    }

    #[test]
    fn each_destination_gets_its_own_jdbc_url_and_no_credentials_in_it() {
        assert_eq!(
            jdbc_url(&dest(Provider::Postgresql)),
            "jdbc:postgresql://replica.internal:5432/analytics?sslmode=verify-full"
        );
        assert!(jdbc_url(&dest(Provider::Mariadb)).starts_with("jdbc:mariadb://"));
        assert!(jdbc_url(&dest(Provider::Mysql)).ends_with("sslMode=VERIFY_IDENTITY"));
    }

    #[test]
    fn a_verifying_destination_gets_its_ca_as_a_file_reference_never_the_pem() {
        let with_ca = |p: Provider| {
            let mut c = dest(p);
            if let Settings::Database(d) = &mut c.settings {
                d.ca_certificate =
                    Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into());
            }
            jdbc_url(&c)
        };
        assert_eq!(
            with_ca(Provider::Postgresql),
            "jdbc:postgresql://replica.internal:5432/analytics?sslmode=verify-full&sslrootcert=${cluecdc:sec_dest:ca_cert_file}"
        );
        assert!(with_ca(Provider::Mariadb)
            .ends_with("?sslMode=verify-full&serverSslCert=${cluecdc:sec_dest:ca_cert_file}"));
        assert!(with_ca(Provider::Mysql).ends_with(
            "&trustCertificateKeyStoreUrl=file:${cluecdc:sec_dest:ca_truststore_file}&trustCertificateKeyStorePassword=${cluecdc:sec_dest:ca_truststore_password}"
        ));
        for p in [Provider::Postgresql, Provider::Mariadb, Provider::Mysql] {
            assert!(!with_ca(p).contains("BEGIN"), "{p:?}");
        }
    }

    fn storage(prefix: &str) -> Connection {
        Connection {
            id: "con_3".into(),
            name: "lake".into(),
            provider: Provider::Minio,
            capabilities: vec![Capability::Destination],
            settings: Settings::ObjectStorage(
                crate::connections::settings::ObjectStorageSettings {
                    bucket: "cdc-lake".into(),
                    region: "us-east-1".into(),
                    prefix: prefix.into(),
                    endpoint: Some("http://minio:9000".into()),
                    path_style: true,
                    use_ssl: false,
                    ca_certificate: None,
                },
            ),
            secret_ref: "sec_lake".into(),
            generation: 1,
            created_at: String::new(),
            updated_at: String::new(),
            last_test: None,
        }
    }

    fn golden(name: &str, c: &Config) {
        let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = serde_json::to_string_pretty(c).unwrap() + "\n";
        if std::env::var("UPDATE_GOLDEN").is_ok() {
            std::fs::write(&path, &text).unwrap();
        }
        assert_eq!(text, std::fs::read_to_string(&path).unwrap(), "{path}");
    }

    #[test]
    fn the_s3_sink_configs_match_their_golden_files() {
        let topics = [
            "orders.public.orders".to_string(),
            "orders.public.items".to_string(),
        ];
        golden(
            "s3-minio-gzip.json",
            &s3(
                &storage("cdc/"),
                &topics,
                &ObjectStorageOptions::default(),
                false,
            ),
        );
        let o = ObjectStorageOptions {
            compression: "none".into(),
            records_per_file: 500,
            tasks: 2,
            error_policy: "continue".into(),
            dead_letter_topic: Some("orders.dlq".into()),
            ..ObjectStorageOptions::default()
        };
        golden(
            "s3-minio-none-continue.json",
            &s3(&storage(""), &topics, &o, true),
        );
    }

    #[test]
    fn credentials_are_references_and_the_prefix_leads_the_template() {
        let c = s3(
            &storage("cdc/"),
            &["t".into()],
            &ObjectStorageOptions::default(),
            false,
        );
        assert_eq!(c["aws.access.key.id"], "${cluecdc:sec_lake:access_key_id}");
        assert_eq!(
            c["aws.secret.access.key"],
            "${cluecdc:sec_lake:secret_access_key}"
        );
        assert!(!c.contains_key("aws.session.token"));
        // aws.s3.prefix would switch the template off in the sink: never set it.
        assert!(!c.contains_key("aws.s3.prefix"));
        assert!(c["file.name.template"].starts_with("cdc/{{topic}}/year="));
        assert!(c["file.name.template"].ends_with(".jsonl.gz"));
        // Keys seed 004 warns about: another vendor's, not this sink's.
        assert!(!c.contains_key("flush.size") && !c.contains_key("rotate.schedule.interval.ms"));
    }

    #[test]
    fn key_templates_need_topic_partition_and_start_offset() {
        assert_eq!(check_key_template(DEFAULT_KEY_TEMPLATE), Ok(()));
        assert_eq!(
            check_key_template("{{topic}}/{{partition}}-{{start_offset:padding=false}}"),
            Ok(())
        );
        for (bad, says) in [
            (
                "{{topic}}/{{timestamp:unit=yyyy}}/data",
                "add {{partition}}, {{start_offset}}",
            ),
            ("{{topic}}-{{partition}}", "add {{start_offset}}"),
            ("{{partition}}-{{start_offset}}", "add {{topic}}"),
            (
                "{{topic}}/{{key}}/{{partition}}-{{start_offset}}",
                "{{key}} is not a token",
            ),
            (
                "{{topic}}/{{timestamp}}/{{partition}}-{{start_offset}}",
                "needs a unit",
            ),
            (
                "{{topic}}/{{timestamp:unit=mm}}/{{partition}}-{{start_offset}}",
                "yyyy, MM, dd or HH",
            ),
            (
                "{{topic}}/{{partition:padding=yes}}-{{start_offset}}",
                "true or false",
            ),
            (
                "{{topic}}/{{partition}}-{{start_offset}}.jsonl.gz",
                "leave out the extension",
            ),
            (
                "/{{topic}}/{{partition}}-{{start_offset}}",
                "no leading '/'",
            ),
            ("{{topic}}/../{{partition}}-{{start_offset}}", "'..'"),
            (
                "{{topic}} {{partition}}-{{start_offset}}",
                "' ' is not allowed",
            ),
            (
                "{{topic}}/{{partition-{{start_offset}}",
                "without its closing",
            ),
            (
                "{{topic}}/{{partition:padding}}-{{start_offset}}",
                "parameters are written",
            ),
            (
                "{{topic}}/{{partition}}-{{start_offset",
                "without its closing",
            ),
            ("", "write a key template"),
        ] {
            let err = check_key_template(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn example_keys_and_listing_scopes_follow_the_template() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T08:30:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let o = ObjectStorageOptions::default();
        assert_eq!(
            example_key("cdc/", &o, "shop.public.orders", now),
            "cdc/shop.public.orders/year=2026/month=12/day=01/shop.public.orders-0000000000-00000000000000000000.jsonl.gz"
        );
        let plain = ObjectStorageOptions {
            compression: "none".into(),
            key_template: "raw/{{timestamp:unit=yyyy}}/{{topic}}-{{partition}}-{{start_offset}}"
                .into(),
            ..o.clone()
        };
        assert_eq!(example_key("", &plain, "t", now), "raw/2026/t-0-0.jsonl");
        // The longest key: the longest topic, with partition and offset at their widest.
        assert_eq!(
            longest_key("", &plain, &["t".into(), "tt".into()], now).as_deref(),
            Some("raw/2026/tt-2147483647-9223372036854775807.jsonl")
        );
        assert_eq!(longest_key("", &plain, &[], now), None);
        assert_eq!(
            longest_key("cdc/", &o, &["a".into()], now).map(|k| k.len()),
            Some(example_key("cdc/", &o, "a", now).len()),
            "padded numbers are as wide as they get"
        );
        assert_eq!(
            topic_scope("cdc/", &o, "shop.public.orders"),
            "cdc/shop.public.orders/"
        );
        assert_eq!(topic_scope("cdc/", &plain, "t"), "cdc/raw/");
        let flat = ObjectStorageOptions {
            key_template: "{{topic}}-{{partition}}-{{start_offset}}".into(),
            ..o
        };
        assert_eq!(topic_scope("", &flat, "t"), "");
    }

    #[test]
    fn the_mysql_jdbc_sink_config_with_its_ca_matches_its_golden_file() {
        // MySQL Connector/J 9 reads the CA from a PKCS12 truststore the config provider writes
        // on the worker; VERIFY_IDENTITY checks the host name too. Over verified TLS the
        // password travels inside TLS, so no allowPublicKeyRetrieval (an RSA key exchange that
        // trusts whatever key the server sends).
        let mut c = dest(Provider::Mysql);
        if let Settings::Database(d) = &mut c.settings {
            d.port = 3306;
            d.ca_certificate =
                Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into());
        }
        let config = jdbc(
            &c,
            &["orders.public.orders".into()],
            &JdbcOptions::default(),
        );
        golden("jdbc-mysql.json", &config);
        let url = &config["connection.url"];
        assert!(url.contains("sslMode=VERIFY_IDENTITY&trustCertificateKeyStoreType=PKCS12"));
        assert!(
            !url.to_lowercase().contains("allowpublickeyretrieval"),
            "{url}"
        );
        if let Settings::Database(d) = &mut c.settings {
            d.tls_mode = TlsMode::VerifyCa;
        }
        assert!(jdbc_url(&c).contains("sslMode=VERIFY_CA&"));
    }

    #[test]
    fn continue_sends_skipped_records_to_the_named_dead_letter_topic() {
        let o = JdbcOptions {
            error_policy: "continue".into(),
            dead_letter_topic: Some("dlq".into()),
            ..JdbcOptions::default()
        };
        let c = jdbc(&dest(Provider::Postgresql), &["t".into()], &o);
        assert_eq!(c["errors.tolerance"], "all");
        assert_eq!(c["errors.deadletterqueue.topic.name"], "dlq");
    }
}
