//! Waiting for the runtime to release what the MaxAge pass removed (issue 57, item 4), before
//! the space pass plans against the image filesystem.
//!
//! The CRI lets RemoveImage free space asynchronously and ImageFsInfo keep counting removed
//! images (cri-api 65ec8e4), and containerd's CRI refreshes its ImageFsInfo figures on a period
//! (about 10 s), so a reading straight after the MaxAge pass may still hold the removed bytes:
//! planning on it, the space pass would remove more than its target. Removed images' sizes are
//! not freed bytes (layers shared with images that stay are not freed), so the cycle does not
//! subtract them; it reads again until the runtime shows a release.
//!
//! Invariants: the cycle waits only when the MaxAge pass removed bytes and a reading taken
//! before its first victim's last look is comparable (same mountpoint, same non-zero capacity);
//! it stops as soon as the used bytes of the image filesystem (or of a further one, by
//! mountpoint) fall below that reading's, and after [`RELEASE_WAIT_BOUND`] in all, polling
//! every [`RELEASE_POLL_INTERVAL`]; a wait that reaches the bound is logged once and counted
//! (`gc_release_wait_timeouts_total`), and the space pass plans against the last reading.
//! The wait goes through the injected [`crate::clock::Pause`]: nothing here sleeps or reads a
//! clock.

use std::time::Duration;

use tracing::{debug, warn};

use crate::model::ImageFsStats;
use crate::runtime::ImageRuntime;

use crate::gc::GcError;

use super::ImageGcManager;

/// The longest a cycle waits for the runtime to show MaxAge's removals released: one period of
/// containerd's ImageFsInfo refresh (about 10 s) and a margin.
pub const RELEASE_WAIT_BOUND: Duration = Duration::from_secs(15);

/// The pause between two readings while the cycle waits.
pub const RELEASE_POLL_INTERVAL: Duration = Duration::from_secs(2);

impl<R: ImageRuntime> ImageGcManager<R> {
    /// The image filesystem before the MaxAge pass's first victim's last look (never between
    /// a last look and its RemoveImage): the basis the wait compares with. `None` when the reading fails (the reading after the pass then stands
    /// alone, with no wait; a failure there is the cycle's).
    pub(super) async fn reading_before_removals(&self) -> Option<ImageFsStats> {
        match self.runtime.image_fs_stats().await {
            Ok(stats) => Some(stats),
            Err(e) => {
                debug!(error = %e, "ImageFsInfo before the MaxAge removals failed: no wait for their release");
                None
            }
        }
    }

    /// The reading the space pass plans against after the MaxAge pass removed images: `after`
    /// when it already shows a release against `before` (or is not comparable with it); else
    /// the first later reading that does, read every [`RELEASE_POLL_INTERVAL`], or the last
    /// one once [`RELEASE_WAIT_BOUND`] has passed (logged and counted).
    pub(super) async fn await_release(
        &self,
        before: &ImageFsStats,
        mut after: ImageFsStats,
    ) -> Result<ImageFsStats, GcError> {
        if settled(before, &after) {
            return Ok(after);
        }
        let mut waited = Duration::ZERO;
        while waited < RELEASE_WAIT_BOUND {
            let step = RELEASE_POLL_INTERVAL.min(RELEASE_WAIT_BOUND - waited);
            self.pause.pause(step).await;
            waited += step;
            after = self.observe_image_fs().await?;
            if settled(before, &after) {
                debug!(
                    mountpoint = after.mountpoint.as_str(),
                    waited_seconds = waited.as_secs_f64(),
                    "The image filesystem shows the MaxAge removals released"
                );
                return Ok(after);
            }
        }
        self.metrics.record_release_wait_timeout();
        warn!(
            mountpoint = after.mountpoint.as_str(),
            waited_seconds = waited.as_secs_f64(),
            used_before = used(before),
            used_now = used(&after),
            "The image filesystem did not show the MaxAge removals released within the bound: planning against the last reading"
        );
        Ok(after)
    }
}

/// Whether `after` needs no more waiting against `before`: not comparable (another
/// mountpoint or capacity, or capacity 0: not read), or its used bytes, or those of a further
/// image filesystem with the same mountpoint in both, fell.
fn settled(before: &ImageFsStats, after: &ImageFsStats) -> bool {
    if before.capacity == 0
        || before.mountpoint != after.mountpoint
        || before.capacity != after.capacity
    {
        return true;
    }
    used(after) < used(before)
        || after.other_image_fs.iter().any(|fs| {
            before
                .other_image_fs
                .iter()
                .find(|b| b.mountpoint == fs.mountpoint && b.capacity == fs.capacity)
                .is_some_and(|b| used(fs) < used(b))
        })
}

/// Bytes in use: capacity less available.
fn used(fs: &ImageFsStats) -> u64 {
    fs.capacity.saturating_sub(fs.available)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(mountpoint: &str, capacity: u64, available: u64) -> ImageFsStats {
        ImageFsStats::new(mountpoint, 0, capacity, available)
    }

    #[test]
    fn a_reading_whose_used_bytes_fell_is_settled_one_that_did_not_is_not() {
        let before = fs("/fs", 10_000, 1_000);
        assert!(settled(&before, &fs("/fs", 10_000, 1_001)));
        assert!(!settled(&before, &fs("/fs", 10_000, 1_000)));
        // Grown meanwhile (a pull): not released as far as the reading shows.
        assert!(!settled(&before, &fs("/fs", 10_000, 900)));
    }

    #[test]
    fn a_reading_of_another_filesystem_or_of_none_is_no_basis_for_a_wait() {
        let before = fs("/fs", 10_000, 1_000);
        assert!(settled(&before, &fs("/other", 10_000, 1_000)));
        assert!(settled(&before, &fs("/fs", 20_000, 1_000)));
        assert!(settled(&fs("/fs", 0, 0), &fs("/fs", 0, 0)));
    }

    #[test]
    fn a_further_image_filesystem_that_fell_settles_the_reading() {
        let before = fs("/fs", 10_000, 1_000).with_other_image_fs(vec![fs("/b", 5_000, 100)]);
        let fell = fs("/fs", 10_000, 1_000).with_other_image_fs(vec![fs("/b", 5_000, 600)]);
        let same = fs("/fs", 10_000, 1_000).with_other_image_fs(vec![fs("/b", 5_000, 100)]);
        let other = fs("/fs", 10_000, 1_000).with_other_image_fs(vec![fs("/c", 5_000, 600)]);
        assert!(settled(&before, &fell));
        assert!(!settled(&before, &same));
        assert!(!settled(&before, &other));
    }
}
