//! The few statements a pipeline runs on its source database: the signal table (for
//! incremental snapshots), publication and slot checks, and dropping the slot when asked.

use std::time::Duration;

use serde::Serialize;
use sqlx::{Connection as _, MySqlConnection, PgConnection};

use super::config::SIGNAL_TABLE;
use crate::connections::{mysql, postgres, Connection, Provider};
use crate::error::{Error, Result};
use crate::secrets::store::SecretStore;

enum Db {
    Pg(PgConnection),
    My(MySqlConnection),
}

async fn open(store: &SecretStore, c: &Connection) -> Result<Db> {
    let password = store
        .get(&c.secret_ref, "password")
        .await?
        .map(|p| p.expose().clone())
        .unwrap_or_default();
    let fail = |e: String| Error::Unavailable(format!("cannot reach the source {}: {}", c.name, e));
    let connect = async {
        match c.provider {
            Provider::Postgresql => {
                let o = postgres::connect_options(c, &password)
                    .ok_or_else(|| fail("not a database".into()))?;
                PgConnection::connect_with(&o)
                    .await
                    .map(Db::Pg)
                    .map_err(|e| fail(e.to_string()))
            }
            _ => {
                let o = mysql::connect_options(c, &password)
                    .ok_or_else(|| fail("not a database".into()))?;
                MySqlConnection::connect_with(&o)
                    .await
                    .map(Db::My)
                    .map_err(|e| fail(e.to_string()))
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .map_err(|_| fail("no answer within 10 s".into()))?
}

fn sanitized(e: sqlx::Error, c: &Connection) -> Error {
    Error::Unavailable(format!("on the source {}: {e}", c.name))
}

/// Creates the signal table if missing (the DDL Debezium documents).
pub async fn ensure_signal_table(
    store: &SecretStore,
    c: &Connection,
    collection: &str,
) -> Result<()> {
    let ddl = |q: &str| {
        format!("CREATE TABLE IF NOT EXISTS {q} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)")
    };
    match open(store, c).await? {
        Db::Pg(mut db) => {
            sqlx::query(&ddl(collection))
                .execute(&mut db)
                .await
                .map_err(|e| {
                    Error::Conflict(format!(
                        "cannot create the signal table {collection} ({e}); run: {};",
                        ddl(collection)
                    ))
                })?;
        }
        Db::My(mut db) => {
            let (schema, table) = collection.split_once('.').unwrap_or(("", SIGNAL_TABLE));
            let q = format!("`{schema}`.`{table}`");
            sqlx::query(&ddl(&q)).execute(&mut db).await.map_err(|e| {
                Error::Conflict(format!(
                    "cannot create the signal table {collection} ({e}); run: {};",
                    ddl(&q)
                ))
            })?;
        }
    }
    Ok(())
}

/// The newest heartbeat (source clock, unix ms) a delivery wrote into its destination table,
/// if the table exists yet.
pub async fn newest_heartbeat(
    store: &SecretStore,
    dest: &Connection,
    table: &str,
) -> Result<Option<i64>> {
    let q = match dest.provider {
        Provider::Postgresql => format!(
            "SELECT MAX(ts_ms)::bigint FROM \"{}\"",
            table.replace('"', "")
        ),
        _ => format!(
            "SELECT CAST(MAX(ts_ms) AS SIGNED) FROM `{}`",
            table.replace('`', "")
        ),
    };
    let found = match open(store, dest).await? {
        Db::Pg(mut db) => {
            sqlx::query_scalar::<_, Option<i64>>(&q)
                .fetch_one(&mut db)
                .await
        }
        Db::My(mut db) => {
            sqlx::query_scalar::<_, Option<i64>>(&q)
                .fetch_one(&mut db)
                .await
        }
    };
    // A missing table means nothing was delivered yet: no measurement, not an error.
    Ok(found.ok().flatten())
}

/// Creates the heartbeat table if missing: one row, the source clock in milliseconds.
pub async fn ensure_heartbeat_table(
    store: &SecretStore,
    c: &Connection,
    collection: &str,
) -> Result<()> {
    let ddl = |q: &str| {
        format!("CREATE TABLE IF NOT EXISTS {q} (id INT PRIMARY KEY, ts_ms BIGINT NOT NULL)")
    };
    let q = match c.provider {
        Provider::Postgresql => collection.to_string(),
        _ => {
            let (schema, table) = collection
                .split_once('.')
                .unwrap_or(("", super::config::HEARTBEAT_TABLE));
            format!("`{schema}`.`{table}`")
        }
    };
    let result = match open(store, c).await? {
        Db::Pg(mut db) => sqlx::query(&ddl(&q)).execute(&mut db).await.map(|_| ()),
        Db::My(mut db) => sqlx::query(&ddl(&q)).execute(&mut db).await.map(|_| ()),
    };
    result.map_err(|e| {
        Error::Conflict(format!(
            "cannot create the heartbeat table {collection} ({e}); run: {};",
            ddl(&q)
        ))
    })
}

/// Asks Debezium (through the signal table) for an incremental snapshot of these tables.
pub async fn signal_incremental_snapshot(
    store: &SecretStore,
    c: &Connection,
    collection: &str,
    tables: &[String],
) -> Result<String> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let data = serde_json::json!({"data-collections": tables, "type": "incremental"}).to_string();
    match open(store, c).await? {
        Db::Pg(mut db) => {
            sqlx::query(&format!(
                "INSERT INTO {collection} (id, type, data) VALUES ($1, 'execute-snapshot', $2)"
            ))
            .bind(&id)
            .bind(&data)
            .execute(&mut db)
            .await
            .map_err(|e| sanitized(e, c))?;
        }
        Db::My(mut db) => {
            let (schema, table) = collection.split_once('.').unwrap_or(("", SIGNAL_TABLE));
            sqlx::query(&format!("INSERT INTO `{schema}`.`{table}` (id, type, data) VALUES (?, 'execute-snapshot', ?)")).bind(&id).bind(&data).execute(&mut db).await.map_err(|e| sanitized(e, c))?;
        }
    }
    Ok(id)
}

pub async fn publication_exists(store: &SecretStore, c: &Connection, name: &str) -> Result<bool> {
    match open(store, c).await? {
        Db::Pg(mut db) => Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
        )
        .bind(name)
        .fetch_one(&mut db)
        .await
        .map_err(|e| sanitized(e, c))?),
        Db::My(_) => Ok(true),
    }
}

/// A PostgreSQL replication slot as the pipeline page shows it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct SlotInfo {
    pub name: String,
    pub exists: bool,
    pub active: bool,
    /// WAL the server keeps for this slot: current LSN minus the slot's restart LSN.
    pub retained_wal_bytes: Option<i64>,
    pub wal_status: Option<String>,
    pub confirmed_flush_lag_bytes: Option<i64>,
}

pub async fn slot(store: &SecretStore, c: &Connection, name: &str) -> Result<SlotInfo> {
    let Db::Pg(mut db) = open(store, c).await? else {
        return Ok(SlotInfo::default());
    };
    type SlotRow = (bool, Option<i64>, Option<String>, Option<i64>);
    let row: Option<SlotRow> = sqlx::query_as(
        "SELECT active, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status, pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
         FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(name)
    .fetch_optional(&mut db)
    .await
    .map_err(|e| sanitized(e, c))?;
    Ok(match row {
        Some((active, retained, status, lag)) => SlotInfo {
            name: name.into(),
            exists: true,
            active,
            retained_wal_bytes: retained,
            wal_status: status,
            confirmed_flush_lag_bytes: lag,
        },
        None => SlotInfo {
            name: name.into(),
            ..Default::default()
        },
    })
}

/// Every logical replication slot in the connection's database.
pub async fn slots(store: &SecretStore, c: &Connection) -> Result<Vec<SlotInfo>> {
    let Db::Pg(mut db) = open(store, c).await? else {
        return Ok(vec![]);
    };
    type Row = (String, bool, Option<i64>, Option<String>, Option<i64>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT slot_name::text, active, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status, pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
         FROM pg_replication_slots WHERE slot_type = 'logical' AND database = current_database() ORDER BY slot_name",
    )
    .fetch_all(&mut db)
    .await
    .map_err(|e| sanitized(e, c))?;
    Ok(rows
        .into_iter()
        .map(|(name, active, retained, status, lag)| SlotInfo {
            name,
            exists: true,
            active,
            retained_wal_bytes: retained,
            wal_status: status,
            confirmed_flush_lag_bytes: lag,
        })
        .collect())
}

/// Drops the slot once no connection holds it (waits up to 30 s for the connector to let go).
pub async fn drop_slot(store: &SecretStore, c: &Connection, name: &str) -> Result<bool> {
    let Db::Pg(mut db) = open(store, c).await? else {
        return Ok(false);
    };
    for _ in 0..60 {
        let state: Option<bool> =
            sqlx::query_scalar("SELECT active FROM pg_replication_slots WHERE slot_name = $1")
                .bind(name)
                .fetch_optional(&mut db)
                .await
                .map_err(|e| sanitized(e, c))?;
        match state {
            None => return Ok(false),
            Some(false) => {
                sqlx::query("SELECT pg_drop_replication_slot($1)")
                    .bind(name)
                    .execute(&mut db)
                    .await
                    .map_err(|e| sanitized(e, c))?;
                return Ok(true);
            }
            Some(true) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    Err(Error::Conflict(format!(
        "replication slot {name} is still in use; stop whatever holds it and drop it by hand"
    )))
}
