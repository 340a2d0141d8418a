//! Request context: a request id on every request and response, one log line per request,
//! and the security headers every response carries.

use std::sync::Arc;
use std::time::Instant;

use poem::http::{HeaderValue, Method};
use poem::{Endpoint, IntoResponse, Request, Response};
use tracing::Instrument;

use super::error::{ErrorBody, ErrorDetail};
use crate::error::ErrorCode;

/// Strict by design: no inline script or style, nothing framed, nothing from elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

/// Request bodies larger than this are refused with 413 before any handler runs.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A too-large body is still read (and dropped) up to this much, so that the client, which
/// may still be sending, gets the 413 instead of a connection reset; beyond it, it is cut off.
const DRAIN_BYTES: usize = 16 * MAX_BODY_BYTES;

/// The body, or `Err` when it is larger than [`MAX_BODY_BYTES`] (or unreadable).
async fn read_limited(body: poem::Body) -> Result<Vec<u8>, ()> {
    use futures::StreamExt;
    let mut stream = std::pin::pin!(body.into_bytes_stream());
    let mut kept: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ())?;
        seen += chunk.len();
        if seen <= MAX_BODY_BYTES {
            kept.extend_from_slice(&chunk);
        } else if seen > DRAIN_BYTES {
            return Err(());
        }
    }
    if seen > MAX_BODY_BYTES {
        Err(())
    } else {
        Ok(kept)
    }
}

fn api_error(
    status: poem::http::StatusCode,
    code: ErrorCode,
    message: String,
    request_id: &str,
) -> Response {
    let body = ErrorBody {
        error: ErrorDetail {
            code,
            message,
            fields: Default::default(),
            request_id: Some(request_id.to_string()),
        },
    };
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(serde_json::json!(body).to_string())
}

/// Under `/api/`, every error is the documented `ApiError` object, also those answered before
/// a handler runs (no such route, wrong method, an undecodable path): clients and the OpenAPI
/// document can rely on it.
fn as_api_error(path: &str, res: Response) -> Response {
    let status = res.status();
    let is_json = res
        .headers()
        .get(poem::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !path.starts_with("/api/")
        || is_json
        || !(status.is_client_error() || status.is_server_error())
    {
        return res;
    }
    use poem::http::StatusCode as S;
    let (code, message) = match status {
        S::NOT_FOUND => (
            ErrorCode::NotFound,
            "no such API route; see /api/docs".to_string(),
        ),
        S::METHOD_NOT_ALLOWED => (
            ErrorCode::NotFound,
            "this API route does not take that method; see /api/docs".to_string(),
        ),
        S::UNAUTHORIZED => (
            ErrorCode::Unauthenticated,
            "sign in to continue".to_string(),
        ),
        S::FORBIDDEN => (ErrorCode::Forbidden, "not allowed".to_string()),
        s if s.is_server_error() => (
            ErrorCode::Internal,
            "something went wrong on the server; the log has the details under this request id"
                .to_string(),
        ),
        s => (
            ErrorCode::Invalid,
            format!("the request was not understood ({s})"),
        ),
    };
    let id = crate::telemetry::current_request_id().unwrap_or_default();
    api_error(status, code, message, &id)
}

pub async fn request_context<E: Endpoint>(
    next: Arc<E>,
    mut req: Request,
) -> poem::Result<Response> {
    let id = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
    let state = req.data::<crate::app::AppState>().cloned();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = Instant::now();
    let span = tracing::info_span!("request", %method, %path, request_id = %id);
    // Buffer the body under a limit (chunked bodies included), so no handler or guard can be
    // made to read an unbounded body.
    let body = read_limited(req.take_body()).await;
    let mut response = match body {
        Err(_) if path.starts_with("/api/") => api_error(
            poem::http::StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::TooLarge,
            format!("the request body is larger than {MAX_BODY_BYTES} bytes (1 MiB), the most ClueCDC reads; nothing was changed"),
            &id,
        ),
        Err(_) => poem::Response::builder()
            .status(poem::http::StatusCode::PAYLOAD_TOO_LARGE)
            .body(format!("request body larger than {MAX_BODY_BYTES} bytes")),
        Ok(bytes) => {
            req.set_body(bytes);
            // Errors become responses inside the scope, so error bodies can name the request id.
            let call = crate::telemetry::REQUEST_ID.scope(id.clone(), async move {
                let res = match next.call(req).await {
                    Ok(r) => r.into_response(),
                    Err(e) => e.into_response(),
                };
                as_api_error(&path, res)
            });
            call.instrument(span.clone()).await
        }
    };
    let status = response.status().as_u16();
    if let Some(state) = state.as_ref() {
        if !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS) {
            // Whatever it changed shows on the next page (see `Snapshots::recent`).
            state.inner.snapshots.wrote();
        }
        state
            .inner
            .http_metrics
            .observe(method.as_str(), status, started.elapsed().as_secs_f64());
    }
    span.in_scope(|| {
        tracing::info!(
            status,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "handled"
        );
    });
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&id) {
        headers.insert("x-request-id", v);
    }
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    Ok(response)
}
