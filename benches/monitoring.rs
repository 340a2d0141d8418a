//! Benchmark: the monitor's history in SQLite as it grows. `cargo bench --bench monitoring`.
//!
//! One monitor cycle writes a sample per series and trims what is older than the retention;
//! `/metrics` reads the newest sample of every series; the overview reads the last 120 samples
//! of two series per pipeline or delivery. These must cost about the same whether the table
//! holds a day or a week of history, so the benchmark fills the table at two sizes, ten times
//! apart, and prints each operation's time at both and their ratio (within one run, so the
//! machine's noise cancels). Under `cargo test` it runs once at a small size as a smoke test.

use std::time::{Duration, Instant};

use cluecdc::monitor::{metrics, signals};

const SUBJECTS: usize = 40; // 20 pipelines and 20 deliveries
const KINDS: [&str; 4] = [
    "delivery_lag_records",
    "delivery_lag_seconds",
    "slot_retained_wal_bytes",
    "pipeline_no_new_data_seconds",
];
const INTERVAL_MS: i64 = 15_000; // the default monitor interval

struct Timings {
    rows: i64,
    cycle: Duration,
    metrics: Duration,
    overview: Duration,
    db_bytes: u64,
}

async fn measure(dir: &std::path::Path, series_len: i64, repeats: u32) -> anyhow::Result<Timings> {
    let path = dir.join(format!("bench-{series_len}.sqlite"));
    let pool = cluecdc::db::open(&path).await?;
    cluecdc::db::migrate(&pool).await?;
    let subjects: Vec<String> = (0..SUBJECTS).map(|i| format!("subject-{i:02}")).collect();
    // History: `series_len` samples per series, one interval apart, ending now.
    let start = 1_800_000_000_000 - series_len * INTERVAL_MS;
    for step in 0..series_len {
        let batch: Vec<(&str, &str, f64)> = KINDS
            .iter()
            .flat_map(|k| subjects.iter().map(move |s| (*k, s.as_str(), step as f64)))
            .collect();
        signals::record_samples(&pool, &batch, start + step * INTERVAL_MS).await?;
    }
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM points")
        .fetch_one(&pool)
        .await?;
    let http = metrics::HttpMetrics::default();
    let who = cluecdc::auth::Principal::cli();
    let (mut cycle, mut render, mut overview) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for r in 0..repeats as i64 {
        let now = start + (series_len + r) * INTERVAL_MS;
        let batch: Vec<(&str, &str, f64)> = KINDS
            .iter()
            .flat_map(|k| subjects.iter().map(move |s| (*k, s.as_str(), 1.0)))
            .collect();
        let t = Instant::now();
        signals::record_samples(&pool, &batch, now).await?;
        signals::trim_samples(&pool, now - series_len * INTERVAL_MS).await?;
        cycle += t.elapsed();
        let t = Instant::now();
        let text = metrics::render(&pool, &http, &Default::default()).await?;
        render += t.elapsed();
        assert!(text.contains("cluecdc_delivery_lag_records{delivery=\"subject-39\"}"));
        let t = Instant::now();
        for s in &subjects {
            for kind in &KINDS[..2] {
                let h = signals::history(&pool, &who, kind, s, 120).await?;
                assert_eq!(h.len(), 120);
            }
        }
        overview += t.elapsed();
    }
    // Pages in use: free pages the trim leaves are reused, not returned to the file system.
    let pages: i64 = sqlx::query_scalar("SELECT (SELECT page_count FROM pragma_page_count()) - (SELECT freelist_count FROM pragma_freelist_count())").fetch_one(&pool).await?;
    let page_size: i64 = sqlx::query_scalar("SELECT page_size FROM pragma_page_size()")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    let db_bytes = (pages * page_size) as u64;
    Ok(Timings {
        rows,
        cycle: cycle / repeats,
        metrics: render / repeats,
        overview: overview / repeats,
        db_bytes,
    })
}

/// Process CPU time (user + system; every thread, the SQLite workers too), from
/// `/proc/self/stat` in USER_HZ ticks (100 a second on Linux).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let ticks: u64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// One monitor cycle's samples at scale (issue 34): `pipelines` pipelines of 8 signals and
/// `deliveries` deliveries of 5, each with one captured table's series (the shape of
/// bench/week.py), each with `history` points already. The first cycle creates the series; the
/// later ones are timed: wall time, process CPU and bytes written a cycle.
async fn cycle_at_scale(
    dir: &std::path::Path,
    pipelines: usize,
    deliveries: usize,
    cycles: u32,
    history: i64,
) -> anyhow::Result<(usize, Duration, Cycle)> {
    let pool = cluecdc::db::open(&dir.join(format!("scale-{history}.sqlite"))).await?;
    cluecdc::db::migrate(&pool).await?;
    let mut series: Vec<(String, String)> = Vec::new();
    for p in 0..pipelines {
        for k in 0..8 {
            series.push((format!("pipeline_signal_{k}"), format!("pipeline-{p:05}")));
        }
        series.push(("table_lag".into(), format!("pipeline-{p:05}/public.t")));
    }
    for d in 0..deliveries {
        for k in 0..5 {
            series.push((format!("delivery_signal_{k}"), format!("delivery-{d:05}")));
        }
        series.push(("table_lag".into(), format!("delivery-{d:05}/public.t")));
    }
    let batch = |v: f64| -> Vec<(&str, &str, f64)> {
        series
            .iter()
            .map(|(k, s)| (k.as_str(), s.as_str(), v))
            .collect()
    };
    let start = 1_800_000_000_000;
    let t = Instant::now();
    signals::record_samples(&pool, &batch(0.0), start).await?;
    let first = t.elapsed();
    // The raw window's history before `start` (one point per interval), written in one
    // statement: in steady state each series' points fill pages of their own.
    sqlx::query(
        "INSERT INTO points (series_id, at, value)
         WITH RECURSIVE n(x) AS (SELECT 1 WHERE $1 > 0 UNION ALL SELECT x + 1 FROM n WHERE x < $1)
         SELECT s.id, $2 - n.x * $3, 0 FROM series s, n ORDER BY s.id, n.x DESC",
    )
    .bind(history)
    .bind(start)
    .bind(INTERVAL_MS)
    .execute(&pool)
    .await?;
    let (t, cpu, written) = (Instant::now(), cpu_time(), bytes_written());
    for c in 1..=cycles as i64 {
        signals::record_samples(&pool, &batch(c as f64), start + c * INTERVAL_MS).await?;
    }
    let cycle = Cycle {
        wall: t.elapsed() / cycles,
        cpu: (cpu_time() - cpu) / cycles,
        written: (bytes_written() - written) / u64::from(cycles),
    };
    let points: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM points")
        .fetch_one(&pool)
        .await?;
    assert_eq!(
        points as usize,
        series.len() * (cycles as usize + 1 + history as usize)
    );
    pool.close().await;
    Ok((series.len(), first, cycle))
}

/// One timed monitor cycle's samples, averaged.
struct Cycle {
    wall: Duration,
    /// Process CPU (every thread).
    cpu: Duration,
    /// Bytes the process wrote to files (SQLite's WAL and database), from `/proc/self/io`.
    written: u64,
}

/// Bytes this process has written with write calls so far (`wchar` of `/proc/self/io`).
fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    // About 3.4 hours and a day of history at the default interval (7× apart; a smoke size
    // under `cargo test`).
    let (small, large, repeats) = if full {
        (5_760 / 7, 5_760, 20)
    } else {
        (130, 260, 2)
    };
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let a = rt.block_on(measure(dir.path(), small, repeats))?;
    let b = rt.block_on(measure(dir.path(), large, repeats))?;
    println!(
        "monitor history: {SUBJECTS} subjects × {} kinds, one sample per {} s",
        KINDS.len(),
        INTERVAL_MS / 1000
    );
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "",
        format!("{} rows", a.rows),
        format!("{} rows", b.rows),
        "ratio"
    );
    for (name, x, y) in [
        ("cycle write + retention trim", a.cycle, b.cycle),
        ("/metrics render", a.metrics, b.metrics),
        ("overview history (80 series)", a.overview, b.overview),
    ] {
        println!(
            "{name:<34} {:>11.2} ms {:>11.2} ms {:>7.2}×",
            x.as_secs_f64() * 1e3,
            y.as_secs_f64() * 1e3,
            y.as_secs_f64() / x.as_secs_f64()
        );
    }
    println!(
        "{:<34} {:>11.1} MB {:>11.1} MB {:>7.2}×",
        "database pages in use",
        a.db_bytes as f64 / 1e6,
        b.db_bytes as f64 / 1e6,
        b.db_bytes as f64 / a.db_bytes as f64
    );
    let (pipelines, deliveries, cycles) = if full { (5_000, 5_000, 3) } else { (20, 20, 2) };
    // Fresh series, then series holding the raw window's hour of points each (the steady state).
    for history in [0, 3_600_000 / INTERVAL_MS] {
        let (n, first, c) = rt.block_on(cycle_at_scale(
            dir.path(),
            pipelines,
            deliveries,
            cycles,
            history,
        ))?;
        println!(
            "one cycle's samples at {} connectors ({n} series, {history} points of history each): first (creates them) {:.0} ms, then {:.0} ms a cycle, {:.0} ms of process CPU ({:.1} µs a series), {:.1} MB written",
            pipelines + deliveries,
            first.as_secs_f64() * 1e3,
            c.wall.as_secs_f64() * 1e3,
            c.cpu.as_secs_f64() * 1e3,
            c.cpu.as_secs_f64() * 1e6 / n as f64,
            c.written as f64 / 1e6
        );
    }
    Ok(())
}
