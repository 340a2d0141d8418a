//! Alert channels: Slack (incoming webhook, Block Kit), Microsoft Teams (workflow webhook,
//! Adaptive Card), PagerDuty (Events API v2) and e-mail (SMTP with STARTTLS or implicit TLS).
//! Each channel picks the rules and severities it wants; the monitor's transitions reach it
//! grouped (everything within `group_wait_secs` of the first is one message), are retried
//! with backoff, and every attempt is kept in its delivery log. Secrets (the Slack/Teams URL,
//! the PagerDuty routing key, the SMTP password) live in the secret store, write-only.

use crate::db;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::alerts::Alert;
use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::ctx::Ctx;
use crate::error::{Error, FieldErrors, Result};
use crate::secrets::binding::{self, Binding};
use crate::secrets::store::{new_ref, SecretStore};
use crate::secrets::Secret;

mod render;
mod send;

pub use render::*;
pub use send::*;

pub const KINDS: &[&str] = &["slack", "teams", "pagerduty", "email"];
/// The severities alerts carry.
pub const SEVERITIES: &[&str] = &["critical", "warning"];

/// Where a channel sends: a Slack incoming webhook, a Microsoft Teams workflow webhook,
/// PagerDuty's Events API v2, or e-mail over SMTP (the same values as `KINDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "AlertChannelKind")]
pub enum Kind {
    Slack,
    Teams,
    Pagerduty,
    Email,
}

/// An alert's severity (the same values as `SEVERITIES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "AlertSeverity")]
pub enum Severity {
    Critical,
    Warning,
}
pub const PAGERDUTY_ENDPOINT: &str = "https://events.pagerduty.com/v2/enqueue";
pub const DEFAULT_GROUP_WAIT_SECS: i64 = 10;
/// Attempts per message (1 s, 2 s, 4 s, 8 s apart).
pub const ATTEMPTS: u32 = 5;
/// Alerts listed by name in one message; the rest are counted.
const LISTED: usize = 20;
/// Delivery-log rows kept per channel.
const LOG_KEPT: i64 = 200;

/// The secret field of each kind and the settings it is bound to: changing them needs the
/// secret again (`secrets::binding`). Slack's and Teams' URL is itself the secret.
pub fn bindings(kind: &str) -> &'static [Binding] {
    match kind {
        "slack" | "teams" => &[Binding {
            secret: "webhook_url",
            settings: &[],
        }],
        "pagerduty" => &[Binding {
            secret: "routing_key",
            settings: &["endpoint"],
        }],
        "email" => &[Binding {
            secret: "password",
            settings: &["host", "port", "username"],
        }],
        _ => &[],
    }
}

/// The non-secret settings a kind takes.
pub fn setting_names(kind: &str) -> &'static [&'static str] {
    match kind {
        "pagerduty" => &["endpoint"],
        "email" => &["host", "port", "tls", "username", "from", "to"],
        _ => &[],
    }
}

fn secret_name(kind: &str) -> &'static str {
    bindings(kind).first().map_or("secret", |b| b.secret)
}

/// An alert channel; its secret is never returned, only whether it is set.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "AlertChannel")]
pub struct Channel {
    pub id: String,
    pub name: String,
    #[schemars(with = "Kind")]
    pub kind: String,
    /// The kind's non-secret settings as stored: PagerDuty `endpoint`; e-mail `host`, `port`,
    /// `tls`, `username`, `from`, `to` (comma-separated).
    pub settings: BTreeMap<String, String>,
    /// Alert rules (kinds) sent to this channel; empty: every rule.
    pub rules: Vec<String>,
    /// The severities sent to this channel.
    #[schemars(with = "Vec<Severity>")]
    pub severities: Vec<String>,
    /// Alerts within this many seconds of the first go as one message.
    pub group_wait_secs: i64,
    /// A private CA (PEM) trusted for this channel's endpoint.
    pub tls_ca_certificate: Option<String>,
    pub enabled: bool,
    /// Secret field → whether it holds a value (never the value).
    pub secrets: BTreeMap<String, bool>,
    /// For Slack and Teams: the host of the stored URL (the URL itself is the secret).
    pub url_host: Option<String>,
    #[serde(skip)]
    pub secret_ref: String,
    pub created_at: String,
    pub updated_at: String,
}

impl Channel {
    /// Whether this channel takes an alert of this rule and severity.
    pub fn selects(&self, alert: &Alert) -> bool {
        (self.rules.is_empty() || self.rules.contains(&alert.kind))
            && self.severities.contains(&alert.severity)
    }

    pub fn kind_label(&self) -> &'static str {
        kind_label(&self.kind)
    }

    pub fn setting(&self, key: &str) -> &str {
        self.settings.get(key).map_or("", String::as_str)
    }

    pub fn secret_set(&self) -> bool {
        self.secrets.values().any(|v| *v)
    }
}

pub fn kind_label(kind: &str) -> &'static str {
    match kind {
        "slack" => "Slack",
        "teams" => "Microsoft Teams",
        "pagerduty" => "PagerDuty",
        "email" => "E-mail",
        _ => "?",
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    name: String,
    kind: String,
    settings: String,
    rules: String,
    severities: String,
    group_wait_secs: i64,
    tls_ca_certificate: Option<String>,
    #[sqlx(try_from = "crate::db::Flag")]
    enabled: bool,
    secret_ref: String,
    created_at: String,
    updated_at: String,
}

const SELECT: &str = "SELECT id, name, kind, settings, rules, severities, group_wait_secs, tls_ca_certificate, enabled, secret_ref, created_at, updated_at FROM alert_channels";

async fn view(store: &SecretStore, r: Row) -> Result<Channel> {
    let set = store.fields_set(&r.secret_ref).await?;
    let mut settings: BTreeMap<String, String> =
        serde_json::from_str(&r.settings).unwrap_or_default();
    let url_host = settings.remove("url_host");
    Ok(Channel {
        secrets: bindings(&r.kind)
            .iter()
            .map(|b| (b.secret.to_string(), set.iter().any(|s| s == b.secret)))
            .collect(),
        url_host,
        settings,
        rules: serde_json::from_str(&r.rules).unwrap_or_default(),
        severities: serde_json::from_str(&r.severities).unwrap_or_default(),
        id: r.id,
        name: r.name,
        kind: r.kind,
        group_wait_secs: r.group_wait_secs,
        tls_ca_certificate: r.tls_ca_certificate,
        enabled: r.enabled,
        secret_ref: r.secret_ref,
        created_at: r.created_at,
        updated_at: r.updated_at,
    })
}

/// A channel to create (`name`, `kind`, the kind's settings and secret required), or a change
/// to one (`PATCH`: absent fields stay as they are; the kind cannot change).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "AlertChannelInput")]
pub struct ChannelInput {
    /// 1 to 100 characters.
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::wire::enum_string::<_, Kind>")]
    #[schemars(with = "Option<Kind>")]
    pub kind: Option<String>,
    /// Strings, or numbers for `port`; `to` is a comma-separated list (or a JSON list).
    #[schemars(with = "Option<SettingsInput>")]
    pub settings: Option<BTreeMap<String, Value>>,
    #[serde(default, deserialize_with = "secrets_without_nulls")]
    #[schemars(with = "Option<SecretsInput>")]
    pub secrets: Option<BTreeMap<String, Secret<String>>>,
    /// Alert rule kinds (as `GET /api/v1/alerts` names them) to send; empty: every rule.
    pub rules: Option<Vec<String>>,
    /// Default both.
    #[serde(default, deserialize_with = "crate::wire::enum_strings::<_, Severity>")]
    #[schemars(with = "Option<Vec<Severity>>", length(min = 1))]
    pub severities: Option<Vec<String>>,
    /// Default 10.
    #[schemars(range(min = 0, max = 600))]
    pub group_wait_secs: Option<i64>,
    /// PEM of a private CA for the endpoint; an empty value removes it.
    pub tls_ca_certificate: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

/// The settings of a channel (documents `AlertChannelInput.settings`): only the kind's own
/// keys are accepted. Values are read as text (numbers and lists too).
#[derive(schemars::JsonSchema)]
#[schemars(rename = "AlertChannelSettingsInput", deny_unknown_fields)]
#[allow(dead_code)]
struct SettingsInput {
    /// PagerDuty: the Events API endpoint (https; default the public one).
    endpoint: Option<Value>,
    /// E-mail: the SMTP server's host name.
    host: Option<Value>,
    /// E-mail: 1–65535 (default 587 with starttls, 465 with implicit).
    port: Option<Value>,
    /// E-mail: `starttls` (default) or `implicit`.
    tls: Option<Value>,
    /// E-mail: the SMTP login.
    username: Option<Value>,
    /// E-mail: the sender's address.
    from: Option<Value>,
    /// E-mail: 1 to 20 recipients, comma-separated or a list.
    to: Option<Value>,
}

/// A channel's secret, write-only (stored encrypted, never returned): Slack and Teams
/// `webhook_url`, PagerDuty `routing_key`, e-mail `password`.
#[derive(schemars::JsonSchema)]
#[schemars(rename = "AlertChannelSecretsInput", deny_unknown_fields)]
#[allow(dead_code)]
struct SecretsInput {
    /// Slack incoming-webhook or Teams workflow URL (https).
    #[schemars(extend("writeOnly" = true))]
    webhook_url: Option<String>,
    /// PagerDuty Events API v2 routing (integration) key: 32 letters and digits.
    #[schemars(extend("writeOnly" = true))]
    routing_key: Option<String>,
    /// The SMTP password.
    #[schemars(extend("writeOnly" = true))]
    password: Option<String>,
}

/// What a valid input becomes; nothing stored yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub name: String,
    pub kind: String,
    pub settings: BTreeMap<String, String>,
    pub rules: Vec<String>,
    pub severities: Vec<String>,
    pub group_wait_secs: i64,
    pub tls_ca_certificate: Option<String>,
    pub enabled: bool,
}

/// `null` in a secrets object means "not given", as a client generated from the OpenAPI
/// document sends every optional field.
fn secrets_without_nulls<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<BTreeMap<String, Secret<String>>>, D::Error> {
    let m: Option<BTreeMap<String, Option<Secret<String>>>> = serde::Deserialize::deserialize(d)?;
    Ok(m.map(|m| m.into_iter().filter_map(|(k, v)| Some((k, v?))).collect()))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.trim().to_string(),
        Value::Array(items) => items
            .iter()
            .map(text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn https_url(u: &str, what: &str) -> std::result::Result<String, String> {
    let url = url::Url::parse(u.trim())
        .map_err(|_| format!("paste the {what}; it starts with https://"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "the {what} must start with https:// (it carries a credential)"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("the {what} needs a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("remove the user and password from the URL".into());
    }
    Ok(url.to_string())
}

/// The addresses of `to`, split on commas.
pub fn recipients(to: &str) -> Vec<String> {
    to.split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn check_address(a: &str) -> bool {
    a.parse::<lettre::Address>().is_ok()
}

/// Checks a channel as it would be after `input` is applied to `current` (None: a new
/// channel). `known_rules` are the alert rules that exist; `given` are the secret fields
/// given in this change, `stored` those that hold a value now. The secrets themselves are
/// checked here too; errors are keyed like the form's fields (`settings.host`,
/// `secrets.password`).
pub fn check(
    input: &ChannelInput,
    current: Option<&Checked>,
    known_rules: &[String],
    stored: &[String],
) -> std::result::Result<Checked, FieldErrors> {
    let mut errors = FieldErrors::new();
    let name = input
        .name
        .as_deref()
        .map(str::trim)
        .map(String::from)
        .or_else(|| current.map(|c| c.name.clone()))
        .unwrap_or_default();
    if name.is_empty() || name.chars().count() > 100 {
        errors.insert(
            "name".into(),
            "a name of 1 to 100 characters, e.g. on-call pager".into(),
        );
    }
    let kind = match (current, input.kind.as_deref().map(str::trim)) {
        (Some(c), Some(k)) if k != c.kind => {
            errors.insert(
                "kind".into(),
                format!(
                    "a channel's kind cannot change (it is {}); create another channel",
                    c.kind
                ),
            );
            c.kind.clone()
        }
        (Some(c), _) => c.kind.clone(),
        (None, Some(k)) if KINDS.contains(&k) => k.to_string(),
        (None, _) => {
            errors.insert(
                "kind".into(),
                "choose slack, teams, pagerduty or email".into(),
            );
            String::new()
        }
    };
    let allowed = setting_names(&kind);
    let mut settings: BTreeMap<String, String> =
        current.map(|c| c.settings.clone()).unwrap_or_default();
    let mut changed: Vec<&str> = Vec::new();
    for (k, v) in input.settings.iter().flatten() {
        match allowed.iter().find(|a| **a == k) {
            Some(name) => {
                let v = text(v);
                if settings.get(*name).map(String::as_str).unwrap_or("") != v {
                    changed.push(name);
                }
                settings.insert(k.clone(), v);
            }
            // `null` for another kind's setting is "not given" (a generated client sends it).
            None if !kind.is_empty() && !v.is_null() => {
                errors.insert(
                    format!("settings.{k}"),
                    if allowed.is_empty() {
                        format!(
                            "a {} channel has no settings besides its secret; remove {k}",
                            kind_label(&kind)
                        )
                    } else {
                        format!(
                            "not a {} setting; use {}",
                            kind_label(&kind),
                            allowed.join(", ")
                        )
                    },
                );
            }
            None => {}
        }
    }
    settings.retain(|k, v| allowed.contains(&k.as_str()) && !v.is_empty());
    let secret = secret_name(&kind);
    let given: Option<&Secret<String>> = input.secrets.as_ref().and_then(|s| s.get(secret));
    for k in input.secrets.iter().flatten().map(|(k, _)| k) {
        if !kind.is_empty() && k != secret {
            errors.insert(
                format!("secrets.{k}"),
                format!("a {} channel's only secret is {secret}", kind_label(&kind)),
            );
        }
    }
    let given = given.filter(|s| !s.expose().trim().is_empty());
    let has_secret = given.is_some() || stored.iter().any(|s| s == secret);
    match kind.as_str() {
        "slack" | "teams" => {
            let what = if kind == "slack" {
                "Slack incoming-webhook URL"
            } else {
                "Teams workflow URL"
            };
            if let Some(u) = given {
                if let Err(why) = https_url(u.expose(), what) {
                    errors.insert("secrets.webhook_url".into(), why);
                }
            } else if !has_secret {
                errors.insert(
                    "secrets.webhook_url".into(),
                    format!("paste the {what}; it is stored encrypted and never shown again"),
                );
            }
        }
        "pagerduty" => {
            let endpoint = settings
                .get("endpoint")
                .cloned()
                .unwrap_or_else(|| PAGERDUTY_ENDPOINT.to_string());
            match https_url(&endpoint, "Events API endpoint") {
                Ok(u) => {
                    settings.insert("endpoint".into(), u);
                }
                Err(why) => {
                    errors.insert("settings.endpoint".into(), why);
                }
            }
            if let Some(k) = given {
                let k = k.expose().trim();
                if k.len() != 32 || !k.chars().all(|c| c.is_ascii_alphanumeric()) {
                    errors.insert(
                        "secrets.routing_key".into(),
                        "the integration's routing key: 32 letters and digits (Events API v2 integration key)".into(),
                    );
                }
            } else if !has_secret {
                errors.insert(
                    "secrets.routing_key".into(),
                    "paste the Events API v2 routing key (integration key) of the PagerDuty service".into(),
                );
            }
        }
        "email" => {
            let tls = settings
                .get("tls")
                .cloned()
                .unwrap_or_else(|| "starttls".into());
            if tls != "starttls" && tls != "implicit" {
                errors.insert(
                    "settings.tls".into(),
                    "starttls (usually port 587) or implicit (usually port 465)".into(),
                );
            }
            settings.insert("tls".into(), tls.clone());
            let host = settings.get("host").cloned().unwrap_or_default();
            if host.is_empty() || host.contains(['/', ':', ' ']) || url::Host::parse(&host).is_err()
            {
                errors.insert(
                    "settings.host".into(),
                    "the SMTP server's host name, e.g. smtp.example.com".into(),
                );
            }
            let port = settings
                .get("port")
                .cloned()
                .unwrap_or_else(|| if tls == "implicit" { "465" } else { "587" }.into());
            match port.parse::<u16>() {
                Ok(p) if p > 0 => {
                    settings.insert("port".into(), p.to_string());
                }
                _ => {
                    errors.insert(
                        "settings.port".into(),
                        "a port from 1 to 65535, e.g. 587".into(),
                    );
                }
            }
            if settings.get("username").is_none_or(String::is_empty) {
                errors.insert(
                    "settings.username".into(),
                    "the SMTP login (ClueCDC always signs in to send)".into(),
                );
            }
            if !settings.get("from").is_some_and(|f| check_address(f)) {
                errors.insert(
                    "settings.from".into(),
                    "the sender's address, e.g. cluecdc@example.com".into(),
                );
            }
            let to = recipients(settings.get("to").map_or("", String::as_str));
            if to.is_empty() || to.len() > 20 {
                errors.insert(
                    "settings.to".into(),
                    "1 to 20 recipient addresses, separated by commas".into(),
                );
            } else if let Some(bad) = to.iter().find(|a| !check_address(a)) {
                errors.insert(
                    "settings.to".into(),
                    format!("{bad} is not an e-mail address"),
                );
            } else {
                settings.insert("to".into(), to.join(", "));
            }
            if given.is_none() && !has_secret {
                errors.insert(
                    "secrets.password".into(),
                    "the SMTP password; stored encrypted and never shown again".into(),
                );
            }
        }
        _ => {}
    }
    // A stored secret goes only where it was given for.
    if current.is_some() {
        let rebound = binding::rebound(bindings(&kind), &changed, stored);
        for (k, v) in binding::refusals(&rebound, |_| given.is_some(), "secrets.") {
            errors.entry(k).or_insert(v);
        }
    }
    let rules = input
        .rules
        .clone()
        .or_else(|| current.map(|c| c.rules.clone()))
        .unwrap_or_default();
    let rules: Vec<String> = rules
        .into_iter()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if let Some(bad) = rules.iter().find(|r| !known_rules.contains(r)) {
        errors.insert(
            "rules".into(),
            format!("{bad} is not an alert rule; choose among the rules on the Alerts page, or none for every rule"),
        );
    }
    let severities = input
        .severities
        .clone()
        .or_else(|| current.map(|c| c.severities.clone()))
        .unwrap_or_else(|| SEVERITIES.iter().map(|s| s.to_string()).collect());
    let severities: Vec<String> = SEVERITIES
        .iter()
        .filter(|s| severities.iter().any(|x| x.trim() == **s))
        .map(|s| s.to_string())
        .collect();
    if let Some(bad) = input
        .severities
        .iter()
        .flatten()
        .find(|s| !SEVERITIES.contains(&s.trim()))
    {
        errors.insert(
            "severities".into(),
            format!("{bad} is not a severity; use critical and/or warning"),
        );
    } else if severities.is_empty() {
        errors.insert(
            "severities".into(),
            "choose at least one severity (critical, warning)".into(),
        );
    }
    let group_wait_secs = input
        .group_wait_secs
        .or_else(|| current.map(|c| c.group_wait_secs))
        .unwrap_or(DEFAULT_GROUP_WAIT_SECS);
    if !(0..=600).contains(&group_wait_secs) {
        errors.insert(
            "group_wait_secs".into(),
            "0 to 600 seconds (alerts within this time of the first go as one message)".into(),
        );
    }
    let tls_ca_certificate = match input.tls_ca_certificate.as_deref().map(str::trim) {
        Some("") => None,
        Some(pem) => {
            if let Err(why) = crate::connect::check_ca_certificate(pem) {
                errors.insert("tls_ca_certificate".into(), why);
            }
            Some(pem.to_string())
        }
        None => current.and_then(|c| c.tls_ca_certificate.clone()),
    };
    let enabled = input
        .enabled
        .or_else(|| current.map(|c| c.enabled))
        .unwrap_or(true);
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Checked {
        name,
        kind,
        settings,
        rules,
        severities,
        group_wait_secs,
        tls_ca_certificate,
        enabled,
    })
}

fn checked_of(c: &Channel) -> Checked {
    Checked {
        name: c.name.clone(),
        kind: c.kind.clone(),
        settings: c.settings.clone(),
        rules: c.rules.clone(),
        severities: c.severities.clone(),
        group_wait_secs: c.group_wait_secs,
        tls_ca_certificate: c.tls_ca_certificate.clone(),
        enabled: c.enabled,
    }
}

async fn known_rules(pool: &Pool) -> Result<Vec<String>> {
    Ok(
        db::query_scalar("SELECT kind FROM alert_rules ORDER BY kind")
            .fetch_all(pool)
            .await?,
    )
}

fn invalid(fields: FieldErrors) -> Error {
    match Error::check(fields) {
        Err(e) => e,
        Ok(()) => Error::Unexpected(anyhow::anyhow!("no field errors")),
    }
}

/// The host of a URL, shown where the URL itself is secret.
fn host_of(u: &str) -> Option<String> {
    url::Url::parse(u)
        .ok()
        .and_then(|u| u.host_str().map(String::from))
}

fn stored_settings(c: &Checked, url_host: Option<String>) -> String {
    let mut s = c.settings.clone();
    if let Some(h) = url_host {
        s.insert("url_host".into(), h);
    }
    json!(s).to_string()
}

pub async fn list(ctx: &Ctx, who: &Principal) -> Result<Vec<Channel>> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage alert channels")?;
    let rows: Vec<Row> = db::query_as(&format!("{SELECT} ORDER BY name"))
        .fetch_all(pool)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(view(store, r).await?);
    }
    Ok(out)
}

async fn load(pool: &Pool, store: &SecretStore, id: &str) -> Result<Option<Channel>> {
    let row: Option<Row> = db::query_as(&format!("{SELECT} WHERE id = $1 OR name = $2"))
        .bind(id)
        .bind(id)
        .fetch_optional(pool)
        .await?;
    match row {
        Some(r) => Ok(Some(view(store, r).await?)),
        None => Ok(None),
    }
}

pub async fn get(ctx: &Ctx, who: &Principal, id: &str) -> Result<Channel> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage alert channels")?;
    load(pool, store, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("alert channel {id}")))
}

fn secrets_given(input: &ChannelInput, kind: &str) -> BTreeMap<String, Secret<String>> {
    let name = secret_name(kind);
    input
        .secrets
        .iter()
        .flatten()
        .filter(|(k, v)| *k == name && !v.expose().trim().is_empty())
        .map(|(k, v)| (k.clone(), Secret::new(v.expose().trim().to_string())))
        .collect()
}

fn audit_summary(c: &Checked, secrets: &BTreeMap<String, Secret<String>>) -> Value {
    json!({
        "name": c.name, "kind": c.kind, "settings": c.settings, "rules": c.rules,
        "severities": c.severities, "group_wait_secs": c.group_wait_secs,
        "tls_ca_certificate": c.tls_ca_certificate.is_some(), "enabled": c.enabled,
        "secrets_given": secrets.keys().collect::<Vec<_>>(),
    })
}

pub async fn create(ctx: &Ctx, who: &Principal, input: &ChannelInput) -> Result<Channel> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage alert channels")?;
    let rules = known_rules(pool).await?;
    let c = check(input, None, &rules, &[]).map_err(invalid)?;
    let db::Flag(taken) =
        db::query_scalar("SELECT EXISTS (SELECT 1 FROM alert_channels WHERE name = $1)")
            .bind(&c.name)
            .fetch_one(pool)
            .await?;
    if taken {
        return Err(Error::field(
            "name",
            format!("a channel named {} exists; choose another name", c.name),
        ));
    }
    let secrets = secrets_given(input, &c.kind);
    let url_host = secrets.get("webhook_url").and_then(|u| host_of(u.expose()));
    let id = format!("ch_{}", uuid::Uuid::new_v4().simple());
    let secret_ref = new_ref();
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "alert_channel.create",
            target_kind: "alert_channel",
            target_id: &id,
            outcome: Outcome::Success,
            summary: audit_summary(&c, &secrets),
        },
    )
    .await?;
    db::query("INSERT INTO alert_channels (id, name, kind, settings, rules, severities, group_wait_secs, tls_ca_certificate, enabled, secret_ref, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
        .bind(&id)
        .bind(&c.name)
        .bind(&c.kind)
        .bind(stored_settings(&c, url_host))
        .bind(json!(c.rules).to_string())
        .bind(json!(c.severities).to_string())
        .bind(c.group_wait_secs)
        .bind(&c.tls_ca_certificate)
        .bind(i64::from(c.enabled))
        .bind(&secret_ref)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
    store.put(&mut tx, &secret_ref, &secrets).await?;
    tx.commit().await?;
    get(ctx, who, &id).await
}

pub async fn update(ctx: &Ctx, who: &Principal, id: &str, input: &ChannelInput) -> Result<Channel> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage alert channels")?;
    let cur = get(ctx, who, id).await?;
    let rules = known_rules(pool).await?;
    let stored: Vec<String> = cur
        .secrets
        .iter()
        .filter(|(_, set)| **set)
        .map(|(k, _)| k.clone())
        .collect();
    let c = check(input, Some(&checked_of(&cur)), &rules, &stored).map_err(invalid)?;
    if c.name != cur.name {
        let db::Flag(taken) = db::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM alert_channels WHERE name = $1 AND id <> $2)",
        )
        .bind(&c.name)
        .bind(&cur.id)
        .fetch_one(pool)
        .await?;
        if taken {
            return Err(Error::field(
                "name",
                format!("a channel named {} exists; choose another name", c.name),
            ));
        }
    }
    let secrets = secrets_given(input, &c.kind);
    let url_host = match secrets.get("webhook_url") {
        Some(u) => host_of(u.expose()),
        None => cur.url_host.clone(),
    };
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "alert_channel.update",
            target_kind: "alert_channel",
            target_id: &cur.id,
            outcome: Outcome::Success,
            summary: audit_summary(&c, &secrets),
        },
    )
    .await?;
    db::query("UPDATE alert_channels SET name = $1, settings = $2, rules = $3, severities = $4, group_wait_secs = $5, tls_ca_certificate = $6, enabled = $7, updated_at = $8 WHERE id = $9")
        .bind(&c.name)
        .bind(stored_settings(&c, url_host))
        .bind(json!(c.rules).to_string())
        .bind(json!(c.severities).to_string())
        .bind(c.group_wait_secs)
        .bind(&c.tls_ca_certificate)
        .bind(i64::from(c.enabled))
        .bind(crate::time::now())
        .bind(&cur.id)
        .execute(&mut *tx)
        .await?;
    store.put(&mut tx, &cur.secret_ref, &secrets).await?;
    tx.commit().await?;
    get(ctx, who, &cur.id).await
}

pub async fn delete(ctx: &Ctx, who: &Principal, id: &str) -> Result<()> {
    let pool = &ctx.pool;
    let _store: &SecretStore = &ctx.secrets;
    who.require(Role::Admin, "manage alert channels")?;
    let cur = get(ctx, who, id).await?;
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "alert_channel.delete",
            target_kind: "alert_channel",
            target_id: &cur.id,
            outcome: Outcome::Success,
            summary: json!({"name": cur.name, "kind": cur.kind}),
        },
    )
    .await?;
    for sql in [
        "DELETE FROM alert_channel_deliveries WHERE channel_id = $1",
        "DELETE FROM alert_channel_incidents WHERE channel_id = $1",
        "DELETE FROM alert_channels WHERE id = $1",
    ] {
        db::query(sql).bind(&cur.id).execute(&mut *tx).await?;
    }
    db::query("DELETE FROM secret_values WHERE secret_ref = $1")
        .bind(&cur.secret_ref)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

// ---- the delivery log ------------------------------------------------------------------------

/// One delivery attempt of a channel.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
#[schemars(rename = "AlertChannelAttempt")]
pub struct Attempt {
    pub id: i64,
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
    /// What was sent: `test`, `firing: 3 alerts`, `pagerduty resolve …`.
    pub event: String,
    pub attempt: i64,
    pub status_code: Option<i64>,
    #[sqlx(try_from = "crate::db::Flag")]
    pub ok: bool,
    /// Why it failed, without secrets.
    pub error: Option<String>,
}

pub async fn deliveries(ctx: &Ctx, who: &Principal, id: &str, limit: i64) -> Result<Vec<Attempt>> {
    let pool = &ctx.pool;
    let _store: &SecretStore = &ctx.secrets;
    let c = get(ctx, who, id).await?;
    Ok(db::query_as("SELECT id, at, event, attempt, status_code, ok, error FROM alert_channel_deliveries WHERE channel_id = $1 ORDER BY id DESC LIMIT $2")
        .bind(&c.id)
        .bind(limit.clamp(1, LOG_KEPT))
        .fetch_all(pool)
        .await?)
}

async fn log_attempt(pool: &Pool, channel: &str, event: &str, n: u32, r: &Sent) {
    let (code, ok, error) = match r {
        Ok(code) => (Some(*code as i64), true, None),
        Err(f) => (f.status.map(i64::from), false, Some(f.why.clone())),
    };
    let logged = db::query("INSERT INTO alert_channel_deliveries (channel_id, at, event, attempt, status_code, ok, error) VALUES ($1, $2, $3, $4, $5, $6, $7)")
        .bind(channel)
        .bind(crate::time::now())
        .bind(event)
        .bind(n as i64)
        .bind(code)
        .bind(i64::from(ok))
        .bind(error)
        .execute(pool)
        .await;
    let trimmed = db::query("DELETE FROM alert_channel_deliveries WHERE channel_id = $1 AND id <= (SELECT id FROM alert_channel_deliveries WHERE channel_id = $2 ORDER BY id DESC LIMIT 1 OFFSET $3)")
        .bind(channel)
        .bind(channel)
        .bind(LOG_KEPT)
        .execute(pool)
        .await;
    if let Err(e) = logged.and(trimmed) {
        tracing::warn!(error = %e, channel, "cannot write the alert channel's delivery log");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(kind: &str, subject: &str, severity: &str) -> Alert {
        Alert {
            id: 1,
            kind: kind.into(),
            subject: subject.into(),
            severity: severity.into(),
            message: format!("{subject} is broken"),
            state: "firing".into(),
            first_seen: "2026-01-01T00:00:00Z".into(),
            last_seen: "2026-01-01T00:00:00Z".into(),
            resolved_at: None,
            acknowledged_by: None,
            acknowledged_at: None,
        }
    }

    fn ev(state: &str, kind: &str, subject: &str) -> Event {
        Event {
            state: state.into(),
            alert: alert(kind, subject, "critical"),
        }
    }

    fn rules() -> Vec<String> {
        vec!["connector_failed".into(), "delivery_lag_seconds".into()]
    }

    fn input(v: Value) -> ChannelInput {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_slack_message_has_text_and_valid_blocks_and_lists_a_group_once() {
        let events: Vec<Event> = (0..50)
            .map(|i| ev("firing", "connector_failed", &format!("c{i}")))
            .collect();
        let m = slack(&events);
        assert_eq!(m["text"], "[ClueCDC] 50 alerts firing (connector_failed)");
        let blocks = m["blocks"].as_array().unwrap();
        assert!(blocks.len() <= 50, "Slack takes at most 50 blocks");
        assert_eq!(blocks[0]["type"], "header");
        assert_eq!(
            blocks.iter().filter(|b| b["type"] == "section").count(),
            LISTED
        );
        assert!(blocks.last().unwrap()["elements"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("and 30 more alerts"));
        for b in blocks {
            assert!(["header", "section", "context"].contains(&b["type"].as_str().unwrap()));
        }
    }

    #[test]
    fn a_teams_message_is_a_message_with_one_adaptive_card() {
        let m = teams(&[ev("resolved", "connector_failed", "c1")]);
        assert_eq!(m["type"], "message");
        assert_eq!(
            m["attachments"][0]["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        let card = &m["attachments"][0]["content"];
        assert_eq!(card["type"], "AdaptiveCard");
        assert_eq!(
            card["body"][0]["text"],
            "[RESOLVED] critical connector_failed on c1"
        );
    }

    #[test]
    fn a_pagerduty_trigger_carries_the_required_fields_and_the_alert_key() {
        let a = alert("connector_failed", "sink-1", "critical");
        let key = alert_key(&a.kind, &a.subject);
        let m = pagerduty_trigger("a".repeat(32).as_str(), &key, &[&a]);
        assert_eq!(m["event_action"], "trigger");
        assert_eq!(m["dedup_key"], "cluecdc/connector_failed/sink-1");
        assert_eq!(m["payload"]["severity"], "critical");
        assert_eq!(m["payload"]["source"], "sink-1");
        assert!(m["payload"]["summary"]
            .as_str()
            .unwrap()
            .contains("sink-1 is broken"));
        let r = pagerduty_resolve("k", &key);
        assert_eq!(r["event_action"], "resolve");
        assert_eq!(r["dedup_key"], key);
        assert!(
            alert_key("k", &"x".repeat(300)).len() < 255,
            "PagerDuty keys are at most 255 characters"
        );
    }

    #[test]
    fn one_alert_triggers_its_own_key_and_its_resolve_closes_it() {
        let (steps, _) = plan_pagerduty(&[ev("firing", "connector_failed", "a")], &[], "g");
        assert_eq!(
            steps,
            vec![PdStep::Trigger {
                dedup_key: "cluecdc/connector_failed/a".into(),
                members: vec![("connector_failed".into(), "a".into())]
            }]
        );
        let open = vec![(
            "cluecdc/connector_failed/a".to_string(),
            "connector_failed".to_string(),
            "a".to_string(),
            true,
        )];
        let (steps, resolved) =
            plan_pagerduty(&[ev("resolved", "connector_failed", "a")], &open, "g");
        assert_eq!(
            steps,
            vec![PdStep::Resolve {
                dedup_key: "cluecdc/connector_failed/a".into()
            }]
        );
        assert_eq!(resolved.len(), 1);
        // Firing again while its incident is open: nothing new (one incident).
        let (steps, _) = plan_pagerduty(&[ev("firing", "connector_failed", "a")], &open, "g");
        assert!(steps.is_empty());
    }

    #[test]
    fn alerts_firing_together_are_one_incident_that_resolves_when_the_last_one_does() {
        let events: Vec<Event> = (0..50)
            .map(|i| ev("firing", "connector_failed", &format!("c{i}")))
            .collect();
        let (steps, _) = plan_pagerduty(&events, &[], "cluecdc/group/1");
        assert_eq!(steps.len(), 1);
        let PdStep::Trigger { dedup_key, members } = &steps[0] else {
            panic!()
        };
        assert_eq!((dedup_key.as_str(), members.len()), ("cluecdc/group/1", 50));
        let open: Vec<(String, String, String, bool)> = (0..50)
            .map(|i| {
                (
                    "cluecdc/group/1".into(),
                    "connector_failed".into(),
                    format!("c{i}"),
                    true,
                )
            })
            .collect();
        let some: Vec<Event> = (0..49)
            .map(|i| ev("resolved", "connector_failed", &format!("c{i}")))
            .collect();
        let (steps, _) = plan_pagerduty(&some, &open, "g2");
        assert!(steps.is_empty(), "one alert of the group still fires");
        let all: Vec<Event> = (0..50)
            .map(|i| ev("resolved", "connector_failed", &format!("c{i}")))
            .collect();
        let (steps, _) = plan_pagerduty(&all, &open, "g2");
        assert_eq!(
            steps,
            vec![PdStep::Resolve {
                dedup_key: "cluecdc/group/1".into()
            }]
        );
    }

    #[test]
    fn an_alert_that_fired_and_resolved_within_one_group_pages_nobody() {
        let (steps, _) = plan_pagerduty(
            &[
                ev("firing", "connector_failed", "a"),
                ev("resolved", "connector_failed", "a"),
            ],
            &[],
            "g",
        );
        assert!(steps.is_empty());
    }

    #[test]
    fn a_new_slack_channel_needs_an_https_url_and_keeps_no_settings() {
        let e = check(
            &input(json!({"name": "ops", "kind": "slack"})),
            None,
            &rules(),
            &[],
        )
        .unwrap_err();
        assert!(e["secrets.webhook_url"].contains("paste the Slack incoming-webhook URL"));
        let e = check(&input(json!({"name": "ops", "kind": "slack", "secrets": {"webhook_url": "http://hooks.example/x"}})), None, &rules(), &[]).unwrap_err();
        assert!(e["secrets.webhook_url"].contains("https://"));
        let e = check(&input(json!({"name": "ops", "kind": "slack", "settings": {"channel": "#x"}, "secrets": {"webhook_url": "https://hooks.example/x"}})), None, &rules(), &[]).unwrap_err();
        assert!(e["settings.channel"].contains("no settings"));
        let ok = check(&input(json!({"name": " ops ", "kind": "slack", "secrets": {"webhook_url": "https://hooks.example/x"}})), None, &rules(), &[]).unwrap();
        assert_eq!(ok.name, "ops");
        assert_eq!(ok.severities, vec!["critical", "warning"]);
        assert_eq!(ok.group_wait_secs, DEFAULT_GROUP_WAIT_SECS);
    }

    #[test]
    fn name_kind_rules_severities_wait_and_ca_are_checked() {
        // The JSON API refuses an unknown kind or severity as it reads the body (`crate::wire`);
        // forms and manifests build the input from text, and `check` refuses them there.
        let mut bad = input(
            json!({"name": "", "rules": ["nope"], "group_wait_secs": 601, "tls_ca_certificate": "x"}),
        );
        bad.kind = Some("fax".into());
        bad.severities = Some(vec!["loud".into()]);
        for field in ["kind", "severities"] {
            let err = serde_json::from_value::<ChannelInput>(json!({field: ["fax"]})).unwrap_err();
            assert!(err.to_string().contains("expected"), "{field}: {err}");
        }
        let e = check(&bad, None, &rules(), &[]).unwrap_err();
        for f in [
            "name",
            "kind",
            "rules",
            "severities",
            "group_wait_secs",
            "tls_ca_certificate",
        ] {
            assert!(e.contains_key(f), "{f}: {e:?}");
        }
        let e = check(&input(json!({"name": "a", "kind": "slack", "severities": [], "secrets": {"webhook_url": "https://h/x"}})), None, &rules(), &[]).unwrap_err();
        assert!(e["severities"].contains("at least one"));
    }

    #[test]
    fn a_pagerduty_routing_key_is_32_letters_and_digits_and_the_endpoint_defaults() {
        let e = check(
            &input(json!({"name": "pd", "kind": "pagerduty", "secrets": {"routing_key": "short"}})),
            None,
            &rules(),
            &[],
        )
        .unwrap_err();
        assert!(e["secrets.routing_key"].contains("32 letters and digits"));
        let ok = check(&input(json!({"name": "pd", "kind": "pagerduty", "secrets": {"routing_key": "R0123456789abcdef0123456789ABCDE"}})), None, &rules(), &[]).unwrap();
        assert_eq!(ok.settings["endpoint"], PAGERDUTY_ENDPOINT);
    }

    #[test]
    fn an_email_channel_needs_host_login_sender_and_recipients() {
        let e = check(&input(json!({"name": "m", "kind": "email", "settings": {"tls": "ssl", "port": "99999", "from": "nope", "to": "a@example.com, bad"}})), None, &rules(), &[]).unwrap_err();
        for f in [
            "settings.host",
            "settings.tls",
            "settings.port",
            "settings.username",
            "settings.from",
            "settings.to",
            "secrets.password",
        ] {
            assert!(e.contains_key(f), "{f}: {e:?}");
        }
        assert_eq!(e["settings.to"], "bad is not an e-mail address");
        let ok = check(&input(json!({"name": "m", "kind": "email", "settings": {"host": "smtp.example.com", "username": "u", "from": "c@example.com", "to": ["a@example.com", "b@example.com"]}, "secrets": {"password": "pw"}})), None, &rules(), &[]).unwrap();
        assert_eq!(ok.settings["port"], "587");
        assert_eq!(ok.settings["tls"], "starttls");
        assert_eq!(ok.settings["to"], "a@example.com, b@example.com");
    }

    #[test]
    fn moving_an_email_channel_to_another_server_needs_the_password_again() {
        let cur = check(&input(json!({"name": "m", "kind": "email", "settings": {"host": "smtp.example.com", "username": "u", "from": "c@example.com", "to": "a@example.com"}, "secrets": {"password": "pw"}})), None, &rules(), &[]).unwrap();
        let stored = vec!["password".to_string()];
        let e = check(
            &input(json!({"settings": {"host": "evil.example.com"}})),
            Some(&cur),
            &rules(),
            &stored,
        )
        .unwrap_err();
        assert!(
            e["secrets.password"].contains("must be given again when the host changes"),
            "{e:?}"
        );
        assert!(check(
            &input(
                json!({"settings": {"host": "evil.example.com"}, "secrets": {"password": "pw2"}})
            ),
            Some(&cur),
            &rules(),
            &stored
        )
        .is_ok());
        // Recipients are not where the password goes.
        assert!(check(
            &input(json!({"settings": {"to": "z@example.com"}})),
            Some(&cur),
            &rules(),
            &stored
        )
        .is_ok());
        let e = check(
            &input(json!({"kind": "slack"})),
            Some(&cur),
            &rules(),
            &stored,
        )
        .unwrap_err();
        assert!(e["kind"].contains("cannot change"));
    }

    #[test]
    fn errors_never_show_a_secret() {
        assert_eq!(
            redact(
                "HTTP 404 for https://hooks.example/services/T0/B0/sekrit-token",
                &["https://hooks.example/services/T0/B0/sekrit-token"]
            ),
            "HTTP 404 for [secret]"
        );
    }

    #[test]
    fn a_channel_selects_by_rule_and_severity() {
        let mut c = check(&input(json!({"name": "a", "kind": "slack", "rules": ["connector_failed"], "severities": ["critical"], "secrets": {"webhook_url": "https://h/x"}})), None, &rules(), &[]).unwrap();
        let ch = |c: &Checked| Channel {
            id: "x".into(),
            name: c.name.clone(),
            kind: c.kind.clone(),
            settings: c.settings.clone(),
            rules: c.rules.clone(),
            severities: c.severities.clone(),
            group_wait_secs: 0,
            tls_ca_certificate: None,
            enabled: true,
            secrets: BTreeMap::new(),
            url_host: None,
            secret_ref: String::new(),
            created_at: String::new(),
            updated_at: String::new(),
        };
        assert!(ch(&c).selects(&alert("connector_failed", "s", "critical")));
        assert!(!ch(&c).selects(&alert("connector_failed", "s", "warning")));
        assert!(!ch(&c).selects(&alert("delivery_lag_seconds", "s", "critical")));
        c.rules.clear();
        assert!(ch(&c).selects(&alert("delivery_lag_seconds", "s", "critical")));
    }
}
