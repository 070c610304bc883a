//! Property tests (proptest, stable Rust) over everything that parses outside input: the search
//! query parser, knowledge-base path rules, the redirect-URI allow-list, event-key and
//! delivery-id validation, the form parser and log redaction, and — over HTTP against the real
//! server — `/token` and `/register` bodies, JSON-RPC bodies at the connector and multipart
//! uploads. Nothing may panic, every answer is a clear refusal or a success, never a 5xx.
//!
//! Cases per target: `PROPTEST_CASES` (`.ci/run` sets 10000); 500 when unset, so a local
//! `cargo test` stays quick.

use std::sync::Arc;

use jiff::SignedDuration;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::fixture::{Browser, TestServer};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Text that looks like what attackers send: ASCII punctuation, percent escapes, controls,
/// multi-byte characters and quotes, in any order.
fn nasty() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => proptest::char::range(' ', '~'),
            1 => proptest::char::any(),
            1 => prop::sample::select(vec!['/', '.', '%', '"', '“', '\u{0}', '\n', '\\', '&', '=', 'é', 'ß', '\u{301}']),
        ],
        0..80,
    )
    .prop_map(|v| v.into_iter().collect())
}

#[test]
fn search_query_parser_never_panics_and_keeps_its_rules() {
    runner()
        .run(&nasty(), |q| {
            if let Ok(parsed) = kennis::kb::search::parse_query(&q) {
                prop_assert!(parsed.terms.len() <= 10, "{q:?}");
                prop_assert!(parsed.terms.iter().all(|t| !t.is_empty()), "{q:?}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn path_rules_never_panic_and_accept_only_clean_paths() {
    runner()
        .run(&nasty(), |p| {
            if let Ok(n) = kennis::kb::path::normalize(&p) {
                prop_assert!(!n.starts_with('/') && !n.ends_with('/'), "{p:?} → {n:?}");
                prop_assert!(
                    n.split('/').all(|s| !s.is_empty() && s != "." && s != ".."),
                    "{p:?} → {n:?}"
                );
                prop_assert!(!n.chars().any(char::is_control), "{p:?} → {n:?}");
                // Normalising is idempotent.
                prop_assert_eq!(kennis::kb::path::normalize(&n).ok(), Some(n.clone()));
            }
            if let Ok(w) = kennis::kb::path::check_write_path(&p) {
                prop_assert!(w.starts_with("aangeleverd/"), "{p:?} → {w:?}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn redirect_allow_list_never_panics_and_never_allows_a_foreign_https_host() {
    let list = kennis::config::RedirectAllowList::default();
    let uri = prop_oneof![
        nasty(),
        nasty().prop_map(|s| format!("https://{s}")),
        nasty().prop_map(|s| format!("https://claude.ai{s}")),
        nasty().prop_map(|s| format!("http://127.0.0.1:{s}")),
        nasty().prop_map(|s| format!("cursor://{s}")),
    ];
    runner()
        .run(&uri, |u| {
            let ok = kennis::oauth::redirect::allowed_at_registration(&list, &u);
            if ok
                && let Ok(url) = url::Url::parse(&u)
                && url.scheme() == "https"
            {
                let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
                prop_assert!(
                    [
                        "claude.ai",
                        "claude.com",
                        "chatgpt.com",
                        "cursor.com",
                        "www.cursor.com"
                    ]
                    .contains(&host.as_str()),
                    "{u:?} allowed"
                );
            }
            let _ = kennis::oauth::redirect::matches_registered(std::slice::from_ref(&u), &u);
            Ok(())
        })
        .unwrap();
}

#[test]
fn event_keys_and_delivery_ids_never_panic_and_follow_the_pattern() {
    runner()
        .run(&(nasty(), nasty()), |(k, d)| {
            if let Ok(Some(key)) = kennis::triggers::validate_key(Some(&k)) {
                prop_assert!((1..=100).contains(&key.chars().count()), "{k:?}");
                prop_assert!(
                    key.chars()
                        .all(|c| c.is_ascii_alphanumeric() || ".:_-".contains(c)),
                    "{k:?}"
                );
            }
            if let Ok(Some(id)) = kennis::triggers::validate_delivery_id(Some(&d)) {
                prop_assert!(id.len() <= 200 && id.bytes().all(|b| b.is_ascii_graphic()));
            }
            Ok(())
        })
        .unwrap();
}

/// Standard Webhooks timestamps from anywhere (`i64` extremes, far future and past, numbers
/// too big for `i64`, junk) against any server time: `verify` never panics and accepts only a
/// correctly signed delivery whose timestamp is within the window; GitHub signatures are
/// accepted in any letter case of their hex and name one delivery whatever the case.
#[test]
fn signed_delivery_timestamps_and_signatures_never_panic() {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    use kennis::triggers::{Signature, TOLERANCE_SECS, Trigger, signing_secret, verify};
    let key = [7u8; 32];
    let now0 = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    let trigger = Trigger {
        id: uuid::Uuid::from_u128(1),
        org_id: 1,
        name: "t".into(),
        instructions: "i".into(),
        agent_id: 1,
        project_id: 1,
        cooldown_secs: 0,
        secret_hash: "00".repeat(32),
        paused: false,
        deleted: false,
        created_at: now0,
        updated_at: now0,
        callback_url: None,
    };
    let secret = signing_secret(&key, &trigger);
    let sign_key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let timestamp = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        (-400i64..400).prop_map(|d| (1_800_000_000 + d).to_string()),
        prop::sample::select(vec![
            i64::MIN.to_string(),
            i64::MAX.to_string(),
            "-0".into(),
            "99999999999999999999999999".into(),
            "+1800000000".into(),
            "1.8e9".into(),
        ]),
        nasty(),
    ];
    let now = prop_oneof![
        Just(now0),
        Just(jiff::Timestamp::MAX),
        Just(jiff::Timestamp::MIN),
        (-377_705_116_800i64..253_402_207_200)
            .prop_map(|s| jiff::Timestamp::from_second(s).unwrap()),
    ];
    runner()
        .run(
            &(timestamp, now, nasty(), any::<bool>()),
            |(ts, now, body, upper)| {
                let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&sign_key).unwrap();
                mac.update(b"msg_1.");
                mac.update(ts.trim().as_bytes());
                mac.update(b".");
                mac.update(body.as_bytes());
                let sig =
                    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
                let standard = Signature::Standard {
                    id: "msg_1".into(),
                    timestamp: ts.clone(),
                    signatures: format!("v1,{sig}"),
                };
                let ok = verify(&key, &trigger, &standard, body.as_bytes(), now).is_ok();
                let within = ts
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .and_then(|t| now.as_second().checked_sub(t))
                    .is_some_and(|d| d.unsigned_abs() <= TOLERANCE_SECS as u64);
                prop_assert_eq!(ok, within, "timestamp {:?} at {}", ts, now);
                // GitHub: the HMAC with the whole whsec_ string over the body, hex in either case.
                let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
                mac.update(body.as_bytes());
                let hex = hex::encode(mac.finalize().into_bytes());
                let shown = if upper {
                    hex.to_ascii_uppercase()
                } else {
                    hex.clone()
                };
                let github = Signature::GitHub {
                    signature: format!("sha256={shown}"),
                };
                prop_assert!(verify(&key, &trigger, &github, body.as_bytes(), now).is_ok());
                let canonical = Signature::GitHub {
                    signature: format!("sha256={hex}"),
                };
                prop_assert_eq!(github.delivery_id(), canonical.delivery_id());
                // Junk in the GitHub header is refused, never a panic.
                let junk = Signature::GitHub {
                    signature: ts.clone(),
                };
                prop_assert!(verify(&key, &trigger, &junk, body.as_bytes(), now).is_err());
                let _ = junk.delivery_id();
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn form_parser_and_log_redaction_never_panic_or_leak() {
    let body = prop_oneof![
        nasty(),
        (nasty(), nasty()).prop_map(|(a, b)| format!("{a}={b}&{a}={b}")),
        nasty().prop_map(|s| format!("t%6Fken=SECRETVALUE&{s}")),
    ];
    runner()
        .run(&body, |b| {
            let form = kennis::oauth::routes::parse_form(b.as_bytes());
            if let Some(k) = &form.repeated {
                prop_assert!(form.params.contains_key(k));
            }
            let logged = kennis::http::observe::redact_query(&b);
            if b.starts_with("t%6Fken=SECRETVALUE&") {
                prop_assert!(!logged.contains("SECRETVALUE"), "{b:?} → {logged:?}");
            }
            let _ = kennis::http::observe::redact_path(&b);
            Ok(())
        })
        .unwrap();
}

/// A real server on its own runtime, for the HTTP targets (proptest's closures are
/// synchronous).
fn server() -> (tokio::runtime::Runtime, Arc<TestServer>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = Arc::new(rt.block_on(TestServer::start()));
    (rt, t)
}

/// Sends `req` and gives its status (the body is not read).
async fn status_of(req: reqwest::RequestBuilder) -> u16 {
    req.send().await.unwrap().status().as_u16()
}

fn assert_not_5xx(status: u16, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(status < 500, "{what} answered {status}");
    Ok(())
}

#[test]
fn token_and_register_bodies_never_crash_the_server() {
    let (rt, t) = server();
    let token_body = prop_oneof![
        nasty(),
        prop::collection::vec((nasty(), nasty()), 0..8).prop_map(|pairs| {
            let mut s = form_urlencoded::Serializer::new(String::new());
            for (k, v) in pairs {
                s.append_pair(&k, &v);
            }
            s.finish()
        }),
        (prop::sample::select(vec!["authorization_code", "refresh_token", "x"]), nasty())
            .prop_map(|(g, v)| format!("grant_type={g}&client_id={v}&code={v}&redirect_uri={v}&code_verifier={v}&refresh_token={v}")),
    ];
    let register_body = prop_oneof![
        nasty(),
        (nasty(), nasty()).prop_map(|(a, b)| serde_json::json!({"redirect_uris": [a], "client_name": b, "token_endpoint_auth_method": "none"}).to_string()),
        nasty().prop_map(|a| format!(r#"{{"redirect_uris": {a}}}"#)),
    ];
    runner()
        .run(&(token_body, register_body), |(tb, rb)| {
            // Keep under the per-address windows: a minute per case.
            t.clock.advance(SignedDuration::from_secs(60));
            let (s1, s2) = rt.block_on(async {
                let a = status_of(
                    t.client
                        .post(t.url("/token"))
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(tb.clone()),
                )
                .await;
                let b = status_of(
                    t.client
                        .post(t.url("/register"))
                        .header("content-type", "application/json")
                        .body(rb.clone()),
                )
                .await;
                (a, b)
            });
            assert_not_5xx(s1, &format!("/token {tb:?}"))?;
            prop_assert!(s1 != 200 && s1 != 429, "/token {tb:?} → {s1}");
            assert_not_5xx(s2, &format!("/register {rb:?}"))?;
            prop_assert!(s2 != 429, "/register {rb:?} → {s2}");
            Ok(())
        })
        .unwrap();
}

#[test]
fn json_rpc_bodies_and_multipart_uploads_never_crash_the_server() {
    let (rt, t) = server();
    let s = t.seed("Acme", "annie@example.org");
    let token = t.grant(&s, &["kennisbank", "feature_requests"]);
    let (mut browser_cookies, request_path, csrf) = rt.block_on(async {
        let mut b = Browser::new(&t);
        b.login(&s, "/portal").await;
        let app = t.app();
        let app_id = kennis::requests::apps::add(
            &app.store,
            s.org.id,
            "Planning",
            kennis::requests::apps::AppStatus::Live,
            app.clock.now(),
        )
        .unwrap()
        .app_id;
        let mcp = t.mcp(&token);
        let id = mcp
            .ok(
                "feature_request_create",
                serde_json::json!({"app_id": app_id, "title": "Fuzz", "description": "x"}),
            )
            .await["id"]
            .as_u64()
            .unwrap();
        let path = format!("/portal/o/{}/requests/{id}", s.org.slug);
        let csrf = b.get(&path).await.csrf();
        (b.cookies.clone(), path, csrf)
    });
    let cookie: String = browser_cookies
        .drain()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("; ");
    let rpc = prop_oneof![
        nasty(),
        (nasty(), nasty()).prop_map(|(m, p)| serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": m, "params": p}).to_string()),
        (prop::sample::select(vec!["kennisbank_read", "kennisbank_search", "kennisbank_list", "feature_request_list", "feature_request_read"]), nasty())
            .prop_map(|(tool, a)| serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {"path": a, "query": a, "id": a, "page": a}}}).to_string()),
    ];
    let part = (nasty(), nasty(), prop::collection::vec(any::<u8>(), 0..64));
    runner()
        .run(&(rpc, part), |(body, (name, ctype, bytes))| {
            let boundary = "fuzzBoundary";
            let mut mp = Vec::new();
            mp.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"csrf_token\"\r\n\r\n{csrf}\r\n").as_bytes());
            mp.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {ctype}\r\n\r\n").as_bytes());
            mp.extend_from_slice(&bytes);
            mp.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
            let (s1, s2) = rt.block_on(async {
                let a = status_of(
                    t.client
                        .post(t.url("/mcp/kennisbank"))
                        .bearer_auth(&token)
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .header("mcp-protocol-version", "2025-06-18")
                        .body(body.clone()),
                )
                .await;
                let b = status_of(
                    t.client
                        .post(t.url(&format!("{request_path}/attachments")))
                        .header("cookie", &cookie)
                        .header(
                            "content-type",
                            format!("multipart/form-data; boundary={boundary}"),
                        )
                        .body(mp),
                )
                .await;
                (a, b)
            });
            assert_not_5xx(s1, &format!("JSON-RPC {body:?}"))?;
            assert_not_5xx(s2, &format!("upload {name:?} {ctype:?}"))?;
            Ok(())
        })
        .unwrap();
}
