//! `GET /api/docs`: the browsable API reference, Swagger UI (vendored under `static/swagger-ui/`)
//! reading `/api/v1/openapi.json` (both behind sign-in, as API.md asks of every route); "Try it
//! out" sends an API token given to "Authorize", never the session.

use askama::Template;
use poem::handler;
use poem::http::StatusCode;
use poem::Response;

use super::error::PageResult;
use super::pages::page_with_status;

#[derive(Template)]
#[template(path = "api/docs.html")]
struct DocsPage {
    version: &'static str,
    document: &'static str,
}

#[handler]
pub async fn page() -> PageResult<Response> {
    page_with_status(
        StatusCode::OK,
        &DocsPage {
            version: env!("CARGO_PKG_VERSION"),
            document: super::paths::OPENAPI,
        },
    )
}
