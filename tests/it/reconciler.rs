//! The reconciler against the real stack's Kafka Connect: desired connectors appear and run,
//! drift made directly in Connect is repaired and recorded, failing tasks are restarted with
//! backoff and then reported, Connect outages are survived, serve and worker never both act,
//! and an unchanged pass costs one list call.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;

const FAST: &[(&str, &str)] = &[
    ("CLUECDC_RECONCILE_INTERVAL", "1s"),
    ("CLUECDC_LEASE_TTL", "3s"),
    ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
];

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}-{}", std::process::id(), n % 10_000_000)
}

/// A cheap connector: reads /dev/null forever.
fn source_config(topic: &str) -> Value {
    json!({"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "file": "/dev/null", "topic": topic, "tasks.max": "1"})
}

async fn register(api: &Api, url: &str) -> String {
    let (status, c) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "stack", "url": url}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    c["id"].as_str().unwrap().to_string()
}

async fn desire(api: &Api, cluster: &str, name: &str, config: Value) -> Value {
    let (status, c) = api
        .post(
            "/api/v1/connectors",
            json!({"name": name, "connect_cluster_id": cluster, "config": config}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    c
}

async fn phase_is(api: &Api, name: &str, phase: &str) -> Option<Value> {
    let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
    (c["phase"] == phase).then_some(c)
}

/// The first entry of one of a connector's recorded lists (`drift_events`, `restarts`) that
/// `wanted` accepts, once the reconciler has committed it.
async fn recorded(
    api: &Api,
    name: &str,
    list: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
    c[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| wanted(e))
        .cloned()
}

#[tokio::test]
async fn a_desired_connector_runs_and_drift_made_in_connect_is_repaired_and_recorded() {
    let s = stack();
    let _c = connect_shared().await;
    let api = admin_api_with(FAST);
    let cluster = register(&api, &s.connect_url).await;
    let name = format!("rec-{}", tag());
    desire(&api, &cluster, &name, source_config(&name)).await;
    let running = eventually(
        Duration::from_secs(60),
        "the connector RUNNING in ClueCDC",
        || phase_is(&api, &name, "RUNNING"),
    )
    .await;
    assert_eq!(running["observed_state"], "RUNNING");
    assert_eq!(running["tasks"][0]["state"], "RUNNING");
    assert!(running["observed_age_secs"].as_i64().unwrap() < 10);
    wait_running(&s.connect_url, &name, Duration::from_secs(30)).await;

    let result = async {
        // Deleted directly in Connect: recreated, and the drift recorded.
        delete_connector(&s.connect_url, &name).await;
        eventually(
            Duration::from_secs(60),
            "a 'deleted' drift event, repaired",
            || {
                recorded(&api, &name, "drift_events", |e| {
                    e["kind"] == "deleted" && e["action"] == "repaired"
                })
            },
        )
        .await;
        wait_running(&s.connect_url, &name, Duration::from_secs(60)).await;

        // Config changed directly in Connect: restored, with the diff recorded.
        let mut changed = source_config(&name);
        changed["topic"] = json!("somewhere-else");
        let (status, said) = connect_call(
            reqwest::Method::PUT,
            &format!("{}/connectors/{name}/config", s.connect_url),
            Some(&changed),
        )
        .await;
        assert!((200..300).contains(&status), "{said}");
        eventually(
            Duration::from_secs(60),
            "the desired config restored in Connect",
            || async {
                connect_config(&s, &name)
                    .await
                    .filter(|c| c["topic"] == name.as_str())
            },
        )
        .await;
        // Recorded when the pass commits, just after its calls to Connect.
        let drift = eventually(Duration::from_secs(10), "the config drift recorded", || {
            recorded(&api, &name, "drift_events", |e| {
                e["kind"] == "config_changed"
            })
        })
        .await;
        assert_eq!(drift["action"], "repaired");
        assert_eq!(
            drift["diff"],
            json!([{"key": "topic", "desired": name, "applied": name, "live": "somewhere-else"}])
        );

        // An unknown connector added in Connect is reported, never deleted.
        let stranger = format!("stranger-{}", tag());
        let (status, said) = connect_call(
            reqwest::Method::PUT,
            &format!("{}/connectors/{stranger}/config", s.connect_url),
            Some(&source_config(&stranger)),
        )
        .await;
        assert!((200..300).contains(&status), "{said}");
        eventually(
            Duration::from_secs(30),
            "the unknown connector listed as unmanaged",
            || async {
                let (_, list) = api.get("/api/v1/connectors").await;
                list["unmanaged"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|u| u["name"] == stranger.as_str())
                    .then_some(())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            connect_config(&s, &stranger).await.is_some(),
            "ClueCDC left the unmanaged connector alone"
        );
        delete_connector(&s.connect_url, &stranger).await;

        // Pause through ClueCDC, then delete through ClueCDC.
        let (status, _) = api
            .post(&format!("/api/v1/connectors/{name}/pause"), json!({}))
            .await;
        assert_eq!(status, 200);
        eventually(Duration::from_secs(30), "PAUSED in Connect", || async {
            connect_status(&s.connect_url, &name)
                .await
                .filter(|st| st["connector"]["state"] == "PAUSED")
        })
        .await;
        let (status, _) = api.delete(&format!("/api/v1/connectors/{name}")).await;
        assert_eq!(status, 200);
        eventually(
            Duration::from_secs(30),
            "the connector gone from Connect and ClueCDC",
            || async {
                let gone_in_connect = connect_config(&s, &name).await.is_none();
                let gone_here = api.get(&format!("/api/v1/connectors/{name}")).await.0 == 404;
                (gone_in_connect && gone_here).then_some(())
            },
        )
        .await;
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &name).await;
    })
    .await;
}

/// A drift event is dropped once it is older than `CLUECDC_HISTORY_RETENTION`, by the monitor's
/// cycle, and not before; the connector it was about stays.
#[tokio::test]
async fn a_drift_event_older_than_the_history_retention_is_dropped_and_not_before() {
    let s = stack();
    let _c = connect_shared().await;
    let env = [
        FAST,
        &[
            ("CLUECDC_MONITOR_INTERVAL", "1s"),
            ("CLUECDC_HISTORY_RETENTION", "8s"),
        ],
    ]
    .concat();
    let api = admin_api_with(&env);
    let cluster = register(&api, &s.connect_url).await;
    let name = format!("kept-{}", tag());
    desire(&api, &cluster, &name, source_config(&name)).await;
    eventually(
        Duration::from_secs(60),
        "the connector RUNNING in ClueCDC",
        || phase_is(&api, &name, "RUNNING"),
    )
    .await;
    wait_running(&s.connect_url, &name, Duration::from_secs(30)).await;

    let result = async {
        delete_connector(&s.connect_url, &name).await;
        let drift = eventually(Duration::from_secs(60), "a 'deleted' drift event", || {
            recorded(&api, &name, "drift_events", |e| e["kind"] == "deleted")
        })
        .await;
        let detected =
            chrono::DateTime::parse_from_rfc3339(drift["detected_at"].as_str().unwrap()).unwrap();
        eventually(
            Duration::from_secs(40),
            "the drift event dropped after the retention",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
                c["drift_events"]
                    .as_array()
                    .unwrap()
                    .is_empty()
                    .then_some(())
            },
        )
        .await;
        // detected_at has whole seconds: the event is at most a second older than it says.
        let kept = chrono::Utc::now().signed_duration_since(detected);
        assert!(
            kept >= chrono::Duration::seconds(7),
            "dropped {kept} after it was detected, before the 8 s retention"
        );
        let (status, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
        assert_eq!(status, 200, "the connector stays: {c}");
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &name).await;
    })
    .await;
}

#[tokio::test]
async fn a_failing_task_is_restarted_with_growing_backoff_then_reported_with_its_trace() {
    let s = stack();
    let _c = connect_shared().await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_RESTART_MAX", "3"),
        ("CLUECDC_RESTART_BACKOFF", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let cluster = register(&api, &s.connect_url).await;
    let name = format!("fail-{}", tag());
    // The sink cannot open its file: every task start fails.
    desire(&api, &cluster, &name, json!({"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "file": "/nonexistent-dir/cluecdc/out.txt", "topics": name, "tasks.max": "1"})).await;
    let result = async {
        let gave_up = eventually(
            Duration::from_secs(120),
            "ClueCDC giving up after 3 restarts",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
                c["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("gave up after 3 restarts")
                    .then_some(c)
            },
        )
        .await;
        assert_eq!(gave_up["phase"], "FAILED");
        assert!(
            gave_up["trace"]
                .as_str()
                .unwrap()
                .contains("Couldn't find or create file"),
            "the trace is kept: {gave_up}"
        );
        let restarts: Vec<Value> = gave_up["restarts"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .cloned()
            .collect();
        assert_eq!(restarts.len(), 3, "{restarts:?}");
        assert!(restarts.iter().all(|r| r["triggered_by"] == "reconciler"));
        let at: Vec<i64> = restarts
            .iter()
            .map(|r| {
                chrono::DateTime::parse_from_rfc3339(r["at"].as_str().unwrap())
                    .unwrap()
                    .timestamp()
            })
            .collect();
        let gaps: Vec<i64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        // Backoff after attempt n is base·2^n scaled by jitter in [0.5, 1]: ≥ 1 s, then ≥ 2 s.
        assert!(
            gaps[0] >= 1 && gaps[1] >= 2,
            "restarts are spaced by a growing backoff: {gaps:?}"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (_, later) = api.get(&format!("/api/v1/connectors/{name}")).await;
        assert_eq!(
            later["restarts"].as_array().unwrap().len(),
            3,
            "no restart past the limit"
        );
        // A person can still ask for one.
        let (status, _) = api
            .post(&format!("/api/v1/connectors/{name}/restart"), json!({}))
            .await;
        assert_eq!(status, 200);
        eventually(
            Duration::from_secs(30),
            "the requested restart recorded",
            || recorded(&api, &name, "restarts", |r| r["triggered_by"] == "user:ada"),
        )
        .await;
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &name).await;
    })
    .await;
}

#[tokio::test]
async fn with_connect_stopped_clue_cdc_keeps_serving_shows_stale_status_backs_off_and_converges_after(
) {
    let s = stack();
    let _c = connect_exclusive().await;
    let api = admin_api_with(FAST);
    let cluster = register(&api, &s.connect_url).await;
    let name = format!("outage-{}", tag());
    desire(&api, &cluster, &name, source_config(&name)).await;
    eventually(Duration::from_secs(60), "RUNNING before the outage", || {
        phase_is(&api, &name, "RUNNING")
    })
    .await;
    stack_cmd(&["down", "connect"]);
    let result = async {
        let stale = eventually(
            Duration::from_secs(30),
            "the status marked stale",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
                (c["stale"] == true).then_some(c)
            },
        )
        .await;
        assert_eq!(
            stale["phase"], "UNKNOWN",
            "no fresh observation: not shown as RUNNING"
        );
        assert!(
            stale["message"]
                .as_str()
                .unwrap()
                .contains("last seen RUNNING"),
            "{stale}"
        );
        assert!(stale["observed_age_secs"].as_i64().is_some());
        assert_eq!(
            api.app
                .client()
                .get(format!("{}/healthz", api.app.url))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        let page = sign_in(&api.app, "ada", PASSWORD)
            .await
            .text(format!("{}/connectors", api.app.url))
            .await;
        assert!(page.contains("(stale)"), "the page marks it stale");
        // A change made during the outage waits for Connect.
        let (status, _) = api
            .post(&format!("/api/v1/connectors/{name}/pause"), json!({}))
            .await;
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_secs(6)).await;
        let db = crate::helpers::store(&api.app.data_dir()).await;
        let (failures, error): (i64, Option<String>) =
            sqlx::query_as("SELECT failures, last_error FROM connect_clusters")
                .fetch_one(&db)
                .await
                .unwrap();
        let passes: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_passes WHERE started_at >= $1")
                .bind(stale["observed_at"].as_str().unwrap())
                .fetch_one(&db)
                .await
                .unwrap();
        assert!(error.unwrap().contains("unreachable"));
        assert!(
            failures >= 2 && failures < passes.max(3) * 2,
            "backing off: {failures} failed attempts in {passes} passes"
        );
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    stack_cmd(&["up"]);
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    let converged = eventually(
        Duration::from_secs(120),
        "converged after Connect returned (paused as asked)",
        || async {
            let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
            (c["stale"] == false && c["phase"] == "PAUSED").then_some(c)
        },
    )
    .await;
    assert_eq!(converged["observed_state"], "PAUSED");
    delete_connector(&s.connect_url, &name).await;
}

#[tokio::test]
async fn serve_and_worker_together_never_both_act_and_a_crashed_holder_is_replaced() {
    let s = stack();
    let _c = connect_shared().await;
    let proxy = ConnectProxy::start(&s.connect_url).await;
    // The worker starts first and takes the lease; serve shares its data directory.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut worker = std::process::Command::new(binary());
    store_env(&mut worker, &data);
    let mut worker = worker
        .args(["worker", "--data-dir"])
        .arg(&data)
        .envs(FAST.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("worker.log")).unwrap())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let app = spawn_app_on(&binary(), tempfile::tempdir().unwrap(), &data, FAST);
    create_user(&app, "ada", "admin");
    let token = create_token(&app, "ada", &[]);
    let http = app.client();
    let api = Api { app, token, http };
    let cluster = register(&api, &proxy.url).await;
    let tag = tag();
    let names: Vec<String> = (0..5).map(|i| format!("lease-{tag}-{i}")).collect();
    for n in &names {
        desire(&api, &cluster, n, source_config(n)).await;
    }
    let result = async {
        for n in &names {
            eventually(Duration::from_secs(60), "all RUNNING", || {
                phase_is(&api, n, "RUNNING")
            })
            .await;
        }
        let (_, rec) = api.get("/api/v1/reconciler").await;
        let holder = rec["holder"].as_str().unwrap().to_string();
        assert!(
            holder.starts_with("worker@"),
            "the worker, started first, holds the lease: {rec}"
        );
        let calls = proxy.snapshot();
        let mutating: Vec<&ProxiedCall> = calls.iter().filter(|c| c.method != "GET").collect();
        let creates = mutating
            .iter()
            .filter(|c| c.method == "POST" && c.path == "/connectors")
            .count();
        assert_eq!(
            creates,
            names.len(),
            "each connector created exactly once: {mutating:?}"
        );
        assert!(
            mutating.iter().all(|c| c.agent.contains(&holder)),
            "only the lease holder changed Connect: {mutating:?}"
        );
        assert_eq!(
            rec["passes_in_this_process"], 0,
            "serve made no pass while the worker held the lease"
        );

        // The worker dies without releasing: its lease runs out and serve takes over.
        worker.kill().unwrap();
        worker.wait().unwrap();
        let new_holder = eventually(
            Duration::from_secs(30),
            "serve holding the lease",
            || async {
                let (_, rec) = api.get("/api/v1/reconciler").await;
                rec["holder"]
                    .as_str()
                    .filter(|h| h.starts_with("serve@"))
                    .map(String::from)
            },
        )
        .await;
        let before = proxy.snapshot().len();
        let (status, _) = api
            .post(&format!("/api/v1/connectors/{}/pause", names[0]), json!({}))
            .await;
        assert_eq!(status, 200);
        eventually(Duration::from_secs(30), "PAUSED", || async {
            connect_status(&s.connect_url, &names[0])
                .await
                .filter(|st| st["connector"]["state"] == "PAUSED")
        })
        .await;
        let after: Vec<ProxiedCall> = proxy.snapshot()[before..].to_vec();
        let mutating: Vec<&ProxiedCall> = after.iter().filter(|c| c.method != "GET").collect();
        assert!(
            !mutating.is_empty() && mutating.iter().all(|c| c.agent.contains(&new_holder)),
            "{mutating:?}"
        );
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    let _ = worker.kill();
    drop(api);
    for n in &names {
        delete_connector(&s.connect_url, n).await;
    }
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

#[tokio::test]
async fn a_pass_over_fifty_unchanged_connectors_makes_one_list_call_and_no_change() {
    let s = stack();
    let _c = connect_shared().await;
    let proxy = ConnectProxy::start(&s.connect_url).await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
        ("CLUECDC_OFFSETS_INTERVAL", "1h"),
    ]);
    let cluster = register(&api, &proxy.url).await;
    let tag = tag();
    let names: Vec<String> = (0..50).map(|i| format!("many-{tag}-{i:02}")).collect();
    for n in &names {
        desire(&api, &cluster, n, source_config(n)).await;
    }
    let result = async {
        eventually(Duration::from_secs(240), "all 50 RUNNING", || async {
            let (_, list) = api.get("/api/v1/connectors").await;
            let running = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["phase"] == "RUNNING")
                .count();
            (running == names.len()).then_some(())
        })
        .await;
        let passes = |api: &Api| {
            let http = api.http.clone();
            let url = format!("{}/api/v1/reconciler", api.app.url);
            let token = api.token.clone();
            async move {
                http.get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()["passes_in_this_process"]
                    .as_u64()
                    .unwrap()
            }
        };
        // Let any pass in flight finish, then count calls over at least three whole passes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (p0, c0) = (passes(&api).await, proxy.snapshot().len());
        tokio::time::sleep(Duration::from_secs(8)).await;
        let (c1, p1) = (proxy.snapshot().len(), passes(&api).await);
        let window: Vec<ProxiedCall> = proxy.snapshot()[c0..c1].to_vec();
        let delta = p1 - p0;
        assert!(
            delta >= 3,
            "at least three passes in eight seconds, got {delta}"
        );
        let lists = window
            .iter()
            .filter(|c| {
                c.method == "GET" && c.path.starts_with("/connectors?expand=status&expand=info")
            })
            .count() as u64;
        let others: Vec<&ProxiedCall> = window
            .iter()
            .filter(|c| !(c.method == "GET" && c.path.starts_with("/connectors?expand=")))
            .collect();
        assert!(
            others.is_empty(),
            "only list calls during unchanged passes: {others:?}"
        );
        // The window may cut one pass at each end.
        assert!(
            lists >= delta.saturating_sub(1) && lists <= delta + 1,
            "{lists} list calls for {delta} passes"
        );
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    drop(api);
    for n in &names {
        delete_connector(&s.connect_url, n).await;
    }
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

#[tokio::test]
async fn a_strimzi_managed_cluster_is_observed_only_and_an_admin_can_adopt_the_live_config() {
    let s = stack();
    let _c = connect_shared().await;
    // Passes only when something changes in ClueCDC: the change made in Connect below stays
    // until the admin decides.
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1h"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
        ("CLUECDC_OFFSETS_INTERVAL", "1s"),
    ]);
    let name = format!("adopt-{}", tag());
    // Managed by ClueCDC first: it creates the connector and reads its offsets.
    let cluster = register(&api, &s.connect_url).await;
    desire(&api, &cluster, &name, source_config(&name)).await;
    let result = async {
        let running = eventually(
            Duration::from_secs(60),
            "RUNNING with offsets read",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
                if c["phase"] != "RUNNING" || !c["offsets_at"].is_string() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    crate::helpers::bump(&api).await;
                }
                (c["phase"] == "RUNNING" && c["offsets_at"].is_string()).then_some(c)
            },
        )
        .await;
        assert!(
            running["offsets"]["offsets"].is_array(),
            "committed offsets are stored: {running}"
        );

        // Someone changes it in Connect; an admin adopts the change instead of a repair.
        let mut changed = source_config(&name);
        changed["batch.size"] = json!("100");
        let (status, said) = connect_call(
            reqwest::Method::PUT,
            &format!("{}/connectors/{name}/config", s.connect_url),
            Some(&changed),
        )
        .await;
        assert!((200..300).contains(&status), "{said}");
        let (status, adopted) = api
            .post(&format!("/api/v1/connectors/{name}/adopt"), json!({}))
            .await;
        assert_eq!(status, 200, "{adopted}");
        assert_eq!(
            adopted["config"]["batch.size"], "100",
            "the live config, read now, is the desired one"
        );
        // The pass the adoption triggers finds nothing to repair.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let live = connect_config(&s, &name).await.unwrap();
        assert_eq!(
            live["batch.size"], "100",
            "after adoption ClueCDC keeps the live config"
        );
        let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
        assert!(
            c["drift_events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["action"] == "adopted"),
            "{c}"
        );
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &name).await;
    })
    .await;

    // A Strimzi-managed cluster: ClueCDC observes and reports, and changes nothing.
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let (status, strimzi) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "strimzi", "url": s.connect_url, "managed_by": "strimzi"}),
        )
        .await;
    assert_eq!(status, 201);
    let (status, err) = api
        .post(
            "/api/v1/connectors",
            json!({"name": "x", "connect_cluster_id": strimzi["id"], "config": source_config("x")}),
        )
        .await;
    assert_eq!(
        status, 422,
        "ClueCDC does not deploy to a Strimzi-managed cluster: {err}"
    );
    assert!(err["error"]["fields"]["connect_cluster_id"]
        .as_str()
        .unwrap()
        .contains("KafkaConnector"));
    let outsider = format!("strimzi-owned-{}", tag());
    let (status, said) = connect_call(
        reqwest::Method::PUT,
        &format!("{}/connectors/{outsider}/config", s.connect_url),
        Some(&source_config(&outsider)),
    )
    .await;
    assert!((200..300).contains(&status), "{said}");
    eventually(
        Duration::from_secs(30),
        "the Strimzi cluster's connector listed",
        || async {
            let (_, list) = api.get("/api/v1/connectors").await;
            list["unmanaged"]
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u["name"] == outsider.as_str())
                .then_some(())
        },
    )
    .await;
    assert!(connect_config(&s, &outsider).await.is_some());
    delete_connector(&s.connect_url, &outsider).await;
}

#[tokio::test]
async fn kafka_clusters_report_health_and_topics_are_created_explicitly_and_deleted_only_when_confirmed(
) {
    let s = stack();
    let api = admin_api();
    let (status, bad) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "k", "bootstrap_servers": "kafka", "security_protocol": "SASL_SSL"}),
        )
        .await;
    assert_eq!(status, 422);
    for f in [
        "bootstrap_servers",
        "sasl_mechanism",
        "sasl_username",
        "sasl_password",
    ] {
        assert!(bad["error"]["fields"][f].is_string(), "{f}: {bad}");
    }
    let (status, k) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{k}");
    let id = k["id"].as_str().unwrap();
    let (_, got) = api.get(&format!("/api/v1/kafka-clusters/{id}")).await;
    assert_eq!(got["health"]["reachable"], true, "{got}");
    assert_eq!(got["health"]["brokers"].as_array().unwrap().len(), 1);

    let topic = format!("cluecdc-topic-{}", tag());
    let (status, err) = api
        .post(
            &format!("/api/v1/kafka-clusters/{id}/topics"),
            json!({"name": topic, "partitions": 2, "replication_factor": 3}),
        )
        .await;
    assert_eq!(status, 422, "more replicas than brokers is refused: {err}");
    assert!(err["error"]["fields"]["replication_factor"]
        .as_str()
        .unwrap()
        .contains("1 broker"));
    let (status, t) = api.post(&format!("/api/v1/kafka-clusters/{id}/topics"), json!({"name": topic, "partitions": 2, "replication_factor": 1, "retention_ms": 3_600_000, "cleanup_policy": "delete"})).await;
    assert_eq!(status, 201, "{t}");
    assert_eq!(t["partitions"].as_array().unwrap().len(), 2);
    let p0 = &t["partitions"][0];
    assert_eq!(p0["leader"], 1);
    assert_eq!(p0["replicas"], json!([1]));
    assert_eq!(p0["isr"], json!([1]));
    assert_eq!(p0["low_watermark"], 0);
    assert_eq!(p0["high_watermark"], 0);
    assert_eq!(t["configs"]["retention.ms"], "3600000");
    assert_eq!(t["configs"]["cleanup.policy"], "delete");
    let (status, _) = api
        .post(
            &format!("/api/v1/kafka-clusters/{id}/topics"),
            json!({"name": topic, "partitions": 1, "replication_factor": 1}),
        )
        .await;
    assert_eq!(status, 409);
    let (_, list) = api
        .get(&format!("/api/v1/kafka-clusters/{id}/topics?q={topic}"))
        .await;
    assert!(list["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["name"] == topic.as_str()));

    // A name Kafka refuses outright names no topic: 404, not a 502 from Kafka's TOPIC_EXCEPTION.
    let (status, err) = api
        .get(&format!("/api/v1/kafka-clusters/{id}/topics/read%20back"))
        .await;
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"]["code"], "not_found", "{err}");
    let (status, err) = api
        .delete(&format!(
            "/api/v1/kafka-clusters/{id}/topics/read%20back?confirm=read%20back"
        ))
        .await;
    assert_eq!(status, 404, "{err}");
    let (status, err) = api
        .delete(&format!("/api/v1/kafka-clusters/{id}/topics/{topic}"))
        .await;
    assert_eq!(status, 422, "deleting needs the name repeated: {err}");
    assert_eq!(
        api.get(&format!("/api/v1/kafka-clusters/{id}/topics/{topic}"))
            .await
            .0,
        200,
        "still there"
    );
    let (status, _) = api
        .delete(&format!(
            "/api/v1/kafka-clusters/{id}/topics/{topic}?confirm={topic}"
        ))
        .await;
    assert_eq!(status, 204);
    let (_, audit) = api
        .get(&format!("/api/v1/audit?action=topic.&target={topic}"))
        .await;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, vec!["topic.delete", "topic.create"]);
    eventually(Duration::from_secs(20), "the topic gone", || async {
        (api.get(&format!("/api/v1/kafka-clusters/{id}/topics/{topic}"))
            .await
            .0
            == 404)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_connect_cluster_reports_its_version_workers_and_plugins() {
    let s = stack();
    let _c = connect_shared().await;
    let api = admin_api();
    let id = register(&api, &s.connect_url).await;
    let (status, p) = api
        .get(&format!("/api/v1/connect-clusters/{id}/plugins"))
        .await;
    assert_eq!(status, 200, "{p}");
    assert!(p["version"].as_str().unwrap().starts_with("4."));
    let classes: Vec<&str> = p["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["class"].as_str().unwrap())
        .collect();
    assert!(classes.contains(&"io.debezium.connector.postgresql.PostgresConnector"));
    assert!(p["items"][0]["version"].is_string());
    let (status, bad) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "x", "url": "http://user:pw@connect:8083"}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(bad["error"]["fields"]["url"]
        .as_str()
        .unwrap()
        .contains("basic auth"));
    let (_, down) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "nowhere", "url": "http://127.0.0.1:9"}),
        )
        .await;
    let (status, err) = api
        .get(&format!(
            "/api/v1/connect-clusters/{}/plugins",
            down["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        status, 502,
        "an unreachable cluster is a clear provider error: {err}"
    );
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unreachable"));
}

#[tokio::test]
async fn clusters_change_with_patch_and_a_refused_change_keeps_everything() {
    let s = stack();
    let _c = connect_shared().await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);

    // Kafka: refused changes name their fields and store nothing; an accepted one is live at once.
    let (status, k) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{k}");
    let id = k["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/kafka-clusters/{id}");
    let (status, err) = api
        .patch(&path, json!({"bootstrap_servers": "no-port"}))
        .await;
    assert_eq!(status, 422);
    assert!(
        err["error"]["fields"]["bootstrap_servers"]
            .as_str()
            .unwrap()
            .contains("host:port"),
        "{err}"
    );
    let (status, err) = api
        .patch(&path, json!({"security_protocol": "SASL_PLAINTEXT"}))
        .await;
    assert_eq!(status, 422);
    for f in ["sasl_mechanism", "sasl_username", "sasl_password"] {
        assert!(err["error"]["fields"][f].is_string(), "{f}: {err}");
    }
    let (_, same) = api.get(&path).await;
    assert_eq!(
        (
            same["bootstrap_servers"].as_str(),
            same["security_protocol"].as_str()
        ),
        (Some(s.kafka_bootstrap.as_str()), Some("PLAINTEXT"))
    );
    let (status, moved) = api
        .patch(
            &path,
            json!({"name": "elsewhere", "bootstrap_servers": "127.0.0.1:9"}),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["name"], "elsewhere");
    let (_, got) = api.get(&path).await;
    assert_eq!(
        got["health"]["reachable"], false,
        "the new address is used at once: {got}"
    );
    let (status, _) = api
        .patch(&path, json!({"bootstrap_servers": s.kafka_bootstrap}))
        .await;
    assert_eq!(status, 200);
    let (_, got) = api.get(&path).await;
    assert_eq!(got["health"]["reachable"], true);

    // Connect: moved from an address nobody answers at to the real one, the reconciler reaches
    // it on its next pass. Handing it to Strimzi is refused while ClueCDC manages a connector there.
    let (status, c) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "moving", "url": "http://127.0.0.1:1", "kafka_cluster_id": id}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    let cpath = format!("/api/v1/connect-clusters/{}", c["id"].as_str().unwrap());
    let (status, err) = api.patch(&cpath, json!({"url": "ftp://connect"})).await;
    assert_eq!(status, 422);
    assert!(err["error"]["fields"]["url"].is_string(), "{err}");
    let (status, err) = api.patch(&cpath, json!({"basic_auth_user": "ops"})).await;
    assert_eq!(status, 422);
    assert!(
        err["error"]["fields"]["basic_auth_password"].is_string(),
        "{err}"
    );
    let name = format!("patch-{}", tag());
    desire(&api, c["id"].as_str().unwrap(), &name, source_config(&name)).await;
    let (status, err) = api.patch(&cpath, json!({"managed_by": "strimzi"})).await;
    assert_eq!(status, 422);
    assert!(
        err["error"]["fields"]["managed_by"]
            .as_str()
            .unwrap()
            .contains("manages 1 connector"),
        "{err}"
    );
    let (status, _) = api.delete(&format!("/api/v1/connectors/{name}")).await;
    assert!(status == 200 || status == 204, "{status}");
    let (status, moved) = api.patch(&cpath, json!({"url": s.connect_url})).await;
    assert_eq!(status, 200, "{moved}");
    assert!(
        moved["last_error"].is_null(),
        "the old address's error is cleared: {moved}"
    );
    let result = async {
        eventually(
            Duration::from_secs(30),
            "the reconciler reaching the new address",
            || async {
                let (_, c) = api.get(&cpath).await;
                (c["observed_at"].is_string() && c["last_error"].is_null()).then_some(())
            },
        )
        .await;
        let (_, audit) = api.get("/api/v1/audit?action=connect_cluster.update").await;
        assert_eq!(
            audit["items"].as_array().unwrap().len(),
            1,
            "one row per accepted change: {audit}"
        );
        let (_, audit) = api.get("/api/v1/audit?action=kafka_cluster.update").await;
        assert_eq!(audit["items"].as_array().unwrap().len(), 2, "{audit}");
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &name).await;
    })
    .await;
}

/// A burst of new connectors is created without listing every connector once per create: the
/// wake-ups whose only change is new connectors are served by creates-only passes, and the
/// full pass after the burst observes them (all RUNNING) and still knows the connectors
/// ClueCDC does not manage.
#[tokio::test]
async fn a_burst_of_new_connectors_is_created_with_few_list_calls_and_observed_after() {
    let s = stack();
    let _c = connect_shared().await;
    let proxy = ConnectProxy::start(&s.connect_url).await;
    // No interval passes during the test: every list call is one the burst caused.
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1h"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
        ("CLUECDC_OFFSETS_INTERVAL", "1h"),
        ("CLUECDC_MONITOR_INTERVAL", "1h"),
    ]);
    let tag = tag();
    let stranger = format!("burst-stranger-{tag}");
    let (status, said) = connect_call(
        reqwest::Method::PUT,
        &format!("{}/connectors/{stranger}/config", s.connect_url),
        Some(&source_config(&stranger)),
    )
    .await;
    assert!((200..300).contains(&status), "{said}");
    let cluster = register(&api, &proxy.url).await;
    async fn unmanaged_listed(api: &Api, name: &str) -> bool {
        let (_, list) = api.get("/api/v1/connectors").await;
        list["unmanaged"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["name"] == name)
    }
    let names: Vec<String> = (0..20).map(|i| format!("burst-{tag}-{i:02}")).collect();
    let result = async {
        // Not a bound on the pass: beside the suite's other tests Connect's list can take
        // tens of seconds (30 s timed out once at a load average of 20).
        eventually(Duration::from_secs(90), "the first full pass", || async {
            unmanaged_listed(&api, &stranger).await.then_some(())
        })
        .await;
        let c0 = proxy.snapshot().len();
        // One after another, 60 ms apart, as pipeline creates (each checks its source and
        // makes topics first) or a script arrive: longer than a list pass takes here, so each
        // wake-up would have its own list call, and shorter than the first look after a
        // creates-only pass (twice the spacing). All at once, the wake-ups would coalesce.
        for n in &names {
            desire(&api, &cluster, n, source_config(n)).await;
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        eventually(Duration::from_secs(120), "all 20 RUNNING", || async {
            let mut running = 0;
            for n in &names {
                running += usize::from(phase_is(&api, n, "RUNNING").await.is_some());
            }
            (running == names.len()).then_some(())
        })
        .await;
        let calls: Vec<ProxiedCall> = proxy.snapshot()[c0..].to_vec();
        let creates = calls
            .iter()
            .filter(|c| c.method == "POST" && c.path == "/connectors")
            .count();
        let lists = calls
            .iter()
            .filter(|c| c.method == "GET" && c.path.starts_with("/connectors?expand="))
            .count();
        assert_eq!(
            creates,
            names.len(),
            "one create call per connector: {calls:?}"
        );
        assert!(
            lists * 2 <= names.len(),
            "{lists} list calls for {} creates: {calls:?}",
            names.len()
        );
        assert!(
            unmanaged_listed(&api, &stranger).await,
            "the unmanaged connector is still known after the creates-only passes"
        );
        let (_, audit) = api
            .get("/api/v1/audit?action=connector.create&limit=100")
            .await;
        let failed: Vec<&Value> = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["outcome"] != "success")
            .collect();
        assert!(failed.is_empty(), "no create failed: {failed:?}");
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    drop(api);
    for n in names.iter().chain([&stranger]) {
        delete_connector(&s.connect_url, n).await;
    }
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

/// The connectors page lists what Connect runs outside ClueCDC under its table, with the
/// cluster each is on: the first 20 by name and a "Show all" link when there are more, all of
/// them on that link, and only the filtered cluster's when the list is filtered to one. The
/// clusters are Connect stand-ins (`bench/connect_standin.py`), 26 connectors created directly
/// in them: the real worker is shared by the suite.
#[tokio::test]
async fn the_connectors_page_shows_the_first_twenty_unmanaged_connectors_and_all_on_request() {
    let standins = ConnectStandins::start(2).await;
    let api = admin_api_with(FAST);
    let t = tag();
    let mut ids = Vec::new();
    for (i, url) in standins.urls.iter().enumerate() {
        let (status, c) = api
            .post(
                "/api/v1/connect-clusters",
                json!({"name": format!("outside {i} {t}"), "url": url}),
            )
            .await;
        assert_eq!(status, 201, "{c}");
        ids.push(c["id"].as_str().unwrap().to_string());
    }
    // 25 on the first stand-in, 1 on the second, put there behind ClueCDC's back.
    let mut names = Vec::new();
    for (i, url) in standins.urls.iter().enumerate() {
        for j in 0..if i == 0 { 25 } else { 1 } {
            let name = format!("outside-{i}-{j:02}");
            let (status, said) = connect_call(
                reqwest::Method::PUT,
                &format!("{url}/connectors/{name}/config"),
                Some(&source_config(&name)),
            )
            .await;
            assert!((200..300).contains(&status), "{said}");
            names.push(name);
        }
    }
    eventually(
        Duration::from_secs(60),
        "26 unmanaged connectors known",
        || async {
            let (_, list) = api.get("/api/v1/connectors").await;
            (list["unmanaged"].as_array().map_or(0, Vec::len) == 26).then_some(())
        },
    )
    .await;
    let listed = |page: &str| -> Vec<String> {
        names
            .iter()
            .filter(|n| page.contains(&format!("<span class=\"mono\">{n}</span>")))
            .cloned()
            .collect()
    };
    let page = api.text("/connectors").await;
    assert!(
        page.contains("In Connect but not managed by ClueCDC <span class=\"count\">(26)</span>"),
        "{page}"
    );
    let shown = listed(&page);
    assert_eq!(shown, names[..20].to_vec(), "the first 20 by name");
    assert!(
        page.contains(&format!(
            "<span class=\"mono\">outside-0-00</span> on outside 0 {t}"
        )),
        "with its cluster: {page}"
    );
    assert!(
        page.contains("<a href=\"/connectors?unmanaged=all#unmanaged-heading\">Show all 26</a>"),
        "{page}"
    );
    let all = api.text("/connectors?unmanaged=all").await;
    assert_eq!(listed(&all), names, "all of them on request");
    assert!(
        !all.contains("unmanaged=all"),
        "no link to what is shown: {all}"
    );
    // Filtered to the second cluster (by id, as the filter form sends it): its one.
    let one = api.text(&format!("/connectors?cluster={}", ids[1])).await;
    assert_eq!(listed(&one), vec!["outside-1-00".to_string()], "{one}");
    assert!(
        one.contains("<span class=\"count\">(1)</span>") && !one.contains("unmanaged=all"),
        "{one}"
    );
}
