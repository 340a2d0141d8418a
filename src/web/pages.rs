//! What every page shares: the layout (navigation by role, the signed-in user, the CSRF
//! token, a flash message), redirects that also work for htmx, and the error page.

use askama::Template;
use poem::http::{header, StatusCode};
use poem::web::cookie::{Cookie, CookieJar, SameSite};
use poem::{Request, Response};

use crate::auth::{Principal, Role};

const FLASH_COOKIE: &str = "cluecdc_flash";

pub struct NavItem {
    pub href: &'static str,
    pub label: &'static str,
    pub current: bool,
}

/// Data for `base.html`; every page struct has one as `layout`.
pub struct Layout {
    pub title: String,
    pub version: &'static str,
    pub user_name: String,
    pub role: &'static str,
    pub csrf_token: String,
    pub nav: Vec<NavItem>,
    /// The Settings section's links, with the current page marked; empty elsewhere.
    pub settings: Vec<NavItem>,
    pub flash: Option<String>,
}

/// Navigation: (path, label, lowest role that sees it). Pages a role cannot use are not shown.
const NAV: &[(&str, &str, Role)] = &[
    (super::paths::HOME, "Overview", Role::Viewer),
    (super::paths::CONNECTIONS, "Connections", Role::Viewer),
    (super::paths::PIPELINES, "Pipelines", Role::Viewer),
    (super::paths::DELIVERIES, "Deliveries", Role::Viewer),
    (super::paths::REPLICATIONS, "Replications", Role::Viewer),
    (super::paths::CONNECTORS, "Connectors", Role::Viewer),
    (super::paths::CLUSTERS, "Clusters", Role::Viewer),
    (super::paths::TOPICS, "Topics", Role::Viewer),
    (super::paths::ALERTS, "Alerts", Role::Viewer),
    (super::paths::AUDIT, "Audit", Role::Viewer),
    (super::paths::USERS, "Settings", Role::Admin),
];

/// The Settings section's pages, linked from one another (the sub-navigation in `base.html`);
/// the main navigation has one entry for all of them, so it fits one line at 1280 px.
const SETTINGS: &[(&str, &str)] = &[
    (super::paths::USERS, "Users"),
    (super::paths::TOKENS, "API tokens"),
    (super::paths::CONFIGURATION, "Configuration"),
];

impl Layout {
    pub fn new(title: impl Into<String>, current: &str, who: &Principal, jar: &CookieJar) -> Self {
        let flash = jar
            .get(FLASH_COOKIE)
            .map(|c| c.value_str().to_string())
            .filter(|s| !s.is_empty());
        if flash.is_some() {
            // Expire it on the same path it was set on, or the browser keeps it.
            let mut gone = Cookie::new_with_str(FLASH_COOKIE, "");
            gone.set_path("/");
            gone.set_max_age(std::time::Duration::ZERO);
            jar.add(gone);
        }
        Layout {
            title: title.into(),
            version: env!("CARGO_PKG_VERSION"),
            user_name: who.user_name.clone(),
            role: who.role.as_str(),
            csrf_token: who.csrf_token().unwrap_or_default().to_string(),
            nav: NAV
                .iter()
                .filter(|(_, _, role)| who.role >= *role)
                .map(|(href, label, _)| NavItem {
                    href,
                    label,
                    current: *href == current || (in_settings(href) && in_settings(current)),
                })
                .collect(),
            settings: if in_settings(current) {
                SETTINGS
                    .iter()
                    .map(|(href, label)| NavItem {
                        href,
                        label,
                        current: *href == current,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            flash,
        }
    }
}

fn in_settings(path: &str) -> bool {
    SETTINGS.iter().any(|(href, _)| *href == path)
}

/// A one-shot message shown on the next page (after a redirect).
pub fn set_flash(jar: &CookieJar, message: &str) {
    let mut c = Cookie::new_with_str(FLASH_COOKIE, message.chars().take(300).collect::<String>());
    c.set_http_only(true);
    c.set_same_site(SameSite::Strict);
    c.set_path("/");
    c.set_max_age(std::time::Duration::from_secs(60));
    jar.add(c);
}

/// After a successful form post: 303 to `to`, or for htmx an `HX-Redirect` so the whole page
/// changes (and the URL with it).
pub fn redirect(req: &Request, to: &str) -> Response {
    if super::home::is_htmx(req) {
        Response::builder()
            .status(StatusCode::OK)
            .header("HX-Redirect", to)
            .finish()
    } else {
        Response::builder()
            .status(StatusCode::SEE_OTHER)
            .header(header::LOCATION, to)
            .finish()
    }
}

/// Renders a page with a status (422 for a form with field errors).
pub fn page_with_status<T: Template>(
    status: StatusCode,
    t: &T,
) -> super::error::PageResult<Response> {
    let html = render_sized(t).map_err(|e| super::error::PageError(render_error(e)))?;
    Ok(Response::builder()
        .status(status)
        .content_type("text/html; charset=utf-8")
        .body(html))
}

#[derive(Template)]
#[template(path = "errors/error.html")]
pub struct ErrorPage {
    pub status: u16,
    pub title: String,
    pub message: String,
    pub request_id: String,
    pub sign_in: bool,
}

/// A template that failed to render: a server bug.
pub fn render_error(e: askama::Error) -> crate::error::Error {
    crate::error::Error::Unexpected(anyhow::anyhow!("template failed to render: {e}"))
}

/// Renders `t` into a buffer reserved at the size this template last rendered to (plus an
/// eighth), so that a large page is written once instead of through a buffer that doubles:
/// askama reserves only its compile-time estimate, and a 70 KB list page then copied about
/// 120 KB in reallocations (16 % of the connectors page's CPU at 64 clients, `perf`).
pub fn render_sized<T: Template>(t: &T) -> askama::Result<String> {
    type Sizes = std::collections::HashMap<&'static str, usize>;
    static SIZES: std::sync::LazyLock<std::sync::Mutex<Sizes>> =
        std::sync::LazyLock::new(Default::default);
    let name = std::any::type_name::<T>();
    let sizes = || SIZES.lock().unwrap_or_else(|e| e.into_inner());
    let last = sizes().get(name).copied().unwrap_or(0);
    let mut html = String::with_capacity(T::SIZE_HINT.max(last + last / 8));
    t.render_into(&mut html)?;
    sizes().insert(name, html.len());
    Ok(html)
}
