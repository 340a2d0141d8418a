//! First run: while no user exists, a one-time setup token lets the first admin be created
//! from the browser. Only its hash is stored; the URL with the token goes to the log.

use crate::db;
use crate::db::Pool;

use super::{random_token, secure_eq, token_hash, users};
use crate::audit::Actor;
use crate::error::{Error, Result};

const KEY: &str = "setup_token_hash";

/// Issues a fresh token when no user exists (replacing any earlier one) and returns it.
pub async fn issue_if_needed(pool: &Pool) -> Result<Option<String>> {
    if users::count(pool).await? > 0 {
        db::query("DELETE FROM instance_meta WHERE key = $1")
            .bind(KEY)
            .execute(pool)
            .await?;
        return Ok(None);
    }
    let token = random_token();
    db::query("INSERT INTO instance_meta (key, value) VALUES ($1, $2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")
        .bind(KEY)
        .bind(token_hash(&token))
        .execute(pool)
        .await?;
    Ok(Some(token))
}

/// True while the token is the current one and no user exists.
pub async fn is_valid(pool: &Pool, token: &str) -> Result<bool> {
    let stored: Option<String> = db::query_scalar("SELECT value FROM instance_meta WHERE key = $1")
        .bind(KEY)
        .fetch_optional(pool)
        .await?;
    Ok(match stored {
        Some(hash) => secure_eq(&hash, &token_hash(token)) && users::count(pool).await? == 0,
        None => false,
    })
}

/// Creates the first admin and burns the token.
pub async fn complete(pool: &Pool, token: &str, input: &users::NewUser) -> Result<users::User> {
    if !is_valid(pool, token).await? {
        return Err(Error::Unauthenticated);
    }
    let input = users::NewUser {
        role: "admin".into(),
        ..input.clone()
    };
    let user = users::create_unchecked(pool, Actor::anonymous("setup"), &input).await?;
    db::query("DELETE FROM instance_meta WHERE key = $1")
        .bind(KEY)
        .execute(pool)
        .await?;
    Ok(user)
}
