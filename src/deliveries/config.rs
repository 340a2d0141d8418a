//! Sink connector config builders: pure functions, golden-file tested, and validated against
//! the real plugin before anything is deployed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::connections::settings::TlsMode;
use crate::connections::{Connection, Provider};

pub type Config = BTreeMap<String, String>;

pub const JDBC_SINK: &str = "io.debezium.connector.jdbc.JdbcSinkConnector";

/// Database delivery settings (API names), with the defaults a CDC replica wants.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JdbcOptions {
    /// insert, upsert or update.
    pub insert_mode: String,
    /// Deletes (and tombstones) remove rows.
    pub delete_enabled: bool,
    /// Destination table name; `${source.table}` keeps the source's table name.
    pub table_name_format: String,
    /// basic: create missing tables and add missing columns; none: tables must exist.
    pub schema_evolution: String,
    /// fail (default) or continue.
    pub error_policy: String,
    pub dead_letter_topic: Option<String>,
}

impl Default for JdbcOptions {
    fn default() -> Self {
        JdbcOptions {
            insert_mode: "upsert".into(),
            delete_enabled: true,
            table_name_format: "${source.table}".into(),
            schema_evolution: "basic".into(),
            error_policy: "fail".into(),
            dead_letter_topic: None,
        }
    }
}

/// The JDBC URL of a database connection (no credentials in it: those are separate keys).
pub fn jdbc_url(c: &Connection) -> String {
    let Some(d) = c.database() else {
        return String::new();
    };
    match c.provider {
        Provider::Postgresql => format!(
            "jdbc:postgresql://{}:{}/{}?sslmode={}",
            d.host,
            d.port,
            d.database,
            d.tls_mode.as_str()
        ),
        Provider::Mariadb => format!(
            "jdbc:mariadb://{}:{}/{}?sslMode={}",
            d.host,
            d.port,
            d.database,
            match d.tls_mode {
                TlsMode::Disable => "disable",
                TlsMode::Require => "trust",
                TlsMode::VerifyCa => "verify-ca",
                TlsMode::VerifyFull => "verify-full",
            }
        ),
        _ => format!(
            "jdbc:mysql://{}:{}/{}?sslMode={}",
            d.host,
            d.port,
            d.database,
            match d.tls_mode {
                TlsMode::Disable => "DISABLED",
                TlsMode::Require => "REQUIRED",
                TlsMode::VerifyCa => "VERIFY_CA",
                TlsMode::VerifyFull => "VERIFY_IDENTITY",
            }
        ),
    }
}

pub fn jdbc(dest: &Connection, topics: &[String], o: &JdbcOptions) -> Config {
    let mut c = Config::new();
    let mut set = |k: &str, v: String| {
        c.insert(k.to_string(), v);
    };
    let user = dest.database().map(|d| d.user.clone()).unwrap_or_default();
    set("connector.class", JDBC_SINK.into());
    set("tasks.max", "1".into());
    set("topics", topics.join(","));
    set("connection.url", jdbc_url(dest));
    set("connection.username", user);
    set(
        "connection.password",
        format!("${{cluecdc:{}:password}}", dest.secret_ref),
    );
    set("insert.mode", o.insert_mode.clone());
    // Upserts and deletes need the row's key: the Kafka record key Debezium wrote.
    set("primary.key.mode", "record_key".into());
    set("delete.enabled", o.delete_enabled.to_string());
    set("collection.name.format", o.table_name_format.clone());
    set("schema.evolution", o.schema_evolution.clone());
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
    // Its own consumer group (connect-<connector name>), from the earliest retained offsets.
    set("consumer.override.auto.offset.reset", "earliest".into());
    set("errors.log.enable", "true".into());
    if o.error_policy == "continue" {
        set("errors.tolerance", "all".into());
        if let Some(dlq) = &o.dead_letter_topic {
            set("errors.deadletterqueue.topic.name", dlq.clone());
            set(
                "errors.deadletterqueue.context.headers.enable",
                "true".into(),
            );
        }
    } else {
        set("errors.tolerance", "none".into());
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::settings::{DatabaseSettings, Settings};
    use crate::connections::Capability;

    fn dest(provider: Provider) -> Connection {
        Connection {
            id: "con_2".into(),
            name: "replica".into(),
            provider,
            capabilities: vec![Capability::Destination],
            settings: Settings::Database(DatabaseSettings {
                host: "replica.internal".into(),
                port: 5432,
                database: "analytics".into(),
                user: "writer".into(),
                tls_mode: TlsMode::VerifyFull,
                ca_certificate: None,
                slot_name: None,
                publication_name: None,
                server_id: None,
            }),
            secret_ref: "sec_dest".into(),
            generation: 1,
            created_at: String::new(),
            updated_at: String::new(),
            last_test: None,
        }
    }

    #[test]
    fn the_jdbc_sink_config_matches_its_golden_file() {
        let c = jdbc(
            &dest(Provider::Postgresql),
            &["orders.public.orders".into(), "orders.public.items".into()],
            &JdbcOptions::default(),
        );
        let path = format!(
            "{}/tests/golden/jdbc-postgres.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = serde_json::to_string_pretty(&c).unwrap() + "\n";
        if std::env::var("UPDATE_GOLDEN").is_ok() {
            std::fs::write(&path, &text).unwrap();
        }
        assert_eq!(text, std::fs::read_to_string(&path).unwrap());
    }

    #[test]
    fn each_destination_gets_its_own_jdbc_url_and_no_credentials_in_it() {
        assert_eq!(
            jdbc_url(&dest(Provider::Postgresql)),
            "jdbc:postgresql://replica.internal:5432/analytics?sslmode=verify-full"
        );
        assert!(jdbc_url(&dest(Provider::Mariadb)).starts_with("jdbc:mariadb://"));
        assert!(jdbc_url(&dest(Provider::Mysql)).ends_with("sslMode=VERIFY_IDENTITY"));
    }

    #[test]
    fn continue_sends_skipped_records_to_the_named_dead_letter_topic() {
        let o = JdbcOptions {
            error_policy: "continue".into(),
            dead_letter_topic: Some("dlq".into()),
            ..JdbcOptions::default()
        };
        let c = jdbc(&dest(Provider::Postgresql), &["t".into()], &o);
        assert_eq!(c["errors.tolerance"], "all");
        assert_eq!(c["errors.deadletterqueue.topic.name"], "dlq");
    }
}
