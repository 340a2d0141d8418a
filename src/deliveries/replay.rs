//! Guarded offset changes of a delivery's sink connector: replay from the beginning, from a
//! time, or from given offsets; skip to the latest; restore a saved set. One workflow, run as a
//! durable operation whose steps are in [`crate::operations::offsets`]: stop the connector
//! through the reconciler → save Connect's offsets into the delivery's offset history → set
//! them → give the connector back in the state it had → observe it there.
//!
//! The targets are resolved once, when the operation starts (a time becomes offsets through the
//! brokers' offsets-for-times), so what the preview counted is what is done; records that
//! arrive meanwhile are delivered as usual.

use crate::db;
use crate::db::Pool;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{load, Delivery};
use crate::audit::{self, Entry, Outcome};
use crate::auth::{Principal, Role};
use crate::connect::SinkOffset;
use crate::error::{Error, FieldErrors, Result};
use crate::operations::{self, NewOperation};
use crate::secrets::store::SecretStore;

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct ReplayInput {
    /// earliest | latest | timestamp | offsets
    #[schemars(with = "Option<ReplayFrom>")]
    pub from: Option<String>,
    /// RFC 3339 (a time without a zone is taken as UTC).
    pub timestamp: Option<String>,
    pub offsets: Option<Vec<OffsetInput>>,
    /// The delivery's name, typed.
    pub confirm: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
pub struct OffsetInput {
    pub topic: Option<String>,
    pub partition: Option<i64>,
    pub offset: Option<i64>,
}

/// One partition of the plan.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReplayPlanItem")]
pub struct PlanItem {
    pub topic: String,
    pub partition: i32,
    /// The sink's committed offset now (None: nothing committed; it would start at the log start).
    pub committed: Option<i64>,
    pub target: i64,
    /// Records that will be delivered again (target before the committed offset).
    pub records: i64,
    /// Records that will be skipped, never delivered (target after the committed offset).
    pub skipped: i64,
    pub log_start: i64,
    pub end: i64,
    /// Time of the oldest record retention has kept (None: the partition is empty).
    pub oldest_retained_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ReplayPlan {
    #[schemars(with = "ReplayFrom")]
    pub from: String,
    /// The time replayed from (RFC 3339), when `from` is `timestamp`.
    #[schemars(extend("format" = "date-time"))]
    pub timestamp: Option<String>,
    pub items: Vec<PlanItem>,
    pub records: i64,
    pub skipped: i64,
}

impl ReplayPlan {
    fn targets(&self) -> Vec<SinkOffset> {
        self.items
            .iter()
            .map(|i| SinkOffset {
                topic: i.topic.clone(),
                partition: i.partition,
                offset: i.target,
            })
            .collect()
    }
}

pub const FROM: &[(&str, &str)] = &[
    (
        "earliest",
        "the beginning (the oldest record retention kept)",
    ),
    ("timestamp", "a point in time"),
    ("offsets", "given partition offsets"),
    ("latest", "the end: skip every record not delivered yet"),
];

fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = s.trim();
    crate::time::parse(s).or_else(|| {
        // The browser's datetime-local: no zone, minutes or seconds.
        ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
            .map(|t| t.and_utc())
    })
}

/// What a replay would do, partition by partition; checks everything and changes nothing.
pub async fn plan(
    pool: &Pool,
    store: &SecretStore,
    who: &Principal,
    id: &str,
    input: &ReplayInput,
) -> Result<(Delivery, ReplayPlan)> {
    who.require(Role::Operator, "replay or skip a delivery's records")?;
    let d = load(pool, id).await?;
    let from = input.from.as_deref().map(str::trim).unwrap_or("");
    if !FROM.iter().any(|(k, _)| *k == from) {
        return Err(Error::field(
            "from",
            "choose earliest, timestamp, offsets or latest",
        ));
    }
    let at = match from {
        "timestamp" => {
            let raw = input.timestamp.as_deref().unwrap_or("").trim();
            if raw.is_empty() {
                return Err(Error::field(
                    "timestamp",
                    "give the time to replay from, e.g. 2026-12-01T09:30:00Z",
                ));
            }
            let Some(t) = parse_time(raw) else {
                return Err(Error::field(
                    "timestamp",
                    "not a time: use RFC 3339, e.g. 2026-12-01T09:30:00Z (UTC)",
                ));
            };
            let now = chrono::Utc::now();
            if t > now {
                return Err(Error::field(
                    "timestamp",
                    format!(
                        "{} is in the future (it is {} now); choose a time at or before now",
                        crate::time::format(t),
                        crate::time::format(now)
                    ),
                ));
            }
            Some(t.timestamp_millis())
        }
        _ => None,
    };
    let pipeline = crate::pipelines::load(pool, &d.pipeline_id).await?;
    let kafka = crate::clusters::kafka::get(pool, who, &pipeline.kafka_cluster_id).await?;
    let access = crate::clusters::kafka::access(store, &kafka).await?;
    let positions = crate::kafka::positions(&access, &d.consumer_group, &d.topics, at)
        .await
        .map_err(|e| Error::Unavailable(crate::kafka::explain(&e)))?;
    let mut chosen: Vec<(crate::kafka::PartitionPosition, i64)> = match from {
        "earliest" => positions
            .into_iter()
            .map(|p| {
                let t = p.low;
                (p, t)
            })
            .collect(),
        "latest" => positions
            .into_iter()
            .map(|p| {
                let t = p.high;
                (p, t)
            })
            .collect(),
        "timestamp" => positions
            .into_iter()
            .map(|p| {
                let t = p.at_time.unwrap_or(p.high);
                (p, t)
            })
            .collect(),
        _ => given_offsets(&d, &positions, input.offsets.as_deref().unwrap_or(&[]))?,
    };
    chosen.sort_by(|(a, _), (b, _)| {
        (a.topic.as_str(), a.partition).cmp(&(b.topic.as_str(), b.partition))
    });
    let oldest: Vec<crate::kafka::RecordAt> = chosen
        .iter()
        .filter(|(p, _)| p.low < p.high)
        .map(|(p, _)| crate::kafka::RecordAt {
            topic: p.topic.clone(),
            partition: p.partition,
            offset: p.low,
        })
        .collect();
    let times = crate::kafka::record_times(&access, &oldest)
        .await
        .unwrap_or_else(|_| vec![None; oldest.len()]);
    let mut times = oldest
        .iter()
        .zip(times)
        .map(|(r, t)| ((r.topic.clone(), r.partition), t))
        .collect::<std::collections::HashMap<_, _>>();
    let items: Vec<PlanItem> = chosen
        .into_iter()
        .map(|(p, target)| {
            let now = p.committed.unwrap_or(p.low);
            PlanItem {
                oldest_retained_at: times
                    .remove(&(p.topic.clone(), p.partition))
                    .flatten()
                    .and_then(chrono::DateTime::from_timestamp_millis)
                    .map(crate::time::format),
                records: (now - target).max(0),
                skipped: (target - now).max(0),
                topic: p.topic,
                partition: p.partition,
                committed: p.committed,
                target,
                log_start: p.low,
                end: p.high,
            }
        })
        .collect();
    let plan = ReplayPlan {
        from: from.to_string(),
        timestamp: at
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        records: items.iter().map(|i| i.records).sum(),
        skipped: items.iter().map(|i| i.skipped).sum(),
        items,
    };
    Ok((d, plan))
}

/// Explicit offsets: each must name one of the delivery's topics, a partition it has, and an
/// offset inside what the partition retains (the end included: "after the last record").
fn given_offsets(
    d: &Delivery,
    positions: &[crate::kafka::PartitionPosition],
    given: &[OffsetInput],
) -> Result<Vec<(crate::kafka::PartitionPosition, i64)>> {
    if given.is_empty() {
        return Err(Error::field(
            "offsets",
            "give at least one {topic, partition, offset}",
        ));
    }
    let mut errors = FieldErrors::new();
    let mut out: Vec<(crate::kafka::PartitionPosition, i64)> = Vec::new();
    for (i, g) in given.iter().enumerate() {
        let field = |k: &str| format!("offsets[{i}].{k}");
        let topic = g.topic.as_deref().unwrap_or("").trim();
        if !d.topics.iter().any(|t| t == topic) {
            errors.insert(
                field("topic"),
                format!(
                    "{} is not one of this delivery's topics ({})",
                    if topic.is_empty() { "(empty)" } else { topic },
                    d.topics.join(", ")
                ),
            );
            continue;
        }
        let parts: Vec<&crate::kafka::PartitionPosition> =
            positions.iter().filter(|p| p.topic == topic).collect();
        let Some(p) = g
            .partition
            .and_then(|n| parts.iter().find(|p| i64::from(p.partition) == n))
        else {
            errors.insert(
                field("partition"),
                format!(
                    "{topic} has no partition {}; it has {}",
                    g.partition
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "(none given)".into()),
                    match parts.len() {
                        0 => "none (the topic does not exist yet)".to_string(),
                        n => format!("0–{}", n - 1),
                    }
                ),
            );
            continue;
        };
        let Some(offset) = g.offset else {
            errors.insert(field("offset"), "give the offset to go on from".into());
            continue;
        };
        if offset < p.low {
            errors.insert(field("offset"), format!("{offset} is before the log start of {topic}[{}] ({}): retention has deleted those records; the oldest offset kept is {}", p.partition, p.low, p.low));
            continue;
        }
        if offset > p.high {
            errors.insert(field("offset"), format!("{offset} is past the end of {topic}[{}] ({}); the highest offset you can give is {} (after the last record)", p.partition, p.high, p.high));
            continue;
        }
        if out
            .iter()
            .any(|(q, _)| q.topic == p.topic && q.partition == p.partition)
        {
            errors.insert(
                field("partition"),
                format!("{topic}[{}] is given twice", p.partition),
            );
            continue;
        }
        out.push(((*p).clone(), offset));
    }
    Error::check(errors)?;
    Ok(out)
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReplayStarted")]
pub struct Started {
    pub operation_id: String,
    pub plan: ReplayPlan,
}

/// Plans, checks the typed name, and starts the operation: the connector's desired state
/// becomes STOPPED under the operation in the same transaction.
pub async fn start(
    pool: &Pool,
    store: &SecretStore,
    wake: &crate::reconcile::Handle,
    who: &Principal,
    id: &str,
    input: &ReplayInput,
) -> Result<Started> {
    let (d, plan) = plan(pool, store, who, id, input).await?;
    if input.confirm.as_deref().map(str::trim) != Some(d.name.as_str()) {
        return Err(Error::field(
            "confirm",
            format!("type the delivery's name, {}, to confirm", d.name),
        ));
    }
    let reason = input
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(String::from)
        .unwrap_or_else(|| match plan.from.as_str() {
            "earliest" => "replay from the beginning".to_string(),
            "latest" => "skip to the latest".to_string(),
            "timestamp" => format!("replay from {}", plan.timestamp.clone().unwrap_or_default()),
            _ => "set given offsets".to_string(),
        });
    if reason.chars().count() > 500 {
        return Err(Error::field("reason", "at most 500 characters"));
    }
    if plan.items.iter().all(|i| i.committed == Some(i.target)) {
        return Err(Error::field(
            "from",
            "every partition is already at that offset: nothing would be replayed or skipped",
        ));
    }
    let connector = crate::connectors::views(pool, std::slice::from_ref(&d.connector_id))
        .await?
        .remove(&d.connector_id)
        .ok_or_else(|| Error::Conflict(format!("delivery {} has no connector", d.name)))?;
    let resume_to = operations::resume_to(&connector.desired_state, "delivery", &d.name)?;
    let mut tx = pool.begin().await?;
    let operation_id = operations::hold(
        &mut tx,
        who,
        NewOperation {
            kind: "replay",
            target_kind: "delivery",
            target_id: &d.id,
            target_name: &d.name,
            params: json!({
                "connector_id": d.connector_id,
                "connector_name": connector.name,
                "connect_cluster_id": d.connect_cluster_id,
                "resume_to": resume_to.as_str(),
                "targets": plan.targets(),
                // Partitions with records from the target on: the observe step waits until
                // the sink has committed past the target in each (delivery seen moving again).
                "deliver_again": plan.items.iter().filter(|i| i.target < i.end).map(|i| SinkOffset { topic: i.topic.clone(), partition: i.partition, offset: i.target }).collect::<Vec<_>>(),
                "topics": d.topics,
                "from": plan.from,
                "reason": reason,
            }),
        },
        &d.connector_id,
    )
    .await?;
    audit::record(
        &mut tx,
        Entry {
            actor: who.into(),
            action: "delivery.replay",
            target_kind: "delivery",
            target_id: &d.id,
            outcome: Outcome::Success,
            summary: json!({"name": d.name, "operation_id": operation_id, "from": plan.from, "timestamp": plan.timestamp, "records": plan.records, "skipped": plan.skipped, "reason": reason}),
        },
    )
    .await?;
    tx.commit().await?;
    crate::reconcile::bump_desired_version(pool).await?;
    wake.wake();
    Ok(Started { operation_id, plan })
}

/// One offset change of a delivery: what Connect held before it and after.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "OffsetHistoryEntry")]
pub struct HistoryEntry {
    pub id: i64,
    pub operation_id: String,
    /// When the offsets changed (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
    pub actor: String,
    pub reason: String,
    pub before: Vec<SinkOffset>,
    pub after: Option<Vec<SinkOffset>>,
}

pub async fn history(pool: &Pool, who: &Principal, id: &str) -> Result<Vec<HistoryEntry>> {
    who.require(Role::Viewer, "see deliveries")?;
    let d = load(pool, id).await?;
    /// `before` and `after` are JSON lists of offsets.
    #[derive(sqlx::FromRow)]
    struct Row {
        id: i64,
        operation_id: String,
        at: String,
        actor: String,
        reason: String,
        before: String,
        after: Option<String>,
    }
    let rows: Vec<Row> = db::query_as("SELECT id, operation_id, at, actor, reason, before, after FROM offset_history WHERE target_id = $1 ORDER BY id DESC LIMIT 100")
        .bind(&d.id)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| HistoryEntry {
            id: r.id,
            operation_id: r.operation_id,
            at: r.at,
            actor: r.actor,
            reason: r.reason,
            before: serde_json::from_str(&r.before).unwrap_or_default(),
            after: r.after.and_then(|a| serde_json::from_str(&a).ok()),
        })
        .collect())
}

/// The input that restores a history entry's "before" offsets: the same workflow, with the
/// saved set as explicit offsets (so an offset retention has deleted since is refused).
pub async fn restore_input(
    pool: &Pool,
    who: &Principal,
    id: &str,
    entry: i64,
    confirm: Option<String>,
    reason: Option<String>,
) -> Result<ReplayInput> {
    let e = history(pool, who, id)
        .await?
        .into_iter()
        .find(|e| e.id == entry)
        .ok_or_else(|| Error::NotFound(format!("offset history entry {entry}")))?;
    Ok(ReplayInput {
        from: Some("offsets".into()),
        timestamp: None,
        offsets: Some(
            e.before
                .iter()
                .map(|o| OffsetInput {
                    topic: Some(o.topic.clone()),
                    partition: Some(i64::from(o.partition)),
                    offset: Some(o.offset),
                })
                .collect(),
        ),
        confirm,
        reason: Some(reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| {
            format!(
                "restore the offsets saved before change #{} ({})",
                e.id, e.reason
            )
        })),
    })
}

/// Where a delivery's offsets go.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum ReplayFrom {
    /// The oldest record retention kept.
    Earliest,
    /// The end: skip everything not delivered yet.
    Latest,
    /// The first record at or after `timestamp`.
    Timestamp,
    /// The exact offsets given per partition.
    Offsets,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery() -> Delivery {
        Delivery {
            id: "dl_1".into(),
            name: "lake".into(),
            pipeline_id: "pl_1".into(),
            destination_connection_id: "con_1".into(),
            connect_cluster_id: "cc_1".into(),
            kind: crate::deliveries::Kind::ObjectStorage,
            topics: vec!["shop.public.orders".into()],
            options: serde_json::Value::Null,
            connector_id: "cn_1".into(),
            consumer_group: "connect-cluecdc-deliver-lake".into(),
            created_at: String::new(),
        }
    }

    /// Partition 0 has had retention delete offsets 0–4: it keeps 5–9, and 10 comes next.
    fn positions() -> Vec<crate::kafka::PartitionPosition> {
        vec![crate::kafka::PartitionPosition {
            topic: "shop.public.orders".into(),
            partition: 0,
            committed: Some(8),
            low: 5,
            high: 10,
            at_time: None,
        }]
    }

    fn given(topic: &str, partition: i64, offset: i64) -> OffsetInput {
        OffsetInput {
            topic: Some(topic.into()),
            partition: Some(partition),
            offset: Some(offset),
        }
    }

    fn refusal(g: &[OffsetInput]) -> FieldErrors {
        match given_offsets(&delivery(), &positions(), g) {
            Err(Error::Invalid { fields, .. }) => fields,
            other => panic!("refused expected: {other:?}"),
        }
    }

    #[test]
    fn given_offsets_within_the_retained_range_are_taken_and_the_rest_refused_by_field() {
        let ok = given_offsets(
            &delivery(),
            &positions(),
            &[given("shop.public.orders", 0, 5)],
        )
        .unwrap();
        assert_eq!(ok[0].1, 5, "the log start itself is fine");
        assert!(
            given_offsets(
                &delivery(),
                &positions(),
                &[given("shop.public.orders", 0, 10)]
            )
            .is_ok(),
            "the end itself (skip everything) is fine"
        );
        let e = refusal(&[given("shop.public.orders", 0, 4)]);
        assert!(
            e["offsets[0].offset"].contains("before the log start")
                && e["offsets[0].offset"].contains("the oldest offset kept is 5"),
            "{e:?}"
        );
        let e = refusal(&[given("shop.public.orders", 0, 11)]);
        assert!(e["offsets[0].offset"].contains("past the end"), "{e:?}");
        let e = refusal(&[given("shop.public.orders", 7, 5)]);
        assert!(
            e["offsets[0].partition"].contains("has no partition 7; it has 0–0"),
            "{e:?}"
        );
        let e = refusal(&[given("other", 0, 5)]);
        assert!(
            e["offsets[0].topic"].contains("not one of this delivery's topics"),
            "{e:?}"
        );
        let e = refusal(&[
            given("shop.public.orders", 0, 5),
            given("shop.public.orders", 0, 6),
        ]);
        assert!(e["offsets[1].partition"].contains("given twice"), "{e:?}");
        let e = refusal(&[]);
        assert!(e["offsets"].contains("at least one"), "{e:?}");
    }
}
