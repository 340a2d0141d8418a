//! Sending: one client per channel (its CA, no redirects), retries with backoff, every attempt
//! logged with secrets redacted; the send test; and the grouping outbox the monitor feeds.

use super::*;
use crate::ctx::Ctx;
use crate::db;

/// A failed attempt: the HTTP status when there was one, and why, without secrets.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: Option<u16>,
    pub why: String,
    /// Worth another attempt (5xx, 429, a network error), or not (a refused payload).
    pub retry: bool,
}

pub(super) type Sent = std::result::Result<u16, Failure>;

pub(super) fn redact(s: &str, secrets: &[&str]) -> String {
    let mut out = s.to_string();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(secret, "[secret]");
    }
    out
}

pub(super) fn http_client(c: &Channel) -> std::result::Result<reqwest::Client, String> {
    // No redirects: a URL that carries a credential is answered where it was given, nowhere else.
    let builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none());
    let builder = match &c.tls_ca_certificate {
        Some(pem) => crate::connect::trust_only(builder, pem)?,
        None => builder,
    };
    builder.build().map_err(|e| e.to_string())
}

pub(super) async fn post_json(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    secret: &str,
) -> Sent {
    let secrets = [secret];
    match http.post(url).json(body).send().await {
        Ok(r) if r.status().is_success() => Ok(r.status().as_u16()),
        Ok(r) => {
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            Err(Failure {
                status: Some(status.as_u16()),
                why: redact(
                    &format!("HTTP {status}: {}", clip(text.trim(), 200)),
                    &secrets,
                ),
                retry: status.is_server_error() || status.as_u16() == 429,
            })
        }
        Err(e) => Err(Failure {
            status: None,
            why: redact(&crate::connect::explain(&e.without_url()), &secrets),
            retry: true,
        }),
    }
}

pub(super) async fn send_email(c: &Channel, password: &str, events: &[Event]) -> Sent {
    use lettre::message::header::ContentType;
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
    let fail = |why: String, retry: bool| Failure {
        status: None,
        why: redact(&why, &[password]),
        retry,
    };
    let host = c.setting("host").to_string();
    let port: u16 = c.setting("port").parse().unwrap_or(587);
    let mut params = TlsParameters::builder(host.clone());
    if let Some(pem) = &c.tls_ca_certificate {
        let cert = Certificate::from_pem(pem.as_bytes())
            .map_err(|e| fail(format!("the CA certificate cannot be read: {e}"), false))?;
        params = params
            .certificate_store(CertificateStore::None)
            .add_root_certificate(cert);
    }
    let params = params
        .build_rustls()
        .map_err(|e| fail(format!("TLS setup: {e}"), false))?;
    let tls = if c.setting("tls") == "implicit" {
        Tls::Wrapper(params)
    } else {
        Tls::Required(params)
    };
    let mailer = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(port)
        .tls(tls)
        .credentials(Credentials::new(
            c.setting("username").to_string(),
            password.to_string(),
        ))
        .timeout(Some(Duration::from_secs(15)))
        .build();
    let (subject, body) = email(events);
    let mut m = Message::builder()
        .subject(subject)
        .header(ContentType::TEXT_PLAIN);
    let from = c
        .setting("from")
        .parse()
        .map_err(|e| fail(format!("from: {e}"), false))?;
    m = m.from(from);
    for to in recipients(c.setting("to")) {
        m = m.to(to.parse().map_err(|e| fail(format!("to: {e}"), false))?);
    }
    let msg = m
        .body(body)
        .map_err(|e| fail(format!("the message cannot be built: {e}"), false))?;
    match mailer.send(msg).await {
        Ok(r) => Ok(u16::from(r.code())),
        Err(e) => {
            let permanent = e.is_permanent();
            let status = e.status().map(u16::from);
            let mut why = e.to_string();
            if let Some(s) = std::error::Error::source(&e) {
                why = format!("{why}: {s}");
            }
            Err(Failure {
                status,
                why: redact(&format!("SMTP: {}", clip(&why, 300)), &[password]),
                retry: !permanent,
            })
        }
    }
}

/// One message to one channel, tried up to `attempts` times (1 s, 2 s, 4 s … apart); each
/// attempt is logged. The message is built by `send` on each attempt.
pub(super) async fn with_retries<F, Fut>(
    pool: &Pool,
    c: &Channel,
    event: &str,
    attempts: u32,
    mut send: F,
) -> Sent
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Sent>,
{
    let mut delay = Duration::from_secs(1);
    let mut n = 1;
    loop {
        let r = send().await;
        log_attempt(pool, &c.id, event, n, &r).await;
        match &r {
            Ok(_) => return r,
            Err(f) => {
                tracing::warn!(channel = %c.name, kind = %c.kind, attempt = n, error = %f.why, "alert channel delivery failed");
                if !f.retry || n >= attempts {
                    return r;
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
        n += 1;
    }
}

pub(super) fn event_label(events: &[Event]) -> String {
    match events {
        [one] => format!("{}: {} {}", one.state, one.alert.kind, one.alert.subject),
        _ => {
            let (f, r) = counts(events);
            format!("group: {f} firing, {r} resolved")
        }
    }
}

/// Sends one group to one channel: one message (Slack, Teams, e-mail), or for PagerDuty one
/// trigger for what newly fires and one resolve per incident whose alerts all resolved.
pub async fn deliver(
    pool: &Pool,
    store: &SecretStore,
    c: &Channel,
    events: &[Event],
    attempts: u32,
) -> Result<Sent> {
    let secret = store
        .get(&c.secret_ref, secret_name(&c.kind))
        .await?
        .ok_or_else(|| {
            Error::Conflict(format!(
                "channel {} has no {} set",
                c.name,
                secret_name(&c.kind)
            ))
        })?;
    let secret = secret.expose().as_str();
    let label = event_label(events);
    match c.kind.as_str() {
        "slack" | "teams" => {
            let http = http_client(c).map_err(Error::Unavailable)?;
            let body = if c.kind == "slack" {
                slack(events)
            } else {
                teams(events)
            };
            Ok(with_retries(pool, c, &label, attempts, || {
                post_json(&http, secret, &body, secret)
            })
            .await)
        }
        "email" => {
            Ok(with_retries(pool, c, &label, attempts, || send_email(c, secret, events)).await)
        }
        "pagerduty" => {
            let http = http_client(c).map_err(Error::Unavailable)?;
            let endpoint = c.setting("endpoint").to_string();
            let open: Vec<(String, String, String, bool)> = db::query_as::<(String, String, String, db::Flag)>(
                "SELECT dedup_key, alert_kind, alert_subject, firing FROM alert_channel_incidents WHERE channel_id = $1",
            )
            .bind(&c.id)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|(k, a, s, f)| (k, a, s, f.0))
            .collect();
            let group_key = format!("cluecdc/group/{}", uuid::Uuid::new_v4().simple());
            let (steps, resolved) = plan_pagerduty(events, &open, &group_key);
            let mut last: Sent = Ok(202);
            for (kind, subject) in &resolved {
                db::query("UPDATE alert_channel_incidents SET firing = 0 WHERE channel_id = $1 AND alert_kind = $2 AND alert_subject = $3")
                    .bind(&c.id).bind(kind).bind(subject).execute(pool).await?;
            }
            for step in steps {
                let (body, label) = match &step {
                    PdStep::Trigger { dedup_key, members } => {
                        let alerts: Vec<&Alert> = events
                            .iter()
                            .filter(|e| {
                                e.state == "firing"
                                    && members
                                        .contains(&(e.alert.kind.clone(), e.alert.subject.clone()))
                            })
                            .map(|e| &e.alert)
                            .fold(Vec::new(), |mut v, a| {
                                if !v
                                    .iter()
                                    .any(|x: &&Alert| x.kind == a.kind && x.subject == a.subject)
                                {
                                    v.push(a);
                                }
                                v
                            });
                        for (kind, subject) in members {
                            db::query("INSERT INTO alert_channel_incidents (channel_id, dedup_key, alert_kind, alert_subject, firing) VALUES ($1, $2, $3, $4, 1) ON CONFLICT (channel_id, alert_kind, alert_subject) DO UPDATE SET dedup_key = excluded.dedup_key, firing = 1")
                                .bind(&c.id).bind(dedup_key).bind(kind).bind(subject).execute(pool).await?;
                        }
                        (
                            pagerduty_trigger(secret, dedup_key, &alerts),
                            format!("trigger {dedup_key} ({} alerts)", alerts.len()),
                        )
                    }
                    PdStep::Resolve { dedup_key } => {
                        db::query("DELETE FROM alert_channel_incidents WHERE channel_id = $1 AND dedup_key = $2")
                            .bind(&c.id).bind(dedup_key).execute(pool).await?;
                        (
                            pagerduty_resolve(secret, dedup_key),
                            format!("resolve {dedup_key}"),
                        )
                    }
                };
                last = with_retries(pool, c, &label, attempts, || {
                    post_json(&http, &endpoint, &body, secret)
                })
                .await;
            }
            Ok(last)
        }
        other => Err(Error::Unexpected(anyhow::anyhow!(
            "unknown channel kind {other}"
        ))),
    }
}

/// What a test send answered.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "AlertChannelTestResult")]
pub struct TestResult {
    pub ok: bool,
    pub status_code: Option<u16>,
    pub error: Option<String>,
}

/// Sends a test notification now, once (the person is waiting), and logs it. PagerDuty gets a
/// trigger and its resolve, so no test incident stays open.
pub async fn send_test(ctx: &Ctx, who: &Principal, id: &str) -> Result<TestResult> {
    let pool = &ctx.pool;
    let store: &SecretStore = &ctx.secrets;
    let c = get(ctx, who, id).await?;
    let alert = Alert {
        id: 0,
        kind: "test".into(),
        subject: c.name.clone(),
        severity: "warning".into(),
        message: format!(
            "A test from ClueCDC, sent by {}: channel {} works.",
            who.user_name, c.name
        ),
        state: "firing".into(),
        first_seen: crate::time::now(),
        last_seen: crate::time::now(),
        resolved_at: None,
        acknowledged_by: None,
        acknowledged_at: None,
    };
    let secret = store
        .get(&c.secret_ref, secret_name(&c.kind))
        .await?
        .ok_or_else(|| {
            Error::Conflict(format!(
                "channel {} has no {} set",
                c.name,
                secret_name(&c.kind)
            ))
        })?;
    let secret = secret.expose().as_str();
    let events = [Event {
        state: "firing".into(),
        alert,
    }];
    let sent = match c.kind.as_str() {
        "pagerduty" => {
            let http = http_client(&c).map_err(Error::Unavailable)?;
            let key = format!("cluecdc/test/{}", c.id);
            let endpoint = c.setting("endpoint").to_string();
            let trigger = pagerduty_trigger(secret, &key, &[&events[0].alert]);
            let resolve = pagerduty_resolve(secret, &key);
            let first = with_retries(pool, &c, "test trigger", 1, || {
                post_json(&http, &endpoint, &trigger, secret)
            })
            .await;
            if first.is_ok() {
                with_retries(pool, &c, "test resolve", 1, || {
                    post_json(&http, &endpoint, &resolve, secret)
                })
                .await
            } else {
                first
            }
        }
        "slack" | "teams" => {
            let http = http_client(&c).map_err(Error::Unavailable)?;
            let body = if c.kind == "slack" {
                slack(&events)
            } else {
                teams(&events)
            };
            with_retries(pool, &c, "test", 1, || {
                post_json(&http, secret, &body, secret)
            })
            .await
        }
        _ => with_retries(pool, &c, "test", 1, || send_email(&c, secret, &events)).await,
    };
    audit::record_alone(
        pool,
        Entry {
            actor: who.into(),
            action: "alert_channel.test",
            target_kind: "alert_channel",
            target_id: &c.id,
            outcome: if sent.is_ok() {
                Outcome::Success
            } else {
                Outcome::Failure
            },
            summary: json!({"name": c.name, "kind": c.kind}),
        },
    )
    .await?;
    Ok(match sent {
        Ok(code) => TestResult {
            ok: true,
            status_code: Some(code),
            error: None,
        },
        Err(f) => TestResult {
            ok: false,
            status_code: f.status,
            error: Some(f.why),
        },
    })
}

// ---- grouping -------------------------------------------------------------------------------

/// Transitions waiting for their channel's group to close (channel id → events). In memory:
/// a restart drops a group not yet sent (the alerts stay on the Alerts page).
#[derive(Debug, Clone, Default)]
pub struct Outbox(Arc<Mutex<HashMap<String, Vec<Event>>>>);

/// Hands one monitor cycle's transitions to the channels: each enabled channel takes those its
/// rules and severities select; the first opens a group that closes `group_wait_secs` later,
/// and the group goes as one message (one PagerDuty incident).
pub async fn dispatch(
    pool: &Pool,
    store: &Arc<SecretStore>,
    outbox: &Outbox,
    events: &[Event],
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let rows: Vec<Row> = db::query_as(&format!("{SELECT} WHERE enabled = 1"))
        .fetch_all(pool)
        .await?;
    for r in rows {
        let c = view(store, r).await?;
        let picked: Vec<Event> = events
            .iter()
            .filter(|e| c.selects(&e.alert))
            .cloned()
            .collect();
        if picked.is_empty() {
            continue;
        }
        let opens = {
            let mut pending = outbox.0.lock().unwrap_or_else(|e| e.into_inner());
            let entry = pending.entry(c.id.clone()).or_default();
            let opens = entry.is_empty();
            entry.extend(picked);
            opens
        };
        if opens {
            let (pool, store, outbox) = (pool.clone(), store.clone(), outbox.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(c.group_wait_secs.max(0) as u64)).await;
                let group = outbox
                    .0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&c.id)
                    .unwrap_or_default();
                // The channel as it is now: changed or removed while the group was open.
                let now = match load(&pool, &store, &c.id).await {
                    Ok(Some(now)) if now.enabled => now,
                    Ok(_) => return,
                    Err(e) => return tracing::warn!(error = %e, "cannot read an alert channel"),
                };
                if let Err(e) = deliver(&pool, &store, &now, &group, ATTEMPTS).await {
                    tracing::warn!(channel = %now.name, error = %e, "alert channel not sent");
                }
            });
        }
    }
    Ok(())
}
