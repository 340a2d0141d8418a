//! Identity and access: users, browser sessions, API tokens, roles.
//!
//! Roles are enforced here, in the service layer: every service function that changes or
//! reveals something starts with `principal.require(...)`, so the HTML pages and `/api/v1`
//! (which call the same functions) cannot disagree.

pub mod oidc;
pub mod password;
pub mod ratelimit;
pub mod sessions;
pub mod setup;
pub mod tokens;
pub mod touch;
pub mod users;

use serde::Serialize;

use crate::error::{Error, Result};

/// Ordered: each role can do everything the one before it can.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything except secrets (which nobody can read).
    Viewer,
    /// Creates, changes, pauses and restarts pipelines and deliveries; tests connections.
    Operator,
    /// Connections, clusters, users, tokens, key rotation.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s.trim().to_ascii_lowercase())
    }
}

/// How the caller proved who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A browser session; state-changing requests must carry its CSRF token.
    Session {
        session_id: String,
        csrf_token: String,
    },
    /// `Authorization: Bearer`; no CSRF (a browser never sends it by itself).
    ApiToken { token_id: String },
    /// The local command line, which has the database file and so already has everything.
    Cli,
}

/// Who is acting. Passed to every service function.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user_id: String,
    pub user_name: String,
    pub role: Role,
    pub credential: Credential,
}

impl Principal {
    /// The command line acts as a local administrator named after the OS user.
    pub fn cli() -> Self {
        let who = std::env::var("USER").unwrap_or_else(|_| "root".into());
        Principal {
            user_id: String::new(),
            user_name: format!("cli:{who}"),
            role: Role::Admin,
            credential: Credential::Cli,
        }
    }

    /// Fails with `Forbidden` unless the role is at least `needed`; `action` completes the
    /// sentence "your role cannot ...".
    pub fn require(&self, needed: Role, action: &'static str) -> Result<()> {
        if self.role >= needed {
            Ok(())
        } else {
            Err(Error::Forbidden {
                role: self.role.as_str(),
                needed: needed.as_str(),
                action,
            })
        }
    }

    pub fn actor_kind(&self) -> &'static str {
        match self.credential {
            Credential::Session { .. } => "session",
            Credential::ApiToken { .. } => "token",
            Credential::Cli => "cli",
        }
    }

    pub fn csrf_token(&self) -> Option<&str> {
        match &self.credential {
            Credential::Session { csrf_token, .. } => Some(csrf_token),
            _ => None,
        }
    }
}

/// 32 random bytes as URL-safe base64: session ids, API token secrets, CSRF and setup tokens.
pub fn random_token() -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Tokens are stored only as this hash; lookups compare hashes, so no secret is compared
/// byte by byte and a stolen database yields no usable token.
pub fn token_hash(token: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Constant-time equality for secrets compared in memory (CSRF, setup token).
pub fn secure_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_role(role: Role) -> Principal {
        Principal {
            user_id: "u".into(),
            user_name: "n".into(),
            role,
            credential: Credential::Cli,
        }
    }

    #[test]
    fn roles_are_ordered_viewer_operator_admin() {
        assert!(with_role(Role::Admin).require(Role::Operator, "x").is_ok());
        assert!(with_role(Role::Operator)
            .require(Role::Operator, "x")
            .is_ok());
        let err = with_role(Role::Viewer)
            .require(Role::Operator, "pause pipelines")
            .unwrap_err();
        assert_eq!(err.to_string(), "your role (viewer) cannot pause pipelines; ask an operator to do it or to change your role");
    }

    #[test]
    fn role_names_parse_case_insensitively_and_nothing_else() {
        assert_eq!(Role::parse("Admin"), Some(Role::Admin));
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn secure_eq_needs_equal_length_and_bytes() {
        assert!(secure_eq("abc", "abc"));
        assert!(!secure_eq("abc", "abd"));
        assert!(!secure_eq("abc", "abcd"));
    }

    #[test]
    fn random_tokens_differ_and_hash_to_hex() {
        let (a, b) = (random_token(), random_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(token_hash(&a).len(), 64);
    }
}
