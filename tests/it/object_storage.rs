//! Object-storage deliveries through the Aiven S3 sink, against the real stack: every change
//! of a PostgreSQL pipeline lands as JSON Lines under each delivery's prefix (gzip or plain),
//! bad options are refused by field, a poison record fails or is skipped by policy, an outage of
//! the object store loses nothing, and a wrong secret is reported as permanent.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::*;

/// A short unique tag (5 base-36 characters).
fn tag() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let mut n = (micros + N.fetch_add(7919, std::sync::atomic::Ordering::Relaxed)) % 36u64.pow(5);
    let mut out = String::new();
    for _ in 0..5 {
        out.push(std::char::from_digit((n % 36) as u32, 36).unwrap());
        n /= 36;
    }
    out
}

/// One JSON line of an object, with where it came from.
#[derive(Debug, Clone)]
struct Line {
    key: String,
    topic: String,
    partition: i32,
    value: Value,
}

/// Every object under `prefix`, read back through the S3 API: (object key, its lines).
pub async fn objects(s: &Stack, prefix: &str) -> Vec<(String, Vec<Value>)> {
    objects_since(s, prefix, 0).await
}

/// Like `objects`, only those last written at or after `since` (unix seconds).
async fn objects_since(s: &Stack, prefix: &str, since: i64) -> Vec<(String, Vec<Value>)> {
    let s3 = s.s3_client(&s.s3_secret_key);
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = s3
            .list_objects_v2()
            .bucket(&s.s3_bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        for o in page.contents() {
            if o.last_modified().is_some_and(|t| t.secs() < since) {
                continue;
            }
            let key = o.key().unwrap().to_string();
            let body = s3
                .get_object()
                .bucket(&s.s3_bucket)
                .key(&key)
                .send()
                .await
                .unwrap()
                .body
                .collect()
                .await
                .unwrap()
                .into_bytes();
            let mut text = String::new();
            if key.ends_with(".gz") {
                flate2::read::MultiGzDecoder::new(&body[..])
                    .read_to_string(&mut text)
                    .unwrap_or_else(|e| panic!("{key} is not gzip: {e}"));
            } else {
                text = String::from_utf8(body.to_vec()).unwrap();
            }
            let lines = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{key}: {e}: {l}")))
                .collect();
            out.push((key, lines));
        }
        token = page.next_continuation_token().map(String::from);
        if token.is_none() {
            return out;
        }
    }
}

/// The lines under `prefix` by (topic, partition, offset); topic and partition come from the
/// key (`…/<topic>-<partition>-<start offset>.jsonl[.gz]`), the offset from the line.
async fn records(s: &Stack, prefix: &str) -> BTreeMap<(String, i32, i64), Line> {
    records_since(s, prefix, 0).await
}

/// Like `records`, from the objects written at or after `since` (unix seconds).
async fn records_since(s: &Stack, prefix: &str, since: i64) -> BTreeMap<(String, i32, i64), Line> {
    let mut out = BTreeMap::new();
    for (key, lines) in objects_since(s, prefix, since).await {
        // `<topic>-<partition>-<start>` (the default), or `<partition>-<start>` in a folder
        // named after the topic.
        let mut path = key.rsplit('/');
        let file = path.next().unwrap();
        let folder = path.next().unwrap_or_default();
        let stem = file.trim_end_matches(".gz").trim_end_matches(".jsonl");
        let mut parts = stem.rsplitn(3, '-');
        let _start = parts.next().unwrap();
        let partition: i32 = parts.next().unwrap().parse().unwrap();
        let topic = parts.next().unwrap_or(folder).to_string();
        for l in lines {
            let offset = l["offset"].as_i64().unwrap();
            out.insert(
                (topic.clone(), partition, offset),
                Line {
                    key: key.clone(),
                    topic: topic.clone(),
                    partition,
                    value: l,
                },
            );
        }
    }
    out
}

/// End offsets of a topic's partitions, from ClueCDC's topic API (broker metadata).
async fn end_offsets(api: &Api, kafka: &str, topic: &str) -> Vec<i64> {
    let (_, t) = api
        .get(&format!("/api/v1/kafka-clusters/{kafka}/topics/{topic}"))
        .await;
    t["partitions"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| p["high_watermark"].as_i64().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until every offset of `topics` (as of now) is in some object under `prefix`.
async fn all_delivered(
    s: &Stack,
    api: &Api,
    kafka: &str,
    topics: &[String],
    prefix: &str,
    within: Duration,
) -> BTreeMap<(String, i32, i64), Line> {
    // Every topic has its records (at least the snapshot) before "all" means anything.
    let want = eventually(within, "the topics have records", || async {
        let mut want = BTreeSet::new();
        for t in topics {
            let ends = end_offsets(api, kafka, t).await;
            if ends.iter().sum::<i64>() == 0 {
                return None;
            }
            for (p, end) in ends.into_iter().enumerate() {
                for o in 0..end {
                    want.insert((t.clone(), p as i32, o));
                }
            }
        }
        Some(want)
    })
    .await;
    eventually(
        within,
        &format!("{} records under {prefix}", want.len()),
        || async {
            let got = records(s, prefix).await;
            want.iter().all(|k| got.contains_key(k)).then_some(got)
        },
    )
    .await
}

fn minio(s: &Stack, name: &str, endpoint: &str, prefix: &str) -> Value {
    json!({"name": name, "provider": "MINIO", "capabilities": ["DESTINATION"],
        "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": endpoint, "prefix": prefix, "path_style": true, "use_ssl": false},
        "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})
}

/// A source schema with two tables (one with a composite key), rows in both, and a pipeline
/// over them; returns (pipeline, its table topics).
async fn capture(
    api: &Api,
    kafka: &str,
    connect: &str,
    tag: &str,
    heartbeat: bool,
) -> (Value, Vec<String>) {
    let s = stack();
    let schema = format!("o{tag}");
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name varchar(50) NOT NULL, qty int NOT NULL)"),
        format!("ALTER TABLE {schema}.items REPLICA IDENTITY FULL"),
        format!("CREATE TABLE {schema}.lines (order_id int, line int, sku varchar(20) NOT NULL, PRIMARY KEY (order_id, line))"),
        format!("INSERT INTO {schema}.items VALUES (1, 'apple', 3), (2, 'pear', 5)"),
        format!("INSERT INTO {schema}.lines VALUES (10, 1, 'A-1'), (10, 2, 'B-2')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": format!("pg {tag}"), "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": format!("o{tag}"), "publication_name": format!("o{tag}")}, "secrets": {"password": s.pg_password}})).await;
    let prefix = format!("o{tag}");
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": format!("orders {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.items"), format!("{schema}.lines")], "topic_prefix": prefix, "heartbeat": heartbeat})).await;
    assert_eq!(status, 201, "{p}");
    let topics = vec![
        format!("{prefix}.{schema}.items"),
        format!("{prefix}.{schema}.lines"),
    ];
    (p, topics)
}

async fn source_sql(sqls: &[String]) {
    let s = stack();
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in sqls {
        sqlx::query(sql).execute(&mut db).await.unwrap();
    }
}

async fn remove_prefix(s: &Stack, prefix: &str) {
    let dir = std::path::Path::new(&std::env::var("S3_DATA_DIR").unwrap())
        .join(&s.s3_bucket)
        .join(prefix.trim_end_matches('/'));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn object_storage_deliveries_write_every_change_under_their_prefixes_and_refuse_bad_options()
{
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let root = format!("o{tag}/");
    let (a_prefix, b_prefix, c_prefix) = (
        format!("{root}a/"),
        format!("{root}b/"),
        format!("{root}c/"),
    );
    let a = api
        .connection(minio(&s, "lake a", &s.s3_endpoint, &a_prefix))
        .await;
    let b = api
        .connection(minio(&s, "lake b", &s.s3_endpoint, &b_prefix))
        .await;
    let c = api
        .connection(minio(&s, "lake c", &s.s3_endpoint, &c_prefix))
        .await;
    let (p, topics) = capture(&api, &kafka, &connect, &tag, true).await;
    let items = topics[0].clone();
    let dlq = format!("{}.dlq", items);
    let ids = std::cell::RefCell::new(Vec::<String>::new());
    let result = async {
        // Bad options: 422 naming the field, and nothing is created anywhere.
        let base =
            json!({"name": "bad", "pipeline_id": p["id"], "destination_connection_id": a["id"]});
        for (patch, field, says) in [
            (
                json!({"key_template": "{{topic}}/{{timestamp:unit=yyyy}}/data"}),
                "key_template",
                "{{partition}}, {{start_offset}}",
            ),
            (
                json!({"flush_interval_ms": 1000}),
                "flush_interval_ms",
                "offset.flush.interval.ms",
            ),
            (json!({"compression": "zip"}), "compression", "gzip"),
            (json!({"records_per_file": 0}), "records_per_file", "from 1"),
            (json!({"tasks": 0}), "tasks", "from 1"),
            (json!({"format": "parquet"}), "format", "jsonl"),
            (
                json!({"insert_mode": "upsert"}),
                "insert_mode",
                "only for database deliveries",
            ),
            (
                json!({"dead_letter_topic": "x"}),
                "dead_letter_topic",
                "only with error_policy continue",
            ),
        ] {
            let mut body = base.clone();
            body.as_object_mut()
                .unwrap()
                .extend(patch.as_object().unwrap().clone());
            let (status, err) = api.post("/api/v1/deliveries", body).await;
            assert_eq!(status, 422, "{field}: {err}");
            let why = err["error"]["fields"][field]
                .as_str()
                .unwrap_or_else(|| panic!("{field}: {err}"));
            assert!(why.contains(says), "{field}: {why}");
        }
        let (_, list) = api.get("/api/v1/deliveries").await;
        assert_eq!(
            list["items"].as_array().unwrap().len(),
            0,
            "nothing stored: {list}"
        );
        let (_, live) = connect_call(
            reqwest::Method::GET,
            &format!("{}/connectors", s.connect_url),
            None,
        )
        .await;
        let live: Value = serde_json::from_str(&live).unwrap();
        assert!(
            !live
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "cluecdc-deliver-bad"),
            "nothing in Connect"
        );

        // The preview: the plugin, the storage test, references instead of values, an example key.
        let gz = json!({"name": "lake gzip", "pipeline_id": p["id"], "destination_connection_id": a["id"], "records_per_file": 100, "topics": topics});
        let (status, pv) = api.post("/api/v1/deliveries/preview", gz.clone()).await;
        assert_eq!(status, 200, "{pv}");
        assert_eq!(pv["kind"], "object_storage");
        assert_eq!(
            pv["connector_class"],
            "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector"
        );
        assert_eq!(
            pv["plugin_version"].as_str(),
            std::env::var("AIVEN_S3_PLUGIN_VERSION").ok().as_deref()
        );
        assert_eq!(pv["validation_errors"], json!({}), "{pv}");
        let checks = pv["destination_checks"].as_array().unwrap();
        assert!(
            checks.len() >= 4 && checks.iter().all(|k| k["status"] == "pass"),
            "{pv}"
        );
        assert!(pv["config"]["aws.secret.access.key"]
            .as_str()
            .unwrap()
            .starts_with("${cluecdc:"));
        assert!(
            !pv.to_string().contains(&s.s3_secret_key),
            "no secret in the preview"
        );
        assert_eq!(pv["config"]["file.name.template"].as_str().unwrap(), format!("{a_prefix}{{{{topic}}}}/year={{{{timestamp:unit=yyyy}}}}/month={{{{timestamp:unit=MM}}}}/day={{{{timestamp:unit=dd}}}}/{{{{topic}}}}-{{{{partition:padding=true}}}}-{{{{start_offset:padding=true}}}}.jsonl.gz"));
        let example = pv["example_key"].as_str().unwrap();
        assert!(
            example.starts_with(&format!("{a_prefix}{items}/year="))
                && example.ends_with(&format!(
                    "/{items}-0000000000-00000000000000000000.jsonl.gz"
                )),
            "{example}"
        );
        let said = pv["statements"].to_string();
        for words in [
            "Raw CDC export",
            "At least once",
            "Deduplicate by topic, partition and offset",
            "No exactly-once",
            "offset.flush.interval.ms",
        ] {
            assert!(said.contains(words), "the preview says {words:?}: {said}");
        }
        let (_, list) = api.get("/api/v1/deliveries").await;
        assert_eq!(
            list["items"].as_array().unwrap().len(),
            0,
            "a preview creates nothing"
        );

        // Three deliveries of one pipeline: gzip, uncompressed under keys of over 500 bytes (two
        // folders of 230 characters: the store takes 1,024 bytes, 255 between slashes), and
        // continue with a dead-letter topic.
        let long = format!("{}/{}", "l".repeat(230), "m".repeat(230));
        let plain = json!({"name": "lake plain", "pipeline_id": p["id"], "destination_connection_id": b["id"], "compression": "none", "key_template": format!("{{{{topic}}}}/{long}/{{{{topic}}}}-{{{{partition}}}}-{{{{start_offset}}}}")});
        let (status, pv) = api.post("/api/v1/deliveries/preview", plain.clone()).await;
        assert_eq!(status, 200, "{pv}");
        let probe = pv["destination_checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == "long keys")
            .unwrap_or_else(|| panic!("the storage check writes a long key too: {pv}"));
        assert_eq!(probe["status"], "pass", "{probe}");
        let longest = probe["message"].as_str().unwrap();
        assert!(longest.contains(&long), "{longest}");
        // A part of 300 bytes between two slashes: the store refuses such keys, so the delivery
        // is refused before anything is created, naming the long-key check and the fix.
        let mut too_long = plain.clone();
        too_long["name"] = json!("lake too long");
        too_long["key_template"] = json!(format!(
            "{{{{topic}}}}/{}/{{{{partition}}}}-{{{{start_offset}}}}",
            "x".repeat(300)
        ));
        let (status, err) = api.post("/api/v1/deliveries", too_long).await;
        assert_eq!(status, 422, "{err}");
        let why = err["error"]["fields"]["destination_connection_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            why.contains("long keys: the store refused an object whose key is")
                && why.contains("255 between two slashes"),
            "{why}"
        );
        for body in [
            gz,
            plain,
            json!({"name": "lake lenient", "pipeline_id": p["id"], "destination_connection_id": c["id"], "topics": [items.clone()], "error_policy": "continue", "dead_letter_topic": dlq}),
        ] {
            let (status, d) = api.post("/api/v1/deliveries", body).await;
            assert_eq!(status, 201, "{d}");
            assert_eq!(d["kind"], "object_storage");
            ids.borrow_mut().push(d["id"].as_str().unwrap().to_string());
        }
        // The snapshot first: its records mean the slot exists, so the changes below are
        // streamed as changes. (Written before the slot, they would be read by the snapshot
        // as rows, and items would never reach 6 records.)
        eventually(
            Duration::from_secs(120),
            "the snapshot of items",
            || async { (end_offsets(&api, &kafka, &items).await == vec![2]).then_some(()) },
        )
        .await;
        source_sql(&[
            format!("INSERT INTO o{tag}.items VALUES (3, 'fig', 7)"),
            format!("UPDATE o{tag}.items SET qty = 4, name = 'green apple' WHERE id = 1"),
            format!("DELETE FROM o{tag}.items WHERE id = 2"),
            format!("INSERT INTO o{tag}.lines VALUES (11, 1, 'C-3')"),
            format!("UPDATE o{tag}.lines SET sku = 'B-22' WHERE order_id = 10 AND line = 2"),
            format!("DELETE FROM o{tag}.lines WHERE order_id = 10 AND line = 1"),
        ])
        .await;
        // items: 2 snapshot reads, a create, an update, a delete and its tombstone.
        eventually(Duration::from_secs(90), "items has 6 records", || async {
            (end_offsets(&api, &kafka, &items).await == vec![6]).then_some(())
        })
        .await;
        let got_a = all_delivered(
            &s,
            &api,
            &kafka,
            &topics,
            &a_prefix,
            Duration::from_secs(120),
        )
        .await;
        let got_b = all_delivered(
            &s,
            &api,
            &kafka,
            &topics,
            &b_prefix,
            Duration::from_secs(120),
        )
        .await;
        for (prefix, got, ext) in [
            (&a_prefix, &got_a, ".jsonl.gz"),
            (&b_prefix, &got_b, ".jsonl"),
        ] {
            for l in got.values() {
                assert!(
                    l.key.starts_with(prefix.as_str()) && l.key.ends_with(ext),
                    "{}",
                    l.key
                );
                if ext == ".jsonl.gz" {
                    assert!(
                        l.key.contains(&format!("{}/year=", l.topic)),
                        "dated folders: {}",
                        l.key
                    );
                } else {
                    assert!(
                        l.key
                            .starts_with(&format!("{prefix}{}/{long}/{}-", l.topic, l.topic))
                            && l.key.len() > 500,
                        "the custom template, over 500 bytes: {}",
                        l.key
                    );
                }
                assert!(l.value["timestamp"].is_string(), "{:?}", l.value);
            }
            let ops: Vec<(String, Value)> = (0..6)
                .map(|o| {
                    let v = &got[&(items.clone(), 0, o)].value;
                    (
                        v["value"]["op"].as_str().unwrap_or("tombstone").to_string(),
                        v.clone(),
                    )
                })
                .collect();
            let names: Vec<&str> = ops.iter().map(|(op, _)| op.as_str()).collect();
            assert_eq!(names, ["r", "r", "c", "u", "d", "tombstone"], "{prefix}");
            let (_, update) = &ops[3];
            assert_eq!(update["key"], json!({"id": 1}));
            assert_eq!(
                update["value"]["before"]["name"], "apple",
                "REPLICA IDENTITY FULL: the whole before image"
            );
            assert_eq!(
                update["value"]["after"],
                json!({"id": 1, "name": "green apple", "qty": 4})
            );
            let source = &update["value"]["source"];
            assert_eq!(
                (
                    source["schema"].as_str(),
                    source["table"].as_str(),
                    source["db"].as_str()
                ),
                (
                    Some(format!("o{tag}").as_str()),
                    Some("items"),
                    Some(s.pg_source_db.as_str())
                )
            );
            assert!(
                update["value"]["ts_ms"].as_i64().unwrap() > 1_700_000_000_000
                    && source["lsn"].is_i64()
            );
            let (_, delete) = &ops[4];
            assert_eq!(delete["value"]["before"]["id"], 2);
            assert!(delete["value"]["after"].is_null());
            let (_, tombstone) = &ops[5];
            assert_eq!(
                (tombstone["key"].clone(), tombstone["value"].clone()),
                (json!({"id": 2}), Value::Null)
            );
            // The composite key travels whole.
            let lines: Vec<&Line> = got.values().filter(|l| l.topic == topics[1]).collect();
            assert!(lines
                .iter()
                .any(|l| l.value["key"] == json!({"order_id": 10, "line": 2})
                    && l.value["value"]["op"] == "u"));
            assert!(lines.iter().all(|l| l.partition == 0));
        }

        // The objects API lists the newest first, metadata only, under the delivery's prefixes.
        let all = objects(&s, &a_prefix).await;
        let (status, list) = api
            .get(&format!(
                "/api/v1/deliveries/{}/objects?limit=100",
                ids.borrow()[0]
            ))
            .await;
        assert_eq!(status, 200, "{list}");
        let listed = list["items"].as_array().unwrap();
        assert_eq!(listed.len(), all.len(), "{list}");
        assert!(listed
            .iter()
            .all(|o| o["key"].as_str().unwrap().starts_with(&a_prefix)
                && o["size"].as_i64().unwrap() > 0
                && o.get("body").is_none()));
        let times: Vec<&str> = listed
            .iter()
            .map(|o| o["last_modified"].as_str().unwrap())
            .collect();
        assert!(
            times.windows(2).all(|w| w[0] >= w[1]),
            "newest first: {times:?}"
        );
        let (_, one) = api
            .get(&format!(
                "/api/v1/deliveries/{}/objects?limit=1",
                ids.borrow()[0]
            ))
            .await;
        assert_eq!(one["items"].as_array().unwrap().len(), 1);
        assert_eq!(one["items"][0], listed[0]);
        let (status, err) = api
            .get(&format!(
                "/api/v1/deliveries/{}/objects?limit=0",
                ids.borrow()[0]
            ))
            .await;
        assert_eq!(status, 422, "{err}");

        // Freshness: the newest heartbeat found in the newest objects (the plain delivery
        // carries the heartbeat topic; the gzip one does not, so it measures none).
        let fresh = eventually(
            Duration::from_secs(90),
            "object-storage freshness",
            || async {
                let (_, d) = api
                    .get(&format!("/api/v1/deliveries/{}", ids.borrow()[1]))
                    .await;
                d["freshness_secs"].as_f64().map(|f| (f, d))
            },
        )
        .await;
        assert!(fresh.0 < 60.0, "{}", fresh.1);
        assert!(fresh.1["semantics"]
            .as_str()
            .unwrap()
            .contains("never deletes"));
        let (_, gz) = api
            .get(&format!("/api/v1/deliveries/{}", ids.borrow()[0]))
            .await;
        assert!(gz["freshness_secs"].is_null(), "{gz}");

        // A poison record: fail stops the delivery and says why; continue skips it into the
        // dead-letter topic and keeps writing.
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &s.kafka_bootstrap)
            .create()
            .unwrap();
        producer
            .send(
                BaseRecord::to(&items)
                    .key("{not json")
                    .payload("\u{0}garbage"),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        producer.flush(Duration::from_secs(10)).unwrap();
        source_sql(&[format!("INSERT INTO o{tag}.items VALUES (4, 'kiwi', 1)")]).await;
        eventually(
            Duration::from_secs(90),
            "the fail delivery FAILED with its reason",
            || async {
                let (_, d) = api
                    .get(&format!("/api/v1/deliveries/{}", ids.borrow()[0]))
                    .await;
                (d["connector"]["phase"] == "FAILED"
                    && d["connector"]["message"]
                        .as_str()
                        .unwrap_or("")
                        .contains("unreadable record"))
                .then_some(())
            },
        )
        .await;
        let got_c = eventually(
            Duration::from_secs(120),
            "the lenient delivery past the poison record",
            || async {
                let got = records(&s, &c_prefix).await;
                got.values()
                    .any(|l| l.value["value"]["after"]["name"] == "kiwi")
                    .then_some(got)
            },
        )
        .await;
        assert!(
            !got_c.contains_key(&(items.clone(), 0, 6)),
            "the poison record is not in the objects"
        );
        assert_eq!(
            end_offsets(&api, &kafka, &dlq).await,
            vec![1],
            "the skipped record is in the dead-letter topic"
        );

        // Deleting a delivery never deletes its objects.
        let before = objects(&s, &b_prefix).await.len();
        let plain = ids.borrow_mut().remove(1);
        let (status, _) = api.delete(&format!("/api/v1/deliveries/{plain}")).await;
        assert_eq!(status, 204);
        assert_eq!(objects(&s, &b_prefix).await.len(), before);
    };
    with_cleanup(result, async {
        let left = ids.borrow().clone();
        for id in left {
            let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        }
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}?drop_slot=true",
                p["id"].as_str().unwrap()
            ))
            .await;
        drop_capture_fixture(&s, &format!("o{tag}"), &format!("o{tag}")).await;
        remove_prefix(&s, &root).await;
    })
    .await;
}

#[tokio::test]
async fn an_object_store_outage_loses_nothing_and_a_wrong_secret_is_reported_as_permanent() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "2s"),
        ("CLUECDC_OFFSETS_INTERVAL", "2s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let root = format!("o{tag}/");
    // The sink reaches the object store through a proxy this test can take away: an outage for
    // this delivery alone, so other tests keep their S3 server.
    let mut gate = TcpGate::start(&s.s3_endpoint).await;
    let lake = api.connection(minio(&s, "lake", &gate.url(), &root)).await;
    let (p, topics) = capture(&api, &kafka, &connect, &tag, false).await;
    let items = topics[0].clone();
    let created = std::cell::RefCell::new(String::new());
    let result = async {
        let (status, d) = api.post("/api/v1/deliveries", json!({"name": "lake", "pipeline_id": p["id"], "destination_connection_id": lake["id"], "records_per_file": 10})).await;
        assert_eq!(status, 201, "{d}");
        let id = d["id"].as_str().unwrap().to_string();
        *created.borrow_mut() = id.clone();
        all_delivered(&s, &api, &kafka, &topics, &root, Duration::from_secs(120)).await;
        let (status, body) = api
            .patch(
                "/api/v1/alert-rules/delivery_stalled_seconds",
                json!({"threshold": 15}),
            )
            .await;
        assert_eq!(status, 200, "{body}");

        // A minute without the object store: writes wait, the stall is reported as transient,
        // and once it answers again every record arrives.
        gate.close();
        let down_at = std::time::Instant::now();
        let mut sql = Vec::new();
        for i in 100..130 {
            sql.push(format!(
                "INSERT INTO o{tag}.items VALUES ({i}, 'n{i}', {i})"
            ));
        }
        source_sql(&sql).await;
        let stalled = eventually(Duration::from_secs(60), "the stall alert", || async {
            alert(&api, "delivery_stalled_seconds", "lake", "firing").await
        })
        .await;
        let says = stalled["message"].as_str().unwrap();
        assert!(says.contains("transient"), "{says}");
        let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
        assert_eq!(
            d["connector"]["phase"], "RUNNING",
            "the sink's task keeps RUNNING while it cannot write: {d}"
        );
        tokio::time::sleep(Duration::from_secs(60).saturating_sub(down_at.elapsed())).await;
        gate.open().await;
        all_delivered(&s, &api, &kafka, &topics, &root, Duration::from_secs(120)).await;
        eventually(
            Duration::from_secs(60),
            "the stall alert resolves",
            || async {
                let (_, list) = api.get("/api/v1/alerts").await;
                list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["id"] == stalled["id"] && a["state"] == "resolved")
                    .then_some(())
            },
        )
        .await;

        // A wrong secret: nothing is written, and ClueCDC says it is permanent and what to do.
        let wrong = format!("wrong-secret-{tag}");
        let lake_id = lake["id"].as_str().unwrap();
        let (status, body) = api
            .post(
                &format!("/api/v1/connections/{lake_id}/rotate"),
                json!({"secrets": {"access_key_id": s.s3_access_key, "secret_access_key": wrong}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = api
            .post(&format!("/api/v1/deliveries/{id}/restart"), json!({}))
            .await;
        assert!(status == 200 || status == 202, "{status} {body}");
        // The restart is the reconciler's to carry out; a record that reached the old task
        // (still holding the right secret) before it stopped is written by it on its way out.
        eventually(
            Duration::from_secs(60),
            "the restart carried out",
            || async {
                let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
                (d["connector"]["restart_requested_by"].is_null()
                    && d["connector"]["phase"] == "RUNNING")
                    .then_some(())
            },
        )
        .await;
        // So a record is added until one waits: each is given 20 s to be written, and one that
        // was (by the old task) is followed by the next.
        let mut row = 200;
        let mut added_at = std::time::Instant::now() - Duration::from_secs(20);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let refused = loop {
            if added_at.elapsed() >= Duration::from_secs(20) {
                let written = records(&s, &root).await.len() as i64;
                let mut ends = 0;
                for t in &topics {
                    ends += end_offsets(&api, &kafka, t).await.iter().sum::<i64>();
                }
                if written >= ends {
                    source_sql(&[format!(
                        "INSERT INTO o{tag}.items VALUES ({row}, 'after rotation', 1)"
                    )])
                    .await;
                    row += 1;
                }
                added_at = std::time::Instant::now();
            }
            let (_, list) = api.get("/api/v1/alerts").await;
            if let Some(a) = list["items"].as_array().unwrap().iter().find(|a| {
                a["kind"] == "delivery_stalled_seconds"
                    && a["state"] == "firing"
                    && a["message"].as_str().unwrap().contains("permanent")
            }) {
                break a.clone();
            }
            if std::time::Instant::now() >= deadline {
                let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
                panic!(
                    "no permanent stall within 120 s ({} rows added after the rotation); alerts: {list}; delivery: {d}",
                    row - 200
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let says = refused["message"].as_str().unwrap();
        assert!(
            says.contains("SignatureDoesNotMatch")
                && says.contains("rotate the connection's credentials"),
            "{says}"
        );
        assert!(
            !says.contains(&wrong) && !says.contains(&s.s3_secret_key),
            "sanitized: {says}"
        );
        let live: Value = connect_config(&s, "cluecdc-deliver-lake")
            .await
            .expect("the connector in Connect");
        assert!(
            !live.to_string().contains(&wrong),
            "Connect stores a reference, not the secret"
        );
        // Put the right secret back: the delivery catches up.
        let (status, _) = api.post(&format!("/api/v1/connections/{lake_id}/rotate"), json!({"secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})).await;
        assert_eq!(status, 200);
        api.post(&format!("/api/v1/deliveries/{id}/restart"), json!({}))
            .await;
        all_delivered(
            &s,
            &api,
            &kafka,
            std::slice::from_ref(&items),
            &root,
            Duration::from_secs(120),
        )
        .await;
    };
    with_cleanup(result, async {
        let id = created.borrow().clone();
        if !id.is_empty() {
            let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        }
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}?drop_slot=true",
                p["id"].as_str().unwrap()
            ))
            .await;
        drop_capture_fixture(&s, &format!("o{tag}"), &format!("o{tag}")).await;
        remove_prefix(&s, &root).await;
    })
    .await;
}

#[tokio::test]
async fn an_object_storage_delivery_replayed_from_the_beginning_writes_every_record_again() {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let root = format!("o{tag}/");
    let lake = api
        .connection(minio(&s, "lake", &s.s3_endpoint, &root))
        .await;
    let (p, topics) = capture(&api, &kafka, &connect, &tag, false).await;
    let created = std::cell::RefCell::new(String::new());
    let result = async {
        let (status, d) = api.post("/api/v1/deliveries", json!({"name": "replay lake", "pipeline_id": p["id"], "destination_connection_id": lake["id"], "records_per_file": 10})).await;
        assert_eq!(status, 201, "{d}");
        let id = d["id"].as_str().unwrap().to_string();
        *created.borrow_mut() = id.clone();
        let first = all_delivered(&s, &api, &kafka, &topics, &root, Duration::from_secs(120)).await;
        eventually(Duration::from_secs(60), "lag 0", || async {
            let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
            let lag = d["lag"].as_array()?;
            (lag.len() == topics.len() && lag.iter().all(|l| l["lag"] == 0)).then_some(())
        })
        .await;
        // Objects written from here on are the replay's (S3 times are whole seconds).
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let since = chrono::Utc::now().timestamp();
        let replay = format!("/api/v1/deliveries/{id}/replay");
        let (status, plan) = api
            .post(
                &format!("{replay}?dry_run=true"),
                json!({"from": "earliest"}),
            )
            .await;
        assert_eq!(status, 200, "{plan}");
        assert_eq!(
            plan["records"],
            first.len() as i64,
            "every record retained is delivered again: {plan}"
        );
        let (status, started) = api
            .post(
                &replay,
                json!({"from": "earliest", "confirm": "replay lake"}),
            )
            .await;
        assert_eq!(status, 202, "{started}");
        let op_id = started["operation_id"].as_str().unwrap();
        let op = eventually(Duration::from_secs(120), "the replay ends", || async {
            let (_, op) = api.get(&format!("/api/v1/operations/{op_id}")).await;
            (op["state"] != "running").then_some(op)
        })
        .await;
        assert_eq!(op["state"], "done", "{op}");
        let again = eventually(
            Duration::from_secs(120),
            "every record again in objects written after the replay began",
            || async {
                let got = records_since(&s, &root, since).await;
                first.keys().all(|k| got.contains_key(k)).then_some(got)
            },
        )
        .await;
        for (k, line) in &first {
            assert_eq!(again[k].value, line.value, "{k:?} is the same record");
        }
    };
    with_cleanup(result, async {
        let id = created.borrow().clone();
        if !id.is_empty() {
            let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        }
        let _ = api
            .delete(&format!(
                "/api/v1/pipelines/{}?drop_slot=true",
                p["id"].as_str().unwrap()
            ))
            .await;
        drop_capture_fixture(&s, &format!("o{tag}"), &format!("o{tag}")).await;
        remove_prefix(&s, &root).await;
    })
    .await;
}
