//! Hourly tool limits per organisation. A call reserves its place in the hour before it runs
//! (atomically, so parallel calls cannot overrun the limit) and gives it back when it is
//! refused, so only calls that succeed use up the budget; a refusal says when the oldest counted
//! call leaves the hour.

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

/// One counted call, taken before the tool runs; give it back with [`ToolLimits::release`]
/// when the call is refused or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    org_id: u64,
    tool: &'static str,
    at: Timestamp,
}

impl ToolLimits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, &'static str), VecDeque<Timestamp>>> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes one call of the tool's hour for the organisation, atomically: at most `limit`
    /// calls are ever counted in an hour, however many run at once. `Ok(None)` for a tool
    /// without a limit; `Err(seconds)` when the hour is used up (until its oldest call leaves).
    pub fn reserve(
        &self,
        org_id: u64,
        tool: &'static str,
        now: Timestamp,
    ) -> Result<Option<Reservation>, u64> {
        let Some(limit) = hourly_limit(tool) else {
            return Ok(None);
        };
        let mut calls = self.lock();
        let log = calls.entry((org_id, tool)).or_default();
        while log.front().is_some_and(|t| *t + HOUR <= now) {
            log.pop_front();
        }
        if log.len() >= limit {
            let wait = log.front().map_or(1, |oldest| {
                (*oldest + HOUR).duration_since(now).as_secs().max(1)
            });
            return Err(wait.unsigned_abs());
        }
        // Kept in time order: a reservation may be stamped a little before one already there.
        let at = log.back().map_or(now, |last| now.max(*last));
        log.push_back(at);
        Ok(Some(Reservation { org_id, tool, at }))
    }

    /// Gives back a reservation whose call did not succeed, so it does not use up the hour.
    pub fn release(&self, r: Reservation) {
        let mut calls = self.lock();
        if let Some(log) = calls.get_mut(&(r.org_id, r.tool))
            && let Some(i) = log.iter().rposition(|t| *t == r.at)
        {
            log.remove(i);
        }
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

    /// Counts one successful call (rebuilding from the audit log).
    fn record(&self, org_id: u64, tool: &'static str, at: Timestamp) {
        if hourly_limit(tool).is_some() {
            self.lock().entry((org_id, tool)).or_default().push_back(at);
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
            assert!(
                l.reserve(
                    1,
                    "feature_request_create",
                    t0 + SignedDuration::from_secs(i)
                )
                .unwrap()
                .is_some()
            );
        }
        let t1 = t0 + SignedDuration::from_secs(600);
        assert_eq!(l.reserve(1, "feature_request_create", t1), Err(3000));
        assert!(
            l.reserve(2, "feature_request_create", t1).is_ok(),
            "per organisation"
        );
        assert!(l.reserve(1, "feature_request_create", t0 + HOUR).is_ok());
        assert_eq!(l.reserve(1, "kennisbank_read", t1), Ok(None));
        for tool in LIMITED {
            assert!(hourly_limit(tool).is_some(), "{tool}");
        }
    }

    #[test]
    fn released_reservations_do_not_count() {
        let l = ToolLimits::default();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut taken = Vec::new();
        for _ in 0..30 {
            taken.push(l.reserve(1, "feature_request_create", t0).unwrap().unwrap());
        }
        assert!(l.reserve(1, "feature_request_create", t0).is_err());
        l.release(taken[3]);
        assert!(l.reserve(1, "feature_request_create", t0).is_ok());
        assert!(l.reserve(1, "feature_request_create", t0).is_err());
    }
}
