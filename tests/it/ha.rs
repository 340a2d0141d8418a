//! High availability (issue 33): three `serve` replicas on one PostgreSQL database behind
//! HAProxy (`scripts/stack lb`, round robin, no stickiness), the stack's real Kafka and Connect
//! (behind the test's recording proxy, which names each call's process by its user agent).
//! Through the load balancer only: a browser session and an API client keep working while
//! their requests hop replicas; a change made on a replica that does not reconcile wakes the
//! one that does within a second (interval 60 s); the reconciler's lease holder is SIGKILLed
//! mid-burst of 50 pipeline creates and a replay, another replica takes the lease within the
//! TTL, every acknowledged create exists exactly once, the replay finishes; a holder paused
//! (SIGSTOP) mid-pass past its lease and resumed writes nothing after the take-over.
//!
//! The one retry the clients are allowed: a request whose replica died under it (transport
//! error, or 502/503/504 from the load balancer) is sent again through the load balancer; for a
//! create, a 409 "already exists" answering the retry means the first attempt committed, and it
//! counts as acknowledged.

use std::collections::{BTreeMap, BTreeSet};

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::*;

const TTL: Duration = Duration::from_secs(3);
const BURST: usize = 50;

/// The replicas' shared settings: one store, one master key, a short lease, an interval so long
/// that only a wake explains a pass within a second.
struct Shared {
    url: String,
    password: String,
    master_key: String,
}

impl Shared {
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CLUECDC_DATABASE_URL", self.url.clone()),
            ("CLUECDC_DATABASE_PASSWORD", self.password.clone()),
            ("CLUECDC_MASTER_KEY", self.master_key.clone()),
        ]
    }

    /// `cluecdc ARGS` on the shared store (the password of `user create` on standard input).
    fn cli(&self, args: &[&str], stdin: Option<&str>) -> String {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(binary())
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .env_remove("CLUECDC_DATA_DIR")
            .env("CLUECDC_LOG", "warn")
            .envs(self.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "cluecdc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}

/// What one request through the load balancer got, and which request id the replica gave it.
struct Answer {
    status: u16,
    body: Value,
    request_id: String,
}

/// The API client: a token, the load balancer's address, nothing else.
struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

fn lb_failed(status: u16) -> bool {
    matches!(status, 502..=504)
}

impl Client {
    async fn once(
        &self,
        method: &reqwest::Method,
        path: &str,
        body: &Option<Value>,
    ) -> Result<Answer, String> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let res = req.send().await.map_err(|e| e.to_string())?;
        let status = res.status().as_u16();
        let request_id = res
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = res.text().await.map_err(|e| e.to_string())?;
        if lb_failed(status) {
            return Err(format!("{status} from the load balancer: {text}"));
        }
        Ok(Answer {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
            request_id,
        })
    }

    /// One request; sent again (up to 3 times) only when its replica died under it. The bool
    /// says whether it was retried.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (Answer, bool) {
        let mut last = String::new();
        for attempt in 0..4 {
            match self.once(&method, path, &body).await {
                Ok(a) => return (a, attempt > 0),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        panic!("{method} {path}: no replica answered: {last}")
    }

    async fn get(&self, path: &str) -> Answer {
        self.call(reqwest::Method::GET, path, None).await.0
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.call(reqwest::Method::POST, path, Some(body)).await.0
    }

    async fn created(&self, path: &str, body: Value) -> Value {
        let a = self.post(path, body).await;
        assert_eq!(a.status, 201, "POST {path}: {}", a.body);
        a.body
    }
}

/// Which replica (index) logged the request id (each logs `request_id=… handled`).
fn served_by(replicas: &[TestApp], request_id: &str) -> Option<usize> {
    replicas
        .iter()
        .position(|r| !request_id.is_empty() && r.log().contains(request_id))
}

fn pid_of_holder(holder: &str) -> u32 {
    // `serve@HOST:PID:RANDOM`
    holder.rsplit(':').nth(1).unwrap().parse().unwrap()
}

async fn lease(db: &sqlx::AnyPool, name: &str) -> Option<(String, i64, i64)> {
    sqlx::query_as("SELECT holder, expires_at, epoch FROM leases WHERE name = $1")
        .bind(name)
        .fetch_optional(db)
        .await
        .unwrap()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The live holder of a lease, if any.
async fn holder(db: &sqlx::AnyPool, name: &str) -> Option<String> {
    lease(db, name)
        .await
        .filter(|(_, expires, _)| *expires > now_ms())
        .map(|(h, _, _)| h)
}

/// Waits (polling every 50 ms) until a holder other than `old` holds the reconciler lease:
/// who, and how long after `since`.
async fn taken_over(db: &sqlx::AnyPool, old: &str, since: Instant) -> (String, Duration) {
    loop {
        if let Some(n) = holder(db, "reconciler").await.filter(|n| n != old) {
            return (n, since.elapsed());
        }
        assert!(
            since.elapsed() < TTL * 4,
            "nobody took the lease from {old}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// The first call after `after` by the reconciler of `agent_part`, whose method is not GET and
/// whose path satisfies `path`: when the reconciler acted.
fn acted(proxy: &ConnectProxy, after: Instant, path: impl Fn(&str) -> bool) -> Option<ProxiedCall> {
    proxy.snapshot().into_iter().find(|c| {
        c.at >= after
            && c.method != "GET"
            && c.agent.contains("cluecdc-reconciler")
            && path(&c.path)
    })
}

async fn connect_names(connect: &str) -> BTreeSet<String> {
    reqwest::get(format!("{connect}/connectors"))
        .await
        .unwrap()
        .json::<Vec<String>>()
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test]
async fn three_replicas_behind_haproxy_keep_sessions_wake_the_reconciler_survive_a_killed_lease_holder_mid_burst_and_fence_a_paused_one(
) {
    // A Connect worker of its own: one such test at a time across the engines' runs.
    let _heavy = heavy_exclusive().await;
    let started = Instant::now();
    let s = stack();
    let tag = format!(
        "{}{}",
        std::process::id() % 1000,
        &uuid::Uuid::new_v4().simple().to_string()[..5]
    );
    let database = format!("cluecdc_ha_{tag}");
    let schema = format!("ha_{tag}");
    let lb_name = format!("ha-{tag}");
    // A Connect cluster of its own (one worker, the stack's plugins and the config provider,
    // reading this test's provider file): 50 connectors stay off the shared worker, and the
    // shared provider file is not this test's to hold for minutes.
    let connect_name = format!("ha-{tag}");
    let connect_port = free_port().to_string();
    let connect_url = format!("http://127.0.0.1:{connect_port}");
    let provider_dir = tempfile::tempdir().unwrap();
    let provider_file = provider_dir.path().join("cluecdc-provider.properties");
    let (url, password) = fresh_postgres_database(&database);
    let shared = Shared {
        url,
        password,
        master_key: base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>()),
    };
    let replicas: Mutex<Vec<TestApp>> = Mutex::new(Vec::new());
    let stopped: Mutex<Option<u32>> = Mutex::new(None);

    let body = async {
        // Three replicas started together: they migrate the empty database once, under the lock.
        let env = shared.env();
        let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend([
            ("CLUECDC_LEASE_TTL", "3s"),
            ("CLUECDC_RECONCILE_INTERVAL", "60s"),
            ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
            ("CLUECDC_LOG", "info,cluecdc::reconcile=debug"),
        ]);
        let apps: Vec<TestApp> = std::thread::scope(|scope| {
            scope.spawn(|| {
                stack_cmd(&[
                    "cluster",
                    "up",
                    &connect_name,
                    &connect_port,
                    "--provider-file",
                    provider_file.to_str().unwrap(),
                    "--heap",
                    "768m",
                ])
            });
            let handles: Vec<_> = (0..3)
                .map(|_| {
                    let env = &env;
                    scope.spawn(move || {
                        let dir = tempfile::tempdir().unwrap();
                        let data = dir.path().join("data");
                        pin_sqlite(&data);
                        spawn_app_on(&binary(), dir, &data, env)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let backends: Vec<String> = apps
            .iter()
            .map(|a| a.url.trim_start_matches("http://").to_string())
            .collect();
        *replicas.lock().unwrap() = apps;
        let lb_port = free_port().to_string();
        let mut args = vec!["lb", "up", lb_name.as_str(), lb_port.as_str()];
        args.extend(backends.iter().map(String::as_str));
        stack_cmd(&args);
        let base = format!("http://127.0.0.1:{lb_port}");
        eprintln!(
            "3 replicas, a Connect worker and the load balancer up after {:?}",
            started.elapsed()
        );

        shared.cli(
            &["user", "create", "--name", "ada", "--role", "admin"],
            Some(&format!("{PASSWORD}\n")),
        );
        let token = shared.cli(&["token", "create", "--user", "ada"], None);
        let api = Client {
            base: base.clone(),
            token,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };

        // ---- a browser session and an API client, hopping replicas --------------------------
        let browser = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let mut browser_ids = Vec::new();
        let login = browser.get(format!("{base}/login")).send().await.unwrap();
        browser_ids.push(
            login.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
        let login_csrf = hidden_value(&login.text().await.unwrap(), "csrf_token").unwrap();
        let res = browser
            .post(format!("{base}/login"))
            .form(&[
                ("name", "ada"),
                ("password", PASSWORD),
                ("next", "/"),
                ("csrf_token", &login_csrf),
            ])
            .send()
            .await
            .unwrap();
        browser_ids.push(res.headers()["x-request-id"].to_str().unwrap().to_string());
        assert_eq!(res.status(), 303, "sign-in through the load balancer");
        let mut csrf = None;
        for page in [
            "/",
            "/pipelines",
            "/connections",
            "/deliveries",
            "/settings/users",
            "/",
        ] {
            let res = browser.get(format!("{base}{page}")).send().await.unwrap();
            browser_ids.push(res.headers()["x-request-id"].to_str().unwrap().to_string());
            assert_eq!(
                res.status(),
                200,
                "{page}: the session holds on every replica"
            );
            let html = res.text().await.unwrap();
            csrf = csrf.or_else(|| hidden_value(&html, "csrf_token"));
        }
        let res = browser
            .post(format!("{base}/settings/users"))
            .form(&[
                ("name", "bea"),
                ("role", "viewer"),
                ("password", "a very long password"),
                ("csrf_token", csrf.as_deref().unwrap()),
            ])
            .send()
            .await
            .unwrap();
        browser_ids.push(res.headers()["x-request-id"].to_str().unwrap().to_string());
        assert_eq!(
            res.status(),
            303,
            "the CSRF-protected form, its token from another replica"
        );
        let mut api_ids = Vec::new();
        for _ in 0..6 {
            let a = api.get("/api/v1/users").await;
            assert_eq!(a.status, 200, "{}", a.body);
            assert!(a.body.to_string().contains("\"bea\""), "{}", a.body);
            api_ids.push(a.request_id);
        }
        {
            let apps = replicas.lock().unwrap();
            for (who, ids) in [("browser", &browser_ids), ("API client", &api_ids)] {
                let hops: BTreeSet<usize> = ids
                    .iter()
                    .map(|id| {
                        served_by(&apps, id).unwrap_or_else(|| panic!("no replica logged {id}"))
                    })
                    .collect();
                eprintln!("{who}: {} requests served by replicas {hops:?}", ids.len());
                assert_eq!(
                    hops.len(),
                    3,
                    "round robin: the {who}'s requests landed on all three"
                );
            }
        }

        // ---- the stack's Kafka and Connect (through the recording proxy) --------------------
        let proxy = ConnectProxy::start(&connect_url).await;
        let cluster = api
            .created(
                "/api/v1/connect-clusters",
                json!({"name": "stack", "url": proxy.url}),
            )
            .await;
        std::fs::write(
            &provider_file,
            format!(
                "url={base}\ntoken={}\n",
                cluster["provider_token"].as_str().unwrap()
            ),
        )
        .unwrap();
        let kafka = api
            .created(
                "/api/v1/kafka-clusters",
                json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
            )
            .await;
        let mut src = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
            .await
            .unwrap();
        for sql in [
            format!("CREATE SCHEMA {schema}"),
            format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name text NOT NULL)"),
            format!("INSERT INTO {schema}.items VALUES (1, 'one')"),
        ] {
            sqlx::query(&sql).execute(&mut src).await.unwrap();
        }
        let source = api.created("/api/v1/connections", json!({"name": "pg", "provider": "POSTGRESQL",
            "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": schema, "publication_name": schema},
            "secrets": {"password": s.pg_password}})).await;
        let lake = api.created("/api/v1/connections", json!({"name": "lake", "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": format!("ha-{tag}/"), "path_style": true, "use_ssl": false},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})).await;
        let pipeline_body = |i: usize| {
            json!({"name": format!("ha {tag} {i}"), "source_connection_id": source["id"], "kafka_cluster_id": kafka["id"],
                "connect_cluster_id": cluster["id"], "tables": [format!("{schema}.items")], "topic_prefix": format!("ha-{tag}-{i}"),
                "snapshot_mode": "no_data"})
        };
        let base_pipeline = api.created("/api/v1/pipelines", pipeline_body(0)).await;
        let base_connector = format!("cluecdc-capture-ha-{tag}-0");
        let delivery = api
            .created(
                "/api/v1/deliveries",
                json!({"name": format!("ha {tag} lake"),
            "pipeline_id": base_pipeline["id"], "destination_connection_id": lake["id"]}),
            )
            .await;
        let (_, d_connector) = {
            let a = api
                .get(&format!(
                    "/api/v1/connectors/{}",
                    delivery["connector_id"].as_str().unwrap()
                ))
                .await;
            (a.status, a.body["name"].as_str().unwrap().to_string())
        };
        wait_running(&connect_url, &base_connector, Duration::from_secs(120)).await;
        wait_running(&connect_url, &d_connector, Duration::from_secs(120)).await;
        let db = {
            sqlx::any::install_default_drivers();
            let u = shared
                .url
                .replacen("postgres@", &format!("postgres:{}@", shared.password), 1);
            sqlx::AnyPool::connect(&u).await.unwrap()
        };
        eprintln!("setup done after {:?}", started.elapsed());

        // ---- a change on one replica wakes the reconciler on another --------------------------
        let h = holder(&db, "reconciler")
            .await
            .expect("a replica holds the reconciler lease");
        let holder_index = {
            let apps = replicas.lock().unwrap();
            apps.iter()
                .position(|a| a.child.id() == pid_of_holder(&h))
                .unwrap()
        };
        let mut delays = Vec::new();
        let mut action = "pause";
        for _ in 0..8 {
            let sent = Instant::now();
            let a = api
                .post(
                    &format!(
                        "/api/v1/pipelines/{}/{action}",
                        base_pipeline["id"].as_str().unwrap()
                    ),
                    json!({}),
                )
                .await;
            assert!(a.status < 300, "{action}: {}", a.body);
            let acked = Instant::now();
            let by = served_by(&replicas.lock().unwrap(), &a.request_id).unwrap();
            let suffix = format!("/{base_connector}/{action}");
            let deadline = Instant::now() + Duration::from_secs(5);
            let call = loop {
                if let Some(c) = acted(&proxy, sent, |p| p.ends_with(&suffix)) {
                    break c;
                }
                assert!(
                    Instant::now() < deadline,
                    "the reconciler did not {action} within 5 s"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            let delay = call.at.saturating_duration_since(acked);
            eprintln!(
                "{action} acknowledged by replica {by} (holder: {holder_index}); the holder's reconciler called Connect {delay:?} later"
            );
            if by != holder_index {
                assert!(call.agent.contains(&h), "the holder acted: {}", call.agent);
                delays.push(delay);
            }
            action = if action == "pause" { "resume" } else { "pause" };
            if delays.len() >= 2 && action == "pause" {
                break;
            }
        }
        assert!(
            delays.len() >= 2,
            "two changes made on a replica that does not hold the lease"
        );
        assert!(
            delays.iter().all(|d| *d < Duration::from_secs(1)),
            "woken within a second, interval 60 s: {delays:?}"
        );
        wait_running(&connect_url, &base_connector, Duration::from_secs(60)).await;

        // ---- SIGKILL the lease holder mid-burst of 50 creates and a replay -------------------
        let victim = pid_of_holder(&h);
        let replay_id: Mutex<Option<String>> = Mutex::new(None);
        let acked = AtomicUsize::new(0);
        let killed_at: Mutex<Option<Instant>> = Mutex::new(None);
        let outcomes: Vec<(usize, u16, bool, bool, Value)> = {
            let burst = futures::stream::iter(1..=BURST)
                .map(|i| {
                    let api = &api;
                    let acked = &acked;
                    let tag = &tag;
                    let body = pipeline_body(i);
                    async move {
                        let (a, retried) = api
                            .call(reqwest::Method::POST, "/api/v1/pipelines", Some(body))
                            .await;
                        // A retry refused because the name or prefix is taken: the first
                        // attempt committed if the pipeline is there (by name).
                        let committed = a.status == 201
                            || (retried
                                && api
                                    .get(&format!("/api/v1/pipelines/ha%20{tag}%20{i}"))
                                    .await
                                    .status
                                    == 200);
                        if committed {
                            acked.fetch_add(1, Ordering::SeqCst);
                        }
                        (i, a.status, retried, committed, a.body)
                    }
                })
                .buffer_unordered(10)
                .collect::<Vec<_>>();
            // A few creates in, the replay starts; the holder dies while it waits for the
            // reconciler to stop the delivery's connector.
            let killer = async {
                while acked.load(Ordering::SeqCst) < 3 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let replay = api
                    .post(
                        &format!(
                            "/api/v1/deliveries/{}/replay",
                            delivery["id"].as_str().unwrap()
                        ),
                        json!({"from": "earliest", "confirm": delivery["name"]}),
                    )
                    .await;
                assert_eq!(replay.status, 202, "{}", replay.body);
                let op_id = replay.body["operation_id"].as_str().unwrap().to_string();
                *replay_id.lock().unwrap() = Some(op_id.clone());
                let op = api.get(&format!("/api/v1/operations/{op_id}")).await;
                let ops_holder = holder(&db, "operations").await;
                signal(victim, "-KILL");
                *killed_at.lock().unwrap() = Some(Instant::now());
                eprintln!(
                    "SIGKILLed replica {holder_index} (pid {victim}) after {} acknowledged creates; the replay was at step {} (operations lease: {ops_holder:?})",
                    acked.load(Ordering::SeqCst),
                    op.body["step"]
                );
            };
            let taken = async {
                while killed_at.lock().unwrap().is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let killed = killed_at.lock().unwrap().unwrap();
                taken_over(&db, &h, killed).await
            };
            let (outcomes, (), (new_holder, took)) = tokio::join!(burst, killer, taken);
            eprintln!(
                "{new_holder} took the reconciler lease {took:?} after the kill (TTL {TTL:?})"
            );
            assert!(
                took <= TTL + Duration::from_millis(1000),
                "taken over within the TTL: {took:?}"
            );
            outcomes
        };
        let mut expected = BTreeSet::new();
        let mut retried = 0;
        for (i, status, again, committed, body) in &outcomes {
            retried += usize::from(*again);
            assert!(committed, "create {i}: {status} {body}");
            expected.insert(format!("cluecdc-capture-ha-{tag}-{i}"));
        }
        let op_id = replay_id.lock().unwrap().clone().unwrap();
        eprintln!(
            "{} creates acknowledged ({retried} after a retry)",
            expected.len()
        );
        assert_eq!(expected.len(), BURST);
        // Exactly once in the store: one pipeline and one connector row per name.
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT name, COUNT(*) FROM connectors WHERE name LIKE $1 GROUP BY name",
        )
        .bind(format!("cluecdc-capture-ha-{tag}-%"))
        .fetch_all(&db)
        .await
        .unwrap();
        assert!(rows.iter().all(|(_, n)| *n == 1), "{rows:?}");
        assert_eq!(rows.len(), BURST + 1, "{rows:?}");
        let pipelines: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pipelines")
            .fetch_one(&db)
            .await
            .unwrap();
        assert_eq!(pipelines as usize, BURST + 1);
        // Exactly once in Connect: every acknowledged one, nothing else of this test's.
        let mut want = expected.clone();
        want.insert(base_connector.clone());
        want.insert(d_connector.clone());
        let in_connect = eventually(
            Duration::from_secs(90),
            "every acknowledged create in Connect",
            || async {
                let names: BTreeSet<String> = connect_names(&connect_url)
                    .await
                    .into_iter()
                    .filter(|n| n.contains(&tag))
                    .collect();
                want.is_subset(&names).then_some(names)
            },
        )
        .await;
        assert_eq!(
            in_connect, want,
            "no connector beyond the acknowledged ones"
        );
        let creates: BTreeMap<String, usize> = proxy
            .snapshot()
            .into_iter()
            .filter(|c| c.method == "POST" && c.path == "/connectors")
            .fold(BTreeMap::new(), |mut m, c| {
                *m.entry(c.agent).or_default() += 1;
                m
            });
        eprintln!("connector creates sent to Connect, by process: {creates:?}");
        let op = eventually(Duration::from_secs(120), "the replay ends", || async {
            let a = api.get(&format!("/api/v1/operations/{op_id}")).await;
            (a.body["state"] != "running").then_some(a.body)
        })
        .await;
        assert_eq!(
            op["state"], "done",
            "the replay finished after the kill: {op}"
        );
        eprintln!("burst, kill and replay done after {:?}", started.elapsed());

        // ---- fencing: the new holder paused mid-pass past its lease, then resumed -------------
        let h2 = holder(&db, "reconciler").await.unwrap();
        let pid2 = pid_of_holder(&h2);
        proxy.slow(&h2, "expand=info", Duration::from_secs(12));
        let asked = Instant::now();
        let a = api.post("/api/v1/reconciler/pass", json!({})).await;
        assert_eq!(a.status, 202, "{}", a.body);
        eventually(
            Duration::from_secs(10),
            "the holder's pass stuck on Connect",
            || async {
                proxy
                    .snapshot()
                    .iter()
                    .any(|c| {
                        c.at >= asked && c.agent.contains(&h2) && c.path.ends_with("expand=info")
                    })
                    .then_some(())
            },
        )
        .await;
        let rows_of = |who: String| {
            let db = db.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM reconcile_passes WHERE holder = $1",
                )
                .bind(who)
                .fetch_one(&db)
                .await
                .unwrap()
            }
        };
        signal(pid2, "-STOP");
        *stopped.lock().unwrap() = Some(pid2);
        let paused_at = Instant::now();
        let before = rows_of(h2.clone()).await;
        let (_, epoch2) = lease(&db, "reconciler")
            .await
            .map(|(_, _, e)| ((), e))
            .unwrap();
        let (h3, took) = taken_over(&db, &h2, paused_at).await;
        eprintln!("{h3} took the lease {took:?} after the holder was paused (TTL {TTL:?})");
        assert!(
            took <= TTL + Duration::from_secs(1),
            "taken over within the TTL: {took:?}"
        );
        // A change for the new holder: pipeline 0 paused. The paused one's pass, planned before
        // it, would resume it.
        let a = api
            .post(
                &format!(
                    "/api/v1/pipelines/{}/pause",
                    base_pipeline["id"].as_str().unwrap()
                ),
                json!({}),
            )
            .await;
        assert!(a.status < 300, "{}", a.body);
        let apps_log = |pid: u32| {
            replicas
                .lock()
                .unwrap()
                .iter()
                .find(|a| a.child.id() == pid)
                .map(TestApp::log)
                .unwrap()
        };
        let asked_pause = Instant::now();
        loop {
            let st = connect_status(&connect_url, &base_connector).await;
            if st
                .as_ref()
                .is_some_and(|st| st["connector"]["state"] == "PAUSED")
            {
                break;
            }
            if asked_pause.elapsed() > Duration::from_secs(30) {
                let calls: Vec<String> = proxy
                    .snapshot()
                    .into_iter()
                    .filter(|c| c.at >= paused_at)
                    .map(|c| format!("{:?} {} {} {}", c.at - paused_at, c.agent, c.method, c.path))
                    .collect();
                let log = apps_log(pid_of_holder(&h3));
                let said: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("reconcil") || l.contains("WARN"))
                    .collect();
                panic!(
                    "the new holder did not pause pipeline 0 within 30 s; Connect shows {st:?}; calls since the pause:\n{}\nthe new holder's log:\n{}",
                    calls.join("\n"),
                    said.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let resumes = || {
            let db = db.clone();
            let id = base_pipeline["connector_id"].as_str().unwrap().to_string();
            async move {
                sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM audit_log WHERE action = 'connector.resume' AND target_id = $1")
                    .bind(id)
                    .fetch_one(&db)
                    .await
                    .unwrap()
            }
        };
        let resumes_before = resumes().await;
        proxy.heal();
        let resumed = Instant::now();
        signal(pid2, "-CONT");
        *stopped.lock().unwrap() = None;
        // Its pass, planned before the pause, goes on once Connect answers: the steps stop at the
        // lease check, and the transaction recording what it saw is refused by the fence.
        let said = eventually(
            Duration::from_secs(25),
            "the resumed holder's write refused by the fence",
            || async {
                let log = apps_log(pid2);
                let lines: Vec<String> = log
                    .lines()
                    .filter(|l| {
                        l.contains("lease lost")
                            || l.contains("lost the reconciler lease")
                            || l.contains("write refused")
                    })
                    .map(str::to_string)
                    .collect();
                lines
                    .iter()
                    .any(|l| l.contains("write refused"))
                    .then_some(lines)
            },
        )
        .await;
        for line in &said {
            eprintln!("the resumed former holder said: {line}");
        }
        // Its pass, had it gone on, would have recorded itself in reconcile_passes: nothing.
        // Give it the time of a whole further lease lifetime to try.
        tokio::time::sleep(TTL).await;
        assert_eq!(
            rows_of(h2.clone()).await,
            before,
            "no pass record of the fenced holder after its pause"
        );
        let late: Vec<ProxiedCall> = proxy
            .snapshot()
            .into_iter()
            .filter(|c| c.at >= resumed && c.agent.contains(&h2) && c.method != "GET")
            .collect();
        assert!(
            late.is_empty(),
            "the resumed former holder changed nothing in Connect: {late:?}"
        );
        let (now_holder, _, epoch) = lease(&db, "reconciler").await.unwrap();
        assert_ne!(now_holder, h2, "its renewal was refused");
        assert!(
            epoch > epoch2,
            "a take-over moves the epoch: {epoch2} → {epoch}"
        );
        assert!(
            rows_of(h3.clone()).await > 0,
            "the new holder records its passes"
        );
        assert_eq!(
            resumes().await,
            resumes_before,
            "no resume of pipeline 0 recorded after the pause"
        );
        let st = connect_status(&connect_url, &base_connector).await.unwrap();
        assert_eq!(
            st["connector"]["state"], "PAUSED",
            "pipeline 0 stays paused: {st}"
        );
        eprintln!("whole test {:?}", started.elapsed());
    };

    let cleanup = async {
        if let Some(pid) = stopped.lock().unwrap_or_else(|e| e.into_inner()).take() {
            signal(pid, "-CONT");
        }
        // What each replica said about leases and what it refused or failed at: the story of
        // a failure, and of the take-overs when it passes.
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (i, app) in replicas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .enumerate()
        {
            let log = app.log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("lease"))
                .collect();
            for line in &lines[lines.len().saturating_sub(25)..] {
                eprintln!(
                    "replica {i} (pid {}): {}",
                    app.child.id(),
                    line.chars().take(400).collect::<String>()
                );
            }
        }
        for app in replicas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            let _ = app.child.kill();
            let _ = app.child.wait();
        }
        let _ = Command::new(format!("{}/scripts/stack", env!("CARGO_MANIFEST_DIR")))
            .args(["lb", "down", &lb_name])
            .output();
        let _ = Command::new(format!("{}/scripts/stack", env!("CARGO_MANIFEST_DIR")))
            .args(["cluster", "down", &connect_name])
            .output();
        drop_capture_fixture(&s, &schema, &schema).await;
        drop_postgres_database(&database);
    };
    with_cleanup(body, cleanup).await;
}
