//! The `llm` executor: a language model behind the OpenAI-compatible chat-completions API
//! (`POST {url}/chat/completions` with `tools` as functions and `tool_calls` in replies —
//! served by OpenAI, Azure OpenAI, Mistral, Groq, OpenRouter, LiteLLM, vLLM, llama.cpp's
//! server and Ollama). Written on reqwest and serde_json rather than an SDK crate: one
//! endpoint is used, and the executor must tolerate the small differences between servers
//! (arguments as a string or an object, content as a string or parts, `usage` missing).
//!
//! The model is offered the knowledge-base tools under the connector's names and input
//! schemas, executed in-process through [`crate::tools::call`] as the organisation's agent
//! (same rules, hourly limits and audit; the audit names the agent and the run). Feature jobs
//! also get the agent-protocol events as functions; asking a question ends the job, which
//! waits for the person's answer. Steps (tool calls), tokens (from `usage`) and wall time are
//! bounded; 429 and 5xx are retried with backoff (honouring `Retry-After`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::protocol::{AgentEvent, EventSink, Job, Outcome, http_client};
use super::transcript::{CallNote, Step, TEXT_KEPT, Transcript, shorten};
use super::{Agent, LlmOptions};
use crate::app::App;
use crate::requests::{Status, feature};
use crate::tools::{self, Caller};

/// How an `llm` agent reaches its model. Stored with the agent; the key itself never is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmSettings {
    /// Base URL without trailing slash, e.g. `https://api.openai.com/v1`.
    pub url: String,
    pub model: String,
    /// The server's environment variable that holds the API key, read at run time.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// A file holding the API key, read at run time.
    #[serde(default)]
    pub api_key_file: Option<String>,
    pub max_steps: u32,
    pub max_tokens: u64,
    #[serde(default)]
    pub system_prompt: Option<String>,
}

impl LlmSettings {
    /// The settings as `agent add` would take them back (for listings).
    pub fn options(&self) -> LlmOptions {
        LlmOptions {
            model: self.model.clone(),
            api_key_env: self.api_key_env.clone(),
            api_key_file: self.api_key_file.clone(),
            max_steps: Some(self.max_steps),
            max_tokens: Some(self.max_tokens),
            system_prompt: self.system_prompt.clone(),
        }
    }
}

/// Most characters of one tool result passed back to the model.
pub const TOOL_RESULT_MAX: usize = 16_000;
/// Attempts per model request: the first and up to three retries on 429, 5xx or no answer.
pub const MAX_ATTEMPTS: u32 = 4;
/// First backoff; it doubles with each retry.
pub const BACKOFF_START: Duration = Duration::from_millis(250);
/// Longest `Retry-After` honoured; a longer one ends the run.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);
/// Largest response body read from the endpoint.
const MAX_RESPONSE: usize = 8 * 1024 * 1024;
/// Longest API key file read.
const MAX_KEY_FILE: u64 = 16 * 1024;

/// The names of the agent-protocol events offered to a feature job's model.
pub const FN_MESSAGE: &str = "feature_request_message";
pub const FN_QUESTION: &str = "feature_request_question";
pub const FN_STATUS: &str = "feature_request_status";

/// Reads the API key from the server's environment or the key file, at run time. `Ok(None)`
/// when the agent has no key (local servers need none).
pub fn read_api_key(s: &LlmSettings) -> Result<Option<String>, String> {
    if let Some(var) = &s.api_key_env {
        return match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_owned())),
            _ => Err(format!(
                "the environment variable {var} that should hold the API key is not set in the server's environment"
            )),
        };
    }
    if let Some(path) = &s.api_key_file {
        use std::io::Read;
        let mut text = String::new();
        let read =
            std::fs::File::open(path).and_then(|f| f.take(MAX_KEY_FILE).read_to_string(&mut text));
        return match read {
            Ok(_) if !text.trim().is_empty() => Ok(Some(text.trim().to_owned())),
            Ok(_) => Err(format!("the API key file {path} is empty")),
            Err(e) => Err(format!("the API key file {path} cannot be read: {e}")),
        };
    }
    Ok(None)
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

#[derive(Deserialize)]
struct ToolCall {
    #[serde(default)]
    id: Option<String>,
    function: FunctionCall,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    name: String,
    /// A JSON string by the API's documentation; some servers send the object itself.
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize, Default)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// The text of a message's `content`: a string, or the text parts of a list.
fn content_text(content: &Option<Value>) -> Option<String> {
    let text = match content.as_ref()? {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

/// The `arguments` as the string the model sent (for the transcript and the echo).
fn arguments_text(args: &Value) -> String {
    match args {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The arguments as an object, or a message for the model saying what is wrong.
fn parse_arguments(args: &Value) -> Result<tools::args::Args, String> {
    let value = match args {
        Value::String(s) if s.trim().is_empty() => return Ok(Default::default()),
        Value::String(s) => serde_json::from_str::<Value>(s)
            .map_err(|e| format!("the arguments are not valid JSON ({e}); send one JSON object"))?,
        Value::Null => return Ok(Default::default()),
        other => other.clone(),
    };
    match value {
        Value::Object(m) => Ok(m),
        _ => Err("the arguments must be one JSON object".into()),
    }
}

/// The tools offered to the model: the knowledge-base tools (connector names and input
/// schemas) and, for feature jobs, the agent-protocol events.
fn tool_offer(feature_job: bool, with_extracted: bool) -> Vec<Value> {
    let caller = Caller::agent(0, 0, 0);
    let mut out: Vec<Value> = tools::definitions(with_extracted)
        .into_iter()
        .filter(|(name, ..)| tools::tool_for(&caller, name).is_some())
        .map(|(name, description, input, _)| {
            json!({"type": "function", "function": {"name": name, "description": description, "parameters": input}})
        })
        .collect();
    if feature_job {
        let statuses: Vec<&str> = feature::FEATURE_STATUSES
            .iter()
            .map(|s| s.as_str())
            .collect();
        out.push(json!({"type": "function", "function": {
            "name": FN_MESSAGE,
            "description": "Post a message in the feature request's conversation (in the language of the request, mostly Dutch).",
            "parameters": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 20000}}, "required": ["text"]}}}));
        out.push(json!({"type": "function", "function": {
            "name": FN_QUESTION,
            "description": "Ask the person who filed the request a multiple-choice question. The request moves to `clarifying` and your work stops here: you are started again with the answer.",
            "parameters": {"type": "object", "properties": {
                "text": {"type": "string", "maxLength": 2000},
                "options": {"type": "array", "minItems": 2, "maxItems": 20, "items": {"type": "object", "properties": {
                    "option_id": {"type": "string", "maxLength": 100}, "label": {"type": "string", "maxLength": 500}},
                    "required": ["option_id", "label"]}},
                "allow_other": {"type": "boolean", "description": "Whether the person may give another answer in their own words."}},
                "required": ["text", "options"]}}}));
        out.push(json!({"type": "function", "function": {
            "name": FN_STATUS,
            "description": "Move the feature request to another status: pending → clarifying → implementing → awaiting_feedback → review → completed (or cancelled).",
            "parameters": {"type": "object", "properties": {"status": {"type": "string", "enum": statuses}}, "required": ["status"]}}}));
    }
    out
}

fn default_system_prompt(agent: &Agent, job: &Job) -> String {
    let base = format!(
        "You are {}, an agent of the organisation `{}` in kennis. You can read its knowledge base with kennisbank_list, kennisbank_search and kennisbank_read, and write documents inside `aangeleverd/` with kennisbank_write. The material is mostly in Dutch: search with Dutch words as they appear in the documents and write in the language of the material. Look things up before you answer; do not invent facts.",
        agent.name, job.organisation
    );
    if job.kind == "feature_request" {
        format!(
            "{base} You work on a feature request: post progress with {FN_MESSAGE}, ask the requester with {FN_QUESTION} when something is unclear (then stop; you are started again with the answer), and move the request along with {FN_STATUS}. Your final message is added to the conversation."
        )
    } else {
        format!("{base} Your final message is the run's result: make it a complete answer.")
    }
}

fn user_message(job: &Job) -> String {
    match job.extra.get("feature_request") {
        Some(request) => {
            let rendered = serde_json::to_string_pretty(request).unwrap_or_default();
            format!(
                "{}\n\nThe feature request (with its conversation and every answer so far):\n{}",
                job.instructions,
                shorten(&rendered, 40_000)
            )
        }
        None => job.instructions.clone(),
    }
}

/// One job's shared state: the transcript (which the runtime keeps even when the job is
/// stopped), the clock and the start time.
struct Recorder<'a> {
    app: &'a App,
    transcript: &'a Mutex<Transcript>,
    started: Instant,
}

impl Recorder<'_> {
    fn note(&self, step: Step) {
        let elapsed = self.started.elapsed().as_millis() as u64;
        self.transcript
            .lock()
            .expect("transcript lock")
            .push(self.app.clock.now(), elapsed, step);
    }

    fn total_tokens(&self) -> u64 {
        self.transcript
            .lock()
            .expect("transcript lock")
            .total_tokens
    }
}

/// Why a model request gave up.
enum CallFailure {
    /// Retryable (429, 5xx, no connection); the wait before the next attempt, if any.
    Transient(String, Option<Duration>),
    Fatal(String),
}

/// Strips the key from anything an endpoint says back (an error body may echo it).
fn redact(text: &str, key: Option<&str>) -> String {
    match key {
        Some(k) if k.len() >= 4 => text.replace(k, "[REDACTED]"),
        _ => text.to_owned(),
    }
}

/// The readable part of an error body: `error.message` of the API's error shape, or the text.
fn error_text(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or_else(|| v["error"].as_str())
            .or_else(|| v["message"].as_str())
            .map(str::to_owned)
    });
    let text = message.unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    shorten(&text, 500)
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    if let Ok(secs) = v.trim().parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    // An HTTP date: the wait until then.
    let when = jiff::fmt::rfc2822::parse(v.trim()).ok()?.timestamp();
    let wait = when.duration_since(jiff::Timestamp::now());
    Some(Duration::from_secs(wait.as_secs().max(0) as u64))
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_RESPONSE {
            return Err("the answer is over 8 MB".into());
        }
    }
    Ok(body)
}

/// One attempt at `POST {url}/chat/completions`.
async fn attempt(
    client: &reqwest::Client,
    endpoint: &str,
    key: Option<&str>,
    body: &Value,
) -> Result<ChatResponse, CallFailure> {
    let mut request = client.post(endpoint).json(body);
    if let Some(k) = key {
        request = request.bearer_auth(k);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            let what = if e.is_connect() {
                "could not connect"
            } else {
                "the request failed"
            };
            return Err(CallFailure::Transient(
                redact(&format!("{what}: {e}"), key),
                None,
            ));
        }
    };
    let status = response.status();
    let wait = retry_after(response.headers());
    let body = read_body(response)
        .await
        .map_err(|e| CallFailure::Transient(e, None))?;
    if status.is_success() {
        return serde_json::from_slice::<ChatResponse>(&body).map_err(|e| {
            CallFailure::Fatal(format!(
                "the answer is not a chat completion ({e}): {}",
                redact(&shorten(&String::from_utf8_lossy(&body), 300), key)
            ))
        });
    }
    let reason = format!("answered {status}: {}", redact(&error_text(&body), key));
    if status.as_u16() == 429 || status.is_server_error() {
        Err(CallFailure::Transient(reason, wait))
    } else {
        Err(CallFailure::Fatal(reason))
    }
}

/// A model request with retries on 429, 5xx and lost connections.
async fn complete(
    client: &reqwest::Client,
    settings: &LlmSettings,
    key: Option<&str>,
    body: &Value,
    rec: &Recorder<'_>,
) -> Result<ChatResponse, String> {
    let endpoint = format!("{}/chat/completions", settings.url);
    let mut backoff = BACKOFF_START;
    for n in 1..=MAX_ATTEMPTS {
        match attempt(client, &endpoint, key, body).await {
            Ok(r) => return Ok(r),
            Err(CallFailure::Fatal(reason)) => return Err(format!("{endpoint} {reason}")),
            Err(CallFailure::Transient(reason, wait)) => {
                if n == MAX_ATTEMPTS {
                    return Err(format!(
                        "{endpoint} failed {MAX_ATTEMPTS} times in a row; the last time it {reason}"
                    ));
                }
                let wait = wait.unwrap_or(backoff);
                if wait > MAX_RETRY_AFTER {
                    return Err(format!(
                        "{endpoint} {reason}, and asks to wait {} s, longer than kennis waits ({} s)",
                        wait.as_secs(),
                        MAX_RETRY_AFTER.as_secs()
                    ));
                }
                rec.note(Step::Retry {
                    reason: reason.clone(),
                    wait_ms: wait.as_millis() as u64,
                });
                tokio::time::sleep(wait).await;
                backoff *= 2;
            }
        }
    }
    unreachable!("the loop returns on its last attempt")
}

/// What the model's event functions did to the job.
struct FeatureState {
    status: Status,
    asked: bool,
}

/// Runs one event function of a feature job: checks it now (so the model hears of a mistake
/// and can correct it) and hands the event to the sink.
fn feature_event(
    name: &str,
    args: &tools::args::Args,
    state: &mut FeatureState,
    sink: &mut dyn EventSink,
) -> Result<String, String> {
    let text_arg = |field: &str| -> Result<String, String> {
        match args.get(field) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            _ => Err(format!("`{field}` must be a non-empty string")),
        }
    };
    match name {
        FN_MESSAGE => {
            sink.event(AgentEvent::Message {
                text: text_arg("text")?,
            });
            Ok("The message was added to the conversation.".into())
        }
        FN_QUESTION => {
            let text = text_arg("text")?;
            let options = match args.get("options") {
                Some(Value::Array(list)) if list.len() >= 2 => list.clone(),
                _ => {
                    return Err(
                        "`options` must be a list of at least two {option_id, label} objects"
                            .into(),
                    );
                }
            };
            if options
                .iter()
                .any(|o| !o["option_id"].is_string() || !o["label"].is_string())
            {
                return Err("each option needs a string `option_id` and a string `label`".into());
            }
            let allow_other = match args.get("allow_other") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("`allow_other` must be true or false".into()),
            };
            if state.status.is_final() {
                return Err(format!(
                    "the request is {}; no questions can be asked",
                    state.status.as_str()
                ));
            }
            sink.event(AgentEvent::Question {
                text,
                options,
                allow_other,
            });
            state.asked = true;
            state.status = Status::Clarifying;
            Ok("The question was asked; stop now. You are started again with the answer.".into())
        }
        FN_STATUS => {
            let wanted = text_arg("status")?;
            let to = feature::parse_status(&wanted)
                .ok_or_else(|| format!("`{wanted}` is not a feature-request status"))?;
            if to != state.status && !feature::may_move(state.status, to) {
                return Err(format!(
                    "the request cannot move from {} to {}",
                    state.status.as_str(),
                    to.as_str()
                ));
            }
            sink.event(AgentEvent::Status {
                status: to.as_str().to_owned(),
            });
            state.status = to;
            Ok(format!("The request is now {}.", to.as_str()))
        }
        _ => Err(format!("unknown function `{name}`")),
    }
}

/// The text handed back to the model for a tool result, capped.
fn tool_text(ok: bool, text: String) -> String {
    let text = if ok { text } else { format!("Error: {text}") };
    shorten(&text, TOOL_RESULT_MAX)
}

/// Executes `job` with the model of `settings`. The caller bounds the wall time (dropping
/// this future stops it); steps and tokens are bounded here.
pub(super) async fn run(
    app: &Arc<App>,
    agent: &Agent,
    settings: &LlmSettings,
    job: &Job,
    sink: &mut dyn EventSink,
    transcript: &Mutex<Transcript>,
) -> Outcome {
    let rec = Recorder {
        app,
        transcript,
        started: Instant::now(),
    };
    let feature_job = job.kind == "feature_request";
    let user = user_message(job);
    rec.note(Step::Job {
        executor: "llm".into(),
        model: Some(settings.model.clone()),
        instructions: shorten(&user, TEXT_KEPT),
    });
    let key = match read_api_key(settings) {
        Ok(k) => k,
        Err(reason) => return Outcome::Failed(reason),
    };
    let system = settings
        .system_prompt
        .clone()
        .unwrap_or_else(|| default_system_prompt(agent, job));
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": user}),
    ];
    let offer = tool_offer(feature_job, app.kb_index.with_extracted());
    let caller = Caller::agent(agent.org_id, agent.id, job.job_id);
    let mut state = FeatureState {
        status: job
            .extra
            .get("feature_request")
            .and_then(|r| r["status"].as_str())
            .and_then(feature::parse_status)
            .unwrap_or(Status::Pending),
        asked: false,
    };
    let client = http_client();
    let mut steps: u32 = 0;
    loop {
        let body = json!({
            "model": settings.model,
            "messages": messages,
            "tools": offer,
            "tool_choice": "auto",
        });
        let asked_at = Instant::now();
        let reply = match complete(client, settings, key.as_deref(), &body, &rec).await {
            Ok(r) => r,
            Err(reason) => return Outcome::Failed(reason),
        };
        let usage = reply.usage.unwrap_or_default();
        let Some(choice) = reply.choices.into_iter().next() else {
            return Outcome::Failed("the model's answer has no choices".into());
        };
        let content = content_text(&choice.message.content);
        let calls = choice.message.tool_calls.unwrap_or_default();
        let notes: Vec<CallNote> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| CallNote {
                id: c.id.clone().unwrap_or_else(|| format!("call_{steps}_{i}")),
                name: c.function.name.clone(),
                arguments: arguments_text(&c.function.arguments),
            })
            .collect();
        rec.note(Step::Model {
            content: content.as_deref().map(|c| shorten(c, TEXT_KEPT)),
            tool_calls: notes
                .iter()
                .map(|n| CallNote {
                    arguments: shorten(&n.arguments, TEXT_KEPT),
                    ..n.clone()
                })
                .collect(),
            finish_reason: choice.finish_reason.clone(),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            duration_ms: asked_at.elapsed().as_millis() as u64,
        });
        let used = rec.total_tokens();
        if used > settings.max_tokens {
            return Outcome::Failed(format!(
                "the run used {used} tokens, over its limit of {} (--max-tokens); it was stopped",
                settings.max_tokens
            ));
        }
        if calls.is_empty() {
            return match (choice.finish_reason.as_deref(), content) {
                (Some("length"), _) => Outcome::Failed(
                    "the model's answer was cut off at its output limit (finish_reason `length`)"
                        .into(),
                ),
                (Some("content_filter"), _) => Outcome::Failed(
                    "the endpoint withheld the model's answer (finish_reason `content_filter`)"
                        .into(),
                ),
                (_, Some(text)) => {
                    sink.event(AgentEvent::Result { text });
                    Outcome::Completed
                }
                (_, None) if feature_job => Outcome::Completed,
                (_, None) => Outcome::Failed("the model ended without an answer".into()),
            };
        }
        if steps as usize + calls.len() > settings.max_steps as usize {
            return Outcome::Failed(format!(
                "the model asked for more than {} tool calls (--max-steps); the run was stopped after {steps}",
                settings.max_steps
            ));
        }
        messages.push(json!({
            "role": "assistant",
            "content": content,
            "tool_calls": notes.iter().map(|n| json!({
                "id": n.id, "type": "function",
                "function": {"name": n.name, "arguments": n.arguments}})).collect::<Vec<_>>(),
        }));
        for (call, note) in calls.iter().zip(&notes) {
            steps += 1;
            let began = Instant::now();
            let (ok, text) = match parse_arguments(&call.function.arguments) {
                Err(why) => (false, format!("{why} (code invalid_input)")),
                Ok(args) => match tools::tool_for(&caller, &note.name) {
                    Some(tool) => {
                        let caller = caller.clone();
                        let result = app
                            .blocking(move |app| tools::call(app, &caller, tool, &args))
                            .await;
                        match result {
                            Ok(ok) => (true, ok.text),
                            Err(e) => (false, format!("{e} (code {})", e.code())),
                        }
                    }
                    None if feature_job
                        && [FN_MESSAGE, FN_QUESTION, FN_STATUS].contains(&note.name.as_str()) =>
                    {
                        match feature_event(&note.name, &args, &mut state, sink) {
                            Ok(t) => (true, t),
                            Err(e) => (false, format!("{e} (code invalid_input)")),
                        }
                    }
                    None => (
                        false,
                        format!(
                            "there is no tool `{}`; use one of the tools offered (code invalid_input)",
                            note.name
                        ),
                    ),
                },
            };
            let reply = tool_text(ok, text);
            rec.note(Step::Tool {
                call_id: note.id.clone(),
                name: note.name.clone(),
                arguments: shorten(&note.arguments, TEXT_KEPT),
                ok,
                result: shorten(&reply, TEXT_KEPT),
                duration_ms: began.elapsed().as_millis() as u64,
            });
            messages.push(json!({"role": "tool", "tool_call_id": note.id, "content": reply}));
        }
        if state.asked {
            // A question ends the job: the request waits for the person's answer.
            if let Some(text) = content {
                sink.event(AgentEvent::Message { text });
            }
            return Outcome::Completed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_strings_objects_or_nothing() {
        assert!(parse_arguments(&json!("{\"path\": \"a\"}")).unwrap()["path"] == "a");
        assert!(parse_arguments(&json!({"path": "a"})).unwrap()["path"] == "a");
        assert!(parse_arguments(&json!("")).unwrap().is_empty());
        assert!(parse_arguments(&json!("{not json")).is_err());
        assert!(parse_arguments(&json!("[1]")).is_err());
    }

    #[test]
    fn error_bodies_are_read_and_keys_redacted() {
        let body = br#"{"error": {"message": "Incorrect API key provided: sk-secret-123", "type": "invalid_request_error"}}"#;
        let text = redact(&error_text(body), Some("sk-secret-123"));
        assert_eq!(text, "Incorrect API key provided: [REDACTED]");
        assert_eq!(error_text(b"plain failure"), "plain failure");
    }

    #[test]
    fn content_may_be_text_parts() {
        let parts = Some(json!([{"type": "text", "text": "Hal"}, {"type": "text", "text": "lo"}]));
        assert_eq!(content_text(&parts).as_deref(), Some("Hallo"));
        assert_eq!(content_text(&Some(json!("  "))), None);
        assert_eq!(content_text(&None), None);
    }

    #[test]
    fn the_model_gets_the_connectors_kb_tools_and_feature_events() {
        let names = |offer: Vec<Value>| -> Vec<String> {
            offer
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            names(tool_offer(false, true)),
            [
                "kennisbank_list",
                "kennisbank_read",
                "kennisbank_search",
                "kennisbank_write"
            ]
        );
        let feature = names(tool_offer(true, true));
        assert_eq!(&feature[4..], [FN_MESSAGE, FN_QUESTION, FN_STATUS]);
        // The same input schemas as the connector's.
        let (_, _, input, _) = tools::definitions(true).remove(3);
        assert_eq!(tool_offer(false, true)[3]["function"]["parameters"], input);
    }
}
