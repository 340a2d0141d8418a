//! MySQL (the stack's real MySQL 9.7 server) as a capture source, driven through ClueCDC's API:
//! connection tests in MySQL's own terms, and one verify-full pipeline.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::*;

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

fn ca() -> String {
    std::fs::read_to_string(var("TLS_CA_FILE")).unwrap()
}

/// A MySQL source connection to the stack's server, verified against the stack's CA.
fn mysql_body(s: &Stack, name: &str, provider: &str, user: &str, password: &str) -> Value {
    json!({"name": name, "provider": provider, "capabilities": ["SOURCE"],
        "settings": {"host": s.mysql_host, "port": s.mysql_port, "database": s.mysql_db, "user": user,
            "tls_mode": "verify-full", "ca_certificate": ca()},
        "secrets": {"password": password}})
}

/// The stack's MySQL as root (fixtures, grants, binlog purges).
async fn root(s: &Stack) -> sqlx::MySqlConnection {
    sqlx::MySqlConnection::connect(&s.mysql_root_url(&s.mysql_db))
        .await
        .unwrap()
}

/// Each statement as plain text (`PURGE BINARY LOGS` has no prepared form).
async fn run(db: &mut sqlx::MySqlConnection, sqls: &[String]) {
    for sql in sqls {
        sqlx::raw_sql(sql)
            .execute(&mut *db)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

/// The signal table as an admin makes it for a capture user with exactly Debezium's grants
/// (no CREATE, no INSERT): the statements the connection test's `signal table` check names.
async fn signal_fixture(s: &Stack) {
    let mut r = root(s).await;
    run(
        &mut r,
        &[
            format!("CREATE TABLE IF NOT EXISTS `{}`.`cluecdc_signal` (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)", s.mysql_db),
            format!("GRANT INSERT ON `{}`.`cluecdc_signal` TO '{}'@'%'", s.mysql_db, s.mysql_user),
        ],
    )
    .await;
}

#[tokio::test]
async fn mysql_connection_tests_pass_for_the_capture_user_and_name_a_wrong_password_missing_replication_grants_plain_text_and_the_wrong_provider(
) {
    let s = stack();
    let api = admin_api();
    let tag = tag();
    signal_fixture(&s).await;
    let (c, report) = test_connection(
        &api,
        mysql_body(&s, "mysql", "MYSQL", &s.mysql_user, &s.mysql_password),
    )
    .await;
    assert_eq!(report["ok"], true, "{report}");
    for name in [
        "reachable",
        "version",
        "binlog",
        "binlog format",
        "row image",
        "gtid",
        "binlog retention",
        "server id",
        "privileges",
        "signal table",
    ] {
        assert_eq!(check(&report, name)["status"], "pass", "{name}: {report}");
    }
    assert!(
        check(&report, "version")["message"]
            .as_str()
            .unwrap()
            .starts_with("9."),
        "{report}"
    );
    // The connector joins as a replica with the connection's own server_id, not the server's.
    let ours = c["settings"]["server_id"].as_u64().unwrap();
    let said = check(&report, "server id")["message"].as_str().unwrap();
    assert!(said.contains(&format!("replica {ours}")), "{said}");

    // A wrong password: the server's refusal and what to check; the password nowhere.
    let wrong = "not-the-password-77";
    let (bad, report) = test_connection(
        &api,
        mysql_body(&s, "mysql bad", "MYSQL", &s.mysql_user, wrong),
    )
    .await;
    assert_eq!(report["ok"], false);
    let first = &report["checks"][0];
    assert_eq!(
        (first["name"].as_str(), first["status"].as_str()),
        (Some("reachable"), Some("fail")),
        "{report}"
    );
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("Access denied for user"),
        "{report}"
    );
    assert!(
        first["hint"]
            .as_str()
            .unwrap()
            .contains("check the user and password"),
        "{report}"
    );
    assert_eq!(report["checks"].as_array().unwrap().len(), 1, "{report}");
    let (_, stored) = api
        .get(&format!(
            "/api/v1/connections/{}",
            bad["id"].as_str().unwrap()
        ))
        .await;
    assert!(
        !report.to_string().contains(wrong) && !stored.to_string().contains(wrong),
        "the password is neither said nor shown: {report} {stored}"
    );

    // Plain text: MySQL 9's caching_sha2_password asks ClueCDC's client for the full
    // authentication (an RSA exchange) at every login, which the guard refuses before any
    // password leaves; the fix is verified TLS.
    let mut plain = mysql_body(&s, "mysql plain", "MYSQL", &s.mysql_user, &s.mysql_password);
    plain["settings"]["tls_mode"] = json!("disable");
    plain["settings"]["ca_certificate"] = Value::Null;
    let (_, report) = test_connection(&api, plain).await;
    assert_eq!(report["ok"], false, "{report}");
    let first = &report["checks"][0];
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("refused to send the password: the server asked for caching_sha2_password's full authentication"),
        "{report}"
    );
    assert!(
        first["hint"]
            .as_str()
            .unwrap()
            .starts_with("set tls_mode verify-full"),
        "{report}"
    );

    // A user without the replication grants: the privileges check names what is missing and
    // the GRANT; the signal table check what an admin runs.
    let user = format!("norepl_{}", &tag[tag.len() - 6..]);
    let mut r = root(&s).await;
    run(
        &mut r,
        &[
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'norepl-pw-123'"),
            format!("GRANT SELECT ON *.* TO '{user}'@'%'"),
        ],
    )
    .await;
    let tested_norepl = async {
        let (_, report) = test_connection(
            &api,
            mysql_body(&s, "mysql norepl", "MYSQL", &user, "norepl-pw-123"),
        )
        .await;
        assert_eq!(report["ok"], false, "{report}");
        let p = check(&report, "privileges");
        assert_eq!(p["status"], "fail", "{report}");
        assert_eq!(
            p["message"], "missing REPLICATION SLAVE, REPLICATION CLIENT",
            "{report}"
        );
        assert!(
            p["hint"]
                .as_str()
                .unwrap()
                .contains("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT"),
            "{report}"
        );
        let sig = check(&report, "signal table");
        assert_eq!(sig["status"], "warn", "{report}");
        assert!(
            sig["hint"].as_str().unwrap().contains(&format!(
                "GRANT INSERT ON `{}`.`cluecdc_signal` TO '{user}'",
                s.mysql_db
            )),
            "{report}"
        );
    };
    with_cleanup(tested_norepl, async {
        let mut r = root(&s).await;
        let _ = sqlx::query(&format!("DROP USER IF EXISTS '{user}'@'%'"))
            .execute(&mut r)
            .await;
    })
    .await;

    // A CA that did not sign the server's certificate: named as such, no password sent.
    let mut other = mysql_body(
        &s,
        "mysql other ca",
        "MYSQL",
        &s.mysql_user,
        &s.mysql_password,
    );
    other["settings"]["ca_certificate"] =
        json!(std::fs::read_to_string(var("TLS_OTHER_CA_FILE")).unwrap());
    let (_, report) = test_connection(&api, other).await;
    assert_eq!(report["ok"], false, "{report}");
    let first = &report["checks"][0];
    assert_eq!(first["name"], "reachable", "{report}");
    assert!(
        first["hint"]
            .as_str()
            .unwrap()
            .contains("not signed by the CA"),
        "{report}"
    );

    // The MySQL server registered as MARIADB: refused on its provider, naming MYSQL; nothing
    // else is checked.
    let (_, report) = test_connection(
        &api,
        mysql_body(
            &s,
            "mysql as maria",
            "MARIADB",
            &s.mysql_user,
            &s.mysql_password,
        ),
    )
    .await;
    assert_eq!(report["ok"], false, "{report}");
    let last = report["checks"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["name"].as_str(), last["status"].as_str()),
        (Some("provider"), Some("fail")),
        "{report}"
    );
    let message = last["message"].as_str().unwrap();
    assert!(
        message.contains("the server is MySQL (9.") && message.contains("provider is MARIADB"),
        "{message}"
    );
    assert!(
        last["hint"].as_str().unwrap().contains("provider MYSQL"),
        "{last}"
    );
    assert_eq!(report["checks"].as_array().unwrap().len(), 2, "{report}");
}

/// One change event as read from Kafka (JSON with schemas: the payloads), with where it is.
#[derive(Debug, Clone)]
struct Event {
    partition: i32,
    offset: i64,
    key: Value,
    value: Option<Value>,
}

impl Event {
    fn op(&self) -> Option<&str> {
        self.value.as_ref().and_then(|v| v["op"].as_str())
    }
}

/// Every record a topic holds now (up to its end offsets), read without a consumer group.
async fn topic_events(topic: &str) -> Vec<Event> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
    let bootstrap = stack().kafka_bootstrap;
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "it-mysql-reader")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let t = Duration::from_secs(10);
        let Ok(md) = c.fetch_metadata(Some(&topic), t) else {
            return vec![];
        };
        let mut tpl = TopicPartitionList::new();
        let mut ends = std::collections::HashMap::new();
        for p in md.topics().iter().flat_map(|t| t.partitions()) {
            let (lo, hi) = c.fetch_watermarks(&topic, p.id(), t).unwrap_or((0, 0));
            if hi > lo {
                tpl.add_partition_offset(&topic, p.id(), Offset::Offset(lo))
                    .unwrap();
                ends.insert(p.id(), hi);
            }
        }
        let mut out = Vec::new();
        if ends.is_empty() {
            return out;
        }
        c.assign(&tpl).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !ends.is_empty() && std::time::Instant::now() < deadline {
            let Some(Ok(m)) = c.poll(Duration::from_millis(500)) else {
                continue;
            };
            let parse = |b: Option<&[u8]>| {
                b.and_then(|b| serde_json::from_slice::<Value>(b).ok())
                    .map(|v| v["payload"].clone())
            };
            out.push(Event {
                partition: m.partition(),
                offset: m.offset(),
                key: parse(m.key()).unwrap_or(Value::Null),
                value: parse(m.payload()),
            });
            if ends
                .get(&m.partition())
                .is_some_and(|end| m.offset() + 1 >= *end)
            {
                ends.remove(&m.partition());
            }
        }
        out
    })
    .await
    .unwrap()
}

fn ops(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.op().unwrap_or("tombstone"))
        .collect()
}

/// Waits until `topic` holds records for which `done` holds; those records.
async fn events_until(
    topic: &str,
    within: Duration,
    done: impl Fn(&[Event]) -> bool,
) -> Vec<Event> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let events = topic_events(topic).await;
        if done(&events) {
            return events;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "{topic}: not there within {within:?}; it holds {:?}",
                ops(&events)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Rows of a table as text, ordered: the same query on the source and the destination.
async fn mysql_rows(s: &Stack, sql: &str) -> Vec<Vec<String>> {
    use sqlx::Row;
    let mut r = root(s).await;
    sqlx::query(sql)
        .fetch_all(&mut r)
        .await
        .unwrap()
        .iter()
        .map(|row| (0..row.len()).map(|i| row.get::<String, _>(i)).collect())
        .collect()
}

async fn pg_rows(s: &Stack, sql: &str) -> Vec<Vec<String>> {
    use sqlx::Row;
    let mut c = sqlx::PgConnection::connect(&s.pg_url(&s.pg_dest_db))
        .await
        .unwrap();
    match sqlx::query(sql).fetch_all(&mut c).await {
        Ok(rows) => rows
            .iter()
            .map(|row| (0..row.len()).map(|i| row.get::<String, _>(i)).collect())
            .collect(),
        Err(_) => vec![],
    }
}

/// Every line in the objects under `prefix` by (topic, partition, offset): its op, or
/// "tombstone". Topic and partition come from the default key (`…/<topic>-<partition>-<start>`).
async fn object_ops(
    s: &Stack,
    prefix: &str,
) -> std::collections::BTreeMap<(String, i32, i64), String> {
    let mut out = std::collections::BTreeMap::new();
    for (key, lines) in crate::object_storage::objects(s, prefix).await {
        let file = key.rsplit('/').next().unwrap();
        let stem = file.trim_end_matches(".gz").trim_end_matches(".jsonl");
        let mut parts = stem.rsplitn(3, '-');
        let _start = parts.next();
        let partition: i32 = parts.next().unwrap().parse().unwrap();
        let topic = parts.next().unwrap().to_string();
        for l in lines {
            let op = l["value"]["op"].as_str().unwrap_or("tombstone").to_string();
            out.insert(
                (topic.clone(), partition, l["offset"].as_i64().unwrap()),
                op,
            );
        }
    }
    out
}

async fn remove_objects(s: &Stack, prefix: &str) {
    let s3 = s.s3_client(&s.s3_secret_key);
    let Ok(page) = s3
        .list_objects_v2()
        .bucket(&s.s3_bucket)
        .prefix(prefix)
        .send()
        .await
    else {
        return;
    };
    for o in page.contents() {
        let _ = s3
            .delete_object()
            .bucket(&s.s3_bucket)
            .key(o.key().unwrap_or_default())
            .send()
            .await;
    }
}

/// One verify-full MySQL pipeline carries the whole story, in order: snapshot, streaming into a
/// PostgreSQL JDBC delivery and an object-storage delivery, its position in MySQL's terms, an
/// incremental re-snapshot of one table, a pause past which the binlog is purged (the alert, the
/// failed restart, the reset that fixes it), and a CA the worker's connector refuses.
#[tokio::test]
async fn a_verify_full_mysql_pipeline_streams_into_postgres_and_minio_shows_its_binlog_position_resnapshots_a_table_alerts_on_a_purge_that_a_reset_fixes_and_fails_on_a_wrong_ca(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_OFFSETS_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let db = s.mysql_db.clone();
    let (items, lines) = (format!("my_{tag}_items"), format!("my_{tag}_lines"));
    signal_fixture(&s).await;
    let mut r = root(&s).await;
    run(
        &mut r,
        &[
            format!("CREATE TABLE {items} (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL, qty INT NOT NULL)"),
            format!("CREATE TABLE {lines} (order_id INT, line INT, sku VARCHAR(20) NOT NULL, PRIMARY KEY (order_id, line))"),
            format!("INSERT INTO {items} VALUES (1, 'apple', 3), (2, 'pear', 5)"),
            format!("INSERT INTO {lines} VALUES (10, 1, 'A-1'), (10, 2, 'B-2')"),
        ],
    )
    .await;
    let src = api
        .connection(mysql_body(
            &s,
            &format!("mysql {tag}"),
            "MYSQL",
            &s.mysql_user,
            &s.mysql_password,
        ))
        .await;
    let dest = api.connection(json!({"name": "pg dest", "provider": "POSTGRESQL", "capabilities": ["DESTINATION"],
        "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_dest_db, "user": s.pg_user, "tls_mode": "disable"},
        "secrets": {"password": s.pg_password}})).await;
    let object_prefix = format!("my{}/", tag.replace('_', ""));
    let lake = api.connection(json!({"name": "lake", "provider": "MINIO", "capabilities": ["DESTINATION"],
        "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": object_prefix, "path_style": true, "use_ssl": false},
        "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})).await;
    let prefix = format!("my-{}", tag.replace('_', "-"));
    let name = format!("mysql orders {tag}");
    let connector = format!("cluecdc-capture-{prefix}");
    let (t_items, t_lines) = (
        format!("{prefix}.{db}.{items}"),
        format!("{prefix}.{db}.{lines}"),
    );
    let id = std::cell::RefCell::new(String::new());
    let deliveries = std::cell::RefCell::new(Vec::<String>::new());
    let result = async {
        // Discovery: both tables with their keys, the composite one in its order.
        let (status, found) = api
            .get(&format!(
                "/api/v1/connections/{}/tables",
                src["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(status, 200, "{found}");
        let key_of = |t: &str| {
            found["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == t)
                .map(|x| x["primary_key"].clone())
        };
        assert_eq!(key_of(&lines), Some(json!(["order_id", "line"])), "{found}");
        assert_eq!(key_of(&items), Some(json!(["id"])), "{found}");

        // The preview: Debezium's MySQL plugin accepts the config (with the truststore the
        // provider builds), and the opt-in heartbeat's upsert runs on MySQL 9 without a
        // warning (run here in a temporary table of the same name, which hides the real one).
        let (status, pv) = api.post("/api/v1/pipelines/preview", json!({"name": name, "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect,
            "tables": [format!("{db}.{items}"), format!("{db}.{lines}")], "topic_prefix": prefix, "heartbeat": true})).await;
        assert_eq!(status, 200, "{pv}");
        assert_eq!(pv["validation_errors"], json!({}), "{pv}");
        let heartbeat = pv["config"]["heartbeat.action.query"]
            .as_str()
            .unwrap()
            .to_string();
        run(&mut r, &[format!("CREATE TEMPORARY TABLE `{db}`.`cluecdc_heartbeat` (id INT PRIMARY KEY, ts_ms BIGINT NOT NULL)")]).await;
        let warnings = sqlx::raw_sql(&format!("{heartbeat}; {heartbeat}; SHOW WARNINGS"))
            .fetch_all(&mut r)
            .await
            .unwrap();
        assert_eq!(
            warnings.len(),
            0,
            "{heartbeat}: no warning (VALUES() is deprecated on MySQL)"
        );
        let beats: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM `{db}`.`cluecdc_heartbeat` WHERE ts_ms > 0"
        ))
        .fetch_one(&mut r)
        .await
        .unwrap();
        assert_eq!(beats, 1, "one row, upserted");
        run(
            &mut r,
            &[format!("DROP TEMPORARY TABLE `{db}`.`cluecdc_heartbeat`")],
        )
        .await;

        let (status, p) = api.post("/api/v1/pipelines", json!({"name": name, "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect,
            "tables": [format!("{db}.{items}"), format!("{db}.{lines}")], "topic_prefix": prefix})).await;
        assert_eq!(status, 201, "{p}");
        *id.borrow_mut() = p["id"].as_str().unwrap().to_string();
        let id = id.borrow().clone();
        crate::pipelines::wait_pipeline_running(&api, &id).await;

        // The connector on the worker verifies too: verify_identity against a truststore the
        // config provider built from the connection's CA; Connect holds references only.
        let live: Value = connect_config(&s, &connector)
            .await
            .expect("the connector in Connect");
        assert_eq!(
            live["connector.class"],
            "io.debezium.connector.mysql.MySqlConnector"
        );
        assert_eq!(live["database.ssl.mode"], "verify_identity", "{live}");
        assert_eq!(
            live["database.ssl.truststore"],
            format!(
                "${{cluecdc:{}:ca_truststore_file}}",
                src["secret_ref"].as_str().unwrap_or("?")
            ),
            "{live}"
        );
        assert!(
            !live.to_string().contains("BEGIN CERTIFICATE")
                && !live.to_string().contains(&s.mysql_password)
        );

        for body in [
            json!({"name": "to pg", "pipeline_id": id, "destination_connection_id": dest["id"], "table_name_format": "${source.table}"}),
            json!({"name": "to lake", "pipeline_id": id, "destination_connection_id": lake["id"], "compression": "none"}),
        ] {
            let (status, d) = api.post("/api/v1/deliveries", body).await;
            assert_eq!(status, 201, "{d}");
            deliveries
                .borrow_mut()
                .push(d["id"].as_str().unwrap().to_string());
        }

        // The snapshot: r events from MySQL, with the binlog position and GTID in the source.
        let snap = events_until(&t_items, Duration::from_secs(120), |e| ops(e) == ["r", "r"]).await;
        let source = &snap[0].value.as_ref().unwrap()["source"];
        assert_eq!(source["connector"], "mysql", "{source}");
        assert!(
            source["file"].as_str().unwrap().starts_with("binlog."),
            "{source}"
        );
        events_until(&t_lines, Duration::from_secs(60), |e| ops(e) == ["r", "r"]).await;

        // Streaming: c/u/d with full row images and a tombstone after each delete.
        run(
            &mut r,
            &[
                format!("INSERT INTO {items} VALUES (3, 'fig', 7)"),
                format!("UPDATE {items} SET qty = 4, name = 'green apple' WHERE id = 1"),
                format!("DELETE FROM {items} WHERE id = 2"),
                format!("INSERT INTO {lines} VALUES (11, 1, 'C-3')"),
                format!("UPDATE {lines} SET sku = 'B-22' WHERE order_id = 10 AND line = 2"),
                format!("DELETE FROM {lines} WHERE order_id = 10 AND line = 1"),
            ],
        )
        .await;
        let want = ["r", "r", "c", "u", "d", "tombstone"];
        let ev = events_until(&t_items, Duration::from_secs(60), |e| ops(e) == want).await;
        let u = ev[3].value.clone().unwrap();
        assert_eq!(
            u["before"],
            json!({"id": 1, "name": "apple", "qty": 3}),
            "full row image"
        );
        assert_eq!(
            u["after"],
            json!({"id": 1, "name": "green apple", "qty": 4})
        );
        assert!(
            u["source"]["gtid"]
                .as_str()
                .is_some_and(|g| g.contains(':')),
            "each change carries its GTID: {u}"
        );
        assert_eq!(ev[4].value.as_ref().unwrap()["before"]["id"], 2);
        assert_eq!(ev[5].key, json!({"id": 2}));
        let ev = events_until(&t_lines, Duration::from_secs(60), |e| ops(e) == want).await;
        assert_eq!(
            ev[5].key,
            json!({"order_id": 10, "line": 1}),
            "the composite key"
        );

        // The PostgreSQL delivery: rows equal to the source, both tables.
        for (t, cols) in [(&items, "id, name, qty"), (&lines, "order_id, line, sku")] {
            let want = mysql_rows(
                &s,
                &format!("SELECT {} FROM {t} ORDER BY 1, 2", cast_mysql(cols)),
            )
            .await;
            assert_eq!(want.len(), 2);
            eventually(
                Duration::from_secs(120),
                &format!("{t} in PostgreSQL equal to the source"),
                || async {
                    (pg_rows(
                        &s,
                        &format!("SELECT {} FROM \"{t}\" ORDER BY 1, 2", cast_pg(cols)),
                    )
                    .await
                        == want)
                        .then_some(())
                },
            )
            .await;
        }
        // The object-storage delivery: every record of both topics, each with its op.
        for t in [&t_items, &t_lines] {
            let kafka: Vec<(i32, i64, String)> = topic_events(t)
                .await
                .iter()
                .map(|e| {
                    (
                        e.partition,
                        e.offset,
                        e.op().unwrap_or("tombstone").to_string(),
                    )
                })
                .collect();
            assert_eq!(kafka.len(), 6);
            eventually(
                Duration::from_secs(120),
                &format!("every record of {t} in the objects"),
                || async {
                    let got = object_ops(&s, &object_prefix).await;
                    kafka
                        .iter()
                        .all(|(p, o, op)| got.get(&(t.to_string(), *p, *o)) == Some(op))
                        .then_some(())
                },
            )
            .await;
        }

        // Where it stands, in MySQL's terms: binlog file:position and the executed GTID set,
        // on a file the server keeps, at a distance from its head.
        let server_uuid: String = sqlx::query_scalar("SELECT @@server_uuid")
            .fetch_one(&mut r)
            .await
            .unwrap();
        let detail = eventually(Duration::from_secs(60), "the source position", || async {
            let (_, d) = api.get(&format!("/api/v1/pipelines/{id}")).await;
            d["source_position"]["binlog_file"].is_string().then_some(d)
        })
        .await;
        let pos = &detail["source_position"];
        assert!(
            pos["binlog_file"].as_str().unwrap().starts_with("binlog."),
            "{pos}"
        );
        assert!(pos["binlog_pos"].as_i64().unwrap() > 0, "{pos}");
        assert!(
            pos["gtids"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("{server_uuid}:")),
            "the GTID set names the server: {pos}"
        );
        let b = &detail["binlog"];
        assert_eq!(b["position_kept"], true, "{b}");
        assert_eq!(b["connector_file"], pos["binlog_file"], "{b}");
        assert!(
            b["bytes_after_oldest"].as_i64().unwrap() > 0
                && b["bytes_behind"].as_i64().unwrap() >= 0,
            "{b}"
        );
        let html = api.text(&format!("/pipelines/{id}")).await;
        assert!(
            html.contains(pos["binlog_file"].as_str().unwrap()),
            "the page shows the binlog file"
        );

        // An incremental re-snapshot of one table: exactly its rows again as r events, and
        // nothing from the other table.
        let (status, sent) = api
            .post(
                &format!("/api/v1/pipelines/{id}/resnapshot"),
                json!({"tables": [format!("{db}.{lines}")]}),
            )
            .await;
        assert!(status < 300, "{sent}");
        let ev = events_until(&t_lines, Duration::from_secs(90), |e| {
            ops(e).iter().filter(|o| **o == "r").count() >= 4
        })
        .await;
        eventually(
            Duration::from_secs(60),
            "the incremental snapshot finished",
            || async {
                let (_, d) = api.get(&format!("/api/v1/pipelines/{id}")).await;
                // The finished snapshot stays shown, with its finish time.
                (d["snapshot"]["kind"] == "incremental" && d["snapshot"]["state"] == "completed")
                    .then_some(())
            },
        )
        .await;
        let again: Vec<Value> = topic_events(&t_lines).await[6..]
            .iter()
            .filter(|e| e.op() == Some("r"))
            .map(|e| e.key.clone())
            .collect();
        assert_eq!(
            again,
            vec![
                json!({"order_id": 10, "line": 2}),
                json!({"order_id": 11, "line": 1})
            ],
            "exactly the table's rows again: {:?}",
            ops(&ev)
        );
        assert_eq!(
            topic_events(&t_items).await.len(),
            6,
            "the other table is not read again"
        );

        // Paused, the binary log moves on and is purged past the connector's position: the
        // purge alert fires, with its fix.
        let (status, _) = api
            .post(&format!("/api/v1/pipelines/{id}/pause"), json!({}))
            .await;
        assert_eq!(status, 200);
        eventually(Duration::from_secs(30), "the connector PAUSED", || async {
            connect_status(&s.connect_url, &connector)
                .await
                .filter(|st| st["connector"]["state"] == "PAUSED")
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (_, d) = api.get(&format!("/api/v1/pipelines/{id}")).await;
        let at = d["source_position"]["binlog_file"]
            .as_str()
            .unwrap()
            .to_string();
        let behind = d["binlog"]["bytes_behind"].as_i64().unwrap();
        for n in 0..3 {
            run(
                &mut r,
                &[
                    format!(
                        "INSERT INTO {items} VALUES ({}, 'while paused', 1)",
                        100 + n
                    ),
                    "FLUSH BINARY LOGS".into(),
                ],
            )
            .await;
        }
        let (_, d) = api.get(&format!("/api/v1/pipelines/{id}")).await;
        assert_eq!(
            d["binlog"]["connector_file"],
            at.as_str(),
            "paused: its committed position stays"
        );
        assert!(
            d["binlog"]["bytes_behind"].as_i64().unwrap() > behind,
            "the distance grows: {}",
            d["binlog"]
        );
        assert!(
            d["binlog"]["files"].as_i64().unwrap() >= 4,
            "{}",
            d["binlog"]
        );
        use sqlx::Row;
        let files: Vec<String> = sqlx::query("SHOW BINARY LOGS")
            .fetch_all(&mut r)
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<String, _>(0))
            .collect();
        let head = files.last().unwrap().clone();
        assert!(at < head, "{at} before {head}");
        run(&mut r, &[format!("PURGE BINARY LOGS TO '{head}'")]).await;
        let fired = eventually(
            Duration::from_secs(60),
            "binlog_position_lost firing",
            || alert(&api, "binlog_position_lost", &name, "firing"),
        )
        .await;
        let said = fired["message"].as_str().unwrap();
        assert!(
            said.contains(&format!(
                "the binlog {at} that pipeline {name} was reading is purged"
            )),
            "{said}"
        );
        assert!(said.contains("reset"), "the fix: {said}");
        let (_, d) = api.get(&format!("/api/v1/pipelines/{id}")).await;
        assert_eq!(d["binlog"]["position_kept"], false, "{d}");

        // A task started from the purged position fails, for good: Debezium says so, and
        // ClueCDC does not restart it but says what to do.
        let (status, _) = api
            .post(&format!("/api/v1/pipelines/{id}/restart"), json!({}))
            .await;
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (status, _) = api
            .post(&format!("/api/v1/pipelines/{id}/resume"), json!({}))
            .await;
        assert_eq!(status, 200);
        let failed = eventually(
            Duration::from_secs(60),
            "the connector FAILED on the purged position, with its trace",
            || async {
                // The phase and the task's trace can come a pass apart.
                let (_, c) = api.get(&format!("/api/v1/connectors/{connector}")).await;
                (c["phase"] == "FAILED" && c["trace"].is_string()).then_some(c)
            },
        )
        .await;
        assert!(
            failed["trace"]
                .as_str()
                .unwrap()
                .contains("no longer available on the server"),
            "{failed}"
        );
        assert!(
            failed["message"]
                .as_str()
                .unwrap()
                .starts_with("failed (source position purged); not restarting:")
                && failed["message"]
                    .as_str()
                    .unwrap()
                    .contains("reset and re-snapshot the pipeline"),
            "{failed}"
        );
        assert_eq!(failed["restart_attempts"], 0, "{failed}");

        // The fix: reset and re-snapshot; it runs from a kept position again, every row read anew.
        let (status, started) = api
            .post(
                &format!("/api/v1/pipelines/{id}/reset"),
                json!({"confirm": name}),
            )
            .await;
        assert_eq!(status, 202, "{started}");
        let op = operation_ends(&api, started["operation_id"].as_str().unwrap()).await;
        assert_eq!(op["state"], "done", "{op}");
        wait_running(&s.connect_url, &connector, Duration::from_secs(60)).await;
        eventually(
            Duration::from_secs(120),
            "the purge alert resolved",
            || async {
                let (_, list) = api.get("/api/v1/alerts").await;
                list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|a| a["id"] == fired["id"] && a["state"] == "resolved")
                    .cloned()
            },
        )
        .await;
        // items now: 1, 3 and the three written while paused.
        events_until(&t_items, Duration::from_secs(60), |e| {
            ops(e).iter().filter(|o| **o == "r").count() == 2 + 5
        })
        .await;

        // The worker verifies the server against the connection's CA, not merely encrypts:
        // with a CA that signed nothing of the server's, the restarted task fails on it.
        let other_ca = std::fs::read_to_string(var("TLS_OTHER_CA_FILE")).unwrap();
        let (status, _) = api
            .patch(
                &format!("/api/v1/connections/{}", src["id"].as_str().unwrap()),
                json!({"settings": {"ca_certificate": other_ca}}),
            )
            .await;
        assert_eq!(status, 200);
        let (status, _) = api
            .post(&format!("/api/v1/pipelines/{id}/restart"), json!({}))
            .await;
        assert_eq!(status, 200);
        let untrusted = eventually(
            Duration::from_secs(90),
            "the connector FAILED on the certificate",
            || async {
                let (_, c) = api.get(&format!("/api/v1/connectors/{connector}")).await;
                (c["phase"] == "FAILED" && c["message"].as_str().unwrap_or("").contains("TLS"))
                    .then_some(c)
            },
        )
        .await;
        assert!(
            untrusted["message"]
                .as_str()
                .unwrap()
                .starts_with("failed (TLS certificate not trusted); not restarting:"),
            "{untrusted}"
        );
        // Like MariaDB's and unlike PostgreSQL's, the MySQL task fails in Connect itself: its
        // first query at start is not retried. Connector/J's own trust manager (over the
        // provider's truststore) names the certificate.
        // Read until Connect's own status shows the task (once, beside the suite, the
        // connector still showed RESTARTING here with the task starting).
        let live = eventually(
            Duration::from_secs(30),
            "Connect shows the task",
            || async {
                let live = connect_status(&s.connect_url, &connector).await?;
                let settled = ["FAILED", "PAUSED", "STOPPED"].map(serde_json::Value::from);
                (live["connector"]["state"] != "RESTARTING"
                    && settled.contains(&live["tasks"][0]["state"]))
                .then_some(live)
            },
        )
        .await;
        assert_eq!(live["tasks"][0]["state"], "FAILED", "{live}");
        assert!(
            live["tasks"][0]["trace"]
                .as_str()
                .unwrap()
                .contains("Path does not chain with any of the trust anchors"),
            "{live}"
        );
    };
    let cleanup = async {
        let id = id.borrow().clone();
        let made = deliveries.borrow().clone();
        for d in &made {
            let _ = api.delete(&format!("/api/v1/deliveries/{d}")).await;
        }
        if !id.is_empty() {
            let _ = api.delete(&format!("/api/v1/pipelines/{id}")).await;
        }
        delete_connector(&s.connect_url, &connector).await;
        let mut r = root(&s).await;
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {items}, {lines}"))
            .execute(&mut r)
            .await;
        if let Ok(mut pg) = sqlx::PgConnection::connect(&s.pg_url(&s.pg_dest_db)).await {
            let _ = sqlx::query(&format!("DROP TABLE IF EXISTS \"{items}\", \"{lines}\""))
                .execute(&mut pg)
                .await;
        }
        remove_objects(&s, &object_prefix).await;
    };
    with_cleanup(result, cleanup).await;
}

fn cast_mysql(cols: &str) -> String {
    cols.split(", ")
        .map(|c| format!("CAST({c} AS CHAR)"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cast_pg(cols: &str) -> String {
    cols.split(", ")
        .map(|c| format!("{c}::text"))
        .collect::<Vec<_>>()
        .join(", ")
}
