//! The simulator's oracle: its invariants (the first five are the issue's), judged after every step (and at each
//! RemoveImage imagekeeper issues, in `world`).
//!
//! 1. RemoveImage is never issued for an image that, in the ground truth at that moment, a
//!    container of any state uses, a pull through imagekeeper is fetching, that is pinned
//!    (or is the sandbox image), that an operator's pin still in force names (`imagekeeper
//!    pin`, written to the store; one with no expiry or a lifetime past any run), that is
//!    irreplaceable (no repo digest: side-loaded), or that is in the warm set: judged in
//!    `world` when the call is made.
//! 2. No acknowledged use is lost: for every image still present in the same generation as
//!    when its latest use was acknowledged (a pull that returned after its PullImage, a
//!    committed detect that listed it with a container), the record exists and its last_used
//!    is not older than that acknowledgement, across power cuts too.
//! 3. `Store::check_invariants` is clean after every step that committed (and the full
//!    `Store::check` after every recovery, in the driver).
//! 4. Liveness: a GarbageCollect that found usage at or above the high threshold (in the
//!    reading its space pass planned on: after the MaxAge pass and its wait for the runtime's
//!    release, `world::CycleFs::planned`) either freed
//!    by space removals at least what it had to free down to the low threshold, or says why
//!    not with an error; an `InsufficientSpace` error states the bytes its removals freed; and
//!    (judged by the driver, on a cycle during which nothing changed) a GC that gave up or a
//!    DeleteUnusedImages left no eligible image.
//! 5. Order: within one cycle, MaxAge removals come first, and each pass removes in strictly
//!    increasing (last_used, first_detected, key) of the records as they were when each
//!    RemoveImage was issued; (judged by the driver, on a quiet cycle) no eligible image that
//!    comes before the walk's last removal is left. Under `imageGCPolicy = "adaptive"` or
//!    `"predictive"` the space walk's passes (space, budget, inodes) follow that order by
//!    design (`gc/adaptive.rs`, `gc/predictive.rs`), so their order is not judged; MaxAge and DeleteUnusedImages still
//!    are, and every other invariant holds unchanged.
//! 6. Inodes and budget (issue 28): an inode removal is issued only while the cycle's last
//!    reading of the filesystem showed inode use above the low inode threshold (so the walk
//!    never goes below low by more than the one image it then removes); the byte budget's
//!    removals count with the space rule's in invariant 4 (one walk frees the larger byte
//!    need); invariant 1 holds for every rule's removals.
//! 7. No warm loop: a warm cycle never pulls an image imagekeeper removed earlier in the run
//!    (pulled, collected, pulled again); judged by the driver when a warm cycle ends.
//! 8. Never below low by more than one image's worth (issue 28), the byte half (the inode
//!    half is invariant 6, judged on the readings the cycle took): a GarbageCollect's byte
//!    walk, for the percentage rule or the byte budget, makes each of its removals after the
//!    first while what its earlier removals freed is less than its amount to free
//!    (`GcReport::bytes_to_free`); so it ends at most one image past its low line. (The
//!    simulated runtime reports one image filesystem: a further one's measured pass, whose
//!    removals follow the walk's, is not simulated.)

use std::collections::BTreeMap;

use crate::gc::{GcError, GcOrder, GcPolicy, GcReport, RemovalReason};
use crate::model::{ImageRecord, RecordKey, UnixNanos};
use crate::store::Store;

use super::world::{ActorId, FsAnswer, SimRuntime};

/// Where a record stands in the eviction order.
pub(crate) type Order = (UnixNanos, UnixNanos, RecordKey);

/// A RemoveImage a cycle issued: the image, its record at that moment, and the inode
/// reading the cycle had then.
type Issued = (String, Option<ImageRecord>, Option<(u64, u64)>);

/// An acknowledged use of an image.
#[derive(Clone, Debug)]
pub(crate) struct Ack {
    /// When the use was acknowledged (the simulated clock).
    pub at: UnixNanos,
    /// The image's generation when it was acknowledged.
    pub generation: u64,
    /// The acknowledged operation, for the violation's message.
    pub what: String,
}

/// The oracle's memory between steps.
#[derive(Debug, Default)]
pub struct Oracle {
    acks: BTreeMap<RecordKey, Ack>,
    commits_seen: u64,
    /// RemoveImage calls issued, over the run.
    pub(crate) removals: u64,
    /// GarbageCollect cycles that found usage over the high threshold (judged for liveness).
    pub(crate) over_threshold: u64,
    /// Acknowledged uses recorded.
    pub(crate) acknowledged: u64,
    /// Removals GC reported for the inode rule.
    pub(crate) inode_removals: u64,
    /// Removals GC reported for the byte budget.
    pub(crate) budget_removals: u64,
    /// Acknowledged uses checked against the store (summed over steps).
    pub(crate) ack_checks: u64,
    /// The (last_used, first_detected, key) of the last space or unused removal of the cycle
    /// judged last, to judge what it left.
    pub(crate) last_walk_order: Option<Order>,
    /// Per cycle: each RemoveImage it issued, with the victim's record at that moment.
    issued: BTreeMap<ActorId, Vec<Issued>>,
}

impl Oracle {
    /// Records the latest acknowledged use of `key`.
    pub(crate) fn acknowledge(&mut self, key: RecordKey, ack: Ack) {
        self.acknowledged += 1;
        self.acks.insert(key, ack);
    }

    /// A new store handle counts its commits from zero.
    pub(crate) fn restarted(&mut self) {
        self.commits_seen = 0;
    }

    /// Drops the RemoveImage calls a cycle issued, unjudged (a power cut ended the cycle).
    pub(crate) fn forget_cycle(&mut self, actor: ActorId) {
        self.issued.remove(&actor);
    }

    /// Invariants 1, 2 and 3 after a step.
    pub(crate) fn judge_step(&mut self, store: &Store, runtime: &SimRuntime) -> Option<String> {
        let mut world = runtime.world();
        if let Some(v) = world.violations.first() {
            return Some(v.clone());
        }
        for issued in std::mem::take(&mut world.removes) {
            self.removals += 1;
            let record = store
                .get(&RecordKey::new(issued.image_id.clone(), ""))
                .ok()
                .flatten();
            self.issued.entry(issued.actor).or_default().push((
                issued.image_id,
                record,
                issued.inodes_seen,
            ));
        }
        let commits = store.commits();
        if commits != self.commits_seen {
            self.commits_seen = commits;
            match store.check_invariants() {
                Ok(v) if !v.is_empty() => {
                    return Some(format!("invariant 3: Store::check after a commit: {v:?}"));
                }
                _ => {}
            }
        }
        for (key, ack) in &self.acks {
            if world.generation(key.image_id.as_str()) != Some(ack.generation) {
                continue;
            }
            self.ack_checks += 1;
            match store.get(key) {
                Ok(Some(r)) if r.last_used >= ack.at => {}
                Ok(Some(r)) => {
                    return Some(format!(
                        "invariant 2: {key} has last_used {} older than the use acknowledged at {} ({})",
                        r.last_used.0, ack.at.0, ack.what
                    ));
                }
                Ok(None) => {
                    return Some(format!(
                        "invariant 2: {key} is present but its record is gone; its use was acknowledged at {} ({})",
                        ack.at.0, ack.what
                    ));
                }
                // The disk is off: judged after the restart.
                Err(_) => {}
            }
        }
        None
    }

    /// Invariants 4 and 5 when a GarbageCollect or DeleteUnusedImages returns.
    pub fn judge_cycle(
        &mut self,
        actor: ActorId,
        report: &GcReport,
        fs: Option<FsAnswer>,
        cycle_now: Option<UnixNanos>,
        policy: &GcPolicy,
        order: GcOrder,
    ) -> Option<String> {
        // The RemoveImage calls in the order issued; a removal matches the next call for its
        // image (an image can be removed twice in one cycle: pulled again between).
        let issued = self.issued.remove(&actor).unwrap_or_default();
        let mut cursor = 0;
        self.last_walk_order = None;
        // 5. Order.
        let mut seen_other = false;
        let mut last: Option<(RemovalReason, (UnixNanos, UnixNanos, RecordKey))> = None;
        for removal in &report.removed {
            match removal.reason {
                RemovalReason::Inodes => self.inode_removals += 1,
                RemovalReason::Budget => self.budget_removals += 1,
                _ => {}
            }
            if removal.reason == RemovalReason::Age && seen_other {
                return Some(format!(
                    "invariant 5: MaxAge removal of {} after a space removal in one cycle",
                    removal.key
                ));
            }
            if removal.reason != RemovalReason::Age {
                seen_other = true;
            }
            let found = issued[cursor..]
                .iter()
                .position(|(id, _, _)| id == removal.key.image_id.as_str());
            let Some(at) = found else { continue };
            cursor += at + 1;
            // 6. The inode rule removes only while its last reading was over the low inode
            // threshold: never below low by more than the one image it then removes.
            if removal.reason == RemovalReason::Inodes {
                let Some(thresholds) = policy.inodes else {
                    return Some(format!(
                        "invariant 6: {} removed for inodes with no inode threshold set",
                        removal.key
                    ));
                };
                match issued[cursor - 1].2 {
                    Some((inodes, free)) if inodes > 0 => {
                        let target = inodes
                            - inodes.saturating_mul(100 - thresholds.low.unsigned_abs()) / 100;
                        if inodes - free.min(inodes) <= target {
                            return Some(format!(
                                "invariant 6: {} removed for inodes though the cycle's last reading had {} of {inodes} in use, at or below the low inode threshold ({target})",
                                removal.key,
                                inodes - free.min(inodes)
                            ));
                        }
                    }
                    _ => {
                        return Some(format!(
                            "invariant 6: {} removed for inodes before any inode reading",
                            removal.key
                        ));
                    }
                }
            }
            let Some(record) = issued[cursor - 1].1 else {
                continue;
            };
            let walk = matches!(
                removal.reason,
                RemovalReason::Space | RemovalReason::Budget | RemovalReason::Inodes
            );
            if walk && order != GcOrder::KubeletOrder {
                continue;
            }
            let order = (record.last_used, record.first_detected, removal.key.clone());
            if let Some((reason, previous)) = &last
                && *reason == removal.reason
                && *previous >= order
            {
                return Some(format!(
                    "invariant 5: {} ({:?} pass; last_used {}, first_detected {}) removed after {} (last_used {}, first_detected {}) though it comes first in (last_used, first_detected, key)",
                    removal.key,
                    removal.reason,
                    order.0.0,
                    order.1.0,
                    previous.2,
                    previous.0.0,
                    previous.1.0
                ));
            }
            if removal.reason != RemovalReason::Age {
                self.last_walk_order = Some(order.clone());
            }
            last = Some((removal.reason, order));
        }
        // 8. The byte walk stops at most one image past its low line.
        if let Some(amount) = report.bytes_to_free {
            let mut freed: i64 = 0;
            let walk = report
                .removed
                .iter()
                .filter(|r| matches!(r.reason, RemovalReason::Space | RemovalReason::Budget));
            for (n, removal) in walk.enumerate() {
                if n > 0 && freed >= amount {
                    return Some(format!(
                        "invariant 8: {} removed for {} after the walk had freed {freed} of the {amount} bytes it had to free: below the low line by more than one image's worth",
                        removal.key,
                        removal.reason.as_str()
                    ));
                }
                freed = freed.saturating_add(i64::try_from(removal.size).unwrap_or(i64::MAX));
            }
        }
        // 4. Liveness.
        let (Some(fs), Some(_now)) = (fs, cycle_now) else {
            return None;
        };
        if fs.capacity == 0 {
            return None;
        }
        let capacity = i64::try_from(fs.capacity).unwrap_or(i64::MAX);
        let available = i64::try_from(fs.available.min(fs.capacity)).unwrap_or(i64::MAX);
        let usage = 100 - available.saturating_mul(100) / capacity;
        if usage < policy.high_threshold_percent || policy.space_pass_off() {
            return None;
        }
        self.over_threshold += 1;
        let amount = capacity.saturating_mul(100 - policy.low_threshold_percent) / 100 - available;
        // The byte walk frees the larger byte need under its rule's reason.
        let freed: i64 = report
            .removed
            .iter()
            .filter(|r| matches!(r.reason, RemovalReason::Space | RemovalReason::Budget))
            .map(|r| i64::try_from(r.size).unwrap_or(i64::MAX))
            .sum();
        match &report.error {
            None if freed < amount => Some(format!(
                "invariant 4: GC at {usage}% (high {}%) freed {freed} of the {amount} bytes it had to free and reported no error",
                policy.high_threshold_percent
            )),
            Some(GcError::InsufficientSpace { freed: said, .. }) if *said != freed => {
                Some(format!(
                    "invariant 4: GC reports it freed {said} bytes, its space removals freed {freed}"
                ))
            }
            _ => None,
        }
    }
}
