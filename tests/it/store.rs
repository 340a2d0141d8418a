//! The metadata store (issue 33): a setup made on the embedded SQLite file, copied to
//! PostgreSQL with `cluecdc migrate-store`, is the same setup there, and Kafka Connect does not
//! notice the move.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::helpers::*;
use crate::secrets::{debezium_config, manage_connector, suffix, CaptureFixture};

async fn export(api: &Api) -> String {
    let res = api
        .http
        .get(format!("{}/api/v1/export", api.app.url))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}; its log:\n{}", api.app.log()));
    assert_eq!(res.status().as_u16(), 200);
    res.text().await.unwrap()
}

/// The reconciler's audit rows (what it did to connectors), oldest first.
async fn reconciler_acts(api: &Api) -> Vec<serde_json::Value> {
    let (_, audit) = api.get("/api/v1/audit?actor=reconciler&limit=100").await;
    let mut rows = audit["items"].as_array().unwrap().clone();
    rows.reverse();
    rows
}

#[tokio::test]
async fn a_setup_copied_from_sqlite_to_postgresql_exports_the_same_bytes_decrypts_every_secret_and_leaves_its_connector_running_untouched(
) {
    let s = stack();
    let _c = connect_shared().await;
    let _guard = provider_lock().await;
    let tag = suffix();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    pin_sqlite(&data);
    // One address for both instances: the Connect worker's config provider keeps calling it.
    let listen = format!("127.0.0.1:{}", free_port());
    let env = [
        ("CLUECDC_LISTEN", listen.as_str()),
        ("CLUECDC_LEASE_TTL", "3s"),
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ];
    let app = spawn_app_on(&binary(), tempfile::tempdir().unwrap(), &data, &env);
    create_user(&app, "ada", "admin");
    let token = create_token(&app, "ada", &[]);
    let http = app.client();
    let api = Api { app, token, http };

    let cluster = point_connect_provider_at(&api).await;
    let role = format!("ms_{tag}");
    let password = format!("pw-{tag}");
    let f = CaptureFixture::new(&s, &role, &password).await;
    let conn = api
        .connection(json!({"name": format!("moved {tag}"), "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
            "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": role, "tls_mode": "disable", "slot_name": f.slot, "publication_name": f.slot},
            "secrets": {"password": password}}))
        .await;
    let secret_ref = conn["secret_ref"].as_str().unwrap().to_string();
    let name = format!("cdc-moved-{tag}");
    manage_connector(
        &api,
        &cluster,
        &name,
        &debezium_config(&s, &name, &f, &secret_ref),
    )
    .await;
    let database = format!("cluecdc_move_{}", tag.replace('-', "_"));
    let result = async {
        wait_running(&s.connect_url, &name, Duration::from_secs(120)).await;
        let pid = f.wait_slot_active(None).await;
        let config_before = connect_config(&s, &name).await;
        let exported = export(&api).await;
        let acts_before = reconciler_acts(&api).await;
        assert_eq!(
            acts_before.len(),
            1,
            "the SQLite instance created it: {acts_before:?}"
        );
        assert!(exported.contains(&format!("moved {tag}")), "{exported}");

        // Stop the SQLite instance; copy its store into an empty PostgreSQL database.
        let Api {
            mut app,
            token,
            http,
        } = api;
        assert!(app.terminate(Duration::from_secs(20)).is_some());
        let (url, pg_password) = fresh_postgres_database(&database);
        let sqlite = format!("sqlite://{}", data.join("cluecdc.db").display());
        let started = std::time::Instant::now();
        let out = Command::new(binary())
            .args(["migrate-store", "--from", &sqlite, "--to", &url])
            .env("CLUECDC_DATABASE_PASSWORD", &pg_password)
            .env_remove("CLUECDC_DATABASE_URL")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{said}");
        assert!(said.contains("every table holds as many rows"), "{said}");
        assert!(
            !said.contains(&password) && !said.contains(&pg_password),
            "{said}"
        );
        eprintln!("migrate-store took {:?}:\n{said}", started.elapsed());

        // The same data directory (its master key), the same address, the PostgreSQL store.
        let again = spawn_app_on(
            &binary(),
            tempfile::tempdir().unwrap(),
            &data,
            &[
                ("CLUECDC_LISTEN", listen.as_str()),
                ("CLUECDC_LEASE_TTL", "3s"),
                ("CLUECDC_RECONCILE_INTERVAL", "1s"),
                ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
                ("CLUECDC_DATABASE_URL", url.as_str()),
                ("CLUECDC_DATABASE_PASSWORD", pg_password.as_str()),
            ],
        );
        let api = Api {
            app: again,
            token,
            http,
        };
        // Until its accept loop runs, a connection to the reused address can be dropped.
        eventually(
            Duration::from_secs(20),
            "the PostgreSQL instance answers",
            || async {
                let ok = reqwest::Client::new()
                    .get(format!("{}/healthz", api.app.url))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                ok.then_some(())
            },
        )
        .await;
        assert_eq!(
            export(&api).await,
            exported,
            "the same export, byte for byte"
        );

        // Every secret decrypts: the connection's test logs in with the stored password, and
        // the provider resolves the connector's reference for the worker's token.
        let (status, tested) = api
            .post(
                &format!("/api/v1/connections/{}/test", conn["id"].as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(status, 200, "{tested}; its log:\n{}", api.app.log());
        assert_eq!(tested["ok"], true, "{tested}");
        // The reconciler on PostgreSQL passes over the connector and changes nothing.
        eventually(
            Duration::from_secs(60),
            "the PostgreSQL instance's reconciler passes",
            || async {
                let (_, r) = api.get("/api/v1/reconciler").await;
                (r["passes_in_this_process"].as_u64().unwrap_or(0) >= 3).then_some(())
            },
        )
        .await;
        assert_eq!(
            connect_config(&s, &name).await,
            config_before,
            "Connect's config is untouched"
        );
        assert_eq!(
            f.slot_pid().await,
            Some(pid),
            "the task kept its replication connection: not restarted"
        );
        let status = connect_status(&s.connect_url, &name).await.unwrap();
        assert_eq!(status["connector"]["state"], "RUNNING", "{status}");
        let (_, audit) = api.get("/api/v1/audit?action=connector.").await;
        let acted: Vec<_> = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["actor"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("cluecdc-reconciler"))
            })
            .collect();
        assert!(
            acted.is_empty(),
            "the reconciler did nothing to the connector: {acted:?}"
        );

        // `backup` copies the embedded file; on PostgreSQL it refuses, writes nothing, and names
        // the PostgreSQL tools instead.
        let to = api.app.dir.path().join("backup.db");
        let out = Command::new(binary())
            .args(["backup", "--to", to.to_str().unwrap(), "--data-dir"])
            .arg(&data)
            .env("CLUECDC_DATABASE_URL", &url)
            .env("CLUECDC_DATABASE_PASSWORD", &pg_password)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(
            said.contains("pg_dump") && said.contains("pg_restore"),
            "{said}"
        );
        assert!(!said.contains(&pg_password), "{said}");
        assert!(!to.exists(), "nothing written");
    };
    // The instances are gone with `result` (killed when dropped): nothing recreates it.
    with_cleanup(result, async {
        f.cleanup(&s.connect_url, &name).await;
        drop_postgres_database(&database);
    })
    .await;
}
