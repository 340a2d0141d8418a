//! The one way a domain declares its standard API operations (list, get, create, preview,
//! patch, delete, and the connector actions): one [`resource!`] declaration in its `web`
//! module names a marker type (`web::pipelines::Pipelines`), its row and input types and, per
//! operation, the service function behind it; the route table mounts the generic operations of
//! this module for it (`resource::get::<Pipelines>`).
//!
//! Why a declaration and not hand-written trait impls: every service function behind a
//! standard operation has the one signature of its kind, `(&Ctx, &Principal, …)` (see
//! `crate::ctx`), so an impl would only repeat that signature and forward; written by hand, the
//! impls of seven domains were the same lines over again. The traits stay (the generic
//! operations are bounded by them, and a domain whose operation does something more, such as
//! connections dropping a JSON body's nulls, implements that one trait by hand).
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
use crate::auth::Principal;
pub use crate::connectors::Action;
use crate::ctx::Ctx as Services;
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
    fn list(s: &Services, who: &Principal) -> impl Future<Output = Result<Vec<Self::Item>>> + Send;
}

/// A list with filters and paging (`GET /api/v1/<collection>?q=&state=&page=…`), answered from
/// the list snapshot cache under the name `LIST`.
pub trait Paged: Resource {
    const LIST: &'static str;
    /// The states the `state` filter accepts.
    const STATES: &'static [&'static str];
    /// The page as JSON (`listing::Page::json`).
    fn page(
        s: &Services,
        who: &Principal,
        w: &Window,
    ) -> impl Future<Output = Result<serde_json::Value>> + Send;
}

/// One member with what its page shows (`GET /api/v1/<collection>/{id}`).
pub trait Get: Resource {
    type Detail: Serialize + JsonSchema + Send;
    fn get(
        s: &Services,
        who: &Principal,
        id: &str,
    ) -> impl Future<Output = Result<Self::Detail>> + Send;
}

/// `POST /api/v1/<collection>`: 201 with the new row.
pub trait Create: Resource {
    fn create(
        s: &Services,
        who: &Principal,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Item>> + Send;
}

/// `POST /api/v1/<collection>/preview`: what create would make, changing nothing.
pub trait Preview: Resource {
    type Preview: Serialize + JsonSchema + Send;
    fn preview(
        s: &Services,
        who: &Principal,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Preview>> + Send;
}

/// `PATCH /api/v1/<collection>/{id}`: the fields given change, the others stay.
pub trait Update: Resource {
    fn update(
        s: &Services,
        who: &Principal,
        id: &str,
        patch: Self::Input,
    ) -> impl Future<Output = Result<Self::Item>> + Send;
}

/// `DELETE /api/v1/<collection>/{id}`: 204.
pub trait Delete: Resource {
    fn delete(s: &Services, who: &Principal, id: &str) -> impl Future<Output = Result<()>> + Send;
}

/// `POST /api/v1/<collection>/{id}/<action>`: the reconciler carries the action out; the answer
/// is the member's state after asking. The pages call [`Control::act`] too.
pub trait Control: Resource {
    type Controlled: Serialize + JsonSchema + Send;
    /// Carries out `action`, or refuses one the collection does not offer with a 404.
    fn act(
        s: &Services,
        who: &Principal,
        id: &str,
        action: Action,
    ) -> impl Future<Output = Result<Self::Controlled>> + Send;
}

// ---- the operations -------------------------------------------------------------------------

pub async fn list<R: List>(cx: Ctx) -> ApiResult<Json<ListPage<R::Item>>> {
    Ok(Json(ListPage::all(R::list(cx.state.ctx(), &cx.who).await?)))
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
            R::page(cx.state.ctx(), &cx.who, &w).await
        })
        .await
    }
}

pub async fn get<R: Get>(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<R::Detail>> {
    Ok(Json(R::get(cx.state.ctx(), &cx.who, &id).await?))
}

pub async fn create<R: Create>(
    cx: Ctx,
    Json(input): Json<R::Input>,
) -> ApiResult<Created<R::Item>> {
    Ok(Created(R::create(cx.state.ctx(), &cx.who, input).await?))
}

pub async fn preview<R: Preview>(
    cx: Ctx,
    Json(input): Json<R::Input>,
) -> ApiResult<Json<R::Preview>> {
    Ok(Json(R::preview(cx.state.ctx(), &cx.who, input).await?))
}

pub async fn patch<R: Update>(
    cx: Ctx,
    Path(id): Path<String>,
    Json(patch): Json<R::Input>,
) -> ApiResult<Json<R::Item>> {
    Ok(Json(R::update(cx.state.ctx(), &cx.who, &id, patch).await?))
}

pub async fn delete<R: Delete>(cx: Ctx, Path(id): Path<String>) -> ApiResult<NoContent> {
    R::delete(cx.state.ctx(), &cx.who, &id).await?;
    Ok(NoContent)
}

async fn act<R: Control>(cx: Ctx, id: &str, action: Action) -> ApiResult<Json<R::Controlled>> {
    Ok(Json(R::act(cx.state.ctx(), &cx.who, id, action).await?))
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

// ---- the declaration ------------------------------------------------------------------------

/// Declares a collection's marker type and its standard operations from the service functions
/// behind them, each `(&Ctx, &Principal, …)`:
///
/// ```text
/// resource! {
///     /// doc of the marker type
///     Pipelines: Pipeline, PipelineInput;
///     page("pipelines", CONNECTOR_STATES) => pipelines::page,   // Paged
///     list => replications::list,                               // List
///     get(Detail) => pipelines::detail,                         // Get, with its answer type
///     preview(Preview) => pipelines::preview,                   // Preview
///     create => pipelines::create,                              // Create
///     update => deliveries::update,                             // Update
///     delete => deliveries::delete,                             // Delete
///     control(ConnectorView) => pipelines::act,                 // Control
/// }
/// ```
macro_rules! resource {
    (
        $(#[$doc:meta])*
        $r:ident: $item:ty, $input:ty;
        $($op:ident $(($($arg:tt)*))? => $f:path),* $(,)?
    ) => {
        $(#[$doc])*
        pub struct $r;

        impl $crate::web::api::resource::Resource for $r {
            type Item = $item;
            type Input = $input;
        }

        $($crate::web::api::resource::resource!(@op $r, $op $(($($arg)*))? => $f);)*
    };
    // One arm per operation kind: the trait, its associated items, the method's own parameters
    // and answer, and how the service function is called (`cx` and `who` are named here, so
    // the call can use them).
    (@op $r:ident, page($list:literal, $states:expr) => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, Paged {
            const LIST: &'static str = $list;
            const STATES: &'static [&'static str] = $states;
        } page(cx, who, w: &$crate::listing::Window) -> ::serde_json::Value {
            Ok($f(cx, who, w).await?.json())
        });
    };
    (@op $r:ident, list => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, List {} list(cx, who) -> Vec<Self::Item> {
            $f(cx, who).await
        });
    };
    (@op $r:ident, get($detail:ty) => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, Get { type Detail = $detail; }
            get(cx, who, id: &str) -> $detail { $f(cx, who, id).await });
    };
    (@op $r:ident, preview($preview:ty) => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, Preview { type Preview = $preview; }
            preview(cx, who, input: Self::Input) -> $preview { $f(cx, who, &input).await });
    };
    (@op $r:ident, create => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, Create {}
            create(cx, who, input: Self::Input) -> Self::Item { $f(cx, who, &input).await });
    };
    (@op $r:ident, update => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, Update {}
            update(cx, who, id: &str, patch: Self::Input) -> Self::Item {
                $f(cx, who, id, &patch).await
            });
    };
    (@op $r:ident, delete => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, Delete {}
            delete(cx, who, id: &str) -> () { $f(cx, who, id).await });
    };
    (@op $r:ident, control($controlled:ty) => $f:path) => {
        $crate::web::api::resource::resource!(@impl $r, Control { type Controlled = $controlled; }
            act(cx, who, id: &str, action: $crate::web::api::resource::Action) -> $controlled {
                $f(cx, who, id, action).await
            });
    };
    (@impl $r:ident, $tr:ident { $($assoc:tt)* }
        $m:ident($cx:ident, $who:ident $(, $p:ident: $t:ty)*) -> $ret:ty $body:block) => {
        impl $crate::web::api::resource::$tr for $r {
            $($assoc)*
            async fn $m(
                $cx: &$crate::ctx::Ctx,
                $who: &$crate::auth::Principal,
                $($p: $t),*
            ) -> $crate::error::Result<$ret> $body
        }
    };
}
pub(crate) use resource;
