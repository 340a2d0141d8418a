//! Guarded offset changes of deliveries and the operations that carry them out:
//! `/api/v1/deliveries/{id}/replay`, `…/offset-history`, `/api/v1/operations`, and the pages
//! (the replay form with its preview and typed confirmation, an operation's progress).

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path, Query};
use poem::{handler, Request, Response};
use schemars::JsonSchema;
use serde::Deserialize;

use super::api::{Accepted, Ctx, OpDoc, Reply};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::deliveries::replay::{self, HistoryEntry, OffsetInput, ReplayInput, ReplayPlan};
use crate::error::{Error, FieldErrors};
use crate::listing::ListPage;
use crate::operations::{self, Operation, OperationView};

/// `?dry_run=true` previews instead of starting.
#[derive(Deserialize, JsonSchema)]
pub struct DryRun {
    /// Answer the plan (200) and change nothing, instead of starting the operation (202).
    #[serde(default)]
    dry_run: bool,
}

/// An offset change's reply: with `?dry_run=true` the plan (200), nothing changed; otherwise the
/// started operation (202) with its plan.
pub enum PlanOrStarted {
    Plan(ReplayPlan),
    Started(replay::Started),
}

impl Reply for PlanOrStarted {
    fn into_reply(self) -> Response {
        match self {
            PlanOrStarted::Plan(plan) => Json(plan).into_reply(),
            PlanOrStarted::Started(started) => Accepted(started).into_reply(),
        }
    }
    fn describe(op: &mut OpDoc) {
        <Json<ReplayPlan> as Reply>::describe(op);
        <Accepted<replay::Started> as Reply>::describe(op);
    }
}

async fn plan_or_start(
    cx: &Ctx,
    id: &str,
    input: &ReplayInput,
    dry_run: bool,
) -> ApiResult<PlanOrStarted> {
    let (s, who) = (&cx.state, &cx.who);
    if dry_run {
        let (_, plan) = replay::plan(&s.pool, &s.inner.ctx.secrets, who, id, input).await?;
        return Ok(PlanOrStarted::Plan(plan));
    }
    let started = replay::start(
        &s.pool,
        &s.inner.ctx.secrets,
        &s.inner.ctx.reconciler,
        who,
        id,
        input,
    )
    .await?;
    Ok(PlanOrStarted::Started(started))
}

pub async fn api_replay(
    cx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<DryRun>,
    Json(input): Json<ReplayInput>,
) -> ApiResult<PlanOrStarted> {
    plan_or_start(&cx, &id, &input, q.dry_run).await
}

pub async fn api_history(
    cx: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<ListPage<HistoryEntry>>> {
    Ok(Json(ListPage::all(
        replay::history(&cx.state.pool, &cx.who, &id).await?,
    )))
}

/// The typed confirmation of a restore (`POST …/offset-history/{entry}/restore`): the
/// offsets Connect held before that change are set again.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "OffsetRestoreInput")]
pub struct RestoreInput {
    /// The delivery's name, typed.
    confirm: Option<String>,
    /// Why, for the history and the audit log.
    reason: Option<String>,
}

pub async fn api_restore(
    cx: Ctx,
    Path((id, entry)): Path<(String, String)>,
    Query(q): Query<DryRun>,
    Json(body): Json<RestoreInput>,
) -> ApiResult<PlanOrStarted> {
    cx.who
        .require(Role::Operator, "restore a delivery's offsets")?;
    let entry = entry_number(&entry)?;
    let input = replay::restore_input(
        &cx.state.pool,
        &cx.who,
        &id,
        entry,
        body.confirm,
        body.reason,
    )
    .await?;
    plan_or_start(&cx, &id, &input, q.dry_run).await
}

fn entry_number(s: &str) -> Result<i64, Error> {
    s.parse()
        .map_err(|_| Error::NotFound(format!("offset history entry {s}")))
}

pub async fn api_operation(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<OperationView>> {
    Ok(Json(OperationView::from(
        &operations::get(&cx.state.pool, &cx.who, &id).await?,
    )))
}

/// `GET /api/v1/operations?target=`: the operations of one pipeline, delivery or replication.
#[derive(Deserialize, JsonSchema)]
pub struct OperationsQuery {
    /// The id of what the operations act on.
    target: String,
}

/// The newest 50 operations of a target, newest first.
pub async fn api_operations(
    cx: Ctx,
    Query(q): Query<OperationsQuery>,
) -> ApiResult<Json<ListPage<OperationView>>> {
    cx.who.require(Role::Viewer, "see operations")?;
    let ops = operations::of_target(&cx.state.pool, &q.target, 50).await?;
    Ok(Json(ListPage::all(
        ops.iter().map(OperationView::from).collect(),
    )))
}

/// The replay form: what to go back (or forward) to, then the plan and the typed name.
#[derive(Template)]
#[template(path = "deliveries/replay.html")]
struct ReplayPage {
    layout: Layout,
    d: crate::deliveries::Delivery,
    from: String,
    timestamp: String,
    /// "topic partition offset" per line.
    offsets: String,
    reason: String,
    confirm: String,
    plan: Option<ReplayPlan>,
    errors: FieldErrors,
    /// A refusal that is not about one field (an operation already open, Kafka unreachable).
    problem: Option<String>,
    choices: &'static [(&'static str, &'static str)],
}

impl ReplayPage {
    fn skip(&self) -> bool {
        self.plan
            .as_ref()
            .is_some_and(|p| p.skipped > 0 && p.records == 0)
    }
}

/// The form's fields, as posted.
#[derive(Debug, Default, Deserialize)]
pub struct ReplayForm {
    #[serde(default)]
    from: String,
    #[serde(default)]
    timestamp: String,
    #[serde(default)]
    offsets: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: String,
    /// "preview" or "start".
    #[serde(default)]
    action: String,
}

/// Lines of `topic partition offset`; a line that does not read so is refused by its number.
fn offset_lines(text: &str) -> Result<Vec<OffsetInput>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.is_empty() {
            continue;
        }
        let (Some(topic), Some(partition), Some(offset), None) =
            (parts.first(), parts.get(1), parts.get(2), parts.get(3))
        else {
            return Err(format!(
                "line {}: write the topic, the partition and the offset, separated by spaces",
                n + 1
            ));
        };
        let (Ok(partition), Ok(offset)) = (partition.parse::<i64>(), offset.parse::<i64>()) else {
            return Err(format!(
                "line {}: the partition and the offset are whole numbers",
                n + 1
            ));
        };
        out.push(OffsetInput {
            topic: Some(topic.to_string()),
            partition: Some(partition),
            offset: Some(offset),
        });
    }
    Ok(out)
}

impl ReplayForm {
    fn input(&self) -> Result<ReplayInput, FieldErrors> {
        let offsets = if self.from == "offsets" {
            Some(offset_lines(&self.offsets).map_err(|e| {
                let mut f = FieldErrors::new();
                f.insert("offsets".into(), e);
                f
            })?)
        } else {
            None
        };
        Ok(ReplayInput {
            from: Some(self.from.clone()),
            timestamp: Some(self.timestamp.clone()).filter(|t| !t.trim().is_empty()),
            offsets,
            confirm: Some(self.confirm.clone()),
            reason: Some(self.reason.clone()),
        })
    }
}

fn page(
    who: &Principal,
    jar: &CookieJar,
    d: crate::deliveries::Delivery,
    form: ReplayForm,
) -> ReplayPage {
    ReplayPage {
        layout: Layout::new(format!("Replay {}", d.name), paths::DELIVERIES, who, jar),
        d,
        from: if form.from.is_empty() {
            "timestamp".into()
        } else {
            form.from
        },
        timestamp: form.timestamp,
        offsets: form.offsets,
        reason: form.reason,
        confirm: form.confirm,
        plan: None,
        errors: FieldErrors::new(),
        problem: None,
        choices: replay::FROM,
    }
}

/// The errors a refused plan or start shows on the form: per-offset errors go under the
/// offsets box, with the line they came from.
fn show_error(p: &mut ReplayPage, e: Error) -> Result<StatusCode, Error> {
    match e {
        Error::Invalid { fields, .. } => {
            for (k, v) in fields {
                let key = match k.strip_prefix("offsets[") {
                    Some(rest) => {
                        let line = rest
                            .split(']')
                            .next()
                            .and_then(|n| n.parse::<usize>().ok())
                            .map(|n| n + 1)
                            .unwrap_or(0);
                        let v = format!("line {line}: {v}");
                        p.errors
                            .entry("offsets".into())
                            .and_modify(|e| {
                                e.push_str("; ");
                                e.push_str(&v);
                            })
                            .or_insert(v);
                        continue;
                    }
                    None => k,
                };
                p.errors.insert(key, v);
            }
            Ok(StatusCode::UNPROCESSABLE_ENTITY)
        }
        Error::Conflict(m) => {
            p.problem = Some(m);
            Ok(StatusCode::CONFLICT)
        }
        Error::Unavailable(m) => {
            p.problem = Some(m);
            Ok(StatusCode::SERVICE_UNAVAILABLE)
        }
        other => Err(other),
    }
}

#[handler]
pub async fn page_replay(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    who.require(Role::Operator, "replay or skip a delivery's records")?;
    let d = crate::deliveries::load(&state.pool, &id).await?;
    page_with_status(StatusCode::OK, &page(&who, jar, d, ReplayForm::default()))
}

/// "Restore these offsets": the form filled with the entry's saved offsets, previewed.
#[handler]
pub async fn page_restore(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path((id, entry)): Path<(String, String)>,
) -> PageResult<Response> {
    who.require(Role::Operator, "restore a delivery's offsets")?;
    let entry = entry_number(&entry)?;
    let input = replay::restore_input(&state.pool, &who, &id, entry, None, None).await?;
    let d = crate::deliveries::load(&state.pool, &id).await?;
    let form = ReplayForm {
        from: "offsets".into(),
        offsets: input
            .offsets
            .iter()
            .flatten()
            .map(|o| {
                format!(
                    "{} {} {}",
                    o.topic.as_deref().unwrap_or_default(),
                    o.partition.unwrap_or_default(),
                    o.offset.unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        reason: input.reason.clone().unwrap_or_default(),
        ..Default::default()
    };
    let mut p = page(&who, jar, d, form);
    let status = match replay::plan(&state.pool, &state.inner.ctx.secrets, &who, &id, &input).await
    {
        Ok((_, plan)) => {
            p.plan = Some(plan);
            StatusCode::OK
        }
        Err(e) => show_error(&mut p, e)?,
    };
    page_with_status(status, &p)
}

/// Preview (`action=preview`) shows the plan and asks for the name; `action=start` starts the
/// operation and goes to its page.
#[handler]
pub async fn page_replay_submit(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Form(form): Form<ReplayForm>,
) -> PageResult<Response> {
    who.require(Role::Operator, "replay or skip a delivery's records")?;
    let start = form.action == "start";
    let d = crate::deliveries::load(&state.pool, &id).await?;
    let input = form.input();
    let mut p = page(&who, jar, d, form);
    let input = match input {
        Ok(i) => i,
        Err(fields) => {
            p.errors = fields;
            return page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &p);
        }
    };
    let status = if start {
        match replay::start(
            &state.pool,
            &state.inner.ctx.secrets,
            &state.inner.ctx.reconciler,
            &who,
            &id,
            &input,
        )
        .await
        {
            Ok(started) => {
                set_flash(
                    jar,
                    &format!(
                        "Offset change of {} started: {} records to deliver again, {} to skip.",
                        p.d.name, started.plan.records, started.plan.skipped
                    ),
                );
                return Ok(redirect(
                    req,
                    &format!("/operations/{}", started.operation_id),
                ));
            }
            Err(e) => {
                // Show the plan again beside the refusal, when it can still be made.
                if let Ok((_, plan)) =
                    replay::plan(&state.pool, &state.inner.ctx.secrets, &who, &id, &input).await
                {
                    p.plan = Some(plan);
                }
                show_error(&mut p, e)?
            }
        }
    } else {
        match replay::plan(&state.pool, &state.inner.ctx.secrets, &who, &id, &input).await {
            Ok((_, plan)) => {
                p.plan = Some(plan);
                StatusCode::OK
            }
            Err(e) => show_error(&mut p, e)?,
        }
    };
    page_with_status(status, &p)
}

/// An operation's progress: its steps, the one it is at, what it waits on or why it failed.
#[derive(Template)]
#[template(path = "operations/detail.html")]
struct OperationPage {
    layout: Layout,
    op: Operation,
    /// Where the target's page is.
    target_href: String,
    /// Offset operations: what Connect held before the change and after it (pretty JSON).
    before: Option<String>,
    after: Option<String>,
}

#[handler]
pub async fn page_operation(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let op = operations::get(&state.pool, &who, &id).await?;
    let (section, target_href) = match op.target_kind.as_str() {
        "delivery" => (paths::DELIVERIES, format!("/deliveries/{}", op.target_id)),
        // A bulk action's items and their states are on its own progress page.
        "bulk" => (paths::HOME, format!("/bulk/{}", op.id)),
        _ => (paths::PIPELINES, format!("/pipelines/{}", op.target_id)),
    };
    let saved = operations::saved_offsets(&state.pool, &op.id).await?;
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    page_with_status(
        StatusCode::OK,
        &OperationPage {
            before: saved.as_ref().map(|(b, _)| pretty(b)),
            after: saved.as_ref().and_then(|(_, a)| a.as_ref().map(pretty)),
            layout: Layout::new(
                format!("{}: {}", op.label(), op.target_name),
                section,
                &who,
                jar,
            ),
            op,
            target_href,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_lines_read_topic_partition_offset_and_name_the_bad_line() {
        let got = offset_lines("a.b 0 5\n\n  a.b 1 7  \n").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].topic.as_deref(), Some("a.b"));
        assert_eq!((got[1].partition, got[1].offset), (Some(1), Some(7)));
        assert!(offset_lines("a.b 0\n").unwrap_err().starts_with("line 1:"));
        assert!(offset_lines("a.b 0 5\na.b x 5")
            .unwrap_err()
            .starts_with("line 2:"));
        assert!(
            offset_lines("a.b 0 5 9").is_err(),
            "a fourth word is refused"
        );
    }
}
