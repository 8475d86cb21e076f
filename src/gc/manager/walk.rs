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
use crate::gc::detect::ListedImages;
use crate::gc::evict::Verdict;
use crate::gc::fault_hooks::fault_hooks;
use crate::gc::metrics::RemovalReason;
use crate::gc::plan::SpaceWalk;
use crate::gc::predictive_walk::{PredictiveWalk, predictive_walk};
use crate::gc::space::InodeNeed;
use crate::gc::{GcError, GcOrder};

use super::{CycleView, GcReport, ImageGcManager, Settings, note, to_i64};

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

impl<R: ImageRuntime> ImageGcManager<R> {
    /// kubelet's freeSpace: walks the eviction order, removing eligible images until the
    /// goal's bytes are freed (the first eligible image is always removed, as in the kubelet)
    /// and, with an inode goal, until the image filesystem, read again after each removal,
    /// has its inode use at or below the low inode threshold. A victim the last look keeps
    /// frees nothing, and the walk goes on to the next candidate. Each removal's reason is
    /// the byte goal's while bytes remain to free, then `inodes`.
    pub(super) async fn free_space(
        &self,
        settings: &Settings,
        goal: Goal,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<Walked, GcError> {
        let min_age = settings.config.policy.min_age;
        let thresholds = settings.config.policy.inodes;
        let mut freed: i64 = 0;
        let mut bytes_done = goal.bytes.is_none();
        // The fault hooks' OverFree: one byte removal past the goal.
        let over_free = fault_hooks().over_free();
        let mut over_freed = !over_free;
        let mut inodes_now = goal.inodes;
        let inodes_done = |now: &Option<InodeNeed>| now.is_none_or(|n| n.met());
        // The walk's byte limit: with an inode goal it reads on, as far as inodes need.
        let bytes_to_free = match (goal.bytes, goal.inodes) {
            (_, Some(_)) => i64::MAX,
            // (OverFree reads on too, to take its one image more.)
            (Some(_), None) if over_free => i64::MAX,
            (Some((amount, _, _)), None) => amount,
            (None, None) => {
                return Ok(Walked {
                    freed: 0,
                    inodes: None,
                });
            }
        };
        // Index entries the walk read before this step: a victim's rank is its position in
        // the eviction order as the walk read it.
        let mut walked: usize = 0;
        let mut errors = Vec::new();
        let mut resume: Option<EvictionKey> = None;
        // The adaptive order ranks the listed images once per walk (see `adaptive.rs`); the
        // kubelet's reads the index lazily.
        // DeleteUnusedImages removes every eligible image: it keeps the index's order.
        let delete_unused = matches!(goal.bytes, Some((_, RemovalReason::Unused, _)));
        let ranked = match settings.config.order {
            GcOrder::Adaptive if !delete_unused => Some(Ranked::Records(
                self.adaptive_order(&view.listed)?
                    .into_iter()
                    .map(|(r, _)| r)
                    .collect::<Vec<_>>(),
            )),
            // The predictive order keeps each ranked image's place in the list: its key is
            // built only when the walk reaches it (`predictive_walk.rs`).
            GcOrder::Predictive if !delete_unused => Some(Ranked::Predictive(predictive_walk(
                &self.store,
                &view.listed,
                free_time,
            )?)),
            _ => None,
        };
        'walk: loop {
            // One synchronous step: read the index from where the last step stopped and pick
            // the next eligible images. The read transaction ends before any await.
            let walk = SpaceWalk {
                in_use: &view.protected,
                free_time,
                min_age,
                bytes_to_free,
            };
            let step = match &ranked {
                None => walk.step(&self.store, resume.as_ref(), freed, WALK_CHUNK)?,
                Some(Ranked::Records(ranked)) => walk.step_entries(
                    ranked.iter().skip(walked).map(|r| Ok(r.clone())),
                    freed,
                    WALK_CHUNK,
                )?,
                Some(Ranked::Predictive(ranked)) => walk.step_entries(
                    ranked.records_from(&view.listed, walked).map(Ok),
                    freed,
                    WALK_CHUNK,
                )?,
            };
            if step.resume.is_some() {
                resume = step.resume;
            }
            self.count_skipped(view, &step.skipped);
            let before = walked;
            walked = walked.saturating_add(step.read);
            let chunk = step.victims;
            if chunk.is_empty() {
                break;
            }
            for (victim, position) in chunk.into_iter().zip(step.positions) {
                if self.rescue(settings, &victim, view, free_time).await? {
                    continue;
                }
                let (reason, fs) = match goal.bytes {
                    Some((_, reason, fs)) if !bytes_done => (reason, fs),
                    _ => (RemovalReason::Inodes, goal.inodes.map(|n| n.fs_usage())),
                };
                let note = note(free_time, reason, before + position, fs);
                report.eligible_bytes = report.eligible_bytes.saturating_add(victim.record.size);
                match self.remove(&victim, note, report).await {
                    Ok(()) => {
                        freed = freed.saturating_add(to_i64(victim.record.size));
                        if let Some((amount, _, _)) = goal.bytes
                            && freed >= amount
                        {
                            bytes_done = over_freed;
                            over_freed = true;
                        }
                        if !inodes_done(&inodes_now) {
                            // CRI does not say how many inodes an image holds: measure.
                            let stats = self.observe_image_fs().await?;
                            inodes_now = InodeNeed::compute(&stats, thresholds);
                        }
                        if bytes_done && inodes_done(&inodes_now) {
                            break 'walk;
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        if errors.is_empty() {
            Ok(Walked {
                freed,
                inodes: inodes_now,
            })
        } else {
            Err(GcError::SpaceDeletion {
                wanted: goal.bytes.map_or(0, |(amount, _, _)| amount),
                freed,
                errors,
            })
        }
    }

    /// Counts the entries a walk's step passed over in KEP-6053's skipped images, each under
    /// its verdict's reason ([`SkipReason::of_verdict`]); a protected key's verdict is what
    /// keeps it (`CycleView::kept_by`; in use when nothing else does).
    pub(super) fn count_skipped(&self, view: &CycleView, skipped: &[(Verdict, RecordKey)]) {
        let mut counts = [0u64; SkipReason::ALL.len()];
        for (verdict, key) in skipped {
            let verdict = match verdict {
                Verdict::InUse => view.kept_by.get(key).copied().unwrap_or(Verdict::InUse),
                other => *other,
            };
            let why = SkipReason::of_verdict(verdict);
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
        // The returns count only re-pulled entries: the others are not decoded (issue 41).
        let journal = self.store.journal_repulled()?;
        let returns = adaptive::returns(&journal);
        let (records, tags) = self.listed_records(listed)?;
        Ok(adaptive::rank_listed(records, &returns, &tags))
    }
}
