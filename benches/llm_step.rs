//! The `llm` executor's own overhead per step: one tool round trip (the model's reply with a
//! `kennisbank_read` call → the tool executed in-process with limits and audit → the next
//! request with the growing conversation) against a local stand-in for the chat-completions
//! API that answers at once. The stand-in's own handling time (the "model") is measured on its
//! side and subtracted. `cargo bench --bench llm_step`; `KENNIS_LLM_STEPS` (default 100 per
//! run) and `KENNIS_LLM_RUNS` (default 20) bound it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kennis::agents::{self, AgentEvent, EventSink, Job, JobAgent, JobContext};
use kennis::config::Settings;
use kennis::roster::{self, LlmOptions, NewAgent};
use serde_json::{Value, json};

struct Sink(Option<String>);

impl EventSink for Sink {
    fn event(&mut self, event: AgentEvent) {
        if let AgentEvent::Result { text } = event {
            self.0 = Some(text);
        }
    }
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let steps = env_num("KENNIS_LLM_STEPS", 100);
    let runs = env_num("KENNIS_LLM_RUNS", 20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        // The stand-in: `steps` replies with one tool call each, then the answer; it counts the
        // time it spends per request (reading the body and building the reply).
        let model_nanos = Arc::new(AtomicU64::new(0));
        let counter = Arc::new(Mutex::new(0usize));
        let (mn, ct) = (model_nanos.clone(), counter.clone());
        let app_router = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (mn, ct) = (mn.clone(), ct.clone());
                async move {
                    let began = Instant::now();
                    let _parsed: Value = serde_json::from_slice(&body).unwrap();
                    let n = {
                        let mut c = ct.lock().unwrap();
                        *c += 1;
                        *c
                    };
                    let message = if n % (steps + 1) == 0 {
                        json!({"role": "assistant", "content": "klaar"})
                    } else {
                        json!({"role": "assistant", "content": null, "tool_calls": [{
                            "id": format!("call_{n}"), "type": "function",
                            "function": {"name": "kennisbank_read", "arguments": "{\"path\": \"handboek/kozijnen.md\"}"}}]})
                    };
                    let reply = axum::Json(json!({
                        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}));
                    mn.fetch_add(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    reply
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app_router).await.unwrap() });

        let dir = tempfile::tempdir().unwrap();
        let config = Settings {
            listen: Some("127.0.0.1:0".into()),
            data_dir: Some(dir.path().to_owned()),
            ..Settings::default()
        }
        .validate()
        .unwrap();
        let app = kennis::app::App::open(config, "http://127.0.0.1:1".into(), kennis::clock::system())
            .unwrap();
        let now = app.clock.now();
        let org = kennis::identity::create_org(&app.store, "Bench", now).unwrap();
        let text: String = (0..200)
            .map(|l| format!("regel {l}: houtrot in kozijnen herstellen met epoxy\n"))
            .collect();
        kennis::kb::write(
            &app.store,
            &app.kb_index,
            kennis::kb::NewVersion {
                org_id: org.id,
                path: "handboek/kozijnen.md",
                bytes: text.as_bytes(),
                expect: kennis::kb::Expect::Create,
                by: None,
                now,
            },
        )
        .unwrap();
        let agent = roster::add_agent_full(
            &app.store,
            &kennis::audit::Actor::Operator,
            &org.slug,
            &NewAgent {
                name: "Bench".into(),
                kind: roster::AgentKind::Generic,
                exec: "llm".into(),
                program: None,
                args: vec![],
                url: Some(url),
                timeout_secs: Some(3600),
            },
            &roster::AgentExtras {
            llm: Some(&LlmOptions {
                model: "bench".into(),
                max_steps: Some(steps as u32),
                max_tokens: Some(10_000_000),
                ..LlmOptions::default()
            }),
            ..Default::default()
            },
            now,
        )
        .unwrap();
        let mut per_step = Vec::new();
        for run in 0..runs {
            let job = Job {
                job_id: run as u64 + 1,
                kind: "run",
                organisation: org.slug.clone(),
                agent: JobAgent {
                    id: agent.id,
                    name: agent.name.clone(),
                },
                instructions: "Lees het handboek.".into(),
                extra: Default::default(),
            };
            let ctx = JobContext::new(&app);
            let mut sink = Sink(None);
            model_nanos.store(0, Ordering::Relaxed);
            let began = Instant::now();
            let outcome = agents::dispatch(&ctx, &agent, &job, &mut sink).await;
            let total = began.elapsed();
            assert_eq!(sink.0.as_deref(), Some("klaar"), "{outcome:?}");
            let model = Duration::from_nanos(model_nanos.load(Ordering::Relaxed));
            let t = ctx.take_transcript();
            assert_eq!(t.tool_calls as usize, steps);
            per_step.push((total - model).as_secs_f64() * 1000.0 / (steps + 1) as f64);
        }
        per_step.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let p = |q: f64| per_step[((per_step.len() - 1) as f64 * q).round() as usize];
        println!(
            "llm executor: {runs} runs × {steps} tool round trips (kennisbank_read of a 10 KB document, audit on), stand-in time subtracted"
        );
        println!(
            "per round trip: min {:.3} ms, p50 {:.3} ms, p90 {:.3} ms, max {:.3} ms (target < 2 ms)",
            p(0.0),
            p(0.5),
            p(0.9),
            p(1.0)
        );
    });
}
