//! Kafka Connect clusters: REST URL, optional basic auth, the Kafka cluster they use, who
//! manages their connectors, observed health, and the per-cluster token their `cluecdc`
//! config provider presents when it resolves `${cluecdc:<secret_ref>:<field>}` references.

use crate::db;
use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::audit::{self, Entry, Outcome};
use crate::auth::{random_token, token_hash, Principal, Role};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::secrets::binding::{self, Binding};

/// A registered Kafka Connect cluster (its basic auth password is never returned).
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct ConnectCluster {
    pub id: String,
    pub name: String,
    /// The Connect REST URL.
    pub url: String,
    /// The Kafka cluster its workers use (null: not said).
    pub kafka_cluster_id: Option<String>,
    #[schemars(with = "ManagedBy")]
    pub managed_by: String,
    /// When the current provider token was issued (the token itself is never stored).
    pub provider_token_at: Option<String>,
    pub basic_auth_user: Option<String>,
    /// Holds `basic_auth_password` when basic auth is set.
    pub secret_ref: Option<String>,
    /// A private CA (PEM) for an https URL: ClueCDC then trusts only it for this cluster;
    /// without one, the built-in roots.
    pub tls_ca_certificate: Option<String>,
    /// Version, workers and plugins as last observed: a JSON document in a string.
    pub health: Option<String>,
    pub health_at: Option<String>,
    /// The reconciler's last successful list call.
    pub observed_at: Option<String>,
    pub last_error: Option<String>,
    #[serde(skip)]
    pub next_attempt_at: Option<i64>,
    pub created_at: String,
    pub updated_at: String,
    /// When the reconciler's last completed pass over this cluster ended (written at least
    /// every 10 s while it answers, and after every slow pass).
    pub last_pass_at: Option<String>,
    /// How long that pass took, in milliseconds.
    pub last_pass_ms: Option<i64>,
    /// Seconds since `last_pass_at`.
    #[sqlx(skip)]
    #[serde(default)]
    pub last_pass_age_secs: Option<i64>,
    /// Its last pass took a second or longer (Connect answers slowly): its passes run on their
    /// own, and the other clusters' do not wait for them.
    #[sqlx(skip)]
    #[serde(default)]
    pub slow: bool,
}

impl ConnectCluster {
    /// With the fields computed from the stored ones at read time.
    fn observed(mut self) -> Self {
        self.slow = self
            .last_pass_ms
            .is_some_and(|ms| ms >= crate::reconcile::SLOW_PASS.as_millis() as i64);
        self.last_pass_age_secs = self
            .last_pass_at
            .as_deref()
            .and_then(crate::time::parse)
            .map(|t| (chrono::Utc::now() - t).num_seconds().max(0));
        self
    }

    /// For pages: "slow: its last pass took 2.1 s, 3 s ago", when it is slow.
    pub fn slow_note(&self) -> Option<String> {
        let ms = self.last_pass_ms.filter(|_| self.slow)?;
        let age = self
            .last_pass_age_secs
            .map_or(String::new(), |a| format!(", {a} s ago"));
        Some(format!(
            "slow: its last reconcile pass took {:.1} s{age}; the other clusters' passes do not wait for it",
            ms as f64 / 1000.0
        ))
    }
}

/// Who deploys the connectors of a Connect cluster: `cluecdc` (ClueCDC does) or `strimzi`
/// (Strimzi `KafkaConnector` resources do; ClueCDC only observes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ManagedBy {
    Cluecdc,
    Strimzi,
}

/// A Connect cluster to register (`name` and `url` required), or a change to one (`PATCH`:
/// absent fields keep their value).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct ConnectClusterInput {
    /// 1–64 characters: letters, digits, spaces, `.`, `_` or `-`; unique.
    pub name: Option<String>,
    /// The Connect REST URL, `http://` or `https://`, without credentials, query or fragment.
    pub url: Option<String>,
    /// A registered Kafka cluster's id.
    pub kafka_cluster_id: Option<String>,
    /// Default `cluecdc`.
    #[serde(default, deserialize_with = "crate::wire::enum_string::<_, ManagedBy>")]
    #[schemars(with = "Option<ManagedBy>")]
    pub managed_by: Option<String>,
    /// Basic auth user (with `basic_auth_password`); on `PATCH` an empty value turns basic
    /// auth off.
    pub basic_auth_user: Option<String>,
    /// Write-only: stored encrypted, never returned.
    #[schemars(with = "Option<String>", extend("writeOnly" = true))]
    pub basic_auth_password: Option<crate::secrets::Secret<String>>,
    /// PEM; on PATCH an empty value removes it.
    pub tls_ca_certificate: Option<String>,
    /// Write-only: the config provider token to accept instead of issuing one (so a Connect
    /// worker's configuration can outlive a rebuilt ClueCDC). At least 32 characters.
    #[schemars(with = "Option<String>", extend("writeOnly" = true))]
    pub provider_token: Option<crate::secrets::Secret<String>>,
}

/// The created cluster and its config provider token, shown this once.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ConnectClusterWithToken")]
pub struct WithToken {
    #[serde(flatten)]
    pub cluster: ConnectCluster,
    /// The token the cluster's `cluecdc` config provider presents; shown this once, stored only
    /// as a hash.
    pub provider_token: String,
}

/// The Connect cluster a config-provider request came from.
#[derive(Debug, Clone)]
pub struct ProviderIdentity {
    pub cluster_id: String,
    pub cluster_name: String,
}

const PROVIDER_TOKEN_PREFIX: &str = "cdcp_";

pub fn validate_url(u: &str) -> std::result::Result<String, String> {
    let url = url::Url::parse(u.trim())
        .map_err(|_| "write the Connect REST URL, e.g. http://connect:8083".to_string())?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err("the URL must start with http:// or https://".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "remove the user and password from the URL; basic auth is a separate setting".into(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("remove the query and fragment from the URL".into());
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// Name, URL and `managed_by`, checked and normalized; nothing stored.
pub fn validate(input: &ConnectClusterInput) -> Result<(String, String, String)> {
    let mut errors = FieldErrors::new();
    let name = input.name.clone().unwrap_or_default().trim().to_string();
    if let Err(why) = crate::connections::validate_name(&name) {
        errors.insert("name".into(), why);
    }
    let url = match validate_url(input.url.as_deref().unwrap_or("")) {
        Ok(u) => u,
        Err(why) => {
            errors.insert("url".into(), why);
            String::new()
        }
    };
    if let Some(pem) = input
        .tls_ca_certificate
        .as_deref()
        .filter(|p| !p.trim().is_empty())
    {
        if let Err(why) = crate::connect::check_ca_certificate(pem) {
            errors.insert("tls_ca_certificate".into(), why);
        } else if !url.is_empty() && !url.starts_with("https://") {
            errors.insert(
                "tls_ca_certificate".into(),
                "a CA certificate is for an https:// URL; use https or remove the CA certificate"
                    .into(),
            );
        }
    }
    let managed_by = input.managed_by.clone().unwrap_or_else(|| "cluecdc".into());
    if managed_by != "cluecdc" && managed_by != "strimzi" {
        errors.insert(
            "managed_by".into(),
            "choose cluecdc (ClueCDC deploys connectors) or strimzi (ClueCDC only observes)".into(),
        );
    }
    Error::check(errors)?;
    Ok((name, url, managed_by))
}

/// A Connect cluster may name the Kafka cluster it works with; it must be a registered one.
async fn check_kafka_cluster(pool: &Pool, id: Option<&str>) -> Result<()> {
    let Some(id) = id else { return Ok(()) };
    let n: i64 = db::query_scalar("SELECT COUNT(*) FROM kafka_clusters WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await?;
    if n == 0 {
        return Err(Error::field(
            "kafka_cluster_id",
            "no Kafka cluster has this id; register the Kafka cluster first",
        ));
    }
    Ok(())
}

const SELECT: &str = "SELECT id, name, url, kafka_cluster_id, managed_by, provider_token_at, basic_auth_user, secret_ref, tls_ca_certificate, health, health_at, observed_at, last_error, next_attempt_at, created_at, updated_at, last_pass_at, last_pass_ms FROM connect_clusters";

pub async fn list(ctx: &Ctx, who: &Principal) -> Result<Vec<ConnectCluster>> {
    let pool = &ctx.pool;
    who.require(Role::Viewer, "see Connect clusters")?;
    let all: Vec<ConnectCluster> = db::query_as(&format!("{SELECT} ORDER BY name"))
        .fetch_all(pool)
        .await?;
    Ok(all.into_iter().map(ConnectCluster::observed).collect())
}

/// (id, name) of every cluster, for the cluster filter of list pages.
pub async fn choices(pool: &Pool) -> Result<Vec<(String, String)>> {
    Ok(
        db::query_as("SELECT id, name FROM connect_clusters ORDER BY name")
            .fetch_all(pool)
            .await?,
    )
}

/// Every cluster, for background tasks that act as the system.
pub async fn all(pool: &Pool) -> Result<Vec<ConnectCluster>> {
    let all: Vec<ConnectCluster> = db::query_as(&format!("{SELECT} ORDER BY name"))
        .fetch_all(pool)
        .await?;
    Ok(all.into_iter().map(ConnectCluster::observed).collect())
}

pub async fn get(pool: &Pool, who: &Principal, id: &str) -> Result<ConnectCluster> {
    who.require(Role::Viewer, "see Connect clusters")?;
    db::query_as::<ConnectCluster>(&format!("{SELECT} WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?
        .map(ConnectCluster::observed)
        .ok_or_else(|| Error::NotFound(format!("Connect cluster {id}")))
}

/// [`get`] as the API's operation (`GET /api/v1/connect-clusters/{id}`).
pub async fn detail(ctx: &Ctx, who: &Principal, id: &str) -> Result<ConnectCluster> {
    get(&ctx.pool, who, id).await
}

pub async fn create(ctx: &Ctx, who: &Principal, input: &ConnectClusterInput) -> Result<WithToken> {
    let pool = &ctx.pool;
    let store: &crate::secrets::store::SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage clusters")?;
    let (name, url, managed_by) = validate(input)?;
    check_kafka_cluster(pool, input.kafka_cluster_id.as_deref()).await?;
    let user = input
        .basic_auth_user
        .clone()
        .filter(|u| !u.trim().is_empty());
    if user.is_some() != input.basic_auth_password.is_some() {
        return Err(Error::field(
            "basic_auth_password",
            "basic auth needs both basic_auth_user and basic_auth_password",
        ));
    }
    let secret_ref = user.as_ref().map(|_| crate::secrets::store::new_ref());
    let ca = input
        .tls_ca_certificate
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty());
    let id = format!("cc_{}", uuid::Uuid::new_v4().simple());
    let token = match &input.provider_token {
        Some(t) => checked_token(t)?,
        None => format!("{PROVIDER_TOKEN_PREFIX}{}", random_token()),
    };
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connect_cluster.create",
            target_kind: "connect_cluster",
            target_id: &id,
            outcome: Outcome::Success,
            summary: json!({"name": name, "url": url, "managed_by": managed_by, "tls_ca_certificate": ca.is_some()}),
        },
    )
    .await?;
    db::query("INSERT INTO connect_clusters (id, name, url, kafka_cluster_id, managed_by, basic_auth_user, secret_ref, tls_ca_certificate, provider_token_hash, provider_token_at, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
        .bind(&id)
        .bind(&name)
        .bind(&url)
        .bind(&input.kafka_cluster_id)
        .bind(&managed_by)
        .bind(&user)
        .bind(&secret_ref)
        .bind(ca)
        .bind(token_hash(&token))
        .bind(&now)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .map_err(|e| if crate::db::is_unique_violation(&e) { Error::Conflict(format!("a Connect cluster named {name:?} already exists")) } else { e.into() })?;
    if let (Some(r), Some(pw)) = (&secret_ref, &input.basic_auth_password) {
        store
            .put(
                &mut tx,
                r,
                &[("basic_auth_password".to_string(), pw.clone())].into(),
            )
            .await?;
    }
    // A pass soon (in any process) lists the new cluster's connectors.
    crate::reconcile::bump_desired_version(&mut *tx).await?;
    tx.commit().await?;
    let cluster = get(pool, who, &id).await?;
    Ok(WithToken {
        cluster,
        provider_token: token,
    })
}

/// The basic auth password goes to the Connect REST API at the URL, for the user: changing
/// either needs it again (`crate::secrets::binding`).
pub const BINDINGS: &[Binding] = &[Binding {
    secret: "basic_auth_password",
    settings: &["url", "basic_auth_user"],
}];

/// Changes some settings; absent fields keep their value. An empty `basic_auth_user` turns
/// basic auth off (and forgets the password); a new `basic_auth_password` replaces the stored
/// one. The provider token stays (rotate it separately).
pub async fn update(
    ctx: &Ctx,
    who: &Principal,
    id: &str,
    patch: &ConnectClusterInput,
) -> Result<ConnectCluster> {
    let pool = &ctx.pool;
    let store: &crate::secrets::store::SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage clusters")?;
    let cur = get(pool, who, id).await?;
    let merged = ConnectClusterInput {
        name: Some(patch.name.clone().unwrap_or_else(|| cur.name.clone())),
        url: Some(patch.url.clone().unwrap_or_else(|| cur.url.clone())),
        kafka_cluster_id: patch
            .kafka_cluster_id
            .clone()
            .or_else(|| cur.kafka_cluster_id.clone()),
        managed_by: Some(
            patch
                .managed_by
                .clone()
                .unwrap_or_else(|| cur.managed_by.clone()),
        ),
        basic_auth_user: patch
            .basic_auth_user
            .clone()
            .or_else(|| cur.basic_auth_user.clone()),
        provider_token: None,
        basic_auth_password: None,
        tls_ca_certificate: patch
            .tls_ca_certificate
            .clone()
            .or_else(|| cur.tls_ca_certificate.clone()),
    };
    let (name, url, managed_by) = validate(&merged)?;
    check_kafka_cluster(pool, patch.kafka_cluster_id.as_deref()).await?;
    if managed_by == "strimzi" && cur.managed_by != "strimzi" {
        let managed: i64 = db::query_scalar("SELECT COUNT(*) FROM connectors WHERE connect_cluster_id = $1 AND desired_state != 'deleted'").bind(id).fetch_one(pool).await?;
        if managed > 0 {
            return Err(Error::field("managed_by", format!("ClueCDC manages {managed} connector{} on this cluster; delete {} (or {} pipelines and deliveries) before handing it to Strimzi", if managed == 1 { "" } else { "s" }, if managed == 1 { "it" } else { "them" }, if managed == 1 { "its" } else { "their" })));
        }
    }
    let user = merged
        .basic_auth_user
        .clone()
        .filter(|u| !u.trim().is_empty());
    let has_password = match &cur.secret_ref {
        Some(r) => store.get(r, "basic_auth_password").await?.is_some(),
        None => false,
    };
    if user.is_some() && patch.basic_auth_password.is_none() && !has_password {
        return Err(Error::field(
            "basic_auth_password",
            "basic auth needs both basic_auth_user and basic_auth_password",
        ));
    }
    if user.is_none() && patch.basic_auth_password.is_some() {
        return Err(Error::field(
            "basic_auth_user",
            "basic auth needs both basic_auth_user and basic_auth_password",
        ));
    }
    let rebound = binding::rebound(
        BINDINGS,
        &[
            ("url", url != cur.url),
            ("basic_auth_user", user != cur.basic_auth_user),
        ]
        .into_iter()
        .filter_map(|(f, changed)| changed.then_some(f))
        .collect::<Vec<_>>(),
        &if user.is_some() && has_password {
            vec!["basic_auth_password".to_string()]
        } else {
            vec![]
        },
    );
    Error::check(binding::refusals(
        &rebound,
        |_| patch.basic_auth_password.is_some(),
        "",
    ))?;
    let secret_ref = match (&user, &cur.secret_ref) {
        (Some(_), Some(r)) => Some(r.clone()),
        (Some(_), None) => Some(crate::secrets::store::new_ref()),
        (None, _) => None,
    };
    let ca = merged
        .tls_ca_certificate
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty());
    let mut tx = pool.begin().await?;
    audit::record(&mut tx, Entry { actor: who.into(), action: "connect_cluster.update", target_kind: "connect_cluster", target_id: id, outcome: Outcome::Success, summary: json!({"name": name, "url": url, "managed_by": managed_by, "basic_auth": user.is_some(), "tls_ca_certificate": ca.is_some(), "rebound": rebound}) }).await?;
    db::query("UPDATE connect_clusters SET name = $1, url = $2, kafka_cluster_id = $3, managed_by = $4, basic_auth_user = $5, secret_ref = $6, tls_ca_certificate = $7, failures = 0, last_error = NULL, next_attempt_at = NULL, updated_at = $8 WHERE id = $9")
        .bind(&name)
        .bind(&url)
        .bind(&merged.kafka_cluster_id)
        .bind(&managed_by)
        .bind(&user)
        .bind(&secret_ref)
        .bind(ca)
        .bind(crate::time::now())
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(|e| if crate::db::is_unique_violation(&e) { Error::Conflict(format!("a Connect cluster named {name:?} already exists")) } else { e.into() })?;
    match (&secret_ref, &patch.basic_auth_password, &cur.secret_ref) {
        (Some(r), Some(pw), _) => {
            store
                .put(
                    &mut tx,
                    r,
                    &[("basic_auth_password".to_string(), pw.clone())].into(),
                )
                .await?
        }
        (None, _, Some(old)) => store.remove(&mut tx, old, "basic_auth_password").await?,
        _ => {}
    }
    // A changed URL or login is tried at once, not at the next interval.
    crate::reconcile::bump_desired_version(&mut *tx).await?;
    tx.commit().await?;
    get(pool, who, id).await
}

fn checked_token(t: &crate::secrets::Secret<String>) -> Result<String> {
    let t = t.expose().trim();
    if t.len() < 32 || t.len() > 256 || !t.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Error::field(
            "provider_token",
            "32 to 256 printable characters without spaces (or leave it out to have one issued)",
        ));
    }
    Ok(t.to_string())
}

/// Issues a new provider token, or takes the one given (the declarative apply, whose document
/// names the token the workers hold); the old one stops working at once.
pub async fn rotate_provider_token(
    pool: &Pool,
    who: &Principal,
    id: &str,
    given: Option<&crate::secrets::Secret<String>>,
) -> Result<WithToken> {
    who.require(Role::Admin, "manage clusters")?;
    let cluster = get(pool, who, id).await?;
    let token = match given {
        Some(t) => checked_token(t)?,
        None => format!("{PROVIDER_TOKEN_PREFIX}{}", random_token()),
    };
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connect_cluster.provider_token",
            target_kind: "connect_cluster",
            target_id: id,
            outcome: Outcome::Success,
            summary: json!({"name": cluster.name, "given": given.is_some()}),
        },
    )
    .await?;
    db::query("UPDATE connect_clusters SET provider_token_hash = $1, provider_token_at = $2, updated_at = $3 WHERE id = $4")
        .bind(token_hash(&token))
        .bind(crate::time::now())
        .bind(crate::time::now())
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(WithToken {
        cluster: get(pool, who, id).await?,
        provider_token: token,
    })
}

/// The pipelines, deliveries and replications that run on a Connect cluster; deleting it is
/// refused while this is not empty (their rows reference it even when no connector is left).
pub async fn used_by(pool: &Pool, id: &str) -> Result<Vec<String>> {
    let users: Vec<String> = db::query_scalar(
        "SELECT 'pipeline ' || name FROM pipelines WHERE connect_cluster_id = $1 \
         UNION ALL SELECT 'delivery ' || name FROM deliveries WHERE connect_cluster_id = $1 \
         UNION ALL SELECT 'replication ' || name FROM replications WHERE connect_cluster_id = $1",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok(users)
}

pub async fn delete(ctx: &Ctx, who: &Principal, id: &str) -> Result<()> {
    let pool = &ctx.pool;
    who.require(Role::Admin, "manage clusters")?;
    let cluster = get(pool, who, id).await?;
    let used: Vec<String> =
        db::query_scalar("SELECT name FROM connectors WHERE connect_cluster_id = $1 ORDER BY name")
            .bind(id)
            .fetch_all(pool)
            .await?;
    if !used.is_empty() {
        let (what, them) = if used.len() == 1 {
            ("connector", "it (or its pipeline or delivery)")
        } else {
            ("connectors", "them (or their pipelines and deliveries)")
        };
        return Err(Error::Conflict(format!(
            "Connect cluster {} is used by ClueCDC's {what} {}; delete {them} first",
            cluster.name,
            used.join(", ")
        )));
    }
    let users = used_by(pool, id).await?;
    if !users.is_empty() {
        return Err(Error::Conflict(format!(
            "Connect cluster {} is used by {}; delete or move those first",
            cluster.name,
            users.join(", ")
        )));
    }
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "connect_cluster.delete",
            target_kind: "connect_cluster",
            target_id: id,
            outcome: Outcome::Success,
            summary: json!({"name": cluster.name}),
        },
    )
    .await?;
    db::query("DELETE FROM connect_clusters WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Resolves a provider token to its cluster; only the hash is compared.
pub async fn resolve_provider_token(pool: &Pool, token: &str) -> Result<Option<ProviderIdentity>> {
    if !token.starts_with(PROVIDER_TOKEN_PREFIX) {
        return Ok(None);
    }
    let row: Option<(String, String)> =
        db::query_as("SELECT id, name FROM connect_clusters WHERE provider_token_hash = $1")
            .bind(token_hash(token))
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(cluster_id, cluster_name)| ProviderIdentity {
        cluster_id,
        cluster_name,
    }))
}

/// What a Connect cluster looks like right now (also stored with its time).
#[derive(Debug, Clone, Serialize)]
pub struct ConnectHealth {
    pub reachable: bool,
    pub version: Option<String>,
    pub kafka_cluster_id: Option<String>,
    /// Distinct workers running this cluster's connectors and tasks.
    pub workers: Vec<String>,
    pub plugins: Vec<crate::connect::PluginInfo>,
    pub error: Option<String>,
}

pub async fn client_for(
    store: &crate::secrets::store::SecretStore,
    c: &ConnectCluster,
) -> Result<crate::connect::ConnectClient> {
    let auth = match (&c.basic_auth_user, &c.secret_ref) {
        (Some(user), Some(r)) => store
            .get(r, "basic_auth_password")
            .await?
            .map(|p| (user.clone(), p.expose().clone())),
        _ => None,
    };
    Ok(crate::connect::ConnectClient::new(&c.url, auth).trusting(c.tls_ca_certificate.as_deref()))
}

pub async fn check_health(
    pool: &Pool,
    store: &crate::secrets::store::SecretStore,
    who: &Principal,
    id: &str,
) -> Result<ConnectHealth> {
    let c = get(pool, who, id).await?;
    let client = client_for(store, &c).await?;
    let health = match client.server_info().await {
        Err(e) => ConnectHealth {
            reachable: false,
            version: None,
            kafka_cluster_id: None,
            workers: vec![],
            plugins: vec![],
            error: Some(e.to_string()),
        },
        Ok(info) => {
            let plugins = client.plugins().await.unwrap_or_default();
            let mut workers: Vec<String> = client
                .list_expanded()
                .await
                .map(|m| {
                    m.values()
                        .filter_map(|e| e.status.as_ref())
                        .flat_map(|s| {
                            std::iter::once(s.connector.worker_id.clone())
                                .chain(s.tasks.iter().map(|t| t.worker_id.clone()))
                        })
                        .filter(|w| !w.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            workers.sort();
            workers.dedup();
            ConnectHealth {
                reachable: true,
                version: Some(info.version),
                kafka_cluster_id: Some(info.kafka_cluster_id),
                workers,
                plugins,
                error: None,
            }
        }
    };
    // Only over the settings that were checked (see the reconciler's verdicts).
    let _gate = crate::db::write_gate(pool).await;
    db::query("UPDATE connect_clusters SET health = $1, health_at = $2 WHERE id = $3 AND url = $4 AND updated_at = $5")
        .bind(json!(health).to_string())
        .bind(crate::time::now())
        .bind(id)
        .bind(&c.url)
        .bind(&c.updated_at)
        .execute(pool)
        .await?;
    Ok(health)
}
