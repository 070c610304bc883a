//! Feature requests, of which a trigger run is one kind (DESIGN.md "Runs"). Both kinds share
//! one record type and one id sequence for the whole service, so a run's `featureRequestId` is
//! a feature-request id.
//!
//! Fields that only feature requests use (app, title, conversation, questions, …) carry
//! `#[serde(default)]`, so run records written before them still read without a migration.
//! [`apps`] holds the apps requests are filed for, [`feature`] the rules of a feature request's
//! life (limits, answers, status transitions, agent events), [`attachments`] what the portal
//! adds to a request, [`callback`] the result callbacks of runs, and [`service`] the
//! operations the connector and the portal share.

pub mod apps;
pub mod attachments;
pub mod callback;
pub mod feature;
pub mod service;

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::store::{FEATURE_REQUESTS, REQUESTS, StoreError, WriteTx, key};

/// The one id sequence shared by runs and feature requests.
pub const SEQUENCE: &str = "feature_request";

/// One event from an agent while it works on a request or run (the agent protocol's events,
/// DESIGN.md "Agent protocol"): a message or result for the conversation, a question, a new
/// status. [`feature::apply_event`] says what each does to a feature request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    Message {
        text: String,
    },
    Question {
        text: String,
        #[serde(default)]
        options: Vec<serde_json::Value>,
        #[serde(default)]
        allow_other: bool,
    },
    Status {
        status: String,
    },
    Result {
        text: String,
    },
}

/// What a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A run started by an event trigger, executed by a generic agent.
    Run,
    /// A feature request filed for an app (issue 6).
    FeatureRequest,
}

/// Status of a request. Runs use `queued` … `timed_out`; feature requests use `pending` …
/// `completed` and share `cancelled` (see [`feature::FEATURE_STATUSES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
    Pending,
    Clarifying,
    Implementing,
    AwaitingFeedback,
    Review,
    Completed,
}

impl Status {
    /// Every status: a run's, then a feature request's (`cancelled` is both).
    pub const ALL: [Status; 12] = [
        Status::Queued,
        Status::Running,
        Status::Succeeded,
        Status::Failed,
        Status::Cancelled,
        Status::TimedOut,
        Status::Pending,
        Status::Clarifying,
        Status::Implementing,
        Status::AwaitingFeedback,
        Status::Review,
        Status::Completed,
    ];

    /// A final status never changes again; a run is active (in flight) until it has one.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Status::Succeeded
                | Status::Failed
                | Status::Cancelled
                | Status::TimedOut
                | Status::Completed
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::TimedOut => "timed_out",
            Status::Pending => "pending",
            Status::Clarifying => "clarifying",
            Status::Implementing => "implementing",
            Status::AwaitingFeedback => "awaiting_feedback",
            Status::Review => "review",
            Status::Completed => "completed",
        }
    }
}

/// Who wrote a conversation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Person,
    Agent,
}

/// One message of a feature request's conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The person's name (or email) or the agent's name, as it was when written.
    pub author: String,
    pub role: Role,
    pub text: String,
    pub at: Timestamp,
}

/// One option of a multiple-choice question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionOption {
    pub option_id: String,
    pub label: String,
}

/// A multiple-choice question the agent asked; open until answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// 1, 2, … within the request.
    pub question_id: u64,
    pub text: String,
    pub options: Vec<QuestionOption>,
    pub allow_other: bool,
    pub asked_at: Timestamp,
    #[serde(default)]
    pub answered: bool,
}

/// A person's answer to a question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub question_id: u64,
    pub option_ids: Vec<String>,
    #[serde(default)]
    pub other: Option<String>,
}

/// Where the feature agent's work on a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Stored and waiting for a worker.
    Queued,
    /// A worker is executing the agent.
    Running,
}

/// One stored request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub org_id: u64,
    pub kind: Kind,
    pub agent_id: u64,
    /// The trigger that started a run; `None` for feature requests.
    #[serde(default)]
    pub trigger_id: Option<uuid::Uuid>,
    /// The event key of the delivery that started a run, if it carried one.
    #[serde(default)]
    pub event_key: Option<String>,
    /// What the agent is asked to do (for a run: the trigger's instructions plus payload).
    #[serde(default)]
    pub instructions: String,
    pub status: Status,
    /// Null until the status is final; then the agent's answer or why it failed.
    #[serde(default)]
    pub result: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// How often a worker started executing it (recovery after a crash counts on this).
    #[serde(default)]
    pub attempts: u32,
    /// When a worker last started executing it (a trigger's cooldown counts from here).
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// The app a feature request is filed for.
    #[serde(default)]
    pub app_id: Option<u64>,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: String,
    /// The person who filed a feature request.
    #[serde(default)]
    pub author_id: Option<u64>,
    #[serde(default)]
    pub conversation: Vec<Message>,
    #[serde(default)]
    pub questions: Vec<Question>,
    /// Every answer given so far, oldest first (the agent receives them all).
    #[serde(default)]
    pub answers: Vec<Answer>,
    /// The feature agent's pending or running job on this request, if any.
    #[serde(default)]
    pub job: Option<JobState>,
    /// Something new arrived while the agent was running: run it again when it finishes.
    #[serde(default)]
    pub redispatch: bool,
    /// Settings set in the portal (never shown through the connector).
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
}

impl Request {
    pub fn open_questions(&self) -> impl Iterator<Item = &Question> {
        self.questions.iter().filter(|q| !q.answered)
    }
}

/// Why a request operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Unknown, or not visible to the caller's organisation: the same answer either way.
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    InvalidInput(String),
    /// The app is draft or archived.
    #[error("{0}")]
    AppClosed(String),
    #[error("unknown organisation `{0}`")]
    UnknownOrg(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Stores a new queued run inside the caller's transaction and returns it.
pub fn create_run(
    tx: &mut WriteTx,
    org_id: u64,
    agent_id: u64,
    trigger_id: uuid::Uuid,
    event_key: Option<String>,
    instructions: String,
    now: Timestamp,
) -> Result<Request, StoreError> {
    let run = Request {
        id: tx.next_id(SEQUENCE)?,
        org_id,
        kind: Kind::Run,
        agent_id,
        trigger_id: Some(trigger_id),
        event_key,
        instructions,
        status: Status::Queued,
        result: None,
        created_at: now,
        updated_at: now,
        attempts: 0,
        ..Request::blank()
    };
    tx.put(REQUESTS, &key::id(run.id), &run)?;
    Ok(run)
}

impl Request {
    /// A request with every optional field empty; callers fill in the rest.
    fn blank() -> Request {
        Request {
            id: 0,
            org_id: 0,
            kind: Kind::FeatureRequest,
            agent_id: 0,
            trigger_id: None,
            event_key: None,
            instructions: String::new(),
            status: Status::Pending,
            result: None,
            created_at: Timestamp::UNIX_EPOCH,
            updated_at: Timestamp::UNIX_EPOCH,
            attempts: 0,
            started_at: None,
            app_id: None,
            title: String::new(),
            description: String::new(),
            author_id: None,
            conversation: Vec::new(),
            questions: Vec::new(),
            answers: Vec::new(),
            job: None,
            redispatch: false,
            settings: BTreeMap::new(),
        }
    }
}

/// Reads one request (in a read or a write transaction).
pub fn get(tx: &impl crate::store::Read, id: u64) -> Result<Option<Request>, StoreError> {
    tx.get(REQUESTS, &key::id(id))
}

/// [`get`] for a request read again and again, decoded once while its record stays the same
/// (`store::memo`).
pub fn get_memo(
    tx: &impl crate::store::Read,
    id: u64,
    memo: &crate::store::memo::Memo<Request>,
) -> Result<Option<Request>, StoreError> {
    tx.get_memo(REQUESTS, &key::id(id), memo)
}

/// Writes a changed request back (and, for a feature request, its place in the
/// organisation's list). A run written with a final status releases its result callback in
/// this same transaction ([`callback::release_in`]).
pub fn put(tx: &mut WriteTx, request: &Request) -> Result<(), StoreError> {
    callback::release_in(tx, request)?;
    if request.kind == Kind::FeatureRequest {
        tx.put(
            FEATURE_REQUESTS,
            &key::pair(request.org_id, request.id),
            &true,
        )?;
    }
    tx.put(REQUESTS, &key::id(request.id), request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_use_the_documented_names_and_finality() {
        let names: Vec<_> = Status::ALL
            .iter()
            .map(|s| {
                let json = serde_json::to_value(s).unwrap();
                assert_eq!(json, s.as_str(), "one name in JSON and as_str");
                (s.as_str(), s.is_final())
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("queued", false),
                ("running", false),
                ("succeeded", true),
                ("failed", true),
                ("cancelled", true),
                ("timed_out", true),
                ("pending", false),
                ("clarifying", false),
                ("implementing", false),
                ("awaiting_feedback", false),
                ("review", false),
                ("completed", true),
            ]
        );
    }

    #[test]
    fn an_older_record_without_optional_fields_still_reads() {
        let r: Request = serde_json::from_value(serde_json::json!({
            "id": 1, "org_id": 2, "kind": "feature_request", "agent_id": 3,
            "status": "queued", "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(r.trigger_id, None);
        assert_eq!(r.result, None);
        assert_eq!(r.attempts, 0);
    }
}
