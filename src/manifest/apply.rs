//! `apply`: carries a plan out through the same service functions as the API, one step at a
//! time, as one audited change set.
//!
//! Invariants:
//! - Each step is one service call (or a call and the wait for the reconciler a delete needs),
//!   and each service call commits on its own: a failure part way leaves every step before it
//!   applied and consistent, nothing of the failed step, and the report names the steps left.
//!   Applying the same document again plans exactly what is left.
//! - Every audit row the steps write carries the change set's id (the request id), and one
//!   `config.apply` row sums the change set up with its actor.

use crate::db;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::db::Pool;
use serde::Serialize;
use serde_json::json;

use super::plan::{Ctx, Plan, Step};
use crate::audit::{self, Entry, Outcome};
use crate::error::{Error, Result};
use crate::reconcile::plan::DesiredState;

/// The step an apply stopped at, and why.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "FailedStep")]
pub struct Failed {
    pub step: String,
    pub error: String,
    /// The failed step's error code (`invalid`, `conflict`, `unavailable`, …).
    pub code: crate::error::ErrorCode,
    #[serde(skip)]
    pub cause: Option<Error>,
}

/// What an apply did: the plan, the steps done, the step it stopped at (if any) and the steps
/// left.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ApplyReport")]
pub struct Report {
    #[serde(flatten)]
    pub plan: Plan,
    /// True when every step was carried out.
    pub applied: bool,
    /// The id every audit row of this apply carries (the audit page filters by it).
    pub change_set: String,
    pub done: Vec<String>,
    pub failed: Option<Failed>,
    pub left: Vec<String>,
    /// Config provider tokens issued for Connect clusters created without one, by cluster name;
    /// shown this once.
    pub provider_tokens: BTreeMap<String, String>,
}

impl Report {
    pub fn text(&self) -> String {
        let mut out = String::new();
        for d in &self.done {
            out.push_str(&format!("done: {d}\n"));
        }
        for (cluster, token) in &self.provider_tokens {
            out.push_str(&format!(
                "provider token for Connect cluster {cluster:?} (shown once; put it in the workers' cluecdc provider settings): {token}\n"
            ));
        }
        if let Some(f) = &self.failed {
            out.push_str(&format!("FAILED: {}: {}\n", f.step, f.error));
            for l in &self.left {
                out.push_str(&format!("left: {l}\n"));
            }
            out.push_str("Everything before the failed step is applied; fix the cause and apply the same document again to carry out the rest.\n");
        } else if self.done.is_empty() {
            out.push_str("No changes: ClueCDC already matches the document.\n");
        } else {
            out.push_str(&format!(
                "Applied {} steps (change set {}).\n",
                self.done.len(),
                self.change_set
            ));
        }
        out
    }
}

/// Runs the plan's steps in order; stops at the first failure.
pub async fn apply(ctx: &Ctx<'_>, plan: Plan, prune: bool) -> Report {
    match crate::telemetry::current_request_id() {
        Some(id) => run(ctx, plan, prune, id).await,
        None => {
            let id = format!("apply-{}", uuid::Uuid::new_v4().simple());
            crate::telemetry::REQUEST_ID
                .scope(id.clone(), run(ctx, plan, prune, id))
                .await
        }
    }
}

async fn run(ctx: &Ctx<'_>, mut plan: Plan, prune: bool, change_set: String) -> Report {
    let steps = std::mem::take(&mut plan.steps);
    let mut report = Report {
        plan,
        applied: false,
        change_set,
        done: Vec::new(),
        failed: None,
        left: Vec::new(),
        provider_tokens: BTreeMap::new(),
    };
    let mut steps = steps.into_iter();
    while let Some(step) = steps.next() {
        let label = step.label();
        match run_step(ctx, step, &mut report.provider_tokens).await {
            Ok(()) => report.done.push(label),
            Err(e) => {
                report.failed = Some(Failed {
                    step: label,
                    error: e.to_string(),
                    code: e.code(),
                    cause: Some(e),
                });
                report.left = steps.map(|s| s.label()).collect();
                break;
            }
        }
    }
    report.applied = report.failed.is_none();
    if !report.done.is_empty() || report.failed.is_some() {
        let names = |v: &[super::plan::Named]| -> Vec<String> {
            v.iter().map(|n| format!("{} {}", n.kind, n.name)).collect()
        };
        let summary = json!({
            "create": names(&report.plan.create),
            "change": report.plan.change.iter().map(|c| json!({"kind": c.kind, "name": c.name, "fields": c.fields.keys().collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "delete": names(&report.plan.delete),
            "prune": prune,
            "done": report.done.len(),
            "failed": report.failed.as_ref().map(|f| json!({"step": f.step, "error": f.error})),
            "left": report.left,
        });
        let outcome = if report.applied {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        if let Err(e) = audit::record_alone(
            &ctx.pool,
            Entry {
                actor: ctx.who.into(),
                action: "config.apply",
                target_kind: "configuration",
                target_id: &report.change_set,
                outcome,
                summary,
            },
        )
        .await
        {
            tracing::error!(error = %e, "recording the apply in the audit trail failed");
        }
    }
    report
}

const TABLES: [(&str, &str, &str); 6] = [
    ("kafka_clusters", "kafka_clusters", "name"),
    ("connect_clusters", "connect_clusters", "name"),
    ("connections", "connections", "name"),
    ("pipelines", "pipelines", "name"),
    ("deliveries", "deliveries", "name"),
    ("webhooks", "webhooks", "url"),
];

/// The id of a resource by name (by URL for webhooks), as stored now.
async fn id_of(pool: &Pool, section: &str, name: &str) -> Result<String> {
    let (_, table, key) = TABLES
        .iter()
        .find(|(s, _, _)| *s == section)
        .ok_or_else(|| Error::Unexpected(anyhow::anyhow!("no section {section}")))?;
    let id: Option<String> = db::query_scalar(&format!("SELECT id FROM {table} WHERE {key} = $1"))
        .bind(name)
        .fetch_optional(pool)
        .await?;
    id.ok_or_else(|| Error::NotFound(format!("{section} {name:?}")))
}

/// Every name → id, as stored now (for the inputs of a pipeline or delivery to create).
async fn all_ids(pool: &Pool) -> Result<super::export::Current> {
    let mut cur = super::export::Current::default();
    for (section, table, key) in TABLES {
        let rows: Vec<(String, String)> = db::query_as(&format!("SELECT {key}, id FROM {table}"))
            .fetch_all(pool)
            .await?;
        cur.ids
            .insert(section, rows.into_iter().collect::<HashMap<_, _>>());
    }
    Ok(cur)
}

fn state(s: &str) -> Result<DesiredState> {
    DesiredState::parse(s)
        .filter(|s| *s != DesiredState::Deleted)
        .ok_or_else(|| Error::field("state", "running, paused or stopped"))
}

/// How long a delete may wait for the reconciler to remove its connector from Connect.
const DELETE_WAIT: Duration = Duration::from_secs(180);

async fn wait_gone(pool: &Pool, section: &str, name: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + DELETE_WAIT;
    loop {
        match id_of(pool, section, name).await {
            Err(Error::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
            Ok(_) if tokio::time::Instant::now() > deadline => {
                return Err(Error::Unavailable(format!(
                    "{section} {name:?} is still waiting for the reconciler to remove its connector from Connect after {} s; is `cluecdc serve` or `cluecdc worker` running, and Connect reachable?",
                    DELETE_WAIT.as_secs()
                )))
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn run_step(ctx: &Ctx<'_>, step: Step, tokens: &mut BTreeMap<String, String>) -> Result<()> {
    let (pool, store, wake, who) = (&ctx.pool, &*ctx.secrets, &*ctx.reconciler, ctx.who);
    match step {
        Step::CreateKafka(input) => {
            crate::clusters::kafka::create(ctx, who, &input).await?;
        }
        Step::ChangeKafka(name, patch) => {
            let id = id_of(pool, "kafka_clusters", &name).await?;
            crate::clusters::kafka::update(ctx, who, &id, &patch).await?;
        }
        Step::CreateConnect { mut input, kafka } => {
            if let Some(k) = kafka {
                input.kafka_cluster_id = Some(id_of(pool, "kafka_clusters", &k).await?);
            }
            let given = input.provider_token.is_some();
            let created = crate::clusters::connect::create(ctx, who, &input).await?;
            if !given {
                tokens.insert(created.cluster.name.clone(), created.provider_token);
            }
        }
        Step::ChangeConnect {
            name,
            mut patch,
            kafka,
            token,
        } => {
            let id = id_of(pool, "connect_clusters", &name).await?;
            if let Some(k) = kafka {
                patch.kafka_cluster_id = Some(id_of(pool, "kafka_clusters", &k).await?);
            }
            crate::clusters::connect::update(ctx, who, &id, &patch).await?;
            if let Some(t) = token {
                crate::clusters::connect::rotate_provider_token(pool, who, &id, Some(&t)).await?;
            }
        }
        Step::CreateConnection(input) => {
            crate::connections::create(ctx, who, &input).await?;
        }
        Step::ChangeConnection {
            name,
            patch,
            secrets,
        } => {
            let id = id_of(pool, "connections", &name).await?;
            crate::connections::update(ctx, who, &id, &patch).await?;
            if let Some(s) = secrets {
                crate::connections::rotate(pool, store, who, &id, &s).await?;
            }
        }
        Step::SetRule(kind, patch) => {
            crate::monitor::signals::set_rule(pool, who, &kind, &patch).await?;
        }
        Step::CreateWebhook(input) => {
            crate::monitor::webhooks::create(pool, store, who, &input).await?;
        }
        Step::DeleteWebhook(url) => {
            let id = id_of(pool, "webhooks", &url).await?;
            crate::monitor::webhooks::delete(pool, who, &id).await?;
        }
        Step::CreateChannel(input) => {
            crate::monitor::channels::create(ctx, who, &input).await?;
        }
        Step::ChangeChannel(name, input) => {
            crate::monitor::channels::update(ctx, who, &name, &input).await?;
        }
        Step::CreatePipeline(pl) => {
            let ids = all_ids(pool).await?;
            let input = super::plan::pipeline_input(&ids, &pl);
            crate::pipelines::create(ctx, who, &input).await?;
        }
        Step::SetTables(name, tables) => {
            let id = id_of(pool, "pipelines", &name).await?;
            crate::pipelines::set_tables(ctx, who, &id, tables).await?;
        }
        Step::SetPipelineState(name, s) => {
            let id = id_of(pool, "pipelines", &name).await?;
            crate::pipelines::set_state(pool, wake, who, &id, state(&s)?).await?;
        }
        Step::CreateDelivery(dl) => {
            let ids = all_ids(pool).await?;
            let input = super::plan::delivery_input(&ids, &dl);
            crate::deliveries::create(ctx, who, &input).await?;
        }
        Step::ChangeDelivery(name, patch) => {
            let id = id_of(pool, "deliveries", &name).await?;
            crate::deliveries::update(ctx, who, &id, &patch).await?;
        }
        Step::SetDeliveryState(name, s) => {
            let id = id_of(pool, "deliveries", &name).await?;
            crate::deliveries::set_state(pool, wake, who, &id, state(&s)?).await?;
        }
        Step::Delete(kind, name) => delete(ctx, kind, &name).await?,
    }
    Ok(())
}

async fn delete(ctx: &Ctx<'_>, kind: &str, name: &str) -> Result<()> {
    let (pool, wake, who) = (&ctx.pool, &*ctx.reconciler, ctx.who);
    match kind {
        "delivery" => {
            let id = id_of(pool, "deliveries", name).await?;
            crate::deliveries::delete(ctx, who, &id).await?;
            wait_gone(pool, "deliveries", name).await
        }
        "pipeline" => {
            // The slot stays: dropping it loses the stream's position, which only a person
            // decides (the pipeline page's delete with the slot option).
            let id = id_of(pool, "pipelines", name).await?;
            crate::pipelines::delete(pool, wake, who, &id, false).await?;
            wait_gone(pool, "pipelines", name).await
        }
        "webhook" => {
            let id = id_of(pool, "webhooks", name).await?;
            crate::monitor::webhooks::delete(pool, who, &id).await
        }
        "alert_channel" => crate::monitor::channels::delete(ctx, who, name).await,
        "connection" => {
            let id = id_of(pool, "connections", name).await?;
            crate::connections::delete(ctx, who, &id).await
        }
        "connect_cluster" => {
            let id = id_of(pool, "connect_clusters", name).await?;
            crate::clusters::connect::delete(ctx, who, &id).await
        }
        _ => {
            let id = id_of(pool, "kafka_clusters", name).await?;
            crate::clusters::kafka::delete(ctx, who, &id).await
        }
    }
}
