//! Pipelines: `/api/v1/pipelines` and the pages (list, create wizard, detail).

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Path, Query};
use poem::{handler, Body, Request, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::api::resource::{self};
use super::api::{Accepted, Ctx};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::connectors::ConnectorView;
use crate::error::{Error, FieldErrors, Result};
use crate::listing::{self, ListQuery, Nav, CONNECTOR_STATES};
use crate::pipelines::{self, Detail, Pipeline, PipelineInput, Preview};

resource::resource! {
    /// `/api/v1/pipelines`: the standard operations (see [`resource`]).
    Pipelines: Pipeline, PipelineInput;
    page("pipelines", CONNECTOR_STATES) => pipelines::page,
    get(Detail) => pipelines::detail,
    preview(Preview) => pipelines::preview,
    create => pipelines::create,
    control(ConnectorView) => pipelines::act,
}

/// `GET /api/v1/pipelines/{id}/schema`: per captured table its schema versions, the newest
/// change and each delivery's verdict on it (`tables::schema`).
pub async fn api_schema(
    cx: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<crate::tables::schema::PipelineSchema>> {
    Ok(Json(
        crate::tables::schema::pipeline_schema(&cx.state.pool, &cx.who, &id).await?,
    ))
}

/// What `PATCH /api/v1/pipelines/{id}` may change on a running pipeline: its tables only
/// (create a new pipeline for other settings; any other key is refused naming it).
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "PipelinePatch", extend("additionalProperties" = false))]
pub struct Patch {
    /// The full list of tables to capture (`schema.table`); tables added are snapshotted
    /// incrementally while the others keep streaming.
    #[schemars(required, with = "Vec<String>")]
    tables: Option<Vec<String>>,
    #[serde(flatten)]
    #[schemars(skip)]
    rest: Map<String, Value>,
}

/// The pipeline after a change of its tables.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "PipelineTablesChanged")]
pub struct TablesChanged {
    pub pipeline: Pipeline,
    /// Tables added by the change, which the connector snapshots incrementally.
    pub incremental_snapshot: Vec<String>,
}

pub async fn api_patch(
    cx: Ctx,
    Path(id): Path<String>,
    Json(patch): Json<Patch>,
) -> ApiResult<Json<TablesChanged>> {
    let who = &cx.who;
    who.require(Role::Operator, "change pipelines")?;
    if let Some(key) = patch.rest.keys().next() {
        return Err(Error::field(key, "only tables can change on a running pipeline; create a new pipeline for other settings").into());
    }
    let tables = patch
        .tables
        .ok_or_else(|| Error::field("tables", "send the full list of tables to capture"))?;
    let (pipeline, incremental_snapshot) =
        pipelines::set_tables(cx.state.ctx(), who, &id, tables).await?;
    Ok(Json(TablesChanged {
        pipeline,
        incremental_snapshot,
    }))
}

/// Which tables to read again (`POST /api/v1/pipelines/{id}/resnapshot`).
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "PipelineResnapshotInput")]
pub struct ResnapshotInput {
    /// Captured tables (`schema.table`) to snapshot again; empty or left out: all of them.
    #[serde(default)]
    tables: Vec<String>,
}

pub async fn api_resnapshot(
    cx: Ctx,
    Path(id): Path<String>,
    Json(input): Json<ResnapshotInput>,
) -> ApiResult<Accepted<pipelines::Resnapshot>> {
    let s = &cx.state;
    Ok(Accepted(
        pipelines::resnapshot(&s.pool, &s.inner.ctx.secrets, &cx.who, &id, input.tables).await?,
    ))
}

/// The typed confirmation of a pipeline reset (`POST /api/v1/pipelines/{id}/reset`).
#[derive(Deserialize, Default, JsonSchema)]
#[schemars(rename = "PipelineResetInput")]
pub struct ResetInput {
    /// The pipeline's name, typed to confirm: a reset discards the connector's offsets and
    /// its slot, and snapshots every table again.
    #[serde(default)]
    confirm: Option<String>,
}

/// A started operation: follow it at `GET /api/v1/operations/{operation_id}`.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "PipelineResetStarted")]
pub struct ResetStarted {
    pub operation_id: String,
}

pub async fn api_reset(
    cx: Ctx,
    Path(id): Path<String>,
    Json(input): Json<ResetInput>,
) -> ApiResult<Accepted<ResetStarted>> {
    let s = &cx.state;
    let operation_id = pipelines::reset(
        &s.pool,
        &s.inner.ctx.reconciler,
        &cx.who,
        &id,
        input.confirm.as_deref(),
    )
    .await?;
    Ok(Accepted(ResetStarted { operation_id }))
}

#[derive(Template)]
#[template(path = "pipelines/reset.html")]
struct ResetPage {
    layout: Layout,
    p: pipelines::Pipeline,
    explained: &'static [&'static str],
    confirm: String,
    error: Option<String>,
}

fn reset_page(who: &Principal, jar: &CookieJar, p: pipelines::Pipeline) -> ResetPage {
    ResetPage {
        layout: Layout::new(format!("Reset {}", p.name), paths::PIPELINES, who, jar),
        p,
        explained: pipelines::RESET_EXPLAINED,
        confirm: String::new(),
        error: None,
    }
}

#[handler]
pub async fn page_reset_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Operator, "reset pipelines")?;
    let p = pipelines::load(&state.pool, &id).await?;
    page_with_status(StatusCode::OK, &reset_page(&who, jar, p))
}

#[handler]
pub async fn page_reset(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    poem::web::Form(input): poem::web::Form<ResetInput>,
) -> PageResult<Response> {
    who.require(Role::Operator, "reset pipelines")?;
    let p = pipelines::load(&state.pool, &id).await?;
    let confirm = input.confirm.unwrap_or_default();
    let (status, why) = match pipelines::reset(
        &state.pool,
        &state.inner.ctx.reconciler,
        &who,
        &id,
        Some(&confirm),
    )
    .await
    {
        Ok(op) => {
            set_flash(jar, &format!("Reset of {} started.", p.name));
            return Ok(redirect(req, &format!("/operations/{op}")));
        }
        Err(Error::Invalid { fields, message }) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            fields.get("confirm").cloned().unwrap_or(message),
        ),
        Err(Error::Conflict(why)) => (StatusCode::CONFLICT, why),
        Err(e) => return Err(e.into()),
    };
    let mut page = reset_page(&who, jar, p);
    page.confirm = confirm;
    page.error = Some(why);
    page_with_status(status, &page)
}

/// `DELETE /api/v1/pipelines/{id}` options.
#[derive(Deserialize, JsonSchema)]
pub struct DeleteQuery {
    /// Also drop the source's replication slot (PostgreSQL): the stream's position is lost.
    #[serde(default)]
    drop_slot: bool,
}

pub async fn api_delete(
    cx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> ApiResult<Json<pipelines::Deleted>> {
    let s = &cx.state;
    Ok(Json(
        pipelines::delete(&s.pool, &s.inner.ctx.reconciler, &cx.who, &id, q.drop_slot).await?,
    ))
}

connector_actions! {
    "/pipelines", Pipelines;
    page_pause, Pause;
    page_resume, Resume;
    page_restart, Restart;
}

// ---- pages ----------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "pipelines/index.html")]
struct ListPage<'a> {
    layout: Layout,
    nav: Nav,
    items: &'a [(Pipeline, Option<crate::connectors::ConnectorView>)],
    can_create: bool,
    bulk: Option<super::bulk::BulkBar>,
}

/// A page of the pipelines list with each pipeline's connector, and the cluster choices.
async fn list_rows(
    state: &AppState,
    who: &Principal,
    w: &listing::Window,
) -> crate::error::Result<(
    listing::Page<(Pipeline, Option<crate::connectors::ConnectorView>)>,
    Vec<(String, String)>,
)> {
    let page = pipelines::page(state.ctx(), who, w).await?;
    let ids: Vec<String> = page.items.iter().map(|p| p.connector_id.clone()).collect();
    let mut connectors = crate::connectors::views(&state.pool, &ids).await?;
    let clusters = crate::clusters::connect::choices(&state.pool).await?;
    let items = page
        .items
        .iter()
        .map(|p| (p.clone(), connectors.remove(&p.connector_id)))
        .collect();
    Ok((page.with_items(items), clusters))
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
    let loaded = listing::cached(&state.inner.snapshots, "pipelines-page", &w, || {
        list_rows(&state, &who, &w)
    })
    .await?;
    let (page, clusters) = &*loaded;
    let nav = Nav::new(
        paths::PIPELINES,
        ("pipeline", "pipelines"),
        &w,
        CONNECTOR_STATES,
        clusters.clone(),
        page,
    );
    let items = &page.items;
    page_with_status(
        StatusCode::OK,
        &ListPage {
            layout: Layout::new("Pipelines", paths::PIPELINES, &who, jar),
            bulk: super::bulk::BulkBar::new(&who, crate::bulk::Kind::Pipeline, &nav, &sel),
            nav,
            items,
            can_create: who.role >= Role::Operator,
        },
    )
}

#[derive(Template)]
#[template(path = "pipelines/detail.html")]
struct DetailPage {
    layout: Layout,
    d: Detail,
    can_operate: bool,
    /// The re-snapshot form: what a refused submission ticked, and why it was refused.
    resnapshot_ticked: Vec<String>,
    resnapshot_error: Option<String>,
    /// The newest operations on this pipeline (snapshot signals, resets, a delete).
    operations: Vec<crate::operations::Operation>,
    /// `?sort=stale`: the per-table list stalest first (kept by the page's polling).
    sort_stale: bool,
    /// Schema versions, the newest change and the verdicts per delivery (`tables::schema`).
    schema: crate::tables::schema::PipelineSchema,
}

/// The detail pages' `?sort=` (`stale`: the per-table list stalest first).
#[derive(Deserialize, Default)]
pub struct SortQuery {
    sort: Option<String>,
}

impl SortQuery {
    pub fn stale(&self) -> bool {
        self.sort.as_deref() == Some("stale")
    }
}

#[handler]
pub async fn page_detail(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Query(sort): Query<SortQuery>,
) -> PageResult<Response> {
    let mut d = pipelines::detail(state.ctx(), &who, &id).await?;
    if sort.stale() {
        crate::tables::freshness::sort_stalest(&mut d.tables);
    }
    let operations = crate::operations::of_target(&state.pool, &d.pipeline.id, 5).await?;
    let schema = crate::tables::schema::pipeline_schema(&state.pool, &who, &d.pipeline.id).await?;
    page_with_status(
        StatusCode::OK,
        &DetailPage {
            schema,
            sort_stale: sort.stale(),
            operations,
            layout: Layout::new(d.pipeline.name.clone(), paths::PIPELINES, &who, jar),
            can_operate: who.role >= Role::Operator,
            d,
            resnapshot_ticked: vec![],
            resnapshot_error: None,
        },
    )
}

/// The `tables` a form ticked (one field per checkbox, so not a serde form struct).
async fn ticked_tables(body: Body) -> Result<Vec<String>, Error> {
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::field("tables", e.to_string()))?;
    Ok(url::form_urlencoded::parse(&bytes)
        .filter(|(k, _)| k == "tables")
        .map(|(_, v)| v.into_owned())
        .collect())
}

#[handler]
pub async fn page_resnapshot(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    body: Body,
) -> PageResult<Response> {
    let tables = ticked_tables(body).await?;
    let (status, why) = match pipelines::resnapshot(
        &state.pool,
        &state.inner.ctx.secrets,
        &who,
        &id,
        tables.clone(),
    )
    .await
    {
        Ok(sent) => {
            set_flash(
                jar,
                &format!(
                    "Re-snapshot of {} requested: the connector reads their rows again while it keeps streaming.",
                    sent.tables.join(", ")
                ),
            );
            return Ok(redirect(req, &format!("/pipelines/{id}")));
        }
        Err(Error::Invalid { fields, message }) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            fields.get("tables").cloned().unwrap_or(message),
        ),
        Err(Error::Conflict(why)) => (StatusCode::CONFLICT, why),
        Err(e) => return Err(e.into()),
    };
    let d = pipelines::detail(state.ctx(), &who, &id).await?;
    let operations = crate::operations::of_target(&state.pool, &d.pipeline.id, 5).await?;
    let schema = crate::tables::schema::pipeline_schema(&state.pool, &who, &d.pipeline.id).await?;
    page_with_status(
        status,
        &DetailPage {
            schema,
            operations,
            layout: Layout::new(d.pipeline.name.clone(), paths::PIPELINES, &who, jar),
            can_operate: who.role >= Role::Operator,
            d,
            resnapshot_ticked: tables,
            resnapshot_error: Some(why),
            sort_stale: false,
        },
    )
}

/// Changing a running pipeline's tables: the source's tables, the current ones ticked.
#[derive(Template)]
#[template(path = "pipelines/tables.html")]
struct TablesPage {
    layout: Layout,
    p: pipelines::Pipeline,
    tables: Vec<crate::connections::TableInfo>,
    /// What is ticked: the pipeline's tables, or what a refused submission ticked.
    selected: Vec<String>,
    table_error: Option<String>,
    errors: FieldErrors,
}

impl TablesPage {
    fn checked(&self, t: &crate::connections::TableInfo) -> bool {
        let name = format!("{}.{}", t.schema, t.name);
        self.selected.contains(&name)
    }
}

async fn tables_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    id: &str,
    selected: Option<Vec<String>>,
    errors: FieldErrors,
) -> Result<TablesPage, Error> {
    who.require(Role::Operator, "change pipelines")?;
    let p = pipelines::load(&state.pool, id).await?;
    let (tables, table_error) = match crate::connections::discover(
        &state.pool,
        &state.inner.ctx.secrets,
        who,
        &p.source_connection_id,
    )
    .await
    {
        Ok(d) => (
            d.items
                .into_iter()
                .filter(|t| {
                    ![
                        crate::pipelines::config::SIGNAL_TABLE,
                        crate::pipelines::config::HEARTBEAT_TABLE,
                    ]
                    .contains(&t.name.as_str())
                })
                .collect(),
            None,
        ),
        Err(e) => (vec![], Some(e.to_string())),
    };
    Ok(TablesPage {
        layout: Layout::new(format!("Tables of {}", p.name), paths::PIPELINES, who, jar),
        selected: selected.unwrap_or_else(|| p.tables.clone()),
        p,
        tables,
        table_error,
        errors,
    })
}

#[handler]
pub async fn page_tables(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    page_with_status(
        StatusCode::OK,
        &tables_page(&state, &who, jar, &id, None, FieldErrors::new()).await?,
    )
}

#[handler]
pub async fn page_tables_submit(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    body: Body,
) -> PageResult<Response> {
    who.require(Role::Operator, "change pipelines")?;
    let tables = ticked_tables(body).await?;
    match pipelines::set_tables(state.ctx(), &who, &id, tables.clone()).await {
        Ok((p, added)) => {
            let note = if added.is_empty() {
                String::new()
            } else {
                format!(
                    " {} will be snapshotted once the new configuration runs.",
                    added.join(", ")
                )
            };
            set_flash(
                jar,
                &format!(
                    "Tables of {} changed: now {}.{note}",
                    p.name,
                    p.tables.join(", ")
                ),
            );
            Ok(redirect(req, &format!("/pipelines/{}", p.id)))
        }
        Err(Error::Invalid { fields, .. }) => page_with_status(
            StatusCode::UNPROCESSABLE_ENTITY,
            &tables_page(&state, &who, jar, &id, Some(tables), fields).await?,
        ),
        Err(e) => Err(e.into()),
    }
}

/// The create wizard is one page whose sections fill in as choices are made: source → tables
/// (from discovery) → clusters and topics → review (the exact config and the plugin's verdict).
#[derive(Template)]
#[template(path = "pipelines/new.html")]
struct NewPage {
    layout: Layout,
    sources: Vec<crate::connections::ConnectionView>,
    kafka: Vec<crate::clusters::kafka::KafkaCluster>,
    connect: Vec<crate::clusters::ConnectCluster>,
    form: Form,
    tables: Vec<crate::connections::TableInfo>,
    table_error: Option<String>,
    preview: Option<Preview>,
    errors: crate::error::FieldErrors,
}

#[derive(Debug, Default, Clone)]
pub struct Form {
    pub name: String,
    pub source: String,
    pub kafka: String,
    pub connect: String,
    pub tables: Vec<String>,
    pub prefix: String,
    pub partitions: String,
    pub replication_factor: String,
    pub snapshot_mode: String,
    pub publication_mode: String,
    pub heartbeat: bool,
    pub step: String,
}

impl Form {
    fn parse(body: &[u8]) -> Form {
        let mut f = Form::default();
        for (k, v) in url::form_urlencoded::parse(body) {
            let v = v.into_owned();
            match k.as_ref() {
                "name" => f.name = v,
                "source_connection_id" => f.source = v,
                "kafka_cluster_id" => f.kafka = v,
                "connect_cluster_id" => f.connect = v,
                "tables" => f.tables.push(v),
                "topic_prefix" => f.prefix = v,
                "partitions" => f.partitions = v,
                "replication_factor" => f.replication_factor = v,
                "snapshot_mode" => f.snapshot_mode = v,
                "publication_mode" => f.publication_mode = v,
                "heartbeat" => f.heartbeat = v == "true",
                "step" => f.step = v,
                _ => {}
            }
        }
        f
    }

    fn input(&self) -> PipelineInput {
        let opt = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
        PipelineInput {
            name: opt(&self.name),
            source_connection_id: opt(&self.source),
            kafka_cluster_id: opt(&self.kafka),
            connect_cluster_id: opt(&self.connect),
            tables: Some(self.tables.clone()),
            topic_prefix: opt(&self.prefix),
            partitions: self.partitions.trim().parse().ok(),
            replication_factor: self.replication_factor.trim().parse().ok(),
            retention_ms: None,
            snapshot_mode: opt(&self.snapshot_mode),
            publication_mode: opt(&self.publication_mode),
            options: None,
            heartbeat: Some(self.heartbeat),
        }
    }

    pub fn selected(&self, table: &str) -> bool {
        self.tables.iter().any(|t| t == table)
    }
}

impl NewPage {
    fn checked(&self, t: &crate::connections::TableInfo) -> bool {
        self.form.selected(&format!("{}.{}", t.schema, t.name))
    }
}

async fn new_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    form: Form,
    preview: Option<Preview>,
    errors: crate::error::FieldErrors,
) -> PageResult<NewPage> {
    let sources: Vec<_> = crate::connections::list(&state.pool, &state.inner.ctx.secrets, who)
        .await?
        .into_iter()
        .filter(|c| c.connection.is_source() && c.connection.database().is_some())
        .collect();
    let (tables, table_error) = if form.source.is_empty() {
        (vec![], None)
    } else {
        match crate::connections::discover(&state.pool, &state.inner.ctx.secrets, who, &form.source)
            .await
        {
            Ok(d) => (
                d.items
                    .into_iter()
                    .filter(|t| t.name != crate::pipelines::config::SIGNAL_TABLE)
                    .collect(),
                None,
            ),
            Err(e) => (vec![], Some(e.to_string())),
        }
    };
    Ok(NewPage {
        layout: Layout::new("New pipeline", paths::PIPELINES, who, jar),
        sources,
        kafka: crate::clusters::kafka::list(state.ctx(), who).await?,
        connect: crate::clusters::list(state.ctx(), who).await?,
        form,
        tables,
        table_error,
        preview,
        errors,
    })
}

#[derive(Deserialize)]
pub struct NewQuery {
    source: Option<String>,
}

#[handler]
pub async fn page_new(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<NewQuery>,
) -> PageResult<Response> {
    who.require(Role::Operator, "create pipelines")?;
    let form = Form {
        source: q.source.unwrap_or_default(),
        partitions: "1".into(),
        replication_factor: "1".into(),
        snapshot_mode: "initial".into(),
        publication_mode: "filtered".into(),
        ..Default::default()
    };
    page_with_status(
        StatusCode::OK,
        &new_page(&state, &who, jar, form, None, Default::default()).await?,
    )
}

/// `step=review` previews (plugin validation included); `step=create` creates.
#[handler]
pub async fn page_submit(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    body: Body,
) -> PageResult<Response> {
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let form = Form::parse(&bytes);
    let input = form.input();
    if form.step == "create" {
        match pipelines::create(state.ctx(), &who, &input).await {
            Ok(p) => {
                set_flash(jar, &format!("Pipeline {} created: topics are ready and the connector is being deployed.", p.name));
                return Ok(redirect(req, &format!("/pipelines/{}", p.id)));
            }
            Err(Error::Invalid { fields, .. }) => {
                return page_with_status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &new_page(&state, &who, jar, form, None, fields).await?,
                )
            }
            Err(Error::Conflict(m)) => {
                return page_with_status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &new_page(
                        &state,
                        &who,
                        jar,
                        form,
                        None,
                        [("name".to_string(), m)].into(),
                    )
                    .await?,
                )
            }
            Err(e) => return Err(e.into()),
        }
    }
    match pipelines::preview(state.ctx(), &who, &input).await {
        Ok(p) => page_with_status(
            StatusCode::OK,
            &new_page(&state, &who, jar, form, Some(p), Default::default()).await?,
        ),
        Err(Error::Invalid { fields, .. }) => page_with_status(
            StatusCode::UNPROCESSABLE_ENTITY,
            &new_page(&state, &who, jar, form, None, fields).await?,
        ),
        Err(e) => Err(e.into()),
    }
}

#[derive(Template)]
#[template(path = "pipelines/delete.html")]
struct DeletePage {
    layout: Layout,
    d: Detail,
}

#[handler]
pub async fn page_delete_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Operator, "delete pipelines")?;
    let d = pipelines::detail(state.ctx(), &who, &id).await?;
    page_with_status(
        StatusCode::OK,
        &DeletePage {
            layout: Layout::new(
                format!("Delete {}", d.pipeline.name),
                paths::PIPELINES,
                &who,
                jar,
            ),
            d,
        },
    )
}

#[handler]
pub async fn page_delete(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    body: Body,
) -> PageResult<Response> {
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let drop_slot =
        url::form_urlencoded::parse(&bytes).any(|(k, v)| k == "drop_slot" && v == "true");
    let deleted = pipelines::delete(
        &state.pool,
        &state.inner.ctx.reconciler,
        &who,
        &id,
        drop_slot,
    )
    .await?;
    set_flash(
        jar,
        &format!(
            "Pipeline deleted; {} topic(s) kept{}.",
            deleted.topics_kept.len(),
            if deleted.slot_dropped {
                "; replication slot dropped"
            } else {
                ""
            }
        ),
    );
    Ok(redirect(req, paths::PIPELINES))
}
