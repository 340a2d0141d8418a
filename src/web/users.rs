//! Users and their sessions: the admin page and `/api/v1/users`, `/api/v1/sessions`.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path};
use poem::{handler, Request, Response};
use serde::Deserialize;

use super::api::{Created, Ctx, NoContent};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::sessions::{self, SessionInfo};
use crate::auth::users::{self, NewUser, User};
use crate::auth::{Principal, Role};
use crate::error::{Error, FieldErrors};
use crate::listing::ListPage;
use schemars::JsonSchema;

#[derive(Template)]
#[template(path = "users/index.html")]
struct UsersPage {
    layout: Layout,
    users: Vec<User>,
    sessions: Vec<SessionInfo>,
    form: NewUser,
    errors: FieldErrors,
    roles: [Role; 3],
}

async fn users_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    form: NewUser,
    errors: FieldErrors,
) -> Result<UsersPage, Error> {
    Ok(UsersPage {
        layout: Layout::new("Users", paths::USERS, who, jar),
        users: users::list(&state.pool, who).await?,
        sessions: sessions::list_live(&state.pool, who).await?,
        form: NewUser {
            password: String::new(),
            ..form
        },
        errors,
        roles: Role::ALL,
    })
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    let view = users_page(
        &state,
        &who,
        jar,
        NewUser {
            role: "viewer".into(),
            ..Default::default()
        },
        FieldErrors::new(),
    )
    .await?;
    page_with_status(StatusCode::OK, &view)
}

#[handler]
pub async fn create_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Form(form): Form<NewUser>,
) -> PageResult<Response> {
    match users::create(&state.pool, &who, &form).await {
        Ok(user) => {
            set_flash(
                jar,
                &format!("User {} created with role {}.", user.name, user.role),
            );
            Ok(redirect(req, paths::USERS))
        }
        Err(Error::Invalid { fields, .. }) => {
            let view = users_page(&state, &who, jar, form, fields).await?;
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &view)
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
pub struct RoleForm {
    #[serde(default)]
    role: String,
}

#[handler]
pub async fn set_role_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    Form(f): Form<RoleForm>,
) -> PageResult<Response> {
    let user = users::set_role(&state.pool, &who, &id, &f.role).await?;
    set_flash(jar, &format!("{} is now {}.", user.name, user.role));
    Ok(redirect(req, paths::USERS))
}

#[handler]
pub async fn disable_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    users::set_disabled(&state.pool, &who, &id, true).await?;
    set_flash(
        jar,
        "User disabled; their sessions and tokens stopped working.",
    );
    Ok(redirect(req, paths::USERS))
}

#[handler]
pub async fn enable_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    users::set_disabled(&state.pool, &who, &id, false).await?;
    set_flash(jar, "User enabled.");
    Ok(redirect(req, paths::USERS))
}

#[handler]
pub async fn revoke_session_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    sessions::revoke(&state.pool, &who, &id).await?;
    set_flash(jar, "Session revoked.");
    Ok(redirect(req, paths::USERS))
}

// ---- JSON API -------------------------------------------------------------------------------

pub async fn api_list(cx: Ctx) -> ApiResult<Json<ListPage<User>>> {
    Ok(Json(ListPage::all(
        users::list(&cx.state.pool, &cx.who).await?,
    )))
}

pub async fn api_create(cx: Ctx, Json(input): Json<NewUser>) -> ApiResult<Created<User>> {
    Ok(Created(
        users::create(&cx.state.pool, &cx.who, &input).await?,
    ))
}

/// What `PATCH /api/v1/users/{id}` may change; fields left out stay as they are.
#[derive(Deserialize, JsonSchema)]
pub struct UserPatch {
    role: Option<Role>,
    disabled: Option<bool>,
}

pub async fn api_patch(
    cx: Ctx,
    Path(id): Path<String>,
    Json(p): Json<UserPatch>,
) -> ApiResult<Json<User>> {
    let (pool, who) = (&cx.state.pool, &cx.who);
    who.require(Role::Admin, "change users")?;
    if let Some(role) = p.role {
        users::set_role(pool, who, &id, role.as_str()).await?;
    }
    if let Some(disabled) = p.disabled {
        users::set_disabled(pool, who, &id, disabled).await?;
    }
    let user = users::find_by_id(pool, &id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("user {id}")))?;
    Ok(Json(user))
}

pub async fn api_sessions(cx: Ctx) -> ApiResult<Json<ListPage<SessionInfo>>> {
    Ok(Json(ListPage::all(
        sessions::list_live(&cx.state.pool, &cx.who).await?,
    )))
}

pub async fn api_revoke_session(cx: Ctx, Path(id): Path<String>) -> ApiResult<NoContent> {
    sessions::revoke(&cx.state.pool, &cx.who, &id).await?;
    Ok(NoContent)
}
