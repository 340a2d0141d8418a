//! Replications (MirrorMaker 2 on the stack's Connect worker) from the stack's Kafka to its
//! second Kafka cluster: every record of a running PostgreSQL pipeline copied (compared record
//! by record), the lag measured back to 0 after a burst of 10,000 changes, raised by a pause and
//! resolved by the resume, checkpoints for a consumer group, and the refusals.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::ClientConfig;
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

/// Every record of a topic's partition 0 as (key, value) bytes, in offset order.
fn records(bootstrap: &str, topic: &str) -> Vec<(Option<Vec<u8>>, Option<Vec<u8>>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "it-replication-read")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let (low, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(low))
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while (out.len() as i64) < high - low && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            out.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec)));
        }
    }
    out
}

/// Consumes `n` records of the topic as group `group` and commits: a consumer on the source.
fn consume_and_commit(bootstrap: &str, group: &str, topic: &str, n: usize) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let (mut read, mut last) = (0, None);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while read < n && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            read += 1;
            last = Some(m.offset());
        }
    }
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(last.unwrap() + 1))
        .unwrap();
    c.commit(&tpl, rdkafka::consumer::CommitMode::Sync).unwrap();
}

async fn lag(api: &Api, id: &str) -> Option<(i64, Value)> {
    let (_, d) = api.get(&format!("/api/v1/replications/{id}")).await;
    let p = d["progress"].clone();
    (p["error"].is_null() && !p["partitions"].as_array()?.is_empty())
        .then(|| (p["lag_records"].as_i64().unwrap(), d))
}

#[tokio::test]
async fn a_replication_copies_every_record_of_a_pipeline_to_the_second_cluster_and_measures_its_lag(
) {
    let s = stack();
    let dr_bootstrap = var("KAFKA2_BOOTSTRAP");
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "2s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let (kafka, connect) = stack_clusters(&api).await;
    let (status, dr) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "dr", "bootstrap_servers": dr_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{dr}");
    let dr = dr["id"].as_str().unwrap().to_string();
    let tag = tag();
    let schema = format!("rr_{tag}");
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name text NOT NULL)"),
        format!("INSERT INTO {schema}.items VALUES (1, 'a'), (2, 'b'), (3, 'c')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "pg", "provider": "POSTGRESQL", "capabilities": ["SOURCE"], "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": format!("rr_{tag}"), "publication_name": format!("rr_{tag}")}, "secrets": {"password": s.pg_password}})).await;
    let prefix = format!("rr-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "items", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.items")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let pid = p["id"].as_str().unwrap().to_string();
    let topic = format!("{prefix}.{schema}.items");
    let created = std::cell::RefCell::new(Vec::<String>::new());
    let result = async {
        crate::pipelines::wait_pipeline_running(&api, &pid).await;
        let base = json!({"name": "dr copy", "source_kafka_cluster_id": kafka, "target_kafka_cluster_id": dr, "connect_cluster_id": connect, "pipeline_ids": [pid]});
        let with = |patch: Value| {
            let mut b = base.clone();
            b.as_object_mut()
                .unwrap()
                .extend(patch.as_object().unwrap().clone());
            b
        };
        // Refusals, each naming its field; nothing is created.
        for (body, field, says) in [
            (
                with(json!({"target_kafka_cluster_id": kafka})),
                "target_kafka_cluster_id",
                "is the source too",
            ),
            (
                with(json!({"pipeline_ids": null, "topics": "no-such-topic\\..*"})),
                "topics",
                "matches none of the source's",
            ),
            (
                with(json!({"pipeline_ids": null, "topics": "(unclosed"})),
                "topics",
                "not a regular expression",
            ),
            (
                with(json!({"replication_policy": "mirror"})),
                "replication_policy",
                "default or identity",
            ),
        ] {
            let (status, err) = api.post("/api/v1/replications", body.clone()).await;
            assert_eq!(status, 422, "{body}: {err}");
            let got = err["error"]["fields"][field].as_str().unwrap_or_default();
            assert!(got.contains(says), "{field}: {got:?} in {err}");
        }
        let (_, list) = api.get("/api/v1/replications").await;
        assert_eq!(list["items"], json!([]), "nothing stored");
        // The preview shows what the pipeline's topics become on the target.
        let (status, pv) = api.post("/api/v1/replications/preview", base.clone()).await;
        assert_eq!(status, 200, "{pv}");
        assert!(
            pv["validation_errors"].as_object().unwrap().is_empty(),
            "{pv}"
        );
        let remote = format!("stack-kafka.{topic}");
        assert!(
            pv["matched"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m[0] == topic.as_str() && m[1] == remote.as_str()),
            "{pv}"
        );
        assert!(!pv.to_string().contains(&s.pg_password));

        // The replication: three connectors RUNNING, every record copied as it is.
        let (status, r) = api.post("/api/v1/replications", base.clone()).await;
        assert_eq!(status, 201, "{r}");
        let id = r["id"].as_str().unwrap().to_string();
        created.borrow_mut().push(id.clone());
        for kind in ["source", "heartbeat"] {
            wait_running(
                &s.connect_url,
                &format!("cluecdc-mirror-dr-copy-{kind}"),
                Duration::from_secs(120),
            )
            .await;
        }
        // The checkpoint connector has no task until a group matching its pattern exists.
        eventually(
            Duration::from_secs(60),
            "the checkpoint connector RUNNING",
            || async {
                let st =
                    connect_status(&s.connect_url, "cluecdc-mirror-dr-copy-checkpoint").await?;
                (st["connector"]["state"] == "RUNNING").then_some(())
            },
        )
        .await;
        eventually(
            Duration::from_secs(120),
            "the snapshot copied (lag 0)",
            || async { lag(&api, &id).await.filter(|(l, _)| *l == 0).map(|_| ()) },
        )
        .await;
        let (original, copy) = (
            records(&s.kafka_bootstrap, &topic),
            records(&dr_bootstrap, &remote),
        );
        assert_eq!(original.len(), 3, "three snapshot reads");
        assert_eq!(copy, original, "every record, key and value, in order");

        // A burst of 10,000 changes: the lag shown grows, then returns to 0.
        sqlx::query(&format!(
            "INSERT INTO {schema}.items SELECT g, 'n' || g FROM generate_series(100, 10099) g"
        ))
        .execute(&mut db)
        .await
        .unwrap();
        let seen_behind = std::cell::Cell::new(false);
        eventually(
            Duration::from_secs(240),
            "10,000 changes copied (lag 0)",
            || async {
                let (l, _) = lag(&api, &id).await?;
                if l > 0 {
                    seen_behind.set(true);
                }
                let ends = records_end(&s.kafka_bootstrap, &topic);
                (l == 0 && ends >= 10_003).then_some(())
            },
        )
        .await;
        let (original, copy) = (
            records(&s.kafka_bootstrap, &topic),
            records(&dr_bootstrap, &remote),
        );
        assert_eq!(original.len(), 10_003);
        assert_eq!(copy, original, "the burst copied record by record");

        // Paused, the replication falls behind by what the pipeline writes, and its lag and
        // checkpoint alerts fire; resumed, it catches up and they resolve. A group checkpointed
        // first, so there is a checkpoint to grow old.
        consume_and_commit(&s.kafka_bootstrap, &format!("it-dr-{tag}"), &topic, 1000);
        eventually(Duration::from_secs(90), "a first checkpoint", || async {
            let (_, d) = lag(&api, &id).await?;
            (!d["progress"]["checkpoints"].as_array()?.is_empty()).then_some(())
        })
        .await;
        // The checkpoint rule is off by default (see the README): switched on here.
        for (kind, threshold) in [
            ("replication_lag_records", 10),
            ("replication_lag_seconds", 1),
            ("replication_checkpoint_age_seconds", 20),
        ] {
            let (status, body) = api
                .patch(
                    &format!("/api/v1/alert-rules/{kind}"),
                    json!({"threshold": threshold, "for_secs": 0, "enabled": true}),
                )
                .await;
            assert_eq!(status, 200, "{body}");
        }
        let (status, body) = api
            .post(&format!("/api/v1/replications/{id}/pause"), json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        eventually(
            Duration::from_secs(60),
            "the three connectors and their tasks paused",
            || async {
                for kind in ["source", "checkpoint", "heartbeat"] {
                    let name = format!("cluecdc-mirror-dr-copy-{kind}");
                    let st = connect_status(&s.connect_url, &name).await?;
                    let tasks = st["tasks"].as_array()?;
                    if st["connector"]["state"] != "PAUSED"
                        || tasks.iter().any(|t| t["state"] != "PAUSED")
                    {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
        sqlx::query(&format!(
            "INSERT INTO {schema}.items SELECT g, 'p' || g FROM generate_series(20000, 20049) g"
        ))
        .execute(&mut db)
        .await
        .unwrap();
        let (behind, detail) = eventually(
            Duration::from_secs(60),
            "the lag shows the 50 new records",
            || async { lag(&api, &id).await.filter(|(l, _)| *l >= 50) },
        )
        .await;
        assert_eq!(behind, 50, "{detail}");
        // The group reads on while the checkpoint connector is paused: its checkpoint falls
        // behind its commits.
        consume_and_commit(&s.kafka_bootstrap, &format!("it-dr-{tag}"), &topic, 500);
        assert!(
            detail["progress"]["lag_secs"].as_f64().unwrap() > 0.0,
            "{detail}"
        );
        for kind in [
            "replication_lag_records",
            "replication_lag_seconds",
            "replication_checkpoint_age_seconds",
        ] {
            let firing = alert_becomes(&api, &id, kind, true).await.unwrap();
            assert!(
                firing["message"].as_str().unwrap().contains("dr"),
                "{firing}"
            );
        }
        let (status, body) = api
            .post(&format!("/api/v1/replications/{id}/resume"), json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        eventually(
            Duration::from_secs(120),
            "caught up after the resume",
            || async { lag(&api, &id).await.filter(|(l, _)| *l == 0).map(|_| ()) },
        )
        .await;
        // Caught up, the lag alerts resolve. The checkpoint may stay behind the group's
        // commits: MirrorMaker writes a checkpoint only when the translated offset changes.
        for kind in ["replication_lag_records", "replication_lag_seconds"] {
            alert_becomes(&api, &id, kind, false).await;
        }

        // Checkpoints: the group that read the source topic has translated offsets on the
        // target, and the readiness figures say what a resume there replays.
        let (_, detail) = eventually(
            Duration::from_secs(90),
            "a checkpoint for the group",
            || async {
                let (l, d) = lag(&api, &id).await?;
                d["progress"]["checkpoints"]
                    .as_array()?
                    .iter()
                    .any(|g| g["group"] == format!("it-dr-{tag}").as_str())
                    .then_some((l, d))
            },
        )
        .await;
        let group = detail["progress"]["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == format!("it-dr-{tag}").as_str())
            .unwrap()
            .clone();
        let cp = &group["partitions"][0];
        assert_eq!(
            cp["topic"],
            remote.as_str(),
            "checkpoints name the target topic: {group}"
        );
        // The group committed 1000, then 1500 while the checkpoint connector was paused;
        // the newest checkpoint carries one of them.
        let up = cp["upstream"].as_i64().unwrap();
        assert!(up == 1000 || up == 1500, "{group}");
        let down = cp["downstream"].as_i64().unwrap();
        assert_eq!(
            cp["position_on_target"], up,
            "the copy of source offset {up}: {group}"
        );
        assert_eq!(cp["miss"], 0, "{group}");
        // A consumer that resumes on the target at the translated offset reads again exactly
        // the records the readiness figure says, before the first one the group had not read.
        let replay = cp["replay"].as_i64().unwrap();
        let source_records = records(&s.kafka_bootstrap, &topic);
        let target_records = records(&dr_bootstrap, &remote);
        let first_unread = &source_records[up as usize];
        let reread = target_records[down as usize..]
            .iter()
            .position(|r| r == first_unread)
            .unwrap();
        assert_eq!(reread as i64, replay, "replayed on resume: {group}");
        let (status, ready) = api
            .get(&format!(
                "/api/v1/replications/{id}/readiness?group=it-dr-{tag}"
            ))
            .await;
        assert_eq!(status, 200, "{ready}");
        assert_eq!(ready["partitions"][0]["replay"], replay, "{ready}");
        assert!(
            ready["checklist"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["checked"] == false),
            "{ready}"
        );
        let (status, _) = api
            .get(&format!("/api/v1/replications/{id}/readiness?group=nobody"))
            .await;
        assert_eq!(status, 404);
        assert!(
            detail["progress"]["heartbeat_age_secs"].as_f64().is_some(),
            "{detail}"
        );

        // The other direction with the identity policy would loop: refused, naming the pair.
        let (status, err) = api.post("/api/v1/replications", json!({"name": "back", "source_kafka_cluster_id": dr, "target_kafka_cluster_id": kafka, "connect_cluster_id": connect, "topics": ".*", "replication_policy": "identity", "confirm_empty": true})).await;
        assert_eq!(status, 422, "{err}");
        assert!(
            err["error"]["fields"]["replication_policy"]
                .as_str()
                .unwrap()
                .contains("loop"),
            "{err}"
        );
        // A pattern that matches nothing yet is created once confirmed (topics created later
        // are picked up), with the default policy the other way.
        let back = json!({"name": "back", "source_kafka_cluster_id": dr, "target_kafka_cluster_id": kafka, "connect_cluster_id": connect, "topics": "later\\..*"});
        let (status, err) = api.post("/api/v1/replications", back.clone()).await;
        assert_eq!(status, 422, "unconfirmed: {err}");
        let mut confirmed = back.clone();
        confirmed["confirm_empty"] = json!(true);
        let (status, r) = api.post("/api/v1/replications", confirmed).await;
        assert_eq!(status, 201, "{r}");
        created
            .borrow_mut()
            .push(r["id"].as_str().unwrap().to_string());
    };
    with_cleanup(result, async {
        for id in created.borrow().iter() {
            let (status, body) = api.delete(&format!("/api/v1/replications/{id}")).await;
            assert_eq!(status, 204, "{body}");
        }
        for kind in ["source", "checkpoint", "heartbeat"] {
            let name = format!("cluecdc-mirror-dr-copy-{kind}");
            eventually(
                Duration::from_secs(30),
                "the connector gone from Connect",
                || async {
                    connect_status(&s.connect_url, &name)
                        .await
                        .is_none()
                        .then_some(())
                },
            )
            .await;
        }
        let _ = api
            .delete(&format!("/api/v1/pipelines/{pid}?drop_slot=true"))
            .await;
        drop_capture_fixture(&s, &format!("rr_{tag}"), &schema).await;
    })
    .await;
}

fn records_end(bootstrap: &str, topic: &str) -> i64 {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    c.fetch_watermarks(topic, 0, Duration::from_secs(10))
        .map(|(_, h)| h)
        .unwrap_or(0)
}

/// Waits (90 s) until the alert of `kind` on "dr copy" is firing (or no longer firing); panics
/// with the checkpoints measured and the alerts otherwise.
async fn alert_becomes(api: &Api, id: &str, kind: &str, firing: bool) -> Option<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let a = alert(api, kind, "dr copy", "firing").await;
        if a.is_some() == firing {
            return a;
        }
        if std::time::Instant::now() > deadline {
            let (_, d) = api.get(&format!("/api/v1/replications/{id}")).await;
            let (_, alerts) = api.get("/api/v1/alerts").await;
            panic!(
                "{kind} firing={} expected {firing}: {} / {alerts}",
                !firing, d["progress"]["checkpoints"]
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
