//! Configuration as code and recovery, against the real stack: a setup exported from one
//! instance and applied to a fresh one (secrets from the environment) exports the same bytes
//! and runs its connectors; plans name each changed field; a second apply changes nothing in
//! Connect; Strimzi resources import back to no change; hostile documents change nothing; a
//! backup taken under write load restores whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::*;

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

/// A raw request with a YAML or text body; (status, body as JSON, or as a string).
async fn send(
    api: &Api,
    method: reqwest::Method,
    path: &str,
    body: Option<String>,
) -> (u16, Value, String) {
    let mut req = api
        .http
        .request(method, format!("{}{path}", api.app.url))
        .bearer_auth(&api.token);
    if let Some(b) = body {
        req = req.header("content-type", "application/yaml").body(b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

async fn export(api: &Api) -> String {
    let (status, _, text) = send(api, reqwest::Method::GET, "/api/v1/export", None).await;
    assert_eq!(status, 200, "{text}");
    text
}

/// A Connect call that changes something (validation only reads).
fn mutating(c: &ProxiedCall) -> bool {
    c.method != "GET" && !c.path.ends_with("/config/validate")
}

async fn connector_config(connect: &str, name: &str) -> Option<Value> {
    let res = reqwest::get(format!("{connect}/connectors/{name}/config"))
        .await
        .ok()?;
    res.status().is_success().then_some(())?;
    res.json().await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_applied_to_a_fresh_instance_exports_the_same_bytes_runs_and_plans_changes_field_by_field(
) {
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let s = stack();
    let t = tag();
    let schema = format!("cc_{t}");
    let prefix = format!("cc-{}", t.replace('_', "-"));
    let slot = format!("cc_{t}");
    let lake_prefix = format!("cc-{t}/");
    // The fixture belongs to the connector's user, as a table owner's would.
    let pg = sqlx::PgPool::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id int PRIMARY KEY, total int); CREATE TABLE {schema}.customers (id int PRIMARY KEY, name text); INSERT INTO {schema}.orders VALUES (1, 10), (2, 20); INSERT INTO {schema}.customers VALUES (1, 'ada');"
    ))
    .execute(&pg)
    .await
    .unwrap();

    // Instance A, built through the API. Connect is reached through a proxy that counts calls.
    let proxy = ConnectProxy::start(&s.connect_url).await;
    let token = format!("cdcp_manifest_{t}_0123456789abcdefghij");
    let a = admin_api_with(&[("CLUECDC_RECONCILE_INTERVAL", "1s")]);
    let (st, kafka) = a
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(st, 201, "{kafka}");
    let (st, connect) = a
        .post("/api/v1/connect-clusters", json!({"name": "stack", "url": proxy.url, "kafka_cluster_id": kafka["id"], "provider_token": token}))
        .await;
    assert_eq!(st, 201, "{connect}");
    write_provider_file(&a, &token);
    let db = |name: &str, database: &str, cap: &str, extra: Value| {
        let mut settings = json!({"host": s.pg_host, "port": s.pg_port, "database": database, "user": s.pg_user, "tls_mode": "disable"});
        settings
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"name": name, "provider": "POSTGRESQL", "capabilities": [cap], "settings": settings, "secrets": {"password": s.pg_password}})
    };
    let minio = |name: &str, prefix: &str| {
        json!({"name": name, "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": prefix, "path_style": true, "use_ssl": false},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})
    };
    let src = a
        .connection(db(
            "shop db",
            &s.pg_source_db,
            "SOURCE",
            json!({"slot_name": slot, "publication_name": slot}),
        ))
        .await;
    let replica = a
        .connection(db("replica db", &s.pg_dest_db, "DESTINATION", json!({})))
        .await;
    let lake = a.connection(minio("lake", &lake_prefix)).await;
    a.connection(minio("lake two", &format!("cc-{t}-two/")))
        .await;
    let (st, pipeline) = a
        .post("/api/v1/pipelines", json!({"name": "shop", "source_connection_id": src["id"], "kafka_cluster_id": kafka["id"], "connect_cluster_id": connect["id"], "tables": [format!("{schema}.orders")], "topic_prefix": prefix}))
        .await;
    assert_eq!(st, 201, "{pipeline}");
    let (st, d1) = a
        .post("/api/v1/deliveries", json!({"name": "replica", "pipeline_id": pipeline["id"], "destination_connection_id": replica["id"], "table_name_format": format!("cc_{t}_${{source.table}}")}))
        .await;
    assert_eq!(st, 201, "{d1}");
    let (st, d2) = a
        .post("/api/v1/deliveries", json!({"name": "lake", "pipeline_id": pipeline["id"], "destination_connection_id": lake["id"], "topics": [format!("{prefix}.{schema}.orders")]}))
        .await;
    assert_eq!(st, 201, "{d2}");
    let (st, _) = a
        .patch(
            "/api/v1/alert-rules/delivery_lag_records",
            json!({"threshold": 5000.0}),
        )
        .await;
    assert_eq!(st, 200);
    let hook_secret = format!("hook-secret-{t}-0123456789");
    let (st, hook) = a
        .post(
            "/api/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/hook", "secret": hook_secret}),
        )
        .await;
    assert_eq!(st, 201, "{hook}");
    let capture = format!("cluecdc-capture-{prefix}");
    let sinks = ["cluecdc-deliver-replica", "cluecdc-deliver-lake"];
    for name in std::iter::once(capture.as_str()).chain(sinks) {
        wait_running(&s.connect_url, name, Duration::from_secs(120)).await;
    }

    let exported = export(&a).await;
    for secret in [&s.pg_password, &s.s3_secret_key, &hook_secret, &token] {
        assert!(
            !exported.contains(secret.as_str()),
            "the export holds no secret value"
        );
    }
    assert!(
        !exported.contains("con_") && !exported.contains("pl_") && !exported.contains("sec_"),
        "no id appears:\n{exported}"
    );
    assert_eq!(
        exported,
        export(&a).await,
        "two exports of the same state are byte-identical"
    );

    // A hands over: its pipeline and deliveries go (the slot stays), so B can run the same.
    for path in [
        format!("/api/v1/deliveries/{}", d1["id"].as_str().unwrap()),
        format!("/api/v1/deliveries/{}", d2["id"].as_str().unwrap()),
    ] {
        let (st, v) = a.delete(&path).await;
        assert!((200..300).contains(&st), "{v}");
    }
    eventually(Duration::from_secs(60), "A's deliveries gone", || async {
        let (_, l) = a.get("/api/v1/deliveries").await;
        l["items"].as_array().unwrap().is_empty().then_some(())
    })
    .await;
    let (st, v) = a
        .delete(&format!(
            "/api/v1/pipelines/{}",
            pipeline["id"].as_str().unwrap()
        ))
        .await;
    assert!((200..300).contains(&st), "{v}");
    for name in std::iter::once(capture.as_str()).chain(sinks) {
        eventually(
            Duration::from_secs(60),
            "A's connector gone from Connect",
            || async {
                connect_status(&s.connect_url, name)
                    .await
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    }

    // Instance B, fresh: the document and secrets from the environment.
    let b = admin_api_with(&[("CLUECDC_RECONCILE_INTERVAL", "1s")]);
    write_provider_file(&b, &token);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluecdc.yaml");
    std::fs::write(&file, &exported).unwrap();
    let env: Vec<(String, String)> = [
        ("CLUECDC_CONNECTION_SHOP_DB_PASSWORD", s.pg_password.clone()),
        (
            "CLUECDC_CONNECTION_REPLICA_DB_PASSWORD",
            s.pg_password.clone(),
        ),
        (
            "CLUECDC_CONNECTION_LAKE_ACCESS_KEY_ID",
            s.s3_access_key.clone(),
        ),
        (
            "CLUECDC_CONNECTION_LAKE_SECRET_ACCESS_KEY",
            s.s3_secret_key.clone(),
        ),
        (
            "CLUECDC_CONNECTION_LAKE_TWO_ACCESS_KEY_ID",
            s.s3_access_key.clone(),
        ),
        (
            "CLUECDC_CONNECTION_LAKE_TWO_SECRET_ACCESS_KEY",
            s.s3_secret_key.clone(),
        ),
        ("CLUECDC_CONNECT_STACK_PROVIDER_TOKEN", token.clone()),
        ("CLUECDC_WEBHOOK_1_SECRET", hook_secret.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let f = file.to_str().unwrap();
    let (ok, out, err) = cli(&b.app.data, &["plan", "-f", f], &env).await;
    assert!(ok, "{out}{err}");
    for line in [
        "+ create kafka_cluster \"stack kafka\"",
        "+ create connection \"lake two\"",
        "+ create pipeline \"shop\"",
        "+ create delivery \"lake\"",
        "~ change alert_rule \"delivery_lag_records\"",
        "+ create webhook \"http://127.0.0.1:9/hook\"",
    ] {
        assert!(out.contains(line), "plan shows {line}:\n{out}");
    }
    let (ok, out, err) = cli(&b.app.data, &["apply", "-f", f], &env).await;
    assert!(ok, "apply: {out}{err}");
    assert!(out.contains("Applied"), "{out}");
    assert_eq!(
        export(&b).await,
        exported,
        "the rebuilt instance exports the same bytes"
    );
    for secret in [&s.pg_password, &s.s3_secret_key, &hook_secret, &token] {
        assert!(
            !out.contains(secret.as_str()) && !err.contains(secret.as_str()),
            "apply prints no secret"
        );
    }
    for name in std::iter::once(capture.as_str()).chain(sinks) {
        wait_running(&s.connect_url, name, Duration::from_secs(120)).await;
    }
    // The connectors resolve B's secrets: a new source row reaches the destination.
    sqlx::query(&format!("INSERT INTO {schema}.orders VALUES (3, 30)"))
        .execute(&pg)
        .await
        .unwrap();
    let dest = sqlx::PgPool::connect(&s.pg_url(&s.pg_dest_db))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(90),
        "row 3 in the destination",
        || async {
            let n: Option<i64> =
                sqlx::query_scalar(&format!("SELECT COUNT(*) FROM cc_{t}_orders WHERE id = 3"))
                    .fetch_one(&dest)
                    .await
                    .ok();
            (n == Some(1)).then_some(())
        },
    )
    .await;

    // One change set, with its actor, in the audit trail.
    let (_, applies) = b.get("/api/v1/audit?action=config.apply").await;
    let row = &applies["items"][0];
    assert!(row["actor"].as_str().unwrap().starts_with("cli:"), "{row}");
    let change_set = row["target_id"].as_str().unwrap().to_string();
    let (_, rows) = b
        .get(&format!("/api/v1/audit?request={change_set}&limit=100"))
        .await;
    let actions: Vec<&str> = rows["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    for action in [
        "kafka_cluster.create",
        "connect_cluster.create",
        "connection.create",
        "pipeline.create",
        "delivery.create",
        "alert_rule.update",
        "webhook.create",
        "config.apply",
    ] {
        assert!(
            actions.contains(&action),
            "{action} in the change set: {actions:?}"
        );
    }
    assert_eq!(
        actions
            .iter()
            .filter(|a| **a == "connection.create")
            .count(),
        4
    );

    // A changed table list and a changed delivery option: the plan names exactly those fields.
    let mut doc: Value = serde_yaml::from_str(&exported).unwrap();
    let tables = json!([format!("{schema}.orders"), format!("{schema}.customers")]);
    for p in doc["pipelines"].as_array_mut().unwrap() {
        p["tables"] = tables.clone();
    }
    for d in doc["deliveries"].as_array_mut().unwrap() {
        if d["name"] == "lake" {
            d["options"]["records_per_file"] = json!(500);
        }
    }
    let changed = serde_yaml::to_string(&doc).unwrap();
    let (st, plan, text) = send(
        &b,
        reqwest::Method::POST,
        "/api/v1/apply?dry_run=true",
        Some(changed.clone()),
    )
    .await;
    assert_eq!(st, 200, "{text}");
    assert_eq!(plan["applied"], false);
    assert_eq!(plan["create"], json!([]));
    assert_eq!(plan["delete"], json!([]));
    assert_eq!(
        plan["change"],
        json!([
            {"kind": "pipeline", "name": "shop", "fields": {"tables": {"from": [format!("{schema}.orders")], "to": tables}}},
            {"kind": "delivery", "name": "lake", "fields": {"options.records_per_file": {"from": 10000, "to": 500}}},
        ])
    );
    assert_eq!(export(&b).await, exported, "a dry run changes nothing");
    std::fs::write(&file, &changed).unwrap();
    let (ok, out, err) = cli(&b.app.data, &["apply", "-f", f], &env).await;
    assert!(ok, "{out}{err}");
    eventually(
        Duration::from_secs(60),
        "the new configs in Connect",
        || async {
            let c = connector_config(&s.connect_url, &capture).await?;
            let l = connector_config(&s.connect_url, "cluecdc-deliver-lake").await?;
            (c["table.include.list"].as_str()?.contains("customers")
                && l["file.max.records"] == "500")
                .then_some(())
        },
    )
    .await;

    // Applying the same document again: no changes, and no call to Connect that changes anything.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = proxy.snapshot().iter().filter(|c| mutating(c)).count();
    let (ok, out, err) = cli(&b.app.data, &["apply", "-f", f], &env).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("No changes"), "{out}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after: Vec<ProxiedCall> = proxy.snapshot().into_iter().filter(mutating).collect();
    assert_eq!(
        after.len(),
        before,
        "no mutating Connect call after a no-op apply: {:?}",
        &after[before..]
    );

    // Strimzi: the pipeline's KafkaConnector, imported back, plans as no change.
    let (st, _, strimzi) = send(
        &b,
        reqwest::Method::GET,
        "/api/v1/export?format=strimzi&namespace=kafka&connect_cluster=connect-cluster",
        None,
    )
    .await;
    assert_eq!(st, 200, "{strimzi}");
    for secret in [&s.pg_password, &s.s3_secret_key] {
        assert!(!strimzi.contains(secret.as_str()));
    }
    let connector = strimzi
        .split("\n---\n")
        .find(|d| d.contains("kind: KafkaConnector") && d.contains("cluecdc.io/kind: pipeline"))
        .expect("the pipeline's KafkaConnector");
    assert!(
        connector.contains("class: io.debezium.connector.postgresql.PostgresConnector"),
        "{connector}"
    );
    let kc = dir.path().join("connector.yaml");
    std::fs::write(&kc, connector).unwrap();
    let (ok, imported, err) = cli(
        &b.app.data,
        &["import", "--format", "strimzi", kc.to_str().unwrap()],
        &[],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        err.is_empty() || !err.contains("not carried over"),
        "nothing left out: {err}"
    );
    let (st, plan, text) = send(
        &b,
        reqwest::Method::POST,
        "/api/v1/apply?dry_run=true",
        Some(imported.clone()),
    )
    .await;
    assert_eq!(st, 200, "{text}\n{imported}");
    assert_eq!(
        (
            plan["create"].clone(),
            plan["change"].clone(),
            plan["delete"].clone()
        ),
        (json!([]), json!([]), json!([])),
        "{imported}"
    );

    // Clean up: B's pipeline and deliveries with the slot, the fixtures.
    for name in ["replica", "lake"] {
        let (_, d) = b.get(&format!("/api/v1/deliveries/{name}")).await;
        let id = d["delivery"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("delivery {name}: {d}"));
        let (st, v) = b.delete(&format!("/api/v1/deliveries/{id}")).await;
        assert!((200..300).contains(&st), "delete {name}: {v}");
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, l) = b.get("/api/v1/deliveries").await;
        if l["items"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "B's deliveries not gone: {l}\n{}",
            b.app
                .log()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (_, p) = b.get("/api/v1/pipelines/shop").await;
    let id = p["pipeline"]["id"]
        .as_str()
        .or(p["id"].as_str())
        .unwrap_or_else(|| panic!("pipeline: {p}"));
    let (st, v) = b
        .delete(&format!("/api/v1/pipelines/{id}?drop_slot=true"))
        .await;
    assert!((200..300).contains(&st), "delete the pipeline: {v}");
    drop_capture_fixture(&s, &slot, &schema).await;
    let _ = sqlx::raw_sql(&format!(
        "DROP TABLE IF EXISTS cc_{t}_orders, cc_{t}_customers"
    ))
    .execute(&dest)
    .await;
}

#[tokio::test]
async fn hostile_documents_are_refused_with_the_path_they_name_and_change_nothing() {
    let api = admin_api();
    let before = export(&api).await;
    let head = "apiVersion: cluecdc/v1\n";
    let pipeline = "pipelines:\n- name: p\n  source: db\n  kafka_cluster: k\n  connect_cluster: c\n  tables: [public.t]\n";
    let connection = "connections:\n- name: db\n  provider: POSTGRESQL\n  settings: {host: h, port: 5432, database: d, user: u, tls_mode: disable}\n  secrets:\n    password: {env: PW}\n";
    let cases: Vec<(String, &str, &str)> = vec![
        (format!("{head}{pipeline}  tablez: [x]\n"), "pipelines[0].tablez", "unknown field"),
        (format!("{head}{pipeline}  partitions: many\n"), "pipelines[0].partitions", "expected i64"),
        (format!("{head}connections:\n- name: db\n  provider: POSTGRESQL\n  secrets:\n    password: hunter2-hunter2\n"), "connections[0].secrets.password", "never written in the document"),
        (format!("{head}{connection}- name: db\n  provider: MINIO\n"), "connections[1].name", "already used by connections[0]"),
        (format!("{head}{pipeline}"), "pipelines[0].source", "no connection named \"db\""),
        (format!("{head}{connection}"), "connections[0].secrets.password", "the server never reads {env: PW} itself"),
        (format!("{head}connections:\n- name: x\n  provider: MINIO\n  settings:\n    deep: {}{}\n", "[".repeat(5000), "]".repeat(5000)), "connections[0].settings.deep", "recursion limit"),
        (format!("{head}kafka_clusters: 7\n"), "kafka_clusters", "expected a sequence"),
        ("apiVersion: cluecdc/v2\n".to_string(), "apiVersion", "must be cluecdc/v1"),
    ];
    for (doc, path, why) in cases {
        for q in ["?dry_run=true", ""] {
            let (status, body, text) = send(
                &api,
                reqwest::Method::POST,
                &format!("/api/v1/apply{q}"),
                Some(doc.clone()),
            )
            .await;
            assert_eq!(status, 422, "{path}: {text}");
            let fields = body["error"]["fields"].as_object().unwrap();
            let (key, message) = fields
                .iter()
                .find(|(k, _)| k.starts_with(path))
                .unwrap_or_else(|| panic!("{path} named in {fields:?}"));
            assert!(
                message.as_str().unwrap().contains(why),
                "{key}: {message} should say {why}"
            );
            assert!(
                !text.contains("hunter2"),
                "a secret given as a value is never echoed"
            );
        }
    }
    // 5 MiB: refused before it is read, by the API and by the command line.
    let big = format!("{head}# {}\n", "x".repeat(5 * 1024 * 1024));
    let (status, body, _) = send(
        &api,
        reqwest::Method::POST,
        "/api/v1/apply",
        Some(big.clone()),
    )
    .await;
    assert_eq!(status, 413);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("1 MiB"),
        "{body}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.yaml");
    std::fs::write(&file, &big).unwrap();
    let (ok, _, err) = cli(&api.app.data, &["apply", "-f", file.to_str().unwrap()], &[]).await;
    assert!(!ok);
    assert!(err.contains("(document): 5.0 MiB of YAML"), "{err}");
    // A viewer may not export or apply.
    create_user(&api.app, "vic", "viewer");
    let vtoken = create_token(&api.app, "vic", &[]);
    let res = api
        .http
        .get(format!("{}/api/v1/export", api.app.url))
        .bearer_auth(&vtoken)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    assert_eq!(export(&api).await, before, "nothing changed");
}

/// The ids of the connections a restored database holds.
async fn names_in(db: &Path) -> BTreeMap<String, String> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", db.display()))
        .await
        .unwrap();
    let verdict: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(verdict, "ok");
    // Every connection's secrets came along with it (one transaction's view of both tables).
    let orphans: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM connections c WHERE NOT EXISTS (SELECT 1 FROM secret_values s WHERE s.secret_ref = c.secret_ref)").fetch_one(&pool).await.unwrap();
    assert_eq!(orphans, 0, "every connection has its secrets");
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT name, id FROM connections")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    rows.into_iter().collect()
}

#[derive(Debug, Clone)]
struct Op {
    name: String,
    created: Instant,
    delete_started: Option<Instant>,
    deleted: Option<Instant>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_write_load_restores_whole_and_a_running_instance_or_a_wrong_key_is_refused(
) {
    let s = stack();
    // `backup` copies the embedded file; on PostgreSQL it refuses and names pg_dump (store.rs).
    let keep = tempfile::tempdir().unwrap();
    let data = keep.path().join("data");
    pin_sqlite(&data);
    let mut api = app_on_data(&data, None);
    let minio = |name: &str| {
        json!({"name": name, "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": "backup-test/", "path_style": true, "use_ssl": false},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})
    };
    let keeper = api.connection(minio("keeper")).await;

    // Write load: create connection i, delete connection i-3, as fast as the API answers.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ops = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Op>::new()));
    let load = {
        let (http, url, token, stop, ops) = (
            api.http.clone(),
            api.app.url.clone(),
            api.token.clone(),
            stop.clone(),
            ops.clone(),
        );
        let body = minio("x");
        tokio::spawn(async move {
            let mut ids: Vec<(usize, String)> = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut b = body.clone();
                b["name"] = json!(format!("load {i}"));
                let res = http
                    .post(format!("{url}/api/v1/connections"))
                    .bearer_auth(&token)
                    .json(&b)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status().as_u16(), 201);
                let v: Value = res.json().await.unwrap();
                ops.lock().unwrap().push(Op {
                    name: format!("load {i}"),
                    created: Instant::now(),
                    delete_started: None,
                    deleted: None,
                });
                ids.push((i, v["id"].as_str().unwrap().to_string()));
                if ids.len() > 3 {
                    let (j, id) = ids.remove(0);
                    ops.lock().unwrap()[j].delete_started = Some(Instant::now());
                    let res = http
                        .delete(format!("{url}/api/v1/connections/{id}"))
                        .bearer_auth(&token)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(res.status().as_u16(), 204);
                    ops.lock().unwrap()[j].deleted = Some(Instant::now());
                }
                i += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let backup = api.app.dir.path().join("backup.db");
    let t0 = Instant::now();
    let (ok, out, err) = cli(
        &api.app.data,
        &["backup", "--to", backup.to_str().unwrap()],
        &[],
    )
    .await;
    let t1 = Instant::now();
    assert!(ok, "{out}{err}");
    assert!(err.contains("Keep the master key with it"), "{err}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.await.unwrap();
    let ops = ops.lock().unwrap().clone();
    assert!(
        ops.len() > 20,
        "the load wrote while the backup ran ({} creates)",
        ops.len()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    let restored = names_in(&backup).await;
    assert!(restored.contains_key("keeper"));
    for op in &ops {
        let before = op.created < t0 && op.delete_started.is_none_or(|d| d > t1);
        let gone = op.deleted.is_some_and(|d| d < t0);
        if before {
            assert!(
                restored.contains_key(&op.name),
                "{} was committed before the backup began",
                op.name
            );
        }
        if gone {
            assert!(
                !restored.contains_key(&op.name),
                "{} was deleted before the backup began",
                op.name
            );
        }
    }

    // Restore refuses a running instance's database, and changes nothing.
    let live_before = api.get("/api/v1/connections").await.1["items"]
        .as_array()
        .unwrap()
        .len();
    let (ok, _, err) = cli(
        &api.app.data,
        &["restore", "--from", backup.to_str().unwrap()],
        &[],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("is running") && err.contains("Nothing was changed"),
        "{err}"
    );
    assert_eq!(
        api.get("/api/v1/connections").await.1["items"]
            .as_array()
            .unwrap()
            .len(),
        live_before
    );

    // A wrong master key is refused before anything is written.
    let other_dir = tempfile::tempdir().unwrap();
    let other = other_dir.path().join("data");
    pin_sqlite(&other);
    let wrong = [(
        "CLUECDC_MASTER_KEY".to_string(),
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_string(),
    )];
    let (ok, _, err) = cli(
        &other,
        &["restore", "--from", backup.to_str().unwrap()],
        &wrong,
    )
    .await;
    assert!(!ok);
    assert!(err.contains("does not decrypt"), "{err}");
    let written: Vec<_> = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".sqlite-only")
        .collect();
    assert!(
        written.is_empty(),
        "nothing written in the data directory: {written:?}"
    );

    // Stopped, it restores; the server comes back with exactly the backup's connections, and
    // their secrets decrypt (a connection test logs in to the object store with them).
    assert!(api.app.terminate(Duration::from_secs(20)).is_some());
    let (ok, out, err) = cli(
        &api.app.data,
        &["restore", "--from", backup.to_str().unwrap()],
        &[],
    )
    .await;
    assert!(ok, "{out}{err}");
    assert!(
        err.contains("kept at"),
        "the replaced database is kept: {err}"
    );
    let data: PathBuf = api.app.data.clone();
    assert_eq!(names_in(&data.join("cluecdc.db")).await, restored);
    let again = spawn_app_on(&binary(), tempfile::tempdir().unwrap(), &data, &[]);
    let mut listed: Vec<String> = reqwest::Client::new()
        .get(format!("{}/api/v1/connections", again.url))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, restored.keys().cloned().collect::<Vec<_>>());
    let report: Value = reqwest::Client::new()
        .post(format!(
            "{}/api/v1/connections/{}/test",
            again.url,
            keeper["id"].as_str().unwrap()
        ))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["ok"], true, "{report}");
}

#[tokio::test]
async fn an_apply_that_fails_part_way_keeps_what_it_applied_and_names_what_is_left() {
    let s = stack();
    let t = tag();
    let api = admin_api();
    let doc = format!(
        r#"apiVersion: cluecdc/v1
kafka_clusters:
- name: k
  bootstrap_servers: 127.0.0.1:9
connect_clusters:
- name: c
  url: http://127.0.0.1:9
connections:
- name: src
  provider: POSTGRESQL
  settings: {{host: {host}, port: {port}, database: {db}, user: {user}, tls_mode: disable, slot_name: pf_{t}, publication_name: pf_{t}}}
  secrets:
    password: {{env: PF_PASSWORD_{t}}}
- name: lake
  provider: MINIO
  settings: {{bucket: {bucket}, region: {region}, endpoint: "{endpoint}", prefix: pf/, path_style: true, use_ssl: false}}
  secrets:
    access_key_id: {{env: PF_KEY_{t}}}
    secret_access_key: {{env: PF_SECRET_{t}}}
pipelines:
- name: p
  source: src
  kafka_cluster: k
  connect_cluster: c
  tables: [public.pf_missing_{t}]
deliveries:
- name: d
  pipeline: p
  destination: lake
"#,
        host = s.pg_host,
        port = s.pg_port,
        db = s.pg_source_db,
        user = s.pg_user,
        bucket = s.s3_bucket,
        region = s.s3_region,
        endpoint = s.s3_endpoint,
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("setup.yaml");
    std::fs::write(&file, &doc).unwrap();
    let env = vec![
        (format!("PF_PASSWORD_{t}"), s.pg_password.clone()),
        (format!("PF_KEY_{t}"), s.s3_access_key.clone()),
        (format!("PF_SECRET_{t}"), s.s3_secret_key.clone()),
    ];
    // The plan cannot check the pipeline against its source before its connection exists; it
    // says so, and apply checks it right before creating it.
    let (ok, out, err) = cli(&api.app.data, &["plan", "-f", file.to_str().unwrap()], &env).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("note: pipeline \"p\" is checked against its plugin and its source when applied, after connection \"src\""), "{out}");
    let (ok, out, err) = cli(
        &api.app.data,
        &["apply", "-f", file.to_str().unwrap()],
        &env,
    )
    .await;
    assert!(!ok, "the missing table stops the apply: {out}");
    for done in [
        "done: create kafka_cluster \"k\"",
        "done: create connect_cluster \"c\"",
        "done: create connection \"src\"",
        "done: create connection \"lake\"",
    ] {
        assert!(out.contains(done), "{done}:\n{out}");
    }
    assert!(
        out.contains("FAILED: create pipeline \"p\":")
            && out.contains(&format!("public.pf_missing_{t}")),
        "the failed step and why:\n{out}"
    );
    assert!(out.contains("left: create delivery \"d\""), "{out}");
    assert!(err.contains("apply stopped part way"), "{err}");
    // What was applied stays applied and consistent; the rest is not there.
    let (_, connections) = api.get("/api/v1/connections").await;
    let names: Vec<&str> = connections["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["lake", "src"]);
    let (_, pipelines) = api.get("/api/v1/pipelines").await;
    assert_eq!(pipelines["items"], json!([]));
    let (_, audit) = api.get("/api/v1/audit?action=config.apply").await;
    let row = &audit["items"][0];
    assert_eq!(row["outcome"], "failure", "{row}");
    assert_eq!(
        row["summary"]["left"],
        json!(["create delivery \"d\""]),
        "{row}"
    );
    // Everything before the failed step is whole: the document without the pipeline and the
    // delivery plans no change. With them, the plan itself now checks the pipeline against its
    // source (its connection exists) and refuses it by path, before anything changes.
    let head = &doc[..doc.find("pipelines:").unwrap()];
    let applied = dir.path().join("applied.yaml");
    std::fs::write(&applied, head).unwrap();
    let (ok, out, err) = cli(
        &api.app.data,
        &["plan", "-f", applied.to_str().unwrap()],
        &env,
    )
    .await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("No changes"), "{out}");
    let (ok, out, err) = cli(&api.app.data, &["plan", "-f", file.to_str().unwrap()], &env).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains(&format!(
            "pipelines[0].tables: not found in src: public.pf_missing_{t}"
        )),
        "{err}"
    );
}
