//! Liveness and readiness probes (public, no identity needed).

use poem::http::StatusCode;
use poem::web::Data;
use poem::{handler, IntoResponse, Response};

use crate::app::AppState;

/// 200 while the process runs and can answer HTTP.
#[handler]
pub async fn healthz() -> &'static str {
    "ok"
}

/// 200 once the database is open and every embedded migration is applied.
#[handler]
pub async fn readyz(state: Data<&AppState>) -> Response {
    match crate::db::pending_migrations(&state.pool).await {
        Ok(0) => "ready".into_response(),
        Ok(n) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{n} migrations pending"),
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(error = format!("{error:#}"), "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}
