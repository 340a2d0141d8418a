//! First run: while no user exists, a one-time setup token lets the first admin be created
//! from the browser. Only its hash is stored; the URL with the token goes to the log.
//!
//! Every `serve` that starts with no user issues its own token and logs its own URL, and each
//! stays valid until the first admin exists: replicas started together on one PostgreSQL store
//! each log a URL, and whichever the operator opens works on whichever replica the load
//! balancer picks (one shared token, replaced at every start, left every replica's URL but the
//! last one dead). Creating the first admin burns them all.

use crate::db;
use crate::db::Pool;

use super::{random_token, token_hash, users};
use crate::audit::Actor;
use crate::error::{Error, Result};

/// Rows `setup_token_hash:<hash>` in `instance_meta`, one per issued token (value: when).
const KEY: &str = "setup_token_hash";

fn key_of(token: &str) -> String {
    format!("{KEY}:{}", token_hash(token))
}

async fn burn_all(pool: &Pool) -> Result<()> {
    // The single-row key of earlier versions too.
    db::query("DELETE FROM instance_meta WHERE key = $1 OR key LIKE $2")
        .bind(KEY)
        .bind(format!("{KEY}:%"))
        .execute(pool)
        .await?;
    Ok(())
}

/// Issues a fresh token when no user exists and returns it.
pub async fn issue_if_needed(pool: &Pool) -> Result<Option<String>> {
    if users::count(pool).await? > 0 {
        burn_all(pool).await?;
        return Ok(None);
    }
    let token = random_token();
    db::query("INSERT INTO instance_meta (key, value) VALUES ($1, $2)")
        .bind(key_of(&token))
        .bind(crate::time::now())
        .execute(pool)
        .await?;
    Ok(Some(token))
}

/// True while the token is one issued and no user exists. The lookup is by the token's hash,
/// so nothing secret is compared in memory.
pub async fn is_valid(pool: &Pool, token: &str) -> Result<bool> {
    let issued: i64 = db::query_scalar("SELECT COUNT(*) FROM instance_meta WHERE key = $1")
        .bind(key_of(token))
        .fetch_one(pool)
        .await?;
    Ok(issued == 1 && users::count(pool).await? == 0)
}

/// Creates the first admin and burns every token.
pub async fn complete(pool: &Pool, token: &str, input: &users::NewUser) -> Result<users::User> {
    if !is_valid(pool, token).await? {
        return Err(Error::Unauthenticated);
    }
    let input = users::NewUser {
        role: "admin".into(),
        ..input.clone()
    };
    let user = users::create_unchecked(pool, Actor::anonymous("setup"), &input).await?;
    burn_all(pool).await?;
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three replicas starting on one empty store each log their own URL: each one works until
    /// the first admin is created, then none does.
    #[tokio::test]
    async fn every_replicas_setup_token_works_until_the_first_admin_exists() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        let mut tokens = Vec::new();
        for _ in 0..3 {
            tokens.push(issue_if_needed(&pool).await.unwrap().unwrap());
        }
        for t in &tokens {
            assert!(is_valid(&pool, t).await.unwrap());
        }
        assert!(!is_valid(&pool, "not-a-token").await.unwrap());
        let input = users::NewUser {
            name: "first".into(),
            role: "viewer".into(),
            password: "a very long password".into(),
        };
        let user = complete(&pool, &tokens[1], &input).await.unwrap();
        assert_eq!(user.role, "admin");
        for t in &tokens {
            assert!(!is_valid(&pool, t).await.unwrap(), "burnt");
        }
        assert_eq!(issue_if_needed(&pool).await.unwrap(), None);
    }
}
