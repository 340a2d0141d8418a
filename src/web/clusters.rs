//! Connect clusters (`/api/v1/connect-clusters`) and the internal endpoint the Connect config
//! provider calls, authenticated by the cluster's provider token; the pages that edit and
//! forget Kafka and Connect clusters and issue a new provider token.

use askama::Template;
use poem::http::{header, StatusCode};
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path, Query};
use poem::{handler, Endpoint, IntoResponse, Middleware, Request, Response};
use serde::Deserialize;
use serde_json::json;

use super::api::resource;
use super::api::{Created, Ctx, NoStore};
use super::connectors::{clusters_page, set, ClusterForms, ConnectForm, KafkaForm};
use super::error::{ApiError, ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::clusters::kafka::{self, KafkaCluster, KafkaClusterInput};
use crate::clusters::provider_check::{self, CheckState, ProviderCheck};
use crate::clusters::provider_jar;
use crate::clusters::{self, ConnectCluster, ConnectClusterInput, ProviderIdentity, WithToken};
use crate::error::{Error, FieldErrors};

resource::resource! {
    /// Connect clusters (`/api/v1/connect-clusters`): the standard operations but create,
    /// which answers the provider token once ([`api_create`]); see [`resource`].
    Clusters: ConnectCluster, ConnectClusterInput;
    list => clusters::list,
    get(ConnectCluster) => clusters::detail,
    update => clusters::update,
    delete => clusters::delete,
}

/// 201 with the new cluster and its provider token, shown this once (`no-store`).
pub async fn api_create(
    cx: Ctx,
    Json(input): Json<ConnectClusterInput>,
) -> ApiResult<NoStore<Created<WithToken>>> {
    let _s = &cx.state;
    Ok(NoStore(Created(
        clusters::create(cx.state.ctx(), &cx.who, &input).await?,
    )))
}

resource::resource! {
    /// `/api/v1/kafka-clusters`: the standard operations (see [`resource`]); the topics are in
    /// `web::connectors`.
    KafkaClusters: KafkaCluster, KafkaClusterInput;
    list => kafka::list,
    get(kafka::KafkaClusterDetail) => kafka::detail,
    create => kafka::create,
    update => kafka::update,
    delete => kafka::delete,
}

pub async fn api_provider_token(
    cx: Ctx,
    Path(id): Path<String>,
) -> ApiResult<NoStore<Json<WithToken>>> {
    Ok(NoStore(Json(
        clusters::rotate_provider_token(&cx.state.pool, &cx.who, &id, None).await?,
    )))
}

// ---- the config provider jar, for Connect workers ----------------------------------------

/// What a worker, or an image build, is told when this server hands out no jar.
fn no_provider_jar() -> Response {
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .content_type("text/plain; charset=utf-8")
        .body("This ClueCDC hands out no config provider jar: start it with --provider-jar (CLUECDC_PROVIDER_JAR) set to cluecdc-config-provider-*.jar.\n")
}

/// `GET /static/cluecdc-config-provider.jar` (public: workers fetch it without signing in).
#[handler]
pub async fn download_provider_jar(state: Data<&AppState>) -> Response {
    let Some(jar) = &state.inner.provider_jar else {
        return no_provider_jar();
    };
    let disposition = format!("attachment; filename=\"{}\"", provider_jar::FILE_NAME);
    Response::builder()
        .content_type("application/java-archive")
        .header(header::CONTENT_DISPOSITION, disposition)
        .body(jar.bytes.clone())
}

/// `GET /static/cluecdc-config-provider.jar.sha512`: the jar's SHA-512 as `sha512sum` prints it.
#[handler]
pub async fn download_provider_jar_sha512(state: Data<&AppState>) -> Response {
    let Some(jar) = &state.inner.provider_jar else {
        return no_provider_jar();
    };
    Response::builder()
        .content_type("text/plain; charset=utf-8")
        .body(jar.checksum_line())
}

// ---- pages: edit and forget clusters, a new provider token ---------------------------------

/// A form value as a patch field: only what differs from the stored value is sent, so the
/// audit record names what really changed.
fn changed(value: &str, current: Option<&str>) -> Option<String> {
    let v = value.trim();
    (v != current.unwrap_or("").trim()).then(|| v.to_string())
}

/// "set" or "not set", for a write-only field on an edit form.
async fn stored(
    state: &AppState,
    secret_ref: Option<&str>,
    field: &str,
) -> PageResult<&'static str> {
    let set = match secret_ref {
        Some(r) => state
            .inner
            .ctx
            .secrets
            .fields_set(r)
            .await
            .map_err(Error::Unexpected)?
            .iter()
            .any(|f| f == field),
        None => false,
    };
    Ok(if set { "set" } else { "not set" })
}

/// A refusal to show under the fields: field errors as they are, a taken name under `name`.
fn refusal(e: Error) -> Result<FieldErrors, Error> {
    match e {
        Error::Invalid { fields, .. } => Ok(fields),
        Error::Conflict(m) => Ok([("name".to_string(), m)].into()),
        e => Err(e),
    }
}

#[derive(Template)]
#[template(path = "connectors/kafka_edit.html")]
struct KafkaEditPage {
    layout: Layout,
    k: KafkaCluster,
    form: KafkaForm,
    errors: FieldErrors,
    password_state: &'static str,
}

async fn kafka_edit_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    id: &str,
    form: Option<KafkaForm>,
    errors: FieldErrors,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage clusters")?;
    let k = kafka::get(&state.pool, who, id).await?;
    let form = form.unwrap_or_else(|| KafkaForm {
        name: k.name.clone(),
        bootstrap_servers: k.bootstrap_servers.clone(),
        security_protocol: k.security_protocol.clone(),
        sasl_mechanism: k.sasl_mechanism.clone().unwrap_or_default(),
        sasl_username: k.sasl_username.clone().unwrap_or_default(),
        sasl_password: String::new(),
        tls_ca_certificate: k.tls_ca_certificate.clone().unwrap_or_default(),
    });
    let status = if errors.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    page_with_status(
        status,
        &KafkaEditPage {
            layout: Layout::new(format!("Edit {}", k.name), paths::CLUSTERS, who, jar),
            password_state: stored(state, Some(&k.secret_ref), "sasl_password").await?,
            k,
            form,
            errors,
        },
    )
}

#[handler]
pub async fn page_kafka_edit(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    kafka_edit_page(&state, &who, jar, &id, None, FieldErrors::new()).await
}

/// Saves the Kafka form through the same `kafka::update` as `PATCH /api/v1/kafka-clusters/{id}`;
/// an empty password keeps the stored one.
#[handler]
pub async fn page_kafka_update(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Form(form): Form<KafkaForm>,
) -> PageResult<Response> {
    // The role first: a viewer learns nothing, not even whether the cluster exists.
    who.require(Role::Admin, "manage clusters")?;
    let cur = kafka::get(&state.pool, &who, &id).await?;
    let patch = KafkaClusterInput {
        name: changed(&form.name, Some(&cur.name)),
        bootstrap_servers: changed(&form.bootstrap_servers, Some(&cur.bootstrap_servers)),
        security_protocol: changed(&form.security_protocol, Some(&cur.security_protocol)),
        sasl_mechanism: changed(&form.sasl_mechanism, cur.sasl_mechanism.as_deref()),
        // Empty means "keep" for these two: the API has no way to clear them either.
        sasl_username: set(&form.sasl_username)
            .and_then(|u| changed(&u, cur.sasl_username.as_deref())),
        tls_ca_certificate: set(&form.tls_ca_certificate)
            .and_then(|c| changed(&c, cur.tls_ca_certificate.as_deref())),
        sasl_password: set(&form.sasl_password).map(crate::secrets::Secret::new),
    };
    match kafka::update(state.ctx(), &who, &id, &patch).await {
        Ok(k) => {
            set_flash(jar, &format!("Kafka cluster {} saved.", k.name));
            Ok(redirect(req, paths::CLUSTERS))
        }
        Err(e) => {
            let errors = refusal(e)?;
            let kept = KafkaForm {
                sasl_password: String::new(),
                ..form
            };
            kafka_edit_page(&state, &who, jar, &id, Some(kept), errors).await
        }
    }
}

#[derive(Template)]
#[template(path = "connectors/connect_edit.html")]
struct ConnectEditPage {
    layout: Layout,
    c: ConnectCluster,
    kafka: Vec<KafkaCluster>,
    form: ConnectForm,
    errors: FieldErrors,
    password_state: &'static str,
}

async fn connect_edit_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    id: &str,
    form: Option<ConnectForm>,
    errors: FieldErrors,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage clusters")?;
    let c = clusters::get(&state.pool, who, id).await?;
    let form = form.unwrap_or_else(|| ConnectForm {
        name: c.name.clone(),
        url: c.url.clone(),
        kafka_cluster_id: c.kafka_cluster_id.clone().unwrap_or_default(),
        managed_by: c.managed_by.clone(),
        basic_auth_user: c.basic_auth_user.clone().unwrap_or_default(),
        basic_auth_password: String::new(),
        tls_ca_certificate: c.tls_ca_certificate.clone().unwrap_or_default(),
    });
    let status = if errors.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    page_with_status(
        status,
        &ConnectEditPage {
            layout: Layout::new(format!("Edit {}", c.name), paths::CLUSTERS, who, jar),
            kafka: kafka::list(state.ctx(), who).await?,
            password_state: stored(state, c.secret_ref.as_deref(), "basic_auth_password").await?,
            c,
            form,
            errors,
        },
    )
}

#[handler]
pub async fn page_connect_edit(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    connect_edit_page(&state, &who, jar, &id, None, FieldErrors::new()).await
}

/// Saves the Connect form through the same `clusters::update` as
/// `PATCH /api/v1/connect-clusters/{id}`; an empty password keeps the stored one, an empty
/// user turns basic auth off.
#[handler]
pub async fn page_connect_update(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Form(form): Form<ConnectForm>,
) -> PageResult<Response> {
    // The role first: a viewer learns nothing, not even whether the cluster exists.
    who.require(Role::Admin, "manage clusters")?;
    let cur = clusters::get(&state.pool, &who, &id).await?;
    let patch = ConnectClusterInput {
        name: changed(&form.name, Some(&cur.name)),
        url: changed(&form.url, Some(&cur.url)),
        kafka_cluster_id: set(&form.kafka_cluster_id)
            .and_then(|k| changed(&k, cur.kafka_cluster_id.as_deref())),
        managed_by: changed(&form.managed_by, Some(&cur.managed_by)),
        basic_auth_user: changed(&form.basic_auth_user, cur.basic_auth_user.as_deref()),
        provider_token: None,
        basic_auth_password: set(&form.basic_auth_password).map(crate::secrets::Secret::new),
        // Shown filled in: emptied, it is removed (the built-in roots again).
        tls_ca_certificate: changed(&form.tls_ca_certificate, cur.tls_ca_certificate.as_deref()),
    };
    match clusters::update(state.ctx(), &who, &id, &patch).await {
        Ok(c) => {
            set_flash(jar, &format!("Connect cluster {} saved.", c.name));
            Ok(redirect(req, paths::CLUSTERS))
        }
        Err(e) => {
            let errors = refusal(e)?;
            let kept = ConnectForm {
                basic_auth_password: String::new(),
                ..form
            };
            connect_edit_page(&state, &who, jar, &id, Some(kept), errors).await
        }
    }
}

/// Issues a new provider token (the same `rotate_provider_token` as the API) and shows it on
/// the Clusters page, once.
#[handler]
pub async fn page_provider_token(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    req: &Request,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let rotated = clusters::rotate_provider_token(&state.pool, &who, &id, None).await?;
    let forms = ClusterForms {
        created: Some((
            format!(
                "New provider token for {}: put it on every worker now",
                rotated.cluster.name
            ),
            rotated.provider_token,
        )),
        ..Default::default()
    };
    let mut res = page_with_status(
        StatusCode::OK,
        &clusters_page(&state, &who, jar, req, forms).await?,
    )?;
    res.headers_mut().insert(
        "cache-control",
        poem::http::HeaderValue::from_static("no-store"),
    );
    Ok(res)
}

#[derive(Template)]
#[template(path = "connectors/cluster_forget.html")]
struct ForgetPage {
    layout: Layout,
    kind: &'static str,
    name: String,
    action: String,
    lost: Vec<String>,
    kept: &'static str,
    /// Why the last attempt was refused (in use, and by what).
    refused: Option<String>,
}

impl ForgetPage {
    fn kafka(who: &Principal, jar: &CookieJar, k: &KafkaCluster, refused: Option<String>) -> Self {
        ForgetPage {
            layout: Layout::new(format!("Forget {}", k.name), paths::CLUSTERS, who, jar),
            kind: "Kafka",
            name: k.name.clone(),
            action: format!("/clusters/kafka/{}/delete", k.id),
            lost: vec![
                format!(
                    "its address ({}) and security settings;",
                    k.bootstrap_servers
                ),
                "its stored SASL password, if any.".into(),
            ],
            kept: "The brokers, their topics and records are not touched.",
            refused,
        }
    }

    fn connect(
        who: &Principal,
        jar: &CookieJar,
        c: &ConnectCluster,
        refused: Option<String>,
    ) -> Self {
        ForgetPage {
            layout: Layout::new(format!("Forget {}", c.name), paths::CLUSTERS, who, jar),
            kind: "Connect",
            name: c.name.clone(),
            action: format!("/clusters/connect/{}/delete", c.id),
            lost: vec![
                format!("its REST URL ({}) and basic auth, if any;", c.url),
                "its config provider token: its workers can no longer resolve ${cluecdc:…} references here.".into(),
            ],
            kept: "Kafka Connect and any connector it still runs are not touched.",
            refused,
        }
    }
}

/// A refused forget (in use) is shown on the confirmation page with the reason; 409.
fn forget_refused(page: &ForgetPage) -> PageResult<Response> {
    page_with_status(StatusCode::CONFLICT, page)
}

#[handler]
pub async fn page_kafka_forget_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage clusters")?;
    let k = kafka::get(&state.pool, &who, &id).await?;
    page_with_status(StatusCode::OK, &ForgetPage::kafka(&who, jar, &k, None))
}

#[handler]
pub async fn page_kafka_forget(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    // The role first: a viewer learns nothing, not even whether the cluster exists.
    who.require(Role::Admin, "manage clusters")?;
    let k = kafka::get(&state.pool, &who, &id).await?;
    match kafka::delete(state.ctx(), &who, &id).await {
        Ok(()) => {
            set_flash(jar, &format!("Kafka cluster {} forgotten.", k.name));
            Ok(redirect(req, paths::CLUSTERS))
        }
        Err(Error::Conflict(why)) => forget_refused(&ForgetPage::kafka(&who, jar, &k, Some(why))),
        Err(e) => Err(e.into()),
    }
}

#[handler]
pub async fn page_connect_forget_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage clusters")?;
    let c = clusters::get(&state.pool, &who, &id).await?;
    page_with_status(StatusCode::OK, &ForgetPage::connect(&who, jar, &c, None))
}

#[handler]
pub async fn page_connect_forget(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    // The role first: a viewer learns nothing, not even whether the cluster exists.
    who.require(Role::Admin, "manage clusters")?;
    let c = clusters::get(&state.pool, &who, &id).await?;
    match clusters::delete(state.ctx(), &who, &id).await {
        Ok(()) => {
            set_flash(jar, &format!("Connect cluster {} forgotten.", c.name));
            Ok(redirect(req, paths::CLUSTERS))
        }
        Err(Error::Conflict(why)) => forget_refused(&ForgetPage::connect(&who, jar, &c, Some(why))),
        Err(e) => Err(e.into()),
    }
}

// ---- the provider check ----------------------------------------------------------------------

/// `GET /api/v1/connect-clusters/{id}/provider-check` options.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct CheckQuery {
    /// Run the check now even when the stored one is younger than a minute.
    #[serde(default)]
    pub fresh: Option<bool>,
}

/// Whether each worker of the cluster resolves `${cluecdc:…}` references through this ClueCDC
/// (the stored check while it is younger than a minute, else one run now).
pub async fn api_provider_check(
    cx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<CheckQuery>,
) -> ApiResult<Json<ProviderCheck>> {
    let s = &cx.state;
    let c = clusters::get(&s.pool, &cx.who, &id).await?;
    let public = s.inner.public_url.as_deref();
    Ok(Json(
        provider_check::current(
            &s.pool,
            &s.inner.ctx.secrets,
            &c,
            public,
            q.fresh.unwrap_or(false),
        )
        .await?,
    ))
}

#[derive(Template)]
#[template(path = "connectors/connect_detail.html")]
struct ConnectDetailPage {
    layout: Layout,
    c: ConnectCluster,
    check: Option<ProviderCheck>,
    is_admin: bool,
    stale: bool,
    lost: Vec<LostWorkerRow>,
}

/// A worker the reconciler found lost, as the cluster's page shows it.
struct LostWorkerRow {
    worker_id: String,
    tasks: i64,
    lost_ago_secs: i64,
    /// Seconds from the loss until Connect showed none of its tasks on it.
    moved_after_secs: Option<i64>,
}

/// A Connect cluster's page: its settings and the provider check per worker (the stored one at
/// once; the section then asks for a current one, with progress shown).
#[handler]
pub async fn page_connect(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    req: &Request,
    Query(q): Query<CheckQuery>,
) -> PageResult<Response> {
    let c = clusters::get(&state.pool, &who, &id).await?;
    // `fresh`: the check button without JavaScript, which reloads the whole page.
    let check = match q.fresh.unwrap_or(false) {
        true => {
            let server = super::connectors::server_url(&state, req);
            Some(
                provider_check::run(&state.pool, &state.inner.ctx.secrets, &c, Some(&server))
                    .await?,
            )
        }
        false => provider_check::latest(&state.pool, &c.id).await?,
    };
    let stale = check.as_ref().is_none_or(|k| {
        crate::time::parse(&k.checked_at)
            .is_none_or(|t| (chrono::Utc::now() - t).num_seconds() >= provider_check::FRESH_SECS)
    });
    let now = chrono::Utc::now().timestamp_millis();
    let lost = crate::reconcile::workers::lost(&state.pool, &c.id)
        .await
        .map_err(|e| crate::error::Error::Unexpected(e.into()))?
        .into_iter()
        .map(|w| LostWorkerRow {
            lost_ago_secs: (now - w.lost_at).max(0) / 1000,
            moved_after_secs: w.moved_at.map(|m| (m - w.lost_at).max(0) / 1000),
            worker_id: w.worker_id,
            tasks: w.tasks,
        })
        .collect();
    page_with_status(
        StatusCode::OK,
        &ConnectDetailPage {
            lost,
            layout: Layout::new(
                format!("Connect cluster {}", c.name),
                paths::CLUSTERS,
                &who,
                jar,
            ),
            is_admin: who.role >= Role::Admin,
            c,
            check,
            stale,
        },
    )
}

#[derive(Template)]
#[template(path = "connectors/provider_check_partial.html")]
struct ProviderCheckPartial {
    c: ConnectCluster,
    check: Option<ProviderCheck>,
    /// Ask again when the section loads (the stored check is not current).
    stale: bool,
}

/// The provider check section (`?fresh=true`: run now): what the cluster page's section loads.
#[handler]
pub async fn page_provider_check(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
    Query(q): Query<CheckQuery>,
) -> PageResult<Response> {
    let c = clusters::get(&state.pool, &who, &id).await?;
    let server = super::connectors::server_url(&state, req);
    let check = provider_check::current(
        &state.pool,
        &state.inner.ctx.secrets,
        &c,
        Some(&server),
        q.fresh.unwrap_or(false),
    )
    .await?;
    page_with_status(
        StatusCode::OK,
        &ProviderCheckPartial {
            c,
            check: Some(check),
            stale: false,
        },
    )
}

// ---- the config provider's endpoint ---------------------------------------------------------

/// Guards the internal endpoint: a Connect cluster's provider token, nothing else.
pub struct RequireProviderToken;

impl<E: Endpoint> Middleware<E> for RequireProviderToken {
    type Output = ProviderGuard<E>;
    fn transform(&self, ep: E) -> Self::Output {
        ProviderGuard(ep)
    }
}

pub struct ProviderGuard<E>(E);

impl<E: Endpoint> Endpoint for ProviderGuard<E> {
    type Output = Response;
    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let state = req
            .data::<AppState>()
            .cloned()
            .ok_or_else(|| ApiError(Error::Unexpected(anyhow::anyhow!("no state"))))?;
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("")
            .trim()
            .to_string();
        let Some(identity) = clusters::resolve_provider_token(&state.pool, &token)
            .await
            .map_err(ApiError)?
        else {
            // A provider check's probe arriving with a token ClueCDC does not know: marked, so
            // the check can say "wrong token" rather than "nothing arrived" (see
            // `provider_check`; an unknown nonce changes nothing).
            let body = req
                .take_body()
                .into_bytes_limit(4096)
                .await
                .unwrap_or_default();
            if let Ok(probe) = serde_json::from_slice::<ResolveBody>(&body) {
                provider_check::arrived(&state.pool, &probe.secret_ref, None)
                    .await
                    .map_err(ApiError)?;
            }
            return Err(ApiError(Error::Unauthenticated).into());
        };
        req.extensions_mut().insert(identity);
        self.0.call(req).await.map(IntoResponse::into_response)
    }
}

#[derive(Deserialize)]
pub struct ResolveBody {
    #[serde(default)]
    secret_ref: String,
    #[serde(default)]
    fields: Vec<String>,
}

#[handler]
pub async fn resolve(
    state: Data<&AppState>,
    who: Data<&ProviderIdentity>,
    Json(body): Json<ResolveBody>,
) -> ApiResult<Response> {
    if body.secret_ref.starts_with(provider_check::PROBE_PREFIX) {
        provider_check::arrived(&state.pool, &body.secret_ref, Some(&who.cluster_id)).await?;
        let values: serde_json::Map<String, serde_json::Value> = body
            .fields
            .iter()
            .map(|f| (f.clone(), json!("probe")))
            .collect();
        return Ok(Response::builder()
            .header("cache-control", "no-store")
            .content_type("application/json")
            .body(json!({ "values": values }).to_string()));
    }
    let resolved = crate::secrets::resolve::resolve(
        &state.pool,
        &state.inner.ctx.secrets,
        &who,
        &body.secret_ref,
        &body.fields,
    )
    .await?;
    // Never cached anywhere on the way.
    Ok(Response::builder()
        .header("cache-control", "no-store")
        .content_type("application/json")
        .body(json!(resolved).to_string()))
}
