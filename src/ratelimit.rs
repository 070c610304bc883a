//! Rate limits in fixed windows per key, on the shared injectable clock so tests move time
//! instead of sleeping. The specification counts "per address in windows of 15 minutes": a
//! key's window opens with its first request and lasts [`WINDOW`]; at most `limit` requests are
//! let through in it, and a refusal says how long until the window ends (the `Retry-After`).
//!
//! Written here rather than with governor: its GCRA refills one request every window/limit,
//! which is not a window, and it never forgets a key. State is bounded: expired windows are
//! purged as the map grows, keys are normalised ([`LimitKey`]: IPv6 by /64, long strings by
//! their hash), and at [`MAX_KEYS`] every further new key shares one overflow window.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sha2::Digest;

use crate::clock::SharedClock;

/// The window every login-endpoint limit of the specification is counted in.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);

/// Most keys one limiter remembers; beyond it, new keys share one overflow window.
pub const MAX_KEYS: usize = 100_000;

/// Longest string key kept as it is; longer ones are replaced by their SHA-256.
pub const MAX_KEY_LEN: usize = 320;

/// A key as the limiter stores it: normalised so that an attacker cannot mint unlimited
/// distinct keys cheaply (IPv6 addresses by their /64, strings capped by hashing).
pub trait LimitKey: Hash + Eq + Clone {
    fn normalised(&self) -> Self;
}

impl LimitKey for IpAddr {
    fn normalised(&self) -> Self {
        address_key(*self)
    }
}

impl LimitKey for String {
    fn normalised(&self) -> Self {
        if self.len() <= MAX_KEY_LEN {
            self.clone()
        } else {
            format!(
                "sha256:{}",
                hex::encode(sha2::Sha256::digest(self.as_bytes()))
            )
        }
    }
}

impl<A: LimitKey, B: LimitKey> LimitKey for (A, B) {
    fn normalised(&self) -> Self {
        (self.0.normalised(), self.1.normalised())
    }
}

/// The address a limit counts: IPv4 as is (also when mapped into IPv6), IPv6 by its /64, the
/// block one subscriber usually gets.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let [a, b, c, d, ..] = v6.segments();
                IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
        },
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    start: Timestamp,
    count: u32,
}

struct State<K> {
    slots: HashMap<K, Slot>,
    overflow: Option<Slot>,
    /// Size at which expired windows are purged next.
    purge_at: usize,
    /// The last purge (at capacity, purges run at most once a second).
    purged: Option<Timestamp>,
}

/// "At most `limit` per `window`" per key, in fixed windows that open at a key's first
/// request.
pub struct Limiter<K: LimitKey> {
    limit: u32,
    window: SignedDuration,
    clock: SharedClock,
    max_keys: usize,
    state: Mutex<State<K>>,
}

/// What a refusal says: how long until the window lets the next request in.
pub type RetryAfter = Duration;

impl<K: LimitKey> Limiter<K> {
    pub fn new(limit: u32, window: Duration, clock: SharedClock) -> Self {
        Self::with_capacity(limit, window, clock, MAX_KEYS)
    }

    /// A limiter remembering at most `max_keys` keys (tests use small ones).
    pub fn with_capacity(
        limit: u32,
        window: Duration,
        clock: SharedClock,
        max_keys: usize,
    ) -> Self {
        Limiter {
            limit: limit.max(1),
            window: SignedDuration::try_from(window).unwrap_or(SignedDuration::from_secs(900)),
            clock,
            max_keys: max_keys.max(1),
            state: Mutex::new(State {
                slots: HashMap::new(),
                overflow: None,
                purge_at: 1024.min(max_keys.max(1)),
                purged: None,
            }),
        }
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn live(&self, slot: &Slot, now: Timestamp) -> bool {
        now < slot.start.saturating_add(self.window).unwrap_or(slot.start)
    }

    fn wait(&self, slot: &Slot, now: Timestamp) -> RetryAfter {
        let end = slot.start.saturating_add(self.window).unwrap_or(slot.start);
        Duration::try_from(end.duration_since(now)).unwrap_or(Duration::ZERO)
    }

    /// Runs `f` on the key's live slot (a fresh one when its window is over), purging expired
    /// windows as the map grows and sending new keys to the overflow slot at capacity.
    fn with_slot<T>(&self, key: &K, f: impl FnOnce(&mut Slot, u32) -> T) -> T {
        let key = key.normalised();
        let now = self.clock.now();
        let mut st = self.lock();
        let fresh = Slot {
            start: now,
            count: 0,
        };
        let recently = st
            .purged
            .is_some_and(|t| now < t.saturating_add(SignedDuration::from_secs(1)).unwrap_or(t));
        let full = st.slots.len() >= self.max_keys;
        if !st.slots.contains_key(&key) && st.slots.len() >= st.purge_at && !(full && recently) {
            st.purged = Some(now);
            let window = self.window;
            st.slots
                .retain(|_, s| now < s.start.saturating_add(window).unwrap_or(s.start));
            st.purge_at = (st.slots.len() * 2).clamp(1024.min(self.max_keys), self.max_keys);
        }
        let limit = self.limit;
        if !st.slots.contains_key(&key) && st.slots.len() >= self.max_keys {
            let slot = st.overflow.get_or_insert(fresh);
            if !self.live(slot, now) {
                *slot = fresh;
            }
            return f(slot, limit);
        }
        let slot = st.slots.entry(key).or_insert(fresh);
        if !self.live(slot, now) {
            *slot = fresh;
        }
        f(slot, limit)
    }

    /// Counts one request; `Err(retry_after)` when the window is used up (a refused request
    /// is not counted).
    pub fn check(&self, key: &K) -> Result<(), RetryAfter> {
        let now = self.clock.now();
        self.with_slot(key, |slot, limit| {
            if slot.count >= limit {
                Err(self.wait(slot, now))
            } else {
                slot.count += 1;
                Ok(())
            }
        })
    }

    /// `Some(retry_after)` while the key's window is used up; counts nothing.
    pub fn blocked(&self, key: &K) -> Option<RetryAfter> {
        let key = key.normalised();
        let now = self.clock.now();
        let st = self.lock();
        let slot = st.slots.get(&key)?;
        (self.live(slot, now) && slot.count >= self.limit).then(|| self.wait(slot, now))
    }

    /// Counts one request whatever the state; `Some(retry_after)` when it went over the
    /// limit (the `limit`-th is still answered; from then on [`Limiter::blocked`] refuses).
    pub fn record(&self, key: &K) -> Option<RetryAfter> {
        let now = self.clock.now();
        self.with_slot(key, |slot, limit| {
            slot.count = slot.count.saturating_add(1);
            (slot.count > limit).then(|| self.wait(slot, now))
        })
    }

    /// Gives back one counted request of the current window (a reservation that turned out
    /// not to count, such as a login that succeeded).
    pub fn refund(&self, key: &K) {
        let key = key.normalised();
        let now = self.clock.now();
        let mut st = self.lock();
        let live = st.slots.get(&key).is_some_and(|s| self.live(s, now));
        if let Some(slot) = st.slots.get_mut(&key).filter(|_| live) {
            slot.count = slot.count.saturating_sub(1);
        }
    }

    /// Keys currently remembered (expired ones included until the next purge).
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Limits failures only (failed token checks per address): each failure counts, and once the
/// window holds `limit` failures every request from the key is refused until it ends.
pub struct FailureLimiter<K: LimitKey = IpAddr> {
    limiter: Limiter<K>,
}

impl<K: LimitKey> FailureLimiter<K> {
    pub fn new(limit: u32, window: Duration, clock: SharedClock) -> Self {
        FailureLimiter {
            limiter: Limiter::new(limit, window, clock),
        }
    }

    /// `Some(retry_after)` while the key is blocked.
    pub fn blocked(&self, key: &K) -> Option<RetryAfter> {
        self.limiter.blocked(key)
    }

    /// Records a failure; `Some(retry_after)` when it used up the window.
    pub fn record_failure(&self, key: &K) -> Option<RetryAfter> {
        self.limiter.record(key)
    }
}

/// Seconds for a `Retry-After` header: rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn clock() -> std::sync::Arc<ManualClock> {
        ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn limit_per_window_then_a_new_window() {
        let clock = clock();
        let l = Limiter::new(20, WINDOW, clock.clone());
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..20 {
            assert!(l.check(&ip).is_ok());
        }
        clock.advance(SignedDuration::from_secs(60));
        assert_eq!(l.check(&ip), Err(Duration::from_secs(14 * 60)));
        // Another address is not affected.
        assert!(l.check(&"192.0.2.2".parse().unwrap()).is_ok());
        clock.advance(SignedDuration::from_secs(14 * 60 - 1));
        assert_eq!(l.check(&ip), Err(Duration::from_secs(1)));
        clock.advance(SignedDuration::from_secs(1));
        for _ in 0..20 {
            assert!(l.check(&ip).is_ok());
        }
        assert!(l.check(&ip).is_err());
    }

    #[test]
    fn failures_block_until_the_window_ends_and_refunds_give_back() {
        let clock = clock();
        let f = FailureLimiter::new(3, WINDOW, clock.clone());
        let ip: IpAddr = "198.51.100.7".parse().unwrap();
        assert_eq!(f.record_failure(&ip), None);
        assert_eq!(f.record_failure(&ip), None);
        assert_eq!(f.blocked(&ip), None);
        assert_eq!(f.record_failure(&ip), None);
        assert_eq!(f.blocked(&ip), Some(WINDOW));
        assert_eq!(f.record_failure(&ip), Some(WINDOW));
        clock.advance(SignedDuration::from_secs(600));
        assert_eq!(f.blocked(&ip), Some(Duration::from_secs(300)));
        clock.advance(SignedDuration::from_secs(300));
        assert_eq!(f.blocked(&ip), None);

        let l = Limiter::new(2, WINDOW, clock.clone());
        let k = "annie@example.org".to_owned();
        assert!(l.check(&k).is_ok());
        l.refund(&k);
        assert!(l.check(&k).is_ok());
        assert!(l.check(&k).is_ok());
        assert!(l.check(&k).is_err());
    }

    #[test]
    fn keys_are_normalised_and_state_is_bounded() {
        let clock = clock();
        let l = Limiter::with_capacity(1, WINDOW, clock.clone(), 2000);
        // Every address of one /64 is one key.
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert!(l.check(&a).is_ok());
        assert!(l.check(&b).is_err());
        let mapped: IpAddr = "::ffff:192.0.2.9".parse().unwrap();
        assert_eq!(address_key(mapped), "192.0.2.9".parse::<IpAddr>().unwrap());
        // Long strings are stored by their hash.
        let long = "x".repeat(70_000);
        assert_eq!(long.normalised().len(), 7 + 64);
        // A flood of distinct keys stays at the cap; the overflow shares one window.
        for i in 0..5000u32 {
            let _ = l.check(&IpAddr::V4(i.into()));
        }
        assert!(l.len() <= 2000, "{}", l.len());
        // Once their windows are over, old keys are purged as new ones arrive.
        clock.advance(SignedDuration::from_secs(901));
        for i in 0..1500u32 {
            let _ = l.check(&IpAddr::V4((i + 1_000_000).into()));
        }
        assert!(l.len() <= 2000, "{}", l.len());
        assert!(l.check(&a).is_ok(), "a fresh window after the purge");
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(45_000)), 45);
        assert_eq!(retry_after_secs(Duration::from_millis(45_001)), 46);
    }
}
