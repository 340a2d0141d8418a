//! Encrypted secret fields in SQLite, grouped under a stable reference id.
//!
//! Readers never stop during key rotation: `cluecdc keys rotate` first adds the new key to the
//! key file (old keys stay for reading), re-encrypts row by row, then drops the old keys. A
//! running server notices the key file changed (its modification time) and reloads it before
//! its next encryption or decryption.

use crate::db;
use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::SystemTime;

use crate::db::{Pool, Tx};
use anyhow::{anyhow, Context};

use super::keyring::{KeySource, Keyring, MasterKey};
use super::Secret;

pub struct SecretStore {
    pool: Pool,
    keyring: RwLock<(Keyring, Option<SystemTime>)>,
}

fn mtime(ring: &Keyring) -> Option<SystemTime> {
    match &ring.source {
        KeySource::File(p) => std::fs::metadata(p).and_then(|m| m.modified()).ok(),
        KeySource::Env(_) => None,
    }
}

/// A fresh reference id for a new set of secret fields. It never changes afterwards.
pub fn new_ref() -> String {
    format!("sec_{}", uuid::Uuid::new_v4().simple())
}

impl SecretStore {
    pub fn new(pool: Pool, keyring: Keyring) -> Self {
        let m = mtime(&keyring);
        SecretStore {
            pool,
            keyring: RwLock::new((keyring, m)),
        }
    }

    /// The database the secrets live in (grants and audit rows go beside them).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Reloads the key file when it changed on disk (another process rotated the keys).
    fn refresh(&self) {
        let (path, seen) = {
            let guard = self.keyring.read().unwrap_or_else(|e| e.into_inner());
            match &guard.0.source {
                KeySource::File(p) => (p.clone(), guard.1),
                KeySource::Env(_) => return,
            }
        };
        let now = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if now.is_some() && now != seen {
            match Keyring::from_file(&path) {
                Ok(ring) => {
                    tracing::info!(keys = ?ring.fingerprints(), "master key file changed; reloaded");
                    *self.keyring.write().unwrap_or_else(|e| e.into_inner()) = (ring, now);
                }
                Err(e) => tracing::error!(
                    error = format!("{e:#}"),
                    "master key file changed but cannot be read; keeping the loaded keys"
                ),
            }
        }
    }

    pub fn active_fingerprint(&self) -> String {
        self.refresh();
        self.keyring
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .active()
            .fingerprint()
            .to_string()
    }

    /// Replaces the given fields of `secret_ref` (other fields stay) inside the caller's transaction.
    pub async fn put(
        &self,
        tx: &mut Tx<'_>,
        secret_ref: &str,
        fields: &BTreeMap<String, Secret<String>>,
    ) -> anyhow::Result<()> {
        self.refresh();
        let now = crate::time::now();
        for (field, value) in fields {
            let envelope = {
                let guard = self.keyring.read().unwrap_or_else(|e| e.into_inner());
                guard.0.encrypt(secret_ref, field, value.expose())?
            };
            db::query(
                "INSERT INTO secret_values (secret_ref, field, envelope, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT(secret_ref, field) DO UPDATE SET envelope = excluded.envelope, updated_at = excluded.updated_at",
            )
            .bind(secret_ref)
            .bind(field)
            .bind(envelope)
            .bind(&now)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Removes fields no longer set (an optional session token dropped on rotation).
    pub async fn remove(
        &self,
        tx: &mut Tx<'_>,
        secret_ref: &str,
        field: &str,
    ) -> anyhow::Result<()> {
        db::query("DELETE FROM secret_values WHERE secret_ref = $1 AND field = $2")
            .bind(secret_ref)
            .bind(field)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    pub async fn fields_set(&self, secret_ref: &str) -> anyhow::Result<Vec<String>> {
        Ok(
            db::query_scalar(
                "SELECT field FROM secret_values WHERE secret_ref = $1 ORDER BY field",
            )
            .bind(secret_ref)
            .fetch_all(&self.pool)
            .await?,
        )
    }

    /// Decrypts one field. Callers: the Connect config provider endpoint, connection tests,
    /// the leak scan. Nothing else needs plaintext.
    pub async fn get(
        &self,
        secret_ref: &str,
        field: &str,
    ) -> anyhow::Result<Option<Secret<String>>> {
        let envelope: Option<String> = db::query_scalar(
            "SELECT envelope FROM secret_values WHERE secret_ref = $1 AND field = $2",
        )
        .bind(secret_ref)
        .bind(field)
        .fetch_optional(&self.pool)
        .await?;
        let Some(envelope) = envelope else {
            return Ok(None);
        };
        self.refresh();
        let guard = self.keyring.read().unwrap_or_else(|e| e.into_inner());
        guard.0.decrypt(secret_ref, field, &envelope).map(Some)
    }

    /// All fields of a reference, decrypted.
    pub async fn get_all(
        &self,
        secret_ref: &str,
    ) -> anyhow::Result<BTreeMap<String, Secret<String>>> {
        let mut out = BTreeMap::new();
        for field in self.fields_set(secret_ref).await? {
            if let Some(v) = self.get(secret_ref, &field).await? {
                out.insert(field, v);
            }
        }
        Ok(out)
    }

    /// Every stored secret value (for the leak scan). Kept in memory only for one scan.
    pub async fn all_values(&self) -> anyhow::Result<Vec<(String, String, Secret<String>)>> {
        let rows: Vec<(String, String, String)> =
            db::query_as("SELECT secret_ref, field, envelope FROM secret_values")
                .fetch_all(&self.pool)
                .await?;
        self.refresh();
        let guard = self.keyring.read().unwrap_or_else(|e| e.into_inner());
        rows.into_iter()
            .map(|(r, f, e)| guard.0.decrypt(&r, &f, &e).map(|v| (r, f, v)))
            .collect()
    }
}

/// Result of `cluecdc keys rotate`.
#[derive(Debug)]
pub struct Rotation {
    pub old: Vec<String>,
    pub new: String,
    pub re_encrypted: u64,
}

/// Re-encrypts every secret under a fresh master key; see the module comment for why readers
/// keep working throughout.
pub async fn rotate_master_key(
    pool: &Pool,
    settings: &crate::config::DataSettings,
) -> anyhow::Result<Rotation> {
    let current = Keyring::load(settings)?;
    let old = current.fingerprints();
    let both = current.with_new_active(MasterKey::generate());
    both.save().context("cannot write the new key")?;
    let new = both.active().fingerprint().to_string();
    let mut re_encrypted = 0u64;
    // Loop until no row uses an old key: a server that had not yet reloaded may have sealed a
    // value with the previous key meanwhile.
    for _round in 0..10 {
        let rows: Vec<(String, String, String)> =
            db::query_as("SELECT secret_ref, field, envelope FROM secret_values")
                .fetch_all(pool)
                .await?;
        let stale: Vec<_> = rows
            .into_iter()
            .filter(|(_, _, e)| Keyring::envelope_key(e) != Some(new.as_str()))
            .collect();
        if stale.is_empty() {
            seal_key_check(pool, &both).await?;
            both.active_only()
                .save()
                .context("cannot drop the old keys from the key file")?;
            return Ok(Rotation {
                old,
                new,
                re_encrypted,
            });
        }
        for (secret_ref, field, envelope) in stale {
            let plain = both.decrypt(&secret_ref, &field, &envelope)?;
            let sealed = both.encrypt(&secret_ref, &field, plain.expose())?;
            // Compare-and-swap: a concurrent update wins and is picked up next round.
            let done = db::query("UPDATE secret_values SET envelope = $1 WHERE secret_ref = $2 AND field = $3 AND envelope = $4")
                .bind(sealed)
                .bind(&secret_ref)
                .bind(&field)
                .bind(&envelope)
                .execute(pool)
                .await?;
            re_encrypted += done.rows_affected();
        }
    }
    Err(anyhow!("secrets kept changing during rotation; both keys remain in the key file, run `cluecdc keys rotate` again"))
}

/// `instance_meta` key of the key check: a constant sealed under the master key, so that a
/// process given another key (a replica configured apart) finds out at start, before it seals
/// a secret nobody else can open.
const KEY_CHECK: &str = "key_check";
const KEY_CHECK_PLAIN: &str = "cluecdc key check";

async fn seal_key_check(pool: &Pool, keyring: &Keyring) -> anyhow::Result<()> {
    let sealed = keyring.encrypt("instance", KEY_CHECK, KEY_CHECK_PLAIN)?;
    db::query("INSERT INTO instance_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        .bind(KEY_CHECK)
        .bind(sealed)
        .execute(pool)
        .await?;
    Ok(())
}

/// Refuses to go on when `keyring` cannot open what this database holds: the key check, or
/// (on a database from before the check) any stored secret. Writes the check when missing.
/// Every `serve`, `worker` and CLI command runs it after opening the database.
pub async fn verify_key(pool: &Pool, keyring: &Keyring) -> anyhow::Result<()> {
    let check: Option<String> = db::query_scalar("SELECT value FROM instance_meta WHERE key = $1")
        .bind(KEY_CHECK)
        .fetch_optional(pool)
        .await?;
    let probe = match &check {
        Some(envelope) => Some(("instance".to_string(), KEY_CHECK.to_string(), envelope.clone())),
        None => db::query_as::<(String, String, String)>(
            "SELECT secret_ref, field, envelope FROM secret_values ORDER BY secret_ref, field LIMIT 1",
        )
        .fetch_optional(pool)
        .await?,
    };
    if let Some((secret_ref, field, envelope)) = probe {
        if keyring.decrypt(&secret_ref, &field, &envelope).is_err() {
            anyhow::bail!(
                "the master key given to this process (fingerprint {}) cannot open the secrets in this database, sealed with key {}: every ClueCDC process on one database needs the same master key (CLUECDC_MASTER_KEY or --master-key-file); copy it from a running replica",
                keyring.active().fingerprint(),
                Keyring::envelope_key(&envelope).unwrap_or("of unknown format")
            );
        }
    }
    if check.is_none() {
        // Two replicas starting together may both write it: both wrote with the same key.
        db::query(
            "INSERT INTO instance_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(KEY_CHECK)
        .bind(keyring.encrypt("instance", KEY_CHECK, KEY_CHECK_PLAIN)?)
        .execute(pool)
        .await?;
    }
    Ok(())
}
