//! The metadata store: one pool over sqlx's `Any` driver, on embedded SQLite (the default) or
//! PostgreSQL (`--database-url postgres://…`), with the migrations of each engine embedded in
//! the binary.
//!
//! Invariants every query in the crate keeps, so that one text runs on both engines:
//! - Placeholders are written `$1, $2 …` (SQLite through sqlx reads them too; `?` would be a
//!   syntax error on PostgreSQL). [`query`], [`query_as`] and [`query_scalar`] are the only way
//!   in, and check that in debug builds.
//! - Columns are `TEXT`, `INTEGER` (`BIGINT` on PostgreSQL) or `REAL` (`DOUBLE PRECISION`);
//!   timestamps are RFC 3339 text (`crate::time`), flags are 0/1 integers read through [`Flag`].
//! - Where the dialects differ, the SQL comes from a function here (see [`Engine`]), never from
//!   an `if` in a domain.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sqlx::any::{AnyArguments, AnyPoolOptions, AnyTypeInfo, AnyValueRef};
use sqlx::{Decode, Executor as _, Type};

/// The database engine the whole crate is written against. Domains name these aliases, never
/// an engine's own types.
pub type Db = sqlx::Any;
/// The shared connection pool.
pub type Pool = sqlx::Pool<Db>;
/// A transaction on [`Pool`].
pub type Tx<'c> = sqlx::Transaction<'c, Db>;
/// A result row.
pub type Row = <Db as sqlx::Database>::Row;

/// Migrations compiled into the binary, one directory per engine, the same versions and names
/// in both, so a copy of the binary alone can create its schema on either.
pub static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
pub static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Which engine a pool talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    pub fn of(pool: &Pool) -> Engine {
        if pool
            .connect_options()
            .database_url
            .scheme()
            .starts_with("postgres")
        {
            Engine::Postgres
        } else {
            Engine::Sqlite
        }
    }

    /// The function `f(haystack, needle)` giving the 1-based position of `needle` (0: absent).
    pub fn position(self) -> &'static str {
        match self {
            Engine::Sqlite => "instr",
            Engine::Postgres => "strpos",
        }
    }

    fn migrator(self) -> &'static sqlx::migrate::Migrator {
        match self {
            Engine::Sqlite => &SQLITE_MIGRATOR,
            Engine::Postgres => &POSTGRES_MIGRATOR,
        }
    }
}

/// A query on the metadata store (see the module's invariants).
pub fn query(sql: &str) -> sqlx::query::Query<'_, Db, AnyArguments<'_>> {
    debug_assert!(numbered_placeholders(sql), "use $N placeholders: {sql}");
    sqlx::query(sql)
}

/// [`query`] whose rows are read into `O`.
pub fn query_as<'q, O>(sql: &'q str) -> sqlx::query::QueryAs<'q, Db, O, AnyArguments<'q>>
where
    O: for<'r> sqlx::FromRow<'r, Row>,
{
    debug_assert!(numbered_placeholders(sql), "use $N placeholders: {sql}");
    sqlx::query_as(sql)
}

/// [`query`] whose rows are one value each.
pub fn query_scalar<'q, O>(sql: &'q str) -> sqlx::query::QueryScalar<'q, Db, O, AnyArguments<'q>>
where
    (O,): for<'r> sqlx::FromRow<'r, Row>,
{
    debug_assert!(numbered_placeholders(sql), "use $N placeholders: {sql}");
    sqlx::query_scalar(sql)
}

/// `$from, $from+1, …`: `n` numbered placeholders, for an `IN (…)` list.
pub fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// False when `sql` has a `?` placeholder outside a quoted string.
fn numbered_placeholders(sql: &str) -> bool {
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => quoted = !quoted,
            '?' if !quoted => return false,
            _ => {}
        }
    }
    true
}

/// A 0/1 flag column (or a boolean expression, which PostgreSQL answers as `boolean` and
/// SQLite as an integer), read as a `bool`: `#[sqlx(try_from = "crate::db::Flag")]` on a
/// `bool` field, or `query_scalar::<Flag>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub bool);

impl From<Flag> for bool {
    fn from(f: Flag) -> bool {
        f.0
    }
}

impl Type<Db> for Flag {
    fn type_info() -> AnyTypeInfo {
        <i64 as Type<Db>>::type_info()
    }
    fn compatible(_: &AnyTypeInfo) -> bool {
        true
    }
}

impl<'r> Decode<'r, Db> for Flag {
    fn decode(value: AnyValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        match <i64 as Decode<Db>>::decode(value.clone()) {
            Ok(i) => Ok(Flag(i != 0)),
            Err(_) => <bool as Decode<Db>>::decode(value).map(Flag),
        }
    }
}

/// Opens the store the settings name (see [`crate::config::DataSettings::store`]).
pub async fn open_store(store: &crate::config::Store) -> anyhow::Result<Pool> {
    match store {
        crate::config::Store::Sqlite(path) => open(path).await,
        crate::config::Store::Postgres { url, password } => {
            open_postgres(url, password.as_ref().map(|p| p.expose().as_str())).await
        }
    }
}

/// Connects to a PostgreSQL metadata database. Each replica holds its own small pool; the
/// server's `max_connections` must cover replicas × 16.
pub async fn open_postgres(url: &str, password: Option<&str>) -> anyhow::Result<Pool> {
    sqlx::any::install_default_drivers();
    let mut full = url::Url::parse(url).context("--database-url")?;
    if let Some(p) = password {
        full.set_password(Some(p))
            .map_err(|_| anyhow::anyhow!("--database-url: this URL cannot carry a password"))?;
    }
    if !full.query_pairs().any(|(k, _)| k == "application_name") {
        full.query_pairs_mut()
            .append_pair("application_name", "cluecdc");
    }
    AnyPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .connect(full.as_str())
        .await
        // sqlx's message names host and database, never the password.
        .with_context(|| format!("cannot connect to PostgreSQL at {url}"))
}

/// Opens (creating if needed) the embedded database file. WAL lets readers go on while one
/// writer writes; the busy timeout makes `serve` and `worker` wait for each other instead of
/// failing.
pub async fn open(path: &Path) -> anyhow::Result<Pool> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    }
    // WAL is a property of the file: set once through SQLite's own driver (the Any driver
    // only takes a URL), and kept by every later connection.
    {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
        use sqlx::ConnectOptions as _;
        let conn = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10))
            .connect()
            .await
            .with_context(|| format!("cannot open database {}", path.display()))?;
        sqlx::Connection::close(conn).await.ok();
    }
    sqlx::any::install_default_drivers();
    let url = sqlite_url(path)?;
    AnyPoolOptions::new()
        .max_connections(8)
        .after_connect(|conn, _| {
            Box::pin(async move { conn.execute(SQLITE_PRAGMAS).await.map(|_| ()) })
        })
        .connect(&url)
        .await
        .with_context(|| format!("cannot open database {}", path.display()))
}

/// Set on every pooled SQLite connection. `cache_size`: each connection keeps its own page
/// cache, allocated by SQLite through the C allocator (one glibc arena per pool thread), 2 MiB
/// by default; with 8 connections on a 16 MiB database (10,000 connectors) those arenas held
/// 35 MiB of the process's 152 MiB RSS under 64 page clients (`scripts/bench --scale`,
/// 2026-12-06). A page not in it is read from the OS page cache, which holds the file anyway.
const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout = 10000; PRAGMA synchronous = NORMAL; \
     PRAGMA foreign_keys = ON; PRAGMA cache_size = -512";

/// `sqlite://` URL of a file, percent-encoded so that any path survives.
fn sqlite_url(path: &Path) -> anyhow::Result<String> {
    let abs =
        std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))?;
    let file = url::Url::from_file_path(&abs)
        .map_err(|_| anyhow::anyhow!("database path {} is not absolute", abs.display()))?;
    // The file URL's path is percent-encoded; sqlx decodes it back.
    Ok(format!("sqlite://{}?mode=rwc", file.path()))
}

/// Taken by this process's writers that come in bursts (pipeline creates, the reconciler's
/// pass), before their write transaction and until its commit: one at a time per database,
/// in arrival order. SQLite lets one writer in and has the others retry in its busy handler,
/// which sleeps 1, 2, 5, 10, 15, 20, 25 … 100 ms between tries: with eight creates beside a
/// reconcile pass, a request spent tens of milliseconds in those sleeps for a lock each
/// transaction holds about a millisecond. Queued here, a writer waits only for the ones ahead
/// of it. Writers that skip the gate (rare ones, other processes) still meet the busy
/// handler, as before. PostgreSQL has row locks and needs no gate: there it is free.
pub async fn write_gate(pool: &Pool) -> Option<tokio::sync::OwnedMutexGuard<()>> {
    type Gates = std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;
    static GATES: OnceLock<Gates> = OnceLock::new();
    if Engine::of(pool) == Engine::Postgres {
        return None;
    }
    let gate = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(pool.connect_options().database_url.to_string())
        .or_default()
        .clone();
    Some(gate.lock_owned().await)
}

/// Begins a transaction that will write: on SQLite `BEGIN IMMEDIATE` takes the write lock at
/// once, so a write committed by another connection between this transaction's first read and
/// its first write cannot make SQLite refuse it ("database is locked"); PostgreSQL's row locks
/// need nothing more than `BEGIN`.
pub async fn begin_write(pool: &Pool) -> sqlx::Result<Tx<'static>> {
    match Engine::of(pool) {
        Engine::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
        Engine::Postgres => pool.begin().await,
    }
}

/// Grows when `tx` writes a row: SQLite counts the connection's changed rows; PostgreSQL says
/// whether the transaction has written at all (0, then 1). Compare a reading before with one
/// after.
pub async fn write_count(tx: &mut Tx<'_>) -> sqlx::Result<i64> {
    let sql = if tx.backend_name() == "PostgreSQL" {
        "SELECT CASE WHEN txid_current_if_assigned() IS NULL THEN 0 ELSE 1 END"
    } else {
        "SELECT total_changes()"
    };
    query_scalar(sql).fetch_one(&mut **tx).await
}

/// Applies pending migrations; safe to call on every start, and on PostgreSQL by several
/// replicas at once (sqlx's migrator holds an advisory lock while it migrates).
pub async fn migrate(pool: &Pool) -> anyhow::Result<()> {
    Engine::of(pool)
        .migrator()
        .run(pool)
        .await
        .context("database migration failed")
}

/// How many embedded migrations are not yet applied (0 when the schema is current).
pub async fn pending_migrations(pool: &Pool) -> anyhow::Result<usize> {
    let applied: Vec<i64> =
        query_scalar("SELECT version FROM _sqlx_migrations WHERE success = TRUE")
            .fetch_all(pool)
            .await
            .context("cannot read migration state")?;
    Ok(Engine::of(pool)
        .migrator()
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .filter(|m| !applied.contains(&m.version))
        .count())
}

/// True when a write failed on a UNIQUE constraint (a name already taken).
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

#[cfg(test)]
mod tests {
    /// The embedded file opens wherever it lies: a path with a space, `?`, `#` and `%` is
    /// the file SQLite creates, not a URL query or fragment.
    #[tokio::test]
    async fn a_database_path_with_url_characters_is_the_file_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd dir ?#%41").join("cluecdc.db");
        let pool = super::open(&path).await.unwrap();
        super::migrate(&pool).await.unwrap();
        assert!(path.is_file(), "{}", path.display());
    }

    /// Every pooled connection has the settings, the small page cache included: a pool's
    /// connections are opened as they are needed, so the check holds several at once.
    #[tokio::test]
    async fn every_pooled_connection_has_the_busy_timeout_and_the_small_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let pool = super::open(&dir.path().join("cluecdc.db")).await.unwrap();
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut conn = pool.acquire().await.unwrap();
            let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert_eq!((cache, busy), (-512, 10000));
            held.push(conn);
        }
    }
}
