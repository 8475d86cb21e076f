//! The labels of KEP-6053's image GC series ("Kubelet Image Garbage Collection Observability",
//! proposed, alpha, text of 2026) and the rule that names one attempt's outcome: which
//! operation ran ([`GcOperation`]), who asked for it ([`GcTrigger`]), its result and reason
//! ([`AttemptResult`], [`AttemptReason`], read from the cycle's report by
//! `report.rs`'s `classify`), why an image it read was not removed ([`SkipReason`]) and under which reason
//! a removal is counted ([`DeletionReason`]). Pure: nothing here reads a clock or the runtime.
//!
//! Invariants: every label value is one of the KEP's, spelled as the KEP spells it; no label
//! takes an image name, id, path or error text. How imagekeeper's own rules map onto the KEP's
//! values (the byte budget and the inode rule count as `threshold` and `space`, MaxAge as
//! `age`, prune as `delete_unused_images`) is written once here and in
//! `docs/src/reference/metrics.md`.

use crate::model::RemovalReason;

/// KEP-6053's `operation` label: the kubelet method the attempt is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GcOperation {
    /// GarbageCollect: detect, MaxAge, then the threshold rules.
    GarbageCollect,
    /// DeleteUnusedImages: every eligible image, no byte limit (`imagekeeper prune`).
    DeleteUnusedImages,
}

impl GcOperation {
    /// Every operation, in declaration order.
    pub const ALL: [GcOperation; 2] =
        [GcOperation::GarbageCollect, GcOperation::DeleteUnusedImages];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            GcOperation::GarbageCollect => "garbage_collect",
            GcOperation::DeleteUnusedImages => "delete_unused_images",
        }
    }
}

/// KEP-6053's `trigger` label: who asked for the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GcTrigger {
    /// The agent's GC loop (`--gc-period`), as the kubelet's periodic image GC.
    Periodic,
    /// An eviction manager's node reclaim. imagekeeper has none: the value is for a program
    /// that embeds the library and calls DeleteUnusedImages under disk pressure.
    Eviction,
    /// Anyone else: `imagekeeper gc` and `prune` (through the agent or one-shot), replay, the
    /// simulator, tests.
    Unknown,
}

impl GcTrigger {
    /// Every trigger, in declaration order.
    pub const ALL: [GcTrigger; 3] = [GcTrigger::Periodic, GcTrigger::Eviction, GcTrigger::Unknown];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            GcTrigger::Periodic => "periodic",
            GcTrigger::Eviction => "eviction",
            GcTrigger::Unknown => "unknown",
        }
    }
}

/// KEP-6053's `result` label of an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttemptResult {
    /// Met the objective (or MaxAge removed images without a failed removal).
    Success,
    /// Failed before completing, or a removal failed.
    Error,
    /// Removed at least one image but did not meet the objective.
    Partial,
    /// Removed nothing: nothing was needed, or nothing was eligible.
    Noop,
}

impl AttemptResult {
    /// Every result, in declaration order.
    pub const ALL: [AttemptResult; 4] = [
        AttemptResult::Success,
        AttemptResult::Error,
        AttemptResult::Partial,
        AttemptResult::Noop,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Success => "success",
            AttemptResult::Error => "error",
            AttemptResult::Partial => "partial",
            AttemptResult::Noop => "noop",
        }
    }
}

/// KEP-6053's `reason` label of an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttemptReason {
    /// A threshold rule decided: usage under it (noop) or freed down to the low line (success).
    Threshold,
    /// MaxAge removed images and no threshold rule had to.
    Age,
    /// DeleteUnusedImages.
    AllUnused,
    /// ImageFsInfo failed.
    StatsError,
    /// The image filesystem reported capacity 0.
    InvalidCapacity,
    /// A RemoveImage call failed.
    DeleteError,
    /// A threshold rule could not free enough.
    InsufficientFreed,
    /// The cycle's detect failed.
    DetectError,
    /// Any other failure (the store's, a container list's at the last look).
    Unknown,
}

impl AttemptReason {
    /// Every reason, in declaration order.
    pub const ALL: [AttemptReason; 9] = [
        AttemptReason::Threshold,
        AttemptReason::Age,
        AttemptReason::AllUnused,
        AttemptReason::StatsError,
        AttemptReason::InvalidCapacity,
        AttemptReason::DeleteError,
        AttemptReason::InsufficientFreed,
        AttemptReason::DetectError,
        AttemptReason::Unknown,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptReason::Threshold => "threshold",
            AttemptReason::Age => "age",
            AttemptReason::AllUnused => "all_unused",
            AttemptReason::StatsError => "stats_error",
            AttemptReason::InvalidCapacity => "invalid_capacity",
            AttemptReason::DeleteError => "delete_error",
            AttemptReason::InsufficientFreed => "insufficient_freed",
            AttemptReason::DetectError => "detect_error",
            AttemptReason::Unknown => "unknown",
        }
    }
}

/// KEP-6053's `reason` label of `image_gc_skipped_images_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// A container uses it or mounts it as an image volume (at the detect, or at the last
    /// look), it is the sandbox image, or a kubelet pull intent names it.
    InUse,
    /// First detected less than MinAge ago.
    MinAge,
    /// Kept: pinned by the runtime, a pin pattern or an operator's pin, a warm set entry, or
    /// irreplaceable (`protectIrreplaceable`).
    Pinned,
    /// Anything else: used at or after the cycle's start, a pull through imagekeeper in
    /// flight, a kubelet pulled record younger than MinAge or newer than its last use, gone
    /// from the runtime's list.
    Other,
}

impl SkipReason {
    /// Every reason, in declaration order.
    pub const ALL: [SkipReason; 4] = [
        SkipReason::InUse,
        SkipReason::MinAge,
        SkipReason::Pinned,
        SkipReason::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::InUse => "in_use",
            SkipReason::MinAge => "min_age",
            SkipReason::Pinned => "pinned",
            SkipReason::Other => "other",
        }
    }
}

/// KEP-6053's `reason` label of `image_gc_image_deletions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeletionReason {
    /// A threshold rule's removal: the percentage rule, the byte budget or the inode rule.
    Space,
    /// MaxAge's.
    Age,
    /// DeleteUnusedImages'.
    AllUnused,
}

impl DeletionReason {
    /// Every reason, in declaration order.
    pub const ALL: [DeletionReason; 3] = [
        DeletionReason::Space,
        DeletionReason::Age,
        DeletionReason::AllUnused,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletionReason::Space => "space",
            DeletionReason::Age => "age",
            DeletionReason::AllUnused => "all_unused",
        }
    }

    /// The KEP's reason of a removal for `reason`.
    pub fn of_removal(reason: RemovalReason) -> DeletionReason {
        match reason {
            RemovalReason::Age => DeletionReason::Age,
            RemovalReason::Unused => DeletionReason::AllUnused,
            // A GC cycle never removes a leftover (`prune --orphans` does, outside GC).
            RemovalReason::Space
            | RemovalReason::Inodes
            | RemovalReason::Budget
            | RemovalReason::Orphan => DeletionReason::Space,
        }
    }
}

/// One attempt as KEP-6053 labels it, with its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The operation.
    pub operation: GcOperation,
    /// Who asked for it.
    pub trigger: GcTrigger,
    /// Its result.
    pub result: AttemptResult,
    /// Its reason.
    pub reason: AttemptReason,
    /// The bytes it set out to free, when it had a byte objective: GarbageCollect's byte
    /// rules' amount to free on the first image filesystem; DeleteUnusedImages' total size of
    /// the images it found eligible.
    pub target_bytes: Option<u64>,
}

/// The ImageFsInfo call's name in [`GcError::Runtime`](super::GcError::Runtime) (the manager's `observe_image_fs`).
pub(crate) const STATS_OP: &str = "get image filesystem stats";
