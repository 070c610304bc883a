//! Outside checks, `#[ignore]`d because they need programs `cargo test` cannot assume: real
//! headless Chromium (Debian's `chromium`) and Node with the packages of `tests/node` (the
//! official MCP SDK's OAuth client). `.ci/run` installs both and runs them with `--ignored`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use jiff::SignedDuration;
use kennis::oauth;
use kennis::requests::apps::{self, AppStatus};

use crate::fixture::{Seeded, TestServer};

fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Runs `node script` with the person's details; returns its stdout as JSON.
async fn run_node(t: &TestServer, s: &Seeded, script: &str) -> serde_json::Value {
    run_node_with(t, s, script, &[]).await
}

/// [`run_node`] with extra environment variables.
async fn run_node_with(
    t: &TestServer,
    s: &Seeded,
    script: &str,
    envs: &[(&str, &str)],
) -> serde_json::Value {
    // The seeding used the current time step; codes are single use.
    t.clock.advance(SignedDuration::from_secs(30));
    let code = kennis::identity::code_at(&s.totp_secret, t.app().clock.now());
    let mut cmd = Command::new("node");
    cmd.arg(script)
        .current_dir(node_dir())
        .env("KENNIS_URL", &t.base)
        .env("KENNIS_EMAIL", &s.person.email)
        .env("KENNIS_PASSWORD", &s.password)
        .env("KENNIS_TOTP_CODE", &code)
        .env("KENNIS_ORG", &s.org.slug)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::time::timeout(
        Duration::from_secs(150),
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .expect("node script finished in time")
    .unwrap()
    .expect("node runs (is Node installed and `npm ci` done in tests/node?)");
    assert!(
        out.status.success(),
        "{script} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and `npm ci` in tests/node; run by .ci/run"]
async fn headless_chromium_logs_in_consents_and_gets_a_code() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "browser@example.org");
    let got = run_node(&t, &s, "browser.mjs").await;
    assert_eq!(got["state"], "browser-state");
    assert_eq!(got["iss"], t.base);
    let code = got["code"].as_str().expect("a code");
    assert!(code.starts_with("kb_code_"));
    let r = t
        .client
        .post(t.url("/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("client_id", got["client_id"].as_str().unwrap()),
            ("code", code),
            ("redirect_uri", got["redirect_uri"].as_str().unwrap()),
            ("code_verifier", got["code_verifier"].as_str().unwrap()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let tok: serde_json::Value = r.json().await.unwrap();
    assert_eq!(tok["scope"], "kennisbank feature_requests");
    let ctx = oauth::check_bearer(t.app(), tok["access_token"].as_str().unwrap()).unwrap();
    assert_eq!((ctx.org_id, ctx.person_id), (s.org.id, s.person.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node; run by .ci/run"]
async fn official_mcp_sdk_client_authorizes_with_a_metadata_document() {
    // The document, served on loopback (allowed by the test-only switch).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sdk-client.json", listener.local_addr().unwrap());
    let doc = serde_json::json!({
        "client_id": url,
        "client_name": "MCP SDK metadata client",
        "redirect_uris": ["http://127.0.0.1:43210/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
    .to_string();
    let router = axum::Router::new().route(
        "/sdk-client.json",
        axum::routing::get(move || async move { doc }),
    );
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let t = TestServer::start_with(kennis::config::Settings {
        oauth: Some(kennis::config::OAuthSettings {
            cimd_allow_http_loopback: Some(true),
        }),
        ..Default::default()
    })
    .await;
    let s = t.seed("Acme", "sdk-cimd@example.org");
    let now = t.app().clock.now();
    for (name, status) in [("Planning", AppStatus::Live), ("Uren", AppStatus::Draft)] {
        apps::add(&t.app().store, s.org.id, name, status, now).unwrap();
    }
    let got = run_node_with(&t, &s, "sdk-client.mjs", &[("KENNIS_CIMD_URL", &url)]).await;
    assert_eq!(got["client_id"], url);
    assert_eq!(
        got["tools"].as_array().unwrap().len(),
        9,
        "{}",
        got["tools"]
    );
    let token = got["refreshed"]["access_token"].as_str().unwrap();
    let ctx = oauth::check_bearer(t.app(), token).unwrap();
    assert_eq!(ctx.client_id, url);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node and `npm ci` in tests/node; run by .ci/run"]
async fn official_mcp_sdk_oauth_client_completes_the_flow() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "sdk@example.org");
    let now = t.app().clock.now();
    for (name, status) in [("Planning", AppStatus::Live), ("Uren", AppStatus::Draft)] {
        apps::add(&t.app().store, s.org.id, name, status, now).unwrap();
    }
    let got = run_node(&t, &s, "sdk-client.mjs").await;
    // The SDK's client used the token on the connector; it checked every structured result
    // against the tool's output schema.
    assert_eq!(
        got["tools"].as_array().unwrap().len(),
        9,
        "{}",
        got["tools"]
    );
    let id = got["created"]["id"].clone();
    assert_eq!(got["created"]["status"], "pending");
    assert_eq!(got["replied"]["accepted"]["message"], true);
    assert_eq!(got["read"]["id"], id);
    assert_eq!(got["read"]["conversation"][0]["text"], "Liefst als CSV.");
    assert_eq!(got["list"]["total"], 1);
    assert_eq!(got["closed"]["isError"], true);
    assert_eq!(
        got["closed"]["structuredContent"]["error"]["code"],
        "app_closed"
    );
    assert_eq!(
        got["missing"]["structuredContent"]["error"]["code"],
        "not_found"
    );
    let first = got["tokens"]["access_token"].as_str().unwrap();
    let second = got["refreshed"]["access_token"].as_str().unwrap();
    assert_eq!(got["tokens"]["token_type"], "Bearer");
    assert_ne!(first, second);
    for token in [first, second] {
        let ctx = oauth::check_bearer(t.app(), token).unwrap();
        assert_eq!(ctx.client_id, got["client_id"].as_str().unwrap());
        assert_eq!(ctx.scopes, vec!["kennisbank", "feature_requests"]);
    }
}
