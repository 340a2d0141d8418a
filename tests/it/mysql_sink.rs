//! MySQL as a JDBC destination, against the stack's real MySQL 9 server: a PostgreSQL
//! pipeline's rows arrive through the Debezium JDBC sink over verify-full TLS (the CA handed to
//! the worker as a PKCS12 truststore by the config provider) and stay equal to the source
//! through upserts by key, deletes and a column added in the source; the destination test
//! probes the rights the sink needs and names the missing grants.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::{Connection, Row};

use crate::helpers::*;

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

/// (id, name, qty, note) of one table, ordered by id; empty while the table does not exist and
/// `note` empty while the column does not.
type Rows = Vec<(i64, String, i64, Option<String>)>;
/// (order_id, line, sku) of the composite-key table.
type Lines = Vec<(i64, i64, String)>;

async fn mysql_root(s: &Stack) -> sqlx::MySqlConnection {
    sqlx::MySqlConnection::connect(&s.mysql_root_url(&s.mysql_dest_db))
        .await
        .unwrap()
}

async fn mysql_exec(s: &Stack, sql: &str) {
    let mut c = mysql_root(s).await;
    sqlx::query(sql)
        .execute(&mut c)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn mysql_has_column(c: &mut sqlx::MySqlConnection, db: &str, table: &str, col: &str) -> bool {
    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = ? AND table_name = ? AND column_name = ?")
        .bind(db)
        .bind(table)
        .bind(col)
        .fetch_one(&mut *c)
        .await
        .unwrap_or(0)
        > 0
}

async fn mysql_rows(s: &Stack, table: &str) -> Rows {
    let mut c = mysql_root(s).await;
    let note = if mysql_has_column(&mut c, &s.mysql_dest_db, table, "note").await {
        "CAST(note AS CHAR)"
    } else {
        "CAST(NULL AS CHAR)"
    };
    let sql = format!("SELECT CAST(id AS SIGNED), CAST(name AS CHAR), CAST(qty AS SIGNED), {note} FROM `{table}` ORDER BY id");
    match sqlx::query(&sql).fetch_all(&mut c).await {
        Ok(rows) => rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect(),
        Err(_) => vec![],
    }
}

async fn mysql_lines(s: &Stack, table: &str) -> Lines {
    let mut c = mysql_root(s).await;
    let sql = format!("SELECT CAST(order_id AS SIGNED), CAST(line AS SIGNED), CAST(sku AS CHAR) FROM `{table}` ORDER BY 1, 2");
    match sqlx::query(&sql).fetch_all(&mut c).await {
        Ok(rows) => rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
        Err(_) => vec![],
    }
}

async fn pg_rows(db: &mut sqlx::PgConnection, table: &str, with_note: bool) -> Rows {
    let note = if with_note { "note" } else { "NULL::text" };
    sqlx::query(&format!(
        "SELECT id::int8, name, qty::int8, {note} FROM {table} ORDER BY id"
    ))
    .fetch_all(db)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

async fn pg_lines(db: &mut sqlx::PgConnection, table: &str) -> Lines {
    sqlx::query(&format!(
        "SELECT order_id::int8, line::int8, sku FROM {table} ORDER BY 1, 2"
    ))
    .fetch_all(db)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// A MySQL DESTINATION connection to the stack's destination database, verify-full against the
/// stack's test CA (the server's certificate names 127.0.0.1 and localhost).
fn mysql_dest(s: &Stack, name: &str, user: &str, password: &str) -> Value {
    json!({"name": name, "provider": "MYSQL", "capabilities": ["DESTINATION"],
        "settings": {"host": s.mysql_host, "port": s.mysql_port, "database": s.mysql_dest_db, "user": user,
            "tls_mode": "verify-full", "ca_certificate": crate::tls::tls().ca},
        "secrets": {"password": password}})
}

async fn test_report(api: &Api, id: &Value) -> Value {
    let (status, report) = api
        .post(
            &format!("/api/v1/connections/{}/test", id.as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    report
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name:?}: {report}"))
}

#[tokio::test]
async fn a_postgres_pipeline_delivers_into_mysql_over_verified_tls_with_upserts_deletes_and_a_new_column(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[("CLUECDC_RECONCILE_INTERVAL", "1s")]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("ms_{tag}");
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name varchar(50) NOT NULL, qty int NOT NULL)"),
        format!("CREATE TABLE {schema}.lines (order_id int, line int, sku text NOT NULL, PRIMARY KEY (order_id, line))"),
        format!("INSERT INTO {schema}.items VALUES (1, 'apple', 3), (2, 'pear', 5)"),
        format!("INSERT INTO {schema}.lines VALUES (1, 1, 'A-1'), (1, 2, 'B-2'), (2, 1, 'A-1')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": "pg src", "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
        "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": schema, "publication_name": schema},
        "secrets": {"password": s.pg_password}})).await;
    let dest = api
        .connection(mysql_dest(
            &s,
            "mysql dest",
            &s.mysql_dest_user,
            &s.mysql_dest_password,
        ))
        .await;
    let weak_user = format!("ms_weak_{tag}");
    mysql_exec(
        &s,
        &format!("CREATE USER '{weak_user}'@'%' IDENTIFIED BY 'weak_fixture_pw'"),
    )
    .await;
    mysql_exec(
        &s,
        &format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON `{}`.* TO '{weak_user}'@'%'",
            s.mysql_dest_db
        ),
    )
    .await;
    let weak = api
        .connection(mysql_dest(&s, "mysql weak", &weak_user, "weak_fixture_pw"))
        .await;
    let prefix = format!("ms-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "pg to mysql", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect,
        "tables": [format!("{schema}.items"), format!("{schema}.lines")], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let pid = p["id"].as_str().unwrap().to_string();
    let items = format!("ms_{tag}_items");
    let lines = format!("ms_{tag}_lines");
    let delivery = std::sync::Mutex::new(None::<String>);
    let result = async {
        // The destination test, over verify-full TLS as the destination user: every check
        // passes, the create/alter/drop probe included.
        let report = test_report(&api, &dest["id"]).await;
        assert_eq!(report["ok"], true, "{report}");
        assert_eq!(
            check(&report, "create and alter tables")["status"],
            "pass",
            "{report}"
        );
        assert!(
            check(&report, "version")["message"]
                .as_str()
                .unwrap()
                .starts_with('9'),
            "a MySQL 9 server: {report}"
        );

        // A user without CREATE and ALTER: the delivery is refused before anything is
        // created, naming the check and the grants.
        let (status, refused) = api.post("/api/v1/deliveries", json!({"name": "to weak mysql", "pipeline_id": pid, "destination_connection_id": weak["id"]})).await;
        assert_eq!(status, 422, "{refused}");
        let why = refused["error"]["fields"]["destination_connection_id"]
            .as_str()
            .unwrap_or_default();
        assert!(
            why.contains("create and alter tables")
                && why.contains("CREATE command denied")
                && why.contains("grant CREATE, ALTER"),
            "{refused}"
        );
        assert!(
            connect_status(&s.connect_url, "cluecdc-deliver-to-weak-mysql")
                .await
                .is_none(),
            "nothing deployed"
        );

        let (status, preview) = api.post("/api/v1/deliveries/preview", json!({"name": "to mysql", "pipeline_id": pid, "destination_connection_id": dest["id"],
            "table_name_format": format!("ms_{tag}_${{source.table}}")})).await;
        assert_eq!(status, 200, "{preview}");
        assert_eq!(preview["validation_errors"], json!({}), "{preview}");
        let url = preview["config"]["connection.url"].as_str().unwrap();
        let r = dest["secret_ref"].as_str().unwrap();
        assert_eq!(
            url,
            format!("jdbc:mysql://{}:{}/{}?sslMode=VERIFY_IDENTITY&trustCertificateKeyStoreType=PKCS12&trustCertificateKeyStoreUrl=file:${{cluecdc:{r}:ca_truststore_file}}&trustCertificateKeyStorePassword=${{cluecdc:{r}:ca_truststore_password}}",
                s.mysql_host, s.mysql_port, s.mysql_dest_db),
            "TLS verified against the connection's CA only; no public-key retrieval"
        );
        let (status, d) = api.post("/api/v1/deliveries", json!({"name": "to mysql", "pipeline_id": pid, "destination_connection_id": dest["id"],
            "table_name_format": format!("ms_{tag}_${{source.table}}")})).await;
        assert_eq!(status, 201, "{d}");
        let did = d["id"].as_str().unwrap().to_string();
        *delivery.lock().unwrap() = Some(did.clone());

        // The snapshot, then inserts, updates (upserts by key, one of them on a composite
        // key) and deletes.
        let initial: Rows = vec![(1, "apple".into(), 3, None), (2, "pear".into(), 5, None)];
        eventually(
            Duration::from_secs(120),
            "the snapshot in MySQL",
            || async {
                (mysql_rows(&s, &items).await == initial
                    && mysql_lines(&s, &lines).await.len() == 3)
                    .then_some(())
            },
        )
        .await;
        for sql in [
            format!("INSERT INTO {schema}.items VALUES (3, 'fig', 7)"),
            format!("UPDATE {schema}.items SET qty = 4, name = 'green apple' WHERE id = 1"),
            format!("DELETE FROM {schema}.items WHERE id = 2"),
            format!("UPDATE {schema}.lines SET sku = 'C-3' WHERE order_id = 1 AND line = 2"),
            format!("DELETE FROM {schema}.lines WHERE order_id = 2 AND line = 1"),
            format!("INSERT INTO {schema}.lines VALUES (2, 2, 'D-4')"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        let want = pg_rows(&mut db, &format!("{schema}.items"), false).await;
        assert_eq!(
            want,
            vec![
                (1, "green apple".into(), 4, None),
                (3, "fig".into(), 7, None)
            ]
        );
        let want_lines = pg_lines(&mut db, &format!("{schema}.lines")).await;
        eventually(
            Duration::from_secs(120),
            "MySQL equal to the source after c/u/d",
            || async {
                (mysql_rows(&s, &items).await == want
                    && mysql_lines(&s, &lines).await == want_lines)
                    .then_some(())
            },
        )
        .await;

        // Schema evolution: a column added in the source appears in MySQL with its values.
        for sql in [
            format!("ALTER TABLE {schema}.items ADD COLUMN note text"),
            format!("INSERT INTO {schema}.items VALUES (4, 'kiwi', 1, 'new column')"),
            format!("UPDATE {schema}.items SET note = 'ripe' WHERE id = 3"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        let want = pg_rows(&mut db, &format!("{schema}.items"), true).await;
        assert_eq!(want.len(), 3);
        eventually(
            Duration::from_secs(120),
            "the added column and its values in MySQL",
            || async { (mysql_rows(&s, &items).await == want).then_some(()) },
        )
        .await;
        let mut root = mysql_root(&s).await;
        assert!(mysql_has_column(&mut root, &s.mysql_dest_db, &items, "note").await);

        // The sink logged in as the destination user; the provider wrote the CA on the worker
        // as a truststore (never the PEM in Connect's config).
        let owners: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT CAST(user AS CHAR) FROM information_schema.processlist WHERE db = ?",
        )
        .bind(&s.mysql_dest_db)
        .fetch_all(&mut root)
        .await
        .unwrap();
        assert!(owners.contains(&s.mysql_dest_user), "{owners:?}");
        let dir = std::env::var("CLUECDC_PROVIDER_FILES").unwrap();
        let store = std::path::Path::new(&dir).join(format!("{r}-truststore.p12"));
        assert!(store.exists(), "{}", store.display());
        let live = connect_config(&s, "cluecdc-deliver-to-mysql")
            .await
            .expect("the connector in Connect")
            .to_string();
        assert!(
            live.contains(":ca_truststore_file}") && !live.contains("BEGIN CERTIFICATE"),
            "{live}"
        );
        assert!(
            !live.to_lowercase().contains("allowpublickeyretrieval"),
            "{live}"
        );
        let (_, detail) = api.get(&format!("/api/v1/deliveries/{did}")).await;
        assert_eq!(detail["connector"]["phase"], "RUNNING", "{detail}");

        // The driver on the worker verifies against that truststore and nothing else: with
        // another CA in the connection, the restarted sink fails with the certificate problem.
        let (status, patched) = api
            .patch(
                &format!("/api/v1/connections/{}", dest["id"].as_str().unwrap()),
                json!({"settings": {"ca_certificate": crate::tls::tls().other_ca}}),
            )
            .await;
        assert_eq!(status, 200, "{patched}");
        let (status, r) = api
            .post(&format!("/api/v1/deliveries/{did}/restart"), json!({}))
            .await;
        assert!(status < 300, "{r}");
        let failed = eventually(
            Duration::from_secs(90),
            "the sink FAILED on the untrusted certificate",
            || async {
                let (_, c) = api.get("/api/v1/connectors/cluecdc-deliver-to-mysql").await;
                (c["phase"] == "FAILED").then_some(c)
            },
        )
        .await;
        let trace = failed["trace"].as_str().unwrap_or_default();
        assert!(
            trace.contains("Path does not chain with any of the trust anchors"),
            "the driver on the worker names it: {failed}"
        );
        let message = failed["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("failed (TLS certificate not trusted); not restarting"),
            "a permanent failure, not retried: {failed}"
        );
    };
    let cleanup = async {
        let id = delivery.lock().unwrap().clone();
        if let Some(id) = id {
            let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        }
        let _ = api
            .delete(&format!("/api/v1/pipelines/{pid}?drop_slot=true"))
            .await;
        drop_capture_fixture(&s, &schema, &schema).await;
        if let Ok(mut m) = sqlx::MySqlConnection::connect(&s.mysql_root_url(&s.mysql_dest_db)).await
        {
            for sql in [
                format!("DROP TABLE IF EXISTS `{items}`, `{lines}`"),
                format!("DROP USER IF EXISTS '{weak_user}'@'%'"),
            ] {
                let _ = sqlx::query(&sql).execute(&mut m).await;
            }
        }
    };
    with_cleanup(result, cleanup).await;
}

#[tokio::test]
async fn a_mysql_destination_user_without_create_or_alter_fails_the_rights_check_naming_the_grants()
{
    let s = stack();
    let api = admin_api();
    let tag = tag();
    let no_create = format!("ms_nc_{tag}");
    let no_alter = format!("ms_na_{tag}");
    let db = &s.mysql_dest_db;
    let result = async {
        for (user, grants) in [
            (&no_create, "SELECT, INSERT, UPDATE, DELETE"),
            (&no_alter, "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP"),
        ] {
            mysql_exec(
                &s,
                &format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'fixture_pw'"),
            )
            .await;
            mysql_exec(&s, &format!("GRANT {grants} ON `{db}`.* TO '{user}'@'%'")).await;
        }
        for (user, denied) in [(&no_create, "CREATE"), (&no_alter, "ALTER")] {
            let c = api
                .connection(mysql_dest(&s, &format!("weak {user}"), user, "fixture_pw"))
                .await;
            let report = test_report(&api, &c["id"]).await;
            assert_eq!(report["ok"], false, "{report}");
            // It logged in over verify-full TLS (a first login: the full caching_sha2 exchange).
            assert_eq!(check(&report, "reachable")["status"], "pass", "{report}");
            let rights = check(&report, "create and alter tables");
            assert_eq!(rights["status"], "fail", "{report}");
            let message = rights["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("{denied} command denied")),
                "{user}: {message}"
            );
            let hint = rights["hint"].as_str().unwrap();
            assert!(
                hint.starts_with(
                    "grant CREATE, ALTER, DROP, INSERT, UPDATE, DELETE on the database"
                ),
                "{hint}"
            );
            if denied == "ALTER" {
                // The probe it could create was dropped again (the hint names it, for when
                // it could not be).
                let probe = hint
                    .split_whitespace()
                    .find(|w| w.starts_with("cluecdc_probe_"))
                    .unwrap_or_else(|| panic!("the hint names the probe table: {hint}"));
                let mut root = mysql_root(&s).await;
                let left: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                )
                .bind(db)
                .bind(probe.trim_end_matches(','))
                .fetch_one(&mut root)
                .await
                .unwrap();
                assert_eq!(left, 0, "{probe} was dropped");
            }
        }
    };
    let cleanup = async {
        if let Ok(mut m) = sqlx::MySqlConnection::connect(&s.mysql_root_url(db)).await {
            for user in [&no_create, &no_alter] {
                let _ = sqlx::query(&format!("DROP USER IF EXISTS '{user}'@'%'"))
                    .execute(&mut m)
                    .await;
            }
        }
    };
    with_cleanup(result, cleanup).await;
}
