//! Sign-in, sign-out and first-run setup pages, and the identity guard every non-public
//! route sits behind (bearer token or session cookie, plus CSRF for browser writes).

use std::sync::Arc;

use askama::Template;
use poem::error::ResponseError;
use poem::http::{header, Method, StatusCode};
use poem::web::cookie::{Cookie, CookieJar, SameSite};
use poem::web::{Data, Form, Query};
use poem::{handler, Endpoint, IntoResponse, Middleware, Request, Response};
use serde::Deserialize;
use serde_json::json;

use super::error::{ApiError, PageError, PageResult};
use super::pages::{page_with_status, redirect};
use crate::app::AppState;
use crate::audit::{self, Actor, Entry, Outcome};
use crate::auth::{
    self, oidc, password, secure_eq, sessions, setup, token_hash, tokens, users, Principal,
};
use crate::error::{Error, FieldErrors};

pub const SESSION_COOKIE: &str = "cluecdc_session";
/// Double-submit token for the sign-in form, which has no session yet.
const LOGIN_CSRF_COOKIE: &str = "cluecdc_login_csrf";

// ---- the guard ----------------------------------------------------------------------------

/// Wraps every non-public endpoint: resolves the caller or answers 401 / a redirect to sign-in.
pub struct RequireIdentity;

impl<E: Endpoint> Middleware<E> for RequireIdentity {
    type Output = RequireIdentityEndpoint<E>;
    fn transform(&self, ep: E) -> Self::Output {
        RequireIdentityEndpoint(ep)
    }
}

pub struct RequireIdentityEndpoint<E>(E);

fn is_api(req: &Request) -> bool {
    req.uri().path().starts_with("/api/") || req.uri().path() == "/metrics"
}

fn mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn fail(req: &Request, e: Error) -> poem::Error {
    if is_api(req) {
        ApiError(e).into()
    } else {
        PageError(e).into()
    }
}

impl<E: Endpoint> Endpoint for RequireIdentityEndpoint<E> {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let state = req
            .data::<AppState>()
            .cloned()
            .ok_or_else(|| fail(&req, Error::Unexpected(anyhow::anyhow!("no state"))))?;
        let bearer = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("Bearer ").unwrap_or("").trim().to_string());
        // Resolved credentials are reused until the next commit (a revocation, a role change,
        // a sign-out is one), keyed by the credential's hash, never the credential.
        let snapshots = &state.inner.snapshots;
        let principal = match bearer {
            // A bearer header that does not resolve is refused outright, never retried as a cookie.
            Some(token) => snapshots
                .get(&format!("token {}", token_hash(&token)), || {
                    tokens::resolve(&state.pool, &token)
                })
                .await
                .map_err(|e| fail(&req, e))?,
            None => match req.cookie().get(SESSION_COOKIE) {
                Some(c) => {
                    let cookie = c.value_str().to_string();
                    snapshots
                        .get(&format!("session {}", token_hash(&cookie)), || {
                            sessions::resolve(&state.pool, &cookie, state.inner.sessions)
                        })
                        .await
                        .map_err(|e| fail(&req, e))?
                }
                None => Arc::new(None),
            },
        };
        let principal = Option::clone(&principal);
        let Some(principal) = principal else {
            return Ok(unauthenticated(&req));
        };
        if mutating(req.method()) {
            if let Some(expected) = principal.csrf_token() {
                let presented = match req
                    .headers()
                    .get("x-csrf-token")
                    .and_then(|v| v.to_str().ok())
                {
                    Some(h) => h.to_string(),
                    None => form_field(&mut req, "csrf_token").await.unwrap_or_default(),
                };
                if !secure_eq(expected, &presented) {
                    return Err(fail(&req, Error::Csrf));
                }
            }
        }
        req.extensions_mut().insert(principal);
        self.0.call(req).await.map(IntoResponse::into_response)
    }
}

/// API and htmx callers get 401; a browser navigating gets sent to sign-in and back.
fn unauthenticated(req: &Request) -> Response {
    if is_api(req) {
        return ApiError(Error::Unauthenticated).as_response();
    }
    let next = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let login = format!("/login?next={}", urlencode(next));
    if super::home::is_htmx(req) {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("HX-Redirect", login)
            .finish();
    }
    if req.method() == Method::GET {
        return Response::builder()
            .status(StatusCode::SEE_OTHER)
            .header(header::LOCATION, login)
            .finish();
    }
    PageError(Error::Unauthenticated).as_response()
}

/// Reads one field of a urlencoded body and puts the body back for the handler.
async fn form_field(req: &mut Request, name: &str) -> Option<String> {
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return None;
    }
    let bytes = req.take_body().into_bytes().await.ok()?;
    let value = url::form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned());
    req.set_body(bytes);
    value
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Only local paths: an open redirect to another site is refused.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.starts_with("/\\") => {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

/// The client's address for sign-in limits, audit rows and sessions: the TCP peer, or behind
/// a trusted proxy the address it forwarded (see [`super::forwarded`]).
fn client_address(req: &Request, state: &AppState) -> String {
    let Some(peer) = req.remote_addr().as_socket_addr().map(|a| a.ip()) else {
        return "unknown".into();
    };
    let forwarded = req
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok());
    state
        .inner
        .trusted_proxies
        .client(peer, forwarded)
        .to_string()
}

fn session_cookie(state: &AppState, value: &str, max_age_secs: i64) -> Cookie {
    let mut c = Cookie::new_with_str(SESSION_COOKIE, value);
    c.set_http_only(true);
    c.set_same_site(SameSite::Strict);
    c.set_secure(state.inner.secure_cookies);
    c.set_path("/");
    c.set_max_age(std::time::Duration::from_secs(max_age_secs.max(0) as u64));
    c
}

// ---- sign in / sign out ---------------------------------------------------------------------

#[derive(Template)]
#[template(path = "auth/login.html")]
struct LoginPage {
    next: String,
    name: String,
    csrf_token: String,
    error: Option<String>,
    /// The error is about the name and password given (the fields are marked invalid).
    error_is_local: bool,
    signed_out: bool,
    /// "Sign in with <name>", when single sign-on is configured.
    sso_name: Option<String>,
    local_passwords: bool,
}

impl LoginPage {
    fn new(state: &AppState, jar: &CookieJar, next: &str) -> Self {
        LoginPage {
            next: safe_next(Some(next)),
            name: String::new(),
            csrf_token: login_csrf(jar, state),
            error: None,
            error_is_local: false,
            signed_out: false,
            sso_name: state.inner.oidc.as_ref().map(|p| p.config.name.clone()),
            local_passwords: state.inner.local_passwords,
        }
    }
}

#[derive(Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    signed_out: Option<String>,
}

fn login_csrf(jar: &CookieJar, state: &AppState) -> String {
    if let Some(c) = jar.get(LOGIN_CSRF_COOKIE) {
        return c.value_str().to_string();
    }
    let token = auth::random_token();
    let mut c = Cookie::new_with_str(LOGIN_CSRF_COOKIE, &token);
    c.set_http_only(true);
    c.set_same_site(SameSite::Strict);
    c.set_secure(state.inner.secure_cookies);
    c.set_path("/login");
    jar.add(c);
    token
}

#[handler]
pub async fn login_page(
    Query(q): Query<LoginQuery>,
    jar: &CookieJar,
    state: Data<&AppState>,
) -> PageResult<Response> {
    let page = LoginPage {
        signed_out: q.signed_out.is_some(),
        ..LoginPage::new(&state, jar, q.next.as_deref().unwrap_or("/"))
    };
    page_with_status(StatusCode::OK, &page)
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    next: String,
    #[serde(default)]
    csrf_token: String,
}

#[handler]
pub async fn login_submit(
    req: &Request,
    Form(form): Form<LoginForm>,
    jar: &CookieJar,
    state: Data<&AppState>,
) -> PageResult<Response> {
    let expected = jar
        .get(LOGIN_CSRF_COOKIE)
        .map(|c| c.value_str().to_string())
        .unwrap_or_default();
    if expected.is_empty() || !secure_eq(&expected, &form.csrf_token) {
        return Err(PageError(Error::Csrf));
    }
    let name = form.name.trim().to_string();
    let address = client_address(req, &state);
    let again = |error: String, status: StatusCode| {
        let page = LoginPage {
            name: name.clone(),
            error: Some(error),
            error_is_local: true,
            ..LoginPage::new(&state, jar, &form.next)
        };
        page_with_status(status, &page)
    };
    if !state.inner.local_passwords {
        return again(
            "Sign-in with a name and password is turned off here; use single sign-on.".into(),
            StatusCode::FORBIDDEN,
        );
    }
    let limited = state
        .inner
        .login_limiter
        .check(&state.pool, &name, &address)
        .await
        .map_err(PageError)?;
    if let Some(wait) = limited {
        audit::record_alone(&state.pool, failed_login(&name, &address, "rate limited"))
            .await
            .map_err(PageError)?;
        return again(
            format!("Too many failed sign-ins. Try again in {wait} s."),
            StatusCode::TOO_MANY_REQUESTS,
        );
    }
    let user = users::find_by_name(&state.pool, &name)
        .await
        .map_err(PageError)?;
    let verified = password::verify(
        &form.password,
        user.as_ref().map(|u| u.password_hash.as_str()),
    );
    let user = match user {
        Some(u) if verified && !u.disabled => u,
        _ => {
            state
                .inner
                .login_limiter
                .record_failure(&state.pool, &name, &address)
                .await
                .map_err(PageError)?;
            audit::record_alone(
                &state.pool,
                failed_login(&name, &address, "wrong name or password"),
            )
            .await
            .map_err(PageError)?;
            // One message for unknown user, wrong password and disabled account.
            return again(
                "That name and password do not match an active account.".into(),
                StatusCode::UNAUTHORIZED,
            );
        }
    };
    state
        .inner
        .login_limiter
        .record_success(&state.pool, &name)
        .await
        .map_err(PageError)?;
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let session = sessions::start(
        &state.pool,
        &user,
        state.inner.sessions,
        Some(&address),
        agent,
    )
    .await
    .map_err(PageError)?;
    jar.add(session_cookie(
        &state,
        &session.cookie_value,
        state.inner.sessions.absolute_secs,
    ));
    jar.remove(LOGIN_CSRF_COOKIE);
    Ok(redirect(req, &safe_next(Some(&form.next))))
}

fn failed_login<'a>(name: &str, address: &str, why: &str) -> Entry<'a> {
    Entry {
        actor: Actor::anonymous(name),
        action: "auth.login",
        target_kind: "session",
        target_id: "-",
        outcome: Outcome::Failure,
        summary: json!({"address": address, "reason": why}),
    }
}

#[handler]
pub async fn logout(
    req: &Request,
    who: Data<&Principal>,
    jar: &CookieJar,
    state: Data<&AppState>,
) -> PageResult<Response> {
    sessions::end(&state.pool, &who).await.map_err(PageError)?;
    jar.add(session_cookie(&state, "", 0));
    // A single sign-on user is also signed out at the provider when it offers RP-initiated
    // logout (its discovery document names an end-session endpoint); else only here.
    if let Some(provider) = &state.inner.oidc {
        let sso_user = users::find_by_id(&state.pool, &who.user_id)
            .await
            .map_err(PageError)?
            .is_some_and(|u| u.oidc_issuer.as_deref() == Some(provider.config.issuer.as_str()));
        if sso_user {
            if let Some(url) = provider.end_session_url().await {
                return Ok(redirect(req, &url));
            }
        }
    }
    Ok(redirect(req, "/login?signed_out=1"))
}

// ---- single sign-on (OpenID Connect) ---------------------------------------------------------

/// The sign-in's state, for the callback only. Lax, not Strict: the provider sends the browser
/// back with a cross-site navigation, which carries Lax cookies and not the Strict session.
const OIDC_STATE_COOKIE: &str = "cluecdc_oidc_state";

fn oidc_state_cookie(state: &AppState, value: &str, max_age_secs: u64) -> Cookie {
    let mut c = Cookie::new_with_str(OIDC_STATE_COOKIE, value);
    c.set_http_only(true);
    c.set_same_site(SameSite::Lax);
    c.set_secure(state.inner.secure_cookies);
    c.set_path("/login/oidc");
    c.set_max_age(std::time::Duration::from_secs(max_age_secs));
    c
}

fn sso_provider(state: &AppState) -> PageResult<Arc<oidc::Provider>> {
    state.inner.oidc.clone().ok_or_else(|| {
        PageError(Error::NotFound(
            "single sign-on (it is not configured on this server)".into(),
        ))
    })
}

/// A refused sign-in: the sign-in page with the reason, logged and audited without tokens.
async fn sso_failed(
    req: &Request,
    jar: &CookieJar,
    state: &AppState,
    provider: &oidc::Provider,
    e: oidc::SsoError,
) -> PageResult<Response> {
    use oidc::SsoError as S;
    let status = match &e {
        S::StateMismatch | S::Expired | S::ProviderRefused(_) => StatusCode::BAD_REQUEST,
        S::TokenRefused(_) => StatusCode::UNAUTHORIZED,
        S::NoMatchingGroup { .. } | S::Disabled => StatusCode::FORBIDDEN,
        S::ProviderDown(_) => StatusCode::BAD_GATEWAY,
        S::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let message = match &e {
        S::Internal(inner) => super::error::public_message(inner),
        other => other.to_string(),
    };
    tracing::warn!(reason = e.reason(), error = %message, "single sign-on refused");
    let address = client_address(req, state);
    oidc::record_refusal(&state.pool, &e, &address).await;
    let page = LoginPage {
        error: Some(format!(
            "Sign-in with {} failed: {message}.",
            provider.config.name
        )),
        ..LoginPage::new(state, jar, "/")
    };
    page_with_status(status, &page)
}

/// Leaves for the provider: PKCE S256, state and nonce kept here, the state also in a cookie.
#[handler]
pub async fn sso_start(
    req: &Request,
    Query(q): Query<LoginQuery>,
    jar: &CookieJar,
    state: Data<&AppState>,
) -> PageResult<Response> {
    let provider = sso_provider(&state)?;
    let next = safe_next(q.next.as_deref());
    match provider.begin(&next).await {
        Ok((url, st)) => {
            jar.add(oidc_state_cookie(&state, &st, oidc::PENDING_TTL.as_secs()));
            Ok(redirect(req, &url))
        }
        Err(e) => sso_failed(req, jar, &state, &provider, e).await,
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    #[serde(default)]
    code: String,
    #[serde(default)]
    state: String,
    error: Option<String>,
    error_description: Option<String>,
}

#[derive(Template)]
#[template(path = "auth/continue.html")]
struct ContinuePage {
    next: String,
}

/// The provider's answer: checks it, finds or creates the account, sets its role from the
/// groups, starts the session. The answer is a page that moves on by itself: the browser
/// arrived here from another site, so a redirect would not carry the Strict session cookie.
#[handler]
pub async fn sso_callback(
    req: &Request,
    Query(q): Query<CallbackQuery>,
    jar: &CookieJar,
    state: Data<&AppState>,
) -> PageResult<Response> {
    let provider = sso_provider(&state)?;
    let cookie_state = jar
        .get(OIDC_STATE_COOKIE)
        .map(|c| c.value_str().to_string());
    jar.add(oidc_state_cookie(&state, "", 0));
    if let Some(error) = q.error.as_deref() {
        let said: String = format!(
            "{error}{}",
            q.error_description
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
        let e = oidc::SsoError::ProviderRefused(said);
        return sso_failed(req, jar, &state, &provider, e).await;
    }
    let outcome = async {
        let (identity, next) = provider
            .finish(cookie_state.as_deref(), &q.state, &q.code)
            .await?;
        let user = oidc::account(&state.pool, &provider.config.mapping, &identity).await?;
        Ok::<_, oidc::SsoError>((user, next))
    }
    .await;
    let (user, next) = match outcome {
        Ok(v) => v,
        Err(e) => return sso_failed(req, jar, &state, &provider, e).await,
    };
    let address = client_address(req, &state);
    let agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let session = sessions::start(
        &state.pool,
        &user,
        state.inner.sessions,
        Some(&address),
        agent,
    )
    .await
    .map_err(PageError)?;
    jar.add(session_cookie(
        &state,
        &session.cookie_value,
        state.inner.sessions.absolute_secs,
    ));
    page_with_status(
        StatusCode::OK,
        &ContinuePage {
            next: safe_next(Some(&next)),
        },
    )
}

// ---- first-run setup ------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "auth/setup.html")]
struct SetupPage {
    token: String,
    name: String,
    errors: FieldErrors,
}

#[derive(Deserialize)]
pub struct SetupQuery {
    #[serde(default)]
    token: String,
}

#[handler]
pub async fn setup_page(
    Query(q): Query<SetupQuery>,
    state: Data<&AppState>,
) -> PageResult<Response> {
    if !setup::is_valid(&state.pool, &q.token)
        .await
        .map_err(PageError)?
    {
        return Err(PageError(Error::NotFound("setup link (it was used already or has been replaced; see the server log, or run `cluecdc user create`)".into())));
    }
    page_with_status(
        StatusCode::OK,
        &SetupPage {
            token: q.token,
            name: String::new(),
            errors: FieldErrors::new(),
        },
    )
}

#[derive(Deserialize)]
pub struct SetupForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    confirm: String,
}

#[handler]
pub async fn setup_submit(
    req: &Request,
    Form(f): Form<SetupForm>,
    jar: &CookieJar,
    state: Data<&AppState>,
) -> PageResult<Response> {
    // The setup token itself is the CSRF defence here: a forger cannot know it.
    if !setup::is_valid(&state.pool, &f.token)
        .await
        .map_err(PageError)?
    {
        return Err(PageError(Error::NotFound("setup link".into())));
    }
    let again = |errors: FieldErrors| {
        page_with_status(
            StatusCode::UNPROCESSABLE_ENTITY,
            &SetupPage {
                token: f.token.clone(),
                name: f.name.clone(),
                errors,
            },
        )
    };
    if f.password != f.confirm {
        return again(
            [(
                "confirm".to_string(),
                "the two passwords differ; type the same password twice".to_string(),
            )]
            .into(),
        );
    }
    let input = users::NewUser {
        name: f.name.clone(),
        role: "admin".into(),
        password: f.password.clone(),
    };
    let user = match setup::complete(&state.pool, &f.token, &input).await {
        Ok(u) => u,
        Err(Error::Invalid { fields, .. }) => return again(fields),
        Err(e) => return Err(PageError(e)),
    };
    let address = client_address(req, &state);
    let session = sessions::start(
        &state.pool,
        &user,
        state.inner.sessions,
        Some(&address),
        None,
    )
    .await
    .map_err(PageError)?;
    jar.add(session_cookie(
        &state,
        &session.cookie_value,
        state.inner.sessions.absolute_secs,
    ));
    super::pages::set_flash(
        jar,
        &format!("Welcome, {}. You are the first admin.", user.name),
    );
    Ok(redirect(req, "/"))
}

// ---- who am I ------------------------------------------------------------------------------

/// Who `GET /api/v1/me` says the caller is.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct Me {
    pub name: String,
    pub role: crate::auth::Role,
    /// How the caller signed in.
    pub via: Via,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Session,
    Token,
    Cli,
}

pub async fn api_me(cx: super::api::Ctx) -> super::error::ApiResult<poem::web::Json<Me>> {
    let via = match cx.who.credential {
        crate::auth::Credential::Session { .. } => Via::Session,
        crate::auth::Credential::ApiToken { .. } => Via::Token,
        crate::auth::Credential::Cli => Via::Cli,
    };
    Ok(poem::web::Json(Me {
        name: cx.who.user_name.clone(),
        role: cx.who.role,
        via,
    }))
}
