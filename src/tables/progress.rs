//! Snapshot progress per table, for the initial snapshot and incremental re-snapshots: from
//! Debezium's notifications (its `sink` channel writes them into the pipeline's notification
//! topic, [`crate::pipelines::config::notification_topic`]), the table topics' watermarks and
//! the source's row estimates. Notifications are Debezium's operational notices (a snapshot
//! started, a table is in progress, a table's scan completed with its row count), not change
//! events: ClueCDC reads no CDC record.
//!
//! The formats, as Debezium 3.5.0.Final writes them (debezium-connector-common,
//! `io.debezium.pipeline.notification`):
//! - `Notification`: `id`, `aggregate_type`, `type`, `additional_data` (a string → string
//!   map), `timestamp` (unix ms). `SinkNotificationChannel.send` writes it as a Connect record
//!   whose key is a struct `{id}` and whose value is a struct with those five fields
//!   (`SchemaFactory.notificationKeySchema`/`notificationValueSchema`), through the connector's
//!   own converters: here JSON with schemas, `{"schema": …, "payload": {…}}`.
//! - `InitialSnapshotNotificationService`: aggregate type `"Initial Snapshot"`; types `STARTED`,
//!   `IN_PROGRESS` (`current_collection_in_progress`, `data_collections`, sent before a table's
//!   scan in `RelationalSnapshotChangeEventSource.doCreateDataEventsForTable`),
//!   `TABLE_CHUNK_IN_PROGRESS` / `TABLE_CHUNK_COMPLETED` (chunked snapshots: `chunk_index`,
//!   `total_chunks`, `total_rows_scanned`), `TABLE_SCAN_COMPLETED` (`scanned_collection`,
//!   `data_collections`, `total_rows_scanned`, `status` SUCCEEDED or SQL_EXCEPTION), `COMPLETED`,
//!   `ABORTED`, `SKIPPED` (no snapshot needed: also after every restart of a connector that
//!   has snapshotted). Every notification carries `connector_name`; ids are random.
//! - `IncrementalSnapshotNotificationService`: aggregate type `"Incremental Snapshot"`; the id
//!   is the signal's id (`correlationId`, set from the `execute-snapshot` signal in
//!   `AbstractIncrementalSnapshotChangeEventSource.addDataCollectionNamesToSnapshot`), so every
//!   notice of one re-snapshot shares it; types `STARTED`, `PAUSED`, `RESUMED` (`data_collections`),
//!   `IN_PROGRESS` (`data_collections`, `current_collection_in_progress`, `maximum_key`,
//!   `last_processed_key`; after each chunk), `TABLE_SCAN_COMPLETED` (`data_collections`, still
//!   with the scanned table first, `scanned_collection`, `total_rows_scanned`, `status` EMPTY,
//!   NO_PRIMARY_KEY, SKIPPED, SQL_EXCEPTION, SUCCEEDED or UNKNOWN_SCHEMA), `ABORTED` (optionally
//!   `data_collections`: the ones stopped), `COMPLETED` (`SnapshotStatus`).
//!
//! Rows scanned while a table scans are live, computed at read time: the table topic's end
//! offset now minus its offset when the scan started (found with ListOffsets by the
//! notification's timestamp), so the page and the API move between monitor cycles. Streaming
//! changes to the same table during the scan count too; once the scan completes the figure is
//! Debezium's exact count. Rows expected are the source's estimates (PostgreSQL
//! `pg_class.reltuples`, MySQL/MariaDB `information_schema.tables.table_rows`), asked once per
//! snapshot with one bounded query per source.

use crate::db;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::db::Pool;
use serde::{Deserialize, Serialize};

use crate::auth::Principal;
use crate::connections::{Connection, Provider};
use crate::monitor::signals::Observation;
use crate::pipelines::config::{notification_topic, table_topic};
use crate::pipelines::{Pipeline, TopicSize};
use crate::secrets::store::SecretStore;

/// `InitialSnapshotNotificationService.INITIAL_SNAPSHOT`.
pub const INITIAL_SNAPSHOT: &str = "Initial Snapshot";
/// `IncrementalSnapshotNotificationService.INCREMENTAL_SNAPSHOT`.
pub const INCREMENTAL_SNAPSHOT: &str = "Incremental Snapshot";

/// At most this many notifications per pipeline and cycle (a 200,000-row incremental
/// snapshot in 1,024-row chunks sends about 200); the rest are read at the next cycle.
const READ_MAX: usize = 2_000;
const READ_WAIT: Duration = Duration::from_secs(3);
/// The source's estimates: one statement, bounded on the server and here.
const ESTIMATE_TIMEOUT: Duration = Duration::from_secs(5);
/// The live count is sampled at most this often for the rate (window: one to two of these).
const RATE_WINDOW_MS: i64 = 20_000;
/// Snapshots kept per pipeline.
const KEEP_RUNS: i64 = 10;
/// A finished snapshot's series stay on `/metrics` this long.
const SERIES_AFTER_FINISH_MS: i64 = 3_600_000;

/// One Debezium notification, as `Notification` holds it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Notification {
    pub id: String,
    pub aggregate_type: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub additional_data: BTreeMap<String, String>,
    pub timestamp: i64,
}

impl Notification {
    fn data(&self, key: &str) -> Option<&str> {
        self.additional_data.get(key).map(String::as_str)
    }

    /// `data_collections`, joined with `,` by Debezium (`LIST_DELIMITER`).
    fn collections(&self) -> Vec<&str> {
        self.data("data_collections")
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A notification record's value: JSON with schemas (`{"schema", "payload"}`) as the
/// connector's JsonConverter writes it, or the bare payload (converter without schemas).
pub fn parse(value: &[u8]) -> Option<Notification> {
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    let payload = match v.get("payload") {
        Some(p) if v.get("schema").is_some() => p.clone(),
        _ => v,
    };
    serde_json::from_value(payload).ok()
}

pub const WAITING: &str = "waiting";
pub const SCANNING: &str = "scanning";
pub const DONE: &str = "done";
pub const ABORTED: &str = "aborted";

/// One table of a snapshot, as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableRun {
    pub name: String,
    pub position: i64,
    pub state: String,
    pub started_at: Option<String>,
    pub started_ms: Option<i64>,
    pub baseline: Option<i64>,
    pub finished_at: Option<String>,
    pub rows_scanned: Option<i64>,
    pub rows_expected: Option<i64>,
    pub status: Option<String>,
    pub sample_rows: Option<i64>,
    pub sample_ms: Option<i64>,
    pub prev_rows: Option<i64>,
    pub prev_ms: Option<i64>,
    pub moved_rows: Option<i64>,
    pub moved_ms: Option<i64>,
}

/// One snapshot of a pipeline, as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub id: Option<i64>,
    pub kind: String,
    /// waiting (requested, not started), running, paused, completed, aborted.
    pub state: String,
    pub correlation_id: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub estimated: bool,
    pub tables: Vec<TableRun>,
    pub dirty: bool,
}

impl Run {
    fn new(kind: &str, state: &str, at: Option<String>, tables: &[String]) -> Run {
        Run {
            kind: kind.into(),
            state: state.into(),
            started_at: at,
            tables: tables
                .iter()
                .enumerate()
                .map(|(i, t)| TableRun {
                    name: t.clone(),
                    position: i as i64,
                    state: WAITING.into(),
                    ..Default::default()
                })
                .collect(),
            dirty: true,
            ..Default::default()
        }
    }

    fn active(&self) -> bool {
        matches!(self.state.as_str(), "waiting" | "running" | "paused")
    }

    fn table(&mut self, name: &str) -> Option<&mut TableRun> {
        self.tables.iter_mut().find(|t| t.name == name)
    }

    fn add_table(&mut self, name: &str) {
        if !self.tables.iter().any(|t| t.name == name) {
            let position = self.tables.len() as i64;
            self.tables.push(TableRun {
                name: name.into(),
                position,
                state: WAITING.into(),
                ..Default::default()
            });
        }
    }

    fn finish(&mut self, state: &str, at: &str, why: &str) {
        self.state = state.into();
        self.finished_at = Some(at.into());
        for t in &mut self.tables {
            if (t.state == WAITING || t.state == SCANNING) && state == ABORTED {
                t.state = ABORTED.into();
                t.status = Some(why.into());
                t.finished_at = Some(at.into());
            }
        }
        self.dirty = true;
    }
}

fn start(t: &mut TableRun, ms: i64) {
    if t.state == WAITING {
        t.state = SCANNING.into();
        t.started_ms = Some(ms);
        t.started_at = Some(at(ms));
        t.baseline = None;
    }
}

fn complete(t: &mut TableRun, n: &Notification, ok: bool) {
    if t.started_ms.is_none() {
        t.started_ms = Some(n.timestamp);
        t.started_at = Some(at(n.timestamp));
    }
    t.state = if ok { DONE } else { ABORTED }.into();
    t.rows_scanned = n.data("total_rows_scanned").and_then(|s| s.parse().ok());
    t.status = n.data("status").map(str::to_string);
    t.finished_at = Some(at(n.timestamp));
}

fn at(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(crate::time::format)
        .unwrap_or_default()
}

/// The pipeline table a Debezium collection id names: PostgreSQL ids are `schema.table`
/// (a catalog may precede them), MySQL/MariaDB ids `database.table`. The signal and
/// heartbeat tables, captured too, name none.
pub fn table_of<'a>(tables: &'a [String], id: &str) -> Option<&'a String> {
    tables
        .iter()
        .find(|t| id == t.as_str() || id.ends_with(&format!(".{t}")))
}

/// Applies one notification to a pipeline's snapshots (oldest first; a new one is pushed).
/// Pure: times come from the notification.
pub fn fold(runs: &mut Vec<Run>, n: &Notification, tables: &[String]) {
    let ts = n.timestamp;
    match n.aggregate_type.as_str() {
        INITIAL_SNAPSHOT => {
            let active = |runs: &mut Vec<Run>| -> usize {
                match runs.iter().rposition(|r| r.kind == "initial" && r.active()) {
                    Some(i) => i,
                    None => {
                        runs.push(Run::new("initial", "running", Some(at(ts)), tables));
                        runs.len() - 1
                    }
                }
            };
            match n.kind.as_str() {
                "STARTED" => {
                    for r in runs
                        .iter_mut()
                        .filter(|r| r.kind == "initial" && r.active())
                    {
                        r.finish(ABORTED, &at(ts), "the snapshot started again");
                    }
                    runs.push(Run::new("initial", "running", Some(at(ts)), tables));
                }
                "IN_PROGRESS" | "TABLE_CHUNK_IN_PROGRESS" => {
                    let i = active(runs);
                    let r = &mut runs[i];
                    if let Some(name) = n
                        .data("current_collection_in_progress")
                        .and_then(|c| table_of(tables, c))
                    {
                        r.add_table(name);
                        if let Some(t) = r.table(name) {
                            start(t, ts);
                        }
                        r.dirty = true;
                    }
                }
                "TABLE_SCAN_COMPLETED" => {
                    let i = active(runs);
                    let r = &mut runs[i];
                    if let Some(name) = n
                        .data("scanned_collection")
                        .and_then(|c| table_of(tables, c))
                    {
                        r.add_table(name);
                        let ok = n.data("status") == Some("SUCCEEDED");
                        if let Some(t) = r.table(name) {
                            complete(t, n, ok);
                        }
                        r.dirty = true;
                    }
                }
                "COMPLETED" => {
                    let i = active(runs);
                    runs[i].finish("completed", &at(ts), "");
                }
                "ABORTED" => {
                    let i = active(runs);
                    runs[i].finish(ABORTED, &at(ts), "Debezium aborted the snapshot");
                }
                // SKIPPED: nothing to snapshot (also on every restart after one); chunk
                // completions change nothing a table's own notices do not.
                _ => {}
            }
        }
        INCREMENTAL_SNAPSHOT => {
            let i = match runs.iter().rposition(|r| {
                r.kind == "incremental" && r.correlation_id.as_deref() == Some(&n.id)
            }) {
                Some(i) => i,
                None => {
                    let mut r = Run::new("incremental", "running", Some(at(ts)), &[]);
                    r.correlation_id = Some(n.id.clone());
                    runs.push(r);
                    runs.len() - 1
                }
            };
            let r = &mut runs[i];
            r.dirty = true;
            let listed: Vec<String> = n
                .collections()
                .into_iter()
                .filter_map(|c| table_of(tables, c).cloned())
                .collect();
            for name in &listed {
                r.add_table(name);
            }
            // The next table in Debezium's queue starts when the previous one completes.
            let start_next = |r: &mut Run| {
                if r.tables.iter().any(|t| t.state == SCANNING) {
                    return;
                }
                let next = listed
                    .iter()
                    .find(|name| {
                        r.tables
                            .iter()
                            .any(|t| &t.name == *name && t.state == WAITING)
                    })
                    .cloned();
                if let Some(t) = next.and_then(|name| r.table(&name)) {
                    start(t, ts);
                }
            };
            match n.kind.as_str() {
                "STARTED" => {
                    r.state = "running".into();
                    if r.started_at.is_none() || r.tables.iter().all(|t| t.state == WAITING) {
                        r.started_at = Some(at(ts));
                    }
                    start_next(r);
                }
                "IN_PROGRESS" => {
                    if r.state == "waiting" {
                        r.state = "running".into();
                    }
                    if let Some(name) = n
                        .data("current_collection_in_progress")
                        .and_then(|c| table_of(tables, c))
                        .cloned()
                    {
                        r.add_table(&name);
                        if let Some(t) = r.table(&name) {
                            start(t, ts);
                        }
                    }
                }
                "TABLE_SCAN_COMPLETED" => {
                    if let Some(name) = n
                        .data("scanned_collection")
                        .and_then(|c| table_of(tables, c))
                        .cloned()
                    {
                        r.add_table(&name);
                        let ok = matches!(n.data("status"), Some("SUCCEEDED" | "EMPTY"));
                        if let Some(t) = r.table(&name) {
                            complete(t, n, ok);
                        }
                    }
                    start_next(r);
                }
                "PAUSED" => r.state = "paused".into(),
                "RESUMED" => r.state = "running".into(),
                "ABORTED" => {
                    let stopped = n.collections();
                    if stopped.is_empty() {
                        r.finish(ABORTED, &at(ts), "the snapshot was stopped");
                    } else {
                        for t in r.tables.iter_mut().filter(|t| {
                            (t.state == WAITING || t.state == SCANNING)
                                && stopped
                                    .iter()
                                    .any(|c| table_of(std::slice::from_ref(&t.name), c).is_some())
                        }) {
                            t.state = ABORTED.into();
                            t.status = Some("stopped".into());
                            t.finished_at = Some(at(ts));
                        }
                        if !r
                            .tables
                            .iter()
                            .any(|t| t.state == WAITING || t.state == SCANNING)
                        {
                            r.finish(ABORTED, &at(ts), "the snapshot was stopped");
                        }
                    }
                }
                "COMPLETED" => r.finish("completed", &at(ts), ""),
                _ => {}
            }
        }
        _ => {}
    }
}

/// The live reading of a table's rows scanned: what was Debezium's final count once done,
/// else the topic's end now minus its offset when the scan started.
fn live_rows(t: &TableRun, end: Option<i64>) -> i64 {
    match t.state.as_str() {
        DONE => t.rows_scanned.or(t.sample_rows).unwrap_or(0),
        SCANNING => match (end, t.baseline) {
            (Some(end), Some(base)) => (end - base).max(0),
            _ => t.sample_rows.unwrap_or(0),
        },
        ABORTED => t.rows_scanned.or(t.sample_rows).unwrap_or(0),
        _ => 0,
    }
}

/// Rows per second over the recent window: from the older of the monitor's two readings (20
/// to 40 s back), else since the scan started.
fn rate(t: &TableRun, rows: i64, now: i64) -> Option<f64> {
    if t.state != SCANNING {
        return None;
    }
    let base = match (t.prev_rows, t.prev_ms, t.sample_rows, t.sample_ms) {
        (Some(r), Some(ms), _, _) if now - ms >= 2_000 => Some((r, ms)),
        (_, _, Some(r), Some(ms)) if now - ms >= 2_000 => Some((r, ms)),
        _ => None,
    }
    .or_else(|| {
        t.started_ms
            .filter(|ms| now - ms >= 1_000)
            .map(|ms| (0, ms))
    })?;
    Some(((rows - base.0).max(0) as f64) / ((now - base.1) as f64 / 1000.0))
}

/// A snapshot as the page and `GET /api/v1/pipelines/{id}` show it.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
#[schemars(rename = "SnapshotProgress")]
pub struct Snapshot {
    #[schemars(with = "SnapshotKind")]
    pub kind: String,
    #[schemars(with = "SnapshotState")]
    pub state: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub tables: Vec<TableProgress>,
    pub tables_done: usize,
    pub tables_total: usize,
    pub rate_rows_per_sec: Option<f64>,
    /// When the snapshot should finish (RFC 3339), from the rows still expected and the rate;
    /// None while a table's expectation is unknown or nothing scans.
    #[schemars(extend("format" = "date-time"))]
    pub eta: Option<String>,
    pub eta_seconds: Option<i64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct TableProgress {
    pub name: String,
    #[schemars(with = "TableScanState")]
    pub state: String,
    pub rows_scanned: i64,
    pub rows_expected: Option<i64>,
    /// Rows expected are the source's statistics, never a count.
    pub rows_expected_is_estimate: bool,
    pub percent: Option<f64>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub rate_rows_per_sec: Option<f64>,
    /// When the table's scan should finish (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub eta: Option<String>,
    /// Debezium's completion status (SUCCEEDED, EMPTY, SQL_EXCEPTION…), once completed.
    pub status: Option<String>,
}

fn thousands(n: i64) -> String {
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn duration_words(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {} s", s / 60, s % 60),
        s => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

impl TableProgress {
    /// "12,345 of ~200,000 rows (est.) · 6 %", as the progress bar's text.
    pub fn label(&self) -> String {
        match (self.rows_expected, self.percent) {
            (Some(e), Some(p)) => format!(
                "{} of ~{} rows (est.) · {:.0} %",
                thousands(self.rows_scanned),
                thousands(e),
                p
            ),
            (Some(e), None) => format!(
                "{} of ~{} rows (est.)",
                thousands(self.rows_scanned),
                thousands(e)
            ),
            _ => format!("{} rows (expected: unknown)", thousands(self.rows_scanned)),
        }
    }
    /// The `<progress>` element's max and value: expected rows (or the rows so far).
    pub fn bar_max(&self) -> i64 {
        match self.rows_expected {
            Some(e) if e > 0 => e.max(self.rows_scanned),
            _ => self.rows_scanned.max(1),
        }
    }
    pub fn bar_value(&self) -> i64 {
        if self.state == DONE {
            self.bar_max()
        } else {
            self.rows_scanned
        }
    }
    /// An unknown expectation leaves the bar indeterminate while it scans.
    pub fn determinate(&self) -> bool {
        self.state == DONE || self.rows_expected.is_some_and(|e| e > 0)
    }
    pub fn rate_text(&self) -> String {
        self.rate_rows_per_sec
            .map(|r| format!("{} rows/s", thousands(r.round() as i64)))
            .unwrap_or_default()
    }
}

impl Snapshot {
    pub fn rate_text(&self) -> String {
        self.rate_rows_per_sec
            .map(|r| format!("{} rows/s", thousands(r.round() as i64)))
            .unwrap_or_else(|| "–".into())
    }
    pub fn eta_text(&self) -> String {
        match (&self.eta, self.eta_seconds) {
            (Some(at), Some(s)) => format!("in about {} ({at})", duration_words(s)),
            _ => "unknown".into(),
        }
    }
}

/// The view of a snapshot, given each table topic's end offset now (summed over partitions;
/// by table name) and the time. Pure.
pub fn view(run: &Run, ends: &HashMap<String, i64>, now: i64) -> Snapshot {
    let mut tables = Vec::new();
    let mut rate_sum: Option<f64> = None;
    let mut remaining: Option<i64> = Some(0);
    for t in &run.tables {
        let rows = live_rows(t, ends.get(&t.name).copied());
        let r = rate(t, rows, now);
        if let Some(r) = r {
            rate_sum = Some(rate_sum.unwrap_or(0.0) + r);
        }
        let percent = match (t.state.as_str(), t.rows_expected) {
            (DONE, _) => Some(100.0),
            (_, Some(e)) if e > 0 => Some(((rows as f64) * 100.0 / e as f64).min(100.0)),
            _ => None,
        };
        if t.state == WAITING || t.state == SCANNING {
            remaining = match (remaining, t.rows_expected) {
                (Some(sum), Some(e)) => Some(sum + (e - rows).max(0)),
                _ => None,
            };
        }
        let eta = match (r, t.rows_expected) {
            (Some(r), Some(e)) if r > 0.0 => {
                Some(at(now + (((e - rows).max(0) as f64 / r) * 1000.0) as i64))
            }
            _ => None,
        };
        tables.push(TableProgress {
            name: t.name.clone(),
            state: t.state.clone(),
            rows_scanned: rows,
            rows_expected: t.rows_expected,
            rows_expected_is_estimate: t.rows_expected.is_some(),
            percent,
            started_at: t.started_at.clone(),
            finished_at: t.finished_at.clone(),
            rate_rows_per_sec: r,
            eta,
            status: t.status.clone(),
        });
    }
    let eta_seconds = match (run.active(), remaining, rate_sum) {
        (true, Some(rows), Some(r)) if r > 0.0 => Some((rows as f64 / r).ceil() as i64),
        _ => None,
    };
    Snapshot {
        kind: run.kind.clone(),
        state: run.state.clone(),
        started_at: run.started_at.clone(),
        finished_at: run.finished_at.clone(),
        tables_done: run.tables.iter().filter(|t| t.state == DONE).count(),
        tables_total: run.tables.len(),
        tables,
        rate_rows_per_sec: rate_sum,
        eta: eta_seconds.map(|s| at(now + s * 1000)),
        eta_seconds,
    }
}

/// The monitor's readings of a scanning table: the two rate samples rotate once the newer is
/// [`RATE_WINDOW_MS`] old, and `moved` keeps when the count last changed. Pure.
pub fn observe_table(t: &mut TableRun, rows: i64, now: i64) {
    match t.sample_ms {
        None => {
            t.sample_rows = Some(rows);
            t.sample_ms = Some(now);
        }
        Some(ms) if now - ms >= RATE_WINDOW_MS => {
            t.prev_rows = t.sample_rows;
            t.prev_ms = t.sample_ms;
            t.sample_rows = Some(rows);
            t.sample_ms = Some(now);
        }
        _ => {}
    }
    if t.moved_rows != Some(rows) || t.moved_ms.is_none() {
        t.moved_rows = Some(rows);
        t.moved_ms = Some(now);
    }
}

/// How long (s) a table has scanned no new row: 0 unless it scans in a running snapshot
/// whose connector is meant to run (a paused pipeline or snapshot is not stalled). Pure.
pub fn stalled_secs(run_state: &str, t: &TableRun, connector_running: bool, now: i64) -> f64 {
    if run_state != "running" || t.state != SCANNING || !connector_running {
        return 0.0;
    }
    t.moved_ms
        .map_or(0.0, |ms| ((now - ms).max(0) as f64) / 1000.0)
}

// --- storage ---

#[derive(sqlx::FromRow)]
struct RunRow {
    id: i64,
    kind: String,
    state: String,
    correlation_id: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    #[sqlx(try_from = "crate::db::Flag")]
    estimated: bool,
}

#[derive(sqlx::FromRow)]
struct TableRow {
    table_name: String,
    position: i64,
    state: String,
    started_at: Option<String>,
    started_ms: Option<i64>,
    baseline: Option<i64>,
    finished_at: Option<String>,
    rows_scanned: Option<i64>,
    rows_expected: Option<i64>,
    status: Option<String>,
    sample_rows: Option<i64>,
    sample_ms: Option<i64>,
    prev_rows: Option<i64>,
    prev_ms: Option<i64>,
    moved_rows: Option<i64>,
    moved_ms: Option<i64>,
}

/// The pipeline's newest snapshots, oldest first.
async fn load_runs(pool: &Pool, pipeline_id: &str, limit: i64) -> sqlx::Result<Vec<Run>> {
    let rows: Vec<RunRow> = db::query_as("SELECT id, kind, state, correlation_id, started_at, finished_at, estimated FROM snapshot_runs WHERE pipeline_id = $1 ORDER BY id DESC LIMIT $2")
        .bind(pipeline_id)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    let mut out = Vec::new();
    for r in rows.into_iter().rev() {
        let tables: Vec<TableRow> = db::query_as("SELECT table_name, position, state, started_at, started_ms, baseline, finished_at, rows_scanned, rows_expected, status, sample_rows, sample_ms, prev_rows, prev_ms, moved_rows, moved_ms FROM snapshot_tables WHERE run_id = $1 ORDER BY position")
            .bind(r.id)
            .fetch_all(pool)
            .await?;
        out.push(Run {
            id: Some(r.id),
            kind: r.kind,
            state: r.state,
            correlation_id: r.correlation_id,
            started_at: r.started_at,
            finished_at: r.finished_at,
            estimated: r.estimated,
            dirty: false,
            tables: tables
                .into_iter()
                .map(|t| TableRun {
                    name: t.table_name,
                    position: t.position,
                    state: t.state,
                    started_at: t.started_at,
                    started_ms: t.started_ms,
                    baseline: t.baseline,
                    finished_at: t.finished_at,
                    rows_scanned: t.rows_scanned,
                    rows_expected: t.rows_expected,
                    status: t.status,
                    sample_rows: t.sample_rows,
                    sample_ms: t.sample_ms,
                    prev_rows: t.prev_rows,
                    prev_ms: t.prev_ms,
                    moved_rows: t.moved_rows,
                    moved_ms: t.moved_ms,
                })
                .collect(),
        });
    }
    Ok(out)
}

/// Writes a snapshot and its tables (all of them: a handful of rows).
async fn save_run(pool: &Pool, pipeline_id: &str, r: &mut Run) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let id = match r.id {
        Some(id) => {
            db::query("UPDATE snapshot_runs SET state = $1, correlation_id = $2, started_at = $3, finished_at = $4, estimated = $5 WHERE id = $6")
                .bind(&r.state)
                .bind(&r.correlation_id)
                .bind(&r.started_at)
                .bind(&r.finished_at)
                .bind(i64::from(r.estimated))
                .bind(id)
                .execute(&mut *tx)
                .await?;
            id
        }
        None => db::query_scalar("INSERT INTO snapshot_runs (pipeline_id, kind, state, correlation_id, started_at, finished_at, estimated, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id")
            .bind(pipeline_id)
            .bind(&r.kind)
            .bind(&r.state)
            .bind(&r.correlation_id)
            .bind(&r.started_at)
            .bind(&r.finished_at)
            .bind(i64::from(r.estimated))
            .bind(crate::time::now())
            .fetch_one(&mut *tx)
            .await?,
    };
    db::query("DELETE FROM snapshot_tables WHERE run_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    for t in &r.tables {
        db::query("INSERT INTO snapshot_tables (run_id, table_name, position, state, started_at, started_ms, baseline, finished_at, rows_scanned, rows_expected, status, sample_rows, sample_ms, prev_rows, prev_ms, moved_rows, moved_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)")
            .bind(id)
            .bind(&t.name)
            .bind(t.position)
            .bind(&t.state)
            .bind(&t.started_at)
            .bind(t.started_ms)
            .bind(t.baseline)
            .bind(&t.finished_at)
            .bind(t.rows_scanned)
            .bind(t.rows_expected)
            .bind(&t.status)
            .bind(t.sample_rows)
            .bind(t.sample_ms)
            .bind(t.prev_rows)
            .bind(t.prev_ms)
            .bind(t.moved_rows)
            .bind(t.moved_ms)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    r.id = Some(id);
    r.dirty = false;
    Ok(())
}

/// A re-snapshot ClueCDC signalled: shown as waiting until Debezium's first notice for it
/// (which carries the same id) arrives. Not recorded for a connector whose config predates
/// notifications (a pipeline created before them, until its config is rendered again): no
/// notice would ever come, and a snapshot waiting for ever would mislead. True when recorded.
pub async fn requested(
    pool: &Pool,
    pipeline_id: &str,
    signal_id: &str,
    tables: &[String],
) -> sqlx::Result<bool> {
    let config: Option<String> = db::query_scalar(
        "SELECT c.config FROM connectors c JOIN pipelines p ON p.connector_id = c.id WHERE p.id = $1",
    )
    .bind(pipeline_id)
    .fetch_optional(pool)
    .await?;
    let channels = config
        .and_then(|c| serde_json::from_str::<serde_json::Value>(&c).ok())
        .and_then(|c| {
            c["notification.enabled.channels"]
                .as_str()
                .map(str::to_string)
        });
    if !channels.is_some_and(|c| c.split(',').any(|c| c.trim() == "sink")) {
        return Ok(false);
    }
    let mut r = Run::new("incremental", "waiting", None, tables);
    r.correlation_id = Some(signal_id.to_string());
    save_run(pool, pipeline_id, &mut r).await?;
    Ok(true)
}

/// What Debezium made of a snapshot signal, from its notices for it (as the monitor folded
/// them into the signal's snapshot).
#[derive(Debug, Clone, PartialEq)]
pub enum Ack {
    /// No notice for the signal yet.
    Pending,
    /// Debezium scans, or has scanned, the tables it was asked for.
    Started,
    /// Debezium read the signal without scanning these tables (each with its status, when it
    /// gave one), or finished without reaching them. A task still running the config from
    /// before the tables were added reports `SQL_EXCEPTION` for them (seen on the stack:
    /// STARTED, TABLE_SCAN_COMPLETED with SQL_EXCEPTION, COMPLETED, no record) and the task
    /// that replaces it never sees that signal; `UNKNOWN_SCHEMA` and `SKIPPED` are the same
    /// miss. Sending it again is the remedy (and for a real SQL error, it fails again).
    Missed(Vec<String>),
    /// Debezium could not scan a table for a reason a new signal does not cure: the table and
    /// Debezium's status for it (`NO_PRIMARY_KEY`), or the snapshot was stopped or aborted.
    Refused(String, String),
}

/// How long a table must have been scanning, with no failure, to count as started.
pub const SCANNING_FOR_MS: i64 = 30_000;

/// [`Ack`] of a signal's snapshot for the tables it asked for, at `now_ms`.
pub fn ack_of(run: &Run, tables: &[String], now_ms: i64) -> Ack {
    let ours = || run.tables.iter().filter(|t| tables.contains(&t.name));
    let mut missed = Vec::new();
    for t in ours().filter(|t| t.state == ABORTED) {
        match t.status.as_deref() {
            Some(status @ ("SQL_EXCEPTION" | "UNKNOWN_SCHEMA" | "SKIPPED")) => {
                missed.push(format!("{} ({status})", t.name));
            }
            // NO_PRIMARY_KEY, or the whole snapshot stopped or aborted.
            other => {
                return Ack::Refused(t.name.clone(), other.unwrap_or(ABORTED).to_string());
            }
        }
    }
    if !missed.is_empty() {
        return Ack::Missed(missed);
    }
    if run.finished_at.is_some() {
        // Finished: a table it scanned to the end, or none of them.
        return if ours().any(|t| t.state == DONE) {
            Ack::Started
        } else {
            Ack::Missed(tables.to_vec())
        };
    }
    // Running: a table scanned to the end, or one scanning for a while. A task that does not
    // know the table fails it in milliseconds (the failure comes with the start, in the same
    // batch of notices), so a scan [`SCANNING_FOR_MS`] old by Debezium's clock is real.
    let scanning = |t: &TableRun| {
        t.state == SCANNING
            && t.started_ms
                .is_some_and(|ms| now_ms - ms >= SCANNING_FOR_MS)
    };
    if ours().any(|t| t.state == DONE || scanning(t)) {
        return Ack::Started;
    }
    Ack::Pending
}

/// [`Ack`] of the snapshot a signal asked for; None when none was recorded for it (a
/// connector without notifications, or one trimmed away since).
pub async fn acknowledgement(
    pool: &Pool,
    pipeline_id: &str,
    signal_id: &str,
    tables: &[String],
    now_ms: i64,
) -> sqlx::Result<Option<Ack>> {
    let runs = load_runs(pool, pipeline_id, KEEP_RUNS).await?;
    Ok(runs
        .iter()
        .find(|r| r.kind == "incremental" && r.correlation_id.as_deref() == Some(signal_id))
        .map(|r| ack_of(r, tables, now_ms)))
}

/// The pipeline's newest snapshot with live figures (None: no snapshot was ever seen), given
/// its topics as just read (end offsets from the broker's watermarks).
pub async fn for_detail(
    pool: &Pool,
    p: &Pipeline,
    topics: &[TopicSize],
) -> sqlx::Result<Option<Snapshot>> {
    let Some(run) = load_runs(pool, &p.id, 1).await?.pop() else {
        return Ok(None);
    };
    Ok(Some(view(
        &run,
        &ends(p, topics),
        crate::reconcile::lease::now_ms(),
    )))
}

fn ends(p: &Pipeline, topics: &[TopicSize]) -> HashMap<String, i64> {
    p.tables
        .iter()
        .filter_map(|t| {
            let name = table_topic(&p.topic_prefix, t);
            topics
                .iter()
                .find(|x| x.name == name)
                .map(|x| (t.clone(), x.end_offset))
        })
        .collect()
}

/// The source's row estimates for these tables, one statement bounded on the server and
/// here: PostgreSQL `pg_class.reltuples` (-1: never vacuumed or analysed, unknown),
/// MySQL/MariaDB `information_schema.tables.table_rows` (NULL unknown; MySQL asked for
/// current statistics rather than its cached ones, `information_schema_stats_expiry = 0`).
pub async fn estimate(
    store: &SecretStore,
    source: &Connection,
    tables: &[String],
) -> Result<HashMap<String, i64>, String> {
    let password = store
        .get(&source.secret_ref, "password")
        .await
        .map_err(|e| e.to_string())?
        .map(|p| p.expose().clone())
        .unwrap_or_default();
    let work = async {
        let mut out = HashMap::new();
        match source.provider {
            Provider::Postgresql => {
                let mut db = crate::connections::postgres::connect(source, &password).await?;
                sqlx::query("SET statement_timeout = '3s'")
                    .execute(&mut db)
                    .await
                    .map_err(|e| e.to_string())?;
                let rows: Vec<(String, f64)> = sqlx::query_as("SELECT n.nspname || '.' || c.relname, c.reltuples::float8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND (n.nspname || '.' || c.relname) = ANY($1)")
                    .bind(tables)
                    .fetch_all(&mut db)
                    .await
                    .map_err(|e| e.to_string())?;
                for (t, n) in rows {
                    if n >= 0.0 {
                        out.insert(t, n.round() as i64);
                    }
                }
            }
            _ => {
                let mut db = crate::connections::mysql::connect(source, &password).await?;
                let bound = if source.provider == Provider::Mysql {
                    "SET SESSION max_execution_time = 3000, SESSION information_schema_stats_expiry = 0"
                } else {
                    "SET SESSION max_statement_time = 3"
                };
                sqlx::query(bound)
                    .execute(&mut db)
                    .await
                    .map_err(|e| e.to_string())?;
                let pairs: Vec<(&str, &str)> =
                    tables.iter().filter_map(|t| t.split_once('.')).collect();
                if pairs.is_empty() {
                    return Ok(out);
                }
                let sql = format!("SELECT CAST(table_schema AS CHAR), CAST(table_name AS CHAR), CAST(table_rows AS SIGNED) FROM information_schema.tables WHERE (table_schema, table_name) IN ({})", vec!["(?, ?)"; pairs.len()].join(", "));
                let mut q = sqlx::query_as::<_, (String, String, Option<i64>)>(&sql);
                for (s, t) in &pairs {
                    q = q.bind(*s).bind(*t);
                }
                for (s, t, n) in q.fetch_all(&mut db).await.map_err(|e| e.to_string())? {
                    if let Some(n) = n.filter(|n| *n >= 0) {
                        out.insert(format!("{s}.{t}"), n);
                    }
                }
            }
        }
        Ok::<_, String>(out)
    };
    tokio::time::timeout(ESTIMATE_TIMEOUT, work)
        .await
        .map_err(|_| format!("the source did not answer within {ESTIMATE_TIMEOUT:?}"))?
}

/// Whether a read that stopped at `from` has seen everything up to `ends` (per partition; a
/// partition never read counts as read only while it is empty).
fn caught_up(from: &HashMap<i32, i64>, ends: &HashMap<i32, i64>) -> bool {
    ends.iter()
        .all(|(p, end)| *end <= 0 || from.get(p).is_some_and(|at| at == end))
}

/// Reads the pipeline's new notifications (from the offsets stored last) and applies them,
/// finds where each newly started scan began in its topic, and takes the source's estimates
/// for a snapshot that just started. The notification topic is created when missing (a
/// pipeline made before ClueCDC enabled notifications gets its topic here).
///
/// `ends`: the topic's end offsets as the cycle's metadata read saw them. When every partition
/// ends where the last read stopped there is nothing new to read, and no consumer is made (a
/// Kafka client per pipeline per cycle was most of what snapshot progress cost a quiet
/// pipeline).
async fn ingest(
    pool: &Pool,
    store: &SecretStore,
    p: &Pipeline,
    access: &crate::kafka::KafkaAccess,
    ends: Option<&HashMap<i32, i64>>,
) -> anyhow::Result<()> {
    let topic = notification_topic(&p.topic_prefix);
    let stored: Option<String> = db::query_scalar(
        "SELECT offsets FROM snapshot_notification_offsets WHERE pipeline_id = $1",
    )
    .bind(&p.id)
    .fetch_optional(pool)
    .await?;
    let from: HashMap<i32, i64> = stored
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    // Nothing new: no read, but the rest (a baseline or estimate still owed) runs as ever.
    let read = if ends.is_some_and(|ends| caught_up(&from, ends)) {
        Some(crate::kafka::NewRecords {
            records: vec![],
            next: from.clone(),
        })
    } else {
        crate::kafka::read_new(access, &topic, &from, READ_MAX, READ_WAIT)
            .await
            .map_err(|e| anyhow::anyhow!(e))?
    };
    let source = crate::connections::load(pool, &p.source_connection_id).await?;
    let Some(read) = read else {
        if let Some(spec) =
            crate::pipelines::topic_specs(&source, &crate::pipelines::TopicSettings::of(p))
                .into_iter()
                .find(|s| s.name == topic)
        {
            if let Err(e) = crate::kafka::create_topic(access, &spec).await {
                if !crate::kafka::already_exists(&e) {
                    anyhow::bail!("cannot create {topic}: {e}");
                }
            }
        }
        return Ok(());
    };
    let mut runs = load_runs(pool, &p.id, 3).await?;
    for rec in &read.records {
        if let Some(n) = rec.value.as_deref().and_then(parse) {
            fold(&mut runs, &n, &p.tables);
        }
    }
    // Where each new scan started in its table's topic: the first offset at or after the
    // notice that said so (ListOffsets by time; both are written by the same worker).
    for r in runs.iter_mut() {
        for t in r.tables.iter_mut() {
            if let (SCANNING, Some(ms), None) = (t.state.as_str(), t.started_ms, t.baseline) {
                match crate::kafka::offset_at_time(
                    access,
                    &table_topic(&p.topic_prefix, &t.name),
                    ms,
                )
                .await
                {
                    Ok(base) => {
                        t.baseline = Some(base);
                        r.dirty = true;
                    }
                    Err(e) => tracing::debug!(table = %t.name, error = %e, "no baseline yet"),
                }
            }
        }
        if !r.estimated && matches!(r.state.as_str(), "running" | "waiting") && !r.tables.is_empty()
        {
            let names: Vec<String> = r.tables.iter().map(|t| t.name.clone()).collect();
            match estimate(store, &source, &names).await {
                Ok(found) => {
                    for t in r.tables.iter_mut() {
                        t.rows_expected = found.get(&t.name).copied();
                    }
                }
                Err(e) => {
                    tracing::info!(pipeline = %p.name, error = %e, "no row estimates for the snapshot")
                }
            }
            r.estimated = true;
            r.dirty = true;
        }
    }
    for r in runs.iter_mut().filter(|r| r.dirty) {
        save_run(pool, &p.id, r).await?;
    }
    if read.next != from {
        db::query("INSERT INTO snapshot_notification_offsets (pipeline_id, offsets, read_at) VALUES ($1, $2, $3) ON CONFLICT (pipeline_id) DO UPDATE SET offsets = excluded.offsets, read_at = excluded.read_at")
            .bind(&p.id)
            .bind(serde_json::to_string(&read.next)?)
            .bind(crate::time::now())
            .execute(pool)
            .await?;
    }
    db::query("DELETE FROM snapshot_runs WHERE pipeline_id = $1 AND id NOT IN (SELECT id FROM snapshot_runs WHERE pipeline_id = $2 ORDER BY id DESC LIMIT $3)")
        .bind(&p.id)
        .bind(&p.id)
        .bind(KEEP_RUNS)
        .execute(pool)
        .await?;
    Ok(())
}

/// The monitor's part, once per pipeline and cycle: new notifications in, then the series of
/// the newest snapshot (rows scanned and expected per table, tables remaining) and
/// `snapshot_stalled` per scanning table. `topics`: the pipeline's topics as the cycle read
/// them. A failed read of the notifications still reports what is stored.
pub(crate) async fn observe(
    pool: &Pool,
    store: &SecretStore,
    p: &Pipeline,
    topics: &[TopicSize],
    cluster_topics: Option<&[crate::kafka::TopicInfo]>,
    connector_running: bool,
    now: i64,
) -> Vec<Observation> {
    // The notification topic's end per partition, as this cycle's one metadata read saw it.
    let topic = notification_topic(&p.topic_prefix);
    let notification_ends: Option<HashMap<i32, i64>> = cluster_topics
        .and_then(|all| all.iter().find(|t| t.name == topic))
        .map(|t| {
            t.partitions
                .iter()
                .map(|q| (q.id, q.high_watermark))
                .collect()
        });
    // No topics read this cycle: the Kafka cluster did not answer the cycle's one metadata
    // read, so reading the notifications would only wait for its timeout once more.
    let cluster = if topics.is_empty() {
        Err(crate::error::Error::Unavailable(
            "the pipeline's topics were not read this cycle".into(),
        ))
    } else {
        crate::clusters::kafka::get(pool, &Principal::cli(), &p.kafka_cluster_id).await
    };
    match cluster {
        Ok(k) => match crate::clusters::kafka::access(store, &k).await {
            Ok(access) => {
                if let Err(e) = ingest(pool, store, p, &access, notification_ends.as_ref()).await {
                    tracing::warn!(pipeline = %p.name, error = format!("{e:#}"), "snapshot notifications not read");
                }
            }
            Err(e) => {
                tracing::warn!(pipeline = %p.name, error = %e, "snapshot notifications not read")
            }
        },
        Err(e) => {
            tracing::debug!(pipeline = %p.name, error = %e, "snapshot notifications not read")
        }
    }
    let mut out = Vec::new();
    let Ok(Some(mut run)) = load_runs(pool, &p.id, 1).await.map(|mut r| r.pop()) else {
        return out;
    };
    let finished_ms = run
        .finished_at
        .as_deref()
        .and_then(crate::time::parse)
        .map(|t| t.timestamp_millis());
    if finished_ms.is_some_and(|f| now - f > SERIES_AFTER_FINISH_MS) {
        return out;
    }
    let ends = ends(p, topics);
    let mut changed = false;
    for t in run.tables.iter_mut().filter(|t| t.state == SCANNING) {
        // A table topic not read this cycle leaves the readings as they were.
        if let Some(end) = ends.get(&t.name) {
            let before = t.clone();
            observe_table(t, live_rows(t, Some(*end)), now);
            changed |= *t != before;
        }
    }
    if changed {
        if let Err(e) = save_run(pool, &p.id, &mut run).await {
            tracing::warn!(pipeline = %p.name, error = %e, "snapshot readings not kept");
        }
    }
    let v = view(&run, &ends, now);
    for (t, stored) in v.tables.iter().zip(&run.tables) {
        let subject = format!("{}/{}", p.name, t.name);
        out.push(Observation {
            kind: "snapshot_table_rows_scanned",
            subject: subject.clone(),
            value: t.rows_scanned as f64,
            message: String::new(),
        });
        if let Some(e) = t.rows_expected {
            out.push(Observation {
                kind: "snapshot_table_rows_expected",
                subject: subject.clone(),
                value: e as f64,
                message: String::new(),
            });
        }
        let secs = stalled_secs(&run.state, stored, connector_running, now);
        out.push(Observation {
            kind: "snapshot_stalled",
            subject,
            value: secs,
            message: format!(
                "the {} snapshot of table {} in pipeline {} has scanned no new row for {secs:.0} s; it stopped at {}: is the connector's task failing or restarting, or is the source slow or locked (a long transaction, a lock on the table)? The connector's page shows its state and trace",
                run.kind, t.name, p.name, t.label()
            ),
        });
    }
    out.push(Observation {
        kind: "snapshot_tables_remaining",
        subject: p.name.clone(),
        value: (v.tables_total - v.tables_done) as f64,
        message: String::new(),
    });
    out
}

/// Which snapshot: the initial one (again after a reset) or an incremental one.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum SnapshotKind {
    Initial,
    Incremental,
}

/// Where a snapshot is.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum SnapshotState {
    Waiting,
    Running,
    Paused,
    Completed,
    Aborted,
}

/// Where one table's scan is.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum TableScanState {
    Waiting,
    Scanning,
    Done,
    Aborted,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(aggregate: &str, kind: &str, id: &str, ts: i64, data: &[(&str, &str)]) -> Notification {
        Notification {
            id: id.into(),
            aggregate_type: aggregate.into(),
            kind: kind.into(),
            additional_data: data
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            timestamp: ts,
        }
    }

    fn tables() -> Vec<String> {
        vec!["s.big".into(), "s.small".into()]
    }

    /// Read off a pipeline's notification topic in the integration run (Debezium 3.5.0.Final,
    /// PostgreSQL, the connector's JsonConverter with schemas).
    const INITIAL_TABLE_SCAN_COMPLETED: &str = r#"{"payload":{"additional_data":{"connector_name":"sp-17124-420440","data_collections":"sp_17124_420440.big,sp_17124_420440.small,sp_17124_420440.cluecdc_signal","scanned_collection":"sp_17124_420440.big","status":"SUCCEEDED","total_rows_scanned":"200000"},"aggregate_type":"Initial Snapshot","id":"38aca090-f8e7-4815-9fc7-83a72ea4a06b","timestamp":1796292731201,"type":"TABLE_SCAN_COMPLETED"},"schema":{"fields":[{"field":"id","optional":false,"type":"string"},{"field":"type","optional":false,"type":"string"},{"field":"aggregate_type","optional":false,"type":"string"},{"field":"additional_data","keys":{"optional":false,"type":"string"},"optional":true,"type":"map","values":{"optional":false,"type":"string"}},{"field":"timestamp","optional":false,"type":"int64"}],"name":"io.debezium.connector.common.Notification","optional":false,"type":"struct","version":1}}"#;
    /// The same run's incremental re-snapshot: the id is the signal's.
    const INCREMENTAL_TABLE_SCAN_COMPLETED: &str = r#"{"payload":{"additional_data":{"connector_name":"sp-17124-420440","data_collections":"sp_17124_420440.big","scanned_collection":"sp_17124_420440.big","status":"SUCCEEDED","total_rows_scanned":"200000"},"aggregate_type":"Incremental Snapshot","id":"00f1d08d411e43fe8958fa10b3963d09","timestamp":1796292771047,"type":"TABLE_SCAN_COMPLETED"},"schema":{"fields":[{"field":"id","optional":false,"type":"string"},{"field":"type","optional":false,"type":"string"},{"field":"aggregate_type","optional":false,"type":"string"},{"field":"additional_data","keys":{"optional":false,"type":"string"},"optional":true,"type":"map","values":{"optional":false,"type":"string"}},{"field":"timestamp","optional":false,"type":"int64"}],"name":"io.debezium.connector.common.Notification","optional":false,"type":"struct","version":1}}"#;

    #[test]
    fn the_notifications_are_read_only_when_the_topic_grew_past_the_last_read() {
        let m = |pairs: &[(i32, i64)]| pairs.iter().copied().collect::<HashMap<i32, i64>>();
        assert!(caught_up(&m(&[(0, 7)]), &m(&[(0, 7)])));
        assert!(!caught_up(&m(&[(0, 7)]), &m(&[(0, 9)])), "new notices");
        assert!(
            caught_up(&m(&[]), &m(&[(0, 0)])),
            "an empty topic has nothing to read"
        );
        assert!(!caught_up(&m(&[]), &m(&[(0, 3)])), "never read");
        assert!(
            !caught_up(&m(&[(0, 12)]), &m(&[(0, 3)])),
            "a recreated topic is read again"
        );
    }

    #[test]
    fn notifications_as_debezium_wrote_them_are_read_and_applied() {
        let got = parse(INITIAL_TABLE_SCAN_COMPLETED.as_bytes()).unwrap();
        assert_eq!(got.aggregate_type, INITIAL_SNAPSHOT);
        assert_eq!(got.kind, "TABLE_SCAN_COMPLETED");
        assert_eq!(got.data("total_rows_scanned"), Some("200000"));
        assert_eq!(got.collections().len(), 3);
        let t: Vec<String> = vec!["sp_17124_420440.big".into(), "sp_17124_420440.small".into()];
        let mut runs = Vec::new();
        fold(&mut runs, &got, &t);
        assert_eq!(runs[0].tables[0].state, DONE);
        assert_eq!(runs[0].tables[0].rows_scanned, Some(200_000));
        assert_eq!(runs[0].tables[0].status.as_deref(), Some("SUCCEEDED"));
        let inc = parse(INCREMENTAL_TABLE_SCAN_COMPLETED.as_bytes()).unwrap();
        assert_eq!(inc.aggregate_type, INCREMENTAL_SNAPSHOT);
        let mut runs = vec![Run::new("incremental", "waiting", None, &t[..1])];
        runs[0].correlation_id = Some("00f1d08d411e43fe8958fa10b3963d09".into());
        fold(&mut runs, &inc, &t);
        assert_eq!(runs.len(), 1, "matched by the signal id");
        assert_eq!(runs[0].tables[0].rows_scanned, Some(200_000));
        // Without the converter's schema, the bare payload reads the same.
        let bare = serde_json::from_str::<serde_json::Value>(INITIAL_TABLE_SCAN_COMPLETED).unwrap()
            ["payload"]
            .to_string();
        assert_eq!(parse(bare.as_bytes()), Some(got));
        assert!(parse(b"not json").is_none());
    }

    /// A signal's snapshot, folded from the notices given, as the confirm step reads it.
    fn ack_after(notices: &[Notification]) -> Ack {
        ack_at(notices, 2)
    }

    fn ack_at(notices: &[Notification], now_ms: i64) -> Ack {
        let t = tables();
        let mut runs = vec![Run::new("incremental", "waiting", None, &t)];
        runs[0].correlation_id = Some("sig".into());
        for n in notices {
            fold(&mut runs, n, &t);
        }
        assert_eq!(runs.len(), 1, "every notice is the signal's");
        ack_of(&runs[0], &t, now_ms)
    }

    #[test]
    fn a_signal_is_confirmed_once_debezium_scans_its_tables_and_missed_when_it_did_not_know_them() {
        let i = INCREMENTAL_SNAPSHOT;
        let both = [("data_collections", "s.big,s.small")];
        let started = n(i, "STARTED", "sig", 1, &both);
        assert_eq!(ack_after(&[]), Ack::Pending, "no notice yet");
        // The start alone is not enough: a task that does not know the table fails it next.
        assert_eq!(ack_after(std::slice::from_ref(&started)), Ack::Pending);
        assert_eq!(
            ack_at(std::slice::from_ref(&started), 1 + SCANNING_FOR_MS),
            Ack::Started,
            "scanning for a while"
        );
        let done = |table: &str, status: &str| {
            n(
                i,
                "TABLE_SCAN_COMPLETED",
                "sig",
                2,
                &[
                    ("data_collections", "s.big,s.small"),
                    ("scanned_collection", table),
                    ("status", status),
                    ("total_rows_scanned", "0"),
                ],
            )
        };
        assert_eq!(
            ack_after(&[started.clone(), done("s.big", "EMPTY")]),
            Ack::Started,
            "an empty table is scanned"
        );
        // A task still running the config from before the tables were added read the signal:
        // the notices it sent on the stack (a signal written 9 ms after the config PUT).
        assert_eq!(
            ack_after(&[
                started.clone(),
                done("s.big", "SQL_EXCEPTION"),
                n(i, "COMPLETED", "sig", 3, &[])
            ]),
            Ack::Missed(vec!["s.big (SQL_EXCEPTION)".into()])
        );
        assert_eq!(
            ack_after(&[
                started.clone(),
                done("s.big", "UNKNOWN_SCHEMA"),
                done("s.small", "SKIPPED")
            ]),
            Ack::Missed(vec![
                "s.big (UNKNOWN_SCHEMA)".into(),
                "s.small (SKIPPED)".into()
            ])
        );
        // Finished without naming them.
        assert_eq!(
            ack_after(&[started.clone(), n(i, "COMPLETED", "sig", 3, &[])]),
            Ack::Missed(tables())
        );
        // Reasons a new signal does not cure.
        assert_eq!(
            ack_after(&[started.clone(), done("s.big", "NO_PRIMARY_KEY")]),
            Ack::Refused("s.big".into(), "NO_PRIMARY_KEY".into())
        );
        assert_eq!(
            ack_after(&[started, n(i, "ABORTED", "sig", 3, &[])]),
            Ack::Refused("s.big".into(), "the snapshot was stopped".into())
        );
    }

    #[test]
    fn an_initial_snapshot_goes_table_by_table_and_keeps_debeziums_final_count() {
        let t = tables();
        let mut runs = Vec::new();
        let i = INITIAL_SNAPSHOT;
        fold(&mut runs, &n(i, "STARTED", "a", 1_000, &[]), &t);
        fold(
            &mut runs,
            &n(
                i,
                "IN_PROGRESS",
                "b",
                2_000,
                &[
                    ("current_collection_in_progress", "s.big"),
                    ("data_collections", "s.big,s.small,s.cluecdc_signal"),
                ],
            ),
            &t,
        );
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].tables[0].state, SCANNING);
        assert_eq!(runs[0].tables[0].started_ms, Some(2_000));
        assert_eq!(runs[0].tables[1].state, WAITING);
        // Live: the topic's end minus where the scan started.
        runs[0].tables[0].baseline = Some(10);
        let ends: HashMap<String, i64> = [("s.big".to_string(), 5_010)].into();
        let v = view(&runs[0], &ends, 4_000);
        assert_eq!(v.tables[0].rows_scanned, 5_000);
        assert_eq!(v.tables_done, 0);
        assert_eq!(v.tables_total, 2);
        fold(
            &mut runs,
            &n(
                i,
                "TABLE_SCAN_COMPLETED",
                "c",
                5_000,
                &[
                    ("scanned_collection", "s.big"),
                    ("total_rows_scanned", "200000"),
                    ("status", "SUCCEEDED"),
                ],
            ),
            &t,
        );
        fold(
            &mut runs,
            &n(
                i,
                "IN_PROGRESS",
                "d",
                5_001,
                &[("current_collection_in_progress", "s.small")],
            ),
            &t,
        );
        fold(
            &mut runs,
            &n(
                i,
                "TABLE_SCAN_COMPLETED",
                "e",
                5_002,
                &[
                    ("scanned_collection", "s.small"),
                    ("total_rows_scanned", "3"),
                    ("status", "SUCCEEDED"),
                ],
            ),
            &t,
        );
        fold(&mut runs, &n(i, "COMPLETED", "f", 5_003, &[]), &t);
        let v = view(&runs[0], &ends, 6_000);
        assert_eq!(v.state, "completed");
        assert_eq!(
            v.tables[0].rows_scanned, 200_000,
            "Debezium's count, not the topic's"
        );
        assert_eq!(v.tables[0].percent, Some(100.0));
        assert_eq!((v.tables_done, v.tables_total), (2, 2));
        assert!(v.finished_at.is_some());
        // A connector restart after the snapshot says SKIPPED: the finished one stays.
        fold(&mut runs, &n(i, "SKIPPED", "g", 9_000, &[]), &t);
        assert_eq!(runs.len(), 1);
    }

    #[test]
    fn a_snapshot_that_starts_again_aborts_the_interrupted_one() {
        let t = tables();
        let mut runs = Vec::new();
        let i = INITIAL_SNAPSHOT;
        fold(&mut runs, &n(i, "STARTED", "a", 1_000, &[]), &t);
        fold(
            &mut runs,
            &n(
                i,
                "IN_PROGRESS",
                "b",
                2_000,
                &[("current_collection_in_progress", "s.big")],
            ),
            &t,
        );
        fold(&mut runs, &n(i, "STARTED", "c", 3_000, &[]), &t);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].state, ABORTED);
        assert_eq!(runs[0].tables[0].state, ABORTED);
        assert_eq!(runs[1].state, "running");
    }

    #[test]
    fn an_incremental_snapshot_is_matched_by_its_signal_id_and_starts_each_table_in_turn() {
        let t = tables();
        let inc = INCREMENTAL_SNAPSHOT;
        let mut runs = vec![Run::new("incremental", "waiting", None, &t)];
        runs[0].correlation_id = Some("sig1".into());
        runs[0].dirty = false;
        fold(
            &mut runs,
            &n(
                inc,
                "STARTED",
                "sig1",
                1_000,
                &[("data_collections", "s.big,s.small")],
            ),
            &t,
        );
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].state, "running");
        assert_eq!(runs[0].tables[0].state, SCANNING);
        assert_eq!(runs[0].tables[0].started_ms, Some(1_000));
        fold(
            &mut runs,
            &n(
                inc,
                "IN_PROGRESS",
                "sig1",
                1_500,
                &[
                    ("data_collections", "s.big,s.small"),
                    ("current_collection_in_progress", "s.big"),
                    ("maximum_key", "200000"),
                    ("last_processed_key", "1024"),
                ],
            ),
            &t,
        );
        assert_eq!(
            runs[0].tables[0].started_ms,
            Some(1_000),
            "the scan began at STARTED"
        );
        fold(
            &mut runs,
            &n(
                inc,
                "TABLE_SCAN_COMPLETED",
                "sig1",
                2_000,
                &[
                    ("data_collections", "s.big,s.small"),
                    ("scanned_collection", "s.big"),
                    ("total_rows_scanned", "200000"),
                    ("status", "SUCCEEDED"),
                ],
            ),
            &t,
        );
        assert_eq!(runs[0].tables[0].state, DONE);
        assert_eq!(runs[0].tables[0].rows_scanned, Some(200_000));
        assert_eq!(runs[0].tables[1].state, SCANNING);
        assert_eq!(runs[0].tables[1].started_ms, Some(2_000));
        fold(
            &mut runs,
            &n(
                inc,
                "TABLE_SCAN_COMPLETED",
                "sig1",
                2_100,
                &[
                    ("data_collections", "s.small"),
                    ("scanned_collection", "s.small"),
                    ("total_rows_scanned", "0"),
                    ("status", "EMPTY"),
                ],
            ),
            &t,
        );
        fold(&mut runs, &n(inc, "COMPLETED", "sig1", 2_200, &[]), &t);
        assert_eq!(runs[0].state, "completed");
        assert_eq!(runs[0].tables[1].state, DONE);
        // Another signal's notices make another snapshot.
        fold(
            &mut runs,
            &n(
                inc,
                "STARTED",
                "sig2",
                3_000,
                &[("data_collections", "s.small")],
            ),
            &t,
        );
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].tables.len(), 1);
    }

    #[test]
    fn collection_ids_name_pipeline_tables_with_or_without_a_catalog() {
        let t = tables();
        assert_eq!(table_of(&t, "s.big"), Some(&t[0]));
        assert_eq!(table_of(&t, "db.s.big"), Some(&t[0]));
        assert_eq!(table_of(&t, "s.cluecdc_signal"), None);
        assert_eq!(table_of(&t, "s.bigger"), None);
    }

    #[test]
    fn rate_and_eta_come_from_the_recent_readings_and_the_estimate() {
        let mut run = Run::new("initial", "running", Some(at(0)), &tables());
        let t = &mut run.tables[0];
        t.state = SCANNING.into();
        t.started_ms = Some(0);
        t.baseline = Some(0);
        t.rows_expected = Some(100_000);
        run.tables[1].rows_expected = Some(0);
        observe_table(&mut run.tables[0], 10_000, 10_000);
        observe_table(&mut run.tables[0], 30_000, 30_000);
        let ends: HashMap<String, i64> = [("s.big".to_string(), 40_000)].into();
        let v = view(&run, &ends, 40_000);
        let table = &v.tables[0];
        assert_eq!(table.rows_scanned, 40_000);
        // From the older reading (10,000 rows at 10 s): 30,000 rows in 30 s.
        assert_eq!(table.rate_rows_per_sec, Some(1_000.0));
        assert_eq!(v.eta_seconds, Some(60));
        assert_eq!(table.percent, Some(40.0));
        assert_eq!(table.label(), "40,000 of ~100,000 rows (est.) · 40 %");
        // Unknown expectation: no ETA, an honest label.
        run.tables[0].rows_expected = None;
        let v = view(&run, &ends, 40_000);
        assert_eq!(v.eta_seconds, None);
        assert_eq!(v.tables[0].label(), "40,000 rows (expected: unknown)");
    }

    #[test]
    fn a_scan_that_stops_moving_is_stalled_until_it_moves_or_finishes() {
        let mut t = TableRun {
            name: "s.big".into(),
            state: SCANNING.into(),
            ..Default::default()
        };
        observe_table(&mut t, 100, 0);
        observe_table(&mut t, 500, 10_000);
        assert_eq!(stalled_secs("running", &t, true, 10_000), 0.0);
        observe_table(&mut t, 500, 400_000);
        observe_table(&mut t, 500, 700_000);
        assert_eq!(
            stalled_secs("running", &t, true, 700_000),
            690.0,
            "stopped at 500 since 10 s"
        );
        assert_eq!(
            stalled_secs("paused", &t, true, 700_000),
            0.0,
            "a paused snapshot is not stalled"
        );
        assert_eq!(
            stalled_secs("running", &t, false, 700_000),
            0.0,
            "nor a paused pipeline"
        );
        observe_table(&mut t, 501, 710_000);
        assert_eq!(stalled_secs("running", &t, true, 720_000), 10.0, "it moved");
        t.state = DONE.into();
        assert_eq!(
            stalled_secs("running", &t, true, 2_000_000),
            0.0,
            "finished"
        );
    }
}
