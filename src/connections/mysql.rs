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
) -> std::result::Result<Opened, String> {
    let password = secrets
        .get("password")
        .map(|s| s.expose().clone())
        .unwrap_or_default();
    let mut c = connect(conn, &password).await?;
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut c)
        .await
        .map_err(|e| sanitize(&e.to_string(), secrets))?;
    let is_mariadb = is_mariadb(&version);
    // Bound every later statement in the server's own terms: MariaDB's max_statement_time (s)
    // bounds every statement; MySQL's max_execution_time (ms) bounds only SELECT, so
    // lock_wait_timeout (s) bounds DDL waiting for a metadata lock too. Each is set alone: an
    // unknown variable fails its statement, not the others.
    let bounds: &[&str] = if is_mariadb {
        &[
            "SET SESSION max_statement_time = 10",
            "SET SESSION lock_wait_timeout = 10",
        ]
    } else {
        &[
            "SET SESSION max_execution_time = 10000",
            "SET SESSION lock_wait_timeout = 10",
        ]
    };
    for statement in bounds {
        if let Err(e) = sqlx::query(statement).execute(&mut c).await {
            tracing::debug!(statement, error = %e, "a statement bound was not set");
        }
    }
    Ok(Opened {
        c,
        version,
        is_mariadb,
    })
}

/// A session with its statements bounded, and what the server said it is.
struct Opened {
    c: MySqlConnection,
    version: String,
    is_mariadb: bool,
}

/// MariaDB says so in its version (`11.8.3-MariaDB-…`, or `5.5.5-10.11…-MariaDB` through old
/// clients); MySQL never does.
fn is_mariadb(version: &str) -> bool {
    version.to_lowercase().contains("mariadb")
}

fn connect_hint(message: &str) -> String {
    if message.contains("caching_sha2_password's full authentication") {
        return FULL_AUTH_FIX.into();
    }
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

/// Seen on MySQL 9.7: ClueCDC's client (sqlx 0.8) computes caching_sha2_password's fast-path
/// scramble in an order the server never accepts (launchbadge/sqlx#4244, fixed in 0.9), so the
/// server asks for the full authentication at every login, even with the login cached, and
/// without verified TLS the guard refuses that. MySQL 9 has no mysql_native_password.
const FULL_AUTH_FIX: &str = "set tls_mode verify-full (or verify-ca) with the server's CA certificate: without verified TLS every caching_sha2_password login (MySQL 8.4 and 9's default) asks ClueCDC's client for the full authentication, cached or not; on MySQL 8.0/8.4 a user with mysql_native_password also works";

/// The table Debezium reads incremental-snapshot signals from (`crate::pipelines::config::
/// SIGNAL_TABLE`), in the connection's database.
const SIGNAL_TABLE: &str = "cluecdc_signal";

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
            let Opened {
                mut c,
                version,
                is_mariadb,
            } = match open(conn, secrets).await {
                Ok(o) => {
                    checks.push(Check::pass(
                        "reachable",
                        format!(
                            "connected to {}:{}/{} as {}",
                            d.host, d.port, d.database, d.user
                        ),
                    ));
                    o
                }
                Err(e) => {
                    let hint = connect_hint(&e);
                    // A refusal's fix is the hint; the message keeps only why.
                    let message = guard::split(&e).map_or(e.clone(), |(why, _)| why.to_string());
                    checks.push(Check::fail("reachable", message, hint));
                    return checks;
                }
            };
            // The provider picks the Debezium connector and the JDBC driver: the wrong one
            // fails later in ways that name neither, so it fails here, before anything else.
            let wrong = match (conn.provider, is_mariadb) {
                (Provider::Mysql, true) => Some(("MariaDB", "MYSQL", "MARIADB", "Debezium's MySQL connector does not follow MariaDB's binary log and GTIDs")),
                (Provider::Mariadb, false) => Some(("MySQL", "MARIADB", "MYSQL", "Debezium's MariaDB connector and driver speak only MariaDB's replication protocol")),
                _ => None,
            };
            if let Some((server, chosen, right, why)) = wrong {
                checks.push(Check::fail(
                    "provider",
                    format!("the server is {server} ({version}), but the connection's provider is {chosen}: {why}"),
                    format!("create the connection again with provider {right} (a connection's provider cannot change) and delete this one"),
                ));
                let _ = c.close().await;
                return checks;
            }
            checks.push(Check::pass("version", version.clone()));
            if conn.is_source() {
                source_checks(&mut c, d, is_mariadb, &mut checks).await;
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
            let Opened { mut c, .. } = open(conn, secrets)
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

async fn source_checks(
    c: &mut MySqlConnection,
    d: &super::settings::DatabaseSettings,
    is_mariadb: bool,
    checks: &mut Vec<Check>,
) {
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
        let consistency = variable(c, "enforce_gtid_consistency")
            .await
            .unwrap_or_else(|| "unknown".into());
        checks.push(gtid_check(&mode, &consistency));
    }
    let retention = match variable(c, "binlog_expire_logs_seconds").await {
        Some(s) => s.parse::<u64>().ok(),
        // Older MariaDB: days only.
        None => variable(c, "expire_logs_days")
            .await
            .and_then(|d| d.parse::<f64>().ok())
            .map(|d| (d * 86_400.0) as u64),
    };
    checks.push(retention_check(retention));
    if let (Some(ours), Some(theirs)) = (
        d.server_id,
        variable(c, "server_id")
            .await
            .and_then(|v| v.parse::<u32>().ok()),
    ) {
        checks.push(server_id_check(ours, theirs));
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
    // Debezium's snapshot flushes tables (RELOAD) and lists databases (SHOW DATABASES); without
    // them it falls back to table locks or sees only some databases.
    let lesser: Vec<&str> = ["RELOAD", "SHOW DATABASES"]
        .into_iter()
        .filter(|p| !has(p))
        .collect();
    if missing.is_empty() && !lesser.is_empty() {
        checks.push(Check::warn(
            "snapshot privileges",
            format!("missing {}", lesser.join(", ")),
            format!("run GRANT {} ON *.* TO the connector user: the initial snapshot needs them to read a consistent state without long table locks", lesser.join(", ")),
        ));
    }
    let signal_table = signal_table_check(c, d, &grants).await;
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
    checks.push(signal_table);
}

/// The privileges a `SHOW GRANTS` line gives on `*.*`, on the database `db` or on its table
/// `table` (uppercased names; `ALL PRIVILEGES` as itself). Role grants have no ` ON ` and give
/// nothing here.
fn granted_on(grant: &str, db: &str, table: &str) -> Vec<String> {
    let g = grant.replace('\\', "");
    let Some(rest) = g.strip_prefix("GRANT ") else {
        return vec![];
    };
    let Some((privileges, target)) = rest.split_once(" ON ") else {
        return vec![];
    };
    let target = target.split(" TO ").next().unwrap_or_default().trim();
    let ours =
        target == "*.*" || target == format!("`{db}`.*") || target == format!("`{db}`.`{table}`");
    if !ours {
        return vec![];
    }
    privileges
        .split(',')
        .map(|p| p.trim().to_uppercase())
        .collect()
}

/// Incremental snapshots (a re-snapshot, a table added to a pipeline) go through the signal
/// table: ClueCDC inserts the request and Debezium's MySQL connector inserts its watermarks
/// there, both as this user; a pipeline's create makes the table when it is missing.
async fn signal_table_check(
    c: &mut MySqlConnection,
    d: &super::settings::DatabaseSettings,
    grants: &[String],
) -> Check {
    let exists = sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(SIGNAL_TABLE)
    .fetch_one(&mut *c)
    .await
    .map(|n| n > 0)
    .unwrap_or(false);
    signal_verdict(&d.database, &d.user, exists, grants)
}

fn signal_verdict(db: &str, user: &str, exists: bool, grants: &[String]) -> Check {
    let privileges: Vec<String> = grants
        .iter()
        .flat_map(|g| granted_on(g, db, SIGNAL_TABLE))
        .collect();
    let may = |p: &str| privileges.iter().any(|g| g == p || g == "ALL PRIVILEGES");
    // Privileges through a role do not show in the user's own grant lines.
    let roles = grants.iter().any(|g| !g.contains(" ON "));
    let table = format!("{db}.{SIGNAL_TABLE}");
    let ddl = format!("CREATE TABLE IF NOT EXISTS `{db}`.`{SIGNAL_TABLE}` (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)");
    let grant = format!("GRANT INSERT ON `{db}`.`{SIGNAL_TABLE}` TO '{user}'");
    match (exists, may("INSERT"), may("CREATE")) {
        (true, true, _) => Check::pass("signal table", format!("{table} exists and the user may insert into it (incremental snapshots)")),
        (false, true, true) => Check::pass("signal table", format!("{table} is created with the first pipeline (the user may create and insert into it)")),
        (true, false, _) => Check::warn("signal table", format!("the user may not insert into {table}: re-snapshots and tables added to a pipeline would fail (ClueCDC writes the request there, the connector its watermarks)"), format!("as an admin, run: {grant};")),
        (false, ..) => {
            let message = format!("{table} does not exist and the user may not create it and insert into it: creating a pipeline would fail");
            let hint = format!("as an admin, run: {ddl}; {grant};");
            if roles {
                Check::warn("signal table", message, hint)
            } else {
                Check::fail("signal table", message, hint)
            }
        }
    }
}

/// MySQL's GTIDs: Debezium can stream without them, but with them a failover to a replica
/// keeps the position; `gtid_mode=ON` needs `enforce_gtid_consistency=ON`.
fn gtid_check(mode: &str, consistency: &str) -> Check {
    match (mode, consistency) {
        ("ON", "ON") => Check::pass("gtid", "gtid_mode and enforce_gtid_consistency are ON"),
        ("ON", other) => Check::warn("gtid", format!("gtid_mode is ON but enforce_gtid_consistency is {other}"), "set enforce_gtid_consistency = ON in the server configuration"),
        (other, _) => Check::warn("gtid", format!("gtid_mode is {other}"), "GTIDs let the connector follow a failover to a replica: set gtid_mode = ON with enforce_gtid_consistency = ON"),
    }
}

/// How long the server keeps binary logs, against how long a pipeline may be paused or down:
/// past it, the connector's position is purged and it must snapshot again.
fn retention_check(seconds: Option<u64>) -> Check {
    const DAY: u64 = 86_400;
    match seconds {
        None => Check::warn("binlog retention", "binlog_expire_logs_seconds is unknown", "check how long the server keeps binary logs: a pipeline down longer than that must snapshot again"),
        Some(0) => Check::warn("binlog retention", "binary logs are never purged automatically", "set binlog_expire_logs_seconds (e.g. 604800, 7 days) or purge them yourself: they fill the disk otherwise"),
        Some(s) if s < DAY => Check::warn("binlog retention", format!("binary logs are kept {} h (binlog_expire_logs_seconds = {s})", s / 3600), "a pipeline paused or down longer than that loses its position and must snapshot again: keep them at least as long as the longest outage you plan for (7 days, 604800, is common)"),
        Some(s) => Check::pass("binlog retention", format!("binary logs are kept {:.1} days: a pipeline may be paused or down that long without losing its position", s as f64 / DAY as f64)),
    }
}

/// Debezium joins the server as a replica with the connection's `server_id`, which must differ
/// from the server's own (and from every other replica's).
fn server_id_check(ours: u32, theirs: u32) -> Check {
    if ours == theirs {
        Check::fail("server id", format!("the server's own server_id is {theirs}, the same as this connection's server_id"), "choose another server_id for the connection (unique among the server's replicas): the server refuses a replica with its own id")
    } else {
        Check::pass(
            "server id",
            format!("the connector joins as replica {ours} (the server is {theirs})"),
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::CheckStatus;

    #[test]
    fn mariadb_is_told_by_its_version_string_and_mysql_never_is() {
        assert!(is_mariadb("11.8.3-MariaDB-0+deb13u1"));
        assert!(is_mariadb("5.5.5-10.11.6-MariaDB-0+deb12u1"));
        assert!(!is_mariadb("9.7.0"));
        assert!(!is_mariadb("8.4.6-0ubuntu0.24.04.1"));
    }

    #[test]
    fn gtid_consistency_is_named_when_gtid_mode_is_on_without_it() {
        assert_eq!(gtid_check("ON", "ON").status, CheckStatus::Pass);
        let c = gtid_check("ON", "WARN");
        assert_eq!(c.status, CheckStatus::Warn);
        assert!(c.hint.unwrap().contains("enforce_gtid_consistency = ON"));
        assert!(gtid_check("OFF", "OFF")
            .message
            .contains("gtid_mode is OFF"));
    }

    #[test]
    fn binlog_retention_is_measured_against_a_day_and_never_purging_is_a_warning() {
        assert_eq!(retention_check(Some(2_592_000)).status, CheckStatus::Pass);
        let short = retention_check(Some(3600));
        assert_eq!(short.status, CheckStatus::Warn);
        assert!(short.message.contains("1 h"), "{}", short.message);
        assert!(short.hint.unwrap().contains("snapshot again"));
        assert_eq!(retention_check(Some(0)).status, CheckStatus::Warn);
        assert_eq!(retention_check(None).status, CheckStatus::Warn);
    }

    #[test]
    fn the_signal_table_needs_insert_and_create_when_missing_and_the_fix_is_the_statements() {
        let debezium =
            vec!["GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`".to_string()];
        let missing = signal_verdict("orders", "cdc", false, &debezium);
        assert_eq!(missing.status, CheckStatus::Fail);
        let hint = missing.hint.unwrap();
        assert!(
            hint.contains("CREATE TABLE IF NOT EXISTS `orders`.`cluecdc_signal`"),
            "{hint}"
        );
        assert!(
            hint.contains("GRANT INSERT ON `orders`.`cluecdc_signal` TO 'cdc'"),
            "{hint}"
        );
        let no_insert = signal_verdict("orders", "cdc", true, &debezium);
        assert_eq!(no_insert.status, CheckStatus::Warn);
        let mut granted = debezium.clone();
        granted.push("GRANT INSERT ON `orders`.`cluecdc_signal` TO `cdc`@`%`".into());
        assert_eq!(
            signal_verdict("orders", "cdc", true, &granted).status,
            CheckStatus::Pass
        );
        let owner = vec!["GRANT ALL PRIVILEGES ON `orders`.* TO `cdc`@`%`".to_string()];
        assert_eq!(
            signal_verdict("orders", "cdc", false, &owner).status,
            CheckStatus::Pass
        );
        let other_db = vec!["GRANT ALL PRIVILEGES ON `billing`.* TO `cdc`@`%`".to_string()];
        assert_eq!(
            signal_verdict("orders", "cdc", false, &other_db).status,
            CheckStatus::Fail
        );
        let escaped = vec!["GRANT ALL PRIVILEGES ON `cdc\\_source`.* TO `cdc`@`%`".to_string()];
        assert_eq!(
            signal_verdict("cdc_source", "cdc", false, &escaped).status,
            CheckStatus::Pass
        );
    }

    #[test]
    fn the_connectors_server_id_must_differ_from_the_servers_own() {
        assert_eq!(server_id_check(184_054, 1).status, CheckStatus::Pass);
        let same = server_id_check(1, 1);
        assert_eq!(same.status, CheckStatus::Fail);
        assert!(same.hint.unwrap().contains("choose another server_id"));
    }
}
