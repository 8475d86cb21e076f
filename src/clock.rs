//! The injected clock. Every layer that needs "now" takes it as an argument or through a
//! [`Clock`]; only [`SystemClock`] reads the wall clock. Tests use [`ManualClock`] and advance it
//! instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::model::{UnixNanos, duration_nanos};

/// A source of the current time as Unix nanoseconds.
pub trait Clock: Send + Sync {
    fn now(&self) -> UnixNanos;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixNanos {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        UnixNanos(duration_nanos(since_epoch))
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicI64,
}

impl ManualClock {
    pub fn new(start: UnixNanos) -> ManualClock {
        ManualClock {
            nanos: AtomicI64::new(start.0),
        }
    }

    pub fn set(&self, to: UnixNanos) {
        self.nanos.store(to.0, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        let by = duration_nanos(by);
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixNanos {
        UnixNanos(self.nanos.load(Ordering::SeqCst))
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> UnixNanos {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(UnixNanos::from_secs(100));
        assert_eq!(clock.now(), UnixNanos::from_secs(100));
        clock.advance(Duration::from_secs(5));
        assert_eq!(clock.now(), UnixNanos::from_secs(105));
        clock.set(UnixNanos::from_secs(7));
        assert_eq!(clock.now(), UnixNanos::from_secs(7));
    }

    /// SystemClock reads the wall clock in nanoseconds since the epoch: its reading lies
    /// between two `SystemTime` readings taken around it (a clock in another unit, or a
    /// constant, falls outside).
    #[test]
    fn system_clock_reads_the_wall_clock_in_unix_nanoseconds() {
        let wall = || {
            let since_epoch = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("the test machine's clock is after 1970");
            UnixNanos(duration_nanos(since_epoch))
        };
        let before = wall();
        let read = SystemClock.now();
        let after = wall();
        assert!(
            before <= read && read <= after,
            "{read:?} not within [{before:?}, {after:?}]"
        );
    }
}
