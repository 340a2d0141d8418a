//! API tokens for `Authorization: Bearer`. The token is shown once at creation; only its
//! SHA-256 is stored. Revocation and expiry take effect on the next request.

use crate::db;
use crate::db::Pool;
use serde::Serialize;
use serde_json::json;

use super::{random_token, token_hash, users, Credential, Principal, Role};
use crate::audit::{self, Entry, Outcome};
use crate::error::{Error, FieldErrors, Result};

/// Every token starts with this, so secret scanners and people can recognise one.
pub const PREFIX: &str = "cdc_";

#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct TokenInfo {
    pub id: String,
    pub user_name: String,
    pub label: String,
    pub prefix: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

#[derive(Debug, Clone, Default, serde::Deserialize, schemars::JsonSchema)]
pub struct NewToken {
    /// The user the token acts as (its role is the user's).
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub label: String,
    /// `30d`, `12h`…; empty means no expiry.
    #[serde(default)]
    pub expires: String,
}

#[derive(Serialize, schemars::JsonSchema)]
#[schemars(rename = "CreatedToken")]
pub struct Created {
    /// The whole token: shown once, never stored.
    pub token: String,
    pub info: TokenInfo,
}

pub async fn create(pool: &Pool, who: &Principal, input: &NewToken) -> Result<Created> {
    who.require(Role::Admin, "create API tokens")?;
    let mut fields = FieldErrors::new();
    let user = users::find_by_name(pool, input.user.trim()).await?;
    if user.is_none() {
        fields.insert(
            "user".into(),
            format!(
                "no user named {:?}; create the user first",
                input.user.trim()
            ),
        );
    }
    let label = if input.label.trim().is_empty() {
        "api".to_string()
    } else {
        input.label.trim().to_string()
    };
    if label.chars().count() > 80 {
        fields.insert("label".into(), "use at most 80 characters".into());
    }
    let expires_secs = if input.expires.trim().is_empty() {
        None
    } else {
        match crate::time::parse_duration_secs(&input.expires) {
            Some(s) => Some(s),
            None => {
                fields.insert(
                    "expires".into(),
                    "write a duration such as 90d, 12h or 30m, or leave it empty".into(),
                );
                None
            }
        }
    };
    Error::check(fields)?;
    let user = user.ok_or_else(|| Error::field("user", "unknown user"))?;
    let token = format!("{PREFIX}{}", random_token());
    let id = format!("tok_{}", uuid::Uuid::new_v4().simple());
    let info = TokenInfo {
        id: id.clone(),
        user_name: user.name.clone(),
        label,
        prefix: token[..12].to_string(),
        created_at: crate::time::now(),
        expires_at: expires_secs.map(crate::time::in_secs),
        last_used_at: None,
        revoked_at: None,
    };
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "token.create",
            target_kind: "api_token",
            target_id: &id,
            outcome: Outcome::Success,
            summary: json!({"user": user.name, "label": info.label, "expires_at": info.expires_at, "prefix": info.prefix}),
        },
    )
    .await?;
    db::query(
        "INSERT INTO api_tokens (id, user_id, label, token_hash, prefix, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&id)
    .bind(&user.id)
    .bind(&info.label)
    .bind(token_hash(&token))
    .bind(&info.prefix)
    .bind(&info.created_at)
    .bind(&info.expires_at)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Created { token, info })
}

/// Resolves a bearer token to its user, if the token is live and the user enabled.
pub async fn resolve(pool: &Pool, token: &str) -> Result<Option<Principal>> {
    if !token.starts_with(PREFIX) {
        return Ok(None);
    }
    /// id, expires_at, last_used_at, user id, user name, role, disabled
    type TokenRow = (
        String,
        Option<String>,
        Option<String>,
        String,
        String,
        String,
        db::Flag,
    );
    let row: Option<TokenRow> = db::query_as(
        "SELECT t.id, t.expires_at, t.last_used_at, u.id, u.name, u.role, u.disabled
         FROM api_tokens t JOIN users u ON u.id = t.user_id
         WHERE t.token_hash = $1 AND t.revoked_at IS NULL",
    )
    .bind(token_hash(token))
    .fetch_optional(pool)
    .await?;
    let Some((token_id, expires, last_used, user_id, user_name, role, db::Flag(disabled))) = row
    else {
        return Ok(None);
    };
    let expired = expires
        .as_deref()
        .and_then(crate::time::parse)
        .is_some_and(|t| t <= chrono::Utc::now());
    if disabled || expired {
        return Ok(None);
    }
    // "Last used" to the minute: a write per request would serialize every call on SQLite's
    // one writer. Written beside the request (see `touch`).
    let used_secs_ago = last_used
        .as_deref()
        .and_then(crate::time::parse)
        .map_or(i64::MAX, |t| (chrono::Utc::now() - t).num_seconds());
    if used_secs_ago >= 60 {
        super::touch::later(pool, super::touch::TOKEN_USED, &token_id);
    }
    Ok(Some(Principal {
        user_id,
        user_name,
        role: Role::parse(&role).unwrap_or(Role::Viewer),
        credential: Credential::ApiToken { token_id },
    }))
}

pub async fn list(pool: &Pool, who: &Principal) -> Result<Vec<TokenInfo>> {
    who.require(Role::Admin, "list API tokens")?;
    Ok(db::query_as(
        "SELECT t.id, u.name AS user_name, t.label, t.prefix, t.created_at, t.expires_at, t.last_used_at, t.revoked_at
         FROM api_tokens t JOIN users u ON u.id = t.user_id ORDER BY t.created_at DESC",
    )
    .fetch_all(pool)
    .await?)
}

pub async fn revoke(pool: &Pool, who: &Principal, id: &str) -> Result<()> {
    who.require(Role::Admin, "revoke API tokens")?;
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "token.revoke",
            target_kind: "api_token",
            target_id: id,
            outcome: Outcome::Success,
            summary: json!({}),
        },
    )
    .await?;
    let done =
        db::query("UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(crate::time::now())
            .bind(id)
            .execute(&mut *tx)
            .await?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound(format!("live API token {id}")));
    }
    tx.commit().await?;
    Ok(())
}
