//! Pipelines end to end, driven only through ClueCDC's API: Debezium captures PostgreSQL and
//! MariaDB tables into the topics ClueCDC created; the events are read back with rdkafka.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message};
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

/// One Debezium change event as read from Kafka (JSON with schemas: the `payload`s).
#[derive(Debug, Clone)]
struct Event {
    key: Value,
    value: Option<Value>,
}

impl Event {
    fn op(&self) -> Option<&str> {
        self.value.as_ref().and_then(|v| v["op"].as_str())
    }
}

/// Reads a topic from the beginning until `done` holds for what was read, or the deadline.
async fn read_until(
    topic: &str,
    within: Duration,
    done: impl Fn(&[Event]) -> bool + Send + 'static,
) -> Vec<Event> {
    let bootstrap = stack().kafka_bootstrap;
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", format!("it-{}", uuid_like()))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&[&topic]).unwrap();
        let deadline = std::time::Instant::now() + within;
        let mut events = Vec::new();
        while std::time::Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
                let parse = |b: Option<&[u8]>| {
                    b.and_then(|b| serde_json::from_slice::<Value>(b).ok())
                        .map(|v| v["payload"].clone())
                };
                events.push(Event {
                    key: parse(m.key()).unwrap_or(Value::Null),
                    value: parse(m.payload()),
                });
            }
            if done(&events) {
                return events;
            }
        }
        panic!("topic {topic}: condition not met within {within:?}; read {events:#?}")
    })
    .await
    .unwrap()
}

fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn count(events: &[Event], op: &str) -> usize {
    events.iter().filter(|e| e.op() == Some(op)).count()
}

async fn pg_as_connector_user(s: &Stack) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap()
}

async fn pg_source(api: &Api, s: &Stack, tag: &str) -> Value {
    api.connection(json!({"name": format!("pg {tag}"), "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
        "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": format!("pl_{tag}"), "publication_name": format!("pl_{tag}")},
        "secrets": {"password": s.pg_password}}))
    .await
}

pub async fn wait_pipeline_running(api: &Api, id: &str) -> Value {
    eventually(
        Duration::from_secs(120),
        "the pipeline's connector RUNNING",
        || async {
            let (_, p) = api.get(&format!("/api/v1/pipelines/{id}")).await;
            (p["connector"]["phase"] == "RUNNING").then_some(p)
        },
    )
    .await
}

async fn slot_exists(s: &Stack, slot: &str) -> bool {
    let pg = pg_superuser(s).await;
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)")
        .bind(slot)
        .fetch_one(&pg)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_postgres_pipeline_snapshots_then_streams_inserts_updates_and_deletes_and_keeps_its_slot_on_plain_delete(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    // Connect's committed offsets read every 2 s (60 s by default), for the source position.
    let api = admin_api_with(&[("CLUECDC_OFFSETS_INTERVAL", "2s")]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("pl_{tag}");
    let mut db = pg_as_connector_user(&s).await;
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.customers (id int PRIMARY KEY, name text NOT NULL)"),
        format!("CREATE TABLE {schema}.order_lines (order_id int, line int, sku text NOT NULL, qty int NOT NULL, PRIMARY KEY (order_id, line))"),
        format!("INSERT INTO {schema}.customers VALUES (1, 'Ada'), (2, 'Grace')"),
        format!("INSERT INTO {schema}.order_lines VALUES (10, 1, 'apple', 3), (10, 2, 'pear', 1)"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = pg_source(&api, &s, &tag).await;
    let prefix = format!("pl-{}", tag.replace('_', "-"));
    let body = json!({"name": format!("orders {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect,
        "tables": [format!("{schema}.customers"), format!("{schema}.order_lines")], "topic_prefix": prefix, "partitions": 1, "replication_factor": 1});
    let (status, preview) = api.post("/api/v1/pipelines/preview", body.clone()).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        preview["validation_errors"],
        json!({}),
        "the real plugin accepts the generated config"
    );
    assert!(preview["config"]["database.password"]
        .as_str()
        .unwrap()
        .starts_with("${cluecdc:"));
    let (status, pipeline) = api.post("/api/v1/pipelines", body).await;
    assert_eq!(status, 201, "{pipeline}");
    let id = pipeline["id"].as_str().unwrap().to_string();
    let customers = format!("{prefix}.{schema}.customers");
    let lines = format!("{prefix}.{schema}.order_lines");
    let (_, topics) = api
        .get(&format!(
            "/api/v1/kafka-clusters/{kafka}/topics?q={prefix}."
        ))
        .await;
    let names: Vec<&str> = topics["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&customers.as_str()) && names.contains(&lines.as_str()),
        "ClueCDC created the topics itself"
    );

    let result = async {
        let detail = wait_pipeline_running(&api, &id).await;
        let snap = read_until(&customers, Duration::from_secs(90), |e| count(e, "r") >= 2).await;
        let ada = snap
            .iter()
            .find(|e| {
                e.value
                    .as_ref()
                    .is_some_and(|v| v["after"]["name"] == "Ada")
            })
            .expect("Ada snapshotted");
        assert_eq!(ada.key, json!({"id": 1}));
        let source = &ada.value.as_ref().unwrap()["source"];
        assert_eq!(source["connector"], "postgresql");
        assert_eq!(source["schema"], schema.as_str());
        assert_eq!(source["table"], "customers");
        assert!(ada.value.as_ref().unwrap()["ts_ms"].is_number());
        read_until(&lines, Duration::from_secs(60), |e| count(e, "r") >= 2).await;

        for sql in [
            format!("INSERT INTO {schema}.customers VALUES (3, 'Barbara')"),
            format!("UPDATE {schema}.customers SET name = 'Ada L.' WHERE id = 1"),
            format!("DELETE FROM {schema}.customers WHERE id = 2"),
            format!("INSERT INTO {schema}.order_lines VALUES (11, 1, 'fig', 7)"),
            format!("UPDATE {schema}.order_lines SET qty = 4 WHERE order_id = 10 AND line = 1"),
            format!("DELETE FROM {schema}.order_lines WHERE order_id = 10 AND line = 2"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        let events = read_until(&customers, Duration::from_secs(60), |e| {
            count(e, "c") >= 1
                && count(e, "u") >= 1
                && count(e, "d") >= 1
                && e.iter().any(|x| x.value.is_none())
        })
        .await;
        let c = events.iter().find(|e| e.op() == Some("c")).unwrap();
        assert_eq!(
            c.value.as_ref().unwrap()["after"],
            json!({"id": 3, "name": "Barbara"})
        );
        assert!(c.value.as_ref().unwrap()["before"].is_null());
        let u = events.iter().find(|e| e.op() == Some("u")).unwrap();
        assert_eq!(u.value.as_ref().unwrap()["after"]["name"], "Ada L.");
        let d = events.iter().find(|e| e.op() == Some("d")).unwrap();
        assert_eq!(d.key, json!({"id": 2}));
        assert_eq!(
            d.value.as_ref().unwrap()["before"]["id"],
            2,
            "the delete carries the key in before"
        );
        assert!(d.value.as_ref().unwrap()["after"].is_null());
        assert!(
            events
                .iter()
                .any(|e| e.value.is_none() && e.key == json!({"id": 2})),
            "a tombstone follows the delete"
        );
        let events = read_until(&lines, Duration::from_secs(60), |e| {
            count(e, "c") >= 1 && count(e, "u") >= 1 && count(e, "d") >= 1
        })
        .await;
        let d = events.iter().find(|e| e.op() == Some("d")).unwrap();
        assert_eq!(
            d.key,
            json!({"order_id": 10, "line": 2}),
            "the composite key"
        );
        let u = events.iter().find(|e| e.op() == Some("u")).unwrap();
        assert_eq!(u.key, json!({"order_id": 10, "line": 1}));
        assert_eq!(u.value.as_ref().unwrap()["after"]["qty"], 4);

        assert_eq!(detail["slot"]["exists"], true);
        let (_, now) = api.get(&format!("/api/v1/pipelines/{id}")).await;
        assert_eq!(now["slot"]["active"], true, "{now}");
        assert!(now["slot"]["retained_wal_bytes"].is_number());
        // The position Connect holds, in PostgreSQL's own terms: an LSN the server has written.
        let lsn = eventually(
            Duration::from_secs(90),
            "the committed LSN shown",
            || async {
                let (_, d) = api.get(&format!("/api/v1/pipelines/{id}")).await;
                d["source_position"]["lsn"].as_str().map(str::to_string)
            },
        )
        .await;
        let (hi, lo) = lsn.split_once('/').unwrap_or_else(|| panic!("X/Y: {lsn}"));
        assert!(
            u64::from_str_radix(hi, 16).is_ok() && u64::from_str_radix(lo, 16).is_ok(),
            "{lsn}"
        );
        let written: bool = sqlx::query_scalar("SELECT $1::pg_lsn <= pg_current_wal_lsn()")
            .bind(&lsn)
            .fetch_one(&mut db)
            .await
            .unwrap();
        assert!(written, "{lsn} is not past the server's WAL");

        // Delete without ticking the slot option: the slot stays (and keeps its position).
        let (status, deleted) = api.delete(&format!("/api/v1/pipelines/{id}")).await;
        assert_eq!(status, 200, "{deleted}");
        assert_eq!(deleted["slot_dropped"], false);
        assert!(
            slot_exists(&s, &format!("pl_{tag}")).await,
            "the slot is left in place"
        );
        assert!(
            connect_config(&s, &pipelines_connector(&prefix))
                .await
                .is_none(),
            "the connector is gone"
        );
        let (_, topics) = api
            .get(&format!(
                "/api/v1/kafka-clusters/{kafka}/topics?q={customers}"
            ))
            .await;
        assert!(
            topics["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == customers.as_str()),
            "topics are never deleted silently"
        );
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &pipelines_connector(&prefix)).await;
        drop_capture_fixture(&s, &format!("pl_{tag}"), &schema).await;
    })
    .await;
}

fn pipelines_connector(prefix: &str) -> String {
    format!("cluecdc-capture-{prefix}")
}

#[tokio::test]
async fn a_table_added_to_a_running_pipeline_is_snapshotted_alone_and_delete_with_the_slot_option_drops_the_slot(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("pa_{tag}");
    let mut db = pg_as_connector_user(&s).await;
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.first (id int PRIMARY KEY, v text)"),
        format!("INSERT INTO {schema}.first VALUES (1, 'a'), (2, 'b')"),
        format!("CREATE TABLE {schema}.second (id int PRIMARY KEY, v text)"),
        format!("INSERT INTO {schema}.second VALUES (1, 'x'), (2, 'y'), (3, 'z')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let mut src = pg_source(&api, &s, &tag).await;
    src["id"] = src["id"].clone();
    let prefix = format!("pa-{}", tag.replace('_', "-"));
    let (status, pipeline) = api.post("/api/v1/pipelines", json!({"name": format!("add {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.first")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{pipeline}");
    let id = pipeline["id"].as_str().unwrap().to_string();
    let first = format!("{prefix}.{schema}.first");
    let second = format!("{prefix}.{schema}.second");
    let result = async {
        wait_pipeline_running(&api, &id).await;
        read_until(&first, Duration::from_secs(90), |e| count(e, "r") == 2).await;

        let (status, changed) = api
            .patch(
                &format!("/api/v1/pipelines/{id}"),
                json!({"tables": [format!("{schema}.first"), format!("{schema}.second")]}),
            )
            .await;
        assert_eq!(status, 200, "{changed}");
        assert_eq!(
            changed["incremental_snapshot"],
            json!([format!("{schema}.second")])
        );
        // The added table's existing rows arrive (incremental snapshot reads are op "r")…
        let snap = read_until(&second, Duration::from_secs(120), |e| count(e, "r") >= 3).await;
        let mut ids: Vec<i64> = snap
            .iter()
            .filter(|e| e.op() == Some("r"))
            .map(|e| e.value.as_ref().unwrap()["after"]["id"].as_i64().unwrap())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids, vec![1, 2, 3]);
        // …then it streams, and so does the first table, without a new full snapshot of it.
        sqlx::query(&format!("INSERT INTO {schema}.second VALUES (4, 'w')"))
            .execute(&mut db)
            .await
            .unwrap();
        sqlx::query(&format!("INSERT INTO {schema}.first VALUES (3, 'c')"))
            .execute(&mut db)
            .await
            .unwrap();
        read_until(&second, Duration::from_secs(60), |e| {
            e.iter()
                .any(|x| x.op() == Some("c") && x.key == json!({"id": 4}))
        })
        .await;
        let events = read_until(&first, Duration::from_secs(60), |e| count(e, "c") >= 1).await;
        assert_eq!(
            count(&events, "r"),
            2,
            "the first table was not snapshotted again"
        );

        // An incremental re-snapshot of one table on request: refusals first, changing nothing.
        let path = format!("/api/v1/pipelines/{id}/resnapshot");
        let (status, err) = api.post(&path, json!({"tables": []})).await;
        assert_eq!(status, 422, "{err}");
        assert!(
            err["error"]["fields"]["tables"]
                .as_str()
                .unwrap()
                .contains("choose at least one"),
            "{err}"
        );
        let (status, err) = api
            .post(&path, json!({"tables": [format!("{schema}.elsewhere")]}))
            .await;
        assert_eq!(status, 422, "{err}");
        assert!(
            err["error"]["fields"]["tables"]
                .as_str()
                .unwrap()
                .contains("not captured by this pipeline"),
            "{err}"
        );
        // A watermark the list could not fetch in time reads -1 (unknown): asked again.
        let end_of = |topic: String| {
            let (api, kafka) = (&api, &kafka);
            eventually(
                Duration::from_secs(30),
                "a known high watermark",
                move || {
                    let topic = topic.clone();
                    async move {
                        let (_, t) = api
                            .get(&format!("/api/v1/kafka-clusters/{kafka}/topics?q={topic}"))
                            .await;
                        t["items"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|x| x["name"] == topic.as_str())
                            .and_then(|x| x["partitions"][0]["high_watermark"].as_i64())
                            .filter(|end| *end >= 0)
                    }
                },
            )
        };
        let second_end = end_of(second.clone()).await;
        let (status, sent) = api
            .post(&path, json!({"tables": [format!("{schema}.first")]}))
            .await;
        assert_eq!(status, 202, "{sent}");
        assert_eq!(sent["tables"], json!([format!("{schema}.first")]));
        // The first table's three rows again as r events (two from the initial snapshot before),
        // while the second table gets nothing and both keep streaming.
        let events = read_until(&first, Duration::from_secs(120), |e| count(e, "r") >= 5).await;
        let mut again: Vec<i64> = events
            .iter()
            .filter(|e| e.op() == Some("r"))
            .skip(2)
            .map(|e| e.value.as_ref().unwrap()["after"]["id"].as_i64().unwrap())
            .collect();
        again.sort();
        assert_eq!(again, vec![1, 2, 3], "exactly the first table's rows again");
        sqlx::query(&format!("INSERT INTO {schema}.first VALUES (4, 'd')"))
            .execute(&mut db)
            .await
            .unwrap();
        read_until(&first, Duration::from_secs(60), |e| {
            e.iter()
                .any(|x| x.op() == Some("c") && x.key == json!({"id": 4}))
        })
        .await;
        assert_eq!(
            end_of(second.clone()).await,
            second_end,
            "nothing new in the other table's topic"
        );
        let (_, audit) = api.get("/api/v1/audit?action=pipeline.resnapshot").await;
        assert_eq!(
            audit["items"][0]["summary"]["tables"],
            json!([format!("{schema}.first")]),
            "{audit}"
        );

        // Delete with the slot option: the slot is dropped after the connector stops.
        let (status, deleted) = api
            .delete(&format!("/api/v1/pipelines/{id}?drop_slot=true"))
            .await;
        assert_eq!(status, 200, "{deleted}");
        assert_eq!(deleted["slot_dropped"], true);
        assert!(
            !slot_exists(&s, &format!("pl_{tag}")).await,
            "the slot is gone"
        );
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &pipelines_connector(&prefix)).await;
        drop_capture_fixture(&s, &format!("pl_{tag}"), &schema).await;
    })
    .await;
}

#[tokio::test]
async fn a_mariadb_pipeline_snapshots_then_streams_inserts_updates_and_deletes() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let (t1, t2) = (format!("ml_{tag}_customers"), format!("ml_{tag}_lines"));
    let mut db = sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE TABLE {t1} (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL)"),
        format!("CREATE TABLE {t2} (order_id INT, line INT, sku VARCHAR(20) NOT NULL, PRIMARY KEY (order_id, line))"),
        format!("INSERT INTO {t1} VALUES (1, 'Ada'), (2, 'Grace')"),
        format!("INSERT INTO {t2} VALUES (10, 1, 'apple'), (10, 2, 'pear')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api
        .connection(json!({"name": format!("maria {tag}"), "provider": "MARIADB",
            "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "disable"},
            "secrets": {"password": s.mariadb_password}}))
        .await;
    let prefix = format!("ml-{}", tag.replace('_', "-"));
    // The table check asks MariaDB for exactly these names: of one present and one missing
    // table, the error names only the missing one, and nothing is created.
    let (status, err) = api.post("/api/v1/pipelines", json!({"name": format!("maria {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect,
        "tables": [format!("{}.{t1}", s.mariadb_db), format!("{}.no_{tag}", s.mariadb_db)], "topic_prefix": prefix})).await;
    assert_eq!(status, 422, "{err}");
    let why = err["error"]["fields"]["tables"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains(&format!("{}.no_{tag}", s.mariadb_db)) && !why.contains(&t1),
        "{err}"
    );
    let (status, pipeline) = api.post("/api/v1/pipelines", json!({"name": format!("maria {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect,
        "tables": [format!("{}.{t1}", s.mariadb_db), format!("{}.{t2}", s.mariadb_db)], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{pipeline}");
    let id = pipeline["id"].as_str().unwrap().to_string();
    let customers = format!("{prefix}.{}.{t1}", s.mariadb_db);
    let lines = format!("{prefix}.{}.{t2}", s.mariadb_db);
    let result = async {
        wait_pipeline_running(&api, &id).await;
        let snap = read_until(&customers, Duration::from_secs(120), |e| count(e, "r") >= 2).await;
        let ada = snap
            .iter()
            .find(|e| {
                e.value
                    .as_ref()
                    .is_some_and(|v| v["after"]["name"] == "Ada")
            })
            .unwrap();
        assert_eq!(
            ada.value.as_ref().unwrap()["source"]["connector"],
            "mariadb"
        );
        read_until(&lines, Duration::from_secs(60), |e| count(e, "r") >= 2).await;
        for sql in [
            format!("INSERT INTO {t1} VALUES (3, 'Barbara')"),
            format!("UPDATE {t1} SET name = 'Ada L.' WHERE id = 1"),
            format!("DELETE FROM {t1} WHERE id = 2"),
            format!("DELETE FROM {t2} WHERE order_id = 10 AND line = 2"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        let events = read_until(&customers, Duration::from_secs(60), |e| {
            count(e, "c") >= 1 && count(e, "u") >= 1 && count(e, "d") >= 1
        })
        .await;
        let u = events
            .iter()
            .find(|e| e.op() == Some("u"))
            .unwrap()
            .value
            .clone()
            .unwrap();
        assert_eq!(
            u["before"],
            json!({"id": 1, "name": "Ada"}),
            "full row image: before is the whole row"
        );
        assert_eq!(u["after"], json!({"id": 1, "name": "Ada L."}));
        assert!(
            u["source"]["file"].is_string() && u["source"]["pos"].is_number(),
            "binlog position in source metadata"
        );
        let d = events.iter().find(|e| e.op() == Some("d")).unwrap();
        assert_eq!(
            d.value.as_ref().unwrap()["before"],
            json!({"id": 2, "name": "Grace"})
        );
        let events = read_until(&lines, Duration::from_secs(60), |e| count(e, "d") >= 1).await;
        assert_eq!(
            events.iter().find(|e| e.op() == Some("d")).unwrap().key,
            json!({"order_id": 10, "line": 2})
        );
        let (status, _) = api.delete(&format!("/api/v1/pipelines/{id}")).await;
        assert_eq!(status, 200);
    };
    with_cleanup(result, async {
        delete_connector(&s.connect_url, &pipelines_connector(&prefix)).await;
        let mut db = sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db))
            .await
            .unwrap();
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {t1}, {t2}"))
            .execute(&mut db)
            .await;
    })
    .await;
}

#[tokio::test]
async fn a_config_the_plugin_refuses_is_refused_with_its_own_error_before_anything_is_created() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("pb_{tag}");
    let mut db = pg_as_connector_user(&s).await;
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut db)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE TABLE {schema}.t (id int PRIMARY KEY)"))
        .execute(&mut db)
        .await
        .unwrap();
    let src = pg_source(&api, &s, &tag).await;
    let prefix = format!("pb-{}", tag.replace('_', "-"));
    let (status, err) = api
        .post("/api/v1/pipelines", json!({"name": "bad", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.t")], "topic_prefix": prefix, "options": {"decimal.handling.mode": "fancy"}}))
        .await;
    assert_eq!(status, 422, "{err}");
    let why = err["error"]["fields"]["config.decimal.handling.mode"]
        .as_str()
        .unwrap_or_else(|| panic!("the plugin's error on its key: {err}"));
    assert!(
        why.contains("fancy") || why.to_lowercase().contains("invalid"),
        "{why}"
    );
    // Our own checks name their fields too.
    let (status, err) = api.post("/api/v1/pipelines", json!({"name": "bad", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": ["nope.missing"], "options": {"database.password": "plain"}})).await;
    assert_eq!(status, 422);
    assert!(
        err["error"]["fields"]["tables"]
            .as_str()
            .unwrap()
            .contains("not found"),
        "{err}"
    );
    assert!(
        err["error"]["fields"]["options.database.password"].is_string(),
        "{err}"
    );
    // Nothing was created: no pipeline, no connector, no topic.
    assert_eq!(api.get("/api/v1/pipelines").await.1["items"], json!([]));
    assert_eq!(api.get("/api/v1/connectors").await.1["items"], json!([]));
    let (_, topics) = api
        .get(&format!("/api/v1/kafka-clusters/{kafka}/topics?q={prefix}"))
        .await;
    assert!(!topics["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"].as_str().unwrap().starts_with(&prefix)));
    let su = pg_superuser(&s).await;
    let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&su)
        .await;
}

/// The source session a pipeline create opens is kept for the next one (no new login per
/// create), a kept connection the server has closed is replaced rather than reported, and a
/// rotated password is never served by a connection opened with the old one. Its own role, so
/// that the backends counted and terminated are this test's alone.
#[tokio::test]
async fn source_sessions_are_reused_replaced_when_the_server_closed_them_and_never_outlive_a_rotation(
) {
    let s = stack();
    let api = admin_api();
    let tag = tag();
    let role = format!("pool_{tag}");
    let su = pg_superuser(&s).await;
    for sql in [
        format!("CREATE ROLE {role} LOGIN PASSWORD 'first_{tag}'"),
        format!("GRANT CONNECT ON DATABASE {} TO {role}", s.pg_source_db),
    ] {
        sqlx::query(&sql).execute(&su).await.unwrap();
    }
    let backends = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity WHERE usename = $1 ORDER BY pid",
        )
        .bind(&role)
        .fetch_all(&su)
        .await
        .unwrap()
    };
    let src = api.connection(json!({"name": format!("pool {tag}"), "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
        "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": role, "tls_mode": "disable", "slot_name": format!("pool_{tag}"), "publication_name": format!("pool_{tag}")},
        "secrets": {"password": format!("first_{tag}")}})).await;
    let src_id = src["id"].as_str().unwrap().to_string();
    // A create refused for a table the source does not have still ran its catalog query on a
    // session: the answer proves the session worked, the backends show what was kept.
    let refused = || async {
        let (status, err) = api
            .post("/api/v1/pipelines", json!({"name": "pool", "source_connection_id": src_id, "kafka_cluster_id": "kc_none", "connect_cluster_id": "cc_none", "tables": ["public.missing_here"]}))
            .await;
        assert_eq!(status, 422, "{err}");
        let why = err["error"]["fields"]["tables"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            why.contains("not found in"),
            "the table check ran on the source: {err}"
        );
        assert!(
            err["error"]["fields"].get("source_connection_id").is_none(),
            "{err}"
        );
    };
    refused().await;
    let kept = backends().await;
    assert_eq!(
        kept.len(),
        1,
        "one session kept idle after the create: {kept:?}"
    );
    refused().await;
    assert_eq!(
        backends().await,
        kept,
        "the next create reused it: no second login"
    );

    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
        .bind(&role)
        .execute(&su)
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the kept backend gone", || async {
        backends().await.is_empty().then_some(())
    })
    .await;
    refused().await;
    let replaced = backends().await;
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(
        replaced, kept,
        "a new connection replaced the one the server closed"
    );

    // Rotation: the role's password changes and so does the stored secret; the connection
    // kept from before is not used again (it would still work: PostgreSQL checks passwords
    // only at login), a new login with the new password is.
    sqlx::query(&format!("ALTER ROLE {role} PASSWORD 'second_{tag}'"))
        .execute(&su)
        .await
        .unwrap();
    let (status, v) = api
        .post(
            &format!("/api/v1/connections/{src_id}/rotate"),
            json!({"secrets": {"password": format!("second_{tag}")}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    refused().await;
    let after = backends().await;
    assert!(
        after.iter().any(|pid| !replaced.contains(pid)),
        "a login after the rotation: before {replaced:?}, after {after:?}"
    );

    let (status, v) = api.delete(&format!("/api/v1/connections/{src_id}")).await;
    assert_eq!(status, 204, "{v}");
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
        .bind(&role)
        .execute(&su)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the role's backends gone",
        || async { backends().await.is_empty().then_some(()) },
    )
    .await;
    for sql in [
        format!("REVOKE CONNECT ON DATABASE {} FROM {role}", s.pg_source_db),
        format!("DROP ROLE {role}"),
    ] {
        sqlx::query(&sql).execute(&su).await.unwrap();
    }
}

#[tokio::test]
async fn a_pipeline_reset_snapshots_again_and_a_serve_killed_after_a_table_change_or_during_a_delete_still_finishes_it(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first_api = app_on_data(&data, None);
    let proxy = ConnectProxy::start(&s.connect_url).await;
    let (kafka, connect, provider_token) = stack_via_proxy(&first_api, &proxy).await;
    let tag = tag();
    let schema = format!("pk_{tag}");
    let mut db = pg_as_connector_user(&s).await;
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.first (id int PRIMARY KEY, v text)"),
        format!("INSERT INTO {schema}.first VALUES (1, 'a')"),
        format!("CREATE TABLE {schema}.second (id int PRIMARY KEY, v text)"),
        format!("INSERT INTO {schema}.second VALUES (1, 'x'), (2, 'y'), (3, 'z')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = pg_source(&first_api, &s, &tag).await;
    let prefix = format!("pk-{}", tag.replace('_', "-"));
    let (status, pipeline) = first_api.post("/api/v1/pipelines", json!({"name": format!("kill {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.first")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{pipeline}");
    let id = pipeline["id"].as_str().unwrap().to_string();
    let connector = pipelines_connector(&prefix);
    let second = format!("{prefix}.{schema}.second");
    // Each kill starts the next serve on the same database (a OnceCell each: set once).
    let (second_api, third_api) = (
        std::cell::OnceCell::<Api>::new(),
        std::cell::OnceCell::<Api>::new(),
    );
    let result = async {
        wait_pipeline_running(&first_api, &id).await;
        // A table change whose new config Connect does not take yet: serve is killed with the
        // snapshot signal still to send.
        proxy.fail("PUT", "/config");
        let (status, changed) = first_api
            .patch(
                &format!("/api/v1/pipelines/{id}"),
                json!({"tables": [format!("{schema}.first"), format!("{schema}.second")]}),
            )
            .await;
        assert_eq!(status, 200, "{changed}");
        let (_, ops) = first_api
            .get(&format!("/api/v1/operations?target={id}"))
            .await;
        let op = ops["items"][0].clone();
        assert_eq!(op["kind"], "snapshot_signal", "{ops}");
        assert_eq!(op["state"], "running", "{ops}");
        kill_hard(&first_api.app).await;
        proxy.heal();
        let api = second_api.get_or_init(|| app_on_data(&data, Some(first_api.token.clone())));
        write_provider_file(api, &provider_token);
        let op = operation_ends(api, op["id"].as_str().unwrap()).await;
        assert_eq!(op["state"], "done", "{op}");
        let snap = read_until(&second, Duration::from_secs(120), |e| count(e, "r") >= 3).await;
        let mut ids: Vec<i64> = snap
            .iter()
            .filter(|e| e.op() == Some("r"))
            .map(|e| e.value.as_ref().unwrap()["after"]["id"].as_i64().unwrap())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids, vec![1, 2, 3], "the added table's rows, snapshotted");

        // Reset and re-snapshot: refused without the name typed; then every table's rows come
        // again as snapshot reads, the saved source offsets are kept, and streaming goes on.
        wait_pipeline_running(api, &id).await;
        let reset = format!("/api/v1/pipelines/{id}/reset");
        let (status, err) = api.post(&reset, json!({"confirm": "not it"})).await;
        assert_eq!(status, 422, "{err}");
        assert!(
            err["error"]["fields"]["confirm"]
                .as_str()
                .unwrap()
                .contains("type the pipeline's name"),
            "{err}"
        );
        // Held at its change step (Connect answers the offsets reset with 503 for now): no
        // other route may change the pipeline meanwhile.
        proxy.fail("DELETE", "/offsets");
        let (status, started) = api
            .post(&reset, json!({"confirm": format!("kill {tag}")}))
            .await;
        assert_eq!(status, 202, "{started}");
        let op_id = started["operation_id"].as_str().unwrap().to_string();
        eventually(
            Duration::from_secs(60),
            "the reset waits at its change step",
            || async {
                let (_, op) = api.get(&format!("/api/v1/operations/{op_id}")).await;
                (op["step"] == "change" && op["error"].as_str().is_some_and(|e| e.contains("503")))
                    .then_some(())
            },
        )
        .await;
        let (status, err) = api
            .patch(
                &format!("/api/v1/pipelines/{id}"),
                json!({"tables": [format!("{schema}.first")]}),
            )
            .await;
        assert_eq!(
            status, 409,
            "no table change while the reset holds it: {err}"
        );
        assert!(
            err["error"]["message"].as_str().unwrap().contains(&op_id),
            "{err}"
        );
        proxy.heal();
        let op = operation_ends(api, &op_id).await;
        assert_eq!(op["state"], "done", "{op}");
        assert_eq!(op["kind"], "reset");
        let (_, audit) = api.get("/api/v1/audit?action=pipeline.reset").await;
        assert_eq!(audit["items"][0]["target_id"], id.as_str(), "{audit}");
        // The source offsets it replaced are kept with the operation (an LSN for PostgreSQL).
        let page = api.text(&format!("/operations/{op_id}")).await;
        assert!(
            page.contains("Offsets Connect held before the change") && page.contains("lsn"),
            "{page}"
        );
        let first = format!("{prefix}.{schema}.first");
        read_until(&first, Duration::from_secs(120), |e| count(e, "r") == 2).await;
        read_until(&second, Duration::from_secs(120), |e| count(e, "r") >= 6).await;
        assert!(
            slot_exists(&s, &format!("pl_{tag}")).await,
            "the slot is kept"
        );
        sqlx::query(&format!("INSERT INTO {schema}.first VALUES (2, 'b')"))
            .execute(&mut db)
            .await
            .unwrap();
        read_until(&first, Duration::from_secs(60), |e| count(e, "c") >= 1).await;

        // A delete Connect does not carry out yet: serve is killed while the request waits.
        wait_pipeline_running(api, &id).await;
        proxy.fail("DELETE", &format!("/connectors/{connector}"));
        let delete = {
            let (http, url, token) = (api.http.clone(), api.app.url.clone(), api.token.clone());
            let path = format!("{url}/api/v1/pipelines/{id}?drop_slot=true");
            tokio::spawn(async move { http.delete(path).bearer_auth(token).send().await })
        };
        let op = eventually(
            Duration::from_secs(30),
            "the delete waits on Connect",
            || async {
                let (_, ops) = api.get(&format!("/api/v1/operations?target={id}")).await;
                let op = ops["items"][0].clone();
                (op["kind"] == "pipeline_delete" && op["step"] == "remove").then_some(op)
            },
        )
        .await;
        assert!(
            connect_status(&s.connect_url, &connector).await.is_some(),
            "still in Connect"
        );
        kill_hard(&api.app).await;
        let _ = delete.await;
        proxy.heal();
        let api = third_api.get_or_init(|| app_on_data(&data, Some(first_api.token.clone())));
        write_provider_file(api, &provider_token);
        let op = operation_ends(api, op["id"].as_str().unwrap()).await;
        assert_eq!(op["state"], "done", "{op}");
        assert!(
            connect_status(&s.connect_url, &connector).await.is_none(),
            "gone from Connect"
        );
        let (status, _) = api.get(&format!("/api/v1/pipelines/{id}")).await;
        assert_eq!(status, 404, "the pipeline is gone");
        assert!(
            !slot_exists(&s, &format!("pl_{tag}")).await,
            "the slot was dropped as asked"
        );
    };
    with_cleanup(result, async {
        proxy.heal();
        let api = third_api.get().or(second_api.get()).unwrap_or(&first_api);
        let _ = api
            .delete(&format!("/api/v1/pipelines/{id}?drop_slot=true"))
            .await;
        delete_connector(&s.connect_url, &connector).await;
        drop_capture_fixture(&s, &format!("pl_{tag}"), &schema).await;
    })
    .await;
}

/// A source that goes away for a while (connection refused) is a transient failure: ClueCDC
/// reports it so, neither fails the connector nor restarts it (Debezium retries the connection
/// itself, its task RUNNING), and changes flow again once the source answers.
#[tokio::test]
async fn a_source_outage_is_transient_and_the_pipeline_streams_again_once_the_source_answers() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_RESTART_BACKOFF", "1s"),
    ]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("po_{tag}");
    let mut db = pg_as_connector_user(&s).await;
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name text NOT NULL)"),
        format!("INSERT INTO {schema}.items VALUES (1, 'apple')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    // The pipeline reaches PostgreSQL through a gate the test closes: "connection refused".
    let gate = tokio::sync::Mutex::new(
        TcpGate::start(&format!("http://{}:{}", s.pg_host, s.pg_port)).await,
    );
    let port: u16 = gate
        .lock()
        .await
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let closed = std::sync::atomic::AtomicBool::new(false);
    let src = api.connection(json!({"name": format!("gated {tag}"), "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
        "settings": {"host": "127.0.0.1", "port": port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": schema, "publication_name": schema},
        "secrets": {"password": s.pg_password}})).await;
    let prefix = format!("po-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": format!("gated {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka,
        "connect_cluster_id": connect, "tables": [format!("{schema}.items")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let id = p["id"].as_str().unwrap().to_string();
    let name = p["name"].as_str().unwrap().to_string();
    let topic = format!("{prefix}.{schema}.items");
    let connector = format!("cluecdc-capture-{prefix}");
    let result = async {
        wait_pipeline_running(&api, &id).await;
        read_until(&topic, Duration::from_secs(90), |e| count(e, "r") >= 1).await;
        let (status, _) = api
            .patch(
                "/api/v1/alert-rules/pipeline_source_unreachable",
                json!({"for_secs": 0}),
            )
            .await;
        assert_eq!(status, 200);
        gate.lock().await.close();
        closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let fired = eventually(
            Duration::from_secs(60),
            "the source alert, transient",
            || async { alert(&api, "pipeline_source_unreachable", &name, "firing").await },
        )
        .await;
        assert!(
            fired["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("transient ("),
            "{fired}"
        );
        // Longer than the first backoff (1 s here): a failure ClueCDC acted on shows by now.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let (_, c) = api.get(&format!("/api/v1/connectors/{connector}")).await;
        assert_eq!(c["phase"], "RUNNING", "not failed by ClueCDC: {c}");
        assert_eq!(c["restart_attempts"], 0, "{c}");
        assert!(c["trace"].is_null(), "{c}");
        let restarts = c["restarts"].as_array().map_or(0, Vec::len);
        assert_eq!(restarts, 0, "no restart recorded: {c}");

        gate.lock().await.open().await;
        closed.store(false, std::sync::atomic::Ordering::SeqCst);
        sqlx::query(&format!("INSERT INTO {schema}.items VALUES (2, 'pear')"))
            .execute(&mut db)
            .await
            .unwrap();
        read_until(&topic, Duration::from_secs(120), |e| count(e, "c") >= 1).await;
        eventually(
            Duration::from_secs(60),
            "the source alert resolved",
            || async { alert(&api, "pipeline_source_unreachable", &name, "resolved").await },
        )
        .await;
    };
    with_cleanup(result, async {
        if closed.load(std::sync::atomic::Ordering::SeqCst) {
            gate.lock().await.open().await;
        }
        let _ = api
            .delete(&format!("/api/v1/pipelines/{id}?drop_slot=true"))
            .await;
        drop_capture_fixture(&s, &schema, &schema).await;
    })
    .await;
}
