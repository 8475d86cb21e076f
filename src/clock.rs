//! The injected clock. Every layer that needs "now" takes it as an argument or through a
//! [`Clock`]; only [`SystemClock`] reads the wall clock. Tests use [`ManualClock`] and advance it
//! instead of sleeping. A layer that must wait (GC waiting for the runtime to release what it
//! removed) waits through an injected [`Pause`]; [`TokioPause`] is tokio's timer, which paused
//! time in tests moves at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::model::{UnixNanos, duration_nanos};

/// A source of the current time as Unix nanoseconds.
pub trait Clock: Send + Sync {
    /// The current time.
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
    /// A clock that reads `start` until set or advanced.
    pub fn new(start: UnixNanos) -> ManualClock {
        ManualClock {
            nanos: AtomicI64::new(start.0),
        }
    }

    /// Sets the time to `to` (it may move back).
    pub fn set(&self, to: UnixNanos) {
        self.nanos.store(to.0, Ordering::SeqCst);
    }

    /// Moves the time forward by `by` (saturating).
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

/// A wait of a given length, injected into the layers that never sleep themselves.
pub trait Pause: Send + Sync {
    /// Resolves once `duration` has passed (as this pause counts time).
    fn pause(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Pauses on tokio's timer (`tokio::time::sleep`): needs a runtime with time enabled; under
/// paused time (tests) it resolves as soon as the runtime is idle.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioPause;

impl Pause for TokioPause {
    fn pause(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(duration))
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

    /// The wall clock in unix nanoseconds: between two readings of `SystemTime` taken around
    /// it (a clock in seconds or milliseconds, or one stuck at 0, would fall outside).
    #[test]
    fn system_clock_reads_the_wall_clock_in_unix_nanoseconds() {
        let nanos = |t: SystemTime| {
            let since = t
                .duration_since(UNIX_EPOCH)
                .expect("the host clock is after 1970");
            i64::try_from(since.as_nanos()).expect("the host clock is before 2262")
        };
        let before = nanos(SystemTime::now());
        let now = SystemClock.now().0;
        let after = nanos(SystemTime::now());
        assert!(
            before <= now && now <= after,
            "{before} <= {now} <= {after}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_pause_waits_its_duration_on_tokio_time() {
        let start = tokio::time::Instant::now();
        TokioPause.pause(Duration::from_secs(3)).await;
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(3) && waited < Duration::from_secs(4),
            "{waited:?}"
        );
    }

    #[test]
    fn manual_clock_saturates_instead_of_wrapping() {
        let clock = ManualClock::new(UnixNanos(i64::MAX - 1));
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), UnixNanos(i64::MAX));
    }
}
