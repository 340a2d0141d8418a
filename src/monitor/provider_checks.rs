//! Runs the config provider check (`clusters::provider_check`) of every Connect cluster whose
//! stored check is older than `RECHECK_AFTER_SECS`, so that a worker that loses its provider (a
//! new worker without the jar, a rotated token) shows on the cluster's page and stops deploys
//! without anyone looking. Pages and the API run it on demand as well.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Pool;

use crate::auth::Principal;
use crate::clusters::provider_check;

/// How often the due clusters are looked for.
const ROUND: Duration = Duration::from_secs(60);

pub fn spawn(
    pool: Pool,
    state: Arc<crate::app::StateInner>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = round(&pool, &state).await {
                tracing::warn!(error = format!("{e:#}"), "provider check round failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(ROUND) => {}
                _ = shutdown.changed() => break,
            }
        }
        tracing::debug!("provider checks stopped");
    })
}

async fn round(pool: &Pool, state: &crate::app::StateInner) -> crate::error::Result<()> {
    let system = Principal::cli();
    // Every due cluster at once: a slow one delays its own check, not the others'.
    let checks = provider_check::due(pool).await?.into_iter().map(|id| {
        let system = &system;
        async move {
            let c = crate::clusters::get(pool, system, &id).await?;
            let check =
                provider_check::run(pool, &state.ctx.secrets, &c, state.public_url.as_deref())
                    .await?;
            if check.state == provider_check::CheckState::Failing {
                tracing::warn!(
                    cluster = c.name,
                    "config provider check fails: {}",
                    check.refusal(&c.name).unwrap_or_default()
                );
            }
            Ok::<(), crate::error::Error>(())
        }
    });
    for done in futures::future::join_all(checks).await {
        done?;
    }
    Ok(())
}
