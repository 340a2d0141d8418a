//! The few statements a pipeline runs on its source database: the signal table (for
//! incremental snapshots), publication and slot checks, and dropping the slot when asked.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

async fn password(store: &SecretStore, c: &Connection) -> Result<String> {
    Ok(store
        .get(&c.secret_ref, "password")
        .await?
        .map(|p| p.expose().clone())
        .unwrap_or_default())
}

async fn open(store: &SecretStore, c: &Connection) -> Result<Db> {
    connect(c, &password(store, c).await?).await
}

async fn connect(c: &Connection, password: &str) -> Result<Db> {
    let fail = |e: String| {
        let why = crate::connections::tls_problem(&e)
            .map(|w| format!(" ({w})"))
            .unwrap_or_default();
        Error::Unavailable(format!("cannot reach the source {}: {e}{why}", c.name))
    };
    // Each engine's connect is guarded (no password to a server that has not proved itself)
    // and bounded by its own timeout.
    match c.provider {
        Provider::Postgresql => postgres::connect(c, password).await.map(Db::Pg),
        _ => mysql::connect(c, password).await.map(Db::My),
    }
    .map_err(fail)
}

fn sanitized(e: sqlx::Error, c: &Connection) -> Error {
    Error::Unavailable(format!("on the source {}: {e}", c.name))
}

/// PostgreSQL's `CREATE TABLE IF NOT EXISTS` is not atomic: when two pipelines on one schema
/// are created at the same moment, the second can fail although the table now exists, which
/// is all we wanted: with a unique violation in the catalog (`pg_type_typname_nsp_index`),
/// "relation already exists" (42P07) or "type already exists" (42710), by timing.
fn created_meanwhile(e: sqlx::Error) -> std::result::Result<(), sqlx::Error> {
    let exists = match &e {
        sqlx::Error::Database(d) => {
            d.is_unique_violation() || matches!(d.code().as_deref(), Some("42P07" | "42710"))
        }
        _ => false,
    };
    if exists {
        Ok(())
    } else {
        Err(e)
    }
}

/// One connection to a source for the statements a pipeline create or change runs in a row
/// (table check, publication check, signal and heartbeat tables), so that it pays one connect
/// and authentication instead of one per statement.
///
/// A session that saw no error goes back to a small idle list when dropped, and the next
/// session for the same connection reuses it after a ping: a new PostgreSQL connection costs
/// its authentication (SCRAM's key derivation, on both sides) and a server process, 11 ms here
/// (19 ms with TLS), which was most of what a burst of pipeline creates spent beyond the work
/// itself. Idle connections are keyed by everything they were opened from (the connection's
/// generation, its settings, the password), so a changed setting or rotated secret never
/// reuses an old one; at most [`IDLE_MAX`] per key are kept, none longer than [`IDLE_FOR`].
pub struct Session {
    db: Option<Db>,
    key: [u8; 32],
    healthy: bool,
    c: Connection,
}

const IDLE_FOR: Duration = Duration::from_secs(60);
const IDLE_MAX: usize = 4;

type IdleList = HashMap<[u8; 32], Vec<(Db, Instant)>>;

fn idle() -> std::sync::MutexGuard<'static, IdleList> {
    static IDLE: OnceLock<std::sync::Mutex<IdleList>> = OnceLock::new();
    IDLE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Closes expired idle connections every half [`IDLE_FOR`] when no session comes to do it,
/// so that a source does not see ClueCDC's idle backends for longer than a minute or so.
/// Started by the first kept connection, in its runtime.
fn sweep_in_background() {
    static STARTED: OnceLock<()> = OnceLock::new();
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    STARTED.get_or_init(|| {
        rt.spawn(async {
            loop {
                tokio::time::sleep(IDLE_FOR / 2).await;
                let stale = expired(&mut idle(), Instant::now());
                drop(stale);
            }
        });
    });
}

/// Takes the idle connections older than [`IDLE_FOR`] out of the list (to be dropped by the
/// caller, outside the lock).
fn expired(list: &mut IdleList, now: Instant) -> Vec<Db> {
    let mut out = Vec::new();
    for conns in list.values_mut() {
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(conns)
            .into_iter()
            .partition(|(_, since)| now.duration_since(*since) > IDLE_FOR);
        *conns = keep;
        out.extend(old.into_iter().map(|(db, _)| db));
    }
    list.retain(|_, conns| !conns.is_empty());
    out
}

fn session_key(c: &Connection, password: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let settings = serde_json::to_string(&c.settings).unwrap_or_default();
    for part in [
        c.id.as_str(),
        &c.generation.to_string(),
        &settings,
        password,
    ] {
        // Length-prefixed, so that no two different inputs hash alike.
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(db) = self.db.take() else { return };
        if !self.healthy {
            return;
        }
        let now = Instant::now();
        let mut list = idle();
        let stale = expired(&mut list, now);
        let conns = list.entry(self.key).or_default();
        if conns.len() < IDLE_MAX {
            conns.push((db, now));
        }
        drop(list);
        drop(stale);
        sweep_in_background();
    }
}

/// One column row of a catalog query ([`Session::table_columns`]).
#[derive(Debug, Clone)]
pub struct ColumnRow {
    pub table: String,
    pub column: String,
    pub data_type: String,
    pub nullable: bool,
    pub default: Option<String>,
    /// Position in the primary key (1-based), None outside it.
    pub key_position: Option<i64>,
}

/// A PostgreSQL publication as it concerns some tables ([`Session::publication`]).
#[derive(Debug, Clone, Default)]
pub struct PublicationRows {
    /// (puballtables, pubinsert, pubupdate, pubdelete); None: no such publication.
    pub head: Option<(bool, bool, bool, bool)>,
    /// The asked tables it publishes (`schema.table`), with their row filter.
    pub tables: Vec<(String, Option<String>)>,
}

impl Session {
    pub async fn open(store: &SecretStore, c: &Connection) -> Result<Session> {
        let password = password(store, c).await?;
        let key = session_key(c, &password);
        loop {
            let reused = {
                let mut list = idle();
                let stale = expired(&mut list, Instant::now());
                let db = list.get_mut(&key).and_then(Vec::pop).map(|(db, _)| db);
                drop(list);
                drop(stale);
                db
            };
            let Some(mut db) = reused else { break };
            // A server restart or an idle timeout on its side ends a kept connection: one
            // round trip finds out, and a dead one is dropped for the next or a new one.
            let ping = async {
                match &mut db {
                    Db::Pg(conn) => conn.ping().await,
                    Db::My(conn) => conn.ping().await,
                }
            };
            if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(2), ping).await {
                return Ok(Session {
                    db: Some(db),
                    key,
                    healthy: true,
                    c: c.clone(),
                });
            }
        }
        Ok(Session {
            db: Some(connect(c, &password).await?),
            key,
            healthy: true,
            c: c.clone(),
        })
    }

    /// The connection, for one statement. The session counts as unhealthy until the
    /// statement's answer is in ([`Session::finish`]): one dropped mid-statement (a request
    /// cancelled) or failed is closed, never kept for reuse.
    fn db(&mut self) -> Result<&mut Db> {
        self.healthy = false;
        self.db
            .as_mut()
            .ok_or_else(|| Error::Unavailable("the source session is closed".into()))
    }

    fn finish<T>(&mut self, answer: std::result::Result<T, sqlx::Error>) -> Result<T> {
        self.healthy = answer.is_ok();
        answer.map_err(|e| sanitized(e, &self.c))
    }

    /// The source's own per-table change counters (inserts + updates + deletes since its
    /// statistics were reset) of `tables`, in one statement bounded by the session's statement
    /// timeout: PostgreSQL `pg_stat_user_tables`; MySQL/MariaDB performance_schema's table I/O
    /// summary (a table not opened since the server started has no row there: 0).
    /// `Ok(Err(why))`: this source keeps none (performance_schema off or unreadable).
    pub async fn change_counters(
        &mut self,
        tables: &[String],
    ) -> Result<std::result::Result<HashMap<String, i64>, String>> {
        let mariadb = self.c.provider == Provider::Mariadb;
        match self.db()? {
            Db::Pg(db) => {
                let rows: std::result::Result<Vec<(String, i64)>, _> = sqlx::query_as(
                    "SELECT schemaname || '.' || relname, (n_tup_ins + n_tup_upd + n_tup_del)::bigint
                     FROM pg_stat_user_tables WHERE schemaname || '.' || relname = ANY($1)",
                )
                .bind(tables)
                .fetch_all(db)
                .await;
                Ok(Ok(self.finish(rows)?.into_iter().collect()))
            }
            Db::My(db) => {
                let bound = if mariadb {
                    "SET SESSION max_statement_time = 10"
                } else {
                    "SET SESSION max_execution_time = 10000"
                };
                let _ = sqlx::query(bound).execute(&mut *db).await;
                let marks = vec!["?"; tables.len()].join(", ");
                // One statement: the counters, and a last row carrying whether
                // performance_schema is on at all (off: its tables exist but stay empty).
                let q = format!(
                    "SELECT CAST(CONCAT(OBJECT_SCHEMA, '.', OBJECT_NAME) AS CHAR), CAST(COUNT_INSERT + COUNT_UPDATE + COUNT_DELETE AS SIGNED)
                     FROM performance_schema.table_io_waits_summary_by_table
                     WHERE OBJECT_TYPE = 'TABLE' AND CONCAT(OBJECT_SCHEMA, '.', OBJECT_NAME) IN ({marks})
                     UNION ALL SELECT NULL, CAST(@@performance_schema AS SIGNED)"
                );
                let mut query = sqlx::query_as::<_, (Option<String>, Option<i64>)>(&q);
                for t in tables {
                    query = query.bind(t);
                }
                let rows = query.fetch_all(db).await;
                // A refused read is an answer (no counters here), not a broken session.
                self.healthy = true;
                let rows = match rows {
                    Ok(rows) => rows,
                    Err(e) => {
                        return Ok(Err(format!(
                            "performance_schema is not readable here ({e})"
                        )))
                    }
                };
                if !rows.iter().any(|(t, v)| t.is_none() && *v == Some(1)) {
                    return Ok(Err(
                        "performance_schema is off (@@performance_schema = 0)".into()
                    ));
                }
                let mut out: HashMap<String, i64> = tables.iter().map(|t| (t.clone(), 0)).collect();
                out.extend(rows.into_iter().filter_map(|(t, v)| Some((t?, v?))));
                Ok(Ok(out))
            }
        }
    }

    /// PostgreSQL: publication `name` and which of `tables` it publishes, with their row
    /// filters (two catalog reads). Other engines have no publications: the default.
    pub async fn publication(&mut self, name: &str, tables: &[String]) -> Result<PublicationRows> {
        let Db::Pg(db) = self.db()? else {
            self.healthy = true;
            return Ok(PublicationRows::default());
        };
        let read = async {
            let head: Option<(bool, bool, bool, bool)> = sqlx::query_as(
                "SELECT puballtables, pubinsert, pubupdate, pubdelete FROM pg_publication WHERE pubname = $1",
            )
            .bind(name)
            .fetch_optional(&mut *db)
            .await?;
            let tables = match head {
                None => vec![],
                Some(_) => {
                    sqlx::query_as(
                        "SELECT schemaname || '.' || tablename, rowfilter FROM pg_publication_tables
                         WHERE pubname = $1 AND schemaname || '.' || tablename = ANY($2)",
                    )
                    .bind(name)
                    .bind(tables)
                    .fetch_all(&mut *db)
                    .await?
                }
            };
            Ok(PublicationRows { head, tables })
        }
        .await;
        self.finish(read)
    }

    /// The named tables (`schema.table`; `database.table` for MySQL and MariaDB) the source
    /// does not have as capturable base tables, in the order given. One catalog query for
    /// just these names, with the same conditions as table discovery, so it neither depends
    /// on discovery's row limit nor reads the whole catalog.
    pub async fn missing_tables(&mut self, tables: &[String]) -> Result<Vec<String>> {
        let found: std::result::Result<Vec<String>, _> = match self.db()? {
            Db::Pg(db) => sqlx::query_scalar(
                "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
                   AND has_schema_privilege(n.oid, 'USAGE')
                   AND n.nspname || '.' || c.relname = ANY($1)",
            )
            .bind(tables)
            .fetch_all(db)
            .await,
            Db::My(db) => {
                let marks = vec!["?"; tables.len()].join(", ");
                let q = format!(
                    "SELECT CAST(CONCAT(table_schema, '.', table_name) AS CHAR) FROM information_schema.tables
                     WHERE table_type = 'BASE TABLE' AND CONCAT(table_schema, '.', table_name) IN ({marks})"
                );
                let mut q = sqlx::query_scalar(&q);
                for t in tables {
                    q = q.bind(t);
                }
                q.fetch_all(db).await
            }
        };
        let found = self.finish(found)?;
        Ok(tables
            .iter()
            .filter(|t| !found.contains(t))
            .cloned()
            .collect())
    }

    /// The columns and primary keys of the named tables (`schema.table`, `database.table`, or
    /// a bare name in the connection's current schema or database), in catalog order: ONE
    /// catalog query for all of them, bounded by a statement timeout of `timeout_ms` (schema
    /// guardrails, `tables::schema`). A table the source does not have gives no rows.
    pub async fn table_columns(
        &mut self,
        tables: &[String],
        timeout_ms: u64,
    ) -> Result<Vec<ColumnRow>> {
        type Raw = (String, String, String, bool, Option<String>, Option<i64>);
        type MyRaw = (String, String, String, i64, Option<String>, Option<i64>);
        let mariadb = self.c.provider == Provider::Mariadb;
        let rows: std::result::Result<Vec<Raw>, sqlx::Error> = match self.db()? {
            Db::Pg(db) => {
                let read = async {
                    let mut tx = db.begin().await?;
                    sqlx::query(&format!("SET LOCAL statement_timeout = {timeout_ms}"))
                        .execute(&mut *tx)
                        .await?;
                    let rows: Vec<Raw> = sqlx::query_as(
                        "SELECT CASE WHEN n.nspname || '.' || c.relname = ANY($1) THEN n.nspname || '.' || c.relname ELSE c.relname::text END,
                                a.attname::text, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
                                pg_get_expr(d.adbin, d.adrelid), array_position(i.indkey::int2[], a.attnum)::int8
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                         LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
                         LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
                         WHERE c.relkind IN ('r', 'p')
                           AND (n.nspname || '.' || c.relname = ANY($1) OR (n.nspname = current_schema() AND c.relname = ANY($1)))
                         ORDER BY 1, a.attnum",
                    )
                    .bind(tables)
                    .fetch_all(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    Ok(rows)
                };
                read.await
            }
            Db::My(db) => {
                let marks = vec!["?"; tables.len().max(1)].join(", ");
                let select = format!(
                    "SELECT CAST(CASE WHEN CONCAT(c.table_schema, '.', c.table_name) IN ({marks}) THEN CONCAT(c.table_schema, '.', c.table_name) ELSE c.table_name END AS CHAR),
                            CAST(c.column_name AS CHAR), CAST(c.column_type AS CHAR), CAST(c.is_nullable = 'YES' AS SIGNED),
                            CAST(c.column_default AS CHAR), CAST(k.ordinal_position AS SIGNED)
                     FROM information_schema.columns c
                     LEFT JOIN information_schema.key_column_usage k ON k.table_schema = c.table_schema AND k.table_name = c.table_name
                          AND k.column_name = c.column_name AND k.constraint_name = 'PRIMARY'
                     WHERE CONCAT(c.table_schema, '.', c.table_name) IN ({marks}) OR (c.table_schema = DATABASE() AND c.table_name IN ({marks}))
                     ORDER BY 1, c.ordinal_position"
                );
                // MySQL bounds a SELECT with a hint, MariaDB with SET STATEMENT (each ignores
                // or refuses the other's).
                let q = if mariadb {
                    format!(
                        "SET STATEMENT max_statement_time = {} FOR {select}",
                        (timeout_ms as f64) / 1000.0
                    )
                } else {
                    select.replacen(
                        "SELECT",
                        &format!("SELECT /*+ MAX_EXECUTION_TIME({timeout_ms}) */"),
                        1,
                    )
                };
                let mut query = sqlx::query_as::<_, MyRaw>(&q);
                for _ in 0..3 {
                    for t in tables {
                        query = query.bind(t);
                    }
                    if tables.is_empty() {
                        query = query.bind("");
                    }
                }
                query.fetch_all(db).await.map(|rows| {
                    rows.into_iter()
                        .map(|(t, c, ty, n, d, k)| (t, c, ty, n != 0, d, k))
                        .collect()
                })
            }
        };
        let rows = self.finish(rows)?;
        Ok(rows
            .into_iter()
            .map(
                |(table, column, data_type, nullable, default, key_position)| ColumnRow {
                    table,
                    column,
                    data_type,
                    nullable,
                    default,
                    key_position,
                },
            )
            .collect())
    }

    pub async fn publication_exists(&mut self, name: &str) -> Result<bool> {
        let exists = match self.db()? {
            Db::Pg(db) => {
                sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
                )
                .bind(name)
                .fetch_one(db)
                .await
            }
            Db::My(_) => Ok(true),
        };
        self.finish(exists)
    }

    /// Creates the signal table if missing (the DDL Debezium documents).
    pub async fn ensure_signal_table(&mut self, collection: &str) -> Result<()> {
        self.ensure_table(
            "signal",
            collection,
            SIGNAL_TABLE,
            "(id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048) NULL)",
        )
        .await
    }

    /// Creates the heartbeat table (the row the connector's heartbeat action updates).
    pub async fn ensure_heartbeat_table(&mut self, collection: &str) -> Result<()> {
        self.ensure_table(
            "heartbeat",
            collection,
            super::config::HEARTBEAT_TABLE,
            "(id INT PRIMARY KEY, ts_ms BIGINT NOT NULL)",
        )
        .await
    }

    async fn ensure_table(
        &mut self,
        what: &str,
        collection: &str,
        default_table: &str,
        columns: &str,
    ) -> Result<()> {
        let (schema, table) = collection.split_once('.').unwrap_or(("", default_table));
        let q = match self.c.provider {
            Provider::Postgresql => collection.to_string(),
            _ => format!("`{schema}`.`{table}`"),
        };
        let ddl = format!("CREATE TABLE IF NOT EXISTS {q} {columns}");
        let result = match self.db()? {
            Db::Pg(db) => sqlx::query(&ddl)
                .execute(db)
                .await
                .map(|_| ())
                .or_else(created_meanwhile),
            // MySQL checks the CREATE privilege before it looks whether the table exists, so
            // a capture user with exactly the grants Debezium documents (no CREATE) is refused
            // even `CREATE TABLE IF NOT EXISTS` of a table an admin made: it is created only
            // when missing.
            Db::My(db) => {
                let exists = sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                )
                .bind(schema)
                .bind(table)
                .fetch_one(&mut *db)
                .await;
                match exists {
                    Ok(n) if n > 0 => Ok(()),
                    Ok(_) => sqlx::query(&ddl).execute(db).await.map(|_| ()),
                    Err(e) => Err(e),
                }
            }
        };
        self.healthy = result.is_ok();
        let user = self
            .c
            .database()
            .map(|d| d.user.clone())
            .unwrap_or_default();
        result.map_err(|e| {
            let grant = match self.c.provider {
                Provider::Postgresql => String::new(),
                // The connector writes incremental-snapshot watermarks into the signal table
                // and runs the heartbeat's upsert, as the connection's user.
                _ => format!(
                    " GRANT {} ON {q} TO '{user}';",
                    if what == "signal" { "INSERT" } else { "INSERT, UPDATE" }
                ),
            };
            Error::Conflict(format!(
                "cannot create the {what} table {collection} ({e}); as a user who may, run: {ddl};{grant}"
            ))
        })
    }
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

/// A PostgreSQL replication slot as the pipeline page shows it.
#[derive(Debug, Clone, Serialize, Default, schemars::JsonSchema)]
pub struct SlotInfo {
    pub name: String,
    pub exists: bool,
    pub active: bool,
    /// WAL the server keeps for this slot: current LSN minus the slot's restart LSN.
    pub retained_wal_bytes: Option<i64>,
    pub wal_status: Option<String>,
    pub confirmed_flush_lag_bytes: Option<i64>,
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

/// One binary log file the server keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct BinlogFile {
    pub name: String,
    pub size: i64,
}

/// Where a MySQL/MariaDB pipeline's connector stands in the server's binary logs.
#[derive(Debug, Clone, Serialize, Default, PartialEq, schemars::JsonSchema)]
pub struct BinlogInfo {
    /// The position the connector has committed (from its Connect offsets).
    pub connector_file: Option<String>,
    pub connector_pos: Option<i64>,
    /// The server's newest binlog and its size: where new changes are written.
    pub server_file: String,
    pub server_pos: i64,
    /// The oldest binlog the server still keeps; purging past the connector's file loses data.
    pub oldest_file: String,
    pub files: usize,
    /// Bytes of binlog the connector has not read yet.
    pub bytes_behind: Option<i64>,
    /// Bytes between the oldest kept binlog's start and the connector's position: how much the
    /// server may purge before the connector's position is gone.
    pub bytes_after_oldest: Option<i64>,
    /// False when the connector's file is no longer on the server (it needs a new snapshot).
    pub position_kept: Option<bool>,
}

/// Computes the distances, given the server's files oldest first and the connector's position.
pub fn binlog_distance(files: &[BinlogFile], position: Option<(&str, i64)>) -> BinlogInfo {
    let mut info = BinlogInfo {
        server_file: files.last().map(|f| f.name.clone()).unwrap_or_default(),
        server_pos: files.last().map(|f| f.size).unwrap_or(0),
        oldest_file: files.first().map(|f| f.name.clone()).unwrap_or_default(),
        files: files.len(),
        ..Default::default()
    };
    let Some((file, pos)) = position else {
        return info;
    };
    info.connector_file = Some(file.to_string());
    info.connector_pos = Some(pos);
    match files.iter().position(|f| f.name == file) {
        Some(i) => {
            info.position_kept = Some(true);
            let before: i64 = files[..i].iter().map(|f| f.size).sum();
            let after: i64 = files[i + 1..].iter().map(|f| f.size).sum();
            info.bytes_after_oldest = Some(before + pos);
            info.bytes_behind = Some((files[i].size - pos).max(0) + after);
        }
        // Binlog names sort in order; a file older than the oldest kept one was purged.
        None if files.first().is_some_and(|f| file < f.name.as_str()) => {
            info.position_kept = Some(false)
        }
        None => {}
    }
    info
}

/// The binlog position in a MySQL/MariaDB connector's offsets (`file` and `pos`).
/// Where the connector's committed offset says it is in the source, in the source's own terms.
#[derive(Debug, Clone, Default, Serialize, PartialEq, schemars::JsonSchema)]
pub struct SourcePosition {
    /// PostgreSQL: the last LSN whose changes Connect has committed, written as PostgreSQL
    /// writes it (`0/16B3748`, as in `pg_replication_slots`).
    pub lsn: Option<String>,
    /// MySQL/MariaDB: the binlog file and position to resume from.
    pub binlog_file: Option<String>,
    pub binlog_pos: Option<i64>,
    /// MySQL/MariaDB with GTIDs: the executed GTID set.
    pub gtids: Option<String>,
    /// When the source committed the change at this position (unix ms), if the offset says.
    pub source_ts_ms: Option<i64>,
    /// The offset belongs to an initial snapshot still running.
    pub snapshotting: bool,
}

/// `lsn` as PostgreSQL prints it: the high and low 32 bits in hex, `X/Y`.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// The source position in Connect's offsets for a Debezium source connector
/// (`GET /connectors/{name}/offsets`): PostgreSQL's `lsn` (or `lsn_commit`), MySQL's and
/// MariaDB's `file`/`pos` and `gtids`, the source time (`ts_usec` or `ts_sec`), and whether a
/// snapshot is running. None when the offsets hold none of these.
pub fn position(offsets: &serde_json::Value) -> Option<SourcePosition> {
    let items = offsets.get("offsets")?.as_array()?;
    items.iter().find_map(|o| {
        let o = o.get("offset")?;
        let int = |k: &str| o.get(k).and_then(serde_json::Value::as_i64);
        let lsn = int("lsn").or_else(|| int("lsn_commit"));
        let file = o.get("file").and_then(|f| f.as_str()).map(str::to_string);
        if lsn.is_none() && file.is_none() {
            return None;
        }
        Some(SourcePosition {
            lsn: lsn.and_then(|l| u64::try_from(l).ok()).map(lsn_text),
            binlog_pos: file.as_ref().and(int("pos")),
            binlog_file: file,
            gtids: o
                .get("gtids")
                .and_then(|g| g.as_str())
                .filter(|g| !g.is_empty())
                .map(str::to_string),
            source_ts_ms: int("ts_usec")
                .map(|us| us / 1000)
                .or_else(|| int("ts_sec").map(|s| s * 1000)),
            snapshotting: o.get("snapshot").is_some_and(|v| {
                v.as_bool() == Some(true)
                    || v.as_str().is_some_and(|s| s != "false" && !s.is_empty())
            }),
        })
    })
}

pub fn binlog_position(offsets: &serde_json::Value) -> Option<(String, i64)> {
    let items = offsets.get("offsets")?.as_array()?;
    items.iter().find_map(|o| {
        let o = o.get("offset")?;
        Some((
            o.get("file")?.as_str()?.to_string(),
            o.get("pos")?.as_i64()?,
        ))
    })
}

/// The server's binary logs, oldest first (`SHOW BINARY LOGS`; needs REPLICATION CLIENT, which
/// a capture user has anyway).
pub async fn binlogs(store: &SecretStore, c: &Connection) -> Result<Vec<BinlogFile>> {
    use sqlx::Row;
    let Db::My(mut db) = open(store, c).await? else {
        return Ok(vec![]);
    };
    let rows = sqlx::query("SHOW BINARY LOGS")
        .fetch_all(&mut db)
        .await
        .map_err(|e| sanitized(e, c))?;
    Ok(rows
        .iter()
        .map(|r| BinlogFile {
            name: r
                .try_get::<String, _>(0)
                .or_else(|_| {
                    r.try_get::<Vec<u8>, _>(0)
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                })
                .unwrap_or_default(),
            size: r
                .try_get::<u64, _>(1)
                .map(|v| v as i64)
                .or_else(|_| r.try_get::<i64, _>(1))
                .unwrap_or(0),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<BinlogFile> {
        vec![
            BinlogFile {
                name: "bin.000007".into(),
                size: 1000,
            },
            BinlogFile {
                name: "bin.000008".into(),
                size: 500,
            },
            BinlogFile {
                name: "bin.000009".into(),
                size: 300,
            },
        ]
    }

    #[test]
    fn the_distance_counts_the_rest_of_the_connectors_file_and_every_later_one() {
        let i = binlog_distance(&files(), Some(("bin.000008", 200)));
        assert_eq!(i.bytes_behind, Some(300 + 300));
        assert_eq!(i.bytes_after_oldest, Some(1000 + 200));
        assert_eq!(i.position_kept, Some(true));
        assert_eq!(
            (
                i.server_file.as_str(),
                i.server_pos,
                i.oldest_file.as_str(),
                i.files
            ),
            ("bin.000009", 300, "bin.000007", 3)
        );
        let caught_up = binlog_distance(&files(), Some(("bin.000009", 300)));
        assert_eq!(caught_up.bytes_behind, Some(0));
    }

    #[test]
    fn a_purged_position_is_reported_lost_and_an_unknown_one_is_not_guessed() {
        let lost = binlog_distance(&files(), Some(("bin.000003", 40)));
        assert_eq!(lost.position_kept, Some(false));
        assert_eq!(lost.bytes_behind, None);
        let none = binlog_distance(&files(), None);
        assert_eq!(
            (none.position_kept, none.bytes_behind, none.connector_file),
            (None, None, None)
        );
    }

    #[test]
    fn source_positions_read_in_the_sources_own_terms() {
        let pg = serde_json::json!({"offsets": [{"partition": {"server": "p"}, "offset": {"lsn": 23_806_496_u64, "lsn_proc": 23_806_496_u64, "txId": 770, "ts_usec": 1_764_000_000_123_456_i64}}]});
        let p = position(&pg).unwrap();
        assert_eq!(p.lsn.as_deref(), Some("0/16B4220"));
        assert_eq!(p.source_ts_ms, Some(1_764_000_000_123));
        assert!(!p.snapshotting);
        assert_eq!(lsn_text(0x1_0000_00FF), "1/FF");
        let during = serde_json::json!({"offsets": [{"partition": {}, "offset": {"lsn": 5, "snapshot": "INITIAL", "last_snapshot_record": false}}]});
        assert!(position(&during).unwrap().snapshotting);
        let my = serde_json::json!({"offsets": [{"partition": {"server": "m"}, "offset": {"file": "bin.000008", "pos": 912, "gtids": "0-1-5", "ts_sec": 1_764_000_000}}]});
        let m = position(&my).unwrap();
        assert_eq!(
            (m.binlog_file.as_deref(), m.binlog_pos, m.gtids.as_deref()),
            (Some("bin.000008"), Some(912), Some("0-1-5"))
        );
        assert_eq!(m.source_ts_ms, Some(1_764_000_000_000));
        assert_eq!(m.lsn, None);
        assert_eq!(position(&serde_json::json!({"offsets": []})), None);
        assert_eq!(
            position(&serde_json::json!({"offsets": [{"partition": {}, "offset": {"other": 1}}]})),
            None
        );
    }

    #[test]
    fn the_position_is_read_from_connect_offsets() {
        let offsets = serde_json::json!({"offsets": [{"partition": {"server": "x"}, "offset": {"file": "bin.000008", "pos": 912, "gtids": "0-1-5"}}]});
        assert_eq!(binlog_position(&offsets), Some(("bin.000008".into(), 912)));
        assert_eq!(
            binlog_position(
                &serde_json::json!({"offsets": [{"partition": {}, "offset": {"lsn": 5}}]})
            ),
            None
        );
    }
}
