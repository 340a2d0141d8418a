//! Replications (MirrorMaker 2): `/api/v1/replications` and the pages (list, create form with
//! its preview, detail with what was copied and how far behind the target is).

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path, Query};
use poem::{handler, Request, Response};
use schemars::JsonSchema;
use serde::Deserialize;

use super::api::resource::{self, Action, Control};
use super::api::Ctx;
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::error::{Error, FieldErrors, Result};
use crate::replications::{self, Detail, Preview, Replication, ReplicationInput};

resource::resource! {
    /// `/api/v1/replications`: the standard operations (see [`resource`]); the three
    /// connectors of a replication act together.
    Replications: Replication, ReplicationInput;
    list => replications::list,
    get(Detail) => replications::detail,
    preview(Preview) => replications::preview,
    create => replications::create,
    update => replications::update,
    delete => replications::delete,
    control(Replication) => replications::act,
}

#[derive(Template)]
#[template(path = "replications/index.html")]
struct IndexPage<'a> {
    layout: Layout,
    items: &'a [(Replication, String, String)],
    can_create: bool,
    bulk: Option<super::bulk::BulkBar>,
}

async fn cluster_names(state: &AppState, who: &Principal) -> Result<Vec<(String, String)>, Error> {
    Ok(crate::clusters::kafka::list(state.ctx(), who)
        .await?
        .into_iter()
        .map(|k| (k.id, k.name))
        .collect())
}

#[handler]
pub async fn page_list(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(sel): Query<super::bulk::SelectQuery>,
) -> PageResult<Response> {
    // Kept like the other lists' pages (`Snapshots::recent`): every viewer sees the same rows.
    let items = state
        .inner
        .snapshots
        .recent("replications-page", || list_rows(&state, &who))
        .await?;
    page_with_status(
        StatusCode::OK,
        &IndexPage {
            layout: Layout::new("Replications", paths::REPLICATIONS, &who, jar),
            bulk: super::bulk::BulkBar::plain(
                &who,
                crate::bulk::Kind::Replication,
                items.len() as u64,
                &sel,
            ),
            items: &items,
            can_create: who.role >= Role::Operator,
        },
    )
}

/// The replications with their source and target clusters' names.
async fn list_rows(
    state: &AppState,
    who: &Principal,
) -> Result<Vec<(Replication, String, String)>> {
    let names = cluster_names(state, who).await?;
    let name = |id: &str| {
        names
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| id.to_string())
    };
    Ok(replications::list(state.ctx(), who)
        .await?
        .into_iter()
        .map(|r| {
            let (s, t) = (
                name(&r.source_kafka_cluster_id),
                name(&r.target_kafka_cluster_id),
            );
            (r, s, t)
        })
        .collect())
}

/// The create form, as posted (checkboxes repeat `pipeline_ids`).
#[derive(Debug, Default, Deserialize)]
pub struct NewForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    source_kafka_cluster_id: String,
    #[serde(default)]
    target_kafka_cluster_id: String,
    #[serde(default)]
    connect_cluster_id: String,
    #[serde(default)]
    topics: String,
    /// Instead of a pattern: the topics of this pipeline.
    #[serde(default)]
    pipeline_id: String,
    #[serde(default)]
    groups: String,
    #[serde(default)]
    replication_policy: String,
    #[serde(default)]
    separator: String,
    #[serde(default)]
    offset_syncs_location: String,
    #[serde(default)]
    sync_group_offsets: Option<String>,
    #[serde(default)]
    confirm_empty: Option<String>,
    #[serde(default)]
    action: String,
}

impl NewForm {
    fn input(&self) -> ReplicationInput {
        let some = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        ReplicationInput {
            name: some(&self.name),
            source_kafka_cluster_id: some(&self.source_kafka_cluster_id),
            target_kafka_cluster_id: some(&self.target_kafka_cluster_id),
            connect_cluster_id: some(&self.connect_cluster_id),
            topics: some(&self.topics),
            pipeline_ids: some(&self.pipeline_id).map(|p| vec![p]),
            groups: some(&self.groups),
            replication_policy: some(&self.replication_policy),
            separator: some(&self.separator),
            offset_syncs_location: some(&self.offset_syncs_location),
            sync_group_offsets: Some(self.sync_group_offsets.is_some()),
            confirm_empty: Some(self.confirm_empty.is_some()),
        }
    }

    /// The edit form's change: only what can change in place. `keep` as the pipeline (with no
    /// pattern) leaves the replication's pipelines as they are.
    fn patch(&self) -> ReplicationInput {
        let topics = self.topics.trim().to_string();
        let (topics, pipeline_ids) = match self.pipeline_id.trim() {
            "keep" if topics.is_empty() => (None, None),
            "" | "keep" => (Some(topics), None),
            p => (
                Some(topics).filter(|t| !t.is_empty()),
                Some(vec![p.to_string()]),
            ),
        };
        ReplicationInput {
            topics,
            pipeline_ids,
            groups: Some(self.groups.trim().to_string()),
            sync_group_offsets: Some(self.sync_group_offsets.is_some()),
            confirm_empty: Some(self.confirm_empty.is_some()),
            ..Default::default()
        }
    }
}

#[derive(Template)]
#[template(path = "replications/new.html")]
struct NewPage {
    layout: Layout,
    f: NewForm,
    kafka: Vec<(String, String)>,
    connect: Vec<(String, String)>,
    pipelines: Vec<(String, String)>,
    /// Never any on the create form (see the edit form).
    kept_pipelines: Vec<String>,
    preview: Option<Preview>,
    errors: FieldErrors,
    problem: Option<String>,
}

impl NewPage {
    fn identity(&self) -> bool {
        self.f.replication_policy == "identity"
    }
}

async fn pipeline_names(state: &AppState, who: &Principal) -> Result<Vec<(String, String)>, Error> {
    Ok(crate::pipelines::list(&state.pool, who)
        .await?
        .into_iter()
        .map(|p| (p.id, p.name))
        .collect())
}

async fn new_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    f: NewForm,
) -> Result<NewPage, Error> {
    who.require(Role::Operator, "create replications")?;
    Ok(NewPage {
        layout: Layout::new("New replication", paths::REPLICATIONS, who, jar),
        kafka: cluster_names(state, who).await?,
        connect: crate::clusters::connect::choices(&state.pool).await?,
        pipelines: pipeline_names(state, who).await?,
        kept_pipelines: Vec::new(),
        f,
        preview: None,
        errors: FieldErrors::new(),
        problem: None,
    })
}

#[handler]
pub async fn page_new(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    let f = NewForm {
        groups: ".*".into(),
        separator: ".".into(),
        replication_policy: "default".into(),
        offset_syncs_location: "target".into(),
        ..Default::default()
    };
    page_with_status(StatusCode::OK, &new_page(&state, &who, jar, f).await?)
}

#[handler]
pub async fn page_submit(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Form(f): Form<NewForm>,
) -> PageResult<Response> {
    let input = f.input();
    let create = f.action == "create";
    let mut page = new_page(&state, &who, jar, f).await?;
    let outcome = if create {
        match replications::create(state.ctx(), &who, &input).await {
            Ok(r) => {
                set_flash(
                    jar,
                    &format!(
                        "Replication {} created; the reconciler is starting its three connectors.",
                        r.name
                    ),
                );
                return Ok(redirect(req, &format!("/replications/{}", r.id)));
            }
            Err(e) => Err(e),
        }
    } else {
        replications::preview(state.ctx(), &who, &input)
            .await
            .map(|p| {
                page.preview = Some(p);
            })
    };
    let status = match outcome {
        Ok(()) => StatusCode::OK,
        Err(Error::Invalid { fields, .. }) => {
            page.errors = fields;
            if create {
                page.preview = replications::preview(state.ctx(), &who, &input).await.ok();
            }
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Err(Error::Conflict(m)) => {
            page.problem = Some(m);
            StatusCode::CONFLICT
        }
        Err(Error::Unavailable(m)) => {
            page.problem = Some(m);
            StatusCode::SERVICE_UNAVAILABLE
        }
        Err(e) => return Err(e.into()),
    };
    page_with_status(status, &page)
}

#[derive(Template)]
#[template(path = "replications/detail.html")]
struct DetailPage {
    layout: Layout,
    d: Detail,
    can_operate: bool,
}

impl DetailPage {
    fn paused(&self) -> bool {
        self.d
            .connectors
            .iter()
            .any(|c| c.desired_state == "paused")
    }
}

#[handler]
pub async fn page_detail(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let d = replications::detail(state.ctx(), &who, &id).await?;
    page_with_status(
        StatusCode::OK,
        &DetailPage {
            layout: Layout::new(d.replication.name.clone(), paths::REPLICATIONS, &who, jar),
            can_operate: who.role >= Role::Operator,
            d,
        },
    )
}

/// Pause, resume, restart and delete from the detail page.
#[handler]
pub async fn page_act(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path((id, action)): Path<(String, String)>,
) -> PageResult<Response> {
    who.require(
        Role::Operator,
        "pause, resume, restart or delete replications",
    )?;
    let _wake = &state.inner.ctx.reconciler;
    match action.as_str() {
        "pause" => {
            Replications::act(state.ctx(), &who, &id, Action::Pause).await?;
        }
        "resume" => {
            Replications::act(state.ctx(), &who, &id, Action::Resume).await?;
        }
        "restart" => {
            Replications::act(state.ctx(), &who, &id, Action::Restart).await?;
            set_flash(
                jar,
                "Restart requested: the reconciler restarts the three connectors and their tasks.",
            );
        }
        "delete" => {
            replications::delete(state.ctx(), &who, &id).await?;
            set_flash(
                jar,
                "Replication deleted; the copied topics stay on the target.",
            );
            return Ok(redirect(req, paths::REPLICATIONS));
        }
        _ => return Err(Error::NotFound(format!("action {action}")).into()),
    }
    Ok(redirect(req, &format!("/replications/{id}")))
}

/// Which consumer group's failover readiness to answer.
#[derive(Deserialize, JsonSchema)]
pub struct GroupQuery {
    /// The consumer group (one with checkpoints: see the detail's `progress.checkpoints`).
    #[serde(default)]
    group: String,
}

pub async fn api_readiness(
    cx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<GroupQuery>,
) -> ApiResult<Json<replications::Readiness>> {
    let s = &cx.state;
    Ok(Json(
        replications::readiness(s.ctx(), &cx.who, &id, &q.group).await?,
    ))
}

/// Failover readiness of one group (the first checkpointed one when none is chosen).
#[derive(Template)]
#[template(path = "replications/readiness.html")]
struct ReadinessPage {
    layout: Layout,
    id: String,
    r: Option<replications::Readiness>,
    problem: Option<String>,
}

#[handler]
pub async fn page_readiness(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Query(q): Query<GroupQuery>,
) -> PageResult<Response> {
    let rep = replications::load(&state.pool, &id).await?;
    let mut group = q.group;
    if group.is_empty() {
        let d = replications::detail(state.ctx(), &who, &id).await?;
        group = d
            .progress
            .checkpoints
            .first()
            .map(|g| g.group.clone())
            .unwrap_or_default();
    }
    let (r, problem) = match replications::readiness(state.ctx(), &who, &id, &group).await {
        Ok(r) => (Some(r), None),
        Err(Error::NotFound(m)) => (None, Some(format!("No {m}."))),
        Err(e) => return Err(e.into()),
    };
    page_with_status(
        StatusCode::OK,
        &ReadinessPage {
            layout: Layout::new(
                format!("Failover readiness: {}", rep.name),
                paths::REPLICATIONS,
                &who,
                jar,
            ),
            id: rep.id,
            r,
            problem,
        },
    )
}

/// The edit form: the create form's topic, group and offset-sync fields and its preview, with
/// what cannot change shown as facts.
#[derive(Template)]
#[template(path = "replications/edit.html")]
struct EditPage {
    layout: Layout,
    r: Replication,
    source_cluster: String,
    target_cluster: String,
    connect_cluster: String,
    f: NewForm,
    pipelines: Vec<(String, String)>,
    /// The names of the pipelines the replication takes the topics of, when it has several
    /// (the form chooses one; "keep" leaves them).
    kept_pipelines: Vec<String>,
    preview: Option<Preview>,
    errors: FieldErrors,
    problem: Option<String>,
}

async fn edit_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    id: &str,
    f: Option<NewForm>,
) -> Result<EditPage, Error> {
    who.require(Role::Operator, "change replications")?;
    let r = replications::load(&state.pool, id).await?;
    let kafka = cluster_names(state, who).await?;
    let name = |id: &str| {
        kafka
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| id.to_string())
    };
    let connect = crate::clusters::connect::choices(&state.pool)
        .await?
        .into_iter()
        .find(|(c, _)| *c == r.connect_cluster_id)
        .map(|(_, n)| n)
        .unwrap_or_else(|| r.connect_cluster_id.clone());
    let pipelines = pipeline_names(state, who).await?;
    let kept_pipelines: Vec<String> = if r.pipeline_ids.len() > 1 {
        r.pipeline_ids
            .iter()
            .map(|id| {
                pipelines
                    .iter()
                    .find(|(p, _)| p == id)
                    .map(|(_, n)| n.clone())
                    .unwrap_or_else(|| id.clone())
            })
            .collect()
    } else {
        Vec::new()
    };
    let f = f.unwrap_or_else(|| NewForm {
        topics: if r.pipeline_ids.is_empty() {
            r.topics.clone()
        } else {
            String::new()
        },
        pipeline_id: match r.pipeline_ids.as_slice() {
            [] => String::new(),
            [one] => one.clone(),
            _ => "keep".into(),
        },
        groups: r.groups.clone(),
        sync_group_offsets: r.sync_group_offsets.then(|| "true".into()),
        ..Default::default()
    });
    Ok(EditPage {
        layout: Layout::new(format!("Edit {}", r.name), paths::REPLICATIONS, who, jar),
        source_cluster: name(&r.source_kafka_cluster_id),
        target_cluster: name(&r.target_kafka_cluster_id),
        connect_cluster: connect,
        r,
        f,
        pipelines,
        kept_pipelines,
        preview: None,
        errors: FieldErrors::new(),
        problem: None,
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

/// Preview, then save through `replications::update`, as the API does; a refusal shows the
/// form again with the errors beside their fields.
#[handler]
pub async fn page_update(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Form(f): Form<NewForm>,
) -> PageResult<Response> {
    let patch = f.patch();
    let save = f.action == "save";
    let mut page = edit_page(&state, &who, jar, &id, Some(f)).await?;
    let (pool, store) = (&state.pool, &state.inner.ctx.secrets);
    let outcome = if save {
        match replications::update(state.ctx(), &who, &id, &patch).await {
            Ok(r) => {
                set_flash(
                    jar,
                    "Saved; the reconciler gives the connectors whose config changed to Connect.",
                );
                return Ok(redirect(req, &format!("/replications/{}", r.id)));
            }
            Err(e) => Err(e),
        }
    } else {
        replications::preview_update(pool, store, &who, &id, &patch)
            .await
            .map(|p| page.preview = Some(p))
    };
    let status = match outcome {
        Ok(()) => StatusCode::OK,
        Err(Error::Invalid { fields, .. }) => {
            page.errors = fields;
            if save {
                page.preview = replications::preview_update(pool, store, &who, &id, &patch)
                    .await
                    .ok();
            }
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Err(Error::Conflict(m)) => {
            page.problem = Some(m);
            StatusCode::CONFLICT
        }
        Err(Error::Unavailable(m)) => {
            page.problem = Some(m);
            StatusCode::SERVICE_UNAVAILABLE
        }
        Err(e) => return Err(e.into()),
    };
    page_with_status(status, &page)
}
