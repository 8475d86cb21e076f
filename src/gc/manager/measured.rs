//! The measured pass on each further image filesystem ImageFsInfo reports (issue 28): CRI does
//! not say which filesystem an image is on, so the pass removes eligible images in eviction
//! order and reads ImageFsInfo again after each removal.
//!
//! Invariants: a filesystem not read (capacity 0) is not judged; one on the same device as an
//! earlier one is skipped; a pass stops at or below the low lines, once its removals add up to
//! what its first reading asked to free, or after `UNLOWERED_REMOVALS` removals in a row that
//! did not lower its reading; every victim goes through the last look before its removal.

use tracing::{debug, info, warn};

use crate::model::{FsUsage, ImageFsStats, UnixNanos};
use crate::runtime::ImageRuntime;
use crate::store::{EvictionKey, StoredRecord};

use crate::gc::GcError;
use crate::gc::attempt::STATS_OP;
use crate::gc::cycle::ByteWalk;
use crate::gc::metrics::RemovalReason;
use crate::gc::plan::SpaceWalk;
use crate::gc::space::{FsNeed, SpaceNeed};

use super::walk::WALK_CHUNK;
use super::{CycleView, GcReport, ImageGcManager, Settings, note, runtime_error, to_i64};

/// A measured pass on a further image filesystem stops after this many removals in a row that
/// did not lower its reading (its usage is not the images the walk removes).
pub(super) const UNLOWERED_REMOVALS: usize = 3;

impl<R: ImageRuntime> ImageGcManager<R> {
    /// The thresholds on each image filesystem ImageFsInfo reports after the first (issue
    /// 28), never on a container filesystem. CRI does not say which filesystem an image is
    /// on, so a filesystem over a high line gets a measured pass ([`Self::free_measured`]).
    /// One not read (capacity 0) is not judged; one on the same device as the first or an
    /// earlier one is skipped (its reading is that filesystem's). Returns the first failure.
    pub(super) async fn free_other_filesystems(
        &self,
        settings: &Settings,
        stats: &ImageFsStats,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        for fs in &stats.other_image_fs {
            if fs.capacity == 0 {
                debug!(
                    mountpoint = fs.mountpoint.as_str(),
                    "A further image filesystem reports capacity 0: not judged"
                );
            }
        }
        let mut result = Ok(());
        for (index, need) in FsNeed::others(stats, &settings.config.policy) {
            if let Some(first) = &need.same_filesystem_as {
                info!(
                    mountpoint = need.mountpoint.as_str(),
                    same_as = first.as_str(),
                    "A further image filesystem is the same filesystem as an earlier one: skipped"
                );
                continue;
            }
            if !need.runs() {
                continue;
            }
            let done = self
                .free_measured(settings, index, &need, free_time, view, report)
                .await;
            if result.is_ok() {
                result = done;
            }
        }
        result
    }

    /// The measured pass on further image filesystem `index` (judged `trigger` on the cycle's
    /// first reading): reads ImageFsInfo first (the walks before may have freed it already)
    /// and returns when that filesystem is at or below its low lines; otherwise removes
    /// eligible images in eviction order, reads ImageFsInfo again after each removal, and
    /// stops once it is at or below its low lines (bytes and inodes), once the images removed
    /// add up to what that first reading asked to free (a byte pass, counted by image sizes
    /// as the first walk counts: [`ByteWalk`]), or after [`UNLOWERED_REMOVALS`] removals in a
    /// row that did not lower its reading (its usage is not images'); it fails with the
    /// kubelet's wording when no candidate is left. Removals carry reason `space` (bytes over
    /// the high threshold) or `inodes`, with that filesystem's usage in the journal.
    async fn free_measured(
        &self,
        settings: &Settings,
        index: usize,
        trigger: &FsNeed,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        let Some((pass, fs)) = self.start_measured(settings, index, trigger).await? else {
            return Ok(());
        };
        let mut run = MeasuredRun {
            need: pass.first_need.clone(),
            last: used(&fs),
            unlowered: 0,
            bytes: ByteWalk::new(Some(pass.cap)),
            walked: 0,
            resume: None,
        };
        let mut errors = Vec::new();
        'walk: loop {
            let walk = SpaceWalk {
                in_use: &view.protected,
                free_time,
                min_age: settings.config.policy.min_age,
                bytes_to_free: pass.cap,
            };
            let resume = run.resume.as_ref();
            let step = walk.step(&self.store, resume, run.bytes.freed(), WALK_CHUNK)?;
            if step.resume.is_some() {
                run.resume = step.resume;
            }
            self.count_skipped(view, &step.skipped);
            let before = run.walked;
            run.walked = run.walked.saturating_add(step.read);
            if step.victims.is_empty() {
                break;
            }
            for (victim, position) in step.victims.into_iter().zip(step.positions) {
                if self.rescue(settings, &victim, view, free_time).await? {
                    continue;
                }
                let note = note(free_time, pass.reason, before + position, pass.fs_usage);
                match self.remove(&victim, note, report).await {
                    Ok(()) => match self
                        .measure_after(settings, &pass, &mut run, &victim)
                        .await?
                    {
                        AfterRemoval::Go => {}
                        AfterRemoval::Stop => break 'walk,
                        AfterRemoval::Gone => return Ok(()),
                    },
                    Err(e) => errors.push(e),
                }
            }
        }
        pass.end(&run, errors)
    }

    /// The measured pass's first reading: `None` when the filesystem is gone from the answer,
    /// not judged, or already at or below its low lines (logged); else the pass and the
    /// reading.
    async fn start_measured<'t>(
        &self,
        settings: &Settings,
        index: usize,
        trigger: &'t FsNeed,
    ) -> Result<Option<(MeasuredPass<'t>, ImageFsStats)>, GcError> {
        let policy = &settings.config.policy;
        let mountpoint = trigger.mountpoint.as_str();
        let fresh = self
            .runtime
            .image_fs_stats()
            .await
            .map_err(runtime_error(STATS_OP))?;
        // The filesystem gone from the answer: nothing left to judge.
        let Some(fs) = reading(&fresh, index, mountpoint) else {
            return Ok(None);
        };
        let Some(first_need) = FsNeed::compute(&fs, policy) else {
            return Ok(None);
        };
        if first_need.met() {
            debug!(
                mountpoint,
                "A further image filesystem is at or below the low thresholds after the walks before it: no pass"
            );
            return Ok(None);
        }
        info!(
            mountpoint = first_need.mountpoint.as_str(),
            usage = first_need.usage_percent,
            high_threshold = policy.high_threshold_percent,
            low_threshold = policy.low_threshold_percent,
            inode_usage = first_need.inodes.map(|n| n.usage_percent),
            "A further image filesystem is over a high threshold, trying to free it down to the low thresholds (measured after each removal)"
        );
        let (reason, fs_usage) = if trigger.bytes_over_high && !first_need.bytes_at_or_below_low {
            let usage = SpaceNeed::compute(fs.capacity, fs.available, policy)
                .ok()
                .map(|n| n.fs_usage());
            (RemovalReason::Space, usage)
        } else {
            (
                RemovalReason::Inodes,
                first_need.inodes.map(|n| n.fs_usage()),
            )
        };
        // What the pass may free in bytes: down to the low threshold at its first reading
        // (no byte cap on an inode-only pass; the unlowered-removal stop bounds it).
        let (wanted, cap) = match reason {
            RemovalReason::Space => {
                let wanted =
                    fs_usage.map_or(0, |u| to_i64(u.used_before.saturating_sub(u.target_used)));
                (wanted, wanted)
            }
            _ => (0, i64::MAX),
        };
        let pass = MeasuredPass {
            index,
            mountpoint,
            first_need,
            reason,
            fs_usage,
            wanted,
            cap,
        };
        Ok(Some((pass, fs)))
    }

    /// After a confirmed removal: counts it and reads the filesystem again (CRI does not say
    /// which filesystem the image was on), then says whether the pass goes on.
    async fn measure_after(
        &self,
        settings: &Settings,
        pass: &MeasuredPass<'_>,
        run: &mut MeasuredRun,
        victim: &StoredRecord,
    ) -> Result<AfterRemoval, GcError> {
        run.bytes.removed(victim.record.size);
        let answer = self
            .runtime
            .image_fs_stats()
            .await
            .map_err(runtime_error(STATS_OP))?;
        let Some(fs) = reading(&answer, pass.index, pass.mountpoint) else {
            return Ok(AfterRemoval::Gone);
        };
        match FsNeed::compute(&fs, &settings.config.policy) {
            Some(now) => run.need = now,
            None => return Ok(AfterRemoval::Gone),
        }
        if run.need.met() {
            return Ok(AfterRemoval::Stop);
        }
        let now_used = used(&fs);
        if now_used.0 < run.last.0 || now_used.1 < run.last.1 {
            run.unlowered = 0;
        } else {
            run.unlowered += 1;
        }
        run.last = now_used;
        let mountpoint = pass.mountpoint;
        if run.unlowered >= UNLOWERED_REMOVALS {
            warn!(
                mountpoint,
                removals = run.unlowered,
                "Removals did not lower a further image filesystem's usage: it is not images' (or not these images'), stopping its measured pass"
            );
            return Ok(AfterRemoval::Stop);
        }
        if run.bytes.done() {
            info!(
                mountpoint,
                freed = run.bytes.freed(),
                wanted = pass.wanted,
                "The measured pass removed images adding up to what the further image filesystem's first reading asked to free: stopping"
            );
            return Ok(AfterRemoval::Stop);
        }
        Ok(AfterRemoval::Go)
    }
}

/// A measured pass's fixed inputs, from its first reading.
struct MeasuredPass<'t> {
    index: usize,
    mountpoint: &'t str,
    first_need: FsNeed,
    reason: RemovalReason,
    /// The filesystem as the pass's removals journal it.
    fs_usage: Option<FsUsage>,
    /// The bytes its first reading asked to free (0 for an inode pass).
    wanted: i64,
    /// The walk's byte limit.
    cap: i64,
}

impl MeasuredPass<'_> {
    /// How the pass ends: the removals' errors, else met or the images removed add up to what
    /// the first reading asked (the kubelet's success, counted as its walk counts; the next
    /// cycle reads it again), else the kubelet's insufficient space or inodes.
    fn end(&self, run: &MeasuredRun, errors: Vec<String>) -> Result<(), GcError> {
        let freed = run.bytes.freed();
        if !errors.is_empty() {
            return Err(GcError::SpaceDeletion {
                wanted: self.wanted,
                freed,
                errors,
            });
        }
        let need = &run.need;
        if need.met() || (self.reason == RemovalReason::Space && freed >= self.cap) {
            return Ok(());
        }
        let err = match (need.bytes_at_or_below_low, need.inodes, need.usage_percent) {
            (false, _, Some(usage_percent)) => GcError::InsufficientSpace {
                usage_percent,
                capacity: self.fs_usage.map_or(0, |u| u.capacity),
                freed,
            },
            (_, Some(after), _) => GcError::InsufficientInodes {
                usage_percent: after.usage_percent,
                inodes: after.inodes,
                freed: self
                    .first_need
                    .inodes
                    .map_or(0, |b| b.used().saturating_sub(after.used())),
            },
            _ => return Ok(()),
        };
        warn!(
            reason = err.event_reason().unwrap_or_default(),
            mountpoint = need.mountpoint.as_str(),
            "{err}"
        );
        Err(err)
    }
}

/// Where a measured pass is.
struct MeasuredRun {
    /// The filesystem's need at the last reading.
    need: FsNeed,
    /// Bytes and inodes used at the last reading.
    last: (u64, u64),
    /// Removals in a row that did not lower the reading.
    unlowered: usize,
    bytes: ByteWalk,
    walked: usize,
    resume: Option<EvictionKey>,
}

/// What a measured pass does after a removal.
enum AfterRemoval {
    Go,
    Stop,
    /// The filesystem is gone from the answer (or no longer read): nothing left to judge.
    Gone,
}

/// Further image filesystem `index` in `stats`, when it is still `mountpoint`.
fn reading(stats: &ImageFsStats, index: usize, mountpoint: &str) -> Option<ImageFsStats> {
    stats
        .other_image_fs
        .get(index)
        .filter(|fs| fs.mountpoint == mountpoint)
        .cloned()
}

/// Bytes and inodes in use.
fn used(fs: &ImageFsStats) -> (u64, u64) {
    (fs.capacity.saturating_sub(fs.available), fs.inodes_in_use())
}
