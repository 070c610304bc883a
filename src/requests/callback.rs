//! The durable half of run callbacks (DESIGN.md "Run callbacks"): which runs answer to a URL
//! when they end, when each callback is due, and what every attempt got. The sending itself
//! (signing, the guarded HTTP request, the pool) is `triggers::callback`.
//!
//! A run of a trigger with a `callback_url` gets a `waiting` record when it is created
//! ([`subscribe_in`]); the write that gives the run a final status releases it in the same
//! transaction ([`release_in`], called by `requests::put`), so a callback is never lost
//! between the run's end and a restart. A released callback is `pending` and listed in
//! `RUN_CALLBACKS_DUE` by (organisation, due time, run) until an attempt gets a 2xx answer
//! (`delivered`) or [`MAX_ATTEMPTS`] attempts in a row failed (`failed`). "Send again" makes a
//! delivered or failed callback pending once more, with the same webhook id.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{Kind, Request};
use crate::store::{RUN_CALLBACKS, RUN_CALLBACKS_DUE, Read, StoreError, WriteTx, key};

/// Attempts in a row before a callback is given up (each "send again" starts a new row).
pub const MAX_ATTEMPTS: u32 = 8;
/// The wait after the first failed attempt; each further wait is [`BACKOFF_FACTOR`] times the
/// one before, up to [`MAX_WAIT`], each varied by up to ±20 % (jitter).
pub const FIRST_WAIT: SignedDuration = SignedDuration::from_secs(30);
pub const BACKOFF_FACTOR: i64 = 8;
pub const MAX_WAIT: SignedDuration = SignedDuration::from_hours(12);
/// Attempts kept per callback (the oldest are dropped beyond this).
pub const KEPT_ATTEMPTS: usize = 100;
/// How every `webhook-id` of a callback begins. A callback is signed with its trigger's
/// signing secret, the key that trigger's signed deliveries are checked with, so a callback
/// sent on to the trigger's URL would verify as a delivery; `triggers::verify` refuses an id
/// with this prefix, so that a callback never starts a run.
pub const WEBHOOK_ID_PREFIX: &str = "msg_kennis_cb_";

/// Where a callback stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The run has not ended yet.
    Waiting,
    /// Due at `next_at`: not yet answered with a 2xx.
    Pending,
    /// A receiver answered with a 2xx.
    Delivered,
    /// Given up after [`MAX_ATTEMPTS`] failed attempts, or the URL was refused when sending.
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Pending => "pending",
            State::Delivered => "delivered",
            State::Failed => "failed",
        }
    }
}

/// One attempt to send a callback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1, 2, … over the callback's whole life.
    pub attempt: u32,
    pub at: Timestamp,
    /// The receiver's HTTP status, or 0 when no answer came (refused, timed out, not sent).
    pub status: u16,
    /// A short reason, for people.
    pub reason: String,
}

/// A run's result callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Callback {
    pub run_id: u64,
    pub org_id: u64,
    /// The trigger's `callback_url` when the run was created.
    pub url: String,
    /// `webhook-id` of every attempt.
    pub webhook_id: String,
    pub state: State,
    /// When the next attempt is due (pending only).
    pub next_at: Option<Timestamp>,
    pub attempts: Vec<Attempt>,
    /// Failed attempts since the callback became pending (the backoff counts on these).
    #[serde(default)]
    pub failures: u32,
}

/// What one attempt got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: u16,
    pub reason: String,
    /// No retry (the URL is refused, the trigger is gone).
    pub final_failure: bool,
}

impl Outcome {
    pub fn delivered(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

fn millis(t: Timestamp) -> u64 {
    u64::try_from(t.as_millisecond()).unwrap_or(0)
}

fn due_key(org_id: u64, at: Timestamp, run_id: u64) -> Vec<u8> {
    let mut k = key::pair(org_id, millis(at)).to_vec();
    k.extend_from_slice(&key::id(run_id));
    k
}

/// The wait before the next attempt after `failures` failed ones in a row, `jitter` in 0..1
/// choosing where in ±20 % it falls.
pub fn retry_wait(failures: u32, jitter: f64) -> SignedDuration {
    let steps = failures.saturating_sub(1);
    let mut wait = FIRST_WAIT;
    for _ in 0..steps {
        wait = wait.saturating_mul(BACKOFF_FACTOR as i32).min(MAX_WAIT);
    }
    let factor = 0.8 + 0.4 * jitter.clamp(0.0, 1.0);
    SignedDuration::try_from_secs_f64(wait.as_secs_f64() * factor).unwrap_or(MAX_WAIT)
}

/// A new run of a trigger with a callback URL will answer to `url` when it ends.
pub fn subscribe_in(tx: &mut WriteTx, run: &Request, url: &str) -> Result<(), StoreError> {
    let cb = Callback {
        run_id: run.id,
        org_id: run.org_id,
        url: url.to_owned(),
        webhook_id: format!("{WEBHOOK_ID_PREFIX}{}", uuid::Uuid::new_v4().simple()),
        state: State::Waiting,
        next_at: None,
        attempts: Vec::new(),
        failures: 0,
    };
    tx.put(RUN_CALLBACKS, &key::id(run.id), &cb)
}

fn schedule(tx: &mut WriteTx, cb: &mut Callback, at: Option<Timestamp>) -> Result<(), StoreError> {
    if let Some(old) = cb.next_at {
        tx.delete(RUN_CALLBACKS_DUE, &due_key(cb.org_id, old, cb.run_id))?;
    }
    cb.next_at = at;
    if let Some(at) = at {
        tx.put(RUN_CALLBACKS_DUE, &due_key(cb.org_id, at, cb.run_id), &true)?;
    }
    tx.put(RUN_CALLBACKS, &key::id(cb.run_id), cb)
}

/// Called with every write of a request: a run written with a final status releases its
/// waiting callback (due at once), in the caller's transaction.
pub fn release_in(tx: &mut WriteTx, run: &Request) -> Result<(), StoreError> {
    if run.kind != Kind::Run || !run.status.is_final() {
        return Ok(());
    }
    let Some(mut cb) = get(tx, run.id)? else {
        return Ok(());
    };
    if cb.state != State::Waiting {
        return Ok(());
    }
    cb.state = State::Pending;
    schedule(tx, &mut cb, Some(run.updated_at))
}

/// A run's callback, if it has one.
pub fn get(tx: &impl Read, run_id: u64) -> Result<Option<Callback>, StoreError> {
    tx.get(RUN_CALLBACKS, &key::id(run_id))
}

/// Callbacks due at `now`, oldest first within each organisation: up to `take(org)` of each
/// organisation with any pending, so one organisation's backlog never hides another's.
pub fn due(
    tx: &impl Read,
    now: Timestamp,
    take: impl Fn(u64) -> usize,
) -> Result<Vec<(u64, u64)>, StoreError> {
    let mut out = Vec::new();
    let mut from = key::id(0).to_vec();
    loop {
        let first = tx.range::<bool>(RUN_CALLBACKS_DUE, &from, 1)?;
        let Some(org) = first.first().and_then(|(k, _)| key::id_at(k, 0)) else {
            break;
        };
        let want = take(org);
        if want > 0 {
            let rows = tx.range::<bool>(RUN_CALLBACKS_DUE, &key::id(org), want)?;
            for (k, _) in rows {
                let (Some(o), Some(at), Some(run)) =
                    (key::id_at(&k, 0), key::id_at(&k, 8), key::id_at(&k, 16))
                else {
                    continue;
                };
                if o != org || at > millis(now) {
                    break;
                }
                out.push((org, run));
            }
        }
        match org.checked_add(1) {
            Some(next) => from = key::id(next).to_vec(),
            None => break,
        }
    }
    Ok(out)
}

/// How many callbacks are pending.
pub fn pending_count(tx: &impl Read) -> Result<u64, StoreError> {
    tx.count(RUN_CALLBACKS_DUE)
}

/// Keeps an attempt's outcome and decides what comes next: delivered, given up, or due again
/// after the backoff. Returns the callback as stored, or `None` when it is no longer pending
/// (another attempt already settled it).
pub fn record(
    tx: &mut WriteTx,
    run_id: u64,
    at: Timestamp,
    outcome: Outcome,
    jitter: f64,
) -> Result<Option<Callback>, StoreError> {
    let Some(mut cb) = get(tx, run_id)? else {
        return Ok(None);
    };
    if cb.state != State::Pending {
        return Ok(None);
    }
    let attempt = cb
        .attempts
        .last()
        .map_or(1, |a| a.attempt.saturating_add(1));
    cb.attempts.push(Attempt {
        attempt,
        at,
        status: outcome.status,
        reason: outcome.reason.chars().take(300).collect(),
    });
    if cb.attempts.len() > KEPT_ATTEMPTS {
        let extra = cb.attempts.len() - KEPT_ATTEMPTS;
        cb.attempts.drain(..extra);
    }
    let next = if outcome.delivered() {
        cb.state = State::Delivered;
        None
    } else {
        cb.failures = cb.failures.saturating_add(1);
        if outcome.final_failure || cb.failures >= MAX_ATTEMPTS {
            cb.state = State::Failed;
            None
        } else {
            Some(
                at.saturating_add(retry_wait(cb.failures, jitter))
                    .unwrap_or(at),
            )
        }
    };
    schedule(tx, &mut cb, next)?;
    Ok(Some(cb))
}

/// "Send again": the callback of run `run_id` of the organisation `org_id` is due at once,
/// with the same webhook id, for a new row of attempts. `None`: the run has no callback (or is
/// another organisation's), or it has not ended yet.
pub fn send_again_in(
    tx: &mut WriteTx,
    org_id: u64,
    run_id: u64,
    now: Timestamp,
) -> Result<Option<Callback>, StoreError> {
    let Some(mut cb) = get(tx, run_id)?.filter(|c| c.org_id == org_id) else {
        return Ok(None);
    };
    if cb.state == State::Waiting {
        return Ok(None);
    }
    cb.state = State::Pending;
    cb.failures = 0;
    schedule(tx, &mut cb, Some(now))?;
    Ok(Some(cb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::{self, Status};
    use crate::store::Store;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// A run of organisation `org` with a callback, ended at `end` (or still running).
    fn run(store: &Store, org: u64, end: Option<Timestamp>) -> u64 {
        store
            .write(|tx| {
                let t0 = at("2026-01-01T00:00:00Z");
                let mut r =
                    requests::create_run(tx, org, 1, uuid::Uuid::new_v4(), None, "x".into(), t0)?;
                subscribe_in(tx, &r, "https://example.org/hook")?;
                if let Some(end) = end {
                    r.status = Status::Succeeded;
                    r.updated_at = end;
                    requests::put(tx, &r)?;
                }
                Ok::<_, StoreError>(r.id)
            })
            .unwrap()
    }

    fn fail(status: u16) -> Outcome {
        Outcome {
            status,
            reason: format!("the receiver answered {status}"),
            final_failure: false,
        }
    }

    #[test]
    fn the_runs_end_releases_its_callback_in_the_same_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let end = at("2026-01-01T00:05:00Z");
        let waiting = run(&store, 1, None);
        let ended = run(&store, 1, Some(end));
        let get = |id| store.read(|tx| get(tx, id)).unwrap().unwrap();
        assert_eq!(get(waiting).state, State::Waiting);
        assert_eq!(get(ended).state, State::Pending);
        assert_eq!(get(ended).next_at, Some(end));
        let due_at = |now| store.read(|tx| due(tx, now, |_| 10)).unwrap();
        assert!(due_at(at("2026-01-01T00:04:59Z")).is_empty());
        assert_eq!(due_at(end), vec![(1, ended)]);
        // Writing the ended run again does not release it twice.
        store
            .write(|tx| {
                let r = requests::get(tx, ended)?.unwrap();
                requests::put(tx, &r)
            })
            .unwrap();
        assert_eq!(store.read(pending_count).unwrap(), 1);
    }

    #[test]
    fn retries_keep_the_id_back_off_and_give_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut now = at("2026-01-01T00:05:00Z");
        let id = run(&store, 1, Some(now));
        let webhook_id = store.read(|tx| get(tx, id)).unwrap().unwrap().webhook_id;
        let mut waits = Vec::new();
        for n in 1..=MAX_ATTEMPTS {
            let cb = store
                .write(|tx| record(tx, id, now, fail(500), 0.5))
                .unwrap()
                .unwrap();
            assert_eq!(cb.webhook_id, webhook_id);
            assert_eq!(cb.attempts.len() as u32, n);
            match cb.next_at {
                Some(next) => {
                    waits.push(next.duration_since(now));
                    now = next;
                }
                None => assert_eq!((n, cb.state), (MAX_ATTEMPTS, State::Failed)),
            }
        }
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert!(waits[0] <= SignedDuration::from_secs(60));
        assert_eq!(store.read(pending_count).unwrap(), 0);
        // A failed callback takes no more attempts …
        assert!(
            store
                .write(|tx| record(tx, id, now, fail(200), 0.5))
                .unwrap()
                .is_none()
        );
        // … until it is sent again: due at once, same id, a new row of attempts.
        let cb = store
            .write(|tx| send_again_in(tx, 1, id, now))
            .unwrap()
            .unwrap();
        assert_eq!(
            (cb.state, cb.next_at, cb.failures),
            (State::Pending, Some(now), 0)
        );
        let cb = store
            .write(|tx| record(tx, id, now, fail(204), 0.5))
            .unwrap()
            .unwrap();
        assert_eq!(cb.state, State::Delivered);
        assert_eq!(cb.attempts.last().unwrap().attempt, MAX_ATTEMPTS + 1);
        assert_eq!(cb.webhook_id, webhook_id);
        // Another organisation cannot send it again.
        assert!(
            store
                .write(|tx| send_again_in(tx, 2, id, now))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_refused_url_is_given_up_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let now = at("2026-01-01T00:05:00Z");
        let id = run(&store, 1, Some(now));
        let refused = Outcome {
            status: 0,
            reason: "not sent: 10.0.0.1 is inside".into(),
            final_failure: true,
        };
        let cb = store
            .write(|tx| record(tx, id, now, refused, 0.5))
            .unwrap()
            .unwrap();
        assert_eq!((cb.state, cb.next_at), (State::Failed, None));
    }

    #[test]
    fn one_organisations_backlog_does_not_hide_anothers() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let early = at("2026-01-01T00:05:00Z");
        let busy: Vec<u64> = (0..50).map(|_| run(&store, 7, Some(early))).collect();
        let other = run(&store, 9, Some(at("2026-01-01T00:06:00Z")));
        let now = at("2026-01-01T01:00:00Z");
        let found = store.read(|tx| due(tx, now, |_| 4)).unwrap();
        assert_eq!(found.iter().filter(|(o, _)| *o == 7).count(), 4);
        assert!(found.contains(&(9, other)), "{found:?}");
        assert_eq!(found.first(), Some(&(7, busy[0])));
        // An organisation at its share gets none read at all.
        let found = store
            .read(|tx| due(tx, now, |o| if o == 7 { 0 } else { 4 }))
            .unwrap();
        assert_eq!(found, vec![(9, other)]);
    }

    #[test]
    fn backoff_starts_within_a_minute_and_spans_hours() {
        assert!(retry_wait(1, 1.0) < SignedDuration::from_secs(60));
        assert!(retry_wait(1, 0.0) >= SignedDuration::from_secs(20));
        // Five attempts (four waits) take at least an hour even with the shortest jitter.
        let four: f64 = (1..=4).map(|n| retry_wait(n, 0.0).as_secs_f64()).sum();
        assert!(four >= 3600.0, "{four}");
        assert!(retry_wait(20, 1.0) <= SignedDuration::from_hours(15));
        assert!(retry_wait(3, 0.5) > retry_wait(2, 0.5));
        // Jitter: ±20 % around the plain backoff, so receivers that failed together do not
        // all come back at the same second.
        for n in 1..=MAX_ATTEMPTS {
            let (low, mid, high) = (retry_wait(n, 0.0), retry_wait(n, 0.5), retry_wait(n, 1.0));
            assert!(low < mid && mid < high, "{n}: {low:?} {mid:?} {high:?}");
            let ratio = high.as_secs_f64() / low.as_secs_f64();
            assert!((ratio - 1.5).abs() < 0.01, "{n}: {ratio}");
        }
        // At least five attempts are made before a callback is given up.
        const { assert!(MAX_ATTEMPTS >= 5) };
    }
}
