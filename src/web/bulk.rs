//! Bulk actions: `POST /api/v1/bulk`, `GET /api/v1/bulk/{id}`, and the pages: the list pages'
//! selection form posts to a confirmation page that lists what will happen to each item, which
//! posts the bulk; its progress page refreshes itself until every item has finished.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Path};
use poem::{handler, Body, Request, Response};

use super::api::{Accepted, Ctx, OpDoc, Reply};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, Layout};
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::bulk::{self, Bulk, BulkInput, BulkView, FilterInput, Kind, Planned, TargetInput};
use crate::error::Error;
use crate::listing::ListQuery;

pub async fn api_start(cx: Ctx, Json(input): Json<BulkInput>) -> ApiResult<AcceptedAt<BulkView>> {
    let id = bulk::start(cx.state.ctx(), &cx.who, &input).await?;
    let b = bulk::get(&cx.state.pool, &cx.who, &id).await?;
    Ok(AcceptedAt(format!("/api/v1/bulk/{id}"), Accepted(b.view())))
}

pub async fn api_get(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<BulkView>> {
    Ok(Json(bulk::get(&cx.state.pool, &cx.who, &id).await?.view()))
}

/// 202 with a `Location` header naming where to follow the work.
pub struct AcceptedAt<T>(String, Accepted<T>);

impl<T: serde::Serialize + schemars::JsonSchema + Send> Reply for AcceptedAt<T> {
    fn into_reply(self) -> Response {
        let mut res = self.1.into_reply();
        if let Ok(v) = self.0.parse() {
            res.headers_mut().insert(poem::http::header::LOCATION, v);
        }
        res
    }
    fn describe(op: &mut OpDoc) {
        Accepted::<T>::describe(op);
    }
}

/// The selection form of a list page, or the confirmation page's form: `kind`, `action`
/// (`pause`, `resume`, `restart`, `restart-failed`, `delete`), `scope` (`selected` with one
/// `id` per checked row, or `filter` with the list's `q`, `state` and `cluster`).
#[derive(Debug, Default)]
struct Selection {
    kind: String,
    action: String,
    scope: String,
    ids: Vec<String>,
    list: ListQuery,
}

impl Selection {
    fn parse(body: &[u8]) -> Selection {
        let mut s = Selection::default();
        for (k, v) in url::form_urlencoded::parse(body) {
            let v = v.into_owned();
            match k.as_ref() {
                "kind" => s.kind = v,
                "action" => s.action = v,
                "scope" => s.scope = v,
                "id" => s.ids.push(v),
                "q" => s.list.q = v,
                "state" => s.list.state = v,
                "cluster" => s.list.cluster = v,
                _ => {}
            }
        }
        s
    }

    fn input(&self) -> BulkInput {
        let (action, only_failed) = match self.action.as_str() {
            "restart-failed" => ("restart".to_string(), Some(true)),
            other => (other.to_string(), None),
        };
        let mut input = BulkInput {
            action: Some(action),
            only_failed,
            ..BulkInput::default()
        };
        if self.scope == "filter" {
            input.filter = Some(FilterInput {
                kind: Some(self.kind.clone()),
                list: self.list.clone(),
            });
        } else {
            input.targets = Some(
                self.ids
                    .iter()
                    .map(|id| TargetInput {
                        kind: Some(self.kind.clone()),
                        id: Some(id.clone()),
                    })
                    .collect(),
            );
        }
        input
    }

    /// The list page it came from, with its filter.
    fn back(&self) -> String {
        let path = Kind::parse(&self.kind).map(Kind::path).unwrap_or("/");
        match self.list.window(crate::listing::CONNECTOR_STATES) {
            Ok(w) if !w.query_string(1).is_empty() => format!("{path}?{}", w.query_string(1)),
            _ => path.to_string(),
        }
    }
}

#[derive(Template)]
#[template(path = "bulk/confirm.html")]
struct ConfirmPage {
    layout: Layout,
    sel_kind: String,
    /// The form's action value, posted again.
    action: String,
    /// "pause", "restart the failed tasks of", …
    words: String,
    nouns: String,
    items: Vec<(Planned, Option<String>)>,
    will: usize,
    refused: usize,
    back: String,
    /// Why nothing can be confirmed (no row selected, a bad filter).
    error: Option<String>,
    danger: bool,
}

fn nouns(kind: &str) -> String {
    Kind::parse(kind)
        .map(|k| k.plural().to_string())
        .unwrap_or_else(|| "items".into())
}

/// `POST /bulk/confirm`: what the chosen action would do to each selected item; changes nothing.
#[handler]
pub async fn page_confirm(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    body: Body,
) -> PageResult<Response> {
    who.require(Role::Operator, "run bulk actions")?;
    let bytes = body
        .into_vec()
        .await
        .map_err(|e| Error::Unexpected(anyhow::anyhow!("reading the form failed: {e}")))?;
    let sel = Selection::parse(&bytes);
    let section = Kind::parse(&sel.kind).map(Kind::path).unwrap_or("/");
    let mut page = ConfirmPage {
        layout: Layout::new("Confirm bulk action", section, &who, jar),
        sel_kind: sel.kind.clone(),
        action: sel.action.clone(),
        words: String::new(),
        nouns: nouns(&sel.kind),
        items: vec![],
        will: 0,
        refused: 0,
        back: sel.back(),
        error: None,
        danger: sel.action == "delete",
    };
    let checked = bulk::check(state.ctx(), &who, &sel.input()).await;
    let status = match checked {
        Ok(req) => {
            let planned = bulk::plan(&state.pool, &req).await?;
            let ids: Vec<String> = planned
                .iter()
                .flat_map(|p| p.target.connector_ids.iter().cloned())
                .collect();
            let views = crate::connectors::views(&state.pool, &ids).await?;
            page.words = req.action.words().to_string();
            page.will = planned.iter().filter(|p| p.state == "pending").count();
            page.refused = planned.len() - page.will;
            let (mut refused, will): (Vec<Planned>, Vec<Planned>) =
                planned.into_iter().partition(|p| p.state == "refused");
            refused.extend(will);
            page.items = refused
                .into_iter()
                .map(|p| {
                    let phase = p
                        .target
                        .connector_ids
                        .first()
                        .and_then(|c| views.get(c))
                        .map(|v| v.phase.clone());
                    (p, phase)
                })
                .collect();
            StatusCode::OK
        }
        Err(Error::Invalid { fields, .. }) => {
            let targets_missing = fields.keys().any(|k| k == "targets");
            page.error = Some(if targets_missing && sel.scope != "filter" {
                format!(
                    "Select at least one of the {} (the checkbox at the start of each row), or choose all that match the filter.",
                    page.nouns
                )
            } else {
                fields
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Err(e) => return Err(e.into()),
    };
    page_with_status(status, &page)
}

/// `POST /bulk`: starts the confirmed bulk and shows its progress.
#[handler]
pub async fn page_start(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    body: Body,
) -> PageResult<Response> {
    let bytes = body
        .into_vec()
        .await
        .map_err(|e| Error::Unexpected(anyhow::anyhow!("reading the form failed: {e}")))?;
    let sel = Selection::parse(&bytes);
    let id = bulk::start(state.ctx(), &who, &sel.input()).await?;
    Ok(redirect(req, &format!("/bulk/{id}")))
}

#[derive(Template)]
#[template(path = "bulk/progress.html")]
struct ProgressPage {
    layout: Layout,
    b: Bulk,
}

/// `GET /bulk/{id}`: one row per item with its state and, beside a refusal or failure, why.
#[handler]
pub async fn page_progress(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let b = bulk::get(&state.pool, &who, &id).await?;
    let section = b
        .items
        .first()
        .and_then(|i| Kind::parse(&i.kind))
        .map(Kind::path)
        .unwrap_or("/");
    page_with_status(
        StatusCode::OK,
        &ProgressPage {
            layout: Layout::new(
                format!("Bulk action: {}", b.op.target_name),
                section,
                &who,
                jar,
            ),
            b,
        },
    )
}

/// The list pages' `?select=page` (every row on the page checked) or `?select=none` (the
/// connectors list: selection mode, which stops its self-refresh so checked boxes stay).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct SelectQuery {
    #[serde(default)]
    pub select: String,
}

/// The bulk bar above a list (operators only): the selection form the rows' checkboxes belong
/// to (`form="bulk-form"`), the scope (selected rows or all matching the filter) and the
/// action buttons.
pub struct BulkBar {
    pub kind: &'static str,
    pub nouns: &'static str,
    /// Rows matching the list's filter, on every page.
    pub total: u64,
    pub q: String,
    pub state: String,
    pub cluster: String,
    pub filtered: bool,
    /// Every row on this page starts checked.
    pub all_checked: bool,
    /// In selection mode (any `select`): a list that refreshes itself stops doing so.
    pub selecting: bool,
    pub select_href: String,
    pub clear_href: String,
}

impl BulkBar {
    /// For a list with the shared filter (`nav`); None for a role that cannot act.
    pub fn new(
        who: &Principal,
        kind: Kind,
        nav: &crate::listing::Nav,
        sel: &SelectQuery,
    ) -> Option<BulkBar> {
        if who.role < Role::Operator {
            return None;
        }
        let here = nav.href(nav.page);
        let glue = if here.contains('?') { '&' } else { '?' };
        Some(BulkBar {
            kind: kind.as_str(),
            nouns: kind.plural(),
            total: nav.total,
            q: nav.window.q.clone(),
            state: nav.window.state.to_ascii_lowercase(),
            cluster: nav.window.cluster.clone(),
            filtered: nav.filtered(),
            all_checked: sel.select == "page",
            selecting: !sel.select.is_empty(),
            select_href: format!("{here}{glue}select=page"),
            clear_href: format!("{here}{glue}select=none"),
        })
    }

    /// For a list without filters (replications).
    pub fn plain(who: &Principal, kind: Kind, total: u64, sel: &SelectQuery) -> Option<BulkBar> {
        if who.role < Role::Operator {
            return None;
        }
        Some(BulkBar {
            kind: kind.as_str(),
            nouns: kind.plural(),
            total,
            q: String::new(),
            state: String::new(),
            cluster: String::new(),
            filtered: false,
            all_checked: sel.select == "page",
            selecting: !sel.select.is_empty(),
            select_href: format!("{}?select=page", kind.path()),
            clear_href: format!("{}?select=none", kind.path()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selection_form_becomes_targets_or_the_lists_filter() {
        let sel = Selection::parse(
            b"csrf_token=t&kind=delivery&q=orders&state=paused&cluster=&scope=selected&id=dl_1&id=dl_2&action=restart-failed",
        );
        let input = sel.input();
        assert_eq!(input.action.as_deref(), Some("restart"));
        assert_eq!(input.only_failed, Some(true));
        assert!(input.filter.is_none());
        let ids: Vec<_> = input
            .targets
            .unwrap()
            .into_iter()
            .map(|t| (t.kind.unwrap(), t.id.unwrap()))
            .collect();
        assert_eq!(
            ids,
            [
                ("delivery".to_string(), "dl_1".to_string()),
                ("delivery".to_string(), "dl_2".to_string())
            ]
        );
        assert_eq!(sel.back(), "/deliveries?q=orders&state=paused");

        let sel = Selection::parse(b"kind=pipeline&q=a&scope=filter&id=pl_1&action=pause");
        let input = sel.input();
        assert!(input.targets.is_none(), "the filter wins over ticked rows");
        let f = input.filter.unwrap();
        assert_eq!(
            (f.kind.as_deref(), f.list.q.as_str()),
            (Some("pipeline"), "a")
        );
        assert_eq!(input.only_failed, None);
    }
}
