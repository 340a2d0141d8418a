//! Lists in the JSON API: filter (`q`, `state`, `cluster`), stable order, paging (`limit`,
//! `page`, `total`, `pages`) and counts by state, against real rows (connection tests run
//! against the stack's PostgreSQL, topics on its Kafka). The connector list with 120
//! connectors on the real worker is the browser test `lists.test.mjs`.

use serde_json::{json, Value};

use crate::helpers::*;

fn names(v: &Value) -> Vec<String> {
    v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("items in {v}"))
        .iter()
        .map(|i| {
            i["name"]
                .as_str()
                .or_else(|| i["connection"]["name"].as_str())
                .unwrap_or_else(|| panic!("a name in {i}"))
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn connections_filter_by_name_and_last_test_page_in_a_stable_order_and_count_by_state() {
    let s = stack();
    let api = admin_api();
    let mut ids = Vec::new();
    for i in 0..5 {
        let password = if i == 3 {
            "not-the-password"
        } else {
            s.pg_password.as_str()
        };
        let c = api
            .connection(json!({
                "name": format!("lst-pg-{i:02}"), "provider": "POSTGRESQL", "capabilities": ["DESTINATION"],
                "settings": {"host": s.pg_host, "port": s.pg_port, "database": s.pg_dest_db, "user": s.pg_user, "tls_mode": "disable"},
                "secrets": {"password": password}
            }))
            .await;
        ids.push(c["id"].as_str().unwrap().to_string());
    }
    for i in [1, 3] {
        let (status, report) = api
            .post(&format!("/api/v1/connections/{}/test", ids[i]), json!({}))
            .await;
        assert!(status < 500, "{report}");
    }

    let (status, all) = api.get("/api/v1/connections").await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        (
            all["total"].as_u64(),
            all["page"].as_u64(),
            all["limit"].as_u64()
        ),
        (Some(5), Some(1), Some(50))
    );
    assert_eq!(
        all["counts"],
        json!({"failed": 1, "passed": 1, "untested": 3}),
        "{all}"
    );

    let (_, p1) = api.get("/api/v1/connections?limit=2").await;
    let (_, p3) = api.get("/api/v1/connections?limit=2&page=3").await;
    assert_eq!(names(&p1), ["lst-pg-00", "lst-pg-01"]);
    assert_eq!(names(&p3), ["lst-pg-04"]);
    assert_eq!(
        (p3["total"].as_u64(), p3["pages"].as_u64()),
        (Some(5), Some(3))
    );

    // `q` matches anywhere in the name, case-insensitively; LIKE wildcards match themselves.
    let (_, one) = api.get("/api/v1/connections?q=PG-03").await;
    assert_eq!(names(&one), ["lst-pg-03"]);
    let (_, none) = api.get("/api/v1/connections?q=%25").await;
    assert_eq!(none["total"], 0, "{none}");

    let (_, failed) = api.get("/api/v1/connections?state=failed").await;
    assert_eq!(names(&failed), ["lst-pg-03"]);
    // The counts still show the other states, so a user sees what the filter hides.
    assert_eq!(failed["counts"]["untested"], 3);
    let (_, by_state) = api.get("/api/v1/connections?sort=state&limit=2").await;
    assert_eq!(
        names(&by_state),
        ["lst-pg-03", "lst-pg-00"],
        "failed first, then by name"
    );

    // A page past the end is empty, not an error.
    let (status, past) = api.get("/api/v1/connections?page=9").await;
    assert_eq!(
        (status, past["items"].clone(), past["total"].clone()),
        (200, json!([]), json!(5))
    );

    for (query, field) in [
        ("page=0", "page"),
        ("page=two", "page"),
        ("limit=501", "limit"),
        ("limit=0", "limit"),
        ("state=sleeping", "state"),
        ("sort=size", "sort"),
    ] {
        let (status, err) = api.get(&format!("/api/v1/connections?{query}")).await;
        assert_eq!(status, 422, "{query}: {err}");
        assert!(
            err["error"]["fields"][field].is_string(),
            "{query} names {field}: {err}"
        );
    }
    // The same filters on the page, in the URL.
    let browser = sign_in(&api.app, "ada", PASSWORD).await;
    let page = |path: &str| {
        let req = browser.client.get(format!("{}{path}", browser.base));
        async move {
            let res = req.send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    };
    let (status, html) = page("/connections?q=pg-0&state=failed").await;
    assert_eq!(status, 200);
    assert!(html.contains("1 connection</strong> matches"), "{html}");
    assert!(html.contains("lst-pg-03") && !html.contains("lst-pg-01"));
    let (status, html) = page("/connections?limit=999").await;
    assert_eq!(status, 422);
    assert!(html.contains("1 to 500"), "{html}");
}

#[tokio::test]
async fn topics_filter_page_and_count_in_sync_on_the_stack_kafka() {
    let s = stack();
    let api = admin_api();
    let (status, kafka) = api
        .post(
            "/api/v1/kafka-clusters",
            json!({"name": "stack kafka", "bootstrap_servers": s.kafka_bootstrap}),
        )
        .await;
    assert_eq!(status, 201, "{kafka}");
    let kafka = kafka["id"].as_str().unwrap().to_string();
    let prefix = format!("lst{}", std::process::id());
    for i in 0..3 {
        let (status, t) = api
            .post(
                &format!("/api/v1/kafka-clusters/{kafka}/topics"),
                json!({"name": format!("{prefix}.t{i}"), "partitions": 1, "replication_factor": 1}),
            )
            .await;
        assert_eq!(status, 201, "{t}");
    }
    let base = format!("/api/v1/kafka-clusters/{kafka}/topics?q={prefix}");
    let (_, all) = api.get(&base).await;
    assert_eq!(all["total"], 3, "{all}");
    assert_eq!(all["counts"], json!({"in-sync": 3}));
    let (_, p2) = api.get(&format!("{base}&limit=2&page=2")).await;
    assert_eq!(names(&p2), [format!("{prefix}.t2")]);
    let (_, under) = api.get(&format!("{base}&state=under-replicated")).await;
    assert_eq!(under["total"], 0, "{under}");
    for i in 0..3 {
        let name = format!("{prefix}.t{i}");
        api.delete(&format!(
            "/api/v1/kafka-clusters/{kafka}/topics/{name}?confirm={name}"
        ))
        .await;
    }
}

#[tokio::test]
async fn the_audit_list_says_how_many_rows_match_and_how_they_ended() {
    let api = admin_api();
    for name in ["aud-1", "aud-2"] {
        let (status, _) = api
            .post(
                "/api/v1/connections",
                json!({"name": name, "provider": "MINIO"}),
            )
            .await;
        assert_eq!(
            status, 422,
            "refused, and audited as a failure or not at all"
        );
    }
    api.connection(
        json!({"name": "aud-ok", "provider": "MINIO", "capabilities": ["DESTINATION"],
        "settings": {"bucket": "b-1", "endpoint": "http://127.0.0.1:1"},
        "secrets": {"access_key_id": "AK", "secret_access_key": "SK-long-enough"}}),
    )
    .await;
    let (_, page) = api.get("/api/v1/audit?limit=1&action=connection.").await;
    let success = page["counts"]["success"].as_u64().unwrap_or(0);
    assert!(success >= 1, "{page}");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1));
    let sum: u64 = page["counts"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(
        page["total"].as_u64(),
        Some(sum),
        "total is every outcome when none is chosen: {page}"
    );
    let (_, ok) = api
        .get("/api/v1/audit?outcome=success&action=connection.")
        .await;
    assert_eq!(ok["total"].as_u64(), Some(success));
}
