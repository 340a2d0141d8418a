//! Deliveries: `/api/v1/deliveries` and the pages (list, create form for both kinds, detail
//! with the newest objects of an object-storage delivery).

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Path, Query};
use poem::{handler, Body, Request, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::api::resource::{self};
use super::api::Ctx;
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::connectors::ConnectorView;
use crate::deliveries::config::{JdbcOptions, ObjectStorageOptions};
use crate::deliveries::{self, Delivery, DeliveryInput, Detail, Kind, Preview};
use crate::error::{Error, FieldErrors, Result};
use crate::listing::{self, ListQuery, Nav, CONNECTOR_STATES};

resource::resource! {
    /// `/api/v1/deliveries`: the standard operations (see [`resource`]).
    Deliveries: Delivery, DeliveryInput;
    page("deliveries", CONNECTOR_STATES) => deliveries::page,
    get(Detail) => deliveries::detail,
    preview(Preview) => deliveries::preview,
    create => deliveries::create,
    update => deliveries::update,
    delete => deliveries::delete,
    control(ConnectorView) => deliveries::act,
}

/// `GET /api/v1/deliveries/{id}/objects` options.
#[derive(Deserialize, JsonSchema)]
pub struct ObjectsQuery {
    /// How many of the newest objects to list (default 20).
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<usize>,
}

pub async fn api_objects(
    cx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<ObjectsQuery>,
) -> ApiResult<Json<deliveries::objects::ObjectList>> {
    let s = &cx.state;
    Ok(Json(
        deliveries::objects(
            &s.pool,
            &s.inner.ctx.secrets,
            &cx.who,
            &id,
            q.limit.unwrap_or(20),
        )
        .await?,
    ))
}

connector_actions! {
    "/deliveries", Deliveries;
    page_pause, Pause;
    page_resume, Resume;
    page_restart, Restart;
}

// ---- pages ----------------------------------------------------------------------------------

/// A row of the deliveries list: the delivery with the names it points at and its connector.
#[derive(Clone)]
struct ListRow {
    d: Delivery,
    pipeline: Option<String>,
    destination: Option<String>,
    connector: Option<crate::connectors::ConnectorView>,
}

#[derive(Template)]
#[template(path = "deliveries/index.html")]
struct ListPage<'a> {
    layout: Layout,
    nav: Nav,
    items: &'a [ListRow],
    can_create: bool,
    /// For the empty state: what has to exist before a delivery can.
    has_pipelines: bool,
    has_destinations: bool,
    bulk: Option<super::bulk::BulkBar>,
}

/// Connections a delivery can write to.
async fn destinations(
    state: &AppState,
    who: &Principal,
) -> crate::error::Result<Vec<crate::connections::ConnectionView>> {
    Ok(
        crate::connections::list(&state.pool, &state.inner.ctx.secrets, who)
            .await?
            .into_iter()
            .filter(|c| {
                c.connection
                    .capabilities
                    .contains(&crate::connections::Capability::Destination)
            })
            .collect(),
    )
}

/// A page of the deliveries list with what its rows show, and the cluster choices.
struct ListRows {
    page: listing::Page<ListRow>,
    clusters: Vec<(String, String)>,
    /// For the empty state's advice: whether a pipeline and a destination exist.
    has_pipelines: bool,
    has_destinations: bool,
}

async fn list_rows(
    state: &AppState,
    who: &Principal,
    w: &listing::Window,
) -> crate::error::Result<ListRows> {
    let page = deliveries::page(state.ctx(), who, w).await?;
    let pipelines = listing::names(
        &state.pool,
        "pipelines",
        page.items.iter().map(|d| &d.pipeline_id),
    )
    .await?;
    let dests = listing::names(
        &state.pool,
        "connections",
        page.items.iter().map(|d| &d.destination_connection_id),
    )
    .await?;
    let ids: Vec<String> = page.items.iter().map(|d| d.connector_id.clone()).collect();
    let mut connectors = crate::connectors::views(&state.pool, &ids).await?;
    let clusters = crate::clusters::connect::choices(&state.pool).await?;
    let items = page
        .items
        .iter()
        .map(|d| ListRow {
            pipeline: pipelines.get(&d.pipeline_id).cloned(),
            destination: dests.get(&d.destination_connection_id).cloned(),
            connector: connectors.remove(&d.connector_id),
            d: d.clone(),
        })
        .collect();
    // Only for the empty state's advice: what is missing before a first delivery.
    let unfiltered = w.q.is_empty() && w.state.is_empty() && w.cluster.is_empty();
    let (has_pipelines, has_destinations) = if page.total == 0 && unfiltered {
        (
            !crate::pipelines::list(&state.pool, who).await?.is_empty(),
            !destinations(state, who).await?.is_empty(),
        )
    } else {
        (true, true)
    };
    Ok(ListRows {
        page: page.with_items(items),
        clusters,
        has_pipelines,
        has_destinations,
    })
}

#[handler]
pub async fn page_list(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<ListQuery>,
    Query(sel): Query<super::bulk::SelectQuery>,
) -> PageResult<Response> {
    let w = q.window(CONNECTOR_STATES)?;
    let loaded = listing::cached(&state.inner.snapshots, "deliveries-page", &w, || {
        list_rows(&state, &who, &w)
    })
    .await?;
    let ListRows {
        page,
        clusters,
        has_pipelines,
        has_destinations,
    } = &*loaded;
    let nav = Nav::new(
        paths::DELIVERIES,
        ("delivery", "deliveries"),
        &w,
        CONNECTOR_STATES,
        clusters.clone(),
        page,
    );
    let items = &page.items;
    page_with_status(
        StatusCode::OK,
        &ListPage {
            layout: Layout::new("Deliveries", paths::DELIVERIES, &who, jar),
            items,
            can_create: who.role >= Role::Operator,
            has_pipelines: *has_pipelines,
            has_destinations: *has_destinations,
            bulk: super::bulk::BulkBar::new(&who, crate::bulk::Kind::Delivery, &nav, &sel),
            nav,
        },
    )
}

#[derive(Template)]
#[template(path = "deliveries/detail.html")]
struct DetailPage {
    layout: Layout,
    d: Detail,
    can_operate: bool,
    /// Operators and admins may delete a delivery (and so its connector).
    can_delete: bool,
    pipeline: Option<crate::pipelines::Pipeline>,
    /// Name and provider of the destination connection.
    destination: Option<(String, &'static str)>,
    /// Object storage: where the objects go, `s3://bucket/prefix`.
    location: Option<String>,
    /// The stored settings, as key and value.
    options: Vec<(String, String)>,
    statements: Vec<&'static str>,
    /// Open alerts about this delivery.
    alerts: Vec<crate::monitor::alerts::Alert>,
    /// The pipeline writes heartbeats, and this delivery carries their topic (freshness).
    heartbeat_on: bool,
    heartbeat_delivered: bool,
    /// The newest operations on this delivery (replays, a delete), newest first.
    operations: Vec<crate::operations::Operation>,
    /// Offset changes, newest first.
    history: Vec<crate::deliveries::replay::HistoryEntry>,
    /// `?sort=stale`: the per-table lag most behind first (kept by the page's polling).
    sort_stale: bool,
    /// Its schema policy and its tables' recent schema verdicts (`tables::schema`).
    schema: crate::tables::schema::DeliverySchema,
}

impl DetailPage {
    fn object_storage(&self) -> bool {
        self.d.delivery.kind == Kind::ObjectStorage
    }
    fn desired(&self) -> &str {
        self.d
            .connector
            .as_ref()
            .map(|c| c.desired_state.as_str())
            .unwrap_or("")
    }
    /// Wanted running but not running yet (just created, resumed or restarted).
    fn starting(&self) -> bool {
        self.d.connector.as_ref().is_some_and(|c| {
            c.desired_state == "running" && matches!(c.phase.as_str(), "PENDING" | "UNASSIGNED")
        })
    }
}

/// A JSON settings object as (key, value) lines; unset values are left out.
fn option_lines(options: &Value) -> Vec<(String, String)> {
    options
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[handler]
pub async fn page_detail(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Query(sort): Query<crate::web::pipelines::SortQuery>,
) -> PageResult<Response> {
    let mut d = deliveries::detail(state.ctx(), &who, &id).await?;
    if sort.stale() {
        crate::tables::freshness::sort_most_behind(&mut d.tables);
    }
    let pipeline = crate::pipelines::load(&state.pool, &d.delivery.pipeline_id)
        .await
        .ok();
    let dest = crate::connections::load(&state.pool, &d.delivery.destination_connection_id)
        .await
        .ok();
    let location = dest.as_ref().and_then(location);
    let mut heartbeat_delivered = false;
    if let Some(p) = pipeline.as_ref().filter(|p| p.heartbeat) {
        let tables: Vec<String> = p
            .tables
            .iter()
            .map(|t| crate::pipelines::config::table_topic(&p.topic_prefix, t))
            .collect();
        heartbeat_delivered = deliveries::topics_of(&state.pool, p)
            .await
            .iter()
            .any(|t| !tables.contains(t) && d.delivery.topics.contains(t));
    }
    let alerts = crate::monitor::alerts::list(&state.pool, &who, true)
        .await?
        .into_iter()
        .filter(|a| a.subject == d.delivery.name)
        .collect();
    let pipeline_heartbeat = pipeline.as_ref().is_some_and(|p| p.heartbeat);
    let operations = crate::operations::of_target(&state.pool, &d.delivery.id, 5).await?;
    let history = crate::deliveries::replay::history(&state.pool, &who, &d.delivery.id).await?;
    let schema = crate::tables::schema::delivery_schema(&state.pool, &d.delivery).await?;
    page_with_status(
        StatusCode::OK,
        &DetailPage {
            sort_stale: sort.stale(),
            layout: Layout::new(d.delivery.name.clone(), paths::DELIVERIES, &who, jar),
            can_operate: who.role >= Role::Operator,
            can_delete: who.role >= Role::Operator,
            pipeline,
            destination: dest.map(|c| (c.name, c.provider.label())),
            location,
            options: option_lines(&d.delivery.options),
            statements: match d.delivery.kind {
                Kind::Database => vec![deliveries::SEMANTICS],
                Kind::ObjectStorage => deliveries::OBJECT_STORAGE_STATEMENTS.to_vec(),
            },
            alerts,
            heartbeat_on: pipeline_heartbeat,
            heartbeat_delivered,
            operations,
            history,
            schema,
            d,
        },
    )
}

/// One listed object, ready to show.
struct ObjectRow {
    key: String,
    size: String,
    at: String,
    ago: Option<String>,
}

/// The delivery page's "Newest objects" card, loaded after the page (listing can take a while).
#[derive(Template)]
#[template(path = "deliveries/objects_partial.html")]
struct ObjectsPartial {
    id: String,
    rows: Vec<ObjectRow>,
    prefixes: Vec<String>,
    truncated: bool,
    error: Option<String>,
    /// When the listing was read (RFC 3339).
    listed_at: String,
}

/// Objects shown on the delivery page.
const NEWEST_SHOWN: usize = 20;

fn size_text(bytes: i64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes.max(0) as f64;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", units[i])
    } else {
        format!("{v:.1} {}", units[i])
    }
}

#[handler]
pub async fn page_objects(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> PageResult<Response> {
    // The fragment belongs in the delivery page, which loads it.
    if !super::home::is_htmx(req) {
        return Ok(redirect(req, &format!("/deliveries/{id}")));
    }
    let partial = match deliveries::objects(
        &state.pool,
        &state.inner.ctx.secrets,
        &who,
        &id,
        NEWEST_SHOWN,
    )
    .await
    {
        Ok(list) => {
            let now = chrono::Utc::now();
            ObjectsPartial {
                rows: list
                    .items
                    .into_iter()
                    .map(|o| ObjectRow {
                        size: size_text(o.size),
                        ago: crate::time::parse(&o.last_modified).map(|t| {
                            let secs = (now - t).num_seconds().max(0) as u64;
                            format!("{} ago", super::home::human_duration(secs))
                        }),
                        at: o.last_modified,
                        key: o.key,
                    })
                    .collect(),
                prefixes: list.prefixes,
                truncated: list.truncated,
                error: None,
                listed_at: crate::time::format(now),
                id,
            }
        }
        Err(e @ (Error::Forbidden { .. } | Error::NotFound(_) | Error::Unauthenticated)) => {
            return Err(e.into())
        }
        Err(e) => ObjectsPartial {
            id,
            rows: vec![],
            prefixes: vec![],
            truncated: false,
            error: Some(super::error::public_message(&e)),
            listed_at: crate::time::now(),
        },
    };
    // A listing that failed is part of the answer, not a failed request: htmx swaps it in.
    page_with_status(StatusCode::OK, &partial)
}

/// The create form: one page for both kinds. Choosing the pipeline and the destination reloads
/// it (the destination's provider decides the kind, and so the options shown); the rest is one
/// form posted with `step=review` (the plugin's verdict and the destination test) or
/// `step=create`.
#[derive(Debug, Default, Clone)]
pub struct Form {
    pub name: String,
    pub pipeline: String,
    pub destination: String,
    pub connect: String,
    pub topics: Vec<String>,
    pub insert_mode: String,
    pub delete_enabled: bool,
    pub table_name_format: String,
    pub schema_evolution: String,
    pub compression: String,
    pub records_per_file: String,
    pub tasks: String,
    pub key_template: String,
    pub error_policy: String,
    pub dead_letter_topic: String,
    /// warn or pause (`tables::schema`).
    pub schema_policy: String,
    pub step: String,
}

impl Form {
    /// The domain's defaults, as a new form shows them.
    fn defaults() -> Form {
        let db = JdbcOptions::default();
        let os = ObjectStorageOptions::default();
        Form {
            insert_mode: db.insert_mode,
            delete_enabled: db.delete_enabled,
            table_name_format: db.table_name_format,
            schema_evolution: db.schema_evolution,
            compression: os.compression,
            records_per_file: os.records_per_file.to_string(),
            tasks: os.tasks.to_string(),
            key_template: os.key_template,
            error_policy: os.error_policy,
            schema_policy: db.schema_policy,
            ..Default::default()
        }
    }

    /// A delivery's stored topics and options, as its edit form starts.
    fn stored(d: &Delivery) -> Result<Form, Error> {
        let unreadable = |e: serde_json::Error| {
            Error::Unexpected(anyhow::Error::new(e).context(format!("stored options of {}", d.id)))
        };
        let mut f = Form {
            topics: d.topics.clone(),
            ..Form::defaults()
        };
        match d.kind {
            Kind::Database => {
                let o: JdbcOptions =
                    serde_json::from_value(d.options.clone()).map_err(unreadable)?;
                f.insert_mode = o.insert_mode;
                f.delete_enabled = o.delete_enabled;
                f.table_name_format = o.table_name_format;
                f.schema_evolution = o.schema_evolution;
                f.error_policy = o.error_policy;
                f.dead_letter_topic = o.dead_letter_topic.unwrap_or_default();
                f.schema_policy = o.schema_policy;
            }
            Kind::ObjectStorage => {
                let o: ObjectStorageOptions =
                    serde_json::from_value(d.options.clone()).map_err(unreadable)?;
                f.compression = o.compression;
                f.records_per_file = o.records_per_file.to_string();
                f.tasks = o.tasks.to_string();
                f.key_template = o.key_template;
                f.error_policy = o.error_policy;
                f.dead_letter_topic = o.dead_letter_topic.unwrap_or_default();
                f.schema_policy = o.schema_policy;
            }
        }
        Ok(f)
    }

    fn parse(body: &[u8]) -> Form {
        let mut f = Form::default();
        for (k, v) in url::form_urlencoded::parse(body) {
            let v = v.into_owned();
            match k.as_ref() {
                "name" => f.name = v,
                "pipeline_id" => f.pipeline = v,
                "destination_connection_id" => f.destination = v,
                "connect_cluster_id" => f.connect = v,
                "topics" => f.topics.push(v),
                "insert_mode" => f.insert_mode = v,
                // A checkbox: absent when unticked.
                "delete_enabled" => f.delete_enabled = v == "true",
                "table_name_format" => f.table_name_format = v,
                "schema_evolution" => f.schema_evolution = v,
                "compression" => f.compression = v,
                "records_per_file" => f.records_per_file = v,
                "tasks" => f.tasks = v,
                "key_template" => f.key_template = v,
                "error_policy" => f.error_policy = v,
                "dead_letter_topic" => f.dead_letter_topic = v,
                "schema_policy" => f.schema_policy = v,
                "step" => f.step = v,
                _ => {}
            }
        }
        f
    }

    /// The domain input: only the options of the destination's kind (the others are refused
    /// by field), with numbers that do not parse reported under their field.
    fn input(&self, kind: Option<Kind>) -> Result<DeliveryInput, FieldErrors> {
        let opt = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
        let mut errors = FieldErrors::new();
        let mut number = |field: &str, text: &str, example: &str| -> Option<u64> {
            let text = text.trim().replace(['_', ' ', '\u{a0}'], "");
            if text.is_empty() {
                return None;
            }
            text.parse().ok().or_else(|| {
                errors.insert(
                    field.into(),
                    format!("a whole number without unit, e.g. {example}"),
                );
                None
            })
        };
        let mut input = DeliveryInput {
            name: opt(&self.name),
            pipeline_id: opt(&self.pipeline),
            destination_connection_id: opt(&self.destination),
            connect_cluster_id: opt(&self.connect),
            topics: Some(self.topics.clone()),
            error_policy: opt(&self.error_policy),
            dead_letter_topic: opt(&self.dead_letter_topic),
            schema_policy: opt(&self.schema_policy),
            ..Default::default()
        };
        match kind {
            Some(Kind::Database) => {
                input.insert_mode = opt(&self.insert_mode);
                input.delete_enabled = Some(self.delete_enabled);
                input.table_name_format = opt(&self.table_name_format);
                input.schema_evolution = opt(&self.schema_evolution);
            }
            Some(Kind::ObjectStorage) => {
                input.compression = opt(&self.compression);
                input.records_per_file =
                    number("records_per_file", &self.records_per_file, "10000");
                input.tasks = number("tasks", &self.tasks, "1");
                input.key_template = opt(&self.key_template);
            }
            None => {}
        }
        if errors.is_empty() {
            Ok(input)
        } else {
            Err(errors)
        }
    }

    /// What the edit form sends to `deliveries::update`: the input of the delivery's kind, where
    /// an emptied dead-letter field removes the stored topic (left out, the stored one stays).
    fn patch(&self, kind: Kind) -> Result<DeliveryInput, FieldErrors> {
        let mut input = self.input(Some(kind))?;
        input.dead_letter_topic = Some(self.dead_letter_topic.trim().to_string());
        Ok(input)
    }
}

/// Object storage: where a connection's objects go, `s3://bucket/prefix`.
fn location(c: &crate::connections::Connection) -> Option<String> {
    c.object_storage()
        .map(|s| format!("s3://{}/{}", s.bucket, s.prefix))
}

/// A check that could not run (Connect or the destination unreachable) is shown on the form.
/// htmx swaps in 2xx and 422 answers only; a plain form post gets the real status.
fn unavailable_status(req: &Request) -> StatusCode {
    if super::home::is_htmx(req) {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    }
}

/// What the create and the edit form share (`templates/deliveries/*_fields.html`): the values
/// as posted, the destination's kind, the pipeline's topics and the field errors.
struct Fields {
    form: Form,
    /// From the destination's provider.
    kind: Option<Kind>,
    /// The pipeline's topics a delivery may read, and which of them is its heartbeat.
    topics: Vec<String>,
    heartbeat_topic: Option<String>,
    /// Object storage: `s3://bucket/prefix` of the destination.
    location: Option<String>,
    errors: FieldErrors,
    /// The create form numbers its sections; the edit form has no steps.
    numbered: bool,
    max_records_per_file: u64,
    max_tasks: u64,
}

impl Fields {
    fn new(form: Form, kind: Option<Kind>, location: Option<String>, numbered: bool) -> Fields {
        Fields {
            form,
            kind,
            topics: vec![],
            heartbeat_topic: None,
            location,
            errors: FieldErrors::new(),
            numbered,
            max_records_per_file: deliveries::MAX_RECORDS_PER_FILE,
            max_tasks: deliveries::MAX_TASKS,
        }
    }
    /// Fills in the pipeline's topics, and says which one is its heartbeat.
    async fn topics_of(&mut self, state: &AppState, p: &crate::pipelines::Pipeline) {
        self.topics = deliveries::topics_of(&state.pool, p).await;
        let tables: Vec<String> = p
            .tables
            .iter()
            .map(|t| crate::pipelines::config::table_topic(&p.topic_prefix, t))
            .collect();
        self.heartbeat_topic = self.topics.iter().find(|t| !tables.contains(t)).cloned();
    }
    fn database(&self) -> bool {
        self.kind == Some(Kind::Database)
    }
    fn object_storage(&self) -> bool {
        self.kind == Some(Kind::ObjectStorage)
    }
    fn max_records_text(&self) -> String {
        let digits = self.max_records_per_file.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(' ');
            }
            out.push(c);
        }
        out
    }
    fn ticked(&self, topic: &str) -> bool {
        self.form.topics.iter().any(|t| t == topic)
    }
    /// Field errors no field of the form shows (plugin refusals are listed apart).
    fn other_errors(&self) -> Vec<(&String, &String)> {
        const SHOWN: &[&str] = &[
            "name",
            "pipeline_id",
            "destination_connection_id",
            "connect_cluster_id",
            "topics",
            "insert_mode",
            "delete_enabled",
            "table_name_format",
            "schema_evolution",
            "compression",
            "records_per_file",
            "tasks",
            "key_template",
            "error_policy",
            "dead_letter_topic",
            "schema_policy",
        ];
        self.errors
            .iter()
            .filter(|(k, _)| !SHOWN.contains(&k.as_str()) && !k.starts_with("config."))
            .collect()
    }
}

#[derive(Template)]
#[template(path = "deliveries/new.html")]
struct NewPage {
    layout: Layout,
    pipelines: Vec<crate::pipelines::Pipeline>,
    destinations: Vec<crate::connections::ConnectionView>,
    connect: Vec<crate::clusters::ConnectCluster>,
    f: Fields,
    preview: Option<Preview>,
    /// A check that could not run (Connect or the destination unreachable): nothing was created.
    problem: Option<String>,
}

/// Builds the page. `fresh`: a newly chosen pipeline, whose topics all start ticked and whose
/// Connect cluster is the default.
async fn new_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    mut form: Form,
    fresh: bool,
) -> Result<NewPage, Error> {
    let pipelines = crate::pipelines::list(&state.pool, who).await?;
    let destinations = destinations(state, who).await?;
    let chosen = destinations
        .iter()
        .find(|c| c.connection.id == form.destination);
    let kind = chosen.map(|c| Kind::of(c.connection.provider));
    let location = chosen.and_then(|c| location(&c.connection));
    let pipeline = pipelines.iter().find(|p| p.id == form.pipeline);
    if let Some(p) = pipeline.filter(|_| fresh && form.connect.is_empty()) {
        form.connect = p.connect_cluster_id.clone();
    }
    let mut f = Fields::new(form, kind, location, true);
    if let Some(p) = pipeline {
        f.topics_of(state, p).await;
        if fresh {
            f.form.topics = f.topics.clone();
        }
    }
    Ok(NewPage {
        layout: Layout::new("Create delivery", paths::DELIVERIES, who, jar),
        pipelines,
        destinations,
        connect: crate::clusters::list(state.ctx(), who).await?,
        f,
        preview: None,
        problem: None,
    })
}

#[derive(Deserialize)]
pub struct NewQuery {
    /// From a pipeline's page.
    pipeline: Option<String>,
    /// From the form reloading itself.
    pipeline_id: Option<String>,
    destination_connection_id: Option<String>,
    name: Option<String>,
}

#[handler]
pub async fn page_new(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<NewQuery>,
) -> PageResult<Response> {
    who.require(Role::Operator, "create deliveries")?;
    let form = Form {
        pipeline: q.pipeline_id.or(q.pipeline).unwrap_or_default(),
        destination: q.destination_connection_id.unwrap_or_default(),
        name: q.name.unwrap_or_default(),
        ..Form::defaults()
    };
    page_with_status(
        StatusCode::OK,
        &new_page(&state, &who, jar, form, true).await?,
    )
}

/// `step=review` previews (destination test and plugin validation); `step=create` creates.
#[handler]
pub async fn page_submit(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    body: Body,
) -> PageResult<Response> {
    who.require(Role::Operator, "create deliveries")?;
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let form = Form::parse(&bytes);
    let mut page = new_page(&state, &who, jar, form, false).await?;
    let input = match page.f.form.input(page.f.kind) {
        Ok(input) => input,
        Err(fields) => {
            page.f.errors = fields;
            return page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &page);
        }
    };
    let outcome = if page.f.form.step == "create" {
        match deliveries::create(state.ctx(), &who, &input).await {
            Ok(d) => {
                set_flash(
                    jar,
                    &format!(
                        "Delivery {} created: its sink connector is being deployed and starts from the earliest retained offsets.",
                        d.name
                    ),
                );
                return Ok(redirect(req, &format!("/deliveries/{}", d.id)));
            }
            Err(e) => Err(e),
        }
    } else {
        deliveries::preview(state.ctx(), &who, &input)
            .await
            .map(|p| page.preview = Some(p))
    };
    match outcome {
        Ok(()) => page_with_status(StatusCode::OK, &page),
        Err(Error::Invalid { fields, .. }) => {
            page.f.errors = fields;
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &page)
        }
        Err(Error::Conflict(m)) => {
            page.f.errors = [("name".to_string(), m)].into();
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &page)
        }
        Err(Error::Unavailable(m)) => {
            page.problem = Some(m);
            page_with_status(unavailable_status(req), &page)
        }
        Err(e) => Err(e.into()),
    }
}

/// The edit form: topics and options change; the name, pipeline, destination and Connect
/// cluster are shown, fixed (changing them makes a new delivery).
#[derive(Template)]
#[template(path = "deliveries/edit.html")]
struct EditPage {
    layout: Layout,
    d: Delivery,
    pipeline: Option<crate::pipelines::Pipeline>,
    /// Name and provider of the destination connection.
    destination: Option<(String, &'static str)>,
    connect: Option<String>,
    f: Fields,
    /// A check that could not run (Connect or the destination unreachable): nothing changed.
    problem: Option<String>,
}

/// The edit page with `form`, or with the stored settings when there is none yet.
async fn edit_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    id: &str,
    form: Option<Form>,
) -> Result<EditPage, Error> {
    who.require(Role::Operator, "change deliveries")?;
    let d = deliveries::load(&state.pool, id).await?;
    let form = match form {
        Some(form) => form,
        None => Form::stored(&d)?,
    };
    let pipeline = crate::pipelines::load(&state.pool, &d.pipeline_id)
        .await
        .ok();
    let dest = crate::connections::load(&state.pool, &d.destination_connection_id)
        .await
        .ok();
    let mut f = Fields::new(form, Some(d.kind), dest.as_ref().and_then(location), false);
    if let Some(p) = &pipeline {
        f.topics_of(state, p).await;
    }
    let connect = crate::clusters::get(&state.pool, who, &d.connect_cluster_id)
        .await
        .ok()
        .map(|c| c.name);
    Ok(EditPage {
        layout: Layout::new(format!("Edit {}", d.name), paths::DELIVERIES, who, jar),
        pipeline,
        destination: dest.map(|c| (c.name, c.provider.label())),
        connect,
        f,
        problem: None,
        d,
    })
}

#[handler]
pub async fn page_edit(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    page_with_status(
        StatusCode::OK,
        &edit_page(&state, &who, jar, &id, None).await?,
    )
}

/// Saves through `deliveries::update`, as the API does: the plugin validates the new config,
/// and a refusal shows the form again with the errors beside their fields.
#[handler]
pub async fn page_update(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    body: Body,
) -> PageResult<Response> {
    who.require(Role::Operator, "change deliveries")?;
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let mut page = edit_page(&state, &who, jar, &id, Some(Form::parse(&bytes))).await?;
    let patch = match page.f.form.patch(page.d.kind) {
        Ok(patch) => patch,
        Err(fields) => {
            page.f.errors = fields;
            return page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &page);
        }
    };
    match deliveries::update(state.ctx(), &who, &page.d.id, &patch).await {
        Ok(d) => {
            set_flash(jar, "Saved; the reconciler applies the new config.");
            Ok(redirect(req, &format!("/deliveries/{}", d.id)))
        }
        Err(Error::Invalid { fields, .. }) => {
            page.f.errors = fields;
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &page)
        }
        Err(Error::Unavailable(m)) => {
            page.problem = Some(m);
            page_with_status(unavailable_status(req), &page)
        }
        Err(e) => Err(e.into()),
    }
}

/// The delete confirmation: what goes (the sink connector) and what stays.
#[derive(Template)]
#[template(path = "deliveries/delete.html")]
struct DeletePage {
    layout: Layout,
    d: Delivery,
    connector_name: String,
    /// The Connect cluster the connector runs on.
    cluster: Option<String>,
    /// Name and provider of the destination connection.
    destination: Option<(String, &'static str)>,
    location: Option<String>,
    /// The connector was not gone from Connect in time: nothing was deleted yet.
    problem: Option<String>,
}

impl DeletePage {
    fn object_storage(&self) -> bool {
        self.d.kind == Kind::ObjectStorage
    }
}

async fn delete_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    id: &str,
) -> Result<DeletePage, Error> {
    who.require(Role::Operator, "delete deliveries")?;
    let d = deliveries::load(&state.pool, id).await?;
    let connector = crate::connectors::views(&state.pool, std::slice::from_ref(&d.connector_id))
        .await?
        .remove(&d.connector_id);
    let connector_name = connector
        .as_ref()
        .map(|c| c.name.clone())
        .unwrap_or_else(|| deliveries::connector_name(&d.name));
    let dest = crate::connections::load(&state.pool, &d.destination_connection_id)
        .await
        .ok();
    Ok(DeletePage {
        layout: Layout::new(format!("Delete {}", d.name), paths::DELIVERIES, who, jar),
        connector_name,
        cluster: connector.map(|c| c.connect_cluster),
        location: dest.as_ref().and_then(location),
        destination: dest.map(|c| (c.name, c.provider.label())),
        problem: None,
        d,
    })
}

#[handler]
pub async fn page_delete_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    page_with_status(StatusCode::OK, &delete_page(&state, &who, jar, &id).await?)
}

/// Deletes through `deliveries::delete`, which waits (up to 60 s) for the reconciler to remove
/// the connector from Connect.
#[handler]
pub async fn page_delete(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let mut page = delete_page(&state, &who, jar, &id).await?;
    match deliveries::delete(state.ctx(), &who, &page.d.id).await {
        Ok(()) => {
            set_flash(
                jar,
                &format!(
                    "Delivery {} deleted; its sink connector is gone from Connect. What it wrote stays in the destination.",
                    page.d.name
                ),
            );
            Ok(redirect(req, paths::DELIVERIES))
        }
        Err(Error::Unavailable(m)) => {
            page.problem = Some(m);
            page_with_status(unavailable_status(req), &page)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn posted(body: &str) -> Form {
        Form::parse(body.as_bytes())
    }

    #[test]
    fn the_form_sends_only_the_options_of_the_destinations_kind() {
        let f = posted("name=lake&pipeline_id=pl_1&destination_connection_id=cx_1&topics=a&topics=b&insert_mode=upsert&table_name_format=x&compression=none&records_per_file=500&tasks=2&key_template=%7B%7Btopic%7D%7D&error_policy=fail");
        let os = f.input(Some(Kind::ObjectStorage)).unwrap();
        assert_eq!(os.topics, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(os.compression.as_deref(), Some("none"));
        assert_eq!(os.records_per_file, Some(500));
        assert_eq!(os.tasks, Some(2));
        assert_eq!(os.key_template.as_deref(), Some("{{topic}}"));
        assert!(os.insert_mode.is_none() && os.table_name_format.is_none());
        assert!(os.delete_enabled.is_none());
        let db = f.input(Some(Kind::Database)).unwrap();
        assert_eq!(db.table_name_format.as_deref(), Some("x"));
        assert_eq!(
            db.delete_enabled,
            Some(false),
            "an unticked box means no deletes"
        );
        assert!(db.compression.is_none() && db.key_template.is_none() && db.tasks.is_none());
        assert!(
            db.flush_interval_ms.is_none(),
            "never sent: the sink has no such setting"
        );
    }

    #[test]
    fn no_ticked_topic_is_sent_as_an_empty_choice_not_as_all_topics() {
        let input = posted("name=x").input(None).unwrap();
        assert_eq!(input.topics, Some(vec![]));
    }

    #[test]
    fn numbers_that_do_not_parse_are_refused_under_their_field() {
        let errors = posted("records_per_file=lots&tasks=-1")
            .input(Some(Kind::ObjectStorage))
            .unwrap_err();
        assert!(errors["records_per_file"].contains("whole number"));
        assert!(errors.contains_key("tasks"));
        let ok = posted("records_per_file=10%20000&tasks=")
            .input(Some(Kind::ObjectStorage))
            .unwrap();
        assert_eq!(ok.records_per_file, Some(10_000), "digit groups are fine");
        assert_eq!(ok.tasks, None, "empty: the default");
    }

    fn stored(kind: Kind, options: Value) -> Delivery {
        Delivery {
            id: "dl_1".into(),
            name: "lake".into(),
            pipeline_id: "pl_1".into(),
            destination_connection_id: "cx_1".into(),
            connect_cluster_id: "cc_1".into(),
            kind,
            topics: vec!["a".into(), "b".into()],
            options,
            connector_id: "cn_1".into(),
            consumer_group: "connect-cluecdc-deliver-lake".into(),
            created_at: "2024-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn the_edit_form_starts_from_the_stored_settings_and_saving_it_unchanged_keeps_them() {
        let os = ObjectStorageOptions {
            compression: "none".into(),
            records_per_file: 500,
            tasks: 3,
            key_template: "x/{{topic}}-{{partition}}-{{start_offset}}".into(),
            error_policy: "continue".into(),
            dead_letter_topic: Some("lake.dlq".into()),
            ..Default::default()
        };
        let d = stored(Kind::ObjectStorage, json!(os));
        let f = Form::stored(&d).unwrap();
        assert_eq!(f.topics, d.topics);
        assert_eq!(f.records_per_file, "500");
        let patch = f.patch(Kind::ObjectStorage).unwrap();
        assert_eq!(patch.compression.as_deref(), Some("none"));
        assert_eq!(patch.records_per_file, Some(500));
        assert_eq!(patch.tasks, Some(3));
        assert_eq!(
            patch.key_template.as_deref(),
            Some(os.key_template.as_str())
        );
        assert_eq!(patch.error_policy.as_deref(), Some("continue"));
        assert_eq!(patch.dead_letter_topic.as_deref(), Some("lake.dlq"));
        assert!(
            patch.name.is_none() && patch.pipeline_id.is_none(),
            "fixed fields are not sent"
        );
        assert!(patch.insert_mode.is_none(), "no options of the other kind");

        let db = JdbcOptions {
            insert_mode: "insert".into(),
            delete_enabled: false,
            table_name_format: "r_${source.table}".into(),
            ..Default::default()
        };
        let patch = Form::stored(&stored(Kind::Database, json!(db)))
            .unwrap()
            .patch(Kind::Database)
            .unwrap();
        assert_eq!(patch.insert_mode.as_deref(), Some("insert"));
        assert_eq!(patch.delete_enabled, Some(false));
        assert_eq!(
            patch.table_name_format.as_deref(),
            Some("r_${source.table}")
        );
        assert_eq!(patch.schema_evolution.as_deref(), Some("basic"));
        assert!(patch.records_per_file.is_none() && patch.key_template.is_none());
    }

    #[test]
    fn an_emptied_dead_letter_field_removes_the_stored_topic_instead_of_keeping_it() {
        let patch = posted("error_policy=fail&dead_letter_topic=+")
            .patch(Kind::Database)
            .unwrap();
        assert_eq!(patch.dead_letter_topic.as_deref(), Some(""));
    }

    #[test]
    fn stored_options_that_do_not_read_are_an_error_not_the_defaults() {
        let d = stored(Kind::ObjectStorage, json!({"records_per_file": "many"}));
        assert!(Form::stored(&d).is_err());
    }

    #[test]
    fn sizes_carry_a_unit() {
        assert_eq!(size_text(0), "0 bytes");
        assert_eq!(size_text(396), "396 bytes");
        assert_eq!(size_text(2048), "2.0 KiB");
        assert_eq!(size_text(5 * 1024 * 1024 + 1), "5.0 MiB");
    }
}
