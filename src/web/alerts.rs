//! Alerts: the page, the header badge every page loads, and `/api/v1/alerts`.

use askama::Template;
use poem::http::StatusCode;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Form, Json, Query};
use poem::{handler, Request, Response};
use schemars::JsonSchema;
use serde::Deserialize;

use super::api::{paged, Created, Ctx, NoContent, Serialized};
use super::error::{ApiResult, PageResult};
use super::pages::{page_with_status, redirect, set_flash, Layout};
use super::paths;
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::error::{Error, FieldErrors};
use crate::listing::{self, ListPage, ListQuery, Nav, Window};
use crate::monitor::alerts::{self, Alert};
use crate::monitor::signals::{self, RulePatch, Sample, SampleKind};
use crate::monitor::webhooks::{self, WebhookInput};
use poem::web::Path;

/// Alerts, open ones first, then newest first (`state=firing` for the open ones).
pub async fn api_list(
    cx: Ctx,
    Query(q): Query<ListQuery>,
) -> ApiResult<Serialized<ListPage<Alert>>> {
    let cx = &cx;
    paged(cx, "alerts", &q, alerts::STATES, |w| async move {
        Ok(alerts::page(&cx.state.pool, &cx.who, &w).await?.json())
    })
    .await
}

#[derive(Template)]
#[template(path = "alerts/index.html")]
struct AlertsPage {
    layout: Layout,
    nav: Nav,
    items: Vec<Alert>,
    rules: Vec<signals::Rule>,
    /// Admins only (webhook URLs are configuration).
    webhooks: Vec<webhooks::Webhook>,
    can_operate: bool,
    is_admin: bool,
    /// A refused change: the rule it was for, what was submitted, and the field errors.
    refused: Option<(String, RuleForm, FieldErrors)>,
    webhook_form: WebhookForm,
    webhook_errors: FieldErrors,
}

impl AlertsPage {
    fn refused_for(&self, kind: &str) -> Option<&(String, RuleForm, FieldErrors)> {
        self.refused.as_ref().filter(|(k, _, _)| k == kind)
    }

    /// The field errors of a refused change to this rule, if that is what this page shows.
    fn errors_for(&self, kind: &str) -> Option<&FieldErrors> {
        self.refused_for(kind).map(|(_, _, e)| e)
    }

    /// What the rule's inputs show: the refused submission, else the stored rule.
    fn threshold_of(&self, r: &signals::Rule) -> String {
        self.refused_for(&r.kind)
            .map(|(_, f, _)| f.threshold.clone())
            .unwrap_or_else(|| r.threshold.to_string())
    }

    fn for_secs_of(&self, r: &signals::Rule) -> String {
        self.refused_for(&r.kind)
            .map(|(_, f, _)| f.for_secs.clone())
            .unwrap_or_else(|| r.for_secs.to_string())
    }

    fn enabled_of(&self, r: &signals::Rule) -> bool {
        self.refused_for(&r.kind)
            .map(|(_, f, _)| f.enabled.is_some())
            .unwrap_or(r.enabled)
    }
}

async fn alerts_page(
    state: &AppState,
    who: &Principal,
    jar: &CookieJar,
    w: &Window,
    refused: Option<(String, RuleForm, FieldErrors)>,
    webhook_form: WebhookForm,
    webhook_errors: FieldErrors,
) -> Result<AlertsPage, Error> {
    let is_admin = who.role >= Role::Admin;
    let found = listing::cached(&state.inner.snapshots, "alerts", w, || {
        alerts::page(&state.pool, who, w)
    })
    .await?;
    let mut nav = Nav::new(
        paths::ALERTS,
        ("alert", "alerts"),
        w,
        alerts::STATES,
        vec![],
        &found,
    );
    nav.sortable = false;
    Ok(AlertsPage {
        layout: Layout::new("Alerts", paths::ALERTS, who, jar),
        nav,
        items: found.items.clone(),
        rules: Vec::clone(
            &*(state.inner.snapshots)
                .recent("alert-rules", || signals::rules(&state.pool, who))
                .await?,
        ),
        // Only admins see webhooks (and may read them): not shared with other roles.
        webhooks: if is_admin {
            Vec::clone(
                &*(state.inner.snapshots)
                    .recent("webhooks (admin)", || webhooks::list(&state.pool, who))
                    .await?,
            )
        } else {
            vec![]
        },
        can_operate: who.role >= Role::Operator,
        is_admin,
        refused,
        webhook_form,
        webhook_errors,
    })
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Query(q): Query<ListQuery>,
) -> PageResult<Response> {
    let view = alerts_page(
        &state,
        &who,
        jar,
        &q.window(alerts::STATES)?,
        None,
        WebhookForm::default(),
        FieldErrors::new(),
    )
    .await?;
    page_with_status(StatusCode::OK, &view)
}

#[handler]
pub async fn ack_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    alerts::acknowledge(&state.pool, &who, &id).await?;
    set_flash(
        jar,
        "Acknowledged: it stays open until its cause goes away.",
    );
    Ok(redirect(req, paths::ALERTS))
}

/// A rule's row on the page: numbers arrive as text, the checkbox only when ticked.
#[derive(Debug, Deserialize)]
pub struct RuleForm {
    #[serde(default)]
    threshold: String,
    #[serde(default)]
    for_secs: String,
    enabled: Option<String>,
}

impl RuleForm {
    fn patch(&self) -> Result<RulePatch, FieldErrors> {
        let mut errors = FieldErrors::new();
        let threshold = self
            .threshold
            .trim()
            .parse::<f64>()
            .map_err(|_| errors.insert("threshold".into(), "a number ≥ 0, e.g. 10000".into()))
            .ok();
        let for_secs = self
            .for_secs
            .trim()
            .parse::<i64>()
            .map_err(|_| errors.insert("for_secs".into(), "whole seconds, 0 to 86400".into()))
            .ok();
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(RulePatch {
            threshold,
            for_secs,
            enabled: Some(self.enabled.is_some()),
        })
    }
}

#[handler]
pub async fn save_rule_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(kind): Path<String>,
    Form(form): Form<RuleForm>,
) -> PageResult<Response> {
    // Before reading the form: a viewer is refused, not told which number is wrong.
    who.require(Role::Admin, "change alert rules")?;
    let result = match form.patch() {
        Ok(patch) => signals::set_rule(&state.pool, &who, &kind, &patch).await,
        Err(fields) => Err(Error::Invalid {
            message: "check the rule's fields".into(),
            fields,
        }),
    };
    match result {
        Ok(rule) => {
            set_flash(jar, &format!("Rule {} saved.", rule.kind));
            Ok(redirect(req, paths::ALERTS))
        }
        Err(Error::Invalid { fields, .. }) => {
            let view = alerts_page(
                &state,
                &who,
                jar,
                &Window::default(),
                Some((kind, form, fields)),
                WebhookForm::default(),
                FieldErrors::new(),
            )
            .await?;
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &view)
        }
        Err(e) => Err(e.into()),
    }
}

/// The webhook form; the secret is never echoed back into the page.
#[derive(Debug, Default, Deserialize)]
pub struct WebhookForm {
    #[serde(default)]
    url: String,
    #[serde(default)]
    secret: String,
    /// PEM, for an https URL signed by a private CA; empty: the built-in roots.
    #[serde(default)]
    tls_ca_certificate: String,
}

#[handler]
pub async fn add_webhook_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Form(form): Form<WebhookForm>,
) -> PageResult<Response> {
    let input = WebhookInput {
        url: Some(form.url.clone()),
        secret: Some(crate::secrets::Secret::new(form.secret.clone())),
        tls_ca_certificate: Some(form.tls_ca_certificate.clone()),
    };
    match webhooks::create(&state.pool, &state.inner.ctx.secrets, &who, &input).await {
        Ok(w) => {
            set_flash(
                jar,
                &format!(
                    "Webhook added: every alert that fires or resolves is POSTed to {}.",
                    w.url
                ),
            );
            Ok(redirect(req, paths::ALERTS))
        }
        Err(Error::Invalid { fields, .. }) => {
            let kept = WebhookForm {
                url: form.url,
                secret: String::new(),
                tls_ca_certificate: form.tls_ca_certificate,
            };
            let view =
                alerts_page(&state, &who, jar, &Window::default(), None, kept, fields).await?;
            page_with_status(StatusCode::UNPROCESSABLE_ENTITY, &view)
        }
        Err(e) => Err(e.into()),
    }
}

#[handler]
pub async fn webhook_delete_form(
    req: &Request,
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    Path(id): Path<String>,
) -> PageResult<Response> {
    webhooks::delete(&state.pool, &who, &id).await?;
    set_flash(jar, "Webhook removed.");
    Ok(redirect(req, paths::ALERTS))
}

#[derive(Template)]
#[template(path = "alerts/badge_partial.html")]
struct Badge {
    firing: i64,
}

/// Loaded into the header of every page, and refreshed.
#[handler]
pub async fn badge(state: Data<&AppState>) -> PageResult<Response> {
    let firing = alerts::firing_count(&state.pool).await?;
    page_with_status(StatusCode::OK, &Badge { firing })
}

// ---- rules, acknowledgement, webhooks, samples, /metrics -------------------------------------

pub async fn api_rules(cx: Ctx) -> ApiResult<Json<ListPage<signals::Rule>>> {
    Ok(Json(ListPage::all(
        signals::rules(&cx.state.pool, &cx.who).await?,
    )))
}

pub async fn api_rule_patch(
    cx: Ctx,
    Path(kind): Path<String>,
    Json(p): Json<RulePatch>,
) -> ApiResult<Json<signals::Rule>> {
    Ok(Json(
        signals::set_rule(&cx.state.pool, &cx.who, &kind, &p).await?,
    ))
}

pub async fn api_ack(cx: Ctx, Path(id): Path<String>) -> ApiResult<NoContent> {
    alerts::acknowledge(&cx.state.pool, &cx.who, &id).await?;
    Ok(NoContent)
}

pub async fn api_webhooks(cx: Ctx) -> ApiResult<Json<ListPage<webhooks::Webhook>>> {
    Ok(Json(ListPage::all(
        webhooks::list(&cx.state.pool, &cx.who).await?,
    )))
}

pub async fn api_webhook_create(
    cx: Ctx,
    Json(input): Json<WebhookInput>,
) -> ApiResult<Created<webhooks::Webhook>> {
    Ok(Created(
        webhooks::create(&cx.state.pool, &cx.state.inner.ctx.secrets, &cx.who, &input).await?,
    ))
}

pub async fn api_webhook_delete(cx: Ctx, Path(id): Path<String>) -> ApiResult<NoContent> {
    webhooks::delete(&cx.state.pool, &cx.who, &id).await?;
    Ok(NoContent)
}

/// Which signal's history `GET /api/v1/samples` answers.
#[derive(Deserialize, JsonSchema)]
pub struct SampleQuery {
    kind: SampleKind,
    /// The pipeline, delivery, replication or `<delivery>/<table>` the signal is measured for.
    #[serde(default)]
    subject: String,
    /// The newest this many samples (default 500; clamped to 1..10000).
    limit: Option<i64>,
}

/// A signal's recent samples, oldest first.
pub async fn api_samples(
    cx: Ctx,
    Query(q): Query<SampleQuery>,
) -> ApiResult<Json<ListPage<Sample>>> {
    let limit = q.limit.unwrap_or(500).clamp(1, 10_000);
    Ok(Json(ListPage::all(
        signals::history(&cx.state.pool, &cx.who, q.kind.0, &q.subject, limit).await?,
    )))
}

#[handler]
pub async fn metrics(state: Data<&AppState>, who: Data<&Principal>) -> ApiResult<Response> {
    who.require(crate::auth::Role::Viewer, "read metrics")?;
    let body = crate::monitor::metrics::render(
        &state.pool,
        &state.inner.http_metrics,
        &state.inner.ctx.reconciler,
    )
    .await
    .map_err(crate::error::Error::Unexpected)?;
    Ok(Response::builder()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body))
}
