//! The audit record of every tool call, appended through the batch writer (durable within
//! ~100 ms, flushed on shutdown) so auditing never adds a commit to a tool call's latency —
//! and of every admin action (portal or command line), written by [`admin_in`] in the same
//! transaction as the change it records.

use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::store::{AUDIT, ReadTx, StoreError, WriteTx, key};

pub mod gate;
pub mod limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Refused,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub at: Timestamp,
    pub org_id: u64,
    /// The person and grant of a person's call; 0 for an agent's (and the grant for a
    /// personal access token's).
    pub person_id: u64,
    pub grant_id: u64,
    /// The personal access token of a person's call made with one (then `grant_id` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<u64>,
    /// The agent and its run (or feature-request job) of an agent's call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<u64>,
    pub tool: String,
    /// The path or request the call was about, when it named one.
    pub target: Option<String>,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub duration_ms: f64,
    /// An admin action's actor: the person's email, or [`OPERATOR`] for the command line.
    /// Absent on tool calls (and on records written before admin actions were audited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// An admin action's name (`member.invite`, `trigger.pause`, …); its `tool` is
    /// [`ADMIN_TOOL`]. Absent on tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// The `tool` of every admin action's record.
pub const ADMIN_TOOL: &str = "admin";
/// The actor of the command line's admin actions.
pub const OPERATOR: &str = "operator";

/// Who did an admin action: the server's operator (command line), or a person in the portal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Operator,
    Person { person_id: u64, email: String },
}

impl Actor {
    /// A person acting in the portal.
    pub fn person(person_id: u64, email: &str) -> Self {
        Actor::Person {
            person_id,
            email: email.to_owned(),
        }
    }

    /// The name an audit record gives the actor.
    pub fn name(&self) -> &str {
        match self {
            Actor::Operator => OPERATOR,
            Actor::Person { email, .. } => email,
        }
    }

    fn person_id(&self) -> u64 {
        match self {
            Actor::Operator => 0,
            Actor::Person { person_id, .. } => *person_id,
        }
    }

    /// The acting person's id, or `None` for the operator.
    pub fn acting_person(&self) -> Option<u64> {
        match self {
            Actor::Operator => None,
            Actor::Person { person_id, .. } => Some(*person_id),
        }
    }
}

/// Records an admin action of organisation `org_id` in the caller's write transaction, so the
/// record and the change commit together (or neither does).
pub fn admin_in(
    tx: &mut WriteTx,
    org_id: u64,
    actor: &Actor,
    action: &str,
    target: &str,
    now: Timestamp,
) -> Result<(), StoreError> {
    let record = AuditRecord {
        at: now,
        org_id,
        person_id: actor.person_id(),
        grant_id: 0,
        agent_id: None,
        run_id: None,
        tool: ADMIN_TOOL.to_owned(),
        target: Some(target.to_owned()),
        outcome: Outcome::Ok,
        error: None,
        duration_ms: 0.0,
        actor: Some(actor.name().to_owned()),
        action: Some(action.to_owned()),
        token_id: None,
    };
    tx.put(AUDIT, &record_key(org_id, now), &record)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Key: organisation, time, a process-wide counter — so an organisation's records scan in
/// time order and two records of the same nanosecond do not collide.
pub fn record_key(org_id: u64, at: Timestamp) -> Vec<u8> {
    let mut k = key::id(org_id).to_vec();
    k.extend_from_slice(&(at.as_nanosecond().max(0) as u64).to_be_bytes());
    k.extend_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    k
}

/// An organisation's records from `since` on, read from the key range (not the whole
/// organisation's history): what the tool limits need after a restart.
pub fn recent(tx: &ReadTx, org_id: u64, since: Timestamp) -> Result<Vec<AuditRecord>, StoreError> {
    let mut from = key::id(org_id).to_vec();
    from.extend_from_slice(&(since.as_nanosecond().max(0) as u64).to_be_bytes());
    Ok(tx
        .scan_from::<AuditRecord>(AUDIT, &key::id(org_id), &from)?
        .into_iter()
        .map(|r| r.1)
        .collect())
}

/// An organisation's records from `since` on, oldest first.
pub fn records(
    tx: &ReadTx,
    org_id: u64,
    since: Option<Timestamp>,
) -> Result<Vec<AuditRecord>, StoreError> {
    let rows: Vec<(Vec<u8>, AuditRecord)> = tx.scan(AUDIT, &key::id(org_id))?;
    Ok(rows
        .into_iter()
        .map(|r| r.1)
        .filter(|r| since.is_none_or(|s| r.at >= s))
        .collect())
}
