//! Client ID Metadata Documents: a full authorization with a URL client_id through the portal
//! to a working token, the cache, and the refusals that keep the fetch from being an SSRF.
//! Documents come from a small axum server on loopback (`cimd_allow_http_loopback`, tests only).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kennis::config::{OAuthSettings, Settings};
use serde_json::json;

use crate::fixture::{
    Browser, REDIRECT, TestServer, approve, authorize_path, exchange, pkce, query_of,
};

/// The document server: its base URL and how often each document was fetched.
struct Documents {
    base: String,
    hits: Arc<AtomicUsize>,
}

async fn serve_documents() -> Documents {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let doc = |path: &str, extra: serde_json::Value| {
        let mut d = json!({
            "client_id": format!("{base}{path}"),
            "client_name": "Doc Assistant",
            "client_uri": "https://assistant.example",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        });
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        d.to_string()
    };
    let good = doc("/good.json", json!({}));
    let mismatch = doc(
        "/mismatch.json",
        json!({"client_id": "https://other.example/c.json"}),
    );
    let secret = doc(
        "/secret.json",
        json!({"token_endpoint_auth_method": "client_secret_post"}),
    );
    let off_list = doc(
        "/off-list.json",
        json!({"redirect_uris": ["https://evil.example/cb"]}),
    );
    let big = doc("/big.json", json!({"padding": "x".repeat(6 * 1024)}));
    let app = Router::new()
        .route(
            "/good.json",
            get({
                let hits = hits.clone();
                move || {
                    hits.fetch_add(1, Ordering::SeqCst);
                    let good = good.clone();
                    async move {
                        (
                            [
                                (header::CONTENT_TYPE, "application/json"),
                                (header::CACHE_CONTROL, "max-age=600"),
                            ],
                            good,
                        )
                    }
                }
            }),
        )
        .route("/mismatch.json", get(move || async move { mismatch }))
        .route("/secret.json", get(move || async move { secret }))
        .route("/off-list.json", get(move || async move { off_list }))
        .route("/big.json", get(move || async move { big }))
        .route(
            "/redirect.json",
            get(|| async {
                Response::builder()
                    .status(StatusCode::FOUND)
                    .header(header::LOCATION, "/good.json")
                    .body(axum::body::Body::empty())
                    .unwrap()
            }),
        )
        .route(
            "/slow.json",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "{}".into_response()
            }),
        );
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Documents { base, hits }
}

fn loopback_documents() -> Settings {
    Settings {
        oauth: Some(OAuthSettings {
            cimd_allow_http_loopback: Some(true),
            ..Default::default()
        }),
        ..Settings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_document_client_authorizes_to_a_working_token() {
    let docs = serve_documents().await;
    let mut t = TestServer::start_with(loopback_documents()).await;
    let meta: serde_json::Value = t
        .client
        .get(t.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["client_id_metadata_document_supported"], true);
    // Registration stays available next to metadata documents.
    assert!(meta["registration_endpoint"].as_str().is_some());

    let s = t.seed("Bouw BV", "annie@example.org");
    let client_id = format!("{}/good.json", docs.base);
    let (verifier, challenge) = pkce();
    let mut b = Browser::new(&t);
    let path = authorize_path(&client_id, &challenge, &[]);
    let first = b.get(&path).await;
    assert_eq!(first.status, 303, "{}", first.body);
    let consent = b.login(&s, &path).await;
    assert!(consent.body.contains("Doc Assistant"), "{}", consent.body);
    assert!(consent.body.contains("127.0.0.1"), "{}", consent.body);
    let p = approve(&mut b, &consent, &s.org.slug, &["kennisbank"]).await;
    assert_eq!(p.status, 302, "{}", p.body);
    let loc = p.location.unwrap();
    assert!(loc.starts_with(REDIRECT), "{loc}");
    let code = query_of(&loc)["code"].clone();
    // Fetched once; the consent page, its submit and the token use the fresh stored copy.
    assert_eq!(docs.hits.load(Ordering::SeqCst), 1);

    let (status, body) = exchange(&t, &client_id, &verifier, &code).await;
    assert_eq!(status, 200, "{body}");
    let token = body["access_token"].as_str().unwrap().to_owned();
    let mcp = t.mcp(&token);
    assert_eq!(mcp.tool_names().await.len(), 6);

    // After the document's max-age (600 s, above the 5 minute floor) the next authorization
    // fetches it again.
    t.clock.advance(jiff::SignedDuration::from_mins(11));
    let again = b.get(&authorize_path(&client_id, &challenge, &[])).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(docs.hits.load(Ordering::SeqCst), 2);
    t.stop().await;
}

/// GET /authorize with this client_id; returns the error page's body (status 400).
async fn refused(t: &TestServer, client_id: &str) -> String {
    let (_, challenge) = pkce();
    let mut b = Browser::new(t);
    let p = b.get(&authorize_path(client_id, &challenge, &[])).await;
    assert_eq!(p.status, 400, "{client_id}: {}", p.body);
    assert!(
        p.location.is_none(),
        "never redirect for an untrusted client"
    );
    let stored = kennis::oauth::get_client(t.app(), client_id).unwrap();
    assert!(stored.is_none(), "{client_id} must not be stored");
    p.body
}

/// Whether `text` names an IPv4 address (four dot-separated numbers) or an IPv6 one (`::`).
fn names_an_address(text: &str) -> Option<String> {
    let ipv4 = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|w| w.parse::<std::net::Ipv4Addr>().is_ok());
    let ipv6 = text
        .split(|c: char| !(c.is_ascii_hexdigit() || c == ':'))
        .find(|w| w.contains("::") && w.parse::<std::net::Ipv6Addr>().is_ok());
    ipv4.or(ipv6).map(str::to_owned)
}

/// The error page shown before login names no address, host lookup or connection detail: its
/// detail is exactly the one generic sentence for anything about the fetch (the details are in
/// the log), and nothing on the page looks like an address.
fn says_only_not_fetched(client_id: &str, body: &str) {
    let detail = body
        .split("<code>")
        .nth(1)
        .and_then(|d| d.split("</code>").next())
        .unwrap_or_else(|| panic!("{client_id}: no detail: {body}"));
    assert_eq!(
        detail,
        kennis::oauth::cimd::NOT_FETCHED,
        "{client_id}: {body}"
    );
    assert_eq!(names_an_address(body), None, "{client_id}: {body}");
    for shown in ["resolve", "private network", "localhost", "invalid"] {
        assert!(!body.contains(shown), "{client_id} shows `{shown}`: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_fetch_refuses_what_could_reach_inside_or_mislead() {
    let docs = serve_documents().await;
    let port = docs.base.rsplit(':').next().unwrap().to_owned();

    // Without the test switch: only https, never loopback or private addresses. The http
    // loopback URL's page tells the rule, without repeating the address.
    let mut t = TestServer::start().await;
    let body = refused(&t, &format!("{}/good.json", docs.base)).await;
    assert!(body.contains("must be an https:// URL"), "{body}");
    assert_eq!(names_an_address(&body), None, "{body}");
    for inside in [
        format!("https://127.0.0.1:{port}/good.json"),
        format!("https://localhost:{port}/good.json"),
        "https://10.20.30.40/client.json".to_owned(),
        "https://169.254.169.254/latest/meta-data.json".to_owned(),
        "https://[::1]/client.json".to_owned(),
        "https://[fec0::1]/client.json".to_owned(),
        "https://[2002:a00:1::1]/client.json".to_owned(),
        // A name that does not resolve: no resolver text either.
        "https://no-such-host.invalid/client.json".to_owned(),
    ] {
        let body = refused(&t, &inside).await;
        says_only_not_fetched(&inside, &body);
    }
    assert_eq!(docs.hits.load(Ordering::SeqCst), 0, "nothing reached");
    t.stop().await;

    let mut t = TestServer::start_with(loopback_documents()).await;
    // What a fetched document gets wrong is the client's own text: the page says it.
    let cases = [
        ("/mismatch.json", "not the URL it was fetched from"),
        ("/secret.json", "must be `none`"),
        ("/off-list.json", "allow-list"),
    ];
    for (path, why) in cases {
        let body = refused(&t, &format!("{}{path}", docs.base)).await;
        assert!(body.contains(why), "{path}: {body}");
    }
    // Everything about the fetch itself: the one sentence.
    for path in ["/redirect.json", "/big.json", "/missing.json"] {
        let client_id = format!("{}{path}", docs.base);
        let body = refused(&t, &client_id).await;
        says_only_not_fetched(&client_id, &body);
    }
    // The redirect was not followed.
    assert_eq!(docs.hits.load(Ordering::SeqCst), 0);
    let started = std::time::Instant::now();
    let client_id = format!("{}/slow.json", docs.base);
    let body = refused(&t, &client_id).await;
    says_only_not_fetched(&client_id, &body);
    assert!(started.elapsed() < Duration::from_secs(15));
    t.stop().await;
}
