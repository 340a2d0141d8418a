//! Each part of the native data plane is real and answering. A failure names the component
//! and how to look at it, so stopping any one component makes exactly its test say so.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use sqlx::Connection;

use crate::helpers::{stack, var};

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

/// The stack's MySQL (Debian sid's mysql-server, `scripts/stack` component `mysql`), reached as
/// a connector would: TLS verified against the test CA and the host name, as the capture user.
#[tokio::test]
async fn mysql_streams_a_gtid_row_binlog_over_verified_tls_and_its_capture_user_has_exactly_the_debezium_grants(
) {
    use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
    use sqlx::Row;
    let (host, port) = (var("MYSQL_HOST"), var("MYSQL_PORT").parse::<u16>().unwrap());
    let addr = format!("{host}:{port}");
    let opts = |user: &str, password: &str, db: &str| {
        MySqlConnectOptions::new()
            .host(&host)
            .port(port)
            .username(user)
            .password(password)
            .database(db)
            .ssl_mode(MySqlSslMode::VerifyIdentity)
            .ssl_ca(var("TLS_CA_FILE"))
    };
    let mut conn = tokio::time::timeout(
        Duration::from_secs(10),
        sqlx::MySqlConnection::connect_with(&opts(
            &var("MYSQL_USER"),
            &var("MYSQL_PASSWORD"),
            &var("MYSQL_DB"),
        )),
    )
    .await
    .unwrap_or_else(|e| panic!("{}", down("MySQL", &addr, e)))
    .unwrap_or_else(|e| panic!("{}", down("MySQL", &addr, e)));

    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        version,
        var("MYSQL_VERSION"),
        "MySQL runs another version than `scripts/stack env` pins (MYSQL_VERSION)"
    );
    assert!(
        !version.to_lowercase().contains("mariadb"),
        "the MySQL component is a MariaDB server: {version}"
    );
    for (name, want) in [
        ("log_bin", "ON"),
        ("binlog_format", "ROW"),
        ("binlog_row_image", "FULL"),
        ("gtid_mode", "ON"),
        ("enforce_gtid_consistency", "ON"),
    ] {
        let row: (String, String) = sqlx::query_as(&format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(row.1, want, "MySQL {name}");
    }
    let server_id: u64 = sqlx::query_scalar("SELECT @@server_id")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_ne!(server_id, 0, "MySQL needs a server_id for a binary log");
    let tls: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_version'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(
        tls.1.starts_with("TLSv1."),
        "the session is not encrypted: {tls:?}"
    );

    // Exactly the grants Debezium documents for the MySQL connector, nothing more. Besides them
    // the signal-table tests (mysql::, tables_progress::) give INSERT on `cluecdc_signal`, the
    // one extra grant Debezium documents for incremental snapshots; it may already be there.
    let signal_grant = format!(
        "GRANT INSERT ON `{}`.`cluecdc_signal` TO `{}`@`%`",
        var("MYSQL_DB"),
        var("MYSQL_USER")
    );
    let grants: Vec<String> = sqlx::query("SHOW GRANTS FOR CURRENT_USER()")
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get_unchecked::<String, _>(0).unwrap())
        .filter(|g| *g != signal_grant)
        .collect();
    assert_eq!(
        grants,
        [format!(
            "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `{}`@`%`",
            var("MYSQL_USER")
        )],
        "the capture user's grants"
    );
    // What those grants are for: the binary log position (MySQL 8.4+ spelling) and the log list.
    let status = sqlx::query("SHOW BINARY LOG STATUS")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let file: String = status.try_get_unchecked(0).unwrap();
    let gtids: String = status.try_get_unchecked(4).unwrap();
    assert!(file.starts_with("binlog."), "binary log file {file}");
    assert!(
        gtids.is_empty() || gtids.contains(':'),
        "Executed_Gtid_Set {gtids:?}"
    );
    sqlx::query("SHOW BINARY LOGS")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert!(
        sqlx::query("CREATE TABLE smoke_refused (id INT PRIMARY KEY)")
            .execute(&mut conn)
            .await
            .is_err(),
        "the capture user can create tables: it must have the Debezium grants only"
    );

    // The destination user owns the destination database (a JDBC sink creates and alters tables).
    let mut dest = sqlx::MySqlConnection::connect_with(&opts(
        &var("MYSQL_DEST_USER"),
        &var("MYSQL_DEST_PASSWORD"),
        &var("MYSQL_DEST_DB"),
    ))
    .await
    .unwrap_or_else(|e| panic!("MySQL: the destination user cannot log in: {e}"));
    let table = format!("smoke_{}", std::process::id());
    for sql in [
        format!("CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(10))"),
        format!("ALTER TABLE {table} ADD COLUMN w INT NULL"),
        format!("INSERT INTO {table} (id, v) VALUES (1, 'a') ON DUPLICATE KEY UPDATE v = 'b'"),
        format!("DROP TABLE {table}"),
    ] {
        sqlx::query(&sql)
            .execute(&mut dest)
            .await
            .unwrap_or_else(|e| panic!("MySQL destination user: {sql}: {e}"));
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

/// The stack's object store is MinIO (built from the pinned source), and takes what real S3
/// takes: keys over 500 bytes (the S3 server the stack ran before, s3s-fs, failed above ~123 with "File name too long").
/// MinIO keeps objects as files: each '/'-separated segment of a key can be 255 bytes at most.
#[tokio::test]
async fn the_s3_server_is_minio_and_takes_object_keys_longer_than_500_bytes() {
    let s = stack();
    let live = reqwest::Client::new()
        .get(format!("{}/minio/health/live", s.s3_endpoint))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{}", down("S3", &s.s3_endpoint, e)));
    assert!(
        live.status().is_success(),
        "{}",
        down("S3", &s.s3_endpoint, live.status())
    );
    assert_eq!(
        live.headers().get("server").and_then(|v| v.to_str().ok()),
        Some("MinIO"),
        "the stack's S3 server is not MinIO"
    );

    let client = s.s3_client(&s.s3_secret_key);
    let prefix = format!("smoke-long-{}/", uuid_like());
    let key = format!(
        "{prefix}{}/{}/{}.jsonl.gz",
        "t".repeat(240),
        "p".repeat(240),
        "o".repeat(40)
    );
    assert!(key.len() > 500, "{}", key.len());
    let body = b"a long key".to_vec();
    client
        .put_object()
        .bucket(&s.s3_bucket)
        .key(&key)
        .body(body.clone().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutObject with a {}-byte key: {e:?}", key.len()));
    let listed = client
        .list_objects_v2()
        .bucket(&s.s3_bucket)
        .prefix(&prefix)
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, [key.as_str()]);
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

/// The example shop (`scripts/stack` component `shop`): database `PG_SHOP_DB` with customers,
/// products and orders, seeded, owned by the capture user (so a pipeline's connector can create
/// its publication), and kept changing by the trickle: new orders within ten seconds.
#[tokio::test]
async fn the_shop_database_is_seeded_owned_by_the_capture_user_and_gets_new_orders_within_ten_seconds(
) {
    let s = stack();
    let db = var("PG_SHOP_DB");
    let user = var("PG_SHOP_USER");
    assert_eq!(
        var("SHOP_TRICKLE"),
        "on",
        "the shop trickle was turned off (CLUECDC_SHOP=0 scripts/stack up); the test command runs it: scripts/stack up"
    );
    let addr = format!("{}:{}/{db}", s.pg_host, s.pg_port);
    let url = format!(
        "postgres://{user}:{}@{}:{}/{db}",
        var("PG_SHOP_PASSWORD"),
        s.pg_host,
        s.pg_port
    );
    let mut conn = tokio::time::timeout(Duration::from_secs(10), sqlx::PgConnection::connect(&url))
        .await
        .unwrap_or_else(|e| panic!("{}", down("PostgreSQL", &addr, e)))
        .unwrap_or_else(|e| panic!("{}", down("PostgreSQL", &addr, e)));
    for (table, seeded) in [("customers", 24), ("products", 12), ("orders", 1)] {
        let (owner, pk): (String, bool) = sqlx::query_as(
            "SELECT pg_get_userbyid(c.relowner)::text, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname = $1",
        )
        .bind(table)
        .fetch_optional(&mut conn)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{db} has no table public.{table} (compose/postgres/20-shop.sql, run by scripts/stack up shop)"));
        assert_eq!(
            owner, user,
            "{db}.{table} is owned by {owner}, not the capture user"
        );
        assert!(pk, "{db}.{table} has no primary key");
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert!(
            rows >= seeded,
            "{db}.{table} has {rows} rows, want at least {seeded}"
        );
    }
    let (first, count) = shop_orders(&mut conn).await;
    assert!(
        count <= 2000,
        "the trickle keeps at most 2,000 orders, {db} has {count}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = first;
    while last < first + 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        last = shop_orders(&mut conn).await.0;
    }
    assert!(
        last >= first + 2,
        "{}",
        down(
            "Shop",
            &addr,
            format!("no steady trickle of orders: the newest order id went from {first} to {last} in 10 s")
        )
    );
}

/// The newest order's id and the number of orders in the shop database.
async fn shop_orders(conn: &mut sqlx::PgConnection) -> (i64, i64) {
    sqlx::query_as("SELECT coalesce(max(id), 0), count(*) FROM orders")
        .fetch_one(conn)
        .await
        .unwrap()
}
