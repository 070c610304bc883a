//! Time, behind a trait, so every rule that depends on it (token lifetimes, cooldowns, rate
//! windows, TOTP steps) can be tested by moving a clock instead of sleeping.

use std::sync::{Arc, Mutex, PoisonError};

use jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The clock every component shares.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to; tests hold an `Arc` to it and share it with the server.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Arc<Self> {
        Arc::new(Self {
            now: Mutex::new(start),
        })
    }

    /// A manual clock starting at the current wall-clock time.
    pub fn starting_now() -> Arc<Self> {
        Self::new(Timestamp::now())
    }

    pub fn advance(&self, by: SignedDuration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        // Past the end of time a test's clock stays at the end.
        *now = now.checked_add(by).unwrap_or(if by.is_negative() {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        });
    }

    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The system clock as a [`SharedClock`].
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(SignedDuration::from_secs(3600));
        assert_eq!(
            clock.now(),
            "2026-01-01T01:00:00Z".parse::<Timestamp>().unwrap()
        );
    }
}
