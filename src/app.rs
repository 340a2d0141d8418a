//! Composition root: settings → database → HTTP listener; `run` takes a shutdown future.
//!
//! The binary and the integration tests both go through `Application::build`, so what the
//! tests start is what users run.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};
use poem::Server;
use sqlx::SqlitePool;

use crate::auth::ratelimit::{Limits, LoginLimiter};
use crate::auth::sessions::Lifetimes;
use crate::config::ServeSettings;
use crate::secrets::store::SecretStore;
use crate::secrets::Keyring;
use crate::{db, web};

/// How long in-flight requests get to finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// What every request handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub pool: SqlitePool,
    pub started_at: Instant,
    pub inner: Arc<StateInner>,
}

pub struct StateInner {
    pub version: &'static str,
    pub secrets: SecretStore,
    pub sessions: Lifetimes,
    pub secure_cookies: bool,
    pub login_limiter: LoginLimiter,
}

pub struct Application {
    acceptor: TcpAcceptor,
    local_addr: SocketAddr,
    state: AppState,
    leak_scan_interval: Duration,
}

impl Application {
    /// Opens and migrates the database, then binds the listener (port 0 picks a free port).
    pub async fn build(settings: &ServeSettings) -> anyhow::Result<Self> {
        let pool = open_database(&settings.data).await?;
        let keyring = Keyring::load(&settings.data)?;
        tracing::info!(active_key = keyring.active().fingerprint(), "secret store ready");
        let secrets = SecretStore::new(pool.clone(), keyring);
        let acceptor = TcpListener::bind(settings.listen.to_string())
            .into_acceptor()
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let local_addr = acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().copied())
            .context("listener has no socket address")?;
        let state = AppState {
            pool,
            started_at: Instant::now(),
            inner: Arc::new(StateInner {
                version: env!("CARGO_PKG_VERSION"),
                secrets,
                sessions: Lifetimes { idle_secs: settings.session_idle, absolute_secs: settings.session_max },
                secure_cookies: settings.secure_cookies(),
                login_limiter: LoginLimiter::new(Limits::default()),
            }),
        };
        let base = settings.public_url.clone().unwrap_or_else(|| format!("http://{local_addr}"));
        if let Some(token) = crate::auth::setup::issue_if_needed(&state.pool).await? {
            // The one place a secret is logged on purpose: it is single-use, dies with the
            // first user, and whoever reads this log already controls the server.
            tracing::warn!(
                setup_url = %format!("{}/setup?token={token}", base.trim_end_matches('/')),
                "no user exists yet: open the setup URL to create the first admin, or run `cluecdc user create --name NAME --role admin`"
            );
        }
        Ok(Self { acceptor, local_addr, state, leak_scan_interval: Duration::from_secs(settings.leak_scan_interval.max(1) as u64) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish within a deadline.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        // One shutdown signal: the HTTP server and every background task follow it.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let leak_scan = crate::monitor::leaks::spawn(self.state.pool.clone(), self.state.inner.clone(), self.leak_scan_interval, stop_rx);
        let routes = web::routes(self.state.clone());
        let signal = async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        };
        Server::new_with_acceptor(self.acceptor)
            .run_with_graceful_shutdown(routes, signal, Some(SHUTDOWN_GRACE))
            .await
            .context("HTTP server failed")?;
        if tokio::time::timeout(SHUTDOWN_GRACE, leak_scan).await.is_err() {
            tracing::warn!(task = "leak scan", "background task did not stop in time");
        }
        self.state.pool.close().await;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}

/// Opens the database in the data directory and applies migrations.
pub async fn open_database(data: &crate::config::DataSettings) -> anyhow::Result<SqlitePool> {
    let pool = db::open(&data.database_path()).await?;
    db::migrate(&pool).await?;
    Ok(pool)
}

/// Resolves on SIGINT or SIGTERM: the one shutdown signal every task listens to.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!(signal = "SIGINT", "shutdown requested"),
        _ = terminate => tracing::info!(signal = "SIGTERM", "shutdown requested"),
    }
}
