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
    pub fn code(&self) -> &'static str {
        match self {
            Error::Unauthenticated => "unauthenticated",
            Error::Forbidden { .. } => "forbidden",
            Error::Csrf => "csrf",
            Error::NotFound(_) => "not_found",
            Error::Conflict(_) => "conflict",
            Error::Invalid { .. } => "invalid",
            Error::RateLimited { .. } => "rate_limited",
            Error::Unavailable(_) => "unavailable",
            Error::Unexpected(_) => "internal",
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Unexpected(anyhow::Error::new(e))
    }
}
