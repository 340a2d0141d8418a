//! Connectors (desired vs observed, drift, restarts), the reconciler's status, Kafka clusters
//! and topics: pages and `/api/v1`.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path, Query};
use poem::{handler, Request, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api::resource::{self};
use super::api::{paged, Created, Ctx, NoContent, OpDoc, Reply, Serialized};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::clusters::kafka::{self, KafkaClusterInput, NewTopicInput};
use crate::connectors::{
    self, ConnectorDetail, ConnectorInput, ConnectorView, DriftEvent, DriftView, RestartRecord,
    Unmanaged,
};
use crate::error::{Error, FieldErrors};
use crate::kafka::TopicInfo;
use crate::listing::{self, ListPage, ListQuery, Nav, Window, CONNECTOR_STATES};
use crate::reconcile::plan::DesiredState;

// ---- connectors API -------------------------------------------------------------------------

/// `GET /api/v1/connectors`: a page of connectors (`ConnectorList`'s fields) and every
/// connector found on a Connect cluster that ClueCDC does not manage. Describes the cached
/// body the handler answers.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ConnectorListing")]
#[allow(dead_code)]
pub struct ConnectorListing {
    #[serde(flatten)]
    page: ListPage<ConnectorView>,
    unmanaged: Vec<Unmanaged>,
}

pub async fn api_list(
    cx: Ctx,
    Query(q): Query<ListQuery>,
) -> ApiResult<Serialized<ConnectorListing>> {
    let (pool, who) = (&cx.state.pool, &cx.who);
    paged(&cx, "connectors", &q, CONNECTOR_STATES, |w| async move {
        let mut body = connectors::page(pool, who, &w).await?.json();
        body["unmanaged"] = serde_json::json!(connectors::unmanaged(pool, who).await?);
        Ok(body)
    })
    .await
}

resource::resource! {
    /// `/api/v1/connectors`: the standard create, get and actions (see [`resource`]); the list
    /// (with the unmanaged connectors) and delete (which answers the connector) are its own.
    Connectors: ConnectorView, ConnectorInput;
    create => connectors::create,
    get(ConnectorDetail) => connectors::detail,
    control(ConnectorView) => connectors::act,
}

/// Deleting a connector is asking for its desired state `DELETED`: the answer is the connector
/// until the reconciler has removed it.
pub async fn api_delete(cx: Ctx, Path(key): Path<String>) -> ApiResult<Json<ConnectorView>> {
    let s = &cx.state;
    let (pool, reconciler) = (&s.pool, &s.inner.ctx.reconciler);
    Ok(Json(
        connectors::set_state(pool, reconciler, &cx.who, &key, DesiredState::Deleted).await?,
    ))
}

connector_actions! {
    "/connectors", Connectors;
    page_pause, Pause;
    page_resume, Resume;
    page_stop, Stop;
    page_restart, Restart;
    page_adopt, Adopt;
}

pub async fn api_drift(cx: Ctx) -> ApiResult<Json<ListPage<DriftView>>> {
    let events = connectors::all_drift(&cx.state.pool, &cx.who).await?;
    Ok(Json(ListPage::all(connectors::drift_views(&events))))
}

pub async fn api_reconciler(cx: Ctx) -> ApiResult<Json<crate::reconcile::Status>> {
    cx.who.require(Role::Viewer, "see the reconciler")?;
    let s = &cx.state;
    Ok(Json(
        crate::reconcile::status(&s.pool, &s.inner.ctx.reconciler)
            .await
            .map_err(Error::Unexpected)?,
    ))
}

/// "Reconcile now": a pass at once, in whichever process holds the lease.
pub async fn api_reconcile_now(cx: Ctx) -> ApiResult<AcceptedEmpty> {
    cx.who.require(Role::Operator, "trigger a reconcile pass")?;
    crate::reconcile::bump_desired_version(&cx.state.pool)
        .await
        .map_err(Error::Unexpected)?;
    cx.state.inner.ctx.reconciler.wake();
    Ok(AcceptedEmpty)
}

/// 202 with no body: the work was handed to a background task that reports elsewhere.
pub struct AcceptedEmpty;

impl Reply for AcceptedEmpty {
    fn into_reply(self) -> Response {
        Response::builder().status(StatusCode::ACCEPTED).finish()
    }
    fn describe(op: &mut OpDoc) {
        op.response(StatusCode::ACCEPTED, "Accepted", None);
    }
}

// ---- Kafka clusters and topics API ----------------------------------------------------------

pub async fn api_topics(
    cx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Serialized<ListPage<TopicInfo>>> {
    let s = &cx.state;
    let w = q.window(TOPIC_STATES)?;
    let topics = kafka::topics(&s.pool, &s.inner.ctx.secrets, &cx.who, &id).await?;
    let list = listing::InMemory::new(topics, |t| &t.name, topic_state);
    Ok(Serialized::new(list.page(&w).json().to_string()))
}

/// How old the topics page's broker metadata may be: topics created or deleted outside ClueCDC
/// show within this, ClueCDC's own changes at once (their handlers forget it).
const TOPICS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(5);

/// A Kafka cluster's topics as the topics page lists them (Kafka's internal ones left out),
/// kept for a moment (see [`crate::snapshots::Snapshots::external`]): reading them costs a
/// metadata and a watermark round trip, too slow for every view.
async fn cluster_topics(
    state: &AppState,
    who: &Principal,
    cluster: &str,
) -> Result<std::sync::Arc<listing::InMemory<TopicInfo>>, Error> {
    (state.inner.snapshots)
        .external(&format!("topics {cluster}"), TOPICS_MAX_AGE, || async {
            let mut topics =
                kafka::topics(&state.pool, &state.inner.ctx.secrets, who, cluster).await?;
            topics.retain(|t| !t.internal);
            Ok(listing::InMemory::new(topics, |t| &t.name, topic_state))
        })
        .await
}

/// After ClueCDC created or deleted a topic: the next topics page reads the cluster again.
fn forget_topics(state: &AppState, cluster: &str) {
    state.inner.snapshots.forget(&format!("topics {cluster}"));
}

/// A topic's state in lists: whether every partition has all its replicas in sync.
const TOPIC_STATES: &[&str] = &["UNDER-REPLICATED", "IN-SYNC"];

fn topic_state(t: &TopicInfo) -> &'static str {
    if t.fully_replicated() {
        "IN-SYNC"
    } else {
        "UNDER-REPLICATED"
    }
}

pub async fn api_topic_create(
    cx: Ctx,
    Path(id): Path<String>,
    Json(input): Json<NewTopicInput>,
) -> ApiResult<Created<TopicInfo>> {
    let s = &cx.state;
    let t = kafka::create_topic(&s.pool, &s.inner.ctx.secrets, &cx.who, &id, &input).await?;
    forget_topics(s, &id);
    Ok(Created(t))
}

pub async fn api_topic_get(
    cx: Ctx,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult<Json<TopicInfo>> {
    let s = &cx.state;
    Ok(Json(
        kafka::topic(&s.pool, &s.inner.ctx.secrets, &cx.who, &id, &name).await?,
    ))
}

/// Deleting a topic asks for its name again.
#[derive(Deserialize, JsonSchema)]
pub struct Confirm {
    /// The topic's name, typed again.
    #[serde(default)]
    confirm: String,
}

pub async fn api_topic_delete(
    cx: Ctx,
    Path((id, name)): Path<(String, String)>,
    Query(c): Query<Confirm>,
) -> ApiResult<NoContent> {
    let s = &cx.state;
    kafka::delete_topic(s.ctx(), &cx.who, &id, &name, &c.confirm).await?;
    forget_topics(s, &id);
    Ok(NoContent)
}

/// A Connect cluster's plugins, version and workers, read live.
#[derive(Serialize, JsonSchema)]
pub struct ConnectPlugins {
    /// The installed connector plugins.
    items: Vec<crate::connect::PluginInfo>,
    /// The Connect version.
    version: Option<String>,
    /// The workers running this cluster's connectors and tasks.
    workers: Vec<String>,
}

pub async fn api_connect_plugins(
    cx: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<ConnectPlugins>> {
    let s = &cx.state;
    let h = crate::clusters::check_health(&s.pool, &s.inner.ctx.secrets, &cx.who, &id).await?;
    if !h.reachable {
        return Err(
            Error::Unavailable(h.error.unwrap_or_else(|| "Connect is unreachable".into())).into(),
        );
    }
    Ok(Json(ConnectPlugins {
        items: h.plugins,
        version: h.version,
        workers: h.workers,
    }))
}

// ---- pages ----------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "connectors/index.html")]
struct IndexPage<'a> {
    layout: Layout,
    /// The filter form's view (the list has its own copy).
    nav: Nav,
    /// [`Rows`], rendered.
    list: &'a str,
    can_operate: bool,
    unmanaged: UnmanagedList<'a>,
    can_admin: bool,
    bulk: Option<super::bulk::BulkBar>,
}

/// Unmanaged connectors shown under the list before "Show all".
const UNMANAGED_SHOWN: usize = 20;

/// The connectors in Connect that ClueCDC does not manage, in the list's cluster filter: the
/// first [`UNMANAGED_SHOWN`] by name, or all of them (`?unmanaged=all`).
struct UnmanagedList<'a> {
    /// (connector, its cluster's name)
    shown: Vec<(&'a Unmanaged, &'a str)>,
    total: usize,
    /// The same view with all of them, while some are left out.
    all_href: Option<String>,
}

impl<'a> UnmanagedList<'a> {
    fn new(
        all: &'a [Unmanaged],
        clusters: &'a [(String, String)],
        nav: &Nav,
        cluster: &str,
        show_all: bool,
    ) -> UnmanagedList<'a> {
        let name_of = |id: &str| {
            clusters
                .iter()
                .find(|(c, _)| c == id)
                .map_or("", |(_, n)| n.as_str())
        };
        let in_view: Vec<(&Unmanaged, &str)> = all
            .iter()
            .map(|u| (u, name_of(&u.connect_cluster_id)))
            .filter(|(u, name)| {
                cluster.is_empty() || u.connect_cluster_id == cluster || *name == cluster
            })
            .collect();
        let total = in_view.len();
        let all_href = (!show_all && total > UNMANAGED_SHOWN).then(|| {
            let base = nav.href(1);
            let sep = if base.contains('?') { '&' } else { '?' };
            format!("{base}{sep}unmanaged=all#unmanaged-heading")
        });
        let shown = if show_all {
            in_view
        } else {
            in_view.into_iter().take(UNMANAGED_SHOWN).collect()
        };
        UnmanagedList {
            shown,
            total,
            all_href,
        }
    }
}

/// `?unmanaged=all` on the connectors page.
#[derive(Debug, Default, Deserialize)]
pub struct UnmanagedQuery {
    #[serde(default)]
    unmanaged: String,
}

/// The part of the list that refreshes itself: counts, rows and pager.
#[derive(Template)]
#[template(path = "connectors/list_partial.html")]
struct Rows<'a> {
    nav: Nav,
    items: &'a [ConnectorView],
    can_operate: bool,
    csrf_token: String,
    /// Bulk selection mode: a checkbox per row, and no self-refresh (it would clear them).
    selecting: bool,
    all_checked: bool,
}

/// A view of the list as loaded, with its rows rendered per viewer kind.
struct Listed {
    page: listing::Page<ConnectorView>,
    clusters: Vec<(String, String)>,
    unmanaged: Vec<Unmanaged>,
    rows: listing::Rendered,
}

#[handler]
pub async fn page_list(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<ListQuery>,
    Query(sel): Query<super::bulk::SelectQuery>,
    Query(um): Query<UnmanagedQuery>,
) -> PageResult<Response> {
    let w = q.window(CONNECTOR_STATES)?;
    let loaded = listing::cached(&state.inner.snapshots, "connectors-page", &w, || async {
        Ok(Listed {
            page: connectors::page(&state.pool, &who, &w).await?,
            clusters: crate::clusters::connect::choices(&state.pool).await?,
            unmanaged: connectors::unmanaged(&state.pool, &who).await?,
            rows: Default::default(),
        })
    })
    .await?;
    let list = Rows {
        nav: Nav::new(
            paths::CONNECTORS,
            ("connector", "connectors"),
            &w,
            CONNECTOR_STATES,
            loaded.clusters.clone(),
            &loaded.page,
        ),
        items: &loaded.page.items,
        csrf_token: who.csrf_token().unwrap_or_default().to_string(),
        can_operate: who.role >= Role::Operator,
        selecting: who.role >= Role::Operator && !sel.select.is_empty(),
        all_checked: who.role >= Role::Operator && sel.select == "page",
    };
    // Everything `Rows` shows beyond the loaded view (the window is the cache's own key).
    let viewer = format!(
        "{}\u{0}{}{}{}",
        list.csrf_token, list.can_operate, list.selecting, list.all_checked
    );
    let html = loaded.rows.get_or_render(viewer, || {
        super::pages::render_sized(&list).map_err(super::pages::render_error)
    })?;
    if super::home::is_htmx(req) {
        return Ok(Response::builder()
            .content_type("text/html; charset=utf-8")
            .body(html.to_string()));
    }
    let unmanaged = UnmanagedList::new(
        &loaded.unmanaged,
        &loaded.clusters,
        &list.nav,
        &w.cluster,
        um.unmanaged == "all",
    );
    page_with_status(
        StatusCode::OK,
        &IndexPage {
            layout: Layout::new("Connectors", paths::CONNECTORS, &who, jar),
            bulk: super::bulk::BulkBar::new(&who, crate::bulk::Kind::Connector, &list.nav, &sel),
            nav: list.nav,
            list: &html,
            can_operate: list.can_operate,
            unmanaged,
            can_admin: who.role >= Role::Admin,
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
    csrf_token: String,
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
            csrf_token: who.csrf_token().unwrap_or_default().to_string(),
            c,
            drift,
            restarts,
        },
    )
}

/// The add-a-connector form as typed: config as key/value rows and, or, pasted JSON.
#[derive(Debug, Default)]
pub struct NewForm {
    cluster: String,
    class: String,
    name: String,
    state: String,
    rows: Vec<(String, String)>,
    json: String,
    step: String,
}

impl NewForm {
    fn parse(body: &[u8]) -> NewForm {
        let mut f = NewForm::default();
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (k, v) in url::form_urlencoded::parse(body) {
            let v = v.into_owned();
            match k.as_ref() {
                "connect_cluster_id" => f.cluster = v,
                "connector_class" => f.class = v,
                "name" => f.name = v.trim().to_string(),
                "desired_state" => f.state = v,
                "key" => keys.push(v.trim().to_string()),
                "value" => values.push(v),
                "config_json" => f.json = v,
                "step" => f.step = v,
                _ => {}
            }
        }
        values.resize(keys.len(), String::new());
        f.rows = keys.into_iter().zip(values).collect();
        f
    }

    /// The config: the pasted JSON, then the rows on top; class from its own field.
    fn config(&self, errors: &mut FieldErrors) -> serde_json::Map<String, Value> {
        let mut map = serde_json::Map::new();
        if !self.json.trim().is_empty() {
            match serde_json::from_str::<Value>(&self.json) {
                Ok(Value::Object(m)) => map = m,
                Ok(_) => {
                    errors.insert(
                        "config_json".into(),
                        "write one JSON object: {\"key\": \"value\", …}".into(),
                    );
                }
                Err(e) => {
                    errors.insert(
                        "config_json".into(),
                        format!("not valid JSON ({e}); or leave it empty and use the rows"),
                    );
                }
            }
        }
        for (k, v) in &self.rows {
            if !k.is_empty() {
                map.insert(k.clone(), Value::String(v.clone()));
            } else if !v.is_empty() {
                errors.insert(
                    "config.".into(),
                    format!(
                        "a value ({}) has no key: write its key or empty the row",
                        v.chars().take(40).collect::<String>()
                    ),
                );
            }
        }
        if !self.class.is_empty() {
            map.insert("connector.class".into(), Value::String(self.class.clone()));
        }
        map
    }
}

/// One config row on the page, with the error for its key.
struct ConfigRow {
    key: String,
    value: String,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "connectors/new.html")]
struct NewPage {
    layout: Layout,
    connect: Vec<crate::clusters::ConnectCluster>,
    plugins: Vec<crate::connect::PluginInfo>,
    plugin_error: Option<String>,
    form: NewForm,
    rows: Vec<ConfigRow>,
    /// Errors for config keys that have no row (from the JSON, or keys the plugin requires).
    other_errors: Vec<(String, String)>,
    errors: FieldErrors,
}

/// Rows shown after a submission: what was typed plus `extra` empty ones; a value refused as
/// a plain-text secret is not shown again.
async fn new_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    mut form: NewForm,
    extra: usize,
    errors: FieldErrors,
) -> PageResult<NewPage> {
    who.require(Role::Admin, "add connectors by hand")?;
    let connect = crate::clusters::list(state.ctx(), who).await?;
    if !connect.iter().any(|c| c.id == form.cluster) {
        form.cluster = connect
            .iter()
            .find(|c| c.managed_by != "strimzi")
            .or(connect.first())
            .map(|c| c.id.clone())
            .unwrap_or_default();
    }
    let (plugins, plugin_error) = if form.cluster.is_empty() {
        (vec![], None)
    } else {
        match crate::clusters::check_health(
            &state.pool,
            &state.inner.ctx.secrets,
            who,
            &form.cluster,
        )
        .await?
        {
            h if h.reachable => (h.plugins, None),
            h => (
                vec![],
                Some(h.error.unwrap_or_else(|| "Connect is unreachable".into())),
            ),
        }
    };
    let mut rows: Vec<ConfigRow> = form
        .rows
        .iter()
        .filter(|(k, v)| !k.is_empty() || !v.is_empty())
        .map(|(k, v)| {
            let mut error = errors.get(&format!("config.{k}")).cloned();
            let secret = crate::connectors::plain_secret(k, v);
            if secret && error.is_none() {
                // Also when only a row was added: say why the value is gone, in the API's words.
                let mut why = FieldErrors::new();
                let one = [(k.clone(), Value::String(v.clone()))]
                    .into_iter()
                    .collect();
                connectors::validate_config(&one, &mut why);
                error = why.remove(&format!("config.{k}"));
            }
            ConfigRow {
                key: k.clone(),
                value: if secret { String::new() } else { v.clone() },
                error,
            }
        })
        .collect();
    // As many rows as were on the page (typed ones first), plus the one asked for.
    let wanted = (form.rows.len().max(rows.len()) + extra).max(3);
    while rows.len() < wanted {
        rows.push(ConfigRow {
            key: String::new(),
            value: String::new(),
            error: None,
        });
    }
    let shown: Vec<String> = rows.iter().map(|r| format!("config.{}", r.key)).collect();
    let other_errors = errors
        .iter()
        .filter(|(k, _)| {
            k.starts_with("config.") && *k != "config.connector.class" && !shown.contains(k)
        })
        .map(|(k, v)| {
            let key = k.trim_start_matches("config.");
            (
                if key.is_empty() {
                    "config".to_string()
                } else {
                    key.to_string()
                },
                v.clone(),
            )
        })
        .collect();
    // Pasted JSON holding a plain-text secret is not echoed back either.
    if serde_json::from_str::<serde_json::Map<String, Value>>(&form.json).is_ok_and(|m| {
        m.iter().any(|(k, v)| {
            v.as_str()
                .is_some_and(|s| crate::connectors::plain_secret(k, s))
        })
    }) {
        form.json.clear();
    }
    if form.state.is_empty() {
        form.state = "running".into();
    }
    Ok(NewPage {
        layout: Layout::new("Add a connector", paths::CONNECTORS, who, jar),
        connect,
        plugins,
        plugin_error,
        form,
        rows,
        other_errors,
        errors,
    })
}

#[derive(Deserialize)]
pub struct NewQuery {
    cluster: Option<String>,
}

#[handler]
pub async fn page_new(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<NewQuery>,
) -> PageResult<Response> {
    let form = NewForm {
        cluster: q.cluster.unwrap_or_default(),
        ..Default::default()
    };
    page_with_status(
        StatusCode::OK,
        &new_page(&state, &who, jar, form, 0, FieldErrors::new()).await?,
    )
}

/// `step=add_row` and `step=cluster` re-render the form (one more row; the chosen cluster's
/// plugins); `step=create` checks locally, then with the plugin, then stores it through the
/// same `connectors::create` as `POST /api/v1/connectors`.
#[handler]
pub async fn page_create(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    body: poem::Body,
) -> PageResult<Response> {
    who.require(Role::Admin, "add connectors by hand")?;
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let form = NewForm::parse(&bytes);
    if form.step != "create" {
        let extra = usize::from(form.step == "add_row");
        return page_with_status(
            StatusCode::OK,
            &new_page(&state, &who, jar, form, extra, FieldErrors::new()).await?,
        );
    }
    let mut errors = FieldErrors::new();
    let map = form.config(&mut errors);
    if let Err(why) = connectors::validate_name(&form.name) {
        errors.insert("name".into(), why);
    }
    let config = connectors::validate_config(&map, &mut errors);
    if errors.is_empty() {
        errors = match connectors::check_with_plugin(
            &state.pool,
            &state.inner.ctx.secrets,
            &who,
            &form.cluster,
            &form.name,
            &config,
        )
        .await
        {
            Ok(e) => e,
            Err(Error::Unavailable(m)) => [("config.connector.class".to_string(), m)].into(),
            Err(e) => return Err(e.into()),
        };
    }
    if errors.is_empty() {
        let input = ConnectorInput {
            name: Some(form.name.clone()),
            connect_cluster_id: Some(form.cluster.clone()),
            config: Some(map),
            desired_state: set(&form.state),
        };
        match connectors::create(state.ctx(), &who, &input).await {
            Ok(c) => {
                set_flash(
                    jar,
                    &format!(
                        "{} accepted by the plugin and added; the reconciler deploys it within seconds.",
                        c.name
                    ),
                );
                return Ok(redirect(req, &format!("/connectors/{}", c.id)));
            }
            Err(Error::Invalid { fields, .. }) => errors = fields,
            Err(Error::Conflict(m)) => {
                errors.insert("name".into(), m);
            }
            Err(e) => return Err(e.into()),
        }
    }
    page_with_status(
        StatusCode::UNPROCESSABLE_ENTITY,
        &new_page(&state, &who, jar, form, 0, errors).await?,
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
        &state.inner.ctx.reconciler,
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
pub(super) struct ClustersPage {
    layout: Layout,
    lists: std::sync::Arc<ClusterLists>,
    is_admin: bool,
    kafka_form: KafkaForm,
    kafka_errors: FieldErrors,
    connect_form: ConnectForm,
    connect_errors: FieldErrors,
    /// Set only on the response that registered a Connect cluster or issued it a new provider
    /// token: (heading, token), shown once with the worker settings that use it.
    created: Option<(String, String)>,
    /// How Connect workers reach this server (the request's origin, or the public URL).
    server_url: String,
    /// The SHA-512 of the config provider jar this server hands out, when it does.
    provider_jar_sha512: Option<String>,
}

/// The Kafka cluster form: text as typed (empty = not set); the SASL password is write-only.
#[derive(Debug, Default, Deserialize)]
pub struct KafkaForm {
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) bootstrap_servers: String,
    #[serde(default)]
    pub(super) security_protocol: String,
    #[serde(default)]
    pub(super) sasl_mechanism: String,
    #[serde(default)]
    pub(super) sasl_username: String,
    #[serde(default)]
    pub(super) sasl_password: String,
    #[serde(default)]
    pub(super) tls_ca_certificate: String,
}

/// The Kafka Connect cluster form; the basic-auth password is write-only.
#[derive(Debug, Default, Deserialize)]
pub struct ConnectForm {
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) url: String,
    #[serde(default)]
    pub(super) kafka_cluster_id: String,
    #[serde(default)]
    pub(super) managed_by: String,
    #[serde(default)]
    pub(super) basic_auth_user: String,
    #[serde(default)]
    pub(super) basic_auth_password: String,
    #[serde(default)]
    pub(super) tls_ca_certificate: String,
}

pub(super) fn set(v: &str) -> Option<String> {
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
            provider_token: None,
            basic_auth_password: set(&self.basic_auth_password).map(crate::secrets::Secret::new),
            tls_ca_certificate: set(&self.tls_ca_certificate),
        }
    }

    fn kept(self) -> Self {
        ConnectForm {
            basic_auth_password: String::new(),
            ..self
        }
    }
}

/// The clusters page's two lists, reused for a moment like every list page's (see
/// [`crate::snapshots::Snapshots::recent`]): each view read every cluster's row and parsed its
/// health document (a worker's plugin list), about 0.5 ms a view with 20 clusters.
pub(super) struct ClusterLists {
    /// (cluster, (reachable, broker count)) from the last health check.
    kafka: Vec<(kafka::KafkaCluster, Option<(bool, usize)>)>,
    /// (cluster, (version, plugin count)) from the last health check.
    connect: Vec<(crate::clusters::ConnectCluster, Option<(String, usize)>)>,
}

/// The page's parts other than the lists: forms, their errors, a token just created.
#[derive(Default)]
pub(super) struct ClusterForms {
    pub(super) kafka_form: KafkaForm,
    pub(super) kafka_errors: FieldErrors,
    pub(super) connect_form: ConnectForm,
    pub(super) connect_errors: FieldErrors,
    /// (heading, provider token): shown once.
    pub(super) created: Option<(String, String)>,
}

pub(super) async fn clusters_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    req: &Request,
    forms: ClusterForms,
) -> Result<ClustersPage, Error> {
    who.require(Role::Viewer, "see clusters")?;
    let lists = state
        .inner
        .snapshots
        .recent("clusters page", || cluster_lists(state, who))
        .await?;
    Ok(ClustersPage {
        layout: Layout::new("Clusters", paths::CLUSTERS, who, jar),
        lists,
        is_admin: who.role >= Role::Admin,
        kafka_form: forms.kafka_form,
        kafka_errors: forms.kafka_errors,
        connect_form: forms.connect_form,
        connect_errors: forms.connect_errors,
        created: forms.created,
        provider_jar_sha512: state.inner.provider_jar.as_ref().map(|j| j.sha512.clone()),
        server_url: server_url(state, req),
    })
}

async fn cluster_lists(state: &AppState, who: &Principal) -> Result<ClusterLists, Error> {
    let parse = |h: &Option<String>| {
        h.as_deref()
            .and_then(|h| serde_json::from_str::<Value>(h).ok())
    };
    let kafka = kafka::list(state.ctx(), who)
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
    let connect = crate::clusters::list(state.ctx(), who)
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
    Ok(ClusterLists { kafka, connect })
}

/// This server's URL as Connect workers should use it: `--public-url`, else the address the
/// request came to.
pub(super) fn server_url(state: &AppState, req: &Request) -> String {
    let host = req
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:8080");
    state
        .inner
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{host}"))
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
    match kafka::create(state.ctx(), &who, &form.input()).await {
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
    match crate::clusters::create(state.ctx(), &who, &form.input()).await {
        Ok(created) => {
            let forms = ClusterForms {
                created: Some((
                    format!(
                        "Connect cluster {} registered: set up its config provider now",
                        created.cluster.name
                    ),
                    created.provider_token,
                )),
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
    nav: Nav,
    topics: Vec<TopicInfo>,
    error: Option<String>,
    can_create: bool,
    can_delete: bool,
    form: TopicForm,
    /// Field errors of a refused create; "" holds one for the whole form.
    errors: FieldErrors,
}

/// The create-topic form, as typed.
#[derive(Debug, Deserialize)]
pub struct TopicForm {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    partitions: String,
    #[serde(default)]
    replication_factor: String,
    #[serde(default)]
    retention_ms: String,
    #[serde(default)]
    cleanup_policy: String,
}

impl Default for TopicForm {
    fn default() -> Self {
        TopicForm {
            cluster: String::new(),
            name: String::new(),
            partitions: "1".into(),
            replication_factor: "1".into(),
            retention_ms: String::new(),
            cleanup_policy: "delete".into(),
        }
    }
}

impl TopicForm {
    /// The API's input; numbers that do not parse are reported by field.
    fn input(&self) -> (NewTopicInput, FieldErrors) {
        let mut errors = FieldErrors::new();
        let mut number = |field: &str, v: &str, why: &str| -> Option<i64> {
            let v = v.trim();
            if v.is_empty() {
                return None;
            }
            v.parse().ok().or_else(|| {
                errors.insert(field.into(), why.into());
                None
            })
        };
        let input = NewTopicInput {
            name: set(&self.name),
            partitions: number("partitions", &self.partitions, "write a whole number, 1 to 1000"),
            replication_factor: number(
                "replication_factor",
                &self.replication_factor,
                "write a whole number, at most the number of brokers",
            ),
            retention_ms: number(
                "retention_ms",
                &self.retention_ms,
                "write milliseconds as a whole number (604800000 is 7 days), -1 to keep forever, or leave it empty",
            ),
            cleanup_policy: set(&self.cleanup_policy),
        };
        (input, errors)
    }
}

async fn topics_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    mut w: Window,
    form: TopicForm,
    errors: FieldErrors,
) -> Result<TopicsPage, Error> {
    who.require(Role::Viewer, "see Kafka clusters")?;
    let clusters = (state.inner.snapshots)
        .recent("kafka-clusters", || kafka::list(state.ctx(), who))
        .await?;
    let selected = Some(w.cluster.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| clusters.first().map(|c| c.id.clone()));
    w.cluster = selected.clone().unwrap_or_default();
    let (topics, error) = match &selected {
        Some(id) => match cluster_topics(state, who, id).await {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        },
        None => (None, None),
    };
    let none = listing::InMemory::new(Vec::new(), |t: &TopicInfo| &t.name, topic_state);
    let page = topics.as_deref().unwrap_or(&none).page(&w);
    let items = page.items.iter().map(|t| (*t).clone()).collect();
    let page = page.with_items(items);
    let mut nav = Nav::new(
        paths::TOPICS,
        ("topic", "topics"),
        &w,
        TOPIC_STATES,
        vec![],
        &page,
    );
    // The cluster is chosen by its own select above the list, not by this filter form.
    nav.clusters.clear();
    Ok(TopicsPage {
        layout: Layout::new("Topics", paths::TOPICS, who, jar),
        clusters: Vec::clone(&clusters),
        selected,
        nav,
        topics: page.items,
        error,
        can_create: who.role >= Role::Operator,
        can_delete: who.role >= Role::Admin,
        form,
        errors,
    })
}

#[handler]
pub async fn page_topics(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<ListQuery>,
) -> PageResult<Response> {
    page_with_status(
        StatusCode::OK,
        &topics_page(
            &state,
            &who,
            jar,
            q.window(TOPIC_STATES)?,
            TopicForm::default(),
            FieldErrors::new(),
        )
        .await?,
    )
}

/// Creates a topic through the same `kafka::create_topic` as the API.
#[handler]
pub async fn page_topic_create(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Form(form): Form<TopicForm>,
) -> PageResult<Response> {
    who.require(Role::Operator, "create topics")?;
    let (input, mut errors) = form.input();
    if errors.is_empty() {
        match kafka::create_topic(
            &state.pool,
            &state.inner.ctx.secrets,
            &who,
            &form.cluster,
            &input,
        )
        .await
        {
            Ok(t) => {
                forget_topics(&state, &form.cluster);
                set_flash(
                    jar,
                    &format!(
                        "Topic {} created with {} partition{}.",
                        t.name,
                        t.partitions.len(),
                        if t.partitions.len() == 1 { "" } else { "s" }
                    ),
                );
                // Filtered to the new topic: on a cluster with many topics it would be on
                // some later page.
                let view = Window {
                    cluster: form.cluster.clone(),
                    q: t.name.clone(),
                    ..Window::default()
                };
                return Ok(redirect(
                    req,
                    &format!("{}?{}", paths::TOPICS, view.query_string(1)),
                ));
            }
            Err(Error::Invalid { fields, .. }) => errors = fields,
            Err(Error::Conflict(m)) => {
                errors.insert("name".into(), m);
            }
            Err(Error::Unavailable(m)) => {
                errors.insert(String::new(), m);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let cluster = form.cluster.clone();
    page_with_status(
        StatusCode::UNPROCESSABLE_ENTITY,
        &topics_page(
            &state,
            &who,
            jar,
            Window {
                cluster,
                ..Window::default()
            },
            form,
            errors,
        )
        .await?,
    )
}

#[derive(Template)]
#[template(path = "connectors/topic_delete.html")]
struct TopicDeletePage {
    layout: Layout,
    cluster: kafka::KafkaCluster,
    name: String,
    /// None when Kafka could not be read (the page still lets the topic be deleted).
    topic: Option<crate::kafka::TopicInfo>,
    error: Option<String>,
    confirm: String,
    confirm_error: Option<String>,
}

/// What a refused delete shows again: the name as typed and why.
#[derive(Default)]
struct DeleteAttempt {
    confirm: String,
    confirm_error: Option<String>,
    error: Option<String>,
}

async fn topic_delete_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    (cluster, name): (&str, &str),
    attempt: DeleteAttempt,
) -> PageResult<TopicDeletePage> {
    who.require(Role::Admin, "delete topics")?;
    let cluster = kafka::get(&state.pool, who, cluster).await?;
    let (topic, read_error) = match kafka::topic(
        &state.pool,
        &state.inner.ctx.secrets,
        who,
        &cluster.id,
        name,
    )
    .await
    {
        Ok(t) => (Some(t), None),
        Err(Error::NotFound(m)) => return Err(Error::NotFound(m).into()),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(TopicDeletePage {
        layout: Layout::new(format!("Delete {name}"), paths::TOPICS, who, jar),
        cluster,
        name: name.to_string(),
        topic,
        error: attempt.error.or(read_error),
        confirm: attempt.confirm,
        confirm_error: attempt.confirm_error,
    })
}

#[handler]
pub async fn page_topic_delete_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path((cluster, name)): Path<(String, String)>,
) -> PageResult<Response> {
    page_with_status(
        StatusCode::OK,
        &topic_delete_page(
            &state,
            &who,
            jar,
            (&cluster, &name),
            DeleteAttempt::default(),
        )
        .await?,
    )
}

/// Deletes a topic through the same `kafka::delete_topic` as the API: the name typed again.
#[handler]
pub async fn page_topic_delete(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path((cluster, name)): Path<(String, String)>,
    Form(c): Form<Confirm>,
) -> PageResult<Response> {
    let attempt = match kafka::delete_topic(state.ctx(), &who, &cluster, &name, &c.confirm).await {
        Ok(()) => {
            forget_topics(&state, &cluster);
            set_flash(jar, &format!("Topic {name} deleted."));
            return Ok(redirect(
                req,
                &format!("{}?cluster={cluster}", paths::TOPICS),
            ));
        }
        Err(Error::Invalid { mut fields, .. }) => DeleteAttempt {
            confirm: c.confirm,
            confirm_error: fields.remove("confirm"),
            error: None,
        },
        Err(Error::Unavailable(m)) => DeleteAttempt {
            confirm: c.confirm,
            confirm_error: None,
            error: Some(m),
        },
        Err(e) => return Err(e.into()),
    };
    page_with_status(
        StatusCode::UNPROCESSABLE_ENTITY,
        &topic_delete_page(&state, &who, jar, (&cluster, &name), attempt).await?,
    )
}
