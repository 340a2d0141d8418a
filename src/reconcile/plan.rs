//! The pure heart of the reconciler: desired connectors + what ClueCDC last applied + what
//! Connect shows now → the steps to take and what to record. No I/O, so every case is a unit
//! test. It never depends on why the pass started.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::policy::{classify, Failure, Policy};

pub type Config = BTreeMap<String, String>;

/// The state a person (or a pipeline, delivery or replication) wants a connector in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DesiredState {
    Running,
    Paused,
    Stopped,
    Deleted,
}

impl DesiredState {
    pub fn parse(s: &str) -> Option<DesiredState> {
        match s {
            "running" => Some(DesiredState::Running),
            "paused" => Some(DesiredState::Paused),
            "stopped" => Some(DesiredState::Stopped),
            "deleted" => Some(DesiredState::Deleted),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            DesiredState::Running => "running",
            DesiredState::Paused => "paused",
            DesiredState::Stopped => "stopped",
            DesiredState::Deleted => "deleted",
        }
    }
    /// Connect's `initial_state` for a connector created in this state (KIP-980).
    pub fn initial_state(self) -> &'static str {
        match self {
            DesiredState::Paused => "PAUSED",
            DesiredState::Stopped => "STOPPED",
            _ => "RUNNING",
        }
    }
}

/// One desired connector with what the reconciler remembers about it.
#[derive(Debug, Clone)]
pub struct Desired {
    pub id: String,
    pub name: String,
    pub config: Config,
    pub state: DesiredState,
    pub generation: i64,
    pub applied_config: Option<Config>,
    pub restart_attempts: u32,
    pub next_restart_at: Option<i64>,
    pub healthy_since: Option<i64>,
    /// Set when a person asked for a restart (who); the next pass restarts it once.
    pub restart_requested: Option<String>,
    /// The requested restart is of the failed connector and tasks only (Connect's onlyFailed).
    pub restart_only_failed: bool,
    /// When ClueCDC last wrote its config to Connect (unix ms).
    pub applied_at: Option<i64>,
    /// A permanent reason the connector cannot work that ClueCDC found while Connect shows it
    /// RUNNING (a Debezium source retrying a refused connection without end): read as its
    /// trace.
    pub verdict: Option<String>,
}

/// A connector written this recently may not be in Connect's list yet (distributed workers
/// read their config topic asynchronously): missing then is not drift.
pub const REGISTRATION_GRACE_MS: i64 = 20_000;

/// Fields in alphabetical order: see [`super::json_eq::same`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveTask {
    pub id: i32,
    pub state: String,
    pub trace: Option<String>,
    pub worker_id: String,
}

/// What Connect shows for one connector.
#[derive(Debug, Clone)]
pub struct Live {
    pub config: Config,
    pub state: String,
    /// The worker running the connector itself.
    pub worker_id: String,
    pub trace: Option<String>,
    pub tasks: Vec<LiveTask>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Create {
        id: String,
        name: String,
        config: Config,
        initial_state: &'static str,
    },
    UpdateConfig {
        id: String,
        name: String,
        config: Config,
    },
    Pause {
        id: String,
        name: String,
    },
    Resume {
        id: String,
        name: String,
    },
    Stop {
        id: String,
        name: String,
    },
    Delete {
        id: String,
        name: String,
    },
    /// Desired `deleted` and gone from Connect: drop the spec row.
    Forget {
        id: String,
    },
    Restart {
        id: String,
        name: String,
        attempt: u32,
        reason: String,
    },
    /// A restart a person asked for: connector and all tasks, counted apart from failure restarts.
    RequestedRestart {
        id: String,
        name: String,
        by: String,
        only_failed: bool,
    },
}

impl Step {
    pub fn is_mutating(&self) -> bool {
        !matches!(self, Step::Forget { .. })
    }
}

/// One config key that differs between the desired, the last applied and the live config
/// (a value is null where the key is absent; secret values are never shown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct DiffLine {
    pub key: String,
    pub desired: Option<String>,
    pub applied: Option<String>,
    pub live: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub connector_id: Option<String>,
    pub name: String,
    pub kind: &'static str,
    pub diff: Vec<DiffLine>,
    /// repaired (ClueCDC puts it back) or reported (observe-only clusters, unknown connectors).
    pub action: &'static str,
}

/// What to write to a connector's status row after this pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub id: String,
    pub phase: &'static str,
    pub message: String,
    pub connector_state: Option<String>,
    pub trace: Option<String>,
    pub tasks: Vec<LiveTask>,
    pub live_config: Option<Config>,
    pub restart_attempts: u32,
    pub next_restart_at: Option<i64>,
    pub healthy_since: Option<i64>,
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub observations: Vec<Observation>,
    pub drifts: Vec<Drift>,
    /// Connectors in Connect that ClueCDC does not manage: (name, state, config).
    pub unknown: Vec<(String, String, Config)>,
}

/// Connect adds `name` to every stored config; it is not part of what we compare.
pub fn normalize(mut c: Config) -> Config {
    c.remove("name");
    c
}

pub fn diff(desired: &Config, applied: Option<&Config>, live: &Config) -> Vec<DiffLine> {
    let keys: BTreeSet<&String> = desired
        .keys()
        .chain(live.keys())
        .chain(applied.into_iter().flat_map(|a| a.keys()))
        .collect();
    keys.into_iter()
        .filter(|k| desired.get(*k) != live.get(*k))
        .map(|k| DiffLine {
            key: k.clone(),
            desired: desired.get(k).cloned(),
            applied: applied.and_then(|a| a.get(k).cloned()),
            live: live.get(k).cloned(),
        })
        .collect()
}

/// Computes one cluster's plan. `observe_only` (Strimzi-managed clusters) yields no mutating
/// step: drift and failures are reported, nothing is changed. `jitter` yields numbers in
/// [0.5, 1.0] for backoff.
pub fn compute(
    desired: &[Desired],
    mut live: BTreeMap<String, Live>,
    now_ms: i64,
    policy: &Policy,
    observe_only: bool,
    jitter: &mut dyn FnMut() -> f64,
) -> Plan {
    let mut plan = Plan::default();
    let mut restarts = 0usize;
    for d in desired {
        let repair = if observe_only { "reported" } else { "repaired" };
        let mut obs = Observation {
            id: d.id.clone(),
            phase: "PENDING",
            message: String::new(),
            connector_state: None,
            trace: None,
            tasks: Vec::new(),
            live_config: None,
            restart_attempts: d.restart_attempts,
            next_restart_at: d.next_restart_at,
            healthy_since: d.healthy_since,
        };
        // Each listed connector is taken by its one desired connector (names are unique per
        // cluster), so its config moves into the observation; what is left is unmanaged.
        let Some(mut l) = live.remove(&d.name) else {
            // Connect lists a connector some moments after it answered its creation.
            let just_created = d.applied_config.is_some()
                && d.applied_at
                    .is_some_and(|t| now_ms - t < REGISTRATION_GRACE_MS);
            if d.state == DesiredState::Deleted {
                // Forgetting is for good: a connector deleted right after its creation, and not
                // listed yet, would be left running in Connect with no one managing it. It is
                // deleted once listed, or forgotten when the grace ends without it.
                if just_created {
                    obs.message = "deleting; waiting for Connect to list it".into();
                    plan.observations.push(obs);
                } else {
                    plan.steps.push(Step::Forget { id: d.id.clone() });
                }
                continue;
            }
            if just_created {
                obs.message = "created; waiting for Connect to list it".into();
                plan.observations.push(obs);
                continue;
            }
            if d.applied_config.is_some() {
                plan.drifts.push(Drift {
                    connector_id: Some(d.id.clone()),
                    name: d.name.clone(),
                    kind: "deleted",
                    diff: vec![],
                    action: repair,
                });
                obs.message = if observe_only {
                    "deleted directly in Connect; this cluster is observed only".into()
                } else {
                    "deleted directly in Connect; recreating it".into()
                };
            } else {
                obs.message = "not in Connect yet; creating it".into();
            }
            if observe_only {
                obs.phase = "DRIFTED";
            } else {
                plan.steps.push(Step::Create {
                    id: d.id.clone(),
                    name: d.name.clone(),
                    config: d.config.clone(),
                    initial_state: d.state.initial_state(),
                });
            }
            plan.observations.push(obs);
            continue;
        };
        // The live config moves into the observation: at 10,000 connectors a copy of every
        // config is about 10 MB and a tenth of an unchanged pass's CPU.
        let live_config: &Config = obs
            .live_config
            .insert(normalize(std::mem::take(&mut l.config)));
        obs.connector_state = Some(l.state.clone());
        obs.tasks = l.tasks.clone();
        if d.state == DesiredState::Deleted {
            if !observe_only {
                plan.steps.push(Step::Delete {
                    id: d.id.clone(),
                    name: d.name.clone(),
                });
            }
            obs.message = "deleting".into();
            plan.observations.push(obs);
            continue;
        }
        let mut pending = false;
        if *live_config != d.config {
            let changed_in_connect = d.applied_config.as_ref() != Some(live_config);
            if changed_in_connect {
                plan.drifts.push(Drift {
                    connector_id: Some(d.id.clone()),
                    name: d.name.clone(),
                    kind: "config_changed",
                    diff: diff(&d.config, d.applied_config.as_ref(), live_config),
                    action: repair,
                });
            }
            if observe_only {
                obs.phase = "DRIFTED";
                obs.message =
                    "its config in Connect differs from ClueCDC's; this cluster is observed only"
                        .into();
                plan.observations.push(obs);
                continue;
            }
            plan.steps.push(Step::UpdateConfig {
                id: d.id.clone(),
                name: d.name.clone(),
                config: d.config.clone(),
            });
            obs.message = if changed_in_connect {
                "its config was changed directly in Connect; restoring ClueCDC's".into()
            } else {
                "applying the new config".into()
            };
            pending = true;
        }
        let state = l.state.as_str();
        let wanted = match d.state {
            DesiredState::Running if matches!(state, "PAUSED" | "STOPPED") => Some(Step::Resume {
                id: d.id.clone(),
                name: d.name.clone(),
            }),
            DesiredState::Paused if !matches!(state, "PAUSED") => Some(Step::Pause {
                id: d.id.clone(),
                name: d.name.clone(),
            }),
            DesiredState::Stopped if !matches!(state, "STOPPED") => Some(Step::Stop {
                id: d.id.clone(),
                name: d.name.clone(),
            }),
            _ => None,
        };
        if let Some(step) = wanted {
            if observe_only {
                obs.phase = "DRIFTED";
                obs.message = format!(
                    "Connect shows {state}; ClueCDC wants {}; this cluster is observed only",
                    d.state.as_str()
                );
                plan.observations.push(obs);
                continue;
            }
            plan.steps.push(step);
            pending = true;
            if obs.message.is_empty() {
                obs.message = format!("Connect shows {state}; making it {}", d.state.as_str());
            }
        }
        if let Some(by) = &d.restart_requested {
            if !observe_only {
                plan.steps.push(Step::RequestedRestart {
                    id: d.id.clone(),
                    name: d.name.clone(),
                    by: by.clone(),
                    only_failed: d.restart_only_failed,
                });
                obs.restart_attempts = 0;
                obs.next_restart_at = None;
                obs.message = format!("restarting as {by} asked");
                obs.phase = "PENDING";
                plan.observations.push(obs);
                continue;
            }
        }
        let failed_task = l.tasks.iter().find(|t| t.state == "FAILED");
        let connect_failed = l.state == "FAILED" || failed_task.is_some();
        // Connect's own failure comes first; ClueCDC's verdict stands for a failure Connect
        // does not show (the connector RUNNING while its task retries without end).
        let verdict = d
            .verdict
            .as_ref()
            .filter(|_| !connect_failed && state == "RUNNING");
        let failed = connect_failed || verdict.is_some();
        if d.state == DesiredState::Running && failed {
            let trace = l
                .trace
                .clone()
                .or_else(|| failed_task.and_then(|t| t.trace.clone()))
                .or_else(|| verdict.cloned())
                .unwrap_or_default();
            obs.trace = Some(trace.clone());
            obs.phase = "FAILED";
            obs.healthy_since = None;
            match classify(&trace) {
                Failure::Permanent { reason, what_to_do } => {
                    obs.message = format!("failed ({reason}); not restarting: {what_to_do}");
                }
                Failure::Transient { reason } => {
                    if d.restart_attempts >= policy.max_restarts {
                        obs.message = format!("failed ({reason}); gave up after {} restarts — read the trace, fix the cause, then restart it", d.restart_attempts);
                    } else if d.next_restart_at.is_some_and(|t| now_ms < t) {
                        let wait = (d.next_restart_at.unwrap_or(now_ms) - now_ms) / 1000;
                        obs.message = format!(
                            "failed ({reason}); restart {} of {} in {wait} s",
                            d.restart_attempts + 1,
                            policy.max_restarts
                        );
                    } else if observe_only {
                        obs.message = format!("failed ({reason}); this cluster is observed only");
                    } else if restarts >= policy.restarts_per_pass {
                        obs.message = format!(
                            "failed ({reason}); restart deferred: too many restarts this pass"
                        );
                    } else {
                        let attempt = d.restart_attempts + 1;
                        restarts += 1;
                        obs.restart_attempts = attempt;
                        obs.next_restart_at =
                            Some(now_ms + policy.backoff(attempt + 1, jitter()).as_millis() as i64);
                        obs.message = format!(
                            "failed ({reason}); restarting (attempt {attempt} of {})",
                            policy.max_restarts
                        );
                        plan.steps.push(Step::Restart {
                            id: d.id.clone(),
                            name: d.name.clone(),
                            attempt,
                            reason: reason.to_string(),
                        });
                    }
                }
            }
        } else if !pending {
            obs.phase = match state {
                "RUNNING" | "PAUSED" | "STOPPED" | "UNASSIGNED" | "FAILED" => static_state(state),
                _ => "PENDING",
            };
            let all_running = state == "RUNNING"
                && !l.tasks.is_empty()
                && l.tasks.iter().all(|t| t.state == "RUNNING");
            if all_running {
                let since = d.healthy_since.unwrap_or(now_ms);
                obs.healthy_since = Some(since);
                if now_ms - since >= policy.healthy_window.as_millis() as i64 {
                    obs.restart_attempts = 0;
                    obs.next_restart_at = None;
                }
                if obs.message.is_empty() {
                    obs.message = format!(
                        "running with {} task{}",
                        l.tasks.len(),
                        if l.tasks.len() == 1 { "" } else { "s" }
                    );
                }
            } else if let Some(message) = unassigned(&l) {
                // Waiting for the group to place them (a lost worker's tasks, a rebalance):
                // Connect's work, never a restart of ClueCDC's.
                obs.phase = "UNASSIGNED";
                obs.message = message;
            } else if state == "RUNNING" && l.tasks.is_empty() {
                obs.phase = "PENDING";
                obs.message = "running; waiting for tasks to be assigned".into();
            } else if obs.message.is_empty() {
                obs.message = format!("Connect shows {state}");
            }
        }
        plan.observations.push(obs);
    }
    for (name, l) in live {
        plan.unknown.push((name, l.state, normalize(l.config)));
    }
    plan
}

/// What is unassigned: the connector or some of its tasks, with the worker each was on.
fn unassigned(l: &Live) -> Option<String> {
    let tasks: Vec<&LiveTask> = l.tasks.iter().filter(|t| t.state == "UNASSIGNED").collect();
    if l.state != "UNASSIGNED" && tasks.is_empty() {
        return None;
    }
    let mut on: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    if l.state == "UNASSIGNED" {
        on.entry(l.worker_id.as_str())
            .or_default()
            .push("the connector".into());
    }
    for t in &tasks {
        on.entry(t.worker_id.as_str())
            .or_default()
            .push(format!("task {}", t.id));
    }
    let parts: Vec<String> = on
        .into_iter()
        .map(|(w, what)| {
            if w.is_empty() {
                what.join(", ")
            } else {
                format!("{} (was on worker {w})", what.join(", "))
            }
        })
        .collect();
    Some(format!(
        "unassigned: {}; Connect moves them to a live worker (not restarted by ClueCDC)",
        parts.join("; ")
    ))
}

fn static_state(s: &str) -> &'static str {
    match s {
        "RUNNING" => "RUNNING",
        "PAUSED" => "PAUSED",
        "STOPPED" => "STOPPED",
        "UNASSIGNED" => "UNASSIGNED",
        _ => "FAILED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn desired(
        name: &str,
        config: Config,
        state: DesiredState,
        applied: Option<Config>,
    ) -> Desired {
        Desired {
            id: format!("id-{name}"),
            name: name.into(),
            config,
            state,
            generation: 1,
            applied_config: applied,
            restart_attempts: 0,
            next_restart_at: None,
            healthy_since: None,
            restart_requested: None,
            restart_only_failed: false,
            applied_at: None,
            verdict: None,
        }
    }

    fn live(config: Config, state: &str, tasks: &[&str]) -> Live {
        let mut c = config;
        c.insert("name".into(), "ignored".into());
        Live {
            config: c,
            state: state.into(),
            worker_id: "w".into(),
            trace: None,
            tasks: tasks
                .iter()
                .enumerate()
                .map(|(i, s)| LiveTask {
                    id: i as i32,
                    state: s.to_string(),
                    worker_id: "w".into(),
                    trace: None,
                })
                .collect(),
        }
    }

    #[test]
    fn tasks_of_a_lost_worker_are_unassigned_naming_it_and_not_restarted() {
        let mut l = live(cfg(&[("a", "1")]), "RUNNING", &["RUNNING", "UNASSIGNED"]);
        l.tasks[1].worker_id = "10.0.0.3:8083".into();
        let d = desired("c", cfg(&[("a", "1")]), DesiredState::Running, None);
        let p = run(&[d], &[("c", l)], false);
        assert!(p.steps.is_empty(), "nothing to do: {:?}", p.steps);
        let o = &p.observations[0];
        assert_eq!(o.phase, "UNASSIGNED");
        assert!(
            o.message.contains("task 1 (was on worker 10.0.0.3:8083)"),
            "{}",
            o.message
        );
    }

    fn run(d: &[Desired], l: &[(&str, Live)], observe_only: bool) -> Plan {
        let map = l.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        compute(
            d,
            map,
            1_000_000,
            &Policy::default(),
            observe_only,
            &mut || 1.0,
        )
    }

    #[test]
    fn an_unchanged_running_connector_needs_no_step() {
        let c = cfg(&[("a", "1")]);
        let p = run(
            &[desired(
                "x",
                c.clone(),
                DesiredState::Running,
                Some(c.clone()),
            )],
            &[("x", live(c, "RUNNING", &["RUNNING"]))],
            false,
        );
        assert!(p.steps.is_empty() && p.drifts.is_empty());
        assert_eq!(p.observations[0].phase, "RUNNING");
    }

    #[test]
    fn a_new_connector_is_created_in_its_desired_state_without_drift() {
        let p = run(
            &[desired("x", cfg(&[("a", "1")]), DesiredState::Paused, None)],
            &[],
            false,
        );
        assert_eq!(
            p.steps,
            vec![Step::Create {
                id: "id-x".into(),
                name: "x".into(),
                config: cfg(&[("a", "1")]),
                initial_state: "PAUSED"
            }]
        );
        assert!(p.drifts.is_empty());
    }

    #[test]
    fn a_connector_deleted_in_connect_is_recreated_and_recorded_as_drift() {
        let c = cfg(&[("a", "1")]);
        let p = run(
            &[desired("x", c.clone(), DesiredState::Running, Some(c))],
            &[],
            false,
        );
        assert!(matches!(p.steps[0], Step::Create { .. }));
        assert_eq!(p.drifts[0].kind, "deleted");
        assert_eq!(p.drifts[0].action, "repaired");
    }

    #[test]
    fn a_connector_created_a_moment_ago_and_not_listed_yet_is_not_drift() {
        let c = cfg(&[("a", "1")]);
        let mut d = desired("x", c.clone(), DesiredState::Running, Some(c));
        d.applied_at = Some(1_000_000 - 5_000);
        let p = run(&[d.clone()], &[], false);
        assert!(p.steps.is_empty() && p.drifts.is_empty());
        d.applied_at = Some(1_000_000 - REGISTRATION_GRACE_MS - 1);
        assert_eq!(
            run(&[d], &[], false).drifts.len(),
            1,
            "after the grace period it is drift"
        );
    }

    #[test]
    fn a_connector_deleted_right_after_its_creation_is_not_forgotten_before_connect_lists_it() {
        let c = cfg(&[("a", "1")]);
        let mut d = desired("x", c.clone(), DesiredState::Deleted, Some(c.clone()));
        d.applied_at = Some(1_000_000 - 5_000);
        let waiting = run(&[d.clone()], &[], false);
        assert!(waiting.steps.is_empty(), "{:?}", waiting.steps);
        assert_eq!(
            waiting.observations[0].message,
            "deleting; waiting for Connect to list it"
        );
        let listed = run(
            &[d.clone()],
            &[("x", live(c, "RUNNING", &["RUNNING"]))],
            false,
        );
        assert!(matches!(listed.steps[0], Step::Delete { .. }));
        d.applied_at = Some(1_000_000 - REGISTRATION_GRACE_MS - 1);
        assert_eq!(
            run(&[d], &[], false).steps,
            vec![Step::Forget { id: "id-x".into() }],
            "after the grace period a connector Connect never listed is forgotten"
        );
    }

    #[test]
    fn a_config_changed_in_connect_is_restored_with_a_three_way_diff() {
        let c = cfg(&[("a", "1"), ("b", "2")]);
        let changed = cfg(&[("a", "9"), ("b", "2"), ("c", "3")]);
        let p = run(
            &[desired(
                "x",
                c.clone(),
                DesiredState::Running,
                Some(c.clone()),
            )],
            &[("x", live(changed, "RUNNING", &["RUNNING"]))],
            false,
        );
        assert_eq!(
            p.steps,
            vec![Step::UpdateConfig {
                id: "id-x".into(),
                name: "x".into(),
                config: c
            }]
        );
        assert_eq!(p.drifts[0].kind, "config_changed");
        assert_eq!(
            p.drifts[0].diff,
            vec![
                DiffLine {
                    key: "a".into(),
                    desired: Some("1".into()),
                    applied: Some("1".into()),
                    live: Some("9".into())
                },
                DiffLine {
                    key: "c".into(),
                    desired: None,
                    applied: None,
                    live: Some("3".into())
                },
            ]
        );
    }

    #[test]
    fn a_config_changed_in_clue_cdc_is_applied_without_drift() {
        let old = cfg(&[("a", "1")]);
        let new = cfg(&[("a", "2")]);
        let p = run(
            &[desired(
                "x",
                new.clone(),
                DesiredState::Running,
                Some(old.clone()),
            )],
            &[("x", live(old, "RUNNING", &["RUNNING"]))],
            false,
        );
        assert!(matches!(p.steps[0], Step::UpdateConfig { .. }));
        assert!(p.drifts.is_empty());
    }

    #[test]
    fn observe_only_clusters_report_but_never_change() {
        let c = cfg(&[("a", "1")]);
        let p = run(
            &[
                desired("x", c.clone(), DesiredState::Running, Some(c.clone())),
                desired("y", c.clone(), DesiredState::Running, Some(c.clone())),
            ],
            &[("x", live(cfg(&[("a", "2")]), "RUNNING", &["RUNNING"]))],
            true,
        );
        assert!(p.steps.is_empty());
        assert_eq!(p.drifts.len(), 2);
        assert!(p.drifts.iter().all(|d| d.action == "reported"));
        assert!(p.observations.iter().all(|o| o.phase == "DRIFTED"));
    }

    #[test]
    fn desired_states_drive_pause_resume_stop_and_delete() {
        let c = cfg(&[("a", "1")]);
        let l = |s: &str| live(c.clone(), s, &["RUNNING"]);
        let step = |d: DesiredState, s: &str| {
            run(
                &[desired("x", c.clone(), d, Some(c.clone()))],
                &[("x", l(s))],
                false,
            )
            .steps
        };
        assert!(matches!(
            step(DesiredState::Paused, "RUNNING")[0],
            Step::Pause { .. }
        ));
        assert!(matches!(
            step(DesiredState::Running, "PAUSED")[0],
            Step::Resume { .. }
        ));
        assert!(matches!(
            step(DesiredState::Running, "STOPPED")[0],
            Step::Resume { .. }
        ));
        assert!(matches!(
            step(DesiredState::Stopped, "RUNNING")[0],
            Step::Stop { .. }
        ));
        assert!(matches!(
            step(DesiredState::Deleted, "RUNNING")[0],
            Step::Delete { .. }
        ));
        assert!(step(DesiredState::Paused, "PAUSED").is_empty());
        let gone = run(
            &[desired(
                "x",
                c.clone(),
                DesiredState::Deleted,
                Some(c.clone()),
            )],
            &[],
            false,
        );
        assert_eq!(gone.steps, vec![Step::Forget { id: "id-x".into() }]);
    }

    fn failing(trace: &str, attempts: u32, next: Option<i64>) -> Plan {
        let c = cfg(&[("a", "1")]);
        let mut d = desired("x", c.clone(), DesiredState::Running, Some(c.clone()));
        d.restart_attempts = attempts;
        d.next_restart_at = next;
        let mut l = live(c, "RUNNING", &["FAILED"]);
        l.tasks[0].trace = Some(trace.into());
        run(&[d], &[("x", l)], false)
    }

    /// A Debezium source whose connection is refused at start keeps its task RUNNING while it
    /// retries without end; ClueCDC's verdict (its own check and the plugin's on the worker)
    /// is what shows the failure, read like a trace.
    #[test]
    fn a_running_connector_with_a_permanent_verdict_is_failed_and_not_restarted() {
        let c = cfg(&[("a", "1")]);
        let mut d = desired("x", c.clone(), DesiredState::Running, Some(c.clone()));
        d.verdict = Some("the connector's plugin says: Error while validating connector config: SSL error: PKIX path building failed".into());
        let p = run(
            &[d.clone()],
            &[("x", live(c.clone(), "RUNNING", &["RUNNING"]))],
            false,
        );
        assert!(p.steps.is_empty(), "no restart: {:?}", p.steps);
        let o = &p.observations[0];
        assert_eq!(o.phase, "FAILED");
        assert_eq!(o.trace.as_deref(), d.verdict.as_deref());
        assert!(
            o.message
                .starts_with("failed (TLS certificate not trusted); not restarting:"),
            "{}",
            o.message
        );
        assert_eq!(o.restart_attempts, 0);
        // Connect's own failure keeps its own trace.
        let mut l = live(c.clone(), "RUNNING", &["FAILED"]);
        l.tasks[0].trace = Some("java.net.ConnectException: Connection refused".into());
        let p = run(&[d.clone()], &[("x", l)], false);
        assert_eq!(
            p.observations[0].trace.as_deref(),
            Some("java.net.ConnectException: Connection refused")
        );
        // A paused connector is not failed by it.
        let p = run(&[d], &[("x", live(c, "PAUSED", &["PAUSED"]))], false);
        assert_ne!(p.observations[0].phase, "FAILED");
    }

    #[test]
    fn a_transient_failure_is_restarted_with_backoff_until_the_limit() {
        let p = failing("java.net.ConnectException: Connection refused", 0, None);
        assert!(matches!(&p.steps[0], Step::Restart { attempt: 1, .. }));
        let o = &p.observations[0];
        assert_eq!(o.restart_attempts, 1);
        assert_eq!(
            o.next_restart_at,
            Some(1_000_000 + 10_000),
            "backoff before the next attempt: 5 s · 2"
        );
        let waiting = failing("Connection refused", 1, Some(1_005_000));
        assert!(waiting.steps.is_empty(), "not before the backoff ends");
        assert!(waiting.observations[0]
            .message
            .contains("restart 2 of 5 in 5 s"));
        let given_up = failing("Connection refused", 5, None);
        assert!(given_up.steps.is_empty());
        assert!(given_up.observations[0]
            .message
            .contains("gave up after 5 restarts"));
        assert_eq!(
            given_up.observations[0].trace.as_deref(),
            Some("Connection refused")
        );
    }

    #[test]
    fn a_permanent_failure_is_reported_not_restarted() {
        let p = failing(
            "FATAL: password authentication failed for user cdc",
            0,
            None,
        );
        assert!(p.steps.is_empty());
        assert!(p.observations[0]
            .message
            .contains("rotate the connection's credentials"));
    }

    #[test]
    fn restarts_are_rate_limited_per_pass() {
        let c = cfg(&[("a", "1")]);
        let ds: Vec<Desired> = (0..8)
            .map(|i| {
                desired(
                    &format!("c{i}"),
                    c.clone(),
                    DesiredState::Running,
                    Some(c.clone()),
                )
            })
            .collect();
        let ls: Vec<(String, Live)> = (0..8)
            .map(|i| (format!("c{i}"), live(c.clone(), "FAILED", &["FAILED"])))
            .collect();
        let l: Vec<(&str, Live)> = ls.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        let p = run(&ds, &l, false);
        assert_eq!(
            p.steps
                .iter()
                .filter(|s| matches!(s, Step::Restart { .. }))
                .count(),
            Policy::default().restarts_per_pass
        );
        assert!(p
            .observations
            .iter()
            .any(|o| o.message.contains("deferred")));
    }

    #[test]
    fn a_healthy_window_resets_the_restart_counter() {
        let c = cfg(&[("a", "1")]);
        let mut d = desired("x", c.clone(), DesiredState::Running, Some(c.clone()));
        d.restart_attempts = 3;
        d.healthy_since = Some(1_000_000 - 121_000);
        let p = run(&[d], &[("x", live(c, "RUNNING", &["RUNNING"]))], false);
        assert_eq!(p.observations[0].restart_attempts, 0);
    }

    #[test]
    fn a_requested_restart_happens_once_and_resets_the_counter() {
        let c = cfg(&[("a", "1")]);
        let mut d = desired("x", c.clone(), DesiredState::Running, Some(c.clone()));
        d.restart_requested = Some("user:ada".into());
        d.restart_attempts = 5;
        let p = run(&[d], &[("x", live(c, "FAILED", &["FAILED"]))], false);
        assert_eq!(
            p.steps,
            vec![Step::RequestedRestart {
                id: "id-x".into(),
                name: "x".into(),
                by: "user:ada".into(),
                only_failed: false,
            }]
        );
        assert_eq!(p.observations[0].restart_attempts, 0);
    }

    #[test]
    fn a_requested_restart_of_failed_tasks_only_says_so_to_connect() {
        let c = cfg(&[("a", "1")]);
        let mut d = desired("x", c.clone(), DesiredState::Running, Some(c.clone()));
        d.restart_requested = Some("user:ada".into());
        d.restart_only_failed = true;
        let p = run(&[d], &[("x", live(c, "RUNNING", &["FAILED"]))], false);
        assert!(
            matches!(
                &p.steps[..],
                [Step::RequestedRestart {
                    only_failed: true,
                    ..
                }]
            ),
            "{:?}",
            p.steps
        );
    }

    #[test]
    fn unknown_connectors_are_reported() {
        let p = run(
            &[],
            &[(
                "stranger",
                live(cfg(&[("a", "1")]), "RUNNING", &["RUNNING"]),
            )],
            false,
        );
        assert_eq!(p.unknown.len(), 1);
        assert!(
            p.steps.is_empty(),
            "ClueCDC never deletes a connector it does not manage"
        );
    }
}
