//! The config provider jar handed out by the server (`--provider-jar`): a worker, or an image
//! build, fetches it without signing in and checks it with the SHA-512 served beside it; the
//! Clusters page shows the same download and checksum; a server without the setting says how to
//! set it, and a file that is not the provider's jar stops the start with the setting named.

use std::process::{Command, Stdio};
use std::time::Duration;

use sha2::{Digest, Sha512};

use crate::helpers::{binary, create_user, sign_in, spawn_app_from, var, PASSWORD};

const JAR: &str = "/static/cluecdc-config-provider.jar";

#[tokio::test]
async fn the_jar_the_stack_built_is_handed_out_with_its_sha512_which_sha512sum_accepts() {
    let path = var("CLUECDC_PROVIDER_JAR");
    let want = std::fs::read(&path).unwrap();
    let app = spawn_app_from(
        &binary(),
        tempfile::tempdir().unwrap(),
        &[("CLUECDC_PROVIDER_JAR", &path)],
    );
    // Anonymous, as a worker's curl or a Strimzi build is.
    let anon = reqwest::Client::new();
    let res = anon.get(format!("{}{JAR}", app.url)).send().await.unwrap();
    assert_eq!(res.status(), 200, "log:\n{}", app.log());
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "application/java-archive"
    );
    let got = res.bytes().await.unwrap();
    assert!(got[..] == want[..], "the served jar differs from {path}");
    let line = anon
        .get(format!("{}{JAR}.sha512", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let sha = hex::encode(Sha512::digest(&want));
    assert_eq!(line, format!("{sha}  cluecdc-config-provider.jar\n"));

    // What the Clusters page tells a worker's operator to run: the download, checked by sha512sum.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluecdc-config-provider.jar"), &got).unwrap();
    let check = |line: &str| {
        let mut child = Command::new("sha512sum")
            .arg("-c")
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        child.wait().unwrap().success()
    };
    assert!(check(&line), "sha512sum -c refused the served checksum");
    let wrong = format!("{}  cluecdc-config-provider.jar\n", "0".repeat(128));
    assert!(!check(&wrong), "sha512sum -c accepted a wrong checksum");

    create_user(&app, "ada", "admin");
    let b = sign_in(&app, "ada", PASSWORD).await;
    let page = b.text(format!("{}/clusters", app.url)).await;
    assert!(
        page.contains(&format!("curl -fsSLO {}{JAR}", app.url)),
        "no download line on the Clusters page"
    );
    assert!(
        page.contains(&format!(
            "echo &#x27;{sha}  cluecdc-config-provider.jar&#x27; | sha512sum -c"
        )) || page.contains(&format!(
            "echo '{sha}  cluecdc-config-provider.jar' | sha512sum -c"
        )),
        "no checked download on the Clusters page"
    );
    assert!(
        page.contains(&format!("sha512sum: {sha}")),
        "no Strimzi build plugin with the checksum on the Clusters page"
    );
}

#[tokio::test]
async fn without_the_setting_the_download_says_how_to_set_it_and_a_wrong_file_stops_the_start() {
    // An empty value removes the stack's CLUECDC_PROVIDER_JAR from the server's environment.
    let app = spawn_app_from(
        &binary(),
        tempfile::tempdir().unwrap(),
        &[("CLUECDC_PROVIDER_JAR", "")],
    );
    for path in [JAR, "/static/cluecdc-config-provider.jar.sha512"] {
        let res = reqwest::get(format!("{}{path}", app.url)).await.unwrap();
        assert_eq!(res.status(), 404, "{path}");
        let body = res.text().await.unwrap();
        assert!(
            body.contains("--provider-jar") && body.contains("CLUECDC_PROVIDER_JAR"),
            "{path}: {body}"
        );
    }
    create_user(&app, "ada", "admin");
    let b = sign_in(&app, "ada", PASSWORD).await;
    let page = b.text(format!("{}/clusters", app.url)).await;
    assert!(
        page.contains("This server hands out no jar"),
        "the Clusters page does not say why there is no download"
    );

    // Not a jar, and a jar without the provider: each stops the start, naming the setting.
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.jar");
    std::fs::write(&text, "not a jar").unwrap();
    let other = dir.path().join("other.jar");
    std::fs::write(&other, b"PK\x03\x04 org/example/Other.class").unwrap();
    for (file, why) in [
        (&text, "not a jar"),
        (&other, "not the ClueCDC config provider"),
    ] {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .env("CLUECDC_PROVIDER_JAR", file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{why}: the server kept running"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(!status.success(), "{why}: it started");
        assert!(
            err.contains("--provider-jar") && err.contains(why),
            "{why}: {err}"
        );
    }
}
