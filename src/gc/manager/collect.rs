//! kubelet's GarbageCollect and DeleteUnusedImages on the manager: the cycle's detect, the
//! MaxAge pass (`free_old_images`), the wait for the runtime to release what it removed
//! (`release.rs`), then the byte rules (the percentage rule, the byte budget)
//! and the inode rule on the first image filesystem, each cycle freeing the most any byte rule
//! needs, and the measured pass on every further image filesystem (`measured.rs`).
//!
//! Invariants: a cycle holds the cycle lock and takes the settings once, from its start to its
//! end; it is marked running in the metrics for as long as its future lives (`ProgressGuard`);
//! capacity 0 fails the percentage rule alone, as the kubelet's InvalidDiskCapacity, while the
//! budget and inode rules still run; the removals before a failure stand in the report; every
//! cycle is counted once in KEP-6053's attempt series when it ends (`end_attempt`).

use tracing::{info, warn};

use crate::model::{ImageFsStats, ImageLike, UnixNanos};
use crate::runtime::ImageRuntime;
use crate::store::StoredRecord;

use crate::gc::attempt::{Attempt, GcOperation, GcTrigger};
use crate::gc::cycle::{CycleNeeds, SpaceRule};
use crate::gc::evict::past_max_age;
use crate::gc::metrics::{GcMetrics, RemovalReason};
use crate::gc::report::classify;
use crate::gc::space::{BudgetNeed, FsSpace};
use crate::gc::{GcError, GcPolicy};

use super::walk::Goal;
use super::{CycleTime, CycleView, GcReport, ImageGcManager, Settings, note};

/// Marks a cycle as running in the metrics for as long as it lives (also when the cycle's
/// future is dropped at shutdown).
struct ProgressGuard<'a>(&'a GcMetrics);

impl<'a> ProgressGuard<'a> {
    fn start(metrics: &'a GcMetrics) -> ProgressGuard<'a> {
        metrics.cycle_started();
        ProgressGuard(metrics)
    }
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        self.0.cycle_ended();
    }
}

impl<R: ImageRuntime> ImageGcManager<R> {
    /// kubelet's GarbageCollect at `now`: detect, MaxAge, then free space down to the low
    /// threshold if usage is at or above the high one. Counted in KEP-6053's series with
    /// `trigger="unknown"` ([`ImageGcManager::garbage_collect_for`] names the trigger).
    pub async fn garbage_collect(&self, now: impl CycleTime) -> GcReport {
        self.garbage_collect_for(GcTrigger::Unknown, now).await
    }

    /// [`ImageGcManager::garbage_collect`] asked for by `trigger` (the agent's GC loop:
    /// `periodic`); the report's `attempt` says how KEP-6053's series counted it.
    pub async fn garbage_collect_for(&self, trigger: GcTrigger, now: impl CycleTime) -> GcReport {
        let _cycle = self.cycle.lock().await;
        let now = now.read();
        let _progress = ProgressGuard::start(&self.metrics);
        self.metrics
            .attempts()
            .begin(GcOperation::GarbageCollect, trigger);
        let settings = self.settings();
        let mut report = GcReport::default();
        if let Err(e) = self
            .garbage_collect_locked(&settings, now, &mut report)
            .await
        {
            report.error = Some(e);
        }
        let target = report
            .bytes_to_free
            .and_then(|b| u64::try_from(b).ok())
            .filter(|b| *b > 0);
        self.end_attempt(GcOperation::GarbageCollect, trigger, target, &mut report);
        report
    }

    /// Names the cycle that just ended in KEP-6053's terms (`attempt::classify`), keeps that in
    /// the report and counts it.
    fn end_attempt(
        &self,
        operation: GcOperation,
        trigger: GcTrigger,
        target_bytes: Option<u64>,
        report: &mut GcReport,
    ) {
        let (result, reason) = classify(operation, report);
        let attempt = Attempt {
            operation,
            trigger,
            result,
            reason,
            target_bytes,
        };
        self.metrics.attempts().finish(&attempt, report.freed);
        report.attempt = Some(attempt);
    }

    async fn garbage_collect_locked(
        &self,
        settings: &Settings,
        free_time: UnixNanos,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        // The keep share needs the image filesystem's capacity at the detect: read it first
        // when no reading came before (the agent's first cycle).
        if self.cluster_signals.keep_share() < 100
            && self
                .image_fs_capacity
                .load(std::sync::atomic::Ordering::Relaxed)
                == 0
        {
            self.observe_image_fs().await?;
        }
        let (detected, mut view) = self.detect_locked(settings, free_time).await?;
        report.detect = Some(detected);
        if settings.config.policy.disabled() {
            return Ok(());
        }
        let before = self
            .free_old_images(settings, free_time, &mut view, report)
            .await?;
        let mut stats = self.observe_image_fs().await?;
        if let Some(before) = &before {
            // The runtime may not have released MaxAge's removals yet (`release.rs`).
            stats = self.await_release(before, stats).await?;
        }
        let needs = self.needs_after_age(settings, &stats, &view, report);
        let first = self
            .free_for_needs(settings, &needs, free_time, &mut view, report)
            .await;
        // Every further image filesystem, by a measured pass (issue 28).
        let others = self
            .free_other_filesystems(settings, &stats, free_time, &mut view, report)
            .await;
        first.and(others)
    }

    /// The needs of the percentage, budget and inode rules at `stats`, read after the MaxAge
    /// pass ([`CycleNeeds::plan`]), each logged as the kubelet logs its own. The byte budget
    /// counts the images the cycle's detect listed, less what MaxAge freed.
    fn needs_after_age(
        &self,
        settings: &Settings,
        stats: &ImageFsStats,
        view: &CycleView,
        report: &GcReport,
    ) -> CycleNeeds {
        if stats.available > stats.capacity {
            info!(
                available = stats.available,
                capacity = stats.capacity,
                "Availability is larger than capacity"
            );
        }
        let policy = &settings.config.policy;
        let total = view
            .listed
            .iter()
            .fold(0u64, |acc, i| acc.saturating_add(i.size()))
            .saturating_sub(report.freed);
        let fs = FsSpace {
            capacity: stats.capacity,
            available: stats.available,
        };
        let needs = CycleNeeds::plan(policy, Some(fs), total, Some(stats));
        match needs.space {
            SpaceRule::Need(need) => self.metrics.attempts().usage_before(need.usage_percent),
            SpaceRule::InvalidCapacity => {
                warn!(
                    reason = "InvalidDiskCapacity",
                    "{}",
                    GcError::InvalidCapacity
                );
            }
            _ => {}
        }
        log_needs(policy, stats, &needs, total);
        needs
    }

    /// The walk for the byte and inode needs, then the cycle's end ([`CycleNeeds::result`]):
    /// a shortfall is logged under its Event reason (capacity 0 was logged when read).
    async fn free_for_needs(
        &self,
        settings: &Settings,
        needs: &CycleNeeds,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        let bytes = needs.byte_goal();
        let inodes = needs.inode_goal();
        if bytes.is_none() && inodes.is_none() {
            return needs.result(0, None);
        }
        report.bytes_to_free = bytes.map(|goal| goal.amount);
        let goal = Goal {
            bytes: bytes.map(|goal| (goal.amount, goal.reason(), Some(goal.fs_usage()))),
            inodes,
        };
        let walked = self
            .free_space(settings, goal, free_time, view, report)
            .await?;
        let result = needs.result(walked.freed, walked.inodes);
        if let Err(err) = &result
            && !matches!(err, GcError::InvalidCapacity)
        {
            warn!(reason = err.event_reason().unwrap_or_default(), "{err}");
        }
        result
    }

    /// kubelet's DeleteUnusedImages: the space walk with no byte limit. Counted in
    /// KEP-6053's series with `trigger="unknown"`
    /// ([`ImageGcManager::delete_unused_images_for`] names the trigger).
    pub async fn delete_unused_images(&self, now: impl CycleTime) -> GcReport {
        self.delete_unused_images_for(GcTrigger::Unknown, now).await
    }

    /// [`ImageGcManager::delete_unused_images`] asked for by `trigger` (`eviction` for an
    /// eviction manager's node reclaim); its KEP-6053 target is the total size of the images
    /// it found eligible.
    pub async fn delete_unused_images_for(
        &self,
        trigger: GcTrigger,
        now: impl CycleTime,
    ) -> GcReport {
        let _cycle = self.cycle.lock().await;
        let now = now.read();
        let _progress = ProgressGuard::start(&self.metrics);
        self.metrics
            .attempts()
            .begin(GcOperation::DeleteUnusedImages, trigger);
        let settings = self.settings();
        let mut report = GcReport::default();
        info!("Attempting to delete unused images");
        let result = async {
            let (detected, mut view) = self.detect_locked(&settings, now).await?;
            report.detect = Some(detected);
            let goal = Goal {
                bytes: Some((i64::MAX, RemovalReason::Unused, None)),
                inodes: None,
            };
            self.free_space(&settings, goal, now, &mut view, &mut report)
                .await
                .map(|_| ())
        }
        .await;
        if let Err(e) = result {
            report.error = Some(e);
        }
        let target = Some(report.eligible_bytes);
        self.end_attempt(
            GcOperation::DeleteUnusedImages,
            trigger,
            target,
            &mut report,
        );
        report
    }

    /// Removes every image unused for longer than MaxAge, reading only the index range of
    /// last_used before `free_time - max_age`. Only watched time counts (`view.watch`): an
    /// image's watched unused time is never more than its time since last use, so the range
    /// holds every image MaxAge removes. Returns the image filesystem as read before the
    /// first victim's last look, when the removals freed bytes (the basis of `release.rs`'s
    /// wait).
    async fn free_old_images(
        &self,
        settings: &Settings,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<Option<ImageFsStats>, GcError> {
        let max_age = settings.config.policy.max_age;
        if max_age.is_zero() {
            return Ok(None);
        }
        let bound = free_time.saturating_sub(max_age);
        let mut victims: Vec<(usize, StoredRecord)> = Vec::new();
        for (position, entry) in self.store.eviction_order_before(bound)?.enumerate() {
            let entry = entry?;
            if past_max_age(
                &entry.key,
                &entry.record,
                &view.protected,
                free_time,
                max_age,
                &view.watch,
            ) {
                victims.push((position + 1, entry));
            }
        }
        let mut errors = Vec::new();
        let freed_before = report.freed;
        // The basis of the wait for the release (`release.rs`), read before the first last
        // look: nothing may await between a last look and its RemoveImage.
        let before = if victims.is_empty() {
            None
        } else {
            self.reading_before_removals().await
        };
        for (rank, victim) in victims {
            if self.rescue(settings, &victim, view, free_time).await? {
                continue;
            }
            let note = note(free_time, RemovalReason::Age, rank, None);
            if let Err(e) = self.remove(&victim, note, report).await {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(before.filter(|_| report.freed > freed_before))
        } else {
            Err(GcError::AgeDeletion { max_age, errors })
        }
    }
}

/// Logs each rule that needs room, as the kubelet logs its percentage rule's.
fn log_needs(policy: &GcPolicy, stats: &ImageFsStats, needs: &CycleNeeds, total: u64) {
    if let Some(need) = needs.space_need() {
        info!(
            mountpoint = stats.mountpoint.as_str(),
            usage = need.usage_percent,
            high_threshold = policy.high_threshold_percent,
            amount_to_free = need.amount_to_free.unwrap_or(0),
            low_threshold = policy.low_threshold_percent,
            "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
    }
    if let Some(BudgetNeed {
        amount_to_free: Some(amount_to_free),
        high,
        low,
        ..
    }) = needs.budget
    {
        info!(
            total,
            high_bytes = high,
            amount_to_free,
            low_bytes = low,
            "Images are over the high byte budget, trying to free bytes down to the low budget"
        );
    }
    if let (Some(need), Some(thresholds)) = (needs.inode_goal(), policy.inodes) {
        info!(
            mountpoint = stats.mountpoint.as_str(),
            usage = need.usage_percent,
            high_threshold = thresholds.high,
            inodes = need.inodes,
            inodes_free = need.inodes_free,
            low_threshold = thresholds.low,
            "Inode usage on image filesystem is over the high inode threshold, trying to free inodes down to the low inode threshold"
        );
    }
}
