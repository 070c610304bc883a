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

pub(super) use crate::outbound::{BodyError, bounded_body, describe};

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
