//! `GET /api/v1/openapi.json`, derived from the route table so it cannot miss a route.

use poem::handler;
use poem::web::Json;
use serde_json::{json, Map, Value};

#[handler]
pub async fn document() -> Json<Value> {
    Json(build())
}

pub fn build() -> Value {
    let mut paths = Map::new();
    for route in super::route_infos()
        .into_iter()
        .filter(|r| r.path.starts_with("/api/v1/"))
    {
        // poem's `:id` becomes OpenAPI's `{id}`.
        let path = route
            .path
            .split('/')
            .map(|seg| {
                seg.strip_prefix(':')
                    .map(|p| format!("{{{p}}}"))
                    .unwrap_or_else(|| seg.to_string())
            })
            .collect::<Vec<_>>()
            .join("/");
        let params: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix(':'))
            .map(|p| json!({"name": p, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let entry = paths.entry(path).or_insert_with(|| json!({}));
        entry[route.method.to_lowercase()] = json!({
            "summary": route.summary,
            "parameters": params,
            "x-cluecdc-access": route.access,
            // Not yet typed: any status, body not described (the typed layer lists each one).
            "responses": {"default": {"description": "any status; not yet described"}}
        });
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "ClueCDC API", "version": env!("CARGO_PKG_VERSION")},
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "An error", "content": {"application/json": {"schema": {
                "type": "object",
                "properties": {"error": {"type": "object", "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"},
                    "fields": {"type": "object", "additionalProperties": {"type": "string"}}
                }}}
            }}}}}
        }
    })
}
