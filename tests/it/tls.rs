//! TLS end to end against the stack's TLS side (`scripts/stack`: a test CA, PostgreSQL and
//! MariaDB offering its certificate, a SASL_SSL + SCRAM-SHA-512 Kafka listener, an https front
//! for MinIO): what verifies passes, and a wrong CA or password fails with a message that names
//! the problem. No option anywhere turns verification off.

use serde_json::{json, Value};

use crate::helpers::*;

pub struct Tls {
    pub ca: String,
    pub other_ca: String,
    pub ca_key: String,
    pub kafka_bootstrap: String,
    pub scram_user: String,
    pub scram_password: String,
    pub s3_endpoint: String,
}

pub fn tls() -> Tls {
    let read = |v: &str| std::fs::read_to_string(var(v)).unwrap_or_else(|e| panic!("{v}: {e}"));
    Tls {
        ca: read("TLS_CA_FILE"),
        other_ca: read("TLS_OTHER_CA_FILE"),
        ca_key: read("TLS_CA_KEY_FILE"),
        kafka_bootstrap: var("KAFKA_TLS_BOOTSTRAP"),
        scram_user: var("KAFKA_SCRAM_USER"),
        scram_password: var("KAFKA_SCRAM_PASSWORD"),
        s3_endpoint: var("S3_TLS_ENDPOINT"),
    }
}

impl Tls {
    /// A Kafka cluster body for the stack's SASL_SSL listener.
    pub fn kafka_body(&self, name: &str, password: &str, ca: &str) -> Value {
        json!({"name": name, "bootstrap_servers": self.kafka_bootstrap, "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": self.scram_user, "sasl_password": password,
            "tls_ca_certificate": ca})
    }

    /// The stack's SASL_SSL listener registered in `api` with the right password and CA.
    pub async fn kafka_cluster(&self, api: &Api, name: &str) -> Value {
        let (status, kafka) = api
            .post(
                "/api/v1/kafka-clusters",
                self.kafka_body(name, &self.scram_password, &self.ca),
            )
            .await;
        assert_eq!(status, 201, "{kafka}");
        kafka
    }
}

/// The body lines of a PEM private key (what would show if it leaked anywhere).
pub fn key_lines(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 40)
        .map(str::to_string)
        .collect()
}

fn first_failure(report: &Value) -> String {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["status"] == "fail")
        .map(|c| {
            format!(
                "{} {}",
                c["message"].as_str().unwrap_or(""),
                c["hint"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| panic!("no failing check: {report}"))
}

pub fn pg_tls_body(s: &Stack, name: &str, ca: &str, extra: Value) -> Value {
    let mut settings = json!({"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user,
        "tls_mode": "verify-full", "ca_certificate": ca});
    for (k, v) in extra.as_object().unwrap() {
        settings[k] = v.clone();
    }
    json!({"name": name, "provider": "POSTGRESQL", "capabilities": ["SOURCE", "DESTINATION"], "settings": settings,
        "secrets": {"password": s.pg_password}})
}

#[tokio::test]
async fn database_and_object_store_connections_verify_the_private_ca_and_a_wrong_one_is_named() {
    let s = stack();
    let t = tls();
    let api = admin_api();

    // PostgreSQL, verify-full with the CA that signed the server's certificate; verify-ca too.
    let (_, ok) = test_connection(&api, pg_tls_body(&s, "pg tls", &t.ca, json!({}))).await;
    assert_eq!(ok["ok"], true, "{ok}");
    let (_, ok) = test_connection(
        &api,
        pg_tls_body(&s, "pg verify-ca", &t.ca, json!({"tls_mode": "verify-ca"})),
    )
    .await;
    assert_eq!(ok["ok"], true, "{ok}");
    let (_, bad) =
        test_connection(&api, pg_tls_body(&s, "pg wrong ca", &t.other_ca, json!({}))).await;
    assert_eq!(bad["ok"], false, "{bad}");
    let why = first_failure(&bad);
    assert!(
        why.contains("not signed by the CA"),
        "names the certificate problem: {why}"
    );

    // MariaDB, the same.
    let maria = |name: &str, ca: &str| {
        json!({"name": name, "provider": "MARIADB", "capabilities": ["DESTINATION"],
        "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "verify-full", "ca_certificate": ca},
        "secrets": {"password": s.mariadb_password}})
    };
    let (_, ok) = test_connection(&api, maria("maria tls", &t.ca)).await;
    assert_eq!(ok["ok"], true, "{ok}");
    let mut verify_ca = maria("maria verify-ca", &t.ca);
    verify_ca["settings"]["tls_mode"] = json!("verify-ca");
    let (_, ok) = test_connection(&api, verify_ca).await;
    assert_eq!(ok["ok"], true, "{ok}");
    let (_, bad) = test_connection(&api, maria("maria wrong ca", &t.other_ca)).await;
    assert_eq!(bad["ok"], false, "{bad}");
    let why = first_failure(&bad);
    assert!(
        why.contains("not signed by the CA"),
        "names the certificate problem: {why}"
    );

    // The object store behind https with the private CA; without it the public roots refuse.
    let s3 = |name: &str, ca: Option<&str>| {
        let mut settings = json!({"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": t.s3_endpoint, "prefix": "tls/"});
        if let Some(ca) = ca {
            settings["ca_certificate"] = json!(ca);
        }
        json!({"name": name, "provider": "MINIO", "capabilities": ["DESTINATION"], "settings": settings,
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})
    };
    let (c, ok) = test_connection(&api, s3("s3 tls", Some(&t.ca))).await;
    assert_eq!(ok["ok"], true, "{ok}");
    assert!(
        c["warnings"].as_array().unwrap().is_empty(),
        "https is not labelled plain: {c}"
    );
    for (name, ca) in [
        ("s3 wrong ca", Some(t.other_ca.as_str())),
        ("s3 public roots", None),
    ] {
        let (_, bad) = test_connection(&api, s3(name, ca)).await;
        assert_eq!(bad["ok"], false, "{name}: {bad}");
        let why = first_failure(&bad);
        assert!(
            why.contains("not signed by the CA") || why.contains("not trusted"),
            "{name}: {why}"
        );
    }
}

#[tokio::test]
async fn a_tls_scram_kafka_cluster_shows_health_and_topics_and_a_wrong_password_or_ca_is_a_clear_error(
) {
    let t = tls();
    let api = admin_api();
    let body = |name: &str, password: &str, ca: &str| t.kafka_body(name, password, ca);
    let (status, k) = api
        .post(
            "/api/v1/kafka-clusters",
            body("tls kafka", &t.scram_password, &t.ca),
        )
        .await;
    assert_eq!(status, 201, "{k}");
    let id = k["id"].as_str().unwrap();
    let (_, got) = api.get(&format!("/api/v1/kafka-clusters/{id}")).await;
    assert_eq!(got["health"]["reachable"], true, "{got}");
    let topic = format!("cluecdc-tls-{}", tag());
    let (status, made) = api
        .post(
            &format!("/api/v1/kafka-clusters/{id}/topics"),
            json!({"name": topic, "partitions": 1, "replication_factor": 1}),
        )
        .await;
    assert_eq!(status, 201, "created through the SASL_SSL listener: {made}");
    let (_, list) = api
        .get(&format!("/api/v1/kafka-clusters/{id}/topics?q={topic}"))
        .await;
    assert_eq!(list["total"], 1, "{list}");

    for (name, password, ca, needle) in [
        (
            "tls kafka wrong password",
            "not-the-password-4711",
            t.ca.as_str(),
            "SASL authentication failed: the broker refused the user name or password",
        ),
        (
            "tls kafka wrong ca",
            t.scram_password.as_str(),
            t.other_ca.as_str(),
            "not signed by the CA",
        ),
    ] {
        let (status, k) = api
            .post("/api/v1/kafka-clusters", body(name, password, ca))
            .await;
        assert_eq!(status, 201, "{k}");
        let (_, got) = api
            .get(&format!(
                "/api/v1/kafka-clusters/{}",
                k["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(got["health"]["reachable"], false, "{name}: {got}");
        let error = got["health"]["error"].as_str().unwrap_or_default();
        assert!(error.contains(needle), "{name}: {got}");
        eprintln!("{name}: {error}");
        assert!(
            !got.to_string().contains(password) && !k.to_string().contains(password),
            "{name}: the password it was given is never shown"
        );
    }
    let (status, _) = api
        .delete(&format!(
            "/api/v1/kafka-clusters/{id}/topics/{topic}?confirm={topic}"
        ))
        .await;
    assert!(status < 300, "topic deleted");
}

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}", n % 100_000_000)
}

async fn dest_names(url: &str, table: &str) -> Vec<String> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(&format!("SELECT name FROM {table} ORDER BY id"))
        .fetch_all(&mut c)
        .await
        .unwrap_or_default()
}

/// The ids of the rows captured into objects under `prefix` (every JSON line's `after.id`).
async fn object_ids(s: &Stack, prefix: &str) -> Vec<i64> {
    let mut ids: Vec<i64> = crate::object_storage::objects(s, prefix)
        .await
        .iter()
        .flat_map(|(_, lines)| {
            lines
                .iter()
                .filter_map(|v| v["value"]["after"]["id"].as_i64())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[tokio::test]
async fn a_verify_full_pipeline_streams_through_tls_kafka_into_verify_full_and_https_destinations_and_a_wrong_ca_fails_it_permanently(
) {
    use sqlx::Connection;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;
    let s = stack();
    let t = tls();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_RESTART_BACKOFF", "1s"),
    ]);
    let connect = point_connect_provider_at(&api).await;
    // The pipeline's Kafka is the TLS + SCRAM listener: ClueCDC creates its topics there.
    let kafka = t.kafka_cluster(&api, "tls kafka").await;
    let tag = tag();
    let schema = format!("tl_{tag}");
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name text NOT NULL)"),
        format!("INSERT INTO {schema}.items VALUES (1, 'apple'), (2, 'pear')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api
        .connection(pg_tls_body(
            &s,
            &format!("tls src {tag}"),
            &t.ca,
            json!({"slot_name": format!("tl_{tag}"), "publication_name": format!("tl_{tag}")}),
        ))
        .await;
    let dest = api
        .connection(json!({"name": "tls dest", "provider": "POSTGRESQL", "capabilities": ["DESTINATION"],
            "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_dest_db, "user": s.pg_user, "tls_mode": "verify-full", "ca_certificate": t.ca},
            "secrets": {"password": s.pg_password}}))
        .await;
    let lake_prefix = format!("tl{tag}/");
    let lake = api
        .connection(json!({"name": "tls lake", "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": t.s3_endpoint, "prefix": lake_prefix, "ca_certificate": t.ca},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}}))
        .await;
    let prefix = format!("tl{tag}");
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": format!("tls {tag}"), "source_connection_id": src["id"],
        "kafka_cluster_id": kafka["id"], "connect_cluster_id": connect["id"], "tables": [format!("{schema}.items")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let pid = p["id"].as_str().unwrap().to_string();
    let table = format!("tl_{tag}_items");
    let mut deliveries = Vec::new();
    for body in [
        json!({"name": "tls jdbc", "pipeline_id": pid, "destination_connection_id": dest["id"], "table_name_format": format!("tl_{tag}_${{source.table}}")}),
        json!({"name": "tls lake", "pipeline_id": pid, "destination_connection_id": lake["id"], "records_per_file": 1,
            "compression": "none", "key_template": "{{topic}}/{{partition}}-{{start_offset}}"}),
    ] {
        let (status, d) = api.post("/api/v1/deliveries", body).await;
        assert_eq!(status, 201, "{d}");
        deliveries.push(d["id"].as_str().unwrap().to_string());
    }
    let dest_url = s.pg_url(&s.pg_dest_db);
    let result = async {
        let (_, detail) = api.get(&format!("/api/v1/pipelines/{pid}")).await;
        let (_, topics) = api
            .get(&format!(
                "/api/v1/kafka-clusters/{}/topics?q={prefix}.",
                kafka["id"].as_str().unwrap()
            ))
            .await;
        assert!(
            topics["total"].as_u64().unwrap() >= 1,
            "the pipeline's topics, read through SASL_SSL: {topics} {detail}"
        );
        crate::pipelines::wait_pipeline_running(&api, &pid).await;
        sqlx::query(&format!("INSERT INTO {schema}.items VALUES (3, 'fig')"))
            .execute(&mut db)
            .await
            .unwrap();
        let want = vec!["apple".to_string(), "pear".into(), "fig".into()];
        eventually(
            Duration::from_secs(120),
            "the verify-full JDBC destination holds every row",
            || async { (dest_names(&dest_url, &table).await == want).then_some(()) },
        )
        .await;
        eventually(
            Duration::from_secs(120),
            "objects written through https with the private CA",
            || async { (object_ids(&s, &lake_prefix).await == vec![1, 2, 3]).then_some(()) },
        )
        .await;

        // The CA files the provider wrote on the worker: one per verifying connection, 0600,
        // the certificate and nothing else.
        let dir = std::env::var("CLUECDC_PROVIDER_FILES").unwrap();
        for c in [&src, &dest] {
            let file = std::path::Path::new(&dir)
                .join(format!("{}-ca.pem", c["secret_ref"].as_str().unwrap()));
            let meta =
                std::fs::metadata(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o600,
                "{}",
                file.display()
            );
            assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), t.ca.trim());
        }
        let live = connect_config(&s, &format!("cluecdc-capture-{prefix}"))
            .await
            .expect("the connector in Connect")
            .to_string();
        assert!(
            live.contains("${cluecdc:") && live.contains(":ca_cert_file}"),
            "{live}"
        );
        assert!(
            !live.contains("BEGIN CERTIFICATE"),
            "Connect stores the reference, not the PEM: {live}"
        );

        // Now the source's CA is the wrong one, and the task starts again with it (the
        // provider writes the CA file anew). Debezium 3.5 retries a connection that fails when
        // its task starts without end (errors.max.retries does not bound it: debezium/dbz#2009)
        // and Connect keeps the task RUNNING; ClueCDC's own check of the source and the
        // plugin's on the worker name the cause, and ClueCDC reports the connector FAILED with
        // that trace, permanently: no restart of its own.
        let (status, _) = api
            .patch(
                "/api/v1/alert-rules/pipeline_source_unreachable",
                json!({"for_secs": 0}),
            )
            .await;
        assert_eq!(status, 200);
        let (status, patched) = api
            .patch(
                &format!("/api/v1/connections/{}", src["id"].as_str().unwrap()),
                json!({"settings": {"ca_certificate": t.other_ca}}),
            )
            .await;
        assert_eq!(status, 200, "{patched}");
        let (status, r) = api
            .post(&format!("/api/v1/pipelines/{pid}/restart"), json!({}))
            .await;
        assert!(status < 300, "{r}");
        let connector = format!("cluecdc-capture-{prefix}");
        let failed = eventually(
            Duration::from_secs(120),
            "the connector FAILED with the certificate problem as its trace",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{connector}")).await;
                (c["phase"] == "FAILED").then_some(c)
            },
        )
        .await;
        let trace = failed["trace"].as_str().unwrap_or_default();
        assert!(
            trace.contains("not signed by the CA") && trace.to_lowercase().contains("pkix"),
            "ClueCDC's check and the driver on the worker both name it: {failed}"
        );
        let message = failed["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("failed (TLS certificate not trusted); not restarting: the server's certificate is not signed by the connection's CA"),
            "{failed}"
        );
        let restarts_then = failed["restarts"].as_array().map_or(0, Vec::len);
        // Longer than the first backoff (CLUECDC_RESTART_BACKOFF is 1 s here): a transient
        // reading of the same trace would have restarted it by now.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let (_, after) = api.get(&format!("/api/v1/connectors/{connector}")).await;
        assert_eq!(after["phase"], "FAILED", "{after}");
        assert_eq!(after["restart_attempts"], 0, "{after}");
        assert_eq!(
            after["restarts"].as_array().map_or(0, Vec::len),
            restarts_then,
            "no restart recorded: {after}"
        );
        let live = connect_status(&s.connect_url, &connector).await.unwrap();
        eprintln!("Connect meanwhile: {live}");
        let (_, d) = api.get(&format!("/api/v1/pipelines/{pid}")).await;
        assert!(
            d["source_error"]
                .as_str()
                .unwrap_or_default()
                .contains("not signed by the CA"),
            "{d}"
        );
        let name = p["name"].as_str().unwrap();
        let fired = eventually(
            Duration::from_secs(60),
            "the source alert with its cause",
            || async { alert(&api, "pipeline_source_unreachable", name, "firing").await },
        )
        .await;
        assert!(
            fired["message"]
                .as_str()
                .unwrap_or_default()
                .contains("permanent (TLS certificate not trusted)"),
            "{fired}"
        );
        let page = sign_in(&api.app, "ada", PASSWORD)
            .await
            .text(format!("{}/pipelines/{pid}", api.app.url))
            .await;
        // (The apostrophe is HTML-escaped on the page.)
        assert!(
            page.contains("not restarting: the server")
                && page.contains("certificate is not signed by the connection"),
            "the pipeline page says it will not be restarted and why"
        );

        // The right CA again: once the source answers ClueCDC and the plugin accepts the config
        // on the worker (which writes the right CA file there), the verdict goes, the retrying
        // task connects at its next attempt, and changes flow again.
        let (status, _) = api
            .patch(
                &format!("/api/v1/connections/{}", src["id"].as_str().unwrap()),
                json!({"settings": {"ca_certificate": t.ca}}),
            )
            .await;
        assert_eq!(status, 200);
        eventually(
            Duration::from_secs(90),
            "the connector RUNNING again",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{connector}")).await;
                (c["phase"] == "RUNNING").then_some(())
            },
        )
        .await;
        sqlx::query(&format!("INSERT INTO {schema}.items VALUES (4, 'kiwi')"))
            .execute(&mut db)
            .await
            .unwrap();
        let want = vec![
            "apple".to_string(),
            "pear".into(),
            "fig".into(),
            "kiwi".into(),
        ];
        eventually(
            Duration::from_secs(120),
            "the row written after the fix in the destination",
            || async { (dest_names(&dest_url, &table).await == want).then_some(()) },
        )
        .await;
        eventually(
            Duration::from_secs(60),
            "the source alert resolved",
            || async { alert(&api, "pipeline_source_unreachable", name, "resolved").await },
        )
        .await;
    };
    with_cleanup(result, async {
        // The right CA first, so that the slot can be dropped whatever failed.
        let _ = api
            .patch(
                &format!("/api/v1/connections/{}", src["id"].as_str().unwrap()),
                json!({"settings": {"ca_certificate": t.ca}}),
            )
            .await;
        for id in &deliveries {
            let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        }
        let _ = api
            .delete(&format!("/api/v1/pipelines/{pid}?drop_slot=true"))
            .await;
        drop_capture_fixture(&s, &format!("tl_{tag}"), &schema).await;
        if let Ok(mut d) = sqlx::PgConnection::connect(&dest_url).await {
            let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(&mut d)
                .await;
        }
        let dir = std::path::Path::new(&std::env::var("S3_DATA_DIR").unwrap())
            .join(&s.s3_bucket)
            .join(lake_prefix.trim_end_matches('/'));
        let _ = std::fs::remove_dir_all(dir);
    })
    .await;
}

/// verify-ca checks the server's certificate against the CA but not the host name; the
/// connector's binlog client and JDBC driver get the same mode and truststore.
#[tokio::test]
async fn a_verify_ca_mariadb_pipeline_streams_keeps_its_schema_history_on_the_tls_scram_kafka_and_a_wrong_ca_fails_it_permanently(
) {
    use sqlx::Connection;
    use std::time::Duration;
    let s = stack();
    let t = tls();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_RESTART_BACKOFF", "1s"),
    ]);
    let connect = point_connect_provider_at(&api).await;
    let kafka = t.kafka_cluster(&api, "tls kafka").await;
    let kid = kafka["id"].as_str().unwrap().to_string();
    let tag = tag();
    let table = format!("tm_{tag}_items");
    let mut db = sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL)"),
        format!("INSERT INTO {table} VALUES (1, 'apple'), (2, 'pear')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api
        .connection(json!({"name": format!("tls maria {tag}"), "provider": "MARIADB", "capabilities": ["SOURCE"],
            "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "verify-ca", "ca_certificate": t.ca},
            "secrets": {"password": s.mariadb_password}}))
        .await;
    let prefix = format!("tm{tag}");
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": format!("tls maria {tag}"), "source_connection_id": src["id"],
        "kafka_cluster_id": kid, "connect_cluster_id": connect["id"], "tables": [format!("{}.{table}", s.mariadb_db)], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let pid = p["id"].as_str().unwrap().to_string();
    let topic = format!("{prefix}.{}.{table}", s.mariadb_db);
    let result = async {
        crate::pipelines::wait_pipeline_running(&api, &pid).await;
        // The connector's own Kafka clients (schema history) log in like ClueCDC: references only.
        let live: Value = connect_config(&s, &format!("cluecdc-capture-{prefix}"))
            .await
            .expect("the connector in Connect");
        assert!(
            live["schema.history.internal.producer.sasl.jaas.config"]
                .as_str()
                .unwrap_or_default()
                .contains("${cluecdc:"),
            "{live}"
        );
        assert_eq!(
            live["schema.history.internal.consumer.security.protocol"], "SASL_SSL",
            "{live}"
        );
        assert_eq!(live["database.ssl.mode"], "verify-ca", "{live}");
        assert!(
            live["database.ssl.truststore"]
                .as_str()
                .unwrap_or_default()
                .ends_with(":ca_truststore_file}"),
            "{live}"
        );
        assert!(
            !live.to_string().contains(&t.scram_password)
                && !live.to_string().contains("BEGIN CERTIFICATE")
        );
        sqlx::query(&format!("INSERT INTO {table} VALUES (3, 'fig')"))
            .execute(&mut db)
            .await
            .unwrap();
        // Two snapshot reads and the insert, counted through the SASL_SSL listener.
        eventually(
            Duration::from_secs(120),
            "3 records in the table's topic",
            || async {
                let (_, t) = api
                    .get(&format!("/api/v1/kafka-clusters/{kid}/topics/{topic}"))
                    .await;
                (t["partitions"][0]["high_watermark"].as_i64() >= Some(3)).then_some(())
            },
        )
        .await;
        let (_, history) = api
            .get(&format!(
                "/api/v1/kafka-clusters/{kid}/topics/{prefix}.schema-history"
            ))
            .await;
        assert!(
            history["partitions"][0]["high_watermark"].as_i64() > Some(0),
            "the schema history was written: {history}"
        );

        // A CA that did not sign the server's certificate, and the task starts again with it:
        // the connector fails with the certificate problem as its trace, permanently.
        let (status, _) = api
            .patch(
                &format!("/api/v1/connections/{}", src["id"].as_str().unwrap()),
                json!({"settings": {"ca_certificate": t.other_ca}}),
            )
            .await;
        assert_eq!(status, 200);
        let (status, r) = api
            .post(&format!("/api/v1/pipelines/{pid}/restart"), json!({}))
            .await;
        assert!(status < 300, "{r}");
        let connector = format!("cluecdc-capture-{prefix}");
        let failed = eventually(
            Duration::from_secs(120),
            "the MariaDB connector FAILED with the certificate problem",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{connector}")).await;
                (c["phase"] == "FAILED").then_some(c)
            },
        )
        .await;
        // Unlike PostgreSQL's, the MariaDB task fails in Connect itself: its first query at
        // start is not retried. The driver's trace names the certificate problem.
        let live = connect_status(&s.connect_url, &connector).await.unwrap();
        assert_eq!(live["tasks"][0]["state"], "FAILED", "{live}");
        let trace = failed["trace"].as_str().unwrap_or_default();
        assert!(trace.contains("PKIX path building failed"), "{failed}");
        assert!(
            failed["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("failed (TLS certificate not trusted); not restarting:"),
            "{failed}"
        );
        let restarts_then = failed["restarts"].as_array().map_or(0, Vec::len);
        tokio::time::sleep(Duration::from_secs(8)).await;
        let (_, after) = api.get(&format!("/api/v1/connectors/{connector}")).await;
        assert_eq!(
            (after["phase"].as_str(), after["restart_attempts"].as_i64()),
            (Some("FAILED"), Some(0)),
            "{after}"
        );
        assert_eq!(
            after["restarts"].as_array().map_or(0, Vec::len),
            restarts_then,
            "no restart of ClueCDC's own over more than the first backoff: {after}"
        );
        // The right CA, then a restart as the message says: it runs again.
        let (status, _) = api
            .patch(
                &format!("/api/v1/connections/{}", src["id"].as_str().unwrap()),
                json!({"settings": {"ca_certificate": t.ca}}),
            )
            .await;
        assert_eq!(status, 200);
        let (status, r) = api
            .post(&format!("/api/v1/pipelines/{pid}/restart"), json!({}))
            .await;
        assert!(status < 300, "{r}");
        wait_running(&s.connect_url, &connector, Duration::from_secs(120)).await;
    };
    with_cleanup(result, async {
        let _ = api.delete(&format!("/api/v1/pipelines/{pid}")).await;
        if let Ok(mut db) = sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db)).await {
            let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(&mut db)
                .await;
        }
    })
    .await;
}

const HOOK_SECRET: &str = "tls-webhook-secret-0123456";

/// A plain-HTTP webhook receiver (the TLS front sits before it): (path, signature valid, body)
/// of every call.
async fn hook_receiver() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<(String, bool, Value)>>>,
) {
    use hmac::{Hmac, Mac};
    use poem::listener::{Acceptor, Listener};
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await
        .unwrap();
    let addr = acceptor.local_addr()[0].as_socket_addr().copied().unwrap();
    let ep = poem::endpoint::make(move |req: poem::Request| {
        let g = g.clone();
        async move {
            let path = req.uri().path().to_string();
            let sig = req
                .headers()
                .get("x-cluecdc-signature")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = req.into_body().into_bytes().await.unwrap_or_default();
            let mut mac =
                <Hmac<sha2::Sha256> as Mac>::new_from_slice(HOOK_SECRET.as_bytes()).unwrap();
            mac.update(&body);
            let valid = sig == format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
            g.lock().unwrap().push((
                path,
                valid,
                serde_json::from_slice(&body).unwrap_or(Value::Null),
            ));
            "ok"
        }
    });
    tokio::spawn(async move { poem::Server::new_with_acceptor(acceptor).run(ep).await });
    (addr.to_string(), got)
}

/// ClueCDC's own https clients (the Connect REST client, webhooks) trust a private CA when one
/// is given, and then only it: through an https front with the stack's certificate, Connect
/// answers and a connector runs; the other CA, or the built-in roots, are refused with the
/// certificate problem named, and so are the webhooks that do not trust the front's CA.
#[tokio::test]
async fn a_connect_cluster_and_a_webhook_behind_https_trust_their_private_ca_and_only_it() {
    use std::time::Duration;
    let s = stack();
    let t = tls();
    let _c = connect_shared().await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let connect_front = TlsFront::start(&s.connect_url).await;
    let (receiver, got) = hook_receiver().await;
    let hook_front = TlsFront::start(&receiver).await;

    // Webhooks: one trusting the stack's CA, one another CA, one the built-in roots.
    for (path, ca) in [
        ("/trusted", Some(t.ca.as_str())),
        ("/other-ca", Some(t.other_ca.as_str())),
        ("/public-roots", None),
    ] {
        let mut body = json!({"url": format!("{}{path}", hook_front.url()), "secret": HOOK_SECRET});
        if let Some(ca) = ca {
            body["tls_ca_certificate"] = json!(ca);
        }
        let (status, w) = api.post("/api/v1/webhooks", body).await;
        assert_eq!(status, 201, "{w}");
    }
    // A CA is for https only, and must be a certificate.
    for (url, ca, needle) in [
        ("http://127.0.0.1:9/h", t.ca.as_str(), "https://"),
        ("https://127.0.0.1:9/h", "not a pem", "PEM"),
    ] {
        let (status, err) = api
            .post(
                "/api/v1/webhooks",
                json!({"url": url, "secret": HOOK_SECRET, "tls_ca_certificate": ca}),
            )
            .await;
        assert_eq!(status, 422, "{err}");
        assert!(
            err["error"]["fields"]["tls_ca_certificate"]
                .as_str()
                .unwrap_or_default()
                .contains(needle),
            "{err}"
        );
    }
    let (status, _) = api
        .patch(
            "/api/v1/alert-rules/connect_unreachable",
            json!({"for_secs": 0}),
        )
        .await;
    assert_eq!(status, 200);

    // Connect through the front, trusting the stack's CA: it answers and a connector runs.
    let (status, c) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "https connect", "url": connect_front.url(), "tls_ca_certificate": t.ca}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/connect-clusters/{id}");
    let (status, p) = api.get(&format!("{path}/plugins")).await;
    assert_eq!(
        status, 200,
        "reachable through https with the private CA: {p}"
    );
    assert!(
        p["version"].as_str().unwrap_or_default().starts_with("4."),
        "{p}"
    );
    let name = format!("tls-front-{}", tag());
    let (status, made) = api
        .post(
            "/api/v1/connectors",
            json!({"name": name, "connect_cluster_id": id, "config": {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "file": "/dev/null", "topic": name, "tasks.max": "1"}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let result = async {
        eventually(
            Duration::from_secs(90),
            "the connector RUNNING, observed through the https front",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{name}")).await;
                (c["phase"] == "RUNNING").then_some(())
            },
        )
        .await;
        wait_running(&s.connect_url, &name, Duration::from_secs(30)).await;

        // Another CA: refused, and the certificate problem is named (health, the reconciler's
        // error, the alert and the webhook that trusts the front's CA).
        let (status, patched) = api
            .patch(&path, json!({"tls_ca_certificate": t.other_ca}))
            .await;
        assert_eq!(status, 200, "{patched}");
        let (status, err) = api.get(&format!("{path}/plugins")).await;
        assert_eq!(status, 502, "{err}");
        let message = err["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(
                "TLS: the server's certificate is not signed by the CA in tls_ca_certificate"
            ),
            "{err}"
        );
        let fired = eventually(
            Duration::from_secs(60),
            "connect_unreachable firing with the TLS reason",
            || async { alert(&api, "connect_unreachable", "https connect", "firing").await },
        )
        .await;
        assert!(
            fired["message"]
                .as_str()
                .unwrap_or_default()
                .contains("not signed by the CA in tls_ca_certificate"),
            "{fired}"
        );
        let hook = eventually(
            Duration::from_secs(30),
            "the signed firing webhook through https",
            || async {
                got.lock()
                    .unwrap()
                    .iter()
                    .find(|(p, _, b)| {
                        p == "/trusted"
                            && b["state"] == "firing"
                            && b["alert"]["kind"] == "connect_unreachable"
                    })
                    .cloned()
            },
        )
        .await;
        assert!(hook.1, "signed: {hook:?}");
        // The other two tried (four attempts each, 1 + 2 + 4 s apart) and never got through.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let paths: Vec<String> = got
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _, _)| p.clone())
            .collect();
        assert!(
            paths.iter().all(|p| p == "/trusted"),
            "only the webhook trusting the front's CA is reached: {paths:?}"
        );

        // No CA: the built-in roots do not know the stack's CA either.
        let (status, patched) = api.patch(&path, json!({"tls_ca_certificate": ""})).await;
        assert_eq!(status, 200, "{patched}");
        assert!(patched["tls_ca_certificate"].is_null(), "{patched}");
        let (status, err) = api.get(&format!("{path}/plugins")).await;
        assert_eq!(status, 502, "{err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("(without one, by a CA this machine trusts)"),
            "{err}"
        );
        // A CA with a plain-http URL is refused, naming the field; nothing changes.
        let (status, err) = api
            .patch(
                &path,
                json!({"url": s.connect_url, "tls_ca_certificate": t.ca}),
            )
            .await;
        assert_eq!(status, 422, "{err}");
        assert!(
            err["error"]["fields"]["tls_ca_certificate"]
                .as_str()
                .unwrap_or_default()
                .contains("https://"),
            "{err}"
        );
        let (_, same) = api.get(&path).await;
        assert_eq!(same["url"], connect_front.url());

        // The pages do the same: the edit form shows the stored CA and refuses a bad one
        // inline; the webhook form takes one too.
        let (status, _) = api.patch(&path, json!({"tls_ca_certificate": t.ca})).await;
        assert_eq!(status, 200);
        let b = sign_in(&api.app, "ada", PASSWORD).await;
        let edit = b
            .text(format!("{}/clusters/connect/{id}/edit", b.base))
            .await;
        // A run of the CA's own base64 that HTML escaping leaves alone.
        let probe =
            t.ca.lines()
                .nth(2)
                .unwrap()
                .split(|c: char| !c.is_ascii_alphanumeric())
                .max_by_key(|run| run.len())
                .unwrap();
        assert!(probe.len() >= 8, "{probe}");
        assert!(
            edit.contains(r#"name="tls_ca_certificate""#) && edit.contains(probe),
            "{edit}"
        );
        let res = b
            .client
            .post(format!("{}/clusters/connect/{id}", b.base))
            .form(&[
                ("csrf_token", b.csrf.as_str()),
                ("name", "https connect"),
                ("url", connect_front.url().as_str()),
                ("managed_by", "cluecdc"),
                ("tls_ca_certificate", "not a certificate"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 422);
        let html = res.text().await.unwrap();
        assert!(
            html.contains(r#"id="c-ca-error""#) && html.contains("paste a PEM certificate"),
            "{html}"
        );
        let alerts = b.text(format!("{}/alerts", b.base)).await;
        assert!(
            alerts.contains(r#"id="webhook-ca""#)
                && alerts.contains("trusts only its own CA certificate"),
            "the webhook form takes a CA and the list says which webhooks have one"
        );
    };
    with_cleanup(result, async {
        let _ = api.patch(&path, json!({"tls_ca_certificate": t.ca})).await;
        let _ = api.delete(&format!("/api/v1/connectors/{name}")).await;
        let _ = eventually(
            Duration::from_secs(60),
            "the connector gone from Connect",
            || async {
                connect_status(&s.connect_url, &name)
                    .await
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    })
    .await;
}
