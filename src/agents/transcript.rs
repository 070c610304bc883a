//! What an agent job did: the model's messages, each tool call with its arguments and a
//! shortened result, retries, tokens and timings. Kept per request id in `RUN_TRANSCRIPTS`
//! (a feature request's jobs add to the same transcript), shown on the run's portal page and
//! by `kennis run show`. Texts are shortened so a transcript stays small; it never holds the
//! API key (the key is only ever put in a request header).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::protocol::AgentEvent;
use crate::store::{RUN_TRANSCRIPTS, ReadTx, StoreError, WriteTx, key};

/// Most characters of a text (model message, tool arguments or result) a transcript keeps.
pub const TEXT_KEPT: usize = 2000;
/// Most entries one transcript keeps; older ones are dropped (and counted) first.
pub const ENTRIES_KEPT: usize = 500;

/// `text` cut to `max` characters with a visible marker naming the full length.
pub fn shorten(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… [shortened: {max} of {total} characters shown]")
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallNote {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// What happened at one point of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Step {
    /// A job started: the executor, the model, and the instructions it was given.
    Job {
        executor: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        instructions: String,
    },
    /// One answer of the model.
    Model {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default)]
        tool_calls: Vec<CallNote>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        prompt_tokens: u64,
        completion_tokens: u64,
        duration_ms: u64,
    },
    /// One tool call, executed in-process.
    Tool {
        call_id: String,
        name: String,
        arguments: String,
        ok: bool,
        result: String,
        duration_ms: u64,
    },
    /// The endpoint refused or failed for a while; the request is sent again after `wait_ms`.
    Retry { reason: String, wait_ms: u64 },
    /// An event of the agent protocol (what `command` and `http` agents, or the model's
    /// event functions, said).
    Event { event: AgentEvent },
    /// How the job ended.
    End { status: String, note: String },
}

/// One entry: when it happened, milliseconds since the job started, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub at: Timestamp,
    pub elapsed_ms: u64,
    #[serde(flatten)]
    pub step: Step,
}

/// A job's (or a feature request's jobs') record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    pub entries: Vec<Entry>,
    /// Tokens as the endpoint's `usage` reported them, over every job.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Tool calls made, over every job.
    pub tool_calls: u64,
    /// Entries left out because the transcript was full (the oldest go first).
    #[serde(default)]
    pub dropped: u64,
}

impl Transcript {
    pub fn push(&mut self, at: Timestamp, elapsed_ms: u64, step: Step) {
        if let Step::Model {
            prompt_tokens,
            completion_tokens,
            ..
        } = &step
        {
            // Counts come from the endpoint: add without overflowing.
            self.prompt_tokens = self.prompt_tokens.saturating_add(*prompt_tokens);
            self.completion_tokens = self.completion_tokens.saturating_add(*completion_tokens);
            self.total_tokens = self
                .total_tokens
                .saturating_add(prompt_tokens.saturating_add(*completion_tokens));
        }
        if matches!(step, Step::Tool { .. }) {
            self.tool_calls = self.tool_calls.saturating_add(1);
        }
        self.entries.push(Entry {
            at,
            elapsed_ms,
            step,
        });
        self.keep_last();
    }

    /// Drops the oldest entries past [`ENTRIES_KEPT`], counting them.
    fn keep_last(&mut self) {
        let extra = self.entries.len().saturating_sub(ENTRIES_KEPT);
        if extra > 0 {
            self.entries.drain(..extra);
            self.dropped = self
                .dropped
                .saturating_add(u64::try_from(extra).unwrap_or(u64::MAX));
        }
    }

    /// Adds `newer` (a job's entries) to this stored transcript.
    pub fn extend(&mut self, newer: Transcript) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(newer.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(newer.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(newer.total_tokens);
        self.tool_calls = self.tool_calls.saturating_add(newer.tool_calls);
        self.dropped = self.dropped.saturating_add(newer.dropped);
        self.entries.extend(newer.entries);
        self.keep_last();
    }
}

/// The transcript of request `id`, if a job of it has ended.
pub fn get_transcript(tx: &ReadTx, id: u64) -> Result<Option<Transcript>, StoreError> {
    tx.get(RUN_TRANSCRIPTS, &key::id(id))
}

/// Adds a job's transcript to request `id`'s, inside the caller's transaction.
pub fn append(tx: &mut WriteTx, id: u64, job: Transcript) -> Result<(), StoreError> {
    let mut all: Transcript = tx.get(RUN_TRANSCRIPTS, &key::id(id))?.unwrap_or_default();
    all.extend(job);
    tx.put(RUN_TRANSCRIPTS, &key::id(id), &all)
}
