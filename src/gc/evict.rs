//! Which images a GC walk may remove, and why not: the rules the manager applies while it
//! walks the eviction index, shared with `explain` so both always agree.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::model::{ImageRecord, RecordKey, UnixNanos};

use super::attempt::SkipReason;
use super::watch::WatchHistory;

/// Why the space walk keeps or may remove an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// A container uses it (at the last detect).
    InUse,
    /// A pull through imagekeeper is fetching it (the agent's dry run only: an offline
    /// explain cannot see pulls).
    PullInProgress,
    /// A kubelet pull intent names it: the kubelet is pulling it.
    KubeletPulling,
    /// A pod bound to this node names it (`clusterSignals = true`): needed now, whether or
    /// not its container exists yet.
    NeededByPod,
    /// The kubelet's pulled record of it is younger than MinAge.
    KubeletJustPulled,
    /// The runtime or a pin pattern pins it.
    Pinned,
    /// A warm set entry keeps it (`[[warm]]`, `warmSetDir`; `[warmFromHistory]` pulls
    /// images back but does not keep them).
    Warm,
    /// An operator's pin (`imagekeeper pin`) keeps it until it expires.
    PinnedByImagekeeper,
    /// It cannot come back (the sandbox image, or no repo digest) and
    /// `protectIrreplaceable` keeps it.
    Irreplaceable,
    /// Its last use is not before the GC's start.
    UsedTooRecently,
    /// It was first detected less than MinAge ago.
    YoungerThanMinAge,
    /// The walk may remove it.
    Eligible,
}

impl Verdict {
    /// Every verdict, in declaration order.
    pub const ALL: [Verdict; 12] = [
        Verdict::InUse,
        Verdict::PullInProgress,
        Verdict::KubeletPulling,
        Verdict::NeededByPod,
        Verdict::KubeletJustPulled,
        Verdict::Pinned,
        Verdict::Warm,
        Verdict::PinnedByImagekeeper,
        Verdict::Irreplaceable,
        Verdict::UsedTooRecently,
        Verdict::YoungerThanMinAge,
        Verdict::Eligible,
    ];
}

impl Verdict {
    /// KEP-6053's reason for a walk passing over a record with this verdict (`None` for an
    /// eligible one): a container's use, the kubelet's pull intent or a bound pod is `in_use`, MinAge
    /// `min_age`, a pin, warm entry or irreplaceable image `pinned`, anything else `other`.
    pub fn skip_reason(self) -> Option<SkipReason> {
        match self {
            Verdict::Eligible => None,
            Verdict::InUse | Verdict::KubeletPulling | Verdict::NeededByPod => {
                Some(SkipReason::InUse)
            }
            Verdict::YoungerThanMinAge => Some(SkipReason::MinAge),
            Verdict::Pinned
            | Verdict::PinnedByImagekeeper
            | Verdict::Warm
            | Verdict::Irreplaceable => Some(SkipReason::Pinned),
            Verdict::PullInProgress | Verdict::KubeletJustPulled | Verdict::UsedTooRecently => {
                Some(SkipReason::Other)
            }
        }
    }
}

/// The verdict of a record imagekeeper protects (see `protect.rs`).
pub fn protection_verdict(protection: &super::protect::Protection) -> Verdict {
    if protection.is_pin() {
        Verdict::PinnedByImagekeeper
    } else {
        Verdict::Irreplaceable
    }
}

/// The space walk's rule for one record (kubelet's imagesInEvictionOrder + freeSpace): in use,
/// else the record's own rules ([`record_verdict`]).
pub fn space_verdict(
    key: &RecordKey,
    record: &ImageRecord,
    in_use: &BTreeSet<RecordKey>,
    free_time: UnixNanos,
    min_age: Duration,
) -> Verdict {
    if in_use.contains(key) {
        Verdict::InUse
    } else {
        record_verdict(record, free_time, min_age)
    }
}

/// The kubelet's freeSpace rules that read the record alone: pinned, used at or after the
/// GC's start, first detected less than MinAge before it; else eligible.
pub fn record_verdict(record: &ImageRecord, free_time: UnixNanos, min_age: Duration) -> Verdict {
    if record.pinned {
        Verdict::Pinned
    } else if record.last_used >= free_time {
        // The kubelet's freeSpace skips an image whose lastUsed equals or is after freeTime
        // ("Image ID was used too recently, not eligible for garbage collection",
        // pkg/kubelet/images/image_gc_manager.go): images in use get lastUsed = now at detect.
        // A stamp from the future that detect clamps becomes `now` too, and so is kept by this
        // rule for the one cycle that clamps it: the record says a use happened at a time we
        // cannot trust, and the latest time it can have happened is now, so it is read as a
        // use now (clamping to just before `now` would make it removable in the very cycle
        // that found it). The next cycle ages it from the clamped time.
        Verdict::UsedTooRecently
    } else if free_time.since(record.first_detected) < min_age {
        Verdict::YoungerThanMinAge
    } else {
        Verdict::Eligible
    }
}

/// Whether MaxAge removes this record at `free_time`: unused for longer than `max_age` of
/// watched time (the unwatched stretches of `watch` after its last use do not count; see
/// `watch.rs`); no MinAge check, as in the kubelet. In-use and pinned images are never removed.
pub fn past_max_age(
    key: &RecordKey,
    record: &ImageRecord,
    in_use: &BTreeSet<RecordKey>,
    free_time: UnixNanos,
    max_age: Duration,
    watch: &WatchHistory,
) -> bool {
    !max_age.is_zero()
        && !in_use.contains(key)
        && !record.pinned
        && watch.watched_unused(record, free_time) > max_age
}
