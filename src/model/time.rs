//! Time as the store keeps it: [`UnixNanos`] (i64 nanoseconds since the Unix epoch; 0 is
//! "never"), the tolerance for stamps from the future, and the saturating arithmetic of times
//! and sizes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in time as i64 nanoseconds since the Unix epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct UnixNanos(pub i64);

impl UnixNanos {
    /// "Never used": sorts before every real time.
    pub const NEVER: UnixNanos = UnixNanos(0);

    /// `secs` seconds after the Unix epoch (saturating at the ends of the i64 range).
    pub fn from_secs(secs: i64) -> UnixNanos {
        UnixNanos(secs.saturating_mul(1_000_000_000))
    }

    /// Whole seconds since the Unix epoch, rounded down.
    pub fn as_secs(self) -> i64 {
        self.0.div_euclid(1_000_000_000)
    }

    /// `self + d`, saturating at the ends of the i64 range.
    pub fn saturating_add(self, d: Duration) -> UnixNanos {
        UnixNanos(self.0.saturating_add(duration_nanos(d)))
    }

    /// `self - d`, saturating at the ends of the i64 range.
    pub fn saturating_sub(self, d: Duration) -> UnixNanos {
        UnixNanos(self.0.saturating_sub(duration_nanos(d)))
    }

    /// The time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: UnixNanos) -> Duration {
        let nanos = self.0.saturating_sub(earlier.0);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
    }
}

/// How far after `now` a stored stamp may lie before detect clamps it to `now` and
/// `inspect check` reports it, and how far a detect's `now` may fall behind the stored
/// `last_detect` before it counts as the clock going back. Smaller gaps are ordinary (an NTP
/// slew, a detect that queued behind another for the cycle lock, a pull's mark taken a moment
/// after the detect's `now`) and cost nothing: such a stamp ages normally within minutes.
pub const FUTURE_STAMP_TOLERANCE: Duration = Duration::from_secs(10 * 60);

/// The sum of runtime-reported sizes, saturating at `u64::MAX`: a runtime may report sizes near
/// the top of the range, and a plain sum would panic in debug builds and wrap in release ones.
pub fn saturating_total(sizes: impl IntoIterator<Item = u64>) -> u64 {
    sizes.into_iter().fold(0, u64::saturating_add)
}

/// A `Duration` as i64 nanoseconds, saturating at `i64::MAX`.
pub fn duration_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}
