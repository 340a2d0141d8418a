//! Lost Connect workers. Connect keeps showing a SIGKILLed worker's connectors and tasks RUNNING
//! on it until its group hands them to the survivors (after `scheduled.rebalance.max.delay.ms`,
//! five minutes by default): nobody is left to write UNASSIGNED. So each pass asks every worker
//! a status names (and every worker already known lost) whether it still answers; what Connect
//! shows on one that does not is observed as UNASSIGNED, naming that worker, and the worker is
//! recorded in `connect_workers` for the one alert about it (not one per connector). Nothing is
//! restarted: moving the tasks is the group's work, and ClueCDC only watches it happen.

use crate::db;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::connect::ConnectClient;
use crate::db::Pool;

use super::plan::Live;

/// How long a worker may take to answer `GET /` before it counts as lost this pass.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// A lost worker that no status names any more is forgotten after this long (its tasks moved
/// for good: the worker was retired), which resolves its alert.
pub const FORGET_AFTER_MS: i64 = 3_600_000;

/// The workers Connect's statuses name, each with how many tasks it runs.
pub fn referenced(live: &BTreeMap<String, Live>) -> BTreeMap<String, usize> {
    // A handful of workers serve thousands of connectors: an id is copied once, not per entry.
    fn add(out: &mut BTreeMap<String, usize>, worker: &str, tasks: usize) {
        match out.get_mut(worker) {
            Some(n) => *n += tasks,
            None if !worker.is_empty() => {
                out.insert(worker.to_string(), tasks);
            }
            None => {}
        }
    }
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for l in live.values() {
        add(&mut out, &l.worker_id, 0);
        for t in &l.tasks {
            add(&mut out, &t.worker_id, 1);
        }
    }
    out
}

/// Shows what Connect still places on a lost worker as UNASSIGNED (the worker id is kept: it
/// names where the task was). A FAILED task stays FAILED.
pub fn mark_lost(live: &mut BTreeMap<String, Live>, lost: &BTreeSet<String>) {
    if lost.is_empty() {
        return;
    }
    for l in live.values_mut() {
        if lost.contains(&l.worker_id) && l.state != "FAILED" {
            l.state = "UNASSIGNED".into();
        }
        for t in l.tasks.iter_mut() {
            if lost.contains(&t.worker_id) && t.state != "FAILED" {
                t.state = "UNASSIGNED".into();
            }
        }
    }
}

/// The worker's own address: its id (`host:port`, its advertised REST address) with the
/// cluster URL's scheme. None for an id that is not such an address.
fn worker_url(cluster_url: &str, worker: &str) -> Option<String> {
    if worker.is_empty() || worker.contains('/') || worker.contains('@') {
        return None;
    }
    let scheme = if cluster_url.starts_with("https://") {
        "https"
    } else {
        "http"
    };
    Some(format!("{scheme}://{worker}"))
}

/// How a worker answered this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Any HTTP answer, even an error status: alive.
    Answered,
    /// Refused, reset, unresolvable: nothing serves its address.
    Gone,
    /// No answer within [`PROBE_TIMEOUT`]: a dead host, or a live worker too busy to answer
    /// (a long GC pause, a loaded machine); lost only when the next pass finds it silent too.
    Silent,
}

/// Asks each worker at once (`make` builds the client for one worker's address: the cluster's
/// credentials and CA), except the one the cluster URL names: it has just answered the pass's
/// list call (a one-worker cluster registered by its own address costs no call at all).
pub async fn probe(
    cluster_url: &str,
    workers: &BTreeSet<String>,
    make: impl Fn(&str) -> ConnectClient,
) -> Vec<(String, Answer)> {
    let own = cluster_url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    let known_alive = workers
        .contains(&own)
        .then(|| (own.clone(), Answer::Answered));
    let asks = workers.iter().filter(|w| **w != own).filter_map(|w| {
        let url = worker_url(cluster_url, w)?;
        let client = make(&url);
        Some(async move {
            use crate::connect::ConnectError;
            let answer = match tokio::time::timeout(PROBE_TIMEOUT, client.server_info()).await {
                Err(_) => Answer::Silent,
                Ok(Err(ConnectError::Unreachable { .. })) => Answer::Gone,
                Ok(_) => Answer::Answered,
            };
            (w.clone(), answer)
        })
    });
    let mut answers = futures::future::join_all(asks).await;
    answers.extend(known_alive);
    answers
}

/// The lost workers among this pass's answers: gone, or silent this pass and the one before
/// (`silent_before`, which also holds the workers already lost). None when no worker answered at all: the cluster URL did answer, so the
/// worker ids are addresses ClueCDC cannot reach (pod IPs behind a Kubernetes service, say),
/// not dead workers.
pub fn lost_among(
    answers: &[(String, Answer)],
    silent_before: &BTreeSet<String>,
) -> BTreeSet<String> {
    if !answers.iter().any(|(_, a)| *a == Answer::Answered) {
        return BTreeSet::new();
    }
    answers
        .iter()
        .filter(|(w, a)| *a == Answer::Gone || (*a == Answer::Silent && silent_before.contains(w)))
        .map(|(w, _)| w.clone())
        .collect()
}

/// A worker recorded as lost.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LostWorker {
    pub worker_id: String,
    /// The most tasks Connect showed on it since it was lost.
    pub tasks: i64,
    /// Unix ms.
    pub lost_at: i64,
    /// Unix ms; None while Connect still shows tasks on it.
    pub moved_at: Option<i64>,
}

pub async fn lost(pool: &Pool, cluster_id: &str) -> sqlx::Result<Vec<LostWorker>> {
    db::query_as(
        "SELECT worker_id, tasks, lost_at, moved_at FROM connect_workers WHERE cluster_id = $1",
    )
    .bind(cluster_id)
    .fetch_all(pool)
    .await
}

/// What changes in `connect_workers` for one cluster after a pass (pure): rows to write
/// (worker, tasks, lost_at, moved_at) and workers to forget.
pub fn changes(
    known: &[LostWorker],
    referenced: &BTreeMap<String, usize>,
    lost_now: &BTreeSet<String>,
    now_ms: i64,
) -> (Vec<LostWorker>, Vec<String>) {
    let mut write = Vec::new();
    let mut forget = Vec::new();
    for w in lost_now {
        let on_it = referenced.get(w).copied().unwrap_or(0) as i64;
        let still_named = referenced.contains_key(w);
        let row = match known.iter().find(|k| &k.worker_id == w) {
            None => LostWorker {
                worker_id: w.clone(),
                tasks: on_it,
                lost_at: now_ms,
                moved_at: (!still_named).then_some(now_ms),
            },
            Some(k) => {
                let moved_at = if still_named {
                    None
                } else {
                    k.moved_at.or(Some(now_ms))
                };
                if !still_named && moved_at.is_some_and(|m| now_ms - m > FORGET_AFTER_MS) {
                    forget.push(w.clone());
                    continue;
                }
                let row = LostWorker {
                    worker_id: w.clone(),
                    tasks: k.tasks.max(on_it),
                    lost_at: k.lost_at,
                    moved_at,
                };
                if row.tasks == k.tasks && row.moved_at == k.moved_at {
                    continue;
                }
                row
            }
        };
        write.push(row);
    }
    // Known lost, answering again.
    for k in known {
        if !lost_now.contains(&k.worker_id) {
            forget.push(k.worker_id.clone());
        }
    }
    (write, forget)
}

pub async fn store(
    pool: &Pool,
    cluster_id: &str,
    write: &[LostWorker],
    forget: &[String],
) -> sqlx::Result<()> {
    if write.is_empty() && forget.is_empty() {
        return Ok(());
    }
    let _gate = crate::db::write_gate(pool).await;
    let mut tx = pool.begin().await?;
    for w in write {
        db::query(
            "INSERT INTO connect_workers (cluster_id, worker_id, tasks, lost_at, moved_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (cluster_id, worker_id) DO UPDATE SET tasks = excluded.tasks, moved_at = excluded.moved_at",
        )
        .bind(cluster_id)
        .bind(&w.worker_id)
        .bind(w.tasks)
        .bind(w.lost_at)
        .bind(w.moved_at)
        .execute(&mut *tx)
        .await?;
    }
    for w in forget {
        db::query("DELETE FROM connect_workers WHERE cluster_id = $1 AND worker_id = $2")
            .bind(cluster_id)
            .bind(w)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// Every lost worker with its cluster's id (the monitor's alert and the pages).
pub async fn all_lost(pool: &Pool) -> sqlx::Result<Vec<(String, LostWorker)>> {
    let rows: Vec<(String, String, i64, i64, Option<i64>)> = db::query_as(
        "SELECT cluster_id, worker_id, tasks, lost_at, moved_at FROM connect_workers ORDER BY cluster_id, worker_id",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(c, worker_id, tasks, lost_at, moved_at)| {
            (
                c,
                LostWorker {
                    worker_id,
                    tasks,
                    lost_at,
                    moved_at,
                },
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::plan::LiveTask;

    fn live(worker: &str, tasks: &[(&str, &str)]) -> Live {
        Live {
            config: Default::default(),
            state: "RUNNING".into(),
            worker_id: worker.into(),
            trace: None,
            tasks: tasks
                .iter()
                .enumerate()
                .map(|(i, (state, w))| LiveTask {
                    id: i as i32,
                    state: state.to_string(),
                    worker_id: w.to_string(),
                    trace: None,
                })
                .collect(),
        }
    }

    #[test]
    fn what_connect_still_shows_on_a_lost_worker_is_unassigned_naming_it() {
        let mut l = BTreeMap::from([
            (
                "a".to_string(),
                live("w1:1", &[("RUNNING", "w3:1"), ("RUNNING", "w2:1")]),
            ),
            ("b".to_string(), live("w3:1", &[("FAILED", "w3:1")])),
        ]);
        assert_eq!(referenced(&l).get("w3:1"), Some(&2));
        mark_lost(&mut l, &BTreeSet::from(["w3:1".to_string()]));
        assert_eq!(l["a"].state, "RUNNING");
        assert_eq!(l["a"].tasks[0].state, "UNASSIGNED");
        assert_eq!(l["a"].tasks[0].worker_id, "w3:1");
        assert_eq!(l["a"].tasks[1].state, "RUNNING");
        assert_eq!(l["b"].state, "UNASSIGNED");
        assert_eq!(l["b"].tasks[0].state, "FAILED", "a failure stays a failure");
    }

    #[test]
    fn a_lost_worker_is_recorded_once_marked_moved_then_forgotten_when_it_answers() {
        let lost = BTreeSet::from(["w3:1".to_string()]);
        let named = BTreeMap::from([("w3:1".to_string(), 17usize)]);
        let (w, f) = changes(&[], &named, &lost, 1000);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].tasks, w[0].lost_at, w[0].moved_at), (17, 1000, None));
        assert!(f.is_empty());
        // Same again: nothing to write.
        let known = w;
        let (w, f) = changes(&known, &named, &lost, 2000);
        assert!(w.is_empty() && f.is_empty());
        // Its tasks moved: the count is kept, the move dated.
        let (w, _) = changes(&known, &BTreeMap::new(), &lost, 3000);
        assert_eq!(
            (w[0].tasks, w[0].lost_at, w[0].moved_at),
            (17, 1000, Some(3000))
        );
        let known = w;
        // Long after, still silent and named by nobody: forgotten.
        let (w, f) = changes(&known, &BTreeMap::new(), &lost, 3000 + FORGET_AFTER_MS + 1);
        assert!(w.is_empty());
        assert_eq!(f, vec!["w3:1".to_string()]);
        // Answering again: forgotten at once.
        let (w, f) = changes(&known, &BTreeMap::new(), &BTreeSet::new(), 4000);
        assert!(w.is_empty());
        assert_eq!(f, vec!["w3:1".to_string()]);
    }

    #[test]
    fn a_worker_is_lost_when_gone_or_silent_twice_and_only_when_another_answers() {
        use Answer::*;
        let a = |w: &str, x: Answer| (w.to_string(), x);
        let none = BTreeSet::new();
        assert_eq!(
            lost_among(&[a("w1:1", Answered), a("w2:1", Gone)], &none),
            BTreeSet::from(["w2:1".to_string()])
        );
        assert!(
            lost_among(&[a("w1:1", Answered), a("w2:1", Silent)], &none).is_empty(),
            "one slow answer is not a loss"
        );
        assert_eq!(
            lost_among(
                &[a("w1:1", Answered), a("w2:1", Silent)],
                &BTreeSet::from(["w2:1".to_string()])
            ),
            BTreeSet::from(["w2:1".to_string()])
        );
        assert!(
            lost_among(&[a("10.0.0.1:8083", Gone), a("10.0.0.2:8083", Gone)], &none).is_empty(),
            "addresses ClueCDC cannot reach are not lost workers"
        );
    }

    #[test]
    fn only_host_and_port_ids_are_asked() {
        assert_eq!(
            worker_url("https://c:8083", "10.0.0.3:8083").as_deref(),
            Some("https://10.0.0.3:8083")
        );
        assert_eq!(worker_url("http://c", "a/b"), None);
        assert_eq!(worker_url("http://c", ""), None);
    }
}
