//! User accounts. Only admins manage them; the first admin comes from the setup page or
//! `cluecdc user create`.

use crate::db;
use crate::db::Pool;
use serde::Serialize;
use serde_json::json;

use super::{password, Principal, Role};
use crate::audit::{self, Actor, Entry, Outcome};
use crate::error::{Error, FieldErrors, Result};

#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct User {
    pub id: String,
    pub name: String,
    #[schemars(with = "Role")]
    pub role: String,
    #[sqlx(try_from = "crate::db::Flag")]
    pub disabled: bool,
    pub created_at: String,
    #[serde(skip)]
    pub password_hash: String,
    /// Set for a single sign-on account: the provider that vouches for it.
    pub oidc_issuer: Option<String>,
    /// Where the role came from: `local` (an admin or the CLI), `groups` (the provider's groups
    /// at the last sign-in) or `default` (no mapped group: the configured default role).
    #[schemars(with = "RoleSource")]
    pub role_source: String,
}

impl User {
    pub fn role(&self) -> Role {
        Role::parse(&self.role).unwrap_or(Role::Viewer)
    }
}

/// Raw input from a form or JSON body; `validate` turns it into a checked value.
#[derive(Debug, Clone, Default, serde::Deserialize, schemars::JsonSchema)]
pub struct NewUser {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    #[schemars(with = "Role")]
    pub role: String,
    /// At least 12 characters; stored as an Argon2 hash, never shown again.
    #[serde(default)]
    #[schemars(extend("writeOnly" = true))]
    pub password: String,
}

/// Where a user's role came from (documents `User.role_source`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum RoleSource {
    Local,
    Groups,
    Default,
}

pub fn validate_name(name: &str) -> std::result::Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if name.is_empty()
        || name.len() > 64
        || !ok_chars
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Err("use 1–64 characters: lowercase letters, digits, '.', '_' or '-', starting with a letter or digit".into());
    }
    Ok(())
}

fn validate(input: &NewUser) -> Result<(String, Role)> {
    let mut fields = FieldErrors::new();
    let name = input.name.trim().to_string();
    if let Err(why) = validate_name(&name) {
        fields.insert("name".into(), why);
    }
    let role = Role::parse(&input.role);
    if role.is_none() {
        fields.insert("role".into(), "choose viewer, operator or admin".into());
    }
    if let Err(Error::Invalid { fields: f, .. }) = password::validate(&input.password) {
        fields.extend(f);
    }
    Error::check(fields)?;
    Ok((name, role.unwrap_or(Role::Viewer)))
}

pub async fn count(pool: &Pool) -> Result<i64> {
    Ok(db::query_scalar("SELECT COUNT(*) FROM users")
        .fetch_one(pool)
        .await?)
}

pub async fn find_by_name(pool: &Pool, name: &str) -> Result<Option<User>> {
    Ok(db::query_as(
        "SELECT id, name, role, disabled, created_at, password_hash, oidc_issuer, role_source FROM users WHERE name = $1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await?)
}

pub async fn find_by_id(pool: &Pool, id: &str) -> Result<Option<User>> {
    Ok(db::query_as(
        "SELECT id, name, role, disabled, created_at, password_hash, oidc_issuer, role_source FROM users WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?)
}

/// A single sign-on account by the provider's issuer and subject (never by e-mail).
pub async fn find_by_identity(pool: &Pool, issuer: &str, subject: &str) -> Result<Option<User>> {
    Ok(db::query_as(
        "SELECT id, name, role, disabled, created_at, password_hash, oidc_issuer, role_source FROM users WHERE oidc_issuer = $1 AND oidc_subject = $2",
    )
    .bind(issuer)
    .bind(subject)
    .fetch_optional(pool)
    .await?)
}

pub async fn list(pool: &Pool, who: &Principal) -> Result<Vec<User>> {
    who.require(Role::Admin, "manage users")?;
    Ok(db::query_as(
        "SELECT id, name, role, disabled, created_at, password_hash, oidc_issuer, role_source FROM users ORDER BY name",
    )
    .fetch_all(pool)
    .await?)
}

/// Creates a user; the audit row and the user commit together.
pub async fn create(pool: &Pool, who: &Principal, input: &NewUser) -> Result<User> {
    who.require(Role::Admin, "create users")?;
    create_unchecked(pool, Actor::from(who), input).await
}

/// The first admin (setup page) has no principal yet; callers guarantee no user exists.
pub(crate) async fn create_unchecked(pool: &Pool, actor: Actor, input: &NewUser) -> Result<User> {
    let (name, role) = validate(input)?;
    let hash = password::hash(&input.password)?;
    let id = format!("usr_{}", uuid::Uuid::new_v4().simple());
    let now = crate::time::now();
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor,
            action: "user.create",
            target_kind: "user",
            target_id: &id,
            outcome: Outcome::Success,
            summary: json!({"name": name, "role": role.as_str()}),
        },
    )
    .await?;
    let inserted = db::query(
        "INSERT INTO users (id, name, role, password_hash, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&id)
    .bind(&name)
    .bind(role.as_str())
    .bind(&hash)
    .bind(&now)
    .bind(&now)
    .execute(&mut *tx)
    .await;
    match inserted {
        Ok(_) => {}
        // The transaction (and with it the audit row) rolls back when dropped.
        Err(e) if crate::db::is_unique_violation(&e) => {
            return Err(Error::Invalid {
                message: format!("a user named {name} already exists"),
                fields: [(
                    "name".to_string(),
                    format!("{name} is taken; choose another name"),
                )]
                .into(),
            })
        }
        Err(e) => return Err(e.into()),
    }
    tx.commit().await?;
    Ok(User {
        id,
        name,
        role: role.as_str().into(),
        disabled: false,
        created_at: now,
        password_hash: hash,
        oidc_issuer: None,
        role_source: "local".into(),
    })
}

/// Changes a user's role; takes effect on the user's next request (roles are read per request).
pub async fn set_role(pool: &Pool, who: &Principal, user_id: &str, role: &str) -> Result<User> {
    who.require(Role::Admin, "change roles")?;
    let role = Role::parse(role)
        .ok_or_else(|| Error::field("role", "choose viewer, operator or admin"))?;
    let user = find_by_id(pool, user_id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("user {user_id}")))?;
    if user.role() == Role::Admin && role != Role::Admin {
        ensure_another_admin(pool, &user.id).await?;
    }
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "user.set_role",
            target_kind: "user",
            target_id: &user.id,
            outcome: Outcome::Success,
            summary: json!({"name": user.name, "from": user.role, "to": role.as_str()}),
        },
    )
    .await?;
    db::query("UPDATE users SET role = $1, role_source = 'local', updated_at = $2 WHERE id = $3")
        .bind(role.as_str())
        .bind(crate::time::now())
        .bind(&user.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(User {
        role: role.as_str().into(),
        ..user
    })
}

/// Disabling signs the user out everywhere and stops their tokens at once.
pub async fn set_disabled(
    pool: &Pool,
    who: &Principal,
    user_id: &str,
    disabled: bool,
) -> Result<()> {
    who.require(Role::Admin, "disable users")?;
    let user = find_by_id(pool, user_id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("user {user_id}")))?;
    if disabled && user.role() == Role::Admin {
        ensure_another_admin(pool, &user.id).await?;
    }
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: if disabled {
                "user.disable"
            } else {
                "user.enable"
            },
            target_kind: "user",
            target_id: &user.id,
            outcome: Outcome::Success,
            summary: json!({"name": user.name}),
        },
    )
    .await?;
    db::query("UPDATE users SET disabled = $1, updated_at = $2 WHERE id = $3")
        .bind(i64::from(disabled))
        .bind(crate::time::now())
        .bind(&user.id)
        .execute(&mut *tx)
        .await?;
    if disabled {
        db::query("UPDATE sessions SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL")
            .bind(crate::time::now())
            .bind(&user.id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Sets a new password (the CLI's `user reset-password`) and signs the user out everywhere.
pub async fn reset_password(
    pool: &Pool,
    who: &Principal,
    name: &str,
    new_password: &str,
) -> Result<()> {
    who.require(Role::Admin, "reset passwords")?;
    password::validate(new_password)?;
    let user = find_by_name(pool, name)
        .await?
        .ok_or_else(|| Error::NotFound(format!("user {name}")))?;
    let hash = password::hash(new_password)?;
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "user.reset_password",
            target_kind: "user",
            target_id: &user.id,
            outcome: Outcome::Success,
            summary: json!({"name": user.name}),
        },
    )
    .await?;
    db::query("UPDATE users SET password_hash = $1, updated_at = $2 WHERE id = $3")
        .bind(&hash)
        .bind(crate::time::now())
        .bind(&user.id)
        .execute(&mut *tx)
        .await?;
    db::query("UPDATE sessions SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL")
        .bind(crate::time::now())
        .bind(&user.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// There must always be an enabled admin, or nobody could manage users again.
async fn ensure_another_admin(pool: &Pool, except_id: &str) -> Result<()> {
    let others: i64 = db::query_scalar(
        "SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled = 0 AND id <> $1",
    )
    .bind(except_id)
    .fetch_one(pool)
    .await?;
    if others == 0 {
        return Err(Error::Conflict(
            "this is the last enabled admin; make another user admin first".into(),
        ));
    }
    Ok(())
}
