//! What the manager's cycles return: one removal ([`Removal`]), a detect's report
//! ([`DetectReport`]), a GarbageCollect's or DeleteUnusedImages' ([`GcReport`]) and a dry run's
//! ([`GcPlan`]). Their serialized fields are part of the JSON the CLI prints.
//!
//! [`classify`] reads a finished cycle's report as KEP-6053 labels it (its result and reason).
//!
//! Invariants: a report's removals are those the runtime confirmed, in the order they were made;
//! a failed cycle's report keeps the removals before its failure.

use serde::Serialize;

use crate::model::JournalEntry;
use crate::model::{RecordKey, RemovalReason, Repull};
use crate::store::JournalKey;

use crate::gc::GcError;
use crate::gc::attempt::{AttemptReason, AttemptResult, GcOperation, STATS_OP};
use crate::gc::explain::Explanation;

/// One image removed by GC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Removal {
    /// The removed image's record.
    pub key: RecordKey,
    /// Its size in bytes as the record had it.
    pub size: u64,
    /// Which rule removed it.
    pub reason: RemovalReason,
    /// A dry run's candidate that the journal shows was removed before and pulled back: what
    /// `gc --dry-run` says of it. Real removals leave it unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evicted_before: Option<String>,
}

/// What one detect cycle did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DetectReport {
    /// Records in the store after the detect.
    pub records: usize,
    /// Records this detect created (images new to the store).
    pub added: usize,
    /// Records this detect removed (images no longer listed).
    pub removed: usize,
    /// Images a container uses.
    pub in_use: usize,
    /// Whether the detect's batch committed (a batch that changes nothing commits nothing).
    pub committed: bool,
    /// Records of images gone from the runtime that imagekeeper did not remove, journaled as
    /// external removals by this detect's commit.
    #[serde(skip)]
    pub external_removals: Vec<(JournalKey, JournalEntry)>,
    /// Journal entries this detect's commit marked re-pulled.
    #[serde(skip)]
    pub repulls: Vec<Repull>,
}

/// What one GarbageCollect or DeleteUnusedImages did. `error` is set when the cycle failed;
/// the removals before the failure stand.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct GcReport {
    /// The cycle's detect, when it ran.
    pub detect: Option<DetectReport>,
    /// The images removed, in removal order.
    pub removed: Vec<Removal>,
    /// The bytes the cycle freed.
    pub freed: u64,
    /// The cycle's error, if any; removals made before it stay in `removed`.
    pub error: Option<GcError>,
    /// The byte walk's amount to free, when a byte rule needed room this cycle: the larger of
    /// the percentage rule's and the byte budget's needs (the one its removals' reason names).
    /// Each of the walk's byte removals after its first is made while less than this was
    /// freed, so the walk stops at most one image past the low line.
    pub bytes_to_free: Option<i64>,
    /// The total size of the images the space walks chose and did not rescue (whether their
    /// removal then succeeded or not): DeleteUnusedImages' target in KEP-6053's series.
    pub eligible_bytes: u64,
    /// The cycle as KEP-6053 labels it (operation, trigger, result, reason, target), set when
    /// it ends.
    pub attempt: Option<crate::gc::attempt::Attempt>,
}

/// A dry run: what a cycle would remove, and the full explanation.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GcPlan {
    /// Every image and why it would or would not be removed.
    pub explanation: Explanation,
    /// What the cycle would remove, in order.
    pub removals: Vec<Removal>,
}

/// The result and reason of an attempt of `operation` that ended as `report` says.
///
/// An error before the detect completed is `detect_error`; ImageFsInfo's, `stats_error`;
/// capacity 0, `invalid_capacity`; a failed removal (MaxAge's or a walk's), `delete_error`;
/// a threshold rule that freed too little is `partial` when the attempt removed an image and
/// `noop` when it removed none, both `insufficient_freed`. Without an error, DeleteUnusedImages
/// is `all_unused` (success when it removed an image, else noop); GarbageCollect is
/// `threshold` success when a threshold rule removed an image, `age` success when only MaxAge
/// did, and `threshold` noop when nothing was removed.
pub fn classify(operation: GcOperation, report: &GcReport) -> (AttemptResult, AttemptReason) {
    use AttemptReason as Why;
    use AttemptResult as Res;
    let removed_any = !report.removed.is_empty();
    if let Some(error) = &report.error {
        if report.detect.is_none() {
            return (Res::Error, Why::DetectError);
        }
        return match error {
            GcError::Runtime { op, .. } if *op == STATS_OP => (Res::Error, Why::StatsError),
            GcError::InvalidCapacity => (Res::Error, Why::InvalidCapacity),
            GcError::SpaceDeletion { .. } | GcError::AgeDeletion { .. } => {
                (Res::Error, Why::DeleteError)
            }
            GcError::InsufficientSpace { .. }
            | GcError::InsufficientBudget { .. }
            | GcError::InsufficientInodes { .. } => (
                if removed_any { Res::Partial } else { Res::Noop },
                Why::InsufficientFreed,
            ),
            _ => (Res::Error, Why::Unknown),
        };
    }
    let result = if removed_any { Res::Success } else { Res::Noop };
    match operation {
        GcOperation::DeleteUnusedImages => (result, Why::AllUnused),
        GcOperation::GarbageCollect
            if removed_any
                && report
                    .removed
                    .iter()
                    .all(|r| r.reason == RemovalReason::Age) =>
        {
            (result, Why::Age)
        }
        GcOperation::GarbageCollect => (result, Why::Threshold),
    }
}
