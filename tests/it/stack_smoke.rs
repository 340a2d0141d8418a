//! Each part of the native data plane is real and answering. A failure names the component
//! and how to look at it, so stopping any one component makes exactly its test say so.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use sqlx::Connection;

use crate::helpers::stack;

fn down(component: &str, addr: &str, err: impl std::fmt::Display) -> String {
    format!(
        "{component} at {addr} is not answering: {err}. Check `scripts/stack status` and `scripts/stack logs {}`",
        component.to_lowercase().replace(' ', "-")
    )
}

#[tokio::test]
async fn kafka_connect_lists_every_plugin_the_product_needs() {
    let s = stack();
    let _c = crate::helpers::connect_shared().await;
    let url = format!("{}/connector-plugins?connectorsOnly=true", s.connect_url);
    let res = reqwest::Client::new()
        .get(&url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{}", down("Connect", &s.connect_url, e)));
    assert!(
        res.status().is_success(),
        "{}",
        down("Connect", &s.connect_url, res.status())
    );
    let plugins: Vec<serde_json::Value> = res.json().await.unwrap();
    let classes: Vec<&str> = plugins.iter().filter_map(|p| p["class"].as_str()).collect();
    for class in [
        "io.debezium.connector.postgresql.PostgresConnector",
        "io.debezium.connector.mysql.MySqlConnector",
        "io.debezium.connector.mariadb.MariaDbConnector",
        "io.debezium.connector.jdbc.JdbcSinkConnector",
    ] {
        assert!(
            classes.contains(&class),
            "Connect lacks plugin {class}; it has {classes:?}"
        );
    }
    // The Aiven S3 sink is not on Maven Central; `scripts/stack` installs the release archive when
    // one can be had, else the source-built one, and says which. The test command needs it.
    let aiven = "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector";
    match std::env::var("AIVEN_S3_PLUGIN").as_deref() {
        Ok("installed") => {
            let listed = plugins
                .iter()
                .find(|p| p["class"] == aiven)
                .unwrap_or_else(|| panic!("scripts/stack installed the Aiven S3 sink but Connect does not list {aiven}"));
            assert_eq!(listed["type"], "sink");
            assert_eq!(
                listed["version"].as_str(),
                std::env::var("AIVEN_S3_PLUGIN_VERSION").ok().as_deref(),
                "Connect runs another version of the S3 sink than scripts/stack reports"
            );
        }
        Ok("unavailable") => panic!("the Aiven S3 sink is not installed: `scripts/stack status` says what was tried"),
        other => panic!("AIVEN_S3_PLUGIN from `scripts/stack env` must be installed or unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn kafka_broker_answers_metadata_requests() {
    let s = stack();
    let bootstrap = s.kafka_bootstrap.clone();
    let result = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("socket.connection.setup.timeout.ms", "3000")
            .create()
            .map_err(|e| e.to_string())?;
        consumer
            .fetch_metadata(None, Duration::from_secs(8))
            .map(|m| m.brokers().len())
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap();
    let brokers = result.unwrap_or_else(|e| panic!("{}", down("Kafka", &s.kafka_bootstrap, e)));
    assert_eq!(brokers, 1, "the native stack runs a single KRaft node");
}

#[tokio::test]
async fn postgresql_creates_and_drops_a_logical_replication_slot() {
    let s = stack();
    let addr = format!("{}:{}", s.pg_host, s.pg_port);
    let mut conn = tokio::time::timeout(
        Duration::from_secs(10),
        sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db)),
    )
    .await
    .unwrap_or_else(|e| panic!("{}", down("PostgreSQL", &addr, e)))
    .unwrap_or_else(|e| panic!("{}", down("PostgreSQL", &addr, e)));
    let wal_level: String = sqlx::query_scalar("SHOW wal_level")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(wal_level, "logical");
    let slot = format!("smoke_{}", std::process::id());
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
        .bind(&slot)
        .execute(&mut conn)
        .await
        .unwrap();
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
    )
    .bind(&slot)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(exists);
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&slot)
        .execute(&mut conn)
        .await
        .unwrap();
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
    )
    .bind(&slot)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(!exists, "the slot is gone after pg_drop_replication_slot");
}

#[tokio::test]
async fn mariadb_writes_a_row_based_binlog_with_full_row_images() {
    let s = stack();
    let addr = format!("{}:{}", s.mariadb_host, s.mariadb_port);
    let mut conn = tokio::time::timeout(
        Duration::from_secs(10),
        sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db)),
    )
    .await
    .unwrap_or_else(|e| panic!("{}", down("MariaDB", &addr, e)))
    .unwrap_or_else(|e| panic!("{}", down("MariaDB", &addr, e)));
    for (name, want) in [
        ("log_bin", "ON"),
        ("binlog_format", "ROW"),
        ("binlog_row_image", "FULL"),
    ] {
        let row: (String, String) = sqlx::query_as(&format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(row.1, want, "MariaDB {name}");
    }
}

#[tokio::test]
async fn the_s3_server_round_trips_a_signed_object_and_refuses_a_wrong_secret() {
    let s = stack();
    let client = s.s3_client(&s.s3_secret_key);
    let key = format!("smoke/{}.txt", uuid_like());
    let body = b"cluecdc smoke object".to_vec();
    client
        .put_object()
        .bucket(&s.s3_bucket)
        .key(&key)
        .body(body.clone().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{}", down("S3", &s.s3_endpoint, format!("{e:?}"))));
    let got = client
        .get_object()
        .bucket(&s.s3_bucket)
        .key(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        body.as_slice()
    );
    client
        .delete_object()
        .bucket(&s.s3_bucket)
        .key(&key)
        .send()
        .await
        .unwrap();
    let gone = client
        .head_object()
        .bucket(&s.s3_bucket)
        .key(&key)
        .send()
        .await;
    assert!(gone.is_err(), "the object is deleted");

    let wrong = s.s3_client("not-the-secret-key-0000000000");
    let refused = wrong.head_bucket().bucket(&s.s3_bucket).send().await;
    assert!(
        refused.is_err(),
        "a wrong secret must be refused by the S3 server (SigV4 is verified)"
    );
    let refused = wrong
        .put_object()
        .bucket(&s.s3_bucket)
        .key(&key)
        .body(body.into())
        .send()
        .await;
    assert!(
        refused.is_err(),
        "a write signed with a wrong secret must be refused"
    );
}

fn uuid_like() -> String {
    format!("{}-{}", std::process::id(), chrono_nanos())
}

fn chrono_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
