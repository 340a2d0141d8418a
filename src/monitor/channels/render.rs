//! The messages, as pure functions of the events: Slack Block Kit, a Teams Adaptive Card, the
//! e-mail's subject and body, and PagerDuty's Events API v2 bodies with the dedup-key plan.

use super::*;

/// One transition of one alert.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// `firing` or `resolved`.
    pub state: String,
    pub alert: Alert,
}

pub(super) fn counts(events: &[Event]) -> (usize, usize) {
    let firing = events.iter().filter(|e| e.state == "firing").count();
    (firing, events.len() - firing)
}

/// The one-line summary of a group: what a notification's title, e-mail subject and
/// PagerDuty summary say.
pub fn headline(events: &[Event]) -> String {
    match events {
        [one] => format!(
            "[{}] {} {} on {}",
            one.state.to_uppercase(),
            one.alert.severity,
            one.alert.kind,
            one.alert.subject
        ),
        _ => {
            let (firing, resolved) = counts(events);
            let mut parts = Vec::new();
            if firing > 0 {
                parts.push(format!("{firing} alerts firing"));
            }
            if resolved > 0 {
                parts.push(format!("{resolved} resolved"));
            }
            let mut kinds: Vec<&str> = events.iter().map(|e| e.alert.kind.as_str()).collect();
            kinds.sort_unstable();
            kinds.dedup();
            format!("[ClueCDC] {} ({})", parts.join(", "), kinds.join(", "))
        }
    }
}

pub(super) fn line(e: &Event) -> String {
    format!(
        "{} {} · {} · {}: {}",
        if e.state == "firing" { "▲" } else { "✓" },
        e.state,
        e.alert.severity,
        e.alert.kind,
        e.alert.subject
    )
}

pub(super) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Slack incoming-webhook body: `text` (the notification's fallback) and Block Kit `blocks`
/// (header, one section per listed alert, a context line with the rest).
pub fn slack(events: &[Event]) -> Value {
    let title = headline(events);
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": clip(&title, 150), "emoji": true}}),
    ];
    for e in events.iter().take(LISTED) {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn",
            "text": clip(&format!("*{}*\n{}", line(e), e.alert.message), 2900)}}));
    }
    let more = events.len().saturating_sub(LISTED);
    let mut context = format!("ClueCDC · sent {}", crate::time::now());
    if more > 0 {
        context = format!(
            "and {more} more alerts in this group (the Alerts page lists them) · {context}"
        );
    }
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]}));
    json!({"text": clip(&title, 3000), "blocks": blocks})
}

/// Microsoft Teams workflow ("When a Teams webhook request is received") body: a message whose
/// one attachment is an Adaptive Card.
pub fn teams(events: &[Event]) -> Value {
    let mut body = vec![
        json!({"type": "TextBlock", "text": headline(events), "weight": "Bolder", "size": "Medium", "wrap": true}),
    ];
    for e in events.iter().take(LISTED) {
        body.push(json!({"type": "TextBlock", "text": line(e), "weight": "Bolder", "wrap": true, "spacing": "Medium",
            "color": if e.state == "firing" { "Attention" } else { "Good" }}));
        body.push(json!({"type": "TextBlock", "text": clip(&e.alert.message, 2000), "wrap": true, "isSubtle": true, "spacing": "None"}));
    }
    let more = events.len().saturating_sub(LISTED);
    if more > 0 {
        body.push(json!({"type": "TextBlock", "text": format!("and {more} more alerts in this group (the Alerts page lists them)"), "wrap": true}));
    }
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": body,
            }
        }]
    })
}

/// The e-mail's subject and plain-text body.
pub fn email(events: &[Event]) -> (String, String) {
    let mut body = String::new();
    for e in events {
        body.push_str(&format!(
            "{}\n  {}\n  first seen {}{}\n\n",
            line(e),
            e.alert.message,
            e.alert.first_seen,
            e.alert
                .resolved_at
                .as_deref()
                .map(|r| format!(", resolved {r}"))
                .unwrap_or_default()
        ));
    }
    body.push_str("-- \nClueCDC alert channel. The Alerts page lists every open alert.\n");
    (clip(&headline(events), 200), body)
}

/// The stable PagerDuty dedup key of one alert: the same for every firing of the same rule on
/// the same subject, so a flapping alert stays one incident.
pub fn alert_key(kind: &str, subject: &str) -> String {
    let raw = format!("cluecdc/{kind}/{subject}");
    if raw.len() <= 200 {
        raw
    } else {
        use sha2::Digest;
        format!(
            "cluecdc/{kind}/sha256:{}",
            hex::encode(sha2::Sha256::digest(subject.as_bytes()))
        )
    }
}

pub(super) fn pd_severity(s: &str) -> &'static str {
    match s {
        "critical" => "critical",
        "warning" => "warning",
        "error" => "error",
        _ => "info",
    }
}

/// A PagerDuty Events API v2 trigger for one alert or a group (one incident).
pub fn pagerduty_trigger(routing_key: &str, dedup_key: &str, alerts: &[&Alert]) -> Value {
    let severity = if alerts.iter().any(|a| a.severity == "critical") {
        "critical"
    } else {
        alerts
            .first()
            .map_or("warning", |a| pd_severity(&a.severity))
    };
    let events: Vec<Event> = alerts
        .iter()
        .map(|a| Event {
            state: "firing".into(),
            alert: (*a).clone(),
        })
        .collect();
    let (source, class, summary) = match alerts {
        [one] => (
            one.subject.clone(),
            one.kind.clone(),
            format!("{}: {}", one.kind, one.message),
        ),
        _ => (
            "ClueCDC".to_string(),
            "grouped".to_string(),
            headline(&events),
        ),
    };
    let details: Vec<Value> = alerts
        .iter()
        .map(|a| json!({"rule": a.kind, "subject": a.subject, "severity": a.severity, "message": a.message, "first_seen": a.first_seen}))
        .collect();
    json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "client": "ClueCDC",
        "payload": {
            "summary": clip(&summary, 1024),
            "source": clip(&source, 255),
            "severity": severity,
            "component": if alerts.len() == 1 { alerts[0].subject.clone() } else { String::from("ClueCDC") },
            "class": class,
            "custom_details": {"alerts": details, "count": alerts.len()},
        }
    })
}

pub fn pagerduty_resolve(routing_key: &str, dedup_key: &str) -> Value {
    json!({"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup_key})
}

/// What PagerDuty receives for one group of transitions.
#[derive(Debug, Clone, PartialEq)]
pub enum PdStep {
    /// Opens one incident for these alerts (kind, subject).
    Trigger {
        dedup_key: String,
        members: Vec<(String, String)>,
    },
    /// Every alert of this incident resolved.
    Resolve { dedup_key: String },
}

/// Plans a group for PagerDuty (pure). `open` are the incidents this channel has open:
/// (dedup key, alert kind, alert subject, that alert still firing). One alert firing alone
/// triggers its own stable key; several firing together trigger ONE incident under
/// `group_key`; an incident resolves when its last alert resolves. An alert that is already
/// in an open incident triggers nothing new; one that fired and resolved within the group
/// pages nobody.
pub fn plan_pagerduty(
    events: &[Event],
    open: &[(String, String, String, bool)],
    group_key: &str,
) -> (Vec<PdStep>, Vec<(String, String)>) {
    let mut last: Vec<((String, String), &str)> = Vec::new();
    for e in events {
        let k = (e.alert.kind.clone(), e.alert.subject.clone());
        last.retain(|(x, _)| *x != k);
        last.push((k, e.state.as_str()));
    }
    let in_open = |k: &(String, String)| {
        open.iter()
            .any(|(_, kind, subject, firing)| *firing && kind == &k.0 && subject == &k.1)
    };
    let firing: Vec<(String, String)> = last
        .iter()
        .filter(|(k, s)| *s == "firing" && !in_open(k))
        .map(|(k, _)| k.clone())
        .collect();
    let resolved: Vec<(String, String)> = last
        .iter()
        .filter(|(k, s)| *s == "resolved" && in_open(k))
        .map(|(k, _)| k.clone())
        .collect();
    let mut steps = Vec::new();
    match firing.as_slice() {
        [] => {}
        [one] => steps.push(PdStep::Trigger {
            dedup_key: alert_key(&one.0, &one.1),
            members: firing.clone(),
        }),
        _ => steps.push(PdStep::Trigger {
            dedup_key: group_key.to_string(),
            members: firing.clone(),
        }),
    }
    let keys: BTreeSet<&String> = open.iter().map(|(k, ..)| k).collect();
    for key in keys {
        let members: Vec<&(String, String, String, bool)> =
            open.iter().filter(|(k, ..)| k == key).collect();
        let touched = members
            .iter()
            .any(|(_, kind, subject, _)| resolved.contains(&(kind.clone(), subject.clone())));
        let still = members.iter().any(|(_, kind, subject, firing)| {
            *firing && !resolved.contains(&(kind.clone(), subject.clone()))
        });
        if touched && !still {
            steps.push(PdStep::Resolve {
                dedup_key: key.clone(),
            });
        }
    }
    (steps, resolved)
}
