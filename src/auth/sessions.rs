//! Server-side browser sessions: the cookie carries a random id, the table keeps its hash,
//! the CSRF token, and idle and absolute expiry. Revoking a row ends the session at once.

use crate::db;
use crate::db::Pool;
use serde_json::json;

use super::{random_token, token_hash, Credential, Principal, Role};
use crate::audit::{self, Entry, Outcome};
use crate::error::Result;

/// Session lifetimes, from settings.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    pub idle_secs: i64,
    pub absolute_secs: i64,
}

pub struct NewSession {
    /// The cookie value; shown once, never stored.
    pub cookie_value: String,
    pub principal: Principal,
}

/// Starts a session for a verified user; the login audit row commits with it.
pub async fn start(
    pool: &Pool,
    user: &super::users::User,
    lifetimes: Lifetimes,
    address: Option<&str>,
    user_agent: Option<&str>,
) -> Result<NewSession> {
    let id = random_token();
    let id_hash = token_hash(&id);
    let csrf = random_token();
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    db::query(
        "INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, last_seen_at, expires_at, address, user_agent)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&id_hash)
    .bind(&user.id)
    .bind(&csrf)
    .bind(&now)
    .bind(&now)
    .bind(crate::time::in_secs(lifetimes.absolute_secs))
    .bind(address)
    .bind(user_agent.map(|u| u.chars().take(200).collect::<String>()))
    .execute(&mut *tx)
    .await?;
    let principal = Principal {
        user_id: user.id.clone(),
        user_name: user.name.clone(),
        role: user.role(),
        credential: Credential::Session {
            session_id: id_hash.clone(),
            csrf_token: csrf,
        },
    };
    audit::record(
        &mut tx,
        Entry {
            actor: (&principal).into(),
            action: "auth.login",
            target_kind: "session",
            target_id: &id_hash[..12],
            outcome: Outcome::Success,
            summary: json!({"address": address}),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(NewSession {
        cookie_value: id,
        principal,
    })
}

/// Resolves a cookie to a principal if the session is live: not revoked, not past its
/// absolute expiry, used within the idle window, and its user enabled. Touches `last_seen_at`.
pub async fn resolve(
    pool: &Pool,
    cookie_value: &str,
    lifetimes: Lifetimes,
) -> Result<Option<Principal>> {
    let id_hash = token_hash(cookie_value);
    let row: Option<(String, String, String, String, String, String, db::Flag)> = db::query_as(
        "SELECT s.csrf_token, s.last_seen_at, s.expires_at, u.id, u.name, u.role, u.disabled
         FROM sessions s JOIN users u ON u.id = s.user_id
         WHERE s.id_hash = $1 AND s.revoked_at IS NULL",
    )
    .bind(&id_hash)
    .fetch_optional(pool)
    .await?;
    let Some((csrf, last_seen, expires, user_id, user_name, role, db::Flag(disabled))) = row else {
        return Ok(None);
    };
    let now = chrono::Utc::now();
    let idle_ok = crate::time::parse(&last_seen)
        .map(|t| (now - t).num_seconds() < lifetimes.idle_secs)
        .unwrap_or(false);
    let absolute_ok = crate::time::parse(&expires)
        .map(|t| now < t)
        .unwrap_or(false);
    if disabled || !idle_ok || !absolute_ok {
        return Ok(None);
    }
    // Activity extends the session, but a write per request would serialize every page load
    // on SQLite's one writer: refresh once the stored time is a tenth of the idle limit old
    // (at most a minute), which keeps the idle limit exact to that margin. Written beside the
    // request (see `touch`).
    let refresh_after = (lifetimes.idle_secs / 10).clamp(1, 60);
    let seen_secs_ago =
        crate::time::parse(&last_seen).map_or(i64::MAX, |t| (now - t).num_seconds());
    if seen_secs_ago >= refresh_after {
        super::touch::later(pool, super::touch::SESSION_SEEN, &id_hash);
    }
    Ok(Some(Principal {
        user_id,
        user_name,
        role: Role::parse(&role).unwrap_or(Role::Viewer),
        credential: Credential::Session {
            session_id: id_hash,
            csrf_token: csrf,
        },
    }))
}

/// Ends the caller's own session (logout).
pub async fn end(pool: &Pool, who: &Principal) -> Result<()> {
    let Credential::Session { session_id, .. } = &who.credential else {
        return Ok(());
    };
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "auth.logout",
            target_kind: "session",
            target_id: &session_id[..12],
            outcome: Outcome::Success,
            summary: json!({}),
        },
    )
    .await?;
    db::query("UPDATE sessions SET revoked_at = $1 WHERE id_hash = $2 AND revoked_at IS NULL")
        .bind(crate::time::now())
        .bind(session_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct SessionInfo {
    /// The first 12 hex characters of the stored hash: enough to name it, useless to steal.
    pub id: String,
    pub user_name: String,
    pub created_at: String,
    pub last_seen_at: String,
    pub expires_at: String,
    pub address: Option<String>,
}

/// Live sessions (admins see all; used by the settings page).
pub async fn list_live(pool: &Pool, who: &Principal) -> Result<Vec<SessionInfo>> {
    who.require(Role::Admin, "see everyone's sessions")?;
    Ok(db::query_as(
        "SELECT substr(s.id_hash, 1, 12) AS id, u.name AS user_name, s.created_at, s.last_seen_at, s.expires_at, s.address
         FROM sessions s JOIN users u ON u.id = s.user_id
         WHERE s.revoked_at IS NULL AND s.expires_at > $1 ORDER BY s.last_seen_at DESC LIMIT 200",
    )
    .bind(crate::time::now())
    .fetch_all(pool)
    .await?)
}

/// Revokes a session by its short id (admin).
pub async fn revoke(pool: &Pool, who: &Principal, short_id: &str) -> Result<()> {
    who.require(Role::Admin, "revoke sessions")?;
    if short_id.len() != 12 || !short_id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(crate::error::Error::NotFound(format!("session {short_id}")));
    }
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "session.revoke",
            target_kind: "session",
            target_id: short_id,
            outcome: Outcome::Success,
            summary: json!({}),
        },
    )
    .await?;
    let done = db::query("UPDATE sessions SET revoked_at = $1 WHERE substr(id_hash, 1, 12) = $2 AND revoked_at IS NULL")
        .bind(crate::time::now())
        .bind(short_id)
        .execute(&mut *tx)
        .await?;
    if done.rows_affected() == 0 {
        return Err(crate::error::Error::NotFound(format!(
            "live session {short_id}"
        )));
    }
    tx.commit().await?;
    Ok(())
}
