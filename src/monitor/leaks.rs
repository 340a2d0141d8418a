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

/// The secrets found in `texts` (each searched on its own: a config's keys and values, a
/// trace), as (connection, field); pure, for unit tests.
pub fn find_in<'a>(
    texts: impl IntoIterator<Item = &'a str> + Clone,
    secrets: &[(String, String, String)],
) -> Vec<(String, String)> {
    secrets
        .iter()
        .filter(|(_, _, v)| {
            v.len() >= MIN_SECRET_LEN && texts.clone().into_iter().any(|t| t.contains(v.as_str()))
        })
        .map(|(c, f, _)| (c.clone(), f.clone()))
        .collect()
}

/// A config's keys and values, one text each.
fn entries(config: &BTreeMap<String, String>) -> impl Iterator<Item = &str> + Clone {
    config.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()])
}

/// The longest one cluster's part of a scan may take: a slow cluster holds up the next scan of
/// the others no longer than this. What it read before running out stays read (see
/// [`ClusterMemo`]), so the next scan goes on from there.
const CLUSTER_BUDGET: Duration = Duration::from_secs(120);

/// How many clusters a scan reads at once. Each holds its connectors' parsed list while it is
/// searched: all 20 clusters of 500 connectors at once were 40 MB of the process's peak heap
/// (heaptrack, 10,000 connectors), four at once are a fifth of that.
const CLUSTERS_AT_ONCE: usize = 4;

/// Task configs are one call per connector, so a scan reads them only for connectors that are
/// new or whose config or task count changed since the last read, plus the sweep: in turn, a
/// `1 / SWEEP_SHARE` of each cluster's other connectors (each connector's task configs are read
/// again at least every `SWEEP_SHARE` scans, 10 minutes at the default interval), and at least
/// [`MIN_SWEEP`] across the whole scan, so that a small installation reads all of them every
/// scan. (The minimum was once per cluster: 20 clusters of 500 read 2,000 a scan, not 1,000.)
const SWEEP_SHARE: usize = 10;
const MIN_SWEEP: usize = 100;

/// The pace of a scan's task-config reads, across its clusters. Unpaced, a scan at 10,000
/// connectors read them in one burst, up to 32 calls in flight (2,000 calls, 225 ms of CPU,
/// measured 2026-12-06), in the same minute as the offsets round; at this pace the 1,000 reads
/// of such a scan take 10 s. The first scan reads every connector's (100 s
/// at 10,000), which the budget and the memo allow for.
const TASK_READS_PER_SEC: u32 = 100;

/// What the scans remember between them, per cluster: each connector's fingerprint (config and
/// task count) and what its config and task configs showed, and where the sweep stands. A
/// config is searched again only when its fingerprint changes, and every one when the stored
/// secrets change.
#[derive(Default)]
pub struct Memo {
    /// A hash of every stored secret (value, field, connection name): when it changes, everything
    /// is searched again.
    secrets: u64,
    clusters: HashMap<String, ClusterMemo>,
}

#[derive(Default)]
struct ClusterMemo {
    /// The sweep's position: the name after which it goes on.
    cursor: String,
    seen: HashMap<String, Seen>,
}

/// One connector as the scans last saw it. Secrets as (connection, field).
struct Seen {
    fingerprint: u64,
    in_config: Vec<(String, String)>,
    /// The fingerprint its task configs were last read at (`None`: never read), and what they
    /// showed then: that stands until they are read again.
    tasks_read_at: Option<u64>,
    in_tasks: Vec<(String, String)>,
}

fn hash_of(parts: impl IntoIterator<Item = impl std::hash::Hash>) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// Spaces calls at least `gap` apart across every task that shares it.
struct Pace {
    gap: Duration,
    next: std::sync::Mutex<tokio::time::Instant>,
}

impl Pace {
    fn per_sec(n: u32) -> Self {
        Self {
            gap: Duration::from_secs(1) / n.max(1),
            next: std::sync::Mutex::new(tokio::time::Instant::now()),
        }
    }

    async fn wait(&self) {
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let at = (*next).max(tokio::time::Instant::now());
            *next = at + self.gap;
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

/// The connectors whose task configs this scan reads: every one with no reading or a changed
/// fingerprint, then the next `share` after `cursor` in name order (wrapping); also returns
/// where the sweep goes on next time. Pure, for unit tests.
pub fn to_read(
    fingerprints: &BTreeMap<String, u64>,
    read: &HashMap<String, u64>,
    cursor: &str,
    share: usize,
) -> (BTreeSet<String>, String) {
    let mut out: BTreeSet<String> = fingerprints
        .iter()
        .filter(|(name, fp)| read.get(*name) != Some(*fp))
        .map(|(name, _)| name.clone())
        .collect();
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

/// A cluster's sweep share: a `1 / SWEEP_SHARE` of its `n` connectors, and its part of
/// [`MIN_SWEEP`] shared by the scan's `clusters`. Pure, for unit tests.
pub fn sweep_share(n: usize, clusters: usize) -> usize {
    n.div_ceil(SWEEP_SHARE)
        .max(MIN_SWEEP.div_ceil(clusters.max(1)))
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
    let secrets_hash = hash_of(secrets.iter().map(|(c, f, v)| (c, f, v)));
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
    let pace = Pace::per_sec(TASK_READS_PER_SEC);
    let count = clusters.len();
    let scans = clusters
        .iter()
        .zip(memos.iter_mut())
        .map(|(cluster, (_, m))| {
            let (secrets, places, pace) = (&secrets, &places, &pace);
            async move {
                let Ok(_place) = places.acquire().await else {
                    return Ok(0);
                };
                let part = Part {
                    pool,
                    store,
                    cluster,
                    secrets,
                    pace,
                    clusters: count,
                };
                match tokio::time::timeout(CLUSTER_BUDGET, part.scan(m)).await {
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

/// One cluster's part of [`scan`], with what the whole scan shares.
struct Part<'a> {
    pool: &'a Pool,
    store: &'a SecretStore,
    cluster: &'a crate::clusters::ConnectCluster,
    secrets: &'a [(String, String, String)],
    pace: &'a Pace,
    /// How many clusters the scan visits: they share [`MIN_SWEEP`].
    clusters: usize,
}

impl Part<'_> {
    /// The findings it alerted on.
    async fn scan(&self, memo: &mut ClusterMemo) -> anyhow::Result<usize> {
        let (pool, cluster, secrets) = (self.pool, self.cluster, self.secrets);
        // The cluster's own login and CA, like every other call to it.
        let Ok(client) = crate::clusters::connect::client_for(self.store, cluster).await else {
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
        // Each connector's fingerprint; its config searched only when that changed. Status
        // traces change without it and are mostly empty: searched every scan.
        let mut fingerprints = BTreeMap::new();
        let mut findings = Vec::new();
        for (name, e) in &expanded {
            let config = e.info.as_ref().map(|i| &i.config);
            let tasks = e.status.as_ref().map_or(0, |s| s.tasks.len());
            let fp = hash_of([hash_of(config), tasks as u64]);
            fingerprints.insert(name.clone(), fp);
            if memo.seen.get(name).is_none_or(|s| s.fingerprint != fp) {
                let in_config = config.map_or_else(Vec::new, |c| find_in(entries(c), secrets));
                let old = memo.seen.remove(name);
                memo.seen.insert(
                    name.clone(),
                    Seen {
                        fingerprint: fp,
                        in_config,
                        tasks_read_at: old.as_ref().and_then(|o| o.tasks_read_at),
                        in_tasks: old.map(|o| o.in_tasks).unwrap_or_default(),
                    },
                );
            }
            let seen = &memo.seen[name];
            let found = |place: &str, list: &[(String, String)]| {
                list.iter()
                    .map(|(connection, field)| Finding {
                        connector: name.clone(),
                        place: place.to_string(),
                        connection: connection.clone(),
                        field: field.clone(),
                    })
                    .collect::<Vec<_>>()
            };
            findings.extend(found("connector config", &seen.in_config));
            if let Some(status) = &e.status {
                let trace = status.connector.trace.as_deref().unwrap_or_default();
                findings.extend(found("connector status trace", &find_in([trace], secrets)));
                for t in &status.tasks {
                    let trace = t.trace.as_deref().unwrap_or_default();
                    let place = format!("task {} status trace", t.id);
                    findings.extend(found(&place, &find_in([trace], secrets)));
                }
            }
        }
        drop(expanded);
        memo.seen.retain(|name, _| fingerprints.contains_key(name));
        let read: HashMap<String, u64> = memo
            .seen
            .iter()
            .filter_map(|(n, s)| Some((n.clone(), s.tasks_read_at?)))
            .collect();
        let share = sweep_share(fingerprints.len(), self.clusters);
        let (reading, next) = to_read(&fingerprints, &read, &memo.cursor, share);
        memo.cursor = next;
        // A few at a time and at the scan's pace. Each reading is kept as it comes: a cluster
        // that runs out of budget keeps what it read, and its next scan reads the rest.
        let calls: Vec<_> = reading
            .iter()
            .map(|name| {
                let (client, pace) = (&client, self.pace);
                async move {
                    pace.wait().await;
                    (name, client.task_configs(name).await.ok())
                }
            })
            .collect();
        let mut reads = futures::stream::iter(calls).buffer_unordered(8);
        while let Some((name, tasks)) = reads.next().await {
            let (Some(tasks), Some(seen)) = (tasks, memo.seen.get_mut(name)) else {
                continue;
            };
            seen.in_tasks = find_in(tasks.iter().flat_map(|t| entries(&t.config)), secrets);
            seen.tasks_read_at = Some(fingerprints[name]);
        }
        drop(reads);
        for (name, seen) in &memo.seen {
            for (connection, field) in &seen.in_tasks {
                findings.push(Finding {
                    connector: name.clone(),
                    place: "task configs".into(),
                    connection: connection.clone(),
                    field: field.clone(),
                });
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
        let share = sweep_share(1000, 1);
        let (all, _) = to_read(&fps, &HashMap::new(), "", share);
        assert_eq!(all.len(), 1000);
        // All read and unchanged: a share of 100 (a tenth), in name order from the cursor.
        let read: HashMap<String, u64> = names.iter().map(|n| (n.clone(), 1)).collect();
        let (first, next) = to_read(&fps, &read, "", share);
        assert_eq!(first.len(), share);
        assert_eq!(first.first().map(String::as_str), Some("c0000"));
        assert_eq!(next, "c0099");
        // Ten scans cover every connector once; the eleventh starts over.
        let (mut cursor, mut seen) = (String::new(), BTreeSet::new());
        for _ in 0..10 {
            let (some, next) = to_read(&fps, &read, &cursor, share);
            assert_eq!(some.len(), share);
            seen.extend(some);
            cursor = next;
        }
        assert_eq!(seen.len(), 1000);
        assert_eq!(
            to_read(&fps, &read, &cursor, share)
                .0
                .first()
                .map(String::as_str),
            Some("c0000")
        );
        // One changed config: read at once, beside the share.
        let mut changed = fps.clone();
        changed.insert("c0500".into(), 2);
        let (some, _) = to_read(&changed, &read, "", share);
        assert!(some.contains("c0500") && some.len() == 101);
        // Few connectors: all of them every scan (the share is at least 100).
        let few: BTreeMap<String, u64> = names[..40].iter().map(|n| (n.clone(), 1)).collect();
        assert_eq!(
            to_read(&few, &read, "c0010", sweep_share(40, 1)).0.len(),
            40
        );
    }

    #[test]
    fn the_sweep_is_a_tenth_of_each_cluster_and_at_least_a_hundred_across_the_scan() {
        // 20 clusters of 500: 50 each, 1,000 a scan (it was 100 each, 2,000).
        assert_eq!(sweep_share(500, 20), 50);
        // A small installation reads every connector's task configs every scan.
        assert_eq!(sweep_share(40, 1), 100);
        assert_eq!(sweep_share(10, 4), 25);
        // One large cluster: its tenth.
        assert_eq!(sweep_share(5000, 1), 500);
    }

    #[test]
    fn only_values_long_enough_are_searched_for_in_each_key_and_value() {
        let secrets = vec![
            (
                "pg".to_string(),
                "password".to_string(),
                "hunter2-long".to_string(),
            ),
            ("s3".to_string(), "x".to_string(), "abc".to_string()),
            (
                "kafka".to_string(),
                "jaas".to_string(),
                r#"pw"with\quote"#.to_string(),
            ),
        ];
        let config = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        let found = |c: &BTreeMap<String, String>| find_in(entries(c), &secrets);
        assert_eq!(
            found(&config("database.password", "hunter2-long")),
            vec![("pg".to_string(), "password".to_string())]
        );
        assert!(found(&config("abc", "abc abc")).is_empty());
        assert!(found(&config("database.password", "${cluecdc:sec_1:password}")).is_empty());
        // A value JSON would escape is found as it is (searching the serialized config did not).
        assert_eq!(
            found(&config("sasl.jaas.config", r#"password="pw"with\quote";"#)).len(),
            1
        );
        assert_eq!(
            find_in(["trace: hunter2-long at line 1"], &secrets).len(),
            1
        );
    }
}
