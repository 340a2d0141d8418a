//! The reconciler: keeps every Connect cluster in the desired state.
//!
//! Level-triggered, like a Kubernetes controller. Each pass reloads desired connectors from
//! SQLite, lists each cluster's connectors ONCE (`?expand=status&expand=info`), computes a plan
//! with the pure `plan::compute`, and applies only the differences. Only the holder of the
//! `reconciler` lease acts, so `serve` and `worker` can run side by side. A cluster that does
//! not answer is backed off, its last observation kept (and shown with its age).
//!
//! Clusters are isolated: each cluster's part of a pass runs as its own task with its own
//! budget ([`CLUSTER_BUDGET`]). A pass waits for its clusters only up to [`SLOW_PASS`], and
//! not at all for one whose last pass was slow: a cluster answering in seconds, or not at all,
//! keeps working in the background (skipped by the passes that start meanwhile) while the
//! others' passes go on at their own period. Each cluster's passes are recorded (in this
//! process: [`crate::ctx::ClusterPasses`]; in the database: `last_pass_at`/`last_pass_ms`,
//! written with `observed_at` and after every slow pass) so a slow cluster shows as slow.

mod json_eq;
pub mod lease;
mod offsets;
pub mod plan;
pub mod policy;
pub mod workers;

use crate::db;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::Pool;
use futures::StreamExt;
use rand::Rng;
use serde::Serialize;
use serde_json::json;
use tokio::sync::watch;

use self::lease::{now_ms, Lease, RECONCILER};
use self::plan::{Config, Desired, DesiredState, Live, LiveTask, Plan, Step};
use self::policy::Policy;
use crate::audit::{self, Actor, Entry, Outcome};
use crate::clusters::ConnectCluster;
use crate::connect::{ConnectClient, ConnectError};
use crate::secrets::store::SecretStore;

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// A pass at least this often, even when nothing changed.
    pub interval: Duration,
    pub lease_ttl: Duration,
    pub policy: Policy,
    /// How often committed offsets are read (one GET per connector, so not every pass).
    pub offsets_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            interval: Duration::from_secs(10),
            lease_ttl: Duration::from_secs(15),
            policy: Policy::default(),
            offsets_interval: Duration::from_secs(60),
        }
    }
}

pub use crate::ctx::Handle;
use crate::ctx::{Unrecorded, RECORD_EVERY};

/// Records a desired-state change so a reconciler in any process runs soon.
pub async fn bump_desired_version<'e>(
    db: impl sqlx::Executor<'e, Database = crate::db::Db>,
) -> anyhow::Result<()> {
    db::query("UPDATE instance_meta SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key = 'desired_version'").execute(db).await?;
    Ok(())
}

async fn desired_version(pool: &Pool) -> i64 {
    read_desired_version(pool).await.unwrap_or(0)
}

async fn read_desired_version(pool: &Pool) -> Option<i64> {
    db::query_scalar::<String>("SELECT value FROM instance_meta WHERE key = 'desired_version'")
        .fetch_one(pool)
        .await
        .ok()
        .and_then(|v| v.parse().ok())
}

/// How long a cluster's loaded desired connectors serve passes at most, changed or not: the
/// bound on staleness should a write that matters to them ever not bump `desired_version`.
/// Each load keeps for a random part of it, at least half ([`reload_after`]).
const RELOAD_EVERY: Duration = Duration::from_secs(60);

/// How long one load of a cluster's desired connectors is kept: between half of
/// [`RELOAD_EVERY`] and all of it, at random, so that clusters loaded in one pass (all of them
/// at start) are not all loaded again in one later pass. At 10,000 connectors on 20 clusters
/// that pass read and parsed every connector at once, a burst of both cores' time once a
/// minute that the pages' p99 at 64 clients caught.
fn reload_after(rng: &mut impl Rng) -> Duration {
    RELOAD_EVERY.mul_f64(rng.gen_range(0.5..=1.0))
}

/// A cluster's desired connectors and their status rows as a full pass last loaded them.
///
/// Invariant: reused only while `desired_version` is the one read before that load, this
/// process held the lease throughout, none of its own passes has written a row for the
/// cluster since, and [`RELOAD_EVERY`] has not passed. Every writer of the connectors a pass
/// loads bumps `desired_version` (it is what wakes the reconciler, here or in another
/// replica); the reconciler's own writes drop the entry. An unchanged pass then reads
/// nothing from the database: at 10,000 connectors the load was half of its CPU.
struct Loaded {
    version: i64,
    at: Instant,
    /// [`reload_after`], drawn at the load.
    keep: Duration,
    desired: Arc<Vec<Desired>>,
    stored: Arc<HashMap<String, Stored>>,
}

pub struct Reconciler {
    pool: Pool,
    secrets: Arc<SecretStore>,
    settings: Settings,
    lease: Lease,
    handle: Arc<Handle>,
    /// Which slices of the offsets rounds are due (see [`offsets`]).
    offsets_clock: std::sync::Mutex<offsets::Clock>,
    /// By cluster id: each source connector's last offsets round that saw it RUNNING (see
    /// [`offsets::moving_sources`]).
    seen_running: std::sync::Mutex<HashMap<String, HashMap<String, u64>>>,
    /// Every connector (id → generation) as of the start of this process's last full pass, plus
    /// those created since by creates-only passes: a wake-up whose only change is new connectors
    /// against this is served without listing every connector again (see [`Reconciler::new_only`]).
    /// None until the first full pass, and whenever the lease was not ours.
    known: std::sync::Mutex<Option<HashMap<String, i64>>>,
    /// The `desired_version` read before the summary `known` was made from. Unlike [`Loaded`],
    /// the reconciler's own writes leave it standing: they only clear restart requests (not in
    /// `known`) and delete rows of deleted connectors, and a row gone from `known`'s view makes
    /// [`Reconciler::new_only`] answer "a full pass", never a wrong creates-only one.
    known_at: std::sync::Mutex<Option<i64>>,
    /// Marked after a pass commits a change the lists show (see [`crate::snapshots`]).
    writes: crate::snapshots::Writes,
    /// Each cluster's part of a pass still running (a slow cluster the pass stopped waiting
    /// for): the next passes skip it; shutdown aborts it.
    in_flight: std::sync::Mutex<HashMap<String, tokio::task::AbortHandle>>,
    /// What clusters' parts finished after their pass stopped waiting for them sent and failed:
    /// counted by the next pass (its record, its follow-ups).
    late: std::sync::Mutex<(Steps, i64)>,
    /// Per cluster id, the workers that did not answer in time last pass (see
    /// [`workers::Answer::Silent`]).
    silent: std::sync::Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    /// Clusters a pass skipped because their part of an earlier pass still ran: that part
    /// wakes the loop when it ends, or the change that pass came for waits for the interval.
    /// Locked inside `in_flight`'s lock, never the other way round.
    skipped: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Per cluster id (see [`Loaded`]).
    loaded: std::sync::Mutex<HashMap<String, Loaded>>,
}

pub fn holder_id(role: &str) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!(
        "{role}@{host}:{}:{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

impl Reconciler {
    pub fn new(
        pool: Pool,
        secrets: Arc<SecretStore>,
        settings: Settings,
        handle: Arc<Handle>,
        holder: String,
        writes: crate::snapshots::Writes,
    ) -> Self {
        let lease = Lease::new(
            pool.clone(),
            RECONCILER,
            holder,
            settings.lease_ttl.as_millis() as i64,
        );
        Reconciler {
            pool,
            secrets,
            settings,
            lease,
            handle,
            offsets_clock: Default::default(),
            seen_running: Default::default(),
            known: std::sync::Mutex::new(None),
            known_at: std::sync::Mutex::new(None),
            writes,
            in_flight: Default::default(),
            late: Default::default(),
            silent: std::sync::Mutex::new(HashMap::new()),
            skipped: Default::default(),
            loaded: Default::default(),
        }
    }

    pub fn spawn(self, mut shutdown: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        let this = Arc::new(self);
        tokio::spawn(async move {
            let this = &this;
            let mut last_full: Option<Instant> = None;
            let mut seen_version = -1;
            // A wake-up from this process (it may come without a version change).
            let mut woken = false;
            // When the last creates-only pass ran: the spacing of a burst's creates.
            let mut last_creates: Option<Instant> = None;
            // After a pass that changed something: the pause before the next follow-up pass
            // (see FOLLOW_UPS), and when it is due.
            let mut follow_up: Option<(Duration, Instant)> = None;
            loop {
                // Renewed once a third of its lifetime has passed, not at every tick.
                let held = this.lease.fresh()
                    || match this.lease.try_hold().await {
                        Ok(h) => h,
                        Err(e) => {
                            tracing::warn!(
                                error = format!("{e:#}"),
                                "cannot read the reconciler lease"
                            );
                            false
                        }
                    };
                if !held {
                    *this.known.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    this.loaded
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clear();
                }
                let version = desired_version(&this.pool).await;
                let changed = version != seen_version || woken;
                let full_due = last_full.is_none_or(|t| t.elapsed() >= this.settings.interval)
                    || follow_up.is_some_and(|(_, at)| Instant::now() >= at);
                if held && (full_due || changed) {
                    seen_version = version;
                    woken = false;
                    let new_only = match full_due {
                        true => None,
                        false => this.new_only().await.unwrap_or_else(|e| {
                            tracing::warn!(
                                error = format!("{e:#}"),
                                "cannot read the desired connectors"
                            );
                            None
                        }),
                    };
                    let (steps, first_look) = match new_only {
                        Some(new) => (this.guarded(this.creates_pass(new)).await, {
                            // The burst is over when no create came for twice its spacing.
                            let now = Instant::now();
                            let spacing = last_creates.map(|t| now.duration_since(t));
                            last_creates = Some(now);
                            spacing.map_or(CREATES_FOLLOW_UP[1], |d| {
                                (d * 2).clamp(CREATES_FOLLOW_UP[0], CREATES_FOLLOW_UP[1])
                            })
                        }),
                        None => {
                            last_full = Some(Instant::now());
                            (this.guarded(this.pass()).await, FOLLOW_UPS[0])
                        }
                    };
                    let pause = if steps.failed > 0 {
                        // Retried at the next tick, not in a tight loop.
                        Some(TICK)
                    } else if steps.sent > 0 {
                        Some(first_look)
                    } else {
                        follow_up
                            .map(|(d, _)| d * 2)
                            .filter(|d| *d <= FOLLOW_UPS[1])
                    };
                    follow_up = pause.map(|d| (d, Instant::now() + d));
                }
                let tick = follow_up.map_or(TICK, |(_, at)| {
                    at.saturating_duration_since(Instant::now()).min(TICK)
                });
                tokio::select! {
                    _ = tokio::time::sleep(tick) => {}
                    _ = this.handle.wake.notified() => { woken = true; }
                    _ = shutdown.changed() => break,
                }
            }
            for (_, task) in this
                .in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain()
            {
                task.abort();
            }
            this.lease.release().await;
            tracing::debug!("reconciler stopped");
        })
    }

    /// A pass that keeps renewing the lease while it runs, and stops at once if the lease is
    /// lost: a slow Connect must not let the lease lapse under a pass still making changes.
    /// Returns the steps the pass sent to Connect.
    async fn guarded(
        &self,
        pass: impl std::future::Future<Output = anyhow::Result<Steps>>,
    ) -> Steps {
        tokio::select! {
            result = pass => match result {
                Ok(steps) => steps,
                Err(e) => {
                    tracing::warn!(error = format!("{e:#}"), "reconcile pass failed");
                    Steps::default()
                }
            },
            _ = keep_renewing(&self.lease, self.settings.lease_ttl) => {
                tracing::warn!("lost the reconciler lease mid-pass; stopped before the next change");
                Steps::default()
            }
        }
    }

    async fn client(&self, cluster: &ConnectCluster) -> ConnectClient {
        let auth = match (&cluster.basic_auth_user, &cluster.secret_ref) {
            (Some(user), Some(r)) => self
                .secrets
                .get(r, "basic_auth_password")
                .await
                .ok()
                .flatten()
                .map(|p| (user.clone(), p.expose().clone())),
            _ => None,
        };
        ConnectClient::with_agent(
            &cluster.url,
            auth,
            &format!("cluecdc-reconciler ({})", self.lease.holder),
        )
        .trusting(cluster.tls_ca_certificate.as_deref())
    }

    /// Asks every worker Connect's statuses name (and every one known lost) whether it answers,
    /// records the lost ones (`workers`), and answers `live` with what is on them UNASSIGNED.
    async fn watch_workers(
        &self,
        cluster: &ConnectCluster,
        mut live: BTreeMap<String, Live>,
    ) -> anyhow::Result<BTreeMap<String, Live>> {
        let named = workers::referenced(&live);
        let known = workers::lost(&self.pool, &cluster.id).await?;
        let ask: std::collections::BTreeSet<String> = named
            .keys()
            .cloned()
            .chain(known.iter().map(|k| k.worker_id.clone()))
            .collect();
        let base = self.client(cluster).await;
        let answers = workers::probe(&cluster.url, &ask, |url| base.at(url)).await;
        let lost = {
            let mut silent = self.silent.lock().unwrap_or_else(|e| e.into_inner());
            // A worker already lost stays lost while it does not answer, slowly or at all.
            let mut before = silent.remove(&cluster.id).unwrap_or_default();
            before.extend(known.iter().map(|k| k.worker_id.clone()));
            let now_silent: std::collections::BTreeSet<String> = answers
                .iter()
                .filter(|(_, a)| *a == workers::Answer::Silent)
                .map(|(w, _)| w.clone())
                .collect();
            if !now_silent.is_empty() {
                silent.insert(cluster.id.clone(), now_silent);
            }
            workers::lost_among(&answers, &before)
        };
        let (write, forget) = workers::changes(&known, &named, &lost, now_ms());
        for w in &write {
            if !known.iter().any(|k| k.worker_id == w.worker_id) {
                tracing::warn!(cluster = %cluster.name, worker = %w.worker_id, tasks = w.tasks, "Connect worker lost: it does not answer; its tasks wait for the group to move them");
            }
        }
        if !write.is_empty() || !forget.is_empty() {
            workers::store(&self.pool, &cluster.id, &write, &forget).await?;
            self.writes.mark();
        }
        workers::mark_lost(&mut live, &lost);
        Ok(live)
    }

    /// One pass over every cluster; returns the steps it sent to Connect.
    ///
    /// Each cluster's part runs as its own task (see the module comment): the pass waits for
    /// those whose last part was not slow, up to [`SLOW_PASS`]; the others finish in the
    /// background, and what they did is counted by the pass after they end.
    pub async fn pass(self: &Arc<Self>) -> anyhow::Result<Steps> {
        let started = Instant::now();
        let started_at = crate::time::now();
        let version = read_desired_version(&self.pool).await;
        // Read before any cluster's desired connectors: whatever it holds, this pass handles. It
        // is read again only when connectors may have changed since the summary `known` holds
        // was read: every writer bumps `desired_version` (see [`Loaded`] and `known_at`). At
        // 10,000 connectors the read was a sixth of an unchanged pass's CPU.
        let current = version.is_some()
            && *self.known_at.lock().unwrap_or_else(|e| e.into_inner()) == version
            && self
                .known
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some();
        let known: Option<HashMap<String, i64>> = if current {
            None
        } else {
            Some(
                self.summary()
                    .await?
                    .into_iter()
                    .map(|r| (r.id, r.generation))
                    .collect(),
            )
        };
        let clusters = crate::clusters::all(&self.pool).await?;
        let read_offsets = self
            .offsets_clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(
                Instant::now(),
                self.settings.offsets_interval,
                self.settings.interval,
            );
        let mut waiting = futures::stream::FuturesUnordered::new();
        let mut visited = 0;
        for cluster in clusters {
            if cluster.next_attempt_at.is_some_and(|t| now_ms() < t)
                || self.skip_in_flight(&cluster.id)
            {
                continue;
            }
            visited += 1;
            let slow = self.was_slow(&cluster.id);
            let (tx, rx) = tokio::sync::oneshot::channel();
            let this = Arc::clone(self);
            let id = cluster.id.clone();
            let task = tokio::spawn(async move {
                let outcome = this.run_cluster(&cluster, read_offsets, version).await;
                let skipped = {
                    let mut flights = this.in_flight.lock().unwrap_or_else(|e| e.into_inner());
                    flights.remove(&cluster.id);
                    this.skipped
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&cluster.id)
                };
                if skipped {
                    this.handle.wake();
                }
                if let Err(outcome) = tx.send(outcome) {
                    this.count_late(outcome);
                }
            });
            self.in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, task.abort_handle());
            if !slow {
                waiting.push(rx);
            }
        }
        let (mut steps, mut errors) = (Steps::default(), 0i64);
        let mut add = |(n, e): (Steps, i64)| {
            steps.sent += n.sent;
            steps.failed += n.failed;
            errors += e;
        };
        let deadline = tokio::time::sleep(SLOW_PASS);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = waiting.next() => match next {
                    Some(Ok(outcome)) => add(outcome),
                    // Aborted (shutdown): nothing to count.
                    Some(Err(_)) => {}
                    None => break,
                },
                _ = &mut deadline => break,
            }
        }
        // Those still running are counted by a later pass, once they end.
        for rx in waiting.iter_mut() {
            rx.close();
            if let Ok(outcome) = rx.try_recv() {
                add(outcome);
            }
        }
        add(std::mem::take(
            &mut *self.late.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        if let Some(known) = known {
            *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some(known);
            *self.known_at.lock().unwrap_or_else(|e| e.into_inner()) = version;
        }
        self.record(started, started_at, visited, steps, errors)
            .await?;
        Ok(steps)
    }

    /// One cluster's part of a pass, within [`CLUSTER_BUDGET`], recorded in
    /// [`crate::ctx::ClusterPasses`]: what it sent and failed, and 1 if it failed.
    async fn run_cluster(
        &self,
        cluster: &ConnectCluster,
        read_offsets: Option<offsets::Slices>,
        version: Option<i64>,
    ) -> (Steps, i64) {
        let started = Instant::now();
        self.passes_of(&cluster.id, |p| p.running_since = Some(started));
        let result = tokio::time::timeout(
            CLUSTER_BUDGET,
            self.reconcile_cluster(cluster, read_offsets, version, started),
        )
        .await
        .unwrap_or_else(|_| {
            Err(ClusterError::Connect(ConnectError::Unreachable {
                url: cluster.url.clone(),
                reason: format!(
                    "its part of a reconcile pass took over {} s; it is tried again after a backoff",
                    CLUSTER_BUDGET.as_secs()
                ),
            }))
        });
        let outcome = match result {
            Ok(n) => (n, 0),
            Err(ClusterError::Connect(e)) => {
                if let Err(e) = self.record_unreachable(cluster, &e).await {
                    tracing::warn!(cluster = %cluster.name, error = format!("{e:#}"), "cannot record that a Connect cluster is unreachable; the next pass tries again");
                }
                (Steps::default(), 1)
            }
            Err(ClusterError::Store(e)) => {
                tracing::warn!(cluster = %cluster.name, error = format!("{e:#}"), "reconcile pass: ClueCDC's database refused a read or write; the next pass tries again");
                (Steps::default(), 1)
            }
        };
        let took = started.elapsed();
        if took >= SLOW_PASS {
            tracing::info!(cluster = %cluster.name, took_ms = took.as_millis() as u64, "slow Connect cluster: its pass ran on its own, the others' did not wait");
        }
        self.passes_of(&cluster.id, |p| {
            p.passes += 1;
            p.running_since = None;
            p.last_ended = Some((Instant::now(), took));
            p.starts.push_back(started);
            while p.starts.len() > crate::ctx::PERIOD_WINDOW {
                p.starts.pop_front();
            }
        });
        outcome
    }

    fn passes_of(&self, cluster_id: &str, f: impl FnOnce(&mut crate::ctx::ClusterPasses)) {
        let mut all = self
            .handle
            .clusters
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f(all.entry(cluster_id.to_string()).or_default());
    }

    /// Its last part of a pass took [`SLOW_PASS`] or longer (or one has run that long).
    fn was_slow(&self, cluster_id: &str) -> bool {
        self.handle
            .clusters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster_id)
            .is_some_and(|p| {
                p.last_ended.is_some_and(|(_, took)| took >= SLOW_PASS)
                    || p.running_since.is_some_and(|t| t.elapsed() >= SLOW_PASS)
            })
    }

    /// Its part of an earlier pass is still running.
    /// True while the cluster's part of an earlier pass still runs (a slow cluster): this pass
    /// leaves it alone, and that part wakes the loop when it ends (see `skipped`).
    fn skip_in_flight(&self, cluster_id: &str) -> bool {
        let flights = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let busy = flights.get(cluster_id).is_some_and(|t| !t.is_finished());
        if busy {
            self.skipped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(cluster_id.to_string());
        }
        busy
    }

    fn in_flight(&self, cluster_id: &str) -> bool {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster_id)
            .is_some_and(|t| !t.is_finished())
    }

    /// A cluster's part that ended after its pass stopped waiting: the next pass counts it,
    /// and one comes at once if it sent anything (its follow-ups observe what it did).
    fn count_late(&self, (n, e): (Steps, i64)) {
        {
            let mut late = self.late.lock().unwrap_or_else(|e| e.into_inner());
            late.0.sent += n.sent;
            late.0.failed += n.failed;
            late.1 += e;
        }
        if n.sent > 0 {
            self.handle.wake();
        }
    }

    /// Every connector's id, generation, desired state and restart request: what a wake-up
    /// is compared with (no configs, so cheap at thousands of connectors).
    async fn summary(&self) -> anyhow::Result<Vec<SummaryRow>> {
        Ok(db::query_as(
            "SELECT id, connect_cluster_id, generation, desired_state, restart_requested_by IS NOT NULL AS restart FROM connectors",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// When the only change since the last full pass is new connectors that no pass has acted
    /// on (no status row, not deleted), on clusters that answer and are ClueCDC's to change:
    /// their ids. Anything else (a changed generation, a delete, a restart request, a connector
    /// gone, a wake-up with nothing new, a new one on a cluster backing off) is None: a full
    /// pass. A burst of creates (a pipeline per request) then costs one create call each
    /// instead of one list of every connector each, and the follow-up pass that observes them
    /// runs once the burst pauses (or at the interval).
    async fn new_only(&self) -> anyhow::Result<Option<Vec<(ConnectCluster, Vec<Desired>)>>> {
        let Some(known) = self.known.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return Ok(None);
        };
        let rows = self.summary().await?;
        let mut new: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in &rows {
            match known.get(&r.id) {
                Some(g) if *g == r.generation && !r.restart => {}
                Some(_) => return Ok(None),
                None if r.desired_state == "deleted" || r.restart => return Ok(None),
                None => new
                    .entry(r.connect_cluster_id.clone())
                    .or_default()
                    .push(r.id.clone()),
            }
        }
        let added: usize = new.values().map(Vec::len).sum();
        if added == 0 || rows.len() != known.len() + added {
            return Ok(None);
        }
        let clusters = crate::clusters::all(&self.pool).await?;
        let mut batches = Vec::new();
        for (cluster_id, ids) in new {
            let Some(cluster) = clusters.iter().find(|c| c.id == cluster_id) else {
                return Ok(None);
            };
            let backing_off = cluster.next_attempt_at.is_some_and(|t| now_ms() < t);
            // A slow cluster's creates would hold up the others': a full pass runs it apart.
            let apart = self.in_flight(&cluster_id) || self.was_slow(&cluster_id);
            if backing_off || apart || cluster.managed_by == "strimzi" {
                return Ok(None);
            }
            let (desired, _) = self
                .load_desired(DesiredOf::NeverActedOn(&cluster_id, &ids))
                .await?;
            if desired.len() != ids.len() {
                return Ok(None);
            }
            batches.push((cluster.clone(), desired));
        }
        Ok(Some(batches))
    }

    /// Creates connectors no pass has acted on, without listing the cluster first (see
    /// [`Reconciler::new_only`]): the plan for each is its create, as a full pass would make
    /// it for a connector Connect does not list; the follow-up full pass observes the result.
    /// A create Connect refuses (a name it already has) is a failed step, and the pass after
    /// it is a full one.
    async fn creates_pass(
        &self,
        batches: Vec<(ConnectCluster, Vec<Desired>)>,
    ) -> anyhow::Result<Steps> {
        let started = Instant::now();
        let started_at = crate::time::now();
        let mut steps = Steps::default();
        for (cluster, desired) in &batches {
            let client = self.client(cluster).await;
            let plan = plan::compute(
                desired,
                BTreeMap::new(),
                now_ms(),
                &self.settings.policy,
                false,
                &mut || 1.0,
            );
            let n = self
                .apply(
                    &client,
                    cluster,
                    desired,
                    &HashMap::new(),
                    &plan,
                    Scope::NewOnly,
                )
                .await?;
            steps.sent += n.sent;
            steps.failed += n.failed;
        }
        if let Some(known) = self
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            for d in batches.iter().flat_map(|(_, d)| d) {
                known.insert(d.id.clone(), d.generation);
            }
        }
        self.record(started, started_at, batches.len(), steps, 0)
            .await?;
        Ok(steps)
    }

    /// Writes a pass's record (with the unchanged passes before it) when it acted, failed, or
    /// [`RECORD_EVERY`] has passed; counts it in this process either way.
    async fn record(
        &self,
        started: Instant,
        started_at: String,
        clusters: usize,
        steps: Steps,
        errors: i64,
    ) -> anyhow::Result<()> {
        let actions = steps.sent;
        self.handle.passes.fetch_add(1, Ordering::Relaxed);
        self.handle
            .actions
            .fetch_add(actions as u64, Ordering::Relaxed);
        let totals = {
            let mut u = self
                .handle
                .unrecorded
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            u.passes += 1;
            u.actions += actions;
            u.errors += errors;
            let due = actions > 0
                || errors > 0
                || u.recorded_at.is_none_or(|t| t.elapsed() >= RECORD_EVERY);
            if !due {
                return Ok(());
            }
            let totals = (u.passes, u.actions, u.errors);
            *u = Unrecorded {
                recorded_at: Some(Instant::now()),
                ..Default::default()
            };
            totals
        };
        // The pass's record, with the unchanged passes before it, in one commit; fenced, so a
        // holder that lost the lease meanwhile records nothing.
        let mut tx = self.lease.begin().await?;
        db::query("INSERT INTO reconcile_passes (holder, started_at, duration_ms, clusters, actions, errors) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(&self.lease.holder)
            .bind(started_at)
            .bind(started.elapsed().as_millis() as i64)
            .bind(clusters as i64)
            .bind(actions)
            .bind(errors)
            .execute(&mut *tx)
            .await?;
        for (name, add) in [
            ("reconcile_passes", totals.0),
            ("reconcile_actions", totals.1),
            ("reconcile_errors", totals.2),
        ] {
            db::query("INSERT INTO counters (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value").bind(name).bind(add).execute(&mut *tx).await?;
        }
        db::query("DELETE FROM reconcile_passes WHERE id <= (SELECT MAX(id) - 1000 FROM reconcile_passes)").execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Connect did not answer: keep the last observation, back off (capped, jittered).
    async fn record_unreachable(
        &self,
        cluster: &ConnectCluster,
        e: &ConnectError,
    ) -> anyhow::Result<()> {
        let failures: i64 = db::query_scalar("SELECT failures FROM connect_clusters WHERE id = $1")
            .bind(&cluster.id)
            .fetch_one(&self.pool)
            .await?;
        let attempt = (failures + 1) as u32;
        let backoff = Duration::from_secs(1)
            .saturating_mul(1 << attempt.min(6))
            .min(Duration::from_secs(60))
            .mul_f64(rand::thread_rng().gen_range(0.5..=1.0));
        tracing::warn!(cluster = %cluster.name, error = %e, retry_in_ms = backoff.as_millis() as u64, "Connect cluster unreachable");
        // Only if the cluster is still the one this pass tried: a PATCH made meanwhile cleared
        // the error, and the old address's failure must not come back over the new address.
        // Fenced: a holder paused mid-call wakes to its call's timeout, and its backoff would
        // keep its successor off the cluster for up to a minute.
        let mut tx = self.lease.begin().await?;
        db::query("UPDATE connect_clusters SET failures = failures + 1, last_error = $1, next_attempt_at = $2 WHERE id = $3 AND url = $4 AND updated_at = $5")
            .bind(e.to_string())
            .bind(now_ms() + backoff.as_millis() as i64)
            .bind(&cluster.id)
            .bind(&cluster.url)
            .bind(&cluster.updated_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        // Its connectors now show UNKNOWN.
        self.writes.mark();
        Ok(())
    }

    /// The cluster's desired connectors, with the status row each had after the last pass
    /// (by id), so that an unchanged observation is not written again.
    async fn load_desired(
        &self,
        of: DesiredOf<'_>,
    ) -> anyhow::Result<(Vec<Desired>, HashMap<String, Stored>)> {
        const SELECT: &str = "SELECT c.id, c.name, c.config, c.desired_state, c.generation, c.restart_requested_by, c.restart_only_failed,
                    s.applied_config, s.restart_attempts, s.next_restart_at, s.healthy_since, s.applied_at,
                    s.observed_generation, s.phase, s.connector_state, s.tasks, s.trace, s.message, s.live_config, s.offsets_at IS NOT NULL AS offsets_read, v.trace AS verdict
             FROM connectors c LEFT JOIN connector_status s ON s.connector_id = c.id LEFT JOIN connector_verdicts v ON v.connector_id = c.id";
        let rows: Vec<DesiredRow> = match of {
            DesiredOf::Cluster(cluster_id) => {
                db::query_as(&format!(
                    "{SELECT} WHERE c.connect_cluster_id = $1 ORDER BY c.name"
                ))
                .bind(cluster_id)
                .fetch_all(&self.pool)
                .await?
            }
            DesiredOf::NeverActedOn(cluster_id, ids) => {
                if ids.is_empty() {
                    return Ok((vec![], HashMap::new()));
                }
                let sql = format!("{SELECT} WHERE c.connect_cluster_id = $1 AND s.connector_id IS NULL AND c.desired_state <> 'deleted' AND c.id IN ({}) ORDER BY c.name", db::placeholders(2, ids.len()));
                let mut q = db::query_as(&sql).bind(cluster_id);
                for id in ids {
                    q = q.bind(id);
                }
                q.fetch_all(&self.pool).await?
            }
        };
        let mut stored = HashMap::new();
        let mut desired = Vec::with_capacity(rows.len());
        for r in rows {
            let (Ok(config), Some(state)) = (
                serde_json::from_str(&r.config),
                DesiredState::parse(&r.desired_state),
            ) else {
                continue;
            };
            if let Some(phase) = r.phase {
                let live_is_desired = json_eq::same(r.live_config.as_deref(), Some(&config));
                stored.insert(
                    r.id.clone(),
                    Stored {
                        live_is_desired,
                        observed_generation: r.observed_generation.unwrap_or(0),
                        phase,
                        connector_state: r.connector_state,
                        tasks: r.tasks,
                        trace: r.trace,
                        message: r.message,
                        live_config: r.live_config,
                        offsets_read: r.offsets_read,
                    },
                );
            }
            desired.push(Desired {
                config,
                state,
                applied_config: r.applied_config.and_then(|a| serde_json::from_str(&a).ok()),
                restart_attempts: r.restart_attempts.unwrap_or(0) as u32,
                next_restart_at: r.next_restart_at,
                healthy_since: r.healthy_since,
                restart_requested: r.restart_requested_by,
                restart_only_failed: r.restart_only_failed,
                applied_at: r.applied_at,
                verdict: r.verdict,
                id: r.id,
                name: r.name,
                generation: r.generation,
            });
        }
        Ok((desired, stored))
    }

    /// The cluster's desired connectors and status rows: as loaded before, while still valid
    /// (see [`Loaded`]), else loaded now. `version`: `desired_version` as read before this
    /// pass (None: unknown, so loaded and not kept).
    async fn desired_of(
        &self,
        cluster_id: &str,
        version: Option<i64>,
    ) -> anyhow::Result<(Arc<Vec<Desired>>, Arc<HashMap<String, Stored>>)> {
        if let Some(l) = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster_id)
            .filter(|l| Some(l.version) == version && l.at.elapsed() < l.keep)
        {
            return Ok((Arc::clone(&l.desired), Arc::clone(&l.stored)));
        }
        let (desired, stored) = self.load_desired(DesiredOf::Cluster(cluster_id)).await?;
        let (desired, stored) = (Arc::new(desired), Arc::new(stored));
        if let Some(version) = version {
            self.loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    cluster_id.to_string(),
                    Loaded {
                        version,
                        at: Instant::now(),
                        keep: reload_after(&mut rand::thread_rng()),
                        desired: Arc::clone(&desired),
                        stored: Arc::clone(&stored),
                    },
                );
        }
        Ok((desired, stored))
    }

    /// Drops what [`Reconciler::desired_of`] keeps for the cluster: this process wrote to it.
    fn forget_loaded(&self, cluster_id: &str) {
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster_id);
    }

    async fn reconcile_cluster(
        &self,
        cluster: &ConnectCluster,
        read_offsets: Option<offsets::Slices>,
        version: Option<i64>,
        started: Instant,
    ) -> Result<Steps, ClusterError> {
        let client = self.client(cluster).await;
        let (desired, stored) = self
            .desired_of(&cluster.id, version)
            .await
            .map_err(db_err)?;
        // The one list call of this pass for this cluster.
        let expanded = client.list_expanded().await?;
        // Source connectors whose committed offsets move: pipelines' freshness and binlog
        // positions are read from them (see `offsets`).
        let moving: HashSet<String> = match read_offsets {
            Some(slices) => {
                let mut seen = self.seen_running.lock().unwrap_or_else(|e| e.into_inner());
                offsets::moving_sources(
                    seen.entry(cluster.id.clone()).or_default(),
                    expanded.iter().filter_map(|(name, e)| {
                        let (status, info) = (e.status.as_ref()?, e.info.as_ref()?);
                        (info.kind == "source")
                            .then_some((name.as_str(), status.connector.state == "RUNNING"))
                    }),
                    slices.round(),
                )
            }
            None => HashSet::new(),
        };
        let live: BTreeMap<String, Live> = expanded
            .into_iter()
            .filter_map(|(name, e)| {
                let status = e.status?;
                let info = e.info?;
                Some((
                    name,
                    Live {
                        config: info.config,
                        state: status.connector.state,
                        worker_id: status.connector.worker_id,
                        trace: status.connector.trace,
                        tasks: status
                            .tasks
                            .into_iter()
                            .map(|t| LiveTask {
                                id: t.id,
                                state: t.state,
                                worker_id: t.worker_id,
                                trace: t.trace,
                            })
                            .collect(),
                    },
                ))
            })
            .collect();
        // Workers that stopped answering: what Connect still shows on them is UNASSIGNED.
        let live = self.watch_workers(cluster, live).await.map_err(db_err)?;
        // The connectors whose offsets this round reads (the plan takes `live` apart).
        let due: Vec<&Desired> = match read_offsets {
            Some(slices) => desired
                .iter()
                .filter(|d| {
                    live.contains_key(&d.name)
                        && offsets::due(
                            &d.name,
                            moving.contains(&d.name),
                            stored.get(&d.id).is_some_and(|s| s.offsets_read),
                            &slices,
                        )
                })
                .collect(),
            None => Vec::new(),
        };
        let observe_only = cluster.managed_by == "strimzi";
        let plan = {
            let mut rng = rand::thread_rng();
            plan::compute(
                &desired,
                live,
                now_ms(),
                &self.settings.policy,
                observe_only,
                &mut || rng.gen_range(0.5..=1.0),
            )
        };
        let applied = self
            .apply(&client, cluster, &desired, &stored, &plan, Scope::Cluster)
            .await
            .map_err(db_err)?;
        // What Connect listed (every connector's config, parsed, now in the plan) is freed
        // before the offsets reads, which are the longest part of such a pass: 20 clusters
        // hold them at once.
        drop(plan);
        // Connect answered. Confirming that every pass would be a commit a second for nothing:
        // the confirmation only has to stay well inside STALE_AFTER_SECS. A slow pass (and the
        // first one after) is recorded each time, so the cluster shows as slow, and no longer.
        let took = started.elapsed();
        let slow = took >= SLOW_PASS
            || cluster
                .last_pass_ms
                .is_some_and(|ms| ms >= SLOW_PASS.as_millis() as i64);
        let confirmed_recently = cluster
            .observed_at
            .as_deref()
            .and_then(crate::time::parse)
            .is_some_and(|t| (chrono::Utc::now() - t).num_seconds() < OBSERVED_REFRESH_SECS);
        if !confirmed_recently
            || slow
            || cluster.last_error.is_some()
            || cluster.next_attempt_at.is_some()
        {
            // As above: an answer from the address a PATCH just replaced is not the new one's.
            // Fenced like every write of the holder's.
            let now = crate::time::now();
            let mut tx = self.lease.begin().await.map_err(db_err)?;
            db::query("UPDATE connect_clusters SET failures = 0, last_error = NULL, next_attempt_at = NULL, observed_at = $1, last_pass_at = $1, last_pass_ms = $2 WHERE id = $3 AND url = $4 AND updated_at = $5")
                .bind(&now)
                .bind(took.as_millis() as i64)
                .bind(&cluster.id)
                .bind(&cluster.url)
                .bind(&cluster.updated_at)
                .execute(&mut *tx)
                .await
                .map_err(|e| db_err(e.into()))?;
            tx.commit().await.map_err(|e| db_err(e.into()))?;
            // Lists show at once what changed: an error cleared (its connectors were UNKNOWN), or
            // the cluster turning slow or no longer slow. A confirmation alone, nearly every pass
            // of every cluster, is not marked: each mark made every list view wait for a fresh
            // load, and at 10,000 connectors those waits were the connectors page's p99 at 64
            // clients (7–9 ms without passes, 33–82 ms with them).
            let was_slow = cluster
                .last_pass_ms
                .is_some_and(|ms| ms >= SLOW_PASS.as_millis() as i64);
            if cluster.last_error.is_some()
                || cluster.next_attempt_at.is_some()
                || was_slow != (took >= SLOW_PASS)
            {
                self.writes.mark();
            }
        }
        if !due.is_empty() {
            // Concurrently, like the steps: one call per connector on a slow cluster adds up.
            let reads: Vec<_> = due.into_iter().map(|d| offsets_of(&client, d)).collect();
            let read: Vec<_> = futures::stream::iter(reads)
                .buffer_unordered(STEP_CONCURRENCY)
                .collect()
                .await;
            // One commit for the cluster's reads, not one per connector (10,000 connectors at the
            // default interval were 10,000 commits a minute).
            let now = crate::time::now();
            let _gate = crate::db::write_gate(&self.pool).await;
            let mut tx = crate::db::begin_write(&self.pool)
                .await
                .map_err(|e| db_err(e.into()))?;
            for (d, offsets) in read {
                if let Ok(offsets) = offsets {
                    db::query("UPDATE connector_status SET offsets = $1, offsets_at = $2 WHERE connector_id = $3").bind(offsets.to_string()).bind(&now).bind(&d.id).execute(&mut *tx).await.map_err(|e| db_err(e.into()))?;
                }
            }
            tx.commit().await.map_err(|e| db_err(e.into()))?;
        }
        Ok(applied)
    }

    /// One connector's steps in order, each only while the lease is still ours.
    async fn execute_all<'p>(
        &self,
        client: &ConnectClient,
        steps: Vec<(usize, &'p Step)>,
    ) -> Vec<Done<'p>> {
        let mut out = Vec::new();
        for (i, step) in steps {
            if !self.lease.still_held() {
                break;
            }
            out.push(execute(client, i, step).await);
        }
        out
    }

    /// Executes the steps (each only while the lease is still ours) and records observations,
    /// drift, restarts and unknown connectors.
    ///
    /// Steps of different connectors go to Connect [`STEP_CONCURRENCY`] at a time (a
    /// connector's own steps stay in plan order); nothing is written to SQLite while calls are
    /// in flight, and everything the pass learnt is written in one transaction afterwards, so
    /// a pass of a thousand creates costs one commit, not a thousand.
    async fn apply(
        &self,
        client: &ConnectClient,
        cluster: &ConnectCluster,
        desired: &[Desired],
        stored: &HashMap<String, Stored>,
        plan: &Plan,
        scope: Scope,
    ) -> anyhow::Result<Steps> {
        let by_id: BTreeMap<&str, &Desired> = desired.iter().map(|d| (d.id.as_str(), d)).collect();
        // Each connector's steps, in plan order, connectors in order of their first step.
        let mut groups: Vec<(&str, Vec<(usize, &Step)>)> = Vec::new();
        let mut forget: Vec<&str> = Vec::new();
        for (i, step) in plan.steps.iter().enumerate() {
            match step {
                Step::Forget { id } => forget.push(id),
                _ => {
                    let id = step_id(step).unwrap_or_default();
                    match groups.iter_mut().find(|(g, _)| *g == id) {
                        Some((_, steps)) => steps.push((i, step)),
                        None => groups.push((id, vec![(i, step)])),
                    }
                }
            }
        }
        let calls: Vec<_> = groups
            .into_iter()
            .map(|(_, steps)| self.execute_all(client, steps))
            .collect();
        let mut done: Vec<Done> = futures::stream::iter(calls)
            .buffer_unordered(STEP_CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .flatten()
            .collect();
        done.sort_by_key(|d| d.index);
        let lease_lost = done.len() < plan.steps.len() - forget.len();
        let steps = Steps {
            sent: done.len() as i64,
            failed: done.iter().filter(|d| d.result.is_err()).count() as i64,
        };
        if lease_lost {
            tracing::warn!("lease lost mid-pass; stopped before the next change");
        }
        let mut applied_configs: BTreeMap<&str, &Config> = BTreeMap::new();
        let mut failed_steps: BTreeMap<&str, String> = BTreeMap::new();
        let now = crate::time::now();
        let _gate = crate::db::write_gate(&self.pool).await;
        // IMMEDIATE (`Lease::begin`): the write lock is taken now, not at the first write after a read, which
        // SQLite refuses at once ("database is locked") when another writer (another process,
        // or one of this one's outside the gate) committed in between.
        let mut tx = self.lease.begin().await?;
        // Rows this transaction changes (SQLite counts per connection), so that a pass that
        // wrote nothing does not end the lists' snapshots.
        let changes_before = db::write_count(&mut tx).await?;
        // Whether this transaction writes a row a pass loads (see [`Loaded`]); counted here,
        // since on PostgreSQL `write_count` cannot tell (the fence above has written already).
        let mut touched = !done.is_empty() || !forget.is_empty();
        for d in &done {
            let name = by_id.get(d.id).map(|d| d.name.as_str()).unwrap_or_default();
            let outcome = match &d.result {
                Ok(()) => {
                    tracing::info!(connector = %name, cluster = %cluster.name, action = d.action, "reconciled");
                    if let Some(c) = d.applied {
                        applied_configs.insert(d.id, c);
                    }
                    Outcome::Success
                }
                Err(e) => {
                    tracing::warn!(connector = %name, action = d.action, error = %e, "reconcile step failed");
                    failed_steps.insert(d.id, format!("{} failed: {e}", d.action));
                    Outcome::Failure
                }
            };
            if let Some((reason, by, attempt, at)) = &d.restart {
                db::query("INSERT INTO connector_restarts (connector_id, at, reason, triggered_by, attempt, outcome) VALUES ($1, $2, $3, $4, $5, $6)")
                    .bind(d.id)
                    .bind(at)
                    .bind(reason)
                    .bind(by)
                    .bind(i64::from(*attempt))
                    .bind(match &d.result {
                        Ok(()) => "requested".to_string(),
                        Err(e) => format!("failed: {e}"),
                    })
                    .execute(&mut *tx)
                    .await?;
                if matches!(plan.steps[d.index], Step::RequestedRestart { .. }) && d.result.is_ok()
                {
                    db::query("UPDATE connectors SET restart_requested_by = NULL, restart_only_failed = 0 WHERE id = $1")
                        .bind(d.id)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            audit::record(
                &mut tx,
                Entry {
                    actor: Actor { name: "reconciler".into(), kind: "system" },
                    action: &format!("connector.{}", d.action),
                    target_kind: "connector",
                    target_id: d.id,
                    outcome,
                    summary: json!({"name": name, "cluster": cluster.name, "error": d.result.as_ref().err().map(|e| e.to_string())}),
                },
            )
            .await?;
        }
        for id in &forget {
            db::query("DELETE FROM connectors WHERE id = $1 AND desired_state = 'deleted'")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        if lease_lost {
            tx.commit().await?;
            self.writes.mark();
            self.forget_loaded(&cluster.id);
            return Ok(steps);
        }
        for o in &plan.observations {
            let Some(d) = by_id.get(o.id.as_str()) else {
                continue;
            };
            let acted = plan.steps.iter().any(|s| step_id(s) == Some(o.id.as_str()));
            let failed = failed_steps.contains_key(o.id.as_str());
            let message: &str = failed_steps
                .get(o.id.as_str())
                .map_or(&o.message, |m| m.as_str());
            let applied = applied_configs.get(o.id.as_str());
            let phase = if failed { "FAILED" } else { o.phase };
            // Most passes change nothing: an observation equal to the stored one is not
            // written again (the cluster's `observed_at` says when it was last confirmed). The
            // live config and tasks are compared with the stored JSON as they serialize, not
            // serialized first: at 10,000 connectors those strings were a fifth of a pass.
            let unchanged = !acted
                && applied.is_none()
                && stored.get(&o.id).is_some_and(|st| {
                    st.observed_generation == d.generation
                        && st.phase == phase
                        && st.connector_state == o.connector_state
                        && st.trace == o.trace
                        && st.message.as_deref() == Some(message)
                        && d.restart_attempts == o.restart_attempts
                        && d.next_restart_at == o.next_restart_at
                        && d.healthy_since == o.healthy_since
                        && json_eq::same(st.tasks.as_deref(), Some(&o.tasks))
                        && if st.live_is_desired && o.live_config.as_ref() == Some(&d.config) {
                            true
                        } else {
                            json_eq::same(st.live_config.as_deref(), o.live_config.as_ref())
                        }
                });
            if unchanged {
                continue;
            }
            touched = true;
            let applied = applied.map(|c| json!(c).to_string());
            let live = o.live_config.as_ref().map(|c| json!(c).to_string());
            let tasks = json!(o.tasks).to_string();
            db::query(
                "INSERT INTO connector_status (connector_id, observed_generation, applied_config, live_config, phase, connector_state, tasks, trace, message, observed_at, restart_attempts, next_restart_at, healthy_since, applied_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, CASE WHEN $3 IS NULL THEN NULL ELSE $15 END)
                 ON CONFLICT(connector_id) DO UPDATE SET
                   observed_generation = CASE WHEN $14 = 1 THEN connector_status.observed_generation ELSE excluded.observed_generation END,
                   applied_config = COALESCE(excluded.applied_config, connector_status.applied_config),
                   applied_at = CASE WHEN excluded.applied_config IS NOT NULL THEN $15 ELSE connector_status.applied_at END,
                   live_config = excluded.live_config, phase = excluded.phase, connector_state = excluded.connector_state,
                   tasks = excluded.tasks, trace = excluded.trace, message = excluded.message, observed_at = excluded.observed_at,
                   restart_attempts = excluded.restart_attempts, next_restart_at = excluded.next_restart_at, healthy_since = excluded.healthy_since",
            )
            .bind(&o.id)
            .bind(if acted { 0 } else { d.generation })
            .bind(applied)
            .bind(live)
            .bind(phase)
            .bind(&o.connector_state)
            .bind(tasks)
            .bind(&o.trace)
            .bind(message)
            .bind(&now)
            .bind(i64::from(o.restart_attempts))
            .bind(o.next_restart_at)
            .bind(o.healthy_since)
            .bind(i64::from(acted))
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        }
        for drift in &plan.drifts {
            // A drift that persists (observe-only clusters) is recorded once, not every pass.
            let last: Option<(String, String)> = db::query_as("SELECT kind, diff FROM drift_events WHERE connect_cluster_id = $1 AND connector_name = $2 ORDER BY id DESC LIMIT 1")
                .bind(&cluster.id)
                .bind(&drift.name)
                .fetch_optional(&mut *tx)
                .await?;
            let diff = json!(drift.diff).to_string();
            if drift.action == "reported"
                && last
                    .as_ref()
                    .is_some_and(|(k, d)| k == drift.kind && *d == diff)
            {
                continue;
            }
            tracing::warn!(connector = %drift.name, kind = drift.kind, action = drift.action, "drift detected");
            db::query("INSERT INTO drift_events (connect_cluster_id, connector_name, connector_id, kind, diff, detected_at, action) VALUES ($1, $2, $3, $4, $5, $6, $7)")
                .bind(&cluster.id)
                .bind(&drift.name)
                .bind(&drift.connector_id)
                .bind(drift.kind)
                .bind(diff)
                .bind(&now)
                .bind(drift.action)
                .execute(&mut *tx)
                .await?;
        }
        if scope == Scope::NewOnly {
            // Nothing was listed: what Connect holds beside ClueCDC's is left as last seen.
            tx.commit().await?;
            self.writes.mark();
            return Ok(steps);
        }
        let names: Vec<String> = plan.unknown.iter().map(|u| u.0.clone()).collect();
        for (name, state, config) in &plan.unknown {
            let db::Flag(known) = db::query_scalar("SELECT EXISTS (SELECT 1 FROM unmanaged_connectors WHERE connect_cluster_id = $1 AND name = $2)").bind(&cluster.id).bind(name).fetch_one(&mut *tx).await?;
            if !known {
                db::query("INSERT INTO drift_events (connect_cluster_id, connector_name, kind, diff, detected_at, action) VALUES ($1, $2, 'unknown_added', '[]', $3, 'reported')")
                    .bind(&cluster.id)
                    .bind(name)
                    .bind(&now)
                    .execute(&mut *tx)
                    .await?;
            }
            db::query(
                "INSERT INTO unmanaged_connectors (connect_cluster_id, name, state, config, first_seen, last_seen) VALUES ($1, $2, $3, $4, $5, $5)
                 ON CONFLICT(connect_cluster_id, name) DO UPDATE SET state = excluded.state, config = excluded.config, last_seen = excluded.last_seen",
            )
            .bind(&cluster.id)
            .bind(name)
            .bind(state)
            .bind(json!(config).to_string())
            .bind(&now)
            .execute(&mut *tx)
            .await?;
        }
        let gone: Vec<String> =
            db::query_scalar("SELECT name FROM unmanaged_connectors WHERE connect_cluster_id = $1")
                .bind(&cluster.id)
                .fetch_all(&mut *tx)
                .await?;
        for name in gone.into_iter().filter(|n| !names.contains(n)) {
            db::query(
                "DELETE FROM unmanaged_connectors WHERE connect_cluster_id = $1 AND name = $2",
            )
            .bind(&cluster.id)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        }
        let changes = db::write_count(&mut tx).await?;
        tx.commit().await?;
        if changes > changes_before {
            self.writes.mark();
        }
        if touched {
            self.forget_loaded(&cluster.id);
        }
        Ok(steps)
    }
}

/// Connect calls of one pass in flight at once (different connectors): enough to hide the
/// per-call latency, few enough not to swamp a worker that is also rebalancing.
pub const STEP_CONCURRENCY: usize = 8;

/// Which desired connectors a pass loads.
#[derive(Clone, Copy)]
enum DesiredOf<'a> {
    /// All of a cluster's (a full pass).
    Cluster(&'a str),
    /// These, of this cluster, if no pass has acted on them yet (no status row) and they are
    /// not deleted (a creates-only pass).
    NeverActedOn(&'a str, &'a [String]),
}

/// What a pass saw of a cluster: everything (a full pass, from the list call), or only the
/// connectors it created (a creates-only pass, no list call).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Cluster,
    NewOnly,
}

#[derive(sqlx::FromRow)]
struct SummaryRow {
    id: String,
    connect_cluster_id: String,
    generation: i64,
    desired_state: String,
    #[sqlx(try_from = "crate::db::Flag")]
    restart: bool,
}

/// A connector's status row as the last pass left it.
struct Stored {
    observed_generation: i64,
    phase: String,
    connector_state: Option<String>,
    tasks: Option<String>,
    trace: Option<String>,
    message: Option<String>,
    live_config: Option<String>,
    /// `live_config` is the desired config's JSON, compared once at the load: an unchanged pass
    /// then compares the live config with the desired one (a map equality) instead of
    /// serializing it, which was a tenth of such a pass at 10,000 connectors.
    live_is_desired: bool,
    /// Its committed offsets have been read at least once (kept rows may say no for up to
    /// [`RELOAD_EVERY`] after a read: one more read at worst).
    offsets_read: bool,
}

#[derive(sqlx::FromRow)]
struct DesiredRow {
    id: String,
    name: String,
    config: String,
    desired_state: String,
    generation: i64,
    restart_requested_by: Option<String>,
    #[sqlx(try_from = "crate::db::Flag")]
    restart_only_failed: bool,
    applied_config: Option<String>,
    restart_attempts: Option<i64>,
    next_restart_at: Option<i64>,
    healthy_since: Option<i64>,
    applied_at: Option<i64>,
    observed_generation: Option<i64>,
    phase: Option<String>,
    connector_state: Option<String>,
    tasks: Option<String>,
    trace: Option<String>,
    message: Option<String>,
    live_config: Option<String>,
    #[sqlx(try_from = "crate::db::Flag")]
    offsets_read: bool,
    verdict: Option<String>,
}

/// A step that was sent to Connect, and what it did.
struct Done<'p> {
    /// Its position in the plan (results are recorded in plan order).
    index: usize,
    id: &'p str,
    action: &'static str,
    result: Result<(), ConnectError>,
    /// The config Connect now has from us, when the step wrote one.
    applied: Option<&'p Config>,
    /// A restart to record: (reason, triggered by, attempt, when it was requested). The time
    /// is the call's start: the backoff spaces restarts from when they were planned, and a call
    /// Connect holds for a while (a rebalance) must not make the history show them closer.
    restart: Option<(&'p str, &'p str, u32, String)>,
}

/// A connector's committed offsets, read for the status page.
async fn offsets_of<'d>(
    client: &ConnectClient,
    d: &'d Desired,
) -> (&'d Desired, Result<serde_json::Value, ConnectError>) {
    (d, client.offsets(&d.name).await)
}

/// One Connect call for a step (never a database write: see [`Reconciler::apply`]).
async fn execute<'p>(client: &ConnectClient, index: usize, step: &'p Step) -> Done<'p> {
    let done = |id: &'p str, action, result, applied| Done {
        index,
        id,
        action,
        result,
        applied,
        restart: None,
    };
    match step {
        Step::Create {
            id,
            name,
            config,
            initial_state,
        } => {
            let r = client.create(name, config, initial_state).await;
            done(id, "create", r, Some(config))
        }
        Step::UpdateConfig { id, name, config } => {
            let r = client.put_config(name, config).await;
            done(id, "update_config", r, Some(config))
        }
        Step::Pause { id, name } => done(id, "pause", client.pause(name).await, None),
        Step::Resume { id, name } => done(id, "resume", client.resume(name).await, None),
        Step::Stop { id, name } => done(id, "stop", client.stop(name).await, None),
        Step::Delete { id, name } => done(id, "delete", client.delete(name).await, None),
        Step::Restart {
            id,
            name,
            attempt,
            reason,
        } => {
            let at = crate::time::now();
            Done {
                restart: Some((reason.as_str(), "reconciler", *attempt, at)),
                ..done(id, "restart", client.restart(name, true, true).await, None)
            }
        }
        Step::RequestedRestart {
            id,
            name,
            by,
            only_failed,
        } => {
            let at = crate::time::now();
            Done {
                restart: Some(("requested", by.as_str(), 0, at)),
                ..done(
                    id,
                    "restart",
                    client.restart(name, true, *only_failed).await,
                    None,
                )
            }
        }
        Step::Forget { id } => done(id, "forget", Ok(()), None),
    }
}

/// A cluster whose part of a pass takes this long is slow: shown as such, and the passes after
/// do not wait for it (they do not wait longer than this for any cluster).
pub const SLOW_PASS: Duration = Duration::from_secs(1);

/// The most one cluster's part of a pass may take (each Connect call has its own 20 s timeout):
/// past it, the part stops and the cluster is backed off as unreachable.
pub const CLUSTER_BUDGET: Duration = Duration::from_secs(300);

/// How often a cluster's `observed_at` is written while nothing changes: half of
/// [`crate::connectors::STALE_AFTER_SECS`], after which observations show as UNKNOWN, so a
/// confirmation is at most this plus a pass late. (At 10 s, the default pass interval, every
/// pass of every cluster confirmed: 20 commits a pass at 20 clusters, each one ending the
/// snapshots requests reuse.)
const OBSERVED_REFRESH_SECS: i64 = crate::connectors::STALE_AFTER_SECS / 2;

/// How often the reconciler looks at the lease, the desired-state version and its interval.
const TICK: Duration = Duration::from_millis(500);

/// A pass that changed something is followed by passes after pauses doubling from the first to
/// the last of these (50, 100, … 800 ms), which observe what the changes did instead of waiting
/// a whole interval: a new connector shows RUNNING as soon as Connect lists it, and one still
/// starting is looked at again. Each is one list call.
const FOLLOW_UPS: [Duration; 2] = [Duration::from_millis(50), Duration::from_millis(800)];

/// The first follow-up after a creates-only pass: twice the time since the creates-only pass
/// before, within these bounds. The next create of a burst (a pipeline a request, a script)
/// comes sooner than that, so the full pass that observes the burst runs once, when it pauses;
/// a create on its own is looked at after the upper bound (a new connector takes longer than
/// that to show RUNNING on a real worker anyway).
const CREATES_FOLLOW_UP: [Duration; 2] = [Duration::from_millis(50), Duration::from_millis(200)];

/// What a pass (or one cluster's part of it) sent to Connect, and how much of it failed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Steps {
    pub sent: i64,
    pub failed: i64,
}

/// Renews `lease` every third of its lifetime; returns only when it could not be renewed.
pub async fn keep_renewing(lease: &Lease, ttl: Duration) {
    let period = (ttl / 3).max(Duration::from_millis(200));
    loop {
        tokio::time::sleep(period).await;
        match lease.try_hold().await {
            Ok(true) => {}
            _ => return,
        }
    }
}

fn step_id(s: &Step) -> Option<&str> {
    match s {
        Step::Create { id, .. }
        | Step::UpdateConfig { id, .. }
        | Step::Pause { id, .. }
        | Step::Resume { id, .. }
        | Step::Stop { id, .. }
        | Step::Delete { id, .. }
        | Step::Restart { id, .. }
        | Step::RequestedRestart { id, .. } => Some(id),
        Step::Forget { .. } => None,
    }
}

/// Why a cluster's part of a pass stopped. Only Connect's failures mark the cluster (its error,
/// a backoff, its connectors shown UNKNOWN); a failure of ClueCDC's own database (a write
/// refused under contention) says nothing about the cluster, so it is logged and the next pass
/// tries again.
enum ClusterError {
    Connect(ConnectError),
    Store(anyhow::Error),
}

impl From<ConnectError> for ClusterError {
    fn from(e: ConnectError) -> Self {
        ClusterError::Connect(e)
    }
}

fn db_err(e: anyhow::Error) -> ClusterError {
    ClusterError::Store(e)
}

/// What the API shows about the reconciler (`GET /api/v1/reconciler`).
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Reconciler")]
pub struct Status {
    /// The process holding the reconciler's lease (null when none does).
    pub holder: Option<String>,
    /// When the lease expires, in milliseconds since the Unix epoch.
    pub lease_expires_at_ms: Option<i64>,
    /// Passes recorded in the database (the last 1000 are kept).
    pub passes_recorded: i64,
    /// Passes run by the process that answered, since it started.
    pub passes_in_this_process: u64,
    /// The last recorded pass.
    pub last_pass: Option<PassRecord>,
    /// Each Connect cluster's passes in the process that answered (empty where another process
    /// holds the lease): how often they come and how long they take.
    pub clusters: Vec<ClusterPassStatus>,
}

/// One Connect cluster's reconcile passes, as the process running them recorded them.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReconcilerCluster")]
pub struct ClusterPassStatus {
    pub connect_cluster_id: String,
    pub name: String,
    /// Its parts of passes finished in this process.
    pub passes: u64,
    /// The mean time between the starts of its last passes (up to 10), in milliseconds.
    pub pass_period_ms: Option<u64>,
    /// How long its last finished pass took, in milliseconds.
    pub last_pass_ms: Option<u64>,
    /// Milliseconds since its last finished pass ended.
    pub last_pass_age_ms: Option<u64>,
    /// How long the pass running now has run, in milliseconds (null: none running).
    pub running_ms: Option<u64>,
    /// Its last pass (or the one running) took a second or longer: the other clusters' passes
    /// do not wait for it.
    pub slow: bool,
}

/// One recorded reconcile pass.
#[derive(Debug, Serialize, sqlx::FromRow, schemars::JsonSchema)]
#[schemars(rename = "ReconcilePass")]
pub struct PassRecord {
    pub holder: String,
    pub started_at: String,
    pub duration_ms: i64,
    /// Connect clusters visited.
    pub clusters: i64,
    /// Changes applied to Connect.
    pub actions: i64,
    pub errors: i64,
}

/// The reconciler's lease holder and last pass, as the API shows them.
pub async fn status(pool: &Pool, handle: &Handle) -> anyhow::Result<Status> {
    let lease = lease::Lease::current(pool, lease::RECONCILER).await?;
    let last_pass: Option<PassRecord> = db::query_as("SELECT holder, started_at, duration_ms, clusters, actions, errors FROM reconcile_passes ORDER BY id DESC LIMIT 1").fetch_optional(pool).await?;
    let passes_recorded: i64 = db::query_scalar("SELECT COUNT(*) FROM reconcile_passes")
        .fetch_one(pool)
        .await?;
    let names = crate::clusters::connect::choices(pool).await?;
    let clusters = {
        let records = handle.clusters.lock().unwrap_or_else(|e| e.into_inner());
        names
            .into_iter()
            .filter_map(|(id, name)| {
                let p = records.get(&id)?;
                let ms = |d: Duration| d.as_millis() as u64;
                let running = p.running_since.map(|t| t.elapsed());
                let last = p.last_ended.map(|(_, took)| took);
                Some(ClusterPassStatus {
                    passes: p.passes,
                    pass_period_ms: p.period().map(ms),
                    last_pass_ms: last.map(ms),
                    last_pass_age_ms: p.last_ended.map(|(at, _)| ms(at.elapsed())),
                    running_ms: running.map(ms),
                    slow: last.is_some_and(|d| d >= SLOW_PASS)
                        || running.is_some_and(|d| d >= SLOW_PASS),
                    connect_cluster_id: id,
                    name,
                })
            })
            .collect()
    };
    Ok(Status {
        holder: lease.as_ref().map(|l| l.0.clone()),
        lease_expires_at_ms: lease.as_ref().map(|l| l.1),
        passes_recorded,
        passes_in_this_process: handle.passes.load(Ordering::Relaxed),
        last_pass,
        clusters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusters::connect::{self, ConnectClusterInput};

    /// Twenty clusters loaded in one pass (as at start) are loaded again over several later
    /// passes at the default 10 s interval, never later than `RELOAD_EVERY`.
    #[test]
    fn loads_made_together_expire_apart() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(34);
        let keeps: Vec<Duration> = (0..20).map(|_| reload_after(&mut rng)).collect();
        assert!(keeps
            .iter()
            .all(|k| *k >= RELOAD_EVERY / 2 && *k <= RELOAD_EVERY));
        let passes: HashSet<u64> = keeps.iter().map(|k| k.as_secs() / 10).collect();
        assert!(passes.len() >= 3, "reloaded in passes {passes:?}");
    }

    /// A pass that tried the old address and failed must not write its error over a PATCH that
    /// moved the cluster meanwhile (the user would read the old address's failure as the new
    /// one's until the next pass).
    #[tokio::test]
    async fn a_failure_at_the_address_a_patch_replaced_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        let key = crate::secrets::keyring::MasterKey::generate().to_base64();
        let keyring = crate::secrets::keyring::Keyring::from_env(&key).unwrap();
        let secrets = Arc::new(SecretStore::new(pool.clone(), keyring));
        let ctx = crate::ctx::Ctx::new(pool.clone(), secrets.clone());
        let who = crate::auth::Principal::cli();
        let input = |url: &str| ConnectClusterInput {
            name: Some("moving".into()),
            url: Some(url.into()),
            ..Default::default()
        };
        let created = connect::create(&ctx, &who, &input("http://127.0.0.1:1"))
            .await
            .unwrap()
            .cluster;
        let r = Reconciler::new(
            pool.clone(),
            secrets.clone(),
            Settings::default(),
            Arc::new(Handle::default()),
            "t".into(),
            crate::snapshots::Writes::default(),
        );
        let refused = ConnectError::Unreachable {
            url: created.url.clone(),
            reason: "connection refused".into(),
        };
        assert!(r.lease.try_hold().await.unwrap());
        // What the pass read, then the PATCH, then the pass's verdict.
        connect::update(&ctx, &who, &created.id, &input("http://127.0.0.1:2"))
            .await
            .unwrap();
        r.record_unreachable(&created, &refused).await.unwrap();
        let now = connect::get(&pool, &who, &created.id).await.unwrap();
        assert_eq!(now.last_error, None, "the old address's failure stayed out");
        assert_eq!(
            now.next_attempt_at, None,
            "the new address is tried at once"
        );
        // The same failure against the cluster as it now is is recorded.
        r.record_unreachable(&now, &refused).await.unwrap();
        let after = connect::get(&pool, &who, &created.id).await.unwrap();
        assert!(after.last_error.as_deref().unwrap().contains("unreachable"));
        assert!(after.next_attempt_at.is_some());

        // A holder that lost the lease (paused past it) records no backoff: its successor
        // would otherwise stay off the cluster for up to a minute.
        let stale = Reconciler::new(
            pool.clone(),
            secrets.clone(),
            Settings {
                lease_ttl: Duration::from_millis(200),
                ..Settings::default()
            },
            Arc::new(Handle::default()),
            "stale".into(),
            crate::snapshots::Writes::default(),
        );
        r.lease.release().await;
        assert!(stale.lease.try_hold().await.unwrap());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(r.lease.try_hold().await.unwrap(), "r takes over");
        let e = stale
            .record_unreachable(&after, &refused)
            .await
            .unwrap_err();
        assert!(e.downcast_ref::<lease::Fenced>().is_some(), "{e}");
        let unchanged = connect::get(&pool, &who, &created.id).await.unwrap();
        assert_eq!(unchanged.next_attempt_at, after.next_attempt_at);
        assert_eq!(unchanged.last_error, after.last_error);
    }
}
