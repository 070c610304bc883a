//! Rate limits per client address, on the shared injectable clock so tests move time instead
//! of sleeping. Built on governor's GCRA: a limit of N per window admits a burst of N and then
//! one more every window/N, which is a sliding form of "N per 15 minutes".

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use governor::clock::{Clock as GovernorClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use jiff::Timestamp;

use crate::clock::SharedClock;

/// The window every login-endpoint limit of the specification is counted in.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);

/// governor's view of our clock: nanoseconds since a fixed origin.
#[derive(Clone)]
pub struct ClockAdapter {
    clock: SharedClock,
    origin: Timestamp,
}

impl ClockAdapter {
    pub fn new(clock: SharedClock) -> Self {
        let origin = clock.now();
        ClockAdapter { clock, origin }
    }
}

impl GovernorClock for ClockAdapter {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        let since = self.clock.now().duration_since(self.origin);
        Nanos::from(Duration::from_nanos(since.as_nanos().max(0) as u64))
    }
}

type Keyed<K> = RateLimiter<K, DashMapStateStore<K>, ClockAdapter, NoOpMiddleware<Nanos>>;

/// "At most `limit` per `window`" per key.
pub struct Limiter<K: std::hash::Hash + Eq + Clone> {
    inner: Keyed<K>,
    clock: ClockAdapter,
}

impl<K: std::hash::Hash + Eq + Clone> Limiter<K> {
    pub fn new(limit: u32, window: Duration, clock: SharedClock) -> Self {
        let limit = NonZeroU32::new(limit.max(1)).expect("non-zero");
        let quota = Quota::with_period(window / limit.get())
            .expect("non-zero period")
            .allow_burst(limit);
        let clock = ClockAdapter::new(clock);
        Limiter {
            inner: RateLimiter::dashmap_with_clock(quota, clock.clone()),
            clock,
        }
    }

    /// Counts one request; `Err(retry_after)` when over the limit.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        self.inner
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// Limits failures only: each failure counts, and once over the limit every request from the
/// key is refused until the failure budget refills. Used for failed token checks (per address)
/// and failed logins (per account).
pub struct FailureLimiter<K: std::hash::Hash + Eq + Clone = IpAddr> {
    limiter: Limiter<K>,
    blocked_until: DashMap<K, Nanos>,
    clock: ClockAdapter,
}

impl<K: std::hash::Hash + Eq + Clone> FailureLimiter<K> {
    pub fn new(limit: u32, window: Duration, clock: SharedClock) -> Self {
        FailureLimiter {
            limiter: Limiter::new(limit, window, clock.clone()),
            blocked_until: DashMap::new(),
            clock: ClockAdapter::new(clock),
        }
    }

    /// `Some(retry_after)` while the address is blocked.
    pub fn blocked(&self, ip: &K) -> Option<Duration> {
        let now = self.clock.now();
        let until = *self.blocked_until.get(ip)?;
        if until > now {
            Some(Duration::from(until.duration_since(now)))
        } else {
            self.blocked_until.remove(ip);
            None
        }
    }

    /// Records a failure; `Some(retry_after)` when this one went over the limit.
    pub fn record_failure(&self, ip: &K) -> Option<Duration> {
        match self.limiter.check(ip) {
            Ok(()) => None,
            Err(wait) => {
                let until = self.clock.now() + Nanos::from(wait);
                self.blocked_until.insert(ip.clone(), until);
                Some(wait)
            }
        }
    }
}

/// Seconds for a `Retry-After` header: rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0).max(u64::from(wait.as_secs() == 0))
}

/// A shared limiter keyed by client address.
pub type IpLimiter = Arc<Limiter<IpAddr>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn limit_per_window_then_refill_with_the_clock() {
        let clock = ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap());
        let l = Limiter::new(20, WINDOW, clock.clone());
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..20 {
            assert!(l.check(&ip).is_ok());
        }
        let wait = l.check(&ip).unwrap_err();
        assert!(
            wait <= Duration::from_secs(45) && wait > Duration::ZERO,
            "{wait:?}"
        );
        // Another address is not affected.
        assert!(l.check(&"192.0.2.2".parse().unwrap()).is_ok());
        clock.advance(jiff::SignedDuration::from_secs(46));
        assert!(l.check(&ip).is_ok());
        assert!(l.check(&ip).is_err());
    }

    #[test]
    fn failures_block_until_refilled() {
        let clock = ManualClock::new("2026-01-01T00:00:00Z".parse().unwrap());
        let f = FailureLimiter::new(3, WINDOW, clock.clone());
        let ip: IpAddr = "198.51.100.7".parse().unwrap();
        for _ in 0..3 {
            assert_eq!(f.record_failure(&ip), None);
        }
        assert_eq!(f.blocked(&ip), None);
        let wait = f.record_failure(&ip).unwrap();
        assert_eq!(f.blocked(&ip), Some(wait));
        clock.advance(jiff::SignedDuration::try_from(wait).unwrap());
        assert_eq!(f.blocked(&ip), None);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(45_000)), 45);
        assert_eq!(retry_after_secs(Duration::from_millis(45_001)), 46);
    }
}
