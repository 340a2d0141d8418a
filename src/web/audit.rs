//! The audit trail: a filtered, paged page, `GET /api/v1/audit` and CSV/JSON export.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Query};
use poem::{handler, Response};
use serde::Deserialize;

use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, Layout};
use super::paths;
use crate::app::AppState;
use crate::audit::{self, Filter, Item};
use crate::auth::Principal;
use crate::error::Error;

#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuditQuery {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    outcome: String,
    /// A request id, or an apply's change set: every row it wrote.
    #[serde(default)]
    request: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    before_id: Option<i64>,
    limit: Option<u32>,
    #[serde(default)]
    format: String,
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
        },
    )
}

#[handler]
pub async fn api_list(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Json<audit::Page>> {
    let filter = q.filter(100)?;
    Ok(Json(audit::Page::clone(
        &*cached_list(&state, &who, &filter).await?,
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
#[handler]
pub async fn api_export(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Response> {
    let filter = q.filter(audit::MAX_EXPORT)?;
    let format = if q.format.is_empty() {
        "csv"
    } else {
        q.format.as_str()
    };
    if format != "csv" && format != "json" {
        return Err(Error::field("format", "choose csv or json").into());
    }
    let found = audit::list(&state.pool, &who, &filter, audit::MAX_EXPORT).await?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let (body, ctype) = match format {
        "json" => (
            serde_json::to_string_pretty(&found.items).map_err(|e| Error::Unexpected(e.into()))?,
            "application/json",
        ),
        _ => (audit::to_csv(&found.items), "text/csv; charset=utf-8"),
    };
    Ok(Response::builder()
        .content_type(ctype)
        .header(
            "content-disposition",
            format!("attachment; filename=\"cluecdc-audit-{stamp}.{format}\""),
        )
        .body(body))
}
