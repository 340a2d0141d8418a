//! Database deliveries through the Debezium JDBC sink, against the real stack: rows converge
//! across engines, each delivery has its own consumer group, and error policies behave.

use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use serde_json::{json, Value};
use sqlx::{Connection, Row};

use crate::helpers::*;

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

type Rows = Vec<(i64, String, i64)>;

async fn pg_rows(url: &str, table: &str) -> Rows {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    match sqlx::query(&format!("SELECT id, name, qty FROM {table} ORDER BY id"))
        .fetch_all(&mut c)
        .await
    {
        Ok(rows) => rows
            .iter()
            .map(|r| {
                (
                    i64::from(r.get::<i32, _>(0)),
                    r.get(1),
                    i64::from(r.get::<i32, _>(2)),
                )
            })
            .collect(),
        Err(_) => vec![],
    }
}

async fn maria_rows(url: &str, table: &str) -> Rows {
    let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
    match sqlx::query(&format!("SELECT id, name, qty FROM {table} ORDER BY id"))
        .fetch_all(&mut c)
        .await
    {
        Ok(rows) => rows
            .iter()
            .map(|r| {
                (
                    i64::from(r.get::<i32, _>(0)),
                    r.get(1),
                    i64::from(r.get::<i32, _>(2)),
                )
            })
            .collect(),
        Err(_) => vec![],
    }
}

fn maria_dest(s: &Stack) -> Value {
    json!({"name": "maria dest", "provider": "MARIADB", "capabilities": ["DESTINATION"],
        "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": std::env::var("MARIADB_DEST_DB").unwrap(), "user": s.mariadb_user, "tls_mode": "disable"},
        "secrets": {"password": s.mariadb_password}})
}

#[tokio::test]
async fn postgres_to_mariadb_rows_converge_and_two_deliveries_each_get_every_record() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("dv_{tag}");
    let src_url = s.pg_url(&s.pg_source_db);
    let mut db = sqlx::PgConnection::connect(&src_url).await.unwrap();
    for sql in [format!("CREATE SCHEMA {schema}"), format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name varchar(50) NOT NULL, qty int NOT NULL)"), format!("INSERT INTO {schema}.items VALUES (1, 'apple', 3), (2, 'pear', 5)")] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "pg src", "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": format!("dv_{tag}"), "publication_name": format!("dv_{tag}")}, "secrets": {"password": s.pg_password}})).await;
    let dest = api.connection(maria_dest(&s)).await;
    let prefix = format!("dv-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "pg orders", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.items")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let mut delivery_ids = Vec::new();
    for copy in ["a", "b"] {
        let (status, d) = api.post("/api/v1/deliveries", json!({"name": format!("to maria {copy}"), "pipeline_id": p["id"], "destination_connection_id": dest["id"], "table_name_format": format!("dv_{tag}_{copy}_${{source.table}}")})).await;
        assert_eq!(status, 201, "{d}");
        assert_eq!(
            d["consumer_group"],
            format!("connect-cluecdc-deliver-to-maria-{copy}")
        );
        delivery_ids.push(d["id"].as_str().unwrap().to_string());
    }
    let dest_url = s.mariadb_url(&std::env::var("MARIADB_DEST_DB").unwrap());
    let result = async {
        // First the snapshot arrives; only then do changes stream (not folded into the snapshot).
        let initial: Rows = vec![(1, "apple".into(), 3), (2, "pear".into(), 5)];
        for copy in ["a", "b"] {
            let table = format!("dv_{tag}_{copy}_items");
            eventually(
                Duration::from_secs(120),
                &format!("{table} holds the snapshot"),
                || async { (maria_rows(&dest_url, &table).await == initial).then_some(()) },
            )
            .await;
        }
        for sql in [
            format!("INSERT INTO {schema}.items VALUES (3, 'fig', 7)"),
            format!("UPDATE {schema}.items SET qty = 4, name = 'green apple' WHERE id = 1"),
            format!("DELETE FROM {schema}.items WHERE id = 2"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        let want = pg_rows(&src_url, &format!("{schema}.items")).await;
        assert_eq!(
            want,
            vec![(1, "green apple".into(), 4), (3, "fig".into(), 7)]
        );
        for copy in ["a", "b"] {
            let table = format!("dv_{tag}_{copy}_items");
            eventually(
                Duration::from_secs(120),
                &format!("{table} equal to the source"),
                || async { (maria_rows(&dest_url, &table).await == want).then_some(()) },
            )
            .await;
        }
        // Each delivery's own consumer group has caught up.
        for id in &delivery_ids {
            let detail = eventually(Duration::from_secs(30), "lag 0", || async {
                let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
                d["lag"]
                    .as_array()
                    .is_some_and(|l| !l.is_empty() && l.iter().all(|p| p["lag"] == 0))
                    .then_some(d)
            })
            .await;
            // 2 snapshot reads, then a create, an update, a delete and its tombstone.
            assert_eq!(detail["lag"][0]["end_offset"], 6, "{detail}");
            assert!(detail["semantics"]
                .as_str()
                .unwrap()
                .contains("At-least-once"));
        }

        // PATCH: what makes another delivery is refused; a setting changes the running sink.
        let b = format!("/api/v1/deliveries/{}", delivery_ids[1]);
        let (status, err) = api.patch(&b, json!({"pipeline_id": "pl_other"})).await;
        assert_eq!(status, 422);
        assert!(
            err["error"]["fields"]["pipeline_id"]
                .as_str()
                .unwrap()
                .contains("create a new delivery"),
            "{err}"
        );
        let (status, err) = api.patch(&b, json!({"insert_mode": "fancy"})).await;
        assert_eq!(status, 422);
        assert!(err["error"]["fields"]["insert_mode"].is_string(), "{err}");
        let (status, changed) = api.patch(&b, json!({"delete_enabled": false})).await;
        assert_eq!(status, 200, "{changed}");
        assert_eq!(changed["options"]["delete_enabled"], false);
        eventually(
            Duration::from_secs(60),
            "Connect running b with deletes off",
            || async {
                let live: Value = reqwest::get(format!(
                    "{}/connectors/cluecdc-deliver-to-maria-b/config",
                    s.connect_url
                ))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
                let running = connect_status(&s.connect_url, "cluecdc-deliver-to-maria-b").await?;
                (live["delete.enabled"] == "false" && running["tasks"][0]["state"] == "RUNNING")
                    .then_some(())
            },
        )
        .await;
        sqlx::query(&format!("DELETE FROM {schema}.items WHERE id = 3"))
            .execute(&mut db)
            .await
            .unwrap();
        let after: Rows = vec![(1, "green apple".into(), 4)];
        eventually(Duration::from_secs(120), "a applies the delete", || async {
            (maria_rows(&dest_url, &format!("dv_{tag}_a_items")).await == after).then_some(())
        })
        .await;
        eventually(
            Duration::from_secs(60),
            "b consumed the delete too",
            || async {
                let (_, d) = api.get(&b).await;
                (d["lag"][0]["end_offset"] == 8 && d["lag"][0]["lag"] == 0).then_some(())
            },
        )
        .await;
        assert_eq!(
            maria_rows(&dest_url, &format!("dv_{tag}_b_items")).await,
            want,
            "b keeps the row: its deletes are off now"
        );
    };
    with_cleanup(result, async {
        for id in &delivery_ids {
            let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        }
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}?drop_slot=true",
                p["id"].as_str().unwrap()
            ))
            .await;
        drop_capture_fixture(&s, &format!("dv_{tag}"), &schema).await;
        let mut m = sqlx::MySqlConnection::connect(&dest_url).await.unwrap();
        let _ = sqlx::query(&format!(
            "DROP TABLE IF EXISTS dv_{tag}_a_items, dv_{tag}_b_items"
        ))
        .execute(&mut m)
        .await;
    })
    .await;
}

#[tokio::test]
async fn mariadb_to_postgres_rows_converge_and_a_poison_record_fails_or_is_skipped_by_policy() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let table = format!("mv_{tag}_items");
    let src_url = s.mariadb_url(&s.mariadb_db);
    let mut db = sqlx::MySqlConnection::connect(&src_url).await.unwrap();
    for sql in [format!("CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL, qty INT NOT NULL)"), format!("INSERT INTO {table} VALUES (1, 'apple', 3), (2, 'pear', 5)")] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "maria src", "provider": "MARIADB", "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "disable"}, "secrets": {"password": s.mariadb_password}})).await;
    let dest = api.connection(json!({"name": "pg dest", "provider": "POSTGRESQL", "capabilities": ["DESTINATION"], "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_dest_db, "user": s.pg_user, "tls_mode": "disable"}, "secrets": {"password": s.pg_password}})).await;
    let prefix = format!("mv-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "maria orders", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{}.{table}", s.mariadb_db)], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let topic = format!("{prefix}.{}.{table}", s.mariadb_db);
    let dlq = format!("{prefix}.dlq");
    let (status, strict) = api.post("/api/v1/deliveries", json!({"name": "strict", "pipeline_id": p["id"], "destination_connection_id": dest["id"], "table_name_format": format!("strict_${{source.table}}")})).await;
    assert_eq!(status, 201, "{strict}");
    let (status, lenient) = api.post("/api/v1/deliveries", json!({"name": "lenient", "pipeline_id": p["id"], "destination_connection_id": dest["id"], "table_name_format": format!("lenient_${{source.table}}"), "error_policy": "continue", "dead_letter_topic": dlq})).await;
    assert_eq!(status, 201, "{lenient}");
    let (status, bad) = api.post("/api/v1/deliveries", json!({"name": "bad", "pipeline_id": p["id"], "destination_connection_id": dest["id"], "dead_letter_topic": "x", "insert_mode": "merge"})).await;
    assert_eq!(status, 422);
    assert!(
        bad["error"]["fields"]["dead_letter_topic"]
            .as_str()
            .unwrap()
            .contains("only with error_policy continue")
            && bad["error"]["fields"]["insert_mode"].is_string(),
        "{bad}"
    );
    let dest_url = s.pg_url(&s.pg_dest_db);
    let result = async {
        let initial: Rows = vec![(1, "apple".into(), 3), (2, "pear".into(), 5)];
        for which in ["strict", "lenient"] {
            let t = format!("{which}_{table}");
            eventually(
                Duration::from_secs(120),
                &format!("{t} holds the snapshot"),
                || async { (pg_rows(&dest_url, &t).await == initial).then_some(()) },
            )
            .await;
        }
        for sql in [
            format!("INSERT INTO {table} VALUES (3, 'fig', 7)"),
            format!("UPDATE {table} SET qty = 4 WHERE id = 1"),
            format!("DELETE FROM {table} WHERE id = 2"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        let want = maria_rows(&src_url, &table).await;
        for which in ["strict", "lenient"] {
            let t = format!("{which}_{table}");
            eventually(
                Duration::from_secs(120),
                &format!("{t} equal to the source"),
                || async { (pg_rows(&dest_url, &t).await == want).then_some(()) },
            )
            .await;
        }
        // A record no converter can read lands in the topic.
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &s.kafka_bootstrap)
            .create()
            .unwrap();
        producer
            .send(
                BaseRecord::to(&topic)
                    .key("{not json")
                    .payload("\u{0}garbage"),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        producer.flush(Duration::from_secs(10)).unwrap();
        sqlx::query(&format!("INSERT INTO {table} VALUES (4, 'kiwi', 1)"))
            .execute(&mut db)
            .await
            .unwrap();
        // fail: the task stops at it and the delivery says why, without restarting in a loop.
        let failed = eventually(
            Duration::from_secs(90),
            "the strict delivery FAILED with its reason",
            || async {
                let (_, d) = api
                    .get(&format!(
                        "/api/v1/deliveries/{}",
                        strict["id"].as_str().unwrap()
                    ))
                    .await;
                (d["connector"]["phase"] == "FAILED"
                    && d["connector"]["message"]
                        .as_str()
                        .unwrap_or("")
                        .contains("unreadable record"))
                .then_some(d)
            },
        )
        .await;
        assert!(
            failed["connector"]["trace"]
                .as_str()
                .unwrap()
                .contains("serialization"),
            "{failed}"
        );
        // continue: the bad record is skipped into the dead-letter topic and later rows still arrive.
        let want = maria_rows(&src_url, &table).await;
        let t = format!("lenient_{table}");
        eventually(
            Duration::from_secs(120),
            "the lenient delivery past the poison record",
            || async { (pg_rows(&dest_url, &t).await == want).then_some(()) },
        )
        .await;
        let (_, topics) = api
            .get(&format!("/api/v1/kafka-clusters/{kafka}/topics/{dlq}"))
            .await;
        let in_dlq: i64 = topics["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["high_watermark"].as_i64().unwrap())
            .sum();
        assert_eq!(
            in_dlq, 1,
            "the skipped record is in the dead-letter topic: {topics}"
        );
        let page = sign_in(&api.app, "ada", PASSWORD)
            .await
            .client
            .get(format!(
                "{}/deliveries/{}",
                api.app.url,
                strict["id"].as_str().unwrap()
            ))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            page.contains("Why it failed") && page.contains("unreadable record"),
            "the page shows why"
        );
    };
    with_cleanup(result, async {
        for d in [&strict, &lenient] {
            let _ = api
                .delete(&format!("/api/v1/deliveries/{}", d["id"].as_str().unwrap()))
                .await;
        }
        let _ = api
            .delete(&format!("/api/v1/pipelines/{}", p["id"].as_str().unwrap()))
            .await;
        let mut m = sqlx::MySqlConnection::connect(&src_url).await.unwrap();
        let _ = sqlx::query(&format!(
            "DROP TABLE IF EXISTS {table}, cluecdc_signal_unused"
        ))
        .execute(&mut m)
        .await;
        let mut pg = sqlx::PgConnection::connect(&dest_url).await.unwrap();
        let _ = sqlx::query(&format!(
            "DROP TABLE IF EXISTS strict_{table}, lenient_{table}"
        ))
        .execute(&mut pg)
        .await;
    })
    .await;
}
