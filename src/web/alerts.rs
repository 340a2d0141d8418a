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
pub async fn api_list(state: Data<&AppState>, who: Data<&Principal>, Query(q): Query<AlertQuery>) -> ApiResult<Json<Value>> {
    let only_firing = q.state.as_deref() == Some("firing");
    Ok(Json(json!({"items": alerts::list(&state.pool, &who, only_firing).await?})))
}

#[derive(Template)]
#[template(path = "alerts/index.html")]
struct AlertsPage {
    layout: Layout,
    items: Vec<Alert>,
}

#[handler]
pub async fn page(state: Data<&AppState>, who: Data<&Principal>, jar: &CookieJar) -> PageResult<Response> {
    let items = alerts::list(&state.pool, &who, false).await?;
    page_with_status(StatusCode::OK, &AlertsPage { layout: Layout::new("Alerts", paths::ALERTS, &who, jar), items })
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
