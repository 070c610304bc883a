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
        Duration::from_secs(300),
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
            ..Default::default()
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
        11,
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
    t.put_doc(
        &s,
        "handleidingen/kozijnen.md",
        "# Kozijnen\nKozijn onderhoud: jaarlijks schilderen.\n",
    );
    // A grant without the `kennisbank` scope, and a personal access token (default scope).
    let narrow = t.grant(&s, &["feature_requests"]);
    let (_, pat) = oauth::pats::create(
        &t.app().store,
        &kennis::audit::Actor::Operator,
        oauth::pats::NewToken {
            org_id: s.org.id,
            person_id: s.person.id,
            name: "sdk".into(),
            scopes: vec![],
            expires_in_days: None,
        },
        now,
    )
    .unwrap();
    let got = run_node_with(
        &t,
        &s,
        "sdk-client.mjs",
        &[("KENNIS_NARROW_TOKEN", &narrow), ("KENNIS_PAT", &pat)],
    )
    .await;
    // The SDK's client used the token on the connector; it checked every structured result
    // against the tool's output schema.
    assert_eq!(
        got["tools"].as_array().unwrap().len(),
        11,
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
    // ChatGPT's search and fetch: read-only, titled, their shapes.
    let chatgpt = got["chatgpt"].as_array().unwrap();
    assert_eq!(chatgpt.len(), 2, "{}", got["chatgpt"]);
    for tool in chatgpt {
        assert_eq!(tool["annotations"]["readOnlyHint"], true, "{tool}");
        assert!(
            !tool["title"].as_str().unwrap_or_default().is_empty(),
            "{tool}"
        );
    }
    let hit = &got["searched"]["results"][0];
    assert_eq!(
        hit["id"], "handleidingen/kozijnen.md",
        "{}",
        got["searched"]
    );
    assert_eq!(hit["title"], "kozijnen.md");
    assert!(hit["url"].as_str().unwrap().ends_with(&format!(
        "/portal/o/{}/kb/handleidingen/kozijnen.md",
        s.org.slug
    )));
    assert_eq!(got["fetched"]["id"], "handleidingen/kozijnen.md");
    assert!(
        got["fetched"]["text"]
            .as_str()
            .unwrap()
            .contains("jaarlijks schilderen")
    );
    assert_eq!(got["fetched"]["metadata"]["truncated"], false);
    assert_eq!(got["unknown"]["isError"], true);
    assert_eq!(
        got["unknown"]["structuredContent"]["error"]["code"],
        "not_found"
    );
    // Without the `kennisbank` scope the SDK sees neither tool, and calling one is refused.
    let narrow: Vec<&str> = got["narrow"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        !narrow.is_empty()
            && narrow
                .iter()
                .all(|n| n.starts_with("feature_request") || *n == "app_list"),
        "{narrow:?}"
    );
    assert!(
        got["narrow"]["search"]
            .as_str()
            .unwrap_or_default()
            .contains("Unknown tool"),
        "{}",
        got["narrow"]
    );
    // A personal access token through the SDK: the knowledge-base tools, ChatGPT's included.
    let pat_tools = got["pat"]["tools"].as_array().unwrap();
    assert_eq!(pat_tools.len(), 6, "{}", got["pat"]);
    assert_eq!(
        got["pat"]["searched"]["results"][0]["id"],
        "handleidingen/kozijnen.md"
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

/// The portal's tasks in real Chromium (`tests/node/portal.mjs`): invite → accept → enrol →
/// portal, change a role, reset a password, remove a member (their token then gets 401), search
/// and open a document, upload two files at once, run a trigger's run again, file a feature
/// request and answer an agent's question, Dutch and English login; axe-core finds no serious
/// or critical violation on any page in either language. The
/// screenshots go to a temporary directory, or to `docs/screenshots/` with
/// `KENNIS_UPDATE_SCREENSHOTS=1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and `npm ci` in tests/node; run by .ci/run"]
async fn portal_tasks_in_chromium_with_axe_in_both_languages() {
    use kennis::identity::{self, Role};
    use kennis::triggers;

    let t = TestServer::start().await;
    let s = t.seed("Bouwbedrijf Jansen", "ada@example.org");
    let mo = t.seed("Elders BV", "mo@example.org");
    let app = t.app().clone();
    let now = app.clock.now();
    identity::add_member(
        &app.store,
        &s.org.slug,
        "mo@example.org",
        Role::Member,
        true,
        now,
    )
    .unwrap();
    let mo_token = t
        .grant_pair(s.org.id, mo.person.id, &["kennisbank"])
        .access_token;
    // A call of the admin's assistant, for the audit log.
    let ada_token = t.grant(&s, &["kennisbank"]);
    t.put_doc(
        &s,
        "handboek/dakgoot.md",
        "# Dakgoot\n\nDe **dakgoot** wordt elk voorjaar schoongemaakt.\n\n- ladder\n- emmer\n",
    );
    t.put_doc(
        &s,
        "aangeleverd/offerte.txt",
        "Offerte voor de dakgoot: 450 euro.\n",
    );
    // A feature request whose agent asked a question, with an attachment.
    let planner = apps::add(&app.store, s.org.id, "Planner", AppStatus::Live, now)
        .unwrap()
        .app_id;
    let request = kennis::requests::service::create(
        &app,
        s.org.id,
        s.person.id,
        &kennis::requests::feature::NewRequest {
            app_id: planner,
            title: "Planning exporteren naar CSV".into(),
            description: "Graag kunnen we de weekplanning als CSV downloaden voor de boekhouding."
                .into(),
        },
    )
    .unwrap()
    .id;
    app.store
        .write(|tx| {
            let mut r = kennis::requests::feature::get(tx, s.org.id, request)?;
            for e in [
                kennis::agents::AgentEvent::Message {
                    text: "Dank je! Ik heb nog één vraag voordat ik begin.".into(),
                },
                kennis::agents::AgentEvent::Question {
                    text: "Welk scheidingsteken wilt u in het bestand?".into(),
                    options: vec![
                        serde_json::json!({"option_id": "puntkomma", "label": "Puntkomma (;)"}),
                        serde_json::json!({"option_id": "komma", "label": "Komma (,)"}),
                    ],
                    allow_other: true,
                },
            ] {
                kennis::requests::feature::apply_event(&mut r, "Bouwbot", &e, now).unwrap();
            }
            kennis::requests::put(tx, &r)?;
            Ok::<_, kennis::requests::RequestError>(())
        })
        .unwrap();
    kennis::requests::attachments::add(
        &app.store,
        s.org.id,
        request,
        s.person.id,
        "voorbeeld-export.csv",
        Some("text/csv"),
        "datum;project;uren\n2026-06-01;Dakgoot;6\n".as_bytes(),
        now,
    )
    .unwrap();
    t.mcp(&ada_token)
        .ok("kennisbank_search", serde_json::json!({"query": "dakgoot"}))
        .await;
    t.mcp(&ada_token)
        .ok(
            "kennisbank_read",
            serde_json::json!({"path": "handboek/dakgoot.md"}),
        )
        .await;
    app.batch.flush();
    let (trigger, run_id) = t.finished_run(&s.org.slug, "Vat de offerte samen.").await;

    let shots = if std::env::var_os("KENNIS_UPDATE_SCREENSHOTS").is_some() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots")
    } else {
        t.data_dir().join("screenshots")
    };
    // Two steps on, so that three time steps (before, now, after) are unused by everyone.
    t.clock.advance(SignedDuration::from_secs(30));
    let got = run_node_with(
        &t,
        &s,
        "portal.mjs",
        &[
            ("KENNIS_TOTP_SECRET", s.totp_secret.as_str()),
            (
                "KENNIS_NOW",
                &(app.clock.now().as_second() + 30).to_string(),
            ),
            ("KENNIS_MEMBER_TOKEN", &mo_token),
            ("KENNIS_RUN_ID", &run_id.to_string()),
            ("KENNIS_REQUEST_ID", &request.to_string()),
            ("KENNIS_SCREENSHOTS", &shots.display().to_string()),
        ],
    )
    .await;
    let tasks: Vec<&str> = got["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        tasks,
        [
            "invite",
            "accept-enrol-portal",
            "change-role",
            "reset-password",
            "remove-member-401",
            "search-open",
            "upload-two",
            "run-again",
            "file-request",
            "answer-question",
            "dutch-and-english",
            "no-javascript",
        ]
    );
    // The answer the browser gave is stored; the request it filed too.
    let answered = app
        .store
        .read(|tx| kennis::requests::feature::get(tx, s.org.id, request))
        .unwrap();
    assert!(
        answered.questions.iter().all(|q| q.answered),
        "{answered:?}"
    );
    let filed = app
        .store
        .read(|tx| {
            kennis::requests::feature::list(
                tx,
                s.org.id,
                &kennis::requests::feature::Filter {
                    page: 1,
                    ..Default::default()
                },
            )
        })
        .unwrap();
    assert_eq!(filed.total, 2);
    // What the browser did is what the store holds.
    let nina = identity::find_person(&app.store, "nieuw@example.org").unwrap();
    let members = app
        .store
        .read(|tx| identity::members(tx, s.org.id))
        .unwrap();
    assert!(
        members
            .iter()
            .any(|(m, p)| p.id == nina.id && m.role == Role::Admin)
    );
    assert!(!members.iter().any(|(_, p)| p.id == mo.person.id));
    assert!(oauth::check_bearer(&app, &mo_token).is_err());
    let runs = app
        .store
        .read(|tx| triggers::recent_runs(tx, s.org.id, trigger.trigger.id, 10))
        .unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].instructions, runs[1].instructions);
    for shot in [
        "login",
        "members",
        "kb-document",
        "run",
        "members-nl",
        "phone-kb",
        "request",
        "request-nl",
        "requests-nl",
        "phone-request",
    ] {
        assert!(shots.join(format!("{shot}.png")).is_file(), "{shot}.png");
    }
    // Every page got an axe verdict in both languages.
    let axe = got["axe"].as_object().unwrap();
    assert!(axe.keys().any(|k| k.starts_with("nl ")) && axe.keys().any(|k| k.starts_with("en ")));
    assert!(axe.values().all(|v| v == 0));
}
