//! Accounts and access, against the running binary: every route walked from the route table,
//! roles, CSRF, token and session revocation and expiry, rate limiting, and the audit trail.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

/// The only routes API.md allows without an identity, besides the static assets under
/// `/static/` (plus the one-time setup page, which demands its own single-use token, and single
/// sign-on's start and callback under `/login`, which demand the provider's answer to a sign-in
/// this browser started).
const PUBLIC: &[&str] = &[
    "/healthz",
    "/readyz",
    "/login",
    "/login/oidc",
    "/login/oidc/callback",
    "/static/*path",
    "/setup",
];

fn method(m: &str) -> Method {
    Method::from_bytes(m.as_bytes()).unwrap()
}

#[tokio::test]
async fn anonymous_requests_to_every_non_public_route_get_401_or_a_redirect_to_sign_in() {
    let app = spawn_app();
    let table = routes();
    assert!(table.len() > 20, "the route table lists every route");
    for route in &table {
        let url = format!("{}{}", app.url, concrete(&route.path));
        if route.access == "public" {
            assert!(
                PUBLIC.contains(&route.path.as_str()) || route.path.starts_with("/static/"),
                "{} {} is public but API.md does not allow it",
                route.method,
                route.path
            );
            continue;
        }
        let res = app
            .client()
            .request(method(&route.method), &url)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        let location = res
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_string());
        let ok = status == 401
            || (status == 303
                && location
                    .as_deref()
                    .is_some_and(|l| l.starts_with("/login?next=")));
        assert!(
            ok,
            "anonymous {} {} got {status} {location:?}",
            route.method, route.path
        );
        if route.path.starts_with("/api/") {
            assert_eq!(status, 401, "API routes answer 401, not a redirect");
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["error"]["code"], "unauthenticated");
        }
    }
}

#[tokio::test]
async fn a_viewer_gets_403_on_every_mutating_route_and_on_admin_pages() {
    let app = spawn_app();
    create_user(&app, "vera", "viewer");
    let token = create_token(&app, "vera", &[]);
    let browser = sign_in(&app, "vera", PASSWORD).await;
    let mut checked = 0;
    for route in routes() {
        let restricted = route.access == "operator" || route.access == "admin";
        let mutating = route.method != "GET";
        if !restricted || (!mutating && route.access != "admin") {
            continue;
        }
        let url = format!("{}{}", app.url, concrete(&route.path));
        // Through the API with a bearer token…
        let mut req = app
            .client()
            .request(method(&route.method), &url)
            .bearer_auth(&token);
        if route.path.starts_with("/api/") && mutating {
            req = req.json(&json!({}));
        } else if mutating {
            req = req.form(&[("name", "x")]);
        }
        let res = req.send().await.unwrap();
        assert_eq!(
            res.status(),
            403,
            "viewer token: {} {}",
            route.method,
            route.path
        );
        // …and from the browser, with a valid CSRF token, so only the role can refuse it.
        let mut req = browser
            .client
            .request(method(&route.method), &url)
            .header("X-CSRF-Token", &browser.csrf);
        if route.path.starts_with("/api/") && mutating {
            req = req.json(&json!({}));
        } else if mutating {
            req = req.form(&[("name", "x"), ("csrf_token", browser.csrf.as_str())]);
        }
        let res = req.send().await.unwrap();
        assert_eq!(
            res.status(),
            403,
            "viewer session: {} {}",
            route.method,
            route.path
        );
        checked += 1;
    }
    assert!(checked >= 10, "walked {checked} restricted routes");
    // Viewers still read what they may.
    let res = app
        .client()
        .get(format!("{}/api/v1/audit", app.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn a_browser_post_without_the_csrf_token_is_refused_and_changes_nothing() {
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    let b = sign_in(&app, "ada", PASSWORD).await;
    let form = [
        ("name", "mallory"),
        ("role", "admin"),
        ("password", "a very long password"),
    ];
    let res = b
        .client
        .post(format!("{}/settings/users", b.base))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    assert!(res.text().await.unwrap().contains("CSRF"));
    let res = b
        .client
        .post(format!("{}/settings/users", b.base))
        .form(&[
            ("name", "mallory"),
            ("role", "admin"),
            ("password", "a very long password"),
            ("csrf_token", "wrong"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let res = b
        .client
        .post(format!("{}/api/v1/users", b.base))
        .json(&json!({"name": "mallory", "role": "admin", "password": "a very long password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        403,
        "a cookie-authenticated API write needs the CSRF header too"
    );
    let list: Value = b
        .client
        .get(format!("{}/api/v1/users", b.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        1,
        "no user was created: {list}"
    );

    let mut with = form.to_vec();
    with.push(("csrf_token", &b.csrf));
    let res = b
        .client
        .post(format!("{}/settings/users", b.base))
        .form(&with)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303, "with the token the same form works");

    // The sign-in form is protected too (double-submit cookie).
    let anon = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let res = anon
        .post(format!("{}/login", app.url))
        .form(&[("name", "ada"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
}

/// The status `GET /api/v1/me` answers with this bearer token.
async fn me_status(app: &TestApp, token: String) -> u16 {
    app.client()
        .get(format!("{}/api/v1/me", app.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_token_revoked_from_the_cli_is_refused_on_the_next_request() {
    // Resolved credentials are reused until the next commit; a commit from another process
    // (the CLI) must end that at once, not after a while.
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    create_user(&app, "bob", "viewer");
    let token = create_token(&app, "ada", &["--label", "cli-revoked"]);
    let bob = create_token(&app, "bob", &[]);
    let me = |t: String| me_status(&app, t);
    for _ in 0..3 {
        assert_eq!(me(token.clone()).await, 200);
        assert_eq!(me(bob.clone()).await, 200);
    }
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(binary())
            .args(args)
            .arg("--data-dir")
            .arg(app.data_dir())
            .envs(app.store_vars())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = cli(&["token", "list"]);
    let id = listed
        .lines()
        .find(|l| l.contains("cli-revoked"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("token list names the token: {listed}"))
        .to_string();
    cli(&["token", "revoke", &id]);
    assert_eq!(
        me(token).await,
        401,
        "revoked by another process: refused at once"
    );
    assert_eq!(me(bob).await, 200, "other tokens are unaffected");
}

#[tokio::test]
async fn a_revoked_api_token_stops_working_at_once() {
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    let admin = create_token(&app, "ada", &[]);
    let victim = create_token(&app, "ada", &["--label", "ci"]);
    let me = |t: String| me_status(&app, t);
    assert_eq!(me(victim.clone()).await, 200);
    let tokens: Value = app
        .client()
        .get(format!("{}/api/v1/tokens", app.url))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = tokens["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["label"] == "ci")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !tokens.to_string().contains(&victim),
        "token values are never listed"
    );
    let res = app
        .client()
        .delete(format!("{}/api/v1/tokens/{id}", app.url))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    assert_eq!(
        me(victim).await,
        401,
        "revoked: refused on the very next request"
    );
    assert_eq!(me("cdc_not-a-real-token".into()).await, 401);
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    let token = create_token(&app, "ada", &["--expires", "1s"]);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let res = app
        .client()
        .get(format!("{}/api/v1/me", app.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
}

#[tokio::test]
async fn an_idle_session_expires_and_a_signed_out_session_stops_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that the sign-out below, a few requests after a sign-in, is inside it on a
    // loaded machine (2 s was not, once).
    let app = spawn_app_from(&binary(), dir, &[("CLUECDC_SESSION_IDLE", "5s")]);
    create_user(&app, "ada", "admin");
    let b = sign_in(&app, "ada", PASSWORD).await;
    assert_eq!(
        b.client
            .get(format!("{}/api/v1/me", app.url))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(6000)).await;
    let res = b.client.get(format!("{}/", app.url)).send().await.unwrap();
    assert_eq!(res.status(), 303, "idle past the limit: sent to sign in");
    assert!(res.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("/login"));

    // Sign out: the same cookie, replayed by an attacker who copied it, no longer works.
    let b = sign_in(&app, "ada", PASSWORD).await;
    let cookie = session_cookie_of(&b, &app).await;
    let res = b
        .client
        .post(format!("{}/logout", app.url))
        .form(&[("csrf_token", b.csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303);
    let replay = app
        .client()
        .get(format!("{}/api/v1/me", app.url))
        .header("cookie", format!("cluecdc_session={cookie}"))
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 401);
}

/// Reads the session cookie value the server set (the cookie store hides it).
async fn session_cookie_of(_b: &Browser, app: &TestApp) -> String {
    // Sign in again with a plain client to see the Set-Cookie header.
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = c.get(format!("{}/login", app.url)).send().await.unwrap();
    let login_cookie = page.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let csrf = hidden_value(&page.text().await.unwrap(), "csrf_token").unwrap();
    let res = c
        .post(format!("{}/login", app.url))
        .header("cookie", login_cookie)
        .form(&[
            ("name", "ada"),
            ("password", PASSWORD),
            ("csrf_token", csrf.as_str()),
        ])
        .send()
        .await
        .unwrap();
    let set = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|v| v.starts_with("cluecdc_session="))
        .unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let value = set
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("cluecdc_session=")
        .to_string();
    // Revoke this extra session through its own sign-out so the test checks exactly one.
    let me = app
        .client()
        .get(format!("{}/api/v1/me", app.url))
        .header("cookie", format!("cluecdc_session={value}"))
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 200);
    let home = app
        .client()
        .get(format!("{}/", app.url))
        .header("cookie", format!("cluecdc_session={value}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = hidden_value(&home, "csrf_token").unwrap();
    let out = app
        .client()
        .post(format!("{}/logout", app.url))
        .header("cookie", format!("cluecdc_session={value}"))
        .form(&[("csrf_token", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    value
}

#[tokio::test]
async fn repeated_wrong_passwords_lock_the_account_for_a_while() {
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    let c = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = c
        .get(format!("{}/login", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = hidden_value(&page, "csrf_token").unwrap();
    let attempt = |pw: &'static str| {
        let c = c.clone();
        let url = format!("{}/login", app.url);
        let csrf = csrf.clone();
        async move {
            c.post(url)
                .form(&[
                    ("name", "ada"),
                    ("password", pw),
                    ("csrf_token", csrf.as_str()),
                ])
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    for _ in 0..5 {
        assert_eq!(attempt("wrong password!!").await, 401);
    }
    assert_eq!(
        attempt(PASSWORD).await,
        429,
        "locked even with the right password"
    );
    let token = create_token(&app, "ada", &[]);
    let audit: Value = app
        .client()
        .get(format!(
            "{}/api/v1/audit?action=auth.login&outcome=failure",
            app.url
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        audit["items"].as_array().unwrap().len(),
        6,
        "every failed and refused sign-in is audited"
    );
    assert!(
        !audit.to_string().contains("wrong password"),
        "attempted passwords are never recorded"
    );
}

/// One sign-in on `base` from a fresh browser: the status and the page.
async fn sign_in_attempt(base: &str, name: &str, password: &str) -> (u16, String) {
    sign_in_forwarded(base, None, name, password).await
}

/// Like `sign_in_attempt`, the POST carrying `X-Forwarded-For: forwarded` as a balancer sends it.
async fn sign_in_forwarded(
    base: &str,
    forwarded: Option<&str>,
    name: &str,
    password: &str,
) -> (u16, String) {
    let c = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = c
        .get(format!("{base}/login"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = hidden_value(&page, "csrf_token").unwrap();
    let mut post = c.post(format!("{base}/login"));
    if let Some(f) = forwarded {
        post = post.header("x-forwarded-for", f);
    }
    let res = post
        .form(&[
            ("name", name),
            ("password", password),
            ("csrf_token", csrf.as_str()),
        ])
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// Issue 33: replicas behind a load balancer share one store, and the failures they count with
/// it. Spread over two `serve` processes, the account locks at the same total as on one (5),
/// and both replicas refuse it, even with the right password.
#[tokio::test]
async fn failed_sign_ins_spread_over_two_replicas_lock_the_account_at_the_same_total() {
    let data = tempfile::tempdir().unwrap();
    let one = spawn_app_on(&binary(), tempfile::tempdir().unwrap(), data.path(), &[]);
    let two = spawn_app_on(&binary(), tempfile::tempdir().unwrap(), data.path(), &[]);
    create_user(&one, "ada", "admin");
    for i in 0..5 {
        let replica = if i % 2 == 0 { &one } else { &two };
        let (status, page) = sign_in_attempt(&replica.url, "ada", "wrong password!!").await;
        assert_eq!(
            status,
            401,
            "failure {} of 5 is only counted: {page}",
            i + 1
        );
    }
    for replica in [&two, &one] {
        let (status, page) = sign_in_attempt(&replica.url, "ada", PASSWORD).await;
        assert_eq!(
            status, 429,
            "locked on every replica, even with the right password"
        );
        let wait: u64 = page
            .split("Too many failed sign-ins. Try again in ")
            .nth(1)
            .and_then(|rest| rest.split(" s.").next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the page says how long to wait: {page}"));
        assert!(
            (1..=900).contains(&wait),
            "inside the 15-minute window: {wait}"
        );
    }
    // Another account is not held back by ada's failures, on either replica.
    create_user(&one, "grace", "viewer");
    assert_eq!(sign_in_attempt(&two.url, "grace", PASSWORD).await.0, 303);

    let token = create_token(&two, "ada", &[]);
    for replica in [&one, &two] {
        let audit: Value = replica
            .client()
            .get(format!(
                "{}/api/v1/audit?action=auth.login&outcome=failure",
                replica.url
            ))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            audit["items"].as_array().unwrap().len(),
            7,
            "five failed and two refused sign-ins, audited once each, seen from either replica"
        );
    }
}

/// The `address` of each `auth.login` audit row with this outcome.
async fn login_audit_addresses(app: &TestApp, token: &str, outcome: &str) -> Vec<String> {
    let audit: Value = app
        .client()
        .get(format!(
            "{}/api/v1/audit?action=auth.login&outcome={outcome}",
            app.url
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["summary"]["address"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

const CLIENT_A: &str = "203.0.113.7";
const CLIENT_B: &str = "198.51.100.4";

/// 20 failed sign-ins (the per-address limit) "from" `CLIENT_A`, each on its own unknown
/// account so that no per-account limit (5) is reached first.
async fn exhaust_from_a(app: &TestApp) {
    for i in 0..20 {
        let (status, page) = sign_in_forwarded(
            &app.url,
            Some(CLIENT_A),
            &format!("stranger{i}"),
            "wrong password!!",
        )
        .await;
        assert_eq!(
            status,
            401,
            "failure {} of 20 is only counted: {page}",
            i + 1
        );
    }
}

/// Issue 33: behind a load balancer (here the test itself, 127.0.0.1, trusted), the address
/// the balancer forwards is the client: A's failures lock A out and not B, a forged prefix
/// does not move anyone onto A's count, and audit rows name the clients, not the balancer.
#[tokio::test]
async fn behind_a_trusted_proxy_the_sign_in_limit_counts_the_forwarded_client() {
    let app = spawn_app_from(
        &binary(),
        tempfile::tempdir().unwrap(),
        &[("CLUECDC_TRUSTED_PROXIES", "127.0.0.1/32")],
    );
    create_user(&app, "ada", "admin");
    exhaust_from_a(&app).await;
    let (status, _) = sign_in_forwarded(&app.url, Some(CLIENT_A), "ada", PASSWORD).await;
    assert_eq!(
        status, 429,
        "A is at its limit, even with the right password"
    );
    let (status, page) = sign_in_forwarded(&app.url, Some(CLIENT_B), "ada", PASSWORD).await;
    assert_eq!(status, 303, "B is not held back by A's failures: {page}");
    // The client prepends what it likes; the balancer appends the address it saw (B).
    let forged = format!("{CLIENT_A}, {CLIENT_B}");
    let (status, page) = sign_in_forwarded(&app.url, Some(&forged), "ada", PASSWORD).await;
    assert_eq!(status, 303, "the left-most entry is never believed: {page}");

    let token = create_token(&app, "ada", &[]);
    assert_eq!(
        login_audit_addresses(&app, &token, "failure").await,
        vec![CLIENT_A.to_string(); 21],
        "twenty failures and one refusal, each naming A, not the balancer"
    );
    assert_eq!(
        login_audit_addresses(&app, &token, "success").await,
        vec![CLIENT_B.to_string(); 2],
        "the sessions started from B"
    );
}

/// Without `--trusted-proxy` the header is whatever the client wrote, so it is ignored: the
/// limit counts the TCP peer and a client cannot dodge it by naming other addresses.
#[tokio::test]
async fn without_trusted_proxies_x_forwarded_for_is_ignored() {
    let app = spawn_app_from(
        &binary(),
        tempfile::tempdir().unwrap(),
        &[("CLUECDC_TRUSTED_PROXIES", "")],
    );
    create_user(&app, "ada", "admin");
    exhaust_from_a(&app).await;
    let (status, _) = sign_in_forwarded(&app.url, Some(CLIENT_B), "ada", PASSWORD).await;
    assert_eq!(
        status, 429,
        "the peer, 127.0.0.1, is at its limit whatever the header says"
    );
    let token = create_token(&app, "ada", &[]);
    assert_eq!(
        login_audit_addresses(&app, &token, "failure").await,
        vec!["127.0.0.1".to_string(); 21]
    );
}

/// A bad `CLUECDC_TRUSTED_PROXIES` stops the start with the setting and the value named.
#[tokio::test]
async fn a_bad_trusted_proxy_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("CLUECDC_TRUSTED_PROXIES", "10.0.0.0/8,10.1.2.0/33")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("serve exits at once")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--trusted-proxy")
            && stderr.contains("CLUECDC_TRUSTED_PROXIES")
            && stderr.contains("10.1.2.0/33"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening"),
        "nothing listened"
    );
}

#[tokio::test]
async fn each_change_writes_one_audit_row_and_a_refused_change_writes_none() {
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    let token = create_token(&app, "ada", &[]);
    let api = |m: Method, path: &str| {
        app.client()
            .request(m, format!("{}{path}", app.url))
            .bearer_auth(&token)
    };
    let secret = "canary-password-7d1e";
    let res = api(Method::POST, "/api/v1/users")
        .json(&json!({"name": "otto", "role": "operator", "password": secret}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let otto: Value = res.json().await.unwrap();
    assert!(otto.get("password_hash").is_none() && !otto.to_string().contains(secret));

    // A duplicate is refused with a field message, and its audit row rolled back with it.
    let res = api(Method::POST, "/api/v1/users")
        .json(&json!({"name": "otto", "role": "viewer", "password": secret}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    let err: Value = res.json().await.unwrap();
    assert!(
        err["error"]["fields"]["name"]
            .as_str()
            .unwrap()
            .contains("taken"),
        "{err}"
    );
    // Invalid input: every field named, nothing stored.
    let res = api(Method::POST, "/api/v1/users")
        .json(&json!({"name": "Bad Name", "role": "root", "password": "short"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    let err: Value = res.json().await.unwrap();
    for f in ["name", "role", "password"] {
        assert!(err["error"]["fields"][f].is_string(), "{f} is named: {err}");
    }

    let rows: Value = api(Method::GET, "/api/v1/audit?action=user.create")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = rows["items"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["summary"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["otto", "ada"],
        "one row per created user, none for refused ones"
    );
    let row = &rows[0];
    assert_eq!(row["actor"], "ada");
    assert_eq!(row["actor_kind"], "token");
    assert_eq!(row["outcome"], "success");
    assert_eq!(row["target_id"], otto["id"]);
    assert!(row["request_id"].as_str().unwrap().len() == 16);

    let res = api(
        Method::PATCH,
        &format!("/api/v1/users/{}", otto["id"].as_str().unwrap()),
    )
    .json(&json!({"role": "viewer"}))
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let rows: Value = api(Method::GET, "/api/v1/audit?action=user.set_role")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        rows["items"][0]["summary"],
        json!({"name": "otto", "from": "operator", "to": "viewer"})
    );

    // Export: CSV and JSON, same filters, no secret anywhere.
    let csv = api(Method::GET, "/api/v1/audit/export?format=csv")
        .send()
        .await
        .unwrap();
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = csv.text().await.unwrap();
    assert!(csv.starts_with(
        "id,at,actor,actor_kind,action,target_kind,target_id,outcome,summary,request_id\n"
    ));
    assert!(csv.contains("user.set_role") && !csv.contains(secret) && !csv.contains(&token[4..]));
    let json_export: Value = api(Method::GET, "/api/v1/audit/export?format=json&action=user.")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(json_export.as_array().unwrap().len(), 3);
    let bad = api(Method::GET, "/api/v1/audit?since=yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    let err: Value = bad.json().await.unwrap();
    assert!(err["error"]["fields"]["since"]
        .as_str()
        .unwrap()
        .contains("RFC 3339"));
}

#[tokio::test]
async fn the_audit_table_refuses_updates_and_deletes() {
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    let pool = crate::helpers::store(&app.data_dir()).await;
    let mut conn = pool.acquire().await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_log")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert!(n >= 1);
    assert!(sqlx::query("UPDATE audit_log SET actor = 'eve'")
        .execute(&mut *conn)
        .await
        .is_err());
    assert!(sqlx::query("DELETE FROM audit_log")
        .execute(&mut *conn)
        .await
        .is_err());
}

#[tokio::test]
async fn the_first_run_prints_a_one_time_setup_url_that_creates_the_first_admin() {
    let app = spawn_app();
    let log = app.log();
    let start = log
        .find("/setup?token=")
        .expect("the log names the setup URL");
    let token: String = log[start + "/setup?token=".len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let c = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    assert_eq!(
        c.get(format!("{}/setup?token=wrong", app.url))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let page = c
        .get(format!("{}/setup?token={token}", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let res = c
        .post(format!("{}/setup", app.url))
        .form(&[
            ("token", token.as_str()),
            ("name", "root"),
            ("password", PASSWORD),
            ("confirm", "different"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    assert!(res
        .text()
        .await
        .unwrap()
        .contains("the two passwords differ"));
    let res = c
        .post(format!("{}/setup", app.url))
        .form(&[
            ("token", token.as_str()),
            ("name", "root"),
            ("password", PASSWORD),
            ("confirm", PASSWORD),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303);
    let me: Value = c
        .get(format!("{}/api/v1/me", app.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["role"], "admin");
    assert_eq!(
        c.get(format!("{}/setup?token={token}", app.url))
            .send()
            .await
            .unwrap()
            .status(),
        404,
        "single use"
    );
}

#[tokio::test]
async fn request_bodies_over_the_limit_are_refused() {
    let app = spawn_app();
    let big = "x".repeat(2 * 1024 * 1024);
    let res = app
        .client()
        .post(format!("{}/login", app.url))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
}

#[tokio::test]
async fn the_openapi_document_lists_every_api_route() {
    let app = spawn_app();
    create_user(&app, "vera", "viewer");
    let token = create_token(&app, "vera", &[]);
    let doc: Value = app
        .client()
        .get(format!("{}/api/v1/openapi.json", app.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for route in routes()
        .into_iter()
        .filter(|r| r.path.starts_with("/api/v1/"))
    {
        let path = route
            .path
            .split('/')
            .map(|s| {
                s.strip_prefix(':')
                    .map(|p| format!("{{{p}}}"))
                    .unwrap_or(s.to_string())
            })
            .collect::<Vec<_>>()
            .join("/");
        assert!(
            doc["paths"][&path][route.method.to_lowercase()].is_object(),
            "{} {path} missing",
            route.method
        );
    }
}

/// The typed routes of users, tokens, sessions and `me`, driven through the `Api` client, whose
/// every response (successes, field errors, not found) is checked against the served document.
#[tokio::test]
async fn the_user_token_and_session_routes_answer_as_the_openapi_document_says() {
    let api = admin_api();
    let (status, me) = api.get("/api/v1/me").await;
    assert_eq!((status, me["name"].as_str()), (200, Some("ada")), "{me}");

    let (status, otto) = api
        .post(
            "/api/v1/users",
            json!({"name": "otto", "role": "operator", "password": PASSWORD}),
        )
        .await;
    assert_eq!(status, 201, "{otto}");
    let (status, err) = api
        .post(
            "/api/v1/users",
            json!({"name": "Bad Name", "role": "viewer", "password": "short"}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
    let id = otto["id"].as_str().unwrap();
    let (status, patched) = api
        .patch(&format!("/api/v1/users/{id}"), json!({"role": "viewer"}))
        .await;
    assert_eq!((status, patched["role"].as_str()), (200, Some("viewer")));
    let (status, _) = api
        .patch("/api/v1/users/no-such-user", json!({"disabled": true}))
        .await;
    assert_eq!(status, 404);
    let (status, users) = api.get("/api/v1/users?limit=1&page=2").await;
    assert_eq!(status, 200, "{users}");

    let (status, created) = api
        .post(
            "/api/v1/tokens",
            json!({"user": "ada", "label": "ci", "expires": "30d"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, tokens) = api.get("/api/v1/tokens").await;
    assert_eq!(status, 200);
    assert!(tokens["items"].as_array().unwrap().len() >= 2, "{tokens}");
    let token_id = created["info"]["id"].as_str().unwrap();
    let (status, _) = api.delete(&format!("/api/v1/tokens/{token_id}")).await;
    assert_eq!(status, 204);
    let (status, _) = api.delete(&format!("/api/v1/tokens/{token_id}x")).await;
    assert_eq!(status, 404);

    let _browser = sign_in(&api.app, "ada", PASSWORD).await;
    let (status, sessions) = api.get("/api/v1/sessions").await;
    assert_eq!(status, 200);
    assert_eq!(sessions["items"][0]["user_name"], "ada", "{sessions}");
}

/// Audit rows older than `CLUECDC_AUDIT_RETENTION` are removed by the monitor's cycle, and not
/// before; the removal is itself an audit row, the page says what is kept, and the rows after
/// the cut still cannot be deleted or changed.
#[tokio::test]
async fn audit_rows_older_than_the_audit_retention_go_and_the_removal_is_recorded() {
    let api = admin_api_with(&[
        ("CLUECDC_MONITOR_INTERVAL", "1s"),
        ("CLUECDC_AUDIT_RETENTION", "5s"),
    ]);
    let (status, first) = api.get("/api/v1/audit?action=user.create").await;
    assert_eq!(status, 200, "{first}");
    let at = first["items"][0]["at"]
        .as_str()
        .expect("ada's creation is audited")
        .to_string();
    let created = chrono::DateTime::parse_from_rfc3339(&at).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let (_, page) = api.get("/api/v1/audit?action=user.create").await;
        if page["items"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ada's creation still in the trail 40 s later: {page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // `at` has whole seconds: the row is at most a second older than it says.
    let kept = chrono::Utc::now().signed_duration_since(created);
    assert!(
        kept >= chrono::Duration::seconds(5),
        "removed {kept} after it was written, before the 5 s retention"
    );

    let (_, trims) = api.get("/api/v1/audit?action=audit.trim").await;
    let trim = &trims["items"][0];
    assert_eq!(trim["actor"], "cluecdc", "{trims}");
    assert_eq!(trim["actor_kind"], "system");
    assert!(trim["summary"]["removed"].as_i64().unwrap() >= 1, "{trim}");
    assert_eq!(trim["summary"]["retention_secs"], 5);

    let page = api.text("/audit").await;
    assert!(page.contains("kept 5 s"), "the page says the retention");
    assert!(
        page.contains("have been removed"),
        "and that rows were removed"
    );

    let pool = crate::helpers::store(&api.app.data_dir()).await;
    let mut conn = pool.acquire().await.unwrap();
    assert!(
        sqlx::query("DELETE FROM audit_log")
            .execute(&mut *conn)
            .await
            .is_err(),
        "the rows after the cut cannot be deleted"
    );
    assert!(sqlx::query("UPDATE audit_log SET actor = 'eve'")
        .execute(&mut *conn)
        .await
        .is_err());
}

/// A request whose token is due its "last used" mark answers while another connection holds
/// the lock that mark needs (SQLite's write lock; on PostgreSQL the token's row), and the mark
/// is written once the lock is released. Before, the request waited for the lock: up to the
/// busy timeout (10 s) on SQLite, for as long as the lock was held on PostgreSQL.
#[tokio::test]
async fn a_request_does_not_wait_for_the_write_lock_to_mark_its_token_used() {
    let app = spawn_app();
    create_user(&app, "ada", "admin");
    let token = create_token(&app, "ada", &[]);
    let pool = crate::helpers::store(&app.data_dir()).await;
    let used = || async {
        sqlx::query_scalar::<_, Option<String>>("SELECT last_used_at FROM api_tokens")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    assert_eq!(used().await, None, "a new token has not been used");

    let mut lock = pool.acquire().await.unwrap();
    if on_postgres() {
        sqlx::query("BEGIN").execute(&mut *lock).await.unwrap();
        sqlx::query("SELECT id FROM api_tokens FOR UPDATE")
            .execute(&mut *lock)
            .await
            .unwrap();
    } else {
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *lock)
            .await
            .unwrap();
    }
    let answered = app
        .client()
        .get(format!("{}/api/v1/me", app.url))
        .bearer_auth(&token)
        .timeout(Duration::from_secs(8))
        .send()
        .await
        .map(|r| r.status().as_u16());
    sqlx::query("ROLLBACK").execute(&mut *lock).await.unwrap();
    drop(lock);
    assert_eq!(
        answered.ok(),
        Some(200),
        "the request answered while the lock was held"
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while used().await.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "last_used_at still empty 15 s after the lock was released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
