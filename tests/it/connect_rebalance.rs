//! The data plane's own scale-out (seed 004): a distributed Connect cluster of three workers
//! (`scripts/stack cluster`), 50 connectors ClueCDC manages on it, and one worker SIGKILLed.
//! ClueCDC shows the tasks moving (UNASSIGNED naming the lost worker, then RUNNING on the
//! survivors), restarts and re-creates nothing itself, raises one alert for the lost worker (not
//! one per connector), and every pipeline's data keeps arriving at every delivery.
//!
//! The 50: three PostgreSQL pipelines (three replication slots of the stack's 20), one JDBC
//! delivery into MariaDB per pipeline (rows compared) and 44 object-storage deliveries into
//! MinIO spread over the three pipelines' topics (their consumer groups must catch up with the
//! rows inserted after the kill). Connect's `scheduled.rebalance.max.delay.ms` is 20 s here
//! (Connect's default is 5 min), so the lost worker's tasks wait about 20-30 s for the group.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{Connection, Row};

use crate::helpers::*;

const PIPELINES: usize = 3;
const OBJECT_DELIVERIES: usize = 44;

/// Stops the cluster's workers when the test ends, however it ends.
struct Cluster(String);

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(format!("{}/scripts/stack", env!("CARGO_MANIFEST_DIR")))
            .args(["cluster", "down", &self.0])
            .output();
    }
}

async fn connectors(api: &Api) -> Vec<Value> {
    let (status, list) = api.get("/api/v1/connectors?limit=100").await;
    assert_eq!(status, 200, "{list}");
    list["items"].as_array().unwrap().clone()
}

fn all_running(list: &[Value]) -> bool {
    list.iter().all(|c| {
        c["phase"] == "RUNNING"
            && c["tasks"]
                .as_array()
                .is_some_and(|t| !t.is_empty() && t.iter().all(|t| t["state"] == "RUNNING"))
    })
}

/// Worker id → the connectors with a task on it.
fn placement(list: &[Value]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for c in list {
        for t in c["tasks"].as_array().unwrap() {
            out.entry(t["worker_id"].as_str().unwrap().to_string())
                .or_default()
                .insert(c["name"].as_str().unwrap().to_string());
        }
    }
    out
}

async fn maria_ids(url: &str, table: &str) -> Vec<i64> {
    let Ok(mut c) = sqlx::MySqlConnection::connect(url).await else {
        return vec![];
    };
    match sqlx::query(&format!("SELECT id FROM {table} ORDER BY id"))
        .fetch_all(&mut c)
        .await
    {
        Ok(rows) => rows.iter().map(|r| i64::from(r.get::<i32, _>(0))).collect(),
        Err(_) => vec![],
    }
}

/// Every delivery's consumer group has read everything its topics hold (lag 0 on each
/// partition).
async fn caught_up(api: &Api, ids: &[String]) -> Option<()> {
    for id in ids {
        let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
        let lag = d["lag"].as_array()?;
        if lag.is_empty() || lag.iter().any(|p| p["lag"] != 0) {
            return None;
        }
    }
    Some(())
}

#[tokio::test]
async fn a_three_worker_cluster_loses_a_worker_and_clue_cdc_shows_its_tasks_moving_restarts_none_raises_one_alert_and_the_data_keeps_arriving(
) {
    // Its own Connect workers: one such test at a time across the engines' runs.
    let _heavy = heavy_exclusive().await;
    let started = Instant::now();
    let s = stack();
    let tag = format!(
        "{}{}",
        std::process::id() % 10_000,
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let name = format!("rb-{tag}");
    let ports = [free_port(), free_port(), free_port()];
    let workers: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let provider = dir.path().join("cluecdc-provider.properties");
    let _cluster = Cluster(name.clone());
    let [p1, p2, p3] = ports.map(|p| p.to_string());
    stack_cmd(&[
        "cluster",
        "up",
        &name,
        &p1,
        &p2,
        &p3,
        "--provider-file",
        provider.to_str().unwrap(),
        "--rebalance-delay-ms",
        "20000",
        "--heap",
        "768m",
    ]);
    eprintln!("cluster of 3 workers up after {:?}", started.elapsed());

    // Passes and monitor cycles every few seconds: the move lasts some 20-30 s.
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "2s"),
        ("CLUECDC_MONITOR_INTERVAL", "3s"),
    ]);
    let (status, cluster) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": name, "url": format!("http://{}", workers[0])}),
        )
        .await;
    assert_eq!(status, 201, "{cluster}");
    std::fs::write(
        &provider,
        format!(
            "url={}\ntoken={}\n",
            api.app.url,
            cluster["provider_token"].as_str().unwrap()
        ),
    )
    .unwrap();
    let connect = cluster["id"].as_str().unwrap().to_string();
    // The stack's PostgreSQL holds other tests' slots, orphans to this ClueCDC: on a slow run
    // their alert (after 5 min) would be counted with the one this test expects.
    let (status, rule) = api
        .patch("/api/v1/alert-rules/orphan_slot", json!({"enabled": false}))
        .await;
    assert_eq!(status, 200, "{rule}");
    let (status, kafka) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{kafka}");
    let kafka = kafka["id"].as_str().unwrap().to_string();

    let src_url = s.pg_url(&s.pg_source_db);
    let mut db = sqlx::PgConnection::connect(&src_url).await.unwrap();
    let schemas: Vec<String> = (0..PIPELINES).map(|i| format!("rb_{tag}_{i}")).collect();
    for schema in &schemas {
        for sql in [
            format!("CREATE SCHEMA {schema}"),
            format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name varchar(50) NOT NULL)"),
            format!("INSERT INTO {schema}.items VALUES (1, 'before'), (2, 'before')"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
    }
    let maria_db = std::env::var("MARIADB_DEST_DB").unwrap();
    let dest_url = s.mariadb_url(&maria_db);

    let body = async {
        let maria = api.connection(json!({"name": "maria dest", "provider": "MARIADB", "capabilities": ["DESTINATION"],
            "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": maria_db, "user": s.mariadb_user, "tls_mode": "disable"},
            "secrets": {"password": s.mariadb_password}})).await;
        let lake = api.connection(json!({"name": "lake", "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": format!("rb-{tag}"), "path_style": true, "use_ssl": false},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})).await;
        let mut pipelines = Vec::new();
        for (i, schema) in schemas.iter().enumerate() {
            let src = api.connection(json!({"name": format!("pg {i}"), "provider": "POSTGRESQL",
                "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": schema, "publication_name": schema},
                "secrets": {"password": s.pg_password}})).await;
            let (status, p) = api.post("/api/v1/pipelines", json!({"name": format!("rb {tag} {i}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.items")], "topic_prefix": format!("rb-{tag}-{i}")})).await;
            assert_eq!(status, 201, "{p}");
            pipelines.push(p["id"].as_str().unwrap().to_string());
        }
        let mut deliveries = Vec::new();
        for (i, p) in pipelines.iter().enumerate() {
            let (status, d) = api.post("/api/v1/deliveries", json!({"name": format!("rb {tag} db {i}"), "pipeline_id": p, "destination_connection_id": maria["id"], "table_name_format": format!("rb_{tag}_{i}_${{source.table}}")})).await;
            assert_eq!(status, 201, "{d}");
            deliveries.push(d["id"].as_str().unwrap().to_string());
        }
        for n in 0..OBJECT_DELIVERIES {
            let p = &pipelines[n % PIPELINES];
            let (status, d) = api.post("/api/v1/deliveries", json!({"name": format!("rb {tag} lake {n}"), "pipeline_id": p, "destination_connection_id": lake["id"]})).await;
            assert_eq!(status, 201, "{d}");
            deliveries.push(d["id"].as_str().unwrap().to_string());
        }
        eprintln!("50 connectors created after {:?}", started.elapsed());

        // All RUNNING, spread over the three workers, and the snapshots delivered.
        let t0 = Instant::now();
        let before = eventually(
            Duration::from_secs(420),
            "50 connectors RUNNING on 3 workers",
            || async {
                let list = connectors(&api).await;
                let spread = placement(&list);
                (list.len() == 50
                    && all_running(&list)
                    && workers.iter().all(|w| spread.contains_key(w)))
                .then_some(list)
            },
        )
        .await;
        eprintln!(
            "all 50 RUNNING on 3 workers {:?} after creation",
            t0.elapsed()
        );
        for i in 0..PIPELINES {
            let table = format!("rb_{tag}_{i}_items");
            eventually(
                Duration::from_secs(180),
                &format!("{table} holds the snapshot"),
                || async { (maria_ids(&dest_url, &table).await == vec![1, 2]).then_some(()) },
            )
            .await;
        }
        eventually(
            Duration::from_secs(180),
            "every delivery caught up before the kill",
            || caught_up(&api, &deliveries),
        )
        .await;
        let (_, audit) = api.get("/api/v1/audit?actor=reconciler&limit=500").await;
        let last_audit = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .max()
            .unwrap_or(0);
        let creates = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "connector.create")
            .count();
        assert_eq!(
            creates, 50,
            "the reconciler's audit holds its 50 creates: {audit}"
        );

        // The victim: the survivor-to-be with more tasks, never the address ClueCDC calls.
        let spread = placement(&before);
        let victim = if spread[&workers[1]].len() >= spread[&workers[2]].len() {
            1
        } else {
            2
        };
        let lost = workers[victim].clone();
        let moving: BTreeSet<String> = spread[&lost].clone();
        let tasks_on_it: usize = before
            .iter()
            .flat_map(|c| c["tasks"].as_array().unwrap())
            .filter(|t| t["worker_id"] == lost.as_str())
            .count();
        eprintln!(
            "placement before the kill: {:?}; killing worker {} ({lost}) with {tasks_on_it} tasks of {} connectors",
            spread.iter().map(|(w, c)| (w.clone(), c.len())).collect::<Vec<_>>(),
            victim + 1,
            moving.len()
        );
        // Timed from the SIGKILL (the command returns once the process is gone).
        let killed = Instant::now();
        stack_cmd(&["cluster", "kill", &name, &(victim + 1).to_string()]);

        // ClueCDC shows each of them UNASSIGNED with the lost worker named, then RUNNING on a
        // survivor; never FAILED.
        let mut seen_unassigned: BTreeSet<String> = BTreeSet::new();
        let mut page_checked = false;
        let mut first_unassigned = None;
        let after = loop {
            assert!(killed.elapsed() < Duration::from_secs(300), "the lost worker's tasks not RUNNING on the survivors within 300 s; seen UNASSIGNED: {seen_unassigned:?}");
            let list = connectors(&api).await;
            for c in &list {
                let name = c["name"].as_str().unwrap();
                assert_ne!(
                    c["phase"], "FAILED",
                    "a moving connector is never FAILED: {c}"
                );
                let on_lost = c["tasks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["state"] == "UNASSIGNED" && t["worker_id"] == lost.as_str());
                if c["phase"] == "UNASSIGNED" && on_lost {
                    assert!(
                        moving.contains(name),
                        "only the lost worker's connectors move: {c}"
                    );
                    let message = c["message"].as_str().unwrap_or("");
                    assert!(
                        message.contains(lost.as_str()) && message.contains("not restarted"),
                        "{message}"
                    );
                    first_unassigned.get_or_insert_with(|| killed.elapsed());
                    if !page_checked {
                        // Where the user looks: the connector's page and the list filtered.
                        let html = api
                            .text(&format!("/connectors/{}", c["id"].as_str().unwrap()))
                            .await;
                        assert!(
                            html.contains("UNASSIGNED") && html.contains(lost.as_str()),
                            "the connector page names the state and the lost worker"
                        );
                        let listed = api.text("/connectors?state=UNASSIGNED").await;
                        assert!(
                            listed.contains(name),
                            "the connectors list filtered by UNASSIGNED shows {name}"
                        );
                        page_checked = true;
                    }
                    seen_unassigned.insert(name.to_string());
                }
            }
            if all_running(&list) && !placement(&list).contains_key(lost.as_str()) {
                break list;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let to_running = killed.elapsed();
        eprintln!(
            "{} connectors seen UNASSIGNED (first after {:?}); all RUNNING on the survivors {to_running:?} after the kill",
            seen_unassigned.len(),
            first_unassigned
        );
        assert_eq!(
            seen_unassigned, moving,
            "every connector of the lost worker was shown moving"
        );
        let spread = placement(&after);
        assert_eq!(
            spread.len(),
            2,
            "the two survivors run everything: {spread:?}"
        );

        // One alert, for the worker, naming how many tasks were on it.
        let subject = format!("{name}/{lost}");
        let fired = eventually(Duration::from_secs(60), "the lost-worker alert", || {
            alert(&api, "connect_worker_lost", &subject, "firing")
        })
        .await;
        let message = fired["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "Connect worker {lost} of {name} lost: {tasks_on_it} tasks were on it"
            )),
            "{message}"
        );

        // The cluster's page lists the lost worker, its tasks and their move.
        let page = api.text(&format!("/clusters/connect/{connect}")).await;
        let row = page
            .split("<tr>")
            .find(|r| r.contains(lost.as_str()))
            .unwrap_or_else(|| panic!("the cluster page lists the lost worker {lost}"));
        assert!(
            row.contains(&format!(">{tasks_on_it}<")) && row.contains("moved to the other workers"),
            "{row}"
        );

        // The data keeps arriving: rows inserted now reach MariaDB, and every delivery reads them.
        for schema in &schemas {
            sqlx::query(&format!(
                "INSERT INTO {schema}.items VALUES (3, 'after'), (4, 'after')"
            ))
            .execute(&mut db)
            .await
            .unwrap();
        }
        let t1 = Instant::now();
        for i in 0..PIPELINES {
            let table = format!("rb_{tag}_{i}_items");
            eventually(
                Duration::from_secs(180),
                &format!("{table} gets the rows inserted after the kill"),
                || async { (maria_ids(&dest_url, &table).await == vec![1, 2, 3, 4]).then_some(()) },
            )
            .await;
        }
        eventually(
            Duration::from_secs(180),
            "all 47 deliveries caught up after the kill",
            || caught_up(&api, &deliveries),
        )
        .await;
        eprintln!(
            "rows inserted after the kill delivered everywhere within {:?}",
            t1.elapsed()
        );

        // Nothing restarted or re-created by ClueCDC: no reconciler action since before the
        // kill, no automatic restart counted, and still one alert in all.
        let (_, audit) = api.get("/api/v1/audit?actor=reconciler&limit=500").await;
        let acted: Vec<&Value> = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["id"].as_i64().unwrap() > last_audit)
            .collect();
        assert!(
            acted.is_empty(),
            "the reconciler acted during the rebalance: {acted:?}"
        );
        let list = connectors(&api).await;
        assert!(
            list.iter().all(|c| c["restart_attempts"] == 0),
            "no automatic restart"
        );
        let (_, alerts) = api.get("/api/v1/alerts").await;
        let alerts = alerts["items"].as_array().unwrap();
        assert_eq!(
            alerts.len(),
            1,
            "one alert in all, for the worker: {alerts:?}"
        );
        assert_eq!(alerts[0]["kind"], "connect_worker_lost");

        // The worker comes back: its alert resolves, and it stays the only one.
        stack_cmd(&[
            "cluster",
            "up",
            &name,
            &p1,
            &p2,
            &p3,
            "--provider-file",
            provider.to_str().unwrap(),
            "--rebalance-delay-ms",
            "20000",
            "--heap",
            "768m",
        ]);
        eventually(
            Duration::from_secs(120),
            "the lost-worker alert resolved",
            || alert(&api, "connect_worker_lost", &subject, "resolved"),
        )
        .await;
        // Its return is a rebalance too: everything RUNNING again, still without ClueCDC acting.
        eventually(
            Duration::from_secs(180),
            "all RUNNING after the worker's return",
            || async { all_running(&connectors(&api).await).then_some(()) },
        )
        .await;
        let (_, audit) = api.get("/api/v1/audit?actor=reconciler&limit=500").await;
        let acted: Vec<&Value> = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["id"].as_i64().unwrap() > last_audit)
            .collect();
        assert!(
            acted.is_empty(),
            "the reconciler acted when the worker returned: {acted:?}"
        );
        let (_, alerts) = api.get("/api/v1/alerts").await;
        assert_eq!(alerts["items"].as_array().unwrap().len(), 1, "{alerts}");
        eprintln!(
            "numbers: {} connectors ({tasks_on_it} tasks) moved off {lost}; UNASSIGNED shown {:?} after the kill; RUNNING on the survivors {to_running:?} after it; test {:?}",
            moving.len(),
            first_unassigned,
            started.elapsed()
        );
    };
    with_cleanup(body, async {
        // The workers first: a running source holds its slot.
        let _ = std::process::Command::new(format!("{}/scripts/stack", env!("CARGO_MANIFEST_DIR")))
            .args(["cluster", "down", &name])
            .output();
        let su = pg_superuser(&s).await;
        for schema in &schemas {
            drop_slot(&su, schema).await;
            let _ = sqlx::query(&format!("DROP PUBLICATION IF EXISTS {schema}"))
                .execute(&su)
                .await;
            let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&su)
                .await;
        }
        if let Ok(mut m) = sqlx::MySqlConnection::connect(&dest_url).await {
            for i in 0..PIPELINES {
                let _ = sqlx::query(&format!("DROP TABLE IF EXISTS rb_{tag}_{i}_items"))
                    .execute(&mut m)
                    .await;
            }
        }
    })
    .await;
}
