//! Alert channels: the pages under `/alerts/channels` and `/api/v1/alert-channels`.

use crate::db;
use std::collections::BTreeMap;

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Json, Path, Query};
use poem::{handler, Body, Request, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::api::resource;
use super::api::Ctx;
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::error::{Error, FieldErrors};
use crate::listing;
use crate::monitor::channels::{self, Attempt, Channel, ChannelInput, TestResult};
use crate::secrets::Secret;

pub const CHANNELS: &str = "/alerts/channels";

// ---- API ------------------------------------------------------------------------------------

resource::resource! {
    /// `/api/v1/alert-channels`: the standard operations (see [`resource`]).
    Channels: Channel, ChannelInput;
    list => channels::list,
    get(Channel) => channels::get,
    create => channels::create,
    update => channels::update,
    delete => channels::delete,
}

pub async fn api_test(cx: Ctx, Path(id): Path<String>) -> ApiResult<Json<TestResult>> {
    Ok(Json(
        channels::send_test(cx.state.ctx(), &cx.who, &id).await?,
    ))
}

/// `GET /api/v1/alert-channels/{id}/deliveries?limit=N`.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "AlertChannelDeliveriesQuery")]
pub struct LogQuery {
    /// The newest attempts to list: default 50, at most 200 (values outside 1–200 are clamped).
    limit: Option<i64>,
}

pub async fn api_deliveries(
    cx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> ApiResult<Json<listing::ListPage<Attempt>>> {
    let s = &cx.state;
    let limit = q.limit.unwrap_or(50);
    Ok(Json(listing::ListPage::all(
        channels::deliveries(s.ctx(), &cx.who, &id, limit).await?,
    )))
}

// ---- pages ----------------------------------------------------------------------------------

/// A row of the list: the channel and its last delivery attempt.
pub struct Listed {
    pub c: Channel,
    pub last: Option<Attempt>,
}

#[derive(Template)]
#[template(path = "channels/index.html")]
struct ListPage {
    layout: Layout,
    items: Vec<Listed>,
    kinds: Vec<(&'static str, &'static str)>,
}

fn kinds() -> Vec<(&'static str, &'static str)> {
    channels::KINDS
        .iter()
        .map(|k| (*k, channels::kind_label(k)))
        .collect()
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
) -> PageResult<Response> {
    let mut items = Vec::new();
    for c in channels::list(state.ctx(), &who).await? {
        let last = channels::deliveries(state.ctx(), &who, &c.id, 1)
            .await?
            .into_iter()
            .next();
        items.push(Listed { c, last });
    }
    page_with_status(
        StatusCode::OK,
        &ListPage {
            layout: Layout::new("Alert channels", paths::ALERTS, &who, jar),
            items,
            kinds: kinds(),
        },
    )
}

/// The form's values as submitted (secrets never echoed back).
#[derive(Debug, Default, Clone)]
pub struct FormValues {
    pub name: String,
    pub kind: String,
    pub settings: BTreeMap<String, String>,
    pub rules: Vec<String>,
    pub severities: Vec<String>,
    pub group_wait_secs: String,
    pub tls_ca_certificate: String,
    pub enabled: bool,
}

impl FormValues {
    fn of(c: &Channel) -> Self {
        FormValues {
            name: c.name.clone(),
            kind: c.kind.clone(),
            settings: c.settings.clone(),
            rules: c.rules.clone(),
            severities: c.severities.clone(),
            group_wait_secs: c.group_wait_secs.to_string(),
            tls_ca_certificate: c.tls_ca_certificate.clone().unwrap_or_default(),
            enabled: c.enabled,
        }
    }

    fn fresh(kind: &str) -> Self {
        FormValues {
            kind: kind.to_string(),
            severities: channels::SEVERITIES.iter().map(|s| s.to_string()).collect(),
            group_wait_secs: channels::DEFAULT_GROUP_WAIT_SECS.to_string(),
            enabled: true,
            ..Default::default()
        }
    }

    pub fn setting(&self, k: &str) -> &str {
        self.settings.get(k).map_or("", String::as_str)
    }

    pub fn has_rule(&self, k: &str) -> bool {
        self.rules.iter().any(|r| r == k)
    }

    pub fn has_severity(&self, k: &str) -> bool {
        self.severities.iter().any(|r| r == k)
    }
}

/// Form bodies: `settings.<key>`, `secrets.<key>` (empty: keep), repeated `rules` and
/// `severities`, `enabled` when ticked.
fn form_input(body: &[u8]) -> Result<(ChannelInput, FormValues), FieldErrors> {
    let mut v = FormValues::default();
    let mut secrets = BTreeMap::new();
    let mut errors = FieldErrors::new();
    for (k, val) in url::form_urlencoded::parse(body) {
        let val = val.into_owned();
        match k.as_ref() {
            "name" => v.name = val,
            "kind" => v.kind = val,
            "rules" => v.rules.push(val),
            "severities" => v.severities.push(val),
            "group_wait_secs" => v.group_wait_secs = val,
            "tls_ca_certificate" => v.tls_ca_certificate = val,
            "enabled" => v.enabled = true,
            key => {
                if let Some(s) = key.strip_prefix("settings.") {
                    v.settings.insert(s.to_string(), val);
                } else if let Some(s) = key.strip_prefix("secrets.") {
                    if !val.trim().is_empty() {
                        secrets.insert(s.to_string(), Secret::new(val));
                    }
                }
            }
        }
    }
    let group_wait_secs = match v.group_wait_secs.trim().parse::<i64>() {
        Ok(n) => Some(n),
        Err(_) => {
            errors.insert(
                "group_wait_secs".into(),
                "whole seconds, 0 to 600, e.g. 10".into(),
            );
            None
        }
    };
    let input = ChannelInput {
        name: Some(v.name.clone()),
        kind: Some(v.kind.clone()),
        settings: Some(
            v.settings
                .iter()
                .map(|(k, s)| (k.clone(), Value::String(s.clone())))
                .collect(),
        ),
        secrets: Some(secrets),
        rules: Some(v.rules.clone()),
        severities: Some(v.severities.clone()),
        group_wait_secs,
        tls_ca_certificate: Some(v.tls_ca_certificate.clone()),
        enabled: Some(v.enabled),
    };
    if errors.is_empty() {
        Ok((input, v))
    } else {
        Err(errors)
    }
}

#[derive(Template)]
#[template(path = "channels/form.html")]
struct FormPage {
    layout: Layout,
    /// The channel being edited; None on the create page.
    channel: Option<Channel>,
    v: FormValues,
    errors: FieldErrors,
    rules: Vec<String>,
    severities: &'static [&'static str],
    log: Vec<Attempt>,
    channel_id: String,
}

impl FormPage {
    fn action(&self) -> String {
        match &self.channel {
            Some(c) => format!("{CHANNELS}/{}", c.id),
            None => CHANNELS.to_string(),
        }
    }

    fn error(&self, field: &str) -> Option<&String> {
        self.errors.get(field)
    }

    fn kind_label(&self) -> &'static str {
        channels::kind_label(&self.v.kind)
    }

    fn secret_is_set(&self) -> bool {
        self.channel.as_ref().is_some_and(Channel::secret_set)
    }
}

async fn form_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    channel: Option<Channel>,
    v: FormValues,
    errors: FieldErrors,
) -> Result<FormPage, Error> {
    let rules = db::query_scalar("SELECT kind FROM alert_rules ORDER BY kind")
        .fetch_all(&state.pool)
        .await?;
    let log = match &channel {
        Some(c) => channels::deliveries(state.ctx(), who, &c.id, 50).await?,
        None => vec![],
    };
    let title = match &channel {
        Some(c) => format!("Alert channel {}", c.name),
        None => format!("New {} channel", channels::kind_label(&v.kind)),
    };
    Ok(FormPage {
        layout: Layout::new(title, paths::ALERTS, who, jar),
        channel_id: channel.as_ref().map(|c| c.id.clone()).unwrap_or_default(),
        channel,
        v,
        errors,
        rules,
        severities: channels::SEVERITIES,
        log,
    })
}

#[derive(Deserialize)]
pub struct NewQuery {
    kind: Option<String>,
}

#[handler]
pub async fn new_page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<NewQuery>,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage alert channels")?;
    let kind = q
        .kind
        .filter(|k| channels::KINDS.contains(&k.as_str()))
        .unwrap_or_else(|| "slack".into());
    let view = form_page(
        &state,
        &who,
        jar,
        None,
        FormValues::fresh(&kind),
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
    body: Body,
) -> PageResult<Response> {
    who.require(Role::Admin, "manage alert channels")?;
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let result = match form_input(&bytes) {
        Ok((input, v)) => (channels::create(state.ctx(), &who, &input).await, v),
        Err(fields) => (
            Err(Error::Invalid {
                message: "check the channel's fields".into(),
                fields,
            }),
            form_values(&bytes),
        ),
    };
    match result {
        (Ok(c), _) => {
            set_flash(
                jar,
                &format!("Channel {} saved. Press Send test to check it.", c.name),
            );
            Ok(redirect(req, &format!("{CHANNELS}/{}", c.id)))
        }
        (Err(Error::Invalid { fields, .. }), v) => {
            let view = form_page(&state, &who, jar, None, v, fields).await?;
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &view)
        }
        (Err(e), _) => Err(e.into()),
    }
}

/// What the form showed, for re-rendering it when a number did not parse.
fn form_values(body: &[u8]) -> FormValues {
    let mut v = FormValues::default();
    for (k, val) in url::form_urlencoded::parse(body) {
        let val = val.into_owned();
        match k.as_ref() {
            "name" => v.name = val,
            "kind" => v.kind = val,
            "rules" => v.rules.push(val),
            "severities" => v.severities.push(val),
            "group_wait_secs" => v.group_wait_secs = val,
            "tls_ca_certificate" => v.tls_ca_certificate = val,
            "enabled" => v.enabled = true,
            key => {
                if let Some(s) = key.strip_prefix("settings.") {
                    v.settings.insert(s.to_string(), val);
                }
            }
        }
    }
    v
}

#[handler]
pub async fn detail_page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let c = channels::get(state.ctx(), &who, &id).await?;
    let v = FormValues::of(&c);
    let view = form_page(&state, &who, jar, Some(c), v, FieldErrors::new()).await?;
    page_with_status(StatusCode::OK, &view)
}

#[handler]
pub async fn update_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
    body: Body,
) -> PageResult<Response> {
    let c = channels::get(state.ctx(), &who, &id).await?;
    let bytes = body
        .into_bytes()
        .await
        .map_err(|e| Error::Unexpected(e.into()))?;
    let result = match form_input(&bytes) {
        Ok((mut input, v)) => {
            input.kind = None;
            (channels::update(state.ctx(), &who, &c.id, &input).await, v)
        }
        Err(fields) => (
            Err(Error::Invalid {
                message: "check the channel's fields".into(),
                fields,
            }),
            form_values(&bytes),
        ),
    };
    match result {
        (Ok(c), _) => {
            set_flash(jar, &format!("Channel {} saved.", c.name));
            Ok(redirect(req, &format!("{CHANNELS}/{}", c.id)))
        }
        (Err(Error::Invalid { fields, .. }), mut v) => {
            v.kind = c.kind.clone();
            let view = form_page(&state, &who, jar, Some(c), v, fields).await?;
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &view)
        }
        (Err(e), _) => Err(e.into()),
    }
}

#[handler]
pub async fn delete_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let c = channels::get(state.ctx(), &who, &id).await?;
    channels::delete(state.ctx(), &who, &c.id).await?;
    set_flash(jar, &format!("Channel {} removed.", c.name));
    Ok(redirect(req, CHANNELS))
}

#[derive(Template)]
#[template(path = "channels/test_partial.html")]
struct TestPartial {
    result: TestResult,
    log: Vec<Attempt>,
    channel_id: String,
}

/// "Send test": the answer and the refreshed delivery log, swapped in place.
#[handler]
pub async fn test_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let c = channels::get(state.ctx(), &who, &id).await?;
    let result = channels::send_test(state.ctx(), &who, &c.id).await?;
    if !super::home::is_htmx(req) {
        set_flash(
            jar,
            &match (&result.error, result.status_code) {
                (None, _) => "Test sent: the channel answered.".to_string(),
                (Some(e), _) => format!("Test failed: {e}"),
            },
        );
        return Ok(redirect(req, &format!("{CHANNELS}/{}", c.id)));
    }
    let log = channels::deliveries(state.ctx(), &who, &c.id, 50).await?;
    page_with_status(
        StatusCode::OK,
        &TestPartial {
            result,
            log,
            channel_id: c.id,
        },
    )
}

#[derive(Template)]
#[template(path = "channels/log_partial.html")]
struct LogPartial {
    log: Vec<Attempt>,
    channel_id: String,
}

#[handler]
pub async fn log_fragment(
    state: Data<&AppState>,
    who: Data<&Principal>,
    Path(id): Path<String>,
) -> PageResult<Response> {
    let c = channels::get(state.ctx(), &who, &id).await?;
    let log = channels::deliveries(state.ctx(), &who, &c.id, 50).await?;
    page_with_status(
        StatusCode::OK,
        &LogPartial {
            log,
            channel_id: c.id,
        },
    )
}
