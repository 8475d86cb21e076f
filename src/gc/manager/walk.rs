//! kubelet's freeSpace on the manager: the space walk in eviction order (the index read lazily
//! in chunks, or the adaptive or predictive ranking of the listed images), removing eligible
//! images until the goal's bytes are freed and, with an inode goal, until the image filesystem's
//! inode use is at or below the low inode threshold.
//!
//! Invariants: one synchronous step reads the index and picks at most `WALK_CHUNK` victims, its
//! read transaction ending before any await; the first eligible image is always removed, as in
//! the kubelet; a victim the last look keeps frees nothing; DeleteUnusedImages keeps the index's
//! order whatever the configured order.

use crate::model::{FsUsage, ImageLike, RecordKey, UnixNanos};
use crate::runtime::ImageRuntime;
use crate::store::{EvictionKey, StoredRecord};

use crate::gc::adaptive::{self, AdaptiveRank, ListedTags};
use crate::gc::attempt::SkipReason;
use crate::gc::cycle::ByteWalk;
use crate::gc::detect::ListedImages;
use crate::gc::evict::Verdict;
use crate::gc::fault_hooks::fault_hooks;
use crate::gc::metrics::RemovalReason;
use crate::gc::plan::{SpaceStep, SpaceWalk};
use crate::gc::predictive_walk::{PredictiveWalk, predictive_walk_with};
use crate::gc::space::InodeNeed;
use crate::gc::{GcError, GcOrder};

use super::{CycleView, GcReport, ImageGcManager, Settings, note};

/// How many eligible images one synchronous step of the walk picks before removing them.
pub(super) const WALK_CHUNK: usize = 64;

/// The listed images ranked once per walk by an order other than the index's.
enum Ranked {
    /// The adaptive order's records.
    Records(Vec<StoredRecord>),
    /// The predictive order, by place in the cycle's list.
    Predictive(PredictiveWalk),
}

/// What a space walk is to free: bytes (the amount, the reason its removals carry and the
/// filesystem or budget their journal entries record), inodes (the reading that found them
/// over the high inode threshold), or both.
#[derive(Clone, Copy, Debug)]
pub(super) struct Goal {
    pub(super) bytes: Option<(i64, RemovalReason, Option<FsUsage>)>,
    pub(super) inodes: Option<InodeNeed>,
}

/// What a space walk did: the bytes it freed and the last inode reading it took.
#[derive(Clone, Copy, Debug)]
pub(super) struct Walked {
    pub(super) freed: i64,
    pub(super) inodes: Option<InodeNeed>,
}

/// Where one walk is: the byte walk's progress ([`ByteWalk`]), the last inode reading, the
/// index entries read so far and where the next step resumes.
struct WalkState {
    goal: Goal,
    bytes: ByteWalk,
    inodes_now: Option<InodeNeed>,
    /// Index entries the walk read before the current step: a victim's rank is its position
    /// in the eviction order as the walk read it.
    walked: usize,
    resume: Option<EvictionKey>,
    /// The fault hooks' OverFree: one byte removal past the goal (off but under the
    /// simulator's mutants).
    over_free: bool,
}

impl WalkState {
    fn new(goal: Goal) -> WalkState {
        let over_free = fault_hooks().over_free();
        WalkState {
            goal,
            bytes: ByteWalk::new(goal.bytes.map(|(amount, _, _)| amount))
                .with_extra_removals(u32::from(over_free)),
            inodes_now: goal.inodes,
            walked: 0,
            resume: None,
            over_free,
        }
    }

    /// The step's byte limit: the goal's amount, or, with an inode goal (or OverFree), as
    /// far as the index goes.
    fn limit(&self) -> i64 {
        match (self.goal.bytes, self.goal.inodes) {
            (Some((amount, _, _)), None) if !self.over_free => amount,
            _ => i64::MAX,
        }
    }

    /// The next removal's reason and journaled filesystem: the byte goal's while bytes remain
    /// to free, then the inode rule's.
    fn reason(&self) -> (RemovalReason, Option<FsUsage>) {
        match self.goal.bytes {
            Some((_, reason, fs)) if !self.bytes.done() => (reason, fs),
            _ => (
                RemovalReason::Inodes,
                self.goal.inodes.map(|n| n.fs_usage()),
            ),
        }
    }

    fn inodes_done(&self) -> bool {
        self.inodes_now.is_none_or(|n| n.met())
    }
}

impl<R: ImageRuntime> ImageGcManager<R> {
    /// kubelet's freeSpace: walks the eviction order, removing eligible images until the
    /// goal's bytes are freed (the first eligible image is always removed, as in the kubelet:
    /// [`ByteWalk`]) and, with an inode goal, until the image filesystem, read again after
    /// each removal, has its inode use at or below the low inode threshold. A victim the last
    /// look keeps frees nothing, and the walk goes on to the next candidate. Each removal's
    /// reason is the byte goal's while bytes remain to free, then `inodes`.
    pub(super) async fn free_space(
        &self,
        settings: &Settings,
        goal: Goal,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<Walked, GcError> {
        if goal.bytes.is_none() && goal.inodes.is_none() {
            return Ok(Walked {
                freed: 0,
                inodes: None,
            });
        }
        let mut state = WalkState::new(goal);
        let ranked = self.walk_order(settings, &goal, view, free_time)?;
        let mut errors = Vec::new();
        'walk: loop {
            let step = self.walk_step(settings, &ranked, &state, view, free_time)?;
            if step.resume.is_some() {
                state.resume = step.resume;
            }
            self.count_skipped(view, &step.skipped);
            let before = state.walked;
            state.walked = state.walked.saturating_add(step.read);
            if step.victims.is_empty() {
                break;
            }
            for (victim, position) in step.victims.into_iter().zip(step.positions) {
                if self.rescue(settings, &victim, view, free_time).await? {
                    continue;
                }
                let (reason, fs) = state.reason();
                let note = note(free_time, reason, before + position, fs);
                report.eligible_bytes = report.eligible_bytes.saturating_add(victim.record.size);
                match self.remove(&victim, note, report).await {
                    Ok(()) => {
                        if self
                            .after_removal(settings, &mut state, victim.record.size)
                            .await?
                        {
                            break 'walk;
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        let freed = state.bytes.freed();
        if errors.is_empty() {
            Ok(Walked {
                freed,
                inodes: state.inodes_now,
            })
        } else {
            Err(GcError::SpaceDeletion {
                wanted: goal.bytes.map_or(0, |(amount, _, _)| amount),
                freed,
                errors,
            })
        }
    }

    /// The walk's order: the adaptive or predictive ranking of the listed images, ranked once
    /// per walk (see `adaptive.rs`, `predictive_walk.rs`), or `None` for the index's, read
    /// lazily. DeleteUnusedImages removes every eligible image: it keeps the index's order.
    fn walk_order(
        &self,
        settings: &Settings,
        goal: &Goal,
        view: &CycleView,
        free_time: UnixNanos,
    ) -> Result<Option<Ranked>, GcError> {
        let delete_unused = matches!(goal.bytes, Some((_, RemovalReason::Unused, _)));
        Ok(match settings.config.order {
            GcOrder::Adaptive if !delete_unused => Some(Ranked::Records(
                self.adaptive_order(&view.listed)?
                    .into_iter()
                    .map(|(r, _)| r)
                    .collect::<Vec<_>>(),
            )),
            // The predictive order keeps each ranked image's place in the list: its key is
            // built only when the walk reaches it (`predictive_walk.rs`).
            // What the cluster knows replaces the estimates it covers (`signals.rs`).
            GcOrder::Predictive if !delete_unused => {
                Some(Ranked::Predictive(predictive_walk_with(
                    &self.store,
                    &view.listed,
                    &self.cluster_signals.known_uses(free_time),
                    free_time,
                )?))
            }
            _ => None,
        })
    }

    /// One synchronous step: reads the order from where the last step stopped and picks the
    /// next eligible images. The read transaction ends before it returns.
    fn walk_step(
        &self,
        settings: &Settings,
        ranked: &Option<Ranked>,
        state: &WalkState,
        view: &CycleView,
        free_time: UnixNanos,
    ) -> Result<SpaceStep, GcError> {
        let walk = SpaceWalk {
            in_use: &view.protected,
            free_time,
            min_age: settings.config.policy.min_age,
            bytes_to_free: state.limit(),
        };
        let freed = state.bytes.freed();
        Ok(match ranked {
            None => walk.step(&self.store, state.resume.as_ref(), freed, WALK_CHUNK)?,
            Some(Ranked::Records(ranked)) => walk.step_entries(
                ranked.iter().skip(state.walked).map(|r| Ok(r.clone())),
                freed,
                WALK_CHUNK,
            )?,
            Some(Ranked::Predictive(ranked)) => walk.step_entries(
                ranked.records_from(&view.listed, state.walked).map(Ok),
                freed,
                WALK_CHUNK,
            )?,
        })
    }

    /// Counts a confirmed removal of `size` bytes and, while the inode goal is not met,
    /// measures the filesystem again (CRI does not say how many inodes an image holds).
    /// Returns whether the walk is done.
    async fn after_removal(
        &self,
        settings: &Settings,
        state: &mut WalkState,
        size: u64,
    ) -> Result<bool, GcError> {
        state.bytes.removed(size);
        if !state.inodes_done() {
            let stats = self.observe_image_fs().await?;
            state.inodes_now = InodeNeed::compute(&stats, settings.config.policy.inodes);
        }
        Ok(state.bytes.done() && state.inodes_done())
    }

    /// Counts the entries a walk's step passed over in KEP-6053's skipped images, each under
    /// its verdict's reason ([`Verdict::skip_reason`]); a protected key's verdict is what
    /// keeps it (`CycleView::kept_by`; in use when nothing else does).
    pub(super) fn count_skipped(&self, view: &CycleView, skipped: &[(Verdict, RecordKey)]) {
        let mut counts = [0u64; SkipReason::ALL.len()];
        for (verdict, key) in skipped {
            let verdict = match verdict {
                Verdict::InUse => view.kept_by.get(key).copied().unwrap_or(Verdict::InUse),
                other => *other,
            };
            let why = verdict.skip_reason();
            if let Some(why) = why {
                counts[why as usize] += 1;
            }
        }
        for (why, n) in SkipReason::ALL.into_iter().zip(counts) {
            self.metrics.attempts().skipped(why, n);
        }
    }

    /// The listed images that have a record, with their repo tags by position (borrowed from
    /// the list), looked up in one read transaction (`Store::get_many`).
    fn listed_records<'l>(
        &self,
        listed: &'l ListedImages,
    ) -> Result<(Vec<StoredRecord>, ListedTags<'l>), GcError> {
        let keys: Vec<RecordKey> = listed.iter().map(|image| image.record_key()).collect();
        let found = self.store.get_many(&keys)?;
        let mut records = Vec::with_capacity(keys.len());
        let mut tags = ListedTags::with_capacity(keys.len());
        for ((image, key), record) in listed.iter().zip(keys).zip(found) {
            if let Some(record) = record {
                tags.push(image.tags());
                records.push(StoredRecord { key, record });
            }
        }
        Ok((records, tags))
    }

    /// The listed images with a record, in the adaptive order (`adaptive.rs`).
    fn adaptive_order(
        &self,
        listed: &ListedImages,
    ) -> Result<Vec<(StoredRecord, AdaptiveRank)>, GcError> {
        // The returns count only re-pulled entries, kept by the store's history mirror
        // (`store/history_mirror.rs`): no walk reads the journal (issue 53).
        let returns = self.store.repulled_counts()?;
        let (records, tags) = self.listed_records(listed)?;
        Ok(adaptive::rank_listed(records, &returns, &tags))
    }
}
