//! The typed JSON API layer: every `/api/v1` operation is a plain async fn whose argument and
//! reply types are both how the request is read and how the OpenAPI document describes it.
//!
//! Invariant: an operation's parameters, request body and responses in the document come from
//! the same Rust types the handler takes and returns (through [`Input`] and [`Reply`]), and the
//! schemas come from `schemars`, which reads the serde attributes, so the document describes
//! exactly what serde reads and writes. Nothing about an operation is written twice.
//!
//! Handlers take their inputs in this order: [`Ctx`] (the state and who is acting), then
//! `Path`, `Query`, and `Json` body extractors; they return `ApiResult<R>` where `R` is one of
//! the replies below.

pub mod doc;
pub mod resource;

use std::any::TypeId;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Mutex, OnceLock};

use poem::error::ResponseError;
use poem::http::StatusCode;
use poem::web::{Json, Path, Query};
use poem::{Endpoint, IntoResponse, Request, RequestBody, Response};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use doc::OpDoc;

use super::error::{ApiError, ApiResult};
use crate::app::AppState;
use crate::auth::Principal;
use crate::error::Error;
use crate::listing::{self, ListQuery, Window};

/// The application state and the caller, for every operation behind sign-in.
pub struct Ctx {
    pub state: AppState,
    pub who: Principal,
}

/// Something an operation reads from the request, and how the document describes it.
pub trait Input: Sized + Send {
    fn extract(
        req: &Request,
        body: &mut RequestBody,
    ) -> impl Future<Output = ApiResult<Self>> + Send;

    fn describe(_op: &mut OpDoc) {}
}

impl Input for Ctx {
    async fn extract(req: &Request, _body: &mut RequestBody) -> ApiResult<Self> {
        let state = req
            .data::<AppState>()
            .cloned()
            .ok_or_else(|| Error::Unexpected(anyhow::anyhow!("application state missing")))?;
        let who = req
            .data::<Principal>()
            .cloned()
            .ok_or(Error::Unauthenticated)?;
        Ok(Ctx { state, who })
    }
}

/// Path segments (`:id` in the route) are strings; their names come from the route template.
impl<T: DeserializeOwned + Send> Input for Path<T> {
    async fn extract(req: &Request, _body: &mut RequestBody) -> ApiResult<Self> {
        req.path_params::<T>()
            .map(Path)
            .map_err(|_| ApiError(Error::NotFound("path".into())))
    }

    fn describe(op: &mut OpDoc) {
        op.path_params();
    }
}

/// Query parameters: each property of `T`'s schema is one parameter. An empty value is refused
/// where "" is not a value of the parameter's schema (a number, an enum, a timestamp), so the
/// API answers what its document says; the pages, which send empty filter fields, read their
/// queries with poem's own extractor.
impl<T: DeserializeOwned + JsonSchema + Send + 'static> Input for Query<T> {
    async fn extract(req: &Request, _body: &mut RequestBody) -> ApiResult<Self> {
        let raw = req.uri().query().unwrap_or_default();
        let strict = not_empty_params::<T>();
        if let Some((name, _)) = form_urlencoded::parse(raw.as_bytes())
            .find(|(name, value)| value.is_empty() && strict.contains(name.as_ref()))
        {
            return Err(Error::field(
                &name,
                "give a value, or leave the parameter out for the default",
            )
            .into());
        }
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|e| invalid_input(e, "query"))
    }

    fn describe(op: &mut OpDoc) {
        op.query::<T>();
    }
}

/// The parameters of `T` that may not be empty, worked out once per type.
fn not_empty_params<T: JsonSchema + 'static>() -> std::sync::Arc<BTreeSet<String>> {
    type Cache = Mutex<HashMap<TypeId, std::sync::Arc<BTreeSet<String>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(TypeId::of::<T>())
        .or_insert_with(|| std::sync::Arc::new(doc::not_empty_params::<T>()))
        .clone()
}

/// A JSON request body. A missing, malformed or mistyped body is a 422 naming the field.
impl<T: DeserializeOwned + JsonSchema + Send> Input for Json<T> {
    async fn extract(_req: &Request, body: &mut RequestBody) -> ApiResult<Self> {
        let bytes = body
            .take()
            .map_err(|_| Error::field("body", "send the request body once"))?
            .into_bytes()
            .await
            .map_err(|_| Error::field("body", "the request body could not be read"))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Error::field("body", "send a JSON object (the body is empty)").into());
        }
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            let why = e.to_string();
            let why = why.split(" at line ").next().unwrap_or(&why).to_string();
            Error::field("body", format!("send one JSON value ({why})"))
        })?;
        // serde reads a struct from an array of its fields in order; the API takes objects.
        if value.is_array() && !std::any::type_name::<T>().starts_with("alloc::vec::Vec<") {
            return Err(Error::field("body", "send a JSON object, not an array").into());
        }
        let value = serde_path_to_error::deserialize(value).map_err(|e| invalid_input(e, ""))?;
        Ok(Json(value))
    }

    fn describe(op: &mut OpDoc) {
        op.body::<T>();
    }
}

/// A deserialization error as a field error: the field is the path serde was at, or the field
/// serde found missing.
fn invalid_input<E: std::fmt::Display>(e: serde_path_to_error::Error<E>, root: &str) -> ApiError {
    let path = e.path().to_string();
    // serde's messages name the type ("invalid type: string, expected u32"); keep them short.
    let why = e.inner().to_string();
    let why = why.split(" at line ").next().unwrap_or(&why).to_string();
    let missing = why
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let field = match (path.as_str(), missing) {
        (".", Some(name)) => name.to_string(),
        (p, Some(name)) => format!("{p}.{name}"),
        (".", None) if root.is_empty() => "body".to_string(),
        (".", None) => root.to_string(),
        (p, None) => p.to_string(),
    };
    ApiError(Error::field(&field, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        limits: Limits,
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Limits {
        rows: u32,
    }

    fn field_of(json: &str) -> String {
        let mut de = serde_json::Deserializer::from_str(json);
        let e = serde_path_to_error::deserialize::<_, Body>(&mut de).unwrap_err();
        match invalid_input(e, "").0 {
            Error::Invalid { fields, .. } => fields.keys().next().unwrap().clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_body_error_names_the_field_that_is_wrong_or_missing() {
        assert_eq!(field_of(r#"{"name": 1, "limits": {"rows": 1}}"#), "name");
        assert_eq!(field_of(r#"{"limits": {"rows": 1}}"#), "name");
        assert_eq!(
            field_of(r#"{"name": "a", "limits": {"rows": "x"}}"#),
            "limits.rows"
        );
        assert_eq!(field_of(r#"{"name": "a", "limits": {}}"#), "limits.rows");
        assert_eq!(field_of(r#""text""#), "body");
    }
}

/// What an operation answers on success, and how the document describes it.
pub trait Reply: Send {
    fn into_reply(self) -> Response;
    fn describe(op: &mut OpDoc);
}

/// 200 with `T` as JSON.
impl<T: Serialize + JsonSchema + Send> Reply for Json<T> {
    fn into_reply(self) -> Response {
        self.into_response()
    }
    fn describe(op: &mut OpDoc) {
        op.json_response::<T>(StatusCode::OK, "OK");
    }
}

/// 201 with the created resource.
pub struct Created<T>(pub T);

impl<T: Serialize + JsonSchema + Send> Reply for Created<T> {
    fn into_reply(self) -> Response {
        json_response(StatusCode::CREATED, &self.0)
    }
    fn describe(op: &mut OpDoc) {
        op.json_response::<T>(StatusCode::CREATED, "Created");
    }
}

/// 202: the work was accepted and continues in the background (the body says how to follow it).
pub struct Accepted<T>(pub T);

impl<T: Serialize + JsonSchema + Send> Reply for Accepted<T> {
    fn into_reply(self) -> Response {
        json_response(StatusCode::ACCEPTED, &self.0)
    }
    fn describe(op: &mut OpDoc) {
        op.json_response::<T>(StatusCode::ACCEPTED, "Accepted");
    }
}

/// 204, no body.
pub struct NoContent;

impl Reply for NoContent {
    fn into_reply(self) -> Response {
        Response::builder().status(StatusCode::NO_CONTENT).finish()
    }
    fn describe(op: &mut OpDoc) {
        op.response(StatusCode::NO_CONTENT, "No Content", None);
    }
}

/// Any reply, marked `Cache-Control: no-store` (it carries a secret shown once).
pub struct NoStore<R>(pub R);

impl<R: Reply> Reply for NoStore<R> {
    fn into_reply(self) -> Response {
        let mut res = self.0.into_reply();
        res.headers_mut().insert(
            poem::http::header::CACHE_CONTROL,
            poem::http::HeaderValue::from_static("no-store"),
        );
        res
    }
    fn describe(op: &mut OpDoc) {
        R::describe(op);
    }
}

/// 200 with a body serialized earlier (a list snapshot), described as `T`.
pub struct Serialized<T>(pub String, pub PhantomData<T>);

impl<T> Serialized<T> {
    pub fn new(text: String) -> Self {
        Serialized(text, PhantomData)
    }
}

impl<T: JsonSchema + Send> Reply for Serialized<T> {
    fn into_reply(self) -> Response {
        Response::builder()
            .content_type("application/json")
            .body(self.0)
    }
    fn describe(op: &mut OpDoc) {
        op.json_response::<T>(StatusCode::OK, "OK");
    }
}

/// The media types a [`Text`] reply may have, in the document.
pub trait Media: Send {
    const TYPES: &'static [&'static str];
}

/// 200 with a body that is not JSON (CSV, YAML…) or is chosen by the request; the content type
/// is one of `M::TYPES`.
pub struct Text<M> {
    pub content_type: &'static str,
    pub body: String,
    /// Set to answer as a download (`Content-Disposition: attachment`).
    pub filename: Option<String>,
    pub media: PhantomData<M>,
}

impl<M: Media> Reply for Text<M> {
    fn into_reply(self) -> Response {
        let mut res = Response::builder()
            .content_type(self.content_type)
            .body(self.body);
        if let Some(name) = self.filename {
            if let Ok(v) = format!("attachment; filename=\"{name}\"").parse() {
                res.headers_mut()
                    .insert(poem::http::header::CONTENT_DISPOSITION, v);
            }
        }
        res
    }
    fn describe(op: &mut OpDoc) {
        op.text_response(StatusCode::OK, "OK", M::TYPES);
    }
}

/// A filtered, paged list (`ListQuery`), answered from the list snapshot cache: the one way every
/// `/api/v1` list with filters and paging answers. `load` gives the page as JSON (a
/// `listing::Page::json`, plus whatever else the list answers beside it).
pub async fn paged<T, F, Fut>(
    cx: &Ctx,
    list: &str,
    q: &ListQuery,
    states: &[&str],
    load: F,
) -> ApiResult<Serialized<T>>
where
    F: FnOnce(Window) -> Fut,
    Fut: Future<Output = crate::error::Result<serde_json::Value>>,
{
    let w = q.window(states)?;
    let body =
        listing::cached_json(&cx.state.inner.snapshots, list, &w, || load(w.clone())).await?;
    Ok(Serialized::new(body.to_string()))
}

fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => Response::builder()
            .status(status)
            .content_type("application/json")
            .body(text),
        Err(e) => ApiError(Error::Unexpected(e.into())).as_response(),
    }
}

/// An async fn usable as an operation: its arguments are [`Input`]s, its reply a [`Reply`].
pub trait Handler<Args>: Clone + Send + Sync + 'static {
    fn call(&self, req: Request) -> impl Future<Output = Response> + Send;
    fn describe(op: &mut OpDoc);
}

macro_rules! handler_for_arity {
    ($($a:ident),*) => {
        impl<F, Fut, R, $($a,)*> Handler<($($a,)*)> for F
        where
            F: Fn($($a),*) -> Fut + Clone + Send + Sync + 'static,
            Fut: Future<Output = ApiResult<R>> + Send,
            R: Reply,
            $($a: Input,)*
        {
            #[allow(non_snake_case, unused_mut, unused_variables)]
            fn call(&self, req: Request) -> impl Future<Output = Response> + Send {
                async move {
                    let (req, mut body) = req.split();
                    $(
                        let $a = match $a::extract(&req, &mut body).await {
                            Ok(v) => v,
                            Err(e) => return e.as_response(),
                        };
                    )*
                    match (self)($($a),*).await {
                        Ok(reply) => reply.into_reply(),
                        Err(e) => e.as_response(),
                    }
                }
            }

            fn describe(op: &mut OpDoc) {
                $($a::describe(op);)*
                R::describe(op);
            }
        }
    };
}

handler_for_arity!();
handler_for_arity!(A1);
handler_for_arity!(A1, A2);
handler_for_arity!(A1, A2, A3);
handler_for_arity!(A1, A2, A3, A4);

/// A [`Handler`] as a poem endpoint.
pub struct Operation<H, Args> {
    handler: H,
    _args: PhantomData<fn() -> Args>,
}

impl<H: Handler<Args>, Args: 'static> Operation<H, Args> {
    pub fn new(handler: H) -> Self {
        Operation {
            handler,
            _args: PhantomData,
        }
    }
}

impl<H: Handler<Args>, Args: 'static> Endpoint for Operation<H, Args> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        Ok(self.handler.call(req).await)
    }
}
