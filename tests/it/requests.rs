//! Feature requests through the connector: apps, the five tools and their limits, filters and
//! pages, answers to questions, hourly limits on the injectable clock, isolation between
//! organisations, and feature agents (a `command` agent that asks and completes; the echo
//! agent of the demo).

use std::path::Path;
use std::time::Duration;

use jiff::SignedDuration;
use kennis::agents;
use kennis::requests::apps::{self, AppStatus};
use kennis::requests::{self, feature};
use kennis::roster::{self, AgentKind, NewAgent};
use serde_json::{Value, json};

use crate::fixture::{McpClient, Seeded, TestServer, run, run_json, stderr};

const SCOPE: &[&str] = &["feature_requests"];
pub const FEATURE_TOOLS: [&str; 5] = [
    "app_list",
    "feature_request_list",
    "feature_request_read",
    "feature_request_create",
    "feature_request_reply",
];

fn app(t: &TestServer, s: &Seeded, name: &str, status: AppStatus) -> u64 {
    let a = t.app();
    apps::add(&a.store, s.org.id, name, status, a.clock.now())
        .unwrap()
        .app_id
}

/// A server with one organisation (Annie, admin), its live app "Planning" and Annie's
/// connector client with the `feature_requests` scope.
async fn start() -> (TestServer, Seeded, u64, McpClient) {
    let t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let live = app(&t, &s, "Planning", AppStatus::Live);
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    (t, s, live, mcp)
}

fn create_args(app_id: u64, title: &str, description: &str) -> Value {
    json!({"app_id": app_id, "title": title, "description": description})
}

async fn create(mcp: &McpClient, app_id: u64, title: &str) -> u64 {
    let out = mcp
        .ok(
            "feature_request_create",
            create_args(app_id, title, "Graag een verbetering."),
        )
        .await;
    assert_eq!(out["status"], "pending", "{out}");
    out["id"].as_u64().unwrap()
}

async fn total(mcp: &McpClient, filter: Value) -> u64 {
    mcp.ok("feature_request_list", filter).await["total"]
        .as_u64()
        .unwrap()
}

/// Puts a question on a request as an agent would.
fn ask(t: &TestServer, id: u64, text: &str, options: &[(&str, &str)], allow_other: bool) {
    let a = t.app();
    let now = a.clock.now();
    a.store
        .write(|tx| {
            let mut r = requests::get(tx, id)?.unwrap();
            let event = agents::AgentEvent::Question {
                text: text.into(),
                options: options
                    .iter()
                    .map(|(id, label)| json!({"option_id": id, "label": label}))
                    .collect(),
                allow_other,
            };
            feature::apply_event(&mut r, "Tester", &event, now).unwrap();
            requests::put(tx, &r)?;
            Ok::<_, kennis::store::StoreError>(())
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_and_every_input_limit() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let live = app(&t, &s, "Planning", AppStatus::Live);
    let draft = app(&t, &s, "Uren", AppStatus::Draft);
    let archived = app(&t, &s, "Oud", AppStatus::Archived);
    let mcp = t.mcp(&t.grant(&s, SCOPE));

    assert_eq!(mcp.tool_names().await, FEATURE_TOOLS);

    let list = mcp.ok("app_list", json!({})).await;
    assert_eq!(
        list["apps"],
        json!([
            {"app_id": live, "name": "Planning", "accepts_requests": true},
            {"app_id": draft, "name": "Uren", "accepts_requests": false},
            {"app_id": archived, "name": "Oud", "accepts_requests": false},
        ])
    );

    // Title: exactly 200 is fine, 201 is refused; description: 20000 and 20001.
    let at = |n: usize| "é".repeat(n);
    mcp.ok("feature_request_create", create_args(live, &at(200), "x"))
        .await;
    mcp.ok(
        "feature_request_create",
        create_args(live, "t", &at(20_000)),
    )
    .await;
    for (args, code) in [
        (create_args(live, &at(201), "x"), "invalid_input"),
        (create_args(live, "t", &at(20_001)), "invalid_input"),
        (create_args(live, "   ", "x"), "invalid_input"),
        (create_args(live, "t", ""), "invalid_input"),
        (create_args(live, "regel\nbreuk", "x"), "invalid_input"),
        (json!({"title": "t", "description": "x"}), "invalid_input"),
        (
            json!({"app_id": "1", "title": "t", "description": "x"}),
            "invalid_input",
        ),
        (create_args(draft, "t", "x"), "app_closed"),
        (create_args(archived, "t", "x"), "app_closed"),
        (create_args(999, "t", "x"), "not_found"),
    ] {
        let e = mcp.err("feature_request_create", args.clone()).await;
        assert_eq!(e["code"], code, "{args}: {e}");
    }
    let e = mcp
        .err("feature_request_create", create_args(draft, "t", "x"))
        .await;
    assert!(e["message"].as_str().unwrap().contains("draft"), "{e}");
    // Refusals stored nothing.
    assert_eq!(total(&mcp, json!({})).await, 2);

    // Reply: message 20000 and 20001; neither message nor answers.
    let id = create(&mcp, live, "Knop voor export").await;
    let ok = mcp
        .ok(
            "feature_request_reply",
            json!({"id": id, "message": at(20_000)}),
        )
        .await;
    assert_eq!(
        ok["accepted"],
        json!({"message": true, "answers": []}),
        "{ok}"
    );
    for args in [
        json!({"id": id, "message": at(20_001)}),
        json!({"id": id}),
        json!({"id": id, "answers": []}),
        json!({"id": id, "message": "  "}),
        json!({"message": "hoi"}),
        json!({"id": id, "answers": "ja"}),
    ] {
        let e = mcp.err("feature_request_reply", args.clone()).await;
        assert_eq!(e["code"], "invalid_input", "{args}: {e}");
    }
    let read = mcp.ok("feature_request_read", json!({"id": id})).await;
    assert_eq!(read["conversation"].as_array().unwrap().len(), 1, "{read}");

    // List: search 200 / 201, page 1 / 1000 / 0 / 1001, status enum.
    mcp.ok("feature_request_list", json!({"search": "a".repeat(200)}))
        .await;
    let page_1000 = mcp.ok("feature_request_list", json!({"page": 1000})).await;
    assert_eq!(page_1000["requests"], json!([]));
    assert_eq!(page_1000["total"], 3);
    for args in [
        json!({"search": "a".repeat(201)}),
        json!({"page": 0}),
        json!({"page": 1001}),
        json!({"page": 1.5}),
        json!({"status": "queued"}),
        json!({"status": "klaar"}),
        json!({"mine": "yes"}),
    ] {
        let e = mcp.err("feature_request_list", args.clone()).await;
        assert_eq!(e["code"], "invalid_input", "{args}: {e}");
    }
    let e = mcp
        .err("feature_request_list", json!({"app_id": 999}))
        .await;
    assert_eq!(e["code"], "not_found");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_pages_search_and_mine() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let other = t.seed("Bouw BV", "bert@example.org");
    let planning = app(&t, &s, "Planning", AppStatus::Live);
    let uren = app(&t, &s, "Uren", AppStatus::Live);
    let annie = t.mcp(&t.grant(&s, SCOPE));
    let bert = t.mcp(&t.grant(&other, SCOPE));

    let mut ids = Vec::new();
    for i in 0..26 {
        ids.push(create(&annie, planning, &format!("Verzoek {i}")).await);
    }
    let cafe = bert
        .ok(
            "feature_request_create",
            create_args(uren, "Rooster voor het CAFÉ", "Overzicht per week"),
        )
        .await["id"]
        .as_u64()
        .unwrap();
    ids.push(cafe);

    // 25 per page, newest first, with the total; the last page is short; past it is empty.
    let p1 = annie.ok("feature_request_list", json!({})).await;
    assert_eq!(
        (p1["page"].clone(), p1["per_page"].clone()),
        (json!(1), json!(25))
    );
    assert_eq!(p1["total"], 27);
    let got: Vec<u64> = p1["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    let newest: Vec<u64> = ids.iter().rev().take(25).copied().collect();
    assert_eq!(got, newest);
    let first = &p1["requests"][0];
    for field in [
        "id",
        "app_id",
        "title",
        "status",
        "created_at",
        "updated_at",
    ] {
        assert!(first.get(field).is_some(), "{field} in {first}");
    }
    let p2 = annie.ok("feature_request_list", json!({"page": 2})).await;
    let got: Vec<u64> = p2["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert_eq!(got, vec![ids[1], ids[0]]);
    let p3 = annie.ok("feature_request_list", json!({"page": 3})).await;
    assert_eq!(
        (p3["total"].clone(), p3["requests"].clone()),
        (json!(27), json!([]))
    );

    // app_id, mine, status, search (case and accents ignored, all words).
    assert_eq!(total(&annie, json!({"app_id": uren})).await, 1);
    assert_eq!(total(&annie, json!({"app_id": planning})).await, 26);
    assert_eq!(total(&annie, json!({"mine": true})).await, 26);
    assert_eq!(total(&bert, json!({"mine": true})).await, 1);
    assert_eq!(total(&bert, json!({"mine": false})).await, 27);
    assert_eq!(total(&annie, json!({"status": "pending"})).await, 27);
    assert_eq!(total(&annie, json!({"status": "review"})).await, 0);
    let a = t.app();
    a.store
        .write(|tx| {
            let mut r = requests::get(tx, ids[3])?.unwrap();
            r.status = requests::Status::Review;
            requests::put(tx, &r)
        })
        .unwrap();
    let review = annie
        .ok("feature_request_list", json!({"status": "review"}))
        .await;
    assert_eq!(review["total"], 1);
    assert_eq!(review["requests"][0]["id"], ids[3]);
    for (q, n) in [
        ("cafe", 1),
        ("Café rooster", 1),
        ("WEEK", 1),
        ("cafe maand", 0),
        ("verzoek 2", 8),
        ("Verzoek 25", 1),
        ("   ", 27),
    ] {
        assert_eq!(total(&annie, json!({"search": q})).await, n, "search {q}");
    }
    assert_eq!(
        total(&annie, json!({"search": "verzoek", "app_id": uren})).await,
        0
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_and_answers_are_checked() {
    let (mut t, _, live, mcp) = start().await;
    let id = create(&mcp, live, "Exportknop").await;
    ask(
        &t,
        id,
        "Welk formaat?",
        &[("csv", "CSV"), ("xlsx", "Excel")],
        false,
    );
    ask(&t, id, "Voor wie?", &[("team", "Het team")], true);

    let read = mcp.ok("feature_request_read", json!({"id": id})).await;
    assert_eq!(read["status"], "clarifying");
    assert_eq!(
        read["open_questions"],
        json!([
            {"question_id": 1, "text": "Welk formaat?", "options": [
                {"option_id": "csv", "label": "CSV"}, {"option_id": "xlsx", "label": "Excel"}],
             "allow_other": false},
            {"question_id": 2, "text": "Voor wie?", "options": [
                {"option_id": "team", "label": "Het team"}], "allow_other": true},
        ])
    );
    let before = read.clone();

    let answer = |a: Value| json!({"id": id, "answers": [a]});
    for (args, why) in [
        (
            answer(json!({"question_id": 9, "option_ids": ["csv"]})),
            "no question 9",
        ),
        (
            answer(json!({"question_id": 1, "option_ids": ["pdf"]})),
            "no option `pdf`",
        ),
        (
            answer(json!({"question_id": 1, "option_ids": ["csv", "csv"]})),
            "twice",
        ),
        (
            answer(json!({"question_id": 1, "option_ids": []})),
            "chooses no option",
        ),
        (
            answer(json!({"question_id": 1, "other": "pdf"})),
            "does not allow",
        ),
        (
            answer(json!({"question_id": 2, "other": "x".repeat(1001)})),
            "at most 1000",
        ),
        (answer(json!({"option_ids": ["csv"]})), "question_id"),
        (
            answer(json!({"question_id": 1, "option_ids": "csv"})),
            "option_ids",
        ),
        (
            json!({"id": id, "answers": [{"question_id": 1, "option_ids": ["csv"]}, {"question_id": 1, "option_ids": ["xlsx"]}]}),
            "twice",
        ),
        // One good and one bad answer: nothing is applied.
        (
            json!({"id": id, "message": "hier", "answers": [{"question_id": 1, "option_ids": ["csv"]}, {"question_id": 2, "option_ids": ["niemand"]}]}),
            "no option",
        ),
    ] {
        let e = mcp.err("feature_request_reply", args.clone()).await;
        assert_eq!(e["code"], "invalid_input", "{args}: {e}");
        assert!(e["message"].as_str().unwrap().contains(why), "{why}: {e}");
    }
    let after = mcp.ok("feature_request_read", json!({"id": id})).await;
    assert_eq!(after, before, "refused replies changed nothing");

    // `other` of exactly 1000 characters, with an option; then question 1.
    let out = mcp
        .ok(
            "feature_request_reply",
            answer(json!({"question_id": "2", "option_ids": ["team"], "other": "o".repeat(1000)})),
        )
        .await;
    assert_eq!(out["accepted"], json!({"message": false, "answers": [2]}));
    let out = mcp
        .ok(
            "feature_request_reply",
            json!({"id": id, "message": "Liefst snel.", "answers": [{"question_id": 1, "option_ids": ["xlsx", "csv"]}]}),
        )
        .await;
    assert_eq!(out["accepted"], json!({"message": true, "answers": [1]}));
    let read = mcp.ok("feature_request_read", json!({"id": id})).await;
    assert_eq!(read["open_questions"], json!([]));
    let texts: Vec<&str> = read["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(texts.iter().any(|t| t.contains("Excel; CSV")), "{texts:?}");
    assert!(texts.contains(&"Liefst snel."), "{texts:?}");
    let e = mcp
        .err(
            "feature_request_reply",
            answer(json!({"question_id": 1, "option_ids": ["csv"]})),
        )
        .await;
    assert!(
        e["message"].as_str().unwrap().contains("already answered"),
        "{e}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_shortens_long_text_visibly() {
    let (mut t, _, live, mcp) = start().await;
    let long = "ab".repeat(10_000);
    let id = mcp
        .ok("feature_request_create", create_args(live, "Lang", &long))
        .await["id"]
        .as_u64()
        .unwrap();
    for i in 0..35 {
        mcp.ok(
            "feature_request_reply",
            json!({"id": id, "message": if i == 34 { long.clone() } else { format!("bericht {i}") }}),
        )
        .await;
    }
    let r = mcp.call("feature_request_read", json!({"id": id})).await;
    let out = &r["structuredContent"];
    let d = out["description"].as_str().unwrap();
    assert!(
        d.ends_with("[shortened: 4000 of 20000 characters shown]"),
        "{}",
        &d[d.len() - 80..]
    );
    let conv = out["conversation"].as_array().unwrap();
    assert_eq!(conv.len(), 30);
    assert_eq!(out["conversation_total"], 35);
    assert_eq!(conv[0]["text"], "bericht 5");
    assert!(
        conv[29]["text"]
            .as_str()
            .unwrap()
            .ends_with("[shortened: 2000 of 20000 characters shown]")
    );
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("5 earlier message(s) left out"), "{text}");
    assert!(text.len() < 20_000, "one read stays small: {}", text.len());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_limits_count_per_organisation() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let other = t.seed("Ander BV", "carla@example.org");
    let live = app(&t, &s, "Planning", AppStatus::Live);
    let other_app = app(&t, &other, "Planning", AppStatus::Live);
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    let carla = t.mcp(&t.grant(&other, SCOPE));

    // A refused create does not use up the budget.
    mcp.err("feature_request_create", create_args(live, "", "x"))
        .await;
    let mut last = 0;
    for i in 0..30 {
        last = create(&mcp, live, &format!("Verzoek {i}")).await;
        t.clock.advance(SignedDuration::from_secs(10));
    }
    let e = mcp
        .err("feature_request_create", create_args(live, "31", "x"))
        .await;
    assert_eq!(e["code"], "rate_limited", "{e}");
    // The first call was 300 s ago: it leaves the hour in 3300 s.
    assert_eq!(e["retry_after_seconds"], 3300, "{e}");
    assert_eq!(
        total(&mcp, json!({})).await,
        30,
        "the refused call stored nothing"
    );
    create(&carla, other_app, "Andere organisatie").await;

    for i in 0..60 {
        mcp.ok(
            "feature_request_reply",
            json!({"id": last, "message": format!("bericht {i}")}),
        )
        .await;
    }
    let e = mcp
        .err(
            "feature_request_reply",
            json!({"id": last, "message": "61"}),
        )
        .await;
    assert_eq!(e["code"], "rate_limited", "{e}");
    assert!(e["message"].as_str().unwrap().contains("retry in"), "{e}");

    t.clock.advance(SignedDuration::from_secs(3600));
    // Access tokens live an hour too: connect again.
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    create(&mcp, live, "Na een uur").await;
    mcp.ok(
        "feature_request_reply",
        json!({"id": last, "message": "weer"}),
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_organisation_cannot_see_or_touch_requests() {
    let mut t = TestServer::start().await;
    let a = t.seed("Bouw BV", "annie@example.org");
    let b = t.seed("Ander BV", "bob@example.org");
    let a_app = app(&t, &a, "Planning", AppStatus::Live);
    let annie = t.mcp(&t.grant(&a, SCOPE));
    let bob = t.mcp(&t.grant(&b, SCOPE));
    let id = create(&annie, a_app, "Geheim plan").await;
    ask(&t, id, "Welke?", &[("x", "X")], false);

    assert_eq!(bob.ok("app_list", json!({})).await["apps"], json!([]));
    assert_eq!(total(&bob, json!({})).await, 0);
    assert_eq!(total(&bob, json!({"search": "geheim"})).await, 0);
    let unknown = bob
        .err("feature_request_read", json!({"id": 999_999}))
        .await;
    let e = bob.err("feature_request_read", json!({"id": id})).await;
    assert_eq!(e["code"], "not_found");
    assert_eq!(
        e["message"].as_str().unwrap().replace(&id.to_string(), "N"),
        unknown["message"].as_str().unwrap().replace("999999", "N"),
        "a guessed id answers exactly like an unknown one"
    );
    for (tool, args) in [
        (
            "feature_request_reply",
            json!({"id": id, "message": "hallo"}),
        ),
        (
            "feature_request_reply",
            json!({"id": id, "answers": [{"question_id": 1, "option_ids": ["x"]}]}),
        ),
        ("feature_request_create", create_args(a_app, "Inbraak", "x")),
        ("feature_request_list", json!({"app_id": a_app})),
    ] {
        let e = bob.err(tool, args.clone()).await;
        assert_eq!(e["code"], "not_found", "{tool} {args}: {e}");
    }
    // Annie's request is unchanged.
    let read = annie.ok("feature_request_read", json!({"id": id})).await;
    assert_eq!(read["conversation"].as_array().unwrap().len(), 1, "{read}");
    assert_eq!(read["open_questions"].as_array().unwrap().len(), 1);
    assert_eq!(total(&annie, json!({})).await, 1);

    // A trigger run shares the id sequence but is not a feature request.
    let now = t.app().clock.now();
    let run = t
        .app()
        .store
        .write(|tx| {
            requests::create_run(tx, a.org.id, 1, uuid::Uuid::new_v4(), None, "x".into(), now)
        })
        .unwrap();
    let e = annie
        .err("feature_request_read", json!({"id": run.id}))
        .await;
    assert_eq!(e["code"], "not_found");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_tool_calls_are_audited() {
    let (mut t, s, live, mcp) = start().await;
    let id = create(&mcp, live, "Audit").await;
    mcp.ok("feature_request_read", json!({"id": id})).await;
    mcp.err("feature_request_reply", json!({"id": id})).await;
    let records = t.audit_records(s.org.id);
    let seen: Vec<(String, Option<String>, String)> = records
        .iter()
        .filter(|r| r.action.is_none())
        .map(|r| {
            (
                r.tool.clone(),
                r.target.clone(),
                serde_json::to_value(r.outcome)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    let target = Some(format!("request {id}"));
    assert_eq!(
        seen,
        vec![
            ("feature_request_create".into(), target.clone(), "ok".into()),
            ("feature_request_read".into(), target.clone(), "ok".into()),
            ("feature_request_reply".into(), target, "refused".into()),
        ]
    );
    t.stop().await;
}

/// An executable shell script in `dir`.
fn script(dir: &Path, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("feature-agent.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Reads the request until `done` holds (the agent works in the background).
async fn read_until(mcp: &McpClient, id: u64, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        let r = mcp.ok("feature_request_read", json!({"id": id})).await;
        if done(&r) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "request {id} never got there: {}",
        mcp.ok("feature_request_read", json!({"id": id})).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_agent_asks_a_question_and_completes_the_request() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let live = app(&t, &s, "Planning", AppStatus::Live);
    let dir = tempfile::tempdir().unwrap();
    // First job (no answers yet): ask, and try a transition that makes no sense. Second job
    // (with the answer): implement, report and complete.
    let program = script(
        dir.path(),
        r#"input=$(cat)
case "$input" in
  *'"kind":"feature_request"'*) ;;
  *) echo "not a feature job" >&2; exit 3 ;;
esac
case "$input" in
  *'"answers":[]'*)
    echo '{"type":"message","text":"Ik heb een vraag."}'
    echo '{"type":"question","text":"Hoe snel?","options":[{"option_id":"snel","label":"Deze week"},{"option_id":"later","label":"Volgende maand"}],"allow_other":false}'
    echo '{"type":"status","status":"completed"}'
    ;;
  *'"option_ids":["snel"]'*)
    echo '{"type":"status","status":"implementing"}'
    echo '{"type":"message","text":"Gebouwd met spoed."}'
    echo '{"type":"status","status":"review"}'
    echo '{"type":"status","status":"completed"}'
    ;;
  *) echo '{"type":"message","text":"Onverwacht antwoord."}' ;;
esac"#,
    );
    let a = t.app();
    roster::add_agent(
        &a.store,
        &s.org.slug,
        &NewAgent {
            name: "Bouwer".into(),
            kind: AgentKind::Feature,
            exec: "command".into(),
            program: Some(program.to_str().unwrap().into()),
            args: vec![],
            url: None,
            timeout_secs: Some(30),
        },
        a.clock.now(),
    )
    .unwrap();
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    let id = create(&mcp, live, "Exportknop").await;

    let r = read_until(&mcp, id, |r| {
        r["open_questions"].as_array().unwrap().len() == 1
    })
    .await;
    assert_eq!(r["status"], "clarifying", "{r}");
    let conv = r["conversation"].as_array().unwrap();
    assert_eq!(conv[0]["author"], "Bouwer");
    assert_eq!(conv[0]["role"], "agent");
    assert_eq!(conv[0]["text"], "Ik heb een vraag.");
    assert!(
        conv.iter().any(|m| m["author"] == "kennis"
            && m["text"]
                .as_str()
                .unwrap()
                .contains("`completed` cannot follow `clarifying`")),
        "the senseless transition was refused visibly: {r}"
    );
    let q = &r["open_questions"][0];
    assert_eq!(q["text"], "Hoe snel?");

    mcp.ok(
        "feature_request_reply",
        json!({"id": id, "answers": [{"question_id": q["question_id"], "option_ids": ["snel"]}]}),
    )
    .await;
    let done = read_until(&mcp, id, |r| r["status"] == "completed").await;
    let texts: Vec<&str> = done["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(texts.contains(&"Gebouwd met spoed."), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("Deze week")), "{texts:?}");
    assert_eq!(done["open_questions"], json!([]));
    // A completed request takes no more replies.
    let e = mcp
        .err(
            "feature_request_reply",
            json!({"id": id, "message": "nog iets"}),
        )
        .await;
    assert!(e["message"].as_str().unwrap().contains("completed"), "{e}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_apps_and_the_echo_feature_agent() {
    let mut t = TestServer::start().await;
    kennis::demo::ensure(t.app()).unwrap();
    // A second start adds nothing twice.
    kennis::demo::ensure(t.app()).unwrap();
    let a = t.app();
    let org = kennis::identity::find_org(&a.store, kennis::demo::DEMO_SLUG).unwrap();
    let list = a.store.read(|tx| apps::list(tx, org.id)).unwrap();
    let shown: Vec<(&str, AppStatus)> = list.iter().map(|a| (a.name.as_str(), a.status)).collect();
    assert_eq!(
        shown,
        vec![
            (kennis::demo::DEMO_LIVE_APP, AppStatus::Live),
            (kennis::demo::DEMO_DRAFT_APP, AppStatus::Draft)
        ]
    );
    let feature_agents: Vec<_> = roster::list_agents(&a.store, org.id)
        .unwrap()
        .into_iter()
        .filter(|a| a.kind == AgentKind::Feature)
        .collect();
    assert_eq!(feature_agents.len(), 1);

    // The echo agent answers a request honestly and changes nothing else.
    let s = t.seed(kennis::demo::DEMO_ORG, "tester@example.org");
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    let id = create(&mcp, list[0].app_id, "Vakantieplanning").await;
    let r = read_until(&mcp, id, |r| {
        !r["conversation"].as_array().unwrap().is_empty()
    })
    .await;
    let text = r["conversation"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("Echo agent") && text.contains("Vakantieplanning"),
        "{text}"
    );
    assert_eq!(r["status"], "pending");
    let e = mcp
        .err(
            "feature_request_create",
            create_args(list[1].app_id, "Nog niet", "x"),
        )
        .await;
    assert_eq!(e["code"], "app_closed");
    t.stop().await;
}

#[test]
fn app_add_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_json(d, &["org", "create", "Acme", "--json"], None);
    let live = run_json(d, &["app", "add", "acme", "Planner", "--json"], None);
    let draft = run_json(
        d,
        &["app", "add", "acme", "Uren", "--status", "draft", "--json"],
        None,
    );
    assert!(live["app_id"].as_u64().is_some(), "{live}");
    assert_eq!(live.as_object().unwrap().len(), 1, "{live}");
    let list = run_json(d, &["app", "list", "acme", "--json"], None);
    assert_eq!(list["items"][0]["status"], "live");
    assert_eq!(list["items"][1]["app_id"], draft["app_id"]);
    assert_eq!(list["items"][1]["accepts_requests"], false);

    let out = run(d, &["app", "add", "acme", "X", "--status", "closed"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = run(d, &["app", "add", "nobody", "X"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown organisation"),
        "{}",
        stderr(&out)
    );
    let out = run(d, &["app", "add", "acme", "planner"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("already has an app"),
        "{}",
        stderr(&out)
    );
    let list = run_json(d, &["app", "list", "acme", "--json"], None);
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "nothing stored");
}

/// An `http` feature agent: a small web server that records every job and answers with events.
async fn http_agent(
    answer: fn(&Value) -> Value,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use axum::{Json, Router, extract::State, routing::post};
    type Jobs = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;
    let jobs: Jobs = Default::default();
    let app = Router::new()
        .route(
            "/agent",
            post(
                move |State(jobs): State<Jobs>, Json(job): Json<Value>| async move {
                    let reply = answer(&job);
                    jobs.lock().unwrap().push(job);
                    Json(reply)
                },
            ),
        )
        .with_state(jobs.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/agent", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, jobs)
}

fn feature_agent(t: &TestServer, s: &Seeded, exec: &str, target: &str) {
    let a = t.app();
    let (program, url) = match exec {
        "http" => (None, Some(target.to_owned())),
        _ => (Some(target.to_owned()), None),
    };
    roster::add_agent(
        &a.store,
        &s.org.slug,
        &NewAgent {
            name: "Bouwer".into(),
            kind: AgentKind::Feature,
            exec: exec.into(),
            program,
            args: vec![],
            url,
            timeout_secs: Some(30),
        },
        a.clock.now(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_agent_receives_the_request_conversation_and_answers() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let live = app(&t, &s, "Planning", AppStatus::Live);
    let (url, jobs) = http_agent(|job| {
        if job["feature_request"]["answers"]
            .as_array()
            .unwrap()
            .is_empty()
        {
            json!({"events": [
                {"type": "question", "text": "Welke kleur?", "allow_other": true,
                 "options": [{"option_id": "rood", "label": "Rood"}]}]})
        } else {
            json!({"events": [
                {"type": "status", "status": "implementing"},
                {"type": "status", "status": "awaiting_feedback"},
                {"type": "message", "text": "Klaar om te proberen."}]})
        }
    })
    .await;
    feature_agent(&t, &s, "http", &url);
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    let id = create(&mcp, live, "Kleur van de knop").await;
    read_until(&mcp, id, |r| r["status"] == "clarifying").await;
    mcp.ok(
        "feature_request_reply",
        json!({"id": id, "message": "Zie hieronder.", "answers": [{"question_id": 1, "option_ids": [], "other": "Groen"}]}),
    )
    .await;
    let r = read_until(&mcp, id, |r| r["status"] == "awaiting_feedback").await;
    assert_eq!(
        r["conversation"].as_array().unwrap().last().unwrap()["text"],
        "Klaar om te proberen."
    );

    let jobs = jobs.lock().unwrap().clone();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let first = &jobs[0];
    assert_eq!(first["kind"], "feature_request");
    assert_eq!(first["organisation"], s.org.slug);
    assert_eq!(first["agent"]["name"], "Bouwer");
    assert_eq!(first["feature_request"]["id"], id);
    assert_eq!(first["feature_request"]["app_id"], live);
    assert_eq!(first["feature_request"]["title"], "Kleur van de knop");
    assert_eq!(first["feature_request"]["status"], "pending");
    let second = &jobs[1]["feature_request"];
    assert_eq!(second["status"], "clarifying");
    assert_eq!(
        second["answers"],
        json!([{"question_id": 1, "option_ids": [], "other": "Groen"}])
    );
    let said: Vec<(&str, &str)> = second["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["text"].as_str().unwrap()))
        .collect();
    assert_eq!(said[1], ("person", "Zie hieronder."));
    assert!(said[2].1.contains("other: Groen"), "{said:?}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_while_the_agent_runs_makes_it_run_again() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let live = app(&t, &s, "Planning", AppStatus::Live);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // Each job is logged; the first waits until the test lets it go.
    let program = script(
        dir.path(),
        &format!(
            r#"cat > /dev/null
echo job >> {d}/jobs
if [ "$(wc -l < {d}/jobs)" -eq 1 ]; then
  while [ ! -f {d}/go ]; do sleep 0.02; done
fi
echo '{{"type":"message","text":"gezien"}}'"#
        ),
    );
    feature_agent(&t, &s, "command", program.to_str().unwrap());
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    let id = create(&mcp, live, "Twee keer").await;
    let jobs = dir.path().join("jobs");
    for _ in 0..200 {
        if jobs.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let running = t
        .app()
        .store
        .read(|tx| requests::get(tx, id))
        .unwrap()
        .unwrap();
    assert_eq!(running.job, Some(requests::JobState::Running));
    mcp.ok(
        "feature_request_reply",
        json!({"id": id, "message": "Nog een detail."}),
    )
    .await;
    std::fs::write(dir.path().join("go"), "").unwrap();
    let r = read_until(&mcp, id, |r| {
        r["conversation"].as_array().unwrap().len() == 3
    })
    .await;
    let texts: Vec<&str> = r["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Nog een detail.", "gezien", "gezien"]);
    assert_eq!(std::fs::read_to_string(&jobs).unwrap().lines().count(), 2);
    let done = t
        .app()
        .store
        .read(|tx| requests::get(tx, id))
        .unwrap()
        .unwrap();
    assert_eq!((done.job, done.redispatch), (None, false));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_limits_survive_a_restart() {
    let (mut t, s, live, mcp) = start().await;
    for i in 0..30 {
        create(&mcp, live, &format!("Verzoek {i}")).await;
    }
    mcp.err("feature_request_reply", json!({"id": 1})).await;
    t.stop().await;

    // The same data directory, a new server: the hour's 30 creates still count.
    t.clock.advance(SignedDuration::from_secs(600));
    t.restart().await;
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    let e = mcp
        .err("feature_request_create", create_args(live, "31", "x"))
        .await;
    assert_eq!(e["code"], "rate_limited", "{e}");
    assert_eq!(e["retry_after_seconds"], 3000, "{e}");
    // Refused calls were not counted: replies are still allowed.
    mcp.ok(
        "feature_request_reply",
        json!({"id": 1, "message": "hallo"}),
    )
    .await;
    t.clock.advance(SignedDuration::from_secs(3000));
    let mcp = t.mcp(&t.grant(&s, SCOPE));
    create(&mcp, live, "Na het uur").await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_or_failing_agent_is_bounded_and_reported() {
    let (mut t, s, live, mcp) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let program = script(
        dir.path(),
        r#"cat > /dev/null
for i in $(seq 1 150); do echo "{\"type\":\"message\",\"text\":\"bericht $i\"}"; done
echo "kapot" >&2
exit 4"#,
    );
    feature_agent(&t, &s, "command", program.to_str().unwrap());
    let id = create(&mcp, live, "Veel praat").await;
    let r = read_until(&mcp, id, |r| r["conversation_total"] == 102).await;
    let notes: Vec<&str> = r["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["author"] == "kennis")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("50 more events"), "{notes:?}");
    assert!(
        notes[1].contains("failed") && notes[1].contains("kapot"),
        "{notes:?}"
    );
    assert_eq!(r["status"], "pending", "a failing agent changes no status");
    t.stop().await;
}

/// `kennis agent add` for a `command` feature agent named Bouwer.
fn agent_add_args<'a>(slug: &'a str, program: &'a str) -> Vec<&'a str> {
    vec![
        "agent",
        "add",
        slug,
        "Bouwer",
        "--kind",
        "feature",
        "--exec",
        "command",
        "--program",
        program,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_filed_without_a_feature_agent_go_to_the_one_added_later() {
    let mut t = TestServer::start().await;
    let s = t.seed("Bouw BV", "annie@example.org");
    let live = app(&t, &s, "Planning", AppStatus::Live);
    let other = t.seed("Ander BV", "bob@example.org");
    let other_live = app(&t, &other, "Planning", AppStatus::Live);
    let dir = tempfile::tempdir().unwrap();
    let program = script(
        dir.path(),
        r#"cat > /dev/null
echo '{"type":"message","text":"Ik pak het op."}'"#,
    );
    let program = program.to_str().unwrap();
    let mcp = t.mcp(&t.grant(&s, SCOPE));

    let r = mcp
        .call(
            "feature_request_create",
            create_args(live, "Zonder agent", "Wacht even."),
        )
        .await;
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("no feature agent yet"), "{text}");
    let waiting = r["structuredContent"]["id"].as_u64().unwrap();
    let cancelled = create(&mcp, live, "Laat maar").await;
    t.app()
        .store
        .write(|tx| {
            let mut r = requests::get(tx, cancelled)?.unwrap();
            r.status = requests::Status::Cancelled;
            requests::put(tx, &r)
        })
        .unwrap();
    // Another organisation's waiting request is not this agent's business.
    let bob = t.mcp(&t.grant(&other, SCOPE));
    let elsewhere = create(&bob, other_live, "Elders").await;

    // Added through the running server's admin socket: the workers start at once.
    let mut args = agent_add_args(&s.org.slug, program);
    args.push("--json");
    run_json(t.data_dir(), &args, None);
    let r = read_until(&mcp, waiting, |r| r["conversation_total"] == 1).await;
    assert_eq!(r["conversation"][0]["text"], "Ik pak het op.");
    assert_eq!(r["conversation"][0]["author"], "Bouwer");
    let stored = |id| {
        t.app()
            .store
            .read(|tx| requests::get(tx, id))
            .unwrap()
            .unwrap()
    };
    let c = stored(cancelled);
    assert_eq!((c.agent_id, c.job, c.conversation.len()), (0, None, 0));
    let e = stored(elsewhere);
    assert_eq!(
        (e.agent_id, e.job),
        (0, None),
        "the other organisation waits"
    );

    // Without a server the agent is added to the data directory; the next start runs it.
    t.stop().await;
    let out = run(
        t.data_dir(),
        &agent_add_args(&other.org.slug, program),
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("takes up 1 waiting feature request"),
        "{said}"
    );
    t.restart().await;
    let bob = t.mcp(&t.grant(&other, SCOPE));
    let r = read_until(&bob, elsewhere, |r| r["conversation_total"] == 1).await;
    assert_eq!(r["conversation"][0]["text"], "Ik pak het op.");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_hands_a_waiting_request_to_the_feature_agent() {
    let (mut t, s, live, mcp) = start().await;
    let id = create(&mcp, live, "Nog zonder agent").await;
    // An agent stored without the admin command (as by an older version): the next reply
    // still finds it.
    let dir = tempfile::tempdir().unwrap();
    let program = script(
        dir.path(),
        r#"cat > /dev/null
echo '{"type":"message","text":"Gelezen."}'"#,
    );
    feature_agent(&t, &s, "command", program.to_str().unwrap());
    let out = mcp
        .ok(
            "feature_request_reply",
            json!({"id": id, "message": "Is er al iemand?"}),
        )
        .await;
    assert_eq!(out["accepted"]["message"], true);
    let r = read_until(&mcp, id, |r| r["conversation_total"] == 2).await;
    assert_eq!(r["conversation"][1]["text"], "Gelezen.");
    t.stop().await;
}
