//! `GET /metrics` in the Prometheus text format: HTTP traffic, reconciler work, connector
//! states, delivery and replication lag, retained WAL, freshness and alerts. Names follow Prometheus
//! conventions: a `cluecdc_` prefix, units in the name, `_total` for counters.

use crate::db;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::db::Pool;

const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default)]
struct Series {
    count: u64,
    sum: f64,
    buckets: [u64; 11],
}

/// HTTP request counts and latencies by method and status code.
#[derive(Default)]
pub struct HttpMetrics {
    series: Mutex<BTreeMap<(String, u16), Series>>,
}

impl HttpMetrics {
    pub fn observe(&self, method: &str, status: u16, seconds: f64) {
        let mut m = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let s = m.entry((method.to_string(), status)).or_default();
        s.count += 1;
        s.sum += seconds;
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                s.buckets[i] += 1;
            }
        }
    }
}

/// The label naming a sampled series' subject: the delivery or replication it measures, or
/// the pipeline (slots, binlog and topic signals are a pipeline's).
fn subject_label(kind: &str) -> &'static str {
    match kind.split('_').next() {
        Some("delivery") => "delivery",
        Some("replication") => "replication",
        _ => "pipeline",
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub async fn render(
    pool: &Pool,
    http: &HttpMetrics,
    reconciler: &crate::reconcile::Handle,
) -> anyhow::Result<String> {
    let mut out = String::new();
    let o = &mut out;
    writeln!(o, "# HELP cluecdc_build_info ClueCDC version.\n# TYPE cluecdc_build_info gauge\ncluecdc_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"))?;

    writeln!(o, "# HELP cluecdc_http_requests_total HTTP requests answered.\n# TYPE cluecdc_http_requests_total counter")?;
    {
        let m = http.series.lock().unwrap_or_else(|e| e.into_inner());
        for ((method, status), s) in m.iter() {
            writeln!(
                o,
                "cluecdc_http_requests_total{{method=\"{method}\",status=\"{status}\"}} {}",
                s.count
            )?;
        }
        writeln!(o, "# HELP cluecdc_http_request_duration_seconds Time to answer HTTP requests.\n# TYPE cluecdc_http_request_duration_seconds histogram")?;
        for ((method, status), s) in m.iter() {
            for (i, le) in BUCKETS.iter().enumerate() {
                writeln!(o, "cluecdc_http_request_duration_seconds_bucket{{method=\"{method}\",status=\"{status}\",le=\"{le}\"}} {}", s.buckets[i])?;
            }
            writeln!(o, "cluecdc_http_request_duration_seconds_bucket{{method=\"{method}\",status=\"{status}\",le=\"+Inf\"}} {}", s.count)?;
            writeln!(o, "cluecdc_http_request_duration_seconds_sum{{method=\"{method}\",status=\"{status}\"}} {}", s.sum)?;
            writeln!(o, "cluecdc_http_request_duration_seconds_count{{method=\"{method}\",status=\"{status}\"}} {}", s.count)?;
        }
    }

    // Kept in SQLite so that they only grow, whichever process ran the passes; this process's
    // unchanged passes not recorded yet are added.
    let unrecorded = reconciler.unrecorded();
    for (name, metric, help) in [
        (
            "reconcile_passes",
            "cluecdc_reconcile_passes_total",
            "Reconcile passes run.",
        ),
        (
            "reconcile_actions",
            "cluecdc_reconcile_actions_total",
            "Changes the reconciler made in Connect.",
        ),
        (
            "reconcile_errors",
            "cluecdc_reconcile_errors_total",
            "Connect clusters a reconcile pass could not reach.",
        ),
        (
            "monitor_cycles",
            "cluecdc_monitor_cycles_total",
            "Monitoring cycles run (lag, slots, freshness, failures, alert rules).",
        ),
        (
            "monitor_cycle_ms",
            "cluecdc_monitor_cycle_milliseconds_total",
            "Wall time spent in monitoring cycles.",
        ),
    ] {
        let value: i64 =
            db::query_scalar("SELECT COALESCE((SELECT value FROM counters WHERE name = $1), 0)")
                .bind(name)
                .fetch_one(pool)
                .await?;
        let unrecorded = unrecorded
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v);
        let value = value + unrecorded;
        writeln!(
            o,
            "# HELP {metric} {help}\n# TYPE {metric} counter\n{metric} {value}"
        )?;
    }

    writeln!(o, "# HELP cluecdc_connector_state Connectors by ClueCDC phase (1 for the current one).\n# TYPE cluecdc_connector_state gauge")?;
    let states: Vec<(String, Option<String>)> = db::query_as("SELECT c.name, s.phase FROM connectors c LEFT JOIN connector_status s ON s.connector_id = c.id ORDER BY c.name").fetch_all(pool).await?;
    for (name, phase) in &states {
        writeln!(
            o,
            "cluecdc_connector_state{{connector=\"{}\",state=\"{}\"}} 1",
            escape(name),
            phase.as_deref().unwrap_or("PENDING")
        )?;
    }
    let tasks: Vec<String> =
        db::query_scalar("SELECT tasks FROM connector_status WHERE tasks LIKE '%FAILED%'")
            .fetch_all(pool)
            .await?;
    let failed_tasks = tasks
        .iter()
        .filter_map(|t| serde_json::from_str::<Vec<serde_json::Value>>(t).ok())
        .flatten()
        .filter(|t| t["state"] == "FAILED")
        .count();
    writeln!(o, "# HELP cluecdc_failed_tasks Connector tasks FAILED at the last observation.\n# TYPE cluecdc_failed_tasks gauge\ncluecdc_failed_tasks {failed_tasks}")?;

    // Each signal as the latest monitor cycle measured it. A series that cycle did not measure
    // (its subject deleted, or the measurement failed) is left out rather than repeated.
    for (kind, help) in crate::monitor::signals::SAMPLED {
        let metric = format!("cluecdc_{kind}");
        writeln!(o, "# HELP {metric} {help}\n# TYPE {metric} gauge")?;
        let latest: Vec<(String, f64)> = db::query_as(
            "SELECT subject, latest FROM series WHERE kind = $1 AND latest_at = (SELECT MAX(latest_at) FROM series) ORDER BY subject",
        )
        .bind(kind)
        .fetch_all(pool)
        .await?;
        let label = subject_label(kind);
        for (subject, value) in latest {
            match subject.rsplit_once('/') {
                // Per-table series (tables::freshness, tables::progress): subjects
                // `<pipeline>/<table>` and `<delivery>/<table>`.
                Some((owner, table))
                    if ["table_", "delivery_table_", "snapshot_table_"]
                        .iter()
                        .any(|p| kind.starts_with(p)) =>
                {
                    writeln!(
                        o,
                        "{metric}{{{label}=\"{}\",table=\"{}\"}} {value}",
                        escape(owner),
                        escape(table)
                    )?
                }
                _ => writeln!(o, "{metric}{{{label}=\"{}\"}} {value}", escape(&subject))?,
            }
        }
    }

    writeln!(o, "# HELP cluecdc_alerts_firing Alerts firing now, by kind.\n# TYPE cluecdc_alerts_firing gauge")?;
    let firing: Vec<(String, i64)> = db::query_as(
        "SELECT kind, COUNT(*) FROM alerts WHERE state = 'firing' GROUP BY kind ORDER BY kind",
    )
    .fetch_all(pool)
    .await?;
    for (kind, n) in firing {
        writeln!(o, "cluecdc_alerts_firing{{kind=\"{kind}\"}} {n}")?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sampled_series_is_labelled_by_what_it_measures() {
        for (kind, label) in [
            ("delivery_lag_records", "delivery"),
            ("slot_retained_wal_bytes", "pipeline"),
            ("pipeline_no_new_data_seconds", "pipeline"),
            ("replication_lag_records", "replication"),
            ("replication_lag_seconds", "replication"),
            ("replication_checkpoint_age_seconds", "replication"),
        ] {
            assert!(
                crate::monitor::signals::SAMPLED
                    .iter()
                    .any(|(k, _)| *k == kind),
                "{kind} is sampled"
            );
            assert_eq!(subject_label(kind), label, "{kind}");
        }
    }
}
