//! Master keys and the envelope format.
//!
//! Envelope: `v1:<key fingerprint>:<base64(nonce ‖ ciphertext+tag)>`, a random 96-bit nonce per
//! value, associated data `<secret_ref>:<field>` so a value copied to another reference or
//! field fails to decrypt. The keyring holds the active key first and older keys after it, so
//! rotation can re-encrypt row by row while readers decrypt either.

use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use anyhow::{anyhow, bail, Context};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::Secret;

pub struct MasterKey {
    bytes: Secret<[u8; 32]>,
    fingerprint: String,
}

impl MasterKey {
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self::from_bytes(bytes)
    }

    fn from_bytes(bytes: [u8; 32]) -> Self {
        let fingerprint = hex::encode(&Sha256::digest(bytes)[..6]);
        MasterKey {
            bytes: Secret::new(bytes),
            fingerprint,
        }
    }

    pub fn parse_base64(s: &str) -> anyhow::Result<Self> {
        let raw = B64
            .decode(s.trim())
            .map_err(|_| anyhow!("a master key must be base64 of 32 random bytes"))?;
        let bytes: [u8; 32] = raw.try_into().map_err(|_| {
            anyhow!("a master key must be exactly 32 bytes (base64: 44 characters)")
        })?;
        Ok(Self::from_bytes(bytes))
    }

    pub fn to_base64(&self) -> String {
        B64.encode(self.bytes.expose())
    }

    /// Names the key in envelopes and logs; reveals nothing about it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(self.bytes.expose().into())
    }
}

/// Where the keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// `CLUECDC_MASTER_KEY`: comma-separated base64 keys, the active one first.
    Env(Secret<String>),
    /// A key file: one base64 key per line, the active one first. Rotation rewrites it.
    File(PathBuf),
}

pub struct Keyring {
    keys: Vec<MasterKey>,
    pub source: KeySource,
}

fn aad(secret_ref: &str, field: &str) -> String {
    format!("{secret_ref}:{field}")
}

impl Keyring {
    /// Loads the keyring; with no key configured, uses (creating on first start, mode 0600)
    /// `<data-dir>/master.key` and says so in the log.
    pub fn load(settings: &crate::config::DataSettings) -> anyhow::Result<Self> {
        if let Some(env) = &settings.master_key {
            return Self::from_env(env);
        }
        let path = settings
            .master_key_file
            .clone()
            .unwrap_or_else(|| settings.data_dir.join("master.key"));
        if !path.exists() {
            if settings.master_key_file.is_some() {
                bail!("master key file {} does not exist", path.display());
            }
            std::fs::create_dir_all(&settings.data_dir)?;
            write_key_file(&path, &[MasterKey::generate()])?;
            tracing::warn!(path = %path.display(), "generated a new master key file; back it up: without it stored credentials cannot be decrypted");
        }
        Self::from_file(&path)
    }

    pub fn from_env(value: &str) -> anyhow::Result<Self> {
        let keys = value
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(MasterKey::parse_base64)
            .collect::<anyhow::Result<Vec<_>>>()?;
        if keys.is_empty() {
            bail!("CLUECDC_MASTER_KEY is empty");
        }
        Ok(Keyring {
            keys,
            source: KeySource::Env(Secret::new(value.to_string())),
        })
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read master key file {}", path.display()))?;
        let keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(MasterKey::parse_base64)
            .collect::<anyhow::Result<Vec<_>>>()
            .with_context(|| format!("master key file {}", path.display()))?;
        if keys.is_empty() {
            bail!("master key file {} holds no key", path.display());
        }
        Ok(Keyring {
            keys,
            source: KeySource::File(path.to_path_buf()),
        })
    }

    pub fn active(&self) -> &MasterKey {
        &self.keys[0]
    }

    pub fn fingerprints(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.fingerprint.clone()).collect()
    }

    pub fn encrypt(
        &self,
        secret_ref: &str,
        field: &str,
        plaintext: &str,
    ) -> anyhow::Result<String> {
        let key = self.active();
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let aad = aad(secret_ref, field);
        let sealed = key
            .cipher()
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| anyhow!("encryption failed"))?;
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&sealed);
        Ok(format!("v1:{}:{}", key.fingerprint, B64.encode(blob)))
    }

    /// The fingerprint an envelope was sealed with.
    pub fn envelope_key(envelope: &str) -> Option<&str> {
        let mut parts = envelope.splitn(3, ':');
        match (parts.next(), parts.next()) {
            (Some("v1"), Some(fp)) => Some(fp),
            _ => None,
        }
    }

    pub fn decrypt(
        &self,
        secret_ref: &str,
        field: &str,
        envelope: &str,
    ) -> anyhow::Result<Secret<String>> {
        let mut parts = envelope.splitn(3, ':');
        let (Some("v1"), Some(fp), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
            bail!("unknown secret envelope format");
        };
        let key = self
            .keys
            .iter()
            .find(|k| k.fingerprint == fp)
            .ok_or_else(|| anyhow!("secret sealed with key {fp}, which is not in the keyring"))?;
        let blob = B64
            .decode(body)
            .map_err(|_| anyhow!("corrupt secret envelope"))?;
        if blob.len() < 12 + 16 {
            bail!("corrupt secret envelope");
        }
        let (nonce, sealed) = blob.split_at(12);
        let aad = aad(secret_ref, field);
        let plain = key
            .cipher()
            .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: aad.as_bytes() })
            .map_err(|_| anyhow!("secret {secret_ref}/{field} failed to decrypt (wrong key, or the value was moved)"))?;
        Ok(Secret::new(
            String::from_utf8(plain).map_err(|_| anyhow!("secret is not UTF-8"))?,
        ))
    }

    /// A keyring whose active key is `new`, keeping the current keys for reading.
    pub fn with_new_active(&self, new: MasterKey) -> Keyring {
        let mut keys = vec![new];
        keys.extend(
            self.keys
                .iter()
                .map(|k| MasterKey::from_bytes(*k.bytes.expose())),
        );
        Keyring {
            keys,
            source: self.source.clone(),
        }
    }

    /// Only the active key: used once every envelope has moved to it.
    pub fn active_only(&self) -> Keyring {
        Keyring {
            keys: vec![MasterKey::from_bytes(*self.active().bytes.expose())],
            source: self.source.clone(),
        }
    }

    /// Persists the keys to the key file (atomically, mode 0600).
    pub fn save(&self) -> anyhow::Result<()> {
        match &self.source {
            KeySource::File(path) => write_key_file(path, &self.keys),
            KeySource::Env(_) => bail!("the master key comes from CLUECDC_MASTER_KEY; rotation needs a key file (CLUECDC_MASTER_KEY_FILE)"),
        }
    }
}

fn write_key_file(path: &Path, keys: &[MasterKey]) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut text = String::from("# ClueCDC master keys: the first is active, the others are kept for reading during rotation.\n");
    for k in keys {
        text.push_str(&k.to_base64());
        text.push('\n');
    }
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> Keyring {
        Keyring {
            keys: vec![MasterKey::generate()],
            source: KeySource::Env(Secret::new(String::new())),
        }
    }

    #[test]
    fn a_value_round_trips_and_the_envelope_names_the_key() {
        let k = ring();
        let env = k.encrypt("sec_1", "password", "s3cr3t-value").unwrap();
        assert!(env.starts_with(&format!("v1:{}:", k.active().fingerprint())));
        assert!(!env.contains("s3cr3t"));
        assert_eq!(
            k.decrypt("sec_1", "password", &env).unwrap().expose(),
            "s3cr3t-value"
        );
    }

    #[test]
    fn a_value_moved_to_another_reference_or_field_does_not_decrypt() {
        let k = ring();
        let env = k.encrypt("sec_1", "password", "x").unwrap();
        assert!(k.decrypt("sec_2", "password", &env).is_err());
        assert!(k.decrypt("sec_1", "secret_access_key", &env).is_err());
    }

    #[test]
    fn nonces_differ_so_equal_values_give_different_envelopes() {
        let k = ring();
        assert_ne!(
            k.encrypt("r", "f", "same").unwrap(),
            k.encrypt("r", "f", "same").unwrap()
        );
    }

    #[test]
    fn a_rotated_keyring_reads_old_and_new_envelopes() {
        let old = ring();
        let env_old = old.encrypt("r", "f", "v1").unwrap();
        let rotated = old.with_new_active(MasterKey::generate());
        let env_new = rotated.encrypt("r", "f", "v2").unwrap();
        assert_eq!(rotated.decrypt("r", "f", &env_old).unwrap().expose(), "v1");
        assert_eq!(rotated.decrypt("r", "f", &env_new).unwrap().expose(), "v2");
        assert!(rotated.active_only().decrypt("r", "f", &env_old).is_err());
    }

    #[test]
    fn keys_must_be_32_bytes_of_base64() {
        assert!(MasterKey::parse_base64("short").is_err());
        assert!(MasterKey::parse_base64(&B64.encode([1u8; 16])).is_err());
        assert!(MasterKey::parse_base64(&B64.encode([1u8; 32])).is_ok());
    }

    #[test]
    fn the_generated_key_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        write_key_file(&path, &[MasterKey::generate()]).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        assert_eq!(Keyring::from_file(&path).unwrap().fingerprints().len(), 1);
    }
}
