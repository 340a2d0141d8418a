//! The service-layer error: variants a caller can act on, mapped to HTTP once in `web/error.rs`.

use std::collections::BTreeMap;

/// Field name → what is wrong with it and how to fix it.
pub type FieldErrors = BTreeMap<String, String>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No identity, or an expired or revoked one.
    #[error("sign in to continue")]
    Unauthenticated,
    /// The identity is known but its role does not allow the action.
    #[error("your role ({role}) cannot {action}; ask an {needed} to do it or to change your role")]
    Forbidden {
        role: &'static str,
        needed: &'static str,
        action: &'static str,
    },
    #[error("the request's CSRF token is missing or wrong; reload the page and try again")]
    Csrf,
    #[error("{0} not found")]
    NotFound(String),
    /// A name is taken, or a resource is in use (the message says by what).
    #[error("{0}")]
    Conflict(String),
    /// Validation failed: nothing was stored.
    #[error("{message}")]
    Invalid {
        message: String,
        fields: FieldErrors,
    },
    #[error("too many attempts; try again in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// A provider (database, Kafka, Connect, S3) failed; the message is already sanitized.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

/// The machine-readable kind of an error, as API clients see it (`error.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// No identity, or an expired or revoked one (401).
    Unauthenticated,
    /// The caller's role does not allow the action (403).
    Forbidden,
    /// A page form's CSRF token is missing or wrong (403).
    Csrf,
    /// The resource does not exist (404).
    NotFound,
    /// A name is taken or the resource is in use (409).
    Conflict,
    /// Validation failed; `fields` names each field and how to fix it; nothing was stored (422).
    Invalid,
    /// Too many attempts (429, with `Retry-After`).
    RateLimited,
    /// The request body is larger than 1 MiB (413).
    TooLarge,
    /// A provider (database, Kafka, Connect, S3) failed; the message is sanitized (502).
    Unavailable,
    /// A server bug; the log has the details under `request_id` (500).
    Internal,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// One invalid field.
    pub fn field(field: &str, why: impl Into<String>) -> Self {
        let why = why.into();
        let mut fields = FieldErrors::new();
        fields.insert(field.to_string(), why.clone());
        Error::Invalid {
            message: format!("{field}: {why}"),
            fields,
        }
    }

    /// Several invalid fields at once (empty map → Ok).
    pub fn check(fields: FieldErrors) -> Result<()> {
        if fields.is_empty() {
            return Ok(());
        }
        let message = fields
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("; ");
        Err(Error::Invalid { message, fields })
    }

    /// A stable machine-readable code for API clients.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Unauthenticated => ErrorCode::Unauthenticated,
            Error::Forbidden { .. } => ErrorCode::Forbidden,
            Error::Csrf => ErrorCode::Csrf,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::Conflict(_) => ErrorCode::Conflict,
            Error::Invalid { .. } => ErrorCode::Invalid,
            Error::RateLimited { .. } => ErrorCode::RateLimited,
            Error::Unavailable(_) => ErrorCode::Unavailable,
            Error::Unexpected(_) => ErrorCode::Internal,
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        // A safety net: deleting a row that another still references is the caller's conflict,
        // not a server bug (each delete checks its users first and names them; this catches a
        // reference that check does not know about yet).
        if let sqlx::Error::Database(db) = &e {
            if db.is_foreign_key_violation() {
                return Error::Conflict(
                    "this is still in use by another resource (a foreign key refers to it); \
                     delete or change what uses it first"
                        .into(),
                );
            }
        }
        Error::Unexpected(anyhow::Error::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn foreign_key_violation_is_a_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        for sql in [
            "PRAGMA foreign_keys = ON",
            "CREATE TABLE parent (id TEXT PRIMARY KEY)",
            "CREATE TABLE child (id TEXT PRIMARY KEY, parent_id TEXT NOT NULL REFERENCES parent(id))",
            "INSERT INTO parent VALUES ('p')",
            "INSERT INTO child VALUES ('c', 'p')",
        ] {
            crate::db::query(sql).execute(&pool).await.unwrap();
        }
        let e: Error = crate::db::query("DELETE FROM parent WHERE id = 'p'")
            .execute(&pool)
            .await
            .unwrap_err()
            .into();
        assert_eq!(e.code(), ErrorCode::Conflict, "{e:?}");
        assert!(e.to_string().contains("still in use"), "{e}");
        // Any other database error stays a server bug.
        let e: Error = crate::db::query("SELECT * FROM missing_table")
            .execute(&pool)
            .await
            .unwrap_err()
            .into();
        assert_eq!(e.code(), ErrorCode::Internal, "{e:?}");
    }
}
