//! What explain answers: the decision on each image ([`Decision`], [`ImageExplanation`]), what
//! the space pass and the byte budget would do ([`SpacePass`], [`BudgetPass`]) and the whole
//! [`Explanation`]. Their serialized names and fields are the JSON `inspect explain` and
//! `gc --dry-run` print (a public contract: extend, never rename).
//!
//! Invariants: `Decision::as_str` is the decision's JSON name; `Explanation::removed` lists the
//! MaxAge pass's removals before the space walk's, in the order GarbageCollect makes them.

use serde::Serialize;

use crate::model::{ImageRecord, RecordKey, RemovalReason, Remover, UnixNanos};

use crate::gc::GcPolicy;

use crate::gc::adaptive::AdaptiveRank;
use crate::gc::evict::Verdict;
use crate::gc::predictive::PredictiveRank;
use crate::gc::protect::{KeepReason, Protection};
pub use crate::gc::space::FsSpace;
use crate::gc::space::{BudgetNeed, FsNeed, InodeNeed};
use crate::gc::watch::WatchHistory;

/// What GarbageCollect would do to one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Decision {
    /// Removed by the MaxAge pass.
    RemoveForAge,
    /// Removed by the space walk, inside the amount to free.
    RemoveForSpace,
    /// Image GC is off (HighThresholdPercent 100 and MaxAge 0).
    KeepGcDisabled,
    /// In use at the last detect.
    KeepInUse,
    /// A pull through imagekeeper is in progress (the running agent's explain only).
    KeepPullInProgress,
    /// A kubelet pull intent names it: the kubelet is pulling it.
    KeepKubeletPulling,
    /// The kubelet's pulled record of it is younger than MinAge: its container is about to
    /// start.
    KeepKubeletJustPulled,
    /// Pinned by the runtime or a pin pattern.
    KeepPinned,
    /// In the warm set: kept present ahead of use.
    KeepWarm,
    /// An operator's pin (`imagekeeper pin`) keeps it until it expires.
    KeepPinnedByImagekeeper,
    /// It cannot come back (the sandbox image, or no repo digest).
    KeepIrreplaceable,
    /// Last used at or after `now` (the clock went back?).
    KeepUsedTooRecently,
    /// First detected less than MinAge before `now`.
    KeepYoungerThanMinAge,
    /// Eligible, but the walk reached the amount to free before it.
    KeepBeyondAmountToFree,
    /// Eligible, but usage is below the high threshold: the space pass does not run.
    KeepBelowHighThreshold,
    /// Eligible, but capacity and available were not given.
    KeepSpaceNotEvaluated,
    /// Removed by the walk for the byte budget (its amount was the larger need).
    RemoveForBudget,
    /// Eligible and in the inode pass's order: removed if inode use is still above the low
    /// inode threshold when the walk reaches it. How many images the inode pass removes is
    /// measured as it runs (CRI does not say how many inodes an image holds), so a dry run
    /// cannot tell.
    InodeCandidate,
    /// A pod bound to this node names it: needed now, its container may not exist yet.
    KeepNeededByPod,
    /// Eligible and in the measured pass of a further image filesystem over a high line:
    /// removed if that filesystem is still above its low lines when the walk reaches it (CRI
    /// does not say which filesystem an image is on, so the pass measures after each removal).
    OtherFsCandidate,
}

impl Decision {
    /// The decision's name in `inspect explain`'s JSON and list output (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::RemoveForAge => "remove_for_age",
            Decision::RemoveForSpace => "remove_for_space",
            Decision::KeepGcDisabled => "keep_gc_disabled",
            Decision::KeepInUse => "keep_in_use",
            Decision::KeepPullInProgress => "keep_pull_in_progress",
            Decision::KeepKubeletPulling => "keep_kubelet_pulling",
            Decision::KeepKubeletJustPulled => "keep_kubelet_just_pulled",
            Decision::KeepPinned => "keep_pinned",
            Decision::KeepWarm => "keep_warm",
            Decision::KeepPinnedByImagekeeper => "keep_pinned_by_imagekeeper",
            Decision::KeepIrreplaceable => "keep_irreplaceable",
            Decision::KeepUsedTooRecently => "keep_used_too_recently",
            Decision::KeepYoungerThanMinAge => "keep_younger_than_min_age",
            Decision::KeepBeyondAmountToFree => "keep_beyond_amount_to_free",
            Decision::KeepBelowHighThreshold => "keep_below_high_threshold",
            Decision::KeepSpaceNotEvaluated => "keep_space_not_evaluated",
            Decision::RemoveForBudget => "remove_for_budget",
            Decision::InodeCandidate => "inode_candidate",
            Decision::OtherFsCandidate => "other_fs_candidate",
            Decision::KeepNeededByPod => "keep_needed_by_pod",
        }
    }

    /// The decision on an image the keep rule of `verdict` keeps; `None` for an eligible one.
    pub fn keeping(verdict: Verdict) -> Option<Decision> {
        Some(match verdict {
            Verdict::Eligible => return None,
            Verdict::InUse => Decision::KeepInUse,
            Verdict::PullInProgress => Decision::KeepPullInProgress,
            Verdict::KubeletPulling => Decision::KeepKubeletPulling,
            Verdict::NeededByPod => Decision::KeepNeededByPod,
            Verdict::KubeletJustPulled => Decision::KeepKubeletJustPulled,
            Verdict::Pinned => Decision::KeepPinned,
            Verdict::Warm => Decision::KeepWarm,
            Verdict::PinnedByImagekeeper => Decision::KeepPinnedByImagekeeper,
            Verdict::Irreplaceable => Decision::KeepIrreplaceable,
            Verdict::UsedTooRecently => Decision::KeepUsedTooRecently,
            Verdict::YoungerThanMinAge => Decision::KeepYoungerThanMinAge,
        })
    }

    /// Whether the image would be removed (an inode candidate may be: see
    /// [`Decision::InodeCandidate`]).
    pub fn removes(self) -> bool {
        matches!(
            self,
            Decision::RemoveForAge | Decision::RemoveForSpace | Decision::RemoveForBudget
        )
    }
}

/// The explanation of one image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ImageExplanation {
    /// 1-based position in eviction order.
    pub rank: usize,
    /// The image's record key.
    pub key: RecordKey,
    /// Its record.
    pub record: ImageRecord,
    /// Whether it is in use.
    pub in_use: bool,
    /// The space walk's verdict (before the amount to free is considered).
    pub verdict: Verdict,
    /// What GC would do with it.
    pub decision: Decision,
    /// Bytes the space walk has freed once it is done with this image (removed ones only).
    pub freed_after: Option<u64>,
    /// The time of the kubelet's pulled record of this image, when it has one (a use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_pulled_at: Option<UnixNanos>,
    /// The names the kubelet's observed preloaded records give this image (it found the image
    /// present without having pulled it): shown, not a use. Empty when it has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kubelet_preloaded: Vec<String>,
    /// The image's newest removal the journal holds after which it came back (a regret).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evicted_before: Option<PriorEviction>,
    /// Why imagekeeper keeps it whatever the GC would do (a pin, or irreplaceable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protection: Option<Protection>,
    /// Under `imageGCPolicy = "adaptive"`: where the adaptive order puts it, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRank>,
    /// Under `imageGCPolicy = "predictive"`: the estimate of its next use, what it came from,
    /// and the adaptive class that breaks ties.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictive: Option<PredictiveRank>,
    /// Kept because the cluster needs it now (`keep_needed_by_pod`): what needs it, the pod
    /// bound to this node (`namespace/name`) or the DaemonSet whose template names it
    /// (`DaemonSet namespace/name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needed_by: Option<String>,
    /// Needed by the cluster (what needs it, as `needed_by` names it) but past
    /// `clusterSignalsKeepShare`: the signals do not keep it, the order decides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub past_keep_share: Option<String>,
    /// Kept by a warm set entry (`keep_warm`): where the entry was declared (`warm[1] in
    /// /etc/imagekeeper.toml`, `/etc/warm/gpu.yaml: warm[0]`, `KeepSet/<name>`, `history`, a
    /// DaemonSet or CronJob of the cluster signals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_origin: Option<String>,
    /// A kept image: whether the runtime carries the keep as pinned
    /// ([`crate::gc::note_runtime_pins`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_pin: Option<RuntimePinStatus>,
    /// The reason, for people.
    pub reason: String,
}

/// What the space pass would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
#[non_exhaustive]
pub enum SpacePass {
    /// Capacity and available were not given.
    NotEvaluated,
    /// Image GC is off.
    Disabled,
    /// Capacity is 0: the manager fails with "invalid capacity 0 on image filesystem".
    InvalidCapacity,
    /// Usage below the high threshold.
    BelowHighThreshold {
        /// Percent of the filesystem used.
        usage_percent: i64,
        /// Available bytes after the MaxAge pass.
        available_after_age_pass: u64,
    },
    /// HighThresholdPercent 100 and MaxAge 0 with an inode threshold or a byte budget set:
    /// the byte-percentage pass is off, the other rules run ([`GcPolicy::space_pass_off`]).
    Off,
    /// The walk runs.
    Runs {
        /// Percent of the filesystem used.
        usage_percent: i64,
        /// Available bytes after the MaxAge pass.
        available_after_age_pass: u64,
        /// Bytes the walk must free (down to the low threshold).
        amount_to_free: i64,
        /// Bytes the walk frees.
        freed: u64,
        /// Whether the walk frees enough (else the manager reports insufficient space).
        sufficient: bool,
    },
}

/// What the byte budget would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BudgetPass {
    #[serde(flatten)]
    pub need: BudgetNeed,
    /// Bytes the walk frees when the budget's need is the larger byte need (0 otherwise).
    pub freed: u64,
    /// Whether the walk frees enough for the budget.
    pub sufficient: bool,
}

/// Everything explain works out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Explanation {
    /// The time explained.
    pub now: UnixNanos,
    /// The policy applied.
    pub policy: GcPolicy,
    /// The last detect's time, which marks the images in use.
    pub last_detect: Option<UnixNanos>,
    /// The heartbeat and the unwatched stretches MaxAge does not count (as the cycle's
    /// detect at `now` would leave them).
    pub watch: WatchHistory,
    /// Bytes the MaxAge pass frees.
    pub freed_for_age: u64,
    /// The byte-percentage pass.
    pub space: SpacePass,
    /// The image filesystem the decisions are for (ImageFsInfo's first image filesystem),
    /// when it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
    /// The byte budget after the MaxAge pass, when one is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetPass>,
    /// The inode rule at the filesystem's reading, when an inode threshold is set and the
    /// filesystem was read and counts inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<InodeNeed>,
    /// The further image filesystems ImageFsInfo reported (each judged by the thresholds;
    /// one over a high line gets a measured pass), when read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_filesystems: Vec<FsNeed>,
    /// Every image, in eviction order.
    pub images: Vec<ImageExplanation>,
    /// The kubelet's pull intents older than the intent max age: they keep no image.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stale_kubelet_intents: Vec<crate::kubelet::StaleIntent>,
}

impl Explanation {
    /// The keys GarbageCollect would remove, in the order it would remove them.
    pub fn removed(&self) -> Vec<RecordKey> {
        let age = self
            .images
            .iter()
            .filter(|i| i.decision == Decision::RemoveForAge);
        let space = self.images.iter().filter(|i| {
            matches!(
                i.decision,
                Decision::RemoveForSpace | Decision::RemoveForBudget
            )
        });
        age.chain(space).map(|i| i.key.clone()).collect()
    }
}

/// A removal of an image that was pulled again afterwards, as the journal holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PriorEviction {
    /// When it was removed.
    pub removed_at: UnixNanos,
    /// Who removed it.
    pub remover: Remover,
    /// Why imagekeeper removed it; `None` for an external removal.
    pub reason: Option<RemovalReason>,
    /// When it was pulled again.
    pub repulled_at: UnixNanos,
}

/// Whether the runtime carries the keep of one kept image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuntimePinStatus {
    /// Why imagekeeper keeps it (the running agent's reason when it keeps it, else explain's).
    pub keep: KeepReason,
    /// Whether the runtime lists it as pinned; `None` when not known.
    pub runtime_pinned: Option<bool>,
    /// Why `runtime_pinned` is `None` (empty when it is known).
    pub runtime_pin_note: String,
    /// Whether containerd's pinned label was on it at the same reconcile (`Some` exactly when
    /// `runtime_pinned` is; differing from it is a label the CRI does not carry).
    pub runtime_labelled: Option<bool>,
}
