//! Schema-change guardrails: ClueCDC samples the column definitions and primary key of every
//! captured table (one catalog query per source per monitor cycle, bounded by a statement
//! timeout) and, for database deliveries, of their destination tables (one query per
//! delivery); it keeps each table's versions with the time first seen (a new version only when
//! the definition changes), classifies a change (`classify`), judges it for every delivery that
//! takes the table against what that sink does under its settings and with the destination as
//! it is (`verdict`), and applies the delivery's `schema_policy`: `warn` (an alert
//! `schema_change` and an audit row) or `pause` (the delivery's connector is set paused, which
//! the reconciler applies, so records wait in Kafka; a person resumes it after the fix).
//!
//! Invariants:
//! - a delivery judges a change against its *baseline*: the version of the table it was last
//!   known to be fine with (the first version seen after it was created, then each change that
//!   was judged harmless, or the version current when a person resumed it);
//! - a breaking verdict stays open until a person resumes (or accepts for) the delivery or a
//!   later change supersedes it; every verdict is written once, with its audit row;
//! - nothing here reads a change record: the catalogs of the source and destination only.

pub mod classify;
pub mod verdict;

use crate::db;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::db::Pool;
use serde::Serialize;
use serde_json::json;

use self::classify::{Change, Column, TableDef};
use self::verdict::{Severity, Sink};
use crate::auth::{Principal, Role};
use crate::connections::{Connection, Provider};
use crate::error::Result;
use crate::monitor::signals::Observation;
use crate::secrets::store::SecretStore;

/// Each catalog query's statement timeout (and, with a margin, the whole read's).
pub const STATEMENT_TIMEOUT_MS: u64 = 2_000;

pub use crate::pipelines::source::ColumnRow;

/// The rows of a catalog query as one definition per table (rows come in column order).
pub fn definitions(rows: Vec<ColumnRow>) -> BTreeMap<String, TableDef> {
    let mut out: BTreeMap<String, (TableDef, Vec<(i64, String)>)> = BTreeMap::new();
    for r in rows {
        let (def, key) = out.entry(r.table).or_default();
        if let Some(k) = r.key_position {
            key.push((k, r.column.clone()));
        }
        // MariaDB spells "no default" of a nullable column as the word NULL.
        let default = r.default.filter(|d| d != "NULL");
        def.columns.push(Column {
            name: r.column,
            data_type: r.data_type,
            nullable: r.nullable,
            default,
        });
    }
    out.into_iter()
        .map(|(t, (mut def, mut key))| {
            key.sort();
            def.primary_key = key.into_iter().map(|(_, c)| c).collect();
            (t, def)
        })
        .collect()
}

/// Reads the definitions of `tables` on a database connection, bounded.
pub async fn sample(
    store: &SecretStore,
    c: &Connection,
    tables: &[String],
) -> Result<BTreeMap<String, TableDef>> {
    let read = async {
        let mut s = crate::pipelines::source::Session::open(store, c).await?;
        s.table_columns(tables, STATEMENT_TIMEOUT_MS).await
    };
    match tokio::time::timeout(Duration::from_millis(STATEMENT_TIMEOUT_MS * 3), read).await {
        Ok(rows) => Ok(definitions(rows?)),
        Err(_) => Err(crate::error::Error::Unavailable(format!(
            "reading the catalog of {} took longer than {} ms",
            c.name,
            STATEMENT_TIMEOUT_MS * 3
        ))),
    }
}

/// The destination table the Debezium JDBC sink writes a source table to: its
/// `collection.name.format` with `${topic}` (dots as underscores), `${source.table}`,
/// `${source.schema}` and `${source.db}` resolved as its `DefaultCollectionNamingStrategy`
/// does (3.5.0.Final), folded to lower case on PostgreSQL (unquoted identifiers). None when
/// the format names another source field.
pub fn destination_table(
    format: &str,
    source: &Connection,
    dest: &Connection,
    table: &str,
    topic: &str,
) -> Option<String> {
    let (schema, name) = table.split_once('.').unwrap_or(("", table));
    let db = source
        .database()
        .map(|d| d.database.clone())
        .unwrap_or_default();
    let (src_schema, src_db) = match source.provider {
        Provider::Postgresql => (schema.to_string(), db),
        _ => (String::new(), schema.to_string()),
    };
    let resolved = format
        .replace("${topic}", &topic.replace('.', "_"))
        .replace("${source.table}", name)
        .replace("${source.schema}", &src_schema)
        .replace("${source.db}", &src_db);
    if resolved.contains("${") || resolved.is_empty() {
        return None;
    }
    Some(match dest.provider {
        Provider::Postgresql => resolved.to_lowercase(),
        _ => resolved,
    })
}

/// A delivery's `schema_policy` from its stored options (`warn` unless set to `pause`).
pub fn policy_of(options: &serde_json::Value) -> &str {
    match options["schema_policy"].as_str() {
        Some("pause") => "pause",
        _ => "warn",
    }
}

/// The `schema_policy` values, with what each does (validation messages name them).
pub const POLICY_HELP: &str = "warn (default: an alert and an audit row) or pause (ClueCDC pauses the delivery at a breaking schema change; records wait in Kafka until a person resumes it)";

// ---- Storage -------------------------------------------------------------------------------

/// The newest stored version of a table: (version, definition; None = table absent).
async fn newest(
    pool: &Pool,
    side: &str,
    owner: &str,
    table: &str,
) -> Result<Option<(i64, Option<TableDef>)>> {
    let row: Option<(i64, String)> = db::query_as(
        "SELECT version, definition FROM schema_versions WHERE side = $1 AND owner_id = $2 AND table_name = $3 ORDER BY version DESC LIMIT 1",
    )
    .bind(side)
    .bind(owner)
    .bind(table)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(v, d)| (v, serde_json::from_str(&d).ok().flatten())))
}

async fn at_version(
    pool: &Pool,
    owner: &str,
    table: &str,
    version: i64,
) -> Result<Option<TableDef>> {
    let d: Option<String> = db::query_scalar(
        "SELECT definition FROM schema_versions WHERE side = 'source' AND owner_id = $1 AND table_name = $2 AND version = $3",
    )
    .bind(owner)
    .bind(table)
    .bind(version)
    .fetch_optional(pool)
    .await?;
    Ok(d.and_then(|d| serde_json::from_str(&d).ok().flatten()))
}

/// Keeps `def` as the table's newest version if it differs from the stored newest one.
/// A table never seen is not recorded as absent. Returns the newest version after it.
async fn keep(
    pool: &Pool,
    side: &str,
    owner: &str,
    table: &str,
    def: Option<&TableDef>,
    now: &str,
) -> Result<Option<i64>> {
    let stored = newest(pool, side, owner, table).await?;
    let version = match &stored {
        Some((v, d)) if d.as_ref() == def => return Ok(Some(*v)),
        Some((v, _)) => v + 1,
        None if def.is_none() => return Ok(None),
        None => 1,
    };
    db::query("INSERT INTO schema_versions (side, owner_id, table_name, version, definition, first_seen) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING")
        .bind(side)
        .bind(owner)
        .bind(table)
        .bind(version)
        .bind(json!(def).to_string())
        .bind(now)
        .execute(pool)
        .await?;
    Ok(Some(version))
}

// ---- The monitor's cycle -------------------------------------------------------------------

/// One cycle of the guardrails, called by the monitor: samples every pipeline's source tables
/// and every database delivery's destination tables (at most once each per cycle), judges new
/// versions for each delivery that takes the table, applies the policies, and returns one
/// `schema_change` observation per delivery (1 while a breaking change is open, with what it
/// is). Sources that cannot be read this cycle change nothing.
pub(crate) async fn cycle(pool: &Pool, store: &SecretStore) -> Vec<Observation> {
    match run(pool, store).await {
        Ok(seen) => seen,
        Err(e) => {
            tracing::warn!(error = %e, "schema guardrails cycle failed");
            vec![]
        }
    }
}

async fn run(pool: &Pool, store: &SecretStore) -> Result<Vec<Observation>> {
    let system = Principal::cli();
    let now = crate::time::now();
    let deliveries = crate::deliveries::list(pool, &system).await?;
    for p in crate::pipelines::list(pool, &system).await? {
        let Ok(source) = crate::connections::load(pool, &p.source_connection_id).await else {
            continue;
        };
        // Destinations first, then the source: a destination sampled before the source
        // sample that did not see a DDL yet predates that DDL, so the next cycle judges the
        // change against the destination as it was before the change could reach it (a fast
        // sink evolves it within a second).
        let mut sampled = Vec::new();
        for d in deliveries.iter().filter(|d| d.pipeline_id == p.id) {
            match destinations(pool, store, &p, &source, d, &now).await {
                Ok(dest) => sampled.push((d, dest)),
                Err(e) => {
                    tracing::debug!(delivery = %d.name, error = %e, "destination catalog not read this cycle")
                }
            }
        }
        match sample(store, &source, &p.tables).await {
            Ok(defs) => {
                for t in &p.tables {
                    keep(pool, "source", &p.id, t, defs.get(t), &now).await?;
                }
            }
            Err(e) => {
                tracing::debug!(pipeline = %p.name, error = %e, "source catalog not read this cycle");
                continue;
            }
        }
        for (d, dest) in sampled {
            if let Err(e) = judge_delivery(pool, &p, d, dest, &now).await {
                tracing::debug!(delivery = %d.name, error = %e, "schema verdict not made this cycle");
            }
        }
    }
    let mut seen = Vec::new();
    for d in &deliveries {
        let open = open_breaking(pool, &d.id).await?;
        let message = match open.first() {
            Some(v) => format!(
                "a breaking schema change of {} for delivery {}: {} — {}{}",
                v.table,
                d.name,
                v.changes.join("; "),
                v.says.join("; "),
                if v.paused {
                    ". ClueCDC paused the delivery (schema_policy pause): records wait in Kafka; fix the destination, then resume it"
                } else {
                    ""
                }
            ),
            None => String::new(),
        };
        seen.push(Observation {
            kind: "schema_change",
            subject: d.name.clone(),
            value: open.len() as f64,
            message,
        });
    }
    Ok(seen)
}

/// The tables a delivery takes: those of its pipeline whose topics it reads.
fn tables_taken(p: &crate::pipelines::Pipeline, d: &crate::deliveries::Delivery) -> Vec<String> {
    p.tables
        .iter()
        .filter(|t| {
            d.topics
                .contains(&crate::pipelines::config::table_topic(&p.topic_prefix, t))
        })
        .cloned()
        .collect()
}

/// A delivery's destination tables as this cycle found them (database deliveries).
struct Destinations {
    jdbc: Option<crate::deliveries::config::JdbcOptions>,
    /// Source table → destination table.
    names: BTreeMap<String, String>,
    /// Destination table → its definition as stored before this cycle's sample.
    before: BTreeMap<String, Option<TableDef>>,
}

async fn destinations(
    pool: &Pool,
    store: &SecretStore,
    p: &crate::pipelines::Pipeline,
    source: &Connection,
    d: &crate::deliveries::Delivery,
    now: &str,
) -> Result<Destinations> {
    let tables = tables_taken(p, d);
    let jdbc: Option<crate::deliveries::config::JdbcOptions> = match d.kind {
        crate::deliveries::Kind::Database => serde_json::from_value(d.options.clone()).ok(),
        crate::deliveries::Kind::ObjectStorage => None,
    };
    // Destination tables, sampled in one query.
    let mut dest_names: BTreeMap<String, String> = BTreeMap::new();
    let mut dest_before: BTreeMap<String, Option<TableDef>> = BTreeMap::new();
    if let Some(o) = &jdbc {
        let dest = crate::connections::load(pool, &d.destination_connection_id).await?;
        for t in &tables {
            let topic = crate::pipelines::config::table_topic(&p.topic_prefix, t);
            if let Some(name) = destination_table(&o.table_name_format, source, &dest, t, &topic) {
                dest_names.insert(t.clone(), name);
            }
        }
        let names: Vec<String> = dest_names.values().cloned().collect();
        // A change is judged against the destination as it was before this cycle's sample.
        for n in &names {
            if let Some((_, def)) = newest(pool, "destination", &d.id, n).await? {
                dest_before.insert(n.clone(), def);
            }
        }
        if !names.is_empty() {
            let defs = sample(store, &dest, &names).await?;
            for n in &names {
                keep(pool, "destination", &d.id, n, defs.get(n), now).await?;
            }
        }
    }
    Ok(Destinations {
        jdbc,
        names: dest_names,
        before: dest_before,
    })
}

async fn judge_delivery(
    pool: &Pool,
    p: &crate::pipelines::Pipeline,
    d: &crate::deliveries::Delivery,
    dest: Destinations,
    now: &str,
) -> Result<()> {
    let Destinations {
        jdbc,
        names: dest_names,
        before: dest_before,
    } = dest;
    for t in &tables_taken(p, d) {
        let Some((current, def)) = newest(pool, "source", &p.id, t).await? else {
            continue;
        };
        let baseline: Option<i64> = db::query_scalar(
            "SELECT version FROM schema_baselines WHERE delivery_id = $1 AND table_name = $2",
        )
        .bind(&d.id)
        .bind(t)
        .fetch_optional(pool)
        .await?;
        // A delivery first judged now starts from the version current when it was created
        // (or the oldest, when it was created before the first sample), so that a change made
        // right after its creation, before a cycle could look, is still judged.
        let baseline = match baseline {
            Some(b) => b,
            None => {
                let b: Option<i64> = db::query_scalar(
                    "SELECT COALESCE(MAX(CASE WHEN first_seen <= $1 THEN version END), MIN(version)) FROM schema_versions WHERE side = 'source' AND owner_id = $2 AND table_name = $3",
                )
                .bind(&d.created_at)
                .bind(&p.id)
                .bind(t)
                .fetch_one(pool)
                .await?;
                let b = b.unwrap_or(current);
                set_baseline(pool, &d.id, t, b).await?;
                b
            }
        };
        if baseline == current {
            continue;
        }
        let already: i64 = db::query_scalar(
            "SELECT COUNT(*) FROM schema_verdicts WHERE delivery_id = $1 AND table_name = $2 AND to_version = $3",
        )
        .bind(&d.id)
        .bind(t)
        .bind(current)
        .fetch_one(pool)
        .await?;
        if already > 0 {
            continue;
        }
        let old = at_version(pool, &p.id, t, baseline).await?;
        let changes = classify::classify(old.as_ref(), def.as_ref());
        if changes.is_empty() {
            set_baseline(pool, &d.id, t, current).await?;
            continue;
        }
        let dest_table = dest_names.get(t).cloned().unwrap_or_else(|| t.clone());
        let dest_def = match (&jdbc, dest_before.get(&dest_table)) {
            (Some(_), Some(before)) => before.clone(),
            (Some(_), None) => newest(pool, "destination", &d.id, &dest_table)
                .await?
                .and_then(|(_, def)| def),
            (None, _) => None,
        };
        let sink = match &jdbc {
            Some(o) => Sink::Jdbc {
                schema_evolution: &o.schema_evolution,
                insert_mode: &o.insert_mode,
                destination: dest_def.as_ref(),
                table: &dest_table,
            },
            None => Sink::ObjectStorage,
        };
        let v = verdict::judge(&changes, &sink);
        record_verdict(pool, d, t, baseline, current, &changes, &v, now).await?;
    }
    Ok(())
}

async fn set_baseline(pool: &Pool, delivery: &str, table: &str, version: i64) -> Result<()> {
    db::query("INSERT INTO schema_baselines (delivery_id, table_name, version) VALUES ($1, $2, $3) ON CONFLICT (delivery_id, table_name) DO UPDATE SET version = excluded.version")
        .bind(delivery)
        .bind(table)
        .bind(version)
        .execute(pool)
        .await?;
    Ok(())
}

/// Writes a verdict once, with its audit row; a harmless one moves the baseline on, a
/// breaking one stays open (superseding older open ones of the table) and, under the `pause`
/// policy, pauses the delivery's connector for the reconciler to apply.
#[allow(clippy::too_many_arguments)]
async fn record_verdict(
    pool: &Pool,
    d: &crate::deliveries::Delivery,
    table: &str,
    from: i64,
    to: i64,
    changes: &[Change],
    v: &verdict::Verdict,
    now: &str,
) -> Result<()> {
    let breaking = v.severity == Severity::Breaking;
    let policy = policy_of(&d.options);
    let described: Vec<String> = changes.iter().map(Change::describe).collect();
    let mut tx = pool.begin().await?;
    // A later change of a table the guard paused the delivery for keeps saying so.
    let db::Flag(paused_before) = db::query_scalar(
        "SELECT COALESCE(MAX(paused), 0) FROM schema_verdicts WHERE delivery_id = $1 AND table_name = $2 AND state = 'open'",
    )
    .bind(&d.id)
    .bind(table)
    .fetch_one(&mut *tx)
    .await?;
    if breaking {
        db::query("UPDATE schema_verdicts SET state = 'superseded' WHERE delivery_id = $1 AND table_name = $2 AND state = 'open'")
            .bind(&d.id)
            .bind(table)
            .execute(&mut *tx)
            .await?;
    }
    let paused = if breaking && policy == "pause" {
        db::query("UPDATE connectors SET desired_state = 'paused', generation = generation + 1, updated_at = $1 WHERE id = $2 AND desired_state = 'running'")
            .bind(now)
            .bind(&d.connector_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0
    } else {
        false
    };
    db::query("INSERT INTO schema_verdicts (delivery_id, table_name, from_version, to_version, severity, changes, says, state, paused, seen_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
        .bind(&d.id)
        .bind(table)
        .bind(from)
        .bind(to)
        .bind(v.severity.as_str())
        .bind(json!(described).to_string())
        .bind(json!(v.says).to_string())
        .bind(if breaking { "open" } else { "accepted" })
        .bind(i64::from(paused || (breaking && paused_before)))
        .bind(now)
        .execute(&mut *tx)
        .await?;
    if !breaking {
        db::query("INSERT INTO schema_baselines (delivery_id, table_name, version) VALUES ($1, $2, $3) ON CONFLICT (delivery_id, table_name) DO UPDATE SET version = excluded.version")
            .bind(&d.id)
            .bind(table)
            .bind(to)
            .execute(&mut *tx)
            .await?;
    }
    crate::audit::record(
        &mut tx,
        crate::audit::Entry {
            actor: crate::audit::Actor::system(),
            action: if paused { "delivery.schema_pause" } else { "delivery.schema_change" },
            target_kind: "delivery",
            target_id: &d.id,
            outcome: crate::audit::Outcome::Success,
            summary: json!({"name": d.name, "table": table, "from_version": from, "to_version": to, "changes": described, "verdict": v.says, "severity": v.severity, "policy": policy, "paused": paused}),
        },
    )
    .await?;
    if paused {
        crate::reconcile::bump_desired_version(&mut *tx)
            .await
            .map_err(crate::error::Error::Unexpected)?;
    }
    tx.commit().await?;
    if paused {
        tracing::warn!(delivery = %d.name, table, "paused at a breaking schema change");
    }
    Ok(())
}

/// A person resumed the delivery (or accepted its changes): its tables' current versions
/// become its baseline and its open verdicts are accepted.
pub async fn accept(pool: &Pool, delivery_id: &str) -> Result<u64> {
    let mut tx = pool.begin().await?;
    db::query(
        "INSERT INTO schema_baselines (delivery_id, table_name, version)
         SELECT delivery_id, table_name, MAX(to_version) FROM schema_verdicts WHERE delivery_id = $1 AND state = 'open' GROUP BY delivery_id, table_name
         ON CONFLICT (delivery_id, table_name) DO UPDATE SET version = excluded.version",
    )
    .bind(delivery_id)
    .execute(&mut *tx)
    .await?;
    let n = db::query(
        "UPDATE schema_verdicts SET state = 'accepted' WHERE delivery_id = $1 AND state = 'open'",
    )
    .bind(delivery_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(n)
}

// ---- Reading -------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
struct VerdictRow {
    delivery_id: String,
    table_name: String,
    from_version: i64,
    to_version: i64,
    severity: String,
    changes: String,
    says: String,
    state: String,
    #[sqlx(try_from = "crate::db::Flag")]
    paused: bool,
    seen_at: String,
}

/// One delivery's verdict on one change of a table.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DeliveryVerdict {
    pub delivery_id: String,
    pub delivery: String,
    pub table: String,
    pub from_version: i64,
    pub to_version: i64,
    /// info | breaking.
    #[schemars(with = "Severity")]
    pub severity: String,
    pub changes: Vec<String>,
    /// What the sink will do, one sentence per change.
    pub says: Vec<String>,
    /// open (breaking, not dealt with yet) | accepted | superseded.
    #[schemars(with = "VerdictState")]
    pub state: String,
    /// The guard paused the delivery for it.
    pub paused: bool,
    pub seen_at: String,
}

impl DeliveryVerdict {
    pub fn breaking(&self) -> bool {
        self.severity == "breaking"
    }
}

fn verdict_of(r: VerdictRow, delivery: &str) -> DeliveryVerdict {
    DeliveryVerdict {
        delivery: delivery.to_string(),
        changes: serde_json::from_str(&r.changes).unwrap_or_default(),
        says: serde_json::from_str(&r.says).unwrap_or_default(),
        delivery_id: r.delivery_id,
        table: r.table_name,
        from_version: r.from_version,
        to_version: r.to_version,
        severity: r.severity,
        state: r.state,
        paused: r.paused,
        seen_at: r.seen_at,
    }
}

const VERDICTS: &str = "SELECT delivery_id, table_name, from_version, to_version, severity, changes, says, state, paused, seen_at FROM schema_verdicts";

async fn open_breaking(pool: &Pool, delivery_id: &str) -> Result<Vec<DeliveryVerdict>> {
    let rows: Vec<VerdictRow> = db::query_as(&format!(
        "{VERDICTS} WHERE delivery_id = $1 AND state = 'open' ORDER BY seen_at DESC, to_version DESC"
    ))
    .bind(delivery_id)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| verdict_of(r, "")).collect())
}

/// Why a failed delivery failed, when a schema change explains it: an open breaking verdict
/// on one of its tables (newest first), or a recent change whose column the trace names.
pub async fn failure_cause(
    pool: &Pool,
    delivery_id: &str,
    trace: Option<&str>,
) -> Result<Option<String>> {
    let open = open_breaking(pool, delivery_id).await?;
    let named = |v: &DeliveryVerdict| {
        format!(
            "The delivery failed because of a schema change of {} (seen {}): {} — {}",
            v.table,
            v.seen_at,
            v.changes.join("; "),
            v.says.join("; ")
        )
    };
    if let Some(v) = open.first() {
        return Ok(Some(named(v)));
    }
    let Some(trace) = trace else {
        return Ok(None);
    };
    let recent: Vec<VerdictRow> = db::query_as(&format!(
        "{VERDICTS} WHERE delivery_id = $1 ORDER BY seen_at DESC LIMIT 5"
    ))
    .bind(delivery_id)
    .fetch_all(pool)
    .await?;
    Ok(recent
        .into_iter()
        .map(|r| verdict_of(r, ""))
        .find(|v| {
            v.changes.iter().any(|c| {
                c.split('`').nth(1).is_some_and(|col| {
                    trace.contains(&format!("\"{col}\"")) || trace.contains(&format!("'{col}'"))
                })
            })
        })
        .map(|v| named(&v)))
}

/// One version of a table, for the timeline.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "TableVersion")]
pub struct Version {
    pub version: i64,
    /// When ClueCDC first saw this version (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub first_seen: String,
    /// None: the table did not exist at this version (dropped).
    pub definition: Option<TableDef>,
}

impl Version {
    pub fn summary(&self) -> String {
        match &self.definition {
            None => "table absent".into(),
            Some(d) => format!(
                "{} column{}, key ({})",
                d.columns.len(),
                if d.columns.len() == 1 { "" } else { "s" },
                d.primary_key.join(", ")
            ),
        }
    }
}

/// A captured table's schema history and what each delivery makes of its newest change.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TableSchema {
    pub table: String,
    /// Oldest first.
    pub versions: Vec<Version>,
    /// The newest change: from the version before the newest to the newest.
    pub diff: Vec<String>,
    /// The newest verdict of each delivery that takes the table.
    pub verdicts: Vec<DeliveryVerdict>,
    /// Deliveries that take this table (by name).
    pub deliveries: Vec<String>,
}

impl TableSchema {
    pub fn current(&self) -> Option<&Version> {
        self.versions.last()
    }
    /// Deliveries that take the table and have judged no change of it.
    pub fn quiet(&self) -> Vec<&String> {
        self.deliveries
            .iter()
            .filter(|d| !self.verdicts.iter().any(|v| &v.delivery == *d))
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PipelineSchema {
    pub pipeline_id: String,
    pub tables: Vec<TableSchema>,
}

async fn versions(pool: &Pool, side: &str, owner: &str, table: &str) -> Result<Vec<Version>> {
    let rows: Vec<(i64, String, String)> = db::query_as(
        "SELECT version, first_seen, definition FROM schema_versions WHERE side = $1 AND owner_id = $2 AND table_name = $3 ORDER BY version",
    )
    .bind(side)
    .bind(owner)
    .bind(table)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(version, first_seen, d)| Version {
            version,
            first_seen,
            definition: serde_json::from_str(&d).ok().flatten(),
        })
        .collect())
}

/// `GET /api/v1/pipelines/{id}/schema` and the pipeline page's schema card.
pub async fn pipeline_schema(pool: &Pool, who: &Principal, id: &str) -> Result<PipelineSchema> {
    who.require(Role::Viewer, "see pipelines")?;
    let p = crate::pipelines::load(pool, id).await?;
    let deliveries: Vec<crate::deliveries::Delivery> = crate::deliveries::list(pool, who)
        .await?
        .into_iter()
        .filter(|d| d.pipeline_id == p.id)
        .collect();
    let mut tables = Vec::new();
    for t in &p.tables {
        let versions = versions(pool, "source", &p.id, t).await?;
        let diff = match versions.as_slice() {
            [.., a, b] => classify::classify(a.definition.as_ref(), b.definition.as_ref())
                .iter()
                .map(Change::describe)
                .collect(),
            _ => vec![],
        };
        let mut verdicts = Vec::new();
        let mut taking = Vec::new();
        for d in &deliveries {
            if !tables_taken(&p, d).contains(t) {
                continue;
            }
            taking.push(d.name.clone());
            let row: Option<VerdictRow> = db::query_as(&format!(
                "{VERDICTS} WHERE delivery_id = $1 AND table_name = $2 ORDER BY to_version DESC, seen_at DESC LIMIT 1"
            ))
            .bind(&d.id)
            .bind(t)
            .fetch_optional(pool)
            .await?;
            verdicts.extend(row.map(|r| verdict_of(r, &d.name)));
        }
        tables.push(TableSchema {
            table: t.clone(),
            versions,
            diff,
            verdicts,
            deliveries: taking,
        });
    }
    Ok(PipelineSchema {
        pipeline_id: p.id,
        tables,
    })
}

/// The delivery page's schema card: its policy and its tables' recent verdicts.
#[derive(Debug, Clone, Serialize)]
pub struct DeliverySchema {
    pub policy: String,
    /// Newest first, at most 20.
    pub verdicts: Vec<DeliveryVerdict>,
    /// The tables it takes, with their current source version.
    pub tables: Vec<(String, i64)>,
}

impl DeliverySchema {
    pub fn open(&self) -> Vec<&DeliveryVerdict> {
        self.verdicts.iter().filter(|v| v.state == "open").collect()
    }

    /// The guard paused the delivery for a change still open.
    pub fn paused_by_guard(&self) -> bool {
        self.verdicts.iter().any(|v| v.state == "open" && v.paused)
    }
}

pub async fn delivery_schema(
    pool: &Pool,
    d: &crate::deliveries::Delivery,
) -> Result<DeliverySchema> {
    let rows: Vec<VerdictRow> = db::query_as(&format!(
        "{VERDICTS} WHERE delivery_id = $1 ORDER BY seen_at DESC, to_version DESC LIMIT 20"
    ))
    .bind(&d.id)
    .fetch_all(pool)
    .await?;
    let mut tables = Vec::new();
    if let Ok(p) = crate::pipelines::load(pool, &d.pipeline_id).await {
        for t in tables_taken(&p, d) {
            let v = newest(pool, "source", &p.id, &t)
                .await?
                .map(|(v, _)| v)
                .unwrap_or(0);
            tables.push((t, v));
        }
    }
    Ok(DeliverySchema {
        policy: policy_of(&d.options).to_string(),
        verdicts: rows.into_iter().map(|r| verdict_of(r, &d.name)).collect(),
        tables,
    })
}

// ---- Before a delivery exists ----------------------------------------------------------------

/// What would break a new database delivery in destination tables that exist already: for
/// each source table whose destination table exists, its key columns missing, columns narrower
/// than the source's (or of another kind), NOT NULL columns without a default that the source
/// does not have. Tables that do not exist yet are created by the sink and give nothing.
pub fn mismatches(source: &TableDef, dest: &TableDef, dest_table: &str) -> Vec<String> {
    let mut out = Vec::new();
    for k in &source.primary_key {
        if dest.column(k).is_none() {
            out.push(format!("`{dest_table}` has no column `{k}`, part of the source's key: upserts and deletes by key fail"));
        }
    }
    if !source.primary_key.is_empty()
        && !dest.primary_key.is_empty()
        && !dest
            .primary_key
            .iter()
            .map(|k| k.to_ascii_lowercase())
            .eq(source.primary_key.iter().map(|k| k.to_ascii_lowercase()))
    {
        out.push(format!(
            "`{dest_table}` is keyed by ({}) and the source by ({}): upserts by the record key fail or match the wrong rows",
            dest.primary_key.join(", "),
            source.primary_key.join(", ")
        ));
    }
    for c in &source.columns {
        let Some(dc) = dest.column(&c.name) else {
            continue;
        };
        match classify::fits(&c.data_type, &dc.data_type) {
            Some(true) => {}
            Some(false) => out.push(format!("`{dest_table}`.`{}` is {}, narrower than the source's {}: longer or larger values fail the task", c.name, dc.data_type, c.data_type)),
            None => out.push(format!("`{dest_table}`.`{}` is {} and the source's is {}: values may not convert, failing the task", c.name, dc.data_type, c.data_type)),
        }
    }
    for dc in &dest.columns {
        if !dc.nullable && dc.default.is_none() && source.column(&dc.name).is_none() {
            out.push(format!("`{dest_table}`.`{}` is NOT NULL without a default and the source has no such column: every insert fails", dc.name));
        }
    }
    out
}

/// The preview's comparison: source tables against the destination tables that exist.
pub async fn preview_mismatches(
    store: &SecretStore,
    source: &Connection,
    dest: &Connection,
    p: &crate::pipelines::Pipeline,
    topics: &[String],
    table_name_format: &str,
) -> Result<Vec<String>> {
    let tables: Vec<String> = p
        .tables
        .iter()
        .filter(|t| topics.contains(&crate::pipelines::config::table_topic(&p.topic_prefix, t)))
        .cloned()
        .collect();
    if tables.is_empty() {
        return Ok(vec![]);
    }
    let src = sample(store, source, &tables).await?;
    let mut names = BTreeMap::new();
    for t in &tables {
        let topic = crate::pipelines::config::table_topic(&p.topic_prefix, t);
        if let Some(n) = destination_table(table_name_format, source, dest, t, &topic) {
            names.insert(t.clone(), n);
        }
    }
    let wanted: Vec<String> = names.values().cloned().collect();
    let existing = sample(store, dest, &wanted).await?;
    let mut out = Vec::new();
    for (t, n) in &names {
        if let (Some(s), Some(d)) = (src.get(t), existing.get(n)) {
            out.extend(mismatches(s, d, n));
        }
    }
    Ok(out)
}

/// Where a delivery's verdict on a schema change is.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
#[schemars(rename = "SchemaVerdictState")]
pub(crate) enum VerdictState {
    /// Breaking, not dealt with yet.
    Open,
    Accepted,
    Superseded,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(table: &str, column: &str, t: &str, key: Option<i64>) -> ColumnRow {
        ColumnRow {
            table: table.into(),
            column: column.into(),
            data_type: t.into(),
            nullable: key.is_none(),
            default: Some("NULL".into()).filter(|_| column == "note"),
            key_position: key,
        }
    }

    #[test]
    fn catalog_rows_become_one_definition_per_table_with_the_key_in_key_order() {
        let defs = definitions(vec![
            row("s.a", "x", "integer", Some(2)),
            row("s.a", "y", "integer", Some(1)),
            row("s.a", "note", "text", None),
            row("s.b", "id", "bigint", Some(1)),
        ]);
        assert_eq!(defs["s.a"].primary_key, vec!["y", "x"]);
        assert_eq!(defs["s.a"].columns.len(), 3);
        assert_eq!(
            defs["s.a"].columns[2].default, None,
            "MariaDB's NULL is no default"
        );
        assert_eq!(defs["s.b"].primary_key, vec!["id"]);
    }

    fn def(cols: &[(&str, &str, bool)], key: &[&str]) -> TableDef {
        TableDef {
            columns: cols
                .iter()
                .map(|(n, t, nullable)| Column {
                    name: (*n).into(),
                    data_type: (*t).into(),
                    nullable: *nullable,
                    default: None,
                })
                .collect(),
            primary_key: key.iter().map(|k| (*k).to_string()).collect(),
        }
    }

    #[test]
    fn an_existing_destination_is_flagged_for_missing_keys_narrower_types_and_strict_extra_columns()
    {
        let source = def(
            &[
                ("id", "integer", false),
                ("code", "character varying(50)", false),
            ],
            &["id"],
        );
        let fine = def(&[("id", "bigint", false), ("code", "text", true)], &["id"]);
        assert!(mismatches(&source, &fine, "items").is_empty());
        let bad = def(
            &[
                ("code", "character varying(10)", false),
                ("extra", "integer", false),
            ],
            &[],
        );
        let m = mismatches(&source, &bad, "items");
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(m[0].contains("no column `id`"));
        assert!(m[1].contains("narrower than the source's character varying(50)"));
        assert!(m[2].contains("`items`.`extra` is NOT NULL without a default"));
    }

    #[test]
    fn policies_default_to_warn() {
        assert_eq!(policy_of(&json!({})), "warn");
        assert_eq!(policy_of(&json!({"schema_policy": "pause"})), "pause");
    }
}
