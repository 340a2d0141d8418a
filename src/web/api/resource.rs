//! The one way a domain declares its standard API operations (list, get, create, preview,
//! patch, delete, and the connector actions): it implements the traits below for a marker type
//! (`web::pipelines::Pipelines`), each method naming the service call behind the operation,
//! and the route table mounts the generic operations of this module for it
//! (`resource::get::<Pipelines>`).
//!
//! Invariant: the operations here are the only code between a standard route and its service
//! function, so their request and reply types, their statuses and their error handling are the
//! same for every domain; what differs per domain is only which service function answers and the
//! types it reads and writes (whose schemas the document shows). Operations that are particular
//! to one domain (a connection's rotate, a pipeline's table change) stay plain handlers in the
//! domain's module.
//!
//! The operation id of a generic operation is the marker type's name and the operation's
//! (`Pipelines` + `get` = `pipelines_get`), see `doc::operation_id`.

use std::future::Future;

use poem::web::{Json, Path, Query};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Created, Ctx, NoContent, Serialized};
use crate::app::AppState;
use crate::auth::Principal;
pub use crate::connectors::Action;
use crate::error::Result;
use crate::listing::{ListPage, ListQuery, Window};

use super::super::error::ApiResult;

/// A collection under `/api/v1`: what one of its rows is, and what it is made from.
pub trait Resource: Send + Sync + 'static {
    /// A row of the list, and what create and patch answer.
    type Item: Serialize + JsonSchema + Send;
    /// The body of create, preview and patch.
    type Input: DeserializeOwned + JsonSchema + Send + Sync;
}

/// A short list, answered whole (`GET /api/v1/<collection>`).
pub trait List: Resource {
    fn list(s: &AppState, who: &Principal) -> impl Future<Output = Result<Vec<Self::Item>>> + Send;
}

/// A list with filters and paging (`GET /api/v1/<collection>?q=&state=&page=…`), answered from
/// the list snapshot cache under the name `LIST`.
pub trait Paged: Resource {
    const LIST: &'static str;
    /// The states the `state` filter accepts.
    const STATES: &'static [&'static str];
    /// The page as JSON (`listing::Page::json`).
    fn page(
        s: &AppState,
        who: &Principal,
        w: &Window,
    ) -> impl Future<Output = Result<serde_json::Value>> + Send;
}

/// One member with what its page shows (`GET /api/v1/<collection>/{id}`).
pub trait Get: Resource {
    type Detail: Serialize + JsonSchema + Send;
    fn get(
        s: &AppState,
        who: &Principal,
        id: &str,
    ) -> impl Future<Output = Result<Self::Detail>> + Send;
}

/// `POST /api/v1/<collection>`: 201 with the new row.
pub trait Create: Resource {
    fn create(
        s: &AppState,
        who: &Principal,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Item>> + Send;
}

/// `POST /api/v1/<collection>/preview`: what create would make, changing nothing.
pub trait Preview: Resource {
    type Preview: Serialize + JsonSchema + Send;
    fn preview(
        s: &AppState,
        who: &Principal,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Preview>> + Send;
}

/// `PATCH /api/v1/<collection>/{id}`: the fields given change, the others stay.
pub trait Update: Resource {
    fn update(
        s: &AppState,
        who: &Principal,
        id: &str,
        patch: Self::Input,
    ) -> impl Future<Output = Result<Self::Item>> + Send;
}

/// `DELETE /api/v1/<collection>/{id}`: 204.
pub trait Delete: Resource {
    fn delete(s: &AppState, who: &Principal, id: &str) -> impl Future<Output = Result<()>> + Send;
}

/// `POST /api/v1/<collection>/{id}/<action>`: the reconciler carries the action out; the answer
/// is the member's state after asking. The pages call [`Control::act`] too.
pub trait Control: Resource {
    type Controlled: Serialize + JsonSchema + Send;
    /// Carries out `action`, or refuses one the collection does not offer with a 404.
    fn act(
        s: &AppState,
        who: &Principal,
        id: &str,
        action: Action,
    ) -> impl Future<Output = Result<Self::Controlled>> + Send;
}

// ---- the operations -------------------------------------------------------------------------

pub async fn list<R: List>(cx: Ctx) -> ApiResult<Json<ListPage<R::Item>>> {
    Ok(Json(ListPage::all(R::list(&cx.state, &cx.who).await?)))
}

/// The list operation of a [`Paged`] collection: named `list` like the other lists (the
/// operation id is the function's name), hence its own module.
pub mod paged {
    use super::*;

    pub async fn list<R: Paged>(
        cx: Ctx,
        Query(q): Query<ListQuery>,
    ) -> ApiResult<Serialized<ListPage<R::Item>>> {
        let cx = &cx;
        super::super::paged(cx, R::LIST, &q, R::STATES, |w| async move {
            R::page(&cx.state, &cx.who, &w).await
        })
        .await
    }
}

pub async fn get<R: Get>(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<R::Detail>> {
    Ok(Json(R::get(&cx.state, &cx.who, &id).await?))
}

pub async fn create<R: Create>(
    cx: Ctx,
    Json(input): Json<R::Input>,
) -> ApiResult<Created<R::Item>> {
    Ok(Created(R::create(&cx.state, &cx.who, input).await?))
}

pub async fn preview<R: Preview>(
    cx: Ctx,
    Json(input): Json<R::Input>,
) -> ApiResult<Json<R::Preview>> {
    Ok(Json(R::preview(&cx.state, &cx.who, input).await?))
}

pub async fn patch<R: Update>(
    cx: Ctx,
    Path(id): Path<String>,
    Json(patch): Json<R::Input>,
) -> ApiResult<Json<R::Item>> {
    Ok(Json(R::update(&cx.state, &cx.who, &id, patch).await?))
}

pub async fn delete<R: Delete>(cx: Ctx, Path(id): Path<String>) -> ApiResult<NoContent> {
    R::delete(&cx.state, &cx.who, &id).await?;
    Ok(NoContent)
}

async fn act<R: Control>(cx: Ctx, id: &str, action: Action) -> ApiResult<Json<R::Controlled>> {
    Ok(Json(R::act(&cx.state, &cx.who, id, action).await?))
}

pub async fn pause<R: Control>(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<R::Controlled>> {
    act::<R>(cx, &id, Action::Pause).await
}

pub async fn resume<R: Control>(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<R::Controlled>> {
    act::<R>(cx, &id, Action::Resume).await
}

pub async fn stop<R: Control>(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<R::Controlled>> {
    act::<R>(cx, &id, Action::Stop).await
}

pub async fn restart<R: Control>(
    cx: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<R::Controlled>> {
    act::<R>(cx, &id, Action::Restart).await
}

pub async fn adopt<R: Control>(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<R::Controlled>> {
    act::<R>(cx, &id, Action::Adopt).await
}
