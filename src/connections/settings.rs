//! Parsing connection input at the edge: raw JSON in, validated settings out, or field
//! errors that name the field and say how to fix it. Pure functions, unit-tested here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Capability, Provider};
use crate::error::FieldErrors;
use crate::secrets::binding::Binding;
use crate::secrets::Secret;

/// How a database connection uses TLS. New and changed connections choose `verify-full`,
/// `verify-ca` (both with the CA certificate) or `disable` (plain text, for isolated local
/// fixtures); certificate verification cannot be turned off. `Require` (TLS without
/// verification) is kept only so that rows stored before that rule still load: they carry a
/// warning, and saving such a connection again needs one of the three modes.
/// (In replies, `require` appears only on connections stored before it was refused.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    Disable,
    Require,
    VerifyCa,
    VerifyFull,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }
    /// The modes a connection may be saved with (never `require`).
    pub const CHOICES: [TlsMode; 3] = [TlsMode::VerifyFull, TlsMode::VerifyCa, TlsMode::Disable];

    /// Input: one of [`TlsMode::CHOICES`], or why not.
    fn parse(s: &str) -> Result<TlsMode, String> {
        if let Some(m) = Self::CHOICES.into_iter().find(|m| m.as_str() == s) {
            return Ok(m);
        }
        let unverified = [
            "require",
            "prefer",
            "allow",
            "required",
            "preferred",
            "trust",
        ];
        Err(if unverified.contains(&s.to_ascii_lowercase().as_str()) {
            format!("{s} means TLS without certificate verification, and verification cannot be turned off: {TLS_MODE_HINT}")
        } else {
            format!(
                "unknown tls_mode (certificate verification cannot be turned off): {TLS_MODE_HINT}"
            )
        })
    }
}

/// What to choose, in the words every tls_mode message uses.
const TLS_MODE_HINT: &str = "choose verify-full (with ca_certificate) or verify-ca; disable only for an isolated local fixture";

/// The warning a connection stored with `require` carries, and the refusal of new pipelines and
/// deliveries on it.
pub const UNVERIFIED_WARNING: &str = "TLS without certificate verification: edit the connection and choose verify-full (with the CA certificate that signed the server's)";

/// A database connection's settings (PostgreSQL, MySQL, MariaDB).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DatabaseSettings {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub tls_mode: TlsMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificate: Option<String>,
    /// PostgreSQL sources: the replication slot and publication Debezium uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publication_name: Option<String>,
    /// MySQL/MariaDB sources: the replica server id, unique in the replication topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u32>,
}

impl DatabaseSettings {
    /// Whether clients check the server's certificate against the connection's CA (the CA is
    /// required with these modes, so it is there).
    pub fn verifies_ca(&self) -> bool {
        matches!(self.tls_mode, TlsMode::VerifyCa | TlsMode::VerifyFull)
            && self.ca_certificate.is_some()
    }
}

/// An object-storage connection's settings (AWS S3, MinIO).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ObjectStorageSettings {
    pub bucket: String,
    pub region: String,
    /// Scopes every key this connection writes; empty or ending in `/`.
    pub prefix: String,
    /// Absent for AWS (regional endpoint); required for MinIO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub path_style: bool,
    pub use_ssl: bool,
    /// A private CA for an https endpoint: ClueCDC trusts only it for this connection (the
    /// Connect workers trust it through their JVM truststore; see the README).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificate: Option<String>,
}

/// A connection's settings: database or object storage, by its provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "ConnectionSettings")]
pub enum Settings {
    Database(DatabaseSettings),
    ObjectStorage(ObjectStorageSettings),
}

/// A connection's settings as the API reads them: which keys apply depends on the provider
/// (databases or object storage), and a key the provider does not take is a 422. Text may also be sent as a number,
/// numbers as digits, booleans as `"true"`/`"false"`; `null` leaves a key out (on `PATCH` it
/// removes it).
#[derive(schemars::JsonSchema)]
#[schemars(rename = "ConnectionSettingsInput", deny_unknown_fields)]
#[allow(dead_code)]
pub struct SettingsInput {
    /// Databases: the server's hostname or IP address (required).
    host: Option<Text>,
    /// Databases: default 5432 (PostgreSQL) or 3306 (MySQL, MariaDB).
    port: Option<Port>,
    /// Databases: the database name (required).
    database: Option<Text>,
    /// Databases: the user ClueCDC and the connectors log in as (required).
    user: Option<Text>,
    /// Databases (required): `verify-full` or `verify-ca` (both with `ca_certificate`), or
    /// `disable` (plain text, for an isolated local fixture). Verification cannot be turned off.
    tls_mode: Option<TlsModeChoice>,
    /// PEM of the CA that signed the server's certificate (databases with a verifying
    /// `tls_mode`; MinIO over https with a private CA).
    ca_certificate: Option<Text>,
    /// PostgreSQL sources: the replication slot (default `cluecdc_<name>`).
    slot_name: Option<Text>,
    /// PostgreSQL sources: the publication (default `cluecdc_<name>`).
    publication_name: Option<Text>,
    /// MySQL/MariaDB sources: the replica server id, unique in the topology (default: random).
    server_id: Option<ServerId>,
    /// Object storage: the existing bucket to write to (required).
    bucket: Option<Text>,
    /// Object storage: the region (required for AWS S3; MinIO default `us-east-1`).
    region: Option<Text>,
    /// Object storage: scopes every key this connection writes; empty or ending in `/`.
    prefix: Option<Text>,
    /// MinIO: the URL ClueCDC and Kafka Connect both reach (required); AWS S3: absent.
    endpoint: Option<Text>,
    /// Object storage: path-style addressing (always with an endpoint).
    path_style: Option<Flag>,
    /// Object storage: TLS (default: from the endpoint's scheme; always for AWS S3).
    use_ssl: Option<Flag>,
}

/// The `tls_mode` a connection may be saved with (documents `ConnectionSettingsInput.tls_mode`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "TlsModeInput")]
#[allow(dead_code)]
enum TlsModeChoice {
    VerifyFull,
    VerifyCa,
    Disable,
}

/// Schemas of the lenient scalars the settings parser reads (see `Raw`): the documented input
/// (`SettingsInput`) accepts exactly what the parser does not reject for its type.
macro_rules! lenient_scalar {
    ($($name:ident => $schema:tt;)*) => {$(
        #[allow(dead_code)]
        struct $name;
        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    )*};
}

lenient_scalar! {
    Text => {"type": ["string", "number", "null"]};
    Flag => {"anyOf": [{"type": ["boolean", "null"]}, {"enum": ["true", "on", "false", ""]}]};
    Port => {"anyOf": [
        {"type": "integer", "minimum": 1, "maximum": 65535},
        {"type": "string", "pattern": "^\\s*\\+?[0-9]*\\s*$"},
        {"type": "null"}
    ]};
    ServerId => {"anyOf": [
        {"type": "integer", "minimum": 1, "maximum": 4294967295u64},
        {"type": "string", "pattern": "^\\s*\\+?[0-9]*\\s*$"},
        {"type": "null"}
    ]};
}

/// The secret fields a connection takes (documents `ConnectionInput.secrets` and
/// `Connection.secret_fields_set`): `password` for a database; `access_key_id`,
/// `secret_access_key` and the optional `session_token` for object storage.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "ConnectionSecretField")]
#[allow(dead_code)]
pub enum SecretField {
    Password,
    AccessKeyId,
    SecretAccessKey,
    SessionToken,
}

/// A connection's secrets, write-only: stored encrypted and never returned. Required on
/// create (and on rotate, which replaces them all); on `PATCH` only those given change.
/// An empty string or `null` is the same as leaving the field out.
#[derive(schemars::JsonSchema)]
#[schemars(rename = "ConnectionSecretsInput", deny_unknown_fields)]
#[allow(dead_code)]
pub struct SecretsInput {
    /// Databases: the user's password.
    #[schemars(extend("writeOnly" = true), length(max = 4096))]
    password: Option<String>,
    /// Object storage: the access key id.
    #[schemars(extend("writeOnly" = true), length(max = 4096))]
    access_key_id: Option<String>,
    /// Object storage: the secret access key.
    #[schemars(extend("writeOnly" = true), length(max = 4096))]
    secret_access_key: Option<String>,
    /// Object storage: a session token for temporary credentials (optional).
    #[schemars(extend("writeOnly" = true), length(max = 4096))]
    session_token: Option<String>,
}

/// Keys that would turn TLS verification off. No such option exists; saying so beats
/// "unknown setting".
const TLS_OFF_KEYS: &[&str] = &[
    "insecure",
    "tls_verify",
    "verify_ssl",
    "ssl_verify",
    "skip_tls_verify",
    "insecure_skip_verify",
    "verify",
];
/// Secret-looking keys sent in `settings` by mistake.
const SECRET_KEYS: &[&str] = &[
    "password",
    "secret_access_key",
    "access_key_id",
    "session_token",
    "secret",
    "token",
];

struct Raw<'a> {
    map: &'a Map<String, Value>,
    errors: &'a mut FieldErrors,
    used: Vec<&'static str>,
}

impl<'a> Raw<'a> {
    fn err(&mut self, key: &str, why: impl Into<String>) {
        self.errors
            .entry(format!("settings.{key}"))
            .or_insert_with(|| why.into());
    }

    fn string(&mut self, key: &'static str) -> Option<String> {
        self.used.push(key);
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => {
                self.err(key, "write this as text");
                None
            }
        }
    }

    fn required(&mut self, key: &'static str, hint: &str) -> String {
        let v = self.string(key);
        if v.is_none() {
            self.err(key, format!("required: {hint}"));
        }
        v.unwrap_or_default()
    }

    fn boolean(&mut self, key: &'static str) -> Option<bool> {
        self.used.push(key);
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(Value::String(s)) if s == "true" || s == "on" => Some(true),
            Some(Value::String(s)) if s == "false" || s.is_empty() => Some(false),
            Some(_) => {
                self.err(key, "write true or false");
                None
            }
        }
    }

    fn number(&mut self, key: &'static str, min: u64, max: u64) -> Option<u64> {
        self.used.push(key);
        let n = match self.map.get(key) {
            None | Some(Value::Null) => return None,
            Some(Value::String(s)) if s.trim().is_empty() => return None,
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.err(key, format!("write a whole number from {min} to {max}"));
                None
            }
        }
    }

    /// Refuses keys this provider does not know, with the reason when we know it.
    fn finish(mut self) {
        let unknown: Vec<String> = self
            .map
            .keys()
            .filter(|k| !self.used.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            if TLS_OFF_KEYS.contains(&key.as_str()) {
                self.err(&key, "TLS certificate verification cannot be disabled; remove this setting (for a private CA, give tls_mode verify-ca or verify-full with ca_certificate)");
            } else if SECRET_KEYS.contains(&key.as_str()) {
                self.err(&key, "secrets go under \"secrets\", not \"settings\", so they are encrypted and never shown");
            } else {
                self.err(
                    &key,
                    format!(
                        "unknown setting; this provider accepts: {}",
                        self.used.join(", ")
                    ),
                );
            }
        }
    }
}

/// A hostname or IP address only: no scheme, port, path or credentials.
pub fn check_host(host: &str) -> Result<(), String> {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let ok = host.len() <= 253
        && !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err("write a hostname or IP address only (no scheme, port, path or user), e.g. db.internal or 10.0.0.5".into())
    }
}

fn check_identifier(value: &str, what: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && value.starts_with(|c: char| c.is_ascii_lowercase() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("{what} must be 1–63 characters of lowercase letters, digits and '_', starting with a letter or '_'"))
    }
}

/// A name safe to derive slot/publication names from.
pub fn slug(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    s.chars().take(40).collect()
}

pub fn parse_database(
    provider: Provider,
    caps: &[Capability],
    name: &str,
    map: &Map<String, Value>,
    errors: &mut FieldErrors,
) -> DatabaseSettings {
    let mut raw = Raw {
        map,
        errors,
        used: Vec::new(),
    };
    let host = raw.required("host", "the database server's hostname or IP address");
    if !host.is_empty() {
        if let Err(why) = check_host(&host) {
            raw.err("host", why);
        }
    }
    let default_port = if provider == Provider::Postgresql {
        5432
    } else {
        3306
    };
    let port = raw.number("port", 1, 65535).unwrap_or(default_port) as u16;
    let database = raw.required("database", "the database name");
    if database
        .chars()
        .any(|c| c.is_control() || c == '/' || c == '?' || c == '#')
        || database.len() > 64
    {
        raw.err(
            "database",
            "a database name of at most 64 characters, without '/', '?', '#' or control characters",
        );
    }
    let user = raw.required("user", "the user ClueCDC and the connectors log in as");
    if user.len() > 128 || user.chars().any(char::is_control) {
        raw.err("user", "at most 128 characters, no control characters");
    }
    // Required: no default decides for the user whether the server is verified. A stored
    // `require` arrives here on every update (settings are merged), so changing such a
    // connection in any way asks for a verifying mode (or disable) first.
    let tls_mode = match raw.string("tls_mode") {
        None => {
            raw.err("tls_mode", format!("required: {TLS_MODE_HINT}"));
            TlsMode::VerifyFull
        }
        Some(s) => TlsMode::parse(&s).unwrap_or_else(|why| {
            raw.err("tls_mode", why);
            TlsMode::VerifyFull
        }),
    };
    let ca_certificate = raw.string("ca_certificate");
    match (&ca_certificate, tls_mode) {
        (None, TlsMode::VerifyCa | TlsMode::VerifyFull) => raw.err("ca_certificate", format!("required with tls_mode {}: paste the PEM of the CA that signed the server's certificate", tls_mode.as_str())),
        (Some(pem), _) if !pem.contains("-----BEGIN CERTIFICATE-----") => raw.err("ca_certificate", "paste a PEM certificate (it starts with -----BEGIN CERTIFICATE-----)"),
        _ => {}
    }
    let source = caps.contains(&Capability::Source);
    let mut settings = DatabaseSettings {
        host,
        port,
        database,
        user,
        tls_mode,
        ca_certificate,
        slot_name: None,
        publication_name: None,
        server_id: None,
    };
    if provider == Provider::Postgresql {
        let slot = raw.string("slot_name");
        let publication = raw.string("publication_name");
        if source {
            let slot = slot.unwrap_or_else(|| format!("cluecdc_{}", slug(name)));
            if let Err(why) = check_identifier(&slot, "a slot name") {
                raw.err("slot_name", why);
            }
            let publication = publication.unwrap_or_else(|| format!("cluecdc_{}", slug(name)));
            if let Err(why) = check_identifier(&publication, "a publication name") {
                raw.err("publication_name", why);
            }
            settings.slot_name = Some(slot);
            settings.publication_name = Some(publication);
        } else if slot.is_some() || publication.is_some() {
            raw.err(
                if slot.is_some() {
                    "slot_name"
                } else {
                    "publication_name"
                },
                "only a SOURCE connection has a replication slot and publication",
            );
        }
    } else {
        let server_id = raw.number("server_id", 1, u64::from(u32::MAX));
        if source {
            settings.server_id = Some(
                server_id
                    .map(|n| n as u32)
                    .unwrap_or_else(generated_server_id),
            );
        } else if server_id.is_some() {
            raw.err(
                "server_id",
                "only a SOURCE connection has a replication server id",
            );
        }
    }
    raw.finish();
    settings
}

/// Random in 10 000 – 2 000 000 000, far from the ids people give their servers by hand.
fn generated_server_id() -> u32 {
    use rand::Rng;
    rand::thread_rng().gen_range(10_000..2_000_000_000)
}

/// S3 bucket naming rules (general purpose buckets).
pub fn check_bucket(b: &str) -> Result<(), String> {
    let chars_ok = b
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    let ends_ok = b.starts_with(|c: char| c.is_ascii_alphanumeric())
        && b.ends_with(|c: char| c.is_ascii_alphanumeric());
    let ip_like = b.split('.').count() == 4 && b.split('.').all(|p| p.parse::<u8>().is_ok());
    let reserved = b.starts_with("xn--")
        || b.starts_with("sthree-")
        || b.ends_with("-s3alias")
        || b.ends_with("--ol-s3")
        || b.contains("..");
    if (3..=63).contains(&b.len()) && chars_ok && ends_ok && !ip_like && !reserved {
        Ok(())
    } else {
        Err("use 3–63 characters: lowercase letters, digits, '.' and '-', starting and ending with a letter or digit, not shaped like an IP address, no '..', not starting with xn-- or ending with -s3alias".into())
    }
}

/// AWS region names such as us-east-1, eu-central-2, us-gov-west-1, cn-north-1.
pub fn check_aws_region(r: &str) -> Result<(), String> {
    let parts: Vec<&str> = r.split('-').collect();
    let ok = parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].chars().all(|c| c.is_ascii_lowercase())
        && parts
            .last()
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        && parts[1..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()));
    if ok {
        Ok(())
    } else {
        Err("write an AWS region code such as us-east-1 or eu-central-1".into())
    }
}

fn check_prefix(p: &str) -> Result<String, String> {
    if p.is_empty() {
        return Ok(String::new());
    }
    let bad = p.starts_with('/')
        || p.split('/').any(|seg| seg == ".." || seg == ".")
        || p.chars().any(|c| c.is_control() || c == '\\')
        || p.contains("//")
        || p.len() > 512;
    if bad {
        return Err("a relative key prefix such as cdc/orders/: no leading '/', no '.', '..', '//' or '\\', at most 512 characters".into());
    }
    Ok(if p.ends_with('/') {
        p.to_string()
    } else {
        format!("{p}/")
    })
}

/// The endpoint of a MinIO server: scheme and authority only.
pub fn check_endpoint(e: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(e)
        .map_err(|_| "write a URL such as https://minio.internal:9000".to_string())?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err("the endpoint must start with http:// or https://".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("remove the user and password from the endpoint: credentials belong in the secret fields".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("remove the query and fragment from the endpoint".into());
    }
    if url.path() != "/" && !url.path().is_empty() {
        return Err("the endpoint is scheme, host and port only (no path); the bucket is a separate setting".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the endpoint needs a host".into());
    }
    Ok(url)
}

/// Non-fatal remarks to show beside a valid connection.
pub fn warnings(provider: Provider, settings: &Settings) -> Vec<String> {
    let mut out = Vec::new();
    match settings {
        Settings::ObjectStorage(s) if provider == Provider::Minio && !s.use_ssl => {
            out.push("Plain HTTP: meant only for isolated local fixtures. Use https:// for anything that holds real data.".into())
        }
        Settings::Database(d) if d.tls_mode == TlsMode::Disable => {
            out.push("TLS is disabled: credentials and data cross the network in the clear. Use verify-full (with the CA certificate) outside an isolated local fixture.".into())
        }
        Settings::Database(d) if d.tls_mode == TlsMode::Require => {
            out.push(UNVERIFIED_WARNING.into())
        }
        _ => {}
    }
    out
}

pub fn parse_object_storage(
    provider: Provider,
    map: &Map<String, Value>,
    errors: &mut FieldErrors,
) -> ObjectStorageSettings {
    let mut raw = Raw {
        map,
        errors,
        used: Vec::new(),
    };
    let bucket = raw.required(
        "bucket",
        "the existing bucket to write to (ClueCDC never creates buckets)",
    );
    if !bucket.is_empty() {
        if let Err(why) = check_bucket(&bucket) {
            raw.err("bucket", why);
        }
    }
    let region = match provider {
        Provider::AwsS3 => {
            let r = raw.required("region", "the bucket's AWS region, e.g. eu-central-1");
            if !r.is_empty() {
                if let Err(why) = check_aws_region(&r) {
                    raw.err("region", why);
                }
            }
            r
        }
        _ => {
            let r = raw.string("region").unwrap_or_else(|| "us-east-1".into());
            if r.len() > 64
                || !r
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                raw.err(
                    "region",
                    "letters, digits, '-' and '_' only (MinIO's default is us-east-1)",
                );
            }
            r
        }
    };
    let prefix = match check_prefix(&raw.string("prefix").unwrap_or_default()) {
        Ok(p) => p,
        Err(why) => {
            raw.err("prefix", why);
            String::new()
        }
    };
    let endpoint_raw = raw.string("endpoint");
    let path_style = raw.boolean("path_style");
    let use_ssl = raw.boolean("use_ssl");
    let mut endpoint = None;
    let mut scheme_ssl = true;
    match (provider, endpoint_raw) {
        (Provider::AwsS3, Some(_)) => raw.err("endpoint", "AWS S3 uses its regional endpoint over TLS; remove the endpoint (for an S3-compatible server choose provider MINIO)"),
        (Provider::Minio, None) => raw.err("endpoint", "required for MinIO: the URL ClueCDC and Kafka Connect both reach, e.g. http://minio:9000"),
        (_, Some(e)) => match check_endpoint(&e) {
            Ok(url) => {
                scheme_ssl = url.scheme() == "https";
                endpoint = Some(url.as_str().trim_end_matches('/').to_string());
            }
            Err(why) => raw.err("endpoint", why),
        },
        _ => {}
    }
    let use_ssl = use_ssl.unwrap_or(scheme_ssl);
    if provider == Provider::AwsS3 && !use_ssl {
        raw.err(
            "use_ssl",
            "AWS S3 is reached over TLS only; set use_ssl true",
        );
    }
    if endpoint.is_some() && use_ssl != scheme_ssl {
        raw.err(
            "use_ssl",
            format!(
                "must match the endpoint's scheme: {} for {}",
                scheme_ssl,
                if scheme_ssl { "https://" } else { "http://" }
            ),
        );
    }
    // Any endpoint override is addressed path-style (the bucket in the path, not the host).
    let path_style = match (endpoint.is_some(), path_style) {
        (true, Some(false)) => {
            raw.err(
                "path_style",
                "an endpoint override requires path-style access; set path_style true",
            );
            true
        }
        (true, _) => true,
        (false, p) => p.unwrap_or(false),
    };
    let ca_certificate = raw.string("ca_certificate");
    match &ca_certificate {
        Some(_) if provider == Provider::AwsS3 => raw.err("ca_certificate", "AWS S3 is signed by public CAs; remove the CA certificate (a private CA is for an S3-compatible server: provider MINIO)"),
        Some(_) if !use_ssl => raw.err("ca_certificate", "a CA certificate is for an https:// endpoint; use https or remove the CA certificate"),
        Some(pem) if !pem.contains("-----BEGIN CERTIFICATE-----") => raw.err("ca_certificate", "paste a PEM certificate (it starts with -----BEGIN CERTIFICATE-----)"),
        _ => {}
    }
    raw.finish();
    ObjectStorageSettings {
        bucket,
        region,
        prefix,
        endpoint,
        path_style,
        use_ssl,
        ca_certificate,
    }
}

/// Secret fields per provider kind: (name, required on create).
pub fn secret_fields(provider: Provider) -> &'static [(&'static str, bool)] {
    if provider.is_object_storage() {
        &[
            ("access_key_id", true),
            ("secret_access_key", true),
            ("session_token", false),
        ]
    } else {
        &[("password", true)]
    }
}

/// Who receives each secret field: a change of these settings must give the secret again
/// (see `crate::secrets::binding`). A database password goes to the host, port and user; an
/// object store's keys (the session token travels as a header) to the endpoint and region.
pub fn bindings(provider: Provider) -> &'static [Binding] {
    const STORE: &[&str] = &["endpoint", "region"];
    if provider.is_object_storage() {
        &[
            Binding {
                secret: "access_key_id",
                settings: STORE,
            },
            Binding {
                secret: "secret_access_key",
                settings: STORE,
            },
            Binding {
                secret: "session_token",
                settings: STORE,
            },
        ]
    } else {
        &[Binding {
            secret: "password",
            settings: &["host", "port", "user"],
        }]
    }
}

/// Validates secret input. `require_all`: on create (and rotate) the required fields must be
/// present. Values are wrapped at once so they cannot be logged by accident.
pub fn parse_secrets(
    provider: Provider,
    map: &Map<String, Value>,
    require_all: bool,
    errors: &mut FieldErrors,
) -> BTreeMap<String, Secret<String>> {
    let allowed = secret_fields(provider);
    let mut out = BTreeMap::new();
    for (key, value) in map {
        let Some(_) = allowed.iter().find(|(n, _)| n == key) else {
            errors.insert(
                format!("secrets.{key}"),
                format!(
                    "unknown secret field; {} takes: {}",
                    provider.as_str(),
                    allowed
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            continue;
        };
        match value {
            Value::String(s) if !s.is_empty() => {
                if s.len() > 4096 || s.chars().any(|c| c == '\n' || c == '\r' || c == '\0') {
                    errors.insert(
                        format!("secrets.{key}"),
                        "at most 4096 characters on one line".into(),
                    );
                } else {
                    out.insert(key.clone(), Secret::new(s.clone()));
                }
            }
            Value::Null => {}
            Value::String(_) => {}
            _ => {
                errors.insert(format!("secrets.{key}"), "write this as text".into());
            }
        }
    }
    if require_all {
        for (name, required) in allowed {
            if *required && !out.contains_key(*name) {
                errors.entry(format!("secrets.{name}")).or_insert_with(|| {
                    "required; it is stored encrypted and never shown again".into()
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn minio(v: Value) -> (ObjectStorageSettings, FieldErrors) {
        let mut e = FieldErrors::new();
        let s = parse_object_storage(Provider::Minio, &obj(v), &mut e);
        (s, e)
    }

    #[test]
    fn a_minio_connection_with_an_http_endpoint_is_path_style_and_plain() {
        let (s, e) =
            minio(json!({"bucket": "cdc", "endpoint": "http://127.0.0.1:9000/", "prefix": "raw"}));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(s.path_style && !s.use_ssl);
        assert_eq!(s.prefix, "raw/");
        assert_eq!(s.region, "us-east-1");
        assert_eq!(
            warnings(Provider::Minio, &Settings::ObjectStorage(s)).len(),
            1
        );
    }

    #[test]
    fn endpoint_rules_name_the_field() {
        for (endpoint, needle) in [
            ("http://user:pw@minio:9000", "credentials"),
            ("http://minio:9000/?x=1", "query"),
            ("http://minio:9000/#frag", "fragment"),
            ("http://minio:9000/bucket", "no path"),
            ("ftp://minio", "http://"),
            ("minio:9000", "http"),
        ] {
            let (_, e) = minio(json!({"bucket": "cdc", "endpoint": endpoint}));
            assert!(e["settings.endpoint"].contains(needle), "{endpoint}: {e:?}");
        }
        let (_, e) = minio(json!({"bucket": "cdc"}));
        assert!(e["settings.endpoint"].contains("required"));
    }

    #[test]
    fn use_ssl_must_match_the_scheme_and_path_style_cannot_be_off_with_an_endpoint() {
        let (_, e) = minio(json!({"bucket": "cdc", "endpoint": "http://m:9000", "use_ssl": true}));
        assert!(e["settings.use_ssl"].contains("match"));
        let (_, e) =
            minio(json!({"bucket": "cdc", "endpoint": "https://m:9000", "use_ssl": false}));
        assert!(e["settings.use_ssl"].contains("match"));
        let (_, e) =
            minio(json!({"bucket": "cdc", "endpoint": "https://m:9000", "path_style": false}));
        assert!(e["settings.path_style"].contains("path-style"));
    }

    #[test]
    fn a_private_ca_is_for_an_https_minio_endpoint_and_must_be_pem() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let (s, e) =
            minio(json!({"bucket": "cdc", "endpoint": "https://m:9000", "ca_certificate": pem}));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.ca_certificate.as_deref(), Some(pem.trim()));
        let (_, e) =
            minio(json!({"bucket": "cdc", "endpoint": "http://m:9000", "ca_certificate": pem}));
        assert!(e["settings.ca_certificate"].contains("https://"));
        let (_, e) = minio(
            json!({"bucket": "cdc", "endpoint": "https://m:9000", "ca_certificate": "not a cert"}),
        );
        assert!(e["settings.ca_certificate"].contains("PEM"));
        let mut e = FieldErrors::new();
        parse_object_storage(
            Provider::AwsS3,
            &obj(json!({"bucket": "cdc", "region": "us-east-1", "ca_certificate": pem})),
            &mut e,
        );
        assert!(e["settings.ca_certificate"].contains("public CAs"));
    }

    #[test]
    fn aws_refuses_an_endpoint_and_plain_http_and_needs_a_real_region() {
        let mut e = FieldErrors::new();
        parse_object_storage(
            Provider::AwsS3,
            &obj(
                json!({"bucket": "cdc", "region": "us-east-1", "endpoint": "https://s3.example.com"}),
            ),
            &mut e,
        );
        assert!(e["settings.endpoint"].contains("regional endpoint"));
        let mut e = FieldErrors::new();
        parse_object_storage(
            Provider::AwsS3,
            &obj(json!({"bucket": "cdc", "region": "mars", "use_ssl": false})),
            &mut e,
        );
        assert!(e["settings.region"].contains("region code"));
        assert!(e["settings.use_ssl"].contains("TLS"));
        let mut e = FieldErrors::new();
        let s = parse_object_storage(
            Provider::AwsS3,
            &obj(json!({"bucket": "cdc", "region": "us-gov-west-1"})),
            &mut e,
        );
        assert!(e.is_empty() && s.use_ssl && !s.path_style);
    }

    #[test]
    fn tls_verification_cannot_be_disabled_and_secrets_do_not_go_in_settings() {
        let (_, e) = minio(
            json!({"bucket": "cdc", "endpoint": "https://m", "insecure": true, "secret_access_key": "x"}),
        );
        assert!(e["settings.insecure"].contains("cannot be disabled"));
        assert!(e["settings.secret_access_key"].contains("secrets"));
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        for good in ["cdc", "my.bucket-1", "a1b"] {
            assert!(check_bucket(good).is_ok(), "{good}");
        }
        for bad in [
            "ab",
            "Upper",
            "-start",
            "end-",
            "192.168.1.1",
            "a..b",
            "xn--abc",
            "x-s3alias",
            "has_underscore",
            &"a".repeat(64),
        ] {
            assert!(check_bucket(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixes_are_relative_and_end_with_a_slash() {
        assert_eq!(check_prefix("a/b").unwrap(), "a/b/");
        for bad in ["/abs", "a/../b", "a//b", "a\\b"] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }

    fn db(provider: Provider, caps: &[Capability], v: Value) -> (DatabaseSettings, FieldErrors) {
        let mut e = FieldErrors::new();
        let s = parse_database(provider, caps, "Orders DB", &obj(v), &mut e);
        (s, e)
    }

    #[test]
    fn a_postgres_source_gets_generated_slot_and_publication_names() {
        let (s, e) = db(
            Provider::Postgresql,
            &[Capability::Source],
            json!({"host": "db", "database": "orders", "user": "cdc", "tls_mode": "disable"}),
        );
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.port, 5432);
        assert_eq!(s.tls_mode, TlsMode::Disable);
        assert_eq!(s.slot_name.as_deref(), Some("cluecdc_orders_db"));
        assert_eq!(s.publication_name.as_deref(), Some("cluecdc_orders_db"));
    }

    #[test]
    fn a_mysql_source_gets_a_server_id_and_a_destination_gets_none() {
        let (s, e) = db(
            Provider::Mariadb,
            &[Capability::Source],
            json!({"host": "db", "database": "app", "user": "cdc", "tls_mode": "disable"}),
        );
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.port, 3306);
        assert!(s.server_id.unwrap() >= 10_000);
        let (_, e) = db(
            Provider::Mysql,
            &[Capability::Destination],
            json!({"host": "db", "database": "app", "user": "cdc", "tls_mode": "disable", "server_id": 5}),
        );
        assert!(e["settings.server_id"].contains("only a SOURCE"));
    }

    #[test]
    fn database_rules_name_the_field() {
        let (_, e) = db(
            Provider::Postgresql,
            &[Capability::Source],
            json!({"host": "postgres://db", "port": 70000, "user": "u", "tls_mode": "maybe", "slot_name": "Bad-Slot"}),
        );
        assert!(e["settings.host"].contains("hostname"));
        assert!(e["settings.port"].contains("1 to 65535"));
        assert!(e["settings.database"].contains("required"));
        assert!(e["settings.tls_mode"].contains("cannot be turned off"));
        assert!(e["settings.tls_mode"].contains("verify-full"));
        assert!(e["settings.slot_name"].contains("lowercase"));
        let (_, e) = db(
            Provider::Postgresql,
            &[Capability::Destination],
            json!({"host": "db", "database": "d", "user": "u", "tls_mode": "verify-full"}),
        );
        assert!(e["settings.ca_certificate"].contains("PEM"));
        let (_, e) = db(
            Provider::Postgresql,
            &[Capability::Destination],
            json!({"host": "db", "database": "d", "user": "u", "sslmode": "disable"}),
        );
        assert!(e["settings.sslmode"].contains("unknown setting"));
    }

    #[test]
    fn tls_mode_is_required_and_verification_cannot_be_turned_off() {
        let base = json!({"host": "db", "database": "d", "user": "u"});
        let with = |mode: Option<&str>| {
            let mut v = base.clone();
            if let Some(m) = mode {
                v["tls_mode"] = json!(m);
            }
            v
        };
        let (_, e) = db(Provider::Postgresql, &[Capability::Destination], with(None));
        assert!(e["settings.tls_mode"].starts_with("required: choose verify-full (with ca_certificate) or verify-ca; disable only for an isolated local fixture"), "{e:?}");
        for unverified in [
            "require",
            "prefer",
            "allow",
            "required",
            "preferred",
            "trust",
        ] {
            let (_, e) = db(
                Provider::Mariadb,
                &[Capability::Destination],
                with(Some(unverified)),
            );
            let why = &e["settings.tls_mode"];
            assert!(
                why.contains("without certificate verification")
                    && why.contains("cannot be turned off")
                    && why.contains("choose verify-full"),
                "{unverified}: {why}"
            );
        }
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
        for (mode, want) in [
            ("verify-full", TlsMode::VerifyFull),
            ("verify-ca", TlsMode::VerifyCa),
        ] {
            let mut v = with(Some(mode));
            v["ca_certificate"] = json!(pem);
            let (s, e) = db(Provider::Postgresql, &[Capability::Destination], v);
            assert!(e.is_empty(), "{mode}: {e:?}");
            assert_eq!(s.tls_mode, want);
            assert!(s.verifies_ca());
            assert!(warnings(Provider::Postgresql, &Settings::Database(s)).is_empty());
            let (_, e) = db(
                Provider::Postgresql,
                &[Capability::Destination],
                with(Some(mode)),
            );
            assert!(
                e["settings.ca_certificate"].contains("required with tls_mode"),
                "{mode}: {e:?}"
            );
        }
        let (s, e) = db(
            Provider::Postgresql,
            &[Capability::Destination],
            with(Some("disable")),
        );
        assert!(e.is_empty(), "{e:?}");
        assert!(warnings(Provider::Postgresql, &Settings::Database(s))[0]
            .contains("isolated local fixture"));
        assert_eq!(
            TlsMode::CHOICES.map(TlsMode::as_str),
            ["verify-full", "verify-ca", "disable"],
            "what the form offers: no require"
        );
    }

    #[test]
    fn a_stored_require_connection_still_loads_with_a_warning_and_is_refused_when_saved_again() {
        let stored: Settings = serde_json::from_value(json!({"host": "db", "port": 5432, "database": "d", "user": "u", "tls_mode": "require"})).unwrap();
        let Settings::Database(d) = &stored else {
            panic!("a database row: {stored:?}")
        };
        assert_eq!(d.tls_mode, TlsMode::Require);
        assert_eq!(
            warnings(Provider::Postgresql, &stored),
            vec![UNVERIFIED_WARNING.to_string()]
        );
        // An update merges the stored settings with the patch: unchanged, require is refused.
        let merged = serde_json::to_value(&stored).unwrap();
        let (_, e) = db(Provider::Postgresql, &[Capability::Destination], merged);
        assert!(
            e["settings.tls_mode"].contains("cannot be turned off"),
            "{e:?}"
        );
    }

    #[test]
    fn secrets_are_checked_per_provider() {
        let mut e = FieldErrors::new();
        let s = parse_secrets(
            Provider::Minio,
            &obj(json!({"access_key_id": "AK", "password": "x"})),
            true,
            &mut e,
        );
        assert!(e["secrets.password"].contains("unknown secret field"));
        assert!(e["secrets.secret_access_key"].contains("required"));
        assert_eq!(s.len(), 1);
        let mut e = FieldErrors::new();
        parse_secrets(
            Provider::Postgresql,
            &obj(json!({"password": "line\nbreak"})),
            true,
            &mut e,
        );
        assert!(e["secrets.password"].contains("one line"));
    }
}
