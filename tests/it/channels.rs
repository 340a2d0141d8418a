//! Alert channels against the stack's counterparts: the `hooks` component (an HTTPS stand-in for
//! Slack, Teams and PagerDuty that checks each body against the service's payload shape) and
//! the `smtp` component (aiosmtpd: STARTTLS, AUTH required, a mailbox of JSON files). Alerts
//! come from real connectors failing in the stack's Kafka Connect: a FileStreamSink whose
//! directory does not exist fails at every task start.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}-{}", std::process::id(), n % 10_000_000)
}

const ROUTING_KEY: &str = "R0123456789abcdefR0123456789abcd";

fn ca() -> String {
    std::fs::read_to_string(var("TLS_CA_FILE")).unwrap()
}

fn https() -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca().as_bytes()).unwrap())
        .build()
        .unwrap()
}

/// What the hooks receiver recorded under `prefix`, oldest first.
async fn received(prefix: &str) -> Vec<Value> {
    let r = https()
        .get(format!("{}/received", var("HOOKS_URL")))
        .query(&[("prefix", prefix)])
        .send()
        .await
        .unwrap();
    r.json::<Vec<Value>>().await.unwrap()
}

/// Accepted (2xx) and valid requests only.
async fn accepted(prefix: &str) -> Vec<Value> {
    received(prefix)
        .await
        .into_iter()
        .filter(|r| r["status"].as_i64().unwrap() < 300)
        .inspect(|r| assert_eq!(r["valid"], true, "the receiver refused the shape: {r}"))
        .collect()
}

/// The messages the SMTP server stored for `to`.
fn mailbox(to: &str) -> Vec<Value> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(var("SMTP_MAILBOX"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok()?;
            v["rcpt_tos"]
                .as_array()?
                .iter()
                .any(|r| r == to)
                .then(|| (e.file_name().to_string_lossy().to_string(), v))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, v)| v).collect()
}

/// The four channels, each for connector_failed only, grouped over `wait` seconds, trusting
/// the stack's CA; the e-mail goes to `to` over STARTTLS.
async fn channels(api: &Api, t: &str, wait: i64, to: &str) -> Vec<Value> {
    let hooks = var("HOOKS_URL");
    let common = json!({"rules": ["connector_failed"], "severities": ["critical"], "group_wait_secs": wait, "tls_ca_certificate": ca()});
    let mut out = Vec::new();
    for body in [
        json!({"name": "slack", "kind": "slack", "secrets": {"webhook_url": format!("{hooks}/slack/{t}")}}),
        json!({"name": "teams", "kind": "teams", "secrets": {"webhook_url": format!("{hooks}/teams/{t}")}}),
        json!({"name": "pager", "kind": "pagerduty", "settings": {"endpoint": format!("{hooks}/pagerduty/{t}/v2/enqueue")}, "secrets": {"routing_key": ROUTING_KEY}}),
        json!({"name": "mail", "kind": "email", "settings": {"host": var("SMTP_HOST"), "port": var("SMTP_PORT"), "tls": "starttls", "username": var("SMTP_USER"), "from": "cluecdc@example.com", "to": to}, "secrets": {"password": var("SMTP_PASSWORD")}}),
    ] {
        let mut body = body;
        body.as_object_mut()
            .unwrap()
            .extend(common.as_object().unwrap().clone());
        let (status, c) = api.post("/api/v1/alert-channels", body).await;
        assert_eq!(status, 201, "{c}");
        out.push(c);
    }
    out
}

async fn monitored_app() -> (Api, String) {
    let s = stack();
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
        // Nothing restarts the failing tasks: each connector stays FAILED until told.
        ("CLUECDC_RESTART_MAX", "0"),
    ]);
    let (status, cluster) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "stack", "url": s.connect_url}),
        )
        .await;
    assert_eq!(status, 201, "{cluster}");
    (api, cluster["id"].as_str().unwrap().to_string())
}

/// A sink that fails at every task start while `dir` does not exist.
async fn failing_connector(api: &Api, cluster: &str, name: &str, dir: &str) {
    let (status, c) = api
        .post(
            "/api/v1/connectors",
            json!({"name": name, "connect_cluster_id": cluster, "config": {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "file": format!("{dir}/out.txt"), "topics": name, "tasks.max": "1"}}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
}

async fn set_rule(api: &Api, patch: Value) {
    let (status, body) = api
        .patch("/api/v1/alert-rules/connector_failed", patch)
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_failed_connector_reaches_slack_teams_pagerduty_and_email_once_and_its_recovery_resolves_the_same_incident(
) {
    let s = stack();
    let _c = connect_shared().await;
    let (api, cluster) = monitored_app().await;
    let t = tag();
    let to = format!("ops-{t}@example.com");
    set_rule(&api, json!({"for_secs": 0})).await;
    let chans = channels(&api, &t, 1, &to).await;
    // Secrets are write-only: the API says "set", never the value.
    let (_, listed) = api.get("/api/v1/alert-channels").await;
    let text = listed.to_string();
    assert!(
        !text.contains(ROUTING_KEY)
            && !text.contains(&format!("/slack/{t}"))
            && !text.contains(&var("SMTP_PASSWORD")),
        "{text}"
    );
    assert_eq!(chans[0]["secrets"]["webhook_url"], true);
    assert_eq!(chans[0]["url_host"], "127.0.0.1");
    // Teams answers 500 twice: the message must arrive on the third attempt.
    let teams_path = format!("/teams/{t}");
    let r = https()
        .post(format!("{}/control/fail", var("HOOKS_URL")))
        .json(&json!({"path": teams_path, "status": 500, "times": 2}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let name = format!("chan-fail-{t}");
    let dir = std::env::temp_dir().join(format!("cluecdc-channels-{t}"));
    let _ = std::fs::remove_dir_all(&dir);
    failing_connector(&api, &cluster, &name, dir.to_str().unwrap()).await;
    let started = std::time::Instant::now();
    let result = async {
        fires(&api, &name).await;
        let (slack, teams, pd, mail) = eventually(
            Duration::from_secs(60),
            "Slack, Teams, PagerDuty and e-mail all notified",
            || async {
                let slack = accepted(&format!("/slack/{t}")).await;
                let teams = accepted(&teams_path).await;
                let pd = accepted(&format!("/pagerduty/{t}/")).await;
                let mail = mailbox(&to);
                (!slack.is_empty() && !teams.is_empty() && !pd.is_empty() && !mail.is_empty())
                    .then_some((slack, teams, pd, mail))
            },
        )
        .await;
        println!(
            "all four notified {:?} after the connector was created",
            started.elapsed()
        );
        // One each (a further cycle adds nothing: the alert is open, not new).
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(accepted(&format!("/slack/{t}")).await.len(), 1);
        assert_eq!(accepted(&teams_path).await.len(), 1);
        assert_eq!(accepted(&format!("/pagerduty/{t}/")).await.len(), 1);
        assert_eq!(mailbox(&to).len(), 1);
        assert!(
            slack[0]["body"]["text"].as_str().unwrap().contains(&name),
            "{}",
            slack[0]
        );
        assert_eq!(slack[0]["body"]["blocks"][0]["type"], "header");
        assert_eq!(
            teams[0]["body"]["attachments"][0]["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        let trigger = &pd[0]["body"];
        assert_eq!(trigger["event_action"], "trigger");
        assert_eq!(trigger["routing_key"], ROUTING_KEY);
        assert_eq!(trigger["payload"]["source"], name.as_str());
        let key = format!("cluecdc/connector_failed/{name}");
        assert_eq!(trigger["dedup_key"], key.as_str());
        // The e-mail came over STARTTLS on the submission port, signed in with the stored login.
        assert_eq!(mail[0]["tls"], true, "{}", mail[0]);
        assert_eq!(
            mail[0]["port"].as_i64(),
            Some(var("SMTP_PORT").parse().unwrap())
        );
        assert_eq!(mail[0]["auth_user"], var("SMTP_USER").as_str());
        let data = mail[0]["data"].as_str().unwrap();
        assert!(
            data.contains(&format!("connector_failed on {name}"))
                && data.contains("Subject: [FIRING]"),
            "{data}"
        );

        // Teams: two 500s, then accepted, 1 s and 2 s apart, all three in the delivery log.
        let all = received(&teams_path).await;
        let statuses: Vec<i64> = all.iter().map(|r| r["status"].as_i64().unwrap()).collect();
        assert_eq!(statuses, vec![500, 500, 202]);
        let at: Vec<f64> = all.iter().map(|r| r["at"].as_f64().unwrap()).collect();
        assert!(
            at[1] - at[0] >= 0.9 && at[2] - at[1] >= 1.9,
            "backoff 1 s then 2 s: {at:?}"
        );
        let (_, log) = api
            .get(&format!(
                "/api/v1/alert-channels/{}/deliveries",
                chans[1]["id"].as_str().unwrap()
            ))
            .await;
        let rows: Vec<(i64, Option<i64>, bool)> = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .map(|r| {
                (
                    r["attempt"].as_i64().unwrap(),
                    r["status_code"].as_i64(),
                    r["ok"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (1, Some(500), false),
                (2, Some(500), false),
                (3, Some(202), true)
            ],
            "{log}"
        );
        assert!(
            log["items"][2]["error"]
                .as_str()
                .unwrap()
                .starts_with("HTTP 500"),
            "{log}"
        );
        assert!(
            !log.to_string().contains(&teams_path),
            "no URL (the secret) in the log: {log}"
        );

        // Recovery: the directory appears and the connector restarts: the same key resolves.
        std::fs::create_dir_all(&dir).unwrap();
        let (status, body) = api
            .post(&format!("/api/v1/connectors/{name}/restart"), json!({}))
            .await;
        assert!(status < 300, "{body}");
        let resolve = eventually(Duration::from_secs(90), "the PagerDuty resolve", || async {
            accepted(&format!("/pagerduty/{t}/"))
                .await
                .into_iter()
                .find(|r| r["body"]["event_action"] == "resolve")
        })
        .await;
        assert_eq!(resolve["body"]["dedup_key"], key.as_str());
        let slack = eventually(
            Duration::from_secs(30),
            "Slack told of the recovery",
            || async {
                let s = accepted(&format!("/slack/{t}")).await;
                (s.len() == 2).then_some(s)
            },
        )
        .await;
        assert!(
            slack[1]["body"]["text"]
                .as_str()
                .unwrap()
                .starts_with("[RESOLVED]"),
            "{}",
            slack[1]
        );

        // It fails again (flaps): PagerDuty gets the same dedup key, the incident key it already
        // knows, not a new one per flap.
        std::fs::remove_dir_all(&dir).unwrap();
        let (status, body) = api
            .post(&format!("/api/v1/connectors/{name}/restart"), json!({}))
            .await;
        assert!(status < 300, "{body}");
        let again = eventually(
            Duration::from_secs(90),
            "the second PagerDuty trigger",
            || async {
                let pd = accepted(&format!("/pagerduty/{t}/")).await;
                (pd.len() == 3).then(|| pd[2].clone())
            },
        )
        .await;
        assert_eq!(again["body"]["event_action"], "trigger");
        assert_eq!(again["body"]["dedup_key"], key.as_str());
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &name).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

async fn fires(api: &Api, name: &str) -> Value {
    eventually(
        Duration::from_secs(90),
        &format!("connector_failed firing on {name}"),
        || alert(api, "connector_failed", name, "firing"),
    )
    .await
}

#[tokio::test]
async fn fifty_connectors_failing_together_are_one_message_per_channel_and_one_pagerduty_incident()
{
    let s = stack();
    let _c = connect_shared().await;
    let (api, cluster) = monitored_app().await;
    let t = tag();
    let to = format!("ops50-{t}@example.com");
    // The rule is on from the start, as in production: the 50 connectors are created at once
    // and fail within seconds of each other in Connect (2-3.3 s seen), so their alerts fire over
    // a few monitor cycles. Each channel's group, opened by the first, stays open 20 s: one
    // message per channel however the 50 spread inside that window.
    set_rule(&api, json!({"for_secs": 0})).await;
    channels(&api, &t, 20, &to).await;
    let names: Vec<String> = (0..50).map(|i| format!("chan50-{t}-{i:02}")).collect();
    let dir = format!("/nonexistent-dir/cluecdc-{t}");
    let started = std::time::Instant::now();
    futures::future::join_all(
        names
            .iter()
            .map(|n| failing_connector(&api, &cluster, n, &dir)),
    )
    .await;
    println!("50 connectors created in {:?}", started.elapsed());
    let result = async {
        eventually(
            Duration::from_secs(240),
            "all 50 connectors FAILED",
            || async {
                let (_, list) = api.get("/api/v1/connectors?limit=200").await;
                let failed = list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|c| c["phase"] == "FAILED" && names.iter().any(|n| *n == c["name"]))
                    .count();
                (failed == 50).then_some(())
            },
        )
        .await;
        println!("50 connectors FAILED in {:?}", started.elapsed());
        eventually(
            Duration::from_secs(90),
            "every channel notified",
            || async {
                (!accepted(&format!("/slack/{t}")).await.is_empty()
                    && !accepted(&format!("/teams/{t}")).await.is_empty()
                    && !accepted(&format!("/pagerduty/{t}/")).await.is_empty()
                    && !mailbox(&to).is_empty())
                .then_some(())
            },
        )
        .await;
        // Past the group's end (sent when it closed): still one message per channel.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (_, open) = api.get("/api/v1/alerts?state=firing&limit=200").await;
        let firing = open["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["kind"] == "connector_failed")
            .count();
        assert_eq!(firing, 50, "{open}");
        let slack = accepted(&format!("/slack/{t}")).await;
        assert_eq!(slack.len(), 1);
        assert!(
            slack[0]["body"]["text"]
                .as_str()
                .unwrap()
                .starts_with("[ClueCDC] 50 alerts firing"),
            "{}",
            slack[0]
        );
        assert_eq!(accepted(&format!("/teams/{t}")).await.len(), 1);
        let mail = mailbox(&to);
        assert_eq!(mail.len(), 1);
        for n in &names {
            assert!(
                mail[0]["data"].as_str().unwrap().contains(n.as_str()),
                "the e-mail lists {n}"
            );
        }
        let pd = accepted(&format!("/pagerduty/{t}/")).await;
        assert_eq!(pd.len(), 1, "one incident for the group");
        let group_key = pd[0]["body"]["dedup_key"].as_str().unwrap().to_string();
        assert!(group_key.starts_with("cluecdc/group/"), "{group_key}");
        assert_eq!(pd[0]["body"]["payload"]["custom_details"]["count"], 50);
        // The group's incident resolves once, when the last of its alerts does.
        for n in &names {
            let (status, _) = api.delete(&format!("/api/v1/connectors/{n}")).await;
            assert_eq!(status, 200);
        }
        let resolve = eventually(Duration::from_secs(120), "the group's resolve", || async {
            accepted(&format!("/pagerduty/{t}/"))
                .await
                .into_iter()
                .find(|r| r["body"]["event_action"] == "resolve")
        })
        .await;
        assert_eq!(resolve["body"]["dedup_key"], group_key.as_str());
        assert_eq!(accepted(&format!("/pagerduty/{t}/")).await.len(), 2);
        println!(
            "50 connectors: grouped and resolved in {:?}",
            started.elapsed()
        );
    };
    with_cleanup(result, async {
        for n in &names {
            delete_connector(&s.connect_url, n).await;
        }
    })
    .await;
}

#[tokio::test]
async fn channel_input_is_checked_per_field_and_a_new_smtp_host_needs_the_password_again() {
    let api = admin_api();
    let (status, e) = api
        .post("/api/v1/alert-channels", json!({"name": "", "kind": "pagerduty", "secrets": {"routing_key": "short"}, "rules": ["nope"]}))
        .await;
    assert_eq!(status, 422, "{e}");
    for f in ["name", "secrets.routing_key", "rules"] {
        assert!(e["error"]["fields"][f].is_string(), "{f}: {e}");
    }
    assert!(
        !e.to_string().contains("short"),
        "the refused secret is not echoed: {e}"
    );
    let (status, c) = api
        .post("/api/v1/alert-channels", json!({"name": "mail", "kind": "email", "settings": {"host": "127.0.0.1", "port": 18587, "username": "u", "from": "a@example.com", "to": "b@example.com"}, "secrets": {"password": "pw-1"}}))
        .await;
    assert_eq!(status, 201, "{c}");
    let id = c["id"].as_str().unwrap();
    let (status, e) = api
        .patch(
            &format!("/api/v1/alert-channels/{id}"),
            json!({"settings": {"host": "mail.elsewhere.example"}}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    assert!(
        e["error"]["fields"]["secrets.password"]
            .as_str()
            .unwrap()
            .contains("must be given again"),
        "{e}"
    );
    let (_, same) = api.get(&format!("/api/v1/alert-channels/{id}")).await;
    assert_eq!(same["settings"]["host"], "127.0.0.1", "nothing changed");
    let (status, moved) = api
        .patch(&format!("/api/v1/alert-channels/{id}"), json!({"settings": {"host": "mail.elsewhere.example"}, "secrets": {"password": "pw-2"}}))
        .await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["settings"]["host"], "mail.elsewhere.example");
    // A test to a server that is not there fails, and the log says why without the password.
    let (status, r) = api
        .patch(
            &format!("/api/v1/alert-channels/{id}"),
            json!({"settings": {"host": "127.0.0.1", "port": 1}, "secrets": {"password": "pw-3"}}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let (status, r) = api
        .post(&format!("/api/v1/alert-channels/{id}/test"), json!({}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["ok"], false, "{r}");
    let (_, log) = api
        .get(&format!("/api/v1/alert-channels/{id}/deliveries"))
        .await;
    assert_eq!(log["items"][0]["event"], "test");
    assert!(
        log["items"][0]["error"]
            .as_str()
            .unwrap()
            .starts_with("SMTP"),
        "{log}"
    );
    assert!(!log.to_string().contains("pw-3"));
    let (status, _) = api.delete(&format!("/api/v1/alert-channels/{id}")).await;
    assert_eq!(status, 204);
    // Implicit TLS (port 465 style) to the stack's SMTP server, trusting only the stack's CA.
    let to = format!("implicit-{}@example.com", tag());
    let (status, c) = api
        .post("/api/v1/alert-channels", json!({"name": "mail 465", "kind": "email", "tls_ca_certificate": ca(), "settings": {"host": var("SMTP_HOST"), "port": var("SMTP_TLS_PORT"), "tls": "implicit", "username": var("SMTP_USER"), "from": "cluecdc@example.com", "to": to}, "secrets": {"password": var("SMTP_PASSWORD")}}))
        .await;
    assert_eq!(status, 201, "{c}");
    let (_, r) = api
        .post(
            &format!("/api/v1/alert-channels/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(r["ok"], true, "{r}");
    let mail = mailbox(&to);
    assert_eq!(mail.len(), 1);
    assert_eq!(
        mail[0]["port"].as_i64(),
        Some(var("SMTP_TLS_PORT").parse().unwrap())
    );
    assert_eq!(mail[0]["tls"], true);
    assert!(
        mail[0]["data"]
            .as_str()
            .unwrap()
            .contains("channel mail 465 works"),
        "{}",
        mail[0]
    );
    // A wrong password is refused by the server, and the log says so without it.
    let (status, r) = api
        .patch(
            &format!("/api/v1/alert-channels/{}", c["id"].as_str().unwrap()),
            json!({"secrets": {"password": "not-the-password"}}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let (_, r) = api
        .post(
            &format!("/api/v1/alert-channels/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["status_code"], 535, "{r}");
    assert!(!r.to_string().contains("not-the-password"));
    let (status, _) = api.get(&format!("/api/v1/alert-channels/{id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn channels_are_exported_without_their_secrets_and_applied_to_a_fresh_instance_they_export_the_same(
) {
    let a = admin_api();
    let t = tag();
    let to = format!("ops-{t}@example.com");
    let chans = channels(&a, &t, 7, &to).await;
    assert_eq!(chans.len(), 4);
    let (status, exported) = {
        let r = a
            .http
            .get(format!("{}/api/v1/export", a.app.url))
            .bearer_auth(&a.token)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(status, 200, "{exported}");
    for secret in [
        ROUTING_KEY.to_string(),
        format!("/slack/{t}"),
        format!("/teams/{t}"),
        var("SMTP_PASSWORD"),
    ] {
        assert!(
            !exported.contains(&secret),
            "the export holds no secret ({secret}):\n{exported}"
        );
    }
    for line in [
        "alert_channels:",
        "env: CLUECDC_ALERT_CHANNEL_PAGER_ROUTING_KEY",
        "env: CLUECDC_ALERT_CHANNEL_SLACK_WEBHOOK_URL",
        "env: CLUECDC_ALERT_CHANNEL_MAIL_PASSWORD",
        "group_wait_secs: 7",
    ] {
        assert!(exported.contains(line), "{line} in:\n{exported}");
    }
    let hooks = var("HOOKS_URL");
    let env: Vec<(String, String)> = vec![
        (
            "CLUECDC_ALERT_CHANNEL_SLACK_WEBHOOK_URL".into(),
            format!("{hooks}/slack/{t}"),
        ),
        (
            "CLUECDC_ALERT_CHANNEL_TEAMS_WEBHOOK_URL".into(),
            format!("{hooks}/teams/{t}"),
        ),
        (
            "CLUECDC_ALERT_CHANNEL_PAGER_ROUTING_KEY".into(),
            ROUTING_KEY.into(),
        ),
        (
            "CLUECDC_ALERT_CHANNEL_MAIL_PASSWORD".into(),
            var("SMTP_PASSWORD"),
        ),
    ];
    let b = admin_api();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluecdc.yaml");
    std::fs::write(&file, &exported).unwrap();
    let f = file.to_str().unwrap();
    let (ok, out, err) = cli(&b.app.data, &["plan", "-f", f], &env).await;
    assert!(ok, "{out}{err}");
    for n in ["slack", "teams", "pager", "mail"] {
        assert!(
            out.contains(&format!("+ create alert_channel \"{n}\"")),
            "{out}"
        );
    }
    let (ok, out, err) = cli(&b.app.data, &["apply", "-f", f], &env).await;
    assert!(ok, "apply: {out}{err}");
    let again = b
        .http
        .get(format!("{}/api/v1/export", b.app.url))
        .bearer_auth(&b.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        again, exported,
        "the rebuilt instance exports the same bytes"
    );
    let (ok, out, err) = cli(&b.app.data, &["apply", "-f", f], &env).await;
    assert!(ok && out.contains("No changes"), "{out}{err}");
    // The applied secrets work: B's PagerDuty channel sends a test the receiver accepts.
    let (_, pager) = b.get("/api/v1/alert-channels/pager").await;
    let (status, r) = b
        .post(
            &format!(
                "/api/v1/alert-channels/{}/test",
                pager["id"].as_str().unwrap()
            ),
            json!({}),
        )
        .await;
    assert_eq!((status, r["ok"].as_bool()), (200, Some(true)), "{r}");
    // A new SMTP host in the document without the password given again is refused, by path.
    let moved = exported.replace(
        &format!("host: {}", var("SMTP_HOST")),
        "host: mail.elsewhere.example",
    );
    assert_ne!(moved, exported);
    std::fs::write(&file, &moved).unwrap();
    let without: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !k.ends_with("MAIL_PASSWORD"))
        .cloned()
        .collect();
    let (ok, out, err) = cli(&b.app.data, &["plan", "-f", f], &without).await;
    assert!(!ok, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("alert_channels[0].secrets.password"),
        "{out}{err}"
    );
}

/// A client generated from the OpenAPI document sends every optional field, `null` when unset:
/// another kind's settings and secrets given as `null` are not given (they were refused), on
/// create and on PATCH (where a null secret keeps the stored one).
#[tokio::test]
async fn null_settings_and_secrets_of_other_kinds_are_not_given() {
    let api = admin_api();
    let (status, c) = api
        .post("/api/v1/alert-channels", json!({"name": "mail-nulls", "kind": "email",
            "settings": {"host": "127.0.0.1", "port": 18587, "username": "u", "from": "a@example.com", "to": "b@example.com", "endpoint": null},
            "secrets": {"password": "pw-1", "routing_key": null, "webhook_url": null}}))
        .await;
    assert_eq!(status, 201, "{c}");
    assert!(c["settings"].get("endpoint").is_none(), "{c}");
    let id = c["id"].as_str().unwrap();
    let (status, p) = api
        .patch(
            &format!("/api/v1/alert-channels/{id}"),
            json!({"settings": {"endpoint": null}, "secrets": {"password": null, "routing_key": null}}),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    assert!(p["settings"].get("endpoint").is_none(), "{p}");
    assert_eq!(p["settings"]["username"], "u");
    assert_eq!(p["settings"]["host"], "127.0.0.1");
    assert_eq!(p["secrets"]["password"], true, "{p}");
}
