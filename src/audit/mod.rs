//! The audit record of every tool call, appended through the batch writer (durable within
//! ~100 ms, flushed on shutdown) so auditing never adds a commit to a tool call's latency.

use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::store::{AUDIT, ReadTx, StoreError, key};

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
