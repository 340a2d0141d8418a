//! API tokens: the admin page (the token is shown once) and `/api/v1/tokens`.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Path};
use poem::{handler, Request, Response};

use super::api::{Created, Ctx, NoContent, NoStore};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::tokens::{self, NewToken, TokenInfo};
use crate::auth::users::{self, User};
use crate::auth::Principal;
use crate::error::{Error, FieldErrors};
use crate::listing::ListPage;

#[derive(Template)]
#[template(path = "tokens/index.html")]
struct TokensPage {
    layout: Layout,
    tokens: Vec<TokenInfo>,
    users: Vec<User>,
    form: NewToken,
    errors: FieldErrors,
    /// Set only on the response that created a token: the one time it is shown.
    created: Option<String>,
}

async fn tokens_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    form: NewToken,
    errors: FieldErrors,
    created: Option<String>,
) -> Result<TokensPage, Error> {
    Ok(TokensPage {
        layout: Layout::new("API tokens", paths::TOKENS, who, jar),
        tokens: tokens::list(&state.pool, who).await?,
        users: users::list(&state.pool, who).await?,
        form,
        errors,
        created,
    })
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    let form = NewToken {
        user: who.user_name.clone(),
        expires: "90d".into(),
        ..Default::default()
    };
    page_with_status(
        StatusCode::OK,
        &tokens_page(&state, &who, jar, form, FieldErrors::new(), None).await?,
    )
}

/// Answers with the page itself (not a redirect): the token must not travel in a URL or a
/// cookie, and this response is the only place it appears.
#[handler]
pub async fn create_form(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Form(form): Form<NewToken>,
) -> PageResult<Response> {
    match tokens::create(&state.pool, &who, &form).await {
        Ok(created) => {
            let view = tokens_page(
                &state,
                &who,
                jar,
                NewToken {
                    user: form.user,
                    expires: "90d".into(),
                    ..Default::default()
                },
                FieldErrors::new(),
                Some(created.token),
            )
            .await?;
            let mut res = page_with_status(StatusCode::OK, &view)?;
            res.headers_mut().insert(
                "cache-control",
                poem::http::HeaderValue::from_static("no-store"),
            );
            Ok(res)
        }
        Err(Error::Invalid { fields, .. }) => page_with_status(
            StatusCode::UNPROCESSABLE_ENTITY,
            &tokens_page(&state, &who, jar, form, fields, None).await?,
        ),
        Err(e) => Err(e.into()),
    }
}

#[handler]
pub async fn revoke_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    tokens::revoke(&state.pool, &who, &id).await?;
    set_flash(jar, "Token revoked; it stopped working at once.");
    Ok(redirect(req, paths::TOKENS))
}

pub async fn api_list(cx: Ctx) -> ApiResult<Json<ListPage<TokenInfo>>> {
    Ok(Json(ListPage::all(
        tokens::list(&cx.state.pool, &cx.who).await?,
    )))
}

pub async fn api_create(
    cx: Ctx,
    Json(input): Json<NewToken>,
) -> ApiResult<NoStore<Created<tokens::Created>>> {
    Ok(NoStore(Created(
        tokens::create(&cx.state.pool, &cx.who, &input).await?,
    )))
}

pub async fn api_revoke(cx: Ctx, Path(id): Path<String>) -> ApiResult<NoContent> {
    tokens::revoke(&cx.state.pool, &cx.who, &id).await?;
    Ok(NoContent)
}
