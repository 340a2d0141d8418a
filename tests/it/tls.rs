//! TLS end to end against the stack's TLS side (`scripts/stack`: a test CA, PostgreSQL and
//! MariaDB offering its certificate, a SASL_SSL + SCRAM-SHA-512 Kafka listener, an https front
//! for s3s-fs): what verifies passes, and a wrong CA or password fails with a message that names
//! the problem. No option anywhere turns verification off.

use serde_json::{json, Value};

use crate::helpers::*;

pub struct Tls {
    pub ca: String,
    pub other_ca: String,
    pub ca_key: String,
    pub kafka_bootstrap: String,
    pub scram_user: String,
    pub scram_password: String,
    pub s3_endpoint: String,
}

fn var(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run `eval \"$(scripts/stack env)\"`"))
}

pub fn tls() -> Tls {
    let read = |v: &str| std::fs::read_to_string(var(v)).unwrap_or_else(|e| panic!("{v}: {e}"));
    Tls {
        ca: read("TLS_CA_FILE"),
        other_ca: read("TLS_OTHER_CA_FILE"),
        ca_key: read("TLS_CA_KEY_FILE"),
        kafka_bootstrap: var("KAFKA_TLS_BOOTSTRAP"),
        scram_user: var("KAFKA_SCRAM_USER"),
        scram_password: var("KAFKA_SCRAM_PASSWORD"),
        s3_endpoint: var("S3_TLS_ENDPOINT"),
    }
}

/// The body lines of a PEM private key (what would show if it leaked anywhere).
pub fn key_lines(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 40)
        .map(str::to_string)
        .collect()
}

async fn test_connection(api: &Api, body: Value) -> (Value, Value) {
    let c = api.connection(body).await;
    let (status, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    (c, report)
}

fn first_failure(report: &Value) -> String {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["status"] == "fail")
        .map(|c| {
            format!(
                "{} {}",
                c["message"].as_str().unwrap_or(""),
                c["hint"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| panic!("no failing check: {report}"))
}

pub fn pg_tls_body(s: &Stack, name: &str, ca: &str, extra: Value) -> Value {
    let mut settings = json!({"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user,
        "tls_mode": "verify-full", "ca_certificate": ca});
    for (k, v) in extra.as_object().unwrap() {
        settings[k] = v.clone();
    }
    json!({"name": name, "provider": "POSTGRESQL", "capabilities": ["SOURCE", "DESTINATION"], "settings": settings,
        "secrets": {"password": s.pg_password}})
}

#[tokio::test]
async fn database_and_object_store_connections_verify_the_private_ca_and_a_wrong_one_is_named() {
    let s = stack();
    let t = tls();
    let api = admin_api();

    // PostgreSQL, verify-full with the CA that signed the server's certificate.
    let (_, ok) = test_connection(&api, pg_tls_body(&s, "pg tls", &t.ca, json!({}))).await;
    assert_eq!(ok["ok"], true, "{ok}");
    let (_, bad) =
        test_connection(&api, pg_tls_body(&s, "pg wrong ca", &t.other_ca, json!({}))).await;
    assert_eq!(bad["ok"], false, "{bad}");
    let why = first_failure(&bad);
    assert!(
        why.contains("not signed by the CA"),
        "names the certificate problem: {why}"
    );

    // MariaDB, the same.
    let maria = |name: &str, ca: &str| {
        json!({"name": name, "provider": "MARIADB", "capabilities": ["DESTINATION"],
        "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "verify-full", "ca_certificate": ca},
        "secrets": {"password": s.mariadb_password}})
    };
    let (_, ok) = test_connection(&api, maria("maria tls", &t.ca)).await;
    assert_eq!(ok["ok"], true, "{ok}");
    let (_, bad) = test_connection(&api, maria("maria wrong ca", &t.other_ca)).await;
    assert_eq!(bad["ok"], false, "{bad}");
    let why = first_failure(&bad);
    assert!(
        why.contains("not signed by the CA"),
        "names the certificate problem: {why}"
    );

    // The object store behind https with the private CA; without it the public roots refuse.
    let s3 = |name: &str, ca: Option<&str>| {
        let mut settings = json!({"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": t.s3_endpoint, "prefix": "tls/"});
        if let Some(ca) = ca {
            settings["ca_certificate"] = json!(ca);
        }
        json!({"name": name, "provider": "MINIO", "capabilities": ["DESTINATION"], "settings": settings,
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})
    };
    let (c, ok) = test_connection(&api, s3("s3 tls", Some(&t.ca))).await;
    assert_eq!(ok["ok"], true, "{ok}");
    assert!(
        c["warnings"].as_array().unwrap().is_empty(),
        "https is not labelled plain: {c}"
    );
    for (name, ca) in [
        ("s3 wrong ca", Some(t.other_ca.as_str())),
        ("s3 public roots", None),
    ] {
        let (_, bad) = test_connection(&api, s3(name, ca)).await;
        assert_eq!(bad["ok"], false, "{name}: {bad}");
        let why = first_failure(&bad);
        assert!(
            why.contains("not signed by the CA") || why.contains("not trusted"),
            "{name}: {why}"
        );
    }
}

#[tokio::test]
async fn a_tls_scram_kafka_cluster_shows_health_and_topics_and_a_wrong_password_or_ca_is_a_clear_error(
) {
    let t = tls();
    let api = admin_api();
    let body = |name: &str, password: &str, ca: &str| {
        json!({"name": name, "bootstrap_servers": t.kafka_bootstrap,
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": t.scram_user,
        "sasl_password": password, "tls_ca_certificate": ca})
    };
    let (status, k) = api
        .post(
            "/api/v1/kafka-clusters",
            body("tls kafka", &t.scram_password, &t.ca),
        )
        .await;
    assert_eq!(status, 201, "{k}");
    let id = k["id"].as_str().unwrap();
    let (_, got) = api.get(&format!("/api/v1/kafka-clusters/{id}")).await;
    assert_eq!(got["health"]["reachable"], true, "{got}");
    let topic = format!("cluecdc-tls-{}", std::process::id());
    let (status, made) = api
        .post(
            &format!("/api/v1/kafka-clusters/{id}/topics"),
            json!({"name": topic, "partitions": 1, "replication_factor": 1}),
        )
        .await;
    assert_eq!(status, 201, "created through the SASL_SSL listener: {made}");
    let (_, list) = api
        .get(&format!("/api/v1/kafka-clusters/{id}/topics?q={topic}"))
        .await;
    assert_eq!(list["total"], 1, "{list}");

    for (name, password, ca, needle) in [
        (
            "tls kafka wrong password",
            "not-the-password",
            t.ca.as_str(),
            "password",
        ),
        (
            "tls kafka wrong ca",
            t.scram_password.as_str(),
            t.other_ca.as_str(),
            "not signed by the CA",
        ),
    ] {
        let (status, k) = api
            .post("/api/v1/kafka-clusters", body(name, password, ca))
            .await;
        assert_eq!(status, 201, "{k}");
        let (_, got) = api
            .get(&format!(
                "/api/v1/kafka-clusters/{}",
                k["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(got["health"]["reachable"], false, "{name}: {got}");
        let error = got["health"]["error"].as_str().unwrap_or_default();
        assert!(error.contains(needle), "{name}: {got}");
        eprintln!("{name}: {error}");
        assert!(
            !got.to_string().contains(&t.scram_password),
            "{name}: the password is never shown"
        );
    }
    let (status, _) = api
        .delete(&format!(
            "/api/v1/kafka-clusters/{id}/topics/{topic}?confirm={topic}"
        ))
        .await;
    assert!(status < 300, "topic deleted");
}
