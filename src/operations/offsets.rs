//! The offset workflow shared by a delivery's replay (sink offsets set to chosen targets) and a
//! pipeline's reset (source offsets removed): stop the connector through the reconciler → save
//! the offsets Connect holds into `offset_history` → change them → give the connector back in
//! the state it had (`resume_to`) → observe it there. Each step is safe to run again.

use crate::db;
use serde_json::json;

use super::{release, Ctx, Operation, Step};
use crate::connect::{ConnectClient, ConnectError, SinkOffset};
use crate::error::Result;
use crate::reconcile::plan::DesiredState;

/// One step of a `replay` or `reset` operation.
pub async fn step(ctx: &Ctx<'_>, op: &Operation) -> Step {
    match run(ctx, op).await {
        Ok(s) => s,
        Err(e) => Step::Wait(e.to_string()),
    }
}

/// The offsets to keep in the history: a sink's, only of the delivery's own topics (the
/// consumer group may hold others: topics it no longer reads, or an earlier delivery's of the
/// same name); a source's as Connect gives them (their shape is the plugin's).
async fn saved(
    client: &ConnectClient,
    name: &str,
    op: &Operation,
) -> Result<serde_json::Value, ConnectError> {
    if op.kind == "reset" {
        return Ok(client.offsets(name).await?["offsets"].clone());
    }
    let topics: Vec<String> =
        serde_json::from_value(op.params["topics"].clone()).unwrap_or_default();
    let own: Vec<SinkOffset> = client
        .sink_offsets(name)
        .await?
        .into_iter()
        .filter(|o| topics.contains(&o.topic))
        .collect();
    Ok(json!(own))
}

async fn run(ctx: &Ctx<'_>, op: &Operation) -> Result<Step> {
    let p = &op.params;
    let name = p["connector_name"].as_str().unwrap_or_default();
    let table = match op.target_kind.as_str() {
        "delivery" => "deliveries",
        _ => "pipelines",
    };
    let exists: Option<String> = db::query_scalar(&format!("SELECT id FROM {table} WHERE id = $1"))
        .bind(&op.target_id)
        .fetch_optional(&ctx.pool)
        .await?;
    if exists.is_none() {
        return Ok(Step::Interrupted(format!(
            "the {} was deleted",
            op.target_kind
        )));
    }
    let Some(cluster) = crate::clusters::connect::all(&ctx.pool)
        .await?
        .into_iter()
        .find(|c| Some(c.id.as_str()) == p["connect_cluster_id"].as_str())
    else {
        return Ok(Step::Interrupted("its Connect cluster was removed".into()));
    };
    let client = crate::clusters::connect::client_for(&ctx.secrets, &cluster).await?;
    let state = || async {
        client
            .status(name)
            .await
            .map(|s| s.connector.state)
            .map_err(|e| e.to_string())
    };
    Ok(match op.step.as_str() {
        "stop" => match state().await {
            Ok(s) if s == "STOPPED" => Step::Next("save"),
            Ok(s) => Step::Wait(format!(
                "waiting for the reconciler to stop {name}: Connect shows {s}"
            )),
            Err(e) => Step::Wait(e),
        },
        "save" => {
            let before = match saved(&client, name, op).await {
                Ok(o) => o,
                Err(e) => return Ok(Step::Wait(e.to_string())),
            };
            db::query("INSERT INTO offset_history (target_id, operation_id, at, actor, reason, before) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING")
                .bind(&op.target_id)
                .bind(&op.id)
                .bind(crate::time::now())
                .bind(&op.actor)
                .bind(p["reason"].as_str().unwrap_or_default())
                .bind(before.to_string())
                .execute(&ctx.pool)
                .await?;
            Step::Next("change")
        }
        "change" => {
            match state().await {
                Ok(s) if s == "STOPPED" => {}
                Ok(s) => {
                    return Ok(Step::Wait(format!(
                        "Connect shows {name} {s}, not STOPPED (changed by another route?); waiting for the reconciler to stop it again before changing offsets"
                    )))
                }
                Err(e) => return Ok(Step::Wait(e)),
            }
            if !ctx.still_held() {
                return Ok(Step::Wait("the operations lease is being renewed".into()));
            }
            let changed = match op.kind.as_str() {
                "reset" => client.reset_offsets(name).await,
                _ => {
                    let targets: Vec<SinkOffset> =
                        serde_json::from_value(p["targets"].clone()).unwrap_or_default();
                    client.alter_sink_offsets(name, &targets).await
                }
            };
            match changed {
                Ok(()) => {}
                Err(ConnectError::Status { status, message }) if (400..500).contains(&status) => {
                    return Ok(Step::Fail(format!(
                        "Connect refused the offset change: {message}"
                    )))
                }
                Err(e) => return Ok(Step::Wait(e.to_string())),
            }
            let after = match saved(&client, name, op).await {
                Ok(o) => o,
                Err(e) => return Ok(Step::Wait(e.to_string())),
            };
            db::query("UPDATE offset_history SET after = $1 WHERE operation_id = $2")
                .bind(after.to_string())
                .bind(&op.id)
                .execute(&ctx.pool)
                .await?;
            Step::Next("resume")
        }
        "resume" => {
            release(ctx, op).await?;
            Step::Next("observe")
        }
        "observe" => {
            let want = DesiredState::parse(p["resume_to"].as_str().unwrap_or("running"))
                .unwrap_or(DesiredState::Running)
                .initial_state();
            match state().await {
                Ok(s) if s == want && want == "RUNNING" => {
                    // Running is not yet delivering: a sink given new offsets is observed
                    // committing past them, partition by partition.
                    let expected: Vec<SinkOffset> =
                        serde_json::from_value(p["deliver_again"].clone()).unwrap_or_default();
                    if expected.is_empty() {
                        return Ok(Step::Done);
                    }
                    let committed = match client.sink_offsets(name).await {
                        Ok(c) => c,
                        Err(e) => return Ok(Step::Wait(e.to_string())),
                    };
                    let behind: Vec<String> = expected
                        .iter()
                        .filter(|e| {
                            !committed.iter().any(|c| {
                                c.topic == e.topic
                                    && c.partition == e.partition
                                    && c.offset > e.offset
                            })
                        })
                        .map(|e| format!("{}-{} (from offset {})", e.topic, e.partition, e.offset))
                        .collect();
                    if behind.is_empty() {
                        Step::Done
                    } else {
                        Step::Wait(format!(
                            "{name} is RUNNING; waiting for it to commit records again in {}",
                            behind.join(", ")
                        ))
                    }
                }
                Ok(s) if s == want => Step::Done,
                Ok(s) => Step::Wait(format!(
                    "waiting for {name} to be {want} again: Connect shows {s}"
                )),
                Err(e) => Step::Wait(e),
            }
        }
        other => Step::Fail(format!("unknown step {other}")),
    })
}
