//! Password hashing with argon2id (the crate's defaults: 19 MiB, 2 passes, 1 lane).

use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;

use crate::error::{Error, Result};

pub const MIN_LENGTH: usize = 12;
pub const MAX_LENGTH: usize = 1024;

pub fn validate(password: &str) -> Result<()> {
    let chars = password.chars().count();
    if chars < MIN_LENGTH {
        return Err(Error::field(
            "password",
            format!("use at least {MIN_LENGTH} characters (a passphrase works well)"),
        ));
    }
    if chars > MAX_LENGTH {
        return Err(Error::field(
            "password",
            format!("use at most {MAX_LENGTH} characters"),
        ));
    }
    Ok(())
}

pub fn hash(password: &str) -> Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::Unexpected(anyhow::anyhow!("password hashing failed: {e}")))
}

/// Verifies in constant time for the hash. `None` (unknown user) still runs a verification
/// against a fixed hash, so the answer's timing does not reveal whether the user exists.
pub fn verify(password: &str, stored: Option<&str>) -> bool {
    const DUMMY: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$2mPqkvyX0tM7pYxGm7Xq2vQ0a6d3xkqZQKZp9m8Jw0E";
    let candidate = stored.unwrap_or(DUMMY);
    let ok = PasswordHash::new(candidate)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false);
    ok && stored.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_and_nothing_else() {
        let h = hash("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("correct horse battery", Some(&h)));
        assert!(!verify("correct horse batterz", Some(&h)));
        assert!(!verify("correct horse battery", None));
    }

    #[test]
    fn short_passwords_are_refused_with_a_hint() {
        let err = validate("short").unwrap_err();
        assert!(err.to_string().contains("at least 12 characters"));
        assert!(validate("twelve chars").is_ok());
    }
}
