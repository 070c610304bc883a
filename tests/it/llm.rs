//! The `llm` executor against a scripted stand-in for the chat-completions API (a paid
//! outside API, so a stand-in is allowed). The stand-in answers in the public API's documented
//! shapes (platform.openai.com/docs/api-reference/chat/create): `choices[0].message` with
//! `content` and `tool_calls` (`{id, type: "function", function: {name, arguments}}`, the
//! arguments a JSON *string*), several calls in one reply, `finish_reason`, `usage`, and error
//! bodies `{"error": {message, type, param, code}}` with 429/`Retry-After` and 5xx.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kennis::config::{LlmEndpoint, LlmTable, Settings};
use kennis::kb;
use kennis::roster::{self, AgentKind, LlmOptions, NewAgent, Rollout};
use kennis::triggers::{self, NewTrigger};
use serde_json::{Value, json};

use crate::fixture::{Browser, Seeded, ServeProcess, TestServer, http_client, run, run_json};

/// What the stand-in does for one request.
enum Reply {
    Json(u16, Vec<(&'static str, String)>, Value),
    /// 200 with the value's JSON sent in 64 KiB chunks, without `Content-Length`.
    Stream(Value),
    /// Never answers (the handler is dropped when the client goes away).
    Hang,
}

type Script = Box<dyn Fn(usize, &Value) -> Reply + Send + Sync>;

/// Every request the stand-in received: its `Authorization` header and body.
type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// The stand-in: answers by `script` (request number, body) and records every request.
struct StandIn {
    url: String,
    seen: Seen,
    /// Set when a hanging request's handler was dropped (the client gave up).
    hang_dropped: Arc<AtomicBool>,
}

impl StandIn {
    async fn start(script: Script) -> StandIn {
        let seen: Seen = Arc::default();
        let hang_dropped = Arc::new(AtomicBool::new(false));
        let script = Arc::new(script);
        let (s2, d2) = (seen.clone(), hang_dropped.clone());
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
                let (seen, dropped, script) = (s2.clone(), d2.clone(), script.clone());
                async move {
                    let auth = headers
                        .get("authorization")
                        .map(|v| v.to_str().unwrap().to_owned());
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push((auth, body.0.clone()));
                        seen.len() - 1
                    };
                    match script(n, &body.0) {
                        Reply::Json(status, headers, value) => {
                            let mut r: Response =
                                (StatusCode::from_u16(status).unwrap(), axum::Json(value))
                                    .into_response();
                            for (k, v) in headers {
                                r.headers_mut().insert(k, v.parse().unwrap());
                            }
                            r
                        }
                        Reply::Stream(value) => {
                            let bytes = serde_json::to_vec(&value).unwrap();
                            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                                bytes.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
                            let body = axum::body::Body::from_stream(futures::stream::iter(chunks));
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(body)
                                .unwrap()
                        }
                        Reply::Hang => {
                            struct Guard(Arc<AtomicBool>);
                            impl Drop for Guard {
                                fn drop(&mut self) {
                                    self.0.store(true, Ordering::SeqCst);
                                }
                            }
                            let _guard = Guard(dropped);
                            std::future::pending::<Response>().await
                        }
                    }
                }
            }),
        );
        // Conversations of several MB arrive whole (the limit under test is kennis's).
        let app = app.layer(axum::extract::DefaultBodyLimit::disable());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        StandIn {
            url: format!("http://{addr}/v1"),
            seen,
            hang_dropped,
        }
    }

    fn requests(&self) -> Vec<(Option<String>, Value)> {
        self.seen.lock().unwrap().clone()
    }
}

/// A chat completion as the API documents it.
fn completion(content: Option<&str>, calls: &[(&str, &str, &str)], usage: (u64, u64)) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": content, "refusal": null});
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    Reply::Json(
        200,
        vec![],
        json!({
            "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
            "object": "chat.completion",
            "created": 1741569952,
            "model": "gpt-4.1-mini-2025-04-14",
            "choices": [{"index": 0, "message": message, "logprobs": null,
                         "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
            "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1,
                      "total_tokens": usage.0 + usage.1},
            "service_tier": "default",
            "system_fingerprint": "fp_44709d6fcb"
        }),
    )
}

fn api_error(
    status: u16,
    message: &str,
    kind: &str,
    headers: Vec<(&'static str, String)>,
) -> Reply {
    Reply::Json(
        status,
        headers,
        json!({"error": {"message": message, "type": kind, "param": null, "code": null}}),
    )
}

/// The tool messages of a request body, by call id.
fn tool_message(body: &Value, call_id: &str) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool message for {call_id} in {body}"))["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

struct Setup {
    t: TestServer,
    s: Seeded,
    key: String,
    _key_dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    setup_with(Settings::default()).await
}

async fn setup_with(settings: Settings) -> Setup {
    let t = TestServer::start_with(settings).await;
    let s = t.seed("Bouwbedrijf", "annie@example.org");
    let app = t.app();
    for (path, text) in [
        (
            "handboek/kozijnen.md",
            "# Kozijnen\n\nHoutrot in kozijnen herstellen met epoxy.\nDaarna schilderen.\n",
        ),
        (
            "handboek/dak.md",
            "# Dak\n\nDakpannen controleren na storm.\n",
        ),
    ] {
        kb::write(
            &app.store,
            &app.kb_index,
            kb::NewVersion {
                org_id: s.org.id,
                path,
                bytes: text.as_bytes(),
                expect: kb::Expect::Create,
                by: None,
                now: app.clock.now(),
            },
        )
        .unwrap();
    }
    let key_dir = tempfile::tempdir().unwrap();
    let key = format!("sk-test-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(key_dir.path().join("key"), format!("{key}\n")).unwrap();
    Setup {
        t,
        s,
        key,
        _key_dir: key_dir,
    }
}

struct LlmAgent<'a> {
    url: &'a str,
    kind: AgentKind,
    timeout: Option<u64>,
    max_steps: Option<u32>,
    max_tokens: Option<u64>,
}

impl<'a> LlmAgent<'a> {
    fn new(url: &'a str) -> Self {
        LlmAgent {
            url,
            kind: AgentKind::Generic,
            timeout: None,
            max_steps: None,
            max_tokens: None,
        }
    }
}

fn add_llm(x: &Setup, a: LlmAgent) -> roster::Agent {
    let app = x.t.app();
    roster::add_agent_full(
        &app.store,
        &kennis::audit::Actor::Operator,
        &x.s.org.slug,
        &NewAgent {
            name: crate::fixture::unique_name("Model"),
            kind: a.kind,
            exec: "llm".into(),
            program: None,
            args: vec![],
            url: Some(a.url.into()),
            timeout_secs: a.timeout,
        },
        &roster::AgentExtras {
            llm: Some(&LlmOptions {
                model: "gpt-4.1-mini".into(),
                api_key_env: None,
                api_key_file: Some(x._key_dir.path().join("key").to_string_lossy().into()),
                max_steps: a.max_steps,
                max_tokens: a.max_tokens,
                system_prompt: None,
                endpoint: None,
            }),
            ..Default::default()
        },
        app.clock.now(),
    )
    .unwrap()
}

struct Hook {
    url: String,
    secret: String,
}

fn trigger(x: &Setup, agent: &roster::Agent) -> Hook {
    let app = x.t.app();
    let now = app.clock.now();
    let p = roster::add_project(&app.store, &x.s.org.slug, "P", Rollout::Ready, now).unwrap();
    let c = triggers::add(
        &app.store,
        &x.s.org.slug,
        &NewTrigger {
            name: "T".into(),
            agent_id: agent.id,
            project_id: p.id,
            instructions: "Beantwoord de vraag uit de melding.".into(),
            cooldown_secs: Some(0),
            callback_url: None,
        },
        now,
    )
    .unwrap();
    Hook {
        url: x.t.url(&format!("/api/hooks/events/{}", c.trigger.id)),
        secret: c.secret,
    }
}

async fn fire(h: &Hook, body: Value) -> (u16, Value) {
    let r = http_client()
        .post(&h.url)
        .bearer_auth(&h.secret)
        .json(&body)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn fire_run(h: &Hook) -> u64 {
    let (s, v) = fire(h, json!({"vraag": "Hoe herstel ik houtrot in kozijnen?"})).await;
    assert_eq!(s, 202, "{v}");
    v["featureRequestId"].as_u64().unwrap()
}

/// Polls the run until it is final (the worker runs on real time).
async fn wait_final(base: &str, h: &Hook, id: u64) -> Value {
    for _ in 0..600 {
        let v: Value = http_client()
            .get(format!("{base}/api/hooks/runs/{id}"))
            .bearer_auth(&h.secret)
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

/// Adds the agent with a trigger, fires one run and waits for it to end.
async fn run_once(x: &Setup, a: LlmAgent<'_>) -> (roster::Agent, Hook, u64, Value) {
    let agent = add_llm(x, a);
    let h = trigger(x, &agent);
    let id = fire_run(&h).await;
    let v = wait_final(&x.t.base, &h, id).await;
    (agent, h, id, v)
}

fn show(x: &Setup, id: u64) -> Value {
    run_json(
        x.t.data_dir(),
        &["run", "show", &id.to_string(), "--json"],
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_searches_and_reads_before_answering() {
    let model = StandIn::start(Box::new(|n, _| match n {
        0 => completion(
            None,
            &[(
                "call_s",
                "kennisbank_search",
                r#"{"query": "houtrot kozijn"}"#,
            )],
            (120, 20),
        ),
        // Two calls in one reply.
        1 => completion(
            Some("Ik lees het document."),
            &[
                (
                    "call_r",
                    "kennisbank_read",
                    r#"{"path": "handboek/kozijnen.md"}"#,
                ),
                ("call_l", "kennisbank_list", "{}"),
            ],
            (300, 30),
        ),
        _ => completion(
            Some("Herstel houtrot met epoxy en schilder daarna (handboek/kozijnen.md)."),
            &[],
            (500, 40),
        ),
    }))
    .await;
    let x = setup().await;
    let (agent, _h, id, v) = run_once(&x, LlmAgent::new(&model.url)).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(
        v["result"],
        "Herstel houtrot met epoxy en schilder daarna (handboek/kozijnen.md)."
    );

    let seen = model.requests();
    assert_eq!(seen.len(), 3);
    // The key from the file, as a bearer token; the model and the connector's tools offered.
    assert_eq!(
        seen[0].0.as_deref(),
        Some(format!("Bearer {}", x.key).as_str())
    );
    let body0 = &seen[0].1;
    assert_eq!(body0["model"], "gpt-4.1-mini");
    let offered: Vec<&str> = body0["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        [
            "kennisbank_list",
            "kennisbank_read",
            "kennisbank_search",
            "kennisbank_write"
        ]
    );
    assert_eq!(body0["tools"][0]["type"], "function");
    assert!(
        body0["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("houtrot")
    );
    // The search found the document; the read returned its text; both calls of one reply
    // were answered, after the assistant message that asked for them.
    assert!(tool_message(&seen[1].1, "call_s").contains("handboek/kozijnen.md"));
    let body2 = &seen[2].1;
    assert!(tool_message(body2, "call_r").contains("epoxy"));
    assert!(tool_message(body2, "call_l").contains("handboek/"));
    let assistant = body2["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .nth(1)
        .unwrap();
    assert_eq!(assistant["tool_calls"][1]["function"]["arguments"], "{}");

    // The transcript: model messages, tool calls with arguments and results, tokens, timings.
    let shown = show(&x, id);
    assert_eq!(shown["status"], "succeeded");
    let t = &shown["transcript"];
    assert_eq!(t["prompt_tokens"], 920);
    assert_eq!(t["completion_tokens"], 90);
    assert_eq!(t["total_tokens"], 1010);
    assert_eq!(t["tool_calls"], 3);
    let kinds: Vec<&str> = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "job", "model", "tool", "model", "tool", "tool", "model", "end"
        ]
    );
    let search = &t["entries"][2];
    assert_eq!(search["name"], "kennisbank_search");
    assert!(search["arguments"].as_str().unwrap().contains("houtrot"));
    assert_eq!(search["ok"], true);
    assert!(search["duration_ms"].is_u64());
    // The human rendering names the tools too.
    let out = run(x.t.data_dir(), &["run", "show", &id.to_string()], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tool kennisbank_read"), "{text}");

    // Audited as the organisation's agent in this run.
    let records: Vec<_> =
        x.t.audit_records(x.s.org.id)
            .into_iter()
            .filter(|r| r.action.is_none())
            .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(
        records
            .iter()
            .all(|r| r.agent_id == Some(agent.id) && r.run_id == Some(id) && r.person_id == 0)
    );

    // The run's portal page shows what it did.
    let mut b = Browser::new(&x.t);
    b.login(&x.s, "/portal").await;
    let page = b
        .get(&format!("/portal/o/{}/runs/{id}", x.s.org.slug))
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"transcript\""));
    assert!(page.body.contains("kennisbank_search"));
    assert!(
        !page.body.contains("run-cancel-form"),
        "a finished run has no cancel button"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feature_request_question_is_answered_and_the_model_completes_it() {
    let model = StandIn::start(Box::new(|n, body| {
        let user = body["messages"][1]["content"].as_str().unwrap_or("").to_owned();
        match n {
            0 => completion(
                Some("Eerst een vraag."),
                &[(
                    "call_q",
                    "feature_request_question",
                    r#"{"text": "Welke kleur?", "options": [{"option_id": "rood", "label": "Rood"}, {"option_id": "blauw", "label": "Blauw"}], "allow_other": false}"#,
                )],
                (100, 10),
            ),
            // The second job sees the answer.
            1 if user.contains("\"blauw\"") => completion(
                None,
                &[
                    ("call_s1", "feature_request_status", r#"{"status": "implementing"}"#),
                    ("call_m", "feature_request_message", r#"{"text": "Ik maak de knop blauw."}"#),
                    ("call_s2", "feature_request_status", r#"{"status": "completed"}"#),
                ],
                (100, 10),
            ),
            1 => api_error(400, "the answer was not in the job", "test", vec![]),
            _ => completion(Some("Klaar: de knop is blauw."), &[], (100, 10)),
        }
    }))
    .await;
    let x = setup().await;
    let mut a = LlmAgent::new(&model.url);
    a.kind = AgentKind::Feature;
    add_llm(&x, a);
    let app = x.t.app();
    let app_id = kennis::requests::apps::add(
        &app.store,
        x.s.org.id,
        "Planning",
        kennis::requests::apps::AppStatus::Live,
        app.clock.now(),
    )
    .unwrap()
    .app_id;
    let token = x.t.grant(&x.s, &["feature_requests"]);
    let mcp = x.t.mcp(&token);
    let created = mcp
        .ok(
            "feature_request_create",
            json!({"app_id": app_id, "title": "Blauwe knop", "description": "Maak de knop gekleurd."}),
        )
        .await;
    let id = created["id"].as_u64().unwrap();
    // The model asks; the request waits in clarifying with the open question.
    let mut read = Value::Null;
    for _ in 0..200 {
        read = mcp.ok("feature_request_read", json!({"id": id})).await;
        if read["status"] == "clarifying" && !read["open_questions"].as_array().unwrap().is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(read["status"], "clarifying", "{read}");
    assert_eq!(
        read["open_questions"][0]["options"][1]["option_id"],
        "blauw"
    );
    assert_eq!(model.requests().len(), 1, "asking a question ends the job");
    let offered: Vec<String> = model.requests()[0].1["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(offered.contains(&"feature_request_question".to_owned()));
    let q = read["open_questions"][0]["question_id"].clone();
    mcp.ok(
        "feature_request_reply",
        json!({"id": id, "answers": [{"question_id": q, "option_ids": ["blauw"]}]}),
    )
    .await;
    for _ in 0..200 {
        read = mcp.ok("feature_request_read", json!({"id": id})).await;
        if read["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(read["status"], "completed", "{read}");
    let texts: Vec<&str> = read["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(texts.contains(&"Ik maak de knop blauw."), "{texts:?}");
    assert!(texts.contains(&"Klaar: de knop is blauw."), "{texts:?}");
    assert_eq!(model.requests().len(), 3);
    // Both jobs are in the request's transcript.
    let shown = show(&x, id);
    let jobs = shown["transcript"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "job")
        .count();
    assert_eq!(jobs, 2, "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_waited_out_and_server_errors_retried_until_the_budget_is_spent() {
    // 429 with Retry-After, then success.
    let model = StandIn::start(Box::new(|n, _| match n {
        0 => api_error(
            429,
            "Rate limit reached for gpt-4.1-mini on tokens per min (TPM)",
            "tokens",
            vec![("retry-after", "1".into())],
        ),
        _ => completion(Some("Gelukt na even wachten."), &[], (10, 5)),
    }))
    .await;
    let x = setup().await;
    let (_agent, _h, id, v) = run_once(&x, LlmAgent::new(&model.url)).await;
    assert_eq!(
        (v["status"].as_str(), v["result"].as_str()),
        (Some("succeeded"), Some("Gelukt na even wachten."))
    );
    assert_eq!(model.requests().len(), 2);
    let t = &show(&x, id)["transcript"];
    let retry = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "retry")
        .expect("the retry is in the transcript");
    assert_eq!(retry["wait_ms"], 1000, "Retry-After is honoured");
    assert!(retry["reason"].as_str().unwrap().contains("429"));

    // 500s until the budget of attempts is spent: failed, with a readable result.
    let broken = StandIn::start(Box::new(|_, _| {
        api_error(
            500,
            "The server had an error while processing your request.",
            "server_error",
            vec![],
        )
    }))
    .await;
    let (_agent, _h, _id, v) = run_once(&x, LlmAgent::new(&broken.url)).await;
    assert_eq!(v["status"], "failed", "{v}");
    let result = v["result"].as_str().unwrap();
    assert!(
        result.contains("4 times") && result.contains("500"),
        "{result}"
    );
    assert!(result.contains("The server had an error"), "{result}");
    assert_eq!(broken.requests().len(), 4);

    // A dead endpoint (nothing listens) fails the same way, not stuck in running.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let (_agent, _h, _id, v) = run_once(&x, LlmAgent::new(&dead)).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["result"].as_str().unwrap().contains("connect"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_and_tokens_are_bounded() {
    // A model that calls tools for ever stops at --max-steps.
    let looping = StandIn::start(Box::new(|n, _| {
        completion(
            None,
            &[(&format!("call_{n}"), "kennisbank_list", "{}")],
            (10, 5),
        )
    }))
    .await;
    let x = setup().await;
    let mut a = LlmAgent::new(&looping.url);
    a.max_steps = Some(3);
    let (_agent, _h, id, v) = run_once(&x, a).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["result"].as_str().unwrap().contains("--max-steps"), "{v}");
    assert_eq!(
        looping.requests().len(),
        4,
        "three tool calls, then the fourth is refused"
    );
    assert_eq!(show(&x, id)["transcript"]["tool_calls"], 3);

    // A model whose usage passes --max-tokens is stopped.
    let hungry = StandIn::start(Box::new(|n, _| {
        completion(
            None,
            &[(&format!("call_{n}"), "kennisbank_list", "{}")],
            (900, 200),
        )
    }))
    .await;
    let mut a = LlmAgent::new(&hungry.url);
    a.max_tokens = Some(2000);
    let (_agent, _h, _id, v) = run_once(&x, a).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(
        v["result"].as_str().unwrap().contains("--max-tokens"),
        "{v}"
    );
    assert_eq!(hungry.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments_and_a_write_outside_aangeleverd_are_tool_errors_the_model_sees() {
    let model = StandIn::start(Box::new(|n, _| match n {
        0 => completion(
            None,
            &[
                ("call_bad", "kennisbank_search", r#"{"query": "kozijn""#),
                (
                    "call_out",
                    "kennisbank_write",
                    r#"{"path": "handboek/nieuw.md", "content": "x"}"#,
                ),
                ("call_nope", "rm_rf", "{}"),
            ],
            (10, 5),
        ),
        1 => completion(
            None,
            &[(
                "call_in",
                "kennisbank_write",
                r#"{"path": "aangeleverd/notitie.md", "content": "Notitie van de agent."}"#,
            )],
            (10, 5),
        ),
        _ => completion(Some("Notitie geschreven in aangeleverd/."), &[], (10, 5)),
    }))
    .await;
    let x = setup().await;
    let (agent, _h, id, v) = run_once(&x, LlmAgent::new(&model.url)).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let seen = model.requests();
    let bad = tool_message(&seen[1].1, "call_bad");
    assert!(
        bad.contains("not valid JSON") && bad.contains("invalid_input"),
        "{bad}"
    );
    let out = tool_message(&seen[1].1, "call_out");
    assert!(out.contains("path_not_allowed"), "{out}");
    assert!(tool_message(&seen[1].1, "call_nope").contains("no tool `rm_rf`"));
    assert!(tool_message(&seen[2].1, "call_in").contains("Created aangeleverd/notitie.md"));
    // Only the write inside aangeleverd/ happened; the refusal is audited as the agent's.
    let app = x.t.app();
    let org = x.s.org.id;
    let docs = app
        .store
        .read(|tx| {
            Ok::<_, kennis::store::StoreError>((
                kb::get_document(tx, org, "aangeleverd/notitie.md")?,
                kb::get_document(tx, org, "handboek/nieuw.md")?,
            ))
        })
        .unwrap();
    assert!(docs.0.is_some() && docs.1.is_none());
    assert_eq!(docs.0.unwrap().updated_by, None, "an agent is no person");
    app.batch.flush();
    let records = app
        .store
        .read(|tx| kennis::audit::records(tx, org, None))
        .unwrap();
    let refused = records
        .iter()
        .find(|r| r.outcome == kennis::audit::Outcome::Refused)
        .unwrap();
    assert_eq!(
        (refused.tool.as_str(), refused.agent_id, refused.run_id),
        ("kennisbank_write", Some(agent.id), Some(id))
    );
    let t = &show(&x, id)["transcript"];
    let failed_tools = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "tool" && e["ok"] == false)
        .count();
    assert_eq!(failed_tools, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_never_answers_times_out_and_a_running_run_can_be_cancelled() {
    let model = StandIn::start(Box::new(|_, _| Reply::Hang)).await;
    let x = setup().await;
    let mut a = LlmAgent::new(&model.url);
    a.timeout = Some(1);
    let (_agent, _h, _id, v) = run_once(&x, a).await;
    assert_eq!(v["status"], "timed_out", "{v}");
    assert!(v["result"].as_str().unwrap().contains("1 seconds"), "{v}");

    // Cancelling a running run: cancelled at once, the request to the model is dropped, and
    // the slot takes the next delivery.
    let mut a = LlmAgent::new(&model.url);
    a.timeout = Some(600);
    let agent = add_llm(&x, a);
    let h = trigger(&x, &agent);
    let before = model.requests().len();
    let id = fire_run(&h).await;
    for _ in 0..200 {
        if model.requests().len() > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        model.requests().len(),
        before + 1,
        "the run is waiting on the model"
    );
    model.hang_dropped.store(false, Ordering::SeqCst);
    let (s, v) = fire(&h, json!({})).await;
    assert_eq!((s, v["skipped"].as_str()), (200, Some("in_flight")));
    let out = run_json(
        x.t.data_dir(),
        &["run", "cancel", &id.to_string(), "--json"],
        None,
    );
    assert_eq!(out["status"], "cancelled");
    let v = wait_final(&x.t.base, &h, id).await;
    assert_eq!(v["status"], "cancelled");
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .contains("cancelled by an administrator")
    );
    for _ in 0..200 {
        if model.hang_dropped.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        model.hang_dropped.load(Ordering::SeqCst),
        "the executor was stopped"
    );
    let (s, v) = fire(&h, json!({})).await;
    assert_eq!(s, 202, "the slot is free: {v}");
    // Cancelling again is refused and changes nothing.
    let again = run(x.t.data_dir(), &["run", "cancel", &id.to_string()], None);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already ended"));
    // The transcript says it was cancelled.
    let mut t = Value::Null;
    for _ in 0..100 {
        t = show(&x, id)["transcript"].clone();
        if !t.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let last = t["entries"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["type"].as_str(), last["status"].as_str()),
        (Some("end"), Some("cancelled"))
    );

    // The portal's button cancels the next (running) one; another organisation's admin cannot.
    let next = v["featureRequestId"].as_u64().unwrap();
    let mut b = Browser::new(&x.t);
    b.login(&x.s, "/portal").await;
    let path = format!("/portal/o/{}/runs/{next}", x.s.org.slug);
    let page = b.get(&path).await;
    assert!(page.body.contains("run-cancel-form"), "{}", page.body);
    let csrf = page.csrf();
    let bad = b
        .post(&format!("{path}/cancel"), &[("csrf_token", "wrong")])
        .await;
    assert_eq!(bad.status, 403);
    let done = b
        .post(&format!("{path}/cancel"), &[("csrf_token", &csrf)])
        .await;
    assert_eq!(done.status, 303);
    let v = wait_final(&x.t.base, &h, next).await;
    assert_eq!(v["status"], "cancelled");
    assert!(v["result"].as_str().unwrap().contains("annie@example.org"));
}

/// A stand-in that answers every request with a plain final answer.
async fn answering(text: &'static str) -> StandIn {
    StandIn::start(Box::new(move |_, _| completion(Some(text), &[], (10, 5)))).await
}

/// An operator's endpoint whose key is in `key_file`.
fn endpoint(id: &str, url: &str, key_file: &std::path::Path, orgs: &[&str]) -> LlmEndpoint {
    LlmEndpoint {
        id: id.into(),
        url: url.into(),
        api_key_env: None,
        api_key_file: Some(key_file.to_owned()),
        orgs: orgs.iter().map(|o| o.to_string()).collect(),
    }
}

fn with_endpoints(endpoints: Vec<LlmEndpoint>) -> Settings {
    Settings {
        llm: Some(LlmTable {
            endpoints: Some(endpoints),
            ..LlmTable::default()
        }),
        ..Settings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_admin_chooses_among_the_operators_endpoints_and_the_key_goes_nowhere_else() {
    let offered = answering("Antwoord van het aangeboden endpoint.").await;
    // The admin's own server, and an endpoint the operator offers only to another organisation.
    let attacker = answering("Dank voor de sleutel.").await;
    let private = answering("Alleen voor een andere organisatie.").await;
    // An offered endpoint that redirects to another server.
    let elsewhere = answering("Doorgestuurd.").await;
    let target = format!("{}/chat/completions", elsewhere.url);
    let redirecting = StandIn::start(Box::new(move |_, _| {
        Reply::Json(307, vec![("location", target.clone())], json!({}))
    }))
    .await;
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("operator.key");
    let key = format!("sk-operator-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(&key_file, &key).unwrap();
    let endpoints = vec![
        endpoint("offered", &offered.url, &key_file, &["*"]),
        endpoint("redirecting", &redirecting.url, &key_file, &["*"]),
        endpoint("private", &private.url, &key_file, &["somebody-else"]),
    ];
    let mut x = setup_with(with_endpoints(endpoints)).await;
    let mut b = Browser::new(&x.t);
    b.login(&x.s, "/portal").await;
    let page = b.get(&format!("/portal/o/{}/triggers", x.s.org.slug)).await;
    assert!(page.body.contains("id=\"agent-form\""));
    // A choice among the endpoints offered to this organisation; no address, no key.
    assert!(
        page.body.contains("<option value=\"offered\">"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<option value=\"redirecting\">"));
    assert!(!page.body.contains("private"));
    assert!(!page.body.contains("name=\"url\"") && !page.body.contains("name=\"api_key_env\""));
    let path = format!("/portal/o/{}/agents", x.s.org.slug);
    let csrf = page.csrf();
    let form = |fields: &[(&'static str, &str)]| {
        let mut f: Vec<(&str, String)> = vec![
            ("csrf_token", csrf.clone()),
            ("name", "Model".into()),
            ("exec", "llm".into()),
            ("kind", "generic".into()),
            ("model", "gpt-4.1-mini".into()),
            ("endpoint", "offered".into()),
        ];
        for (k, v) in fields {
            f.retain(|(n, _)| n != k);
            f.push((k, v.to_string()));
        }
        f
    };
    let count = || {
        roster::list_agents(&x.t.app().store, x.s.org.id)
            .unwrap()
            .len()
    };
    // Attacks: the admin's own URL (with or without an endpoint), a variable of the server
    // holding a key, a key file, an endpoint not offered to this organisation, an unknown one.
    let forged: Vec<(Vec<(&'static str, &str)>, &str)> = vec![
        (
            vec![("url", attacker.url.as_str())],
            "another address or API key can only be set by the operator",
        ),
        (
            vec![("endpoint", ""), ("url", attacker.url.as_str())],
            "another address or API key can only be set by the operator",
        ),
        (
            vec![("api_key_env", "KENNIS_LLM_SECRET")],
            "another address or API key can only be set by the operator",
        ),
        (
            vec![("api_key_file", key_file.to_str().unwrap())],
            "another address or API key can only be set by the operator",
        ),
        (
            vec![("endpoint", "private")],
            "is not offered to this organisation",
        ),
        (
            vec![("endpoint", "nowhere")],
            "is not offered to this organisation",
        ),
        (
            vec![("endpoint", "")],
            "Choose one of the model endpoints offered to this organisation",
        ),
    ];
    for (fields, said) in forged {
        let f = form(&fields);
        let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let p = b.post(&path, &f).await;
        assert_eq!(p.status, 400, "{fields:?}: {}", p.body);
        assert!(p.body.contains(said), "{fields:?}: {}", p.body);
        assert_eq!(count(), 0, "{fields:?}: nothing stored");
    }
    // The operator's endpoint as offered.
    let f = form(&[]);
    let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = b.post(&path, &f).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let added = roster::list_agents(&x.t.app().store, x.s.org.id).unwrap();
    let roster::Executor::Llm(l) = &added[0].executor else {
        panic!("{:?}", added[0].executor)
    };
    assert_eq!(
        (
            l.endpoint.as_deref(),
            l.url.as_str(),
            l.api_key_env.as_deref(),
            l.api_key_file.as_deref()
        ),
        (Some("offered"), offered.url.as_str(), None, None)
    );
    let h = trigger(&x, &added[0]);
    let id = fire_run(&h).await;
    let v = wait_final(&x.t.base, &h, id).await;
    assert_eq!(
        (v["status"].as_str(), v["result"].as_str()),
        (
            Some("succeeded"),
            Some("Antwoord van het aangeboden endpoint.")
        )
    );
    assert_eq!(
        offered.requests()[0].0.as_deref(),
        Some(format!("Bearer {key}").as_str())
    );

    // An offered endpoint that redirects: the request is not sent on, with or without the key.
    let f = form(&[("name", "Omweg"), ("endpoint", "redirecting")]);
    let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(b.post(&path, &f).await.status, 303);
    let agent = roster::list_agents(&x.t.app().store, x.s.org.id)
        .unwrap()
        .pop()
        .unwrap();
    let h = trigger(&x, &agent);
    let id = fire_run(&h).await;
    let v = wait_final(&x.t.base, &h, id).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["result"].as_str().unwrap().contains("307"), "{v}");
    assert_eq!(redirecting.requests().len(), 1);
    assert!(
        elsewhere.requests().is_empty(),
        "the redirect was not followed"
    );
    assert!(attacker.requests().is_empty() && private.requests().is_empty());

    // The operator takes the endpoint away: its agents stop, with a readable result, and
    // nothing goes to the address the agent was added with.
    drop(b);
    x.t.restart_with(with_endpoints(vec![])).await;
    let h = trigger(&x, &added[0]);
    let before = offered.requests().len();
    let id = fire_run(&h).await;
    let v = wait_final(&x.t.base, &h, id).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .contains("no longer in the server's configuration"),
        "{v}"
    );
    assert_eq!(offered.requests().len(), before);
    // An agent the operator gave an address of its own, with a user, a password and a query:
    // the organisation's admins see the address without them.
    add_llm(
        &x,
        LlmAgent::new("http://operator:geheim-wachtwoord@127.0.0.1:9/v1?sleutel=abc"),
    );
    let mut b = Browser::new(&x.t);
    b.login(&x.s, "/portal").await;
    let page = b.get(&format!("/portal/o/{}/triggers", x.s.org.slug)).await;
    assert!(page.body.contains("id=\"no-endpoints\"") && !page.body.contains("id=\"agent-form\""));
    assert!(
        page.body.contains("<code>http://127.0.0.1:9/v1</code>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("geheim-wachtwoord") && !page.body.contains("sleutel"));
}

/// A failed run says why without the operator's configuration: not an endpoint's or an
/// agent's address, not the path of a key file or of a program. The webhook's sender reads
/// the result, the organisation's members read it and the transcript in the portal; the
/// server's log names the address or path, with the job. Each case fails its run with a
/// reason that still says what went wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_shows_no_address_or_path_of_the_operators_configuration() {
    let closed = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead_port = closed();
    let dead = format!("http://127.0.0.1:{dead_port}/v1");
    let refusing = StandIn::start(Box::new(|_, _| {
        api_error(403, "Project is not allowed here.", "forbidden", vec![])
    }))
    .await;
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("operator.key");
    std::fs::write(&key_file, "sk-operator-geheim").unwrap();
    let missing_key = keys.path().join("verplaatst").join("operator.key");
    let endpoints = vec![
        endpoint("dood", &dead, &key_file, &["*"]),
        endpoint("weigert", &refusing.url, &key_file, &["*"]),
        endpoint("zonder-sleutel", &refusing.url, &missing_key, &["*"]),
    ];
    let x = setup_with(with_endpoints(endpoints.clone())).await;
    let app = x.t.app();
    let add = |name: &str,
               exec: &str,
               program: Option<&str>,
               url: Option<&str>,
               endpoint: Option<&str>| {
        let llm = endpoint.map(|e| LlmOptions {
            model: "gpt-4.1-mini".into(),
            api_key_env: None,
            api_key_file: None,
            max_steps: None,
            max_tokens: None,
            system_prompt: None,
            endpoint: Some(e.into()),
        });
        roster::add_agent_full(
            &app.store,
            &kennis::audit::Actor::Operator,
            &x.s.org.slug,
            &NewAgent {
                name: name.into(),
                kind: AgentKind::Generic,
                exec: exec.into(),
                program: program.map(str::to_owned),
                args: vec![],
                url: url.map(str::to_owned),
                timeout_secs: Some(30),
            },
            &roster::AgentExtras {
                llm: llm.as_ref(),
                endpoints: &endpoints,
                ..Default::default()
            },
            app.clock.now(),
        )
        .unwrap()
    };
    let http_dead = format!("http://127.0.0.1:{}/agent", closed());
    let program = keys.path().join("agents").join("geheim-programma");
    let cases = [
        (
            add("Dood", "llm", None, None, Some("dood")),
            "the model endpoint `dood` failed 4 times in a row; the last time it failed: cannot connect",
        ),
        (
            add("Weigert", "llm", None, None, Some("weigert")),
            "the model endpoint `weigert` answered 403 Forbidden: Project is not allowed here.",
        ),
        (
            add("Zonder sleutel", "llm", None, None, Some("zonder-sleutel")),
            "the model endpoint `zonder-sleutel` has no usable API key (the server's log says why)",
        ),
        (
            add("Programma", "command", program.to_str(), None, None),
            "the agent's program could not be started (entity not found)",
        ),
        (
            add("Adres", "http", None, Some(&http_dead), None),
            "the agent's address: cannot connect",
        ),
        (
            add(
                "Weigert ook",
                "http",
                None,
                Some(&format!("{}/chat/completions", refusing.url)),
                None,
            ),
            "the agent's address answered 403 Forbidden: ",
        ),
    ];
    let hidden = [
        dead.clone(),
        dead_port.to_string(),
        refusing.url.clone(),
        http_dead.clone(),
        keys.path().to_string_lossy().into_owned(),
        "geheim-programma".into(),
        "operator.key".into(),
        "sk-operator-geheim".into(),
    ];
    let mut b = Browser::new(&x.t);
    b.login(&x.s, "/portal").await;
    for (agent, said) in cases {
        let h = trigger(&x, &agent);
        let id = fire_run(&h).await;
        let v = wait_final(&x.t.base, &h, id).await;
        assert_eq!(v["status"], "failed", "{}: {v}", agent.name);
        let result = v["result"].as_str().unwrap();
        assert!(result.starts_with(said), "{}: {result}", agent.name);
        let page = b
            .get(&format!("/portal/o/{}/runs/{id}", x.s.org.slug))
            .await;
        assert_eq!(page.status, 200, "{}", agent.name);
        let transcript = show(&x, id)["transcript"].to_string();
        for (what, text) in [
            ("result", result),
            ("page", page.body.as_str()),
            ("transcript", transcript.as_str()),
        ] {
            for h in &hidden {
                assert!(
                    !text.contains(h.as_str()),
                    "{}: the {what} shows {h}: {text}",
                    agent.name
                );
            }
        }
    }
    // The retries on the dead endpoint are in the transcript, each without its address.
    assert!(
        refusing.requests().len() >= 2,
        "both refusing agents asked it"
    );
    // The organisation's audit names each agent added as its Triggers page shows it: an
    // operator's endpoint by its id, and no program, key file or `http` agent's address. An
    // agent with a model address and key file of its own is shown with the address alone.
    roster::add_agent_full(
        &app.store,
        &kennis::audit::Actor::Operator,
        &x.s.org.slug,
        &NewAgent {
            name: "Eigen sleutel".into(),
            kind: AgentKind::Generic,
            exec: "llm".into(),
            program: None,
            args: vec![],
            url: Some("http://127.0.0.1:9/v1".into()),
            timeout_secs: Some(30),
        },
        &roster::AgentExtras {
            llm: Some(&LlmOptions {
                model: "gpt-4.1-mini".into(),
                api_key_env: None,
                api_key_file: Some(key_file.to_string_lossy().into_owned()),
                max_steps: None,
                max_tokens: None,
                system_prompt: None,
                endpoint: None,
            }),
            endpoints: &endpoints,
            ..Default::default()
        },
        app.clock.now(),
    )
    .unwrap();
    let audit = b.get(&format!("/portal/o/{}/audit", x.s.org.slug)).await;
    assert_eq!(audit.status, 200);
    for shown in [
        "exec=llm endpoint=dood model=gpt-4.1-mini",
        "exec=command",
        "exec=http",
        "exec=llm url=http://127.0.0.1:9/v1 model=gpt-4.1-mini",
    ] {
        assert!(audit.body.contains(shown), "the audit page lacks {shown}");
    }
    for h in &hidden {
        assert!(!audit.body.contains(h.as_str()), "the audit page shows {h}");
    }
}

#[test]
fn the_cli_adds_llm_agents_and_refuses_bad_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let slug = run_json(d, &["org", "create", "Acme", "--json"], None)["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    let prompt = d.join("prompt.txt");
    std::fs::write(&prompt, "Je bent een behulpzame assistent.").unwrap();
    let v = run_json(
        d,
        &[
            "agent",
            "add",
            &slug,
            "Model",
            "--kind",
            "generic",
            "--exec",
            "llm",
            "--url",
            "https://api.example.org/v1/",
            "--model",
            "gpt-4.1-mini",
            "--api-key-env",
            "OPENAI_API_KEY",
            "--max-steps",
            "5",
            "--timeout",
            "120",
            "--system-prompt-file",
            prompt.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert!(v["id"].as_u64().is_some(), "{v}");
    for (args, message) in [
        (vec!["--url", "https://x/v1"], "--model"),
        (vec!["--model", "m"], "--url"),
        (vec!["--url", "ftp://x", "--model", "m"], "--url"),
        (
            vec!["--url", "https://x/v1", "--model", "m", "--max-steps", "0"],
            "--max-steps",
        ),
        (
            vec![
                "--url",
                "https://x/v1",
                "--model",
                "m",
                "--api-key-env",
                "A B",
            ],
            "--api-key-env",
        ),
    ] {
        let mut all = vec![
            "agent", "add", &slug, "Bad", "--kind", "generic", "--exec", "llm",
        ];
        all.extend(args);
        let out = run(d, &all, None);
        assert_eq!(out.status.code(), Some(1), "{all:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(message),
            "{all:?}"
        );
    }
    let out = run(
        d,
        &[
            "agent", "add", &slug, "Bad", "--kind", "generic", "--exec", "echo", "--model", "m",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let out = run(
        d,
        &[
            "agent",
            "add",
            &slug,
            "Bad",
            "--kind",
            "generic",
            "--exec",
            "llm",
            "--url",
            "https://x/v1",
            "--model",
            "m",
            "--api-key-env",
            "A",
            "--api-key-file",
            "/k",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "both key sources is bad usage");
    // Only the first agent was stored, with its prompt and without any key.
    let store = kennis::store::Store::open(d).unwrap();
    let org = kennis::identity::find_org(&store, &slug).unwrap();
    let list = roster::list_agents(&store, org.id).unwrap();
    assert_eq!(list.len(), 1);
    let roster::Executor::Llm(l) = &list[0].executor else {
        panic!("not llm")
    };
    assert_eq!(l.url, "https://api.example.org/v1");
    assert_eq!(
        l.system_prompt.as_deref(),
        Some("Je bent een behulpzame assistent.")
    );
    assert_eq!((l.max_steps, list[0].timeout_secs), (5, 120));
    let out = run(d, &["run", "show", "99", "--json"], None);
    assert_eq!(out.status.code(), Some(1));
}

/// A ready project and a trigger for agent `agent` (its id), added with the command line on
/// data directory `d`: the trigger as `trigger add --json` prints it.
fn cli_trigger(d: &std::path::Path, slug: &str, agent: &str) -> Value {
    let project =
        run_json(d, &["project", "add", slug, "P", "--ready", "--json"], None)["id"].to_string();
    run_json(
        d,
        &[
            "trigger",
            "add",
            slug,
            "T",
            "--agent",
            agent,
            "--project",
            &project,
            "--instructions",
            "Doe iets.",
            "--cooldown",
            "0",
            "--json",
        ],
        None,
    )
}

/// The hook of a trigger `cli_trigger` added, on the server at `base`.
fn hook_on(base: &str, trig: &Value) -> Hook {
    Hook {
        url: format!("{base}/api/hooks/events/{}", trig["id"].as_str().unwrap()),
        secret: trig["secret"].as_str().unwrap().to_owned(),
    }
}

/// `kennis serve` as a process of its own on data directory `d` (its `KENNIS_*` environment
/// cleared, then `env` added), logging at debug level to `log`.
fn serve_with_env(
    d: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    log: &std::path::Path,
) -> ServeProcess {
    let mut cmd = crate::fixture::kennis(d);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("KENNIS_LOG", "debug")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let base = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        if let Some(url) = line.strip_prefix("kennis listening on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    ServeProcess {
        child,
        base,
        banner: String::new(),
    }
}

/// Every file under `dir`, read whole.
fn files_under(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else if p.is_file() {
            out.push((
                p.clone(),
                kennis::store::record::expand(&std::fs::read(&p).unwrap_or_default()),
            ));
        }
    }
}

#[test]
fn the_key_never_reaches_the_data_directory_backups_or_logs() {
    const FORGED: &str = "\r\n2026-01-01T00:00:00.000000Z ERROR kennis::server: vervalst";
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let key = format!("sk-proj-{}", uuid::Uuid::new_v4().simple());
    let echoed = key.clone();
    // The endpoint refuses the key and echoes it, as OpenAI's 401 body does; its message also
    // holds a line break and what would read as a line of the server's log.
    let model = rt.block_on(StandIn::start(Box::new(move |_, _| {
        api_error(
            401,
            &format!("Incorrect API key provided: {echoed}. You can find your API key at https://platform.openai.com/account/api-keys.{FORGED}"),
            "invalid_request_error",
            vec![],
        )
    })));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let log = dir.path().join("serve.log");
    let slug = run_json(&d, &["org", "create", "Acme", "--json"], None)["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    let agent = run_json(
        &d,
        &[
            "agent",
            "add",
            &slug,
            "Model",
            "--kind",
            "generic",
            "--exec",
            "llm",
            "--url",
            &model.url,
            "--model",
            "gpt-4.1-mini",
            "--api-key-env",
            "KENNIS_LLM_TEST_KEY",
            "--json",
        ],
        None,
    )["id"]
        .to_string();
    let trig = cli_trigger(&d, &slug, &agent);
    let server = serve_with_env(&d, &[], &[("KENNIS_LLM_TEST_KEY", &key)], &log);
    let hook = hook_on(&server.base, &trig);
    let v = rt.block_on(async {
        let id = fire_run(&hook).await;
        wait_final(&server.base, &hook, id).await
    });
    assert_eq!(v["status"], "failed", "{v}");
    let result = v["result"].as_str().unwrap();
    assert!(
        result.contains("401") && result.contains("[REDACTED]"),
        "{result}"
    );
    assert!(!result.contains(&key));
    // The key was used: the endpoint received it.
    assert_eq!(
        model.requests()[0].0.as_deref(),
        Some(format!("Bearer {key}").as_str())
    );
    let backup = dir.path().join("backup");
    let out = run(&d, &["backup", backup.to_str().unwrap()], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = run(&d, &["run", "show", "1", "--json"], None);
    assert!(!String::from_utf8_lossy(&shown.stdout).contains(&key));
    let code = server.terminate();
    assert!(code.success());
    let mut files = Vec::new();
    files_under(&d, &mut files);
    files_under(&backup, &mut files);
    files.push((log.clone(), std::fs::read(&log).unwrap()));
    assert!(files.len() > 3);
    let log_text = String::from_utf8_lossy(&files.last().unwrap().1).into_owned();
    assert!(
        log_text.contains("DEBUG") || log_text.contains("INFO"),
        "logs were written"
    );
    // The endpoint's line break reached the log escaped, inside the line that names the
    // failure: no line of the log is the endpoint's.
    assert!(
        log_text.contains("\\r\\n2026-01-01T00:00:00.000000Z ERROR kennis::server: vervalst"),
        "{log_text}"
    );
    assert!(
        !log_text
            .lines()
            .any(|l| l.starts_with("2026-01-01T00:00:00")),
        "{log_text}"
    );
    let needle = key.as_bytes();
    for (path, bytes) in &files {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "the key is in {}",
            path.display()
        );
    }
}

fn rate_limited(retry_after: &'static str) -> Reply {
    api_error(
        429,
        "Rate limit reached for gpt-4.1-mini",
        "tokens",
        vec![("retry-after", retry_after.to_owned())],
    )
}

/// A chat completion of about `size` bytes whose model asks for yet another tool call.
fn huge_completion(size: usize, n: usize) -> Value {
    json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant",
            "content": "x".repeat(size),
            "tool_calls": [{"id": format!("call_{n}"), "type": "function",
                            "function": {"name": "kennisbank_list", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_endpoint_fails_its_run_and_the_one_worker_takes_the_next() {
    // One worker: had a hostile answer taken it, every later run would stay queued.
    let x = setup_with(Settings {
        agent_workers: Some("1".into()),
        llm: Some(LlmTable {
            max_reply_bytes: Some(4 << 20),
            ..LlmTable::default()
        }),
        ..Settings::default()
    })
    .await;
    let good = answering("Nog steeds aan het werk.").await;
    let healthy = add_llm(&x, LlmAgent::new(&good.url));
    let healthy_hook = trigger(&x, &healthy);
    let cases: Vec<(&str, Script, &[&str])> = vec![
        (
            "Retry-After: 1e20",
            Box::new(|_, _| rate_limited("1e20")),
            &["Retry-After: 1e20", "longer than kennis waits", "429"],
        ),
        (
            "Retry-After: -5, for ever",
            Box::new(|_, _| rate_limited("-5")),
            &["4 times", "429"],
        ),
        (
            "Retry-After: NaN, for ever",
            Box::new(|_, _| rate_limited("NaN")),
            &["4 times", "429"],
        ),
        (
            "Retry-After: a date in the year 9999",
            Box::new(|_, _| rate_limited("Fri, 31 Dec 9999 23:59:59 GMT")),
            &["9999", "longer than kennis waits"],
        ),
        (
            "8 MB with Content-Length",
            Box::new(|n, _| Reply::Json(200, vec![], huge_completion(8 << 20, n))),
            &["max_reply_bytes", "4194304"],
        ),
        (
            "8 MB streamed without Content-Length",
            Box::new(|n, _| Reply::Stream(huge_completion(8 << 20, n))),
            &["max_reply_bytes"],
        ),
        (
            "3 MB answers until the conversation is full",
            Box::new(|n, _| Reply::Json(200, vec![], huge_completion(3 << 20, n))),
            &["max_conversation_bytes", "8388608"],
        ),
    ];
    for (what, script, said) in cases {
        let model = StandIn::start(script).await;
        let (_agent, _h, id, v) = run_once(&x, LlmAgent::new(&model.url)).await;
        assert_eq!(v["status"], "failed", "{what}: {v}");
        let result = v["result"].as_str().unwrap();
        for s in said {
            assert!(result.contains(s), "{what}: {result}");
        }
        assert!(
            result.len() < 2000,
            "{what}: a readable result, not the reply"
        );
        // The transcript says how it ended too.
        let t = &show(&x, id)["transcript"];
        let last = t["entries"].as_array().unwrap().last().unwrap();
        assert_eq!(last["status"], "failed", "{what}");
        // The one worker is still there: the next run executes.
        let next = fire_run(&healthy_hook).await;
        let v = wait_final(&x.t.base, &healthy_hook, next).await;
        assert_eq!(
            (v["status"].as_str(), v["result"].as_str()),
            (Some("succeeded"), Some("Nog steeds aan het werk.")),
            "after {what}"
        );
    }
}

#[test]
fn eight_megabyte_replies_do_not_grow_the_servers_memory() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Just under the 8 MiB kennis once accepted, every answer asking for another tool call:
    // kept whole and copied every step, the conversation would take gigabytes.
    let model = rt.block_on(StandIn::start(Box::new(|n, _| {
        Reply::Stream(huge_completion(8_000_000, n))
    })));
    let good = rt.block_on(answering("Nog steeds aan het werk."));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let config = dir.path().join("kennis.toml");
    std::fs::write(&config, "agent_workers = \"1\"\n").unwrap();
    let slug = run_json(&d, &["org", "create", "Acme", "--json"], None)["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    let add = |name: &str, url: &str| {
        run_json(
            &d,
            &[
                "agent",
                "add",
                &slug,
                name,
                "--kind",
                "generic",
                "--exec",
                "llm",
                "--url",
                url,
                "--model",
                "m",
                "--max-steps",
                "200",
                "--json",
            ],
            None,
        )["id"]
            .to_string()
    };
    let (hostile, healthy) = (add("Groot", &model.url), add("Gezond", &good.url));
    let (hostile, healthy) = (
        cli_trigger(&d, &slug, &hostile),
        cli_trigger(&d, &slug, &healthy),
    );
    let log = dir.path().join("serve.log");
    let server = serve_with_env(&d, &["--config", config.to_str().unwrap()], &[], &log);
    let (hostile, healthy) = (
        hook_on(&server.base, &hostile),
        hook_on(&server.base, &healthy),
    );
    let pid = server.child.id();
    let run_on = |h: &Hook| {
        rt.block_on(async {
            let id = fire_run(h).await;
            wait_final(&server.base, h, id).await
        })
    };
    assert_eq!(run_on(&healthy)["status"], "succeeded");
    let before = crate::soak::rss_kib(pid, "VmHWM:");
    for _ in 0..5 {
        let v = run_on(&hostile);
        assert_eq!(v["status"], "failed", "{v}");
        assert!(
            v["result"].as_str().unwrap().contains("max_reply_bytes"),
            "{v}"
        );
        assert_eq!(
            run_on(&healthy)["status"],
            "succeeded",
            "the worker goes on"
        );
    }
    let peak = crate::soak::rss_kib(pid, "VmHWM:");
    assert!(
        peak.saturating_sub(before) < 300 * 1024,
        "peak memory grew from {before} KiB to {peak} KiB"
    );
    assert_eq!(
        model.requests().len(),
        5,
        "one request per run, never retried"
    );
    assert!(server.terminate().success());
}

#[test]
fn the_cli_adds_agents_on_the_operators_endpoints_and_command_agents_with_env() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "sk-operator").unwrap();
    let config = dir.path().join("kennis.toml");
    std::fs::write(
        &config,
        format!(
            "[[llm.endpoints]]\nid = \"openai\"\nurl = \"https://api.openai.com/v1/\"\napi_key_file = \"{}\"\norgs = [\"acme\"]\n\n[[llm.endpoints]]\nid = \"other\"\nurl = \"http://10.0.0.5:11434/v1\"\norgs = [\"elsewhere\"]\n",
            key_file.display()
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    let slug = run_json(&d, &["org", "create", "Acme", "--json"], None)["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(slug, "acme");
    let add = |extra: &[&str]| {
        let name = crate::fixture::unique_name("A");
        let mut all = vec![
            "--config", cfg, "agent", "add", "acme", &name, "--kind", "generic",
        ];
        all.extend(extra);
        run(&d, &all, None)
    };
    let out = add(&[
        "--exec",
        "llm",
        "--endpoint",
        "openai",
        "--model",
        "gpt-4.1-mini",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["--exec", "llm", "--endpoint", "other", "--model", "m"],
            1,
            "not offered to organisation acme",
        ),
        (
            vec!["--exec", "llm", "--endpoint", "nowhere", "--model", "m"],
            1,
            "not offered",
        ),
        (
            vec![
                "--exec",
                "llm",
                "--endpoint",
                "openai",
                "--url",
                "https://x/v1",
                "--model",
                "m",
            ],
            2,
            "--url",
        ),
        (
            vec![
                "--exec",
                "llm",
                "--endpoint",
                "openai",
                "--api-key-env",
                "K",
                "--model",
                "m",
            ],
            2,
            "--api-key-env",
        ),
        (
            vec![
                "--exec",
                "command",
                "--program",
                "/usr/bin/env",
                "--env",
                "KENNIS_LLM_SECRET",
            ],
            1,
            "no KENNIS_ variable",
        ),
        (
            vec![
                "--exec",
                "command",
                "--program",
                "/usr/bin/env",
                "--env",
                "A B",
            ],
            1,
            "--env",
        ),
        (
            vec!["--exec", "echo", "--env", "FOO"],
            1,
            "--env is for the command executor",
        ),
    ];
    for (extra, code, said) in refused {
        let out = add(&extra);
        assert_eq!(out.status.code(), Some(code), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{extra:?}: {err}");
    }
    let out = add(&[
        "--exec",
        "command",
        "--program",
        "/usr/bin/env",
        "--env",
        "FOO",
        "--env",
        "FOO",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = kennis::store::Store::open(&d).unwrap();
    let org = kennis::identity::find_org(&store, "acme").unwrap();
    let list = roster::list_agents(&store, org.id).unwrap();
    assert_eq!(list.len(), 2, "the refused ones were not stored");
    let roster::Executor::Llm(l) = &list[0].executor else {
        panic!("{:?}", list[0].executor)
    };
    assert_eq!(
        (
            l.endpoint.as_deref(),
            l.url.as_str(),
            l.api_key_file.as_deref()
        ),
        (Some("openai"), "https://api.openai.com/v1", None)
    );
    assert_eq!(
        list[1].executor,
        roster::Executor::Command {
            program: "/usr/bin/env".into(),
            args: vec![],
            env: vec!["FOO".into()],
        }
    );
}

#[test]
fn a_command_agent_starts_with_a_clean_environment() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    // Prints the names in its environment and FOO's value as the run's result.
    let script = dir.path().join("print-env.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nnames=$(env | cut -d= -f1 | sort | tr '\\n' ' ')\nprintf '{\"type\":\"result\",\"text\":\"%s| FOO=%s\"}\\n' \"$names\" \"$FOO\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let slug = run_json(&d, &["org", "create", "Acme", "--json"], None)["slug"]
        .as_str()
        .unwrap()
        .to_owned();
    let add = |name: &str, env: &[&str]| {
        let mut all = vec![
            "agent",
            "add",
            &slug,
            name,
            "--kind",
            "generic",
            "--exec",
            "command",
            "--program",
            script.to_str().unwrap(),
            "--json",
        ];
        for e in env {
            all.extend(["--env", e]);
        }
        run_json(&d, &all, None)["id"].to_string()
    };
    let (given, plain) = (add("Met FOO", &["FOO"]), add("Zonder", &[]));
    let (given, plain) = (
        cli_trigger(&d, &slug, &given),
        cli_trigger(&d, &slug, &plain),
    );
    let log = dir.path().join("serve.log");
    let server = serve_with_env(
        &d,
        &[],
        &[
            ("KENNIS_LLM_SECRET", "sk-geheim"),
            ("KENNIS_TERMS_VERSION", "1"),
            ("KENNIS_SOMETHING", "x"),
            ("FOO", "foo-waarde"),
            ("BAR", "bar-waarde"),
        ],
        &log,
    );
    let result = |trig: &Value| {
        let h = hook_on(&server.base, trig);
        let v = rt.block_on(async {
            let id = fire_run(&h).await;
            wait_final(&server.base, &h, id).await
        });
        assert_eq!(v["status"], "succeeded", "{v}");
        v["result"].as_str().unwrap().to_owned()
    };
    let (with_foo, without) = (result(&given), result(&plain));
    for (text, foo) in [(&with_foo, true), (&without, false)] {
        let (names, value) = text.split_once('|').unwrap();
        let names: Vec<&str> = names.split_whitespace().collect();
        for needed in [
            "PATH",
            "LANG",
            "KENNIS_RUN_ID",
            "KENNIS_RUN_KIND",
            "KENNIS_RUN_ORG",
            "KENNIS_RUN_AGENT_ID",
        ] {
            assert!(names.contains(&needed), "{needed} missing: {text}");
        }
        let kennis: Vec<&&str> = names.iter().filter(|n| n.starts_with("KENNIS_")).collect();
        assert!(
            kennis.iter().all(|n| n.starts_with("KENNIS_RUN_")),
            "the server's KENNIS_ variables reached the agent: {kennis:?}"
        );
        assert!(!names.contains(&"BAR"), "{text}");
        assert_eq!(names.contains(&"FOO"), foo, "{text}");
        assert_eq!(value.trim() == "FOO=foo-waarde", foo, "{text}");
    }
    assert!(!with_foo.contains("sk-geheim"));
    assert!(server.terminate().success());
}
