//! The leak scan: reads back what Connect exposes (connector configs, task configs, status
//! traces) and raises an alert when a stored secret value appears there. It also warns when a
//! worker's version still serves the `tasks-config` endpoint.

use crate::db;
use std::sync::Arc;
use std::time::Duration;

use crate::db::Pool;

use super::alerts;
use crate::connect::version_serves_tasks_config;
use crate::secrets::store::SecretStore;

/// Values shorter than this are not searched for: they would match by chance.
pub const MIN_SECRET_LEN: usize = 6;

pub const KIND_LEAK: &str = "secret_leak";
pub const KIND_TASKS_CONFIG: &str = "connect_exposes_task_configs";

/// One finding, described without the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub connector: String,
    pub place: String,
    pub connection: String,
    pub field: String,
}

/// Searches `text` for any of the secrets; pure, for unit tests.
pub fn find_in<'a>(
    text: &str,
    secrets: &'a [(String, String, String)],
) -> Vec<&'a (String, String, String)> {
    secrets
        .iter()
        .filter(|(_, _, v)| v.len() >= MIN_SECRET_LEN && text.contains(v.as_str()))
        .collect()
}

/// The longest one cluster's part of a scan may take: a slow cluster holds up the next scan of
/// the others no longer than this.
const CLUSTER_BUDGET: Duration = Duration::from_secs(120);

/// One pass over every registered Connect cluster. Unreachable clusters are skipped (their
/// reachability is reported elsewhere).
pub async fn scan(pool: &Pool, store: &SecretStore) -> anyhow::Result<usize> {
    let refs: Vec<(String, String)> = db::query_as("SELECT secret_ref, name FROM connections")
        .fetch_all(pool)
        .await?;
    let names: std::collections::HashMap<String, String> = refs.into_iter().collect();
    // (connection name, field, value): held only for this pass.
    let secrets: Vec<(String, String, String)> = store
        .all_values()
        .await?
        .into_iter()
        .map(|(r, f, v)| (names.get(&r).cloned().unwrap_or(r), f, v.expose().clone()))
        .collect();
    // Every cluster at once: a slow cluster (each call answered in seconds, or timing out)
    // delays its own findings, not the others'.
    let clusters = crate::clusters::all(pool).await?;
    let scans = clusters.iter().map(|cluster| async {
        match tokio::time::timeout(CLUSTER_BUDGET, scan_cluster(pool, store, cluster, &secrets))
            .await
        {
            Ok(found) => found,
            Err(_) => {
                tracing::warn!(cluster = %cluster.name, budget_secs = CLUSTER_BUDGET.as_secs(), "leak scan of a slow Connect cluster did not finish in its budget; its alerts stay as they were until a scan does");
                Ok(0)
            }
        }
    });
    let mut total = 0;
    for found in futures::future::join_all(scans).await {
        total += found?;
    }
    Ok(total)
}

/// One cluster's part of [`scan`]: the findings it alerted on.
async fn scan_cluster(
    pool: &Pool,
    store: &SecretStore,
    cluster: &crate::clusters::ConnectCluster,
    secrets: &[(String, String, String)],
) -> anyhow::Result<usize> {
    // The cluster's own login and CA, like every other call to it.
    let Ok(client) = crate::clusters::connect::client_for(store, cluster).await else {
        return Ok(0);
    };
    let Ok(info) = client.server_info().await else {
        return Ok(0);
    };
    let scope = format!("{}/", cluster.name);
    if version_serves_tasks_config(&info.version) {
        alerts::fire(
            pool,
            KIND_TASKS_CONFIG,
            &cluster.name,
            "warning",
            &format!("Kafka Connect {} on {} still serves GET /connectors/{{name}}/tasks-config, which can show connector task configurations with resolved secrets. Upgrade the workers to Kafka 4.0 or later, or block that path in front of the REST API.", info.version, cluster.name),
        )
        .await?;
    } else {
        alerts::resolve_absent(pool, KIND_TASKS_CONFIG, &cluster.name, &[]).await?;
    }
    let Ok(expanded) = client.list_expanded().await else {
        return Ok(0);
    };
    let mut findings = Vec::new();
    for (name, e) in &expanded {
        let mut places: Vec<(String, String)> = Vec::new();
        if let Some(info) = &e.info {
            places.push((
                "connector config".into(),
                serde_json::to_string(&info.config).unwrap_or_default(),
            ));
        }
        if let Some(status) = &e.status {
            places.push((
                "connector status trace".into(),
                status.connector.trace.clone().unwrap_or_default(),
            ));
            for t in &status.tasks {
                places.push((
                    format!("task {} status trace", t.id),
                    t.trace.clone().unwrap_or_default(),
                ));
            }
        }
        if let Ok(tasks) = client.task_configs(name).await {
            places.push((
                "task configs".into(),
                serde_json::to_string(&tasks).unwrap_or_default(),
            ));
        }
        for (place, text) in places {
            for (connection, field, _) in find_in(&text, secrets) {
                findings.push(Finding {
                    connector: name.clone(),
                    place: place.clone(),
                    connection: connection.clone(),
                    field: field.clone(),
                });
            }
        }
    }
    // One alert per connector, naming every secret and every place it was seen.
    let mut by_connector: std::collections::BTreeMap<&str, (Vec<String>, Vec<String>)> =
        std::collections::BTreeMap::new();
    for f in &findings {
        let entry = by_connector.entry(f.connector.as_str()).or_default();
        let what = format!("the {} of connection {}", f.field, f.connection);
        if !entry.0.contains(&what) {
            entry.0.push(what);
        }
        if !entry.1.contains(&f.place) {
            entry.1.push(f.place.clone());
        }
    }
    let mut subjects = Vec::new();
    for (connector, (secrets, places)) in by_connector {
        let subject = format!("{scope}{connector}");
        let message = format!(
            "{} appears in plain text in the {} of connector {connector} on {}. Rotate that credential, then deploy the connector with a ${{cluecdc:…}} reference instead of the value.",
            capitalize(&secrets.join(" and ")),
            places.join(", "),
            cluster.name
        );
        alerts::fire(pool, KIND_LEAK, &subject, "critical", &message).await?;
        subjects.push(subject);
    }
    alerts::resolve_absent(pool, KIND_LEAK, &scope, &subjects).await?;
    Ok(findings.len())
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// Runs `scan` every `interval` until shutdown.
pub fn spawn(
    pool: Pool,
    state: Arc<crate::app::StateInner>,
    interval: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match scan(&pool, &state.ctx.secrets).await {
                Ok(0) => tracing::debug!("leak scan: nothing found"),
                Ok(n) => tracing::warn!(
                    findings = n,
                    "leak scan found stored secrets in Kafka Connect"
                ),
                Err(e) => tracing::warn!(error = format!("{e:#}"), "leak scan failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => break,
            }
        }
        tracing::debug!("leak scan stopped");
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_long_enough_are_searched_for() {
        let secrets = vec![
            (
                "pg".to_string(),
                "password".to_string(),
                "hunter2-long".to_string(),
            ),
            ("s3".to_string(), "x".to_string(), "abc".to_string()),
        ];
        assert_eq!(
            find_in(r#"{"database.password":"hunter2-long"}"#, &secrets).len(),
            1
        );
        assert!(find_in("abc abc abc", &secrets).is_empty());
        assert!(find_in(
            r#"{"database.password":"${cluecdc:sec_1:password}"}"#,
            &secrets
        )
        .is_empty());
    }
}
