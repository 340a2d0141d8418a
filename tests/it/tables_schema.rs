//! Schema-change guardrails end to end on the stack: a PostgreSQL pipeline over two tables,
//! two PostgreSQL deliveries through the Debezium JDBC sink (`schema.evolution=basic`) over one
//! of them, one with `schema_policy` pause and one with warn, and real DDL on the source.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::*;

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{}_{}", std::process::id(), n % 1_000_000)
}

async fn pg(url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(url).await.unwrap()
}

async fn count(url: &str, sql: &str) -> i64 {
    let mut c = pg(url).await;
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&mut c)
        .await
        .unwrap_or(-1)
}

/// The verdict of `delivery` on `table` in the pipeline's schema, if there is one.
async fn verdict(api: &Api, pipeline: &str, table: &str, delivery: &str) -> Option<Value> {
    let (status, s) = api
        .get(&format!("/api/v1/pipelines/{pipeline}/schema"))
        .await;
    assert_eq!(status, 200, "{s}");
    s["tables"]
        .as_array()?
        .iter()
        .find(|t| t["table"] == table)?["verdicts"]
        .as_array()?
        .iter()
        .find(|v| v["delivery"] == delivery)
        .cloned()
}

async fn desired(api: &Api, id: &str) -> String {
    let (_, d) = api.get(&format!("/api/v1/deliveries/{id}")).await;
    d["connector"]["desired_state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn schema_changes_are_versioned_judged_per_delivery_paused_by_policy_and_named_when_they_fail(
) {
    let started = Instant::now();
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_LOG", "info,cluecdc::tables::schema=debug"),
    ]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("sc_{tag}");
    let src_url = s.pg_url(&s.pg_source_db);
    let dest_url = s.pg_url(&s.pg_dest_db);
    let mut db = pg(&src_url).await;
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, code varchar(50) NOT NULL, qty int NOT NULL, price numeric(10,2))"),
        format!("CREATE TABLE {schema}.other (id int PRIMARY KEY, v text)"),
        format!("INSERT INTO {schema}.items VALUES (1, 'apple', 3, 1.50), (2, 'pear', 5, 2.00)"),
        format!("INSERT INTO {schema}.other VALUES (1, 'x')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    // A destination table that exists already and would break a delivery (preview).
    let pre = format!("sc_{tag}_p_items");
    sqlx::query(&format!(
        "CREATE TABLE {pre} (code varchar(5) NOT NULL, qty int NOT NULL, must int NOT NULL)"
    ))
    .execute(&mut pg(&dest_url).await)
    .await
    .unwrap();
    let src = api.connection(json!({"name": "pg src", "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": schema, "publication_name": schema}, "secrets": {"password": s.pg_password}})).await;
    let dest = api.connection(json!({"name": "pg dest", "provider": "POSTGRESQL", "capabilities": ["DESTINATION"], "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_dest_db, "user": s.pg_user, "tls_mode": "disable"}, "secrets": {"password": s.pg_password}})).await;
    let prefix = format!("sc-{}", tag.replace('_', "-"));
    let items = format!("{schema}.items");
    let other = format!("{schema}.other");
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "shop", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [items, other], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let pid = p["id"].as_str().unwrap().to_string();
    let items_topic = format!("{prefix}.{items}");
    let created = std::sync::Mutex::new(Vec::<String>::new());
    let result = async {
        // Preview: the existing destination table is flagged, by what would break.
        let (status, preview) = api.post("/api/v1/deliveries/preview", json!({"name": "pre", "pipeline_id": pid, "destination_connection_id": dest["id"], "topics": [items_topic], "table_name_format": format!("sc_{tag}_p_${{source.table}}")})).await;
        assert_eq!(status, 200, "{preview}");
        let m: Vec<String> = serde_json::from_value(preview["schema_mismatches"].clone()).unwrap();
        println!("preview flags: {m:#?}");
        assert!(
            m.iter()
                .any(|x| x.contains("no column `id`, part of the source's key")),
            "{m:?}"
        );
        assert!(
            m.iter().any(|x| x.contains(
                "`code` is character varying(5), narrower than the source's character varying(50)"
            )),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|x| x.contains("`must` is NOT NULL without a default")),
            "{m:?}"
        );
        assert!(
            preview["destination_checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == "existing destination tables" && c["status"] == "warn"),
            "{preview}"
        );

        // Two deliveries over `items` only; a policy that is neither warn nor pause is refused by name.
        let (status, bad) = api.post("/api/v1/deliveries", json!({"name": "bad", "pipeline_id": pid, "destination_connection_id": dest["id"], "schema_policy": "stop"})).await;
        assert_eq!(status, 422, "{bad}");
        assert!(
            bad["error"]["fields"]["schema_policy"]
                .as_str()
                .unwrap()
                .contains("warn (default"),
            "{bad}"
        );
        for (name, policy, t) in [("guarded", "pause", "a"), ("warned", "warn", "b")] {
            let (status, d) = api.post("/api/v1/deliveries", json!({"name": name, "pipeline_id": pid, "destination_connection_id": dest["id"], "topics": [items_topic], "table_name_format": format!("sc_{tag}_{t}_${{source.table}}"), "schema_policy": policy})).await;
            assert_eq!(status, 201, "{d}");
            assert_eq!(d["options"]["schema_policy"], policy);
            created
                .lock()
                .unwrap()
                .push(d["id"].as_str().unwrap().to_string());
        }
        let ids = created.lock().unwrap().clone();
        let (a, b) = (format!("sc_{tag}_a_items"), format!("sc_{tag}_b_items"));
        for t in [&a, &b] {
            eventually(
                Duration::from_secs(120),
                &format!("{t} holds the snapshot"),
                || async {
                    (count(&dest_url, &format!("SELECT COUNT(*) FROM {t}")).await == 2)
                        .then_some(())
                },
            )
            .await;
        }
        // The guard judges a change against the destination as its previous cycle sampled it:
        // give it two cycles to see the tables the sink has just created.
        tokio::time::sleep(Duration::from_secs(3)).await;
        // The first versions are in.
        let (_, sch) = api.get(&format!("/api/v1/pipelines/{pid}/schema")).await;
        assert_eq!(
            sch["tables"][0]["versions"].as_array().unwrap().len(),
            1,
            "{sch}"
        );
        assert_eq!(
            sch["tables"][0]["versions"][0]["definition"]["primary_key"],
            json!(["id"])
        );

        // 1. An added nullable column: "added" for both, the destinations get it, nothing paused.
        sqlx::query(&format!("ALTER TABLE {items} ADD COLUMN note text"))
            .execute(&mut db)
            .await
            .unwrap();
        sqlx::query(&format!(
            "INSERT INTO {items} (id, code, qty, note) VALUES (3, 'fig', 7, 'new')"
        ))
        .execute(&mut db)
        .await
        .unwrap();
        for name in ["guarded", "warned"] {
            let v = eventually(
                Duration::from_secs(30),
                "the verdict on the added column",
                || verdict(&api, &pid, &items, name),
            )
            .await;
            assert_eq!(v["severity"], "info", "{v}");
            assert!(
                v["says"][0]
                    .as_str()
                    .unwrap()
                    .starts_with("added: the sink will add column `note`"),
                "{v}"
            );
            assert_eq!(v["changes"][0], "column `note` text added (nullable)");
        }
        for t in [&a, &b] {
            eventually(
                Duration::from_secs(60),
                &format!("{t} has the row with its note"),
                || async {
                    (count(
                        &dest_url,
                        &format!("SELECT COUNT(*) FROM {t} WHERE note = 'new'"),
                    )
                    .await
                        == 1)
                        .then_some(())
                },
            )
            .await;
        }
        assert_eq!(
            desired(&api, &ids[0]).await,
            "running",
            "an added column pauses nothing"
        );

        // 2. A change of a table neither delivery takes changes nothing for them.
        sqlx::query(&format!("ALTER TABLE {other} DROP COLUMN v"))
            .execute(&mut db)
            .await
            .unwrap();
        let other_schema = eventually(
            Duration::from_secs(30),
            "the second version of other",
            || async {
                let (_, s) = api.get(&format!("/api/v1/pipelines/{pid}/schema")).await;
                let t = s["tables"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["table"] == other)
                    .cloned()
                    .unwrap();
                (t["versions"].as_array().unwrap().len() == 2).then_some(t)
            },
        )
        .await;
        assert_eq!(other_schema["diff"], json!(["column `v` dropped"]));
        assert_eq!(other_schema["verdicts"], json!([]));
        assert_eq!(other_schema["deliveries"], json!([]));

        // 3. A dropped column while rows keep coming: the pause delivery stops within a cycle.
        let next = Arc::new(AtomicI64::new(100));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (next, stop, url, items) =
                (next.clone(), stop.clone(), src_url.clone(), items.clone());
            tokio::spawn(async move {
                let mut c = pg(&url).await;
                while !stop.load(Ordering::SeqCst) {
                    let id = next.fetch_add(1, Ordering::SeqCst);
                    sqlx::query(&format!(
                        "INSERT INTO {items} (id, code, qty) VALUES ({id}, 'row', 1)"
                    ))
                    .execute(&mut c)
                    .await
                    .unwrap();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        sqlx::query(&format!("ALTER TABLE {items} DROP COLUMN price"))
            .execute(&mut db)
            .await
            .unwrap();
        let ddl_at = Instant::now();
        // Rows from this id on are written after the DDL: changed records.
        let first_changed = next.load(Ordering::SeqCst);
        eventually(
            Duration::from_secs(20),
            "the guard pauses the delivery",
            || async { (desired(&api, &ids[0]).await == "paused").then_some(()) },
        )
        .await;
        let decided = ddl_at.elapsed();
        let connector = "cluecdc-deliver-guarded";
        eventually(
            Duration::from_secs(30),
            "Connect pauses the sink",
            || async {
                let st = connect_status(&s.connect_url, connector).await?;
                (st["connector"]["state"] == "PAUSED"
                    && st["tasks"]
                        .as_array()?
                        .iter()
                        .all(|t| t["state"] == "PAUSED"))
                .then_some(())
            },
        )
        .await;
        let paused = ddl_at.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::SeqCst);
        writer.await.unwrap();
        let written_after = next.load(Ordering::SeqCst) - first_changed;
        let landed = |t: String| {
            let url = dest_url.clone();
            async move {
                count(
                    &url,
                    &format!("SELECT COUNT(*) FROM {t} WHERE id >= {first_changed}"),
                )
                .await
            }
        };
        let before = count(&dest_url, &format!("SELECT COUNT(*) FROM {a}")).await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(
            count(&dest_url, &format!("SELECT COUNT(*) FROM {a}")).await,
            before,
            "the paused delivery writes nothing more"
        );
        let landed_a = landed(a.clone()).await;
        println!("dropped column: guard decided {decided:?} after the DDL, Connect reported PAUSED after {paused:?}; {landed_a} of {written_after} changed records had landed in the paused delivery's table before the pause");
        let lag = eventually(
            Duration::from_secs(30),
            "the waiting records show as lag",
            || async {
                let (_, d) = api.get(&format!("/api/v1/deliveries/{}", ids[0])).await;
                let lag: i64 = d["lag"]
                    .as_array()?
                    .iter()
                    .map(|l| l["lag"].as_i64().unwrap_or(0))
                    .sum();
                (lag > 0).then_some(lag)
            },
        )
        .await;
        assert!(lag > 0);
        let v = verdict(&api, &pid, &items, "guarded").await.unwrap();
        assert_eq!(
            (
                v["severity"].as_str(),
                v["state"].as_str(),
                v["paused"].as_bool()
            ),
            (Some("breaking"), Some("open"), Some(true)),
            "{v}"
        );
        assert!(
            v["says"][0].as_str().unwrap().starts_with(&format!(
                "a dropped source column leaves `price` in `{a}` and writes NULL from now on"
            )),
            "{v}"
        );
        // The warn delivery keeps running, alerts, and writes NULL into price.
        assert_eq!(desired(&api, &ids[1]).await, "running");
        let fired = eventually(
            Duration::from_secs(30),
            "schema_change fires for the warn delivery",
            || alert(&api, "schema_change", "warned", "firing"),
        )
        .await;
        assert!(
            fired["message"]
                .as_str()
                .unwrap()
                .contains("column `price` dropped"),
            "{fired}"
        );
        eventually(
            Duration::from_secs(60),
            "the warn delivery writes NULL prices",
            || async {
                (count(
                    &dest_url,
                    &format!(
                        "SELECT COUNT(*) FROM {b} WHERE id >= {first_changed} AND price IS NULL"
                    ),
                )
                .await
                    == written_after)
                    .then_some(())
            },
        )
        .await;
        // The audit list is a view that may be reused for a moment after a background commit
        // (snapshots::MAX_AGE), so the pause's row is polled for, by its action.
        eventually(Duration::from_secs(10), "the pause is audited", || async {
            let (_, audit) = api.get("/api/v1/audit?action=delivery.schema_pause").await;
            audit.to_string().contains(&ids[0]).then_some(())
        })
        .await;

        // 4. A widened type past the destination's column: "will fail"; the failure names it.
        sqlx::query(&format!("ALTER TABLE {items} ALTER COLUMN qty TYPE bigint"))
            .execute(&mut db)
            .await
            .unwrap();
        let v = eventually(
            Duration::from_secs(30),
            "the verdict on the retyped column",
            || async {
                verdict(&api, &pid, &items, "warned")
                    .await
                    .filter(|v| v["changes"].to_string().contains("`qty` type"))
            },
        )
        .await;
        assert_eq!(v["severity"], "breaking", "{v}");
        assert!(v["says"].to_string().contains("will fail the task at the first value that does not fit: the destination column `qty` stays integer"), "{v}");
        sqlx::query(&format!(
            "INSERT INTO {items} (id, code, qty) VALUES (9, 'big', 3000000000)"
        ))
        .execute(&mut db)
        .await
        .unwrap();
        // The sink retries a failing write (max.retries x retry.backoff.ms) before its task
        // fails, and the reconciler then restarts it with backoff: on a loaded machine that has
        // taken over 90 s to be observed FAILED.
        let failed = eventually(
            Duration::from_secs(180),
            "the warn delivery fails and says why",
            || async {
                let (_, d) = api.get(&format!("/api/v1/deliveries/{}", ids[1])).await;
                d["schema_failure"].as_str().map(String::from)
            },
        )
        .await;
        println!("failure: {failed}");
        assert!(
            failed.contains("column `qty` type integer → bigint (widened)"),
            "{failed}"
        );
        // The reconciler restarts a failed task with backoff: the page says it while it is failed.
        eventually(
            Duration::from_secs(60),
            "the page names the change",
            || async {
                api.text(&format!("/deliveries/{}", ids[1]))
                    .await
                    .contains("The delivery failed because of a schema change")
                    .then_some(())
            },
        )
        .await;

        // 5. The policy round-trips through export and apply.
        let (status, _, exported) = yaml(&api, reqwest::Method::GET, "/api/v1/export", None).await;
        assert_eq!(status, 200, "{exported}");
        let mut doc: serde_yaml::Value = serde_yaml::from_str(&exported).unwrap();
        let policy_of = |doc: &serde_yaml::Value, name: &str| {
            doc["deliveries"]
                .as_sequence()
                .unwrap()
                .iter()
                .find(|d| d["name"].as_str() == Some(name))
                .unwrap()["options"]["schema_policy"]
                .as_str()
                .map(String::from)
        };
        assert_eq!(policy_of(&doc, "guarded").as_deref(), Some("pause"));
        assert_eq!(policy_of(&doc, "warned").as_deref(), Some("warn"));
        let (status, plan, text) = yaml(
            &api,
            reqwest::Method::POST,
            "/api/v1/apply?dry_run=true",
            Some(exported.clone()),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        assert!(
            !plan["change"].to_string().contains("schema_policy"),
            "the export applies unchanged: {plan}"
        );
        for d in doc["deliveries"].as_sequence_mut().unwrap() {
            if d["name"].as_str() == Some("warned") {
                d["options"]["schema_policy"] = "pause".into();
            }
        }
        let (status, plan, text) = yaml(
            &api,
            reqwest::Method::POST,
            "/api/v1/apply?dry_run=true",
            Some(serde_yaml::to_string(&doc).unwrap()),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let change = plan["change"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "warned")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            change["fields"]["options.schema_policy"],
            json!({"from": "warn", "to": "pause"}),
            "{plan}"
        );

        // Resuming the paused delivery accepts the change: it catches up, the verdict is accepted.
        let (status, _) = api
            .post(&format!("/api/v1/deliveries/{}/resume", ids[0]), json!({}))
            .await;
        assert_eq!(status, 200);
        eventually(
            Duration::from_secs(60),
            "the resumed delivery catches up",
            || async { (landed(a.clone()).await >= written_after).then_some(()) },
        )
        .await;
        let v = verdict(&api, &pid, &items, "guarded").await.unwrap();
        assert_eq!(v["state"], "accepted", "{v}");
        println!("tables_schema took {:?}", started.elapsed());
    };
    with_cleanup(result, async {
        // What the guard said, for a failure's diagnosis.
        let log = std::fs::read_to_string(&api.app.log_path).unwrap_or_default();
        for line in log.lines().filter(|l| l.contains("schema")).take(20) {
            println!("app: {line}");
        }
        let ids = created.lock().unwrap().clone();
        for id in &ids {
            let _ = api.delete(&format!("/api/v1/deliveries/{id}")).await;
        }
        let _ = api
            .delete(&format!("/api/v1/pipelines/{pid}?drop_slot=true"))
            .await;
        drop_capture_fixture(&s, &schema, &schema).await;
        let mut d = pg(&dest_url).await;
        for t in ["a", "b", "p"] {
            let _ = sqlx::query(&format!("DROP TABLE IF EXISTS sc_{tag}_{t}_items"))
                .execute(&mut d)
                .await;
        }
    })
    .await;
}

/// A raw request with a YAML body; (status, body as JSON, text).
async fn yaml(
    api: &Api,
    method: reqwest::Method,
    path: &str,
    body: Option<String>,
) -> (u16, Value, String) {
    let mut req = api
        .http
        .request(method, format!("{}{path}", api.app.url))
        .bearer_auth(&api.token);
    if let Some(b) = body {
        req = req.header("content-type", "application/yaml").body(b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}
