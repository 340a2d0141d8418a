//! Connectors (desired vs observed, drift, restarts), the reconciler's status, Kafka clusters
//! and topics: pages and `/api/v1`.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path, Query};
use poem::{handler, Request, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::clusters::kafka::{self, KafkaClusterInput, NewTopicInput};
use crate::connectors::{
    self, ConnectorInput, ConnectorView, DriftEvent, RestartRecord, Unmanaged,
};
use crate::error::{Error, FieldErrors};
use crate::reconcile::plan::DesiredState;

// ---- connectors API -------------------------------------------------------------------------

#[handler]
pub async fn api_list(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Json<Value>> {
    let items = connectors::list(&state.pool, &who).await?;
    let unmanaged = connectors::unmanaged(&state.pool, &who).await?;
    Ok(Json(json!({"items": items, "unmanaged": unmanaged})))
}

#[handler]
pub async fn api_create(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Json(input): Json<ConnectorInput>,
) -> ApiResult<Response> {
    let c = connectors::create(&state.pool, &state.inner.reconciler, &who, &input).await?;
    Ok(Response::builder()
        .status(StatusCode::CREATED)
        .content_type("application/json")
        .body(json!(c).to_string()))
}

#[handler]
pub async fn api_get(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    let (c, drift, restarts) = connectors::history(&state.pool, &who, &key).await?;
    let mut v = json!(c);
    v["drift_events"] = json!(connectors::drift_json(&drift));
    v["restarts"] = json!(restarts);
    Ok(Json(v))
}

#[handler]
pub async fn api_delete(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(key): Path<String>,
) -> ApiResult<Json<ConnectorView>> {
    Ok(Json(
        connectors::set_state(
            &state.pool,
            &state.inner.reconciler,
            &who,
            &key,
            DesiredState::Deleted,
        )
        .await?,
    ))
}

fn action_state(action: &str) -> Option<DesiredState> {
    match action {
        "pause" => Some(DesiredState::Paused),
        "resume" => Some(DesiredState::Running),
        "stop" => Some(DesiredState::Stopped),
        _ => None,
    }
}

async fn act(
    state: &AppState,
    who: &Principal,
    key: &str,
    action: &str,
) -> crate::error::Result<ConnectorView> {
    match action {
        "restart" => {
            connectors::request_restart(&state.pool, &state.inner.reconciler, who, key).await
        }
        "adopt" => {
            connectors::adopt_live(
                &state.pool,
                &state.inner.secrets,
                &state.inner.reconciler,
                who,
                key,
            )
            .await
        }
        other => match action_state(other) {
            Some(s) => {
                connectors::set_state(&state.pool, &state.inner.reconciler, who, key, s).await
            }
            None => Err(crate::error::Error::NotFound(format!("action {other}"))),
        },
    }
}

connector_actions! {
    "/connectors";
    api_pause, page_pause, "pause";
    api_resume, page_resume, "resume";
    api_stop, page_stop, "stop";
    api_restart, page_restart, "restart";
    api_adopt, page_adopt, "adopt";
}

#[handler]
pub async fn api_drift(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": connectors::drift_json(&connectors::all_drift(&state.pool, &who).await?)}),
    ))
}

#[handler]
pub async fn api_reconciler(
    state: Data<&AppState>,
    who: Data<&Principal>,
) -> ApiResult<Json<Value>> {
    who.require(Role::Viewer, "see the reconciler")?;
    let lease =
        crate::reconcile::lease::Lease::current(&state.pool, crate::reconcile::lease::RECONCILER)
            .await
            .map_err(crate::error::Error::Unexpected)?;
    let last: Option<(String, String, i64, i64, i64, i64)> = sqlx::query_as("SELECT holder, started_at, duration_ms, clusters, actions, errors FROM reconcile_passes ORDER BY id DESC LIMIT 1").fetch_optional(&state.pool).await?;
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_passes")
        .fetch_one(&state.pool)
        .await?;
    Ok(Json(json!({
        "holder": lease.as_ref().map(|l| &l.0),
        "lease_expires_at_ms": lease.as_ref().map(|l| l.1),
        "passes_recorded": total,
        "passes_in_this_process": state.inner.reconciler.passes.load(std::sync::atomic::Ordering::Relaxed),
        "last_pass": last.map(|(holder, started_at, duration_ms, clusters, actions, errors)| json!({"holder": holder, "started_at": started_at, "duration_ms": duration_ms, "clusters": clusters, "actions": actions, "errors": errors})),
    })))
}

/// "Reconcile now": a pass at once, in whichever process holds the lease.
#[handler]
pub async fn api_reconcile_now(
    state: Data<&AppState>,
    who: Data<&Principal>,
) -> ApiResult<StatusCode> {
    who.require(Role::Operator, "trigger a reconcile pass")?;
    crate::reconcile::bump_desired_version(&state.pool)
        .await
        .map_err(crate::error::Error::Unexpected)?;
    state.inner.reconciler.wake();
    Ok(StatusCode::ACCEPTED)
}

// ---- Kafka clusters and topics API ----------------------------------------------------------

#[handler]
pub async fn api_kafka_list(
    state: Data<&AppState>,
    who: Data<&Principal>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": kafka::list(&state.pool, &who).await?}),
    ))
}

#[handler]
pub async fn api_kafka_create(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Json(input): Json<KafkaClusterInput>,
) -> ApiResult<Response> {
    let c = kafka::create(&state.pool, &state.inner.secrets, &who, &input).await?;
    Ok(Response::builder()
        .status(StatusCode::CREATED)
        .content_type("application/json")
        .body(json!(c).to_string()))
}

#[handler]
pub async fn api_kafka_get(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let health = kafka::check_health(&state.pool, &state.inner.secrets, &who, &id).await?;
    let mut v = json!(kafka::get(&state.pool, &who, &id).await?);
    v["health"] = json!(health);
    Ok(Json(v))
}

#[handler]
pub async fn api_kafka_patch(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
    Json(patch): Json<KafkaClusterInput>,
) -> ApiResult<Json<kafka::KafkaCluster>> {
    Ok(Json(
        kafka::update(&state.pool, &state.inner.secrets, &who, &id, &patch).await?,
    ))
}

#[handler]
pub async fn api_kafka_delete(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    kafka::delete(&state.pool, &who, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[handler]
pub async fn api_topics(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": kafka::topics(&state.pool, &state.inner.secrets, &who, &id).await?}),
    ))
}

#[handler]
pub async fn api_topic_create(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
    Json(input): Json<NewTopicInput>,
) -> ApiResult<Response> {
    let t = kafka::create_topic(&state.pool, &state.inner.secrets, &who, &id, &input).await?;
    Ok(Response::builder()
        .status(StatusCode::CREATED)
        .content_type("application/json")
        .body(json!(t).to_string()))
}

#[handler]
pub async fn api_topic_get(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(
        kafka::topic(&state.pool, &state.inner.secrets, &who, &id, &name).await?
    )))
}

#[derive(Deserialize)]
pub struct Confirm {
    #[serde(default)]
    confirm: String,
}

#[handler]
pub async fn api_topic_delete(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path((id, name)): Path<(String, String)>,
    Query(c): Query<Confirm>,
) -> ApiResult<StatusCode> {
    kafka::delete_topic(
        &state.pool,
        &state.inner.secrets,
        &who,
        &id,
        &name,
        &c.confirm,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[handler]
pub async fn api_connect_plugins(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let h = crate::clusters::check_health(&state.pool, &state.inner.secrets, &who, &id).await?;
    if !h.reachable {
        return Err(crate::error::Error::Unavailable(
            h.error.unwrap_or_else(|| "Connect is unreachable".into()),
        )
        .into());
    }
    Ok(Json(
        json!({"items": h.plugins, "version": h.version, "workers": h.workers}),
    ))
}

// ---- pages ----------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "connectors/index.html")]
struct ListPage {
    layout: Layout,
    items: Vec<ConnectorView>,
    unmanaged: Vec<Unmanaged>,
    can_operate: bool,
}

#[derive(Template)]
#[template(path = "connectors/rows_partial.html")]
struct Rows {
    items: Vec<ConnectorView>,
}

#[handler]
pub async fn page_list(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    let items = connectors::list(&state.pool, &who).await?;
    if super::home::is_htmx(req) {
        return page_with_status(StatusCode::OK, &Rows { items });
    }
    let unmanaged = connectors::unmanaged(&state.pool, &who).await?;
    page_with_status(
        StatusCode::OK,
        &ListPage {
            layout: Layout::new("Connectors", paths::CONNECTORS, &who, jar),
            items,
            unmanaged,
            can_operate: who.role >= Role::Operator,
        },
    )
}

#[derive(Template)]
#[template(path = "connectors/detail.html")]
struct DetailPage {
    layout: Layout,
    c: ConnectorView,
    drift: Vec<DriftEvent>,
    restarts: Vec<RestartRecord>,
    can_operate: bool,
    can_admin: bool,
}

#[derive(Template)]
#[template(path = "connectors/status_partial.html")]
struct StatusPartial {
    c: ConnectorView,
}

#[handler]
pub async fn page_detail(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(key): Path<String>,
) -> PageResult<Response> {
    let (c, drift, restarts) = connectors::history(&state.pool, &who, &key).await?;
    if super::home::is_htmx(req) {
        return page_with_status(StatusCode::OK, &StatusPartial { c });
    }
    page_with_status(
        StatusCode::OK,
        &DetailPage {
            layout: Layout::new(c.name.clone(), paths::CONNECTORS, &who, jar),
            can_operate: who.role >= Role::Operator,
            can_admin: who.role >= Role::Admin,
            c,
            drift,
            restarts,
        },
    )
}

#[handler]
pub async fn page_delete(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(key): Path<String>,
    Form(c): Form<Confirm>,
) -> PageResult<Response> {
    who.require(Role::Admin, "delete connectors")?;
    let view = connectors::get(&state.pool, &who, &key).await?;
    if c.confirm != view.name {
        return Err(crate::error::Error::field(
            "confirm",
            format!("type the connector name {} to confirm", view.name),
        )
        .into());
    }
    connectors::set_state(
        &state.pool,
        &state.inner.reconciler,
        &who,
        &key,
        DesiredState::Deleted,
    )
    .await?;
    set_flash(
        jar,
        &format!(
            "{} will be deleted from Connect by the reconciler.",
            view.name
        ),
    );
    Ok(redirect(req, paths::CONNECTORS))
}

#[derive(Template)]
#[template(path = "connectors/clusters.html")]
struct ClustersPage {
    layout: Layout,
    /// (cluster, (reachable, broker count)) from the last health check.
    kafka: Vec<(kafka::KafkaCluster, Option<(bool, usize)>)>,
    /// (cluster, (version, plugin count)) from the last health check.
    connect: Vec<(crate::clusters::ConnectCluster, Option<(String, usize)>)>,
    is_admin: bool,
    kafka_form: KafkaForm,
    kafka_errors: FieldErrors,
    connect_form: ConnectForm,
    connect_errors: FieldErrors,
    /// Set only on the response that registered a Connect cluster: its provider token, once,
    /// with the worker settings that use it.
    created: Option<(String, String)>,
    /// How Connect workers reach this server (the request's origin, or the public URL).
    server_url: String,
}

/// The Kafka cluster form: text as typed (empty = not set); the SASL password is write-only.
#[derive(Debug, Default, Deserialize)]
pub struct KafkaForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    bootstrap_servers: String,
    #[serde(default)]
    security_protocol: String,
    #[serde(default)]
    sasl_mechanism: String,
    #[serde(default)]
    sasl_username: String,
    #[serde(default)]
    sasl_password: String,
    #[serde(default)]
    tls_ca_certificate: String,
}

/// The Kafka Connect cluster form; the basic-auth password is write-only.
#[derive(Debug, Default, Deserialize)]
pub struct ConnectForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    kafka_cluster_id: String,
    #[serde(default)]
    managed_by: String,
    #[serde(default)]
    basic_auth_user: String,
    #[serde(default)]
    basic_auth_password: String,
}

fn set(v: &str) -> Option<String> {
    Some(v.trim().to_string()).filter(|v| !v.is_empty())
}

impl KafkaForm {
    fn input(&self) -> KafkaClusterInput {
        KafkaClusterInput {
            name: set(&self.name),
            bootstrap_servers: set(&self.bootstrap_servers),
            security_protocol: set(&self.security_protocol),
            sasl_mechanism: set(&self.sasl_mechanism),
            sasl_username: set(&self.sasl_username),
            tls_ca_certificate: set(&self.tls_ca_certificate),
            sasl_password: set(&self.sasl_password).map(crate::secrets::Secret::new),
        }
    }

    /// What the page shows again after a refusal: never the password.
    fn kept(self) -> Self {
        KafkaForm {
            sasl_password: String::new(),
            ..self
        }
    }
}

impl ConnectForm {
    fn input(&self) -> crate::clusters::ConnectClusterInput {
        crate::clusters::ConnectClusterInput {
            name: set(&self.name),
            url: set(&self.url),
            kafka_cluster_id: set(&self.kafka_cluster_id),
            managed_by: set(&self.managed_by),
            basic_auth_user: set(&self.basic_auth_user),
            basic_auth_password: set(&self.basic_auth_password).map(crate::secrets::Secret::new),
        }
    }

    fn kept(self) -> Self {
        ConnectForm {
            basic_auth_password: String::new(),
            ..self
        }
    }
}

/// The page's parts other than the lists: forms, their errors, a token just created.
#[derive(Default)]
struct ClusterForms {
    kafka_form: KafkaForm,
    kafka_errors: FieldErrors,
    connect_form: ConnectForm,
    connect_errors: FieldErrors,
    created: Option<(String, String)>,
}

async fn clusters_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    req: &Request,
    forms: ClusterForms,
) -> Result<ClustersPage, Error> {
    let parse = |h: &Option<String>| {
        h.as_deref()
            .and_then(|h| serde_json::from_str::<Value>(h).ok())
    };
    let kafka = kafka::list(&state.pool, who)
        .await?
        .into_iter()
        .map(|k| {
            let h = parse(&k.health).map(|h| {
                (
                    h["reachable"].as_bool().unwrap_or(false),
                    h["brokers"].as_array().map_or(0, Vec::len),
                )
            });
            (k, h)
        })
        .collect();
    let connect = crate::clusters::list(&state.pool, who)
        .await?
        .into_iter()
        .map(|c| {
            let h = parse(&c.health).and_then(|h| {
                Some((
                    h["version"].as_str()?.to_string(),
                    h["plugins"].as_array().map_or(0, Vec::len),
                ))
            });
            (c, h)
        })
        .collect();
    let host = req
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:8080");
    Ok(ClustersPage {
        layout: Layout::new("Clusters", paths::CLUSTERS, who, jar),
        kafka,
        connect,
        is_admin: who.role >= Role::Admin,
        kafka_form: forms.kafka_form,
        kafka_errors: forms.kafka_errors,
        connect_form: forms.connect_form,
        connect_errors: forms.connect_errors,
        created: forms.created,
        server_url: state
            .inner
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{host}")),
    })
}

#[handler]
pub async fn page_clusters(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    req: &Request,
) -> PageResult<Response> {
    page_with_status(
        StatusCode::OK,
        &clusters_page(&state, &who, jar, req, ClusterForms::default()).await?,
    )
}

#[handler]
pub async fn kafka_cluster_form(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    req: &Request,
    Form(form): Form<KafkaForm>,
) -> PageResult<Response> {
    match kafka::create(&state.pool, &state.inner.secrets, &who, &form.input()).await {
        Ok(k) => {
            set_flash(jar, &format!("Kafka cluster {} registered.", k.name));
            Ok(redirect(req, paths::CLUSTERS))
        }
        Err(Error::Invalid { fields, .. }) => {
            let forms = ClusterForms {
                kafka_form: form.kept(),
                kafka_errors: fields,
                ..Default::default()
            };
            page_with_status(
                StatusCode::UNPROCESSABLE_ENTITY,
                &clusters_page(&state, &who, jar, req, forms).await?,
            )
        }
        Err(e) => Err(e.into()),
    }
}

/// Answers with the page itself: the provider token is shown in this response only.
#[handler]
pub async fn connect_cluster_form(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    req: &Request,
    Form(form): Form<ConnectForm>,
) -> PageResult<Response> {
    match crate::clusters::create(&state.pool, &state.inner.secrets, &who, &form.input()).await {
        Ok(created) => {
            let forms = ClusterForms {
                created: Some((created.cluster.name.clone(), created.provider_token)),
                ..Default::default()
            };
            let mut res = page_with_status(
                StatusCode::CREATED,
                &clusters_page(&state, &who, jar, req, forms).await?,
            )?;
            res.headers_mut().insert(
                "cache-control",
                poem::http::HeaderValue::from_static("no-store"),
            );
            Ok(res)
        }
        Err(Error::Invalid { fields, .. }) => {
            let forms = ClusterForms {
                connect_form: form.kept(),
                connect_errors: fields,
                ..Default::default()
            };
            page_with_status(
                StatusCode::UNPROCESSABLE_ENTITY,
                &clusters_page(&state, &who, jar, req, forms).await?,
            )
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Template)]
#[template(path = "connectors/topics.html")]
struct TopicsPage {
    layout: Layout,
    clusters: Vec<kafka::KafkaCluster>,
    selected: Option<String>,
    topics: Vec<crate::kafka::TopicInfo>,
    error: Option<String>,
}

#[derive(Deserialize)]
pub struct TopicsQuery {
    cluster: Option<String>,
}

#[handler]
pub async fn page_topics(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<TopicsQuery>,
) -> PageResult<Response> {
    let clusters = kafka::list(&state.pool, &who).await?;
    let selected = q.cluster.or_else(|| clusters.first().map(|c| c.id.clone()));
    let (topics, error) = match &selected {
        Some(id) => match kafka::topics(&state.pool, &state.inner.secrets, &who, id).await {
            Ok(t) => (t, None),
            Err(e) => (vec![], Some(e.to_string())),
        },
        None => (vec![], None),
    };
    page_with_status(
        StatusCode::OK,
        &TopicsPage {
            layout: Layout::new("Topics", paths::TOPICS, &who, jar),
            clusters,
            selected,
            topics,
            error,
        },
    )
}
