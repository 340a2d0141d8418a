//! Connector config builders: pure functions from a pipeline and its source connection to the
//! Debezium connector config. Secrets appear only as `${cluecdc:<secret_ref>:<field>}`.
//! Golden files in `tests/golden/` pin the output; integration tests send it to the real
//! plugin's validate endpoint, so no key is invented.

use std::collections::BTreeMap;

use crate::connections::settings::{DatabaseSettings, TlsMode};
use crate::connections::{Connection, Provider};

pub type Config = BTreeMap<String, String>;

/// What a builder needs besides the connection.
#[derive(Debug, Clone)]
pub struct CaptureSpec {
    pub tables: Vec<String>,
    pub topic_prefix: String,
    pub snapshot_mode: String,
    pub publication_mode: String,
    pub kafka_bootstrap: String,
    /// The Kafka cluster's client settings (SASL, TLS) as references, for the connector's own
    /// Kafka clients (MySQL/MariaDB schema history).
    pub kafka_client: Config,
    /// Extra Debezium keys chosen by the user; they cannot replace the keys ClueCDC manages.
    pub options: Config,
    /// Opt-in: Debezium writes the time into `cluecdc_heartbeat` in the source, captured like a
    /// table, so deliveries can show how current their destination is.
    pub heartbeat: bool,
}

/// The table Debezium reads signals from (incremental snapshots), in the source database.
pub const SIGNAL_TABLE: &str = "cluecdc_signal";
pub const HEARTBEAT_TABLE: &str = "cluecdc_heartbeat";
/// Debezium's heartbeat: keeps a PostgreSQL slot's confirmed position moving on a quiet
/// database (and a MySQL/MariaDB connector's offsets current).
pub const HEARTBEAT_MS: &str = "10000";
/// With `heartbeat` on, the heartbeat row is what freshness is read from, so its interval is how
/// pessimistic the reported freshness can be: 10 s put it up to 9.7 s behind the truth in
/// `scripts/bench`, 1 s within 0.5 s. It costs one one-row UPDATE a second in the source.
pub const FRESHNESS_HEARTBEAT_MS: &str = "1000";

pub fn connector_class(provider: Provider) -> &'static str {
    match provider {
        Provider::Postgresql => "io.debezium.connector.postgresql.PostgresConnector",
        Provider::Mysql => "io.debezium.connector.mysql.MySqlConnector",
        _ => "io.debezium.connector.mariadb.MariaDbConnector",
    }
}

/// `schema.table` → a Debezium include-list regex matching exactly that table.
pub fn escape_table(t: &str) -> String {
    let mut out = String::new();
    for c in t.chars() {
        if "\\.[]{}()*+?^$|".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub fn reference(c: &Connection, field: &str) -> String {
    format!("${{cluecdc:{}:{field}}}", c.secret_ref)
}

/// The schema (PostgreSQL) or database (MySQL) holding the signal table.
pub fn signal_collection(provider: Provider, d: &DatabaseSettings, tables: &[String]) -> String {
    match provider {
        Provider::Postgresql => {
            let schema = tables
                .first()
                .and_then(|t| t.split_once('.'))
                .map(|(s, _)| s.to_string())
                .unwrap_or_else(|| "public".into());
            format!("{schema}.{SIGNAL_TABLE}")
        }
        _ => format!("{}.{SIGNAL_TABLE}", d.database),
    }
}

/// The heartbeat table, beside the signal table.
pub fn heartbeat_collection(provider: Provider, d: &DatabaseSettings, tables: &[String]) -> String {
    let signal = signal_collection(provider, d, tables);
    let schema = signal
        .split_once('.')
        .map(|(s, _)| s.to_string())
        .unwrap_or_default();
    format!("{schema}.{HEARTBEAT_TABLE}")
}

/// Stores the source's clock in milliseconds: comparable in any destination, whatever its
/// timestamp types and time zone.
///
/// MySQL and MariaDB: the update repeats the expression instead of `VALUES(ts_ms)`, which MySQL
/// 8.0.20+ deprecates (warning 1287 on every heartbeat) and whose replacement, a row alias
/// (`AS new … new.ts_ms`), MariaDB does not parse; this form means the same on both.
pub fn heartbeat_query(provider: Provider, collection: &str) -> String {
    match provider {
        Provider::Postgresql => format!("INSERT INTO {collection} (id, ts_ms) VALUES (1, (extract(epoch from clock_timestamp()) * 1000)::bigint) ON CONFLICT (id) DO UPDATE SET ts_ms = excluded.ts_ms"),
        _ => {
            let now_ms = "ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000)";
            format!("INSERT INTO {collection} (id, ts_ms) VALUES (1, {now_ms}) ON DUPLICATE KEY UPDATE ts_ms = {now_ms}")
        }
    }
}

/// Keys ClueCDC sets itself; options may not override them.
pub fn managed_keys() -> &'static [&'static str] {
    &[
        "connector.class",
        "tasks.max",
        "topic.prefix",
        "table.include.list",
        "database.hostname",
        "database.port",
        "database.user",
        "database.password",
        "database.dbname",
        "database.server.id",
        "database.include.list",
        "slot.name",
        "publication.name",
        "plugin.name",
        "signal.data.collection",
        "schema.history.internal.kafka.bootstrap.servers",
        "schema.history.internal.kafka.topic",
        "key.converter",
        "value.converter",
        "key.converter.schemas.enable",
        "value.converter.schemas.enable",
        "name",
        "snapshot.mode",
        "publication.autocreate.mode",
        "heartbeat.action.query",
        "notification.enabled.channels",
        "notification.sink.topic.name",
        // TLS: from the connection, never loosened by an option.
        "database.sslmode",
        "database.sslrootcert",
        "database.ssl.mode",
        "database.ssl.truststore",
        "database.ssl.truststore.password",
    ]
}

/// Only database connections capture; anything else yields an empty config (which the
/// plugin's validation then refuses).
pub fn build(conn: &Connection, spec: &CaptureSpec) -> Config {
    let mut c = Config::new();
    let Some(d) = conn.database().cloned() else {
        return c;
    };
    let mut set = |k: &str, v: String| {
        c.insert(k.to_string(), v);
    };
    set("connector.class", connector_class(conn.provider).into());
    set("tasks.max", "1".into());
    set("database.hostname", d.host.clone());
    set("database.port", d.port.to_string());
    set("database.user", d.user.clone());
    set("database.password", reference(conn, "password"));
    set("topic.prefix", spec.topic_prefix.clone());
    set("snapshot.mode", spec.snapshot_mode.clone());
    // JSON with schemas: what the JDBC sink and the object-storage delivery consume.
    set(
        "key.converter",
        "org.apache.kafka.connect.json.JsonConverter".into(),
    );
    set("key.converter.schemas.enable", "true".into());
    set(
        "value.converter",
        "org.apache.kafka.connect.json.JsonConverter".into(),
    );
    set("value.converter.schemas.enable", "true".into());
    set(
        "heartbeat.interval.ms",
        if spec.heartbeat {
            FRESHNESS_HEARTBEAT_MS
        } else {
            HEARTBEAT_MS
        }
        .into(),
    );
    // Debezium's snapshot notifications, written by its sink channel into the pipeline's
    // notification topic, from which ClueCDC reads snapshot progress per table
    // ([`crate::tables::progress`]). Keys as Debezium 3.5.0.Final defines them:
    // `CommonConnectorConfig.NOTIFICATION_ENABLED_CHANNELS` ("notification.enabled.channels")
    // and `SinkNotificationChannel.NOTIFICATION_TOPIC` ("notification.sink.topic.name"; the
    // channel's `CHANNEL_NAME` is "sink"), in debezium-connector-common. The records go through
    // this connector's key and value converters like its change events (JSON with schemas).
    set("notification.enabled.channels", "sink".into());
    set(
        "notification.sink.topic.name",
        notification_topic(&spec.topic_prefix),
    );
    let signal = signal_collection(conn.provider, &d, &spec.tables);
    set("signal.data.collection", signal.clone());
    // The signal table is captured too, so its rows (incremental snapshot requests) reach the connector.
    let mut include: Vec<String> = spec.tables.iter().map(|t| escape_table(t)).collect();
    include.push(escape_table(&signal));
    if spec.heartbeat {
        let hb = heartbeat_collection(conn.provider, &d, &spec.tables);
        include.push(escape_table(&hb));
        set(
            "heartbeat.action.query",
            heartbeat_query(conn.provider, &hb),
        );
    }
    set("table.include.list", include.join(","));
    match conn.provider {
        Provider::Postgresql => {
            set("plugin.name", "pgoutput".into());
            set("database.dbname", d.database.clone());
            set("slot.name", d.slot_name.clone().unwrap_or_default());
            set(
                "publication.name",
                d.publication_name.clone().unwrap_or_default(),
            );
            set("publication.autocreate.mode", spec.publication_mode.clone());
            set("database.sslmode", d.tls_mode.as_str().into());
            // The CA as a file on the worker, written there by the config provider.
            if d.verifies_ca() {
                set("database.sslrootcert", reference(conn, "ca_cert_file"));
            }
        }
        _ => {
            set("database.server.id", d.server_id.unwrap_or(0).to_string());
            set("database.include.list", d.database.clone());
            set(
                "schema.history.internal.kafka.bootstrap.servers",
                spec.kafka_bootstrap.clone(),
            );
            set(
                "schema.history.internal.kafka.topic",
                schema_history_topic(&spec.topic_prefix),
            );
            set("include.schema.changes", "false".into());
            // The two connectors name the same modes differently (their validators say so).
            let ssl = match (conn.provider, d.tls_mode) {
                (Provider::Mariadb, TlsMode::Disable) => "disable",
                (Provider::Mariadb, TlsMode::Require) => "trust",
                (Provider::Mariadb, TlsMode::VerifyCa) => "verify-ca",
                (Provider::Mariadb, TlsMode::VerifyFull) => "verify-full",
                (_, TlsMode::Disable) => "disabled",
                (_, TlsMode::Require) => "required",
                (_, TlsMode::VerifyCa) => "verify_ca",
                (_, TlsMode::VerifyFull) => "verify_identity",
            };
            set("database.ssl.mode", ssl.into());
            // The binlog client and the JDBC driver read a Java truststore: the provider
            // builds one from the connection's CA (its password guards public certificates).
            if d.verifies_ca() {
                set(
                    "database.ssl.truststore",
                    reference(conn, "ca_truststore_file"),
                );
                set(
                    "database.ssl.truststore.password",
                    reference(conn, "ca_truststore_password"),
                );
            }
        }
    }
    for (k, v) in &spec.options {
        if !managed_keys().contains(&k.as_str()) {
            c.insert(k.clone(), v.clone());
        }
    }
    // After the options: the schema history reaches the pipeline's Kafka as ClueCDC does.
    if conn.provider != Provider::Postgresql {
        for (k, v) in &spec.kafka_client {
            for client in ["producer", "consumer"] {
                c.insert(format!("schema.history.internal.{client}.{k}"), v.clone());
            }
        }
    }
    c
}

pub fn schema_history_topic(prefix: &str) -> String {
    format!("{prefix}.schema-history")
}

pub fn heartbeat_topic(prefix: &str) -> String {
    format!("__debezium-heartbeat.{prefix}")
}

/// Debezium's notifications for the pipeline (snapshot progress): operational notices, not
/// change events; one partition, plain delete retention (records share a key within an
/// incremental snapshot, so compaction would keep only its last notice).
pub fn notification_topic(prefix: &str) -> String {
    format!("__debezium-notification.{prefix}")
}

/// The data topic Debezium writes a table's changes to: `<prefix>.<schema or db>.<table>`.
pub fn table_topic(prefix: &str, table: &str) -> String {
    format!("{prefix}.{table}")
}

/// The statement a table owner runs when ClueCDC may not create the publication itself.
pub fn publication_sql(publication: &str, tables: &[String], signal: &str) -> String {
    let mut all: Vec<String> = tables.iter().map(|t| quote_pg(t)).collect();
    all.push(quote_pg(signal));
    format!(
        "CREATE PUBLICATION {} FOR TABLE {};",
        quote_ident(publication),
        all.join(", ")
    )
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn quote_pg(t: &str) -> String {
    match t.split_once('.') {
        Some((s, n)) => format!("{}.{}", quote_ident(s), quote_ident(n)),
        None => quote_ident(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::settings::Settings;
    use crate::connections::Capability;

    fn conn(provider: Provider) -> Connection {
        let pg = provider == Provider::Postgresql;
        Connection {
            id: "con_1".into(),
            name: "orders db".into(),
            provider,
            capabilities: vec![Capability::Source],
            settings: Settings::Database(DatabaseSettings {
                host: "db.internal".into(),
                port: if pg { 5432 } else { 3306 },
                database: "orders".into(),
                user: "cdc".into(),
                tls_mode: TlsMode::VerifyFull,
                ca_certificate: None,
                slot_name: pg.then(|| "cluecdc_orders_db".into()),
                publication_name: pg.then(|| "cluecdc_orders_db".into()),
                server_id: (!pg).then_some(184_054),
            }),
            secret_ref: "sec_abc".into(),
            generation: 1,
            created_at: String::new(),
            updated_at: String::new(),
            last_test: None,
        }
    }

    fn spec(tables: &[&str]) -> CaptureSpec {
        CaptureSpec {
            tables: tables.iter().map(|t| t.to_string()).collect(),
            topic_prefix: "orders".into(),
            snapshot_mode: "initial".into(),
            publication_mode: "filtered".into(),
            kafka_bootstrap: "kafka:9092".into(),
            kafka_client: Config::new(),
            options: [
                ("max.batch.size".to_string(), "4096".to_string()),
                ("connector.class".to_string(), "evil".to_string()),
            ]
            .into(),
            heartbeat: false,
        }
    }

    /// Compares with `tests/golden/<name>.json`; `UPDATE_GOLDEN=1` rewrites it.
    fn golden(name: &str, config: &Config) {
        let path = format!("{}/tests/golden/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = serde_json::to_string_pretty(config).unwrap() + "\n";
        if std::env::var("UPDATE_GOLDEN").is_ok() {
            std::fs::write(&path, &text).unwrap();
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("missing golden file {path}; run with UPDATE_GOLDEN=1"));
        assert_eq!(text, want, "{name} differs from its golden file");
    }

    #[test]
    fn postgres_config_matches_its_golden_file() {
        golden(
            "postgres",
            &build(
                &conn(Provider::Postgresql),
                &spec(&["public.orders", "public.order_items"]),
            ),
        );
    }

    #[test]
    fn mariadb_config_matches_its_golden_file() {
        golden(
            "mariadb",
            &build(
                &conn(Provider::Mariadb),
                &spec(&["orders.orders", "orders.order_items"]),
            ),
        );
    }

    #[test]
    fn mysql_config_matches_its_golden_file() {
        golden(
            "mysql",
            &build(
                &conn(Provider::Mysql),
                &spec(&["orders.orders", "orders.order_items"]),
            ),
        );
    }

    /// MySQL with its CA (the truststore from the config provider, verify_identity) and the
    /// freshness heartbeat, whose upsert MySQL 9 runs without a deprecation warning.
    #[test]
    fn a_verify_full_mysql_source_with_heartbeats_matches_its_golden_file() {
        let mut c = conn(Provider::Mysql);
        if let Settings::Database(d) = &mut c.settings {
            d.ca_certificate =
                Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into());
        }
        let mut sp = spec(&["orders.orders", "orders.order_items"]);
        sp.heartbeat = true;
        let config = build(&c, &sp);
        assert!(!config["heartbeat.action.query"].contains("VALUES(ts_ms)"));
        golden("mysql_verify_full_heartbeat", &config);
    }

    #[test]
    fn mysql_uses_its_own_connector_class() {
        assert_eq!(
            build(&conn(Provider::Mysql), &spec(&["orders.t"]))["connector.class"],
            "io.debezium.connector.mysql.MySqlConnector"
        );
    }

    #[test]
    fn table_names_are_regex_escaped_and_managed_keys_cannot_be_overridden() {
        let c = build(&conn(Provider::Postgresql), &spec(&["public.a$b"]));
        assert_eq!(
            c["table.include.list"],
            "public\\.a\\$b,public\\.cluecdc_signal"
        );
        assert_eq!(
            c["connector.class"],
            "io.debezium.connector.postgresql.PostgresConnector"
        );
        assert_eq!(c["max.batch.size"], "4096");
        assert!(!c
            .values()
            .any(|v| v.contains("secret") && !v.starts_with("${cluecdc:")));
    }

    #[test]
    fn a_verifying_source_reads_its_ca_from_a_provider_file_and_options_cannot_loosen_tls() {
        let with_ca = |p: Provider| {
            let mut c = conn(p);
            if let Settings::Database(d) = &mut c.settings {
                d.ca_certificate =
                    Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into());
            }
            c
        };
        let mut sp = spec(&["public.orders"]);
        sp.options
            .insert("database.sslmode".into(), "disable".into());
        sp.options
            .insert("database.ssl.mode".into(), "disabled".into());
        let pg = build(&with_ca(Provider::Postgresql), &sp);
        assert_eq!(pg["database.sslmode"], "verify-full");
        assert_eq!(
            pg["database.sslrootcert"],
            "${cluecdc:sec_abc:ca_cert_file}"
        );
        let my = build(&with_ca(Provider::Mariadb), &sp);
        assert_eq!(my["database.ssl.mode"], "verify-full");
        assert_eq!(
            my["database.ssl.truststore"],
            "${cluecdc:sec_abc:ca_truststore_file}"
        );
        assert_eq!(
            my["database.ssl.truststore.password"],
            "${cluecdc:sec_abc:ca_truststore_password}"
        );
        for c in [&pg, &my] {
            assert!(!c.values().any(|v| v.contains("BEGIN CERTIFICATE")));
        }
        // Without a CA (require) there is no file to point at.
        let plain = build(&conn(Provider::Postgresql), &spec(&["public.orders"]));
        assert!(!plain.contains_key("database.sslrootcert"));
    }

    #[test]
    fn the_schema_history_reaches_a_secured_kafka_like_cluecdc_and_options_cannot_replace_it() {
        let mut sp = spec(&["orders.t"]);
        sp.kafka_client = [
            ("security.protocol".to_string(), "SASL_SSL".to_string()),
            (
                "sasl.jaas.config".to_string(),
                "x required password=\"${cluecdc:sec_k:sasl_password}\";".to_string(),
            ),
        ]
        .into();
        sp.options.insert(
            "schema.history.internal.producer.security.protocol".into(),
            "PLAINTEXT".into(),
        );
        let my = build(&conn(Provider::Mariadb), &sp);
        for client in ["producer", "consumer"] {
            assert_eq!(
                my[&format!("schema.history.internal.{client}.security.protocol")],
                "SASL_SSL"
            );
            assert!(
                my[&format!("schema.history.internal.{client}.sasl.jaas.config")]
                    .contains("${cluecdc:sec_k:sasl_password}")
            );
        }
        let pg = build(&conn(Provider::Postgresql), &sp);
        assert!(
            !pg.keys()
                .any(|k| k.starts_with("schema.history.internal.consumer")),
            "PostgreSQL keeps no schema history"
        );
    }

    #[test]
    fn an_opted_in_heartbeat_writes_the_source_clock_into_a_captured_table() {
        let mut sp = spec(&["public.orders"]);
        sp.heartbeat = true;
        let c = build(&conn(Provider::Postgresql), &sp);
        assert!(c["table.include.list"].ends_with(",public\\.cluecdc_heartbeat"));
        assert!(c["heartbeat.action.query"]
            .starts_with("INSERT INTO public.cluecdc_heartbeat (id, ts_ms)"));
        assert_eq!(
            (
                c["heartbeat.interval.ms"].as_str(),
                build(&conn(Provider::Postgresql), &spec(&["public.orders"]))
                    ["heartbeat.interval.ms"]
                    .as_str()
            ),
            ("1000", "10000"),
            "freshness is read from the heartbeat: a tighter interval when it is on"
        );
        let m = build(&conn(Provider::Mariadb), &{
            let mut s = spec(&["orders.t"]);
            s.heartbeat = true;
            s
        });
        assert!(m["heartbeat.action.query"].contains("ON DUPLICATE KEY UPDATE"));
    }

    #[test]
    fn the_publication_statement_quotes_every_name() {
        assert_eq!(
            publication_sql("pub", &["public.orders".into()], "public.cluecdc_signal"),
            r#"CREATE PUBLICATION "pub" FOR TABLE "public"."orders", "public"."cluecdc_signal";"#
        );
    }
}
