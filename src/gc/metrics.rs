//! Counters of the GC layer: `image_garbage_collected_total{reason}`, removal failures and
//! `gc_victims_rescued_total{why}` (victims the last look before removal kept), and the
//! clock's: `gc_future_stamps_clamped_total` (records detect clamped because a stamp lay in
//! the future) and `gc_clock_went_back_total` (detects that found `last_detect` ahead of them);
//! `gc_release_wait_timeouts_total` (cycles whose wait for the runtime to release MaxAge's
//! removals reached its bound, `manager/release.rs`);
//! the regret counters detect and pulls share ([`RepullMetrics`]); and the image filesystem's
//! capacity and available bytes and its inodes as the last GC read them; and KEP-6053's attempt
//! series ([`AttemptMetrics`], `attempt_metrics.rs`). The agent's metrics module turns these
//! into the Prometheus exposition.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::pull::metrics::RepullMetrics;

use super::attempt::SkipReason;
use super::attempt_metrics::AttemptMetrics;

pub use crate::model::RemovalReason;

/// Why the last look before a removal kept a victim the walk had chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RescueReason {
    /// A container (of any state) uses it now.
    Container,
    /// Its record was marked used after the walk read it (a pull finished).
    Used,
    /// A pull through imagekeeper is fetching it.
    Pulling,
    /// Its record is gone (nothing to remove).
    Gone,
    /// A kubelet pull intent names it: the kubelet is pulling it.
    KubeletPulling,
    /// A kubelet pulled record newer than its last use (written after the walk read it).
    KubeletPulled,
    /// A warm set entry names it (a reload added it after the walk read it).
    Warm,
    /// An operator's pin names it (written after the cycle's detect read the pins).
    Pinned,
}

impl RescueReason {
    /// Every reason, in declaration order.
    pub const ALL: [RescueReason; 8] = [
        RescueReason::Container,
        RescueReason::Used,
        RescueReason::Pulling,
        RescueReason::Gone,
        RescueReason::KubeletPulling,
        RescueReason::KubeletPulled,
        RescueReason::Warm,
        RescueReason::Pinned,
    ];

    /// KEP-6053's skip reason of a victim the last look kept: a container's use or a kubelet
    /// pull intent is `in_use`, a pin or warm entry `pinned`, anything else `other`.
    pub fn skip_reason(self) -> SkipReason {
        match self {
            RescueReason::Container | RescueReason::KubeletPulling => SkipReason::InUse,
            RescueReason::Pinned | RescueReason::Warm => SkipReason::Pinned,
            RescueReason::Used
            | RescueReason::Pulling
            | RescueReason::Gone
            | RescueReason::KubeletPulled => SkipReason::Other,
        }
    }

    /// The reason's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            RescueReason::Container => "container",
            RescueReason::Used => "used",
            RescueReason::Pulling => "pulling",
            RescueReason::Gone => "gone",
            RescueReason::KubeletPulling => "kubelet_pulling",
            RescueReason::KubeletPulled => "kubelet_pulled",
            RescueReason::Warm => "warm",
            RescueReason::Pinned => "pinned",
        }
    }
}

/// GC counters, shared by the manager and the metrics endpoint.
#[derive(Debug, Default)]
pub struct GcMetrics {
    collected_age: AtomicU64,
    collected_space: AtomicU64,
    collected_inodes: AtomicU64,
    collected_budget: AtomicU64,
    remove_failures: AtomicU64,
    rescued: [AtomicU64; RescueReason::ALL.len()],
    future_stamps_clamped: AtomicU64,
    clock_went_back: AtomicU64,
    release_wait_timeouts: AtomicU64,
    /// The cycle in flight: whether one runs, and what it removed and freed so far.
    running: AtomicBool,
    progress_removed: AtomicU64,
    progress_freed: AtomicU64,
    /// Re-pulls of journaled removals, counted by detect (shared with the image manager).
    repulls: Arc<RepullMetrics>,
    /// The image filesystem as the last GC read it (ImageFsInfo plus statvfs); capacity 0
    /// until a GC has read it.
    image_fs_capacity: AtomicU64,
    image_fs_available: AtomicU64,
    /// Its inodes (statvfs f_files, f_ffree) and those images use (ImageFsInfo inodes_used,
    /// `u64::MAX` when not reported); inodes 0 until read, or on a filesystem without them.
    image_fs_inodes: AtomicU64,
    image_fs_inodes_free: AtomicU64,
    image_fs_inodes_images: AtomicU64,
    /// KEP-6053's attempt, deletion and skip series.
    attempts: AttemptMetrics,
}

/// Progress of the GC cycle in flight (zeros when none runs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcProgress {
    /// Whether a cycle runs.
    pub running: bool,
    /// Images it removed so far.
    pub removed: u64,
    /// Bytes it freed so far.
    pub freed_bytes: u64,
}

impl GcMetrics {
    /// The re-pull counters (`image_repulls_after_eviction_total`, `image_repull_delay_seconds`);
    /// hand the `Arc` to the image manager so pulls count into the same ones.
    pub fn repulls(&self) -> &Arc<RepullMetrics> {
        &self.repulls
    }

    /// KEP-6053's series: attempts, freed and target bytes, deletions, skipped images.
    pub fn attempts(&self) -> &AttemptMetrics {
        &self.attempts
    }

    /// Counts one removal for `reason`.
    pub fn record_removal(&self, reason: RemovalReason) {
        let counter = match reason.metric_label() {
            "age" => &self.collected_age,
            "inodes" => &self.collected_inodes,
            "budget" => &self.collected_budget,
            _ => &self.collected_space,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one failed removal.
    pub fn record_remove_failure(&self) {
        self.remove_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// `image_garbage_collected_total` by reason label.
    pub fn collected(&self) -> [(&'static str, u64); 4] {
        [
            ("age", self.collected_age.load(Ordering::Relaxed)),
            ("space", self.collected_space.load(Ordering::Relaxed)),
            ("inodes", self.collected_inodes.load(Ordering::Relaxed)),
            ("budget", self.collected_budget.load(Ordering::Relaxed)),
        ]
    }

    /// A cycle (GarbageCollect or DeleteUnusedImages) starts: its progress counts from zero.
    pub fn cycle_started(&self) {
        self.progress_removed.store(0, Ordering::Relaxed);
        self.progress_freed.store(0, Ordering::Relaxed);
        self.running.store(true, Ordering::Relaxed);
    }

    /// One removal of the cycle in flight; returns how many it has made so far.
    pub fn cycle_removed(&self, size: u64) -> u64 {
        self.progress_freed.fetch_add(size, Ordering::Relaxed);
        self.progress_removed.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Marks the cycle in flight ended.
    pub fn cycle_ended(&self) {
        self.running.store(false, Ordering::Relaxed);
    }

    /// The cycle in flight's progress (the last cycle's totals once it ended, with
    /// `running` false).
    pub fn progress(&self) -> GcProgress {
        GcProgress {
            running: self.running.load(Ordering::Relaxed),
            removed: self.progress_removed.load(Ordering::Relaxed),
            freed_bytes: self.progress_freed.load(Ordering::Relaxed),
        }
    }

    /// Counts one rescue for `why`.
    pub fn record_rescue(&self, why: RescueReason) {
        self.rescued[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// `gc_victims_rescued_total` by `why` label.
    pub fn rescued(&self) -> [(&'static str, u64); RescueReason::ALL.len()] {
        RescueReason::ALL.map(|why| {
            (
                why.as_str(),
                self.rescued[why as usize].load(Ordering::Relaxed),
            )
        })
    }

    /// Failed removals so far.
    pub fn remove_failures(&self) -> u64 {
        self.remove_failures.load(Ordering::Relaxed)
    }

    /// Counts `records` future stamps a detect clamped.
    pub fn record_future_stamps_clamped(&self, records: usize) {
        let n = u64::try_from(records).unwrap_or(u64::MAX);
        self.future_stamps_clamped.fetch_add(n, Ordering::Relaxed);
    }

    /// `gc_future_stamps_clamped_total`: records whose stamps detect clamped to its now.
    pub fn future_stamps_clamped(&self) -> u64 {
        self.future_stamps_clamped.load(Ordering::Relaxed)
    }

    /// The image filesystem's space as a GC cycle just read it.
    pub fn record_image_fs(&self, capacity: u64, available: u64) {
        self.image_fs_available.store(available, Ordering::Relaxed);
        self.image_fs_capacity.store(capacity, Ordering::Relaxed);
    }

    /// The image filesystem's inodes as a GC cycle just read them.
    pub fn record_image_fs_inodes(&self, inodes: u64, free: u64, images: Option<u64>) {
        self.image_fs_inodes_free.store(free, Ordering::Relaxed);
        self.image_fs_inodes_images
            .store(images.unwrap_or(u64::MAX), Ordering::Relaxed);
        self.image_fs_inodes.store(inodes, Ordering::Relaxed);
    }

    /// (total, free, used by images when reported) inodes of the image filesystem as the
    /// last GC read them; None before any read, or on a filesystem that counts no inodes.
    pub fn image_fs_inodes(&self) -> Option<(u64, u64, Option<u64>)> {
        let inodes = self.image_fs_inodes.load(Ordering::Relaxed);
        let free = self.image_fs_inodes_free.load(Ordering::Relaxed);
        let images = self.image_fs_inodes_images.load(Ordering::Relaxed);
        (inodes > 0).then_some((inodes, free, (images != u64::MAX).then_some(images)))
    }

    /// (capacity, available) bytes of the image filesystem as the last GC read them; None
    /// before any GC read them.
    pub fn image_fs(&self) -> Option<(u64, u64)> {
        let capacity = self.image_fs_capacity.load(Ordering::Relaxed);
        let available = self.image_fs_available.load(Ordering::Relaxed);
        (capacity > 0).then_some((capacity, available))
    }

    /// Counts one detect that found the clock went back.
    pub fn record_clock_went_back(&self) {
        self.clock_went_back.fetch_add(1, Ordering::Relaxed);
    }

    /// `gc_clock_went_back_total`: detects whose now was before the stored last_detect (by
    /// more than the tolerance).
    pub fn clock_went_back(&self) -> u64 {
        self.clock_went_back.load(Ordering::Relaxed)
    }

    /// Counts one cycle whose wait for the runtime's release reached its bound.
    pub fn record_release_wait_timeout(&self) {
        self.release_wait_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// `gc_release_wait_timeouts_total`: cycles whose wait for the runtime to show MaxAge's
    /// removals released reached its bound (the space pass then planned against the last
    /// reading).
    pub fn release_wait_timeouts(&self) -> u64 {
        self.release_wait_timeouts.load(Ordering::Relaxed)
    }
}
