//! Per-table freshness: when each captured table's topic last received a change, whether its
//! source changed meanwhile (`table_stalled`), and each delivery's lag per table. Metadata
//! only: the broker watermarks the monitor reads every cycle anyway, and one bounded
//! statistics query per source per cycle. No record is consumed.
//!
//! Why watermarks and not the newest record's timestamp: Kafka's ListOffsets with the
//! max-timestamp spec (KIP-734) would answer it, but rdkafka 0.39 wraps only
//! `rd_kafka_offsets_for_times`, which hands back offsets and not timestamps, and whose
//! `Offset` cannot even express the spec (`Offset::Offset(-3).to_raw()` is `None`);
//! librdkafka's `rd_kafka_ListOffsets` (which returns the timestamp) is reachable only through
//! raw FFI, and this crate forbids `unsafe`. So a table's `changed_at` is the monitor time at
//! which its topic's end offset was first seen larger than before: it trails the real change
//! by at most one monitor interval (`CLUECDC_MONITOR_INTERVAL`, 15 s by default). That is the
//! precision of "last change" everywhere it is shown.
//!
//! A stall is a source change the topic has not followed: the source's own per-table change
//! counter (PostgreSQL `pg_stat_user_tables`, MySQL/MariaDB `performance_schema` where it is
//! on) was seen increasing after the topic last moved, and the topic has not moved since.
//! A quiet table (no source change) never stalls; a source without counters is never judged.

use crate::db;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::db::Pool;
use serde::Serialize;

use crate::auth::Principal;
use crate::connections::{Connection, Provider};
use crate::monitor::signals::Observation;
use crate::pipelines::{Pipeline, TopicSize, TopicsMemo};
use crate::secrets::store::SecretStore;

/// The rule's kind (its row comes from migrations/0021_table_freshness.sql).
pub const RULE: &str = "table_stalled";
/// The window when the rule's row cannot be read.
const DEFAULT_WINDOW_SECS: f64 = 300.0;
/// How far source statistics may trail their changes. PostgreSQL 15+ flushes a backend's
/// table counters when it goes idle but at most once a second, and a backend that flushed less
/// than a second ago flushes again only after 10 s idle (`PGSTAT_IDLE_INTERVAL`; measured on
/// the stack: an insert showed in `pg_stat_user_tables` 11 s later, after its topic had
/// moved). A rise seen sooner than this after the topic's last move may be the very change
/// that moved it: it makes a stall a candidate, and only a rise whose previous sample is this
/// much later than the move confirms it. (Under lock contention PostgreSQL may hold counters up
/// to 60 s, `PGSTAT_MAX_INTERVAL`: a rare false stall, which the next move resolves.)
pub const STATS_TRAIL_MS: i64 = 11_000;
/// A stalled table's causes are looked up when its stall passes the window (so the alert's
/// first message carries them), then at most this often.
const CAUSE_EVERY_MS: i64 = 60_000;
/// End-offset marks kept per table for the lag in time; older ones are thinned, not dropped,
/// so a long lag keeps a (coarser) lower bound.
const MARKS_MAX: i64 = 96;
/// Bound on one source query beyond the session's own statement timeout (10 s).
const QUERY_TIMEOUT: Duration = Duration::from_secs(12);

/// What the monitor keeps per (pipeline, table), times in unix ms.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct Stored {
    pub table_name: String,
    /// Sum of the high watermarks of the table's topic.
    pub end_offset: i64,
    /// Monitor time the end offset was first seen larger than before (None: not since ClueCDC
    /// first saw the topic).
    pub changed_at: Option<i64>,
    pub first_seen_at: i64,
    /// The source's change counter (inserts + updates + deletes since its statistics reset).
    pub source_changes: Option<i64>,
    /// When that counter was sampled.
    pub source_checked_at: Option<i64>,
    /// Monitor time the counter was last seen increasing.
    pub source_changed_at: Option<i64>,
    /// The first source change seen after the topic last moved (None: the topic has followed).
    pub pending_since: Option<i64>,
    /// When a later change confirmed it, beyond what trailing statistics explain (None: a
    /// candidate only, which counts as no stall).
    pub confirmed_at: Option<i64>,
    /// Why this source has no per-table change counter (None: it has one, or not read yet).
    pub no_counter: Option<String>,
    /// The likely causes of the current stall as last looked up, and when.
    pub cause: Option<String>,
    pub cause_at: Option<i64>,
}

/// One source's change counter for one table, as read this cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum Counter {
    Value(i64),
    /// The source keeps none (performance_schema off or unreadable): the rule is not evaluated.
    None(String),
    /// Not read this cycle (the source did not answer): what was known stays.
    Unread,
}

/// One monitor observation of a table: the new state from the previous one, this cycle's end
/// offset of its topic (None: not read) and source counter. `evaluate`: false while the
/// pipeline is not meant to stream (paused, stopped, initial snapshot), which holds no stall.
/// Returns None when nothing is known yet.
pub fn step(
    prev: Option<&Stored>,
    table: &str,
    end: Option<i64>,
    counter: &Counter,
    evaluate: bool,
    now: i64,
) -> Option<Stored> {
    if prev.is_none() && end.is_none() {
        return None;
    }
    let mut s = prev.cloned().unwrap_or_else(|| Stored {
        table_name: table.to_string(),
        end_offset: end.unwrap_or(0),
        first_seen_at: now,
        ..Default::default()
    });
    let moved = matches!((prev, end), (Some(p), Some(e)) if e > p.end_offset);
    if let Some(e) = end {
        // A smaller end (the topic recreated) is a new baseline, not a change.
        s.end_offset = e;
    }
    if moved {
        s.changed_at = Some(now);
        s.pending_since = None;
        s.confirmed_at = None;
    }
    match counter {
        Counter::Value(v) => {
            let rose = s.source_changes.is_some_and(|c| *v > c);
            if rose {
                s.source_changed_at = Some(now);
                // A rise in the same cycle as a move counts as followed (the move may carry
                // it). Otherwise it is a candidate stall, from now; the change happened after
                // the previous sample, so a previous sample taken more than the statistics'
                // trail after the topic's last move proves a change the topic has not followed.
                if !moved {
                    if s.pending_since.is_none() {
                        s.pending_since = Some(now);
                    }
                    let reference = s.changed_at.unwrap_or(s.first_seen_at);
                    let proves = s
                        .source_checked_at
                        .is_some_and(|at| at >= reference + STATS_TRAIL_MS);
                    if proves && s.confirmed_at.is_none() {
                        s.confirmed_at = Some(now);
                    }
                }
            }
            // A smaller value (statistics reset) is a new baseline.
            s.source_changes = Some(*v);
            s.source_checked_at = Some(now);
            s.no_counter = None;
        }
        Counter::None(why) => {
            s.no_counter = Some(why.clone());
            s.source_changes = None;
            s.source_checked_at = None;
            s.pending_since = None;
        }
        Counter::Unread => {}
    }
    if !evaluate || s.pending_since.is_none() {
        s.pending_since = None;
        s.confirmed_at = None;
    }
    if s.pending_since.is_none() {
        s.cause = None;
        s.cause_at = None;
    }
    Some(s)
}

/// Seconds since the source first changed after the topic last moved, once confirmed (0: the
/// topic followed, the source is quiet, or only trailing statistics may explain the change).
pub fn stalled_secs(s: &Stored, now: i64) -> f64 {
    match (s.pending_since, s.confirmed_at) {
        (Some(p), Some(_)) => ((now - p).max(0) as f64) / 1000.0,
        _ => 0.0,
    }
}

/// A table's state in one word: `stalled` (past the rule's window), `fresh` (its topic or its
/// source changed within the window and the topic follows), `quiet` (neither changed within
/// the window), `no_counter` (the source keeps no per-table counter and the topic has not
/// moved within the window: quiet and stalled cannot be told apart), `unobserved` (the
/// monitor has not seen it yet).
pub fn state(s: Option<&Stored>, window_secs: f64, now: i64) -> &'static str {
    let Some(s) = s else { return "unobserved" };
    let window_ms = (window_secs * 1000.0) as i64;
    let recent = |at: Option<i64>| at.is_some_and(|at| now - at <= window_ms);
    if stalled_secs(s, now) > window_secs {
        "stalled"
    } else if recent(s.changed_at) || (s.no_counter.is_none() && recent(s.source_changed_at)) {
        "fresh"
    } else if s.no_counter.is_some() {
        "no_counter"
    } else {
        "quiet"
    }
}

/// How sure a cause is: found on the source or in Connect, or only possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Certainty {
    Found,
    Possible,
}

/// A PostgreSQL publication as it concerns one table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Publication {
    pub name: String,
    pub exists: bool,
    pub all_tables: bool,
    /// The table is in it (always true for FOR ALL TABLES).
    pub has_table: bool,
    /// Its row filter on this table (PostgreSQL 15+), if any.
    pub row_filter: Option<String>,
    /// The operations it does not publish (of insert, update, delete).
    pub unpublished: Vec<&'static str>,
}

/// What is known about a stalled table, for [`causes`].
#[derive(Debug, Clone, Default)]
pub struct Suspects {
    /// `schema.table` (`database.table` on MySQL/MariaDB).
    pub table: String,
    /// PostgreSQL: the pipeline's publication (None: not a PostgreSQL source, or unread).
    pub publication: Option<Publication>,
    /// PostgreSQL `publication.autocreate.mode=filtered`: Debezium sets the publication's
    /// tables to the pipeline's each time its connector starts.
    pub autocreate_filtered: bool,
    /// The pipeline's options that can leave tables or rows out, as `key=value`.
    pub filters: Vec<String>,
    /// The connector's state in words (its phase, failed tasks), and whether that state says
    /// it does not stream (paused, failed, a task not running; an UNKNOWN observation says
    /// neither).
    pub connector: String,
    pub not_streaming: bool,
    /// The pipeline's other tables whose topics moved during this stall (name, seconds ago).
    pub others_moved: Vec<(String, f64)>,
    pub others: usize,
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn quote_table(t: &str) -> String {
    match t.split_once('.') {
        Some((s, n)) => format!("{}.{}", quote_ident(s), quote_ident(n)),
        None => quote_ident(t),
    }
}

/// The likely causes of a stall, most certain first; within one certainty in the order: not in
/// the publication, filtered out, connector not streaming. Also what was checked and ruled out.
pub fn causes(s: &Suspects) -> (Vec<(Certainty, String)>, Vec<String>) {
    let mut found: Vec<(Certainty, String)> = Vec::new();
    let mut ruled_out = Vec::new();
    let restart_hint = if s.autocreate_filtered {
        " (or restart the pipeline: with publication.autocreate.mode=filtered its connector sets the publication's tables to the pipeline's when it starts)"
    } else {
        " (publication.autocreate.mode=disabled: a table owner runs it; the connector never changes the publication)"
    };
    if let Some(p) = &s.publication {
        if !p.exists {
            found.push((
                Certainty::Found,
                format!(
                    "publication {} does not exist on the source{}",
                    p.name,
                    if s.autocreate_filtered {
                        ": the connector creates it when it starts (restart the pipeline)"
                    } else {
                        ": a table owner creates it (the pipeline's page shows the statement)"
                    }
                ),
            ));
        } else if !p.has_table {
            found.push((
                Certainty::Found,
                format!(
                    "not in publication {}: ALTER PUBLICATION {} ADD TABLE {};{restart_hint}",
                    p.name,
                    quote_ident(&p.name),
                    quote_table(&s.table)
                ),
            ));
        } else {
            ruled_out.push(format!(
                "{} is in publication {}{}",
                s.table,
                p.name,
                if p.all_tables {
                    " (FOR ALL TABLES)"
                } else {
                    ""
                }
            ));
            if let Some(f) = &p.row_filter {
                found.push((
                    Certainty::Found,
                    format!(
                        "filtered out: publication {} publishes only the rows of {} WHERE {f}",
                        p.name, s.table
                    ),
                ));
            }
            if !p.unpublished.is_empty() {
                found.push((
                    Certainty::Found,
                    format!(
                        "filtered out: publication {} does not publish {}",
                        p.name,
                        p.unpublished.join(", ")
                    ),
                ));
            }
        }
    }
    for f in &s.filters {
        found.push((
            Certainty::Possible,
            format!("filtered out by the pipeline's option {f}"),
        ));
    }
    // Other tables moving is the stronger evidence: it beats a stale or odd reported state.
    if s.others_moved.is_empty() && s.not_streaming {
        found.push((
            Certainty::Found,
            format!("the connector is not streaming: {}", s.connector),
        ));
    } else if !s.others_moved.is_empty() {
        let moved: Vec<String> = s
            .others_moved
            .iter()
            .map(|(t, ago)| format!("{t} {ago:.0} s ago"))
            .collect();
        ruled_out.push(format!(
            "the connector streams ({}; other tables moved: {})",
            s.connector,
            moved.join(", ")
        ));
    } else if s.others == 0 {
        found.push((
            Certainty::Possible,
            format!("the connector is not streaming although it reports {} (no other table to compare with): its page shows its tasks; a restart resumes from its committed position", s.connector),
        ));
    } else {
        found.push((
            Certainty::Possible,
            format!("the connector is not streaming although it reports {}: none of the pipeline's other tables moved either; its page shows its tasks; a restart resumes from its committed position", s.connector),
        ));
    }
    found.sort_by_key(|(c, _)| *c);
    (found, ruled_out)
}

/// The causes in words, numbered in order, then what was ruled out (kept per table and shown
/// on the pipeline page; the alert's message is [`message`] around it).
pub fn cause_text(s: &Suspects) -> String {
    let (found, ruled_out) = causes(s);
    let listed: Vec<String> = found
        .iter()
        .enumerate()
        .map(|(i, (c, text))| {
            let how = match c {
                Certainty::Found => "found",
                Certainty::Possible => "possibly",
            };
            format!("{}. {how}: {text}", i + 1)
        })
        .collect();
    let listed = if listed.is_empty() {
        "none found on the source or in Connect; the connector's log on the worker may say more"
            .to_string()
    } else {
        listed.join(" ")
    };
    let mut m = format!("Likely causes, most certain first: {listed}");
    if !ruled_out.is_empty() {
        m.push_str(&format!(" Ruled out: {}.", ruled_out.join("; ")));
    }
    m
}

/// The alert's words: the table, how long, then its causes ([`cause_text`]) when looked up.
pub fn message(
    pipeline: &str,
    table: &str,
    topic: &str,
    stalled: f64,
    causes: Option<&str>,
) -> String {
    let mut m = format!("table {table} of pipeline {pipeline} changed on the source {stalled:.0} s ago but its topic {topic} has not moved since");
    match causes {
        Some(c) => m.push_str(&format!(". {c}")),
        None => m.push_str(
            ": ClueCDC looks up the likely causes once the stall passes the rule's window",
        ),
    }
    m
}

/// The pipeline's options that can leave a table or rows out of its topic: table and schema
/// lists beside ClueCDC's own include list, skipped operations, and filtering or routing
/// transforms (a router sends records to another topic).
pub fn filtering_options(options: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for key in [
        "table.exclude.list",
        "schema.include.list",
        "schema.exclude.list",
        "database.exclude.list",
    ] {
        if let Some(v) = options.get(key).filter(|v| !v.trim().is_empty()) {
            out.push(format!("{key}={v}"));
        }
    }
    if let Some(v) = options.get("skipped.operations") {
        let ops: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|o| ["c", "u", "d"].contains(o))
            .collect();
        if !ops.is_empty() {
            out.push(format!("skipped.operations={v}"));
        }
    }
    if let Some(names) = options.get("transforms") {
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let key = format!("transforms.{name}.type");
            if let Some(t) = options.get(&key) {
                if t.contains("Filter") || t.contains("Router") {
                    out.push(format!("{key}={t}"));
                }
            }
        }
    }
    out
}

/// A captured table as the pipeline page and `GET /api/v1/pipelines/{id}` show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TableFreshness {
    pub name: String,
    pub topic: String,
    /// Records the topic retains now, and its end offset (sum over partitions), read live.
    pub records: Option<i64>,
    pub end_offset: Option<i64>,
    /// When the topic last received a change, as the monitor saw it (RFC 3339): at most one
    /// monitor interval after the change. None: not since ClueCDC first saw the topic.
    pub changed_at: Option<String>,
    pub age_secs: Option<f64>,
    /// When the monitor first saw the topic (a table quiet since then changed before it).
    pub first_seen_at: Option<String>,
    /// The source's change counter (inserts + updates + deletes since its statistics reset).
    pub source_changes: Option<i64>,
    pub source_changed_at: Option<String>,
    pub stalled_secs: f64,
    /// `fresh`, `stalled`, `quiet`, `no_counter` or `unobserved` (see [`state`]).
    #[schemars(with = "FreshnessState")]
    pub state: &'static str,
    /// The stalled table's likely causes as last looked up.
    pub cause: Option<String>,
    /// Why the source has no per-table change counter.
    pub counter_note: Option<String>,
}

impl TableFreshness {
    pub fn age_text(&self) -> String {
        self.age_secs.map(ago).unwrap_or_default()
    }
    pub fn source_age_text(&self) -> String {
        self.source_changed_at
            .as_deref()
            .and_then(crate::time::parse)
            .map(|t| ago(((chrono::Utc::now() - t).num_milliseconds().max(0) as f64) / 1000.0))
            .unwrap_or_default()
    }
}

/// A duration for people: `4 s`, `3 min`, `2 h`, `5 d`.
pub fn ago(secs: f64) -> String {
    let s = secs.max(0.0) as i64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7_199 => format!("{} min", s / 60),
        7_200..=172_799 => format!("{} h", s / 3_600),
        _ => format!("{} d", s / 86_400),
    }
}

fn rfc3339(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms).map(crate::time::format)
}

async fn window_secs(pool: &Pool) -> sqlx::Result<f64> {
    Ok(
        db::query_scalar("SELECT threshold FROM alert_rules WHERE kind = $1")
            .bind(RULE)
            .fetch_optional(pool)
            .await?
            .unwrap_or(DEFAULT_WINDOW_SECS),
    )
}

async fn load_stored(pool: &Pool, pipeline_id: &str) -> sqlx::Result<HashMap<String, Stored>> {
    let rows: Vec<Stored> = db::query_as(
        "SELECT table_name, end_offset, changed_at, first_seen_at, source_changes, source_checked_at, source_changed_at, pending_since, confirmed_at, no_counter, cause, cause_at FROM table_freshness WHERE pipeline_id = $1",
    )
    .bind(pipeline_id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|s| (s.table_name.clone(), s))
        .collect())
}

/// The pipeline's tables in its own order, from what the monitor stored and the topics just
/// read (`topics`, live). Reads SQLite only: a page load never queries the source.
pub async fn pipeline_tables(
    pool: &Pool,
    p: &Pipeline,
    topics: &[TopicSize],
) -> sqlx::Result<Vec<TableFreshness>> {
    let stored = load_stored(pool, &p.id).await?;
    let window = window_secs(pool).await?;
    let now = crate::reconcile::lease::now_ms();
    Ok(p.tables
        .iter()
        .map(|t| {
            let topic = crate::pipelines::config::table_topic(&p.topic_prefix, t);
            let live = topics.iter().find(|s| s.name == topic);
            let s = stored.get(t);
            TableFreshness {
                name: t.clone(),
                records: live.map(|l| l.records),
                end_offset: live.map(|l| l.end_offset).or(s.map(|s| s.end_offset)),
                changed_at: s.and_then(|s| s.changed_at).and_then(rfc3339),
                age_secs: s
                    .and_then(|s| s.changed_at)
                    .map(|at| ((now - at).max(0) as f64) / 1000.0),
                first_seen_at: s.and_then(|s| rfc3339(s.first_seen_at)),
                source_changes: s.and_then(|s| s.source_changes),
                source_changed_at: s.and_then(|s| s.source_changed_at).and_then(rfc3339),
                stalled_secs: s.map_or(0.0, |s| stalled_secs(s, now)),
                state: state(s, window, now),
                cause: s
                    .filter(|s| stalled_secs(s, now) > window)
                    .and_then(|s| s.cause.clone()),
                counter_note: s.and_then(|s| s.no_counter.clone()),
                topic,
            }
        })
        .collect())
}

/// Stalest first: stalled tables by how long, then by the age of their last change (never
/// seen changing first), then by name.
pub fn sort_stalest(tables: &mut [TableFreshness]) {
    tables.sort_by(|a, b| {
        b.stalled_secs
            .total_cmp(&a.stalled_secs)
            .then_with(|| {
                let age = |t: &TableFreshness| t.age_secs.unwrap_or(f64::INFINITY);
                age(b).total_cmp(&age(a))
            })
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// A delivered table's lag, as the delivery page and `GET /api/v1/deliveries/{id}` show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DeliveryTable {
    pub name: String,
    pub topic: String,
    /// Records of the table's topic the delivery's group has not committed, over partitions.
    pub lag_records: i64,
    /// How long the oldest of them has waited, from the monitor's end-offset marks: the time
    /// the topic's end was first seen past the group's committed position (a lower bound, by
    /// at most the gap between two marks: one monitor interval while marks are dense; with
    /// several partitions the sums make it a lower bound too). 0 with nothing waiting or when
    /// what waits arrived after the newest mark; None when the table has no mark yet.
    pub lag_secs: Option<f64>,
}

impl DeliveryTable {
    pub fn lag_text(&self) -> String {
        self.lag_secs.map(ago).unwrap_or_default()
    }
}

/// The lag in time for one table: `marks` (end offset, seen at) oldest first.
pub fn lag_from_marks(marks: &[(i64, i64)], committed: i64, waiting: i64, now: i64) -> Option<f64> {
    if waiting <= 0 {
        return Some(0.0);
    }
    if marks.is_empty() {
        return None;
    }
    Some(
        marks
            .iter()
            .find(|(end, _)| *end > committed)
            .map_or(0.0, |(_, at)| ((now - at).max(0) as f64) / 1000.0),
    )
}

/// The delivery's tables (its topics that are tables of `pipeline`), with their lag summed
/// from the group's lag per partition (`lag`, already read) and the stored marks.
pub async fn delivery_tables(
    pool: &Pool,
    pipeline: &Pipeline,
    topics: &[String],
    lag: &[crate::kafka::PartitionLag],
) -> sqlx::Result<Vec<DeliveryTable>> {
    let now = crate::reconcile::lease::now_ms();
    // Every mark of the pipeline in one read (at most ~100 per table), oldest first.
    let rows: Vec<(String, i64, i64)> = db::query_as(
        "SELECT table_name, end_offset, seen_at FROM table_end_marks WHERE pipeline_id = $1 ORDER BY table_name, seen_at",
    )
    .bind(&pipeline.id)
    .fetch_all(pool)
    .await?;
    let mut marks_of: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    for (t, end, at) in rows {
        marks_of.entry(t).or_default().push((end, at));
    }
    let mut out = Vec::new();
    for t in &pipeline.tables {
        let topic = crate::pipelines::config::table_topic(&pipeline.topic_prefix, t);
        if !topics.contains(&topic) {
            continue;
        }
        let parts: Vec<&crate::kafka::PartitionLag> =
            lag.iter().filter(|l| l.topic == topic).collect();
        let waiting: i64 = parts.iter().map(|l| l.lag).sum();
        let committed: i64 = parts.iter().map(|l| l.end_offset - l.lag).sum();
        let marks = marks_of.get(t).map(Vec::as_slice).unwrap_or_default();
        out.push(DeliveryTable {
            name: t.clone(),
            lag_records: waiting,
            lag_secs: lag_from_marks(marks, committed, waiting, now),
            topic,
        });
    }
    Ok(out)
}

/// Most behind first: by lag in time, then in records, then by name.
pub fn sort_most_behind(tables: &mut [DeliveryTable]) {
    tables.sort_by(|a, b| {
        b.lag_secs
            .unwrap_or(0.0)
            .total_cmp(&a.lag_secs.unwrap_or(0.0))
            .then_with(|| b.lag_records.cmp(&a.lag_records))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// The per-table series of one delivery (subject `<delivery>/<table>`), from its detail.
pub(crate) fn delivery_observations(delivery: &str, tables: &[DeliveryTable]) -> Vec<Observation> {
    let mut seen = Vec::new();
    for t in tables {
        seen.push(Observation {
            kind: "delivery_table_lag_records",
            subject: format!("{delivery}/{}", t.name),
            value: t.lag_records as f64,
            message: String::new(),
        });
        if let Some(secs) = t.lag_secs {
            seen.push(Observation {
                kind: "delivery_table_lag_seconds",
                subject: format!("{delivery}/{}", t.name),
                value: secs,
                message: String::new(),
            });
        }
    }
    seen
}

/// What one cycle observed: observations, and the subjects that still exist (an open alert
/// on a table not measured this cycle stays as it is; one on a table gone resolves).
#[derive(Default)]
pub(crate) struct Observed {
    pub seen: Vec<Observation>,
    pub present: Vec<String>,
}

/// The change counters of `tables` on one source: one statement on a source session (kept
/// between cycles by `pipelines::source::Session`, so a cycle pays no new authentication),
/// bounded by its statement timeout and [`QUERY_TIMEOUT`].
/// Err: the source did not answer (nothing is judged this cycle).
pub async fn read_counters(
    store: &SecretStore,
    c: &Connection,
    tables: &[String],
) -> Result<HashMap<String, Counter>, String> {
    if !matches!(
        c.provider,
        Provider::Postgresql | Provider::Mysql | Provider::Mariadb
    ) {
        let why = "no per-table change counter on this source: it is not a database";
        return Ok(tables
            .iter()
            .map(|t| (t.clone(), Counter::None(why.into())))
            .collect());
    }
    let read = async {
        let mut session = crate::pipelines::source::Session::open(store, c).await?;
        session.change_counters(tables).await
    };
    let answer = tokio::time::timeout(QUERY_TIMEOUT, read)
        .await
        .map_err(|_| {
            format!(
                "the source {} did not answer within {QUERY_TIMEOUT:?}",
                c.name
            )
        })?
        .map_err(|e| e.to_string())?;
    Ok(match answer {
        Ok(values) => values
            .into_iter()
            .map(|(t, v)| (t, Counter::Value(v)))
            .collect(),
        Err(why) => tables
            .iter()
            .map(|t| {
                let why = format!("no per-table change counter on this source: {why}");
                (t.clone(), Counter::None(why))
            })
            .collect(),
    })
}

/// The pipeline's publication as it concerns `tables` (PostgreSQL): two catalog reads, only
/// when a table's stall passes the window.
async fn read_publication(
    store: &SecretStore,
    c: &Connection,
    name: &str,
    tables: &[String],
) -> Result<HashMap<String, Publication>, String> {
    let read = async {
        let mut session = crate::pipelines::source::Session::open(store, c).await?;
        session.publication(name, tables).await
    };
    let found = tokio::time::timeout(QUERY_TIMEOUT, read)
        .await
        .map_err(|_| {
            format!(
                "the source {} did not answer within {QUERY_TIMEOUT:?}",
                c.name
            )
        })?
        .map_err(|e| e.to_string())?;
    Ok(tables
        .iter()
        .map(|t| {
            let row = found.tables.iter().find(|(n, _)| n == t);
            let p = match found.head {
                None => Publication {
                    name: name.to_string(),
                    ..Default::default()
                },
                Some((all, ins, upd, del)) => Publication {
                    name: name.to_string(),
                    exists: true,
                    all_tables: all,
                    has_table: all || row.is_some(),
                    row_filter: row.and_then(|(_, f)| f.clone()),
                    unpublished: [(ins, "insert"), (upd, "update"), (del, "delete")]
                        .into_iter()
                        .filter(|(on, _)| !on)
                        .map(|(_, op)| op)
                        .collect(),
                },
            };
            (t.clone(), p)
        })
        .collect())
}

async fn save(tx: &mut crate::db::Tx<'_>, pipeline_id: &str, s: &Stored) -> sqlx::Result<()> {
    db::query(
        "INSERT INTO table_freshness (pipeline_id, table_name, end_offset, changed_at, first_seen_at, source_changes, source_checked_at, source_changed_at, pending_since, confirmed_at, no_counter, cause, cause_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (pipeline_id, table_name) DO UPDATE SET end_offset = excluded.end_offset, changed_at = excluded.changed_at, source_changes = excluded.source_changes, source_checked_at = excluded.source_checked_at, source_changed_at = excluded.source_changed_at, pending_since = excluded.pending_since, confirmed_at = excluded.confirmed_at, no_counter = excluded.no_counter, cause = excluded.cause, cause_at = excluded.cause_at",
    )
    .bind(pipeline_id)
    .bind(&s.table_name)
    .bind(s.end_offset)
    .bind(s.changed_at)
    .bind(s.first_seen_at)
    .bind(s.source_changes)
    .bind(s.source_checked_at)
    .bind(s.source_changed_at)
    .bind(s.pending_since)
    .bind(s.confirmed_at)
    .bind(&s.no_counter)
    .bind(&s.cause)
    .bind(s.cause_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Keeps at most [`MARKS_MAX`] marks per table: drops, one at a time, the inner mark whose
/// neighbours are closest in time, so recent history stays dense and old history coarse.
fn marks_to_drop(at: &[i64], max: usize) -> Vec<i64> {
    let mut at = at.to_vec();
    let mut dropped = Vec::new();
    while at.len() > max && at.len() > 2 {
        let i = (1..at.len() - 1)
            .min_by_key(|&i| at[i + 1] - at[i - 1])
            .unwrap_or(1);
        dropped.push(at.remove(i));
    }
    dropped
}

/// One monitor cycle over every pipeline's tables: the end offsets from the topics this cycle
/// already read (`memo`), one counter query per source, the stall rule's value and, for a
/// table stalled past the window, its likely causes.
pub(crate) async fn observe(
    pool: &Pool,
    store: &SecretStore,
    memo: &TopicsMemo,
    now: i64,
) -> anyhow::Result<Observed> {
    let started = std::time::Instant::now();
    let system = Principal::cli();
    let mut out = Observed::default();
    let window = window_secs(pool).await?;
    let pipelines = crate::pipelines::list(pool, &system)
        .await
        .map_err(|e| anyhow::anyhow!(e.to_string()))?;
    // What a deleted pipeline or a removed table left (deleted pipelines cascade already).
    db::query("DELETE FROM table_freshness WHERE pipeline_id NOT IN (SELECT id FROM pipelines)")
        .execute(pool)
        .await?;
    // One counter query per source, over the tables of all its pipelines.
    let mut by_source: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &pipelines {
        by_source
            .entry(p.source_connection_id.clone())
            .or_default()
            .extend(p.tables.iter().cloned());
    }
    let mut counters: HashMap<String, Result<HashMap<String, Counter>, String>> = HashMap::new();
    let mut sources: HashMap<String, Connection> = HashMap::new();
    for (id, mut tables) in by_source {
        tables.sort();
        tables.dedup();
        let Ok(c) = crate::connections::load(pool, &id).await else {
            continue;
        };
        counters.insert(id.clone(), read_counters(store, &c, &tables).await);
        sources.insert(id, c);
    }
    let counters_ms = started.elapsed().as_millis() as u64;
    for p in &pipelines {
        for t in &p.tables {
            out.present.push(format!("{}/{t}", p.name));
        }
        let placeholders = db::placeholders(2, p.tables.len());
        let q = format!("DELETE FROM table_freshness WHERE pipeline_id = $1 AND table_name NOT IN ({placeholders})");
        let mut gone = db::query(&q).bind(&p.id);
        for t in &p.tables {
            gone = gone.bind(t);
        }
        gone.execute(pool).await?;
        let q = format!("DELETE FROM table_end_marks WHERE pipeline_id = $1 AND table_name NOT IN ({placeholders})");
        let mut gone = db::query(&q).bind(&p.id);
        for t in &p.tables {
            gone = gone.bind(t);
        }
        gone.execute(pool).await?;
        // The topics as this cycle read them; a cluster that did not answer changes nothing.
        let Some(topics) = memo.cluster(&p.kafka_cluster_id) else {
            continue;
        };
        let connector = crate::connectors::get(pool, &system, &p.connector_id)
            .await
            .ok();
        let snapshotting = connector
            .as_ref()
            .and_then(|c| c.offsets.as_ref())
            .and_then(crate::pipelines::source::position)
            .is_some_and(|pos| pos.snapshotting);
        let wanted_running = connector
            .as_ref()
            .is_some_and(|c| c.desired_state == "running");
        let evaluate = wanted_running && !snapshotting;
        let not_streaming = connector.as_ref().is_none_or(|c| {
            c.phase != "UNKNOWN"
                && (c.phase != "RUNNING"
                    || c.tasks.is_empty()
                    || c.tasks.iter().any(|t| t.state != "RUNNING"))
        });
        let connector_words = match &connector {
            None => "it has no connector".to_string(),
            Some(c) => {
                let failed: Vec<String> = c
                    .tasks
                    .iter()
                    .filter(|t| t.state != "RUNNING")
                    .map(|t| format!("task {} {}", t.id, t.state))
                    .collect();
                let mut w = format!("its connector {} is {}", c.name, c.phase);
                if !failed.is_empty() {
                    w.push_str(&format!(" ({})", failed.join(", ")));
                } else if c.tasks.is_empty() {
                    w.push_str(" (no task)");
                }
                w
            }
        };
        let source_counters = counters.get(&p.source_connection_id);
        let stored = load_stored(pool, &p.id).await?;
        let mut next: Vec<(Stored, bool)> = Vec::new();
        for t in &p.tables {
            let topic = crate::pipelines::config::table_topic(&p.topic_prefix, t);
            let end = topics.iter().find(|x| x.name == topic).map(|x| {
                x.partitions
                    .iter()
                    .map(|p| p.high_watermark.max(0))
                    .sum::<i64>()
            });
            let counter = match source_counters {
                Some(Ok(all)) => all.get(t).cloned().unwrap_or(Counter::Unread),
                _ => Counter::Unread,
            };
            let prev = stored.get(t);
            let Some(s) = step(prev, t, end, &counter, evaluate, now) else {
                continue;
            };
            let marked = prev.is_none_or(|p| s.end_offset > p.end_offset);
            next.push((s, marked));
        }
        // Causes for the tables stalled past the window (looked up at most once a minute).
        let stalled: Vec<String> = next
            .iter()
            .filter(|(s, _)| stalled_secs(s, now) > window)
            .filter(|(s, _)| s.cause_at.is_none_or(|at| now - at >= CAUSE_EVERY_MS))
            .map(|(s, _)| s.table_name.clone())
            .collect();
        if !stalled.is_empty() {
            let source = sources.get(&p.source_connection_id);
            let publication_name = source
                .filter(|c| c.provider == Provider::Postgresql)
                .and_then(|c| c.database())
                .and_then(|d| d.publication_name.clone());
            let publications = match (source, &publication_name) {
                (Some(c), Some(name)) => read_publication(store, c, name, &stalled).await.ok(),
                _ => None,
            };
            let filters = filtering_options(&p.options);
            let moved: Vec<(String, i64)> = next
                .iter()
                .filter_map(|(s, _)| s.changed_at.map(|at| (s.table_name.clone(), at)))
                .collect();
            for (s, _) in next
                .iter_mut()
                .filter(|(s, _)| stalled.contains(&s.table_name))
            {
                let since = s.pending_since.unwrap_or(now);
                let suspects = Suspects {
                    table: s.table_name.clone(),
                    publication: publications
                        .as_ref()
                        .and_then(|all| all.get(&s.table_name).cloned()),
                    autocreate_filtered: p.publication_mode == "filtered",
                    filters: filters.clone(),
                    connector: connector_words.clone(),
                    not_streaming,
                    others_moved: moved
                        .iter()
                        .filter(|(t, at)| *t != s.table_name && *at >= since)
                        .map(|(t, at)| (t.clone(), ((now - at).max(0) as f64) / 1000.0))
                        .collect(),
                    others: p.tables.len().saturating_sub(1),
                };
                s.cause = Some(cause_text(&suspects));
                s.cause_at = Some(now);
            }
        }
        // One transaction per pipeline: a write per table each cycle, committed once.
        let mut tx = pool.begin().await?;
        for (s, marked) in &next {
            save(&mut tx, &p.id, s).await?;
            if *marked {
                db::query("INSERT INTO table_end_marks (pipeline_id, table_name, end_offset, seen_at) VALUES ($1, $2, $3, $4) ON CONFLICT (pipeline_id, table_name, seen_at) DO UPDATE SET end_offset = excluded.end_offset")
                    .bind(&p.id)
                    .bind(&s.table_name)
                    .bind(s.end_offset)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        for (s, _) in &next {
            let subject = format!("{}/{}", p.name, s.table_name);
            if let Some(at) = s.changed_at {
                out.seen.push(Observation {
                    kind: "table_last_change_age_seconds",
                    subject: subject.clone(),
                    value: ((now - at).max(0) as f64) / 1000.0,
                    message: String::new(),
                });
            }
            // Unread source: its stall is neither measured nor cleared this cycle.
            let unread = !matches!(
                source_counters,
                Some(Ok(all)) if all.contains_key(&s.table_name)
            );
            if unread && s.pending_since.is_some() {
                continue;
            }
            let stalled = stalled_secs(s, now);
            let topic = crate::pipelines::config::table_topic(&p.topic_prefix, &s.table_name);
            out.seen.push(Observation {
                kind: "table_stalled_seconds",
                subject: subject.clone(),
                value: stalled,
                message: String::new(),
            });
            out.seen.push(Observation {
                kind: RULE,
                subject,
                value: stalled,
                message: message(&p.name, &s.table_name, &topic, stalled, s.cause.as_deref()),
            });
        }
    }
    // Thin the marks of the tables that have more than their share (rarely: one table at a
    // time passes the bound by one mark per cycle at most).
    let over: Vec<(String, String)> = db::query_as(
        "SELECT pipeline_id, table_name FROM table_end_marks GROUP BY pipeline_id, table_name HAVING COUNT(*) > $1",
    )
    .bind(MARKS_MAX + 8)
    .fetch_all(pool)
    .await?;
    for (pipeline_id, table) in over {
        let at: Vec<i64> = db::query_scalar(
            "SELECT seen_at FROM table_end_marks WHERE pipeline_id = $1 AND table_name = $2 ORDER BY seen_at",
        )
        .bind(&pipeline_id)
        .bind(&table)
        .fetch_all(pool)
        .await?;
        let mut tx = pool.begin().await?;
        for seen_at in marks_to_drop(&at, MARKS_MAX as usize) {
            db::query("DELETE FROM table_end_marks WHERE pipeline_id = $1 AND table_name = $2 AND seen_at = $3")
                .bind(&pipeline_id)
                .bind(&table)
                .bind(seen_at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    }
    // What scripts/bench reads: this block's wall time, and the source queries' share.
    tracing::debug!(
        tables = pipelines.iter().map(|p| p.tables.len()).sum::<usize>(),
        sources = sources.len(),
        counters_ms,
        ms = started.elapsed().as_millis() as u64,
        "per-table freshness observed"
    );
    Ok(out)
}

/// A captured table's freshness (see `tables::freshness::state`).
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum FreshnessState {
    /// Its topic changed recently enough.
    Fresh,
    /// The source changed but its topic did not.
    Stalled,
    /// Neither changed.
    Quiet,
    /// The source has no per-table change counter.
    NoCounter,
    /// Not seen by the monitor yet.
    Unobserved,
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000;

    fn run(cycles: &[(i64, Option<i64>, Counter)]) -> Vec<Stored> {
        let mut s: Option<Stored> = None;
        let mut all = Vec::new();
        for (at, end, counter) in cycles {
            s = step(s.as_ref(), "public.a", *end, counter, true, *at);
            all.push(s.clone().unwrap());
        }
        all
    }

    #[test]
    fn a_source_change_the_topic_does_not_follow_stalls_from_when_it_was_first_seen() {
        use Counter::Value;
        // 1 s cycles: the topic moves with the source until t=3, then only the source changes.
        let mut cycles = vec![
            (0, Some(10), Value(100)),
            (S, Some(12), Value(102)),
            (2 * S, Some(14), Value(104)),
            (3 * S, Some(16), Value(106)),
        ];
        for i in 4..=16 {
            cycles.push((i * S, Some(16), Value(100 + 2 * i)));
        }
        let states = run(&cycles);
        assert_eq!(states[3].changed_at, Some(3 * S));
        // The first rise after the move is a candidate: it may be the move's own change,
        // counted late by the statistics.
        assert_eq!(states[4].pending_since, Some(4 * S));
        assert_eq!(stalled_secs(&states[4], 4 * S), 0.0);
        assert_eq!(
            stalled_secs(&states[14], 14 * S),
            0.0,
            "previous sample 10 s after"
        );
        // A rise whose previous sample is 11 s past the move proves it, counted from the first.
        assert_eq!(states[15].confirmed_at, Some(15 * S));
        assert_eq!(states[15].pending_since, Some(4 * S));
        assert_eq!(stalled_secs(&states[15], 15 * S), 11.0);
        assert_eq!(stalled_secs(&states[16], 16 * S), 12.0);
        assert_eq!(state(Some(&states[16]), 8.0, 16 * S), "stalled");
        assert_eq!(state(Some(&states[16]), 300.0, 16 * S), "fresh");
        assert_eq!(states[16].source_changed_at, Some(16 * S));
        // The topic moves again: resolved at once.
        let again = step(
            Some(&states[16]),
            "public.a",
            Some(17),
            &Value(131),
            true,
            17 * S,
        )
        .unwrap();
        assert_eq!(stalled_secs(&again, 17 * S), 0.0);
        assert_eq!(again.changed_at, Some(17 * S));
        assert_eq!(state(Some(&again), 8.0, 17 * S), "fresh");
    }

    #[test]
    fn a_quiet_table_a_table_that_follows_and_a_trailing_statistic_never_stall() {
        use Counter::Value;
        let quiet = run(&[
            (0, Some(5), Value(5)),
            (S, Some(5), Value(5)),
            (100 * S, Some(5), Value(5)),
        ]);
        assert_eq!(stalled_secs(&quiet[2], 100 * S), 0.0);
        assert_eq!(state(Some(&quiet[2]), 8.0, 100 * S), "quiet");
        // A lone change: the topic moves at once, the statistic shows it one cycle later.
        let trailing = run(&[
            (0, Some(5), Value(5)),
            (S, Some(5), Value(5)),
            (2 * S, Some(6), Value(5)),
            (3 * S, Some(6), Value(6)),
            (50 * S, Some(6), Value(6)),
        ]);
        assert_eq!(trailing[3].pending_since, Some(3 * S), "a candidate");
        assert_eq!(trailing[3].confirmed_at, None);
        assert_eq!(stalled_secs(&trailing[4], 50 * S), 0.0);
        // The topic moves in the same cycle as the source, every cycle.
        let follows = run(&[
            (0, Some(5), Value(5)),
            (30 * S, Some(6), Value(6)),
            (60 * S, Some(7), Value(7)),
        ]);
        assert!(follows.iter().all(|s| s.pending_since.is_none()));
        assert_eq!(state(Some(&follows[2]), 300.0, 60 * S), "fresh");
    }

    #[test]
    fn no_counter_an_unread_source_a_paused_pipeline_and_a_statistics_reset() {
        use Counter::*;
        let none = run(&[
            (0, Some(5), None("off".into())),
            (S, Some(5), None("off".into())),
            (1000 * S, Some(5), None("off".into())),
        ]);
        assert_eq!(state(Some(&none[2]), 300.0, 1000 * S), "no_counter");
        assert_eq!(none[2].no_counter.as_deref(), Some("off"));
        let moved = step(
            Some(&none[2]),
            "public.a",
            Some(6),
            &None("off".into()),
            true,
            1001 * S,
        )
        .unwrap();
        assert_eq!(state(Some(&moved), 300.0, 1001 * S), "fresh");
        // Unread keeps the stall as it was (neither measured nor cleared).
        let stalled = run(&[
            (0, Some(5), Value(1)),
            (12 * S, Some(5), Value(1)),
            (24 * S, Some(5), Value(2)),
            (30 * S, Option::None, Unread),
        ]);
        assert_eq!(stalled[2].pending_since, Some(24 * S));
        assert_eq!(
            stalled[2].confirmed_at,
            Some(24 * S),
            "previous sample 12 s after"
        );
        assert_eq!(stalled[3].pending_since, Some(24 * S));
        assert_eq!(stalled_secs(&stalled[3], 30 * S), 6.0);
        // Paused on purpose: no stall held.
        let paused = step(
            Some(&stalled[3]),
            "public.a",
            Some(5),
            &Value(9),
            false,
            40 * S,
        )
        .unwrap();
        assert_eq!(paused.pending_since, Option::None);
        // A reset counter is a new baseline, not a change.
        let reset = step(Some(&paused), "public.a", Some(5), &Value(0), true, 50 * S).unwrap();
        assert_eq!(reset.source_changes, Some(0));
        assert_eq!(reset.source_changed_at, paused.source_changed_at);
        assert_eq!(reset.pending_since, Option::None);
        assert_eq!(state(Option::None, 300.0, 0), "unobserved");
    }

    fn suspects() -> Suspects {
        Suspects {
            table: "shop.orders".into(),
            publication: Some(Publication {
                name: "cdc_pub".into(),
                exists: true,
                has_table: true,
                ..Default::default()
            }),
            autocreate_filtered: true,
            filters: vec![],
            connector: "its connector c is RUNNING".into(),
            not_streaming: false,
            others_moved: vec![("shop.items".into(), 2.0)],
            others: 1,
        }
    }

    #[test]
    fn causes_come_most_certain_first_in_the_rules_order() {
        // Missing from the publication: first, stated as found, with the statement.
        let mut s = suspects();
        s.publication.as_mut().unwrap().has_table = false;
        s.filters = vec!["skipped.operations=u".into()];
        let (found, ruled_out) = causes(&s);
        assert_eq!(found[0].0, Certainty::Found);
        assert!(
            found[0].1.starts_with("not in publication cdc_pub: ALTER PUBLICATION \"cdc_pub\" ADD TABLE \"shop\".\"orders\";")
                && found[0].1.contains("restart the pipeline"),
            "{found:?}"
        );
        assert_eq!(
            found[1],
            (
                Certainty::Possible,
                "filtered out by the pipeline's option skipped.operations=u".into()
            )
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            ruled_out[0].contains("the connector streams")
                && ruled_out[0].contains("shop.items 2 s ago")
        );
        let m = message(
            "orders",
            "shop.orders",
            "p.shop.orders",
            12.0,
            Some(&cause_text(&s)),
        );
        assert!(
            m.starts_with("table shop.orders of pipeline orders changed on the source 12 s ago")
                && m.contains("1. found: not in publication cdc_pub")
                && m.contains("2. possibly: filtered out"),
            "{m}"
        );
        // In the publication, with a row filter and a failed connector: both found, the filter
        // (the rule's order) first; the option only possible, after them.
        let mut s = suspects();
        s.publication.as_mut().unwrap().row_filter = Some("(region = 'eu')".into());
        s.filters = vec!["transforms.f.type=io.debezium.transforms.Filter".into()];
        s.not_streaming = true;
        s.others_moved.clear();
        s.connector = "its connector c is FAILED (task 0 FAILED)".into();
        let (found, ruled_out) = causes(&s);
        let texts: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
        assert!(
            texts[0].starts_with("filtered out: publication cdc_pub publishes only the rows"),
            "{texts:?}"
        );
        assert!(
            texts[1].starts_with("the connector is not streaming: its connector c is FAILED"),
            "{texts:?}"
        );
        assert!(
            texts[2].starts_with("filtered out by the pipeline's option transforms.f.type"),
            "{texts:?}"
        );
        assert!(ruled_out[0].contains("is in publication cdc_pub"));
        // Disabled mode: the owner runs it; nothing re-adds the table.
        let mut s = suspects();
        s.autocreate_filtered = false;
        s.publication.as_mut().unwrap().has_table = false;
        assert!(causes(&s).0[0]
            .1
            .contains("the connector never changes the publication"));
        // Nothing else moved: the connector is suspect, though only possibly.
        let mut s = suspects();
        s.others_moved.clear();
        let (found, _) = causes(&s);
        assert_eq!(found[0].0, Certainty::Possible);
        assert!(found[0]
            .1
            .contains("none of the pipeline's other tables moved"));
    }

    #[test]
    fn filtering_options_name_what_can_leave_rows_out() {
        let o: BTreeMap<String, String> = [
            ("skipped.operations", "t"),
            ("table.exclude.list", "shop\\.audit"),
            ("transforms", "route, unwrap"),
            (
                "transforms.route.type",
                "io.debezium.transforms.ByLogicalTableRouter",
            ),
            (
                "transforms.unwrap.type",
                "io.debezium.transforms.ExtractNewRecordState",
            ),
            ("heartbeat.interval.ms", "1000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            filtering_options(&o),
            vec![
                "table.exclude.list=shop\\.audit".to_string(),
                "transforms.route.type=io.debezium.transforms.ByLogicalTableRouter".to_string()
            ]
        );
    }

    #[test]
    fn lag_in_time_is_when_the_end_first_passed_the_committed_offset() {
        let marks = [(10, 100 * S), (20, 110 * S), (35, 120 * S)];
        assert_eq!(lag_from_marks(&marks, 35, 0, 130 * S), Some(0.0));
        assert_eq!(lag_from_marks(&marks, 12, 23, 130 * S), Some(20.0));
        assert_eq!(
            lag_from_marks(&marks, 5, 30, 130 * S),
            Some(30.0),
            "a lower bound"
        );
        assert_eq!(
            lag_from_marks(&marks, 35, 2, 130 * S),
            Some(0.0),
            "newer than the last mark"
        );
        assert_eq!(lag_from_marks(&[], 0, 2, 130 * S), None);
    }

    #[test]
    fn marks_are_thinned_where_they_are_densest() {
        let at: Vec<i64> = vec![0, 100, 101, 102, 200, 300];
        let dropped = marks_to_drop(&at, 4);
        assert_eq!(dropped, vec![101, 102]);
        assert!(marks_to_drop(&at, 10).is_empty());
    }

    #[test]
    fn stalest_first_and_most_behind_first() {
        let t = |name: &str, stalled: f64, age: Option<f64>| TableFreshness {
            name: name.into(),
            topic: String::new(),
            records: None,
            end_offset: None,
            changed_at: None,
            age_secs: age,
            first_seen_at: None,
            source_changes: None,
            source_changed_at: None,
            stalled_secs: stalled,
            state: "fresh",
            cause: None,
            counter_note: None,
        };
        let mut all = vec![
            t("b", 0.0, Some(1.0)),
            t("q", 0.0, None),
            t("a", 40.0, Some(50.0)),
            t("c", 0.0, Some(9.0)),
        ];
        sort_stalest(&mut all);
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "q", "c", "b"]);
        let d = |name: &str, records: i64, secs: Option<f64>| DeliveryTable {
            name: name.into(),
            topic: String::new(),
            lag_records: records,
            lag_secs: secs,
        };
        let mut all = vec![
            d("x", 5, Some(1.0)),
            d("y", 500, Some(1.0)),
            d("z", 1, Some(90.0)),
        ];
        sort_most_behind(&mut all);
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["z", "y", "x"]);
        assert_eq!(ago(5.4), "5 s");
        assert_eq!(ago(600.0), "10 min");
        assert_eq!(ago(7_200.0), "2 h");
    }
}
