//! Monitoring against the real stack: a delivery's lag alert fires when its connector stops
//! and resolves after resume, a paused pipeline's slot retains growing WAL and fires the WAL
//! alert, a webhook receives signed firing and resolved notifications, and `/metrics` parses
//! with the official Prometheus parser.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use poem::listener::{Acceptor, Listener};
use serde_json::{json, Value};
use sha2::Sha256;
use sqlx::{Connection, Row};

use crate::helpers::*;

const SECRET: &str = "webhook-shared-secret-0123";

/// A webhook receiver that keeps (signature valid?, body) of every call.
async fn receiver() -> (String, Arc<Mutex<Vec<(bool, Value)>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await
        .unwrap();
    let addr = acceptor.local_addr()[0].as_socket_addr().copied().unwrap();
    let ep = poem::endpoint::make(move |req: poem::Request| {
        let g = g.clone();
        async move {
            let sig = req
                .headers()
                .get("x-cluecdc-signature")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = req.into_body().into_bytes().await.unwrap_or_default();
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET.as_bytes()).unwrap();
            mac.update(&body);
            let valid = sig == format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
            g.lock()
                .unwrap()
                .push((valid, serde_json::from_slice(&body).unwrap_or(Value::Null)));
            "ok"
        }
    });
    tokio::spawn(async move { poem::Server::new_with_acceptor(acceptor).run(ep).await });
    (format!("http://{addr}/hook"), got)
}

/// An app that reconciles, reads offsets and monitors every second, with the stack's Connect
/// (its config provider pointed at this app) and Kafka registered.
async fn monitored_stack() -> (Api, Value, Value) {
    let s = stack();
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_OFFSETS_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let connect = point_connect_provider_at(&api).await;
    let (status, kafka) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{kafka}");
    (api, connect, kafka)
}

/// Changes an alert rule (as an admin would on the Alerts page).
async fn set_rule(api: &Api, kind: &str, patch: Value) {
    let (status, body) = api
        .patch(&format!("/api/v1/alert-rules/{kind}"), patch)
        .await;
    assert_eq!(status, 200, "{body}");
}

/// The history of one signal, oldest first.
async fn samples(api: &Api, kind: &str, subject: &str) -> Vec<f64> {
    let (_, body) = api
        .get(&format!("/api/v1/samples?kind={kind}&subject={subject}"))
        .await;
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["value"].as_f64().unwrap())
        .collect()
}

/// Waits (up to a minute) for an alert to fire, and checks that its text says what to check.
async fn fires(api: &Api, kind: &str, subject: &str, says: &str) -> Value {
    let a = eventually(
        Duration::from_secs(60),
        &format!("alert {kind} on {subject} firing"),
        || alert(api, kind, subject, "firing"),
    )
    .await;
    assert!(a["message"].as_str().unwrap().contains(says), "{a}");
    a
}

/// The same alert (by id) once it has resolved.
async fn resolved(api: &Api, firing: &Value) -> Option<Value> {
    let (_, list) = api.get("/api/v1/alerts").await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == firing["id"] && a["state"] == "resolved")
        .cloned()
}

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

#[tokio::test]
async fn lag_and_wal_alerts_fire_and_resolve_with_signed_webhooks_and_metrics_parse() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let (api, connect, kafka) = monitored_stack().await;
    let (hook_url, hooks) = receiver().await;
    let (status, w) = api
        .post(
            "/api/v1/webhooks",
            json!({"url": hook_url, "secret": SECRET}),
        )
        .await;
    assert_eq!(status, 201, "{w}");
    assert!(!w.to_string().contains(SECRET));
    let tag = tag();
    let schema = format!("mo_{tag}");
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in [format!("CREATE SCHEMA {schema}"), format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name varchar(50) NOT NULL, qty int NOT NULL)"), format!("INSERT INTO {schema}.items VALUES (1, 'a', 1)")] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "pg src", "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": format!("mo_{tag}"), "publication_name": format!("mo_{tag}")}, "secrets": {"password": s.pg_password}})).await;
    let dest = api.connection(json!({"name": "maria dest", "provider": "MARIADB", "capabilities": ["DESTINATION"], "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": std::env::var("MARIADB_DEST_DB").unwrap(), "user": s.mariadb_user, "tls_mode": "disable"}, "secrets": {"password": s.mariadb_password}})).await;
    let prefix = format!("mo-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "monitored", "source_connection_id": src["id"], "kafka_cluster_id": kafka["id"], "connect_cluster_id": connect["id"], "tables": [format!("{schema}.items")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let (status, d) = api.post("/api/v1/deliveries", json!({"name": "watched", "pipeline_id": p["id"], "destination_connection_id": dest["id"], "table_name_format": format!("mo_{tag}_${{source.table}}")})).await;
    assert_eq!(status, 201, "{d}");
    let dest_url = s.mariadb_url(&std::env::var("MARIADB_DEST_DB").unwrap());
    let result = async {
        let count_dest = || async {
            let mut m = sqlx::MySqlConnection::connect(&dest_url).await.unwrap();
            sqlx::query(&format!("SELECT COUNT(*) FROM mo_{tag}_items"))
                .fetch_one(&mut m)
                .await
                .map(|r| r.get::<i64, _>(0))
                .unwrap_or(-1)
        };
        eventually(
            Duration::from_secs(120),
            "the snapshot delivered",
            || async { (count_dest().await == 1).then_some(()) },
        )
        .await;
        // Once the sink has committed what it wrote, nothing waits: lag is 0 records and 0 s.
        eventually(
            Duration::from_secs(60),
            "the delivery caught up (lag 0 s)",
            || async {
                let (_, detail) = api
                    .get(&format!("/api/v1/deliveries/{}", d["id"].as_str().unwrap()))
                    .await;
                (detail["lag_secs"] == 0.0 && detail["lag"][0]["lag"] == 0).then_some(())
            },
        )
        .await;
        set_rule(
            &api,
            "delivery_lag_records",
            json!({"threshold": 0, "for_secs": 0}),
        )
        .await;
        set_rule(
            &api,
            "delivery_lag_seconds",
            json!({"threshold": 2, "for_secs": 0}),
        )
        .await;

        // Stop the delivery: changes pile up, the lag alert fires, a signed webhook says so.
        let (status, _) = api
            .post(
                &format!("/api/v1/deliveries/{}/pause", d["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(status, 200);
        eventually(Duration::from_secs(30), "the delivery PAUSED", || async {
            connect_status(&s.connect_url, "cluecdc-deliver-watched")
                .await
                .filter(|st| st["connector"]["state"] == "PAUSED")
        })
        .await;
        sqlx::query(&format!(
            "INSERT INTO {schema}.items SELECT g, 'n', 1 FROM generate_series(2, 40) g"
        ))
        .execute(&mut db)
        .await
        .unwrap();
        let firing = fires(&api, "delivery_lag_records", "watched", "records behind").await;
        eventually(
            Duration::from_secs(30),
            "a signed firing webhook",
            || async {
                hooks
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|(_, b)| {
                        b["state"] == "firing" && b["alert"]["kind"] == "delivery_lag_records"
                    })
                    .map(|(valid, _)| assert!(*valid, "the signature verifies"))
            },
        )
        .await;
        // Lag in time: the oldest record not written yet ages while the delivery is stopped.
        let waited = eventually(
            Duration::from_secs(60),
            "lag in seconds above 2",
            || async {
                let (_, detail) = api
                    .get(&format!("/api/v1/deliveries/{}", d["id"].as_str().unwrap()))
                    .await;
                detail["lag_secs"].as_f64().filter(|s| *s > 2.0)
            },
        )
        .await;
        assert!(
            waited < 120.0,
            "the age of the oldest waiting record, not of the pipeline: {waited}"
        );
        let by_time = fires(&api, "delivery_lag_seconds", "watched", "s old").await;
        let (status, _) = api
            .post(&format!("/api/v1/alerts/{}/ack", firing["id"]), json!({}))
            .await;
        assert_eq!(status, 204);
        assert_eq!(
            alert(&api, "delivery_lag_records", "watched", "firing")
                .await
                .unwrap()["acknowledged_by"],
            "ada"
        );

        // Resume: the lag drains, the alert resolves, the webhook says so.
        let (status, _) = api
            .post(
                &format!("/api/v1/deliveries/{}/resume", d["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(status, 200);
        eventually(Duration::from_secs(90), "the lag alert resolved", || {
            resolved(&api, &firing)
        })
        .await;
        eventually(
            Duration::from_secs(30),
            "a signed resolved webhook",
            || async {
                hooks
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|(_, b)| b["state"] == "resolved" && b["alert"]["id"] == firing["id"])
                    .map(|(valid, _)| assert!(*valid))
            },
        )
        .await;
        assert_eq!(count_dest().await, 40);
        eventually(
            Duration::from_secs(30),
            "the lag-in-time alert resolved",
            || resolved(&api, &by_time),
        )
        .await;

        // The pipeline's topics grew by the 39 rows, and their newest record is known.
        let (_, pd) = api
            .get(&format!("/api/v1/pipelines/{}", p["id"].as_str().unwrap()))
            .await;
        assert!(pd["end_offsets"].as_i64().unwrap() >= 40, "{pd}");
        assert!(
            pd["topics"][0]["newest_record_at"].is_string()
                && pd["newest_record_age_secs"].as_f64().unwrap() < 300.0,
            "{pd}"
        );
        let offsets = samples(&api, "pipeline_topic_end_offset", "monitored").await;
        assert!(
            offsets.last().unwrap() - offsets.first().unwrap() >= 39.0,
            "the end offsets' history shows the growth: {offsets:?}"
        );

        // Pause the pipeline while writes go on: the slot's retained WAL grows and the alert fires.
        let (status, _) = api
            .post(
                &format!("/api/v1/pipelines/{}/pause", p["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(status, 200);
        eventually(Duration::from_secs(30), "the pipeline PAUSED", || async {
            connect_status(&s.connect_url, &format!("cluecdc-capture-{prefix}"))
                .await
                .filter(|st| st["connector"]["state"] == "PAUSED")
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (_, before) = api
            .get(&format!("/api/v1/pipelines/{}", p["id"].as_str().unwrap()))
            .await;
        let base = before["slot"]["retained_wal_bytes"].as_i64().unwrap();
        set_rule(
            &api,
            "slot_retained_wal_bytes",
            json!({"threshold": base + 2_000_000, "for_secs": 0}),
        )
        .await;
        for _ in 0..4 {
            sqlx::query(&format!("INSERT INTO {schema}.items SELECT g, repeat('x', 40), 1 FROM generate_series((SELECT max(id) + 1 FROM {schema}.items), (SELECT max(id) + 10000 FROM {schema}.items)) g")).execute(&mut db).await.unwrap();
        }
        fires(
            &api,
            "slot_retained_wal_bytes",
            "monitored",
            "fills the source's disk",
        )
        .await;
        // Nothing reaches the topics while the pipeline is paused: "no new data" fires.
        set_rule(
            &api,
            "pipeline_no_new_data_seconds",
            json!({"threshold": 5, "for_secs": 0}),
        )
        .await;
        fires(
            &api,
            "pipeline_no_new_data_seconds",
            "monitored",
            "no new record",
        )
        .await;
        let values = samples(&api, "slot_retained_wal_bytes", "monitored").await;
        assert!(
            values.len() >= 2 && values.last().unwrap() > values.first().unwrap(),
            "retained WAL grows: {values:?}"
        );

        // /metrics: valid Prometheus text, with these signals in it.
        let text = api.text("/metrics").await;
        let parsed = parse_metrics(&text);
        assert_eq!(
            parsed["cluecdc_http_requests"]["type"], "counter",
            "{parsed}"
        );
        assert_eq!(
            parsed["cluecdc_http_request_duration_seconds"]["type"],
            "histogram"
        );
        assert_eq!(parsed["cluecdc_reconcile_passes"]["type"], "counter");
        let lag = &parsed["cluecdc_delivery_lag_records"]["samples"];
        assert!(
            lag.as_array()
                .unwrap()
                .iter()
                .any(|s| s[1]["delivery"] == "watched"),
            "{lag}"
        );
        let wal = &parsed["cluecdc_slot_retained_wal_bytes"]["samples"];
        assert!(wal
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s[1]["pipeline"] == "monitored" && s[2].as_f64().unwrap() > base as f64));
        assert!(parsed["cluecdc_alerts_firing"]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s[1]["kind"] == "slot_retained_wal_bytes"));
        assert!(
            parsed["cluecdc_connector_state"]["samples"]
                .as_array()
                .unwrap()
                .len()
                >= 2
        );
        let actions = &parsed["cluecdc_reconcile_actions"];
        assert_eq!(actions["type"], "counter");
        assert!(
            actions["samples"][0][2].as_f64().unwrap() >= 2.0,
            "the pipeline and the delivery were created: {actions}"
        );
        let gauge = |name: &str, label: &str, subject: &str| {
            parsed[name]["samples"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s[1][label] == subject)
                .map(|s| s[2].as_f64().unwrap())
        };
        assert_eq!(
            gauge("cluecdc_delivery_lag_seconds", "delivery", "watched"),
            Some(0.0)
        );
        assert!(
            gauge("cluecdc_pipeline_topic_end_offset", "pipeline", "monitored").unwrap() >= 40.0
        );
        assert!(
            gauge(
                "cluecdc_pipeline_no_new_data_seconds",
                "pipeline",
                "monitored"
            )
            .unwrap()
                > 5.0
        );
    };
    with_cleanup(result, async {
        let _ = api
            .delete(&format!("/api/v1/deliveries/{}", d["id"].as_str().unwrap()))
            .await;
        let _ = api
            .post(
                &format!("/api/v1/pipelines/{}/resume", p["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}?drop_slot=true",
                p["id"].as_str().unwrap()
            ))
            .await;
        delete_connector(&s.connect_url, &format!("cluecdc-capture-{prefix}")).await;
        delete_connector(&s.connect_url, "cluecdc-deliver-watched").await;
        drop_capture_fixture(&s, &format!("mo_{tag}"), &schema).await;
        let mut m = sqlx::MySqlConnection::connect(&dest_url).await.unwrap();
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS mo_{tag}_items"))
            .execute(&mut m)
            .await;
    })
    .await;
}

/// Runs the official parser (Python's prometheus_client) over the text.
pub(crate) fn parse_metrics(text: &str) -> Value {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .arg(format!(
            "{}/tests/metrics_parse.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client could not parse /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn rules_and_webhooks_validate_their_input() {
    let api = admin_api();
    let (status, err) = api
        .patch(
            "/api/v1/alert-rules/delivery_lag_records",
            json!({"threshold": -1, "for_secs": 999999}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(
        err["error"]["fields"]["threshold"].is_string()
            && err["error"]["fields"]["for_secs"].is_string()
    );
    assert_eq!(
        api.patch("/api/v1/alert-rules/nope", json!({"threshold": 1}))
            .await
            .0,
        404
    );
    let (status, err) = api
        .post(
            "/api/v1/webhooks",
            json!({"url": "ftp://x", "secret": "short"}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
    assert!(err["error"]["fields"]["url"].is_string());
    let (status, err) = api
        .post(
            "/api/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/h", "secret": "short"}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(err["error"]["fields"]["secret"]
        .as_str()
        .unwrap()
        .contains("16"));
    let (_, rules) = api.get("/api/v1/alert-rules").await;
    let kinds: Vec<&str> = rules["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec![
            "binlog_behind_bytes",
            "binlog_position_lost",
            "connect_unreachable",
            "connect_worker_lost",
            "connector_failed",
            "connector_missing_or_drifted",
            "delivery_freshness_seconds",
            "delivery_lag_records",
            "delivery_lag_seconds",
            "delivery_stalled_seconds",
            "kafka_unreachable",
            "orphan_slot",
            "pipeline_no_new_data_seconds",
            "pipeline_source_unreachable",
            "replication_checkpoint_age_seconds",
            "replication_lag_records",
            "replication_lag_seconds",
            "schema_change",
            "slot_inactive",
            "slot_retained_wal_bytes",
            "snapshot_stalled",
            "table_stalled"
        ]
    );
}

#[tokio::test]
async fn a_jdbc_delivery_measures_freshness_from_its_destination_and_it_ages_when_the_source_stops()
{
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let (api, connect, kafka) = monitored_stack().await;
    let tag = tag();
    let schema = format!("fr_{tag}");
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in [format!("CREATE SCHEMA {schema}"), format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name varchar(50) NOT NULL, qty int NOT NULL)")] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "pg src", "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": format!("fr_{tag}"), "publication_name": format!("fr_{tag}")}, "secrets": {"password": s.pg_password}})).await;
    let dest = api.connection(json!({"name": "pg dest", "provider": "POSTGRESQL", "capabilities": ["DESTINATION"], "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_dest_db, "user": s.pg_user, "tls_mode": "disable"}, "secrets": {"password": s.pg_password}})).await;
    let prefix = format!("fr-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "fresh", "source_connection_id": src["id"], "kafka_cluster_id": kafka["id"], "connect_cluster_id": connect["id"], "tables": [format!("{schema}.items")], "topic_prefix": prefix, "heartbeat": true})).await;
    assert_eq!(status, 201, "{p}");
    let (status, d) = api.post("/api/v1/deliveries", json!({"name": "fresh copy", "pipeline_id": p["id"], "destination_connection_id": dest["id"], "table_name_format": format!("fr_{tag}_${{source.table}}")})).await;
    assert_eq!(status, 201, "{d}");
    assert!(
        d["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().ends_with(".cluecdc_heartbeat")),
        "the heartbeat topic is delivered: {d}"
    );
    let id = d["id"].as_str().unwrap().to_string();
    let result = async {
        // While data flows, the destination is at most a heartbeat interval plus a margin behind.
        let mut ages = Vec::new();
        eventually(
            Duration::from_secs(120),
            "a first freshness measurement",
            || async {
                let (_, detail) = api.get(&format!("/api/v1/deliveries/{id}")).await;
                detail["freshness_secs"].as_f64().map(|_| ())
            },
        )
        .await;
        for _ in 0..6 {
            sqlx::query(&format!("INSERT INTO {schema}.items SELECT COALESCE(max(id), 0) + 1, 'x', 1 FROM {schema}.items")).execute(&mut db).await.unwrap();
            let (_, detail) = api.get(&format!("/api/v1/deliveries/{id}")).await;
            ages.push(detail["freshness_secs"].as_f64().unwrap());
            assert!(detail["current_as_of"].is_string());
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let margin = 1.0 + 9.0; // heartbeat.interval.ms 1 s with `heartbeat`, plus delivery and measurement
        assert!(
            ages.iter().all(|a| *a < margin),
            "freshness stays within {margin} s while data flows: {ages:?}"
        );
        // The source stops (the pipeline is paused): freshness ages.
        let (status, _) = api
            .post(
                &format!("/api/v1/pipelines/{}/pause", p["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(status, 200);
        let aged = eventually(
            Duration::from_secs(90),
            "freshness older than 40 s",
            || async {
                let (_, detail) = api.get(&format!("/api/v1/deliveries/{id}")).await;
                detail["freshness_secs"].as_f64().filter(|a| *a > 40.0)
            },
        )
        .await;
        assert!(aged > 40.0);
        let ages = samples(&api, "delivery_freshness_seconds", "fresh%20copy").await;
        assert!(
            ages.len() >= 3 && ages.last().unwrap() > &30.0,
            "freshness is sampled and ages: {ages:?}"
        );
    };
    with_cleanup(result, async {
        let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        let _ = api
            .post(
                &format!("/api/v1/pipelines/{}/resume", p["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}?drop_slot=true",
                p["id"].as_str().unwrap()
            ))
            .await;
        delete_connector(&s.connect_url, &format!("cluecdc-capture-{prefix}")).await;
        delete_connector(&s.connect_url, "cluecdc-deliver-fresh-copy").await;
        drop_capture_fixture(&s, &format!("fr_{tag}"), &schema).await;
        let mut pg = sqlx::PgConnection::connect(&s.pg_url(&s.pg_dest_db))
            .await
            .unwrap();
        let _ = sqlx::query(&format!(
            "DROP TABLE IF EXISTS fr_{tag}_items, fr_{tag}_cluecdc_heartbeat"
        ))
        .execute(&mut pg)
        .await;
    })
    .await;
}

#[tokio::test]
async fn an_orphan_slot_and_an_unreachable_kafka_raise_alerts_and_the_orphan_can_be_dropped_only_when_confirmed(
) {
    let s = stack();
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    for rule in ["orphan_slot", "kafka_unreachable"] {
        set_rule(&api, rule, json!({"for_secs": 0})).await;
    }
    let (status, _) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "gone kafka", "bootstrap_servers": "127.0.0.1:9"}),
        )
        .await;
    assert_eq!(status, 201);
    let slot = format!("orphan_{}", tag());
    let su = pg_superuser(&s).await;
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
        .bind(&slot)
        .execute(&su)
        .await
        .unwrap();
    let c = api.connection(json!({"name": "pg", "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable"}, "secrets": {"password": s.pg_password}})).await;
    let id = c["id"].as_str().unwrap().to_string();
    let result = async {
        let (status, slots) = api.get(&format!("/api/v1/connections/{id}/slots")).await;
        assert_eq!(status, 200, "{slots}");
        let ours = slots["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == slot.as_str())
            .cloned()
            .expect("the stray slot is listed");
        assert!(ours["pipeline"].is_null(), "no pipeline owns it");
        let subject = format!("pg/{slot}");
        let alert_found = eventually(Duration::from_secs(30), "the orphan slot alert", || {
            alert(&api, "orphan_slot", &subject, "firing")
        })
        .await;
        assert!(alert_found["message"]
            .as_str()
            .unwrap()
            .contains("belongs to no pipeline"));
        let kafka = eventually(
            Duration::from_secs(60),
            "the Kafka unreachable alert",
            || alert(&api, "kafka_unreachable", "gone kafka", "firing"),
        )
        .await;
        assert_eq!(kafka["severity"], "critical");

        let (status, err) = api
            .delete(&format!("/api/v1/connections/{id}/slots/{slot}"))
            .await;
        assert_eq!(status, 422, "dropping needs the name repeated: {err}");
        let (status, _) = api
            .delete(&format!(
                "/api/v1/connections/{id}/slots/{slot}?confirm={slot}"
            ))
            .await;
        assert_eq!(status, 204);
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
        )
        .bind(&slot)
        .fetch_one(&su)
        .await
        .unwrap();
        assert!(!exists, "the slot is gone");
        let (_, audit) = api
            .get(&format!("/api/v1/audit?action=slot.drop&target={slot}"))
            .await;
        assert_eq!(audit["items"].as_array().unwrap().len(), 1);
        eventually(Duration::from_secs(30), "the orphan alert resolved", || {
            alert(&api, "orphan_slot", &subject, "resolved")
        })
        .await;
    };
    with_cleanup(result, async {
        drop_slot(&su, &slot).await;
    })
    .await;
}

#[tokio::test]
async fn a_mariadb_pipeline_reports_its_binlog_position_and_the_distance_alert_fires_while_it_is_paused(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let (api, connect, kafka) = monitored_stack().await;
    let tag = tag();
    let table = format!("bl_{tag}_items");
    let mut db = sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE TABLE {table} (id INT PRIMARY KEY, note VARCHAR(80) NOT NULL)"),
        format!("INSERT INTO {table} VALUES (1, 'a')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "maria src", "provider": "MARIADB", "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "disable"}, "secrets": {"password": s.mariadb_password}})).await;
    let prefix = format!("bl-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "binlogged", "source_connection_id": src["id"], "kafka_cluster_id": kafka["id"], "connect_cluster_id": connect["id"], "tables": [format!("{}.{table}", s.mariadb_db)], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let id = p["id"].as_str().unwrap().to_string();
    let binlog = || async {
        let (_, detail) = api.get(&format!("/api/v1/pipelines/{id}")).await;
        detail["binlog"].clone()
    };
    let result = async {
        // Streaming: the connector's committed position is on the server and close to its head.
        sqlx::query(&format!("INSERT INTO {table} VALUES (2, 'b')"))
            .execute(&mut db)
            .await
            .unwrap();
        let reached = eventually(
            Duration::from_secs(120),
            "a committed binlog position",
            || async {
                let b = binlog().await;
                b["connector_file"].is_string().then_some(b)
            },
        )
        .await;
        assert_eq!(reached["position_kept"], true, "{reached}");
        assert!(
            reached["server_file"].is_string()
                && reached["oldest_file"].is_string()
                && reached["files"].as_i64().unwrap() >= 1,
            "{reached}"
        );
        assert!(
            reached["bytes_after_oldest"].as_i64().unwrap() > 0,
            "{reached}"
        );
        assert!(reached["bytes_behind"].as_i64().unwrap() >= 0);

        // Paused while writes go on: the distance grows past the threshold and the alert fires.
        let (status, _) = api
            .post(&format!("/api/v1/pipelines/{id}/pause"), json!({}))
            .await;
        assert_eq!(status, 200);
        eventually(Duration::from_secs(30), "the pipeline PAUSED", || async {
            connect_status(&s.connect_url, &format!("cluecdc-capture-{prefix}"))
                .await
                .filter(|st| st["connector"]["state"] == "PAUSED")
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let base = binlog().await["bytes_behind"].as_i64().unwrap();
        set_rule(
            &api,
            "binlog_behind_bytes",
            json!({"threshold": base + 200_000, "for_secs": 0}),
        )
        .await;
        for i in 0..4 {
            let from = 5000 * (i + 1);
            sqlx::query(&format!(
                "INSERT INTO {table} SELECT seq, REPEAT('x', 60) FROM seq_{from}_to_{}",
                from + 4999
            ))
            .execute(&mut db)
            .await
            .unwrap();
        }
        let fired = fires(
            &api,
            "binlog_behind_bytes",
            "binlogged",
            "bytes of binlog behind",
        )
        .await;
        let behind = binlog().await["bytes_behind"].as_i64().unwrap();
        assert!(behind > base + 200_000, "{behind} > {base} + 200000");
        let values = samples(&api, "binlog_behind_bytes", "binlogged").await;
        assert!(
            values.len() >= 2 && values.last().unwrap() > values.first().unwrap(),
            "the distance grows: {values:?}"
        );

        // Resumed: it reads the backlog; its committed position moves up and the alert resolves.
        // (Debezium commits the start of the last transaction it read, so a small write at the
        // end moves that position past the big ones.)
        let (status, _) = api
            .post(&format!("/api/v1/pipelines/{id}/resume"), json!({}))
            .await;
        assert_eq!(status, 200);
        let writer = sqlx::MySqlPool::connect(&s.mariadb_url(&s.mariadb_db))
            .await
            .unwrap();
        let mut n = 100_000;
        eventually(
            Duration::from_secs(120),
            "the binlog distance alert resolved",
            || {
                n += 1;
                let insert = format!("INSERT INTO {table} VALUES ({n}, 'tail')");
                let (writer, api, fired) = (writer.clone(), &api, &fired);
                async move {
                    let _ = sqlx::query(&insert).execute(&writer).await;
                    resolved(api, fired).await
                }
            },
        )
        .await;
    };
    with_cleanup(result, async {
        let _ = api
            .post(&format!("/api/v1/pipelines/{id}/resume"), json!({}))
            .await;
        let _ = api.delete(&format!("/api/v1/pipelines/{id}")).await;
        delete_connector(&s.connect_url, &format!("cluecdc-capture-{prefix}")).await;
        let mut db = sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db))
            .await
            .unwrap();
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&mut db)
            .await;
    })
    .await;
}

#[tokio::test]
async fn a_connector_connect_refuses_to_create_raises_the_missing_alert_until_it_exists() {
    let s = stack();
    let _c = connect_shared().await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let proxy = ConnectProxy::start(&s.connect_url).await;
    proxy
        .refuse_creates
        .store(true, std::sync::atomic::Ordering::Relaxed);
    set_rule(&api, "connector_missing_or_drifted", json!({"for_secs": 2})).await;
    let (status, cluster) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "guarded", "url": proxy.url}),
        )
        .await;
    assert_eq!(status, 201, "{cluster}");
    let name = format!("missing-{}", tag());
    let config = json!({"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "file": "/dev/null", "topic": name, "tasks.max": "1"});
    let (status, c) = api
        .post(
            "/api/v1/connectors",
            json!({"name": name, "connect_cluster_id": cluster["id"], "config": config}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    let result = async {
        let missing = fires(
            &api,
            "connector_missing_or_drifted",
            &name,
            "is not in Kafka Connect",
        )
        .await;
        assert!(
            connect_status(&s.connect_url, &name).await.is_none(),
            "Connect really has no such connector"
        );
        // Connect lets it be created again: the reconciler creates it and the alert resolves.
        proxy
            .refuse_creates
            .store(false, std::sync::atomic::Ordering::Relaxed);
        eventually(
            Duration::from_secs(60),
            "the missing-connector alert resolved",
            || resolved(&api, &missing),
        )
        .await;
        assert!(connect_status(&s.connect_url, &name).await.is_some());
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &name).await;
    })
    .await;
}
