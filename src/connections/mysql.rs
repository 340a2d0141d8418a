//! MySQL and MariaDB: binlog checks for capture, DDL rights for delivery, table discovery.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
use sqlx::{ConnectOptions, Connection as _, MySqlConnection, Row};

use super::settings::TlsMode;
use super::{guard, sanitize, Adapter, Check, Connection, Provider, TableInfo};
use crate::error::{Error, Result};
use crate::secrets::Secret;

pub struct MySql;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn connect_options(conn: &Connection, password: &str) -> Option<MySqlConnectOptions> {
    let d = conn.database()?;
    let mut o = MySqlConnectOptions::new()
        .host(&d.host)
        .port(d.port)
        .database(&d.database)
        .username(&d.user)
        .password(password)
        .ssl_mode(match d.tls_mode {
            TlsMode::Disable => MySqlSslMode::Disabled,
            TlsMode::Require => MySqlSslMode::Required,
            TlsMode::VerifyCa => MySqlSslMode::VerifyCa,
            TlsMode::VerifyFull => MySqlSslMode::VerifyIdentity,
        })
        .disable_statement_logging();
    if let Some(pem) = &d.ca_certificate {
        o = o.ssl_ca_from_pem(pem.as_bytes().to_vec());
    }
    Some(o)
}

/// The one way ClueCDC connects to a MySQL or MariaDB server: through [`guard`], which refuses
/// to give the password away to a server that has not proved itself, within
/// [`CONNECT_TIMEOUT`]. Errors are sanitized, and a refusal says why and what to change.
pub async fn connect(
    conn: &Connection,
    password: &str,
) -> std::result::Result<MySqlConnection, String> {
    let d = conn.database().ok_or("not a database connection")?;
    let options = connect_options(conn, password).ok_or("not a database connection")?;
    let attempt = guard::connect(guard::Protocol::MySql, d, |via| {
        let options = match via {
            Some(relay) => options.host(&relay.ip().to_string()).port(relay.port()),
            None => options,
        };
        async move { MySqlConnection::connect_with(&options).await }
    });
    guard::within(CONNECT_TIMEOUT, password, attempt).await
}

async fn open(
    conn: &Connection,
    secrets: &BTreeMap<String, Secret<String>>,
) -> std::result::Result<MySqlConnection, String> {
    let password = secrets
        .get("password")
        .map(|s| s.expose().clone())
        .unwrap_or_default();
    let mut c = connect(conn, &password).await?;
    // Bound every later query: MySQL's max_execution_time (ms), MariaDB's max_statement_time (s).
    let _ = sqlx::query("SET SESSION max_statement_time = 10")
        .execute(&mut c)
        .await;
    let _ = sqlx::query("SET SESSION max_execution_time = 10000")
        .execute(&mut c)
        .await;
    Ok(c)
}

fn connect_hint(message: &str) -> String {
    if let Some((_, fix)) = guard::split(message) {
        return fix.into();
    }
    let m = message.to_lowercase();
    if m.contains("access denied") {
        "check the user and password (rotate the credentials if they changed) and the host the user may connect from".into()
    } else if m.contains("unknown database") {
        "check the database name".into()
    } else if m.contains("refused") || m.contains("no answer") || m.contains("timed out") {
        "check host and port, bind-address on the server, and firewalls between ClueCDC and the server".into()
    } else if let Some(why) = super::tls_problem(&m) {
        why.into()
    } else if m.contains("ssl") || m.contains("tls") || m.contains("certificate") {
        "check tls_mode and the CA certificate against the server's TLS setup".into()
    } else {
        "check the connection settings".into()
    }
}

async fn variable(c: &mut MySqlConnection, name: &str) -> Option<String> {
    let row = sqlx::query(&format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
        .fetch_optional(&mut *c)
        .await
        .ok()
        .flatten()?;
    row.try_get::<String, _>(1).ok()
}

impl Adapter for MySql {
    fn test<'a>(
        &'a self,
        conn: &'a Connection,
        secrets: &'a BTreeMap<String, Secret<String>>,
    ) -> BoxFuture<'a, Vec<Check>> {
        Box::pin(async move {
            let Some(d) = conn.database() else {
                return vec![];
            };
            let mut checks = Vec::new();
            let mut c = match open(conn, secrets).await {
                Ok(c) => {
                    checks.push(Check::pass(
                        "reachable",
                        format!(
                            "connected to {}:{}/{} as {}",
                            d.host, d.port, d.database, d.user
                        ),
                    ));
                    c
                }
                Err(e) => {
                    let hint = connect_hint(&e);
                    // A refusal's fix is the hint; the message keeps only why.
                    let message = guard::split(&e).map_or(e.clone(), |(why, _)| why.to_string());
                    checks.push(Check::fail("reachable", message, hint));
                    return checks;
                }
            };
            let version: String = sqlx::query_scalar("SELECT VERSION()")
                .fetch_one(&mut c)
                .await
                .unwrap_or_default();
            let is_mariadb = version.to_lowercase().contains("mariadb");
            let mut v = Check::pass("version", version.clone());
            if conn.provider == Provider::Mysql && is_mariadb {
                v = Check::warn(
                    "version",
                    format!("{version} is MariaDB"),
                    "choose provider MARIADB so the pipeline uses Debezium's MariaDB connector",
                );
            } else if conn.provider == Provider::Mariadb && !is_mariadb {
                v = Check::warn(
                    "version",
                    format!("{version} is not MariaDB"),
                    "choose provider MYSQL so the pipeline uses Debezium's MySQL connector",
                );
            }
            checks.push(v);
            if conn.is_source() {
                source_checks(&mut c, is_mariadb, &mut checks).await;
            }
            if conn.capabilities.contains(&super::Capability::Destination) {
                destination_checks(&mut c, secrets, &mut checks).await;
            }
            let _ = c.close().await;
            checks
        })
    }

    fn discover<'a>(
        &'a self,
        conn: &'a Connection,
        secrets: &'a BTreeMap<String, Secret<String>>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TableInfo>>> {
        Box::pin(async move {
            let mut c = open(conn, secrets)
                .await
                .map_err(|e| Error::Unavailable(format!("cannot connect: {e}")))?;
            let rows = sqlx::query(
                "SELECT CAST(t.table_schema AS CHAR) AS s, CAST(t.table_name AS CHAR) AS n, CAST(t.table_rows AS SIGNED) AS est,
                        CAST(COALESCE((SELECT GROUP_CONCAT(k.column_name ORDER BY k.ordinal_position)
                                  FROM information_schema.key_column_usage k
                                  WHERE k.table_schema = t.table_schema AND k.table_name = t.table_name AND k.constraint_name = 'PRIMARY'), '') AS CHAR) AS pk
                 FROM information_schema.tables t
                 WHERE t.table_type = 'BASE TABLE' AND t.table_schema NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema')
                 ORDER BY 1, 2 LIMIT ?",
            )
            .bind(limit as i64)
            .fetch_all(&mut c)
            .await
            .map_err(|e| Error::Unavailable(sanitize(&e.to_string(), secrets)))?;
            let _ = c.close().await;
            Ok(rows
                .into_iter()
                .map(|r| {
                    let pk: String = r.get("pk");
                    let primary_key: Vec<String> = pk
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect();
                    TableInfo {
                        schema: r.get("s"),
                        name: r.get("n"),
                        // With binlog_row_image=FULL every row event carries the whole row.
                        capturable: true,
                        primary_key,
                        replica_identity: None,
                        estimated_rows: r.try_get::<Option<i64>, _>("est").ok().flatten(),
                    }
                })
                .collect())
        })
    }
}

async fn source_checks(c: &mut MySqlConnection, is_mariadb: bool, checks: &mut Vec<Check>) {
    match variable(c, "log_bin").await.as_deref() {
        Some("ON") | Some("1") => checks.push(Check::pass("binlog", "binary logging is on")),
        other => checks.push(Check::fail(
            "binlog",
            format!("log_bin is {}", other.unwrap_or("unknown")),
            "enable the binary log (log_bin in the server configuration) and restart the server",
        )),
    }
    match variable(c, "binlog_format").await.as_deref() {
        Some("ROW") => checks.push(Check::pass("binlog format", "binlog_format is ROW")),
        other => checks.push(Check::fail("binlog format", format!("binlog_format is {}", other.unwrap_or("unknown")), "set binlog_format = ROW in the server configuration (SET GLOBAL affects only new sessions)")),
    }
    match variable(c, "binlog_row_image").await.as_deref() {
        Some("FULL") => checks.push(Check::pass("row image", "binlog_row_image is FULL")),
        other => checks.push(Check::fail(
            "row image",
            format!("binlog_row_image is {}", other.unwrap_or("unknown")),
            "set binlog_row_image = FULL so updates and deletes carry the whole row",
        )),
    }
    if is_mariadb {
        let pos = variable(c, "gtid_current_pos").await.unwrap_or_default();
        let strict = variable(c, "gtid_strict_mode").await.unwrap_or_default();
        checks.push(Check::pass(
            "gtid",
            format!(
                "MariaDB GTID position {}; gtid_strict_mode {strict}",
                if pos.is_empty() {
                    "(none yet)".to_string()
                } else {
                    pos
                }
            ),
        ));
    } else {
        let mode = variable(c, "gtid_mode")
            .await
            .unwrap_or_else(|| "unknown".into());
        if mode == "ON" {
            checks.push(Check::pass("gtid", "gtid_mode is ON"));
        } else {
            checks.push(Check::warn("gtid", format!("gtid_mode is {mode}"), "GTIDs make failover to a replica safe for the connector; consider gtid_mode=ON with enforce_gtid_consistency=ON"));
        }
    }
    let grants: Vec<String> = sqlx::query_scalar("SHOW GRANTS FOR CURRENT_USER()")
        .fetch_all(&mut *c)
        .await
        .unwrap_or_default();
    let all = grants.join("\n").to_uppercase();
    let global: Vec<&str> = grants
        .iter()
        .filter(|g| g.to_uppercase().contains(" ON *.* "))
        .map(String::as_str)
        .collect();
    let global = global.join("\n").to_uppercase();
    let has = |p: &str| global.contains("ALL PRIVILEGES") || global.contains(p);
    let mut missing = Vec::new();
    if !has("REPLICATION SLAVE") && !has("REPLICATION REPLICA") {
        missing.push("REPLICATION SLAVE");
    }
    if !has("REPLICATION CLIENT") && !has("BINLOG MONITOR") && !has("SLAVE MONITOR") {
        missing.push("REPLICATION CLIENT");
    }
    if !(has("SELECT") || all.contains("GRANT SELECT") || all.contains("GRANT ALL PRIVILEGES")) {
        missing.push("SELECT");
    }
    if missing.is_empty() {
        checks.push(Check::pass(
            "privileges",
            "replication and SELECT privileges granted",
        ));
    } else {
        checks.push(Check::fail(
            "privileges",
            format!("missing {}", missing.join(", ")),
            format!(
                "run GRANT {}, RELOAD, SHOW DATABASES ON *.* TO the connector user",
                ["SELECT", "REPLICATION SLAVE", "REPLICATION CLIENT"].join(", ")
            ),
        ));
    }
}

async fn destination_checks(
    c: &mut MySqlConnection,
    secrets: &BTreeMap<String, Secret<String>>,
    checks: &mut Vec<Check>,
) {
    // MySQL DDL commits implicitly, so the probe table is created, altered and dropped.
    let probe = format!(
        "cluecdc_probe_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let result: std::result::Result<(), sqlx::Error> = async {
        sqlx::query(&format!("CREATE TABLE `{probe}` (id INT PRIMARY KEY)"))
            .execute(&mut *c)
            .await?;
        let altered = sqlx::query(&format!("ALTER TABLE `{probe}` ADD COLUMN note TEXT"))
            .execute(&mut *c)
            .await;
        sqlx::query(&format!("DROP TABLE IF EXISTS `{probe}`"))
            .execute(&mut *c)
            .await?;
        altered.map(|_| ())
    }
    .await;
    match result {
        Ok(()) => checks.push(Check::pass("create and alter tables", "may create, alter and drop tables in the database (probe table removed)")),
        Err(e) => checks.push(Check::fail(
            "create and alter tables",
            sanitize(&e.to_string(), secrets),
            format!("grant CREATE, ALTER, DROP, INSERT, UPDATE, DELETE on the database to the user; if a table {probe} was left behind, drop it"),
        )),
    }
}
