//! Bulk actions: pause, resume, restart or delete many pipelines, deliveries, replications or
//! connectors in one request, as one audited change set.
//!
//! Invariants:
//! - Each item is carried out by the same service function as the single action (so roles,
//!   operation holds and delete operations are exactly theirs); a failure of one item is
//!   recorded beside it and never stops the others.
//! - The request is validated whole before anything changes: a bad field is a 422 naming it,
//!   and nothing is stored.
//! - One `bulk.<action>` audit row lists every item and what was planned for it; every audit
//!   row the items write carries the change set's id as its request id, so the audit page's
//!   request filter shows them together.
//! - A bulk is an operation (kind `bulk`) whose items carry their own state. The items run in
//!   the process that accepted the request, which keeps the operation's heartbeat fresh; the
//!   operations engine ends it once no item is left, and marks the items left as failed if
//!   that process stopped.

use crate::db;
use crate::db::Pool;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::connectors::{self, ConnectorView};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::listing::{ListQuery, Window, CONNECTOR_STATES, MAX_LIMIT};
use crate::operations::{self, NewOperation, Operation, Step};
use crate::reconcile::lease::now_ms;
use crate::reconcile::plan::DesiredState;

/// The most items one bulk request may act on (a filter matching more is refused).
pub const MAX_ITEMS: usize = MAX_LIMIT as usize;
/// How many items run at once (a delete waits for Connect; the others are quick).
const PARALLEL: usize = 8;
/// A bulk whose process has not touched it for this long has stopped: its open items fail.
const HEARTBEAT_LOST_MS: i64 = 120_000;

/// What a bulk item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "BulkKind")]
pub enum Kind {
    Pipeline,
    Delivery,
    Replication,
    Connector,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Pipeline,
        Kind::Delivery,
        Kind::Replication,
        Kind::Connector,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Pipeline => "pipeline",
            Kind::Delivery => "delivery",
            Kind::Replication => "replication",
            Kind::Connector => "connector",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pipeline => "pipelines",
            Kind::Delivery => "deliveries",
            Kind::Replication => "replications",
            Kind::Connector => "connectors",
        }
    }
    pub fn parse(s: &str) -> Option<Kind> {
        let s = s.trim().to_ascii_lowercase();
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s || k.plural() == s)
    }
    /// The list page (and the detail pages under it).
    pub fn path(self) -> &'static str {
        match self {
            Kind::Pipeline => "/pipelines",
            Kind::Delivery => "/deliveries",
            Kind::Replication => "/replications",
            Kind::Connector => "/connectors",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    /// The connector and all its tasks, or (`only_failed`) only what failed.
    Restart {
        only_failed: bool,
    },
    Delete,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Restart { .. } => "restart",
            Action::Delete => "delete",
        }
    }
    /// In words, for pages: "restart failed tasks".
    pub fn words(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Restart { only_failed: true } => "restart the failed tasks of",
            Action::Restart { only_failed: false } => "restart",
            Action::Delete => "delete",
        }
    }
    fn parse(action: &str, only_failed: Option<bool>) -> std::result::Result<Action, String> {
        match (action.trim().to_ascii_lowercase().as_str(), only_failed) {
            ("pause", None) => Ok(Action::Pause),
            ("resume", None) => Ok(Action::Resume),
            ("restart", f) => Ok(Action::Restart {
                only_failed: f.unwrap_or(false),
            }),
            ("delete", None) => Ok(Action::Delete),
            ("pause" | "resume" | "delete", Some(_)) => Err("only_failed".into()),
            _ => Err("action".into()),
        }
    }
}

/// `POST /api/v1/bulk`: `{action, only_failed?, targets: [{kind, id}]}` or `{action, filter}`
/// (one of `targets` and `filter`). Checked whole before anything changes.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "NewBulk")]
pub struct BulkInput {
    /// Required.
    #[serde(
        default,
        deserialize_with = "crate::wire::enum_string::<_, ActionName>"
    )]
    #[schemars(with = "Option<ActionName>")]
    pub action: Option<String>,
    /// With `restart` only: restart only the failed connectors and tasks.
    pub only_failed: Option<bool>,
    /// The items, at most 500.
    pub targets: Option<Vec<TargetInput>>,
    /// Every item of a list that matches this filter (at most 500).
    pub filter: Option<FilterInput>,
}

/// A bulk action (documents `NewBulk.action`).
#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "BulkActionName")]
pub enum ActionName {
    Pause,
    Resume,
    Restart,
    Delete,
}

/// One item of a bulk request.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "BulkTargetInput")]
pub struct TargetInput {
    /// Required.
    #[serde(default, deserialize_with = "crate::wire::enum_string::<_, Kind>")]
    #[schemars(with = "Option<Kind>")]
    pub kind: Option<String>,
    /// The item's id (a connector's name works too). Required.
    pub id: Option<String>,
}

/// The filter of a list page (`q`, `state`, `cluster`) and the list it applies to.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "BulkFilter")]
pub struct FilterInput {
    /// The list. Required.
    #[serde(default, deserialize_with = "crate::wire::enum_string::<_, Kind>")]
    #[schemars(with = "Option<Kind>")]
    pub kind: Option<String>,
    #[serde(flatten)]
    #[schemars(with = "ListFilter")]
    pub list: ListQuery,
}

/// The list filter fields a bulk filter takes (documents `BulkFilter`).
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct ListFilter {
    /// Matched anywhere in the name, case-insensitively.
    q: Option<String>,
    /// One of the list's states (as its list page offers them); empty for all.
    state: Option<String>,
    /// A cluster's id or name; empty for all.
    cluster: Option<String>,
}

/// One item as found, before anything is done to it.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub kind: Kind,
    pub id: String,
    pub name: String,
    pub connector_ids: Vec<String>,
    /// A connector's owner (`pipeline`, `delivery`, `replication`, `manual`); the kind itself
    /// for the others.
    #[serde(skip)]
    pub owner_kind: String,
    /// Pipelines: the deliveries that read it (a pipeline read by one cannot be deleted).
    #[serde(skip)]
    pub readers: Vec<String>,
}

/// What is planned for one item: its state (`pending` or `refused`) and the words for it.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    #[serde(flatten)]
    pub target: Target,
    pub state: &'static str,
    pub detail: String,
}

/// What the state of an item's connectors says about an action on it: Ok(what will happen) or
/// Err(why it is refused). Pure, so every rule is unit-tested.
pub fn plan_item(
    action: Action,
    t: &Target,
    connectors: &[&ConnectorView],
    held: Option<&(String, String)>,
) -> std::result::Result<String, String> {
    let noun = t.kind.as_str();
    if let Some((op, kind)) = held {
        return Err(format!(
            "operation {op} ({}) holds its connector until it finishes",
            kind.replace('_', " ")
        ));
    }
    if connectors.iter().any(|c| c.desired_state == "deleted") {
        return Err(format!("this {noun} is being deleted"));
    }
    let all = |s: &str| !connectors.is_empty() && connectors.iter().all(|c| c.desired_state == s);
    let failed = connectors
        .iter()
        .any(|c| c.phase == "FAILED" || c.tasks.iter().any(|t| t.state == "FAILED"));
    match action {
        Action::Pause if all("paused") => Err("already paused; nothing to do".into()),
        Action::Pause => Ok(format!(
            "pause: Connect pauses its connector{}",
            plural(connectors)
        )),
        Action::Resume if all("running") => Err("already running; nothing to do".into()),
        Action::Resume => Ok(format!(
            "resume: Connect runs its connector{} again",
            plural(connectors)
        )),
        Action::Restart { only_failed: true } if !failed => {
            Err("nothing failed: no failed connector or task to restart".into())
        }
        Action::Restart { only_failed: true } => {
            Ok("restart the failed connector and failed tasks only".into())
        }
        Action::Restart { only_failed: false } => Ok(format!(
            "restart its connector{} and all tasks",
            plural(connectors)
        )),
        Action::Delete if t.kind == Kind::Connector && t.owner_kind != "manual" => Err(format!(
            "this connector belongs to a {}; delete the {} instead",
            t.owner_kind, t.owner_kind
        )),
        Action::Delete if !t.readers.is_empty() => Err(format!(
            "read by deliver{} {}; delete those first",
            if t.readers.len() == 1 { "y" } else { "ies" },
            t.readers.join(", ")
        )),
        Action::Delete => Ok(match t.kind {
            Kind::Pipeline => {
                "delete: its connector leaves Connect; its topics and replication slot stay".into()
            }
            Kind::Delivery => {
                "delete: its sink connector leaves Connect; written data and topics stay".into()
            }
            Kind::Replication => {
                "delete: its MirrorMaker connectors leave Connect; replicated topics stay".into()
            }
            Kind::Connector => "delete: the connector leaves Connect".into(),
        }),
    }
}

fn plural(c: &[&ConnectorView]) -> &'static str {
    if c.len() > 1 {
        "s"
    } else {
        ""
    }
}

/// A checked request: the action and the items it names, found.
#[derive(Debug, Clone)]
pub struct Request {
    pub action: Action,
    pub targets: Vec<Target>,
}

/// Checks a request whole; every problem names its field (`action`, `targets[2].id`,
/// `filter.state`, …). Reads only.
pub async fn check(ctx: &Ctx, who: &Principal, input: &BulkInput) -> Result<Request> {
    let pool = &ctx.pool;
    let mut fields = FieldErrors::new();
    let action = match input.action.as_deref().map(str::trim) {
        None | Some("") => {
            fields.insert(
                "action".into(),
                "choose pause, resume, restart or delete".into(),
            );
            None
        }
        Some(a) => match Action::parse(a, input.only_failed) {
            Ok(a) => Some(a),
            Err(f) if f == "only_failed" => {
                fields.insert(
                    "only_failed".into(),
                    "only restart takes only_failed; leave it out".into(),
                );
                None
            }
            Err(_) => {
                fields.insert(
                    "action".into(),
                    format!("unknown action {a:?}: choose pause, resume, restart or delete"),
                );
                None
            }
        },
    };
    let mut targets = Vec::new();
    match (&input.targets, &input.filter) {
        (Some(_), Some(_)) => {
            fields.insert(
                "filter".into(),
                "give either targets or a filter, not both".into(),
            );
        }
        (None, None) => {
            fields.insert(
                "targets".into(),
                "give targets ([{kind, id}]) or a filter ({kind, q, state, cluster})".into(),
            );
        }
        (Some(list), None) if list.is_empty() => {
            fields.insert("targets".into(), "list at least one {kind, id}".into());
        }
        (Some(list), None) if list.len() > MAX_ITEMS => {
            fields.insert(
                "targets".into(),
                format!("at most {MAX_ITEMS} items per request; split it in several"),
            );
        }
        (Some(list), None) => {
            let mut seen = std::collections::HashSet::new();
            for (i, t) in list.iter().enumerate() {
                let Some(kind) = t.kind.as_deref().and_then(Kind::parse) else {
                    fields.insert(
                        format!("targets[{i}].kind"),
                        "choose pipeline, delivery, replication or connector".into(),
                    );
                    continue;
                };
                let id = t.id.as_deref().unwrap_or_default().trim();
                if id.is_empty() {
                    fields.insert(format!("targets[{i}].id"), "give the item's id".into());
                    continue;
                }
                match find(pool, kind, id).await {
                    Ok(found) => {
                        if seen.insert((kind, found.id.clone())) {
                            targets.push(found);
                        }
                    }
                    Err(Error::NotFound(_)) => {
                        fields.insert(
                            format!("targets[{i}].id"),
                            format!("no {} has the id {id:?}", kind.as_str()),
                        );
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        (None, Some(filter)) => match by_filter(ctx, who, filter).await {
            Ok(found) => targets = found,
            Err(Error::Invalid { fields: f, .. }) => fields.extend(f),
            Err(e) => return Err(e),
        },
    }
    Error::check(fields)?;
    let action = action.ok_or_else(|| Error::field("action", "choose an action"))?;
    Ok(Request { action, targets })
}

/// One item by its id (or name, where the single actions accept a name).
async fn find(pool: &Pool, kind: Kind, id: &str) -> Result<Target> {
    Ok(match kind {
        Kind::Pipeline => {
            let p = crate::pipelines::load(pool, id).await?;
            let readers = crate::deliveries::of_pipeline(pool, &p.id).await?;
            Target {
                kind,
                id: p.id,
                name: p.name,
                connector_ids: vec![p.connector_id],
                owner_kind: "pipeline".into(),
                readers,
            }
        }
        Kind::Delivery => {
            let d = crate::deliveries::load(pool, id).await?;
            Target {
                kind,
                id: d.id,
                name: d.name,
                connector_ids: vec![d.connector_id],
                owner_kind: "delivery".into(),
                readers: vec![],
            }
        }
        Kind::Replication => {
            let r = crate::replications::load(pool, id).await?;
            Target {
                kind,
                id: r.id,
                name: r.name,
                connector_ids: r.connector_ids,
                owner_kind: "replication".into(),
                readers: vec![],
            }
        }
        Kind::Connector => {
            let c = connectors::get(pool, &Principal::cli(), id).await?;
            Target {
                kind,
                id: c.id.clone(),
                name: c.name,
                connector_ids: vec![c.id],
                owner_kind: c.owner_kind,
                readers: vec![],
            }
        }
    })
}

/// Every item of a list matching the list page's filter (its `q`, `state` and `cluster`).
async fn by_filter(ctx: &Ctx, who: &Principal, f: &FilterInput) -> Result<Vec<Target>> {
    let pool = &ctx.pool;
    let Some(kind) = f.kind.as_deref().and_then(Kind::parse) else {
        return Err(Error::field(
            "filter.kind",
            "choose pipeline, delivery, replication or connector",
        ));
    };
    let prefixed = |e: Error| match e {
        Error::Invalid { fields, .. } => {
            let fields: FieldErrors = fields
                .into_iter()
                .map(|(k, v)| (format!("filter.{k}"), v))
                .collect();
            match Error::check(fields) {
                Err(e) => e,
                Ok(()) => Error::field("filter", "check the filter"),
            }
        }
        other => other,
    };
    // Replications are one short list without states or clusters: `q` only.
    if kind == Kind::Replication {
        let mut fields = FieldErrors::new();
        if !f.list.state.trim().is_empty() {
            fields.insert(
                "filter.state".into(),
                "replications filter by name (q) only; leave state out".into(),
            );
        }
        if !f.list.cluster.trim().is_empty() {
            fields.insert(
                "filter.cluster".into(),
                "replications filter by name (q) only; leave cluster out".into(),
            );
        }
        Error::check(fields)?;
        let w = Window {
            q: f.list.q.trim().into(),
            ..Window::default()
        };
        let all = crate::replications::list(ctx, who).await?;
        let matching: Vec<_> = all.into_iter().filter(|r| w.matches(&r.name)).collect();
        too_many(matching.len())?;
        return Ok(matching
            .into_iter()
            .map(|r| Target {
                kind,
                id: r.id,
                name: r.name,
                connector_ids: r.connector_ids,
                owner_kind: "replication".into(),
                readers: vec![],
            })
            .collect());
    }
    let list = ListQuery {
        page: String::new(),
        limit: MAX_LIMIT.to_string(),
        ..f.list.clone()
    };
    let w = list.window(CONNECTOR_STATES).map_err(prefixed)?;
    let ids: Vec<String> = match kind {
        Kind::Pipeline => {
            let p = crate::pipelines::page(ctx, who, &w).await?;
            too_many(p.total as usize)?;
            p.items.into_iter().map(|p| p.id).collect()
        }
        Kind::Delivery => {
            let p = crate::deliveries::page(ctx, who, &w).await?;
            too_many(p.total as usize)?;
            p.items.into_iter().map(|d| d.id).collect()
        }
        Kind::Connector => {
            let p = connectors::page(pool, who, &w).await?;
            too_many(p.total as usize)?;
            p.items.into_iter().map(|c| c.id).collect()
        }
        Kind::Replication => vec![],
    };
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        match find(pool, kind, &id).await {
            Ok(t) => out.push(t),
            Err(Error::NotFound(_)) => {} // deleted meanwhile
            Err(e) => return Err(e),
        }
    }
    if out.is_empty() {
        return Err(Error::field(
            "filter",
            format!("no {} matches this filter", kind.as_str()),
        ));
    }
    Ok(out)
}

fn too_many(n: usize) -> Result<()> {
    if n > MAX_ITEMS {
        return Err(Error::field(
            "filter",
            format!("{n} items match; at most {MAX_ITEMS} per request: narrow the filter"),
        ));
    }
    Ok(())
}

/// What would happen to each item, read now: the confirmation page and the request itself.
pub async fn plan(pool: &Pool, req: &Request) -> Result<Vec<Planned>> {
    let ids: Vec<String> = req
        .targets
        .iter()
        .flat_map(|t| t.connector_ids.iter().cloned())
        .collect();
    let views = connectors::views(pool, &ids).await?;
    let mut out = Vec::with_capacity(req.targets.len());
    for t in &req.targets {
        let mut held = None;
        for c in &t.connector_ids {
            if let Some(h) = operations::holding(pool, c).await? {
                held = Some(h);
                break;
            }
        }
        let cs: Vec<&ConnectorView> = t
            .connector_ids
            .iter()
            .filter_map(|c| views.get(c))
            .collect();
        let (state, detail) = match plan_item(req.action, t, &cs, held.as_ref()) {
            Ok(will) => ("pending", will),
            Err(why) => ("refused", why),
        };
        out.push(Planned {
            target: t.clone(),
            state,
            detail,
        });
    }
    Ok(out)
}

/// One item of a bulk as stored, with its connectors' state now.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
#[schemars(rename = "BulkItem")]
pub struct Item {
    /// The item's place in the request, from 0.
    pub position: i64,
    #[schemars(with = "Kind")]
    pub kind: String,
    #[sqlx(rename = "target_id")]
    pub id: String,
    pub name: String,
    #[schemars(with = "ItemState")]
    pub state: String,
    /// What will happen or happened to it, or why it was refused or failed.
    pub detail: String,
    #[serde(skip)]
    pub connector_ids: String,
    pub updated_at: String,
    /// Connect's state of its connectors now (ClueCDC's phase words, comma-separated for
    /// several connectors), filled in on reading.
    #[sqlx(skip)]
    pub connector_phase: Option<String>,
}

/// A bulk item's state (documents `BulkItem.state`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "BulkItemState")]
#[allow(dead_code)]
enum ItemState {
    Pending,
    Running,
    Done,
    /// Not carried out: `detail` says why (nothing to do, in use, held by an operation).
    Refused,
    Failed,
}

impl Item {
    pub fn href(&self) -> String {
        let path = Kind::parse(&self.kind).map(Kind::path).unwrap_or("/");
        format!("{path}/{}", self.id)
    }
    pub fn open(&self) -> bool {
        self.state == "pending" || self.state == "running"
    }
}

/// A bulk operation and its items.
#[derive(Debug, Clone, Serialize)]
pub struct Bulk {
    #[serde(flatten)]
    pub op: Operation,
    pub action: String,
    pub only_failed: bool,
    /// The id every audit row of this bulk carries (the audit page's request filter).
    pub change_set: String,
    /// Items by state: pending, running, done, refused, failed.
    pub counts: std::collections::BTreeMap<String, u64>,
    pub items: Vec<Item>,
}

/// A bulk action as the API answers it: its operation (as `GET /api/v1/operations/{id}`
/// shows it, kind `bulk`) and its items.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Bulk")]
pub struct BulkView {
    #[serde(flatten)]
    pub operation: operations::OperationView,
    #[schemars(with = "ActionName")]
    pub action: String,
    pub only_failed: bool,
    /// The id every audit row of this bulk carries (the audit page's request filter).
    pub change_set: String,
    /// Items by state: pending, running, done, refused, failed.
    pub counts: std::collections::BTreeMap<String, u64>,
    pub items: Vec<Item>,
}

impl Bulk {
    pub fn view(self) -> BulkView {
        BulkView {
            operation: operations::OperationView::from(&self.op),
            action: self.action,
            only_failed: self.only_failed,
            change_set: self.change_set,
            counts: self.counts,
            items: self.items,
        }
    }
    /// Items not yet finished (pending or running).
    pub fn open_items(&self) -> u64 {
        self.count("pending") + self.count("running")
    }
    pub fn count(&self, state: &str) -> u64 {
        self.counts.get(state).copied().unwrap_or(0)
    }
    pub fn finished(&self) -> bool {
        self.open_items() == 0
    }
    /// Items done whose connectors Kafka Connect has yet to show as asked (PENDING: the desired
    /// state is not yet observed).
    pub fn settling(&self) -> usize {
        self.items
            .iter()
            .filter(|i| {
                i.state == "done"
                    && i.connector_phase
                        .as_deref()
                        .is_some_and(|p| p.contains("PENDING"))
            })
            .count()
    }
}

pub async fn get(pool: &Pool, who: &Principal, id: &str) -> Result<Bulk> {
    who.require(Role::Viewer, "see bulk actions")?;
    let op = operations::load(pool, id).await?;
    if op.kind != "bulk" {
        return Err(Error::NotFound(format!("bulk action {id}")));
    }
    let mut items: Vec<Item> = db::query_as(
        "SELECT position, kind, target_id, name, state, detail, connector_ids, updated_at FROM bulk_items WHERE operation_id = $1 ORDER BY position",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let ids: Vec<String> = items
        .iter()
        .flat_map(|i| serde_json::from_str::<Vec<String>>(&i.connector_ids).unwrap_or_default())
        .collect();
    let views = connectors::views(pool, &ids).await?;
    let mut counts = std::collections::BTreeMap::new();
    for i in &mut items {
        *counts.entry(i.state.clone()).or_insert(0) += 1;
        let cs: Vec<String> = serde_json::from_str(&i.connector_ids).unwrap_or_default();
        let phases: Vec<&str> = cs
            .iter()
            .filter_map(|c| views.get(c).map(|v| v.phase.as_str()))
            .collect();
        i.connector_phase = if phases.is_empty() {
            None
        } else if phases.iter().all(|p| *p == phases[0]) {
            Some(phases[0].to_string())
        } else {
            Some(phases.join(", "))
        };
    }
    Ok(Bulk {
        action: op.params["action"].as_str().unwrap_or_default().to_string(),
        only_failed: op.params["only_failed"].as_bool().unwrap_or(false),
        change_set: op.params["change_set"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        op,
        counts,
        items,
    })
}

/// Records the bulk (operation, items, one audit row) in one transaction, then carries the
/// items out in the background; answers the operation's id at once.
pub async fn start(ctx: &Ctx, who: &Principal, input: &BulkInput) -> Result<String> {
    who.require(Role::Operator, "run bulk actions")?;
    let req = check(ctx, who, input).await?;
    let planned = plan(&ctx.pool, &req).await?;
    let change_set = crate::telemetry::current_request_id()
        .unwrap_or_else(|| format!("bulk-{}", uuid::Uuid::new_v4().simple()));
    let kinds: std::collections::BTreeSet<&str> =
        req.targets.iter().map(|t| t.kind.plural()).collect();
    let label = format!(
        "{} {} {}",
        req.action.name(),
        req.targets.len(),
        kinds.into_iter().collect::<Vec<_>>().join(" and ")
    );
    let only_failed = matches!(req.action, Action::Restart { only_failed: true });
    let mut tx = ctx.pool.begin().await?;
    let id = operations::insert(
        &mut tx,
        who,
        NewOperation {
            kind: "bulk",
            target_kind: "bulk",
            target_id: &change_set,
            target_name: &label,
            params: json!({"action": req.action.name(), "only_failed": only_failed, "change_set": change_set}),
        },
    )
    .await?;
    let now = crate::time::now();
    for (i, p) in planned.iter().enumerate() {
        db::query("INSERT INTO bulk_items (operation_id, position, kind, target_id, name, state, detail, connector_ids, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")
            .bind(&id)
            .bind(i as i64)
            .bind(p.target.kind.as_str())
            .bind(&p.target.id)
            .bind(&p.target.name)
            .bind(p.state)
            .bind(&p.detail)
            .bind(json!(p.target.connector_ids).to_string())
            .bind(&now)
            .execute(&mut *tx)
            .await?;
    }
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: &format!("bulk.{}", req.action.name()),
            target_kind: "bulk",
            target_id: &id,
            outcome: Outcome::Success,
            summary: json!({
                "change_set": change_set,
                "only_failed": only_failed,
                "items": planned.iter().map(|p| json!({"kind": p.target.kind, "id": p.target.id, "name": p.target.name, "plan": p.state, "detail": p.detail})).collect::<Vec<_>>(),
            }),
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(operation = %id, change_set = %change_set, items = planned.len(), action = req.action.name(), "bulk action started");
    let run = Runner {
        ctx: ctx.clone(),
        who: who.clone(),
        action: req.action,
        id: id.clone(),
    };
    let items: Vec<(i64, Target)> = planned
        .into_iter()
        .enumerate()
        .filter(|(_, p)| p.state == "pending")
        .map(|(i, p)| (i as i64, p.target))
        .collect();
    tokio::spawn(crate::telemetry::REQUEST_ID.scope(change_set, run.run(items)));
    Ok(id)
}

struct Runner {
    ctx: Ctx,
    who: Principal,
    action: Action,
    id: String,
}

impl Runner {
    async fn run(self, items: Vec<(i64, Target)>) {
        let beat = async {
            loop {
                self.heartbeat().await;
                tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            }
        };
        let work = futures::stream::iter(items)
            .map(|(pos, t)| self.item(pos, t))
            .buffer_unordered(PARALLEL)
            .collect::<Vec<()>>();
        tokio::select! {
            _ = work => {}
            _ = beat => {}
        }
        self.heartbeat().await;
        tracing::info!(operation = %self.id, "bulk action's items finished");
    }

    async fn heartbeat(&self) {
        let _ = db::query(
            "UPDATE operations SET step_started_at = $1 WHERE id = $2 AND state = 'running'",
        )
        .bind(now_ms())
        .bind(&self.id)
        .execute(&self.ctx.pool)
        .await;
    }

    async fn set(&self, pos: i64, state: &str, detail: &str) {
        let done = db::query("UPDATE bulk_items SET state = $1, detail = $2, updated_at = $3 WHERE operation_id = $4 AND position = $5")
            .bind(state)
            .bind(detail)
            .bind(crate::time::now())
            .bind(&self.id)
            .bind(pos)
            .execute(&self.ctx.pool)
            .await;
        if let Err(e) = done {
            tracing::error!(operation = %self.id, position = pos, error = %e, "recording a bulk item failed");
        }
    }

    async fn item(&self, pos: i64, t: Target) {
        self.set(pos, "running", &format!("{}…", self.action.words()))
            .await;
        let outcome = act(&self.ctx, &self.who, self.action, &t).await;
        match outcome {
            Ok(done) => self.set(pos, "done", &done).await,
            // Refusals: held by an operation, in use, a role that cannot, gone meanwhile.
            Err(e @ (Error::Conflict(_) | Error::Forbidden { .. } | Error::NotFound(_))) => {
                self.set(pos, "refused", &e.to_string()).await
            }
            Err(e) => {
                tracing::warn!(operation = %self.id, kind = t.kind.as_str(), id = %t.id, error = format!("{e:#}"), "bulk item failed");
                let msg = match e {
                    Error::Unexpected(_) => {
                        "something went wrong on the server; the log has the details under this change set".to_string()
                    }
                    other => other.to_string(),
                };
                self.set(pos, "failed", &msg).await
            }
        }
    }
}

/// Carries out one item through the single action's own service function.
async fn act(ctx: &Ctx, who: &Principal, action: Action, t: &Target) -> Result<String> {
    let (pool, wake) = (&ctx.pool, &*ctx.reconciler);
    use crate::{deliveries, pipelines, replications};
    let id = t.id.as_str();
    let state = match action {
        Action::Pause => Some(DesiredState::Paused),
        Action::Resume => Some(DesiredState::Running),
        _ => None,
    };
    match (t.kind, action) {
        (Kind::Pipeline, Action::Pause | Action::Resume) => {
            pipelines::set_state(pool, wake, who, id, state.unwrap_or(DesiredState::Running))
                .await
                .map(|_| ())?
        }
        (Kind::Pipeline, Action::Restart { only_failed }) => {
            pipelines::restart(pool, wake, who, id, only_failed)
                .await
                .map(|_| ())?
        }
        (Kind::Pipeline, Action::Delete) => pipelines::delete(pool, wake, who, id, false)
            .await
            .map(|_| ())?,
        (Kind::Delivery, Action::Pause | Action::Resume) => {
            deliveries::set_state(pool, wake, who, id, state.unwrap_or(DesiredState::Running))
                .await
                .map(|_| ())?
        }
        (Kind::Delivery, Action::Restart { only_failed }) => {
            deliveries::restart(pool, wake, who, id, only_failed)
                .await
                .map(|_| ())?
        }
        (Kind::Delivery, Action::Delete) => deliveries::delete(ctx, who, id).await?,
        (Kind::Replication, Action::Pause | Action::Resume) => {
            replications::set_state(pool, wake, who, id, state.unwrap_or(DesiredState::Running))
                .await
                .map(|_| ())?
        }
        (Kind::Replication, Action::Restart { only_failed }) => {
            replications::restart(pool, wake, who, id, only_failed)
                .await
                .map(|_| ())?
        }
        (Kind::Replication, Action::Delete) => replications::delete(ctx, who, id).await?,
        (Kind::Connector, Action::Pause | Action::Resume) => {
            connectors::set_state(pool, wake, who, id, state.unwrap_or(DesiredState::Running))
                .await
                .map(|_| ())?
        }
        (Kind::Connector, Action::Restart { only_failed }) => {
            connectors::request_restart(pool, wake, who, id, only_failed)
                .await
                .map(|_| ())?
        }
        (Kind::Connector, Action::Delete) => {
            if t.owner_kind != "manual" {
                return Err(Error::Conflict(format!(
                    "this connector belongs to a {}; delete the {} instead",
                    t.owner_kind, t.owner_kind
                )));
            }
            connectors::set_state(pool, wake, who, id, DesiredState::Deleted)
                .await
                .map(|_| ())?
        }
    }
    Ok(match action {
        Action::Pause => "paused: ClueCDC asked Connect to pause it".into(),
        Action::Resume => "resumed: ClueCDC asked Connect to run it again".into(),
        Action::Restart { only_failed: true } => "restart of what failed requested".into(),
        Action::Restart { only_failed: false } => "restart requested".into(),
        Action::Delete => "deleted".into(),
    })
}

/// The operations engine's step for a bulk: done once no item is open; if the process running
/// the items stopped (no heartbeat), the open items fail with the reason.
pub async fn step(ctx: &operations::Ctx<'_>, op: &Operation) -> Step {
    let open: std::result::Result<i64, sqlx::Error> = db::query_scalar(
        "SELECT COUNT(*) FROM bulk_items WHERE operation_id = $1 AND state IN ('pending', 'running')",
    )
    .bind(&op.id)
    .fetch_one(&ctx.pool)
    .await;
    match open {
        Err(e) => Step::Wait(e.to_string()),
        Ok(0) => Step::Done,
        Ok(n) if now_ms() - op.step_started_at > HEARTBEAT_LOST_MS => {
            let failed = db::query("UPDATE bulk_items SET state = 'failed', detail = CASE state WHEN 'pending' THEN 'not run: the ClueCDC process carrying this bulk action out stopped first; nothing was changed for this item' ELSE 'interrupted: the ClueCDC process carrying this bulk action out stopped while it ran; check the item''s own page' END, updated_at = $1 WHERE operation_id = $2 AND state IN ('pending', 'running')")
                .bind(crate::time::now())
                .bind(&op.id)
                .execute(&ctx.pool)
                .await;
            match failed {
                Ok(_) => Step::Interrupted(format!(
                    "the process carrying it out stopped with {n} item(s) left; run the action again for them"
                )),
                Err(e) => Step::Wait(e.to_string()),
            }
        }
        Ok(n) => Step::Wait(format!("{n} item(s) left")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: Kind) -> Target {
        Target {
            kind,
            id: "x".into(),
            name: "x".into(),
            connector_ids: vec!["c".into()],
            owner_kind: kind.as_str().into(),
            readers: vec![],
        }
    }

    fn conn(desired: &str, phase: &str, task: &str) -> ConnectorView {
        ConnectorView {
            id: "c".into(),
            name: "c".into(),
            connect_cluster_id: "cc".into(),
            connect_cluster: "cc".into(),
            pipeline_id: None,
            delivery_id: None,
            owner_kind: "delivery".into(),
            config: Default::default(),
            desired_state: desired.into(),
            generation: 1,
            observed_generation: 1,
            phase: phase.into(),
            observed_state: Some(phase.into()),
            tasks: vec![connectors::TaskView {
                id: 0,
                state: task.into(),
                worker_id: "w".into(),
                trace: None,
            }],
            trace: None,
            message: None,
            observed_at: None,
            observed_age_secs: None,
            stale: false,
            restart_attempts: 0,
            offsets: None,
            offsets_at: None,
            drift: vec![],
            restart_requested_by: None,
        }
    }

    #[test]
    fn actions_parse_and_only_restart_takes_only_failed() {
        assert_eq!(Action::parse("Pause", None), Ok(Action::Pause));
        assert_eq!(
            Action::parse("restart", Some(true)),
            Ok(Action::Restart { only_failed: true })
        );
        assert_eq!(
            Action::parse("restart", None),
            Ok(Action::Restart { only_failed: false })
        );
        assert_eq!(
            Action::parse("pause", Some(true)),
            Err("only_failed".into())
        );
        assert_eq!(Action::parse("stop", None), Err("action".into()));
        assert_eq!(Kind::parse("Deliveries"), Some(Kind::Delivery));
        assert_eq!(Kind::parse("topic"), None);
    }

    #[test]
    fn an_item_held_by_an_operation_is_refused_naming_it_whatever_the_action() {
        let c = conn("running", "RUNNING", "RUNNING");
        let held = ("op-1".to_string(), "replay".to_string());
        for a in [Action::Pause, Action::Resume, Action::Delete] {
            let why = plan_item(a, &target(Kind::Delivery), &[&c], Some(&held)).unwrap_err();
            assert!(why.contains("op-1") && why.contains("replay"), "{why}");
        }
    }

    #[test]
    fn pausing_what_is_paused_and_resuming_what_runs_are_refused_as_nothing_to_do() {
        let paused = conn("paused", "PAUSED", "PAUSED");
        let running = conn("running", "RUNNING", "RUNNING");
        let t = target(Kind::Pipeline);
        assert!(plan_item(Action::Pause, &t, &[&paused], None)
            .unwrap_err()
            .contains("already paused"));
        assert!(plan_item(Action::Pause, &t, &[&running], None).is_ok());
        assert!(plan_item(Action::Resume, &t, &[&running], None)
            .unwrap_err()
            .contains("already running"));
        assert!(plan_item(Action::Resume, &t, &[&paused], None).is_ok());
        let deleting = conn("deleted", "RUNNING", "RUNNING");
        assert!(plan_item(Action::Pause, &t, &[&deleting], None)
            .unwrap_err()
            .contains("being deleted"));
    }

    #[test]
    fn restarting_only_failed_needs_something_failed() {
        let t = target(Kind::Delivery);
        let fine = conn("running", "RUNNING", "RUNNING");
        let task_failed = conn("running", "RUNNING", "FAILED");
        let failed = conn("running", "FAILED", "RUNNING");
        let only = Action::Restart { only_failed: true };
        assert!(plan_item(only, &t, &[&fine], None)
            .unwrap_err()
            .contains("nothing failed"));
        assert!(plan_item(only, &t, &[&task_failed], None).is_ok());
        assert!(plan_item(only, &t, &[&failed], None).is_ok());
        assert!(plan_item(Action::Restart { only_failed: false }, &t, &[&fine], None).is_ok());
    }

    #[test]
    fn deletes_refuse_an_owned_connector_and_a_pipeline_still_read() {
        let c = conn("running", "RUNNING", "RUNNING");
        let mut owned = target(Kind::Connector);
        owned.owner_kind = "pipeline".into();
        assert!(plan_item(Action::Delete, &owned, &[&c], None)
            .unwrap_err()
            .contains("delete the pipeline instead"));
        owned.owner_kind = "manual".into();
        assert!(plan_item(Action::Delete, &owned, &[&c], None).is_ok());
        let mut p = target(Kind::Pipeline);
        p.readers = vec!["d1".into(), "d2".into()];
        assert!(plan_item(Action::Delete, &p, &[&c], None)
            .unwrap_err()
            .contains("deliveries d1, d2"));
    }
}
