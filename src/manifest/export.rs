//! The current setup as a declarative document (`cluecdc export`, `GET /api/v1/export`), and
//! the same state with the ids and secret references `plan` needs beside it.
//!
//! Invariants: no id and no secret value appears in the document; every list is sorted (by
//! name, by kind for alert rules, by URL for webhooks) and maps are sorted by key, so two
//! exports of the same state are byte-identical, on this instance or on one rebuilt from it.

use crate::db;
use std::collections::{BTreeMap, HashMap};

use crate::db::Pool;
use serde_json::Value;

use super::doc::{self, Document, SecretSource};
use crate::auth::{Principal, Role};
use crate::ctx::Ctx;
use crate::error::{Error, Result};
use crate::secrets::store::SecretStore;

/// The stored setup: the document, and per resource what plan and apply need to act on it.
#[derive(Debug, Clone, Default)]
pub struct Current {
    pub doc: Document,
    /// Per kind (`kafka_clusters`, …), name (URL for webhooks) → id.
    pub ids: HashMap<&'static str, HashMap<String, String>>,
    /// Per kind, name → secret reference (where the resource has one).
    pub secret_refs: HashMap<&'static str, HashMap<String, String>>,
    /// Connect cluster name → the hash of its provider token.
    pub provider_token_hashes: HashMap<String, String>,
}

impl Current {
    pub fn id(&self, kind: &str, name: &str) -> Option<&String> {
        self.ids.get(kind).and_then(|m| m.get(name))
    }
    pub fn secret_ref(&self, kind: &str, name: &str) -> Option<&String> {
        self.secret_refs.get(kind).and_then(|m| m.get(name))
    }
}

/// `CLUECDC_<KIND>_<NAME>_<FIELD>`: a variable name derived from the resource's name, so that
/// an export names the same variables wherever the setup lives.
fn env_name(kind: &str, name: &str, field: &str) -> String {
    let mut slug = String::new();
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        };
        if !(c == '_' && (slug.is_empty() || slug.ends_with('_'))) {
            slug.push(c);
        }
    }
    let slug = slug.trim_end_matches('_');
    format!("CLUECDC_{kind}_{slug}_{}", field.to_ascii_uppercase())
}

/// Variable names per kind, made unique when two names slug alike ("a b", "a-b").
struct EnvNames(HashMap<String, usize>);

impl EnvNames {
    fn new() -> Self {
        EnvNames(HashMap::new())
    }
    fn take(&mut self, kind: &str, name: &str, field: &str) -> SecretSource {
        let base = env_name(kind, name, field);
        let n = self.0.entry(base.clone()).or_insert(0);
        *n += 1;
        SecretSource::Env(if *n == 1 { base } else { format!("{base}_{n}") })
    }
}

/// The state a connector is meant to be in: its desired state, or while an operation holds it,
/// the state the operation gives it back in. `None` for a connector being deleted.
async fn intended_states(pool: &Pool) -> Result<HashMap<String, String>> {
    let rows: Vec<(String, String, Option<String>)> = db::query_as(
        "SELECT c.id, c.desired_state, o.params FROM connectors c LEFT JOIN operations o ON o.id = c.operation_id AND o.state = 'running'",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|(_, state, _)| state != "deleted")
        .map(|(id, state, params)| {
            let back = params
                .and_then(|p| serde_json::from_str::<Value>(&p).ok())
                .and_then(|p| p["resume_to"].as_str().map(str::to_string));
            (id, back.unwrap_or(state))
        })
        .collect())
}

pub async fn current(ctx: &Ctx, who: &Principal) -> Result<Current> {
    let (pool, store): (&Pool, &SecretStore) = (&ctx.pool, &ctx.secrets);
    who.require(Role::Admin, "export or apply the configuration")?;
    let mut cur = Current::default();
    let mut env = EnvNames::new();
    let unexpected = |e: anyhow::Error| Error::Unexpected(e);

    let kafka = crate::clusters::kafka::list(ctx, who).await?;
    let kafka_names: HashMap<String, String> = kafka
        .iter()
        .map(|k| (k.id.clone(), k.name.clone()))
        .collect();
    for k in &kafka {
        let set = store.fields_set(&k.secret_ref).await.map_err(unexpected)?;
        cur.doc.kafka_clusters.push(doc::KafkaCluster {
            name: k.name.clone(),
            bootstrap_servers: k.bootstrap_servers.clone(),
            security_protocol: k.security_protocol.clone(),
            sasl_mechanism: k.sasl_mechanism.clone(),
            sasl_username: k.sasl_username.clone(),
            sasl_password: set
                .iter()
                .any(|f| f == "sasl_password")
                .then(|| env.take("KAFKA", &k.name, "sasl_password")),
            tls_ca_certificate: k.tls_ca_certificate.clone(),
        });
        note(
            &mut cur,
            "kafka_clusters",
            &k.name,
            &k.id,
            Some(&k.secret_ref),
        );
    }

    let connect = crate::clusters::connect::list(ctx, who).await?;
    let connect_names: HashMap<String, String> = connect
        .iter()
        .map(|c| (c.id.clone(), c.name.clone()))
        .collect();
    let hashes: HashMap<String, Option<String>> = db::query_as::<(String, Option<String>)>(
        "SELECT id, provider_token_hash FROM connect_clusters",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    for c in &connect {
        let password = match &c.secret_ref {
            Some(r) => store
                .fields_set(r)
                .await
                .map_err(unexpected)?
                .iter()
                .any(|f| f == "basic_auth_password"),
            None => false,
        };
        let hash = hashes.get(&c.id).cloned().flatten();
        cur.doc.connect_clusters.push(doc::ConnectCluster {
            name: c.name.clone(),
            url: c.url.clone(),
            kafka_cluster: c
                .kafka_cluster_id
                .as_ref()
                .and_then(|id| kafka_names.get(id).cloned()),
            managed_by: c.managed_by.clone(),
            basic_auth_user: c.basic_auth_user.clone(),
            basic_auth_password: password
                .then(|| env.take("CONNECT", &c.name, "basic_auth_password")),
            tls_ca_certificate: c.tls_ca_certificate.clone(),
            provider_token: hash
                .is_some()
                .then(|| env.take("CONNECT", &c.name, "provider_token")),
        });
        note(
            &mut cur,
            "connect_clusters",
            &c.name,
            &c.id,
            c.secret_ref.as_ref(),
        );
        if let Some(h) = hash {
            cur.provider_token_hashes.insert(c.name.clone(), h);
        }
    }

    let connections = crate::connections::list(pool, store, who).await?;
    let connection_names: HashMap<String, String> = connections
        .iter()
        .map(|c| (c.connection.id.clone(), c.connection.name.clone()))
        .collect();
    for v in &connections {
        let c = &v.connection;
        let settings = match serde_json::to_value(&c.settings) {
            Ok(Value::Object(m)) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        let mut fields = v.secret_fields_set.clone();
        fields.sort();
        cur.doc.connections.push(doc::Connection {
            name: c.name.clone(),
            provider: c.provider.as_str().to_string(),
            capabilities: Some(
                c.capabilities
                    .iter()
                    .map(|k| k.as_str().to_string())
                    .collect(),
            ),
            settings,
            secrets: fields
                .iter()
                .map(|f| (f.clone(), env.take("CONNECTION", &c.name, f)))
                .collect(),
        });
        note(&mut cur, "connections", &c.name, &c.id, Some(&c.secret_ref));
    }

    let states = intended_states(pool).await?;
    let pipelines = crate::pipelines::list(pool, who).await?;
    let pipeline_names: HashMap<String, String> = pipelines
        .iter()
        .map(|p| (p.id.clone(), p.name.clone()))
        .collect();
    for p in &pipelines {
        let Some(state) = states.get(&p.connector_id) else {
            continue; // being deleted
        };
        cur.doc.pipelines.push(doc::Pipeline {
            name: p.name.clone(),
            source: name_of(&connection_names, &p.source_connection_id),
            kafka_cluster: name_of(&kafka_names, &p.kafka_cluster_id),
            connect_cluster: name_of(&connect_names, &p.connect_cluster_id),
            tables: p.tables.clone(),
            topic_prefix: Some(p.topic_prefix.clone()),
            partitions: Some(p.partitions),
            replication_factor: Some(p.replication_factor),
            retention_ms: p.retention_ms,
            snapshot_mode: Some(p.snapshot_mode.clone()),
            publication_mode: Some(p.publication_mode.clone()),
            heartbeat: Some(p.heartbeat),
            options: p
                .options
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
            state: state.clone(),
        });
        note(&mut cur, "pipelines", &p.name, &p.id, None);
    }

    for d in crate::deliveries::list(pool, who).await? {
        let Some(state) = states.get(&d.connector_id) else {
            continue;
        };
        let options: doc::DeliveryOptions =
            serde_json::from_value(d.options.clone()).unwrap_or_default();
        cur.doc.deliveries.push(doc::Delivery {
            name: d.name.clone(),
            pipeline: name_of(&pipeline_names, &d.pipeline_id),
            destination: name_of(&connection_names, &d.destination_connection_id),
            connect_cluster: Some(name_of(&connect_names, &d.connect_cluster_id)),
            topics: Some(d.topics.clone()),
            options,
            state: state.clone(),
        });
        note(&mut cur, "deliveries", &d.name, &d.id, None);
    }

    for r in crate::monitor::signals::rules(pool, who).await? {
        cur.doc.alert_rules.push(doc::AlertRule {
            kind: r.kind.clone(),
            threshold: r.threshold,
            for_secs: r.for_secs,
            enabled: r.enabled,
        });
        note(&mut cur, "alert_rules", &r.kind, &r.kind, None);
    }

    let mut hooks = crate::monitor::webhooks::list(pool, who).await?;
    hooks.sort_by(|a, b| a.url.cmp(&b.url).then(a.created_at.cmp(&b.created_at)));
    for (i, w) in hooks.iter().enumerate() {
        cur.doc.webhooks.push(doc::Webhook {
            url: w.url.clone(),
            secret: SecretSource::Env(format!("CLUECDC_WEBHOOK_{}_SECRET", i + 1)),
            tls_ca_certificate: w.tls_ca_certificate.clone(),
        });
        note(&mut cur, "webhooks", &w.url, &w.id, Some(&w.secret_ref));
    }

    for c in crate::monitor::channels::list(ctx, who).await? {
        let field = crate::monitor::channels::bindings(&c.kind)
            .first()
            .map_or("secret", |b| b.secret);
        cur.doc.alert_channels.push(doc::AlertChannel {
            name: c.name.clone(),
            kind: c.kind.clone(),
            settings: c.settings.clone(),
            secret: env.take("ALERT_CHANNEL", &c.name, field),
            rules: c.rules.clone(),
            severities: c.severities.clone(),
            group_wait_secs: Some(c.group_wait_secs),
            tls_ca_certificate: c.tls_ca_certificate.clone(),
            enabled: c.enabled,
        });
        note(
            &mut cur,
            "alert_channels",
            &c.name,
            &c.id,
            Some(&c.secret_ref),
        );
    }

    cur.doc.api_version = doc::API_VERSION.into();
    sort(&mut cur.doc);
    Ok(cur)
}

fn name_of(names: &HashMap<String, String>, id: &str) -> String {
    names.get(id).cloned().unwrap_or_else(|| id.to_string())
}

fn note(cur: &mut Current, kind: &'static str, name: &str, id: &str, secret_ref: Option<&String>) {
    cur.ids
        .entry(kind)
        .or_default()
        .insert(name.to_string(), id.to_string());
    if let Some(r) = secret_ref {
        cur.secret_refs
            .entry(kind)
            .or_default()
            .insert(name.to_string(), r.clone());
    }
}

/// The one order every document is written in.
pub fn sort(d: &mut Document) {
    d.kafka_clusters.sort_by(|a, b| a.name.cmp(&b.name));
    d.connect_clusters.sort_by(|a, b| a.name.cmp(&b.name));
    d.connections.sort_by(|a, b| a.name.cmp(&b.name));
    d.pipelines.sort_by(|a, b| a.name.cmp(&b.name));
    d.deliveries.sort_by(|a, b| a.name.cmp(&b.name));
    d.alert_rules.sort_by(|a, b| a.kind.cmp(&b.kind));
    d.webhooks.sort_by(|a, b| a.url.cmp(&b.url));
    d.alert_channels.sort_by(|a, b| a.name.cmp(&b.name));
}

/// The current setup as YAML.
pub async fn export(ctx: &Ctx, who: &Principal) -> Result<String> {
    Ok(doc::to_yaml(&current(ctx, who).await?.doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_names_follow_the_resource_name_and_stay_unique() {
        assert_eq!(
            env_name("CONNECTION", "shop db", "password"),
            "CLUECDC_CONNECTION_SHOP_DB_PASSWORD"
        );
        assert_eq!(
            env_name("KAFKA", "  prod--eu.1 ", "sasl_password"),
            "CLUECDC_KAFKA_PROD_EU_1_SASL_PASSWORD"
        );
        let mut e = EnvNames::new();
        assert_eq!(
            e.take("CONNECTION", "a b", "password"),
            SecretSource::Env("CLUECDC_CONNECTION_A_B_PASSWORD".into())
        );
        assert_eq!(
            e.take("CONNECTION", "a-b", "password"),
            SecretSource::Env("CLUECDC_CONNECTION_A_B_PASSWORD_2".into())
        );
    }
}
