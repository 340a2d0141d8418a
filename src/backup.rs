//! Online backup and restore of the database (`cluecdc backup`, `cluecdc restore`).
//!
//! Invariants:
//! - A backup is one read transaction's view (`VACUUM INTO`): consistent while `serve` and
//!   `worker` keep writing, holding every row committed before it began. It is written beside
//!   its destination and renamed into place, mode 0600, so a file at the destination is a
//!   complete backup or nothing.
//! - Restore changes nothing until every check passed: the backup is an intact ClueCDC
//!   database, the master key decrypts every secret in it, and no ClueCDC process holds a
//!   lease on the database it replaces (a running instance renews its leases every few seconds).
//!   The database it replaces is kept beside it, not deleted.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::SqlitePool;

use crate::config::DataSettings;
use crate::secrets::Keyring;

#[derive(Debug)]
pub struct BackupReport {
    pub path: PathBuf,
    pub bytes: u64,
    pub secrets: i64,
    /// Where the master key the secrets need comes from, said in words.
    pub key_source: String,
}

async fn open_read_only(path: &Path) -> anyhow::Result<SqlitePool> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .immutable(true);
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot open {}", path.display()))
}

/// `PRAGMA integrity_check` says "ok", and the file is a ClueCDC database.
async fn check_intact(pool: &SqlitePool, path: &Path) -> anyhow::Result<()> {
    let verdict: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(pool)
        .await
        .with_context(|| format!("{} is not a SQLite database", path.display()))?;
    if verdict != "ok" {
        bail!(
            "{} fails SQLite's integrity check: {verdict}",
            path.display()
        );
    }
    let ours: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('instance_meta', 'connections', 'secret_values', '_sqlx_migrations')",
    )
    .fetch_one(pool)
    .await?;
    if ours != 4 {
        bail!("{} is not a ClueCDC database", path.display());
    }
    Ok(())
}

/// `backup` and `restore` copy the embedded SQLite file. PostgreSQL has its own tools, which
/// also see one transaction's view: this says which commands to use instead.
fn embedded_only(data: &DataSettings, what: &str) -> anyhow::Result<()> {
    if let crate::config::Store::Postgres { url, .. } = data.store()? {
        bail!(
            "`cluecdc {what}` copies the embedded SQLite file, and this instance's metadata is in PostgreSQL ({url}); use PostgreSQL's tools: `pg_dump --format=custom --file=cluecdc.dump DATABASE` to back up (consistent while ClueCDC runs), and to restore, with every ClueCDC process stopped, `pg_restore --clean --if-exists --dbname=DATABASE cluecdc.dump`; keep the master key with the dump, as for a SQLite backup"
        );
    }
    Ok(())
}

fn key_source(data: &DataSettings) -> String {
    if data.master_key.is_some() {
        "the CLUECDC_MASTER_KEY environment variable".into()
    } else {
        let file = data
            .master_key_file
            .clone()
            .unwrap_or_else(|| data.data_dir.join("master.key"));
        format!("the key file {}", file.display())
    }
}

/// Copies the database to `to` while it is in use.
pub async fn backup(data: &DataSettings, to: &Path) -> anyhow::Result<BackupReport> {
    embedded_only(data, "backup")?;
    let db = data.database_path();
    if !db.exists() {
        bail!("no database at {}: nothing to back up", db.display());
    }
    if to.exists() {
        bail!(
            "{} exists; choose a new file name (a backup never overwrites one)",
            to.display()
        );
    }
    let dir = to
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.partial",
        to.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    ));
    let _ = std::fs::remove_file(&tmp);
    let pool = crate::db::open(&db).await?;
    sqlx::query("VACUUM INTO $1")
        .bind(tmp.to_string_lossy().to_string())
        .execute(&pool)
        .await
        .with_context(|| format!("cannot write the backup to {}", tmp.display()))?;
    pool.close().await;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    let copy = open_read_only(&tmp).await?;
    let checked = check_intact(&copy, &tmp).await;
    let secrets: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM secret_values")
        .fetch_one(&copy)
        .await
        .unwrap_or(0);
    copy.close().await;
    if let Err(e) = checked {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, to)
        .with_context(|| format!("cannot move the backup to {}", to.display()))?;
    Ok(BackupReport {
        path: to.to_path_buf(),
        bytes: std::fs::metadata(to)?.len(),
        secrets,
        key_source: key_source(data),
    })
}

/// The keyring restore checks with: the configured key, never a newly generated one.
fn existing_keyring(data: &DataSettings) -> anyhow::Result<Keyring> {
    if let Some(env) = &data.master_key {
        return Keyring::from_env(env);
    }
    let file = data
        .master_key_file
        .clone()
        .unwrap_or_else(|| data.data_dir.join("master.key"));
    if !file.exists() {
        bail!(
            "no master key: set CLUECDC_MASTER_KEY or CLUECDC_MASTER_KEY_FILE to the key the backup was taken with, or copy that master.key into {}",
            data.data_dir.display()
        );
    }
    Keyring::from_file(&file)
}

#[derive(Debug)]
pub struct RestoreReport {
    pub database: PathBuf,
    /// The database that was replaced, kept beside it (absent when there was none).
    pub previous: Option<PathBuf>,
    pub secrets: usize,
}

/// Replaces the data directory's database with a backup, after checking it.
pub async fn restore(data: &DataSettings, from: &Path) -> anyhow::Result<RestoreReport> {
    embedded_only(data, "restore")?;
    if !from.is_file() {
        bail!("no backup file at {}", from.display());
    }
    let backup = open_read_only(from).await?;
    check_intact(&backup, from).await?;
    let keyring = existing_keyring(data)?;
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT secret_ref, field, envelope FROM secret_values")
            .fetch_all(&backup)
            .await?;
    backup.close().await;
    let failed = rows
        .iter()
        .filter(|(r, f, e)| keyring.decrypt(r, f, e).is_err())
        .count();
    if failed > 0 {
        bail!(
            "the master key ({}) does not decrypt {failed} of the {} secrets in the backup; give the key the backup was taken with. Nothing was changed.",
            key_source(data),
            rows.len()
        );
    }

    // The copy is made first: when anything after fails, the current database is untouched.
    let db = data.database_path();
    if let Some(dir) = db.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = db.with_file_name(".restore.partial");
    std::fs::copy(from, &tmp).with_context(|| format!("cannot copy {}", from.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    std::fs::File::open(&tmp)?.sync_all()?;
    let mut previous = None;
    if db.exists() {
        let pool = crate::db::open(&db).await?;
        let holders: Vec<(String, String)> =
            sqlx::query_as("SELECT name, holder FROM leases WHERE expires_at > $1")
                .bind(crate::reconcile::lease::now_ms())
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
        if let Some((name, holder)) = holders.first() {
            pool.close().await;
            let _ = std::fs::remove_file(&tmp);
            bail!(
                "a ClueCDC process ({holder}) is running on {} (it holds the {name} lease): stop `cluecdc serve` and `cluecdc worker` first. Nothing was changed.",
                db.display()
            );
        }
        // Fold the WAL into the file, so the copy kept aside is whole on its own.
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&pool)
            .await?;
        pool.close().await;
        let aside = db.with_file_name(format!(
            "{}.before-restore-{}",
            db.file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        ));
        std::fs::rename(&db, &aside)
            .with_context(|| format!("cannot move {} aside", db.display()))?;
        previous = Some(aside);
    }
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    std::fs::rename(&tmp, &db)?;
    Ok(RestoreReport {
        database: db,
        previous,
        secrets: rows.len(),
    })
}
