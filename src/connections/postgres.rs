//! PostgreSQL: connection checks for capture (logical decoding) and for delivery (DDL rights),
//! and table discovery with primary keys and replica identity. Bounded: connect and statement
//! timeouts on every query, a row limit on discovery.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::{ConnectOptions, Connection as _, PgConnection, Row};

use super::settings::TlsMode;
use super::{guard, sanitize, Adapter, Check, Connection, TableInfo};
use crate::error::{Error, Result};
use crate::secrets::Secret;

pub struct Postgres;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn connect_options(conn: &Connection, password: &str) -> Option<PgConnectOptions> {
    let d = conn.database()?;
    let mut o = PgConnectOptions::new()
        .host(&d.host)
        .port(d.port)
        .database(&d.database)
        .username(&d.user)
        .password(password)
        .application_name("cluecdc")
        .options([("statement_timeout", "10000"), ("lock_timeout", "5000")])
        .ssl_mode(match d.tls_mode {
            TlsMode::Disable => PgSslMode::Disable,
            TlsMode::Require => PgSslMode::Require,
            TlsMode::VerifyCa => PgSslMode::VerifyCa,
            TlsMode::VerifyFull => PgSslMode::VerifyFull,
        })
        .disable_statement_logging();
    if let Some(pem) = &d.ca_certificate {
        o = o.ssl_root_cert_from_pem(pem.as_bytes().to_vec());
    }
    Some(o)
}

/// The one way ClueCDC connects to a PostgreSQL server: through [`guard`], which refuses to
/// give the password away to a server that has not proved itself, within [`CONNECT_TIMEOUT`].
/// Errors are sanitized, and a refusal says why and what to change.
pub async fn connect(
    conn: &Connection,
    password: &str,
) -> std::result::Result<PgConnection, String> {
    let d = conn.database().ok_or("not a database connection")?;
    let options = connect_options(conn, password).ok_or("not a database connection")?;
    let attempt = guard::connect(guard::Protocol::Postgres, d, |via| {
        let options = match via {
            Some(relay) => options.host(&relay.ip().to_string()).port(relay.port()),
            None => options,
        };
        async move { PgConnection::connect_with(&options).await }
    });
    guard::within(CONNECT_TIMEOUT, password, attempt).await
}

async fn open(
    conn: &Connection,
    secrets: &BTreeMap<String, Secret<String>>,
) -> std::result::Result<PgConnection, String> {
    let password = secrets
        .get("password")
        .map(|s| s.expose().clone())
        .unwrap_or_default();
    connect(conn, &password).await
}

/// A fix for the common ways a connection fails.
fn connect_hint(message: &str) -> String {
    if let Some((_, fix)) = guard::split(message) {
        return fix.into();
    }
    let m = message.to_lowercase();
    if m.contains("password authentication failed") || m.contains("authentication") {
        "check the user and password (rotate the credentials if they changed) and pg_hba.conf"
            .into()
    } else if m.contains("does not exist") {
        "check the database name".into()
    } else if m.contains("refused") || m.contains("no answer") || m.contains("timed out") {
        "check host and port, that PostgreSQL listens on that address, and firewalls between ClueCDC and the server".into()
    } else if let Some(why) = super::tls_problem(&m) {
        why.into()
    } else if m.contains("ssl") || m.contains("tls") || m.contains("certificate") {
        "check tls_mode and the CA certificate against the server's TLS setup".into()
    } else {
        "check the connection settings".into()
    }
}

impl Adapter for Postgres {
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
            let version: i64 =
                sqlx::query_scalar("SELECT current_setting('server_version_num')::bigint")
                    .fetch_one(&mut c)
                    .await
                    .unwrap_or(0);
            if version >= 100_000 {
                checks.push(Check::pass(
                    "version",
                    format!("PostgreSQL {}.{}", version / 10_000, version % 10_000 / 100),
                ));
            } else {
                checks.push(Check::fail(
                    "version",
                    format!("server version number {version}"),
                    "logical decoding with pgoutput needs PostgreSQL 10 or newer",
                ));
            }
            if conn.is_source() {
                source_checks(&mut c, d, &mut checks).await;
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
                "SELECT n.nspname AS schema, c.relname AS name, c.reltuples::bigint AS est, c.relreplident::text AS ident,
                        COALESCE((SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey::int2[], a.attnum))
                                  FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                                  WHERE i.indrelid = c.oid AND i.indisprimary), '') AS pk
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
                   AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%'
                   AND has_schema_privilege(n.oid, 'USAGE')
                 ORDER BY 1, 2 LIMIT $1",
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
                    let ident = match r.get::<String, _>("ident").as_str() {
                        "d" => "default",
                        "f" => "full",
                        "i" => "index",
                        _ => "nothing",
                    };
                    let est: i64 = r.get("est");
                    TableInfo {
                        schema: r.get("schema"),
                        name: r.get("name"),
                        capturable: ident == "full"
                            || ident == "index"
                            || (ident == "default" && !primary_key.is_empty()),
                        primary_key,
                        replica_identity: Some(ident.to_string()),
                        estimated_rows: (est >= 0).then_some(est),
                    }
                })
                .collect())
        })
    }
}

async fn source_checks(
    c: &mut PgConnection,
    d: &super::settings::DatabaseSettings,
    checks: &mut Vec<Check>,
) {
    let wal: String = sqlx::query_scalar("SHOW wal_level")
        .fetch_one(&mut *c)
        .await
        .unwrap_or_default();
    if wal == "logical" {
        checks.push(Check::pass("wal_level", "wal_level is logical"));
    } else {
        checks.push(Check::fail(
            "wal_level",
            format!("wal_level is {wal}; capture needs logical"),
            "run ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL (on RDS: set rds.logical_replication = 1 in the parameter group and reboot)",
        ));
    }
    let privileged: Option<bool> = sqlx::query_scalar(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_optional(&mut *c)
    .await
    .ok()
    .flatten();
    if privileged == Some(true) {
        checks.push(Check::pass(
            "replication privilege",
            format!("{} may replicate", d.user),
        ));
    } else {
        checks.push(Check::fail("replication privilege", format!("{} lacks the REPLICATION attribute", d.user), format!("run ALTER ROLE \"{}\" WITH REPLICATION; as a superuser (on RDS: GRANT rds_replication TO \"{}\";)", d.user, d.user)));
    }
    let slots: Option<(i64, i64)> = sqlx::query_as("SELECT current_setting('max_replication_slots')::bigint, (SELECT count(*) FROM pg_replication_slots)").fetch_optional(&mut *c).await.ok().flatten();
    let slot_name = d.slot_name.clone().unwrap_or_default();
    let ours: Option<(bool, Option<String>)> =
        sqlx::query_as("SELECT active, wal_status FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&slot_name)
            .fetch_optional(&mut *c)
            .await
            .ok()
            .flatten();
    match (slots, ours) {
        (_, Some((active, status))) => checks.push(Check::pass(
            "replication slots",
            format!("slot {slot_name} already exists ({}; WAL status {})", if active { "active" } else { "inactive" }, status.unwrap_or_else(|| "unknown".into())),
        )),
        (Some((max, used)), None) if used < max => checks.push(Check::pass("replication slots", format!("{} of {max} replication slots free; slot {slot_name} will be created", max - used))),
        (Some((max, _)), None) => checks.push(Check::fail("replication slots", format!("all {max} replication slots are in use"), "raise max_replication_slots (restart needed) or drop an unused slot after checking nothing depends on it")),
        (None, None) => checks.push(Check::warn("replication slots", "could not read replication slot usage", "grant the user pg_monitor to see slot usage")),
    }
    let publication = d.publication_name.clone().unwrap_or_default();
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
            .bind(&publication)
            .fetch_one(&mut *c)
            .await
            .unwrap_or(false);
    let can_create: bool = sqlx::query_scalar(
        "SELECT has_database_privilege(current_user, current_database(), 'CREATE')",
    )
    .fetch_one(&mut *c)
    .await
    .unwrap_or(false);
    if exists {
        checks.push(Check::pass(
            "publication",
            format!("publication {publication} exists"),
        ));
    } else if can_create {
        checks.push(Check::pass("publication", format!("publication {publication} does not exist yet; ClueCDC's connector can create it for the selected tables (it must own them)")));
    } else {
        checks.push(Check::warn(
            "publication",
            format!("publication {publication} does not exist and {} cannot create one", d.user),
            format!("a table owner runs CREATE PUBLICATION {publication} FOR TABLE <the tables to capture>; the pipeline page shows the exact statement"),
        ));
    }
    let keyless: Vec<String> = sqlx::query_scalar(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%'
           AND c.relreplident <> 'f' AND NOT (c.relreplident = 'i')
           AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
         ORDER BY 1 LIMIT 6",
    )
    .fetch_all(&mut *c)
    .await
    .unwrap_or_default();
    if keyless.is_empty() {
        checks.push(Check::pass(
            "table keys",
            "every table has a primary key or a suitable replica identity",
        ));
    } else {
        let listed = keyless
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        checks.push(Check::warn(
            "table keys",
            format!("tables without a primary key or replica identity: {listed}{}", if keyless.len() > 5 { ", …" } else { "" }),
            "updates and deletes of these tables carry no key; add a primary key or run ALTER TABLE … REPLICA IDENTITY FULL before capturing them",
        ));
    }
}

async fn destination_checks(
    c: &mut PgConnection,
    secrets: &BTreeMap<String, Secret<String>>,
    checks: &mut Vec<Check>,
) {
    // DDL inside a transaction that is rolled back: proves the rights, leaves nothing behind.
    let probe = format!(
        "cluecdc_probe_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let result: std::result::Result<(), sqlx::Error> = async {
        let mut tx = c.begin().await?;
        sqlx::query(&format!(
            "CREATE TABLE public.{probe} (id integer PRIMARY KEY)"
        ))
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!("ALTER TABLE public.{probe} ADD COLUMN note text"))
            .execute(&mut *tx)
            .await?;
        tx.rollback().await?;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => checks.push(Check::pass("create and alter tables", "may create and alter tables in schema public (checked in a rolled-back transaction)")),
        Err(e) => checks.push(Check::fail(
            "create and alter tables",
            sanitize(&e.to_string(), secrets),
            "grant the user CREATE on the target schema (GRANT CREATE ON SCHEMA public TO …) so the sink can create and evolve tables",
        )),
    }
}
