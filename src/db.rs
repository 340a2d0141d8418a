//! The embedded SQLite database: one pool, WAL mode, migrations embedded in the binary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

/// The database engine the whole crate is written against. Domains name these aliases, never
/// an engine's own types, so the engine is chosen in this module alone.
pub type Db = sqlx::Sqlite;
/// The shared connection pool.
pub type Pool = sqlx::Pool<Db>;
/// A transaction on [`Pool`].
pub type Tx<'c> = sqlx::Transaction<'c, Db>;
/// A result row.
pub type Row = <Db as sqlx::Database>::Row;

/// Migrations compiled into the binary, so a copy of the binary alone can create its schema.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Opens (creating if needed) the database file. WAL lets readers go on while one writer
/// writes; the busy timeout makes `serve` and `worker` wait for each other instead of failing.
pub async fn open(path: &Path) -> anyhow::Result<SqlitePool> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    }
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(10));
    SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot open database {}", path.display()))
}

/// Taken by this process's writers that come in bursts (pipeline creates, the reconciler's
/// pass), before their write transaction and until its commit: one at a time per database
/// file, in arrival order. SQLite lets one writer in and has the others retry in its busy
/// handler, which sleeps 1, 2, 5, 10, 15, 20, 25 … 100 ms between tries: with eight creates
/// beside a reconcile pass, a request spent tens of milliseconds in those sleeps for a lock
/// each transaction holds about a millisecond. Queued here, a writer waits only for the ones
/// ahead of it. Writers that skip the gate (rare ones, other processes) still meet the busy
/// handler, as before.
pub async fn write_gate(pool: &SqlitePool) -> tokio::sync::OwnedMutexGuard<()> {
    type Gates = std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>;
    static GATES: OnceLock<Gates> = OnceLock::new();
    let gate = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(pool.connect_options().get_filename().to_path_buf())
        .or_default()
        .clone();
    gate.lock_owned().await
}

/// Applies pending migrations; safe to call on every start.
pub async fn migrate(pool: &SqlitePool) -> anyhow::Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .context("database migration failed")
}

/// How many embedded migrations are not yet applied (0 when the schema is current).
pub async fn pending_migrations(pool: &SqlitePool) -> anyhow::Result<usize> {
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success = 1")
            .fetch_all(pool)
            .await
            .context("cannot read migration state")?;
    Ok(MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .filter(|m| !applied.contains(&m.version))
        .count())
}

/// True when a write failed on a UNIQUE constraint (a name already taken).
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}
