//! Answers the Connect config provider: a Connect cluster, identified by its provider token,
//! asks for fields of a secret reference. Every resolution is audited, without the value.
//!
//! One field is not a secret: `ca_certificate`, the connection's CA (a setting), which the
//! provider writes to a file on the worker (`${cluecdc:<ref>:ca_cert_file}`) for connectors
//! that take a certificate path (PostgreSQL `sslrootcert`, JDBC URLs).

use crate::db;
use std::collections::BTreeMap;

use crate::db::Pool;
use serde::Serialize;
use serde_json::json;

use super::store::SecretStore;
use crate::audit::{self, Actor, Entry, Outcome};
use crate::clusters::ProviderIdentity;
use crate::error::{Error, Result};

#[derive(Serialize)]
pub struct Resolved {
    pub values: BTreeMap<String, String>,
}

/// The connection setting the provider may read beside the secrets.
pub const CA_CERTIFICATE: &str = "ca_certificate";

pub async fn resolve(
    pool: &Pool,
    store: &SecretStore,
    who: &ProviderIdentity,
    secret_ref: &str,
    fields: &[String],
) -> Result<Resolved> {
    let actor = Actor {
        name: format!("connect:{}", who.cluster_name),
        kind: "connect",
    };
    // A connection's secrets, or a Kafka cluster's (its SASL password, for connectors' own
    // Kafka clients), with the CA each keeps as a setting.
    // `kind` 'c' rows carry the connection's settings (JSON), 'k' rows the cluster's CA.
    let connection: Option<(String, String, Option<String>)> = db::query_as::<(String, String, String, Option<String>)>(
        "SELECT id, name, 'c', settings FROM connections WHERE secret_ref = $1
         UNION ALL SELECT id, name, 'k', tls_ca_certificate FROM kafka_clusters WHERE secret_ref = $1",
    )
    .bind(secret_ref)
    .fetch_optional(pool)
    .await?
    .map(|(id, name, kind, value)| {
        let ca = if kind == "c" {
            value
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                .and_then(|v| v.get("ca_certificate").and_then(|c| c.as_str()).map(str::to_string))
        } else {
            value
        };
        (id, name, ca)
    });
    let outcome = async {
        let Some((_, _, ca_certificate)) = &connection else {
            return Err(Error::NotFound(format!("secret reference {secret_ref}")));
        };
        if !in_scope(pool, who, secret_ref).await? {
            return Err(Error::NotFound(format!(
                "secret reference {secret_ref} for Connect cluster {}: no connector ClueCDC manages there uses it",
                who.cluster_name
            )));
        }
        if fields.is_empty() {
            return Err(Error::field("fields", "name at least one field"));
        }
        let mut values = BTreeMap::new();
        for field in fields {
            if field == CA_CERTIFICATE {
                let pem = ca_certificate.clone().ok_or_else(|| {
                    Error::NotFound(format!(
                        "field {field} of secret reference {secret_ref}: the connection has no CA certificate"
                    ))
                })?;
                values.insert(field.clone(), pem);
                continue;
            }
            match store.get(secret_ref, field).await? {
                Some(v) => {
                    values.insert(field.clone(), v.expose().clone());
                }
                None => {
                    return Err(Error::NotFound(format!(
                        "field {field} of secret reference {secret_ref}"
                    )))
                }
            }
        }
        Ok(Resolved { values })
    }
    .await;
    let summary = json!({"connection": connection.as_ref().map(|c| c.1.clone()), "fields": fields, "error": outcome.as_ref().err().map(|e| e.to_string())});
    audit::record_alone(
        pool,
        Entry {
            actor,
            action: "secret.resolve",
            target_kind: "secret_ref",
            target_id: secret_ref,
            outcome: if outcome.is_ok() {
                Outcome::Success
            } else {
                Outcome::Failure
            },
            summary,
        },
    )
    .await?;
    outcome
}

/// A cluster's token resolves only the references that the connectors ClueCDC wants on that
/// cluster use, or that a config ClueCDC is having it validate uses (a grant, for two
/// minutes): whoever can create connectors in Connect cannot read the secrets of other
/// connections through the provider. A Strimzi-managed cluster has no connectors of ClueCDC's,
/// so there any stored reference resolves (its KafkaConnector resources name them).
async fn in_scope(pool: &Pool, who: &ProviderIdentity, secret_ref: &str) -> Result<bool> {
    let needle = format!("${{cluecdc:{secret_ref}:");
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM connect_clusters WHERE id = $1 AND managed_by = 'strimzi')
             OR EXISTS (SELECT 1 FROM connectors WHERE connect_cluster_id = $1 AND desired_state != 'deleted' AND {}(config, $2) > 0)
             OR EXISTS (SELECT 1 FROM provider_grants WHERE connect_cluster_id = $1 AND secret_ref = $3 AND expires_at > $4)",
        db::Engine::of(pool).position()
    );
    let db::Flag(found) = db::query_scalar(&sql)
        .bind(&who.cluster_id)
        .bind(&needle)
        .bind(secret_ref)
        .bind(crate::reconcile::lease::now_ms())
        .fetch_one(pool)
        .await?;
    Ok(found)
}

/// The secret references in a connector config (`${cluecdc:<ref>:<field>}` in its values).
pub fn references(config: &BTreeMap<String, String>) -> Vec<String> {
    let mut refs: Vec<String> = config
        .values()
        .flat_map(|v| {
            v.match_indices("${cluecdc:")
                .map(move |(i, m)| &v[i + m.len()..])
        })
        .filter_map(|rest| rest.split(':').next())
        .filter(|r| !r.is_empty() && !r.contains('}'))
        .map(str::to_string)
        .collect();
    refs.sort();
    refs.dedup();
    refs
}

/// Lets `cluster_id` resolve the config's references for two minutes: ClueCDC is about to
/// have that cluster validate the config (validation resolves them, as a task start would).
///
/// Grants still good for a minute are left as they are, so a burst of creates on one source
/// writes nothing here after the first; otherwise one transaction behind the write gate (two
/// autocommit writes per create met every concurrent writer in SQLite's busy sleeps).
pub async fn grant_for_validation(
    pool: &Pool,
    cluster_id: &str,
    config: &BTreeMap<String, String>,
) -> Result<()> {
    let refs = references(config);
    if refs.is_empty() {
        return Ok(());
    }
    let now = crate::reconcile::lease::now_ms();
    let sql = format!("SELECT COUNT(*) FROM provider_grants WHERE connect_cluster_id = $1 AND expires_at > $2 AND secret_ref IN ({})", db::placeholders(3, refs.len()));
    let mut q = db::query_scalar(&sql).bind(cluster_id).bind(now + 60_000);
    for r in &refs {
        q = q.bind(r);
    }
    let fresh: i64 = q.fetch_one(pool).await?;
    if fresh == refs.len() as i64 {
        return Ok(());
    }
    let _gate = crate::db::write_gate(pool).await;
    let mut tx = pool.begin().await?;
    db::query("DELETE FROM provider_grants WHERE expires_at <= $1")
        .bind(now)
        .execute(&mut *tx)
        .await?;
    for r in refs {
        db::query("INSERT INTO provider_grants (connect_cluster_id, secret_ref, expires_at) VALUES ($1, $2, $3) ON CONFLICT (connect_cluster_id, secret_ref) DO UPDATE SET expires_at = excluded.expires_at")
            .bind(cluster_id)
            .bind(&r)
            .bind(now + 120_000)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::references;

    #[test]
    fn references_are_read_from_every_placeholder_in_the_values() {
        let config = [
            (
                "database.password".to_string(),
                "${cluecdc:sec_a:password}".to_string(),
            ),
            (
                "url".to_string(),
                "jdbc:x?u=${cluecdc:sec_b:user}&p=${cluecdc:sec_a:password}".to_string(),
            ),
            ("plain".to_string(), "cluecdc:sec_c:password".to_string()),
        ]
        .into();
        assert_eq!(
            references(&config),
            vec!["sec_a".to_string(), "sec_b".to_string()]
        );
    }
}
