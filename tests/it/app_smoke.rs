//! The binary on its own: started as a separate process on a free port with a temporary data
//! directory, it answers its probes, serves its page and the embedded htmx asset, and stops
//! cleanly on SIGTERM.

use std::time::Duration;

use crate::helpers::{
    binary, create_user, pin_sqlite, sign_in, spawn_app, spawn_app_from, PASSWORD,
};

#[tokio::test]
async fn the_binary_answers_healthz_and_readyz() {
    let app = spawn_app();
    let client = app.client();
    let health = client
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok");
    let ready = client
        .get(format!("{}/readyz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "log:\n{}", app.log());
}

#[tokio::test]
async fn a_copy_of_the_binary_alone_in_an_empty_directory_serves_its_page_and_htmx() {
    // Copy the binary away from the source tree: nothing may be read from it at run time.
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("cluecdc");
    std::fs::copy(binary(), &exe).unwrap();
    // The embedded default: the binary alone, its store a file in the data directory.
    pin_sqlite(&dir.path().join("data"));
    let app = spawn_app_from(&exe, dir, &[]);
    let client = app.client();

    let login = client
        .get(format!("{}/login", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200);
    assert!(login.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    create_user(&app, "ada", "viewer");
    let b = sign_in(&app, "ada", PASSWORD).await;
    let html = b.text(format!("{}/", app.url)).await;
    assert!(
        html.contains(r#"<script src="/static/htmx.min.js" defer></script>"#),
        "{html}"
    );
    assert!(html.contains("<h1>Overview</h1>"));

    let js = client
        .get(format!("{}/static/htmx.min.js", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);
    assert_eq!(js.headers()["content-type"], "text/javascript");
    let body = js.bytes().await.unwrap();
    let vendored =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/static/htmx.min.js")).unwrap();
    assert_eq!(
        body.as_ref(),
        vendored.as_slice(),
        "the served htmx must be the vendored file"
    );

    assert!(
        app.data_dir().join("cluecdc.db").exists(),
        "the data directory holds the database"
    );
}

#[test]
fn every_vendored_file_matches_the_checksum_recorded_beside_it() {
    use sha2::{Digest, Sha256};
    let root = env!("CARGO_MANIFEST_DIR");
    let recorded = std::fs::read_to_string(format!("{root}/static/VENDORED.md")).unwrap();
    // The table's rows: | `file` | origin | version | sha256 | licence |
    let rows: Vec<(String, String)> = recorded
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let file = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((file.to_string(), cells.get(4)?.to_string()))
        })
        .collect();
    let files: Vec<&str> = rows.iter().map(|(f, _)| f.as_str()).collect();
    for expected in [
        "htmx.min.js",
        "swagger-ui/swagger-ui-bundle.js",
        "swagger-ui/swagger-ui.css",
    ] {
        assert!(
            files.contains(&expected),
            "{expected} is not in VENDORED.md: {files:?}"
        );
    }
    for (file, sha) in &rows {
        let bytes = std::fs::read(format!("{root}/static/{file}")).unwrap();
        assert_eq!(
            &hex::encode(Sha256::digest(&bytes)),
            sha,
            "static/{file} differs from the sha256 static/VENDORED.md records"
        );
    }
    for licence in ["htmx.LICENSE", "swagger-ui/LICENSE", "swagger-ui/NOTICE"] {
        assert!(std::path::Path::new(&format!("{root}/static/{licence}")).exists());
    }
}

#[tokio::test]
async fn every_response_carries_the_security_headers_and_a_request_id() {
    let app = spawn_app();
    let res = app
        .client()
        .get(format!("{}/login", app.url))
        .send()
        .await
        .unwrap();
    let h = res.headers();
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"));
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert_eq!(h["x-request-id"].len(), 16);
}

#[tokio::test]
async fn an_htmx_request_gets_the_fragment_not_the_page() {
    let app = spawn_app();
    create_user(&app, "ada", "viewer");
    let b = sign_in(&app, "ada", PASSWORD).await;
    let res = b
        .client
        .get(format!("{}/system/status", app.url))
        .header("HX-Request", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let html = res.text().await.unwrap();
    assert!(
        html.trim_start().starts_with(r#"<div id="system-status""#),
        "{html}"
    );
    assert!(!html.contains("<html"));
}

/// The reconciler and the monitors run on a runtime of their own (see `Background` in
/// src/app.rs; the page figures are in scripts/bench --scale): its threads are there, named.
#[tokio::test]
async fn the_background_tasks_run_on_threads_of_their_own() {
    let app = spawn_app();
    let status = reqwest::get(format!("{}/readyz", app.url))
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", app.child.id()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    // Two workers, and any of its blocking pool's threads (a name lookup), named alike.
    assert!(
        names.iter().filter(|n| *n == "background").count() >= 2,
        "threads of the serve process (pid {}): {names:?}",
        app.child.id()
    );
    assert!(
        names.iter().any(|n| n == "tokio-rt-worker"),
        "the requests' runtime: {names:?}"
    );
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    let mut app = spawn_app();
    let res = app
        .client()
        .get(format!("{}/healthz", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let status = app
        .terminate(Duration::from_secs(15))
        .expect("did not exit within 15 s of SIGTERM");
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        app.log()
    );
    assert!(
        app.log().contains("shut down cleanly"),
        "log:\n{}",
        app.log()
    );
}

#[tokio::test]
async fn an_unknown_path_is_404() {
    let app = spawn_app();
    let res = app
        .client()
        .get(format!("{}/no-such-page", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let res = app
        .client()
        .get(format!("{}/static/nope.js", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
}

#[test]
fn migrate_creates_the_schema_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(binary())
        .current_dir(dir.path())
        .args(["migrate", "--data-dir", "d"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("d/cluecdc.db").exists());
}
