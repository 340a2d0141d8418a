//! Answers the Connect config provider: a Connect cluster, identified by its provider token,
//! asks for fields of a secret reference. Every resolution is audited, without the value.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;
use sqlx::SqlitePool;

use super::store::SecretStore;
use crate::audit::{self, Actor, Entry, Outcome};
use crate::clusters::ProviderIdentity;
use crate::error::{Error, Result};

#[derive(Serialize)]
pub struct Resolved {
    pub values: BTreeMap<String, String>,
}

pub async fn resolve(
    pool: &SqlitePool,
    store: &SecretStore,
    who: &ProviderIdentity,
    secret_ref: &str,
    fields: &[String],
) -> Result<Resolved> {
    let actor = Actor {
        name: format!("connect:{}", who.cluster_name),
        kind: "connect",
    };
    let connection: Option<(String, String)> =
        sqlx::query_as("SELECT id, name FROM connections WHERE secret_ref = ?")
            .bind(secret_ref)
            .fetch_optional(pool)
            .await?;
    let outcome = async {
        let Some((_, _)) = &connection else {
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
/// cluster use: whoever can create connectors in Connect cannot read the secrets of other
/// connections through the provider. A Strimzi-managed cluster has no connectors of ClueCDC's,
/// so there any stored reference resolves (its KafkaConnector resources name them).
async fn in_scope(pool: &SqlitePool, who: &ProviderIdentity, secret_ref: &str) -> Result<bool> {
    let needle = format!("${{cluecdc:{secret_ref}:");
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM connect_clusters WHERE id = ?1 AND managed_by = 'strimzi')
             OR EXISTS (SELECT 1 FROM connectors WHERE connect_cluster_id = ?1 AND desired_state != 'deleted' AND instr(config, ?2) > 0)",
    )
    .bind(&who.cluster_id)
    .bind(&needle)
    .fetch_one(pool)
    .await?)
}
