//! Shared test helpers: spawn the real binary on a free port with a temporary data directory,
//! and read the native stack's endpoints from the environment `scripts/stack env` exports.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `cluecdc serve` process, killed when dropped.
pub struct TestApp {
    pub url: String,
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub log_path: PathBuf,
    pub data: PathBuf,
}

impl TestApp {
    pub fn data_dir(&self) -> PathBuf {
        self.data.clone()
    }

    /// The environment that points a `cluecdc` command at this instance's store.
    pub fn store_vars(&self) -> Vec<(String, String)> {
        let mut cmd = Command::new("true");
        store_env(&mut cmd, &self.data);
        cmd.get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
            .collect()
    }

    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cluecdc"))
}

// ---- the metadata store under test -----------------------------------------------------------
//
// `CLUECDC_TEST_STORE=postgres` runs the suite with every instance on PostgreSQL metadata (the
// stack's server, one database per data directory, so that a `serve` restarted or a `worker`
// beside it on the same data directory shares it); unset, on the embedded SQLite default.

/// True when this run puts metadata on PostgreSQL.
pub fn on_postgres() -> bool {
    std::env::var("CLUECDC_TEST_STORE").as_deref() == Ok("postgres")
}

/// Keeps `data` on the embedded SQLite store whatever the run's engine: for tests of the
/// embedded file itself (backup and restore, a copy of the binary alone, the source side of
/// `migrate-store`).
pub fn pin_sqlite(data: &Path) {
    std::fs::create_dir_all(data).unwrap();
    std::fs::write(data.join(".sqlite-only"), "").unwrap();
}

/// The PostgreSQL database of a data directory (created on first use), or None on SQLite.
fn store_database(data: &Path) -> Option<String> {
    if !on_postgres() || data.join(".sqlite-only").exists() {
        return None;
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::path::absolute(data).unwrap().hash(&mut h);
    let name = format!("cluecdc_t_{:016x}", h.finish());
    let exists = psql_admin(&format!(
        "SELECT 1 FROM pg_database WHERE datname = '{name}'"
    ));
    if String::from_utf8_lossy(&exists.stdout).trim() != "1" {
        let out = psql_admin(&format!("CREATE DATABASE {name}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || err.contains("already exists"),
            "CREATE DATABASE {name}: {err}"
        );
    }
    Some(name)
}

/// One statement as the stack's PostgreSQL superuser, on its `postgres` database (unaligned,
/// tuples only).
fn psql_admin(sql: &str) -> std::process::Output {
    let s = stack();
    Command::new("psql")
        .args([
            "-h",
            &s.pg_host,
            "-p",
            &s.pg_port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-tAc",
            sql,
        ])
        .env("PGPASSWORD", var("PG_SUPERUSER_PASSWORD"))
        .output()
        .unwrap()
}

/// Points a `cluecdc` command at the store of `data` (no change on SQLite). The password goes
/// by environment, as the README tells operators.
pub fn store_env(cmd: &mut Command, data: &Path) {
    if let Some(name) = store_database(data) {
        let s = stack();
        cmd.env(
            "CLUECDC_DATABASE_URL",
            format!("postgres://postgres@{}:{}/{name}", s.pg_host, s.pg_port),
        )
        .env("CLUECDC_DATABASE_PASSWORD", var("PG_SUPERUSER_PASSWORD"));
    }
}

/// Drops a database `fresh_postgres_database` made (its connections closed first).
pub fn drop_postgres_database(name: &str) {
    psql_admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
}

/// Creates (or empties) a PostgreSQL database on the stack's server: `postgres://` URL
/// without the password (`CLUECDC_DATABASE_PASSWORD` carries it) and the password.
pub fn fresh_postgres_database(name: &str) -> (String, String) {
    let s = stack();
    drop_postgres_database(name);
    let out = psql_admin(&format!("CREATE DATABASE {name}"));
    assert!(
        out.status.success(),
        "CREATE DATABASE {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        format!("postgres://postgres@{}:{}/{name}", s.pg_host, s.pg_port),
        var("PG_SUPERUSER_PASSWORD"),
    )
}

/// A pool on the store of `data`, for tests that look at rows directly (SQL with `$N`
/// placeholders, which both engines read).
pub async fn store(data: &Path) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    let url = match store_database(data) {
        Some(name) => {
            let s = stack();
            format!(
                "postgres://postgres:{}@{}:{}/{name}",
                var("PG_SUPERUSER_PASSWORD"),
                s.pg_host,
                s.pg_port
            )
        }
        None => format!("sqlite://{}", data.join("cluecdc.db").display()),
    };
    sqlx::AnyPool::connect(&url).await.unwrap()
}

/// Starts the binary from `exe` in an empty working directory on 127.0.0.1:0 and waits for the
/// URL it prints. Logs go to a file in the temp dir, so a failing test can show them.
pub fn spawn_app_from(exe: &Path, dir: tempfile::TempDir, extra_env: &[(&str, &str)]) -> TestApp {
    let data = dir.path().join("data");
    spawn_app_on(exe, dir, &data, extra_env)
}

/// Like `spawn_app_from`, with the data directory given (to share it with a `worker`).
pub fn spawn_app_on(
    exe: &Path,
    dir: tempfile::TempDir,
    data: &Path,
    extra_env: &[(&str, &str)],
) -> TestApp {
    let work = dir.path().join("cwd");
    std::fs::create_dir_all(&work).unwrap();
    let log_path = dir.path().join("cluecdc.log");
    let log = std::fs::File::create(&log_path).unwrap();
    // A fixed address only where a test needs one (a redirect URI registered at Dex).
    let listen = extra_env
        .iter()
        .find(|(k, _)| *k == "CLUECDC_LISTEN")
        .map_or("127.0.0.1:0", |(_, v)| *v);
    let mut cmd = Command::new(exe);
    cmd.current_dir(&work)
        .args(["serve", "--listen", listen, "--data-dir"])
        .arg(data)
        .env_remove("CLUECDC_LISTEN")
        .env_remove("CLUECDC_DATA_DIR")
        .env("CLUECDC_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    store_env(&mut cmd, data);
    // An empty value removes the variable (a test that needs a setting of the stack's
    // environment absent, or the embedded store: `("CLUECDC_DATABASE_URL", "")`).
    for (k, v) in extra_env {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("ClueCDC listening on ") {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => TestApp {
            url,
            child,
            dir,
            log_path,
            data: data.to_path_buf(),
        },
        Err(_) => {
            let _ = child.kill();
            panic!(
                "cluecdc did not print its URL within 60 s; its log:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            )
        }
    }
}

pub fn spawn_app() -> TestApp {
    spawn_app_from(&binary(), tempfile::tempdir().unwrap(), &[])
}

/// Endpoints and fixture credentials of the native stack, as `scripts/stack env` exports them.
#[derive(Debug, Clone)]
pub struct Stack {
    pub kafka_bootstrap: String,
    pub connect_url: String,
    pub pg_host: String,
    pub pg_port: u16,
    pub pg_user: String,
    pub pg_password: String,
    pub pg_source_db: String,
    pub pg_dest_db: String,
    pub mariadb_host: String,
    pub mariadb_port: u16,
    pub mariadb_user: String,
    pub mariadb_password: String,
    pub mariadb_db: String,
    pub mysql_host: String,
    pub mysql_port: u16,
    pub mysql_user: String,
    pub mysql_password: String,
    pub mysql_db: String,
    pub mysql_dest_db: String,
    pub mysql_dest_user: String,
    pub mysql_dest_password: String,
    pub mysql_root_user: String,
    pub mysql_root_password: String,
    pub s3_endpoint: String,
    pub s3_region: String,
    pub s3_bucket: String,
    pub s3_access_key: String,
    pub s3_secret_key: String,
}

/// A variable `scripts/stack env` exports (the test command sets them all).
pub fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: the tests need the native stack's endpoints; run `eval \"$(scripts/stack env)\"` (the test command does this)")
    })
}

pub fn stack() -> Stack {
    Stack {
        kafka_bootstrap: var("KAFKA_BOOTSTRAP"),
        connect_url: var("CONNECT_URL"),
        pg_host: var("PG_HOST"),
        pg_port: var("PG_PORT").parse().unwrap(),
        pg_user: var("PG_USER"),
        pg_password: var("PG_PASSWORD"),
        pg_source_db: var("PG_SOURCE_DB"),
        pg_dest_db: var("PG_DEST_DB"),
        mariadb_host: var("MARIADB_HOST"),
        mariadb_port: var("MARIADB_PORT").parse().unwrap(),
        mariadb_user: var("MARIADB_USER"),
        mariadb_password: var("MARIADB_PASSWORD"),
        mariadb_db: var("MARIADB_DB"),
        mysql_host: var("MYSQL_HOST"),
        mysql_port: var("MYSQL_PORT").parse().unwrap(),
        mysql_user: var("MYSQL_USER"),
        mysql_password: var("MYSQL_PASSWORD"),
        mysql_db: var("MYSQL_DB"),
        mysql_dest_db: var("MYSQL_DEST_DB"),
        mysql_dest_user: var("MYSQL_DEST_USER"),
        mysql_dest_password: var("MYSQL_DEST_PASSWORD"),
        mysql_root_user: var("MYSQL_ROOT_USER"),
        mysql_root_password: var("MYSQL_ROOT_PASSWORD"),
        s3_endpoint: var("S3_ENDPOINT"),
        s3_region: var("S3_REGION"),
        s3_bucket: var("S3_BUCKET"),
        s3_access_key: var("S3_ACCESS_KEY"),
        s3_secret_key: var("S3_SECRET_KEY"),
    }
}

/// Where `scripts/stack` keeps a component's log, for failure messages.
pub fn stack_log(component: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    format!("{}/.stack/logs/{component}.log", root.display())
}

impl Stack {
    pub fn pg_url(&self, db: &str) -> String {
        format!(
            "postgres://{}:{}@{}:{}/{}",
            self.pg_user, self.pg_password, self.pg_host, self.pg_port, db
        )
    }

    pub fn mariadb_url(&self, db: &str) -> String {
        format!(
            "mysql://{}:{}@{}:{}/{}",
            self.mariadb_user, self.mariadb_password, self.mariadb_host, self.mariadb_port, db
        )
    }

    /// The stack's MySQL as its root user (fixtures: tables, grants, binlog purges).
    pub fn mysql_root_url(&self, db: &str) -> String {
        format!(
            "mysql://{}:{}@{}:{}/{}",
            self.mysql_root_user, self.mysql_root_password, self.mysql_host, self.mysql_port, db
        )
    }

    pub fn s3_client(&self, secret: &str) -> aws_sdk_s3::Client {
        let creds =
            aws_sdk_s3::config::Credentials::new(&self.s3_access_key, secret, None, None, "test");
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new(self.s3_region.clone()))
            .endpoint_url(&self.s3_endpoint)
            .force_path_style(true)
            .credentials_provider(creds)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }
}

// ---- identities -----------------------------------------------------------------------------

pub const PASSWORD: &str = "correct horse battery staple";

/// `cluecdc user create`, password on standard input (as a script would do it).
pub fn create_user(app: &TestApp, name: &str, role: &str) {
    use std::io::Write;
    let mut child = Command::new(binary())
        .args([
            "user",
            "create",
            "--name",
            name,
            "--role",
            role,
            "--data-dir",
        ])
        .arg(app.data_dir())
        .envs(app.store_vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{PASSWORD}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "user create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cluecdc token create`, returning the token printed alone on standard output.
pub fn create_token(app: &TestApp, user: &str, extra: &[&str]) -> String {
    let out = Command::new(binary())
        .args(["token", "create", "--user", user, "--data-dir"])
        .arg(app.data_dir())
        .envs(app.store_vars())
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "token create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(
        token.starts_with("cdc_") && !token.contains('\n'),
        "{token}"
    );
    token
}

/// A browser-like client: cookie store, no redirects followed, signed in, with its CSRF token.
pub struct Browser {
    pub client: reqwest::Client,
    pub csrf: String,
    pub base: String,
}

impl Browser {
    /// The body of a signed-in GET (a page or a fragment), whatever its status.
    pub async fn text(&self, url: impl reqwest::IntoUrl) -> String {
        self.client
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

pub fn hidden_value(html: &str, name: &str) -> Option<String> {
    let needle = format!(r#"name="{name}" value=""#);
    let start = html.find(&needle)? + needle.len();
    let end = html[start..].find('"')? + start;
    Some(html[start..end].to_string())
}

pub async fn sign_in(app: &TestApp, name: &str, password: &str) -> Browser {
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = client
        .get(format!("{}/login", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let login_csrf =
        hidden_value(&page, "csrf_token").expect("the sign-in form carries a CSRF token");
    let res = client
        .post(format!("{}/login", app.url))
        .form(&[
            ("name", name),
            ("password", password),
            ("next", "/"),
            ("csrf_token", &login_csrf),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        303,
        "sign-in of {name} failed: {}",
        res.text().await.unwrap_or_default()
    );
    let home = client.get(format!("{}/", app.url)).send().await.unwrap();
    assert_eq!(home.status(), 200);
    let html = home.text().await.unwrap();
    let csrf = hidden_value(&html, "csrf_token").expect("pages carry the session's CSRF token");
    Browser {
        client,
        csrf,
        base: app.url.clone(),
    }
}

/// The route table as the binary prints it (`cluecdc routes`): what the router is built from.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct RouteInfo {
    pub method: String,
    pub path: String,
    pub access: String,
}

pub fn routes() -> Vec<RouteInfo> {
    let out = Command::new(binary()).arg("routes").output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A concrete URL path for a route pattern (`:id` and `*path` become `x`).
pub fn concrete(path: &str) -> String {
    path.split('/')
        .map(|s| {
            if s.starts_with(':') || s.starts_with('*') {
                "x"
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

// ---- the JSON API as an admin ---------------------------------------------------------------

/// A running app with an admin API token: the way most domain tests drive ClueCDC.
pub struct Api {
    pub app: TestApp,
    pub token: String,
    pub http: reqwest::Client,
}

pub fn admin_api() -> Api {
    admin_api_with(&[])
}

pub fn admin_api_with(env: &[(&str, &str)]) -> Api {
    let app = spawn_app_from(&binary(), tempfile::tempdir().unwrap(), env);
    create_user(&app, "ada", "admin");
    let token = create_token(&app, "ada", &[]);
    let http = app.client();
    Api { app, token, http }
}

impl Api {
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.app.url))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let content_type = content_type(&res);
        let text = res.text().await.unwrap();
        contract::assert_documented(
            &self.app.url,
            method.as_str(),
            path,
            status,
            content_type.as_deref(),
            &text,
        )
        .await;
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }
    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::GET, path, None).await
    }
    pub async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
    pub async fn patch(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }
    pub async fn delete(&self, path: &str) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::DELETE, path, None).await
    }
    /// A page or text endpoint (HTML, Prometheus text, YAML) as this API's user sees it; under
    /// `/api/v1` held to the OpenAPI document like [`Api::call`].
    pub async fn text(&self, path: &str) -> String {
        let res = self
            .http
            .get(format!("{}{path}", self.app.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        let content_type = content_type(&res);
        let text = res.text().await.unwrap();
        contract::assert_documented(
            &self.app.url,
            "GET",
            path,
            status,
            content_type.as_deref(),
            &text,
        )
        .await;
        text
    }
    /// Creates a connection and returns its JSON (panics with the error otherwise).
    pub async fn connection(&self, body: serde_json::Value) -> serde_json::Value {
        let (status, v) = self.post("/api/v1/connections", body).await;
        assert_eq!(status, 201, "create connection: {v}");
        v
    }
}

fn content_type(res: &reqwest::Response) -> Option<String> {
    res.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

// ---- a throwaway PostgreSQL cluster ---------------------------------------------------------

/// A PostgreSQL cluster of its own (initdb in a temp dir, run as the postgres OS user), for
/// tests that need server settings the shared stack must not change.
pub struct TempPostgres {
    pub port: u16,
    pub dir: tempfile::TempDir,
    bin: PathBuf,
}

pub const TEMP_PG_USER: &str = "cdc_probe";
pub const TEMP_PG_PASSWORD: &str = "temp-pg-password-1";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn as_postgres(bin: &Path, tool: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
    c
}

impl TempPostgres {
    pub fn start(extra: &[&str]) -> TempPostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL server binaries under /usr/lib/postgresql (Debian's postgresql package)")
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|p| p.join("initdb").exists())
            .unwrap();
        let dir = tempfile::Builder::new()
            .prefix("cluecdc-pg-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status();
        let out = as_postgres(&bin, "initdb")
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let opts = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} {}",
            dir.path().display(),
            extra.join(" ")
        );
        let out = as_postgres(&bin, "pg_ctl")
            .args(["-w", "-t", "60", "-D"])
            .arg(&data)
            .args(["-l"])
            .arg(dir.path().join("pg.log"))
            .args(["-o", &opts, "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let role =
            format!("CREATE ROLE {TEMP_PG_USER} LOGIN REPLICATION PASSWORD '{TEMP_PG_PASSWORD}'");
        let db = format!("CREATE DATABASE probe OWNER {TEMP_PG_USER}");
        let out = as_postgres(&bin, "psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                &role,
                "-c",
                &db,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TempPostgres { port, dir, bin }
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin, "pg_ctl")
            .args(["-D"])
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

// ---- Kafka Connect --------------------------------------------------------------------------

/// The stack runs one Connect worker whose `cluecdc` config provider reads its target (URL and
/// token) from one file; tests that point it at their own ClueCDC take this lock first.
///
/// Under `tests/it_engines.py` (`CLUECDC_PROVIDER_ROUTES` set) the file points at the provider
/// router of tests/provider_router.py, and a test's target is its own registration there: the
/// lock then holds nothing back, and dropping it removes the registration. Otherwise it is held
/// within this test binary by a mutex, and across processes by a lock file beside the provider
/// file that names its holder's pid; a lock file whose process is gone is stale and taken over.
pub struct ProviderLock {
    _local: tokio::sync::MutexGuard<'static, ()>,
    /// The lock file, or this process's registration with the router.
    file: PathBuf,
}

/// This process's registration with the provider router, when the suite runs one.
fn provider_route() -> Option<PathBuf> {
    std::env::var_os("CLUECDC_PROVIDER_ROUTES")
        .map(|dir| PathBuf::from(dir).join(std::process::id().to_string()))
}

impl Drop for ProviderLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

pub async fn provider_lock() -> ProviderLock {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    let local = LOCK
        .get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await;
    if let Some(file) = provider_route() {
        return ProviderLock {
            _local: local,
            file,
        };
    }
    let file = PathBuf::from(format!(
        "{}.lock",
        std::env::var("CLUECDC_PROVIDER_FILE")
            .expect("CLUECDC_PROVIDER_FILE from `scripts/stack env`")
    ));
    let me = std::process::id().to_string();
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
        {
            Ok(mut f) => {
                use std::io::Write;
                f.write_all(me.as_bytes()).unwrap();
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(&file).unwrap_or_default();
                let alive = !holder.trim().is_empty()
                    && Path::new(&format!("/proc/{}", holder.trim())).exists();
                if !alive && !holder.is_empty() {
                    let _ = std::fs::remove_file(&file);
                } else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            Err(e) => panic!("provider lock {}: {e}", file.display()),
        }
    }
    ProviderLock {
        _local: local,
        file,
    }
}

/// The stack's Kafka and Connect clusters registered in `api` (Connect's config provider pointed
/// at it): (kafka cluster id, connect cluster id).
pub async fn stack_clusters(api: &Api) -> (String, String) {
    let s = stack();
    let connect = point_connect_provider_at(api).await;
    let (status, kafka) = api
        .post(
            "/api/v1/kafka-clusters",
            serde_json::json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{kafka}");
    (
        kafka["id"].as_str().unwrap().to_string(),
        connect["id"].as_str().unwrap().to_string(),
    )
}

/// The alert of `kind` on `subject` in `state` (firing, resolved), if there is one.
pub async fn alert(api: &Api, kind: &str, subject: &str, state: &str) -> Option<serde_json::Value> {
    let (_, list) = api.get("/api/v1/alerts").await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == kind && a["subject"] == subject && a["state"] == state)
        .cloned()
}

/// Points the stack's Connect config provider at `api`'s ClueCDC: registers the stack's
/// Connect cluster there and writes the provider file with its token.
pub async fn point_connect_provider_at(api: &Api) -> serde_json::Value {
    let s = stack();
    let (status, cluster) = api
        .post(
            "/api/v1/connect-clusters",
            serde_json::json!({"name": "stack", "url": s.connect_url}),
        )
        .await;
    assert_eq!(status, 201, "{cluster}");
    write_provider_file(api, cluster["provider_token"].as_str().unwrap());
    cluster
}

pub async fn connect_status(connect: &str, name: &str) -> Option<serde_json::Value> {
    let res = reqwest::get(format!("{connect}/connectors/{name}/status"))
        .await
        .ok()?;
    if !res.status().is_success() {
        return None;
    }
    res.json().await.ok()
}

/// One call to a Connect worker's REST API, made again while Connect says a rebalance is in
/// progress or expected (409, or 500 naming a rebalance: frequent while both engines' runs
/// create connectors on the one worker), for up to 60 s: (status, body).
pub async fn connect_call(
    method: reqwest::Method,
    url: &str,
    body: Option<&serde_json::Value>,
) -> (u16, String) {
    let client = reqwest::Client::new();
    for _ in 0..120 {
        let mut req = client.request(method.clone(), url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let res = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = res.status().as_u16();
        let text = res.text().await.unwrap_or_default();
        if status == 409 || (status == 500 && text.contains("rebalance")) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        return (status, text);
    }
    panic!("{method} {url}: Connect was rebalancing for 60 s")
}

/// Connect's stored config for a connector; None when it does not exist. Retries while Connect
/// answers 409 or 5xx ("a rebalance is expected", frequent while the two engines' runs create
/// and delete connectors on the one worker): a test reads what Connect holds, not its moment of
/// rebalancing.
pub async fn connect_config(s: &Stack, name: &str) -> Option<serde_json::Value> {
    for _ in 0..120 {
        let res = reqwest::get(format!("{}/connectors/{name}/config", s.connect_url))
            .await
            .ok()?;
        match res.status().as_u16() {
            200 => return res.json().await.ok(),
            404 => return None,
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    panic!("Connect did not answer for {name}'s config within 60 s")
}

/// Waits until the connector and all its tasks are RUNNING; panics with the last status.
pub async fn wait_running(connect: &str, name: &str, within: Duration) -> serde_json::Value {
    let deadline = std::time::Instant::now() + within;
    let mut last = serde_json::Value::Null;
    while std::time::Instant::now() < deadline {
        if let Some(st) = connect_status(connect, name).await {
            let tasks = st["tasks"].as_array().cloned().unwrap_or_default();
            if st["connector"]["state"] == "RUNNING"
                && !tasks.is_empty()
                && tasks.iter().all(|t| t["state"] == "RUNNING")
            {
                return st;
            }
            last = st;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("connector {name} not RUNNING within {within:?}; last status: {last}")
}

pub async fn delete_connector(connect: &str, name: &str) {
    let _ = reqwest::Client::new()
        .delete(format!("{connect}/connectors/{name}"))
        .send()
        .await;
}

/// Runs SQL as the stack's PostgreSQL superuser on the source database.
pub async fn pg_superuser(s: &Stack) -> sqlx::PgPool {
    let url = format!(
        "postgres://{}:{}@{}:{}/{}",
        std::env::var("PG_SUPERUSER").unwrap(),
        std::env::var("PG_SUPERUSER_PASSWORD").unwrap(),
        s.pg_host,
        s.pg_port,
        s.pg_source_db
    );
    sqlx::PgPool::connect(&url).await.unwrap()
}

/// Drops a replication slot once nothing holds it (a stopping connector may for a moment).
pub async fn drop_slot(pool: &sqlx::PgPool, slot: &str) {
    for _ in 0..40 {
        let r = sqlx::query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active").bind(slot).execute(pool).await;
        let left: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM pg_replication_slots WHERE slot_name = $1")
                .bind(slot)
                .fetch_one(pool)
                .await
                .unwrap_or(0);
        if r.is_ok() && left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A readers-writer lock shared by every test process on this machine (the suite runs once per
/// metadata engine, both at once, against the one stack): `flock` on two files under the temp
/// dir. Each acquisition opens its own file description, so holders in one process exclude each
/// other as holders in two do. A writer first takes the turnstile and keeps it, so readers
/// arriving after it wait behind it instead of starving it.
pub struct StackGate {
    _gate: std::fs::File,
    _turnstile: Option<std::fs::File>,
}

async fn stack_gate(name: &str, exclusive: bool) -> StackGate {
    let path = |what: &str| std::env::temp_dir().join(format!("cluecdc-it-{name}.{what}.lock"));
    let (turnstile, gate) = (path("turnstile"), path("gate"));
    tokio::task::spawn_blocking(move || {
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        let flock = |f: &std::fs::File, op: rustix::fs::FlockOperation| {
            rustix::fs::flock(f, op).unwrap_or_else(|e| panic!("flock: {e}"));
        };
        let t = open(&turnstile);
        flock(&t, rustix::fs::FlockOperation::LockExclusive);
        let g = open(&gate);
        if exclusive {
            flock(&g, rustix::fs::FlockOperation::LockExclusive);
            StackGate {
                _gate: g,
                _turnstile: Some(t),
            }
        } else {
            flock(&g, rustix::fs::FlockOperation::LockShared);
            drop(t);
            StackGate {
                _gate: g,
                _turnstile: None,
            }
        }
    })
    .await
    .unwrap()
}

/// Tests that need the shared Connect worker running hold this (shared); the one test that
/// stops Connect holds it exclusively.
pub async fn connect_shared() -> StackGate {
    stack_gate("connect", false).await
}

pub async fn connect_exclusive() -> StackGate {
    stack_gate("connect", true).await
}

/// Sign-ins through the stack's Dex hold this (shared); the test that restarts Dex holds it
/// exclusively.
pub async fn dex_shared() -> StackGate {
    stack_gate("dex", false).await
}

pub async fn dex_exclusive() -> StackGate {
    stack_gate("dex", true).await
}

/// One at a time across test processes: the tests that start three-worker Connect clusters
/// of their own (each a few JVMs; two at once would mostly measure the machine).
pub async fn heavy_exclusive() -> StackGate {
    stack_gate("heavy", true).await
}

/// Runs `scripts/stack` with arguments (for tests that stop and start a component).
pub fn stack_cmd(args: &[&str]) {
    let out = Command::new(format!("{}/scripts/stack", env!("CARGO_MANIFEST_DIR")))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/stack {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One request ClueCDC made to Connect through the proxy.
#[derive(Debug, Clone)]
pub struct ProxiedCall {
    pub method: String,
    pub path: String,
    pub agent: String,
    /// When the proxy received it.
    pub at: std::time::Instant,
}

/// A transparent HTTP proxy in front of the real Connect that records every call, so tests
/// can count what ClueCDC asks of Connect. With `refuse_creates` set it answers connector
/// creation with Connect's 403, as a Connect with access control does for a principal
/// without the right. Calls matching one of `fail`'s (method, path suffix) pairs are answered
/// with a 503, as a worker in trouble would, and change nothing (see [`ConnectProxy::fail`]).
pub struct ConnectProxy {
    pub url: String,
    pub calls: std::sync::Arc<std::sync::Mutex<Vec<ProxiedCall>>>,
    pub refuse_creates: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub failing: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    /// (user agent part, path suffix, delay): see [`ConnectProxy::slow`].
    pub slowed: std::sync::Arc<std::sync::Mutex<Vec<(String, String, Duration)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConnectProxy {
    pub async fn start(target: &str) -> ConnectProxy {
        use poem::listener::{Acceptor, Listener};
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
            .into_acceptor()
            .await
            .unwrap();
        let addr = acceptor.local_addr()[0].as_socket_addr().copied().unwrap();
        let target = target.trim_end_matches('/').to_string();
        let record = calls.clone();
        let refuse_creates = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refuse = refuse_creates.clone();
        let failing: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>> = Default::default();
        let fail = failing.clone();
        let slowed: std::sync::Arc<std::sync::Mutex<Vec<(String, String, Duration)>>> =
            Default::default();
        let slow = slowed.clone();
        let http = reqwest::Client::new();
        let endpoint = poem::endpoint::make(move |req: poem::Request| {
            let target = target.clone();
            let record = record.clone();
            let http = http.clone();
            let refuse = refuse.clone();
            let fail = fail.clone();
            let slow = slow.clone();
            async move {
                let method = req.method().clone();
                let path = req
                    .uri()
                    .path_and_query()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_default();
                if refuse.load(std::sync::atomic::Ordering::Relaxed)
                    && method == poem::http::Method::POST
                    && path == "/connectors"
                {
                    return poem::Response::builder()
                        .status(poem::http::StatusCode::FORBIDDEN)
                        .content_type("application/json")
                        .body(
                            r#"{"error_code":403,"message":"not allowed to create connectors"}"#,
                        );
                }
                let failed = fail
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|(m, suffix)| m == method.as_str() && path.ends_with(suffix.as_str()));
                if failed {
                    record.lock().unwrap().push(ProxiedCall {
                        method: method.to_string(),
                        path: path.clone(),
                        agent: "(failed by the proxy)".into(),
                        at: std::time::Instant::now(),
                    });
                    return poem::Response::builder()
                        .status(poem::http::StatusCode::SERVICE_UNAVAILABLE)
                        .content_type("application/json")
                        .body(r#"{"error_code":503,"message":"worker unavailable (test proxy)"}"#);
                }
                let agent = req
                    .headers()
                    .get("user-agent")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let ctype = req.headers().get("content-type").cloned();
                let body = req.into_body().into_bytes().await.unwrap_or_default();
                let delay = slow
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|(a, suffix, _)| {
                        agent.contains(a.as_str()) && path.ends_with(suffix.as_str())
                    })
                    .map(|(_, _, d)| *d);
                record.lock().unwrap().push(ProxiedCall {
                    method: method.to_string(),
                    path: path.clone(),
                    agent,
                    at: std::time::Instant::now(),
                });
                if let Some(d) = delay {
                    tokio::time::sleep(d).await;
                }
                let mut out = http
                    .request(
                        reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
                        format!("{target}{path}"),
                    )
                    .body(body.to_vec());
                if let Some(ct) = ctype {
                    out = out.header("content-type", ct.to_str().unwrap_or("application/json"));
                }
                match out.send().await {
                    Ok(res) => {
                        let status = res.status().as_u16();
                        let bytes = res.bytes().await.unwrap_or_default();
                        poem::Response::builder()
                            .status(poem::http::StatusCode::from_u16(status).unwrap())
                            .content_type("application/json")
                            .body(bytes.to_vec())
                    }
                    Err(_) => poem::Response::builder()
                        .status(poem::http::StatusCode::BAD_GATEWAY)
                        .body("proxy: Connect unreachable"),
                }
            }
        });
        let task = tokio::spawn(async move {
            let _ = poem::Server::new_with_acceptor(acceptor)
                .run(endpoint)
                .await;
        });
        ConnectProxy {
            url: format!("http://{addr}"),
            calls,
            refuse_creates,
            failing,
            slowed,
            task,
        }
    }

    pub fn snapshot(&self) -> Vec<ProxiedCall> {
        self.calls.lock().unwrap().clone()
    }

    /// From now on, answers `method` calls whose path ends with `suffix` with a 503.
    pub fn fail(&self, method: &str, suffix: &str) {
        self.failing
            .lock()
            .unwrap()
            .push((method.to_string(), suffix.to_string()));
    }

    /// From now on, holds calls whose user agent contains `agent` and whose path ends with
    /// `suffix` for `delay` before forwarding them (recorded on arrival): a process stuck
    /// mid-call, as behind a slow worker.
    pub fn slow(&self, agent: &str, suffix: &str, delay: Duration) {
        self.slowed
            .lock()
            .unwrap()
            .push((agent.to_string(), suffix.to_string(), delay));
    }

    /// Forwards every call again, at once.
    pub fn heal(&self) {
        self.failing.lock().unwrap().clear();
        self.slowed.lock().unwrap().clear();
    }
}

/// Polls `f` every half second until it returns Some, or panics with `what` after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if std::time::Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs `body`, then `cleanup` whether or not `body` panicked, then re-raises the panic: tests
/// that create things in the shared stack always remove them.
pub async fn with_cleanup(
    body: impl std::future::Future<Output = ()>,
    cleanup: impl std::future::Future<Output = ()>,
) {
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(body)).await;
    cleanup.await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Asks for a reconcile pass now (`POST /api/v1/reconciler/pass`).
pub async fn bump(api: &Api) {
    let (status, body) = api
        .post("/api/v1/reconciler/pass", serde_json::json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
}

/// Removes what a capture test leaves in the stack's PostgreSQL: its slot and publication
/// (both named `slot`) and its schema.
pub async fn drop_capture_fixture(s: &Stack, slot: &str, schema: &str) {
    let su = pg_superuser(s).await;
    drop_slot(&su, slot).await;
    let _ = sqlx::query(&format!("DROP PUBLICATION IF EXISTS {slot}"))
        .execute(&su)
        .await;
    let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&su)
        .await;
}

/// A TCP forwarder in front of a stack server that a test can close and open again on the same
/// port: clients see "connection refused" while it is closed, as if the server had stopped,
/// without taking the shared server away from other tests.
pub struct TcpGate {
    port: u16,
    target: String,
    tasks: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl TcpGate {
    /// `target`: an `http://host:port` URL.
    pub async fn start(target: &str) -> TcpGate {
        let target = target
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let mut gate = TcpGate {
            port: free_port(),
            target,
            tasks: Default::default(),
        };
        gate.open().await;
        gate
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub async fn open(&mut self) {
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let (target, tasks) = (self.target.clone(), self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(conn);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    /// Stops listening and cuts every open connection.
    pub fn close(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

impl Drop for TcpGate {
    fn drop(&mut self) {
        self.close();
    }
}

/// An app whose data directory (`data`) outlives the process, so a test can kill it and start
/// another on the same database; with `token`, the admin token made by the first.
pub fn app_on_data(data: &Path, token: Option<String>) -> Api {
    let env = [
        ("CLUECDC_LEASE_TTL", "3s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ];
    let app = spawn_app_on(&binary(), tempfile::tempdir().unwrap(), data, &env);
    let token = token.unwrap_or_else(|| {
        create_user(&app, "ada", "admin");
        create_token(&app, "ada", &[])
    });
    let http = app.client();
    Api { app, token, http }
}

/// SIGKILL: no shutdown, no lease released.
pub async fn kill_hard(app: &TestApp) {
    let killed = Command::new("kill")
        .args(["-KILL", &app.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Registers the stack's Connect through `proxy` and the stack's Kafka in `api`, and points
/// the config provider at it: (kafka cluster id, connect cluster id, provider token).
pub async fn stack_via_proxy(api: &Api, proxy: &ConnectProxy) -> (String, String, String) {
    let s = stack();
    let (status, cluster) = api
        .post(
            "/api/v1/connect-clusters",
            serde_json::json!({"name": "stack", "url": proxy.url}),
        )
        .await;
    assert_eq!(status, 201, "{cluster}");
    let provider_token = cluster["provider_token"].as_str().unwrap().to_string();
    write_provider_file(api, &provider_token);
    let (status, kafka) = api
        .post(
            "/api/v1/kafka-clusters",
            serde_json::json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{kafka}");
    (
        kafka["id"].as_str().unwrap().to_string(),
        cluster["id"].as_str().unwrap().to_string(),
        provider_token,
    )
}

/// Points the stack's Connect config provider at `api` with the given token (through the
/// provider router when the suite runs one: see [`ProviderLock`]).
pub fn write_provider_file(api: &Api, provider_token: &str) {
    let file = provider_route()
        .map(|f| f.display().to_string())
        .unwrap_or_else(|| {
            std::env::var("CLUECDC_PROVIDER_FILE")
                .expect("CLUECDC_PROVIDER_FILE from `scripts/stack env`")
        });
    let tmp = format!("{file}.tmp");
    std::fs::write(
        &tmp,
        format!("url={}\ntoken={provider_token}\n", api.app.url),
    )
    .unwrap();
    std::fs::rename(&tmp, &file).unwrap();
}

/// Waits for an operation to end (up to 2 minutes); its JSON.
pub async fn operation_ends(api: &Api, id: &str) -> serde_json::Value {
    eventually(Duration::from_secs(120), "the operation ends", || async {
        let (_, op) = api.get(&format!("/api/v1/operations/{id}")).await;
        (op["state"] != "running").then_some(op)
    })
    .await
}

/// The stack's https front (`scripts/stack.d/tls-front.py`) on a free port in front of
/// `backend` (`host:port` or an `http://` URL), presenting the stack's server certificate (the
/// test CA's, for 127.0.0.1). The process is killed when this is dropped.
pub struct TlsFront {
    pub port: u16,
    child: Child,
}

impl TlsFront {
    pub async fn start(backend: &str) -> TlsFront {
        let backend = backend
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let tls = PathBuf::from(var("TLS_CA_FILE"))
            .parent()
            .unwrap()
            .to_path_buf();
        let port = free_port();
        let python = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let child = Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/stack.d/tls-front.py"
            ))
            .arg(format!("127.0.0.1:{port}"))
            .arg(&backend)
            .arg(tls.join("server.pem"))
            .arg(tls.join("server.key"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the TLS front");
        let front = TlsFront { port, child };
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the TLS front on {port} did not listen within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        front
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cluecdc ARGS --data-dir DIR` with `env`, off the async runtime (the test's Connect proxy
/// keeps serving meanwhile): (success, stdout, stderr).
pub async fn cli(data: &Path, args: &[&str], env: &[(String, String)]) -> (bool, String, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("CLUECDC_DATA_DIR")
        .env("CLUECDC_LOG", "warn");
    store_env(&mut cmd, data);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Creates a connection and runs its test: (connection, report).
pub async fn test_connection(
    api: &Api,
    body: serde_json::Value,
) -> (serde_json::Value, serde_json::Value) {
    let c = api.connection(body).await;
    let (status, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    (c, report)
}

// ---- every API response held to the OpenAPI document ----------------------------------------

/// The OpenAPI document the server serves, and the check every response of [`Api::call`] passes:
/// the operation is found by method and path template, the status must be documented for it
/// (explicitly, by range, or by `default`), and a JSON body must match the documented schema
/// (JSON Schema 2020-12, `#/components/schemas/…` resolved in the whole document).
pub mod contract {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use serde_json::Value;

    /// An OpenAPI 3.1 document, each response schema compiled once.
    pub struct Document {
        doc: Value,
        /// The servers' path prefix (`servers[0].url` when it is a path), stripped before matching.
        base: String,
        compiled: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
    }

    /// The operation a request is an instance of.
    pub struct Operation<'a> {
        pub template: &'a str,
        pub op: &'a Value,
    }

    impl Document {
        pub fn new(doc: Value) -> Document {
            let base = doc["servers"][0]["url"]
                .as_str()
                .filter(|u| u.starts_with('/'))
                .unwrap_or("")
                .trim_end_matches('/')
                .to_string();
            Document {
                doc,
                base,
                compiled: Mutex::default(),
            }
        }

        /// The operation for `method` on `path` (its query string ignored). A templated segment
        /// (`{id}`) matches any one non-empty segment; where several templates match, literal
        /// segments win from the left (`/deliveries/preview` over `/deliveries/{id}`): OpenAPI
        /// matches concrete paths before templated ones.
        pub fn operation(&self, method: &str, path: &str) -> Option<Operation<'_>> {
            let path = path.split(['?', '#']).next().unwrap_or_default();
            let path = path.strip_prefix(self.base.as_str()).unwrap_or(path);
            let segments: Vec<&str> = path.split('/').collect();
            let method = method.to_ascii_lowercase();
            let mut best: Option<(Vec<bool>, &str, &Value)> = None;
            for (template, item) in self.doc["paths"].as_object()? {
                let templ: Vec<&str> = template.split('/').collect();
                if templ.len() != segments.len() {
                    continue;
                }
                let mut literal = Vec::with_capacity(templ.len());
                let matches = templ.iter().zip(&segments).all(|(t, s)| {
                    let param = t.starts_with('{') && t.ends_with('}');
                    literal.push(!param);
                    if param {
                        !s.is_empty()
                    } else {
                        t == s
                    }
                });
                let Some(op) = item.get(&method).filter(|_| matches) else {
                    continue;
                };
                if best.as_ref().is_none_or(|(b, ..)| literal > *b) {
                    best = Some((literal, template, op));
                }
            }
            best.map(|(_, template, op)| Operation { template, op })
        }

        /// Follows local `$ref`s (`#/components/responses/…`) to the object itself.
        fn resolve<'a>(&'a self, mut v: &'a Value) -> &'a Value {
            for _ in 0..16 {
                let Some(target) = v
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix('#'))
                    .and_then(|ptr| self.doc.pointer(ptr))
                else {
                    break;
                };
                v = target;
            }
            v
        }

        /// Checks one response; `Err` lists every way it differs from the document.
        pub fn check(
            &self,
            method: &str,
            path: &str,
            status: u16,
            content_type: Option<&str>,
            body: &str,
        ) -> Result<(), Vec<String>> {
            let Some(Operation { template, op }) = self.operation(method, path) else {
                // The router's answer for a route the API does not have: no document can list it.
                if matches!(status, 404 | 405) {
                    return Ok(());
                }
                return Err(vec![format!(
                    "the document has no operation for {method} {path}"
                )]);
            };
            let responses = &op["responses"];
            let code = status.to_string();
            let range = format!("{}XX", status / 100);
            let Some((key, response)) = [code.as_str(), range.as_str(), "default"]
                .into_iter()
                .find_map(|k| responses.get(k).map(|r| (k, self.resolve(r))))
            else {
                let documented: Vec<&String> = responses
                    .as_object()
                    .map(|m| m.keys().collect())
                    .unwrap_or_default();
                return Err(vec![format!(
                    "status {status} is not documented for {method} {template} (documented: {documented:?})"
                )]);
            };
            let Some(content) = response
                .get("content")
                .and_then(Value::as_object)
                .filter(|c| !c.is_empty())
            else {
                // An explicit status without content declares an empty body; `default` without
                // content says nothing about the body (how a not-yet-typed operation appears).
                if key != "default" && !body.trim().is_empty() {
                    return Err(vec![format!(
                        "response {key} of {method} {template} documents no body, but one came"
                    )]);
                }
                return Ok(());
            };
            let actual = content_type
                .and_then(|c| c.split(';').next())
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            let Some((media, media_object)) =
                content.iter().find(|(m, _)| media_matches(m, &actual))
            else {
                let documented: Vec<&String> = content.keys().collect();
                return Err(vec![format!(
                    "content type {actual:?} is not documented for response {key} of {method} {template} (documented: {documented:?})"
                )]);
            };
            let Some(schema) = media_object.get("schema") else {
                return Ok(());
            };
            if !is_json(&actual) {
                return Ok(());
            }
            let instance: Value = serde_json::from_str(body).map_err(|e| {
                vec![format!(
                    "the body is not JSON ({e}) though its content type is {actual}"
                )]
            })?;
            let validator =
                self.validator(&format!("{method} {template} {key} {media}"), schema)?;
            let errors: Vec<String> = validator
                .iter_errors(&instance)
                .map(|e| format!("at \"{}\": {e}", e.instance_path()))
                .collect();
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors)
            }
        }

        fn validator(
            &self,
            key: &str,
            schema: &Value,
        ) -> Result<Arc<jsonschema::Validator>, Vec<String>> {
            let mut cache = self.compiled.lock().unwrap();
            if let Some(v) = cache.get(key) {
                return Ok(v.clone());
            }
            // The schema is put at the root of a copy of the whole document, so its
            // `#/components/schemas/…` references resolve there; the document's own fields
            // (`openapi`, `info`, `paths`, `components`) are no JSON Schema keywords and are
            // ignored by the validator.
            let root = match schema {
                Value::Object(s) => {
                    let mut root = self.doc.as_object().cloned().unwrap_or_default();
                    root.extend(s.iter().map(|(k, v)| (k.clone(), v.clone())));
                    Value::Object(root)
                }
                other => other.clone(),
            };
            let validator = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .should_validate_formats(true)
                .with_keyword("writeOnly", write_only)
                .build(&root)
                .map_err(|e| {
                    vec![format!(
                        "the document's schema for {key} does not compile: {e}"
                    )]
                })?;
            let validator = Arc::new(validator);
            cache.insert(key.to_string(), validator.clone());
            Ok(validator)
        }
    }

    fn media_matches(documented: &str, actual: &str) -> bool {
        let documented = documented
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        documented == actual
            || documented == "*/*"
            || documented
                .strip_suffix("/*")
                .is_some_and(|t| actual.split('/').next() == Some(t))
    }

    fn is_json(media: &str) -> bool {
        media == "application/json" || media.ends_with("+json")
    }

    /// `writeOnly: true` (secret fields): present in a response is a failure, since OpenAPI says
    /// such a property is not sent in responses. JSON Schema only annotates it, hence a keyword.
    fn write_only<'a>(
        _parent: &'a serde_json::Map<String, Value>,
        value: &'a Value,
        _path: jsonschema::paths::Location,
    ) -> Result<Box<dyn for<'i> jsonschema::Keyword<'i>>, jsonschema::ValidationError<'a>> {
        Ok(Box::new(WriteOnly(value == &Value::Bool(true))))
    }

    struct WriteOnly(bool);

    impl<'i> jsonschema::Keyword<'i> for WriteOnly {
        fn validate(&self, instance: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
            if self.0 {
                Err(jsonschema::ValidationError::custom(
                    "a writeOnly property (a secret) is in a response",
                ))
            } else {
                let _ = instance;
                Ok(())
            }
        }
        fn is_valid(&self, _instance: &'i Value) -> bool {
            !self.0
        }
    }

    static DOCUMENT: tokio::sync::OnceCell<Document> = tokio::sync::OnceCell::const_new();

    /// The document the binary under test serves (`cluecdc openapi` prints the same one), read
    /// once per test process.
    pub async fn document(_base_url: &str) -> &'static Document {
        DOCUMENT
            .get_or_init(|| async {
                let out = std::process::Command::new(super::binary())
                    .arg("openapi")
                    .output()
                    .unwrap();
                assert!(out.status.success(), "cluecdc openapi failed");
                Document::new(serde_json::from_slice(&out.stdout).unwrap())
            })
            .await
    }

    /// Panics, naming the call, when a response to an `/api/v1` request differs from the
    /// document. Pages, `/metrics` and the like, which the client also fetches, are no part of it.
    pub async fn assert_documented(
        base_url: &str,
        method: &str,
        path: &str,
        status: u16,
        content_type: Option<&str>,
        body: &str,
    ) {
        if !path.starts_with("/api/v1/") {
            return;
        }
        let doc = document(base_url).await;
        if let Err(errors) = doc.check(method, path, status, content_type, body) {
            let shown: String = body.chars().take(2000).collect();
            let cut = if shown.len() < body.len() {
                " …(cut)"
            } else {
                ""
            };
            panic!(
                "the response does not match the OpenAPI document: {method} {path} → {status} ({})\n  - {}\nbody: {shown}{cut}",
                content_type.unwrap_or("no content type"),
                errors.join("\n  - ")
            );
        }
    }

    #[cfg(test)]
    mod tests {
        use super::Document;
        use serde_json::json;

        /// A small hand-written document: a templated path beside a literal one, an explicit
        /// status, a range, a `default`, a `$ref`'d component, a secret and a date-time.
        fn doc() -> Document {
            Document::new(json!({
                "openapi": "3.1.0",
                "info": {"title": "t", "version": "1"},
                "paths": {
                    "/api/v1/things": {
                        "get": {"responses": {"200": {"description": "list", "content": {"application/json": {"schema": {
                            "type": "object", "required": ["items"],
                            "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Thing"}}}
                        }}}}}},
                        "post": {"responses": {
                            "201": {"description": "made", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                            "4XX": {"$ref": "#/components/responses/Error"}
                        }}
                    },
                    "/api/v1/things/{id}": {
                        "get": {"responses": {
                            "200": {"description": "one", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                            "404": {"$ref": "#/components/responses/Error"}
                        }},
                        "delete": {"responses": {"204": {"description": "gone"}}}
                    },
                    "/api/v1/things/preview": {
                        "get": {"responses": {"200": {"description": "preview", "content": {"application/json": {"schema": {"type": "object", "required": ["preview"]}}}}}}
                    },
                    "/api/v1/things/{id}/export": {
                        "get": {"responses": {"200": {"description": "yaml", "content": {"application/yaml": {"schema": {"type": "string"}}}}}}
                    },
                    "/api/v1/legacy": {"get": {"responses": {"default": {"description": "not yet described"}}}}
                },
                "components": {
                    "schemas": {
                        "Thing": {"type": "object", "required": ["id", "name", "created_at"], "additionalProperties": false, "properties": {
                            "id": {"type": "string"},
                            "name": {"type": "string"},
                            "created_at": {"type": "string", "format": "date-time"},
                            "kind": {"enum": ["a", "b"]},
                            "password": {"type": "string", "writeOnly": true}
                        }},
                        "ApiError": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                            "code": {"enum": ["not_found", "invalid"]}, "message": {"type": "string"}
                        }}}}
                    },
                    "responses": {"Error": {"description": "an error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApiError"}}}}}
                }
            }))
        }

        const JSON: Option<&str> = Some("application/json; charset=utf-8");
        const THING: &str =
            r#"{"id": "t1", "name": "one", "created_at": "2026-12-04T15:00:00Z", "kind": "a"}"#;

        #[test]
        fn a_path_finds_its_template_with_literal_segments_winning_and_the_query_ignored() {
            let d = doc();
            let t = |m: &str, p: &str| d.operation(m, p).map(|o| o.template.to_string());
            assert_eq!(
                t("GET", "/api/v1/things/abc").as_deref(),
                Some("/api/v1/things/{id}")
            );
            assert_eq!(
                t("get", "/api/v1/things/abc?x=1").as_deref(),
                Some("/api/v1/things/{id}")
            );
            assert_eq!(
                t("GET", "/api/v1/things/preview").as_deref(),
                Some("/api/v1/things/preview")
            );
            assert_eq!(
                t("DELETE", "/api/v1/things/preview").as_deref(),
                Some("/api/v1/things/{id}")
            );
            assert_eq!(
                t("GET", "/api/v1/things/abc/export").as_deref(),
                Some("/api/v1/things/{id}/export")
            );
            assert_eq!(
                t("GET", "/api/v1/things/").as_deref(),
                None,
                "an empty segment is no id"
            );
            assert_eq!(t("GET", "/api/v1/things/a/b").as_deref(), None);
            assert_eq!(t("PUT", "/api/v1/things/abc").as_deref(), None);
        }

        #[test]
        fn a_documented_response_whose_body_matches_passes() {
            let d = doc();
            assert_eq!(
                d.check("GET", "/api/v1/things/t1", 200, JSON, THING),
                Ok(())
            );
            let list = format!(r#"{{"items": [{THING}]}}"#);
            assert_eq!(
                d.check("GET", "/api/v1/things?limit=5", 200, JSON, &list),
                Ok(())
            );
            let err = r#"{"error": {"code": "not_found", "message": "no such thing"}}"#;
            assert_eq!(d.check("GET", "/api/v1/things/x", 404, JSON, err), Ok(()));
            assert_eq!(d.check("DELETE", "/api/v1/things/x", 204, None, ""), Ok(()));
        }

        #[test]
        fn a_status_the_operation_does_not_document_is_an_error() {
            let e = doc()
                .check("GET", "/api/v1/things/t1", 500, JSON, "{}")
                .unwrap_err();
            assert!(
                e[0].contains("status 500 is not documented for GET /api/v1/things/{id}"),
                "{e:?}"
            );
            let e = doc()
                .check("DELETE", "/api/v1/things/t1", 200, None, "")
                .unwrap_err();
            assert!(e[0].contains("status 200 is not documented"), "{e:?}");
        }

        #[test]
        fn a_body_that_does_not_match_its_schema_is_an_error_naming_where() {
            let d = doc();
            let bad = r#"{"id": 7, "created_at": "yesterday", "kind": "c", "extra": 1}"#;
            let e = d
                .check("GET", "/api/v1/things/t1", 200, JSON, bad)
                .unwrap_err();
            let all = e.join("\n");
            for what in [
                "\"name\" is a required property",
                "at \"/id\"",
                "at \"/created_at\"",
                "at \"/kind\"",
                "extra",
            ] {
                assert!(all.contains(what), "{what} missing from {all}");
            }
            // Through a $ref'd component, in an array, and through a $ref'd response object.
            let e = d
                .check(
                    "GET",
                    "/api/v1/things",
                    200,
                    JSON,
                    r#"{"items": [{"id": "x"}]}"#,
                )
                .unwrap_err();
            assert!(e.join(" ").contains("at \"/items/0\""), "{e:?}");
            let e = d
                .check(
                    "POST",
                    "/api/v1/things",
                    422,
                    JSON,
                    r#"{"error": {"code": "nope", "message": "m"}}"#,
                )
                .unwrap_err();
            assert!(e.join(" ").contains("at \"/error/code\""), "{e:?}");
            let e = d
                .check("GET", "/api/v1/things/t1", 200, JSON, "not json")
                .unwrap_err();
            assert!(e[0].contains("not JSON"), "{e:?}");
        }

        #[test]
        fn a_secret_marked_write_only_in_a_response_is_an_error() {
            let leak = r#"{"id": "t1", "name": "one", "created_at": "2026-12-04T15:00:00Z", "password": "hunter2"}"#;
            let e = doc()
                .check("GET", "/api/v1/things/t1", 200, JSON, leak)
                .unwrap_err();
            assert!(e.join(" ").contains("writeOnly"), "{e:?}");
        }

        #[test]
        fn the_content_type_must_be_one_the_response_documents() {
            let d = doc();
            let e = d
                .check("GET", "/api/v1/things/t1", 200, Some("text/html"), "<p>")
                .unwrap_err();
            assert!(
                e[0].contains("content type \"text/html\" is not documented"),
                "{e:?}"
            );
            assert_eq!(
                d.check(
                    "GET",
                    "/api/v1/things/t1/export",
                    200,
                    Some("application/yaml"),
                    "a: 1\n"
                ),
                Ok(())
            );
            let e = d
                .check("DELETE", "/api/v1/things/t1", 204, None, "{}")
                .unwrap_err();
            assert!(e[0].contains("documents no body"), "{e:?}");
        }

        #[test]
        fn a_default_response_without_a_schema_accepts_any_status_and_body() {
            let d = doc();
            for (status, body) in [(200, "[1]"), (401, "{}"), (503, "down")] {
                assert_eq!(d.check("GET", "/api/v1/legacy", status, JSON, body), Ok(()));
            }
        }

        #[tokio::test]
        async fn pages_and_metrics_fetched_by_the_client_are_not_held_to_the_api_document() {
            // Nothing listens on port 9: a check would have to fetch the document and panic.
            for path in ["/", "/metrics", "/connections/x/edit"] {
                super::assert_documented("http://127.0.0.1:9", "GET", path, 200, None, "<p>").await;
            }
        }

        #[test]
        fn a_route_the_document_lacks_is_an_error_unless_the_router_refused_it() {
            let d = doc();
            let e = d
                .check("GET", "/api/v1/other", 200, JSON, "{}")
                .unwrap_err();
            assert!(e[0].contains("no operation for GET /api/v1/other"), "{e:?}");
            assert_eq!(d.check("GET", "/api/v1/other", 404, JSON, "{}"), Ok(()));
            assert_eq!(d.check("PUT", "/api/v1/things/x", 405, None, ""), Ok(()));
        }
    }
}

/// `bench/connect_standin.py` serving `n` Connect stand-ins (one process, a port each), for
/// scenarios with more Connect clusters than the stack runs. Stopped when dropped.
pub struct ConnectStandins {
    pub urls: Vec<String>,
    child: Child,
}

impl ConnectStandins {
    pub async fn start(n: usize) -> ConnectStandins {
        let python = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let mut cmd = Command::new(python);
        cmd.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/bench/connect_standin.py"
        ));
        // Port 0: each binds a free port itself and prints its URL (a port chosen here could
        // be taken by the time it binds).
        for _ in 0..n {
            cmd.args(["--port", "0"]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs bench/connect_standin.py");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("connect stand-in on ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let mut standins = ConnectStandins {
            urls: Vec::new(),
            child,
        };
        while standins.urls.len() < n {
            match rx.recv_timeout(Duration::from_secs(15)) {
                Ok(url) => standins.urls.push(url),
                Err(_) => panic!(
                    "bench/connect_standin.py started {} of {n} stand-ins within 15 s",
                    standins.urls.len()
                ),
            }
        }
        standins
    }

    /// Every later Connect call to the stand-in at `url` answered `ms` late.
    pub async fn set_latency(url: &str, ms: u64) {
        let res = reqwest::Client::new()
            .put(format!("{url}/standin/latency"))
            .json(&serde_json::json!({ "ms": ms }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 204);
    }

    /// The connector `name` on the stand-in at `url` FAILED with `trace` (also after restarts).
    pub async fn fail(url: &str, name: &str, trace: &str) {
        let res = reqwest::Client::new()
            .put(format!("{url}/standin/connectors/{name}/fail"))
            .json(&serde_json::json!({ "trace": trace }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 204);
    }
}

impl Drop for ConnectStandins {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
