//! Single sign-on through the stack's real Dex (`scripts/stack up dex`): sign-ins through its
//! own login form, the role from the groups claim, and the answers ClueCDC must refuse (a forged
//! state, a replayed code, a token also addressed to another client, an unreachable provider, a
//! user in no mapped group).
//!
//! Dex knows ClueCDC's redirect URIs exactly, so each test's server listens on its own port of
//! the stack's reserved range (DEX_RP_PORTS). The group-change test restarts Dex (its users come
//! from its config): it holds the Dex gate exclusively (`helpers::dex_exclusive`, across test
//! processes), every other sign-in shares it.

use std::process::Command;

use crate::helpers::{self, dex_exclusive, dex_shared, var, TestApp};

/// The n-th port of the range Dex has redirect URIs for.
fn rp_port(n: u16) -> u16 {
    let range = var("DEX_RP_PORTS");
    let (first, last) = range.split_once('-').unwrap();
    let (first, last): (u16, u16) = (first.parse().unwrap(), last.parse().unwrap());
    // The suite runs once per metadata engine, both at once: each run has its half of the range.
    let n = if helpers::on_postgres() { n + 5 } else { n };
    assert!(first + n <= last, "DEX_RP_PORTS {range} has no port #{n}");
    first + n
}

/// A ClueCDC server signing in through Dex as the `cluecdc` client, listening on `port`.
fn sso_app(port: u16, extra: &[(&str, &str)]) -> TestApp {
    let listen = format!("127.0.0.1:{port}");
    let public = format!("http://127.0.0.1:{port}");
    let issuer = var("DEX_ISSUER");
    let client_id = var("DEX_CLIENT_ID");
    let secret = var("DEX_CLIENT_SECRET");
    let ca = var("TLS_CA_FILE");
    let mut env: Vec<(&str, &str)> = vec![
        ("CLUECDC_LISTEN", &listen),
        ("CLUECDC_PUBLIC_URL", &public),
        ("CLUECDC_OIDC_ISSUER", &issuer),
        ("CLUECDC_OIDC_CLIENT_ID", &client_id),
        ("CLUECDC_OIDC_CLIENT_SECRET", &secret),
        ("CLUECDC_OIDC_CA_FILE", &ca),
        ("CLUECDC_OIDC_SCOPES", "openid profile email groups"),
        ("CLUECDC_OIDC_ADMIN_GROUPS", "cluecdc-admins"),
        ("CLUECDC_OIDC_OPERATOR_GROUPS", "cluecdc-operators"),
        ("CLUECDC_OIDC_VIEWER_GROUPS", "cluecdc-viewers"),
        ("CLUECDC_OIDC_NAME", "Dex"),
    ];
    for (k, v) in extra {
        env.retain(|(key, _)| key != k);
        env.push((k, v));
    }
    helpers::spawn_app_from(&helpers::binary(), tempfile::tempdir().unwrap(), &env)
}

/// A browser-like client: cookies kept, redirects not followed, the stack's CA trusted.
fn browser() -> reqwest::Client {
    let ca = std::fs::read(var("TLS_CA_FILE")).unwrap();
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
}

fn location(res: &reqwest::Response) -> String {
    let loc = res
        .headers()
        .get("location")
        .unwrap_or_else(|| panic!("no Location in a {} answer", res.status()))
        .to_str()
        .unwrap();
    res.url().join(loc).unwrap().to_string()
}

/// Clicks "Sign in with Dex": the provider's authorization URL.
async fn start(app: &TestApp, client: &reqwest::Client) -> String {
    let res = client
        .get(format!("{}/login/oidc?next=/audit", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303, "{}", res.text().await.unwrap());
    let to = location(&res);
    assert!(to.starts_with(&var("DEX_ISSUER")), "{to}");
    assert!(
        to.contains("code_challenge_method=S256") && to.contains("nonce="),
        "{to}"
    );
    to
}

/// Signs in at Dex's own login form as `user` (password DEX_USER_PASSWORD) and returns the URL
/// Dex sends the browser back to (ClueCDC's callback with code and state), not yet visited.
async fn dex_login(client: &reqwest::Client, auth_url: &str, user: &str, app: &TestApp) -> String {
    let mut url = auth_url.to_string();
    let form_page = loop {
        let res = client.get(&url).send().await.unwrap();
        if res.status().is_redirection() {
            url = location(&res);
            continue;
        }
        assert_eq!(res.status(), 200, "Dex at {url}");
        break res.text().await.unwrap();
    };
    let action = form_page
        .split("action=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("Dex's login form")
        .replace("&amp;", "&");
    let post_to = reqwest::Url::parse(&url).unwrap().join(&action).unwrap();
    let mut res = client
        .post(post_to)
        .form(&[
            ("login", format!("{user}@example.com")),
            ("password", var("DEX_USER_PASSWORD")),
        ])
        .send()
        .await
        .unwrap();
    loop {
        assert!(
            res.status().is_redirection(),
            "Dex did not accept {user}: {} {}",
            res.status(),
            res.text().await.unwrap_or_default()
        );
        let to = location(&res);
        if to.starts_with(&app.url) {
            assert!(to.contains("/login/oidc/callback?"), "{to}");
            return to;
        }
        res = client.get(&to).send().await.unwrap();
    }
}

/// Visits a page; returns status and text (the apostrophes askama escapes put back).
async fn visit(client: &reqwest::Client, url: &str) -> (u16, String) {
    let res = client.get(url).send().await.unwrap();
    let status = res.status().as_u16();
    (status, unescape(&res.text().await.unwrap()))
}

fn unescape(html: &str) -> String {
    html.replace("&#39;", "'").replace("&#x27;", "'")
}

/// Who the client's session is, from `/api/v1/me`; `None` when it is signed out.
async fn me(app: &TestApp, client: &reqwest::Client) -> Option<serde_json::Value> {
    let res = client
        .get(format!("{}/api/v1/me", app.url))
        .send()
        .await
        .unwrap();
    match res.status().as_u16() {
        200 => Some(res.json().await.unwrap()),
        401 => None,
        other => panic!("/api/v1/me answered {other}"),
    }
}

/// A full sign-in as `user`; panics unless it succeeds.
async fn sign_in(app: &TestApp, user: &str) -> reqwest::Client {
    let client = browser();
    let auth = start(app, &client).await;
    let back = dex_login(&client, &auth, user, app).await;
    let (status, page) = visit(&client, &back).await;
    assert_eq!(status, 200, "callback for {user}: {page}");
    assert!(
        page.contains(r#"http-equiv="refresh" content="0;url=/audit""#),
        "{page}"
    );
    client
}

fn query_param(url: &str, name: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap()
}

fn with_param(url: &str, name: &str, value: &str) -> String {
    let mut u = reqwest::Url::parse(url).unwrap();
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == name {
                value.to_string()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    u.query_pairs_mut().clear().extend_pairs(pairs);
    u.to_string()
}

/// Audit rows of an action, read with a local admin's API token.
async fn audit_rows(app: &TestApp, token: &str, action: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value = app
        .client()
        .get(format!("{}/api/v1/audit?action={action}", app.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["items"]
        .as_array()
        .or_else(|| v.as_array())
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r["action"] == action)
        .collect()
}

#[tokio::test]
async fn a_forged_state_is_refused_and_the_real_answer_then_signs_the_admin_group_user_in_as_admin()
{
    let _dex = dex_shared().await;
    let app = sso_app(rp_port(0), &[]);
    let client = browser();
    let auth = start(&app, &client).await;
    let back = dex_login(&client, &auth, "alice", &app).await;
    let code = query_param(&back, "code");

    let forged = with_param(&back, "state", "forged-state-value");
    let (status, page) = visit(&client, &forged).await;
    assert_eq!(status, 400, "{page}");
    assert!(
        page.contains(
            "Sign-in with Dex failed: this sign-in did not start here or was already used"
        ),
        "{page}"
    );
    assert!(
        me(&app, &client).await.is_none(),
        "a forged state signed someone in"
    );

    // The forged visit spent the state cookie; the untouched answer in a fresh browser that
    // never started the sign-in is refused as well (login CSRF).
    let stranger = browser();
    let (status, _) = visit(&stranger, &back).await;
    assert_eq!(status, 400);
    assert!(me(&app, &stranger).await.is_none());

    // A sign-in started and finished by the same browser works, and the groups make an admin.
    let client = sign_in(&app, "alice").await;
    let who = me(&app, &client).await.expect("signed in");
    assert_eq!(who["name"], "alice");
    assert_eq!(who["role"], "admin");
    assert_eq!(who["via"], "session");
    // Neither the code nor the client secret reaches the log.
    let log = app.log();
    assert!(!log.contains(&code), "the authorization code is in the log");
    assert!(!log.contains(&var("DEX_CLIENT_SECRET")));
    assert!(log.contains("single sign-on refused"), "{log}");
}

#[tokio::test]
async fn a_replayed_code_is_refused_whether_with_its_own_state_or_a_fresh_one() {
    let _dex = dex_shared().await;
    let app = sso_app(rp_port(1), &[]);
    let client = browser();
    let auth = start(&app, &client).await;
    let back = dex_login(&client, &auth, "victor", &app).await;
    let (status, page) = visit(&client, &back).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(me(&app, &client).await.unwrap()["role"], "viewer");

    // The same answer again: its state was used.
    let thief = browser();
    let (status, page) = visit(&thief, &back).await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("already used"), "{page}");

    // The used code under a freshly started sign-in's state: Dex refuses the code.
    let auth = start(&app, &thief).await;
    let fresh_state = query_param(&auth, "state");
    let replay = with_param(&back, "state", &fresh_state);
    let (status, page) = visit(&thief, &replay).await;
    assert_eq!(status, 400, "{page}");
    assert!(
        page.contains("the identity provider refused the sign-in: invalid_grant"),
        "{page}"
    );
    assert!(me(&app, &thief).await.is_none());
}

#[tokio::test]
async fn an_id_token_also_addressed_to_another_client_is_refused() {
    let _dex = dex_shared().await;
    // Dex's cross-client scope: the token's audience is the other client and this one; ClueCDC
    // trusts no audience but its own.
    let other = format!(
        "openid profile email groups audience:server:client_id:{}",
        var("DEX_OTHER_CLIENT_ID")
    );
    let app = sso_app(rp_port(2), &[("CLUECDC_OIDC_SCOPES", &other)]);
    let client = browser();
    let auth = start(&app, &client).await;
    let back = dex_login(&client, &auth, "alice", &app).await;
    let (status, page) = visit(&client, &back).await;
    assert_eq!(status, 401, "{page}");
    assert!(
        page.contains("Sign-in with Dex failed: the identity provider's ID token was refused: it is addressed to another client (audience)"),
        "{page}"
    );
    assert!(me(&app, &client).await.is_none());
}

#[tokio::test]
async fn a_user_in_no_mapped_group_is_refused_with_a_clear_page_and_gets_no_account() {
    let _dex = dex_shared().await;
    let app = sso_app(rp_port(3), &[]);
    helpers::create_user(&app, "ada", "admin");
    let token = helpers::create_token(&app, "ada", &[]);
    let client = browser();
    let auth = start(&app, &client).await;
    let back = dex_login(&client, &auth, "nina", &app).await;
    let (status, page) = visit(&client, &back).await;
    assert_eq!(status, 403, "{page}");
    assert!(
        page.contains("your account is in no group that ClueCDC maps to a role (groups: staff)"),
        "{page}"
    );
    assert!(me(&app, &client).await.is_none());
    let users: serde_json::Value = app
        .client()
        .get(format!("{}/api/v1/users", app.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = users
        .as_array()
        .or_else(|| users["items"].as_array())
        .unwrap()
        .iter()
        .filter_map(|u| u["name"].as_str())
        .collect();
    assert_eq!(names, vec!["ada"]);
    let refused = audit_rows(&app, &token, "auth.login").await;
    assert!(
        refused
            .iter()
            .any(|r| r["outcome"] == "failure" && r.to_string().contains("no mapped group")),
        "{refused:?}"
    );
    // The local admin (break-glass) still signs in with a password.
    helpers::sign_in(&app, "ada", helpers::PASSWORD).await;
}

#[tokio::test]
async fn an_unreachable_provider_gives_a_clear_page_and_local_sign_in_still_works() {
    let port = helpers::free_port();
    let dead = format!("https://127.0.0.1:{}/dex", helpers::free_port());
    let app = sso_app(port, &[("CLUECDC_OIDC_ISSUER", &dead)]);
    helpers::create_user(&app, "ada", "admin");
    let client = browser();
    let login = client
        .get(format!("{}/login", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(login.contains("Sign in with Dex"), "{login}");
    let (status, page) = visit(&client, &format!("{}/login/oidc", app.url)).await;
    assert_eq!(status, 502, "{page}");
    assert!(
        page.contains("Sign-in with Dex failed: the identity provider cannot be reached"),
        "{page}"
    );
    assert!(
        page.contains("id=\"login-form\""),
        "the password form stays offered"
    );
    helpers::sign_in(&app, "ada", helpers::PASSWORD).await;
}

#[test]
fn invalid_single_sign_on_settings_stop_the_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(helpers::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("CLUECDC_OIDC_ISSUER", "https://idp.example.com")
        .env("CLUECDC_OIDC_CLIENT_ID", "cluecdc")
        .env("CLUECDC_OIDC_DEFAULT_ROLE", "root")
        .env_remove("CLUECDC_OIDC_CLIENT_SECRET")
        .env_remove("CLUECDC_PUBLIC_URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "CLUECDC_OIDC_CLIENT_SECRET_FILE (--oidc-client-secret-file) or CLUECDC_OIDC_CLIENT_SECRET",
        "CLUECDC_OIDC_DEFAULT_ROLE (--oidc-default-role): \"root\" is not a role",
        "CLUECDC_PUBLIC_URL (--public-url)",
    ] {
        assert!(err.contains(needle), "{needle} missing from:\n{err}");
    }
}

/// Writes milo's groups at Dex and brings Dex up with them (a restart when they changed).
fn set_milo_groups(groups: &[&str]) {
    let dir = std::path::PathBuf::from(var("DEX_GROUPS_DIR"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("milo"), groups.join("\n") + "\n").unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(format!("{root}/scripts/stack"))
        .args(["up", "dex"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/stack up dex: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_changed_group_membership_changes_the_role_at_the_next_sign_in_and_is_audited() {
    let _dex = dex_exclusive().await;
    set_milo_groups(&["cluecdc-viewers"]);
    let app = sso_app(rp_port(4), &[]);
    helpers::create_user(&app, "ada", "admin");
    let token = helpers::create_token(&app, "ada", &[]);

    let first = sign_in(&app, "milo").await;
    assert_eq!(me(&app, &first).await.unwrap()["role"], "viewer");
    // API tokens are an admin's, for an SSO user as for a local one.
    let tokens = |c: &reqwest::Client| c.get(format!("{}/settings/tokens", app.url)).send();
    assert_eq!(tokens(&first).await.unwrap().status(), 403);

    // Dex restarts with milo in the admin group (and signs with a new key).
    set_milo_groups(&["cluecdc-admins", "staff"]);
    let second = sign_in(&app, "milo").await;
    assert_eq!(me(&app, &second).await.unwrap()["role"], "admin");
    // Roles are read per request: the first session is an admin's now too.
    assert_eq!(me(&app, &first).await.unwrap()["role"], "admin");
    assert_eq!(tokens(&second).await.unwrap().status(), 200);
    assert!(
        app.log()
            .contains("ID token signed with an unknown key: fetched the provider's JWKS again"),
        "{}",
        app.log()
    );

    let changes = audit_rows(&app, &token, "user.role_from_groups").await;
    assert_eq!(changes.len(), 1, "{changes:?}");
    let row = changes[0].to_string();
    for needle in [
        r#""from":"viewer""#,
        r#""to":"admin""#,
        r#""name":"milo""#,
        "cluecdc-admins",
    ] {
        assert!(row.contains(needle), "{needle} missing from {row}");
    }
    // The users page says where the account and its role come from.
    let page = unescape(
        &app.client()
            .get(format!("{}/settings/users", app.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert!(page.contains("single sign-on"), "{page}");
    assert!(page.contains(&var("DEX_ISSUER")));
    assert!(page.contains("from the provider's groups at the last sign-in"));
    set_milo_groups(&["cluecdc-viewers"]);
}

#[tokio::test]
async fn with_local_passwords_off_the_sign_in_page_offers_only_single_sign_on_and_a_password_is_refused(
) {
    let port = helpers::free_port();
    let app = sso_app(port, &[("CLUECDC_LOCAL_PASSWORDS", "false")]);
    helpers::create_user(&app, "ada", "admin");
    let client = browser();
    let res = client
        .get(format!("{}/login", app.url))
        .send()
        .await
        .unwrap();
    let csrf = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("cluecdc_login_csrf="))
        .and_then(|c| c.split(';').next())
        .expect("the sign-in page sets its CSRF cookie")
        .to_string();
    let page = res.text().await.unwrap();
    assert!(page.contains("Sign in with Dex"), "{page}");
    assert!(!page.contains("id=\"login-form\""), "{page}");
    let res = client
        .post(format!("{}/login", app.url))
        .form(&[
            ("name", "ada"),
            ("password", helpers::PASSWORD),
            ("next", "/"),
            ("csrf_token", &csrf),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let page = res.text().await.unwrap();
    assert!(
        page.contains("Sign-in with a name and password is turned off here; use single sign-on."),
        "{page}"
    );
    assert!(me(&app, &client).await.is_none());
}
