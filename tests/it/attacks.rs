//! Issue 12, "Safe on the open internet": every reproduced problem, written as the attack
//! against the real server (parallel bursts, concurrent tool calls, replayed signed bodies, the
//! `%00` field, a pre-made 0755 data directory, percent-encoded secret names, the 21st request
//! of a window, a password change ending another session, a cooldown with a busy worker pool).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use jiff::SignedDuration;
use kennis::config::Settings;
use kennis::requests::apps::{self, AppStatus};
use kennis::roster::{self, AgentKind, NewAgent, Rollout};
use kennis::triggers::{self, NewTrigger};
use serde_json::{Value, json};

use crate::fixture::{Browser, SEED_PASSWORD, Seeded, ServeProcess, TestServer, hidden_fields};

/// A client whose connections come from `ip` (any 127.0.0.0/8 address works on loopback), so
/// one test can be several outside addresses.
pub(crate) fn client_from(ip: &str) -> reqwest::Client {
    crate::fixture::install_crypto();
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// One password login from `c`: GET the form (pre-login cookie, CSRF token), POST it.
async fn login_status(c: &reqwest::Client, t: &TestServer, email: &str, password: &str) -> u16 {
    login_at(c, &t.url("/login"), email, password).await
}

pub(crate) async fn login_at(c: &reqwest::Client, url: &str, email: &str, password: &str) -> u16 {
    let r = c.get(url).send().await.unwrap();
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("; ");
    let body = r.text().await.unwrap();
    let csrf = hidden_fields(&body)
        .into_iter()
        .find(|(k, _)| k == "csrf_token")
        .unwrap()
        .1;
    c.post(url)
        .header("cookie", cookie)
        .form(&[
            ("csrf_token", csrf.as_str()),
            ("email", email),
            ("password", password),
        ])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn counts(statuses: &[u16]) -> HashMap<u16, usize> {
    let mut m = HashMap::new();
    for s in statuses {
        *m.entry(*s).or_default() += 1;
    }
    m
}

/// 1. Parallel guesses: at most the limit is ever judged, the right password does not slip
/// through a burst, and the block a stranger causes does not lock the owner out elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_password_guesses_are_judged_at_most_ten_times_per_address() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "annie@example.org");
    let attacker = client_from("127.0.0.1");
    let mut burst = Vec::new();
    for i in 0..40 {
        let (c, url, email) = (attacker.clone(), t.url("/login"), s.person.email.clone());
        burst.push(tokio::spawn(async move {
            // The right password hides in the middle of the burst.
            let pw = if i == 25 {
                SEED_PASSWORD.to_owned()
            } else {
                format!("wrong-guess-{i}")
            };
            login_at(&c, &url, &email, &pw).await
        }));
    }
    let mut statuses = Vec::new();
    for h in burst {
        statuses.push(h.await.unwrap());
    }
    let c = counts(&statuses);
    let judged = c.get(&401).copied().unwrap_or(0) + c.get(&303).copied().unwrap_or(0);
    assert!(judged <= 10, "{c:?}: more than 10 guesses were judged");
    assert_eq!(
        c.get(&429).copied().unwrap_or(0) + c.get(&503).copied().unwrap_or(0),
        40 - judged,
        "{c:?}"
    );
    // The attacker's address is blocked for this account, even with the right password …
    if !c.contains_key(&303) {
        assert_eq!(
            login_status(&attacker, &t, &s.person.email, SEED_PASSWORD).await,
            429
        );
    }
    // … the owner, from elsewhere, is not.
    let owner = client_from("127.0.0.2");
    assert_eq!(
        login_status(&owner, &t, &s.person.email, SEED_PASSWORD).await,
        303
    );
    // Unknown emails are counted the same way (and cost the same hashing).
    let c2 = client_from("127.0.0.3");
    let mut n429 = 0;
    for i in 0..12 {
        match login_status(&c2, &t, &format!("nobody{i}@example.org"), "x").await {
            401 => {}
            429 => n429 += 1,
            other => panic!("{other}"),
        }
    }
    assert_eq!(n429, 0, "different accounts: each has its own count");
    // After the window the attacker's address may try again.
    t.clock.advance(SignedDuration::from_secs(15 * 60));
    assert_eq!(
        login_status(&attacker, &t, &s.person.email, SEED_PASSWORD).await,
        303
    );
}

/// 2. Concurrent tool calls cannot pass the hourly limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_stop_at_the_hourly_limit() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "annie@example.org");
    let app_id = apps::add(
        &t.app().store,
        s.org.id,
        "Planning",
        AppStatus::Live,
        t.app().clock.now(),
    )
    .unwrap()
    .app_id;
    let token = t.grant(&s, &["feature_requests"]);
    let mut handles = Vec::new();
    for i in 0..45 {
        let mcp = t.mcp(&token);
        handles.push(tokio::spawn(async move {
            mcp.call(
                "feature_request_create",
                json!({"app_id": app_id, "title": format!("Verzoek {i}"), "description": "x"}),
            )
            .await
        }));
    }
    let mut ok = 0;
    let mut limited = 0;
    for h in handles {
        let r = h.await.unwrap();
        if r["isError"] == json!(true) {
            assert_eq!(
                r["structuredContent"]["error"]["code"], "rate_limited",
                "{r}"
            );
            limited += 1;
        } else {
            ok += 1;
        }
    }
    assert_eq!((ok, limited), (30, 15));
    let stored = t
        .app()
        .store
        .read(|tx| tx.count(kennis::store::REQUESTS))
        .unwrap();
    assert_eq!(stored, 30, "exactly the limit was created");
}

fn echo() -> NewAgent {
    crate::fixture::echo_agent()
}

/// A command agent running `program` (timeout `secs`).
fn command(program: &Path, secs: u64) -> NewAgent {
    NewAgent {
        name: "Script".into(),
        kind: AgentKind::Generic,
        exec: "command".into(),
        program: Some(program.to_str().unwrap().into()),
        args: vec![],
        url: None,
        timeout_secs: Some(secs),
    }
}

/// A trigger of `agent` (with its own ready project) in Seeded's organisation: its id and
/// secret.
fn hook(t: &TestServer, s: &Seeded, agent: NewAgent, cooldown: u64) -> (uuid::Uuid, String) {
    let app = t.app();
    let now = app.clock.now();
    let a = roster::add_agent(&app.store, &s.org.slug, &agent, now).unwrap();
    let p = roster::add_project(&app.store, &s.org.slug, &agent.name, Rollout::Ready, now).unwrap();
    let c = triggers::add(
        &app.store,
        &s.org.slug,
        &NewTrigger {
            name: agent.name.clone(),
            agent_id: a.id,
            project_id: p.id,
            instructions: "Handle it.".into(),
            cooldown_secs: Some(cooldown),
            callback_url: None,
        },
        now,
    )
    .unwrap();
    (c.trigger.id, c.secret)
}

fn echo_hook(t: &TestServer, s: &Seeded, cooldown: u64) -> (uuid::Uuid, String) {
    hook(t, s, echo(), cooldown)
}

/// The lower-case hex of the GitHub-style signature (`X-Hub-Signature-256: sha256=<hex>`) of
/// `body` for trigger `id`: the HMAC-SHA256 keyed with the whole `whsec_…` signing secret.
fn github_hex(t: &TestServer, s: &Seeded, id: uuid::Uuid, body: &str) -> String {
    use hmac::{Hmac, Mac};
    let trigger = t
        .app()
        .store
        .read(|tx| triggers::get(tx, s.org.id, id))
        .unwrap();
    let signing = triggers::signing_secret(&t.app().server_key, &trigger);
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(signing.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// 3. One captured GitHub-signed delivery, replayed with other event keys and delivery ids,
/// starts one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_github_delivery_under_other_keys_starts_one_run() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "annie@example.org");
    let (id, _) = echo_hook(&t, &s, 0);
    let body = r#"{"action":"completed","run":812}"#;
    let sig = format!("sha256={}", github_hex(&t, &s, id, body));
    let url = t.url(&format!("/api/hooks/events/{id}"));
    let send = |query: &'static str, delivery: &'static str, header_key: Option<&'static str>| {
        let mut r = t
            .client
            .post(format!("{url}{query}"))
            .header("x-hub-signature-256", &sig)
            .header("x-github-delivery", delivery)
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = header_key {
            r = r.header("x-service-event-key", k);
        }
        r.send()
    };
    let first = send("?key=a", "d-1", None).await.unwrap();
    assert_eq!(first.status(), 202);
    let run: Value = first.json().await.unwrap();
    for (q, d, k) in [
        ("?key=b", "d-2", None),
        ("", "d-3", Some("c")),
        ("?key=a", "d-1", None),
        ("", "d-4", None),
    ] {
        let r = send(q, d, k).await.unwrap();
        assert_eq!(r.status(), 200, "{q} {d} {k:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["duplicate"], true, "{v}");
        assert_eq!(v["featureRequestId"], run["featureRequestId"]);
    }
    let runs = t
        .app()
        .store
        .read(|tx| triggers::recent_runs(tx, s.org.id, id, 10))
        .unwrap();
    assert_eq!(runs.len(), 1);
}

/// Issue 22: the same GitHub-signed delivery with its hex in upper (or mixed) case is the same
/// delivery: `duplicate`, no second run. A signature in other case over another body is still
/// judged on its own (and refused when wrong).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_delivery_replayed_with_upper_case_hex_is_a_duplicate() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "annie@example.org");
    let (id, _) = echo_hook(&t, &s, 0);
    let body = r#"{"action":"completed","run":913}"#;
    let hex = github_hex(&t, &s, id, body);
    let url = t.url(&format!("/api/hooks/events/{id}"));
    let send = |sig: String, body: &'static str| {
        t.client
            .post(&url)
            .header("x-hub-signature-256", sig)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let first = send(format!("sha256={hex}"), body).await.unwrap();
    assert_eq!(first.status(), 202);
    let run: Value = first.json().await.unwrap();
    let mixed: String = hex
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    for sig in [hex.to_ascii_uppercase(), mixed] {
        let r = send(format!("sha256={sig}"), body).await.unwrap();
        assert_eq!(r.status(), 200, "{sig}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["duplicate"], true, "{v}");
        assert_eq!(v["featureRequestId"], run["featureRequestId"]);
    }
    // Upper-case hex that does not sign this body is refused like any wrong signature.
    let wrong = send(
        format!("sha256={}", hex.to_ascii_uppercase()),
        r#"{"run":914}"#,
    )
    .await
    .unwrap();
    assert_eq!(wrong.status(), 401);
    let runs = t
        .app()
        .store
        .read(|tx| triggers::recent_runs(tx, s.org.id, id, 10))
        .unwrap();
    assert_eq!(runs.len(), 1, "one delivery, one run");
}

/// 4. A form field named `%00` (sent twice) at `/token` is an OAuth error, not a dropped
/// connection; the server keeps serving.
#[tokio::test]
async fn token_with_a_nul_field_name_is_a_clear_error() {
    let t = TestServer::start().await;
    for body in ["%00=1&%00=2", "%00=1", "\u{0}dup=1&%00=x&%00=y", "a=1&a=2"] {
        let r = t
            .client
            .post(t.url("/token"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_request", "{body}: {v}");
    }
    let r = t.client.get(t.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// 5 and 6. A pre-made 0755 data directory (as the repository's `./data`) with a 0644 file:
/// after start everything in it is private, with a warning; secrets in percent-encoded query
/// names and signed download links never reach the log.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_private_and_secrets_stay_out_of_the_log() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(data.join("old")).unwrap();
    std::fs::write(data.join("old/notes.txt"), "x").unwrap();
    std::fs::set_permissions(data.join("old"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        data.join("old/notes.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let server = ServeProcess::spawn(&data, &[], Some(&log));
    let c = crate::fixture::http_client();
    let secret = "kb_trg_Sup3rSecretValueThatMustNotBeLogged";
    for q in [
        format!("t%6Fken={secret}"),
        format!("%54OKEN={secret}"),
        format!("tok%65n={secret}&key=a"),
    ] {
        let r = c
            .get(format!("{}/api/hooks/runs/1?{q}", server.base))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_client_error());
    }
    let link = "eyJvcmdfaWQiOjF9.SignedLinkSecretPart";
    let r = c
        .get(format!("{}/files/{link}", server.base))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error());
    assert!(server.terminate().success());

    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("old")), 0o700);
    for f in ["kennis.redb", "secret.key", "old/notes.txt"] {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}");
    }
    let mut stack = vec![data.join("index")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                assert_eq!(mode(&p) & 0o077, 0, "{} is open to others", p.display());
            }
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("open to other users"), "no warning: {text}");
    assert!(text.contains("REDACTED"), "{text}");
    assert!(!text.contains("Sup3rSecret"), "secret logged: {text}");
    assert!(
        !text.contains("SignedLinkSecretPart"),
        "link logged: {text}"
    );
}

/// 7. Windows are windows: the 21st `/register` of a window is refused with the time until
/// the window ends, and the window opens again after it; failed token checks block until
/// their window ends, not for a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twenty_first_register_waits_for_the_window() {
    let t = TestServer::start().await;
    let register = || {
        t.client
            .post(t.url("/register"))
            .json(&json!({"client_name": "x", "redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"}))
            .send()
    };
    for i in 0..20 {
        assert_eq!(register().await.unwrap().status(), 201, "request {}", i + 1);
        t.clock.advance(SignedDuration::from_secs(10));
    }
    // 200 s into the window.
    let r = register().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "700");
    t.clock.advance(SignedDuration::from_secs(699));
    let r = register().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    t.clock.advance(SignedDuration::from_secs(1));
    assert_eq!(register().await.unwrap().status(), 201);

    // Failed token checks: 300 per window, then blocked until the window ends.
    let mcp = t.mcp("kb_at_not-a-token");
    for _ in 0..300 {
        assert_eq!(mcp.rpc("tools/list", json!({})).await.0, 401);
    }
    let (status, _) = mcp.rpc("tools/list", json!({})).await;
    assert_eq!(status, 429);
    t.clock.advance(SignedDuration::from_secs(60));
    let r = t
        .client
        .post(t.url("/mcp/kennisbank"))
        .bearer_auth("kb_at_not-a-token")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "still blocked a minute later");
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((830..=840).contains(&wait), "{wait}");
}

/// 8. An agent's output is read in bounded pieces: a 3 MB line without an end fails the run
/// with a clear reason instead of being buffered whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_agent_line_fails_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestServer::start().await;
    let s = t.seed("Acme", "annie@example.org");
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("flood.sh");
    std::fs::write(
        &prog,
        "#!/bin/sh\ncat >/dev/null\nhead -c 3000000 /dev/zero | tr '\\0' 'x'\n",
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (id, secret) = hook(&t, &s, command(&prog, 30), 0);
    let r = t
        .client
        .post(t.url(&format!("/api/hooks/events/{id}")))
        .bearer_auth(&secret)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let run = r.json::<Value>().await.unwrap()["featureRequestId"]
        .as_u64()
        .unwrap();
    let v = wait_result(&t, run, &secret).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["result"].as_str().unwrap().contains("over 1 MB"), "{v}");
}

async fn wait_result(t: &TestServer, id: u64, secret: &str) -> Value {
    for _ in 0..600 {
        let v: Value = t
            .client
            .get(t.url(&format!("/api/hooks/runs/{id}")))
            .bearer_auth(secret)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if !v["result"].is_null() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {id} never finished");
}

/// 9. A password change ends the person's other sessions (a stolen session dies with the old
/// password); so does a second-factor reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_ends_the_other_sessions() {
    let t = TestServer::start().await;
    let s = t.seed("Acme", "annie@example.org");
    let mut mine = Browser::new(&t);
    let mut thief = Browser::new(&t);
    mine.login(&s, "/portal").await;
    thief.login(&s, "/portal").await;
    assert_eq!(thief.get("/portal/account").await.status, 200);
    let page = mine.get("/portal/account").await;
    let csrf = page.csrf();
    let p = mine
        .post(
            "/portal/account/password",
            &[
                ("csrf_token", csrf.as_str()),
                ("current_password", SEED_PASSWORD),
                ("new_password", "nieuw-wachtwoord-lang-genoeg"),
            ],
        )
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("1 other session"), "{}", p.body);
    let p = thief.get("/portal/account").await;
    assert_eq!(p.status, 303);
    assert!(p.location.unwrap().starts_with("/login"));
    // The session that made the change lives on.
    assert_eq!(mine.get("/portal/account").await.status, 200);

    // A second-factor reset ends the others too.
    let s2 = Seeded {
        password: "nieuw-wachtwoord-lang-genoeg".into(),
        ..s
    };
    let mut again = Browser::new(&t);
    again.login(&s2, "/portal").await;
    assert_eq!(again.get("/portal/account").await.status, 200);
    let csrf = mine.get("/portal/account").await.csrf();
    let p = mine
        .post(
            "/portal/account/totp-reset",
            &[("csrf_token", csrf.as_str())],
        )
        .await;
    assert_eq!(p.status, 303);
    let p = again.get("/portal/account").await;
    assert_eq!(p.status, 303);
    assert!(p.location.unwrap().starts_with("/login"));
}

/// 10. The cooldown starts when the run starts: with one worker busy, a run queued for a
/// while cools down from the moment the worker took it, not from its creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooldown_counts_from_the_start_of_a_queued_run() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestServer::start_with(Settings {
        agent_workers: Some("1".into()),
        ..Settings::default()
    })
    .await;
    let s = t.seed("Acme", "annie@example.org");
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("go");
    let prog = dir.path().join("busy.sh");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/sh\ncat >/dev/null\nwhile [ ! -f {} ]; do sleep 0.05; done\necho '{{\"type\":\"result\",\"text\":\"done\"}}'\n",
            flag.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (blocker, blocker_secret) = hook(&t, &s, command(&prog, 120), 0);
    let (cool, cool_secret) = echo_hook(&t, &s, 300);
    let fire = |id: uuid::Uuid, secret: String| {
        let c = t.client.clone();
        let url = t.url(&format!("/api/hooks/events/{id}"));
        async move {
            let r = c
                .post(url)
                .bearer_auth(secret)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (st, _) = fire(blocker, blocker_secret).await;
    assert_eq!(st, 202);
    // Wait until the only worker is busy with the blocker.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (st, v) = fire(cool, cool_secret.clone()).await;
    assert_eq!(st, 202, "{v}");
    let run = v["featureRequestId"].as_u64().unwrap();
    // The run waits 250 s for the worker.
    t.clock.advance(SignedDuration::from_secs(250));
    std::fs::write(&flag, "").unwrap();
    let done = wait_result(&t, run, &cool_secret).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // 310 s after creation, 60 s after the start: still cooling down.
    t.clock.advance(SignedDuration::from_secs(60));
    let (st, v) = fire(cool, cool_secret.clone()).await;
    assert_eq!((st, v), (200, json!({"skipped": "cooldown"})));
    // 300 s after the start: a new run.
    t.clock.advance(SignedDuration::from_secs(240));
    let (st, v) = fire(cool, cool_secret).await;
    assert_eq!(st, 202, "{v}");
}

/// Calls on many connections with one token while it is revoked (and, with a second token,
/// while the organisation stops allowing connectors): every call sent after the change
/// returned is refused, though the calls a moment before passed with their checks kept
/// (`oauth::bearer_cache`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_passes_once_a_revocation_has_returned() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = TestServer::start().await;
    let s = t.seed("Acme", "ann@example.org");
    let app = t.app().clone();
    for change in ["revoke the grant", "connecting not allowed"] {
        let pair = t.grant_pair(s.org.id, s.person.id, &["kennisbank"]);
        let changed = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let mcp = t.mcp(&pair.access_token);
            let changed = changed.clone();
            tasks.push(tokio::spawn(async move {
                // (sent after the change returned, status)
                let mut seen = Vec::new();
                let mut after = 0;
                while after < 25 {
                    let sent_after = changed.load(Ordering::SeqCst);
                    let (status, _) = mcp.rpc("tools/list", json!({})).await;
                    after += usize::from(sent_after);
                    seen.push((sent_after, status));
                }
                seen
            }));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        match change {
            "revoke the grant" => {
                assert!(kennis::oauth::revoke_grant(&app, pair.grant_id).unwrap());
            }
            _ => {
                kennis::identity::set_org_policy(
                    &app.store,
                    &kennis::audit::Actor::Operator,
                    &s.org.slug,
                    Some(kennis::identity::ConnectorAccess::Nobody),
                    None,
                    app.clock.now(),
                )
                .unwrap();
            }
        }
        changed.store(true, Ordering::SeqCst);
        let mut passed_before = 0;
        for task in tasks {
            for (sent_after, status) in task.await.unwrap() {
                if sent_after {
                    assert!(status == 401 || status == 403, "{change}: {status}");
                } else if status == 200 {
                    passed_before += 1;
                }
            }
        }
        assert!(
            passed_before > 8,
            "{change}: {passed_before} calls passed before"
        );
    }
}
