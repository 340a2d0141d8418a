//! The config provider check on real Connect workers (`scripts/stack worker`), each a cluster of
//! its own on the stack's Kafka: one without the provider jar, one with the jar but no
//! `config.providers` lines, one with both, the jar fetched from ClueCDC's own download and
//! checked against its SHA-512. Each is told apart and named with its fix; so are a wrong token,
//! another cluster's token and a ClueCDC the worker cannot reach (the provider's config file is
//! re-read, so these need no restart). A pipeline is refused on a failing cluster, saying why,
//! and runs on the worker that has only the downloaded jar, its secrets as references.

use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha512};

use crate::helpers::{
    admin_api_with, drop_capture_fixture, eventually, free_port, heavy_exclusive, stack, stack_cmd,
    var, with_cleanup, Api,
};

const JAR: &str = "/static/cluecdc-config-provider.jar";

/// Stops the extra workers when the test ends, however it ends.
struct Workers(Vec<String>);

impl Drop for Workers {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ =
                std::process::Command::new(format!("{}/scripts/stack", env!("CARGO_MANIFEST_DIR")))
                    .args(["worker", "down", name])
                    .output();
        }
    }
}

async fn check(api: &Api, cluster: &str) -> Value {
    let (status, check) = api
        .get(&format!(
            "/api/v1/connect-clusters/{cluster}/provider-check?fresh=true"
        ))
        .await;
    assert_eq!(status, 200, "{check}");
    check
}

/// The only worker's verdict, after the check has settled on `want` (the provider re-reads
/// its config file on change, within a second or two).
async fn settles(api: &Api, cluster: &str, want: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..20 {
        let c = check(api, cluster).await;
        let workers = c["workers"].as_array().unwrap().clone();
        assert_eq!(workers.len(), 1, "one worker per cluster here: {c}");
        if workers[0]["verdict"] == want {
            return c;
        }
        last = c;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the check did not settle on {want}; last: {last}")
}

/// The state of a checklist step (`data-state` of its `li[data-step]`).
fn step(html: &str, id: &str) -> String {
    let at = html
        .find(&format!("data-step=\"{id}\""))
        .unwrap_or_else(|| panic!("no step {id} in {html}"));
    let rest = &html[at..];
    let state = &rest[rest.find("data-state=\"").unwrap() + 12..];
    state[..state.find('"').unwrap()].to_string()
}

fn provider_file(path: &std::path::Path, url: &str, token: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("url={url}\ntoken={token}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn the_provider_check_names_each_worker_problem_and_a_worker_with_only_the_downloaded_jar_runs_a_pipeline(
) {
    // Its own Connect workers: one such test at a time across the engines' runs.
    let _heavy = heavy_exclusive().await;
    let s = stack();
    let jar_path = var("CLUECDC_PROVIDER_JAR");
    let api = admin_api_with(&[("CLUECDC_PROVIDER_JAR", &jar_path)]);
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();

    // The jar as a worker's operator fetches it: anonymously, checked against the SHA-512.
    let anon = reqwest::Client::new();
    let jar = anon
        .get(format!("{}{JAR}", api.app.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let line = anon
        .get(format!("{}{JAR}.sha512", api.app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        line.split_whitespace().next().unwrap(),
        hex::encode(Sha512::digest(&jar)),
        "the download matches its checksum"
    );
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("cluecdc-config-provider");
    std::fs::create_dir(&plugin_dir).unwrap();
    std::fs::write(plugin_dir.join("cluecdc-config-provider.jar"), &jar).unwrap();
    let provider = dir.path().join("cluecdc-provider.properties");

    let names = ["bare", "jar", "full"].map(|n| format!("pc-{n}-{tag}"));
    let ports = [free_port(), free_port(), free_port()];
    let _workers = Workers(names.to_vec());
    let plugin_dir = plugin_dir.to_str().unwrap().to_string();
    let provider_path = provider.to_str().unwrap().to_string();
    let [p0, p1, p2] = ports.map(|p| p.to_string());
    // Started one after another: each takes a few seconds.
    stack_cmd(&["worker", "up", &names[0], &p0]);
    stack_cmd(&["worker", "up", &names[1], &p1, "--plugin-dir", &plugin_dir]);
    stack_cmd(&[
        "worker",
        "up",
        &names[2],
        &p2,
        "--plugin-dir",
        &plugin_dir,
        "--provider-file",
        &provider_path,
    ]);

    let mut ids = Vec::new();
    let mut tokens = Vec::new();
    for (name, port) in names.iter().zip(ports) {
        let (status, c) = api
            .post(
                "/api/v1/connect-clusters",
                json!({"name": name, "url": format!("http://127.0.0.1:{port}")}),
            )
            .await;
        assert_eq!(status, 201, "{c}");
        ids.push(c["id"].as_str().unwrap().to_string());
        tokens.push(c["provider_token"].as_str().unwrap().to_string());
    }
    provider_file(&provider, &api.app.url, &tokens[2]);

    // Without the jar.
    let c = settles(&api, &ids[0], "jar_missing").await;
    assert_eq!(c["state"], "failing", "{c}");
    let fix = c["workers"][0]["fix"].as_str().unwrap();
    assert!(
        fix.contains("plugin.path") && fix.contains("cluecdc-config-provider.jar"),
        "{fix}"
    );
    // With the jar, without config.providers.
    let c = settles(&api, &ids[1], "not_configured").await;
    assert!(
        c["workers"][0]["fix"]
            .as_str()
            .unwrap()
            .contains("config.providers.cluecdc.class=io.cluecdc.connect.ClueCdcConfigProvider"),
        "{c}"
    );
    // With both: the probe is resolved here, with this cluster's token.
    let c = settles(&api, &ids[2], "passing").await;
    assert_eq!(c["state"], "passing", "{c}");
    assert_eq!(
        c["workers"][0]["worker"],
        format!("http://127.0.0.1:{}", ports[2])
    );

    // A token ClueCDC does not know.
    provider_file(&provider, &api.app.url, &format!("cdcp_{}", "x".repeat(43)));
    let c = settles(&api, &ids[2], "wrong_token").await;
    assert!(
        c["workers"][0]["fix"].as_str().unwrap().contains("token"),
        "{c}"
    );
    // Another cluster's token: named.
    provider_file(&provider, &api.app.url, &tokens[0]);
    let c = settles(&api, &ids[2], "wrong_token").await;
    assert!(
        c["workers"][0]["message"]
            .as_str()
            .unwrap()
            .contains(&names[0]),
        "{c}"
    );
    // A ClueCDC address the worker cannot reach: the provider's words name it.
    let closed = format!("http://127.0.0.1:{}", free_port());
    provider_file(&provider, &closed, &tokens[2]);
    let c = settles(&api, &ids[2], "clue_cdc_unreachable").await;
    assert!(
        c["workers"][0]["message"]
            .as_str()
            .unwrap()
            .contains(&closed),
        "{c}"
    );
    provider_file(&provider, &api.app.url, &tokens[2]);
    settles(&api, &ids[2], "passing").await;

    // The page shows the same, per worker.
    let page = api.text(&format!("/clusters/connect/{}", ids[0])).await;
    assert!(
        page.contains("data-verdict=\"jar_missing\"") && page.contains("provider jar missing"),
        "the cluster page shows the verdict"
    );

    // The first-hour checklist checks the first Connect cluster by name: the bare one.
    let list = api.text("/getting-started").await;
    assert_eq!(step(&list, "kafka"), "todo", "no Kafka cluster yet");
    assert_eq!(
        step(&list, "connect"),
        "done",
        "the worker has the Debezium plugins"
    );
    assert_eq!(step(&list, "provider"), "failing");
    assert!(
        list.contains("provider jar missing"),
        "the checklist says why"
    );

    // Deploys: refused on the failing cluster, saying why; run on the one with the jar.
    let (status, kafka) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{kafka}");
    let schema = format!("pc_{tag}");
    let result = async {
        use sqlx::Connection;
        let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
            .await
            .unwrap();
        for sql in [
            format!("CREATE SCHEMA {schema}"),
            format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name text)"),
            format!("INSERT INTO {schema}.items VALUES (1, 'one')"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
        let src = api
            .connection(json!({"name": format!("pg {tag}"), "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
                "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user,
                    "tls_mode": "disable", "slot_name": schema, "publication_name": schema},
                "secrets": {"password": s.pg_password}}))
            .await;
        let body = |cluster: &str, name: &str| {
            json!({"name": name, "source_connection_id": src["id"], "kafka_cluster_id": kafka["id"],
                "connect_cluster_id": cluster, "tables": [format!("{schema}.items")],
                "topic_prefix": format!("pc-{tag}"), "partitions": 1, "replication_factor": 1})
        };
        let (status, refused) = api
            .post(
                "/api/v1/pipelines",
                body(&ids[0], &format!("refused {tag}")),
            )
            .await;
        assert_eq!(status, 422, "{refused}");
        let why = refused["error"]["fields"]["connect_cluster_id"]
            .as_str()
            .unwrap_or_default();
        assert!(
            why.contains("provider jar missing") && why.contains("plugin.path"),
            "{refused}"
        );
        let (status, p) = api
            .post("/api/v1/pipelines", body(&ids[2], &format!("items {tag}")))
            .await;
        assert_eq!(status, 201, "{p}");
        let connector = p["connector"]["name"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| format!("cluecdc-capture-pc-{tag}"));
        let worker = format!("http://127.0.0.1:{}", ports[2]);
        crate::helpers::wait_running(&worker, &connector, Duration::from_secs(120)).await;
        // What Connect stores on that worker: references, never the password.
        let config: Value = reqwest::get(format!("{worker}/connectors/{connector}/config"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(
            config["database.password"]
                .as_str()
                .unwrap()
                .starts_with("${cluecdc:"),
            "{config}"
        );
        assert!(!config.to_string().contains(&s.pg_password));
        let id = p["id"].as_str().unwrap().to_string();
        eventually(
            Duration::from_secs(60),
            "ClueCDC sees it running",
            || async {
                let (_, d) = api.get(&format!("/api/v1/pipelines/{id}")).await;
                (d["connector"]["phase"] == "RUNNING").then_some(())
            },
        )
        .await;
        let list = api.text("/getting-started").await;
        assert_eq!(step(&list, "kafka"), "done");
        assert_eq!(step(&list, "pipeline"), "done", "the pipeline runs");
        assert_eq!(step(&list, "delivery"), "todo");
        let (status, _) = api
            .delete(&format!("/api/v1/pipelines/{id}?drop_slot=true"))
            .await;
        assert_eq!(status, 200);
    };
    with_cleanup(result, async {
        drop_capture_fixture(&s, &schema, &schema).await;
    })
    .await;
}
