//! Connect clusters (`/api/v1/connect-clusters`) and the internal endpoint the Connect config
//! provider calls, authenticated by the cluster's provider token.

use poem::http::{header, StatusCode};
use poem::web::{Data, Json, Path};
use poem::{handler, Endpoint, IntoResponse, Middleware, Request, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use crate::app::AppState;
use crate::auth::Principal;
use crate::clusters::{self, ConnectCluster, ConnectClusterInput, ProviderIdentity};
use crate::error::Error;

#[handler]
pub async fn api_list(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({"items": clusters::list(&state.pool, &who).await?}),
    ))
}

#[handler]
pub async fn api_create(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Json(input): Json<ConnectClusterInput>,
) -> ApiResult<Response> {
    let created = clusters::create(&state.pool, &state.inner.secrets, &who, &input).await?;
    Ok(Response::builder()
        .status(StatusCode::CREATED)
        .header("cache-control", "no-store")
        .content_type("application/json")
        .body(json!(created).to_string()))
}

#[handler]
pub async fn api_get(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<ConnectCluster>> {
    Ok(Json(clusters::get(&state.pool, &who, &id).await?))
}

#[handler]
pub async fn api_patch(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
    Json(patch): Json<ConnectClusterInput>,
) -> ApiResult<Json<ConnectCluster>> {
    Ok(Json(
        clusters::update(&state.pool, &state.inner.secrets, &who, &id, &patch).await?,
    ))
}

#[handler]
pub async fn api_delete(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    clusters::delete(&state.pool, &who, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[handler]
pub async fn api_provider_token(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let rotated = clusters::rotate_provider_token(&state.pool, &who, &id).await?;
    Ok(Response::builder()
        .header("cache-control", "no-store")
        .content_type("application/json")
        .body(json!(rotated).to_string()))
}

// ---- the config provider's endpoint ---------------------------------------------------------

/// Guards the internal endpoint: a Connect cluster's provider token, nothing else.
pub struct RequireProviderToken;

impl<E: Endpoint> Middleware<E> for RequireProviderToken {
    type Output = ProviderGuard<E>;
    fn transform(&self, ep: E) -> Self::Output {
        ProviderGuard(ep)
    }
}

pub struct ProviderGuard<E>(E);

impl<E: Endpoint> Endpoint for ProviderGuard<E> {
    type Output = Response;
    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let state = req
            .data::<AppState>()
            .cloned()
            .ok_or_else(|| ApiError(Error::Unexpected(anyhow::anyhow!("no state"))))?;
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("")
            .trim()
            .to_string();
        let Some(identity) = clusters::resolve_provider_token(&state.pool, &token)
            .await
            .map_err(ApiError)?
        else {
            return Err(ApiError(Error::Unauthenticated).into());
        };
        req.extensions_mut().insert(identity);
        self.0.call(req).await.map(IntoResponse::into_response)
    }
}

#[derive(Deserialize)]
pub struct ResolveBody {
    #[serde(default)]
    secret_ref: String,
    #[serde(default)]
    fields: Vec<String>,
}

#[handler]
pub async fn resolve(
    state: Data<&AppState>,
    who: Data<&ProviderIdentity>,
    Json(body): Json<ResolveBody>,
) -> ApiResult<Response> {
    let resolved = crate::secrets::resolve::resolve(
        &state.pool,
        &state.inner.secrets,
        &who,
        &body.secret_ref,
        &body.fields,
    )
    .await?;
    // Never cached anywhere on the way.
    Ok(Response::builder()
        .header("cache-control", "no-store")
        .content_type("application/json")
        .body(json!(resolved).to_string()))
}
