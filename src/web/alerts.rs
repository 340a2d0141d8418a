//! Alerts: the page, the header badge every page loads, and `/api/v1/alerts`.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Query};
use poem::{handler, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::Principal;
use crate::monitor::alerts::{self, Alert};

#[derive(Deserialize)]
pub struct AlertQuery {
    state: Option<String>,
}

#[handler]
pub async fn api_list(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Query(q): Query<AlertQuery>,
) -> ApiResult<Json<Value>> {
    let only_firing = q.state.as_deref() == Some("firing");
    Ok(Json(
        json!({"items": alerts::list(&state.pool, &who, only_firing).await?}),
    ))
}

#[derive(Template)]
#[template(path = "alerts/index.html")]
struct AlertsPage {
    layout: Layout,
    items: Vec<Alert>,
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    let items = alerts::list(&state.pool, &who, false).await?;
    page_with_status(
        StatusCode::OK,
        &AlertsPage {
            layout: Layout::new("Alerts", paths::ALERTS, &who, jar),
            items,
        },
    )
}

#[derive(Template)]
#[template(path = "alerts/badge_partial.html")]
struct Badge {
    firing: i64,
}

/// Loaded into the header of every page, and refreshed.
#[handler]
pub async fn badge(state: Data<&AppState>) -> PageResult<Response> {
    let firing = alerts::firing_count(&state.pool).await?;
    page_with_status(StatusCode::OK, &Badge { firing })
}

// ---- rules, acknowledgement, webhooks, samples, /metrics -------------------------------------

use poem::web::Path;

use crate::monitor::signals::{self, RulePatch};
use crate::monitor::webhooks::{self, WebhookInput};

#[handler]
pub async fn api_rules(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": signals::rules(&state.pool, &who).await?}),
    ))
}

#[handler]
pub async fn api_rule_patch(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(kind): Path<String>,
    Json(p): Json<RulePatch>,
) -> ApiResult<Json<signals::Rule>> {
    Ok(Json(signals::set_rule(&state.pool, &who, &kind, &p).await?))
}

#[handler]
pub async fn api_ack(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    who.require(crate::auth::Role::Operator, "acknowledge alerts")?;
    let id: i64 = id
        .parse()
        .map_err(|_| crate::error::Error::NotFound(format!("alert {id}")))?;
    alerts::acknowledge(&state.pool, &who, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[handler]
pub async fn api_webhooks(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": webhooks::list(&state.pool, &who).await?}),
    ))
}

#[handler]
pub async fn api_webhook_create(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Json(input): Json<WebhookInput>,
) -> ApiResult<Response> {
    let w = webhooks::create(&state.pool, &state.inner.secrets, &who, &input).await?;
    Ok(Response::builder()
        .status(StatusCode::CREATED)
        .content_type("application/json")
        .body(json!(w).to_string()))
}

#[handler]
pub async fn api_webhook_delete(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    webhooks::delete(&state.pool, &who, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub struct SampleQuery {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    subject: String,
    limit: Option<i64>,
}

#[handler]
pub async fn api_samples(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Query(q): Query<SampleQuery>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": signals::history(&state.pool, &who, &q.kind, &q.subject, q.limit.unwrap_or(500).clamp(1, 10_000)).await?}),
    ))
}

#[handler]
pub async fn metrics(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Response> {
    who.require(crate::auth::Role::Viewer, "read metrics")?;
    let body = crate::monitor::metrics::render(&state.pool, &state.inner.http_metrics)
        .await
        .map_err(crate::error::Error::Unexpected)?;
    Ok(Response::builder()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body))
}
