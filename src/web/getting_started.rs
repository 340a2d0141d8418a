//! The first hour: until a delivery runs, the overview shows a checklist from an empty instance to
//! rows in a destination. Every step is checked live when the checklist loads (never ticked by
//! hand), links to the form that does it, and says what is wrong when it fails.
//!
//! The checks are the domains' own: Kafka's and Connect's health, the config provider check of
//! every worker (`clusters::provider_check`, reused for a minute), a source connection's test (run
//! again when the last one is over a minute old and the user may run tests), and the states
//! the reconciler observed for pipelines and deliveries.

use askama::Template;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Html};
use poem::{handler, Request};

use super::pages::Layout;
use super::{paths, render};
use crate::app::AppState;
use crate::auth::{Principal, Role};
use crate::clusters::provider_check::{self, CheckState};
use crate::connections::Capability;
use crate::error::Result;

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepState {
    Done,
    Failing,
    Todo,
}

impl StepState {
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Done => "done",
            StepState::Failing => "failing",
            StepState::Todo => "todo",
        }
    }
}

pub struct Step {
    pub id: &'static str,
    pub title: &'static str,
    pub state: StepState,
    /// What was found (passing) or what is wrong (failing), or what to do (to do).
    pub detail: String,
    /// The form or page that does the step.
    pub href: String,
    pub action: &'static str,
}

impl Step {
    fn new(id: &'static str, title: &'static str, href: &str, action: &'static str) -> Self {
        Step {
            id,
            title,
            state: StepState::Todo,
            detail: String::new(),
            href: href.to_string(),
            action,
        }
    }

    fn set(mut self, state: StepState, detail: impl Into<String>) -> Self {
        self.state = state;
        self.detail = detail.into();
        self
    }
}

/// Whether the overview shows the checklist: no delivery is running yet.
pub async fn needed(state: &AppState, who: &Principal) -> Result<bool> {
    Ok(!running(state, &delivery_connectors(state, who).await?).await?)
}

async fn delivery_connectors(state: &AppState, who: &Principal) -> Result<Vec<String>> {
    Ok(crate::deliveries::list(&state.pool, who)
        .await?
        .into_iter()
        .map(|d| d.connector_id)
        .collect())
}

async fn running(state: &AppState, connector_ids: &[String]) -> Result<bool> {
    Ok(crate::connectors::views(&state.pool, connector_ids)
        .await?
        .values()
        .any(|c| c.phase == "RUNNING"))
}

/// The plugins the next steps need: a Debezium source and a sink for a destination.
const SOURCES: &[&str] = &[
    "io.debezium.connector.postgresql.PostgresConnector",
    "io.debezium.connector.mysql.MySqlConnector",
    "io.debezium.connector.mariadb.MariaDbConnector",
];
const SINKS: &[&str] = &[
    "io.debezium.connector.jdbc.JdbcSinkConnector",
    "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector",
];

/// Runs every step's check now, in order.
pub async fn steps(state: &AppState, who: &Principal, server_url: &str) -> Result<Vec<Step>> {
    let (pool, store) = (&state.pool, &state.inner.ctx.secrets);
    let mut out = Vec::new();

    let kafka = Step::new(
        "kafka",
        "Register a Kafka cluster it can reach",
        paths::CLUSTERS,
        "Register a Kafka cluster",
    );
    let kafkas = crate::clusters::kafka::list(state.ctx(), who).await?;
    out.push(match kafkas.first() {
        None => kafka.set(StepState::Todo, "No Kafka cluster is registered yet."),
        Some(k) => match crate::clusters::kafka::check_health(pool, store, who, &k.id).await {
            Ok(h) if h.reachable => kafka.set(
                StepState::Done,
                format!("{}: {} broker(s) answer.", k.name, h.brokers.len()),
            ),
            Ok(h) => kafka.set(
                StepState::Failing,
                format!(
                    "{} cannot be reached: {}",
                    k.name,
                    h.error.unwrap_or_default()
                ),
            ),
            Err(e) => kafka.set(StepState::Failing, format!("{}: {e}", k.name)),
        },
    });

    let connect = Step::new(
        "connect",
        "Register a Kafka Connect cluster with the Debezium plugins",
        paths::CLUSTERS,
        "Register a Connect cluster",
    );
    let clusters = crate::clusters::list(state.ctx(), who).await?;
    let first = clusters.first();
    out.push(match first {
        None => connect.set(StepState::Todo, "No Kafka Connect cluster is registered yet."),
        Some(c) => match crate::clusters::check_health(pool, store, who, &c.id).await {
            Ok(h) if h.reachable => {
                let has = |class: &&str| h.plugins.iter().any(|p| p.class == *class);
                match (SOURCES.iter().any(has), SINKS.iter().any(has)) {
                    (true, true) => connect.set(
                        StepState::Done,
                        format!(
                            "{}: Kafka Connect {} with {} connector plugins.",
                            c.name,
                            h.version.unwrap_or_default(),
                            h.plugins.len()
                        ),
                    ),
                    (source, _) => connect.set(
                        StepState::Failing,
                        format!(
                            "{} lacks {}: install the Debezium connector plugins on its workers (connect-image/ builds an image with them).",
                            c.name,
                            if source { "a sink connector (Debezium JDBC or Aiven S3)" } else { "a Debezium source connector (PostgreSQL, MySQL or MariaDB)" }
                        ),
                    ),
                }
            }
            Ok(h) => connect.set(
                StepState::Failing,
                format!("{} cannot be reached: {}", c.name, h.error.unwrap_or_default()),
            ),
            Err(e) => connect.set(StepState::Failing, format!("{}: {e}", c.name)),
        },
    });

    let provider = Step::new(
        "provider",
        "Install the config provider on every Connect worker",
        &first.map_or_else(
            || paths::CLUSTERS.to_string(),
            |c| format!("/clusters/connect/{}", c.id),
        ),
        "See the check per worker",
    );
    out.push(match first {
        None => provider.set(StepState::Todo, "Register a Connect cluster first."),
        Some(c) => {
            let check = provider_check::current(pool, store, c, Some(server_url), false).await?;
            match (
                check.state,
                check.workers.iter().find(|w| w.verdict.fails()),
            ) {
                (CheckState::Passing, _) => provider.set(
                    StepState::Done,
                    format!(
                        "Every worker of {} resolves references here ({} checked).",
                        c.name,
                        check.workers.len()
                    ),
                ),
                (_, Some(w)) => provider.set(
                    StepState::Failing,
                    format!(
                        "Worker {}: {} ({}). {}",
                        w.worker,
                        w.verdict.label(),
                        w.message,
                        w.fix
                    ),
                ),
                _ => provider.set(
                    StepState::Failing,
                    "Not every worker could be asked: see the check per worker.",
                ),
            }
        }
    });

    // Connections are an admin's to add: the form for an admin, the list for anyone else.
    let new_connection = if who.role >= Role::Admin {
        "/connections/new"
    } else {
        paths::CONNECTIONS
    };
    let source = Step::new(
        "source",
        "Add a source database and test it",
        new_connection,
        "Add a connection",
    );
    let connections = crate::connections::list(pool, store, who).await?;
    let src = connections
        .iter()
        .find(|c| c.connection.capabilities.contains(&Capability::Source));
    out.push(match src {
        None => source.set(StepState::Todo, "No connection can be a source yet."),
        Some(c) => {
            let stale = c.connection.last_test.as_ref().is_none_or(|t| {
                crate::time::parse(&t.tested_at).is_none_or(|at| {
                    (chrono::Utc::now() - at).num_seconds() >= provider_check::FRESH_SECS
                })
            });
            let report = match (stale, who.role >= Role::Operator) {
                (true, true) => {
                    Some(crate::connections::test(pool, store, who, &c.connection.id).await?)
                }
                _ => c.connection.last_test.clone(),
            };
            let source = Step {
                href: format!("/connections/{}", c.connection.id),
                action: "Open the connection",
                ..source
            };
            match report {
                Some(r) if r.ok => source.set(
                    StepState::Done,
                    format!("{} passed its test.", c.connection.name),
                ),
                Some(r) => {
                    let failed = r
                        .checks
                        .iter()
                        .find(|k| k.status == crate::connections::CheckStatus::Fail)
                        .map(|k| format!("{} {}", k.message, k.hint.clone().unwrap_or_default()))
                        .unwrap_or_default();
                    source.set(
                        StepState::Failing,
                        format!("{} fails its test: {failed}", c.connection.name),
                    )
                }
                None => source.set(
                    StepState::Todo,
                    format!("Test {} from its page.", c.connection.name),
                ),
            }
        }
    });

    let pipelines: Vec<Item> = crate::pipelines::list(pool, who)
        .await?
        .into_iter()
        .map(|p| Item {
            href: format!("/pipelines/{}", p.id),
            name: p.name,
            connector_id: p.connector_id,
        })
        .collect();
    let step = Step::new(
        "pipeline",
        "Create a pipeline and see it running",
        "/pipelines/new",
        "Create a pipeline",
    );
    out.push(
        running_step(
            state,
            step,
            &pipelines,
            ("pipeline", "is running", "running", "Open the pipeline"),
        )
        .await?,
    );
    let deliveries: Vec<Item> = crate::deliveries::list(pool, who)
        .await?
        .into_iter()
        .map(|d| Item {
            href: format!("/deliveries/{}", d.id),
            name: d.name,
            connector_id: d.connector_id,
        })
        .collect();
    let step = Step::new(
        "delivery",
        "Deliver the changes to a destination",
        "/deliveries/new",
        "Create a delivery",
    );
    let destination = connections
        .iter()
        .any(|c| c.connection.capabilities.contains(&Capability::Destination));
    out.push(if deliveries.is_empty() && !destination {
        // The delivery form needs a destination to offer: the step starts where that is added.
        Step {
            href: new_connection.to_string(),
            action: "Add a destination connection",
            ..step
        }
        .set(
            StepState::Todo,
            format!(
                "No delivery yet. A delivery writes into a DESTINATION connection (a database or object storage), and there is none yet{}.",
                if who.role >= Role::Admin { "" } else { "; an admin adds one" }
            ),
        )
    } else {
        running_step(
            state,
            step,
            &deliveries,
            (
                "delivery",
                "is delivering",
                "delivering",
                "Open the delivery",
            ),
        )
        .await?
    });
    Ok(out)
}

/// A pipeline or a delivery, as its step looks at it.
struct Item {
    name: String,
    href: String,
    connector_id: String,
}

/// Done when one of `items` runs; else failing on the first one (linked), or to do when there
/// is none. `words`: (what, "is running", "running", the link's text).
async fn running_step(
    state: &AppState,
    step: Step,
    items: &[Item],
    words: (&str, &str, &str, &'static str),
) -> Result<Step> {
    let (what, done, doing, open) = words;
    let ids: Vec<String> = items.iter().map(|i| i.connector_id.clone()).collect();
    let views = crate::connectors::views(&state.pool, &ids).await?;
    let phase = |i: &Item| {
        views
            .get(&i.connector_id)
            .map_or("UNKNOWN", |v| v.phase.as_str())
    };
    Ok(
        match (items.iter().find(|i| phase(i) == "RUNNING"), items.first()) {
            (Some(r), _) => step.set(StepState::Done, format!("{} {done}.", r.name)),
            (None, Some(first)) => Step {
                href: first.href.clone(),
                action: open,
                ..step
            }
            .set(
                StepState::Failing,
                format!("{} is {}, not {doing} yet.", first.name, phase(first)),
            ),
            (None, None) => step.set(StepState::Todo, format!("No {what} yet.")),
        },
    )
}

#[derive(Template)]
#[template(path = "home/getting_started_partial.html")]
struct Checklist {
    steps: Vec<Step>,
}

#[derive(Template)]
#[template(path = "home/getting_started.html")]
struct ChecklistPage {
    layout: Layout,
    checklist: Checklist,
}

/// The checklist, checked now: the overview's section loads it (htmx), and without JavaScript
/// its link opens it as a page.
#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    req: &Request,
) -> poem::Result<Html<String>> {
    let server = super::connectors::server_url(&state, req);
    let steps = steps(&state, &who, &server)
        .await
        .map_err(|e| poem::Error::from(super::error::PageError(e)))?;
    let checklist = Checklist { steps };
    if super::home::is_htmx(req) {
        return render(&checklist);
    }
    render(&ChecklistPage {
        layout: Layout::new("Getting started", paths::HOME, &who, jar),
        checklist,
    })
}
