//! The monitor: collects signals (delivery lag, replication-slot WAL, connector failures,
//! Connect reachability), keeps a bounded history, and turns rules into alerts with
//! durations, notifying webhooks on every transition. One process runs it: the holder of the
//! `monitor` lease.

use crate::db;
use std::time::Duration;

use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{alerts, channels, webhooks};
use crate::auth::{Principal, Role};
use crate::error::{Error, Result};
use crate::reconcile::lease::{now_ms, Lease};

/// An alert rule: it fires an alert for a subject whose value stays above `threshold` for
/// `for_secs` seconds (yes/no conditions are 1 or 0, with threshold 0).
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, schemars::JsonSchema)]
#[schemars(rename = "AlertRule")]
pub struct Rule {
    /// The rule, and the `kind` of the alerts it fires (not `secret_leak` or
    /// `connect_exposes_task_configs`, which are built-in checks without a rule).
    #[schemars(with = "super::alerts::AlertKind")]
    pub kind: String,
    pub threshold: f64,
    /// How long the condition must hold before the alert fires.
    pub for_secs: i64,
    #[sqlx(try_from = "crate::db::Flag")]
    pub enabled: bool,
    /// What the rule watches, for a person.
    pub description: String,
}

pub async fn rules(pool: &Pool, who: &Principal) -> Result<Vec<Rule>> {
    who.require(Role::Viewer, "see alert rules")?;
    Ok(db::query_as(
        "SELECT kind, threshold, for_secs, enabled, description FROM alert_rules ORDER BY kind",
    )
    .fetch_all(pool)
    .await?)
}

/// A change to an alert rule; fields left out (or null) stay as they are.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "AlertRulePatch")]
pub struct RulePatch {
    /// A number ≥ 0.
    #[schemars(range(min = 0))]
    pub threshold: Option<f64>,
    /// 0 to 86400 seconds.
    #[schemars(range(min = 0, max = 86_400))]
    pub for_secs: Option<i64>,
    pub enabled: Option<bool>,
}

/// What is wrong with a rule change, by field (empty when nothing is).
pub fn check_rule(patch: &RulePatch) -> crate::error::FieldErrors {
    let mut errors = crate::error::FieldErrors::new();
    if patch.threshold.is_some_and(|t| t < 0.0 || !t.is_finite()) {
        errors.insert("threshold".into(), "a number ≥ 0".into());
    }
    if patch.for_secs.is_some_and(|s| !(0..=86_400).contains(&s)) {
        errors.insert("for_secs".into(), "0 to 86400 seconds".into());
    }
    errors
}

pub async fn set_rule(pool: &Pool, who: &Principal, kind: &str, patch: &RulePatch) -> Result<Rule> {
    who.require(Role::Admin, "change alert rules")?;
    Error::check(check_rule(patch))?;
    let done = db::query("UPDATE alert_rules SET threshold = COALESCE($1, threshold), for_secs = COALESCE($2, for_secs), enabled = COALESCE($3, enabled) WHERE kind = $4")
        .bind(patch.threshold)
        .bind(patch.for_secs)
        .bind(patch.enabled.map(i64::from))
        .bind(kind)
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound(format!("alert rule {kind}")));
    }
    crate::audit::record_alone(pool, crate::audit::Entry { actor: who.into(), action: "alert_rule.update", target_kind: "alert_rule", target_id: kind, outcome: crate::audit::Outcome::Success, summary: json!({"threshold": patch.threshold, "for_secs": patch.for_secs, "enabled": patch.enabled}) }).await?;
    Ok(db::query_as(
        "SELECT kind, threshold, for_secs, enabled, description FROM alert_rules WHERE kind = $1",
    )
    .bind(kind)
    .fetch_one(pool)
    .await?)
}

pub struct Monitor {
    /// The services the checks read through (the pool, the secret store).
    pub ctx: crate::ctx::Ctx,
    pub interval: Duration,
    pub retention: Duration,
    /// How long resolved alerts, restarts and drift events are kept (see [`super::history`]).
    pub history_retention: Duration,
    /// How long audit rows are kept (see [`super::history::trim_audit`]).
    pub audit_retention: Duration,
    pub lease: Lease,
    pub lease_ttl: Duration,
    /// Per delivery: when its committed offsets last moved (kept in memory: a new lease
    /// holder starts counting afresh, which only delays a stall alert).
    pub progress: std::sync::Mutex<std::collections::HashMap<String, Progress>>,
    /// Per pipeline whose source ClueCDC cannot reach: (when, the connector plugin's verdict).
    pub verdicts: std::sync::Mutex<std::collections::HashMap<String, (i64, String)>>,
    /// This cycle's alert transitions, handed to the alert channels at its end (one group).
    pub transitions: std::sync::Mutex<Vec<channels::Event>>,
    /// Groups waiting to be sent, per alert channel.
    pub outbox: channels::Outbox,
}

#[derive(Debug, Clone, Default)]
pub struct Progress {
    committed: i64,
    since_ms: i64,
    /// The last destination check of a stalled delivery: (when, what it found).
    cause: Option<(i64, String)>,
}

/// A stalled delivery's destination is checked once the stall passes the rule's threshold
/// (so the alert's first message carries the cause), then at most once a minute.
const STALL_CHECK_EVERY_MS: i64 = 60_000;

/// How long after its worker was lost a connector counts as being moved by its group (Connect's
/// `scheduled.rebalance.max.delay.ms`, five minutes by default, plus the group's own time): its
/// delivery and pipeline alerts wait meanwhile, the lost worker has its one alert. Past it, they
/// fire as usual (the group did not move it).
pub const REASSIGN_GRACE_MS: i64 = 600_000;

/// Whether `c` only waits for its group to move it off a worker lost less than the grace ago.
fn reassigning(
    c: Option<&crate::connectors::ConnectorView>,
    lost: &[(String, crate::reconcile::workers::LostWorker)],
    now: i64,
) -> bool {
    let Some(c) = c else { return false };
    c.phase == "UNASSIGNED"
        && c.tasks.iter().any(|t| {
            t.state == "UNASSIGNED"
                && lost.iter().any(|(cluster, w)| {
                    *cluster == c.connect_cluster_id
                        && w.worker_id == t.worker_id
                        && now - w.lost_at < REASSIGN_GRACE_MS
                })
        })
}

/// Why a stalled sink does not write: the destination's own connection test, read like a task
/// trace (permanent causes need a person; transient ones clear by themselves).
fn stall_cause(report: &crate::connections::TestReport) -> String {
    let failed: Vec<String> = report
        .checks
        .iter()
        .filter(|k| k.status == crate::connections::CheckStatus::Fail)
        .map(|k| format!("{}: {}", k.name, k.message))
        .collect();
    if failed.is_empty() {
        return "the destination passes its connection test now; the Connect worker's log has the sink's own errors".into();
    }
    let checks = failed.join("; ");
    match crate::reconcile::policy::classify(&checks) {
        crate::reconcile::policy::Failure::Permanent { reason, what_to_do } => {
            format!("permanent ({reason}): the destination check fails ({checks}); {what_to_do}. Restarting will not help")
        }
        crate::reconcile::policy::Failure::Transient { reason } => {
            format!("transient ({reason}): the destination check fails ({checks}); the sink retries at each offset commit and catches up once the destination answers")
        }
    }
}

/// Why a pipeline's source fails ClueCDC's own read, read like a task trace: the connector uses
/// the same connection and, in Debezium, retries it without end while its task stays RUNNING.
/// `verdict`: what the connector's plugin says of its config on the worker (both are read).
fn source_cause(pipeline: &str, error: &str, verdict: &str) -> String {
    match crate::reconcile::policy::classify(&format!("{error}\n{verdict}")) {
        crate::reconcile::policy::Failure::Permanent { reason, what_to_do } => format!("permanent ({reason}): ClueCDC cannot reach the source of pipeline {pipeline} ({error}), and {verdict}; {what_to_do}. Its connector retries the same connection without end, although Connect may report it RUNNING: restarting will not help"),
        crate::reconcile::policy::Failure::Transient { reason } => format!("transient ({reason}): ClueCDC cannot reach the source of pipeline {pipeline} ({error}), and {verdict}; its connector retries and resumes once the source answers"),
    }
}

/// The signals kept as history (charts, `/api/v1/samples`, `/metrics`), with what they mean.
/// A sampled kind that is also a rule kind is alerted on with the same value.
pub const SAMPLED: &[(&str, &str)] = &[
    (
        "delivery_lag_records",
        "Records a delivery's consumer group is behind, summed over partitions.",
    ),
    (
        "delivery_lag_seconds",
        "Age of the oldest record a delivery has not written yet.",
    ),
    (
        "delivery_freshness_seconds",
        "Age of the newest heartbeat a delivery wrote to its destination.",
    ),
    (
        "slot_retained_wal_bytes",
        "WAL a pipeline's replication slot retains on the source.",
    ),
    (
        "binlog_behind_bytes",
        "Bytes of binlog a MySQL/MariaDB pipeline has not read yet.",
    ),
    (
        "pipeline_topic_end_offset",
        "Sum of the end offsets of a pipeline's topics (its growth is the capture rate).",
    ),
    (
        "pipeline_no_new_data_seconds",
        "Age of the newest record in a pipeline's topics.",
    ),
    (
        "snapshot_table_rows_scanned",
        "Rows a table's snapshot has scanned (live while it scans, Debezium's count once done).",
    ),
    (
        "snapshot_table_rows_expected",
        "The source's estimate of a snapshotted table's rows (pg_class.reltuples, information_schema.tables.table_rows).",
    ),
    (
        "snapshot_tables_remaining",
        "Tables of a pipeline's newest snapshot not done yet.",
    ),
    (
        "replication_lag_records",
        "Records on a replication's source not copied to its target yet, summed over partitions.",
    ),
    (
        "replication_lag_seconds",
        "Age of the oldest record a replication has not copied yet.",
    ),
    (
        "replication_checkpoint_age_seconds",
        "How long MirrorMaker has owed a replication's consumer group a newer checkpoint (the most over groups; 0 while every checkpoint is as new as the offset syncs allow).",
    ),
    (
        "table_last_change_age_seconds",
        "Seconds since a captured table's topic last received a change (subject <pipeline>/<table>; seen from its end offset, so up to one monitor interval late).",
    ),
    (
        "table_stalled_seconds",
        "Seconds since a captured table first changed on the source after its topic last moved (0 while the topic follows or the source is quiet); the table_stalled rule's value.",
    ),
    (
        "delivery_table_lag_records",
        "Records of one table's topic a delivery's consumer group is behind (subject <delivery>/<table>).",
    ),
    (
        "delivery_table_lag_seconds",
        "How long the oldest record of one table a delivery has not written has waited, from end-offset marks (a lower bound; subject <delivery>/<table>).",
    ),
];

/// The kind of a sampled signal, as an input: one of [`SAMPLED`] (anything else is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleKind(pub &'static str);

impl<'de> Deserialize<'de> for SampleKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let given = String::deserialize(d)?;
        SAMPLED
            .iter()
            .find(|(k, _)| *k == given)
            .map(|(k, _)| SampleKind(k))
            .ok_or_else(|| {
                let kinds: Vec<&str> = SAMPLED.iter().map(|(k, _)| *k).collect();
                serde::de::Error::custom(format!(
                    "not a sampled signal; one of {}",
                    kinds.join(", ")
                ))
            })
    }
}

/// The document lists [`SAMPLED`] itself, so a new signal appears there with no other change.
impl schemars::JsonSchema for SampleKind {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SampleKind".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let kinds: Vec<&str> = SAMPLED.iter().map(|(k, _)| *k).collect();
        let described: Vec<String> = SAMPLED.iter().map(|(k, d)| format!("`{k}`: {d}")).collect();
        schemars::json_schema!({
            "type": "string",
            "enum": kinds,
            "description": format!("A signal kept as history. {}", described.join(" ")),
        })
    }
}

/// One observation against one rule.
pub(crate) struct Observation {
    pub kind: &'static str,
    pub subject: String,
    /// The measured value (lag, bytes); 1.0/0.0 for yes/no conditions.
    pub value: f64,
    pub message: String,
}

impl Monitor {
    pub fn spawn(
        self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                if self.lease.try_hold().await.unwrap_or(false) {
                    // Renewed while the cycle runs; a lost lease stops it (no duplicate webhooks).
                    let started = std::time::Instant::now();
                    tokio::select! {
                        result = self.cycle() => {
                            if let Err(e) = result {
                                tracing::warn!(error = format!("{e:#}"), "monitor cycle failed");
                            }
                            let ms = started.elapsed().as_millis() as i64;
                            for (name, add) in [("monitor_cycles", 1), ("monitor_cycle_ms", ms)] {
                                let _ = db::query("INSERT INTO counters (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value").bind(name).bind(add).execute(&self.ctx.pool).await;
                            }
                        }
                        _ = crate::reconcile::keep_renewing(&self.lease, self.lease_ttl) => {
                            tracing::warn!("lost the monitor lease mid-cycle; stopped");
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.interval) => {}
                    _ = shutdown.changed() => break,
                }
            }
            self.lease.release().await;
        })
    }

    /// How long a running delivery with records waiting has not moved its committed offsets
    /// (ms); 0 while it moves, has nothing to do, or is paused on purpose.
    fn stalled_for(
        &self,
        delivery: &str,
        lag: &[crate::kafka::PartitionLag],
        running: bool,
        now: i64,
    ) -> i64 {
        let committed: i64 = lag.iter().filter_map(|l| l.committed).sum();
        let waiting: i64 = lag.iter().map(|l| l.lag).sum();
        let Ok(mut all) = self.progress.lock() else {
            return 0;
        };
        let p = all.entry(delivery.to_string()).or_insert(Progress {
            committed,
            since_ms: now,
            cause: None,
        });
        if !running || waiting == 0 || committed != p.committed {
            *p = Progress {
                committed,
                since_ms: now,
                cause: None,
            };
        }
        now - p.since_ms
    }

    async fn cause_of_stall(&self, d: &crate::deliveries::Delivery, now: i64) -> String {
        let cached = self
            .progress
            .lock()
            .ok()
            .and_then(|all| all.get(&d.id).and_then(|p| p.cause.clone()));
        if let Some((at, cause)) = cached {
            if now - at < STALL_CHECK_EVERY_MS {
                return cause;
            }
        }
        let cause = match crate::connections::test(
            &self.ctx.pool,
            &self.ctx.secrets,
            &Principal::cli(),
            &d.destination_connection_id,
        )
        .await
        {
            Ok(report) => stall_cause(&report),
            Err(e) => format!("the destination could not be checked: {e}"),
        };
        if let Ok(mut all) = self.progress.lock() {
            if let Some(p) = all.get_mut(&d.id) {
                p.cause = Some((now, cause.clone()));
            }
        }
        cause
    }

    /// The connector plugin's own words on a pipeline whose source ClueCDC cannot reach:
    /// Connect's validate connects with the connector's driver and the worker's view of the
    /// config (the CA file the provider wrote, for one), where the task itself only retries.
    /// Asked once the source fails, then at most once a minute.
    async fn plugin_verdict(&self, c: &crate::connectors::ConnectorView, now: i64) -> String {
        let cached = self
            .verdicts
            .lock()
            .ok()
            .and_then(|all| all.get(&c.name).cloned());
        if let Some((at, verdict)) = cached {
            if now - at < STALL_CHECK_EVERY_MS {
                return verdict;
            }
        }
        let verdict = match crate::connectors::check_with_plugin(
            &self.ctx.pool,
            &self.ctx.secrets,
            &Principal::cli(),
            &c.connect_cluster_id,
            &c.name,
            &c.config,
        )
        .await
        {
            Ok(errors) if errors.is_empty() => {
                "the connector's plugin accepts its config on the worker now".to_string()
            }
            Ok(errors) => format!(
                "the connector's plugin says: {}",
                errors.into_values().collect::<Vec<_>>().join("; ")
            ),
            Err(e) => format!("the connector's plugin could not be asked: {e}"),
        };
        if let Ok(mut all) = self.verdicts.lock() {
            all.insert(c.name.clone(), (now, verdict.clone()));
        }
        verdict
    }

    /// Keeps the connector's row in `connector_verdicts`, which the reconciler reads as the
    /// trace of a failure Connect does not show: a Debezium source whose connection fails when
    /// its task starts retries without end while Connect reports it RUNNING. `failure`: what
    /// ClueCDC's own read of the source and the connector's plugin on the worker say, when the
    /// source fails; a permanent cause is recorded (a transient one is the task's to retry). A
    /// verdict goes once the source answers ClueCDC and the plugin accepts the config on the
    /// worker again: asking it resolves the config there, so the provider writes the
    /// connection's current CA file, which the retrying task reads at its next attempt.
    async fn keep_verdict(
        &self,
        c: &crate::connectors::ConnectorView,
        stored: Option<&String>,
        failure: Option<(&str, &str)>,
    ) -> anyhow::Result<()> {
        let wanted = match failure {
            Some((error, verdict)) => {
                let both = format!("{error}\n{verdict}");
                match crate::reconcile::policy::classify(&both) {
                    crate::reconcile::policy::Failure::Permanent { .. } => Some(format!("ClueCDC cannot reach the source: {error}\nAnd {verdict}\n(Connect reports the connector RUNNING: Debezium retries a connection that fails when its task starts without end, so Connect never fails the task.)")),
                    crate::reconcile::policy::Failure::Transient { .. } => None,
                }
            }
            None if stored.is_none() => None,
            None => {
                let again = "ClueCDC reaches the source again, but ";
                // The first cycle the source answers again the plugin is asked at once (its
                // last refusal may be a moment old); after that at most once a minute.
                if !stored.is_some_and(|t| t.starts_with(again)) {
                    if let Ok(mut all) = self.verdicts.lock() {
                        all.remove(&c.name);
                    }
                }
                let verdict = self.plugin_verdict(c, now_ms()).await;
                verdict
                    .starts_with("the connector's plugin says")
                    .then(|| format!("{again}{verdict}"))
            }
        };
        if wanted.as_ref() == stored {
            return Ok(());
        }
        match &wanted {
            Some(trace) => {
                db::query("INSERT INTO connector_verdicts (connector_id, trace, checked_at) VALUES ($1, $2, $3) ON CONFLICT (connector_id) DO UPDATE SET trace = excluded.trace, checked_at = excluded.checked_at")
                    .bind(&c.id)
                    .bind(trace)
                    .bind(crate::time::now())
                    .execute(&self.ctx.pool)
                    .await?;
            }
            None => {
                db::query("DELETE FROM connector_verdicts WHERE connector_id = $1")
                    .bind(&c.id)
                    .execute(&self.ctx.pool)
                    .await?;
            }
        }
        // The reconciler's next pass (in whichever process holds its lease) reads it at once.
        crate::reconcile::bump_desired_version(&self.ctx.pool).await?;
        Ok(())
    }

    async fn cycle(&self) -> anyhow::Result<()> {
        let now = now_ms();
        let mut seen: Vec<Observation> = Vec::new();
        // Subjects that still exist, measured or not. An open alert resolves by absence only
        // when its subject is gone (a deleted delivery, a dropped orphan slot): a measurement
        // that failed this cycle (a rebalancing group, an unreachable source) changes nothing.
        let mut present: Vec<String> = Vec::new();
        let system = Principal::cli();
        let stall_threshold: f64 = db::query_scalar(
            "SELECT threshold FROM alert_rules WHERE kind = 'delivery_stalled_seconds'",
        )
        .fetch_optional(&self.ctx.pool)
        .await?
        .unwrap_or(300.0);
        // ---- Schema guardrails (tables::schema): first in the cycle, so that a breaking
        // change pauses a `pause` delivery as early as the cycle can. ----
        seen.extend(crate::tables::schema::cycle(&self.ctx.pool, &self.ctx.secrets).await);
        // ---- end schema guardrails ----
        // Workers Connect lost (reconcile::workers): one alert each, and their connectors'
        // delivery and pipeline alerts wait while the group moves them.
        let lost = crate::reconcile::workers::all_lost(&self.ctx.pool).await?;
        // Delivery lag, per delivery (sum over partitions).
        for d in crate::deliveries::list(&self.ctx.pool, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            present.push(d.name.clone());
            if let Ok(detail) = crate::deliveries::detail(&self.ctx, &system, &d.id).await {
                if reassigning(detail.connector.as_ref(), &lost, now) {
                    continue;
                }
                if let Some(age) = detail.freshness_secs {
                    seen.push(Observation {
                        kind: "delivery_freshness_seconds",
                        subject: d.name.clone(),
                        value: age,
                        message: format!("the newest data delivery {} wrote is {age:.0} s old (current as of {}): is the pipeline or the delivery stopped, or the source idle without heartbeats?", d.name, detail.current_as_of.clone().unwrap_or_default()),
                    });
                }
                if let Some(secs) = detail.lag_secs {
                    seen.push(Observation {
                        kind: "delivery_lag_seconds",
                        subject: d.name.clone(),
                        value: secs,
                        message: format!("delivery {} has not written a record that is {secs:.0} s old: check the sink connector's state and the destination's health", d.name),
                    });
                }
                if detail.lag_error.is_none() {
                    let waiting: i64 = detail.lag.iter().map(|l| l.lag).sum();
                    let running = detail
                        .connector
                        .as_ref()
                        .is_some_and(|c| c.desired_state == "running");
                    let stalled_ms = self.stalled_for(&d.id, &detail.lag, running, now);
                    let message = if stalled_ms as f64 > stall_threshold * 1000.0 {
                        self.cause_of_stall(&d, now).await
                    } else {
                        String::new()
                    };
                    seen.push(Observation {
                        kind: "delivery_stalled_seconds",
                        subject: d.name.clone(),
                        value: stalled_ms as f64 / 1000.0,
                        message: format!("delivery {} has committed nothing for {:.0} s while {waiting} records wait, although its connector may report RUNNING: {message}", d.name, stalled_ms as f64 / 1000.0),
                    });
                }
                // Per-table lag (tables::freshness), from this detail.
                seen.extend(crate::tables::freshness::delivery_observations(
                    &d.name,
                    &detail.tables,
                ));
                if detail.lag_error.is_none() {
                    let lag: i64 = detail.lag.iter().map(|l| l.lag).sum();
                    seen.push(Observation {
                        kind: "delivery_lag_records",
                        subject: d.name.clone(),
                        value: lag as f64,
                        message: format!("delivery {} is {lag} records behind its topics: check the sink connector's state and the destination's health", d.name),
                    });
                }
            }
        }
        // Replications: what the target has not copied yet, and how old the checkpoints are.
        for r in crate::replications::list(&self.ctx, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            present.push(r.name.clone());
            let Ok(d) = crate::replications::detail(&self.ctx, &system, &r.id).await else {
                continue;
            };
            let p = &d.progress;
            if p.error.is_some() || p.partitions.is_empty() {
                continue;
            }
            seen.push(Observation {
                kind: "replication_lag_records",
                subject: r.name.clone(),
                value: p.lag_records as f64,
                message: format!("replication {} is {} records behind on {}: check its source connector and the target cluster", r.name, p.lag_records, d.target_cluster),
            });
            if let Some(secs) = p.lag_secs {
                seen.push(Observation {
                    kind: "replication_lag_seconds",
                    subject: r.name.clone(),
                    value: secs,
                    message: format!(
                        "replication {} has not copied a record that is {secs:.0} s old to {}",
                        r.name, d.target_cluster
                    ),
                });
            }
            let stalest = p
                .checkpoints
                .iter()
                .max_by(|a, b| a.stale_secs.total_cmp(&b.stale_secs));
            if let Some(g) = stalest {
                seen.push(Observation {
                    kind: "replication_checkpoint_age_seconds",
                    subject: r.name.clone(),
                    value: g.stale_secs,
                    message: format!("group {} committed on the source past the newest offset sync {:.0} s ago and no checkpoint on {} carries it yet: a failover now would resume it further back; is the checkpoint connector running?", g.group, g.stale_secs, d.target_cluster),
                });
            }
        }
        // Replication slots of PostgreSQL pipelines.
        let mut topics = crate::pipelines::TopicsMemo::default();
        // Verdicts on source connectors as stored, to compare this cycle's with (one read).
        let verdicts: std::collections::HashMap<String, String> =
            db::query_as("SELECT connector_id, trace FROM connector_verdicts")
                .fetch_all(&self.ctx.pool)
                .await?
                .into_iter()
                .collect();
        for p in crate::pipelines::list(&self.ctx.pool, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            present.push(p.name.clone());
            let Ok(detail) = crate::pipelines::detail_with(
                &self.ctx.pool,
                &self.ctx.secrets,
                &system,
                &p.id,
                &mut topics,
            )
            .await
            else {
                continue;
            };
            // --- Snapshot progress per table (tables::progress): Debezium's new notifications,
            // the per-table series and `snapshot_stalled`.
            {
                let running = detail
                    .connector
                    .as_ref()
                    .is_some_and(|c| c.desired_state == "running");
                seen.extend(
                    crate::tables::progress::observe(
                        &self.ctx.pool,
                        &self.ctx.secrets,
                        &p,
                        &detail.topics,
                        topics
                            .cluster(&p.kafka_cluster_id)
                            .as_deref()
                            .map(Vec::as_slice),
                        running,
                        now,
                    )
                    .await,
                );
            }
            // --- end of snapshot progress.
            if !detail.topics.is_empty() {
                seen.push(Observation {
                    kind: "pipeline_topic_end_offset",
                    subject: p.name.clone(),
                    value: detail.end_offsets as f64,
                    message: String::new(),
                });
            }
            let moving = reassigning(detail.connector.as_ref(), &lost, now);
            if let Some(age) = detail.newest_record_age_secs.filter(|_| !moving) {
                seen.push(Observation {
                    kind: "pipeline_no_new_data_seconds",
                    subject: p.name.clone(),
                    value: age,
                    message: format!("no new record reached the topics of pipeline {} for {age:.0} s: is the pipeline paused or failing, or the source idle? Heartbeats keep an idle source's pipeline visibly alive", p.name),
                });
            }
            if let Some(b) = &detail.binlog {
                if let Some(behind) = b.bytes_behind {
                    seen.push(Observation {
                        kind: "binlog_behind_bytes",
                        subject: p.name.clone(),
                        value: behind as f64,
                        message: format!("pipeline {} is {behind} bytes of binlog behind the server (it reached {}:{}, the server writes at {}:{}): is it paused or failing? If the server purges {} first, the pipeline needs a new snapshot", p.name, b.connector_file.clone().unwrap_or_default(), b.connector_pos.unwrap_or(0), b.server_file, b.server_pos, b.connector_file.clone().unwrap_or_default()),
                    });
                }
                if let Some(kept) = b.position_kept {
                    seen.push(Observation {
                        kind: "binlog_position_lost",
                        subject: p.name.clone(),
                        value: if kept { 0.0 } else { 1.0 },
                        message: format!("the binlog {} that pipeline {} was reading is purged from the server (oldest kept: {}): a connector task started from it fails (a task still running may have read past it: then this clears once it commits a newer position); reset and re-snapshot the pipeline (Reset and re-snapshot… on its page, or POST /api/v1/pipelines/{}/reset), and keep binary logs longer than a pipeline may be paused or down (binlog_expire_logs_seconds on the server)", b.connector_file.clone().unwrap_or_default(), p.name, b.oldest_file, p.id),
                    });
                }
            }
            let running = detail
                .connector
                .as_ref()
                .filter(|c| c.desired_state == "running");
            let failing = running.is_some() && detail.source_error.is_some();
            let message = match (failing, running) {
                (true, Some(c)) => {
                    let error = detail.source_error.as_deref().unwrap_or("");
                    let verdict = self.plugin_verdict(c, now).await;
                    self.keep_verdict(c, verdicts.get(&c.id), Some((error, &verdict)))
                        .await?;
                    source_cause(&p.name, error, &verdict)
                }
                (false, Some(c)) => {
                    self.keep_verdict(c, verdicts.get(&c.id), None).await?;
                    String::new()
                }
                _ => {
                    // Paused, stopped or going: nothing to hold against it when it runs again.
                    if let Some(c) = detail
                        .connector
                        .as_ref()
                        .filter(|c| verdicts.contains_key(&c.id))
                    {
                        db::query("DELETE FROM connector_verdicts WHERE connector_id = $1")
                            .bind(&c.id)
                            .execute(&self.ctx.pool)
                            .await?;
                    }
                    String::new()
                }
            };
            seen.push(Observation {
                kind: "pipeline_source_unreachable",
                subject: p.name.clone(),
                value: if failing { 1.0 } else { 0.0 },
                message,
            });
            // A slot that does not exist (yet, or any more) retains nothing and is not idle.
            if let Some(slot) = detail.slot {
                let bytes = slot.retained_wal_bytes.unwrap_or(0);
                seen.push(Observation {
                    kind: "slot_retained_wal_bytes",
                    subject: p.name.clone(),
                    value: bytes as f64,
                    message: format!("replication slot {} of pipeline {} retains {bytes} bytes of WAL on the source: is the pipeline paused or failing? A stalled slot fills the source's disk", slot.name, p.name),
                });
                seen.push(Observation {
                    kind: "slot_inactive",
                    subject: p.name.clone(),
                    value: if slot.active || !slot.exists { 0.0 } else { 1.0 },
                    message: format!("nothing reads replication slot {} of pipeline {}: WAL accumulates on the source; resume or fix the pipeline, or drop the slot if the pipeline is gone", slot.name, p.name),
                });
            }
        }
        // --- Per-table freshness and `table_stalled` (tables::freshness): end offsets from the
        // topics read above (`topics`), one change-counter query per source.
        match crate::tables::freshness::observe(&self.ctx.pool, &self.ctx.secrets, &topics, now)
            .await
        {
            Ok(f) => {
                present.extend(f.present);
                seen.extend(f.seen);
            }
            Err(e) => tracing::warn!(
                error = format!("{e:#}"),
                "per-table freshness not observed this cycle"
            ),
        }
        // --- end of per-table freshness.
        // Connector failures and Connect reachability, from what the reconciler observed.
        for c in crate::connectors::health(&self.ctx.pool, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            if c.desired_state != "deleted" {
                present.push(c.name.clone());
            }
            if c.desired_state != "deleted" && c.phase != "UNKNOWN" {
                // Missing: the reconciler keeps failing to create it; DRIFTED: an observed-only
                // cluster differs. (A repaired drift is fixed within a pass and never lasts.)
                let missing = c.observed_state.is_none();
                seen.push(Observation {
                    kind: "connector_missing_or_drifted",
                    subject: c.name.clone(),
                    value: if missing || c.phase == "DRIFTED" { 1.0 } else { 0.0 },
                    message: if missing {
                        format!("connector {} is not in Kafka Connect ({}): its page shows what the reconciler tried", c.name, c.message.clone().unwrap_or_default())
                    } else {
                        format!("connector {} in Kafka Connect differs from what ClueCDC wants ({}): its page shows the difference; adopt the live config or let ClueCDC restore its own", c.name, c.message.clone().unwrap_or_default())
                    },
                });
            }
            // Connect's failures, and those ClueCDC found where Connect shows RUNNING.
            let failed = c.desired_state == "running"
                && (c.phase == "FAILED"
                    || c.observed_state.as_deref() == Some("FAILED")
                    || c.task_failed);
            seen.push(Observation {
                kind: "connector_failed",
                subject: c.name.clone(),
                value: if failed { 1.0 } else { 0.0 },
                message: format!(
                    "connector {} has failed: {} — its page shows the trace",
                    c.name,
                    c.message.clone().unwrap_or_default()
                ),
            });
        }
        // Kafka clusters answer metadata requests.
        for k in crate::clusters::kafka::list(&self.ctx, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            present.push(k.name.clone());
            let Ok(access) = crate::clusters::kafka::access(&self.ctx.secrets, &k).await else {
                continue;
            };
            let health = crate::kafka::health(&access).await;
            seen.push(Observation {
                kind: "kafka_unreachable",
                subject: k.name.clone(),
                value: if health.reachable { 0.0 } else { 1.0 },
                message: format!("Kafka cluster {} does not answer ({}): check the brokers at {} and the network from ClueCDC", k.name, health.error.unwrap_or_default(), k.bootstrap_servers),
            });
        }
        // Orphan replication slots on PostgreSQL sources: WAL kept for nobody.
        for c in crate::connections::list(&self.ctx.pool, &self.ctx.secrets, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            if c.connection.provider != crate::connections::Provider::Postgresql
                || !c.connection.is_source()
            {
                continue;
            }
            let Ok(slots) = crate::pipelines::source_slots(
                &self.ctx.pool,
                &self.ctx.secrets,
                &system,
                &c.connection.id,
            )
            .await
            else {
                // Unreadable this cycle: its orphan-slot alerts stay as they are.
                present.push(format!("{}/", c.connection.name));
                continue;
            };
            for s in slots {
                seen.push(Observation {
                    kind: "orphan_slot",
                    subject: format!("{}/{}", c.connection.name, s.slot.name),
                    value: if s.pipeline.is_none() { 1.0 } else { 0.0 },
                    message: format!(
                        "replication slot {} on {} belongs to no pipeline and retains {} bytes of WAL: if nothing else reads it, drop it (DELETE /api/v1/connections/{}/slots/{}?confirm={})",
                        s.slot.name, c.connection.name, s.slot.retained_wal_bytes.unwrap_or(0), c.connection.id, s.slot.name, s.slot.name
                    ),
                });
            }
        }
        for cluster in crate::clusters::all(&self.ctx.pool)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            present.push(cluster.name.clone());
            seen.push(Observation {
                kind: "connect_unreachable",
                subject: cluster.name.clone(),
                value: if cluster.last_error.is_some() { 1.0 } else { 0.0 },
                message: format!("Kafka Connect {} does not answer ({}): check that its workers run and that ClueCDC can reach {}", cluster.name, cluster.last_error.clone().unwrap_or_default(), cluster.url),
            });
            for (_, w) in lost.iter().filter(|(c, _)| *c == cluster.id) {
                let now_where = match w.moved_at {
                    Some(m) => format!(
                        "Connect moved them to the surviving workers {} s after the loss",
                        (m - w.lost_at).max(0) / 1000
                    ),
                    None => "Connect moves them to the surviving workers once its group gives up on it (scheduled.rebalance.max.delay.ms, 5 min by default); meanwhile they show UNASSIGNED".into(),
                };
                seen.push(Observation {
                    kind: "connect_worker_lost",
                    subject: format!("{}/{}", cluster.name, w.worker_id),
                    value: 1.0,
                    message: format!(
                        "Connect worker {} of {} lost: {} task{} were on it; {now_where}. ClueCDC restarts none of them: bring the worker back or add capacity",
                        w.worker_id,
                        cluster.name,
                        w.tasks,
                        if w.tasks == 1 { "" } else { "s" }
                    ),
                });
            }
        }
        let rules: Vec<Rule> =
            db::query_as("SELECT kind, threshold, for_secs, enabled, description FROM alert_rules")
                .fetch_all(&self.ctx.pool)
                .await?;
        let sampled: Vec<(&str, &str, f64)> = seen
            .iter()
            .filter(|o| SAMPLED.iter().any(|(k, _)| *k == o.kind))
            .map(|o| (o.kind, o.subject.as_str(), o.value))
            .collect();
        record_samples(&self.ctx.pool, &sampled, now).await?;
        // Most observations are fine and have nothing pending or firing: those need no query
        // (at thousands of connectors, a write per observation was most of a cycle's cost).
        let open: std::collections::HashSet<(String, String)> = db::query_as(
            "SELECT kind, subject FROM alert_pending UNION SELECT kind, subject FROM alerts WHERE state = 'firing'",
        )
        .fetch_all(&self.ctx.pool)
        .await?
        .into_iter()
        .collect();
        for o in &seen {
            let Some(rule) = rules.iter().find(|r| r.kind == o.kind) else {
                continue;
            };
            let breached = rule.enabled && o.value > rule.threshold;
            if !breached && !open.contains(&(o.kind.to_string(), o.subject.clone())) {
                continue;
            }
            self.evaluate(rule, o, breached, now).await?;
        }
        // What is gone (a deleted delivery, a dropped orphan slot) resolves.
        for rule in &rules {
            let still: Vec<&str> = seen
                .iter()
                .filter(|o| o.kind == rule.kind)
                .map(|o| o.subject.as_str())
                .collect();
            let open: Vec<String> =
                db::query_scalar("SELECT subject FROM alerts WHERE kind = $1 AND state = 'firing'")
                    .bind(&rule.kind)
                    .fetch_all(&self.ctx.pool)
                    .await?;
            let exists = |s: &str| {
                present
                    .iter()
                    .any(|p| p == s || (p.ends_with('/') && s.starts_with(p.as_str())))
            };
            for subject in open
                .into_iter()
                .filter(|s| !still.contains(&s.as_str()) && !exists(s))
            {
                db::query("DELETE FROM alert_pending WHERE kind = $1 AND subject = $2")
                    .bind(&rule.kind)
                    .bind(&subject)
                    .execute(&self.ctx.pool)
                    .await?;
                if let Some(alert) = alerts::resolve(&self.ctx.pool, &rule.kind, &subject)
                    .await
                    .map_err(|e| anyhow::anyhow!(e.to_string()))?
                {
                    self.notify("resolved", alert, json!({"reason": "no longer observed"}));
                }
            }
        }
        // The cycle's transitions go to the alert channels as one group (per channel).
        let transitions =
            std::mem::take(&mut *self.transitions.lock().unwrap_or_else(|e| e.into_inner()));
        if let Err(e) = channels::dispatch(
            &self.ctx.pool,
            &self.ctx.secrets,
            &self.outbox,
            &transitions,
        )
        .await
        {
            tracing::warn!(error = %e, "alert channels not notified");
        }
        let kept = upkeep_samples(
            &self.ctx.pool,
            now,
            self.retention.as_millis() as i64,
            UPKEEP_BUDGET,
        )
        .await?;
        if kept.more {
            tracing::info!(?kept, "history upkeep continues next cycle");
        }
        if let Some(before) = super::history::minus(chrono::Utc::now(), self.history_retention) {
            let trimmed =
                super::history::trim(&self.ctx.pool, &crate::time::format(before)).await?;
            if trimmed.more() {
                tracing::info!(?trimmed, "event history trimmed; more next cycle");
            }
        }
        let removed =
            super::history::trim_audit(&self.ctx.pool, chrono::Utc::now(), self.audit_retention)
                .await?;
        if removed > 0 {
            tracing::info!(removed, "audit rows older than the audit retention removed");
        }
        Ok(())
    }

    /// One alert transition: the signed webhooks get it now, one POST each (their payload:
    /// `state`, `alert`, `sent_at` and `extra`'s keys); the alert channels get it grouped at
    /// the end of the cycle.
    fn notify(&self, state: &str, alert: alerts::Alert, extra: serde_json::Value) {
        let mut payload = json!({"state": state, "alert": alert, "sent_at": crate::time::now()});
        if let (Some(p), serde_json::Value::Object(more)) = (payload.as_object_mut(), extra) {
            p.extend(more);
        }
        webhooks::notify(self.ctx.pool.clone(), self.ctx.secrets.clone(), payload);
        self.transitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(channels::Event {
                state: state.to_string(),
                alert,
            });
    }

    async fn evaluate(
        &self,
        rule: &Rule,
        o: &Observation,
        breached: bool,
        now: i64,
    ) -> anyhow::Result<()> {
        if breached {
            db::query(
                "INSERT INTO alert_pending (kind, subject, since) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(o.kind)
            .bind(&o.subject)
            .bind(now)
            .execute(&self.ctx.pool)
            .await?;
            let since: i64 = db::query_scalar(
                "SELECT since FROM alert_pending WHERE kind = $1 AND subject = $2",
            )
            .bind(o.kind)
            .bind(&o.subject)
            .fetch_one(&self.ctx.pool)
            .await?;
            if now - since >= rule.for_secs * 1000 {
                let severity = if matches!(
                    o.kind,
                    "slot_retained_wal_bytes"
                        | "connector_failed"
                        | "delivery_stalled_seconds"
                        | "pipeline_source_unreachable"
                        | "kafka_unreachable"
                        | "binlog_position_lost"
                ) {
                    "critical"
                } else {
                    "warning"
                };
                if let Some(alert) =
                    alerts::fire_returning(&self.ctx.pool, o.kind, &o.subject, severity, &o.message)
                        .await
                        .map_err(|e| anyhow::anyhow!(e.to_string()))?
                {
                    self.notify(
                        "firing",
                        alert,
                        json!({"value": o.value, "threshold": rule.threshold}),
                    );
                }
            }
        } else {
            db::query("DELETE FROM alert_pending WHERE kind = $1 AND subject = $2")
                .bind(o.kind)
                .bind(&o.subject)
                .execute(&self.ctx.pool)
                .await?;
            if let Some(alert) = alerts::resolve(&self.ctx.pool, o.kind, &o.subject)
                .await
                .map_err(|e| anyhow::anyhow!(e.to_string()))?
            {
                self.notify(
                    "resolved",
                    alert,
                    json!({"value": o.value, "threshold": rule.threshold}),
                );
            }
        }
        Ok(())
    }
}

/// Samples one statement of [`record_samples`] writes at most (4 bound parameters each: far
/// inside SQLite's 32,766 and PostgreSQL's 65,535).
const SAMPLES_PER_STATEMENT: usize = 500;
/// Samples one transaction of [`record_samples`] writes at most: each is a short write, so
/// the other writers (the reconciler, a person's change) get the lock in between.
const SAMPLES_PER_TRANSACTION: usize = 2_000;

/// Stores one cycle's samples, (kind, subject, value) at `at` (unix ms): each becomes its
/// series' latest value and a point of its history. Many rows a statement and a few
/// statements a transaction: at 10,000 connectors a cycle has 75,000 samples, and two
/// statements each, in one transaction, held SQLite's write lock for seconds. A reader may see
/// a cycle half written (some series at `at`, the rest a cycle older); a sample given twice is
/// stored once, with its last value.
pub async fn record_samples(
    pool: &Pool,
    samples: &[(&str, &str, f64)],
    at: i64,
) -> sqlx::Result<()> {
    // One row per series: PostgreSQL refuses an upsert that meets a row twice.
    let mut seen = std::collections::HashSet::new();
    let mut rows: Vec<&(&str, &str, f64)> = samples
        .iter()
        .rev()
        .filter(|(k, s, _)| seen.insert((*k, *s)))
        .collect();
    rows.reverse();
    for part in rows.chunks(SAMPLES_PER_TRANSACTION) {
        let _gate = db::write_gate(pool).await;
        let mut tx = db::begin_write(pool).await?;
        for chunk in part.chunks(SAMPLES_PER_STATEMENT) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| format!("(${}, ${}, ${}, $1)", 3 * i + 2, 3 * i + 3, 3 * i + 4))
                .collect();
            let sql = format!(
                "INSERT INTO series (kind, subject, latest, latest_at) VALUES {}
                 ON CONFLICT (kind, subject) DO UPDATE SET latest = excluded.latest, latest_at = excluded.latest_at
                 RETURNING id, kind, subject",
                values.join(", ")
            );
            let mut q = db::query_as::<(i64, String, String)>(&sql).bind(at);
            for (kind, subject, value) in chunk {
                q = q.bind(*kind).bind(*subject).bind(*value);
            }
            // RETURNING's order is not the VALUES' order: matched by name.
            let ids: std::collections::HashMap<(String, String), i64> = q
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .map(|(id, kind, subject)| ((kind, subject), id))
                .collect();
            let values: Vec<String> = (0..chunk.len())
                .map(|i| format!("(${}, $1, ${})", 2 * i + 2, 2 * i + 3))
                .collect();
            let sql = format!(
                "INSERT INTO points (series_id, at, value) VALUES {} ON CONFLICT (series_id, at) DO UPDATE SET value = excluded.value",
                values.join(", ")
            );
            let mut q = db::query(&sql).bind(at);
            for (kind, subject, value) in chunk {
                let id = ids
                    .get(&(kind.to_string(), subject.to_string()))
                    .copied()
                    .ok_or(sqlx::Error::RowNotFound)?;
                q = q.bind(id).bind(*value);
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// Points newer than this stay as the monitor wrote them (the overview's charts show the last
/// 120 points: 30 minutes at the default interval).
pub const RAW_WINDOW_MS: i64 = 3_600_000;
/// Older points are kept one per series per bucket: the last one measured in it.
pub const BUCKET_MS: i64 = 300_000;
/// Rows one statement of the history's upkeep deletes at most: each is its own short write
/// transaction (about a millisecond), so pages and the other writers get the lock in between.
pub const UPKEEP_ROWS: i64 = 2_000;
/// Wall time one monitor cycle spends on the history's upkeep at most; what is left waits for
/// the next cycle (only a backlog, such as the first upkeep of a week of raw points, needs more).
pub const UPKEEP_BUDGET: Duration = Duration::from_secs(2);

/// The start of the bucket that holds `t` (unix ms).
pub fn bucket_floor(t: i64) -> i64 {
    t.div_euclid(BUCKET_MS) * BUCKET_MS
}

/// How often each series is trimmed and thinned: a 24th of the retention, between one bucket
/// and an hour. A point therefore stays at most that long past the retention (or the raw
/// window), and at 10,000 connectors the upkeep touches each series once an hour instead of
/// every cycle.
pub fn upkeep_every(retention_ms: i64) -> i64 {
    (retention_ms / 24).clamp(BUCKET_MS, 3_600_000)
}

/// The end of the next thinning chunk of a series: from `from` (a bucket boundary) to the bucket
/// boundary at or before `nth` (the point [`UPKEEP_ROWS`] on, when there is one), at least one
/// bucket and at most `cutoff`.
pub fn chunk_end(from: i64, nth: Option<i64>, cutoff: i64) -> i64 {
    match nth {
        Some(at) => bucket_floor(at).max(from + BUCKET_MS).min(cutoff),
        None => cutoff,
    }
}

/// What one upkeep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Upkeep {
    /// Points older than the retention dropped.
    pub trimmed: u64,
    /// Points older than the raw window dropped as not the last of their bucket.
    pub thinned: u64,
    /// Series brought up to date, and series dropped (not measured within the retention).
    pub series: u64,
    pub series_dropped: u64,
    /// Whether series were left for the next upkeep (the budget ran out).
    pub more: bool,
}

/// Deletes one series' points before `before`, [`UPKEEP_ROWS`] at a time.
async fn trim_series(pool: &Pool, id: i64, before: i64) -> sqlx::Result<u64> {
    let mut dropped = 0;
    loop {
        let nth: Option<i64> = db::query_scalar(
            "SELECT at FROM points WHERE series_id = $1 AND at < $2 ORDER BY at LIMIT 1 OFFSET $3",
        )
        .bind(id)
        .bind(before)
        .bind(UPKEEP_ROWS)
        .fetch_optional(pool)
        .await?;
        let until = nth.unwrap_or(before);
        let gate = db::write_gate(pool).await;
        dropped += db::query("DELETE FROM points WHERE series_id = $1 AND at < $2")
            .bind(id)
            .bind(until)
            .execute(pool)
            .await?
            .rows_affected();
        drop(gate);
        tokio::task::yield_now().await;
        if nth.is_none() {
            return Ok(dropped);
        }
    }
}

/// Thins one series' points in `[from, cutoff)` (bucket boundaries) to the last of each
/// bucket, a chunk of about [`UPKEEP_ROWS`] at a time, and records how far it got.
async fn thin_series(pool: &Pool, id: i64, mut from: i64, cutoff: i64) -> sqlx::Result<u64> {
    let mut dropped = 0;
    while from < cutoff {
        let nth: Option<i64> = db::query_scalar(
            "SELECT at FROM points WHERE series_id = $1 AND at >= $2 AND at < $3 ORDER BY at LIMIT 1 OFFSET $4",
        )
        .bind(id)
        .bind(from)
        .bind(cutoff)
        .bind(UPKEEP_ROWS)
        .fetch_optional(pool)
        .await?;
        let to = chunk_end(from, nth, cutoff);
        let gate = db::write_gate(pool).await;
        dropped += db::query(
            "DELETE FROM points WHERE series_id = $1 AND at >= $2 AND at < $3 AND at NOT IN
             (SELECT MAX(at) FROM points WHERE series_id = $4 AND at >= $5 AND at < $6 GROUP BY at / $7)",
        )
        .bind(id)
        .bind(from)
        .bind(to)
        .bind(id)
        .bind(from)
        .bind(to)
        .bind(BUCKET_MS)
        .execute(pool)
        .await?
        .rows_affected();
        drop(gate);
        tokio::task::yield_now().await;
        from = to;
    }
    db::query("UPDATE series SET compacted_before = $1 WHERE id = $2 AND compacted_before < $3")
        .bind(cutoff)
        .bind(id)
        .bind(cutoff)
        .execute(pool)
        .await?;
    Ok(dropped)
}

/// The history's upkeep, series by series and in short write transactions (no page waits on a
/// long one): drops the points older than `now - retention_ms` and the series not measured
/// since then, and keeps the points older than [`RAW_WINDOW_MS`] one per [`BUCKET_MS`] (the
/// last measured in each: a value the monitor did read, so a counter such as
/// `pipeline_topic_end_offset` stays exact at each bucket's end and a rate taken across both
/// resolutions stays right; a mean would invent values and need a rewrite of each kept row).
/// A series is due once its thinned boundary lags by [`upkeep_every`]; the least recently kept
/// go first, until `budget` runs out.
///
/// At the default 15 s interval and 7-day retention a series keeps 240 raw points and 2,004
/// thinned ones: 2,244 instead of 40,320 (18× fewer).
pub async fn upkeep_samples(
    pool: &Pool,
    now: i64,
    retention_ms: i64,
    budget: Duration,
) -> sqlx::Result<Upkeep> {
    let started = std::time::Instant::now();
    let before = now - retention_ms;
    let cutoff = bucket_floor(now - RAW_WINDOW_MS);
    let due = cutoff - upkeep_every(retention_ms);
    let mut done = Upkeep::default();
    loop {
        let batch: Vec<(i64, i64, i64)> = db::query_as(
            "SELECT id, latest_at, compacted_before FROM series WHERE compacted_before <= $1
             ORDER BY compacted_before, id LIMIT 200",
        )
        .bind(due)
        .fetch_all(pool)
        .await?;
        if batch.is_empty() {
            return Ok(done);
        }
        for (id, latest_at, compacted_before) in batch {
            if started.elapsed() >= budget {
                done.more = true;
                return Ok(done);
            }
            done.trimmed += trim_series(pool, id, before).await?;
            if latest_at < before {
                let gate = db::write_gate(pool).await;
                done.series_dropped +=
                    db::query("DELETE FROM series WHERE id = $1 AND latest_at < $2")
                        .bind(id)
                        .bind(before)
                        .execute(pool)
                        .await?
                        .rows_affected();
                drop(gate);
                continue;
            }
            let from = compacted_before.max(bucket_floor(before));
            done.thinned += thin_series(pool, id, from, cutoff).await?;
            done.series += 1;
        }
    }
}

/// Drops the history older than `before` (unix ms) at once, in the upkeep's short
/// transactions, and the series not measured since then (a full [`upkeep_samples`] without
/// the thinning or the budget).
pub async fn trim_samples(pool: &Pool, before: i64) -> sqlx::Result<u64> {
    let ids: Vec<i64> = db::query_scalar("SELECT id FROM series ORDER BY id")
        .fetch_all(pool)
        .await?;
    let mut dropped = 0;
    for id in ids {
        dropped += trim_series(pool, id, before).await?;
    }
    let gate = db::write_gate(pool).await;
    db::query("DELETE FROM series WHERE latest_at < $1")
        .bind(before)
        .execute(pool)
        .await?;
    drop(gate);
    Ok(dropped)
}

/// One measured value of a signal.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct Sample {
    pub value: f64,
    /// When it was measured, in Unix milliseconds.
    pub at: i64,
}

/// A subject's recent samples, oldest first (for charts and the API).
pub async fn history(
    pool: &Pool,
    who: &Principal,
    kind: &str,
    subject: &str,
    limit: i64,
) -> Result<Vec<Sample>> {
    who.require(Role::Viewer, "see metrics history")?;
    let mut rows: Vec<Sample> = db::query_as(
        "SELECT p.value, p.at FROM points p JOIN series s ON s.id = p.series_id
         WHERE s.kind = $1 AND s.subject = $2 ORDER BY p.at DESC LIMIT $3",
    )
    .bind(kind)
    .bind(subject)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.reverse();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connections::{Check, TestReport};

    fn report(checks: Vec<Check>) -> TestReport {
        TestReport {
            ok: checks
                .iter()
                .all(|c| c.status != crate::connections::CheckStatus::Fail),
            checks,
            tested_at: String::new(),
            duration_ms: 0,
        }
    }

    #[test]
    fn buckets_upkeep_period_and_chunks() {
        assert_eq!(bucket_floor(0), 0);
        assert_eq!(bucket_floor(299_999), 0);
        assert_eq!(bucket_floor(300_000), 300_000);
        assert_eq!(bucket_floor(1_795_864_114_954), 1_795_863_900_000);
        // A 24th of the retention, between a bucket and an hour.
        assert_eq!(upkeep_every(7 * 86_400_000), 3_600_000);
        assert_eq!(upkeep_every(60_000), BUCKET_MS);
        assert_eq!(upkeep_every(24 * 600_000), 600_000);
        // A chunk ends at the bucket of the UPKEEP_ROWS-th point, at least a bucket on, at
        // most the cutoff; without such a point, at the cutoff.
        assert_eq!(chunk_end(0, Some(1_234_567), 9_000_000), 1_200_000);
        assert_eq!(chunk_end(0, Some(10), 9_000_000), BUCKET_MS);
        assert_eq!(chunk_end(0, Some(8_999_999), 3_000_000), 3_000_000);
        assert_eq!(chunk_end(600_000, None, 3_000_000), 3_000_000);
        // The arithmetic the docs give: 15 s points, 7 days, an hour raw.
        let raw = RAW_WINDOW_MS / 15_000;
        let thinned = (7 * 86_400_000 - RAW_WINDOW_MS) / BUCKET_MS;
        assert_eq!((raw, thinned, raw + thinned), (240, 2_004, 2_244));
    }

    /// A cycle of more samples than one statement and one transaction writes (2,345 series
    /// here) stores each as its series' latest value and a point, matched to the right series;
    /// a sample given twice is stored once, with the value given last.
    #[tokio::test]
    async fn a_large_cycle_stores_every_sample_on_its_own_series() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        let subjects: Vec<String> = (0..2_345).map(|i| format!("s{i}")).collect();
        for (at, offset) in [(1_000, 0.0), (16_000, 0.5)] {
            let mut batch: Vec<(&str, &str, f64)> = subjects
                .iter()
                .enumerate()
                .map(|(i, s)| ("delivery_lag_records", s.as_str(), i as f64 + offset))
                .collect();
            batch.push(("delivery_lag_records", "s7", -1.0));
            record_samples(&pool, &batch, at).await.unwrap();
        }
        let rows: Vec<(String, f64, i64, f64, i64)> = crate::db::query_as(
            "SELECT s.subject, s.latest, s.latest_at, p.value, p.at FROM series s JOIN points p ON p.series_id = s.id ORDER BY s.id, p.at",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 2 * subjects.len(), "two points a series");
        for (subject, latest, latest_at, value, at) in rows {
            let i: f64 = subject[1..].parse().unwrap();
            let expected = |offset: f64| if subject == "s7" { -1.0 } else { i + offset };
            assert_eq!((latest, latest_at), (expected(0.5), 16_000), "{subject}");
            assert_eq!(
                value,
                expected(if at == 1_000 { 0.0 } else { 0.5 }),
                "{subject} at {at}"
            );
        }
    }

    /// A real SQLite file: two series measured every 15 s for 3 hours and one not measured
    /// since the first, then the upkeep with a 2-hour retention.
    #[tokio::test]
    async fn upkeep_trims_thins_to_the_last_of_each_bucket_and_leaves_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        let step = 15_000;
        let start = 1_795_000_000_000 - 7_000; // not on a bucket boundary
        let cycles = 3 * 3_600_000 / step;
        for k in 0..cycles {
            let at = start + k * step;
            let mut batch = vec![
                ("delivery_lag_records", "d", k as f64),
                ("pipeline_topic_end_offset", "p", (7 * k) as f64),
            ];
            if k == 0 {
                batch.push(("delivery_lag_records", "gone", 1.0));
            }
            record_samples(&pool, &batch, at).await.unwrap();
        }
        let now = start + (cycles - 1) * step;
        let retention = 2 * 3_600_000;
        let before = now - retention;
        let cutoff = bucket_floor(now - RAW_WINDOW_MS);
        let points = |subject: &'static str| {
            let pool = pool.clone();
            async move {
                crate::db::query_as::<(i64, f64)>("SELECT p.at, p.value FROM points p JOIN series s ON s.id = p.series_id WHERE s.subject = $1 ORDER BY p.at")
                    .bind(subject)
                    .fetch_all(&pool)
                    .await
                    .unwrap()
            }
        };
        let all_before = points("p").await;
        let kept = upkeep_samples(&pool, now, retention, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(!kept.more);
        assert_eq!((kept.series, kept.series_dropped), (2, 1), "{kept:?}");
        let after = points("p").await;
        // Nothing older than the retention; the raw window as written.
        assert!(after.iter().all(|(at, _)| *at >= before));
        let raw_before: Vec<_> = all_before
            .iter()
            .filter(|(at, _)| *at >= cutoff)
            .cloned()
            .collect();
        let raw_after: Vec<_> = after
            .iter()
            .filter(|(at, _)| *at >= cutoff)
            .cloned()
            .collect();
        assert_eq!(raw_before, raw_after);
        // Between: the last point of each bucket, with its own value.
        let mut expected: Vec<(i64, f64)> = Vec::new();
        for (at, v) in all_before
            .iter()
            .filter(|(at, _)| *at >= before && *at < cutoff)
        {
            match expected.last_mut() {
                Some(last) if bucket_floor(last.0) == bucket_floor(*at) => *last = (*at, *v),
                _ => expected.push((*at, *v)),
            }
        }
        let thinned: Vec<_> = after
            .iter()
            .filter(|(at, _)| *at < cutoff)
            .cloned()
            .collect();
        assert_eq!(thinned, expected);
        assert!(
            thinned.len() < 14 && thinned.len() >= 11,
            "{}",
            thinned.len()
        );
        let per_series = (all_before.len() - after.len()) as u64;
        assert_eq!(kept.trimmed + kept.thinned, 2 * per_series + 1);
        // The series keep their latest value; the one not measured within the retention is gone.
        let latest: Vec<(String, f64, i64)> =
            crate::db::query_as("SELECT subject, latest, latest_at FROM series ORDER BY subject")
                .fetch_all(&pool)
                .await
                .unwrap();
        assert_eq!(
            latest,
            vec![
                ("d".to_string(), (cycles - 1) as f64, now),
                ("p".to_string(), (7 * (cycles - 1)) as f64, now)
            ]
        );
        assert_eq!(
            history(
                &pool,
                &Principal::cli(),
                "pipeline_topic_end_offset",
                "p",
                1
            )
            .await
            .unwrap()[0]
                .value,
            (7 * (cycles - 1)) as f64
        );
        // A second upkeep at once finds nothing due; an hour later, only what aged since.
        assert_eq!(
            upkeep_samples(&pool, now, retention, Duration::from_secs(60))
                .await
                .unwrap(),
            Upkeep::default()
        );
        let later = upkeep_samples(&pool, now + 3_600_000, retention, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(later.series, 2);
        assert!(later.thinned > 0 && later.trimmed > 0, "{later:?}");
        // A budget of nothing leaves the work for the next cycle.
        let none = upkeep_samples(&pool, now + 7_200_000, retention, Duration::ZERO)
            .await
            .unwrap();
        assert!(none.more && none.series == 0);
    }

    #[test]
    fn a_stalled_sink_is_explained_by_its_destination_check_read_like_a_trace() {
        let wrong_secret = report(vec![Check::fail(
            "bucket",
            "SignatureDoesNotMatch: The request signature we calculated does not match",
            "rotate",
        )]);
        let said = stall_cause(&wrong_secret);
        assert!(
            said.starts_with("permanent (authentication failed)")
                && said.contains("rotate the connection's credentials")
                && said.contains("Restarting will not help"),
            "{said}"
        );
        let down = report(vec![Check::fail(
            "bucket",
            "could not reach the endpoint: tcp connect error: Connection refused (os error 111)",
            "network",
        )]);
        let said = stall_cause(&down);
        assert!(
            said.starts_with("transient (connection refused)") && said.contains("catches up"),
            "{said}"
        );
        let fine = report(vec![Check::pass("bucket", "ok")]);
        assert!(stall_cause(&fine).contains("passes its connection test"));
    }
}
