//! The monitor: collects signals (delivery lag, replication-slot WAL, connector failures,
//! Connect reachability), keeps a bounded history, and turns rules into alerts with
//! durations, notifying webhooks on every transition. One process runs it: the holder of the
//! `monitor` lease.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::SqlitePool;

use super::{alerts, webhooks};
use crate::auth::{Principal, Role};
use crate::error::{Error, Result};
use crate::reconcile::lease::{now_ms, Lease};
use crate::secrets::store::SecretStore;

#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct Rule {
    pub kind: String,
    pub threshold: f64,
    pub for_secs: i64,
    pub enabled: bool,
    pub description: String,
}

pub async fn rules(pool: &SqlitePool, who: &Principal) -> Result<Vec<Rule>> {
    who.require(Role::Viewer, "see alert rules")?;
    Ok(sqlx::query_as(
        "SELECT kind, threshold, for_secs, enabled, description FROM alert_rules ORDER BY kind",
    )
    .fetch_all(pool)
    .await?)
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RulePatch {
    pub threshold: Option<f64>,
    pub for_secs: Option<i64>,
    pub enabled: Option<bool>,
}

pub async fn set_rule(
    pool: &SqlitePool,
    who: &Principal,
    kind: &str,
    patch: &RulePatch,
) -> Result<Rule> {
    who.require(Role::Admin, "change alert rules")?;
    let mut errors = crate::error::FieldErrors::new();
    if patch.threshold.is_some_and(|t| t < 0.0 || !t.is_finite()) {
        errors.insert("threshold".into(), "a number ≥ 0".into());
    }
    if patch.for_secs.is_some_and(|s| !(0..=86_400).contains(&s)) {
        errors.insert("for_secs".into(), "0 to 86400 seconds".into());
    }
    Error::check(errors)?;
    let done = sqlx::query("UPDATE alert_rules SET threshold = COALESCE(?, threshold), for_secs = COALESCE(?, for_secs), enabled = COALESCE(?, enabled) WHERE kind = ?")
        .bind(patch.threshold)
        .bind(patch.for_secs)
        .bind(patch.enabled)
        .bind(kind)
        .execute(pool)
        .await?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound(format!("alert rule {kind}")));
    }
    crate::audit::record_alone(pool, crate::audit::Entry { actor: who.into(), action: "alert_rule.update", target_kind: "alert_rule", target_id: kind, outcome: crate::audit::Outcome::Success, summary: json!({"threshold": patch.threshold, "for_secs": patch.for_secs, "enabled": patch.enabled}) }).await?;
    Ok(sqlx::query_as(
        "SELECT kind, threshold, for_secs, enabled, description FROM alert_rules WHERE kind = ?",
    )
    .bind(kind)
    .fetch_one(pool)
    .await?)
}

pub struct Monitor {
    pub pool: SqlitePool,
    pub store: Arc<SecretStore>,
    pub interval: Duration,
    pub retention: Duration,
    pub lease: Lease,
    pub lease_ttl: Duration,
}

/// One observation against one rule.
struct Observation {
    kind: &'static str,
    subject: String,
    /// The measured value (lag, bytes); 1.0/0.0 for yes/no conditions.
    value: f64,
    message: String,
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
                    tokio::select! {
                        result = self.cycle() => {
                            if let Err(e) = result {
                                tracing::warn!(error = format!("{e:#}"), "monitor cycle failed");
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

    async fn cycle(&self) -> anyhow::Result<()> {
        let now = now_ms();
        let mut seen: Vec<Observation> = Vec::new();
        let system = Principal::cli();
        // Delivery lag, per delivery (sum over partitions).
        for d in crate::deliveries::list(&self.pool, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            if let Ok(detail) =
                crate::deliveries::detail(&self.pool, &self.store, &system, &d.id).await
            {
                if let Some(age) = detail.freshness_secs {
                    seen.push(Observation {
                        kind: "delivery_freshness_seconds",
                        subject: d.name.clone(),
                        value: age,
                        message: format!("the newest data delivery {} wrote is {age:.0} s old (current as of {}): is the pipeline or the delivery stopped, or the source idle without heartbeats?", d.name, detail.current_as_of.clone().unwrap_or_default()),
                    });
                }
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
        // Replication slots of PostgreSQL pipelines.
        for p in crate::pipelines::list(&self.pool, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            let Ok(detail) =
                crate::pipelines::detail(&self.pool, &self.store, &system, &p.id).await
            else {
                continue;
            };
            if let Some(slot) = detail.slot.filter(|s| s.exists) {
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
                    value: if slot.active { 0.0 } else { 1.0 },
                    message: format!("nothing reads replication slot {} of pipeline {}: WAL accumulates on the source; resume or fix the pipeline, or drop the slot if the pipeline is gone", slot.name, p.name),
                });
            }
        }
        // Connector failures and Connect reachability, from what the reconciler observed.
        for c in crate::connectors::list(&self.pool, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            let failed = c.desired_state == "running"
                && (c.observed_state.as_deref() == Some("FAILED")
                    || c.tasks.iter().any(|t| t.state == "FAILED"));
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
        for k in crate::clusters::kafka::list(&self.pool, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            let Ok(access) = crate::clusters::kafka::access(&self.store, &k).await else {
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
        for c in crate::connections::list(&self.pool, &self.store, &system)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            if c.connection.provider != crate::connections::Provider::Postgresql
                || !c.connection.is_source()
            {
                continue;
            }
            let Ok(slots) =
                crate::pipelines::source_slots(&self.pool, &self.store, &system, &c.connection.id)
                    .await
            else {
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
        for cluster in crate::clusters::all(&self.pool)
            .await
            .map_err(|e| anyhow::anyhow!(e.to_string()))?
        {
            seen.push(Observation {
                kind: "connect_unreachable",
                subject: cluster.name.clone(),
                value: if cluster.last_error.is_some() { 1.0 } else { 0.0 },
                message: format!("Kafka Connect {} does not answer ({}): check that its workers run and that ClueCDC can reach {}", cluster.name, cluster.last_error.clone().unwrap_or_default(), cluster.url),
            });
        }
        let rules: Vec<Rule> = sqlx::query_as(
            "SELECT kind, threshold, for_secs, enabled, description FROM alert_rules",
        )
        .fetch_all(&self.pool)
        .await?;
        for o in &seen {
            if matches!(
                o.kind,
                "delivery_lag_records" | "slot_retained_wal_bytes" | "delivery_freshness_seconds"
            ) {
                sqlx::query("INSERT INTO samples (kind, subject, value, at) VALUES (?, ?, ?, ?)")
                    .bind(o.kind)
                    .bind(&o.subject)
                    .bind(o.value)
                    .bind(now)
                    .execute(&self.pool)
                    .await?;
            }
            let Some(rule) = rules.iter().find(|r| r.kind == o.kind) else {
                continue;
            };
            let breached = rule.enabled && o.value > rule.threshold;
            self.evaluate(rule, o, breached, now).await?;
        }
        // What is no longer observed at all (a dropped slot, a deleted delivery) resolves.
        for rule in &rules {
            let still: Vec<&str> = seen
                .iter()
                .filter(|o| o.kind == rule.kind)
                .map(|o| o.subject.as_str())
                .collect();
            let open: Vec<String> = sqlx::query_scalar(
                "SELECT subject FROM alerts WHERE kind = ? AND state = 'firing'",
            )
            .bind(&rule.kind)
            .fetch_all(&self.pool)
            .await?;
            for subject in open.into_iter().filter(|s| !still.contains(&s.as_str())) {
                sqlx::query("DELETE FROM alert_pending WHERE kind = ? AND subject = ?")
                    .bind(&rule.kind)
                    .bind(&subject)
                    .execute(&self.pool)
                    .await?;
                if let Some(alert) = alerts::resolve(&self.pool, &rule.kind, &subject)
                    .await
                    .map_err(|e| anyhow::anyhow!(e.to_string()))?
                {
                    webhooks::notify(
                        self.pool.clone(),
                        self.store.clone(),
                        json!({"state": "resolved", "alert": alert, "reason": "no longer observed", "sent_at": crate::time::now()}),
                    );
                }
            }
        }
        sqlx::query("DELETE FROM samples WHERE at < ?")
            .bind(now - self.retention.as_millis() as i64)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn evaluate(
        &self,
        rule: &Rule,
        o: &Observation,
        breached: bool,
        now: i64,
    ) -> anyhow::Result<()> {
        if breached {
            sqlx::query(
                "INSERT OR IGNORE INTO alert_pending (kind, subject, since) VALUES (?, ?, ?)",
            )
            .bind(o.kind)
            .bind(&o.subject)
            .bind(now)
            .execute(&self.pool)
            .await?;
            let since: i64 = sqlx::query_scalar(
                "SELECT since FROM alert_pending WHERE kind = ? AND subject = ?",
            )
            .bind(o.kind)
            .bind(&o.subject)
            .fetch_one(&self.pool)
            .await?;
            if now - since >= rule.for_secs * 1000 {
                let severity = if matches!(
                    o.kind,
                    "slot_retained_wal_bytes" | "connector_failed" | "kafka_unreachable"
                ) {
                    "critical"
                } else {
                    "warning"
                };
                if let Some(alert) =
                    alerts::fire_returning(&self.pool, o.kind, &o.subject, severity, &o.message)
                        .await
                        .map_err(|e| anyhow::anyhow!(e.to_string()))?
                {
                    webhooks::notify(
                        self.pool.clone(),
                        self.store.clone(),
                        json!({"state": "firing", "alert": alert, "value": o.value, "threshold": rule.threshold, "sent_at": crate::time::now()}),
                    );
                }
            }
        } else {
            sqlx::query("DELETE FROM alert_pending WHERE kind = ? AND subject = ?")
                .bind(o.kind)
                .bind(&o.subject)
                .execute(&self.pool)
                .await?;
            if let Some(alert) = alerts::resolve(&self.pool, o.kind, &o.subject)
                .await
                .map_err(|e| anyhow::anyhow!(e.to_string()))?
            {
                webhooks::notify(
                    self.pool.clone(),
                    self.store.clone(),
                    json!({"state": "resolved", "alert": alert, "value": o.value, "threshold": rule.threshold, "sent_at": crate::time::now()}),
                );
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Sample {
    pub value: f64,
    pub at: i64,
}

/// A subject's recent samples, oldest first (for charts and the API).
pub async fn history(
    pool: &SqlitePool,
    who: &Principal,
    kind: &str,
    subject: &str,
    limit: i64,
) -> Result<Vec<Sample>> {
    who.require(Role::Viewer, "see metrics history")?;
    let mut rows: Vec<Sample> = sqlx::query_as(
        "SELECT value, at FROM samples WHERE kind = ? AND subject = ? ORDER BY at DESC LIMIT ?",
    )
    .bind(kind)
    .bind(subject)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.reverse();
    Ok(rows)
}
