//! Deliveries: `/api/v1/deliveries` and the list and detail pages.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Path, Query};
use poem::{handler, Request, Response};
use serde_json::{json, Value};

use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::deliveries::{self, Delivery, DeliveryInput, Detail};
use crate::reconcile::plan::DesiredState;

#[handler]
pub async fn api_list(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": deliveries::list(&state.pool, &who).await?}),
    ))
}

#[handler]
pub async fn api_preview(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Json(input): Json<DeliveryInput>,
) -> ApiResult<Json<deliveries::Preview>> {
    Ok(Json(
        deliveries::preview(&state.pool, &state.inner.secrets, &who, &input).await?,
    ))
}

#[handler]
pub async fn api_create(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Json(input): Json<DeliveryInput>,
) -> ApiResult<Response> {
    let d = deliveries::create(
        &state.pool,
        &state.inner.secrets,
        &state.inner.reconciler,
        &who,
        &input,
    )
    .await?;
    Ok(Response::builder()
        .status(StatusCode::CREATED)
        .content_type("application/json")
        .body(json!(d).to_string()))
}

#[handler]
pub async fn api_get(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Detail>> {
    Ok(Json(
        deliveries::detail(&state.pool, &state.inner.secrets, &who, &id).await?,
    ))
}

#[derive(serde::Deserialize)]
pub struct ObjectsQuery {
    limit: Option<usize>,
}

#[handler]
pub async fn api_objects(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
    Query(q): Query<ObjectsQuery>,
) -> ApiResult<Json<deliveries::objects::ObjectList>> {
    Ok(Json(
        deliveries::objects(
            &state.pool,
            &state.inner.secrets,
            &who,
            &id,
            q.limit.unwrap_or(20),
        )
        .await?,
    ))
}

#[handler]
pub async fn api_patch(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
    Json(patch): Json<DeliveryInput>,
) -> ApiResult<Json<deliveries::Delivery>> {
    Ok(Json(
        deliveries::update(
            &state.pool,
            &state.inner.secrets,
            &state.inner.reconciler,
            &who,
            &id,
            &patch,
        )
        .await?,
    ))
}

#[handler]
pub async fn api_delete(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    deliveries::delete(&state.pool, &state.inner.reconciler, &who, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn act(
    state: &AppState,
    who: &Principal,
    id: &str,
    action: &str,
) -> crate::error::Result<crate::connectors::ConnectorView> {
    match action {
        "pause" => {
            deliveries::set_state(
                &state.pool,
                &state.inner.reconciler,
                who,
                id,
                DesiredState::Paused,
            )
            .await
        }
        "resume" => {
            deliveries::set_state(
                &state.pool,
                &state.inner.reconciler,
                who,
                id,
                DesiredState::Running,
            )
            .await
        }
        _ => deliveries::restart(&state.pool, &state.inner.reconciler, who, id).await,
    }
}

connector_actions! {
    "/deliveries";
    api_pause, page_pause, "pause";
    api_resume, page_resume, "resume";
    api_restart, page_restart, "restart";
}

#[derive(Template)]
#[template(path = "deliveries/index.html")]
struct ListPage {
    layout: Layout,
    items: Vec<Delivery>,
}

#[handler]
pub async fn page_list(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    let items = deliveries::list(&state.pool, &who).await?;
    page_with_status(
        StatusCode::OK,
        &ListPage {
            layout: Layout::new("Deliveries", paths::DELIVERIES, &who, jar),
            items,
        },
    )
}

#[derive(Template)]
#[template(path = "deliveries/detail.html")]
struct DetailPage {
    layout: Layout,
    d: Detail,
    can_operate: bool,
}

#[handler]
pub async fn page_detail(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let d = deliveries::detail(&state.pool, &state.inner.secrets, &who, &id).await?;
    page_with_status(
        StatusCode::OK,
        &DetailPage {
            layout: Layout::new(d.delivery.name.clone(), paths::DELIVERIES, &who, jar),
            can_operate: who.role >= Role::Operator,
            d,
        },
    )
}
