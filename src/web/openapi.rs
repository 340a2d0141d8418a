//! `GET /api/v1/openapi.json`: the document built from the route table (`api::doc`).

use poem::web::Json;
use serde_json::Value;

use super::error::ApiResult;

/// The document is built once per process: it depends only on the binary.
pub async fn document() -> ApiResult<Json<OpenApiDocument>> {
    static DOC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    Ok(Json(OpenApiDocument(
        DOC.get_or_init(super::openapi_document).clone(),
    )))
}

/// An OpenAPI 3.1 document (described as an object: its schema is the OpenAPI specification's).
#[derive(serde::Serialize, schemars::JsonSchema)]
#[serde(transparent)]
#[schemars(transparent)]
pub struct OpenApiDocument(#[schemars(with = "serde_json::Map<String, Value>")] Value);
