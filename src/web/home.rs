//! The overview page and its self-refreshing system status fragment.

use askama::Template;
use poem::web::cookie::CookieJar;
use poem::web::{Data, Html};
use poem::{handler, Request};

use super::pages::Layout;
use super::{paths, render};
use crate::app::AppState;
use crate::auth::Principal;

#[derive(Template)]
#[template(path = "home/index.html")]
struct HomePage<'a> {
    layout: Layout,
    status: SystemStatus,
    o: &'a Overview,
    /// No delivery runs yet: the first-hour checklist is shown (`getting_started`).
    getting_started: bool,
}

/// Rows of each kind the overview shows: those that most need a person (failed and drifted
/// first, then by name), so the page stays one screen and one cost at thousands of pipelines;
/// the lists have the rest.
pub const OVERVIEW_ROWS: u32 = 25;

pub struct Overview {
    pub rows: Vec<OverviewRow>,
    pub alerts: Vec<crate::monitor::alerts::Alert>,
    /// (shown, total) pipelines and deliveries.
    pub pipelines: (usize, u64),
    pub deliveries: (usize, u64),
}

impl Overview {
    /// Some pipelines or deliveries are not on the page.
    pub fn more(&self) -> bool {
        (self.pipelines.0 as u64) < self.pipelines.1
            || (self.deliveries.0 as u64) < self.deliveries.1
    }
}

/// One line of the overview: a pipeline or a delivery, its state and its main number.
pub struct OverviewRow {
    pub kind: &'static str,
    pub name: String,
    pub href: String,
    pub phase: String,
    pub figure: String,
    pub chart: String,
    pub alerts: usize,
}

async fn overview(state: &AppState, who: &Principal) -> crate::error::Result<Overview> {
    let alerts = crate::monitor::alerts::list(&state.pool, who, true).await?;
    let open = |subject: &str| alerts.iter().filter(|a| a.subject == subject).count();
    let first = crate::listing::Window {
        by_state: true,
        limit: OVERVIEW_ROWS,
        ..Default::default()
    };
    let pipelines = crate::pipelines::page(state.ctx(), who, &first).await?;
    let deliveries = crate::deliveries::page(state.ctx(), who, &first).await?;
    let connector_ids: Vec<String> = (pipelines.items.iter().map(|p| p.connector_id.clone()))
        .chain(deliveries.items.iter().map(|d| d.connector_id.clone()))
        .collect();
    let connectors = crate::connectors::views(&state.pool, &connector_ids).await?;
    let phase_of = |id: &str| {
        connectors
            .get(id)
            .map_or_else(|| "UNKNOWN".to_string(), |c| c.phase.clone())
    };
    let shown = (pipelines.items.len(), deliveries.items.len());
    let totals = (pipelines.total, deliveries.total);
    let mut rows = Vec::new();
    for p in pipelines.items {
        let phase = phase_of(&p.connector_id);
        // PostgreSQL pipelines chart the WAL their slot retains; MySQL/MariaDB ones the binlog
        // they have not read yet. Both are "how much the source keeps for us".
        let mut kept = crate::monitor::signals::history(
            &state.pool,
            who,
            "slot_retained_wal_bytes",
            &p.name,
            120,
        )
        .await?;
        let mut what = "retained WAL";
        if kept.is_empty() {
            kept = crate::monitor::signals::history(
                &state.pool,
                who,
                "binlog_behind_bytes",
                &p.name,
                120,
            )
            .await?;
            what = "binlog behind";
        }
        let values: Vec<f64> = kept.iter().map(|s| s.value).collect();
        let mut figure = values
            .last()
            .map(|v| format!("{} {what}", bytes(*v)))
            .unwrap_or_else(|| "no source data yet".into());
        if let Some(age) = crate::monitor::signals::history(
            &state.pool,
            who,
            "pipeline_no_new_data_seconds",
            &p.name,
            1,
        )
        .await?
        .last()
        {
            figure.push_str(&format!(" · newest record {:.0} s ago", age.value));
        }
        rows.push(OverviewRow {
            kind: "pipeline",
            figure,
            chart: super::charts::sparkline(&values, &format!("{what} of {}", p.name)),
            href: format!("/pipelines/{}", p.id),
            alerts: open(&p.name),
            name: p.name,
            phase,
        });
    }
    for d in deliveries.items {
        let phase = phase_of(&d.connector_id);
        let lag = crate::monitor::signals::history(
            &state.pool,
            who,
            "delivery_lag_records",
            &d.name,
            120,
        )
        .await?;
        let values: Vec<f64> = lag.iter().map(|s| s.value).collect();
        let fresh = crate::monitor::signals::history(
            &state.pool,
            who,
            "delivery_freshness_seconds",
            &d.name,
            1,
        )
        .await?;
        let mut figure = values
            .last()
            .map(|v| format!("{v} records behind"))
            .unwrap_or_else(|| "no lag data yet".into());
        if let Some(secs) =
            crate::monitor::signals::history(&state.pool, who, "delivery_lag_seconds", &d.name, 1)
                .await?
                .last()
                .filter(|s| s.value > 0.0)
        {
            figure.push_str(&format!(" (oldest {:.0} s)", secs.value));
        }
        if let Some(f) = fresh.last() {
            figure.push_str(&format!(" · current as of {:.0} s ago", f.value));
        }
        rows.push(OverviewRow {
            kind: "delivery",
            figure,
            chart: super::charts::sparkline(&values, &format!("lag of {}", d.name)),
            href: format!("/deliveries/{}", d.id),
            alerts: open(&d.name),
            name: d.name,
            phase,
        });
    }
    // Replications: the source connector's state and how far behind the target is.
    for r in crate::replications::list(state.ctx(), who)
        .await?
        .into_iter()
        .take(OVERVIEW_ROWS as usize)
    {
        let views = crate::connectors::views(&state.pool, &r.connector_ids).await?;
        let phase = r
            .connector_ids
            .first()
            .and_then(|id| views.get(id))
            .map_or_else(|| "UNKNOWN".to_string(), |c| c.phase.clone());
        let lag = crate::monitor::signals::history(
            &state.pool,
            who,
            "replication_lag_records",
            &r.name,
            120,
        )
        .await?;
        let values: Vec<f64> = lag.iter().map(|s| s.value).collect();
        let mut figure = values
            .last()
            .map(|v| format!("{v} records not copied"))
            .unwrap_or_else(|| "no lag data yet".into());
        if let Some(secs) = crate::monitor::signals::history(
            &state.pool,
            who,
            "replication_lag_seconds",
            &r.name,
            1,
        )
        .await?
        .last()
        .filter(|s| s.value > 0.0)
        {
            figure.push_str(&format!(" (oldest {:.0} s)", secs.value));
        }
        rows.push(OverviewRow {
            kind: "replication",
            figure,
            chart: super::charts::sparkline(&values, &format!("replication lag of {}", r.name)),
            href: format!("/replications/{}", r.id),
            alerts: open(&r.name),
            name: r.name,
            phase,
        });
    }
    Ok(Overview {
        rows,
        alerts,
        pipelines: (shown.0, totals.0),
        deliveries: (shown.1, totals.1),
    })
}

fn bytes(v: f64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = v;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", units[i])
    } else {
        format!("{v:.1} {}", units[i])
    }
}

#[derive(Template)]
#[template(path = "home/system_status_partial.html")]
struct SystemStatus {
    database_ok: bool,
    uptime: String,
    observed_at: String,
    refresh_path: &'static str,
}

#[handler]
pub async fn page(
    state: Data<&AppState>,
    who: Data<&Principal>,
    jar: &CookieJar,
    req: &Request,
) -> poem::Result<Html<String>> {
    let status = system_status_of(&state).await;
    if is_htmx(req) {
        return render(&status);
    }
    // Every signed-in user sees the same overview (see `Snapshots::recent`).
    let o = state
        .inner
        .snapshots
        .recent("overview", || overview(&state, &who))
        .await
        .map_err(|e| poem::Error::from(super::error::PageError(e)))?;
    // Cached like the overview: a page view must not list every delivery.
    let getting_started = *state
        .inner
        .snapshots
        .recent("getting-started", || {
            super::getting_started::needed(&state, &who)
        })
        .await
        .map_err(|e| poem::Error::from(super::error::PageError(e)))?;
    render(&HomePage {
        layout: Layout::new("Overview", paths::HOME, &who, jar),
        status,
        o: &o,
        getting_started,
    })
}

#[handler]
pub async fn system_status(state: Data<&AppState>) -> poem::Result<Html<String>> {
    render(&system_status_of(&state).await)
}

async fn system_status_of(state: &AppState) -> SystemStatus {
    // At most one round trip a second however many views: at 64 clients, a `SELECT 1` per
    // view queued for the pool's connections and was the overview's slowest part. A failed
    // check is not kept: the next view checks again, and an "ok" is a second or two old at most.
    let database_ok = state
        .inner
        .snapshots
        .recent("database-ok", || async {
            Ok(crate::db::query_scalar::<i64>("SELECT 1")
                .fetch_one(&state.pool)
                .await?)
        })
        .await
        .is_ok();
    SystemStatus {
        database_ok,
        uptime: human_duration(state.started_at.elapsed().as_secs()),
        observed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        refresh_path: paths::SYSTEM_STATUS,
    }
}

/// htmx marks its requests; they get the fragment instead of the whole page.
pub(crate) fn is_htmx(req: &Request) -> bool {
    req.headers().contains_key("hx-request")
}

/// "3 d 4 h", "5 min 2 s": the two largest units are enough for a person.
pub(crate) fn human_duration(secs: u64) -> String {
    let units = [(86_400, "d"), (3_600, "h"), (60, "min"), (1, "s")];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (size, name) in units {
        if rest >= size || (parts.is_empty() && size == 1) {
            parts.push(format!("{} {name}", rest / size));
            rest %= size;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn durations_read_as_the_two_largest_units() {
        assert_eq!(human_duration(0), "0 s");
        assert_eq!(human_duration(59), "59 s");
        assert_eq!(human_duration(61), "1 min 1 s");
        assert_eq!(human_duration(3_600), "1 h");
        assert_eq!(human_duration(90_061), "1 d 1 h");
    }
}
