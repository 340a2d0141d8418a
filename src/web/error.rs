//! Maps service errors to HTTP once: JSON `{"error": {...}}` for the API, an HTML page for
//! browsers. Unexpected errors are logged here with their cause chain, once.

use poem::error::ResponseError;
use poem::http::StatusCode;
use poem::Response;
use serde_json::json;

use crate::error::{Error, ErrorCode, FieldErrors};

/// The body of every API error response.
#[derive(serde::Serialize, schemars::JsonSchema)]
#[schemars(rename = "ApiError")]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// What went wrong and how to fix it, for a person.
    pub message: String,
    /// Each invalid field and what is wrong with it (`invalid` only; empty otherwise).
    pub fields: FieldErrors,
    /// This request's id, also in the server log.
    pub request_id: Option<String>,
}

pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::Unauthenticated => StatusCode::UNAUTHORIZED,
        Error::Forbidden { .. } | Error::Csrf => StatusCode::FORBIDDEN,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Conflict(_) => StatusCode::CONFLICT,
        Error::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        Error::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        Error::Unavailable(_) => StatusCode::BAD_GATEWAY,
        Error::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// What a person or client may see: unexpected errors say only that something failed.
pub fn public_message(e: &Error) -> String {
    match e {
        Error::Unexpected(cause) => {
            tracing::error!(error = format!("{cause:#}"), "unexpected error");
            "something went wrong on the server; the log has the details under this request id"
                .into()
        }
        other => other.to_string(),
    }
}

/// An error answered as JSON (the API).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ApiError(#[from] pub Error);

impl ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        status_of(&self.0)
    }

    fn as_response(&self) -> Response {
        let fields = match &self.0 {
            Error::Invalid { fields, .. } => fields.clone(),
            _ => FieldErrors::new(),
        };
        let body = json!(ErrorBody {
            error: ErrorDetail {
                code: self.0.code(),
                message: public_message(&self.0),
                fields,
                request_id: crate::telemetry::current_request_id(),
            }
        });
        let mut res = Response::builder()
            .status(self.status())
            .content_type("application/json")
            .body(body.to_string());
        if let Error::RateLimited { retry_after_secs } = &self.0 {
            if let Ok(v) = retry_after_secs.to_string().parse() {
                res.headers_mut().insert("retry-after", v);
            }
        }
        res
    }
}

/// An error answered as an HTML page (browsers).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct PageError(#[from] pub Error);

impl From<sqlx::Error> for PageError {
    fn from(e: sqlx::Error) -> Self {
        PageError(e.into())
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError(e.into())
    }
}

impl ResponseError for PageError {
    fn status(&self) -> StatusCode {
        status_of(&self.0)
    }

    fn as_response(&self) -> Response {
        let status = self.status();
        let page = super::pages::ErrorPage {
            status: status.as_u16(),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            message: public_message(&self.0),
            request_id: crate::telemetry::current_request_id().unwrap_or_default(),
            sign_in: matches!(self.0, Error::Unauthenticated),
        };
        let body = askama::Template::render(&page).unwrap_or_else(|_| page.message.clone());
        Response::builder()
            .status(status)
            .content_type("text/html; charset=utf-8")
            .body(body)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
pub type PageResult<T> = Result<T, PageError>;
