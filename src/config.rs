//! Settings, read once at start-up and passed down (never global).
//!
//! Every setting has a flag and an environment variable: flags win over the environment,
//! the environment wins over the defaults in code (clap's `env` attribute gives that order).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where the state lives: shared by `serve`, `worker`, `migrate` and the admin subcommands.
#[derive(Debug, Clone, Args)]
pub struct DataSettings {
    /// Directory holding the SQLite database (created when missing).
    #[arg(long, env = "CLUECDC_DATA_DIR", default_value = "./cluecdc-data")]
    pub data_dir: PathBuf,

    /// Master key for the secret store, base64 of 32 bytes.
    #[arg(long, env = "CLUECDC_MASTER_KEY", hide_env_values = true)]
    pub master_key: Option<String>,

    /// File holding the master key; the embedded default generates `<data-dir>/master.key`.
    #[arg(long, env = "CLUECDC_MASTER_KEY_FILE")]
    pub master_key_file: Option<PathBuf>,

    /// Where the metadata lives: absent (or `sqlite://PATH`) is the embedded SQLite file
    /// `<data-dir>/cluecdc.db`; `postgres://USER@HOST:PORT/DB` is a PostgreSQL database that
    /// several replicas share. Its password comes from `CLUECDC_DATABASE_PASSWORD` or
    /// `--database-password-file`, never from the command line.
    #[arg(long, env = "CLUECDC_DATABASE_URL")]
    pub database_url: Option<String>,

    /// File holding the PostgreSQL password (one line).
    #[arg(long, env = "CLUECDC_DATABASE_PASSWORD_FILE")]
    pub database_password_file: Option<PathBuf>,

    /// CA certificate (PEM) that PostgreSQL's server certificate must chain to; given, the
    /// connection is TLS with `verify-full` (host name checked) unless the URL says otherwise.
    #[arg(long, env = "CLUECDC_DATABASE_CA_FILE")]
    pub database_ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct LogSettings {
    /// tracing filter, e.g. `info,cluecdc=debug`.
    #[arg(
        long = "log",
        env = "CLUECDC_LOG",
        default_value = "info",
        global = true
    )]
    pub filter: String,

    #[arg(
        long,
        env = "CLUECDC_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Args)]
pub struct ServeSettings {
    /// Address to listen on; port 0 picks a free port (the URL is printed at start).
    #[arg(long, env = "CLUECDC_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// The URL people reach this server at (for links in logs). An `https://` URL marks
    /// session cookies `Secure`, as when ClueCDC sits behind an HTTPS proxy.
    #[arg(long, env = "CLUECDC_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// A browser session ends after this long without a request (`30m`, `2h`, `90s`).
    #[arg(long, env = "CLUECDC_SESSION_IDLE", default_value = "30m", value_parser = parse_duration)]
    pub session_idle: i64,

    /// A browser session ends this long after sign-in, however active.
    #[arg(long, env = "CLUECDC_SESSION_MAX", default_value = "12h", value_parser = parse_duration)]
    pub session_max: i64,

    /// A load balancer or proxy (CIDR, or one address) whose `X-Forwarded-For` names the client;
    /// repeatable, comma-separated in the environment. The right-most untrusted entry is the
    /// client's address (sign-in limits, audit, sessions). None (or empty): the header is ignored.
    #[arg(
        long = "trusted-proxy",
        env = "CLUECDC_TRUSTED_PROXIES",
        value_name = "CIDR",
        value_delimiter = ',',
        value_parser = crate::web::forwarded::parse_trusted_proxy
    )]
    pub trusted_proxies: Vec<Option<ipnet::IpNet>>,

    /// The ClueCDC config provider jar to hand out at `/static/cluecdc-config-provider.jar`
    /// with its SHA-512, for Connect workers and image builds (the container image sets it).
    #[arg(long, env = "CLUECDC_PROVIDER_JAR")]
    pub provider_jar: Option<PathBuf>,

    #[command(flatten)]
    pub oidc: Box<OidcSettings>,

    #[command(flatten)]
    pub runtime: RuntimeSettings,

    #[command(flatten)]
    pub data: DataSettings,
}

/// Single sign-on through an OpenID Connect provider (off unless an issuer is set). Checked at
/// start-up by `auth::oidc::OidcConfig::from_settings`; the client secret comes from a file or
/// the environment (`CLUECDC_OIDC_CLIENT_SECRET`), never from the command line.
#[derive(Debug, Clone, Args)]
pub struct OidcSettings {
    /// The identity provider's issuer URL (https), e.g. `https://idp.example.com/realms/ops`.
    /// Setting it offers "Sign in with <name>" on the sign-in page. Needs --public-url.
    #[arg(long, env = "CLUECDC_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,

    /// The client id ClueCDC is registered with at the provider.
    #[arg(long, env = "CLUECDC_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,

    /// File holding the client secret (or set CLUECDC_OIDC_CLIENT_SECRET).
    #[arg(long, env = "CLUECDC_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,

    /// Scopes to ask for, space- or comma-separated; must include `openid`.
    #[arg(
        long,
        env = "CLUECDC_OIDC_SCOPES",
        default_value = "openid profile email"
    )]
    pub oidc_scopes: String,

    /// The ID-token claim holding the user's groups, a dotted path (`groups`, `realm_access.roles`).
    #[arg(long, env = "CLUECDC_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,

    /// Groups whose members are admins (comma-separated).
    #[arg(long, env = "CLUECDC_OIDC_ADMIN_GROUPS", default_value = "")]
    pub oidc_admin_groups: String,

    /// Groups whose members are operators (comma-separated).
    #[arg(long, env = "CLUECDC_OIDC_OPERATOR_GROUPS", default_value = "")]
    pub oidc_operator_groups: String,

    /// Groups whose members are viewers (comma-separated).
    #[arg(long, env = "CLUECDC_OIDC_VIEWER_GROUPS", default_value = "")]
    pub oidc_viewer_groups: String,

    /// The role of a user in no mapped group: `none` refuses the sign-in, or viewer/operator/admin.
    #[arg(long, env = "CLUECDC_OIDC_DEFAULT_ROLE", default_value = "none")]
    pub oidc_default_role: String,

    /// PEM file with the CA certificate(s) of a provider behind a private CA (added to the system roots).
    #[arg(long, env = "CLUECDC_OIDC_CA_FILE")]
    pub oidc_ca_file: Option<PathBuf>,

    /// The provider's name on the sign-in button ("Sign in with <name>").
    #[arg(long, env = "CLUECDC_OIDC_NAME", default_value = "single sign-on")]
    pub oidc_name: String,

    /// ID-token signature algorithms accepted (comma-separated: RS256, RS384, RS512, PS256,
    /// PS384, PS512, ES256, ES384, EdDSA). `none` and HMAC are never accepted.
    #[arg(long, env = "CLUECDC_OIDC_ALGORITHMS", default_value = "RS256")]
    pub oidc_algorithms: String,

    /// Whether local name-and-password sign-in stays on (the break-glass admin). With `false`
    /// only single sign-on is offered.
    #[arg(long, env = "CLUECDC_LOCAL_PASSWORDS", default_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub local_passwords: bool,
}

/// Background work shared by `serve` and `worker`: the reconciler and the monitors.
#[derive(Debug, Clone, Args)]
pub struct RuntimeSettings {
    /// How often Kafka Connect is read back for leaked secrets.
    #[arg(long, env = "CLUECDC_LEAK_SCAN_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub leak_scan_interval: i64,

    /// A reconcile pass at least this often (changes made in ClueCDC trigger one at once).
    #[arg(long, env = "CLUECDC_RECONCILE_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub reconcile_interval: i64,

    /// How long the reconciler lease lasts without renewal (a crashed holder's runs out).
    #[arg(long, env = "CLUECDC_LEASE_TTL", default_value = "15s", value_parser = parse_duration)]
    pub lease_ttl: i64,

    /// Restarts of a failing connector before ClueCDC stops and reports it.
    #[arg(long, env = "CLUECDC_RESTART_MAX", default_value_t = 5)]
    pub restart_max: u32,

    /// First restart backoff; it doubles per attempt up to --restart-backoff-max, with jitter.
    #[arg(long, env = "CLUECDC_RESTART_BACKOFF", default_value = "5s", value_parser = parse_duration)]
    pub restart_backoff: i64,

    #[arg(long, env = "CLUECDC_RESTART_BACKOFF_MAX", default_value = "5m", value_parser = parse_duration)]
    pub restart_backoff_max: i64,

    /// RUNNING this long without failures resets a connector's restart count.
    #[arg(long, env = "CLUECDC_HEALTHY_WINDOW", default_value = "2m", value_parser = parse_duration)]
    pub healthy_window: i64,

    /// How often the monitor collects lag, slot WAL and failures and evaluates alert rules.
    #[arg(long, env = "CLUECDC_MONITOR_INTERVAL", default_value = "15s", value_parser = parse_duration)]
    pub monitor_interval: i64,

    /// How long monitoring samples (the history behind charts) are kept.
    #[arg(long, env = "CLUECDC_SAMPLE_RETENTION", default_value = "7d", value_parser = parse_duration)]
    pub sample_retention: i64,

    /// How long resolved alerts, connector restarts and drift events are kept (a firing alert
    /// stays; the audit trail has --audit-retention).
    #[arg(long, env = "CLUECDC_HISTORY_RETENTION", default_value = "30d", value_parser = parse_duration)]
    pub history_retention: i64,

    /// How long audit rows are kept. Older rows are removed by the monitor in batches (once the
    /// oldest is past it by a 24th of it, at most an hour; 2,000 rows a cycle at most), each
    /// removal recorded in the trail; export them first to keep them longer.
    #[arg(long, env = "CLUECDC_AUDIT_RETENTION", default_value = "365d", value_parser = parse_duration)]
    pub audit_retention: i64,

    /// How often committed connector offsets are read: running source connectors' each time
    /// and for two times after they stop running, every other connector's in turn (a tenth of
    /// them each time), one call per connector. The reads are spread over the reconcile passes
    /// of the interval (up to six slices), not made all at once.
    #[arg(long, env = "CLUECDC_OFFSETS_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub offsets_interval: i64,
}

impl RuntimeSettings {
    pub fn reconciler(&self) -> crate::reconcile::Settings {
        use std::time::Duration;
        let secs = |s: i64| Duration::from_secs(s.max(1) as u64);
        crate::reconcile::Settings {
            interval: secs(self.reconcile_interval),
            lease_ttl: secs(self.lease_ttl),
            offsets_interval: secs(self.offsets_interval),
            policy: crate::reconcile::policy::Policy {
                max_restarts: self.restart_max,
                base_backoff: secs(self.restart_backoff),
                max_backoff: secs(self.restart_backoff_max),
                healthy_window: secs(self.healthy_window),
                restarts_per_pass: 5,
            },
        }
    }
}

/// `cluecdc worker`: the reconciler and monitors without HTTP.
#[derive(Debug, Clone, Args)]
pub struct WorkerSettings {
    #[command(flatten)]
    pub runtime: RuntimeSettings,

    #[command(flatten)]
    pub data: DataSettings,
}

fn parse_duration(s: &str) -> Result<i64, String> {
    crate::time::parse_duration_secs(s)
        .ok_or_else(|| format!("{s:?} is not a duration; write e.g. 90s, 30m, 12h or 7d"))
}

impl ServeSettings {
    /// Cookies get `Secure` when people reach the server over HTTPS.
    pub fn secure_cookies(&self) -> bool {
        self.public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"))
    }
}

/// The metadata store [`DataSettings`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    Sqlite(PathBuf),
    /// The URL without its password, and the password apart (never logged).
    Postgres {
        url: String,
        password: Option<crate::secrets::Secret<String>>,
    },
}

impl Store {
    /// The store in words, for messages (a PostgreSQL URL without its password).
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(p) => format!("at {}", p.display()),
            Store::Postgres { url, .. } => url.clone(),
        }
    }
}

impl DataSettings {
    /// The embedded SQLite file (the default store, and where `backup` reads).
    pub fn database_path(&self) -> PathBuf {
        match self.store() {
            Ok(Store::Sqlite(p)) => p,
            _ => self.data_dir.join("cluecdc.db"),
        }
    }

    /// Which store to open, checked: a password on the command line is refused (other users
    /// of the machine read argv), a PostgreSQL URL gets its password from the environment or
    /// the password file and its CA from `--database-ca-file`.
    pub fn store(&self) -> anyhow::Result<Store> {
        let Some(raw) = self.database_url.as_deref().filter(|u| !u.is_empty()) else {
            return Ok(Store::Sqlite(self.data_dir.join("cluecdc.db")));
        };
        if let Some(path) = raw.strip_prefix("sqlite://") {
            let path = path.split('?').next().unwrap_or_default();
            anyhow::ensure!(
                !path.is_empty(),
                "--database-url: sqlite:// needs a file path, e.g. sqlite:///var/lib/cluecdc/cluecdc.db"
            );
            return Ok(Store::Sqlite(PathBuf::from(path)));
        }
        let mut url = url::Url::parse(raw).map_err(|e| {
            anyhow::anyhow!("--database-url: not a URL ({e}); use postgres://USER@HOST:PORT/DATABASE or sqlite://PATH")
        })?;
        anyhow::ensure!(
            matches!(url.scheme(), "postgres" | "postgresql"),
            "--database-url: unknown scheme {:?}; use postgres://USER@HOST:PORT/DATABASE or sqlite://PATH",
            url.scheme()
        );
        let from_argv = std::env::var("CLUECDC_DATABASE_URL").ok().as_deref() != Some(raw);
        let mut password = None;
        if let Some(p) = url.password() {
            anyhow::ensure!(
                !from_argv,
                "--database-url: the URL holds a password, and the command line is readable by every user of this machine; put the password in CLUECDC_DATABASE_PASSWORD or --database-password-file"
            );
            password = Some(
                percent_encoding::percent_decode_str(p)
                    .decode_utf8_lossy()
                    .into_owned(),
            );
            let _ = url.set_password(None);
        }
        if let Some(file) = &self.database_password_file {
            let text = std::fs::read_to_string(file).map_err(|e| {
                anyhow::anyhow!(
                    "--database-password-file: cannot read {}: {e}",
                    file.display()
                )
            })?;
            password = Some(text.trim_end_matches(['\r', '\n']).to_string());
        } else if let Ok(p) = std::env::var("CLUECDC_DATABASE_PASSWORD") {
            password = Some(p);
        }
        if let Some(ca) = &self.database_ca_file {
            anyhow::ensure!(
                ca.is_file(),
                "--database-ca-file: {} is not a file",
                ca.display()
            );
            let has = |k: &str| url.query_pairs().any(|(key, _)| key == k);
            let (mode, root) = (has("sslmode"), has("sslrootcert"));
            let mut q = url.query_pairs_mut();
            if !mode {
                q.append_pair("sslmode", "verify-full");
            }
            if !root {
                q.append_pair("sslrootcert", &ca.display().to_string());
            }
        }
        Ok(Store::Postgres {
            url: url.to_string(),
            password: password.map(crate::secrets::Secret::new),
        })
    }
}
