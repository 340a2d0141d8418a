//! Secrets end to end: Kafka Connect resolves `${cluecdc:<ref>:<field>}` through the
//! ClueCDC config provider, stores only the reference, keeps running after rotation, and a
//! canary planted in every secret field appears nowhere it must not, hostile counterparts on
//! loopback included.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::hostile::{assert_nothing_leaked, Hostile, Kind};

pub(crate) fn suffix() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

/// A PostgreSQL role and table of the test's own, so its password can change freely.
pub(crate) struct CaptureFixture {
    pub(crate) pg: sqlx::PgPool,
    role: String,
    table: String,
    pub(crate) slot: String,
}

impl CaptureFixture {
    pub(crate) async fn new(s: &Stack, role: &str, password: &str) -> Self {
        let pg = pg_superuser(s).await;
        let table = format!("t_{role}");
        for sql in [
            format!("CREATE ROLE {role} LOGIN REPLICATION PASSWORD '{password}'"),
            format!(
                "GRANT CONNECT, CREATE ON DATABASE {} TO {role}",
                s.pg_source_db
            ),
            format!("CREATE TABLE public.{table} (id bigint PRIMARY KEY, note text)"),
            format!("ALTER TABLE public.{table} OWNER TO {role}"),
        ] {
            sqlx::query(&sql).execute(&pg).await.unwrap();
        }
        CaptureFixture {
            pg,
            role: role.to_string(),
            table,
            slot: role.to_string(),
        }
    }

    pub(crate) async fn slot_pid(&self) -> Option<i32> {
        sqlx::query_scalar(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active",
        )
        .bind(&self.slot)
        .fetch_optional(&self.pg)
        .await
        .unwrap()
        .flatten()
    }

    pub(crate) async fn wait_slot_active(&self, not_pid: Option<i32>) -> i32 {
        for _ in 0..120 {
            if let Some(pid) = self.slot_pid().await {
                if Some(pid) != not_pid {
                    return pid;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!(
            "replication slot {} never became active (with a new connection)",
            self.slot
        )
    }

    pub(crate) async fn cleanup(&self, connect: &str, connector: &str) {
        delete_connector(connect, connector).await;
        drop_slot(&self.pg, &self.slot).await;
        for sql in [
            format!("DROP PUBLICATION IF EXISTS {}", self.slot),
            format!("DROP TABLE IF EXISTS public.{}", self.table),
            format!("DROP OWNED BY {}", self.role),
            format!("DROP ROLE IF EXISTS {}", self.role),
        ] {
            let _ = sqlx::query(&sql).execute(&self.pg).await;
        }
    }
}

pub(crate) fn debezium_config(
    s: &Stack,
    name: &str,
    f: &CaptureFixture,
    secret_ref: &str,
) -> Value {
    json!({
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": s.pg_host,
        "database.port": s.pg_port.to_string(),
        "database.user": f.role,
        "database.password": format!("${{cluecdc:{secret_ref}:password}}"),
        "database.dbname": s.pg_source_db,
        "topic.prefix": name,
        "plugin.name": "pgoutput",
        "slot.name": f.slot,
        "publication.name": f.slot,
        "publication.autocreate.mode": "filtered",
        "table.include.list": format!("public\\.{}", f.table),
        "snapshot.mode": "no_data"
    })
}

/// Deploys a connector the way a user does: ClueCDC wants it, its reconciler creates it. (The
/// provider resolves a reference only for connectors ClueCDC manages on that cluster.)
pub(crate) async fn manage_connector(api: &Api, cluster: &Value, name: &str, config: &Value) {
    let (status, body) = api
        .post(
            "/api/v1/connectors",
            json!({"name": name, "connect_cluster_id": cluster["id"], "config": config}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// Stops ClueCDC wanting the connector, then removes it from Connect (so it is not recreated).
async fn unmanage_connector(api: &Api, s: &Stack, name: &str) {
    let _ = api.delete(&format!("/api/v1/connectors/{name}")).await;
    delete_connector(&s.connect_url, name).await;
}

async fn put_connector(s: &Stack, name: &str, config: &Value) {
    let (status, said) = connect_call(
        reqwest::Method::PUT,
        &format!("{}/connectors/{name}/config", s.connect_url),
        Some(config),
    )
    .await;
    assert!((200..300).contains(&status), "deploy {name}: {said}");
}

#[tokio::test]
async fn a_debezium_connector_resolves_its_password_through_cluecdc_and_survives_rotation() {
    let s = stack();
    let _c = connect_shared().await;
    let _guard = provider_lock().await;
    let api = admin_api();
    let cluster = point_connect_provider_at(&api).await;
    let tag = suffix();
    let role = format!("rot_{tag}");
    let (pw1, pw2) = (format!("first-{tag}-pw"), format!("second-{tag}-pw"));
    let f = CaptureFixture::new(&s, &role, &pw1).await;
    let conn = api
        .connection(json!({"name": format!("rot {tag}"), "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
            "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": role, "tls_mode": "disable", "slot_name": f.slot, "publication_name": f.slot},
            "secrets": {"password": pw1}}))
        .await;
    let secret_ref = conn["secret_ref"].as_str().unwrap().to_string();
    let name = format!("cdc-rot-{tag}");
    manage_connector(
        &api,
        &cluster,
        &name,
        &debezium_config(&s, &name, &f, &secret_ref),
    )
    .await;
    let result = async {
        wait_running(&s.connect_url, &name, Duration::from_secs(120)).await;
        let first_pid = f.wait_slot_active(None).await;

        let stored: Value = connect_config(&s, &name)
            .await
            .expect("the connector in Connect");
        assert_eq!(
            stored["database.password"],
            format!("${{cluecdc:{secret_ref}:password}}"),
            "Connect stores the reference"
        );
        assert!(!stored.to_string().contains(&pw1));

        // Rotate: the database password changes, the connection's credentials follow, the
        // reference stays; a task restart picks the new value up.
        sqlx::query(&format!("ALTER ROLE {role} PASSWORD '{pw2}'"))
            .execute(&f.pg)
            .await
            .unwrap();
        let (status, rotated) = api
            .post(
                &format!(
                    "/api/v1/connections/{}/rotate",
                    conn["id"].as_str().unwrap()
                ),
                json!({"secrets": {"password": pw2}}),
            )
            .await;
        assert_eq!(status, 200, "{rotated}");
        assert_eq!(rotated["secret_ref"], secret_ref.as_str());
        let (status, said) = connect_call(
            reqwest::Method::POST,
            &format!(
                "{}/connectors/{name}/restart?includeTasks=true",
                s.connect_url
            ),
            None,
        )
        .await;
        assert!((200..300).contains(&status), "{said}");
        let second_pid = f.wait_slot_active(Some(first_pid)).await;
        assert_ne!(
            first_pid, second_pid,
            "the task reconnected (with the new password: the old one no longer works)"
        );
        wait_running(&s.connect_url, &name, Duration::from_secs(60)).await;

        let (_, audit) = api
            .get(&format!(
                "/api/v1/audit?action=secret.resolve&target={secret_ref}"
            ))
            .await;
        let rows = audit["items"].as_array().unwrap();
        assert!(rows.len() >= 2, "each resolution is audited: {audit}");
        assert_eq!(rows[0]["actor"], "connect:stack");
        assert_eq!(rows[0]["summary"]["fields"], json!(["password"]));
        assert!(!audit.to_string().contains(&pw1) && !audit.to_string().contains(&pw2));
    };
    // Clean up even when an assertion fails.
    with_cleanup(result, async {
        unmanage_connector(&api, &s, &name).await;
        f.cleanup(&s.connect_url, &name).await;
    })
    .await;
}

#[tokio::test]
async fn a_wrong_provider_token_or_unknown_reference_is_refused_and_audited() {
    let api = admin_api();
    let (_, cluster) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "c1", "url": "http://127.0.0.1:1"}),
        )
        .await;
    let token = cluster["provider_token"].as_str().unwrap();
    let resolve = |tok: String, body: Value| {
        let http = api.http.clone();
        let url = format!("{}/internal/v1/config-provider/resolve", api.app.url);
        async move {
            let res = http
                .post(url)
                .bearer_auth(tok)
                .json(&body)
                .send()
                .await
                .unwrap();
            (
                res.status().as_u16(),
                res.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, _) = resolve(
        "cdcp_wrong".into(),
        json!({"secret_ref": "sec_x", "fields": ["password"]}),
    )
    .await;
    assert_eq!(status, 401);
    // A user's API token is not a provider token.
    let (status, _) = resolve(
        api.token.clone(),
        json!({"secret_ref": "sec_x", "fields": ["password"]}),
    )
    .await;
    assert_eq!(status, 401);
    let (status, err) = resolve(
        token.into(),
        json!({"secret_ref": "sec_unknown", "fields": ["password"]}),
    )
    .await;
    assert_eq!(status, 404, "{err}");
    let c = api.connection(json!({"name": "m", "provider": "MINIO", "settings": {"bucket": "b-1", "endpoint": "http://m:9000"}, "secrets": {"access_key_id": "AK-123456", "secret_access_key": "SK-resolve-me-1"}})).await;
    let r = c["secret_ref"].as_str().unwrap();
    // Stored, but no connector of this cluster uses it: the token cannot read it.
    let (status, err) = resolve(
        token.into(),
        json!({"secret_ref": r, "fields": ["secret_access_key"]}),
    )
    .await;
    assert_eq!(status, 404, "{err}");
    assert!(
        err.to_string()
            .contains("no connector ClueCDC manages there uses it"),
        "{err}"
    );
    let (status, body) = api
        .post("/api/v1/connectors", json!({"name": "uses-m", "connect_cluster_id": cluster["id"],
            "config": {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "topics": "t", "file": "/dev/null",
                       "aws.secret.access.key": format!("${{cluecdc:{r}:secret_access_key}}")}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, ok) = resolve(
        token.into(),
        json!({"secret_ref": r, "fields": ["secret_access_key"]}),
    )
    .await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(ok["values"]["secret_access_key"], "SK-resolve-me-1");
    let (status, _) = resolve(
        token.into(),
        json!({"secret_ref": r, "fields": ["session_token"]}),
    )
    .await;
    assert_eq!(status, 404, "a field that is not set");
    // A new provider token retires the old one at once.
    let (_, rotated) = api
        .post(
            &format!(
                "/api/v1/connect-clusters/{}/provider-token",
                cluster["id"].as_str().unwrap()
            ),
            json!({}),
        )
        .await;
    assert_ne!(rotated["provider_token"], cluster["provider_token"]);
    let (status, _) = resolve(
        token.into(),
        json!({"secret_ref": r, "fields": ["secret_access_key"]}),
    )
    .await;
    assert_eq!(status, 401);
    let (_, audit) = api.get("/api/v1/audit?action=secret.resolve").await;
    let outcomes: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        vec!["failure", "success", "failure", "failure"],
        "resolutions by a known cluster are audited, newest first"
    );
    assert!(!audit.to_string().contains("SK-resolve-me-1"));
}

/// One canary per secret field; the test greps every surface for all of them.
#[tokio::test]
async fn a_canary_in_every_secret_field_appears_in_no_response_page_log_audit_row_or_connect_config(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _guard = provider_lock().await;
    let api = admin_api_with(&[("CLUECDC_LOG", "debug")]);
    let cluster = point_connect_provider_at(&api).await;
    let tag = suffix();
    let canary = |field: &str| format!("CANARY-{field}-{tag}");
    let pg_pw = canary("pgpw");
    let t = crate::tls::tls();
    let f = CaptureFixture::new(&s, &format!("can_{tag}"), &pg_pw).await;
    let pg = api
        .connection(json!({"name": format!("canary pg {tag}"), "provider": "POSTGRESQL", "capabilities": ["SOURCE", "DESTINATION"],
            "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": f.role, "tls_mode": "verify-full", "ca_certificate": t.ca, "slot_name": f.slot, "publication_name": f.slot},
            "secrets": {"password": pg_pw}}))
        .await;
    let maria = api
        .connection(json!({"name": "canary maria", "provider": "MARIADB",
            "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "disable"},
            "secrets": {"password": canary("mariapw")}}))
        .await;
    let s3 = api
        .connection(json!({"name": "canary s3", "provider": "MINIO",
            "settings": {"bucket": s.s3_bucket, "endpoint": s.s3_endpoint},
            "secrets": {"access_key_id": canary("ak"), "secret_access_key": canary("sk"), "session_token": canary("st")}}))
        .await;
    // The TLS + SCRAM Kafka listener with its real password (so health and topics are read).
    let kafka = t.kafka_cluster(&api, "canary tls kafka").await;
    let mut canaries = vec![
        pg_pw.clone(),
        canary("mariapw"),
        canary("ak"),
        canary("sk"),
        canary("st"),
        canary("rotated"),
        t.scram_password.clone(),
    ];
    // The test CA's private key never goes anywhere near ClueCDC; nothing may show it.
    canaries.extend(crate::tls::key_lines(&t.ca_key));
    // Hostile counterparts on loopback (issue 27): the connections and the Kafka cluster above
    // are re-pointed at them without their secrets, connections and clusters made against them
    // carry canaries of their own, and every byte they received is swept like the rest.
    let hostile_pg = Hostile::start(Kind::Postgres).await;
    let hostile_clear = Hostile::start(Kind::MySqlClearText).await;
    let hostile_rsa = Hostile::start(Kind::MySqlRsa).await;
    let hostile_kafka = Hostile::start(Kind::KafkaSasl).await;
    let hostile_http = Hostile::start(Kind::Http).await;
    // Where a Connect cluster's basic auth was given for: it gets that password, so it is not
    // swept; the cluster is then re-pointed at `hostile_http`.
    let given_http = Hostile::start(Kind::Http).await;
    for c in ["hpg", "hmyclear", "hmyrsa", "hplain", "hbasic"] {
        canaries.push(canary(c));
    }
    let name = format!("cdc-canary-{tag}");
    // TLS with the stack's CA, as a file the provider writes on the worker.
    let mut config = debezium_config(&s, &name, &f, pg["secret_ref"].as_str().unwrap());
    config["database.sslmode"] = json!("verify-full");
    config["database.sslrootcert"] = json!(format!(
        "${{cluecdc:{}:ca_cert_file}}",
        pg["secret_ref"].as_str().unwrap()
    ));
    // Its records go to the TLS + SCRAM listener: the producer logs in with the Kafka
    // cluster's password and trusts its CA, both references that the provider resolves.
    let kref = kafka["secret_ref"].as_str().unwrap();
    for (k, v) in [
        ("bootstrap.servers", t.kafka_bootstrap.clone()),
        ("security.protocol", "SASL_SSL".to_string()),
        ("sasl.mechanism", "SCRAM-SHA-512".to_string()),
        ("sasl.jaas.config", format!("org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"${{cluecdc:{kref}:sasl_password}}\";", t.scram_user)),
        ("ssl.truststore.type", "PEM".to_string()),
        ("ssl.truststore.location", format!("${{cluecdc:{kref}:ca_cert_file}}")),
    ] {
        config[format!("producer.override.{k}")] = json!(v);
    }
    manage_connector(&api, &cluster, &name, &config).await;

    let result = async {
        wait_running(&s.connect_url, &name, Duration::from_secs(120)).await;
        // The connector's stored and task configs hold the references, never the values.
        for path in [
            format!("/connectors/{name}/config"),
            format!("/connectors/{name}/tasks"),
        ] {
            let (status, text) = connect_call(
                reqwest::Method::GET,
                &format!("{}{path}", s.connect_url),
                None,
            )
            .await;
            assert_eq!(status, 200, "{path}: {text}");
            assert!(
                text.contains(&format!("${{cluecdc:{kref}:sasl_password}}"))
                    && text.contains(&format!("${{cluecdc:{kref}:ca_cert_file}}")),
                "{path} holds the Kafka cluster's references: {text}"
            );
        }
        let mut seen: Vec<(String, String)> = Vec::new();
        let mut look = |what: String, text: String| seen.push((what, text));

        // Every action that touches secrets, so their answers are on record too.
        for c in [&pg, &maria, &s3] {
            let id = c["id"].as_str().unwrap();
            look(format!("create {id}"), c.to_string());
            look(
                format!("test {id}"),
                api.post(&format!("/api/v1/connections/{id}/test"), json!({}))
                    .await
                    .1
                    .to_string(),
            );
            look(
                format!("patch {id}"),
                api.patch(
                    &format!("/api/v1/connections/{id}"),
                    json!({"settings": {}}),
                )
                .await
                .1
                .to_string(),
            );
        }
        let s3_id = s3["id"].as_str().unwrap();
        look("rotate".into(), api.post(&format!("/api/v1/connections/{s3_id}/rotate"), json!({"secrets": {"access_key_id": canary("ak"), "secret_access_key": canary("rotated")}})).await.1.to_string());
        // A bad request echoing a secret must not echo it back.
        look("invalid create".into(), api.post("/api/v1/connections", json!({"name": "bad name!", "provider": "MINIO", "settings": {"bucket": "b-1", "endpoint": format!("http://u:{}@m:9000", canary("sk"))}, "secrets": {"access_key_id": canary("ak"), "nope": canary("sk")}})).await.1.to_string());

        // Re-pointed at a hostile counterpart without the secrets: refused, and the stored
        // address is what the next test uses.
        for (c, settings) in [
            (&pg, json!({"port": hostile_pg.port})),
            (&maria, json!({"port": hostile_clear.port})),
            (&s3, json!({"endpoint": hostile_http.url()})),
        ] {
            let id = c["id"].as_str().unwrap();
            // Every secret stored now (the rotation above left the store without its token).
            let (_, stored) = api.get(&format!("/api/v1/connections/{id}")).await;
            let (status, body) = api
                .patch(
                    &format!("/api/v1/connections/{id}"),
                    json!({"settings": settings}),
                )
                .await;
            assert_eq!(status, 422, "re-pointing {id} without its secrets: {body}");
            for f in stored["secret_fields_set"].as_array().unwrap() {
                let f = format!("secrets.{}", f.as_str().unwrap());
                assert!(body["error"]["fields"][&f].is_string(), "{f}: {body}");
            }
            look(format!("re-point {id}"), body.to_string());
            look(
                format!("test {id} after the re-point"),
                api.post(&format!("/api/v1/connections/{id}/test"), json!({}))
                    .await
                    .1
                    .to_string(),
            );
        }
        let kid = kafka["id"].as_str().unwrap();
        let (status, body) = api
            .patch(
                &format!("/api/v1/kafka-clusters/{kid}"),
                json!({"bootstrap_servers": hostile_kafka.addr()}),
            )
            .await;
        assert_eq!(status, 422, "{body}");
        look("re-point kafka".into(), body.to_string());
        look(
            "kafka health after the re-point".into(),
            api.get(&format!("/api/v1/kafka-clusters/{kid}"))
                .await
                .1
                .to_string(),
        );
        let (status, body) = api
            .post(
                "/api/v1/kafka-clusters",
                json!({"name": "hostile plain", "bootstrap_servers": hostile_kafka.addr(), "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "PLAIN", "sasl_username": "cdc", "sasl_password": canary("hplain")}),
            )
            .await;
        assert_eq!(status, 422, "PLAIN without TLS: {body}");
        look("create plain kafka".into(), body.to_string());
        // Made against the counterparts: the tests fail, and no password leaves.
        for (name, provider, port, pw) in [
            ("hostile pg", "POSTGRESQL", hostile_pg.port, canary("hpg")),
            (
                "hostile mysql",
                "MYSQL",
                hostile_clear.port,
                canary("hmyclear"),
            ),
            (
                "hostile mysql rsa",
                "MYSQL",
                hostile_rsa.port,
                canary("hmyrsa"),
            ),
        ] {
            let c = api
                .connection(json!({"name": name, "provider": provider, "capabilities": ["DESTINATION"],
                    "settings": {"host": "127.0.0.1", "port": port, "database": "app", "user": "cdc", "tls_mode": "disable"},
                    "secrets": {"password": pw}}))
                .await;
            look(format!("create {name}"), c.to_string());
            let (_, report) = api
                .post(
                    &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
                    json!({}),
                )
                .await;
            assert_eq!(report["ok"], false, "{name}: {report}");
            look(format!("test {name}"), report.to_string());
        }
        let (status, guarded) = api
            .post(
                "/api/v1/connect-clusters",
                json!({"name": "hostile connect", "url": given_http.url(), "basic_auth_user": "admin", "basic_auth_password": canary("hbasic")}),
            )
            .await;
        assert_eq!(status, 201, "{guarded}");
        let gid = guarded["id"].as_str().unwrap();
        let (status, body) = api
            .patch(
                &format!("/api/v1/connect-clusters/{gid}"),
                json!({"url": hostile_http.url()}),
            )
            .await;
        assert_eq!(status, 422, "{body}");
        look("re-point connect".into(), body.to_string());
        look(
            "connect health after the re-point".into(),
            api.get(&format!("/api/v1/connect-clusters/{gid}/plugins"))
                .await
                .1
                .to_string(),
        );
        assert!(
            crate::hostile::leaked(&given_http.received(), &canary("hbasic")),
            "the Connect cluster's own URL got its password (the counterpart records it)"
        );

        // Every GET route of the API and the pages, ids filled in.
        let ids: Vec<String> = [&pg, &maria, &s3]
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect();
        let kafka_id = kafka["id"].as_str().unwrap();
        let connect_id = cluster["id"].as_str().unwrap();
        let browser = {
            let b = sign_in(&api.app, "ada", PASSWORD).await;
            b.client
        };
        for route in routes()
            .into_iter()
            .filter(|r| r.method == "GET" && r.access != "public")
        {
            // Every route of one connection, cluster or connector, with the ids made here.
            let one_id = route.path.matches(':').count() == 1;
            let paths: Vec<String> = if !route.path.contains(':') {
                vec![route.path.clone()]
            } else if one_id && route.path.contains("connections/:id") {
                ids.iter().map(|id| route.path.replace(":id", id)).collect()
            } else if one_id
                && (route.path.contains("kafka-clusters/:id")
                    || route.path.contains("clusters/kafka/:id"))
            {
                vec![route.path.replace(":id", kafka_id)]
            } else if one_id
                && (route.path.contains("connect-clusters/:id")
                    || route.path.contains("clusters/connect/:id"))
            {
                vec![route.path.replace(":id", connect_id)]
            } else if one_id && route.path.contains("connectors/:") {
                vec![route.path.replace(":name", &name).replace(":id", &name)]
            } else {
                continue;
            };
            for p in paths {
                let (_, body) = api.get(&p).await;
                look(format!("API GET {p}"), body.to_string());
                let html = browser
                    .get(format!("{}{p}", api.app.url))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                look(format!("page {p}"), html);
            }
        }
        look(
            "audit CSV".into(),
            api.text("/api/v1/audit/export?format=csv").await,
        );

        // Connect: what it stores and shows.
        for path in [
            format!("/connectors/{name}/config"),
            format!("/connectors/{name}/tasks"),
            format!("/connectors/{name}/status"),
            "/connectors?expand=info&expand=status".to_string(),
        ] {
            // Connect's answer itself, not a "rebalance is expected" error that would hold no
            // canary whatever Connect stores.
            let (status, text) = connect_call(
                reqwest::Method::GET,
                &format!("{}{path}", s.connect_url),
                None,
            )
            .await;
            assert_eq!(status, 200, "Connect {path}: {text}");
            look(format!("Connect {path}"), text);
        }
        look(
            "Connect config topic".into(),
            read_topic(
                &s.kafka_bootstrap,
                &std::env::var("CONNECT_CONFIG_TOPIC")
                    .unwrap_or_else(|_| "cluecdc-connect-configs".into()),
            )
            .await,
        );

        // The server's own log (debug level) and the audit table, read directly.
        let db = crate::helpers::store(&api.app.data_dir()).await;
        let audit: Vec<String> =
            sqlx::query_scalar("SELECT actor || action || target_id || summary FROM audit_log")
                .fetch_all(&db)
                .await
                .unwrap();
        assert!(audit.len() > 10, "the audit table was exercised");
        look("audit table".into(), audit.join("\n"));
        let envelopes: Vec<String> = sqlx::query_scalar("SELECT envelope FROM secret_values")
            .fetch_all(&db)
            .await
            .unwrap();
        look("secret_values (ciphertext)".into(), envelopes.join("\n"));
        let rows: Vec<String> =
            sqlx::query_scalar("SELECT settings || COALESCE(last_test, '') FROM connections")
                .fetch_all(&db)
                .await
                .unwrap();
        look("connections table".into(), rows.join("\n"));
        look("server log".into(), api.app.log());
        // What the config provider wrote on the worker: the CA file, named by reference.
        let dir = std::env::var("CLUECDC_PROVIDER_FILES").unwrap();
        let ca_file = format!("{}-ca.pem", pg["secret_ref"].as_str().unwrap());
        let mut listing = String::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            listing.push_str(&format!("{}\n", e.file_name().to_string_lossy()));
            listing.push_str(&String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()));
        }
        assert!(
            listing.contains(&ca_file),
            "the provider wrote {ca_file} in {dir}: {listing}"
        );
        look("provider files".into(), listing);
        let swept = [
            &hostile_pg,
            &hostile_clear,
            &hostile_rsa,
            &hostile_kafka,
            &hostile_http,
        ];
        assert!(
            hostile_pg.connections() >= 1
                && hostile_clear.connections() >= 1
                && hostile_rsa.connections() >= 1,
            "the connections made against the counterparts reached them"
        );
        for h in swept {
            look(format!("hostile {:?} counterpart", h.kind), h.transcript());
        }
        let all: Vec<&str> = canaries.iter().map(String::as_str).collect();
        assert_nothing_leaked(&swept, &all);

        // The sweep reached the routes of one cluster and connector, not only the lists.
        for must in [
            format!("page /clusters/kafka/{kafka_id}/edit"),
            format!("API GET /api/v1/kafka-clusters/{kafka_id}"),
            format!("API GET /api/v1/kafka-clusters/{kafka_id}/topics"),
            format!("page /clusters/connect/{connect_id}/edit"),
            format!("API GET /api/v1/connectors/{name}"),
            format!("page /connectors/{name}"),
        ] {
            assert!(
                seen.iter().any(|(what, _)| *what == must),
                "the sweep visited {must}"
            );
        }
        for (what, text) in &seen {
            for c in &canaries {
                assert!(!text.contains(c.as_str()), "{c} leaked into {what}");
            }
        }
        assert!(seen.len() > 40, "checked {} surfaces", seen.len());
    };
    with_cleanup(result, async {
        unmanage_connector(&api, &s, &name).await;
        f.cleanup(&s.connect_url, &name).await;
    })
    .await;
}

/// Every record of a topic as text (keys and values), read from the beginning.
async fn read_topic(bootstrap: &str, topic: &str) -> String {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{ClientConfig, Message};
    let bootstrap = bootstrap.to_string();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", format!("canary-{}", std::process::id()))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&[&topic]).unwrap();
        let mut out = String::new();
        let mut idle = 0;
        let mut count = 0;
        while idle < 6 {
            match consumer.poll(Duration::from_millis(500)) {
                Some(Ok(m)) => {
                    idle = 0;
                    count += 1;
                    out.push_str(&String::from_utf8_lossy(m.key().unwrap_or_default()));
                    out.push_str(&String::from_utf8_lossy(m.payload().unwrap_or_default()));
                    out.push('\n');
                }
                _ => idle += 1,
            }
        }
        assert!(count > 0, "the Connect config topic {topic} had records");
        out
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_stored_secret_deployed_in_plain_text_raises_a_leak_alert_that_resolves_when_removed() {
    let s = stack();
    let _c = connect_shared().await;
    let api = admin_api_with(&[("CLUECDC_LEAK_SCAN_INTERVAL", "1s")]);
    let (status, _) = api
        .post(
            "/api/v1/connect-clusters",
            json!({"name": "stack", "url": s.connect_url}),
        )
        .await;
    assert_eq!(status, 201);
    let tag = suffix();
    let secret = format!("leaky-secret-{tag}");
    api.connection(json!({"name": "leaky", "provider": "MINIO", "settings": {"bucket": "b-1", "endpoint": "http://m:9000"}, "secrets": {"access_key_id": "AK-leak-1", "secret_access_key": secret}})).await;
    let name = format!("leak-{tag}");
    // Someone pastes the value into a connector directly in Connect.
    put_connector(&s, &name, &json!({"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "topics": format!("leak-{tag}"), "file": "/dev/null", "aws.secret.access.key": secret})).await;
    let subject = format!("stack/{name}");
    async fn firing(api: &Api, subject: &str) -> Option<Value> {
        let (_, alerts) = api.get("/api/v1/alerts?state=firing").await;
        alerts["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["kind"] == "secret_leak" && a["subject"] == subject)
            .cloned()
    }
    let body = async {
        let mut alert = None;
        for _ in 0..60 {
            alert = firing(&api, &subject).await;
            if alert.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let alert = alert.expect("a secret_leak alert fires");
        let message = alert["message"].as_str().unwrap();
        assert!(
            message.contains("The secret_access_key of connection leaky")
                && message.contains("connector config")
                && message.contains("task configs"),
            "{message}"
        );
        assert!(
            !alert.to_string().contains(&secret),
            "the alert never holds the value"
        );
        let page = sign_in(&api.app, "ada", PASSWORD)
            .await
            .text(format!("{}/alerts/badge", api.app.url))
            .await;
        assert!(page.contains("alert"), "the header badge shows it: {page}");
        // Removed only now: the scan runs every second, and with the connector removed first
        // the alert resolved before a sign-in (a password hash) and the badge were done.
        delete_connector(&s.connect_url, &name).await;
        for _ in 0..60 {
            if firing(&api, &subject).await.is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("the leak alert did not resolve after the connector was removed");
    };
    with_cleanup(body, delete_connector(&s.connect_url, &name)).await;
}
