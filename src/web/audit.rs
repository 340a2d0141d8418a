//! The audit trail: a filtered, paged page, `GET /api/v1/audit` and CSV/JSON export.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Query};
use poem::{handler, Response};
use schemars::JsonSchema;
use serde::Deserialize;

use super::api::{Ctx, Media, OpDoc, Reply, Text};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, Layout};
use super::paths;
use crate::app::AppState;
use crate::audit::{self, Filter, Item};
use crate::auth::Principal;
use crate::error::Error;

/// The audit trail's filters (the page, the list and the export share them); empty means any.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct AuditQuery {
    /// The actor's name, exactly.
    #[serde(default)]
    actor: String,
    /// The action's beginning, e.g. `connection.` or `user.set_role`.
    #[serde(default)]
    action: String,
    /// A target's id or kind, exactly.
    #[serde(default)]
    target: String,
    #[serde(default)]
    #[schemars(with = "Option<crate::audit::AuditOutcome>")]
    outcome: String,
    /// A request id, or an apply's change set: every row it wrote.
    #[serde(default)]
    request: String,
    /// Rows at or after this time (RFC 3339).
    #[serde(default)]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    since: String,
    /// Rows before this time (RFC 3339).
    #[serde(default)]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    until: String,
    /// Rows older than this id: the previous page's `next_before_id`.
    before_id: Option<i64>,
    /// Rows per page (default 100, at most 500; the export: default and at most 100 000).
    limit: Option<u32>,
}

/// What `GET /api/v1/audit/export` answers.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ExportFormat {
    #[serde(default)]
    format: Option<ExportAs>,
}

/// `csv` (the default; the summary column holds JSON) or `json` (an array of audit entries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExportAs {
    #[default]
    Csv,
    Json,
}

/// The export's media types.
pub struct CsvOrJson;

impl Media for CsvOrJson {
    const TYPES: &'static [&'static str] = &["text/csv", "application/json"];
}

/// The export: a [`Text`] reply whose JSON form is described as the audit entries it holds,
/// not as a string.
pub struct Export(Text<CsvOrJson>);

impl Reply for Export {
    fn into_reply(self) -> Response {
        self.0.into_reply()
    }

    fn describe(op: &mut OpDoc) {
        let entries = op
            .generator()
            .subschema_for::<Vec<audit::Item>>()
            .to_value();
        op.response(
            StatusCode::OK,
            "The rows as CSV (`format=csv`, with a header row; the summary column holds JSON) or as a JSON array (`format=json`), as a download",
            Some(serde_json::json!({
                "text/csv": {"schema": {"type": "string"}},
                "application/json": {"schema": entries},
            })),
        );
    }
}

impl AuditQuery {
    /// Validates the filters; bad input is a 422 naming the field, not an empty result.
    fn filter(&self, default_limit: u32) -> Result<Filter, Error> {
        let mut fields = crate::error::FieldErrors::new();
        if !self.outcome.is_empty()
            && !["success", "failure", "denied"].contains(&self.outcome.as_str())
        {
            fields.insert("outcome".into(), "choose success, failure or denied".into());
        }
        for (name, value) in [("since", &self.since), ("until", &self.until)] {
            if !value.is_empty() && crate::time::parse(value).is_none() {
                fields.insert(
                    name.into(),
                    "write an RFC 3339 time such as 2026-11-30T12:00:00Z".into(),
                );
            }
        }
        Error::check(fields)?;
        let norm = |v: &str| {
            crate::time::parse(v)
                .map(crate::time::format)
                .unwrap_or_default()
        };
        Ok(Filter {
            actor: self.actor.trim().into(),
            action: self.action.trim().into(),
            target: self.target.trim().into(),
            outcome: self.outcome.clone(),
            request: self.request.trim().into(),
            since: norm(&self.since),
            until: norm(&self.until),
            before_id: self.before_id,
            limit: self.limit.unwrap_or(default_limit),
        })
    }

    /// The query string for links (export, next page) that keep the filters.
    fn query_string(&self) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("actor", &self.actor),
            ("action", &self.action),
            ("target", &self.target),
            ("outcome", &self.outcome),
            ("request", &self.request),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if !v.is_empty() {
                s.append_pair(k, v);
            }
        }
        s.finish()
    }
}

#[derive(Template)]
#[template(path = "audit/index.html")]
struct AuditPage<'a> {
    layout: Layout,
    q: AuditQuery,
    items: &'a [Item],
    next_link: Option<String>,
    filters: String,
    total: u64,
    /// (outcome, rows, link to the rows with that outcome)
    counts: Vec<(String, u64, String)>,
    errors: crate::error::FieldErrors,
    /// "365 d", the audit retention the monitor applies, once it has applied one.
    kept: Option<String>,
    /// The cut of the last trim (RFC 3339): older rows were removed.
    removed_before: Option<String>,
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<AuditQuery>,
) -> PageResult<Response> {
    let layout = Layout::new("Audit", paths::AUDIT, &who, jar);
    let filters = q.query_string();
    let (found, errors, status) = match q.filter(50) {
        Ok(filter) => (
            cached_list(&state, &who, &filter).await?,
            Default::default(),
            StatusCode::OK,
        ),
        Err(Error::Invalid { fields, .. }) => (
            std::sync::Arc::new(audit::Page::default()),
            fields,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        Err(e) => return Err(e.into()),
    };
    let cut = state
        .inner
        .snapshots
        .recent("audit cut", || async { Ok(audit::cut(&state.pool).await?) })
        .await?;
    let kept = cut
        .retention_secs
        .map(|s| super::home::human_duration(s.max(0) as u64));
    let removed_before = Some(cut.before.clone()).filter(|b| !b.is_empty());
    let next_link = found
        .next_before_id
        .map(|id| format!("{}?{}&before_id={id}", paths::AUDIT, filters));
    let counts = found
        .counts
        .iter()
        .map(|(outcome, n)| {
            let link = AuditQuery {
                outcome: outcome.clone(),
                before_id: None,
                ..q.clone()
            }
            .query_string();
            (outcome.clone(), *n, format!("{}?{link}", paths::AUDIT))
        })
        .collect();
    page_with_status(
        status,
        &AuditPage {
            layout,
            q,
            items: &found.items,
            next_link,
            filters,
            total: found.total,
            counts,
            errors,
            kept,
            removed_before,
        },
    )
}

pub async fn api_list(cx: Ctx, Query(q): Query<AuditQuery>) -> ApiResult<Json<audit::Page>> {
    let filter = q.filter(100)?;
    Ok(Json(audit::Page::clone(
        &*cached_list(&cx.state, &cx.who, &filter).await?,
    )))
}

/// The audit rows of `filter`, reused for a moment (see [`crate::snapshots::Snapshots::recent`]).
async fn cached_list(
    state: &AppState,
    who: &Principal,
    filter: &audit::Filter,
) -> crate::error::Result<std::sync::Arc<audit::Page>> {
    let key = format!("audit {filter:?}");
    state
        .inner
        .snapshots
        .recent(&key, || {
            audit::list(&state.pool, who, filter, audit::MAX_PAGE)
        })
        .await
}

/// `format=csv` (default) or `format=json`; the newest `limit` rows (up to 100 000) matching the filters.
pub async fn api_export(
    cx: Ctx,
    Query(q): Query<AuditQuery>,
    Query(f): Query<ExportFormat>,
) -> ApiResult<Export> {
    let filter = q.filter(audit::MAX_EXPORT)?;
    let found = audit::list(&cx.state.pool, &cx.who, &filter, audit::MAX_EXPORT).await?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let format = f.format.unwrap_or_default();
    let (body, content_type, ext) = match format {
        ExportAs::Json => (
            serde_json::to_string_pretty(&found.items).map_err(|e| Error::Unexpected(e.into()))?,
            "application/json",
            "json",
        ),
        ExportAs::Csv => (
            audit::to_csv(&found.items),
            "text/csv; charset=utf-8",
            "csv",
        ),
    };
    Ok(Export(Text {
        content_type,
        body,
        filename: Some(format!("cluecdc-audit-{stamp}.{ext}")),
        media: std::marker::PhantomData,
    }))
}
