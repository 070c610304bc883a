//! What keeps an organisation's in-flight work from outliving its removal. A connector call
//! (or an agent's tool call) passes its checks, then runs, then queues its audit record for
//! the batch writer: if the organisation's removal begins in between, the call's writes and
//! its record could land after the removal swept their tables, leaving records (an audit
//! record naming a path, a document) of an organisation that no longer exists.
//!
//! So such work holds a [`Pass`] of its organisation from its checks to its last queued
//! record, and the removal [`close`](OrgGate::close)s the organisation once it is hidden:
//! from then on no pass is given out for it, and `close` returns when every pass out has come
//! back (or after a generous bound, logged, so a stuck call cannot stop a removal). Then the
//! batch writer is flushed and the sweeps find everything.

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a removal waits for in-flight calls of the organisation (a tool call's own
/// limits keep it far shorter).
pub const CLOSE_WAIT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct State {
    /// Organisations whose removal has begun (ids are never reused).
    closed: HashSet<u64>,
    /// Passes out, per organisation.
    out: HashMap<u64, usize>,
}

/// The organisations whose work may go on, and the passes out (see the module comment).
#[derive(Default)]
pub struct OrgGate {
    state: Mutex<State>,
    returned: Condvar,
}

/// Work of one organisation under way; dropping it gives the pass back.
pub struct Pass<'a> {
    gate: &'a OrgGate,
    org_id: u64,
}

impl OrgGate {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pass for work of organisation `org_id`; `None` once its removal has begun.
    pub fn enter(&self, org_id: u64) -> Option<Pass<'_>> {
        let mut state = self.lock();
        if state.closed.contains(&org_id) {
            return None;
        }
        *state.out.entry(org_id).or_default() += 1;
        Some(Pass { gate: self, org_id })
    }

    /// The removal of organisation `org_id` has begun: no more passes for it; returns when
    /// every pass out has come back, or after `wait` (then `false`, and logged).
    pub fn close(&self, org_id: u64, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut state = self.lock();
        state.closed.insert(org_id);
        while state.out.get(&org_id).is_some_and(|n| *n > 0) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    org = org_id,
                    calls = state.out.get(&org_id).copied().unwrap_or(0),
                    "calls of an organisation being removed did not end in time; going on"
                );
                return false;
            }
            state = self
                .returned
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        if let Some(n) = state.out.get_mut(&self.org_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.out.remove(&self.org_id);
            }
        }
        drop(state);
        self.gate.returned.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn close_waits_for_the_passes_out_and_refuses_new_ones() {
        let gate = OrgGate::default();
        let other = gate.enter(2).unwrap();
        let pass = gate.enter(1).unwrap();
        let closed = AtomicBool::new(false);
        std::thread::scope(|s| {
            let closer = s.spawn(|| {
                let all_back = gate.close(1, Duration::from_secs(600));
                closed.store(true, Ordering::SeqCst);
                all_back
            });
            // Once the organisation is closed, no new pass; the closer still waits for ours.
            while gate.enter(1).is_some() {
                std::thread::yield_now();
            }
            assert!(!closed.load(Ordering::SeqCst), "returned with a pass out");
            assert!(gate.enter(2).is_some(), "another organisation goes on");
            drop(pass);
            assert!(closer.join().unwrap());
        });
        assert!(gate.enter(1).is_none());
        drop(other);
        // A pass that never comes back stops the wait at its bound.
        let stuck = gate.enter(3).unwrap();
        assert!(!gate.close(3, Duration::from_millis(1)));
        drop(stuck);
    }
}
