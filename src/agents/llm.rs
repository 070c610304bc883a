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
//!
//! The endpoint is not trusted: a reply over `[llm] max_reply_bytes` is not read further, a
//! conversation over `max_conversation_bytes` ends the run, and every number it sends
//! (`Retry-After` in seconds or as a date, sizes, token counts) is read without panicking and
//! capped. An agent on one of the operator's `[[llm.endpoints]]` gets its URL and key from
//! the configuration at run time; the key goes only to that URL (the client follows no
//! redirect).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::protocol::{AgentEvent, BodyError, EventSink, Job, Outcome, bounded_body, http_client};
use super::transcript::{CallNote, Step, TEXT_KEPT, Transcript, shorten};
use crate::app::App;
use crate::config::LlmConfig;
use crate::requests::{Status, feature};
use crate::roster::{Agent, LlmSettings};
use crate::tools::{self, Caller};

/// Most characters of one tool result passed back to the model.
pub const TOOL_RESULT_MAX: usize = 16_000;
/// Attempts per model request: the first and up to three retries on 429, 5xx or no answer.
pub const MAX_ATTEMPTS: u32 = 4;
/// First backoff; it doubles with each retry.
pub const BACKOFF_START: Duration = Duration::from_millis(250);
/// Longest `Retry-After` honoured; a longer one ends the run.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

/// The names of the agent-protocol events offered to a feature job's model.
pub const FN_MESSAGE: &str = "feature_request_message";
pub const FN_QUESTION: &str = "feature_request_question";
pub const FN_STATUS: &str = "feature_request_status";

/// Reads the API key from the server's environment or the key file, at run time. `Ok(None)`
/// when the agent has no key (local servers need none).
pub fn read_api_key(s: &LlmSettings) -> Result<Option<String>, String> {
    crate::config::read_secret(
        "API key",
        s.api_key_env.as_deref(),
        s.api_key_file.as_deref(),
    )
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
            .filter_map(|p| p.get("text").and_then(Value::as_str))
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
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.transcript
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.app.clock.now(), elapsed, step);
    }

    fn total_tokens(&self) -> u64 {
        self.transcript
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total_tokens
    }
}

/// Where a run's requests go, and the key they carry.
struct Target {
    /// Base URL; requests go to `{url}/chat/completions` and nowhere else.
    url: String,
    key: Option<String>,
    /// How a run's result and transcript name the endpoint: never by its address, which is
    /// the operator's configuration (the server's log has it, with the run).
    shown: String,
}

/// The run's endpoint: the operator's, as the configuration says now, when the agent names
/// one (it must still exist and be offered to the organisation); else the agent's own URL and
/// key, which only the operator's command line gives.
fn target(config: &LlmConfig, s: &LlmSettings, job: &Job) -> Result<Target, String> {
    let org = &job.organisation;
    let Some(id) = &s.endpoint else {
        let shown = "the model's address".to_owned();
        return Ok(Target {
            url: s.url.clone(),
            key: read_api_key(s).map_err(|e| unusable_key(job, &shown, &e))?,
            shown,
        });
    };
    let e = config.endpoint(id).ok_or_else(|| {
        format!("the model endpoint `{id}` is no longer in the server's configuration ([[llm.endpoints]])")
    })?;
    if !e.allows(org) {
        return Err(format!(
            "the model endpoint `{id}` is no longer offered to organisation {org}"
        ));
    }
    let file = e.api_key_file.as_ref().map(|f| f.to_string_lossy());
    let shown = format!("the model endpoint `{id}`");
    Ok(Target {
        url: e.url.clone(),
        key: crate::config::read_secret("API key", e.api_key_env.as_deref(), file.as_deref())
            .map_err(|e| unusable_key(job, &shown, &e))?,
        shown,
    })
}

/// A key that cannot be read: the variable's name or the file's path, and why, go to the
/// server's log; the run's result only says that the key is missing.
fn unusable_key(job: &Job, shown: &str, detail: &str) -> String {
    tracing::warn!(job = job.job_id, reason = %detail, "a model's API key could not be read");
    format!("{shown} has no usable API key (the server's log says why)")
}

/// Why a model request gave up.
enum CallFailure {
    /// Retryable (429, 5xx, no connection); what the endpoint asked to wait.
    Transient(String, Wait),
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
        v.pointer("/error/message")
            .and_then(Value::as_str)
            .or_else(|| v.get("error").and_then(Value::as_str))
            .or_else(|| v.get("message").and_then(Value::as_str))
            .map(str::to_owned)
    });
    let text = message.unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    shorten(&text, 500)
}

/// How long to wait before the next attempt, as the endpoint's `Retry-After` says.
#[derive(Debug, PartialEq)]
enum Wait {
    /// No usable `Retry-After` (none, negative, not a number, a past date): kennis's backoff.
    Backoff,
    After(Duration),
    /// Longer than [`MAX_RETRY_AFTER`]: the run ends. The header's value, shortened.
    TooLong(String),
}

/// Reads `Retry-After` (seconds, possibly fractional, or an HTTP date judged against `now`)
/// without trusting it: any number parses without panicking, and waits are capped.
fn retry_after(headers: &reqwest::header::HeaderMap, now: jiff::Timestamp) -> Wait {
    let Some(v) = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    else {
        return Wait::Backoff;
    };
    let too_long = || Wait::TooLong(shorten(v, 40));
    if let Ok(secs) = v.parse::<f64>() {
        // NaN, infinities and negative waits are not waits.
        if !secs.is_finite() || secs < 0.0 {
            return Wait::Backoff;
        }
        if secs > MAX_RETRY_AFTER.as_secs_f64() {
            return too_long();
        }
        return Duration::try_from_secs_f64(secs).map_or(Wait::Backoff, Wait::After);
    }
    // An HTTP date: the wait until then.
    let Some(wait) = until_http_date(v, now) else {
        return Wait::Backoff;
    };
    if wait.is_negative() {
        return Wait::Backoff;
    }
    match Duration::try_from(wait) {
        Ok(d) if d <= MAX_RETRY_AFTER => Wait::After(d),
        _ => too_long(),
    }
}

/// The time from `now` until an HTTP date (IMF-fixdate, read as civil time so that dates up to
/// the year 9999 are understood, or any RFC 2822 date).
fn until_http_date(v: &str, now: jiff::Timestamp) -> Option<jiff::SignedDuration> {
    let fixdate =
        jiff::fmt::strtime::parse("%a, %d %b %Y %H:%M:%S GMT", v).and_then(|t| t.to_datetime());
    if let Ok(when) = fixdate {
        let now = now.to_zoned(jiff::tz::TimeZone::UTC).datetime();
        return Some(when.duration_since(now));
    }
    let when = jiff::fmt::rfc2822::parse(v).ok()?;
    Some(when.timestamp().duration_since(now))
}

/// The size in bytes of a value's JSON, counted without keeping the text.
fn json_size(value: &impl Serialize) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .saturating_add(u64::try_from(buf.len()).unwrap_or(u64::MAX));
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => u64::MAX,
    }
}

/// What one request to the model carries, serialised straight from the conversation (which
/// is never copied for it).
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [Value],
    tools: &'a [Value],
    tool_choice: &'static str,
}

/// The conversation with the model, kept under `[llm] max_conversation_bytes`.
struct Conversation {
    messages: Vec<Value>,
    bytes: u64,
    limit: u64,
}

impl Conversation {
    fn new(limit: u64) -> Conversation {
        Conversation {
            messages: Vec::new(),
            bytes: 0,
            limit,
        }
    }

    /// Adds a message, or says why the run ends when the conversation would pass its limit.
    fn push(&mut self, message: Value) -> Result<(), String> {
        self.bytes = self.bytes.saturating_add(json_size(&message));
        if self.bytes > self.limit {
            return Err(format!(
                "the conversation with the model grew past {} bytes ([llm] max_conversation_bytes); the run was stopped",
                self.limit
            ));
        }
        self.messages.push(message);
        Ok(())
    }
}

/// One attempt at `POST {url}/chat/completions`.
async fn attempt(
    call: &Call<'_>,
    endpoint: &str,
    body: &[u8],
) -> Result<ChatResponse, CallFailure> {
    let key = call.key;
    let mut request = call
        .client
        .post(endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_vec());
    if let Some(k) = key {
        request = request.bearer_auth(k);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            let why = super::protocol::describe(e);
            return Err(CallFailure::Transient(
                redact(&format!("failed: {why}"), key),
                Wait::Backoff,
            ));
        }
    };
    let status = response.status();
    let wait = retry_after(response.headers(), call.now);
    let body = match bounded_body(response, call.max_reply).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            return Err(CallFailure::Fatal(format!(
                "answered {status} with more than {} bytes ([llm] max_reply_bytes); the rest was not read and the run was stopped",
                call.max_reply
            )));
        }
        Err(BodyError::Read(e)) => {
            return Err(CallFailure::Transient(
                redact(&format!("the answer could not be read: {e}"), key),
                Wait::Backoff,
            ));
        }
    };
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

/// What every request of one run shares.
struct Call<'a> {
    /// The run's job, for the log.
    job: u64,
    client: &'a reqwest::Client,
    key: Option<&'a str>,
    max_reply: u64,
    /// The server's clock when the run started (for `Retry-After` dates).
    now: jiff::Timestamp,
}

/// A model request with retries on 429, 5xx and lost connections. A request that gives up is
/// logged with the endpoint's address; the reason returned names the endpoint as `target`
/// shows it.
async fn complete(
    call: &Call<'_>,
    target: &Target,
    body: &[u8],
    rec: &Recorder<'_>,
) -> Result<ChatResponse, String> {
    let endpoint = format!("{}/chat/completions", target.url);
    let shown = &target.shown;
    let gave_up = |reason: String| {
        let url = crate::roster::without_secrets(&endpoint);
        tracing::warn!(job = call.job, %url, %reason, "a model request gave up");
        reason
    };
    let mut backoff = BACKOFF_START;
    let mut n: u32 = 0;
    loop {
        n = n.saturating_add(1);
        let (reason, wait) = match attempt(call, &endpoint, body).await {
            Ok(r) => return Ok(r),
            Err(CallFailure::Fatal(reason)) => return Err(gave_up(format!("{shown} {reason}"))),
            Err(CallFailure::Transient(reason, wait)) => (reason, wait),
        };
        if n >= MAX_ATTEMPTS {
            return Err(gave_up(format!(
                "{shown} failed {MAX_ATTEMPTS} times in a row; the last time it {reason}"
            )));
        }
        let wait = match wait {
            Wait::Backoff => backoff,
            Wait::After(d) => d,
            Wait::TooLong(asked) => {
                return Err(gave_up(format!(
                    "{shown} {reason}, and asks to wait (Retry-After: {asked}) longer than kennis waits ({} s); the run was stopped",
                    MAX_RETRY_AFTER.as_secs()
                )));
            }
        };
        rec.note(Step::Retry {
            reason: reason.clone(),
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        });
        tokio::time::sleep(wait).await;
        backoff = backoff.saturating_mul(2).min(MAX_RETRY_AFTER);
    }
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
            if options.iter().any(|o| {
                !o.get("option_id").is_some_and(Value::is_string)
                    || !o.get("label").is_some_and(Value::is_string)
            }) {
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
    let target = match target(&app.config.llm, settings, job) {
        Ok(t) => t,
        Err(reason) => return Outcome::Failed(reason),
    };
    let system = settings
        .system_prompt
        .clone()
        .unwrap_or_else(|| default_system_prompt(agent, job));
    let mut conversation = Conversation::new(app.config.llm.max_conversation_bytes);
    for message in [
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": user}),
    ] {
        if let Err(reason) = conversation.push(message) {
            return Outcome::Failed(reason);
        }
    }
    let offer = tool_offer(feature_job, app.kb_index.with_extracted());
    let caller = Caller::agent(agent.org_id, agent.id, job.job_id);
    let mut state = FeatureState {
        status: job
            .extra
            .get("feature_request")
            .and_then(|r| r.get("status"))
            .and_then(Value::as_str)
            .and_then(feature::parse_status)
            .unwrap_or(Status::Pending),
        asked: false,
    };
    let client = match http_client() {
        Ok(c) => c,
        Err(reason) => return Outcome::Failed(reason),
    };
    let call = Call {
        job: job.job_id,
        client,
        key: target.key.as_deref(),
        max_reply: app.config.llm.max_reply_bytes,
        now: app.clock.now(),
    };
    let mut steps: u32 = 0;
    loop {
        let request = ChatRequest {
            model: &settings.model,
            messages: &conversation.messages,
            tools: &offer,
            tool_choice: "auto",
        };
        let body = match serde_json::to_vec(&request) {
            Ok(b) => b,
            Err(e) => return Outcome::Failed(format!("the request could not be written: {e}")),
        };
        let asked_at = Instant::now();
        let reply = complete(&call, &target, &body, &rec).await;
        drop(body);
        let reply = match reply {
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
            duration_ms: u64::try_from(asked_at.elapsed().as_millis()).unwrap_or(u64::MAX),
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
        if usize::try_from(steps)
            .unwrap_or(usize::MAX)
            .saturating_add(calls.len())
            > usize::try_from(settings.max_steps).unwrap_or(usize::MAX)
        {
            return Outcome::Failed(format!(
                "the model asked for more than {} tool calls (--max-steps); the run was stopped after {steps}",
                settings.max_steps
            ));
        }
        let asked = json!({
            "role": "assistant",
            "content": content,
            "tool_calls": notes.iter().map(|n| json!({
                "id": n.id, "type": "function",
                "function": {"name": n.name, "arguments": n.arguments}})).collect::<Vec<_>>(),
        });
        if let Err(reason) = conversation.push(asked) {
            return Outcome::Failed(reason);
        }
        for (call, note) in calls.iter().zip(&notes) {
            steps = steps.saturating_add(1);
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
                duration_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
            let answer = json!({"role": "tool", "tool_call_id": note.id, "content": reply});
            if let Err(reason) = conversation.push(answer) {
                return Outcome::Failed(reason);
            }
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
    fn retry_after_is_read_without_trusting_it() {
        let now: jiff::Timestamp = "2026-11-25T12:00:00Z".parse().unwrap();
        let wait = |v: &str| {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert(reqwest::header::RETRY_AFTER, v.parse().unwrap());
            retry_after(&h, now)
        };
        assert_eq!(wait("2"), Wait::After(Duration::from_secs(2)));
        assert_eq!(wait(" 1.5 "), Wait::After(Duration::from_millis(1500)));
        assert_eq!(wait("1e-400"), Wait::After(Duration::ZERO));
        for hostile in [
            "-5",
            "NaN",
            "inf",
            "-inf",
            "soon",
            "",
            "Wed, 25 Nov 2026 11:00:00 GMT",
        ] {
            assert_eq!(wait(hostile), Wait::Backoff, "{hostile}");
        }
        for too_long in [
            "1e20",
            "121",
            "18446744073709551616",
            "1.7976931348623157e308",
            "Fri, 31 Dec 9999 23:59:59 GMT",
        ] {
            assert!(matches!(wait(too_long), Wait::TooLong(_)), "{too_long}");
        }
        assert_eq!(
            wait("Wed, 25 Nov 2026 12:00:30 GMT"),
            Wait::After(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(&reqwest::header::HeaderMap::new(), now),
            Wait::Backoff
        );
    }

    #[test]
    fn the_conversation_stops_at_its_limit_and_counts_json_bytes() {
        let message = json!({"role": "user", "content": "hallo"});
        assert_eq!(json_size(&message), message.to_string().len() as u64);
        let mut c = Conversation::new(100);
        c.push(message.clone()).unwrap();
        c.push(message.clone()).unwrap();
        let err = c.push(json!({"content": "x".repeat(100)})).unwrap_err();
        assert!(err.contains("max_conversation_bytes"), "{err}");
        assert_eq!(
            c.messages.len(),
            2,
            "the message over the limit was not kept"
        );
    }

    #[test]
    fn agents_stored_before_endpoints_existed_still_load() {
        let old = json!({"url": "http://127.0.0.1:11434/v1", "model": "m",
                         "api_key_env": "KENNIS_LLM_OLLAMA", "max_steps": 5, "max_tokens": 1000});
        let s: LlmSettings = serde_json::from_value(old).unwrap();
        assert_eq!(s.endpoint, None);
        let job = Job {
            job_id: 1,
            kind: "run",
            organisation: "acme".into(),
            agent: super::super::protocol::JobAgent {
                id: 1,
                name: "Model".into(),
            },
            instructions: String::new(),
            extra: serde_json::Map::new(),
        };
        let t = target(&LlmConfig::default(), &s, &job);
        // Its own URL, and the key from its own variable (unset here: a failure that names
        // neither, as the result is read outside the server; the log names the variable).
        assert_eq!(
            t.err().as_deref(),
            Some("the model's address has no usable API key (the server's log says why)")
        );
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
