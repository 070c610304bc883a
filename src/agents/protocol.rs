//! The agent protocol's job and events (DESIGN.md "Agent protocol"), how a job ended, and the
//! HTTP client for agent endpoints: what every executor and the runtime share.

use std::time::Duration;

use serde::Serialize;

/// The agent as named in a job.
#[derive(Debug, Clone, Serialize)]
pub struct JobAgent {
    pub id: u64,
    pub name: String,
}

/// One job, as the agent receives it (stdin for `command`, the POST body for `http`).
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    pub job_id: u64,
    /// `run` or `feature_request`.
    pub kind: &'static str,
    /// The organisation's slug.
    pub organisation: String,
    pub agent: JobAgent,
    pub instructions: String,
    /// Further members for other kinds of jobs (issue 6: `feature_request`).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One event from an agent: what it reports about the request it works on, so the type is
/// the requests' own.
pub use crate::requests::AgentEvent;

/// Receives an agent's events as they arrive.
pub trait EventSink: Send {
    fn event(&mut self, event: AgentEvent);
}

/// How a job ended, as far as the executor can tell. What it means for the request (e.g. a run
/// without a `result` event) is the caller's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Exit 0 / HTTP 2xx.
    Completed,
    /// Non-zero exit, non-2xx, unreadable output, or the agent could not be started.
    Failed(String),
    /// The agent's timeout passed; a command was killed.
    TimedOut,
}

/// Why a bounded response body was not read.
#[derive(Debug)]
pub(super) enum BodyError {
    /// The body is (or announced itself) larger than the limit; reading stopped there.
    TooLarge,
    /// The connection failed while reading.
    Read(String),
}

/// Reads a response body of at most `limit` bytes, chunk by chunk: a larger one is refused as
/// soon as it passes the limit (or at once when its `Content-Length` says so), never buffered
/// whole.
pub(super) async fn bounded_body(
    mut response: reqwest::Response,
    limit: u64,
) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BodyError::Read(e.to_string()))?
    {
        let len = u64::try_from(body.len().saturating_add(chunk.len())).unwrap_or(u64::MAX);
        if len > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The shared client for agent endpoints: redirects are not followed (an API key must not
/// travel to another host). `Err` when no TLS back end could start (every request fails then).
pub(super) fn http_client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| format!("the HTTP client for agents could not be built: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}
