//! Connections: reusable database and object-storage endpoints with a provider,
//! capabilities, non-secret settings and a stable secret reference.
//!
//! Each provider is one adapter (`postgres`, `mysql` for MySQL and MariaDB, `s3` for AWS S3
//! and MinIO) implementing `Adapter`: test the connection and discover tables. Validation of
//! settings is pure and lives in `settings`.

pub mod guard;
pub mod mysql;
pub mod postgres;
pub mod s3;
pub mod settings;

use crate::db;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::db::Pool;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use self::settings::{parse_database, parse_object_storage, parse_secrets, Settings};
use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::listing::{self, ListSql, Page, Window};
use crate::secrets::binding::{self, Rebound};
use crate::secrets::store::{new_ref, SecretStore};
use crate::secrets::Secret;

/// What a connection talks to: a database (a capture source or a JDBC destination) or object
/// storage (a destination only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Provider {
    Postgresql,
    Mysql,
    Mariadb,
    AwsS3,
    Minio,
}

impl Provider {
    pub const ALL: [Provider; 5] = [
        Provider::Postgresql,
        Provider::Mysql,
        Provider::Mariadb,
        Provider::AwsS3,
        Provider::Minio,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Postgresql => "POSTGRESQL",
            Provider::Mysql => "MYSQL",
            Provider::Mariadb => "MARIADB",
            Provider::AwsS3 => "AWS_S3",
            Provider::Minio => "MINIO",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Provider::Postgresql => "PostgreSQL",
            Provider::Mysql => "MySQL",
            Provider::Mariadb => "MariaDB",
            Provider::AwsS3 => "AWS S3",
            Provider::Minio => "MinIO",
        }
    }

    pub fn parse(s: &str) -> Option<Provider> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == s.trim().to_ascii_uppercase())
    }

    pub fn is_object_storage(self) -> bool {
        matches!(self, Provider::AwsS3 | Provider::Minio)
    }
}

/// What a connection is used for: `SOURCE` (pipelines capture from it) and/or `DESTINATION`
/// (deliveries write to it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Capability {
    Source,
    Destination,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Source => "SOURCE",
            Capability::Destination => "DESTINATION",
        }
    }
    pub fn parse(s: &str) -> Option<Capability> {
        match s.trim().to_ascii_uppercase().as_str() {
            "SOURCE" => Some(Capability::Source),
            "DESTINATION" => Some(Capability::Destination),
            _ => None,
        }
    }
}

/// How one check of a connection test went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    Warn,
    Fail,
}

/// One line of a connection test: what was checked, how it went, and how to fix a failure.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "ConnectionCheck")]
pub struct Check {
    /// What was checked, e.g. `reach`, `login`, `wal_level`, `bucket`.
    pub name: String,
    pub status: CheckStatus,
    pub message: String,
    /// How to fix a warning or failure (absent when the check passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Check {
    pub fn pass(name: &str, message: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status: CheckStatus::Pass,
            message: message.into(),
            hint: None,
        }
    }
    pub fn warn(name: &str, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status: CheckStatus::Warn,
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
    pub fn fail(name: &str, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status: CheckStatus::Fail,
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
}

/// The outcome of a connection test: every check, in the order they ran.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "ConnectionTestReport")]
pub struct TestReport {
    /// No check failed (warnings allowed).
    pub ok: bool,
    pub checks: Vec<Check>,
    pub tested_at: String,
    pub duration_ms: u64,
}

/// A table a source connection can capture.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "SourceTable")]
pub struct TableInfo {
    pub schema: String,
    pub name: String,
    pub primary_key: Vec<String>,
    /// PostgreSQL only: default, full, index or nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_identity: Option<String>,
    /// The database's own row estimate (null when it has none).
    pub estimated_rows: Option<i64>,
    /// Updates and deletes carry a key or full before-image.
    pub capturable: bool,
}

/// A source's tables, as discovered now (at most `limit`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "SourceTables")]
pub struct Discovery {
    pub items: Vec<TableInfo>,
    /// The most tables one discovery returns.
    pub limit: usize,
    /// More tables exist than `limit`.
    pub truncated: bool,
}

/// What a provider adapter does. Connector config builders join this trait with pipelines
/// and deliveries.
pub trait Adapter: Send + Sync {
    fn test<'a>(
        &'a self,
        conn: &'a Connection,
        secrets: &'a BTreeMap<String, Secret<String>>,
    ) -> BoxFuture<'a, Vec<Check>>;
    fn discover<'a>(
        &'a self,
        conn: &'a Connection,
        secrets: &'a BTreeMap<String, Secret<String>>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TableInfo>>>;
}

pub fn adapter(provider: Provider) -> &'static dyn Adapter {
    match provider {
        Provider::Postgresql => &postgres::Postgres,
        Provider::Mysql | Provider::Mariadb => &mysql::MySql,
        Provider::AwsS3 | Provider::Minio => &s3::ObjectStorage,
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ConnectionRecord")]
pub struct Connection {
    pub id: String,
    pub name: String,
    pub provider: Provider,
    pub capabilities: Vec<Capability>,
    /// Database or object-storage settings, by provider (never a secret).
    pub settings: Settings,
    /// Stable: Connect configs refer to the secrets as `${cluecdc:<secret_ref>:<field>}`.
    pub secret_ref: String,
    /// Bumped by every change to settings or secrets.
    pub generation: i64,
    pub created_at: String,
    pub updated_at: String,
    /// The last test's report (null before the first test).
    pub last_test: Option<TestReport>,
}

impl Connection {
    pub fn database(&self) -> Option<&settings::DatabaseSettings> {
        match &self.settings {
            Settings::Database(d) => Some(d),
            _ => None,
        }
    }
    pub fn object_storage(&self) -> Option<&settings::ObjectStorageSettings> {
        match &self.settings {
            Settings::ObjectStorage(s) => Some(s),
            _ => None,
        }
    }
    /// Stored with tls_mode `require` (TLS without certificate verification), which no
    /// connection may be saved with any more: nothing new is configured on it until it is
    /// edited to a verifying mode.
    pub fn unverified_tls(&self) -> bool {
        self.database()
            .is_some_and(|d| d.tls_mode == settings::TlsMode::Require)
    }

    pub fn is_source(&self) -> bool {
        self.capabilities.contains(&Capability::Source)
    }
}

/// What the API and pages show: never a secret, only which secret fields are set.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Connection")]
pub struct ConnectionView {
    #[serde(flatten)]
    pub connection: Connection,
    /// The secret fields that hold a value (the values are never returned).
    #[schemars(with = "Vec<settings::SecretField>")]
    pub secret_fields_set: Vec<String>,
    /// What needs attention, e.g. TLS without certificate verification.
    pub warnings: Vec<String>,
}

/// A connection to create (`name`, `provider`, `settings` and the provider's secrets are
/// required), or a change to one (`PATCH`: absent fields keep their value, `settings` are
/// merged key by key and `null` removes a key; the provider cannot change). Everything is
/// optional in the type so that what is missing is answered as a field error.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct ConnectionInput {
    /// 1–64 characters: letters, digits, spaces, `.`, `_` or `-`; unique.
    pub name: Option<String>,
    /// Required on create; on `PATCH` it may only repeat the current one.
    #[serde(default, deserialize_with = "crate::wire::enum_string::<_, Provider>")]
    #[schemars(with = "Option<Provider>")]
    pub provider: Option<String>,
    /// At least one; default `SOURCE` for a database, `DESTINATION` for object storage (which
    /// is never a source).
    #[serde(
        default,
        deserialize_with = "crate::wire::enum_strings::<_, Capability>"
    )]
    #[schemars(with = "Option<Vec<Capability>>", length(min = 1))]
    pub capabilities: Option<Vec<String>>,
    /// The provider's settings (never a secret).
    #[schemars(with = "Option<settings::SettingsInput>")]
    pub settings: Option<Map<String, Value>>,
    /// The provider's secret fields, write-only.
    #[schemars(with = "Option<settings::SecretsInput>")]
    pub secrets: Option<Map<String, Value>>,
}

type Row = (
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
    String,
    String,
    Option<String>,
);

fn from_row(r: Row) -> Result<Connection> {
    let (
        id,
        name,
        provider,
        caps,
        settings,
        secret_ref,
        generation,
        created_at,
        updated_at,
        last_test,
    ) = r;
    Ok(Connection {
        provider: Provider::parse(&provider)
            .ok_or_else(|| Error::Unexpected(anyhow::anyhow!("bad provider {provider}")))?,
        capabilities: serde_json::from_str(&caps).map_err(|e| Error::Unexpected(e.into()))?,
        settings: serde_json::from_str(&settings).map_err(|e| Error::Unexpected(e.into()))?,
        last_test: last_test.and_then(|t| serde_json::from_str(&t).ok()),
        id,
        name,
        secret_ref,
        generation,
        created_at,
        updated_at,
    })
}

const SELECT: &str = "SELECT id, name, provider, capabilities, settings, secret_ref, generation, created_at, updated_at, last_test FROM connections";

pub fn validate_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " ._-".contains(c))
        && !name.starts_with(' ')
        && !name.ends_with(' ');
    if ok {
        Ok(())
    } else {
        Err("use 1–64 characters: letters, digits, spaces, '.', '_' or '-'".into())
    }
}

pub struct Validated {
    pub name: String,
    pub provider: Provider,
    pub capabilities: Vec<Capability>,
    pub settings: Settings,
}

/// A new connection's fields checked as `create` checks them (secrets included), without
/// storing anything: the declarative plan normalizes with it.
pub fn normalize(
    input: &ConnectionInput,
) -> std::result::Result<(Validated, BTreeMap<String, Secret<String>>), FieldErrors> {
    let mut errors = FieldErrors::new();
    let validated = validate(input, None, &mut errors);
    let secrets = match &validated {
        Some(v) => parse_secrets(
            v.provider,
            input.secrets.as_ref().unwrap_or(&Map::new()),
            true,
            &mut errors,
        ),
        None => BTreeMap::new(),
    };
    match validated {
        Some(v) if errors.is_empty() => Ok((v, secrets)),
        _ => Err(errors),
    }
}

fn validate(
    input: &ConnectionInput,
    provider: Option<Provider>,
    errors: &mut FieldErrors,
) -> Option<Validated> {
    let name = input.name.clone().unwrap_or_default().trim().to_string();
    if let Err(why) = validate_name(&name) {
        errors.insert("name".into(), why);
    }
    let provider = provider.or_else(|| {
        let p = input.provider.as_deref().and_then(Provider::parse);
        if p.is_none() {
            errors.insert(
                "provider".into(),
                "choose POSTGRESQL, MYSQL, MARIADB, AWS_S3 or MINIO".into(),
            );
        }
        p
    })?;
    let mut capabilities: Vec<Capability> = Vec::new();
    match &input.capabilities {
        None => capabilities.push(if provider.is_object_storage() {
            Capability::Destination
        } else {
            Capability::Source
        }),
        Some(list) => {
            for c in list {
                match Capability::parse(c) {
                    Some(c) if !capabilities.contains(&c) => capabilities.push(c),
                    Some(_) => {}
                    None => {
                        errors.insert(
                            "capabilities".into(),
                            format!("{c:?} is not a capability; use SOURCE and/or DESTINATION"),
                        );
                    }
                }
            }
            if list.is_empty() {
                errors.insert(
                    "capabilities".into(),
                    "choose SOURCE, DESTINATION or both".into(),
                );
            }
        }
    }
    capabilities.sort();
    if provider.is_object_storage() && capabilities.contains(&Capability::Source) {
        errors.insert("capabilities".into(), format!("{} is destination-only: object storage receives CDC exports and is never a capture source", provider.label()));
    }
    let empty = Map::new();
    let raw = input.settings.as_ref().unwrap_or(&empty);
    let settings = if provider.is_object_storage() {
        Settings::ObjectStorage(parse_object_storage(provider, raw, errors))
    } else {
        Settings::Database(parse_database(provider, &capabilities, &name, raw, errors))
    };
    Some(Validated {
        name,
        provider,
        capabilities,
        settings,
    })
}

async fn view(store: &SecretStore, c: Connection) -> Result<ConnectionView> {
    let secret_fields_set = store.fields_set(&c.secret_ref).await?;
    let warnings = settings::warnings(c.provider, &c.settings);
    Ok(ConnectionView {
        connection: c,
        secret_fields_set,
        warnings,
    })
}

/// The audit summary: settings are not secret; secret fields only by name.
fn summary(c: &Connection, secret_fields: &[String]) -> Value {
    json!({"name": c.name, "provider": c.provider, "capabilities": c.capabilities, "settings": c.settings, "secret_fields_set": secret_fields})
}

async fn name_taken(pool: &Pool, name: &str, except_id: &str) -> Result<bool> {
    let n: i64 = db::query_scalar("SELECT COUNT(*) FROM connections WHERE name = $1 AND id <> $2")
        .bind(name)
        .bind(except_id)
        .fetch_one(pool)
        .await?;
    Ok(n > 0)
}

/// MySQL/MariaDB server ids must be unique across the replication topology; across our own
/// connections is what we can check.
async fn server_id_taken(pool: &Pool, settings: &Settings, except_id: &str) -> Result<bool> {
    let Settings::Database(d) = settings else {
        return Ok(false);
    };
    let Some(id) = d.server_id else {
        return Ok(false);
    };
    // Read in Rust: the engines' JSON functions differ, and connections are few.
    let others: Vec<String> = db::query_scalar(
        "SELECT settings FROM connections WHERE id <> $1 AND provider IN ('MYSQL', 'MARIADB')",
    )
    .bind(except_id)
    .fetch_all(pool)
    .await?;
    Ok(others.iter().any(|s| {
        serde_json::from_str::<serde_json::Value>(s)
            .ok()
            .and_then(|v| v.get("server_id").and_then(|n| n.as_i64()))
            == Some(i64::from(id))
    }))
}

pub async fn create(ctx: &Ctx, who: &Principal, input: &ConnectionInput) -> Result<ConnectionView> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage connections")?;
    let mut errors = FieldErrors::new();
    let validated = validate(input, None, &mut errors);
    let secrets = match &validated {
        Some(v) => parse_secrets(
            v.provider,
            input.secrets.as_ref().unwrap_or(&Map::new()),
            true,
            &mut errors,
        ),
        None => BTreeMap::new(),
    };
    Error::check(errors)?;
    let Some(v) = validated else {
        return Err(Error::field("provider", "required"));
    };
    if name_taken(pool, &v.name, "").await? {
        return Err(Error::Conflict(format!(
            "a connection named {:?} already exists; choose another name",
            v.name
        )));
    }
    if server_id_taken(pool, &v.settings, "").await? {
        return Err(Error::field(
            "settings.server_id",
            "another connection uses this server id; choose a unique one",
        ));
    }
    let now = crate::time::now();
    let conn = Connection {
        id: format!("con_{}", uuid::Uuid::new_v4().simple()),
        name: v.name,
        provider: v.provider,
        capabilities: v.capabilities,
        settings: v.settings,
        secret_ref: new_ref(),
        generation: 1,
        created_at: now.clone(),
        updated_at: now,
        last_test: None,
    };
    let mut tx = pool.begin().await?;
    let fields: Vec<String> = secrets.keys().cloned().collect();
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connection.create",
            target_kind: "connection",
            target_id: &conn.id,
            outcome: Outcome::Success,
            summary: summary(&conn, &fields),
        },
    )
    .await?;
    db::query("INSERT INTO connections (id, name, provider, capabilities, settings, secret_ref, generation, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8)")
        .bind(&conn.id)
        .bind(&conn.name)
        .bind(conn.provider.as_str())
        .bind(json!(conn.capabilities).to_string())
        .bind(json!(conn.settings).to_string())
        .bind(&conn.secret_ref)
        .bind(&conn.created_at)
        .bind(&conn.updated_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| if crate::db::is_unique_violation(&e) { Error::Conflict(format!("a connection named {:?} already exists", conn.name)) } else { e.into() })?;
    store.put(&mut tx, &conn.secret_ref, &secrets).await?;
    tx.commit().await?;
    view(store, conn).await
}

pub async fn list(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
) -> Result<Vec<ConnectionView>> {
    who.require(Role::Viewer, "see connections")?;
    let rows: Vec<Row> = db::query_as(&format!("{SELECT} ORDER BY name"))
        .fetch_all(pool)
        .await?;
    let mut out = Vec::new();
    for r in rows {
        out.push(view(store, from_row(r)?).await?);
    }
    Ok(out)
}

/// What the connections list filters by: the last connection test.
pub const STATES: &[&str] = &["FAILED", "PASSED", "UNTESTED"];

/// One page of connections: `q` matches the name, `state` the last test (failed, passed,
/// untested).
pub async fn page(ctx: &Ctx, who: &Principal, w: &Window) -> Result<Page<ConnectionView>> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Viewer, "see connections")?;
    let ids = listing::page_ids(
        pool,
        &ListSql {
            with: "",
            from: "connections",
            id: "id",
            name: "name",
            order: "name",
            state: "CASE WHEN last_test_ok IS NULL THEN 'UNTESTED' WHEN last_test_ok <> 0 THEN 'PASSED' ELSE 'FAILED' END",
            cluster: None,
        },
        w,
    )
    .await?;
    let mut rows = Vec::new();
    for r in listing::rows_by_id::<Row, String>(pool, SELECT, "id", &ids.items).await? {
        rows.push(view(store, from_row(r)?).await?);
    }
    let items = listing::in_order(&ids.items, rows, |v: &ConnectionView| {
        v.connection.id.clone()
    });
    Ok(ids.with_items(items))
}

pub async fn load(pool: &Pool, id: &str) -> Result<Connection> {
    let row: Option<Row> = db::query_as(&format!("{SELECT} WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    from_row(row.ok_or_else(|| Error::NotFound(format!("connection {id}")))?)
}

pub async fn get(ctx: &Ctx, who: &Principal, id: &str) -> Result<ConnectionView> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Viewer, "see connections")?;
    view(store, load(pool, id).await?).await
}

/// Changes name, capabilities and settings (merged key by key; `null` removes a key), and
/// optionally replaces some secret fields. The provider cannot change and `secret_ref` never does.
pub async fn update(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    patch: &ConnectionInput,
) -> Result<ConnectionView> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage connections")?;
    let current = load(pool, id).await?;
    let mut errors = FieldErrors::new();
    if patch
        .provider
        .as_deref()
        .is_some_and(|p| Provider::parse(p) != Some(current.provider))
    {
        errors.insert(
            "provider".into(),
            "the provider of a connection cannot change; create a new connection".into(),
        );
    }
    let mut merged = match serde_json::to_value(&current.settings) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for (k, v) in patch.settings.clone().unwrap_or_default() {
        if v.is_null() {
            merged.remove(&k);
        } else {
            merged.insert(k, v);
        }
    }
    let input = ConnectionInput {
        name: Some(patch.name.clone().unwrap_or_else(|| current.name.clone())),
        provider: None,
        capabilities: Some(patch.capabilities.clone().unwrap_or_else(|| {
            current
                .capabilities
                .iter()
                .map(|c| json!(c).as_str().unwrap_or_default().to_string())
                .collect()
        })),
        settings: Some(merged),
        secrets: None,
    };
    let validated = validate(&input, Some(current.provider), &mut errors);
    let secrets = parse_secrets(
        current.provider,
        patch.secrets.as_ref().unwrap_or(&Map::new()),
        false,
        &mut errors,
    );
    let stored = store.fields_set(&current.secret_ref).await?;
    let rebound = match &validated {
        Some(v) => rebound(
            current.provider,
            &json!(current.settings),
            &json!(v.settings),
            &stored,
        ),
        None => Vec::new(),
    };
    errors.extend(binding::refusals(
        &rebound,
        |f| secrets.contains_key(f),
        "secrets.",
    ));
    Error::check(errors)?;
    let Some(v) = validated else {
        return Err(Error::Unexpected(anyhow::anyhow!(
            "validation lost the provider"
        )));
    };
    if name_taken(pool, &v.name, id).await? {
        return Err(Error::Conflict(format!(
            "a connection named {:?} already exists; choose another name",
            v.name
        )));
    }
    if server_id_taken(pool, &v.settings, id).await? {
        return Err(Error::field(
            "settings.server_id",
            "another connection uses this server id; choose a unique one",
        ));
    }
    let updated = Connection {
        name: v.name,
        capabilities: v.capabilities,
        settings: v.settings,
        generation: current.generation + 1,
        updated_at: crate::time::now(),
        ..current
    };
    let mut tx = pool.begin().await?;
    let replaced: Vec<String> = secrets.keys().cloned().collect();
    let mut sum = summary(&updated, &replaced);
    sum["secret_fields_replaced"] = json!(replaced);
    if !rebound.is_empty() {
        sum["rebound"] = json!(rebound);
    }
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connection.update",
            target_kind: "connection",
            target_id: &updated.id,
            outcome: Outcome::Success,
            summary: sum,
        },
    )
    .await?;
    db::query("UPDATE connections SET name = $1, capabilities = $2, settings = $3, generation = $4, updated_at = $5 WHERE id = $6")
        .bind(&updated.name)
        .bind(json!(updated.capabilities).to_string())
        .bind(json!(updated.settings).to_string())
        .bind(updated.generation)
        .bind(&updated.updated_at)
        .bind(&updated.id)
        .execute(&mut *tx)
        .await?;
    store.put(&mut tx, &updated.secret_ref, &secrets).await?;
    tx.commit().await?;
    view(store, updated).await
}

/// Replaces the credentials: every required secret field must be given; optional ones not
/// given are removed. `secret_ref` stays, so deployed connector configs keep resolving after
/// their tasks restart.
pub async fn rotate(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    secrets: &Map<String, Value>,
) -> Result<ConnectionView> {
    who.require(Role::Admin, "rotate credentials")?;
    let current = load(pool, id).await?;
    let mut errors = FieldErrors::new();
    let values = parse_secrets(current.provider, secrets, true, &mut errors);
    Error::check(errors)?;
    let mut tx = pool.begin().await?;
    let fields: Vec<String> = values.keys().cloned().collect();
    audit::record(
        &mut tx,
        Entry { actor: who.into(), action: "connection.rotate", target_kind: "connection", target_id: id, outcome: Outcome::Success, summary: json!({"name": current.name, "secret_ref": current.secret_ref, "secret_fields_set": fields}) },
    )
    .await?;
    for (field, _) in settings::secret_fields(current.provider) {
        if !values.contains_key(*field) {
            store.remove(&mut tx, &current.secret_ref, field).await?;
        }
    }
    store.put(&mut tx, &current.secret_ref, &values).await?;
    db::query("UPDATE connections SET generation = generation + 1, updated_at = $1 WHERE id = $2")
        .bind(crate::time::now())
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    view(store, load(pool, id).await?).await
}

/// The stored secrets (`stored` names the fields set) that a change of a connection's settings
/// (as JSON objects) from `current` to `new` sends somewhere else: each must be given again in the same change.
pub fn rebound(
    provider: Provider,
    current: &Value,
    new: &Value,
    stored: &[String],
) -> Vec<Rebound> {
    let empty = Map::new();
    let (a, b) = (
        current.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let changed: Vec<&str> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(String::as_str)
        .collect();
    binding::rebound(settings::bindings(provider), &changed, stored)
}

/// What uses a connection; deleting it is refused while this is not empty.
pub async fn used_by(pool: &Pool, id: &str) -> Result<Vec<String>> {
    let mut users: Vec<String> = db::query_scalar(
        "SELECT 'pipeline ' || name FROM pipelines WHERE source_connection_id = $1 ORDER BY name",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    users.extend(db::query_scalar::<String>("SELECT 'delivery ' || name FROM deliveries WHERE destination_connection_id = $1 ORDER BY name").bind(id).fetch_all(pool).await?);
    Ok(users)
}

pub async fn delete(ctx: &Ctx, who: &Principal, id: &str) -> Result<()> {
    let pool = &ctx.pool;
    who.require(Role::Admin, "manage connections")?;
    let current = load(pool, id).await?;
    let users = used_by(pool, id).await?;
    if !users.is_empty() {
        return Err(Error::Conflict(format!(
            "connection {} is used by {}; delete or change those first",
            current.name,
            users.join(", ")
        )));
    }
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connection.delete",
            target_kind: "connection",
            target_id: id,
            outcome: Outcome::Success,
            summary: json!({"name": current.name, "provider": current.provider}),
        },
    )
    .await?;
    db::query("DELETE FROM secret_values WHERE secret_ref = $1")
        .bind(&current.secret_ref)
        .execute(&mut *tx)
        .await?;
    db::query("DELETE FROM connections WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// How long a whole connection test may take before it is reported as timed out.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(45);

/// Runs the provider's checks off the request's task, under a deadline; stores and audits
/// the (sanitized) report.
pub async fn test(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
) -> Result<TestReport> {
    who.require(Role::Operator, "test connections")?;
    let conn = load(pool, id).await?;
    let secrets = store.get_all(&conn.secret_ref).await?;
    let started = Instant::now();
    let provider = conn.provider;
    let task_conn = conn.clone();
    let job = tokio::spawn(async move { adapter(provider).test(&task_conn, &secrets).await });
    let checks = match tokio::time::timeout(TEST_TIMEOUT, job).await {
        Ok(Ok(checks)) => checks,
        Ok(Err(join)) => vec![Check::fail("test", format!("the test stopped unexpectedly: {join}"), "see the server log")],
        Err(_) => vec![Check::fail("test", format!("no answer within {} s", TEST_TIMEOUT.as_secs()), "check that the endpoint is reachable from the ClueCDC host and not blocked by a firewall")],
    };
    let report = TestReport {
        ok: checks.iter().all(|c| c.status != CheckStatus::Fail),
        checks,
        tested_at: crate::time::now(),
        duration_ms: started.elapsed().as_millis() as u64,
    };
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connection.test",
            target_kind: "connection",
            target_id: id,
            outcome: if report.ok { Outcome::Success } else { Outcome::Failure },
            summary: json!({"name": conn.name, "checks": report.checks.iter().map(|c| json!({"name": c.name, "status": c.status})).collect::<Vec<_>>()}),
        },
    )
    .await?;
    db::query(
        "UPDATE connections SET last_test_at = $1, last_test_ok = $2, last_test = $3 WHERE id = $4",
    )
    .bind(&report.tested_at)
    .bind(i64::from(report.ok))
    .bind(json!(report).to_string())
    .bind(id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(report)
}

pub const DISCOVERY_LIMIT: usize = 2000;

pub async fn discover(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
) -> Result<Discovery> {
    who.require(Role::Operator, "discover tables")?;
    let conn = load(pool, id).await?;
    if !conn.is_source() {
        return Err(Error::Conflict(format!(
            "connection {} is not a SOURCE; table discovery is for capture sources",
            conn.name
        )));
    }
    let secrets = store.get_all(&conn.secret_ref).await?;
    let mut items = match tokio::time::timeout(
        Duration::from_secs(30),
        adapter(conn.provider).discover(&conn, &secrets, DISCOVERY_LIMIT + 1),
    )
    .await
    {
        Ok(r) => r?,
        Err(_) => {
            return Err(Error::Unavailable(
                "table discovery took longer than 30 s; try again or check the database's load"
                    .into(),
            ))
        }
    };
    let truncated = items.len() > DISCOVERY_LIMIT;
    items.truncate(DISCOVERY_LIMIT);
    Ok(Discovery {
        items,
        limit: DISCOVERY_LIMIT,
        truncated,
    })
}

/// What a TLS failure means, in the words of the settings that fix it, read from a client's
/// error text (rustls, OpenSSL through librdkafka, the JDK in connector traces).
pub fn tls_problem(message: &str) -> Option<&'static str> {
    let m = message.to_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| m.contains(n));
    if any(&[
        "unknownissuer",
        "certificate verify failed",
        "unable to get local issuer",
        "self-signed certificate",
        "self signed certificate",
        "pkix path building failed",
        "unable to find valid certification path",
        "badsignature",
    ]) {
        Some("the server's certificate is not signed by the CA in the connection's CA certificate (without one, by a CA this machine trusts): paste the PEM of the CA that signed it")
    } else if any(&[
        "notvalidforname",
        "hostname mismatch",
        "no subject alternative",
        "could not be verified by hostnameverifier",
    ]) {
        Some("the server's certificate does not name this host: connect by a name the certificate lists, or use tls_mode verify-ca")
    } else if any(&["expired", "notvalidyet", "certificate has expired"])
        && any(&["certificate", "cert"])
    {
        Some("the server's certificate has expired or is not valid yet: renew it on the server")
    } else {
        None
    }
}

/// Makes a provider's error text safe to show and store: secret values and URL credentials
/// replaced, length bounded.
pub fn sanitize(message: &str, secrets: &BTreeMap<String, Secret<String>>) -> String {
    let mut out = message.to_string();
    for value in secrets.values() {
        let v = value.expose();
        if v.len() >= 3 {
            out = out.replace(v.as_str(), "***");
        }
    }
    // scheme://user:password@host → scheme://***@host
    let mut cleaned = String::new();
    let mut rest = out.as_str();
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        cleaned.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '/' || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        if let Some(at) = authority.rfind('@') {
            cleaned.push_str("***");
            cleaned.push_str(&authority[at..]);
        } else {
            cleaned.push_str(authority);
        }
        rest = &tail[end..];
    }
    cleaned.push_str(rest);
    let mut s: String = cleaned.chars().take(600).collect();
    if cleaned.chars().count() > 600 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_hides_secret_values_and_url_credentials() {
        let mut secrets = BTreeMap::new();
        secrets.insert("password".to_string(), Secret::new("p4ssw0rd!".to_string()));
        let s = sanitize("auth failed for p4ssw0rd! at postgres://cdc:p4ssw0rd!@db:5432/x and http://ak:sk@minio:9000/b", &secrets);
        assert!(!s.contains("p4ssw0rd"), "{s}");
        assert!(!s.contains("ak:sk"), "{s}");
        assert!(s.contains("postgres://***@db:5432/x"), "{s}");
    }

    #[test]
    fn object_storage_is_destination_only() {
        let mut e = FieldErrors::new();
        let input = ConnectionInput {
            name: Some("s3".into()),
            provider: Some("MINIO".into()),
            capabilities: Some(vec!["SOURCE".into()]),
            ..Default::default()
        };
        validate(&input, None, &mut e);
        assert!(e["capabilities"].contains("destination-only"), "{e:?}");
    }

    #[test]
    fn capabilities_default_by_kind_and_refuse_unknown_words() {
        let mut e = FieldErrors::new();
        let v = validate(
            &ConnectionInput {
                name: Some("pg".into()),
                provider: Some("POSTGRESQL".into()),
                settings: Some(
                    serde_json::from_str(r#"{"host":"h","database":"d","user":"u"}"#).unwrap(),
                ),
                ..Default::default()
            },
            None,
            &mut e,
        )
        .unwrap();
        assert_eq!(v.capabilities, vec![Capability::Source]);
        let mut e = FieldErrors::new();
        validate(
            &ConnectionInput {
                name: Some("pg".into()),
                provider: Some("POSTGRESQL".into()),
                capabilities: Some(vec!["SINK".into()]),
                ..Default::default()
            },
            None,
            &mut e,
        );
        assert!(e["capabilities"].contains("SOURCE and/or DESTINATION"));
    }
}
