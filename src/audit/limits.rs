//! Hourly tool limits per organisation. Only calls that succeed are counted, so a refused call
//! does not use up the budget; the refusal says when the oldest counted call leaves the hour.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

pub const HOUR: SignedDuration = SignedDuration::from_secs(3600);

/// The hourly limit of a tool, if it has one.
pub fn hourly_limit(tool: &str) -> Option<usize> {
    match tool {
        "kennisbank_write" => Some(300),
        "feature_request_create" => Some(30),
        "feature_request_reply" => Some(60),
        _ => None,
    }
}

/// The tools that have an hourly limit.
const LIMITED: [&str; 3] = [
    "kennisbank_write",
    "feature_request_create",
    "feature_request_reply",
];

/// Successful calls of the last hour per (organisation, tool).
#[derive(Default)]
pub struct ToolLimits {
    calls: Mutex<HashMap<(u64, &'static str), VecDeque<Timestamp>>>,
}

impl ToolLimits {
    /// `Err(seconds)` when the organisation has used up the tool's hour.
    pub fn check(&self, org_id: u64, tool: &'static str, now: Timestamp) -> Result<(), u64> {
        let Some(limit) = hourly_limit(tool) else {
            return Ok(());
        };
        let mut calls = self.calls.lock().expect("limits lock");
        let log = calls.entry((org_id, tool)).or_default();
        while log.front().is_some_and(|t| *t + HOUR <= now) {
            log.pop_front();
        }
        if log.len() >= limit {
            let oldest = *log.front().expect("non-empty at the limit");
            let wait = (oldest + HOUR).duration_since(now).as_secs().max(1);
            return Err(wait as u64);
        }
        Ok(())
    }

    /// Rebuilds the last hour's counts from the audit log, so a restart does not hand every
    /// organisation a fresh hour. Every successful call is audited, which makes the audit log
    /// the durable record of what the limits count.
    pub fn restore(
        store: &crate::store::Store,
        now: Timestamp,
    ) -> Result<ToolLimits, crate::store::StoreError> {
        let limits = ToolLimits::default();
        let orgs = store.read(|tx| tx.scan_keys(crate::store::ORGS, b"", usize::MAX))?;
        for org_id in orgs.iter().filter_map(|k| crate::store::key::id_at(k, 0)) {
            let records = store.read(|tx| super::recent(tx, org_id, now - HOUR))?;
            for r in records {
                if r.outcome != super::Outcome::Ok {
                    continue;
                }
                if let Some(tool) = LIMITED.iter().find(|t| **t == r.tool) {
                    limits.record(org_id, tool, r.at);
                }
            }
        }
        Ok(limits)
    }

    /// Counts one successful call.
    pub fn record(&self, org_id: u64, tool: &'static str, now: Timestamp) {
        if hourly_limit(tool).is_some() {
            self.calls
                .lock()
                .expect("limits lock")
                .entry((org_id, tool))
                .or_default()
                .push_back(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_window_counts_successes() {
        let l = ToolLimits::default();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        for i in 0..30 {
            assert!(l.check(1, "feature_request_create", t0).is_ok());
            l.record(
                1,
                "feature_request_create",
                t0 + SignedDuration::from_secs(i),
            );
        }
        let t1 = t0 + SignedDuration::from_secs(600);
        assert_eq!(l.check(1, "feature_request_create", t1), Err(3000));
        assert!(
            l.check(2, "feature_request_create", t1).is_ok(),
            "per organisation"
        );
        assert!(l.check(1, "feature_request_create", t0 + HOUR).is_ok());
        for tool in LIMITED {
            assert!(hourly_limit(tool).is_some(), "{tool}");
        }
    }
}
