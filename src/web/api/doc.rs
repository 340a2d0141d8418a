//! The OpenAPI 3.1 document, built from the route table: each typed operation describes itself
//! (parameters, body, replies) through its handler's types; errors and security follow from
//! the route's access and inputs. Served at `GET /api/v1/openapi.json`, printed by
//! `cluecdc openapi`, committed as `docs/openapi.json`.

use poem::http::{Method, StatusCode};
use schemars::generate::SchemaSettings;
use schemars::transform::Transform;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::web::error::ErrorBody;
use crate::web::{Access, RouteSpec};

/// One operation's description while its handler's types fill it in.
pub struct OpDoc<'g> {
    gen: &'g mut SchemaGenerator,
    path: &'static str,
    parameters: Vec<Value>,
    request_body: Option<Value>,
    responses: Map<String, Value>,
    has_path_params: bool,
    takes_input: bool,
}

impl OpDoc<'_> {
    /// The route's `:name` segments, as required string path parameters.
    pub fn path_params(&mut self) {
        for name in self.path.split('/').filter_map(|s| s.strip_prefix(':')) {
            self.parameters.push(json!({
                "name": name, "in": "path", "required": true, "schema": {"type": "string"}
            }));
        }
        self.has_path_params = true;
        self.takes_input = true;
    }

    /// Each property of `T` (a struct read from the query string) as one query parameter.
    pub fn query<T: JsonSchema>(&mut self) {
        let mut schema = T::json_schema(self.gen);
        PropertyConventions.transform(&mut schema);
        let schema = schema.to_value();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = schema["properties"].as_object() {
            for (name, prop) in props {
                let mut prop = prop.clone();
                let description = prop.as_object_mut().and_then(|p| p.remove("description"));
                let mut param = json!({
                    "name": name,
                    "in": "query",
                    "required": required.contains(&name.as_str()),
                    "schema": prop,
                });
                if let Some(d) = description {
                    param["description"] = d;
                }
                self.parameters.push(param);
            }
        }
        self.takes_input = true;
    }

    /// A required JSON request body of type `T`.
    pub fn body<T: JsonSchema>(&mut self) {
        let schema = self.gen.subschema_for::<T>().to_value();
        self.request_body = Some(json!({
            "required": true,
            "content": {"application/json": {"schema": schema}}
        }));
        self.takes_input = true;
    }

    /// A JSON response of type `T` for `status`.
    pub fn json_response<T: JsonSchema>(&mut self, status: StatusCode, description: &str) {
        let schema = self.gen.subschema_for::<T>().to_value();
        self.response(
            status,
            description,
            Some(json!({"application/json": {"schema": schema}})),
        );
    }

    /// A response for `status` with the given `content` map (none for an empty body).
    pub fn response(&mut self, status: StatusCode, description: &str, content: Option<Value>) {
        let mut r = json!({ "description": description });
        if let Some(c) = content {
            r["content"] = c;
        }
        self.responses.insert(status.as_u16().to_string(), r);
    }

    /// A response whose body has another media type (CSV, YAML, text), described as a string.
    pub fn text_response(&mut self, status: StatusCode, description: &str, media: &[&str]) {
        // A JSON body is a JSON value, not a string; a YAML body is read by YAML-aware clients
        // into whatever it holds (its shape is documented with the operation).
        let content: Map<String, Value> = media
            .iter()
            .map(|m| {
                let schema = if m.ends_with("json") {
                    json!({"type": "object"})
                } else if m.ends_with("yaml") {
                    json!({"description": "YAML text"})
                } else {
                    json!({"type": "string"})
                };
                (m.to_string(), json!({ "schema": schema }))
            })
            .collect();
        self.response(status, description, Some(Value::Object(content)));
    }

    /// Mark that the operation reads input validated beyond its schema (so it can answer 422).
    pub fn takes_input(&mut self) {
        self.takes_input = true;
    }

    /// The schema generator, for replies that describe several media types.
    pub fn generator(&mut self) -> &mut SchemaGenerator {
        self.gen
    }
}

/// Conventions of the whole API, said once here instead of on each field: properties named
/// `*_at` are RFC 3339 UTC timestamps (`crate::time`); an empty default is left out where ""
/// is not a value of the property.
#[derive(Clone)]
struct PropertyConventions;

impl Transform for PropertyConventions {
    fn transform(&mut self, schema: &mut Schema) {
        collapse_documented_enum(schema);
        if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            for (name, prop) in props.iter_mut() {
                let is_string = match prop.get("type") {
                    Some(Value::String(t)) => t == "string",
                    Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
                    _ => false,
                };
                if name.ends_with("_at") && is_string {
                    prop["format"] = json!("date-time");
                }
                // `#[serde(default)]` on a text field documented as an enum or a number (the
                // server reads it as text to name the field in its own error) means "may be
                // left out", not that "" is a value: the schema's type has no room for "".
                if prop.get("default") == Some(&json!("")) && !allows_empty(prop) {
                    if let Some(p) = prop.as_object_mut() {
                        p.remove("default");
                    }
                }
            }
        }
        schemars::transform::transform_subschemas(self, schema);
    }
}

/// Whether "" is a value of a property's schema: plain text only (no enum, reference, format,
/// pattern or minimum length). Where it is not, an empty default is left out of the document and
/// an empty query parameter is refused (`Input for Query`).
pub(crate) fn allows_empty(prop: &Value) -> bool {
    let is_string = match prop.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        _ => false,
    };
    is_string
        && ["enum", "$ref", "format", "pattern", "minLength", "const"]
            .iter()
            .all(|k| prop.get(*k).is_none())
}

/// The query parameters of `T` where "" is not a value (see [`allows_empty`]).
pub(crate) fn not_empty_params<T: JsonSchema>() -> std::collections::BTreeSet<String> {
    let mut gen = generator();
    let schema = T::json_schema(&mut gen).to_value();
    schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .filter(|(_, p)| !allows_empty(p))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// schemars writes an enum whose variants have doc comments as `oneOf` one `const` each (to keep
/// each description); client generators read that as a union of types they cannot build. The
/// same enum as `{type: string, enum: [...]}`, the descriptions listed in its own description.
fn collapse_documented_enum(schema: &mut Schema) {
    let Some(variants) = schema.get("oneOf").and_then(Value::as_array) else {
        return;
    };
    let mut values = Vec::new();
    let mut notes = Vec::new();
    for v in variants {
        let Some(obj) = v.as_object() else {
            return;
        };
        if obj
            .keys()
            .any(|k| !matches!(k.as_str(), "const" | "enum" | "type" | "description"))
            || obj.get("type").is_some_and(|t| t != "string")
        {
            return;
        }
        // Undocumented variants come grouped as one `enum`, documented ones one `const` each.
        match (obj.get("const"), obj.get("enum").and_then(Value::as_array)) {
            (Some(Value::String(c)), None) => {
                values.push(json!(c));
                if let Some(d) = v.get("description").and_then(Value::as_str) {
                    notes.push(format!("- `{c}`: {}", d.replace('\n', " ")));
                }
            }
            (None, Some(list)) if list.iter().all(Value::is_string) => {
                values.extend(list.iter().cloned());
            }
            _ => return,
        }
    }
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    obj.remove("oneOf");
    obj.insert("type".into(), json!("string"));
    obj.insert("enum".into(), Value::Array(values));
    if !notes.is_empty() {
        let lead = obj
            .get("description")
            .and_then(Value::as_str)
            .map(|d| format!("{d}\n\n"))
            .unwrap_or_default();
        obj.insert(
            "description".into(),
            json!(format!("{lead}{}", notes.join("\n"))),
        );
    }
}

pub(crate) fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .with_transform(PropertyConventions)
        .into_generator()
}

/// `cluecdc::web::pipelines::api_get` → `pipelines_get`; a generic operation of
/// [`super::resource`] is named by its marker type (`resource::get<…::KafkaClusters>` →
/// `kafka_clusters_get`). Unique per route (a unit test says so), and stable, so generated
/// clients keep their method names.
fn operation_id(handler: &str) -> String {
    if let Some((op, marker)) = handler.strip_suffix('>').and_then(|h| h.split_once('<')) {
        let op = op.rsplit("::").next().unwrap_or(op);
        let marker = marker.rsplit("::").next().unwrap_or(marker);
        return format!("{}_{op}", snake_case(marker));
    }
    let mut parts = handler.rsplit("::");
    let name = parts.next().unwrap_or(handler);
    let module = parts.next().unwrap_or("api");
    format!("{module}_{}", name.strip_prefix("api_").unwrap_or(name))
}

/// `KafkaClusters` → `kafka_clusters`.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn tag_of(path: &str) -> &str {
    path.trim_start_matches("/api/v1/")
        .split('/')
        .next()
        .unwrap_or("api")
}

/// Error statuses an operation can answer, from what it is: every error body is `ApiError`.
fn error_statuses(access: Access, method: &Method, op: &OpDoc) -> Vec<(StatusCode, &'static str)> {
    let mut out = Vec::new();
    if !matches!(access, Access::Public) {
        out.push((
            StatusCode::UNAUTHORIZED,
            "Not signed in, or the token is invalid",
        ));
        out.push((
            StatusCode::FORBIDDEN,
            "The caller's role does not allow this",
        ));
    }
    if op.has_path_params {
        out.push((StatusCode::NOT_FOUND, "No such resource"));
    }
    if method != Method::GET || op.has_path_params {
        out.push((
            StatusCode::CONFLICT,
            "A name is taken, the resource is in use, or it is not of the kind this needs",
        ));
    }
    if op.takes_input {
        out.push((
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid input; `fields` says what to fix; nothing changed",
        ));
    }
    if op.request_body.is_some() {
        out.push((
            StatusCode::PAYLOAD_TOO_LARGE,
            "The body is larger than 1 MiB",
        ));
    }
    out.push((StatusCode::INTERNAL_SERVER_ERROR, "A server bug"));
    out.push((
        StatusCode::BAD_GATEWAY,
        "A provider (database, Kafka, Connect, S3) failed",
    ));
    out
}

/// The whole document.
pub fn build(routes: &[RouteSpec]) -> Value {
    let mut gen = generator();
    let error_schema = gen.subschema_for::<ErrorBody>().to_value();
    let mut paths = Map::new();
    for route in routes.iter().filter(|r| r.path.starts_with("/api/v1/")) {
        let mut op = OpDoc {
            gen: &mut gen,
            path: route.path,
            parameters: Vec::new(),
            request_body: None,
            responses: Map::new(),
            has_path_params: false,
            takes_input: false,
        };
        match route.describe {
            Some(describe) => describe(&mut op),
            // Not typed (yet): the document says only that it answers.
            None => {
                op.path_params();
                op.responses
                    .insert("default".into(), json!({"description": "Not described"}));
            }
        }
        for (status, description) in error_statuses(route.access, &route.method, &op) {
            op.responses
                .entry(status.as_u16().to_string())
                .or_insert_with(|| {
                    json!({
                        "description": description,
                        "content": {"application/json": {"schema": error_schema}}
                    })
                });
        }
        let mut operation = json!({
            "operationId": operation_id(route.handler),
            "summary": route.summary,
            "tags": [tag_of(route.path)],
            "x-cluecdc-access": route.access,
            "responses": op.responses,
        });
        if !op.parameters.is_empty() {
            operation["parameters"] = Value::Array(op.parameters);
        }
        if let Some(body) = op.request_body {
            operation["requestBody"] = body;
        }
        if matches!(route.access, Access::Public) {
            operation["security"] = json!([]);
        }
        let path = route
            .path
            .split('/')
            .map(|seg| match seg.strip_prefix(':') {
                Some(p) => format!("{{{p}}}"),
                None => seg.to_string(),
            })
            .collect::<Vec<_>>()
            .join("/");
        let entry = paths.entry(path).or_insert_with(|| json!({}));
        entry[route.method.as_str().to_lowercase()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "ClueCDC API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The JSON API of ClueCDC. Every operation behind sign-in takes an API token as `Authorization: Bearer <token>` (create one on the Tokens page). Errors are `ApiError` objects whose `code` says what kind of error it is; 422 answers name each invalid field.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "An API token from the Tokens page or `cluecdc token create`"}},
            "schemas": gen.take_definitions(true),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_come_from_the_handler_module_and_name() {
        assert_eq!(
            operation_id("cluecdc::web::pipelines::api_get"),
            "pipelines_get"
        );
        assert_eq!(
            operation_id("cluecdc::web::openapi::document"),
            "openapi_document"
        );
        assert_eq!(
            operation_id(
                "cluecdc::web::api::resource::get<cluecdc::web::connectors::KafkaClusters>"
            ),
            "kafka_clusters_get"
        );
        assert_eq!(
            operation_id(
                "cluecdc::web::api::resource::paged::list<cluecdc::web::pipelines::Pipelines>"
            ),
            "pipelines_list"
        );
    }

    #[test]
    fn every_api_operation_has_a_unique_operation_id_and_typed_responses() {
        let doc = crate::web::openapi_document();
        let mut seen = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().unwrap().to_string();
                assert!(
                    seen.insert(id.clone()),
                    "{method} {path}: operationId {id} repeats"
                );
            }
        }
    }

    #[test]
    fn timestamps_named_at_are_date_times() {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Row {
            created_at: String,
            done_at: Option<String>,
            name: String,
        }
        let mut gen = generator();
        let mut s = Row::json_schema(&mut gen);
        PropertyConventions.transform(&mut s);
        let s = s.to_value();
        assert_eq!(s["properties"]["created_at"]["format"], "date-time");
        assert_eq!(s["properties"]["done_at"]["format"], "date-time");
        assert!(s["properties"]["name"].get("format").is_none());
    }

    #[test]
    fn an_enum_with_documented_variants_is_one_string_enum() {
        /// Colours.
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        enum Colour {
            /// Like blood.
            Red,
            /// Like the sea.
            Blue,
            Green,
            Grey,
        }
        let mut gen = generator();
        let _ = gen.subschema_for::<Colour>();
        let defs = gen.take_definitions(true);
        let c = &defs["Colour"];
        assert_eq!(c["type"], "string");
        assert_eq!(c["enum"], json!(["Green", "Grey", "Red", "Blue"]));
        assert!(c.get("oneOf").is_none());
        assert_eq!(
            c["description"],
            "Colours.\n\n- `Red`: Like blood.\n- `Blue`: Like the sea."
        );
    }

    #[test]
    fn an_empty_default_is_dropped_where_the_schema_has_no_room_for_it() {
        #[derive(schemars::JsonSchema, serde::Deserialize)]
        #[allow(dead_code)]
        struct Q {
            #[serde(default)]
            #[schemars(with = "Option<u32>")]
            limit: String,
            #[serde(default)]
            q: String,
        }
        let mut gen = generator();
        let mut s = Q::json_schema(&mut gen);
        PropertyConventions.transform(&mut s);
        let s = s.to_value();
        assert!(s["properties"]["limit"].get("default").is_none(), "{s}");
        assert_eq!(s["properties"]["q"]["default"], "");
    }
}
