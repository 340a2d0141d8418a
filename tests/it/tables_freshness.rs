//! Per-table freshness on the real stack: a PostgreSQL pipeline over three tables, writes
//! continuing on two of them. One is removed from the pipeline's publication by hand:
//! `table_stalled` fires for it alone, naming it and "not in publication" first, while the
//! other stays fresh and the quiet third never alarms; put back, the alert resolves. A paused
//! delivery shows its lag per table in records and in time. A MariaDB source without
//! performance_schema says it keeps no per-table counter, and judges no stall.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// The pipeline's table `name` as `GET /api/v1/pipelines/{id}` shows it.
async fn table_of(api: &Api, pipeline: &str, name: &str) -> Value {
    let (status, p) = api.get(&format!("/api/v1/pipelines/{pipeline}")).await;
    assert_eq!(status, 200, "{p}");
    p["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no table {name} in {p}"))
}

#[tokio::test]
async fn a_table_removed_from_the_publication_stalls_alone_and_resolves_when_put_back() {
    let started = Instant::now();
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_OFFSETS_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("tf_{tag}");
    let (a, b, q) = (
        format!("{schema}.a"),
        format!("{schema}.b"),
        format!("{schema}.q"),
    );
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&mut db)
        .await
        .unwrap();
    for t in [&a, &b, &q] {
        for sql in [
            format!("CREATE TABLE {t} (id serial PRIMARY KEY, v int NOT NULL)"),
            format!("INSERT INTO {t} (v) VALUES (1)"),
        ] {
            sqlx::query(&sql).execute(&mut db).await.unwrap();
        }
    }
    // A session's table statistics reach pg_stat_user_tables when it ends (or after it idles
    // about 10 s): closed now, Q's one insert is counted before the pipeline starts, not
    // seconds into the test where it would read as a fresh change of a quiet table.
    db.close().await.unwrap();
    let src = api.connection(json!({"name": "pg src", "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": schema, "publication_name": schema}, "secrets": {"password": s.pg_password}})).await;
    let dest = api.connection(json!({"name": "pg dest", "provider": "POSTGRESQL", "capabilities": ["DESTINATION"], "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_dest_db, "user": s.pg_user, "tls_mode": "disable"}, "secrets": {"password": s.pg_password}})).await;
    let prefix = format!("tf-{}", tag.replace('_', "-"));
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "shop", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [a, b, q], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let id = p["id"].as_str().unwrap().to_string();
    let (status, d) = api.post("/api/v1/deliveries", json!({"name": "shop copy", "pipeline_id": id, "destination_connection_id": dest["id"], "table_name_format": format!("tf_{tag}_${{source.table}}")})).await;
    assert_eq!(status, 201, "{d}");
    let delivery = d["id"].as_str().unwrap().to_string();
    let (status, rule) = api
        .patch(
            "/api/v1/alert-rules/table_stalled",
            json!({"threshold": 8, "for_secs": 0}),
        )
        .await;
    assert_eq!(status, 200, "{rule}");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, url, a, b) = (
            stop.clone(),
            s.pg_url(&s.pg_source_db),
            a.clone(),
            b.clone(),
        );
        tokio::spawn(async move {
            let mut db = sqlx::PgConnection::connect(&url).await.unwrap();
            while !stop.load(Ordering::Relaxed) {
                for t in [&a, &b] {
                    sqlx::query(&format!("INSERT INTO {t} (v) VALUES (2)"))
                        .execute(&mut db)
                        .await
                        .unwrap();
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let su = pg_superuser(&s).await;
    let result = async {
        wait_running(
            &s.connect_url,
            &format!("cluecdc-capture-{prefix}"),
            Duration::from_secs(120),
        )
        .await;
        // Streaming: A and B fresh (their topics follow their sources), Q quiet.
        let waited = Instant::now();
        let mut last = String::new();
        // B as read when all three were as expected: a second read, on a loaded machine, can
        // come after a pause of the source's writer (once 10 s).
        let mut fresh_b = None;
        while waited.elapsed() < Duration::from_secs(90) {
            let (ta, tb, tq) = (
                table_of(&api, &id, &a).await,
                table_of(&api, &id, &b).await,
                table_of(&api, &id, &q).await,
            );
            // "fresh" comes first from the source's counter (a recent change at the source),
            // then from the topic: B's change in its topic is what is checked below.
            if ta["state"] == "fresh"
                && tb["state"] == "fresh"
                && tb["changed_at"].is_string()
                && tq["state"] == "quiet"
            {
                fresh_b = Some(tb);
                break;
            }
            last = format!("{ta}\n{tb}\n{tq}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(
            fresh_b.is_some(),
            "A and B fresh, Q quiet: {last}\n{}",
            api.app
                .log()
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("freshness"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let tb = fresh_b.expect("B fresh");
        assert_eq!(tb["topic"], format!("{prefix}.{b}"), "{tb}");
        assert!(tb["end_offset"].as_i64().unwrap() > 1, "{tb}");
        assert!(
            tb["changed_at"].is_string() && tb["source_changed_at"].is_string(),
            "{tb}"
        );
        assert!(tb["source_changes"].as_i64().unwrap() > 1, "{tb}");
        assert!(tb["age_secs"].as_f64().unwrap() < 5.0, "{tb}");
        assert_eq!(tb["stalled_secs"], 0.0, "{tb}");
        let tq = table_of(&api, &id, &q).await;
        // Its one insert, before the pipeline (PostgreSQL may count it up to 10 s late).
        assert!(tq["source_changes"].as_i64().unwrap() <= 1, "{tq}");
        assert_eq!(tq["stalled_secs"], 0.0, "{tq}");

        // Q's one row delivered first (its committed offset can trail the other tables' by a
        // flush), so that Q's lag after the pause is the pause's alone.
        eventually(
            Duration::from_secs(60),
            "the delivery has Q's row",
            || async {
                let (_, d) = api.get(&format!("/api/v1/deliveries/{delivery}")).await;
                let tables = d["tables"].as_array().cloned().unwrap_or_default();
                let tq = tables.iter().find(|t| t["name"] == q.as_str())?;
                (tq["lag_records"].as_i64()? == 0).then_some(())
            },
        )
        .await;
        // The delivery pauses: its per-table lag grows for A and B, not for Q.
        let (status, _) = api
            .post(&format!("/api/v1/deliveries/{delivery}/pause"), json!({}))
            .await;
        assert_eq!(status, 200);

        // A leaves the publication by hand while writes continue.
        sqlx::query(&format!("ALTER PUBLICATION {schema} DROP TABLE {a}"))
            .execute(&su)
            .await
            .unwrap();
        let dropped = Instant::now();
        let subject = format!("shop/{a}");
        let firing = eventually(
            Duration::from_secs(8 + 40),
            "table_stalled firing for A",
            || alert(&api, "table_stalled", &subject, "firing"),
        )
        .await;
        let fired_after = dropped.elapsed();
        eprintln!("table_stalled fired {fired_after:?} after A left the publication (window 8 s, 1 s cycles)");
        let m = firing["message"].as_str().unwrap();
        assert!(
            m.starts_with(&format!("table {a} of pipeline shop changed on the source"))
                && m.contains(&format!("1. found: not in publication {schema}: ALTER PUBLICATION \"{schema}\" ADD TABLE \"{schema}\".\"a\";"))
                && m.contains("the connector streams")
                && m.contains(&b),
            "{firing}"
        );
        let ta = table_of(&api, &id, &a).await;
        assert_eq!(ta["state"], "stalled", "{ta}");
        assert!(ta["stalled_secs"].as_f64().unwrap() > 8.0, "{ta}");
        assert!(
            ta["cause"].as_str().unwrap().contains("not in publication"),
            "{ta}"
        );
        // B stays fresh and alarms nothing; Q, quiet, never alarms.
        let tb = table_of(&api, &id, &b).await;
        assert_eq!(tb["state"], "fresh", "{tb}");
        assert!(tb["age_secs"].as_f64().unwrap() < 5.0, "{tb}");
        for t in [&b, &q] {
            assert!(
                alert(&api, "table_stalled", &format!("shop/{t}"), "firing")
                    .await
                    .is_none(),
                "{t} does not alarm"
            );
        }
        assert_eq!(table_of(&api, &id, &q).await["state"], "quiet");
        // The paused delivery's lag per table, in records and in time (from metadata).
        let lag = eventually(Duration::from_secs(30), "B's lag in time", || async {
            let (_, d) = api.get(&format!("/api/v1/deliveries/{delivery}")).await;
            let tables = d["tables"].as_array().cloned().unwrap_or_default();
            let tb = tables.iter().find(|t| t["name"] == b.as_str())?.clone();
            (tb["lag_records"].as_i64()? > 5 && tb["lag_secs"].as_f64()? >= 3.0).then_some(tables)
        })
        .await;
        let tq = lag.iter().find(|t| t["name"] == q.as_str()).unwrap();
        assert_eq!(tq["lag_records"], 0, "{tq}");
        assert_eq!(tq["lag_secs"], 0.0, "{tq}");
        assert_eq!(tq["topic"], format!("{prefix}.{q}"));
        let metrics = api.text("/metrics").await;
        assert!(
            metrics.contains(&format!(
                "cluecdc_table_stalled_seconds{{pipeline=\"shop\",table=\"{a}\"}}"
            )) && metrics.contains(&format!(
                "cluecdc_delivery_table_lag_records{{delivery=\"shop copy\",table=\"{b}\"}}"
            )),
            "per-table series: {}",
            metrics
                .lines()
                .filter(|l| l.contains("table"))
                .collect::<Vec<_>>()
                .join("\n")
        );

        // A back in the publication: its topic moves again and the alert resolves.
        sqlx::query(&format!("ALTER PUBLICATION {schema} ADD TABLE {a}"))
            .execute(&su)
            .await
            .unwrap();
        eventually(
            Duration::from_secs(60),
            "table_stalled resolved for A",
            || async {
                let (_, list) = api.get("/api/v1/alerts").await;
                list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["id"] == firing["id"] && x["state"] == "resolved")
                    .then_some(())
            },
        )
        .await;
        let ta = table_of(&api, &id, &a).await;
        assert_eq!(ta["stalled_secs"], 0.0, "{ta}");
        eprintln!("tables_freshness took {:?}", started.elapsed());
    };
    with_cleanup(result, async {
        stop.store(true, Ordering::Relaxed);
        let _ = writer.await;
        let _ = api.delete(&format!("/api/v1/deliveries/{delivery}")).await;
        let _ = api
            .delete(&format!("/api/v1/pipelines/{id}?drop_slot=true"))
            .await;
        delete_connector(&s.connect_url, &format!("cluecdc-capture-{prefix}")).await;
        delete_connector(&s.connect_url, "cluecdc-deliver-shop-copy").await;
        drop_capture_fixture(&s, &schema, &schema).await;
        let mut pg = sqlx::PgConnection::connect(&s.pg_url(&s.pg_dest_db))
            .await
            .unwrap();
        let _ = sqlx::query(&format!(
            "DROP TABLE IF EXISTS tf_{tag}_a, tf_{tag}_b, tf_{tag}_q"
        ))
        .execute(&mut pg)
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_mariadb_source_without_performance_schema_says_it_has_no_counter_and_judges_no_stall() {
    let started = Instant::now();
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api_with(&[
        ("CLUECDC_RECONCILE_INTERVAL", "1s"),
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_LEAK_SCAN_INTERVAL", "1h"),
    ]);
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let table = format!("tfm_{tag}_items");
    let mut db = sqlx::MySqlConnection::connect(&s.mariadb_url(&s.mariadb_db))
        .await
        .unwrap();
    let off: i64 = sqlx::query_scalar("SELECT CAST(@@performance_schema AS SIGNED)")
        .fetch_one(&mut db)
        .await
        .unwrap();
    sqlx::query(&format!(
        "CREATE TABLE {table} (id INT PRIMARY KEY, v INT NOT NULL)"
    ))
    .execute(&mut db)
    .await
    .unwrap();
    let src = api
        .connection(json!({"name": "maria src", "provider": "MARIADB",
            "settings": {"host": s.mariadb_host, "port": s.mariadb_port, "database": s.mariadb_db, "user": s.mariadb_user, "tls_mode": "disable"},
            "secrets": {"password": s.mariadb_password}}))
        .await;
    let prefix = format!("tfm-{}", tag.replace('_', "-"));
    let name = format!("{}.{table}", s.mariadb_db);
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": "maria shop", "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [name], "topic_prefix": prefix})).await;
    assert_eq!(status, 201, "{p}");
    let id = p["id"].as_str().unwrap().to_string();
    let result = async {
        assert_eq!(
            off, 0,
            "the stack's MariaDB runs without performance_schema"
        );
        let t = eventually(Duration::from_secs(60), "the table observed", || async {
            let t = table_of(&api, &id, &name).await;
            t["counter_note"].is_string().then_some(t)
        })
        .await;
        let note = t["counter_note"].as_str().unwrap();
        assert!(
            note.starts_with("no per-table change counter on this source")
                && note.contains("performance_schema is off"),
            "{t}"
        );
        assert!(t["source_changes"].is_null(), "{t}");
        assert_eq!(t["stalled_secs"], 0.0, "{t}");
        assert!(
            ["no_counter", "fresh"].contains(&t["state"].as_str().unwrap()),
            "{t}"
        );
        let page = api.text(&format!("/pipelines/{id}")).await;
        assert!(
            page.contains("? no counter") || page.contains("● fresh"),
            "the page shows the table's state"
        );
        assert!(
            page.contains("no per-table change counter on this source"),
            "the page says why no stall is judged"
        );
        eprintln!("tables_freshness (MariaDB) took {:?}", started.elapsed());
    };
    with_cleanup(result, async {
        let _ = api.delete(&format!("/api/v1/pipelines/{id}")).await;
        delete_connector(&s.connect_url, &format!("cluecdc-capture-{prefix}")).await;
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&mut db)
            .await;
    })
    .await;
}
