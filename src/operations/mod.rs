//! Durable multi-step operations. A workflow that takes more than one request to Connect (an
//! offset replay: stop, save, alter, resume, observe) is a row in `operations` with the step
//! to run next. Whichever process holds the `operations` lease carries every open one forward,
//! one step at a time, so killing the process that started it only delays it: the next holder
//! (the same `serve` restarted, or a `worker`) goes on from the step recorded.
//!
//! Invariants:
//! - Every step is safe to run again: a process may die after doing a step and before
//!   recording it, and the next holder repeats it.
//! - While an operation holds a connector (`connectors.operation_id`), the connector's desired
//!   state is the one the operation set, and no other route (pause, resume, restart, edit,
//!   delete) may change it; the reconciler enforces that state like any other, so it never
//!   fights the operation.
//! - An operation that fails gives the connector back in the state it had before, with the
//!   failed step and the reason recorded.

pub mod offsets;

use crate::db;
use std::time::Duration;

use crate::db::Pool;
use serde::Serialize;
use serde_json::{json, Value};

use crate::audit::{self, Actor, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::error::{Error, Result};
use crate::reconcile::lease::{now_ms, Lease};

pub const LEASE: &str = "operations";

/// How often the holder looks for open operations and checks the step each one waits on.
const TICK: Duration = Duration::from_millis(500);

/// A durable multi-step operation (an offset change, a reset, a delete…) and how far it got.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Operation {
    pub id: String,
    #[schemars(with = "OperationKind")]
    pub kind: String,
    /// What the operation acts on: `delivery`, `pipeline`, `replication` or `bulk`.
    #[schemars(with = "TargetKind")]
    pub target_kind: String,
    pub target_id: String,
    pub target_name: String,
    /// The step to run next; for a failed operation, the step that failed.
    pub step: String,
    /// The kind's steps in order, to show how far it got.
    pub steps: Vec<&'static str>,
    #[schemars(with = "OperationState")]
    pub state: String,
    /// Why it failed (or why the current step is waiting).
    pub error: Option<String>,
    /// Who started it (a user's or API token's name).
    pub actor: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    #[serde(skip)]
    pub params: Value,
    #[serde(skip)]
    pub step_started_at: i64,
    #[serde(skip)]
    pub actor_kind: String,
}

/// What an operation does (documents `Operation.kind`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum OperationKind {
    /// An offset change of a delivery (replay or restore).
    Replay,
    /// A pipeline's reset and re-snapshot.
    Reset,
    /// An incremental snapshot of tables added to a pipeline.
    SnapshotSignal,
    PipelineDelete,
    DeliveryDelete,
    ReplicationDelete,
    /// A bulk action over many connectors.
    Bulk,
}

/// What an operation acts on (documents `Operation.target_kind`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
#[schemars(rename = "OperationTargetKind")]
enum TargetKind {
    Delivery,
    Pipeline,
    Replication,
    Bulk,
}

/// Where an operation is (documents `Operation.state`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum OperationState {
    /// Steps remain; the process holding the operations lease carries it forward.
    Running,
    /// Every step ran.
    Done,
    /// A step failed; the connector was given back in the state it had before.
    Failed,
    /// The target went away meanwhile (deleted): nothing was left to do.
    Interrupted,
}

/// What an operation acts on, in one object (API.md's `target`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct OperationTarget {
    #[schemars(with = "TargetKind")]
    pub kind: String,
    pub id: String,
    pub name: String,
}

/// An operation as the API answers it: its fields, and what it acts on in one object beside
/// `target_kind`, `target_id` and `target_name`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Operation")]
pub struct OperationView {
    #[serde(flatten)]
    pub op: Operation,
    pub target: OperationTarget,
}

impl From<&Operation> for OperationView {
    fn from(op: &Operation) -> Self {
        OperationView {
            target: OperationTarget {
                kind: op.target_kind.clone(),
                id: op.target_id.clone(),
                name: op.target_name.clone(),
            },
            op: op.clone(),
        }
    }
}

/// The JSON the API answers for an operation ([`OperationView`]), for replies built as JSON.
pub fn to_json(op: &Operation) -> Value {
    json!(OperationView::from(op))
}

impl Operation {
    /// What it is, in words.
    pub fn label(&self) -> &'static str {
        match self.kind.as_str() {
            "replay" => "Offset change",
            "reset" => "Reset and re-snapshot",
            "snapshot_signal" => "Snapshot of added tables",
            "pipeline_delete" => "Pipeline delete",
            "delivery_delete" => "Delivery delete",
            "replication_delete" => "Replication delete",
            "bulk" => "Bulk action",
            _ => "Operation",
        }
    }
    pub fn running(&self) -> bool {
        self.state == "running"
    }
    /// Steps before the current one are done; for a finished operation, all of them.
    pub fn step_done(&self, step: &str) -> bool {
        if self.state == "done" {
            return true;
        }
        let at = self.steps.iter().position(|s| *s == self.step);
        let this = self.steps.iter().position(|s| *s == step);
        matches!((this, at), (Some(t), Some(a)) if t < a)
    }
}

/// The steps of each kind, in order.
pub fn steps_of(kind: &str) -> Vec<&'static str> {
    match kind {
        "replay" | "reset" => vec!["stop", "save", "change", "resume", "observe"],
        "snapshot_signal" => vec!["wait_running", "signal", "confirm"],
        "pipeline_delete" | "delivery_delete" | "replication_delete" => vec!["remove", "forget"],
        "bulk" => vec!["run"],
        _ => vec![],
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    kind: String,
    target_kind: String,
    target_id: String,
    target_name: String,
    step: String,
    state: String,
    params: String,
    error: Option<String>,
    actor: String,
    actor_kind: String,
    started_at: String,
    step_started_at: i64,
    finished_at: Option<String>,
}

impl From<Row> for Operation {
    fn from(r: Row) -> Self {
        Operation {
            steps: steps_of(&r.kind),
            params: serde_json::from_str(&r.params).unwrap_or(Value::Null),
            id: r.id,
            kind: r.kind,
            target_kind: r.target_kind,
            target_id: r.target_id,
            target_name: r.target_name,
            step: r.step,
            state: r.state,
            error: r.error,
            actor: r.actor,
            actor_kind: r.actor_kind,
            started_at: r.started_at,
            step_started_at: r.step_started_at,
            finished_at: r.finished_at,
        }
    }
}

const SELECT: &str = "SELECT id, kind, target_kind, target_id, target_name, step, state, params, error, actor, actor_kind, started_at, step_started_at, finished_at FROM operations";

pub async fn get(pool: &Pool, who: &Principal, id: &str) -> Result<Operation> {
    who.require(Role::Viewer, "see operations")?;
    load(pool, id).await
}

pub async fn load(pool: &Pool, id: &str) -> Result<Operation> {
    let row: Option<Row> = db::query_as(&format!("{SELECT} WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.map(Operation::from)
        .ok_or_else(|| Error::NotFound(format!("operation {id}")))
}

/// The newest operations on one target (a delivery's or a pipeline's id), newest first.
pub async fn of_target(pool: &Pool, target_id: &str, limit: i64) -> Result<Vec<Operation>> {
    let rows: Vec<Row> = db::query_as(&format!(
        "{SELECT} WHERE target_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2"
    ))
    .bind(target_id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Operation::from).collect())
}

/// Every open operation, oldest first.
pub async fn open(pool: &Pool) -> Result<Vec<Operation>> {
    let rows: Vec<Row> = db::query_as(&format!(
        "{SELECT} WHERE state = 'running' ORDER BY started_at, id"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Operation::from).collect())
}

/// The operation holding a connector, if one does: (id, kind).
pub async fn holding(pool: &Pool, connector_id: &str) -> Result<Option<(String, String)>> {
    Ok(db::query_as(
        "SELECT o.id, o.kind FROM connectors c JOIN operations o ON o.id = c.operation_id WHERE c.id = $1 AND o.state = 'running'",
    )
    .bind(connector_id)
    .fetch_optional(pool)
    .await?)
}

/// Refuses a change to a connector an operation holds, naming the operation.
pub async fn refuse_if_held(pool: &Pool, connector_id: &str, change: &str) -> Result<()> {
    match holding(pool, connector_id).await? {
        Some((id, kind)) => Err(Error::Conflict(format!(
            "cannot {change} now: operation {id} ({}) holds this connector until it finishes; follow it on its page or at /api/v1/operations/{id}",
            kind.replace('_', " ")
        ))),
        None => Ok(()),
    }
}

/// What a new operation starts with.
pub struct NewOperation<'a> {
    pub kind: &'static str,
    pub target_kind: &'static str,
    pub target_id: &'a str,
    pub target_name: &'a str,
    pub params: Value,
}

/// Inserts an operation at its first step, inside the caller's transaction (so the change it
/// starts with, e.g. a connector's desired state, commits with it). A second open
/// connector-holding operation on the same target is refused.
pub async fn insert(
    tx: &mut crate::db::Tx<'_>,
    who: &Principal,
    new: NewOperation<'_>,
) -> Result<String> {
    // Time-ordered (v7, monotonic within this process): operations started in the same
    // second list in the order they started, on either engine.
    let id = uuid::Uuid::now_v7().to_string();
    let first = steps_of(new.kind)
        .first()
        .copied()
        .ok_or_else(|| Error::Unexpected(anyhow::anyhow!("no steps for {}", new.kind)))?;
    let actor = Actor::from(who);
    let done = db::query("INSERT INTO operations (id, kind, target_kind, target_id, target_name, step, state, params, actor, actor_kind, started_at, step_started_at) VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, $9, $10, $11)")
        .bind(&id)
        .bind(new.kind)
        .bind(new.target_kind)
        .bind(new.target_id)
        .bind(new.target_name)
        .bind(first)
        .bind(new.params.to_string())
        .bind(&actor.name)
        .bind(actor.kind)
        .bind(crate::time::now())
        .bind(now_ms())
        .execute(&mut **tx)
        .await;
    match done {
        Ok(_) => Ok(id),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(Error::Conflict(format!(
            "another operation on {} {} is still open; wait until it finishes (its step and error are on the {} page)",
            new.target_kind, new.target_name, new.target_kind
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The state an offset operation gives the connector back in: the one it has now. Refused for
/// a connector being deleted.
pub fn resume_to(
    desired_state: &str,
    target_kind: &str,
    name: &str,
) -> Result<crate::reconcile::plan::DesiredState> {
    use crate::reconcile::plan::DesiredState;
    match DesiredState::parse(desired_state) {
        Some(DesiredState::Deleted) | None => Err(Error::Conflict(format!(
            "{target_kind} {name} is being deleted"
        ))),
        Some(s) => Ok(s),
    }
}

/// Inserts an offset operation and takes its connector in the same transaction: desired state
/// STOPPED under the operation's id. Refused while another operation holds the connector.
pub async fn hold(
    tx: &mut crate::db::Tx<'_>,
    who: &Principal,
    new: NewOperation<'_>,
    connector_id: &str,
) -> Result<String> {
    let name = new.target_name.to_string();
    let id = insert(tx, who, new).await?;
    let held = db::query("UPDATE connectors SET desired_state = 'stopped', operation_id = $1, generation = generation + 1, updated_at = $2 WHERE id = $3 AND operation_id IS NULL")
        .bind(&id)
        .bind(crate::time::now())
        .bind(connector_id)
        .execute(&mut **tx)
        .await?;
    if held.rows_affected() != 1 {
        return Err(Error::Conflict(format!(
            "another operation holds {name}'s connector; wait until it finishes"
        )));
    }
    Ok(id)
}

/// What one step concluded.
pub enum Step {
    /// Go on with this step (now, in the same tick).
    Next(&'static str),
    /// Not yet: what the step waits on, shown as the operation's error while it waits.
    Wait(String),
    Done,
    /// Cannot go on: the operation fails at this step with this reason.
    Fail(String),
    /// The target is gone (deleted meanwhile): nothing left to do.
    Interrupted(String),
}

/// What steps get to work with: the service context (which it derefs to) while the lease is
/// held.
pub struct Ctx<'a> {
    pub svc: &'a crate::ctx::Ctx,
    lease: &'a Lease,
}

impl std::ops::Deref for Ctx<'_> {
    type Target = crate::ctx::Ctx;
    fn deref(&self) -> &crate::ctx::Ctx {
        self.svc
    }
}

impl Ctx<'_> {
    /// Checked right before every call that changes something outside the database.
    pub fn still_held(&self) -> bool {
        self.lease.still_held()
    }

    /// Every transaction recording an operation's progress begins here: refused once another
    /// process took the operations lease, so a holder paused mid-step (a stopped process, a
    /// partitioned host) cannot move an operation its successor carries on, nor finish it,
    /// after waking.
    pub async fn begin(&self) -> Result<db::Tx<'static>> {
        Ok(self.lease.begin().await?)
    }
}

/// How long one step may wait before the operation fails there.
pub const STEP_TIMEOUT_MS: i64 = 5 * 60 * 1000;

pub struct Runner {
    pub ctx: crate::ctx::Ctx,
    pub lease: Lease,
    pub lease_ttl: Duration,
}

impl Runner {
    pub fn spawn(
        self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                // Reads first: with no open operation, nothing is written (no lease renewal).
                let open = open(&self.ctx.pool).await.unwrap_or_default();
                if !open.is_empty()
                    && (self.lease.fresh() || self.lease.try_hold().await.unwrap_or(false))
                {
                    tokio::select! {
                        _ = self.tick(open) => {}
                        _ = crate::reconcile::keep_renewing(&self.lease, self.lease_ttl) => {
                            tracing::warn!("lost the operations lease mid-step; stopped");
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(TICK) => {}
                    _ = shutdown.changed() => break,
                }
            }
            self.lease.release().await;
        })
    }

    async fn tick(&self, open: Vec<Operation>) {
        let ctx = Ctx {
            svc: &self.ctx,
            lease: &self.lease,
        };
        for op in open {
            if let Err(e) = advance(&ctx, op).await {
                tracing::warn!(error = format!("{e:#}"), "operation step failed to record");
            }
        }
    }
}

/// Runs the operation's steps until one waits or it ends, recording each step as it is reached.
async fn advance(ctx: &Ctx<'_>, mut op: Operation) -> Result<()> {
    for _ in 0..8 {
        if !ctx.still_held() {
            return Ok(());
        }
        let outcome = match op.kind.as_str() {
            "replay" | "reset" => offsets::step(ctx, &op).await,
            "snapshot_signal" => crate::pipelines::snapshot_signal_step(ctx, &op).await,
            "pipeline_delete" => crate::pipelines::delete_step(ctx, &op).await,
            "delivery_delete" => crate::deliveries::delete_step(ctx, &op).await,
            "replication_delete" => crate::replications::delete_step(ctx, &op).await,
            "bulk" => crate::bulk::step(ctx, &op).await,
            other => Step::Fail(format!("unknown operation kind {other}")),
        };
        let outcome = match outcome {
            // A delete waits as long as it takes: the connector is marked for deletion either way.
            Step::Wait(why)
                if !op.kind.ends_with("_delete")
                    && now_ms() - op.step_started_at > STEP_TIMEOUT_MS =>
            {
                Step::Fail(format!(
                    "step {} waited more than 5 minutes: {why}",
                    op.step
                ))
            }
            other => other,
        };
        match outcome {
            Step::Next(step) => {
                let mut tx = ctx.begin().await?;
                db::query("UPDATE operations SET step = $1, step_started_at = $2, error = NULL WHERE id = $3 AND state = 'running'")
                    .bind(step)
                    .bind(now_ms())
                    .bind(&op.id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                tracing::info!(operation = %op.id, kind = %op.kind, step, "operation step");
                // Read again: the step may have recorded results in the params.
                op = load(&ctx.pool, &op.id).await?;
            }
            Step::Wait(why) => {
                if op.error.as_deref() != Some(why.as_str()) {
                    let mut tx = ctx.begin().await?;
                    db::query(
                        "UPDATE operations SET error = $1 WHERE id = $2 AND state = 'running'",
                    )
                    .bind(&why)
                    .bind(&op.id)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                }
                return Ok(());
            }
            Step::Done => return finish(ctx, &op, "done", None).await,
            Step::Fail(why) => {
                release(ctx, &op).await?;
                return finish(ctx, &op, "failed", Some(why)).await;
            }
            Step::Interrupted(why) => {
                release(ctx, &op).await?;
                return finish(ctx, &op, "interrupted", Some(why)).await;
            }
        }
    }
    Ok(())
}

/// Replaces an operation's params: a step's result that later steps, in this process or after
/// a restart, read.
pub async fn set_params(ctx: &Ctx<'_>, op: &Operation, params: &Value) -> Result<()> {
    let mut tx = ctx.begin().await?;
    db::query("UPDATE operations SET params = $1 WHERE id = $2 AND state = 'running'")
        .bind(params.to_string())
        .bind(&op.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Gives a held connector back in the state it had before the operation (`resume_to`).
pub async fn release(ctx: &Ctx<'_>, op: &Operation) -> Result<()> {
    let (Some(connector), Some(to)) = (
        op.params["connector_id"].as_str(),
        op.params["resume_to"].as_str(),
    ) else {
        return Ok(());
    };
    let mut tx = ctx.begin().await?;
    let done = db::query("UPDATE connectors SET desired_state = $1, operation_id = NULL, generation = generation + 1, updated_at = $2 WHERE id = $3 AND operation_id = $4")
        .bind(to)
        .bind(crate::time::now())
        .bind(connector)
        .bind(&op.id)
        .execute(&mut *tx)
        .await?;
    if done.rows_affected() > 0 {
        crate::reconcile::bump_desired_version(&mut *tx).await?;
    }
    tx.commit().await?;
    if done.rows_affected() > 0 {
        ctx.reconciler.wake();
    }
    Ok(())
}

async fn finish(ctx: &Ctx<'_>, op: &Operation, state: &str, error: Option<String>) -> Result<()> {
    let mut tx = ctx.begin().await?;
    let done = db::query("UPDATE operations SET state = $1, error = $2, finished_at = $3 WHERE id = $4 AND state = 'running'")
        .bind(state)
        .bind(&error)
        .bind(crate::time::now())
        .bind(&op.id)
        .execute(&mut *tx)
        .await?;
    if done.rows_affected() == 1 {
        audit::record(
            &mut tx,
            Entry {
                actor: Actor::system(),
                action: &format!("operation.{state}"),
                target_kind: &op.target_kind,
                target_id: &op.target_id,
                outcome: if state == "done" {
                    Outcome::Success
                } else {
                    Outcome::Failure
                },
                summary: json!({"operation_id": op.id, "kind": op.kind, "name": op.target_name, "step": op.step, "started_by": op.actor, "error": error}),
            },
        )
        .await?;
    }
    tx.commit().await?;
    tracing::info!(operation = %op.id, kind = %op.kind, state, error = ?error, "operation finished");
    Ok(())
}

/// The offsets an offset operation saved before its change and found after it (None before
/// its "save" step).
pub async fn saved_offsets(
    pool: &Pool,
    operation_id: &str,
) -> Result<Option<(Value, Option<Value>)>> {
    let row: Option<(String, Option<String>)> =
        db::query_as("SELECT before, after FROM offset_history WHERE operation_id = $1")
            .bind(operation_id)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(b, a)| {
        (
            serde_json::from_str(&b).unwrap_or(Value::Null),
            a.and_then(|a| serde_json::from_str(&a).ok()),
        )
    }))
}

/// The reconciler forgets a connector's row once Connect no longer has it.
pub async fn connector_gone(pool: &Pool, connector_id: &str) -> Result<bool> {
    let left: i64 = db::query_scalar("SELECT COUNT(*) FROM connectors WHERE id = $1")
        .bind(connector_id)
        .fetch_one(pool)
        .await?;
    Ok(left == 0)
}

/// What a delete request answers: waits up to 60 s for the delete operation, and says it goes
/// on without the request when Connect is slower than that. `what` names the connectors.
pub async fn delete_finished(pool: &Pool, id: &str, what: &str) -> Result<Operation> {
    finished_within(pool, id, what, Duration::from_secs(60)).await
}

async fn finished_within(pool: &Pool, id: &str, what: &str, within: Duration) -> Result<Operation> {
    let op = wait(pool, id, within).await?;
    let secs = within.as_secs();
    match op.state.as_str() {
        "done" => Ok(op),
        // Say which part is outstanding: past "remove" the connector is gone, and what is left
        // (dropping a replication slot on a source that does not answer) is not Connect's.
        "running" if op.step == "remove" => Err(Error::Unavailable(format!(
            "{what} was not removed from Connect within {secs} s ({}); operation {} keeps trying and finishes the delete once it is gone",
            op.error.unwrap_or_else(|| "no answer yet".into()),
            op.id
        ))),
        "running" => Err(Error::Unavailable(format!(
            "{what} is removed from Connect, but the delete did not finish within {secs} s ({}); operation {} keeps trying",
            op.error.unwrap_or_else(|| "no answer yet".into()),
            op.id
        ))),
        _ => Err(Error::Unavailable(
            op.error.unwrap_or_else(|| "the delete did not finish".into()),
        )),
    }
}

/// Waits (up to `within`) for an operation to end; its last state either way.
pub async fn wait(pool: &Pool, id: &str, within: Duration) -> Result<Operation> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let op = load(pool, id).await?;
        if !op.running() || std::time::Instant::now() >= deadline {
            return Ok(op);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pool_with_connector() -> (tempfile::TempDir, Pool) {
        let dir = tempfile::tempdir().unwrap();
        let pool = crate::db::open(&dir.path().join("t.db")).await.unwrap();
        crate::db::migrate(&pool).await.unwrap();
        let now = crate::time::now();
        db::query("INSERT INTO connect_clusters (id, name, url, created_at, updated_at) VALUES ('cc', 'c', 'http://127.0.0.1:1', $1, $1)")
            .bind(&now)
            .execute(&pool)
            .await
            .unwrap();
        db::query("INSERT INTO connectors (id, name, connect_cluster_id, config, desired_state, owner_kind, created_at, updated_at) VALUES ('k', 'sink', 'cc', '{}', 'paused', 'delivery', $1, $1)")
            .bind(&now)
            .execute(&pool)
            .await
            .unwrap();
        (dir, pool)
    }

    fn new(kind: &'static str) -> NewOperation<'static> {
        NewOperation {
            kind,
            target_kind: "delivery",
            target_id: "dl_1",
            target_name: "d",
            params: json!({"connector_id": "k", "resume_to": "paused"}),
        }
    }

    #[tokio::test]
    async fn a_held_connector_refuses_other_routes_and_a_second_operation_and_is_given_back_as_it_was(
    ) {
        let (_d, pool) = pool_with_connector().await;
        let who = Principal::cli();
        let mut tx = pool.begin().await.unwrap();
        let id = hold(&mut tx, &who, new("replay"), "k").await.unwrap();
        tx.commit().await.unwrap();
        let state: (String, Option<String>) =
            db::query_as("SELECT desired_state, operation_id FROM connectors WHERE id = 'k'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(state, ("stopped".to_string(), Some(id.clone())));
        match refuse_if_held(&pool, "k", "resume the connector").await {
            Err(Error::Conflict(m)) => assert!(m.contains(&id) && m.contains("replay"), "{m}"),
            other => panic!("{other:?}"),
        }
        let mut tx = pool.begin().await.unwrap();
        match hold(&mut tx, &who, new("reset"), "k").await {
            Err(Error::Conflict(m)) => assert!(m.contains("still open"), "{m}"),
            other => panic!("a second operation on the target: {other:?}"),
        }
        drop(tx);
        // A snapshot signal may run beside it: it holds no connector.
        let mut tx = pool.begin().await.unwrap();
        insert(&mut tx, &who, new("snapshot_signal")).await.unwrap();
        tx.commit().await.unwrap();

        let lease = Lease::new(pool.clone(), LEASE, "t".into(), 60_000);
        assert!(lease.try_hold().await.unwrap());
        let svc = crate::ctx::Ctx::for_test(&pool);
        let ctx = Ctx {
            svc: &svc,
            lease: &lease,
        };
        let op = load(&pool, &id).await.unwrap();
        release(&ctx, &op).await.unwrap();
        let state: (String, Option<String>) =
            db::query_as("SELECT desired_state, operation_id FROM connectors WHERE id = 'k'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(state, ("paused".to_string(), None), "given back paused");
        refuse_if_held(&pool, "k", "resume").await.unwrap();
    }

    /// A holder paused past its operations lease (it still believes it holds it) records no
    /// progress once another took over: neither a step, nor the end, nor the connector given
    /// back; the successor does.
    #[tokio::test]
    async fn a_paused_operations_holder_records_nothing_after_a_take_over() {
        let (_d, pool) = pool_with_connector().await;
        let who = Principal::cli();
        let mut tx = pool.begin().await.unwrap();
        let id = hold(&mut tx, &who, new("replay"), "k").await.unwrap();
        tx.commit().await.unwrap();
        let svc = crate::ctx::Ctx::for_test(&pool);
        let a = Lease::new(pool.clone(), LEASE, "a".into(), 200);
        let b = Lease::new(pool.clone(), LEASE, "b".into(), 60_000);
        assert!(a.try_hold().await.unwrap());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            b.try_hold().await.unwrap(),
            "a's lease ran out: b takes over"
        );
        let stale = Ctx {
            svc: &svc,
            lease: &a,
        };
        let op = load(&pool, &id).await.unwrap();
        assert!(release(&stale, &op).await.is_err());
        assert!(finish(&stale, &op, "done", None).await.is_err());
        let (state, held_by): (String, Option<String>) =
            db::query_as("SELECT desired_state, operation_id FROM connectors WHERE id = 'k'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(
            (state.as_str(), held_by.as_deref()),
            ("stopped", Some(id.as_str()))
        );
        assert_eq!(load(&pool, &id).await.unwrap().state, "running");
        let current = Ctx {
            svc: &svc,
            lease: &b,
        };
        release(&current, &op).await.unwrap();
        finish(&current, &op, "done", None).await.unwrap();
        assert_eq!(load(&pool, &id).await.unwrap().state, "done");
    }

    /// A delete request that gives up waiting says what is left: Connect, or (past "remove")
    /// the slot drop on a source that does not answer.
    #[tokio::test]
    async fn a_delete_still_running_names_the_part_that_is_outstanding() {
        let (_d, pool) = pool_with_connector().await;
        let who = Principal::cli();
        let mut tx = pool.begin().await.unwrap();
        let id = insert(
            &mut tx,
            &who,
            NewOperation {
                kind: "pipeline_delete",
                target_kind: "pipeline",
                target_id: "pl_1",
                target_name: "p",
                params: json!({"connector_id": "k", "drop_slot": true}),
            },
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let within = Duration::from_millis(300);
        match finished_within(&pool, &id, "the connector", within).await {
            Err(Error::Unavailable(m)) => {
                assert!(
                    m.contains("was not removed from Connect") && m.contains(&id),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        db::query("UPDATE operations SET step = 'forget', error = 'could not drop the replication slot: PostgreSQL at db:5432 is unreachable' WHERE id = $1")
            .bind(&id)
            .execute(&pool)
            .await
            .unwrap();
        match finished_within(&pool, &id, "the connector", within).await {
            Err(Error::Unavailable(m)) => assert!(
                m.contains("is removed from Connect")
                    && m.contains("could not drop the replication slot")
                    && m.contains("keeps trying"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn steps_before_the_current_one_are_done() {
        let op = Operation {
            id: "o".into(),
            kind: "replay".into(),
            target_kind: "delivery".into(),
            target_id: "d".into(),
            target_name: "d".into(),
            step: "change".into(),
            steps: steps_of("replay"),
            state: "running".into(),
            error: None,
            actor: "a".into(),
            started_at: String::new(),
            finished_at: None,
            params: Value::Null,
            step_started_at: 0,
            actor_kind: "cli".into(),
        };
        assert!(op.step_done("stop") && op.step_done("save"));
        assert!(!op.step_done("change") && !op.step_done("observe"));
        let done = Operation {
            state: "done".into(),
            ..op
        };
        assert!(done.step_done("observe"));
    }
}
