//! Connections against the real stack: object-storage tests exactly as seed 000 says, database
//! checks for capture and delivery, discovery, rotation, and every validation rule (422, field
//! named, nothing stored).

use serde_json::{json, Value};

use crate::helpers::*;

fn minio_body(s: &Stack, name: &str, bucket: &str, secret: &str) -> Value {
    json!({
        "name": name, "provider": "MINIO", "capabilities": ["DESTINATION"],
        "settings": {"bucket": bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": "tests/"},
        "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": secret}
    })
}

fn checks(report: &Value) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn probe_objects(s: &Stack) -> Vec<String> {
    let out = s
        .s3_client(&s.s3_secret_key)
        .list_objects_v2()
        .bucket(&s.s3_bucket)
        .prefix("tests/.cluecdc/")
        .send()
        .await
        .unwrap();
    out.contents()
        .iter()
        .filter_map(|o| o.key().map(String::from))
        .collect()
}

#[tokio::test]
async fn a_minio_connection_to_the_stack_passes_its_test_and_leaves_no_probe_behind() {
    let s = stack();
    let api = admin_api();
    let c = api
        .connection(minio_body(&s, "stack s3", &s.s3_bucket, &s.s3_secret_key))
        .await;
    assert_eq!(
        c["secret_fields_set"],
        json!(["access_key_id", "secret_access_key"])
    );
    assert!(
        c["warnings"][0]
            .as_str()
            .unwrap()
            .contains("isolated local fixtures"),
        "plain http is labelled: {c}"
    );
    let (status, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(
        checks(&report),
        vec![
            ("bucket".into(), "pass".into()),
            ("write probe".into(), "pass".into()),
            ("read back".into(), "pass".into()),
            ("delete probe".into(), "pass".into())
        ]
    );
    let write = report["checks"][1]["message"].as_str().unwrap();
    assert!(
        write.contains("tests/.cluecdc/connection-tests/"),
        "the probe lives under the prefix: {write}"
    );
    assert!(
        probe_objects(&s).await.is_empty(),
        "no probe object is left behind"
    );
    let (_, stored) = api
        .get(&format!(
            "/api/v1/connections/{}",
            c["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        stored["last_test"]["ok"], true,
        "the last result is kept with the connection"
    );
}

#[tokio::test]
async fn a_missing_bucket_fails_the_test_and_no_bucket_appears() {
    let s = stack();
    let api = admin_api();
    let bucket = format!("cluecdc-missing-{}", std::process::id());
    let c = api
        .connection(minio_body(&s, "missing", &bucket, &s.s3_secret_key))
        .await;
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], false);
    assert_eq!(
        checks(&report),
        vec![("bucket".into(), "fail".into())],
        "nothing is written when the bucket check fails"
    );
    assert!(
        report["checks"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("never creates buckets"),
        "{report}"
    );
    let head = s
        .s3_client(&s.s3_secret_key)
        .head_bucket()
        .bucket(&bucket)
        .send()
        .await;
    assert!(head.is_err(), "the bucket still does not exist");
    let dir = std::path::Path::new(&std::env::var("S3_DATA_DIR").unwrap()).join(&bucket);
    assert!(
        !dir.exists(),
        "no bucket directory appeared on the S3 server"
    );
}

#[tokio::test]
async fn wrong_credentials_fail_with_a_sanitized_message() {
    let s = stack();
    let api = admin_api();
    let wrong = "wrong-secret-canary-5f3a9d";
    let c = api
        .connection(minio_body(&s, "wrong", &s.s3_bucket, wrong))
        .await;
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], false);
    let text = report.to_string();
    assert!(
        !text.contains(wrong) && !text.contains(&s.s3_secret_key),
        "no secret in the report: {text}"
    );
    let bucket = &report["checks"][0];
    assert_eq!(bucket["status"], "fail");
    assert!(
        bucket["hint"].as_str().unwrap().contains("rotate")
            || bucket["hint"].as_str().unwrap().contains("permission"),
        "{bucket}"
    );
    // Rotating to the right secret fixes it and keeps the reference.
    let id = c["id"].as_str().unwrap();
    let (status, rotated) = api.post(&format!("/api/v1/connections/{id}/rotate"), json!({"secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})).await;
    assert_eq!(status, 200, "{rotated}");
    assert_eq!(
        rotated["secret_ref"], c["secret_ref"],
        "rotation keeps secret_ref"
    );
    let (_, report) = api
        .post(&format!("/api/v1/connections/{id}/test"), json!({}))
        .await;
    assert_eq!(report["ok"], true, "{report}");
}

fn pg_body(
    name: &str,
    host: &str,
    port: u16,
    db: &str,
    user: &str,
    password: &str,
    caps: &[&str],
) -> Value {
    json!({
        "name": name, "provider": "POSTGRESQL", "capabilities": caps,
        "settings": {"host": host, "port": port, "database": db, "user": user, "tls_mode": "disable"},
        "secrets": {"password": password}
    })
}

#[tokio::test]
async fn a_postgres_source_with_wal_level_replica_gets_a_failing_check_that_says_how_to_fix_it() {
    let pg = TempPostgres::start(&["-c wal_level=replica"]);
    let api = admin_api();
    let c = api
        .connection(pg_body(
            "replica-only",
            "127.0.0.1",
            pg.port,
            "probe",
            TEMP_PG_USER,
            TEMP_PG_PASSWORD,
            &["SOURCE"],
        ))
        .await;
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], false, "{report}");
    let wal = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "wal_level")
        .expect("a wal_level check");
    assert_eq!(wal["status"], "fail");
    assert!(wal["message"].as_str().unwrap().contains("replica"));
    assert!(
        wal["hint"]
            .as_str()
            .unwrap()
            .contains("wal_level = logical"),
        "{wal}"
    );
    let reachable = &report["checks"][0];
    assert_eq!(reachable["status"], "pass");
}

#[tokio::test]
async fn the_stack_postgres_passes_as_source_and_destination_and_discovery_lists_keys() {
    let s = stack();
    let admin = pg_superuser(&s).await;
    let schema = format!("disc_{}", std::process::id());
    for sql in [
        format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
        format!("CREATE SCHEMA {schema} AUTHORIZATION {}", s.pg_user),
        format!("CREATE TABLE {schema}.orders (id bigint PRIMARY KEY, note text)"),
        format!("CREATE TABLE {schema}.order_items (order_id bigint, line int, sku text, PRIMARY KEY (order_id, line))"),
        format!("CREATE TABLE {schema}.events_log (at timestamptz, body text)"),
        format!("ALTER TABLE {schema}.orders OWNER TO {}", s.pg_user),
    ] {
        sqlx::query(&sql).execute(&admin).await.unwrap();
    }
    let api = admin_api();
    let src = api
        .connection(pg_body(
            "pg source",
            &s.pg_host,
            s.pg_port,
            &s.pg_source_db,
            &s.pg_user,
            &s.pg_password,
            &["SOURCE"],
        ))
        .await;
    assert!(src["settings"]["slot_name"]
        .as_str()
        .unwrap()
        .starts_with("cluecdc_"));
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", src["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], true, "{report}");
    let names: Vec<String> = checks(&report).into_iter().map(|c| c.0).collect();
    for n in [
        "reachable",
        "version",
        "wal_level",
        "replication privilege",
        "replication slots",
        "publication",
        "table keys",
    ] {
        assert!(names.contains(&n.to_string()), "check {n} in {names:?}");
    }
    let keys = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "table keys")
        .unwrap();
    assert_eq!(
        keys["status"], "warn",
        "a keyless table is reported: {keys}"
    );
    assert!(keys["message"].as_str().unwrap().contains("events_log"));

    let (status, tables) = api
        .get(&format!(
            "/api/v1/connections/{}/tables",
            src["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 200, "{tables}");
    let find = |t: &str| {
        tables["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["schema"] == schema.as_str() && i["name"] == t)
            .cloned()
            .unwrap_or_else(|| panic!("{t} in {tables}"))
    };
    assert_eq!(find("orders")["primary_key"], json!(["id"]));
    assert_eq!(
        find("order_items")["primary_key"],
        json!(["order_id", "line"]),
        "composite keys keep their column order"
    );
    assert_eq!(find("events_log")["capturable"], false);
    assert_eq!(find("orders")["replica_identity"], "default");

    let dest = api
        .connection(pg_body(
            "pg dest",
            &s.pg_host,
            s.pg_port,
            &s.pg_dest_db,
            &s.pg_user,
            &s.pg_password,
            &["DESTINATION"],
        ))
        .await;
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", dest["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], true, "{report}");
    assert!(checks(&report).contains(&("create and alter tables".into(), "pass".into())));
    let (status, err) = api
        .get(&format!(
            "/api/v1/connections/{}/tables",
            dest["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 409, "discovery is for sources: {err}");
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn mariadb_source_checks_pass_and_a_wrong_password_says_what_to_fix() {
    let s = stack();
    let api = admin_api();
    let body = |name: &str, pw: &str| {
        json!({
            "name": name, "provider": "MARIADB", "capabilities": ["SOURCE", "DESTINATION"],
            "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "disable"},
            "secrets": {"password": pw}
        })
    };
    let c = api.connection(body("maria", &s.mariadb_password)).await;
    assert!(
        c["settings"]["server_id"].as_u64().unwrap() >= 10_000,
        "a server id is generated: {c}"
    );
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", c["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], true, "{report}");
    let got = checks(&report);
    for n in [
        "reachable",
        "version",
        "binlog",
        "binlog format",
        "row image",
        "gtid",
        "privileges",
        "create and alter tables",
    ] {
        assert!(
            got.iter()
                .any(|(name, status)| name == n && status == "pass"),
            "{n} passes: {got:?}"
        );
    }
    let (status, tables) = api
        .get(&format!(
            "/api/v1/connections/{}/tables",
            c["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, 200, "{tables}");

    let bad = api
        .connection(body("maria bad", "not-the-password-77"))
        .await;
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", bad["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], false);
    assert_eq!(report["checks"][0]["name"], "reachable");
    assert!(
        report["checks"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("user and password"),
        "{report}"
    );
    assert!(!report.to_string().contains("not-the-password-77"));

    // The stack's MariaDB registered as MYSQL: the test fails on the provider, names the
    // server and the right choice, and checks nothing else.
    let mut as_mysql = body("maria as mysql", &s.mariadb_password);
    as_mysql["provider"] = json!("MYSQL");
    let wrong = api.connection(as_mysql).await;
    let (_, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", wrong["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(report["ok"], false, "{report}");
    let last = report["checks"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["name"].as_str(), last["status"].as_str()),
        (Some("provider"), Some("fail")),
        "{report}"
    );
    let message = last["message"].as_str().unwrap();
    assert!(
        message.contains("the server is MariaDB") && message.contains("provider is MYSQL"),
        "{message}"
    );
    assert!(
        last["hint"].as_str().unwrap().contains("provider MARIADB"),
        "{last}"
    );
    assert_eq!(
        report["checks"].as_array().unwrap().len(),
        2,
        "nothing else is checked: {report}"
    );
}

/// Every validation rule: 422, the field named with how to fix it, nothing stored.
#[tokio::test]
async fn every_validation_rule_answers_422_naming_the_field_and_stores_nothing() {
    let api = admin_api();
    let ok_s3 = json!({"access_key_id": "AK", "secret_access_key": "SK-long-enough"});
    let minio = |settings: Value| json!({"name": "x", "provider": "MINIO", "settings": settings, "secrets": ok_s3});
    let aws = |settings: Value| json!({"name": "x", "provider": "AWS_S3", "settings": settings, "secrets": ok_s3});
    let pg = |settings: Value, secrets: Value| json!({"name": "x", "provider": "POSTGRESQL", "settings": settings, "secrets": secrets});
    let db = json!({"host": "db", "database": "d", "user": "u"});
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"provider": "MINIO"}), "name", "1–64"),
        (
            json!({"name": "x", "provider": "ORACLE"}),
            "provider",
            "POSTGRESQL",
        ),
        (
            json!({"name": "x", "provider": "MINIO", "capabilities": ["SOURCE"], "settings": {"bucket": "b-1", "endpoint": "http://m:9000"}, "secrets": ok_s3}),
            "capabilities",
            "destination-only",
        ),
        (
            json!({"name": "x", "provider": "POSTGRESQL", "capabilities": [], "settings": db, "secrets": {"password": "p"}}),
            "capabilities",
            "SOURCE, DESTINATION",
        ),
        (
            minio(json!({"endpoint": "http://m:9000"})),
            "settings.bucket",
            "required",
        ),
        (
            minio(json!({"bucket": "Bad_Bucket", "endpoint": "http://m:9000"})),
            "settings.bucket",
            "lowercase",
        ),
        (
            minio(json!({"bucket": "b-1"})),
            "settings.endpoint",
            "required for MinIO",
        ),
        (
            minio(json!({"bucket": "b-1", "endpoint": "http://ak:sk@m:9000"})),
            "settings.endpoint",
            "credentials",
        ),
        (
            minio(json!({"bucket": "b-1", "endpoint": "http://m:9000?x=1"})),
            "settings.endpoint",
            "query",
        ),
        (
            minio(json!({"bucket": "b-1", "endpoint": "http://m:9000#f"})),
            "settings.endpoint",
            "fragment",
        ),
        (
            minio(json!({"bucket": "b-1", "endpoint": "https://m:9000", "path_style": false})),
            "settings.path_style",
            "path-style",
        ),
        (
            minio(json!({"bucket": "b-1", "endpoint": "http://m:9000", "use_ssl": true})),
            "settings.use_ssl",
            "match",
        ),
        (
            minio(
                json!({"bucket": "b-1", "endpoint": "https://m:9000", "insecure_skip_verify": true}),
            ),
            "settings.insecure_skip_verify",
            "cannot be disabled",
        ),
        (
            minio(json!({"bucket": "b-1", "endpoint": "https://m:9000", "prefix": "/abs"})),
            "settings.prefix",
            "relative",
        ),
        (
            aws(json!({"bucket": "b-1", "region": "us-east-1", "endpoint": "https://s3.local"})),
            "settings.endpoint",
            "regional endpoint",
        ),
        (
            aws(json!({"bucket": "b-1", "region": "moon-1"})),
            "settings.region",
            "region code",
        ),
        (
            aws(json!({"bucket": "b-1", "region": "us-east-1", "use_ssl": false})),
            "settings.use_ssl",
            "TLS",
        ),
        (
            json!({"name": "x", "provider": "MINIO", "settings": {"bucket": "b-1", "endpoint": "http://m:9000"}, "secrets": {"access_key_id": "AK"}}),
            "secrets.secret_access_key",
            "required",
        ),
        (
            json!({"name": "x", "provider": "MINIO", "settings": {"bucket": "b-1", "endpoint": "http://m:9000", "secret_access_key": "oops"}, "secrets": ok_s3}),
            "settings.secret_access_key",
            "secrets",
        ),
        (
            pg(
                json!({"database": "d", "user": "u"}),
                json!({"password": "p"}),
            ),
            "settings.host",
            "required",
        ),
        (
            pg(
                json!({"host": "postgres://h", "database": "d", "user": "u"}),
                json!({"password": "p"}),
            ),
            "settings.host",
            "hostname",
        ),
        (
            pg(
                json!({"host": "h", "port": 0, "database": "d", "user": "u"}),
                json!({"password": "p"}),
            ),
            "settings.port",
            "1 to 65535",
        ),
        (
            pg(json!({"host": "h", "user": "u"}), json!({"password": "p"})),
            "settings.database",
            "required",
        ),
        (
            pg(
                json!({"host": "h", "database": "d"}),
                json!({"password": "p"}),
            ),
            "settings.user",
            "required",
        ),
        (
            pg(
                json!({"host": "h", "database": "d", "user": "u", "tls_mode": "off"}),
                json!({"password": "p"}),
            ),
            "settings.tls_mode",
            "certificate verification cannot be turned off",
        ),
        (
            pg(db.clone(), json!({"password": "p"})),
            "settings.tls_mode",
            "required: choose verify-full (with ca_certificate) or verify-ca; disable only for an isolated local fixture",
        ),
        (
            pg(
                json!({"host": "h", "database": "d", "user": "u", "tls_mode": "require"}),
                json!({"password": "p"}),
            ),
            "settings.tls_mode",
            "require means TLS without certificate verification, and verification cannot be turned off",
        ),
        (
            json!({"name": "x", "provider": "MARIADB", "capabilities": ["DESTINATION"], "settings": {"host": "h", "database": "d", "user": "u", "tls_mode": "trust"}, "secrets": {"password": "p"}}),
            "settings.tls_mode",
            "without certificate verification",
        ),
        (
            pg(
                json!({"host": "h", "database": "d", "user": "u", "tls_mode": "verify-full"}),
                json!({"password": "p"}),
            ),
            "settings.ca_certificate",
            "PEM",
        ),
        (
            pg(
                json!({"host": "h", "database": "d", "user": "u", "slot_name": "Bad-Slot"}),
                json!({"password": "p"}),
            ),
            "settings.slot_name",
            "lowercase",
        ),
        (
            pg(
                json!({"host": "h", "database": "d", "user": "u", "sslmode": "disable"}),
                json!({"password": "p"}),
            ),
            "settings.sslmode",
            "unknown setting",
        ),
        (pg(db.clone(), json!({})), "secrets.password", "required"),
        (
            pg(db.clone(), json!({"password": "p", "api_key": "k"})),
            "secrets.api_key",
            "unknown secret field",
        ),
        (
            json!({"name": "x", "provider": "MYSQL", "capabilities": ["DESTINATION"], "settings": {"host": "h", "database": "d", "user": "u", "server_id": 7}, "secrets": {"password": "p"}}),
            "settings.server_id",
            "only a SOURCE",
        ),
    ];
    for (body, field, needle) in &cases {
        let (status, err) = api.post("/api/v1/connections", body.clone()).await;
        assert_eq!(status, 422, "{body} → {err}");
        let why = err["error"]["fields"][*field]
            .as_str()
            .unwrap_or_else(|| panic!("field {field} named for {body}: {err}"));
        assert!(
            why.contains(needle),
            "{field}: {why:?} should say {needle:?}"
        );
    }
    let (_, list) = api.get("/api/v1/connections").await;
    assert_eq!(list["items"], json!([]), "nothing was stored");
    let (_, audit) = api.get("/api/v1/audit?action=connection.").await;
    assert_eq!(audit["items"], json!([]), "no audit row for refused input");

    // Name taken: 409 and still one connection.
    let good = json!({"name": "dup", "provider": "MINIO", "settings": {"bucket": "b-1", "endpoint": "http://m:9000"}, "secrets": ok_s3});
    assert_eq!(api.post("/api/v1/connections", good.clone()).await.0, 201);
    let (status, err) = api.post("/api/v1/connections", good).await;
    assert_eq!(status, 409, "{err}");
    // PATCH validates the merged settings the same way and changes nothing when refused.
    let (_, list) = api.get("/api/v1/connections").await;
    let id = list["items"][0]["id"].as_str().unwrap().to_string();
    let (status, err) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"settings": {"endpoint": "http://u:p@m:9000"}}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(err["error"]["fields"]["settings.endpoint"].is_string());
    let (status, err) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"provider": "AWS_S3"}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(err["error"]["fields"]["provider"]
        .as_str()
        .unwrap()
        .contains("cannot change"));
    let (_, after) = api.get(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(after["settings"]["endpoint"], "http://m:9000");
    assert_eq!(after["generation"], 1);
}

#[tokio::test]
async fn patch_merges_settings_keeps_the_secret_ref_and_delete_removes_everything() {
    let api = admin_api();
    let c = api.connection(json!({"name": "m", "provider": "MINIO", "settings": {"bucket": "b-1", "endpoint": "http://m:9000"}, "secrets": {"access_key_id": "AK", "secret_access_key": "SK-long-enough"}})).await;
    let id = c["id"].as_str().unwrap();
    let (status, p) = api.patch(&format!("/api/v1/connections/{id}"), json!({"name": "m2", "settings": {"prefix": "cdc"}, "secrets": {"session_token": "tok-123456"}})).await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["name"], "m2");
    assert_eq!(p["settings"]["prefix"], "cdc/");
    assert_eq!(p["settings"]["bucket"], "b-1", "untouched settings stay");
    assert_eq!(p["secret_ref"], c["secret_ref"]);
    assert_eq!(
        p["secret_fields_set"],
        json!(["access_key_id", "secret_access_key", "session_token"])
    );
    assert_eq!(p["generation"], 2);
    let (status, _) = api.delete(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(status, 204);
    assert_eq!(api.get(&format!("/api/v1/connections/{id}")).await.0, 404);
    let db = crate::helpers::store(&api.app.data_dir()).await;
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM secret_values")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(left, 0, "the encrypted credentials go with the connection");
}

/// Rows stored before tls_mode `require` was refused still load, with a warning; saving such a
/// connection again (any change) needs a verifying mode or disable, and nothing new is built on
/// it meanwhile.
#[tokio::test]
async fn a_stored_require_connection_loads_with_a_warning_and_must_choose_a_verifying_mode_to_change(
) {
    let api = admin_api();
    let c = api.connection(json!({"name": "legacy", "provider": "POSTGRESQL", "capabilities": ["SOURCE", "DESTINATION"],
        "settings": {"host": "db.internal", "database": "d", "user": "u", "tls_mode": "disable"}, "secrets": {"password": "p"}})).await;
    let id = c["id"].as_str().unwrap();
    let db = crate::helpers::store(&api.app.data_dir()).await;
    // What a row written before the rule looks like.
    let settings: String = sqlx::query_scalar("SELECT settings FROM connections WHERE id = $1")
        .bind(id)
        .fetch_one(&db)
        .await
        .unwrap();
    let mut settings: Value = serde_json::from_str(&settings).unwrap();
    settings["tls_mode"] = json!("require");
    sqlx::query("UPDATE connections SET settings = $1 WHERE id = $2")
        .bind(settings.to_string())
        .bind(id)
        .execute(&db)
        .await
        .unwrap();
    let (status, got) = api.get(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["settings"]["tls_mode"], "require");
    assert_eq!(
        got["warnings"],
        json!(["TLS without certificate verification: edit the connection and choose verify-full (with the CA certificate that signed the server's)"])
    );
    // A rename alone is refused, naming tls_mode; nothing changes.
    let (status, err) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"name": "legacy 2"}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
    assert!(
        err["error"]["fields"]["settings.tls_mode"]
            .as_str()
            .unwrap_or_default()
            .contains("verification cannot be turned off"),
        "{err}"
    );
    let (_, after) = api.get(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(
        (after["name"].as_str(), after["generation"].as_i64()),
        (Some("legacy"), Some(1))
    );
    // Nothing new on it: a delivery into it is refused before anything else is looked at.
    let (status, err) = api
        .post(
            "/api/v1/deliveries",
            json!({"name": "d", "pipeline_id": "none", "destination_connection_id": id}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
    assert!(
        err["error"]["fields"]["destination_connection_id"]
            .as_str()
            .unwrap_or_default()
            .contains("TLS without certificate verification"),
        "{err}"
    );
    // Choosing a mode (here disable) is what saving it takes.
    let (status, fixed) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"name": "legacy 2", "settings": {"tls_mode": "disable"}}),
        )
        .await;
    assert_eq!(status, 200, "{fixed}");
    assert_eq!(fixed["settings"]["tls_mode"], "disable");
    assert!(fixed["warnings"][0]
        .as_str()
        .unwrap_or_default()
        .contains("isolated local fixture"));
}

/// The form offers the three modes a connection may be saved with (nothing preselected, no
/// require) and refuses a post without a choice inline, keeping what was typed.
#[tokio::test]
async fn the_connection_form_offers_verify_full_verify_ca_or_disable_and_asks_for_a_choice() {
    let api = admin_api();
    let b = sign_in(&api.app, "ada", PASSWORD).await;
    let page = b
        .text(format!("{}/connections/new?provider=POSTGRESQL", b.base))
        .await;
    let select = &page[page.find(r#"name="settings.tls_mode""#).unwrap()..];
    let select = &select[..select.find("</select>").unwrap()];
    let values: Vec<&str> = select
        .split(r#"<option value=""#)
        .skip(1)
        .map(|o| &o[..o.find('"').unwrap()])
        .collect();
    assert_eq!(
        values,
        ["", "verify-full", "verify-ca", "disable"],
        "{select}"
    );
    assert!(
        select.matches(" selected").count() == 1
            && select.contains(r#"<option value="" selected>— choose —</option>"#),
        "nothing chosen for the user: {select}"
    );
    let res = b
        .client
        .post(format!("{}/connections", b.base))
        .form(&[
            ("csrf_token", b.csrf.as_str()),
            ("provider", "POSTGRESQL"),
            ("name", "typed"),
            ("capabilities", "SOURCE"),
            ("settings.host", "db.internal"),
            ("settings.database", "d"),
            ("settings.user", "u"),
            ("settings.tls_mode", ""),
            ("secrets.password", "p"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    let html = res.text().await.unwrap();
    assert!(
        html.contains(r#"id="f-settings.tls_mode-error""#)
            && html.contains("required: choose verify-full (with ca_certificate) or verify-ca; disable only for an isolated local fixture"),
        "{html}"
    );
    assert!(
        html.contains(r#"value="db.internal""#),
        "what was typed stays"
    );
    let (_, list) = api.get("/api/v1/connections").await;
    assert_eq!(list["total"], 0, "nothing stored: {list}");
}

/// A client generated from the OpenAPI document sends every optional field, `null` when unset,
/// the other provider's keys included: `null` in settings and secrets means "not given" on
/// create, patch and rotate (it was a 422 "unknown setting"), and nothing of it is stored.
#[tokio::test]
async fn null_settings_and_secrets_from_a_generated_client_are_not_given() {
    let api = admin_api();
    let (status, c) = api
        .post(
            "/api/v1/connections",
            json!({"name": "nulls", "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
                "settings": {"host": "db.example", "port": 5432, "database": "app", "user": "cdc",
                    "tls_mode": "disable", "bucket": null, "endpoint": null, "region": null,
                    "prefix": null},
                "secrets": {"password": "pw", "access_key_id": null,
                    "secret_access_key": null, "session_token": null}}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    let id = c["id"].as_str().unwrap();
    assert_eq!(c["secret_fields_set"], json!(["password"]), "{c}");
    let db = crate::helpers::store(&api.app.data_dir()).await;
    let stored: String = sqlx::query_scalar("SELECT settings FROM connections WHERE id = $1")
        .bind(id)
        .fetch_one(&db)
        .await
        .unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    for key in ["bucket", "endpoint", "region", "prefix"] {
        assert!(stored.get(key).is_none(), "{key} stored: {stored}");
        assert!(c["settings"].get(key).is_none(), "{key} answered: {c}");
    }
    assert_eq!(stored["host"], "db.example");

    // PATCH: a null secret keeps the stored one; a null setting of the other provider is a no-op.
    let (status, p) = api
        .patch(
            &format!("/api/v1/connections/{id}"),
            json!({"settings": {"bucket": null}, "secrets": {"password": null, "access_key_id": null}}),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["secret_fields_set"], json!(["password"]), "{p}");
    assert_eq!(p["settings"]["host"], "db.example");

    // Rotate: null secrets are left out.
    let (status, r) = api
        .post(
            &format!("/api/v1/connections/{id}/rotate"),
            json!({"secrets": {"password": "pw2", "access_key_id": null, "session_token": null}}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["secret_fields_set"], json!(["password"]), "{r}");

    // A key no provider knows is still refused, null or not.
    let (status, e) = api
        .post(
            "/api/v1/connections",
            json!({"name": "nulls2", "provider": "POSTGRESQL",
                "settings": {"host": "db.example", "database": "app", "user": "cdc",
                    "tls_mode": "disable", "sslmode": "x"},
                "secrets": {"password": "pw"}}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
}
