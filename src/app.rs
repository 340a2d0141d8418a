//! Composition root: settings → database → HTTP listener; `run` takes a shutdown future.
//!
//! The binary and the integration tests both go through `Application::build`, so what the
//! tests start is what users run.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::Pool;
use anyhow::Context;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};
use poem::Server;

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
    pub pool: Pool,
    pub started_at: Instant,
    pub inner: Arc<StateInner>,
}

impl AppState {
    /// What the service functions take: `pipelines::detail(s.ctx(), who, id)`.
    pub fn ctx(&self) -> &crate::ctx::Ctx {
        &self.inner.ctx
    }
}

pub struct StateInner {
    pub version: &'static str,
    /// What the service functions take (the pool again, the secret store, the reconciler).
    pub ctx: crate::ctx::Ctx,
    pub http_metrics: crate::monitor::metrics::HttpMetrics,
    pub sessions: Lifetimes,
    pub secure_cookies: bool,
    /// Whose `X-Forwarded-For` names the client (`--trusted-proxy`).
    pub trusted_proxies: crate::web::forwarded::TrustedProxies,
    pub login_limiter: LoginLimiter,
    /// The URL people (and Connect workers) use to reach this server, when configured.
    pub public_url: Option<String>,
    /// Read results (lists, signed-in credentials) reused until the next commit.
    pub snapshots: crate::snapshots::Snapshots,
    /// Single sign-on through an OpenID Connect provider, when configured.
    pub oidc: Option<Arc<crate::auth::oidc::Provider>>,
    /// Whether name-and-password sign-in is offered (the break-glass admin).
    pub local_passwords: bool,
    /// The config provider jar handed out to Connect workers, when configured.
    pub provider_jar: Option<Arc<crate::clusters::provider_jar::ProviderJar>>,
}

/// Chooses rustls' process-wide crypto provider (ring) before any TLS client is built. Both
/// providers are compiled in (ring for sqlx and reqwest, aws-lc-rs for the S3 SDK's client), so
/// rustls cannot pick one itself, and code that asks for the process default panics: sqlx's
/// `verify-ca` verifier (PostgreSQL and MySQL/MariaDB) does. Clients that name their provider
/// keep it. Calling it again changes nothing.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub struct Application {
    acceptor: TcpAcceptor,
    local_addr: SocketAddr,
    state: AppState,
    runtime: crate::config::RuntimeSettings,
}

impl Application {
    /// Opens and migrates the database, then binds the listener (port 0 picks a free port).
    pub async fn build(settings: &ServeSettings) -> anyhow::Result<Self> {
        let pool = open_database(&settings.data).await?;
        let keyring = Keyring::load(&settings.data)?;
        crate::secrets::store::verify_key(&pool, &keyring).await?;
        tracing::info!(
            active_key = keyring.active().fingerprint(),
            "secret store ready"
        );
        let secrets = Arc::new(SecretStore::new(pool.clone(), keyring));
        // Checked before anything listens: bad single sign-on settings stop the start.
        let oidc = crate::auth::oidc::OidcConfig::from_settings(
            &settings.oidc,
            settings.public_url.as_deref(),
            std::env::var("CLUECDC_OIDC_CLIENT_SECRET").ok(),
        )?
        .map(crate::auth::oidc::Provider::new)
        .transpose()?
        .map(Arc::new);
        let provider_jar = settings
            .provider_jar
            .as_deref()
            .map(crate::clusters::provider_jar::ProviderJar::load)
            .transpose()?
            .map(Arc::new);
        if let (Some(jar), Some(path)) = (&provider_jar, &settings.provider_jar) {
            tracing::info!(path = %path.display(), sha512 = %jar.sha512, "config provider jar served at {}", crate::clusters::provider_jar::URL_PATH);
        }
        if let Some(p) = &oidc {
            tracing::info!(issuer = %p.config.issuer, redirect_uri = %p.config.redirect_url, local_passwords = settings.oidc.local_passwords, "single sign-on enabled");
        }
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
            pool: pool.clone(),
            started_at: Instant::now(),
            inner: Arc::new(StateInner {
                version: env!("CARGO_PKG_VERSION"),
                ctx: crate::ctx::Ctx::new(pool.clone(), secrets),
                http_metrics: Default::default(),
                sessions: Lifetimes {
                    idle_secs: settings.session_idle,
                    absolute_secs: settings.session_max,
                },
                secure_cookies: settings.secure_cookies(),
                trusted_proxies: crate::web::forwarded::TrustedProxies::new(
                    settings.trusted_proxies.iter().flatten().copied().collect(),
                ),
                login_limiter: LoginLimiter::new(Limits::default()),
                public_url: settings.public_url.clone(),
                snapshots: crate::snapshots::Snapshots::new(&settings.data.database_path()),
                oidc,
                local_passwords: settings.oidc.local_passwords,
                provider_jar,
            }),
        };
        let base = settings
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{local_addr}"));
        if let Some(token) = crate::auth::setup::issue_if_needed(&state.pool).await? {
            // The one place a secret is logged on purpose: it is single-use, dies with the
            // first user, and whoever reads this log already controls the server.
            tracing::warn!(
                setup_url = %format!("{}/setup?token={token}", base.trim_end_matches('/')),
                "no user exists yet: open the setup URL to create the first admin, or run `cluecdc user create --name NAME --role admin`"
            );
        }
        Ok(Self {
            acceptor,
            local_addr,
            state,
            runtime: settings.runtime.clone(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish within a deadline.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        // One shutdown signal: the HTTP server and every background task follow it.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let tasks = spawn_background(
            &self.state.pool,
            &self.state.inner,
            &self.runtime,
            "serve",
            stop_rx,
        )?;
        let routes = web::routes(self.state.clone());
        let signal = async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        };
        Server::new_with_acceptor(self.acceptor)
            .run_with_graceful_shutdown(routes, signal, Some(SHUTDOWN_GRACE))
            .await
            .context("HTTP server failed")?;
        join_background(tasks).await;
        self.state.pool.close().await;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}

/// Opens the database in the data directory and applies migrations.
pub async fn open_database(data: &crate::config::DataSettings) -> anyhow::Result<Pool> {
    let pool = db::open_store(&data.store()?).await?;
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

/// The background tasks `serve` and `worker` both run, on a runtime of their own.
pub struct Background {
    /// Two workers: the reconciler and the monitors wait on Connect and Kafka most of the time.
    ///
    /// Why not the requests' runtime: a task woken by a worker goes to that worker's LIFO slot,
    /// which no other worker may steal, so a request woken beside a long background poll (the
    /// monitor cycle's or the reconciler's work on 500 connectors of a cluster) waited for it.
    /// At 10,000 connectors on 20 clusters those waits were the list pages' p99 at 64 clients.
    ///
    /// Why its threads keep the process's priority: at nice +10 (tried, `scripts/bench --scale`,
    /// 2026-12-06) a request that needed what a background task held (a pooled SQLite
    /// connection, a snapshot load, a lock) waited while that task, preempted by the request
    /// threads, could not finish with it. At 10,000 connectors with a pass every 2 s,
    /// `/connectors` p99 at 64 clients was 26–49 ms in two runs with it, 10–15 ms without.
    runtime: tokio::runtime::Runtime,
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

/// The background tasks `serve` and `worker` both run, by name.
pub fn spawn_background(
    pool: &Pool,
    inner: &Arc<StateInner>,
    runtime: &crate::config::RuntimeSettings,
    role: &str,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Background> {
    let background = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("background")
        .enable_all()
        .build()
        .context("cannot start the background tasks' runtime")?;
    // Every `tokio::spawn` below, and those of the tasks themselves, lands on it.
    let entered = background.enter();
    let reconciler = crate::reconcile::Reconciler::new(
        pool.clone(),
        inner.ctx.secrets.clone(),
        runtime.reconciler(),
        inner.ctx.reconciler.clone(),
        crate::reconcile::holder_id(role),
        inner.snapshots.writes(),
    );
    let monitor = crate::monitor::signals::Monitor {
        progress: Default::default(),
        verdicts: Default::default(),
        transitions: Default::default(),
        outbox: Default::default(),
        ctx: inner.ctx.clone(),
        interval: Duration::from_secs(runtime.monitor_interval.max(1) as u64),
        retention: Duration::from_secs(runtime.sample_retention.max(60) as u64),
        history_retention: Duration::from_secs(runtime.history_retention.max(1) as u64),
        audit_retention: Duration::from_secs(runtime.audit_retention.max(1) as u64),
        lease: crate::reconcile::lease::Lease::new(
            pool.clone(),
            "monitor",
            crate::reconcile::holder_id(role),
            runtime.lease_ttl.max(1) * 1000,
        ),
        lease_ttl: Duration::from_secs(runtime.lease_ttl.max(1) as u64),
    };
    let operations = crate::operations::Runner {
        ctx: inner.ctx.clone(),
        lease: crate::reconcile::lease::Lease::new(
            pool.clone(),
            crate::operations::LEASE,
            crate::reconcile::holder_id(role),
            runtime.lease_ttl.max(1) * 1000,
        ),
        lease_ttl: Duration::from_secs(runtime.lease_ttl.max(1) as u64),
    };
    let tasks = vec![
        ("reconciler", reconciler.spawn(stop.clone())),
        ("operations", operations.spawn(stop.clone())),
        ("monitor", monitor.spawn(stop.clone())),
        (
            "provider checks",
            crate::monitor::provider_checks::spawn(pool.clone(), inner.clone(), stop.clone()),
        ),
        (
            "leak scan",
            crate::monitor::leaks::spawn(
                pool.clone(),
                inner.clone(),
                Duration::from_secs(runtime.leak_scan_interval.max(1) as u64),
                stop,
            ),
        ),
    ];
    drop(entered);
    Ok(Background {
        runtime: background,
        tasks,
    })
}

/// Waits for the tasks to finish after the shutdown signal, within one deadline for all (a
/// task finishes its cycle or pass first, so five in turn, each given the grace, took up to
/// five times it), then ends their runtime (without blocking: this runs on the requests'
/// runtime).
pub async fn join_background(background: Background) {
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    for (name, task) in background.tasks {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            tracing::warn!(task = name, "background task did not stop in time");
        }
    }
    background.runtime.shutdown_background();
}

/// `cluecdc worker`: the same background tasks as `serve`, without HTTP.
pub async fn run_worker(
    settings: &crate::config::WorkerSettings,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let pool = open_database(&settings.data).await?;
    let keyring = Keyring::load(&settings.data)?;
    crate::secrets::store::verify_key(&pool, &keyring).await?;
    let inner = Arc::new(StateInner {
        version: env!("CARGO_PKG_VERSION"),
        ctx: crate::ctx::Ctx::new(
            pool.clone(),
            Arc::new(SecretStore::new(pool.clone(), keyring)),
        ),
        http_metrics: Default::default(),
        sessions: Lifetimes {
            idle_secs: 0,
            absolute_secs: 0,
        },
        secure_cookies: false,
        trusted_proxies: Default::default(),
        login_limiter: LoginLimiter::new(Limits::default()),
        public_url: None,
        snapshots: crate::snapshots::Snapshots::disabled(),
        oidc: None,
        local_passwords: true,
        provider_jar: None,
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tasks = spawn_background(&pool, &inner, &settings.runtime, "worker", stop_rx)?;
    tracing::info!("worker running: reconciler and monitors, no HTTP");
    println!("ClueCDC worker running");
    shutdown.await;
    let _ = stop_tx.send(true);
    join_background(tasks).await;
    pool.close().await;
    tracing::info!("shut down cleanly");
    Ok(())
}
