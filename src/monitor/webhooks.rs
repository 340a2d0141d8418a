//! Webhook notifications: JSON, signed with HMAC-SHA256 over the body under a shared secret,
//! retried with backoff. The secret lives in the secret store.

use crate::db;
use crate::db::Pool;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::error::{Error, Result};
use crate::secrets::store::{new_ref, SecretStore};
use crate::secrets::Secret;

pub const SIGNATURE_HEADER: &str = "x-cluecdc-signature";

/// `sha256=<hex>` of HMAC-SHA256(secret, body): what receivers recompute and compare.
pub fn sign(secret: &str, body: &[u8]) -> String {
    match <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(body);
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        }
        // HMAC takes keys of any length; this arm cannot happen.
        Err(_) => String::new(),
    }
}

/// A URL every alert transition (firing, resolved) is POSTed to as JSON, signed in the
/// `x-cluecdc-signature` header (`sha256=<hex HMAC-SHA256 of the body>`). The signing secret
/// is never shown.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    #[serde(skip)]
    pub secret_ref: String,
    /// A private CA (PEM) for an https URL: deliveries then trust only it.
    pub tls_ca_certificate: Option<String>,
    pub created_at: String,
}

/// A webhook to add.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct WebhookInput {
    /// An http(s) URL.
    pub url: Option<String>,
    /// The shared signing secret, at least 16 characters; stored in the secret store, never
    /// shown again.
    #[schemars(with = "Option<String>", extend("writeOnly" = true))]
    pub secret: Option<Secret<String>>,
    /// A private CA (PEM) for an https URL signed by it; empty or absent: the built-in roots.
    pub tls_ca_certificate: Option<String>,
}

const SELECT: &str = "SELECT id, url, secret_ref, tls_ca_certificate, created_at FROM webhooks";

/// The client one webhook is sent with: its CA only when it has one, else the built-in roots.
fn client_for(hook: &Webhook) -> Result<reqwest::Client, String> {
    let builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10));
    let builder = match &hook.tls_ca_certificate {
        Some(pem) => crate::connect::trust_only(builder, pem)?,
        None => builder,
    };
    builder.build().map_err(|e| e.to_string())
}

/// The URL normalized, the signing secret and the CA (PEM, when given), or the fields that are
/// wrong; nothing stored.
pub fn check(input: &WebhookInput) -> Result<(String, Secret<String>, Option<&str>)> {
    let mut errors = crate::error::FieldErrors::new();
    let url = crate::clusters::validate_url(input.url.as_deref().unwrap_or(""))
        .map_err(|why| errors.insert("url".into(), why))
        .unwrap_or_default();
    let secret = input.secret.clone().filter(|s| s.expose().len() >= 16);
    if secret.is_none() {
        errors.insert(
            "secret".into(),
            "a shared signing secret of at least 16 characters".into(),
        );
    }
    let ca = input
        .tls_ca_certificate
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty());
    if let Some(pem) = ca {
        if let Err(why) = crate::connect::check_ca_certificate(pem) {
            errors.insert("tls_ca_certificate".into(), why);
        } else if !url.is_empty() && !url.starts_with("https://") {
            errors.insert(
                "tls_ca_certificate".into(),
                "a CA certificate is for an https:// URL; use https or remove the CA certificate"
                    .into(),
            );
        }
    }
    Error::check(errors)?;
    let Some(secret) = secret else {
        return Err(Error::field(
            "secret",
            "a shared signing secret of at least 16 characters",
        ));
    };
    Ok((url, secret, ca))
}

pub async fn create(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    input: &WebhookInput,
) -> Result<Webhook> {
    who.require(Role::Admin, "manage webhooks")?;
    let (url, secret, ca) = check(input)?;
    let id = format!("wh_{}", uuid::Uuid::new_v4().simple());
    let secret_ref = new_ref();
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "webhook.create",
            target_kind: "webhook",
            target_id: &id,
            outcome: Outcome::Success,
            summary: json!({"url": url, "tls_ca_certificate": ca.is_some()}),
        },
    )
    .await?;
    let created_at = crate::time::now();
    db::query("INSERT INTO webhooks (id, url, secret_ref, tls_ca_certificate, created_at) VALUES ($1, $2, $3, $4, $5)")
        .bind(&id)
        .bind(&url)
        .bind(&secret_ref)
        .bind(ca)
        .bind(&created_at)
        .execute(&mut *tx)
        .await?;
    store
        .put(
            &mut tx,
            &secret_ref,
            &[("signing_secret".to_string(), secret)].into(),
        )
        .await?;
    tx.commit().await?;
    Ok(Webhook {
        id,
        url,
        secret_ref,
        tls_ca_certificate: ca.map(String::from),
        created_at,
    })
}

pub async fn list(pool: &Pool, who: &Principal) -> Result<Vec<Webhook>> {
    who.require(Role::Admin, "manage webhooks")?;
    Ok(db::query_as(&format!("{SELECT} ORDER BY created_at"))
        .fetch_all(pool)
        .await?)
}

pub async fn delete(pool: &Pool, who: &Principal, id: &str) -> Result<()> {
    who.require(Role::Admin, "manage webhooks")?;
    let mut tx = pool.begin().await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "webhook.delete",
            target_kind: "webhook",
            target_id: id,
            outcome: Outcome::Success,
            summary: json!({}),
        },
    )
    .await?;
    let n = db::query("DELETE FROM webhooks WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if n == 0 {
        return Err(Error::NotFound(format!("webhook {id}")));
    }
    tx.commit().await?;
    Ok(())
}

/// Sends `payload` to every webhook in the background: up to 4 attempts, 1 s, 2 s, 4 s apart.
pub fn notify(pool: Pool, store: std::sync::Arc<SecretStore>, payload: Value) {
    tokio::spawn(async move {
        let hooks: Vec<Webhook> = match db::query_as(SELECT).fetch_all(&pool).await {
            Ok(h) => h,
            Err(e) => return tracing::warn!(error = %e, "cannot read webhooks"),
        };
        let body = payload.to_string();
        for hook in hooks {
            let http = match client_for(&hook) {
                Ok(c) => c,
                Err(why) => {
                    tracing::warn!(webhook = %hook.url, error = %why, "webhook not sent");
                    continue;
                }
            };
            let Ok(Some(secret)) = store.get(&hook.secret_ref, "signing_secret").await else {
                continue;
            };
            let signature = sign(secret.expose(), body.as_bytes());
            let mut delay = std::time::Duration::from_secs(1);
            for attempt in 1..=4 {
                let sent = http
                    .post(&hook.url)
                    .header("content-type", "application/json")
                    .header(SIGNATURE_HEADER, &signature)
                    .body(body.clone())
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().is_success() => break,
                    other => {
                        let why = match other {
                            Ok(r) => format!("HTTP {}", r.status()),
                            Err(e) => crate::connect::explain(&e),
                        };
                        tracing::warn!(webhook = %hook.url, attempt, error = %why, "webhook delivery failed");
                        if attempt == 4 {
                            break;
                        }
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::sign;

    #[test]
    fn signatures_are_hmac_sha256_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
