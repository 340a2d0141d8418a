//! Bulk actions against the real stack: several deliveries paused, resumed, restarted and
//! deleted in one request each, as one audited change set; an item held by an operation is
//! refused beside the others, which go on; bad input is a 422 naming the field and changes
//! nothing; a viewer is refused.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Connection;

use crate::helpers::*;

fn tag() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()
        % 36u128.pow(5);
    let mut n = n as u64;
    let mut out = String::new();
    for _ in 0..5 {
        out.push(std::char::from_digit((n % 36) as u32, 36).unwrap());
        n /= 36;
    }
    out
}

/// Waits until no item of the bulk is pending or running; its JSON.
async fn bulk_ends(api: &Api, id: &str) -> Value {
    eventually(
        Duration::from_secs(180),
        "the bulk's items finish",
        || async {
            let (status, b) = api.get(&format!("/api/v1/bulk/{id}")).await;
            assert_eq!(status, 200, "{b}");
            let open = b["items"]
                .as_array()?
                .iter()
                .any(|i| i["state"] == "pending" || i["state"] == "running");
            (!open).then_some(b)
        },
    )
    .await
}

fn item<'a>(b: &'a Value, id: &str) -> &'a Value {
    b["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap_or_else(|| panic!("no item {id} in {b}"))
}

/// Waits until Kafka Connect itself shows the connector in `state`.
async fn connect_shows(connect: &str, name: &str, state: &str) {
    eventually(
        Duration::from_secs(120),
        &format!("Connect shows {name} {state}"),
        || async {
            let st = connect_status(connect, name).await?;
            (st["connector"]["state"] == state).then_some(())
        },
    )
    .await
}

/// The deliveries' connector names, by delivery id.
async fn connector_name(api: &Api, d: &Value) -> String {
    let (_, c) = api
        .get(&format!(
            "/api/v1/connectors/{}",
            d["connector_id"].as_str().unwrap()
        ))
        .await;
    c["name"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn bulk_actions_act_on_several_deliveries_as_one_change_set_and_refuse_a_held_one_beside_the_others(
) {
    let started = std::time::Instant::now();
    let s = stack();
    let _c = connect_shared().await;
    let _p = provider_lock().await;
    let api = admin_api();
    let (kafka, connect) = stack_clusters(&api).await;
    let tag = tag();
    let schema = format!("b{tag}");
    let mut db = sqlx::PgConnection::connect(&s.pg_url(&s.pg_source_db))
        .await
        .unwrap();
    for sql in [
        format!("CREATE SCHEMA {schema}"),
        format!("CREATE TABLE {schema}.items (id int PRIMARY KEY, name text NOT NULL)"),
        format!("INSERT INTO {schema}.items VALUES (1, 'apple')"),
    ] {
        sqlx::query(&sql).execute(&mut db).await.unwrap();
    }
    let src = api.connection(json!({"name": format!("pg {tag}"), "provider": "POSTGRESQL", "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_source_db, "user": s.pg_user, "tls_mode": "disable", "slot_name": schema, "publication_name": schema}, "secrets": {"password": s.pg_password}})).await;
    let (status, p) = api.post("/api/v1/pipelines", json!({"name": format!("bulk {tag}"), "source_connection_id": src["id"], "kafka_cluster_id": kafka, "connect_cluster_id": connect, "tables": [format!("{schema}.items")], "topic_prefix": schema})).await;
    assert_eq!(status, 201, "{p}");
    let pipeline_id = p["id"].as_str().unwrap().to_string();
    let lake = api
        .connection(json!({"name": "lake", "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "endpoint": s.s3_endpoint, "prefix": format!("b{tag}/"), "path_style": true, "use_ssl": false},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}}))
        .await;
    let ds = std::cell::RefCell::new(Vec::<Value>::new());
    let result = async {
        for i in 0..4 {
            let (status, d) = api
                .post(
                    "/api/v1/deliveries",
                    json!({"name": format!("bulk {tag} {i}"), "pipeline_id": pipeline_id, "destination_connection_id": lake["id"]}),
                )
                .await;
            assert_eq!(status, 201, "{d}");
            ds.borrow_mut().push(d);
        }
        let ds = ds.borrow().clone();
        let ids: Vec<String> = ds
            .iter()
            .map(|d| d["id"].as_str().unwrap().to_string())
            .collect();
        let mut names = Vec::new();
        for d in &ds {
            names.push(connector_name(&api, d).await);
        }
        for n in &names {
            wait_running(&s.connect_url, n, Duration::from_secs(180)).await;
        }
        let targets = |idx: &[usize]| -> Value {
            json!(idx
                .iter()
                .map(|i| json!({"kind": "delivery", "id": ids[*i]}))
                .collect::<Vec<_>>())
        };
        let setup = started.elapsed();

        // Bad input: 422 naming the field, and nothing changes.
        for (body, field) in [
            (
                json!({"action": "explode", "targets": targets(&[0])}),
                "action",
            ),
            (json!({"action": "pause", "targets": []}), "targets"),
            (json!({"action": "pause"}), "targets"),
            (
                json!({"action": "pause", "targets": [{"kind": "delivery", "id": ids[1]}, {"kind": "delivery", "id": "dl_nope"}]}),
                "targets[1].id",
            ),
            (
                json!({"action": "pause", "targets": [{"kind": "topic", "id": "x"}]}),
                "targets[0].kind",
            ),
            (
                json!({"action": "pause", "targets": targets(&[0]), "filter": {"kind": "delivery"}}),
                "filter",
            ),
            (
                json!({"action": "pause", "filter": {"kind": "delivery", "state": "asleep"}}),
                "filter.state",
            ),
            (
                json!({"action": "pause", "only_failed": true, "targets": targets(&[0])}),
                "only_failed",
            ),
        ] {
            let (status, err) = api.post("/api/v1/bulk", body.clone()).await;
            assert_eq!(status, 422, "{body}: {err}");
            assert!(
                err["error"]["fields"][field].is_string(),
                "{body}: names {field}: {err}"
            );
        }
        let (_, audit) = api.get("/api/v1/audit?action=bulk.").await;
        assert_eq!(audit["total"], 0, "no bulk recorded: {audit}");
        let (_, audit) = api.get("/api/v1/audit?action=connector.pause").await;
        assert_eq!(audit["total"], 0, "nothing paused: {audit}");

        // A viewer may look, not act.
        create_user(&api.app, "vera", "viewer");
        let vera = create_token(&api.app, "vera", &[]);
        let res = api
            .http
            .post(format!("{}/api/v1/bulk", api.app.url))
            .bearer_auth(&vera)
            .json(&json!({"action": "pause", "targets": targets(&[1])}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 403);

        // Delivery 0 is held by an offset operation: refused, naming it; the others pause.
        let (status, replay) = api
            .post(
                &format!("/api/v1/deliveries/{}/replay", ids[0]),
                json!({"from": "earliest", "confirm": ds[0]["name"]}),
            )
            .await;
        assert_eq!(status, 202, "{replay}");
        let held_by = replay["operation_id"].as_str().unwrap().to_string();
        let (status, b) = api
            .post(
                "/api/v1/bulk",
                json!({"action": "pause", "targets": targets(&[0, 1, 2, 3])}),
            )
            .await;
        assert_eq!(status, 202, "{b}");
        assert_eq!(b["kind"], "bulk");
        let bulk_id = b["id"].as_str().unwrap().to_string();
        let change_set = b["change_set"].as_str().unwrap().to_string();
        assert_eq!(item(&b, &ids[0])["state"], "refused", "{b}");
        let b = bulk_ends(&api, &bulk_id).await;
        let held = item(&b, &ids[0]);
        assert_eq!(held["state"], "refused");
        assert!(
            held["detail"].as_str().unwrap().contains(&held_by),
            "the reason names the operation: {held}"
        );
        for i in 1..4 {
            assert_eq!(item(&b, &ids[i])["state"], "done", "{b}");
            connect_shows(&s.connect_url, &names[i], "PAUSED").await;
        }
        // The operation itself ends once its items have.
        let op = operation_ends(&api, &bulk_id).await;
        assert_eq!(op["state"], "done", "{op}");

        // One change set: the bulk row listing every item, and each item's own row.
        let (_, audit) = api
            .get(&format!("/api/v1/audit?request={change_set}"))
            .await;
        let rows = audit["items"].as_array().unwrap();
        let bulk_rows: Vec<&Value> = rows
            .iter()
            .filter(|r| r["action"] == "bulk.pause")
            .collect();
        assert_eq!(bulk_rows.len(), 1, "{audit}");
        assert_eq!(
            bulk_rows[0]["summary"]["items"].as_array().unwrap().len(),
            4,
            "{audit}"
        );
        assert_eq!(
            rows.iter()
                .filter(|r| r["action"] == "connector.pause")
                .count(),
            3,
            "the three paused, each with its own row in the change set: {audit}"
        );

        // The replay gives delivery 0 back running; a filter-selected resume then refuses it
        // as already running and resumes the rest.
        let op = operation_ends(&api, &held_by).await;
        assert_eq!(op["state"], "done", "{op}");
        let (status, b) = api
            .post(
                "/api/v1/bulk",
                json!({"action": "resume", "filter": {"kind": "delivery", "q": format!("bulk {tag}")}}),
            )
            .await;
        assert_eq!(status, 202, "{b}");
        assert_eq!(b["items"].as_array().unwrap().len(), 4, "{b}");
        let b = bulk_ends(&api, b["id"].as_str().unwrap()).await;
        assert_eq!(item(&b, &ids[0])["state"], "refused", "{b}");
        assert!(item(&b, &ids[0])["detail"]
            .as_str()
            .unwrap()
            .contains("already running"));
        for id in &ids[1..] {
            assert_eq!(item(&b, id)["state"], "done", "{b}");
        }
        for n in &names {
            wait_running(&s.connect_url, n, Duration::from_secs(120)).await;
        }

        // Restart: only what failed (nothing did: each refused), or everything (each done).
        let (status, b) = api
            .post(
                "/api/v1/bulk",
                json!({"action": "restart", "only_failed": true, "targets": targets(&[0, 1])}),
            )
            .await;
        assert_eq!(status, 202, "{b}");
        for id in &ids[..2] {
            assert!(
                item(&b, id)["detail"]
                    .as_str()
                    .unwrap()
                    .contains("nothing failed"),
                "{b}"
            );
        }
        let (status, b) = api
            .post(
                "/api/v1/bulk",
                json!({"action": "restart", "targets": targets(&[0, 1])}),
            )
            .await;
        assert_eq!(status, 202, "{b}");
        let b = bulk_ends(&api, b["id"].as_str().unwrap()).await;
        for id in &ids[..2] {
            assert_eq!(item(&b, id)["state"], "done", "{b}");
        }
        let (_, audit) = api
            .get(&format!(
                "/api/v1/audit?action=connector.restart&request={}",
                b["change_set"].as_str().unwrap()
            ))
            .await;
        assert_eq!(audit["total"], 2, "{audit}");

        // Other kinds through their own services: the pipeline and a delivery's connector
        // (named, as the connectors list allows) pause and resume; that connector cannot be
        // deleted on its own (it goes with its delivery).
        let capture = connector_name(&api, &p).await;
        let mixed =
            json!([{"kind": "pipeline", "id": pipeline_id}, {"kind": "connector", "id": names[3]}]);
        for (action, state) in [("pause", "PAUSED"), ("resume", "RUNNING")] {
            let (status, b) = api
                .post("/api/v1/bulk", json!({"action": action, "targets": mixed}))
                .await;
            assert_eq!(status, 202, "{b}");
            let b = bulk_ends(&api, b["id"].as_str().unwrap()).await;
            assert_eq!(b["counts"]["done"], 2, "{b}");
            connect_shows(&s.connect_url, &capture, state).await;
            connect_shows(&s.connect_url, &names[3], state).await;
        }
        let (status, b) = api
            .post(
                "/api/v1/bulk",
                json!({"action": "delete", "targets": [{"kind": "connector", "id": names[3]}]}),
            )
            .await;
        assert_eq!(status, 202, "{b}");
        assert!(
            b["items"][0]["detail"]
                .as_str()
                .unwrap()
                .contains("belongs to a delivery"),
            "{b}"
        );

        // Delete: the pipeline is refused while deliveries read it, the deliveries go through
        // their own delete operations.
        let mut all = vec![json!({"kind": "pipeline", "id": pipeline_id})];
        all.extend(targets(&[0, 1, 2, 3]).as_array().unwrap().clone());
        let (status, b) = api
            .post("/api/v1/bulk", json!({"action": "delete", "targets": all}))
            .await;
        assert_eq!(status, 202, "{b}");
        let b = bulk_ends(&api, b["id"].as_str().unwrap()).await;
        assert_eq!(item(&b, &pipeline_id)["state"], "refused", "{b}");
        assert!(item(&b, &pipeline_id)["detail"]
            .as_str()
            .unwrap()
            .contains("delete those first"));
        for id in &ids {
            assert_eq!(item(&b, id)["state"], "done", "{b}");
            let (status, _) = api.get(&format!("/api/v1/deliveries/{id}")).await;
            assert_eq!(status, 404, "delivery {id} is gone");
        }
        for n in &names {
            assert!(
                connect_status(&s.connect_url, n).await.is_none(),
                "{n} left Connect"
            );
        }
        let (status, b) = api
            .post(
                "/api/v1/bulk",
                json!({"action": "delete", "targets": [{"kind": "pipeline", "id": pipeline_id}]}),
            )
            .await;
        assert_eq!(status, 202, "{b}");
        let b = bulk_ends(&api, b["id"].as_str().unwrap()).await;
        assert_eq!(item(&b, &pipeline_id)["state"], "done", "{b}");
        eprintln!(
            "bulk test: setup {:.1} s, whole test {:.1} s",
            setup.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
    };
    with_cleanup(result, async {
        let created = ds.borrow().clone();
        for d in &created {
            let _ = api
                .delete(&format!("/api/v1/deliveries/{}", d["id"].as_str().unwrap()))
                .await;
        }
        let _ = api
            .delete(&format!("/api/v1/pipelines/{}?drop_slot=true", pipeline_id))
            .await;
        drop_capture_fixture(&s, &schema, &schema).await;
    })
    .await;
}
