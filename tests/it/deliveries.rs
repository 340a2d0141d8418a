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
            .text(format!(
                "{}/deliveries/{}",
                api.app.url,
                strict["id"].as_str().unwrap()
            ))
            .await;
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

/// Records in `topic` (all partitions) and how many of them carry a timestamp at or after
/// `since_ms`, read from the broker independently of ClueCDC.
fn kafka_count_since(bootstrap: &str, topic: &str, since_ms: i64) -> (usize, usize) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "it-count")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut remaining = 0i64;
    for p in md.topics()[0].partitions() {
        let (low, high) = c
            .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
            .unwrap();
        remaining += high - low;
        tpl.add_partition_offset(topic, p.id(), rdkafka::Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let (mut all, mut since) = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while (all as i64) < remaining && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            all += 1;
            if m.timestamp().to_millis().unwrap_or(0) >= since_ms {
                since += 1;
            }
        }
    }
    assert_eq!(all as i64, remaining, "read the whole topic");
    (all, since)
}

async fn total_lag(api: &Api, id: &str) -> Option<i64> {
    let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
    let lag = d["lag"].as_array()?;
    (!lag.is_empty()).then(|| lag.iter().map(|p| p["lag"].as_i64().unwrap()).sum())
}

#[tokio::test]
async fn a_delivery_replays_from_a_time_skips_and_undoes_with_its_offset_history_and_a_killed_serve_finishes_the_replay(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().join("data");
    let api = app_on_data(&data, None);
    // The serve started after the kill (set once).
    let restarted: std::cell::OnceCell<Api> = std::cell::OnceCell::new();
    // Connect through a proxy that can refuse offset changes: the replay then waits at its
    // "change" step, where the test kills serve.
    let proxy = ConnectProxy::start(&s.connect_url).await;
    let (kafka, connect, provider_token) = stack_via_proxy(&api, &proxy).await;
    let tag = tag();
    let schema = format!("rp_{tag}");
    let src_url = s.pg_url(&s.pg_source_db);
    let mut db = sqlx::PgConnection::connect(&src_url).await.unwrap();
    for sql in [format!("CREATE SCHEMA {schema}"), format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name varchar(50) NOT NULL, qty int NOT NULL)"), format!("INSERT INTO {schema}.items VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)")] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "pg src", "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": format!("rp_{tag}"), "publication_name": format!("rp_{tag}")}, "secrets": {"password": s.pg_password}})).await;
    let dest = api.connection(maria_dest(&s)).await;
    let prefix = format!("rp-{}", tag.replace('_', "-"));
    let topic = format!("{prefix}.{schema}.items");
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "pg items", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.items")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let table = format!("rp_{tag}_items");
    let (status, d) = api.post("/api/v1/deliveries", json!({"name": "replayed", "pipeline_id": p["id"], "destination_connection_id": dest["id"], "table_name_format": format!("rp_{tag}_${{source.table}}")})).await;
    assert_eq!(status, 201, "{d}");
    let id = d["id"].as_str().unwrap().to_string();
    let dest_url = s.mariadb_url(&std::env::var("MARIADB_DEST_DB").unwrap());
    let row = |i: i64| {
        (
            i,
            ["a", "b", "c", "d", "e", "f", "g", "h"][(i - 1) as usize].to_string(),
            i,
        )
    };
    let rows = |ids: std::ops::RangeInclusive<i64>| -> Rows { ids.map(row).collect() };
    let dest_is = |want: Rows, what: &'static str| {
        let (dest_url, table) = (dest_url.clone(), table.clone());
        async move {
            eventually(Duration::from_secs(120), what, || async {
                (maria_rows(&dest_url, &table).await == want).then_some(())
            })
            .await
        }
    };
    let result = async {
        dest_is(rows(1..=3), "the snapshot in the destination").await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let t = chrono::Utc::now();
        let t_text = t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for sql in [format!(
            "INSERT INTO {schema}.items VALUES (4, 'd', 4), (5, 'e', 5)"
        )] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        dest_is(rows(1..=5), "the changes in the destination").await;
        eventually(Duration::from_secs(60), "lag 0", || async {
            (total_lag(&api, &id).await == Some(0)).then_some(())
        })
        .await;
        let (all, since) = kafka_count_since(&s.kafka_bootstrap, &topic, t.timestamp_millis());
        assert_eq!(
            (all, since),
            (5, 2),
            "3 snapshot reads before the time, 2 inserts after"
        );

        // The plan: per partition, what is delivered again, counted as Kafka counts it.
        let replay = format!("/api/v1/deliveries/{id}/replay");
        let (status, plan) = api
            .post(
                &format!("{replay}?dry_run=true"),
                json!({"from": "timestamp", "timestamp": t_text}),
            )
            .await;
        assert_eq!(status, 200, "{plan}");
        assert_eq!(plan["records"], since as i64, "{plan}");
        assert_eq!(plan["skipped"], 0);
        let item = &plan["items"][0];
        assert_eq!(
            (item["committed"].clone(), item["target"].clone()),
            (json!(5), json!(3)),
            "{plan}"
        );
        assert!(item["oldest_retained_at"].is_string(), "{plan}");

        // Refusals: each names its field, and nothing changes.
        let future = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
        for (body, field, says) in [
            (
                json!({"from": "timestamp", "timestamp": future}),
                "timestamp",
                "in the future",
            ),
            (json!({"from": "sometime"}), "from", "earliest"),
            (
                json!({"from": "offsets", "offsets": [{"topic": topic, "partition": 0, "offset": 99}]}),
                "offsets[0].offset",
                "past the end",
            ),
            (
                json!({"from": "offsets", "offsets": [{"topic": topic, "partition": 0, "offset": -1}]}),
                "offsets[0].offset",
                "before the log start",
            ),
            (
                json!({"from": "offsets", "offsets": [{"topic": topic, "partition": 7, "offset": 0}]}),
                "offsets[0].partition",
                "no partition 7",
            ),
            (
                json!({"from": "offsets", "offsets": [{"topic": "other.topic", "partition": 0, "offset": 0}]}),
                "offsets[0].topic",
                "not one of this delivery's topics",
            ),
            (
                json!({"from": "earliest"}),
                "confirm",
                "type the delivery's name",
            ),
            (
                json!({"from": "earliest", "confirm": "Replayed"}),
                "confirm",
                "replayed",
            ),
        ] {
            let (status, err) = api.post(&replay, body.clone()).await;
            assert_eq!(status, 422, "{body}: {err}");
            let got = err["error"]["fields"][field].as_str().unwrap_or_default();
            assert!(got.contains(says), "{body}: {field} says {got:?}: {err}");
        }
        create_user(&api.app, "vic", "viewer");
        let viewer = create_token(&api.app, "vic", &[]);
        let res = api
            .http
            .post(format!("{}{replay}?dry_run=true", api.app.url))
            .bearer_auth(&viewer)
            .json(&json!({"from": "earliest"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 403, "a viewer cannot replay");
        let (_, history) = api
            .get(&format!("/api/v1/deliveries/{id}/offset-history"))
            .await;
        assert_eq!(history["items"], json!([]), "no refusal changed anything");
        assert_eq!(total_lag(&api, &id).await, Some(0));
        let (_, ops) = api.get(&format!("/api/v1/operations?target={id}")).await;
        assert_eq!(ops["items"], json!([]), "no refusal started an operation");
        let st = connect_status(&s.connect_url, "cluecdc-deliver-replayed")
            .await
            .unwrap();
        assert_eq!(
            st["connector"]["state"], "RUNNING",
            "no refusal stopped the connector"
        );

        // A destination that lost its rows: the replay from the time brings back exactly the
        // records at or after it (rows 4 and 5), not the older ones.
        let mut m = sqlx::MySqlConnection::connect(&dest_url).await.unwrap();
        sqlx::query(&format!("DELETE FROM {table}"))
            .execute(&mut m)
            .await
            .unwrap();
        let (status, started) = api
            .post(&replay, json!({"from": "timestamp", "timestamp": t_text, "confirm": "replayed", "reason": "destination restored from backup"}))
            .await;
        assert_eq!(status, 202, "{started}");
        let op = operation_ends(&api, started["operation_id"].as_str().unwrap()).await;
        assert_eq!(op["state"], "done", "{op}");
        assert_eq!(op["kind"], "replay");
        assert_eq!(
            op["target"],
            json!({"kind": "delivery", "id": id, "name": "replayed"}),
            "{op}"
        );
        // Done means observed delivering again: the sink committed past the target (3), not
        // only RUNNING.
        let (_, offsets) = connect_call(
            reqwest::Method::GET,
            &format!(
                "{}/connectors/cluecdc-deliver-replayed/offsets",
                s.connect_url
            ),
            None,
        )
        .await;
        let offsets: Value = serde_json::from_str(&offsets).unwrap();
        // This run's topic: the connector's group is named after the delivery, so it still
        // holds the topics of an earlier run of this test (a retry's, say).
        let committed = offsets["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["partition"]["kafka_topic"] == topic.as_str())
            .and_then(|o| o["offset"]["kafka_offset"].as_i64());
        assert!(
            committed.is_some_and(|c| c > 3),
            "committed past the target when the replay is done: {offsets}"
        );
        dest_is(rows(4..=5), "exactly the rows at or after the time again").await;
        eventually(
            Duration::from_secs(60),
            "lag 0 after the replay",
            || async { (total_lag(&api, &id).await == Some(0)).then_some(()) },
        )
        .await;
        assert_eq!(
            maria_rows(&dest_url, &table).await,
            rows(4..=5),
            "nothing older came back"
        );
        let (_, history) = api
            .get(&format!("/api/v1/deliveries/{id}/offset-history"))
            .await;
        let entry = &history["items"][0];
        assert_eq!(
            entry["before"],
            json!([{"topic": topic, "partition": 0, "offset": 5}]),
            "{history}"
        );
        assert_eq!(
            entry["after"],
            json!([{"topic": topic, "partition": 0, "offset": 3}]),
            "{history}"
        );
        assert_eq!(entry["reason"], "destination restored from backup");
        assert_eq!(entry["actor"], "ada");
        let (_, audit) = api.get("/api/v1/audit?limit=200").await;
        let actions: Vec<&str> = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a["action"].as_str())
            .collect();
        assert!(
            actions.contains(&"delivery.replay") && actions.contains(&"operation.done"),
            "{actions:?}"
        );

        // Skip and undo: a paused delivery with records waiting skips them, and restoring the
        // saved offsets brings the same lag back; the delivery stays paused throughout.
        let (status, body) = api
            .post(&format!("/api/v1/deliveries/{id}/pause"), json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        let name = "cluecdc-deliver-replayed";
        eventually(Duration::from_secs(60), "paused", || async {
            let st = connect_status(&s.connect_url, name).await?;
            (st["connector"]["state"] == "PAUSED").then_some(())
        })
        .await;
        sqlx::query(&format!(
            "INSERT INTO {schema}.items VALUES (6, 'f', 6), (7, 'g', 7), (8, 'h', 8)"
        ))
        .execute(&mut db)
        .await
        .unwrap();
        eventually(Duration::from_secs(60), "3 records waiting", || async {
            (total_lag(&api, &id).await == Some(3)).then_some(())
        })
        .await;
        let (status, plan) = api
            .post(&format!("{replay}?dry_run=true"), json!({"from": "latest"}))
            .await;
        assert_eq!(status, 200, "{plan}");
        assert_eq!(
            (plan["skipped"].clone(), plan["records"].clone()),
            (json!(3), json!(0)),
            "{plan}"
        );
        let (status, started) = api
            .post(&replay, json!({"from": "latest", "confirm": "replayed"}))
            .await;
        assert_eq!(status, 202, "{started}");
        let op = operation_ends(&api, started["operation_id"].as_str().unwrap()).await;
        assert_eq!(op["state"], "done", "{op}");
        assert_eq!(total_lag(&api, &id).await, Some(0), "skipped");
        let st = connect_status(&s.connect_url, name).await.unwrap();
        assert_eq!(
            st["connector"]["state"], "PAUSED",
            "given back paused: {st}"
        );
        let (_, history) = api
            .get(&format!("/api/v1/deliveries/{id}/offset-history"))
            .await;
        let skip = history["items"][0].clone();
        assert_eq!(skip["before"][0]["offset"], 5, "{history}");
        assert_eq!(skip["after"][0]["offset"], 8, "{history}");
        let restore = format!(
            "/api/v1/deliveries/{id}/offset-history/{}/restore",
            skip["id"]
        );
        let (status, plan) = api
            .post(&format!("{restore}?dry_run=true"), json!({}))
            .await;
        assert_eq!(status, 200, "{plan}");
        assert_eq!(plan["records"], 3, "{plan}");
        let (status, started) = api.post(&restore, json!({"confirm": "replayed"})).await;
        assert_eq!(status, 202, "{started}");
        let op = operation_ends(&api, started["operation_id"].as_str().unwrap()).await;
        assert_eq!(op["state"], "done", "{op}");
        assert_eq!(
            total_lag(&api, &id).await,
            Some(3),
            "the lag before the skip is back"
        );
        let (status, body) = api
            .post(&format!("/api/v1/deliveries/{id}/resume"), json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        dest_is(rows(4..=8), "the skipped records, restored, delivered").await;

        // A replay whose "change" step cannot finish, serve killed there: the next serve on the
        // same database finishes it by itself.
        proxy.fail("PATCH", "/offsets");
        let (status, started) = api
            .post(&replay, json!({"from": "earliest", "confirm": "replayed"}))
            .await;
        assert_eq!(status, 202, "{started}");
        let op_id = started["operation_id"].as_str().unwrap().to_string();
        let op = eventually(
            Duration::from_secs(60),
            "the replay waits at its change step",
            || async {
                let (_, op) = api.get(&format!("/api/v1/operations/{op_id}")).await;
                (op["step"] == "change" && op["error"].as_str().is_some_and(|e| e.contains("503")))
                    .then_some(op)
            },
        )
        .await;
        assert_eq!(op["state"], "running", "{op}");
        let st = connect_status(&s.connect_url, name).await.unwrap();
        assert_eq!(st["connector"]["state"], "STOPPED", "{st}");
        // The operation's page shows where it waits, and why.
        let page = api.text(&format!("/operations/{op_id}")).await;
        assert!(page.contains("503"), "the page shows the error: {page}");
        assert!(
            page.contains("now: <strong>change</strong>"),
            "the page shows the step it waits at: {page}"
        );
        let (status, err) = api
            .post(&replay, json!({"from": "earliest", "confirm": "replayed"}))
            .await;
        assert_eq!(status, 409, "no second replay while one is open: {err}");
        let (status, err) = api
            .post(&format!("/api/v1/deliveries/{id}/resume"), json!({}))
            .await;
        assert_eq!(
            status, 409,
            "no resume by another route while the replay holds it: {err}"
        );
        assert!(
            err["error"]["message"].as_str().unwrap().contains(&op_id),
            "{err}"
        );
        let (status, err) = api
            .post(&format!("/api/v1/connectors/{name}/resume"), json!({}))
            .await;
        assert_eq!(status, 409, "nor through the connectors API: {err}");
        let (status, err) = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        assert_eq!(status, 409, "nor a delete: {err}");
        kill_hard(&api.app).await;
        proxy.heal();
        let _ = restarted.set(app_on_data(&data, Some(api.token.clone())));
        let api = restarted.get().unwrap();
        write_provider_file(api, &provider_token);
        let op = operation_ends(api, &op_id).await;
        assert_eq!(op["state"], "done", "the restarted serve finished it: {op}");
        let (_, history) = api
            .get(&format!("/api/v1/deliveries/{id}/offset-history"))
            .await;
        assert_eq!(history["items"][0]["operation_id"], op_id.as_str());
        assert_eq!(history["items"][0]["after"][0]["offset"], 0, "{history}");
        wait_running(&s.connect_url, name, Duration::from_secs(60)).await;
        dest_is(
            rows(1..=8),
            "every row again after the replay from the beginning",
        )
        .await;
    };
    with_cleanup(result, async {
        proxy.heal();
        let api = restarted.get().unwrap_or(&api);
        let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}?drop_slot=true",
                p["id"].as_str().unwrap()
            ))
            .await;
        drop_capture_fixture(&s, &format!("rp_{tag}"), &schema).await;
        let mut m = sqlx::MySqlConnection::connect(&dest_url).await.unwrap();
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&mut m)
            .await;
    })
    .await;
}
