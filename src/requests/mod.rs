//! Feature requests, of which a trigger run is one kind (DESIGN.md "Runs"). Both kinds share
//! one record type and one id sequence for the whole service, so a run's `featureRequestId` is
//! a feature-request id.
//!
//! The record is meant to grow: fields that only feature requests need (app, title,
//! conversation, questions, …) can be added with `#[serde(default)]` and old records still
//! read, so no migration is needed. Only what runs need is here.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::store::{REQUESTS, StoreError, WriteTx, key};

/// The one id sequence shared by runs and feature requests.
pub const SEQUENCE: &str = "feature_request";

/// What a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A run started by an event trigger, executed by a generic agent.
    Run,
    /// A feature request filed for an app (issue 6).
    FeatureRequest,
}

/// Status of a request. The run statuses are the first six; issue 6 adds the feature-request
/// statuses as further variants (old records keep reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl Status {
    /// A final status never changes again; a run is active (in flight) until it has one.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Status::Succeeded | Status::Failed | Status::Cancelled | Status::TimedOut
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
        }
    }
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
}

/// Why a request operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("no such request {0}")]
    NotFound(u64),
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
    };
    tx.put(REQUESTS, &key::id(run.id), &run)?;
    Ok(run)
}

/// Reads one request.
pub fn get(tx: &crate::store::ReadTx, id: u64) -> Result<Option<Request>, StoreError> {
    tx.get(REQUESTS, &key::id(id))
}

/// Reads one request inside a write transaction.
pub fn get_for_update(tx: &WriteTx, id: u64) -> Result<Option<Request>, StoreError> {
    tx.get(REQUESTS, &key::id(id))
}

/// Writes a changed request back.
pub fn put(tx: &mut WriteTx, request: &Request) -> Result<(), StoreError> {
    tx.put(REQUESTS, &key::id(request.id), request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_use_the_documented_names_and_finality() {
        let names: Vec<_> = [
            Status::Queued,
            Status::Running,
            Status::Succeeded,
            Status::Failed,
            Status::Cancelled,
            Status::TimedOut,
        ]
        .iter()
        .map(|s| (serde_json::to_value(s).unwrap(), s.is_final()))
        .collect();
        assert_eq!(
            names,
            vec![
                (serde_json::json!("queued"), false),
                (serde_json::json!("running"), false),
                (serde_json::json!("succeeded"), true),
                (serde_json::json!("failed"), true),
                (serde_json::json!("cancelled"), true),
                (serde_json::json!("timed_out"), true),
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
