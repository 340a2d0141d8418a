//! The leak scan: reads back what Connect exposes (connector configs, task configs, status
//! traces) and raises an alert when a stored secret value appears there. It also warns when a
//! worker's version still serves the `tasks-config` endpoint.

use crate::db;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// How many clusters a scan reads at once. Each holds its connectors' configs parsed and as
/// text while it is searched: all 20 clusters of 500 connectors at once were 40 MB of the
/// process's peak heap (heaptrack, 10,000 connectors), four at once are a fifth of that.
const CLUSTERS_AT_ONCE: usize = 4;

/// Task configs are one call per connector, so a scan reads them only for connectors that are
/// new or whose config or task count changed since the last read, plus this share of the rest
/// (at least [`MIN_SWEEP`]) in turn: each connector's task configs are read again at least every
/// `SWEEP_SHARE` scans (10 minutes at the default interval). Before, 10,000 connectors cost
/// 10,000 calls a minute.
const SWEEP_SHARE: usize = 10;
const MIN_SWEEP: usize = 100;

/// What the scans remember between them: per cluster, each connector's fingerprint (config and
/// task count) and what its task configs showed when last read, and where the sweep stands.
#[derive(Default)]
pub struct Memo {
    /// A hash of every stored secret value: when it changes, every task config is read again.
    secrets: u64,
    clusters: HashMap<String, ClusterMemo>,
}

#[derive(Default)]
struct ClusterMemo {
    /// The sweep's position: the name after which it goes on.
    cursor: String,
    /// Connector → (fingerprint, the secrets its task configs showed: (connection, field)).
    tasks: HashMap<String, (u64, Vec<(String, String)>)>,
}

fn hash_of(parts: impl IntoIterator<Item = impl std::hash::Hash>) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// The connectors whose task configs this scan reads: every one with no reading or a changed
/// fingerprint, then the next `max(MIN_SWEEP, n / SWEEP_SHARE)` after `cursor` in name order
/// (wrapping); also returns where the sweep goes on next time. Pure, for unit tests.
pub fn to_read(
    fingerprints: &BTreeMap<String, u64>,
    read: &HashMap<String, u64>,
    cursor: &str,
) -> (BTreeSet<String>, String) {
    let mut out: BTreeSet<String> = fingerprints
        .iter()
        .filter(|(name, fp)| read.get(*name) != Some(*fp))
        .map(|(name, _)| name.clone())
        .collect();
    let share = MIN_SWEEP.max(fingerprints.len().div_ceil(SWEEP_SHARE));
    let after = fingerprints
        .range::<str, _>((
            std::ops::Bound::Excluded(cursor),
            std::ops::Bound::Unbounded,
        ))
        .chain(fingerprints.iter())
        .take(share.min(fingerprints.len()));
    let mut next = cursor.to_string();
    for (name, _) in after {
        out.insert(name.clone());
        next = name.clone();
    }
    (out, next)
}

/// One pass over every registered Connect cluster. Unreachable clusters are skipped (their
/// reachability is reported elsewhere).
pub async fn scan(pool: &Pool, store: &SecretStore, memo: &mut Memo) -> anyhow::Result<usize> {
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
    let secrets_hash = hash_of(secrets.iter().map(|(_, _, v)| v));
    if memo.secrets != secrets_hash {
        *memo = Memo {
            secrets: secrets_hash,
            ..Default::default()
        };
    }
    // [`CLUSTERS_AT_ONCE`] clusters at a time, each within its budget: a slow cluster (each
    // call answered in seconds, or timing out) holds one place and delays its own findings, not
    // the others'.
    let clusters = crate::clusters::all(pool).await?;
    memo.clusters
        .retain(|id, _| clusters.iter().any(|c| &c.id == id));
    let mut memos: Vec<(String, ClusterMemo)> = clusters
        .iter()
        .map(|c| {
            let m = memo.clusters.remove(&c.id).unwrap_or_default();
            (c.id.clone(), m)
        })
        .collect();
    let places = tokio::sync::Semaphore::new(CLUSTERS_AT_ONCE);
    let scans = clusters
        .iter()
        .zip(memos.iter_mut())
        .map(|(cluster, (_, m))| {
            let (secrets, places) = (&secrets, &places);
            async move {
                let Ok(_place) = places.acquire().await else {
                    return Ok(0);
                };
                match tokio::time::timeout(
                    CLUSTER_BUDGET,
                    scan_cluster(pool, store, cluster, secrets, m),
                )
                .await
                {
                    Ok(found) => found,
                    Err(_) => {
                        tracing::warn!(cluster = %cluster.name, budget_secs = CLUSTER_BUDGET.as_secs(), "leak scan of a slow Connect cluster did not finish in its budget; its alerts stay as they were until a scan does");
                        Ok(0)
                    }
                }
            }
        });
    let mut total = 0;
    let results = futures::future::join_all(scans).await;
    memo.clusters.extend(memos);
    for found in results {
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
    memo: &mut ClusterMemo,
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
    // Each connector's config as text, searched below and fingerprinted with its task count.
    let configs: BTreeMap<String, String> = expanded
        .iter()
        .map(|(name, e)| {
            let text = e
                .info
                .as_ref()
                .map(|i| serde_json::to_string(&i.config).unwrap_or_default())
                .unwrap_or_default();
            (name.clone(), text)
        })
        .collect();
    let fingerprints: BTreeMap<String, u64> = expanded
        .iter()
        .map(|(name, e)| {
            let tasks = e.status.as_ref().map_or(0, |s| s.tasks.len());
            (
                name.clone(),
                hash_of([configs[name].as_str(), &tasks.to_string()]),
            )
        })
        .collect();
    memo.tasks.retain(|name, _| fingerprints.contains_key(name));
    let read: HashMap<String, u64> = memo
        .tasks
        .iter()
        .map(|(n, (fp, _))| (n.clone(), *fp))
        .collect();
    let (reading, next) = to_read(&fingerprints, &read, &memo.cursor);
    memo.cursor = next;
    // Concurrently, a few at a time, like the reconciler's calls.
    let calls: Vec<_> = reading
        .iter()
        .map(|name| {
            let client = &client;
            async move {
                let text = client
                    .task_configs(name)
                    .await
                    .ok()
                    .map(|t| serde_json::to_string(&t).unwrap_or_default());
                (name.as_str(), text)
            }
        })
        .collect();
    let read: Vec<(&str, Option<String>)> = futures::stream::iter(calls)
        .buffer_unordered(8)
        .collect()
        .await;
    let task_configs: HashMap<&str, String> = read
        .into_iter()
        .filter_map(|(name, text)| Some((name, text?)))
        .collect();
    let mut findings = Vec::new();
    for (name, e) in &expanded {
        let mut places: Vec<(String, String)> = Vec::new();
        if e.info.is_some() {
            places.push(("connector config".into(), configs[name].clone()));
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
        // Not read this scan: what they showed when last read still stands.
        if let Some(text) = task_configs.get(name.as_str()) {
            let seen = find_in(text, secrets)
                .into_iter()
                .map(|(c, f, _)| (c.clone(), f.clone()))
                .collect();
            memo.tasks.insert(name.clone(), (fingerprints[name], seen));
        }
        if let Some((_, seen)) = memo.tasks.get(name) {
            for (connection, field) in seen {
                findings.push(Finding {
                    connector: name.clone(),
                    place: "task configs".into(),
                    connection: connection.clone(),
                    field: field.clone(),
                });
            }
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
        let mut memo = Memo::default();
        loop {
            match scan(&pool, &state.ctx.secrets, &mut memo).await {
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
    fn task_configs_are_read_when_new_or_changed_and_the_rest_in_turn() {
        let names: Vec<String> = (0..1000).map(|i| format!("c{i:04}")).collect();
        let fps: BTreeMap<String, u64> = names.iter().map(|n| (n.clone(), 1)).collect();
        // Nothing read yet: every connector.
        let (all, _) = to_read(&fps, &HashMap::new(), "");
        assert_eq!(all.len(), 1000);
        // All read and unchanged: a share of 100 (a tenth), in name order from the cursor.
        let read: HashMap<String, u64> = names.iter().map(|n| (n.clone(), 1)).collect();
        let (first, next) = to_read(&fps, &read, "");
        assert_eq!(first.len(), 100);
        assert_eq!(first.first().map(String::as_str), Some("c0000"));
        assert_eq!(next, "c0099");
        // Ten scans cover every connector once; the eleventh starts over.
        let (mut cursor, mut seen) = (String::new(), BTreeSet::new());
        for _ in 0..10 {
            let (some, next) = to_read(&fps, &read, &cursor);
            assert_eq!(some.len(), 100);
            seen.extend(some);
            cursor = next;
        }
        assert_eq!(seen.len(), 1000);
        assert_eq!(
            to_read(&fps, &read, &cursor).0.first().map(String::as_str),
            Some("c0000")
        );
        // One changed config: read at once, beside the share.
        let mut changed = fps.clone();
        changed.insert("c0500".into(), 2);
        let (some, _) = to_read(&changed, &read, "");
        assert!(some.contains("c0500") && some.len() == 101);
        // Few connectors: all of them every scan (the share is at least 100).
        let few: BTreeMap<String, u64> = names[..40].iter().map(|n| (n.clone(), 1)).collect();
        assert_eq!(to_read(&few, &read, "c0010").0.len(), 40);
    }

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
