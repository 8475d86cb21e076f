//! Explain: for every record, whether one GarbageCollect at `now` would remove it, and why
//! or why not. Pure: it takes the records in eviction order, the time of the last detect, the
//! policy, optionally the image filesystem's capacity and available bytes, and `now`.
//!
//! It replays the manager's algorithm with the manager's own rules (`evict::past_max_age`,
//! `evict::space_verdict`): the MaxAge pass first, then, when usage is at or above the high
//! threshold, the space walk in eviction order until the amount to free is reached (the first
//! eligible image is always removed, as in the kubelet). Assumptions, stated in the output:
//! the images in use are the records whose last_used is the last detect's time, nothing
//! changed since that detect, and every removal frees the image's recorded size (as the
//! scripted runtime does) — so what the MaxAge pass frees is available to the space pass.
//! MaxAge counts only watched time (see `watch.rs`): with a [`WatchHistory`] the reasons say
//! how much unwatched time since an image's last use was left out.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::model::{
    ImageFsStats, ImageRecord, JournalEntry, RecordKey, RemovalReason, Remover, UnixNanos,
};
use crate::store::{JournalKey, StoredRecord};

use super::GcPolicy;
use super::adaptive::AdaptiveRank;
use super::evict::{Verdict, past_max_age, protection_verdict, space_verdict, unused_since};
use super::kubelet::KubeletView;
use super::predictive::PredictiveRank;
use super::protect::{Protection, Protections};
use super::space::{BudgetNeed, FsNeed, InodeNeed, SpaceNeed};
use super::watch::WatchHistory;
use crate::format::{format_size, go_duration};

/// The image filesystem as the operator says it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FsSpace {
    /// Capacity in bytes.
    pub capacity: u64,
    /// Available bytes.
    pub available: u64,
}

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
        }
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
    /// A kept image: whether the runtime carries the keep as pinned
    /// ([`super::note_runtime_pins`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_pin: Option<super::RuntimePinStatus>,
    /// The reason, for people.
    pub reason: String,
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

/// Notes on each explained image the newest journaled removal of its image id after which
/// it was pulled back, and says so in its reason: a candidate that was evicted before and
/// came back is a sign of thrash (`explain`, `gc --dry-run`).
pub fn note_prior_evictions(explanation: &mut Explanation, journal: &[(JournalKey, JournalEntry)]) {
    for image in &mut explanation.images {
        // The journal is oldest first: the last match is the newest.
        let Some((key, entry)) = journal
            .iter()
            .rev()
            .find(|(k, e)| k.key.image_id == image.key.image_id && e.repulled_at.is_some())
        else {
            continue;
        };
        let Some(repulled_at) = entry.repulled_at else {
            continue;
        };
        let prior = PriorEviction {
            removed_at: key.removed_at,
            remover: entry.remover,
            reason: entry.reason,
            repulled_at,
        };
        image.reason.push_str("; ");
        image.reason.push_str(&prior.describe());
        image.evicted_before = Some(prior);
    }
}

/// Notes on each explained image its place in the adaptive order (`ranks`, by key), and says
/// why in its reason: the explanation's images must be in that order.
pub fn note_adaptive_ranks(
    explanation: &mut Explanation,
    ranks: &std::collections::BTreeMap<RecordKey, AdaptiveRank>,
) {
    for image in &mut explanation.images {
        if let Some(rank) = ranks.get(&image.key) {
            image.reason.push_str("; ");
            image.reason.push_str(&rank.describe());
            image.adaptive = Some(rank.clone());
        }
    }
}

/// Notes on each explained image its place in the predictive order (`ranks`, by key): its
/// estimate and what it came from, in its reason. The explanation's images must be in that
/// order (their `rank` is then the predictive rank).
pub fn note_predictive_ranks(
    explanation: &mut Explanation,
    ranks: &std::collections::BTreeMap<RecordKey, PredictiveRank>,
) {
    for image in &mut explanation.images {
        if let Some(rank) = ranks.get(&image.key) {
            image.reason.push_str("; ");
            image.reason.push_str(&rank.describe());
            image.predictive = Some(rank.clone());
        }
    }
}

impl PriorEviction {
    /// "evicted before (space by imagekeeper at ...) and pulled back 1m0s later", or for a
    /// removal by someone else "removed before (outside imagekeeper, at ...) and ...".
    pub fn describe(&self) -> String {
        let at = crate::format::format_rfc3339(self.removed_at);
        let removed = match (self.remover, self.reason) {
            (Remover::Imagekeeper, Some(reason)) => {
                format!(
                    "evicted before ({} by imagekeeper at {at})",
                    reason.as_str()
                )
            }
            _ => format!("removed before (outside imagekeeper, at {at})"),
        };
        format!(
            "{removed} and pulled back {} later",
            go_duration(self.repulled_at.since(self.removed_at))
        )
    }
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

/// The records in use: those whose last_used is the last detect's time.
pub fn in_use_at(records: &[StoredRecord], last_detect: Option<UnixNanos>) -> BTreeSet<RecordKey> {
    match last_detect.filter(|t| *t != UnixNanos::NEVER) {
        None => BTreeSet::new(),
        Some(t) => records
            .iter()
            .filter(|r| r.record.last_used == t)
            .map(|r| r.key.clone())
            .collect(),
    }
}

/// Explains one GarbageCollect at `now`. `records` must be in eviction order (as
/// `Store::eviction_order` yields them).
pub fn explain(
    records: &[StoredRecord],
    last_detect: Option<UnixNanos>,
    policy: GcPolicy,
    fs: Option<FsSpace>,
    now: UnixNanos,
) -> Explanation {
    explain_with_kubelet(
        records,
        last_detect,
        policy,
        fs,
        now,
        &BTreeSet::new(),
        &KubeletView::default(),
    )
}

/// [`explain`] by the running agent, which also knows the pulls in flight (their images are
/// kept as in use, "pull in progress", as the manager keeps them) and the kubelet's pull
/// records: the images its pull
/// intents name are kept ("the kubelet is pulling it", before any other reason, as detect
/// marks them in use), each image's pulled record time is shown, and the intents too old to
/// keep anything are listed. The records' last_used
/// must already count the pulled records' times (detect folds them in).
pub fn explain_with_kubelet(
    records: &[StoredRecord],
    last_detect: Option<UnixNanos>,
    policy: GcPolicy,
    fs: Option<FsSpace>,
    now: UnixNanos,
    pulling: &BTreeSet<RecordKey>,
    kubelet: &KubeletView,
) -> Explanation {
    let watch = WatchHistory::default();
    let protections = Protections::default();
    let context = ExplainContext {
        pulling,
        kubelet,
        watch: &watch,
        image_fs: None,
        warm: &BTreeSet::new(),
        protections: &protections,
    };
    explain_in(records, last_detect, policy, fs, now, &context)
}

/// What explain knows besides the records and the policy.
#[derive(Clone, Copy, Debug)]
pub struct ExplainContext<'a> {
    /// The images pulls through imagekeeper are fetching (the running agent's explain).
    pub pulling: &'a BTreeSet<RecordKey>,
    /// The kubelet's pull records.
    pub kubelet: &'a KubeletView,
    /// The heartbeat and unwatched stretches, as the cycle's detect at `now` leaves them
    /// (`WatchHistory::after_detect`): MaxAge counts only watched time.
    pub watch: &'a WatchHistory,
    /// The image filesystem as the runtime and statvfs report it (the running agent's dry
    /// run): its mountpoint and inodes, for the inode rule.
    pub image_fs: Option<&'a ImageFsStats>,
    /// The images a warm set entry keeps (the running agent's explain, and a one-shot
    /// command's from its configuration).
    pub warm: &'a BTreeSet<RecordKey>,
    /// What imagekeeper protects (pins, irreplaceable images): named before every other
    /// reason, as they keep the image whatever runs.
    pub protections: &'a Protections,
}

/// [`explain_with_kubelet`] with the unwatched stretches MaxAge does not count: the running
/// agent's dry run and `inspect explain` (from the file's heartbeat).
pub fn explain_in(
    records: &[StoredRecord],
    last_detect: Option<UnixNanos>,
    policy: GcPolicy,
    fs: Option<FsSpace>,
    now: UnixNanos,
    context: &ExplainContext<'_>,
) -> Explanation {
    let ExplainContext {
        pulling,
        kubelet,
        watch,
        image_fs,
        warm,
        protections,
    } = *context;
    let in_use = in_use_at(records, last_detect);
    let protected: BTreeSet<RecordKey> = in_use
        .union(pulling)
        .chain(&kubelet.pulling)
        .chain(&kubelet.just_pulled)
        .chain(warm)
        .chain(protections.keys())
        .cloned()
        .collect();
    let disabled = policy.disabled();
    let mut images: Vec<ImageExplanation> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let protection = protections.get(&r.key);
            let verdict = if let Some(p) = protection {
                protection_verdict(p)
            } else if kubelet.pulling.contains(&r.key) {
                Verdict::KubeletPulling
            } else if kubelet.just_pulled.contains(&r.key) && !in_use.contains(&r.key) {
                Verdict::KubeletJustPulled
            } else if pulling.contains(&r.key) && !in_use.contains(&r.key) {
                Verdict::PullInProgress
            } else if warm.contains(&r.key) && !in_use.contains(&r.key) {
                Verdict::Warm
            } else {
                space_verdict(&r.key, &r.record, &in_use, now, policy.min_age)
            };
            let aged = !disabled
                && past_max_age(&r.key, &r.record, &protected, now, policy.max_age, watch);
            ImageExplanation {
                rank: i + 1,
                key: r.key.clone(),
                record: r.record,
                in_use: in_use.contains(&r.key),
                verdict,
                decision: if aged {
                    Decision::RemoveForAge
                } else {
                    Decision::KeepSpaceNotEvaluated
                },
                freed_after: None,
                kubelet_pulled_at: kubelet.used_at.get(&r.key).copied(),
                evicted_before: None,
                protection: protection.cloned(),
                adaptive: None,
                predictive: None,
                runtime_pin: None,
                reason: String::new(),
            }
        })
        .collect();
    let freed_for_age: u64 = images
        .iter()
        .filter(|i| i.decision == Decision::RemoveForAge)
        .fold(0u64, |acc, i| acc.saturating_add(i.record.size));

    let space = if disabled {
        SpacePass::Disabled
    } else if policy.space_pass_off() {
        SpacePass::Off
    } else {
        match fs {
            None => SpacePass::NotEvaluated,
            Some(FsSpace { capacity: 0, .. }) => SpacePass::InvalidCapacity,
            Some(fs) => space_pass(fs, freed_for_age, &policy),
        }
    };
    // The byte budget counts the images' sizes, less what the MaxAge pass frees.
    let total = images
        .iter()
        .fold(0u64, |acc, i| acc.saturating_add(i.record.size))
        .saturating_sub(freed_for_age);
    let budget_need = if disabled {
        None
    } else {
        BudgetNeed::compute(total, policy.bytes)
    };
    // One walk frees the larger byte need, under that rule's name (the space rule's on a
    // tie), as the manager does.
    let space_amount = match space {
        SpacePass::Runs { amount_to_free, .. } => Some(amount_to_free),
        _ => None,
    };
    let budget_amount = budget_need.and_then(|n| n.amount_to_free);
    let walk = match (space_amount, budget_amount) {
        (Some(s), Some(b)) if b > s => Some((b, Decision::RemoveForBudget)),
        (Some(s), _) => Some((s, Decision::RemoveForSpace)),
        (None, Some(b)) => Some((b, Decision::RemoveForBudget)),
        (None, None) => None,
    };
    let freed = walk.map_or(0, |(amount, decision)| {
        walk_bytes(&mut images, amount, decision)
    });
    let space = match space {
        SpacePass::Runs {
            usage_percent,
            available_after_age_pass,
            amount_to_free,
            ..
        } => SpacePass::Runs {
            usage_percent,
            available_after_age_pass,
            amount_to_free,
            freed,
            sufficient: to_i64(freed) >= amount_to_free,
        },
        other => other,
    };
    let budget = budget_need.map(|need| {
        let walked = budget_amount.map_or(0, |_| freed);
        BudgetPass {
            need,
            freed: walked,
            sufficient: need
                .amount_to_free
                .is_none_or(|amount| to_i64(walked) >= amount),
        }
    });
    let inodes = if disabled {
        None
    } else {
        image_fs.and_then(|fs| InodeNeed::compute(fs, policy.inodes))
    };
    let inodes_run = inodes.is_some_and(|n| n.runs);
    let other_filesystems: Vec<FsNeed> = if disabled {
        Vec::new()
    } else {
        image_fs
            .map(|fs| {
                FsNeed::others(fs, &policy)
                    .into_iter()
                    .map(|(_, need)| need)
                    .collect()
            })
            .unwrap_or_default()
    };
    let others_run = other_filesystems.iter().any(FsNeed::runs);
    for image in &mut images {
        if image.decision.removes() {
            continue;
        }
        image.decision = match (image.verdict, space) {
            (Verdict::Eligible, SpacePass::Disabled) => Decision::KeepGcDisabled,
            (Verdict::Eligible, _) if inodes_run => Decision::InodeCandidate,
            (Verdict::Eligible, _) if others_run => Decision::OtherFsCandidate,
            (_, SpacePass::Disabled) => Decision::KeepGcDisabled,
            (Verdict::InUse, _) => Decision::KeepInUse,
            (Verdict::PullInProgress, _) => Decision::KeepPullInProgress,
            (Verdict::KubeletPulling, _) => Decision::KeepKubeletPulling,
            (Verdict::KubeletJustPulled, _) => Decision::KeepKubeletJustPulled,
            (Verdict::Pinned, _) => Decision::KeepPinned,
            (Verdict::Warm, _) => Decision::KeepWarm,
            (Verdict::PinnedByImagekeeper, _) => Decision::KeepPinnedByImagekeeper,
            (Verdict::Irreplaceable, _) => Decision::KeepIrreplaceable,
            (Verdict::UsedTooRecently, _) => Decision::KeepUsedTooRecently,
            (Verdict::YoungerThanMinAge, _) => Decision::KeepYoungerThanMinAge,
            (Verdict::Eligible, SpacePass::Runs { .. }) => Decision::KeepBeyondAmountToFree,
            (Verdict::Eligible, _) if budget_amount.is_some() => Decision::KeepBeyondAmountToFree,
            (Verdict::Eligible, SpacePass::Off) => Decision::KeepBelowHighThreshold,
            (Verdict::Eligible, SpacePass::BelowHighThreshold { .. }) => {
                Decision::KeepBelowHighThreshold
            }
            (Verdict::Eligible, SpacePass::NotEvaluated | SpacePass::InvalidCapacity) => {
                Decision::KeepSpaceNotEvaluated
            }
        };
    }
    for image in &mut images {
        image.reason = reason(
            image,
            &policy,
            last_detect,
            (space, budget, inodes),
            now,
            watch,
        );
        if image.decision == Decision::OtherFsCandidate {
            let over: Vec<String> = other_filesystems
                .iter()
                .filter(|n| n.runs())
                .map(|n| n.mountpoint.clone())
                .collect();
            image.reason = format!(
                "eligible, in the measured pass of the further image filesystem(s) {}: removed \
                 if one is still above its low threshold when the walk reaches it (CRI does not \
                 say which filesystem an image is on: measured after each removal)",
                over.join(", ")
            );
        }
        if let Some(at) = image.kubelet_pulled_at {
            image.reason.push_str(&format!(
                "; used by a kubelet pull record at {}",
                crate::format::format_rfc3339(at)
            ));
        }
    }
    Explanation {
        now,
        policy,
        last_detect,
        watch: watch.clone(),
        freed_for_age,
        space,
        filesystem: image_fs.map(|fs| fs.mountpoint.clone()),
        budget,
        inodes,
        other_filesystems,
        images,
        stale_kubelet_intents: kubelet.stale_intents.clone(),
    }
}

/// The manager's space pass: usage after the MaxAge pass (the walk is [`walk_bytes`]).
fn space_pass(fs: FsSpace, freed_for_age: u64, policy: &GcPolicy) -> SpacePass {
    // What the MaxAge pass frees is available when the manager reads the filesystem again.
    let available = fs.available.saturating_add(freed_for_age);
    let need = match SpaceNeed::compute(fs.capacity, available, policy) {
        Ok(need) => need,
        Err(_) => return SpacePass::InvalidCapacity,
    };
    let (usage_percent, available) = (need.usage_percent, need.available);
    match need.amount_to_free {
        None => SpacePass::BelowHighThreshold {
            usage_percent,
            available_after_age_pass: available,
        },
        Some(amount_to_free) => SpacePass::Runs {
            usage_percent,
            available_after_age_pass: available,
            amount_to_free,
            freed: 0,
            sufficient: false,
        },
    }
}

/// The byte walk in eviction order until `amount_to_free` is reached (the first eligible
/// image always goes, as in the kubelet), marking each removal `decision`. Returns the
/// bytes freed.
fn walk_bytes(images: &mut [ImageExplanation], amount_to_free: i64, decision: Decision) -> u64 {
    let mut freed: i64 = 0;
    for image in images.iter_mut() {
        if image.decision == Decision::RemoveForAge || image.verdict != Verdict::Eligible {
            continue;
        }
        freed = freed.saturating_add(to_i64(image.record.size));
        image.decision = decision;
        image.freed_after = Some(u64::try_from(freed).unwrap_or(0));
        if freed >= amount_to_free {
            break;
        }
    }
    u64::try_from(freed).unwrap_or(0)
}

fn reason(
    image: &ImageExplanation,
    policy: &GcPolicy,
    last_detect: Option<UnixNanos>,
    (space, budget, inodes): (SpacePass, Option<BudgetPass>, Option<InodeNeed>),
    now: UnixNanos,
    watch: &WatchHistory,
) -> String {
    let record = &image.record;
    let dur = |d: Duration| go_duration(Duration::from_secs(d.as_secs()));
    // MaxAge counts watched time only: say what was left out.
    let unwatched = watch.unwatched_between(unused_since(record), now);
    let unused = if unwatched.is_zero() {
        dur(now.since(unused_since(record)))
    } else {
        format!(
            "{} of watched time ({} unwatched since, not counted)",
            dur(watch.watched_unused(record, now)),
            dur(unwatched)
        )
    };
    match image.decision {
        Decision::RemoveForAge => format!(
            "unused for {unused}, longer than MaxAge {}",
            go_duration(policy.max_age)
        ),
        Decision::RemoveForSpace => {
            let amount = match space {
                SpacePass::Runs { amount_to_free, .. } => amount_to_free,
                _ => 0,
            };
            format!(
                "eligible, inside the amount to free: {} freed of {} to free",
                format_size(image.freed_after.unwrap_or(0)),
                format_size(u64::try_from(amount).unwrap_or(0))
            )
        }
        Decision::RemoveForBudget => {
            let amount = budget.and_then(|b| b.need.amount_to_free).unwrap_or(0);
            format!(
                "eligible, inside the byte budget's amount to free: {} freed of {} to free",
                format_size(image.freed_after.unwrap_or(0)),
                format_size(u64::try_from(amount).unwrap_or(0))
            )
        }
        Decision::InodeCandidate => {
            let (usage, target, total) =
                inodes.map_or((0, 0, 0), |n| (n.usage_percent, n.target_used, n.inodes));
            format!(
                "eligible, in the inode pass's order: inode use {usage}% is at or above the \
                 high inode threshold; removed if more than {target} of {total} inodes are \
                 still in use when the walk reaches it (measured as it runs)"
            )
        }
        // Named with its filesystems by `explain_in`.
        Decision::OtherFsCandidate => {
            "eligible, in the measured pass of a further image filesystem".to_owned()
        }
        Decision::KeepGcDisabled => {
            "image GC is disabled (HighThresholdPercent 100 and MaxAge 0)".to_owned()
        }
        Decision::KeepInUse => format!(
            "in use at the last detect ({})",
            last_detect.map_or_else(String::new, crate::format::format_rfc3339)
        ),
        Decision::KeepPullInProgress => "pull in progress".to_owned(),
        Decision::KeepKubeletPulling => {
            "the kubelet is pulling it (a kubelet pull intent)".to_owned()
        }
        Decision::KeepKubeletJustPulled => format!(
            "the kubelet pulled it less than MinAge {} ago: its container is about to start",
            go_duration(policy.min_age)
        ),
        Decision::KeepPinned => "pinned".to_owned(),
        Decision::KeepWarm => "in the warm set: kept present ahead of use".to_owned(),
        Decision::KeepPinnedByImagekeeper | Decision::KeepIrreplaceable => {
            image.protection.as_ref().map_or_else(
                || "protected by imagekeeper".to_owned(),
                Protection::describe,
            )
        }
        Decision::KeepUsedTooRecently => {
            "used at or after now (is the clock behind the records?)".to_owned()
        }
        Decision::KeepYoungerThanMinAge => format!(
            "first detected {} ago, younger than MinAge {}",
            dur(now.since(record.first_detected)),
            go_duration(policy.min_age)
        ),
        Decision::KeepBeyondAmountToFree => {
            let (amount, freed) = match (space, budget) {
                (_, Some(b)) if b.freed > 0 => (b.need.amount_to_free.unwrap_or(0), b.freed),
                (
                    SpacePass::Runs {
                        amount_to_free,
                        freed,
                        ..
                    },
                    _,
                ) => (amount_to_free, freed),
                _ => (0, 0),
            };
            format!(
                "eligible, beyond the amount to free: the walk stops after freeing {} of {}",
                format_size(freed),
                format_size(u64::try_from(amount).unwrap_or(0))
            )
        }
        Decision::KeepBelowHighThreshold => match space {
            SpacePass::BelowHighThreshold { usage_percent, .. } => format!(
                "eligible, but usage {usage_percent}% is below HighThresholdPercent {}: no space pass",
                policy.high_threshold_percent
            ),
            _ => "eligible, but no rule needs room: the byte-percentage pass is off \
                      (HighThresholdPercent 100 and MaxAge 0), the budget and inode use are \
                      below their high marks"
                .to_owned(),
        },
        Decision::KeepSpaceNotEvaluated => {
            let max_age = if policy.max_age.is_zero() {
                "MaxAge is off".to_owned()
            } else {
                format!(
                    "unused for {unused}, not longer than MaxAge {}",
                    go_duration(policy.max_age)
                )
            };
            if space == SpacePass::InvalidCapacity {
                format!("eligible for space GC, but capacity 0 fails the space pass; {max_age}")
            } else {
                format!(
                    "eligible for space GC; the space pass is not evaluated (give --capacity \
                     and --available); {max_age}"
                )
            }
        }
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60;

    #[test]
    fn decision_as_str_is_its_json_name() {
        let all = [
            Decision::RemoveForAge,
            Decision::RemoveForSpace,
            Decision::KeepGcDisabled,
            Decision::KeepInUse,
            Decision::KeepPullInProgress,
            Decision::KeepKubeletPulling,
            Decision::KeepKubeletJustPulled,
            Decision::KeepPinned,
            Decision::KeepWarm,
            Decision::KeepUsedTooRecently,
            Decision::KeepYoungerThanMinAge,
            Decision::KeepBeyondAmountToFree,
            Decision::KeepBelowHighThreshold,
            Decision::KeepSpaceNotEvaluated,
            Decision::RemoveForBudget,
            Decision::InodeCandidate,
        ];
        for d in all {
            assert_eq!(
                serde_json::to_value(d).expect("serializes"),
                serde_json::Value::from(d.as_str()),
                "{d:?}"
            );
        }
    }

    /// A warm image is kept at full pressure and past MaxAge, and says why; the same image
    /// outside the warm set is the first the walk removes.
    #[test]
    fn a_warm_image_is_kept_for_space_and_age_and_says_so() {
        let now = UnixNanos::from_secs(300 * MIN);
        let records = vec![
            rec("warm", MIN, 2 * MIN, 100, false),
            rec("b", MIN, 3 * MIN, 100, false),
        ];
        let warm: BTreeSet<RecordKey> = [records[0].key.clone()].into();
        let run = |warm: &BTreeSet<RecordKey>| {
            explain_in(
                &records,
                None,
                policy(85, 80, 0, 60 * 60),
                Some(FsSpace {
                    capacity: 1000,
                    available: 0,
                }),
                now,
                &ExplainContext {
                    pulling: &BTreeSet::new(),
                    kubelet: &KubeletView::default(),
                    watch: &WatchHistory::default(),
                    image_fs: None,
                    warm,
                    protections: &Protections::default(),
                },
            )
        };
        let kept = run(&warm);
        assert_eq!(kept.images[0].verdict, Verdict::Warm);
        assert_eq!(kept.images[0].decision, Decision::KeepWarm);
        assert_eq!(
            kept.images[0].reason,
            "in the warm set: kept present ahead of use"
        );
        assert_eq!(kept.images[1].decision, Decision::RemoveForAge);
        let cold = run(&BTreeSet::new());
        assert!(cold.images[0].decision.removes());
    }

    fn rec(id: &str, first: i64, last: i64, size: u64, pinned: bool) -> StoredRecord {
        StoredRecord {
            key: RecordKey::new(format!("sha256:{id}"), ""),
            record: ImageRecord {
                first_detected: UnixNanos::from_secs(first),
                last_used: UnixNanos::from_secs(last),
                size,
                pinned,
            },
        }
    }

    fn decisions(e: &Explanation) -> Vec<(String, Decision)> {
        e.images
            .iter()
            .map(|i| {
                (
                    i.key.image_id.0.trim_start_matches("sha256:").to_owned(),
                    i.decision,
                )
            })
            .collect()
    }

    fn policy(high: i64, low: i64, min_age: i64, max_age: i64) -> GcPolicy {
        GcPolicy {
            high_threshold_percent: high,
            low_threshold_percent: low,
            min_age: Duration::from_secs(min_age as u64),
            max_age: Duration::from_secs(max_age as u64),
            ..GcPolicy::default()
        }
    }

    #[test]
    fn each_rule_gives_its_decision() {
        use Decision::*;
        let now = 100 * MIN;
        // Eviction order: never used first, then by last_used.
        let records = vec![
            rec("never", 10 * MIN, 0, 100, false),
            rec("young", now - 30, 0, 100, false),
            rec("old", MIN, 20 * MIN, 100, false),
            rec("pinned", MIN, 30 * MIN, 100, true),
            rec("mid", MIN, 40 * MIN, 100, false),
            rec("inuse", MIN, 90 * MIN, 100, false),
        ];
        let last_detect = Some(UnixNanos::from_secs(90 * MIN));
        let cases: Vec<(&str, GcPolicy, Option<FsSpace>, Vec<Decision>)> = vec![
            (
                "no space given, MaxAge off",
                GcPolicy::default(),
                None,
                vec![
                    KeepSpaceNotEvaluated,
                    KeepYoungerThanMinAge,
                    KeepSpaceNotEvaluated,
                    KeepPinned,
                    KeepSpaceNotEvaluated,
                    KeepInUse,
                ],
            ),
            (
                "MaxAge 70m removes the long-unused, never the pinned or in use",
                policy(85, 80, 120, 70 * 60),
                None,
                vec![
                    RemoveForAge,
                    KeepYoungerThanMinAge,
                    RemoveForAge,
                    KeepPinned,
                    KeepSpaceNotEvaluated,
                    KeepInUse,
                ],
            ),
            (
                "usage 90% over 85: free down to 80% = 100 bytes: one image",
                GcPolicy::default(),
                Some(FsSpace {
                    capacity: 1000,
                    available: 100,
                }),
                vec![
                    RemoveForSpace,
                    KeepYoungerThanMinAge,
                    KeepBeyondAmountToFree,
                    KeepPinned,
                    KeepBeyondAmountToFree,
                    KeepInUse,
                ],
            ),
            (
                "usage 50%: no space pass",
                GcPolicy::default(),
                Some(FsSpace {
                    capacity: 1000,
                    available: 500,
                }),
                vec![
                    KeepBelowHighThreshold,
                    KeepYoungerThanMinAge,
                    KeepBelowHighThreshold,
                    KeepPinned,
                    KeepBelowHighThreshold,
                    KeepInUse,
                ],
            ),
            (
                "disabled GC keeps everything",
                policy(100, 80, 120, 0),
                Some(FsSpace {
                    capacity: 1000,
                    available: 0,
                }),
                vec![KeepGcDisabled; 6],
            ),
        ];
        for (name, policy, fs, want) in cases {
            let e = explain(&records, last_detect, policy, fs, UnixNanos::from_secs(now));
            let got: Vec<Decision> = decisions(&e).into_iter().map(|(_, d)| d).collect();
            assert_eq!(got, want, "{name}");
            assert!(e.images.iter().all(|i| !i.reason.is_empty()), "{name}");
        }
    }

    #[test]
    fn amount_to_free_stops_the_walk_and_the_first_eligible_always_goes() {
        let now = UnixNanos::from_secs(100 * MIN);
        let records = vec![
            rec("a", MIN, 10 * MIN, 30, false),
            rec("b", MIN, 11 * MIN, 30, false),
            rec("c", MIN, 12 * MIN, 30, false),
        ];
        // capacity 1000, available 140: usage 86%, amount = 200 - 140 = 60: a and b.
        let e = explain(
            &records,
            None,
            GcPolicy::default(),
            Some(FsSpace {
                capacity: 1000,
                available: 140,
            }),
            now,
        );
        assert_eq!(e.removed().len(), 2);
        assert!(matches!(
            e.space,
            SpacePass::Runs {
                amount_to_free: 60,
                freed: 60,
                sufficient: true,
                ..
            }
        ));
        // high 0, low 0: usage 0% >= 0 and amount = 1000 - 1000 = 0: still one image.
        let e = explain(
            &records,
            None,
            policy(0, 0, 0, 0),
            Some(FsSpace {
                capacity: 1000,
                available: 1000,
            }),
            now,
        );
        assert_eq!(e.removed(), vec![records[0].key.clone()]);
    }

    /// MaxAge counts watched time only: an image unused for 3h, 2h30m of them unwatched,
    /// is not past a 1h MaxAge, and the reason says what was left out; the same image with
    /// no unwatched time goes.
    #[test]
    fn max_age_counts_only_watched_time_and_says_so() {
        let now = UnixNanos::from_secs(300 * MIN);
        let records = vec![rec("a", MIN, 120 * MIN, 100, false)];
        let watch = WatchHistory {
            heartbeat: Some(now),
            unwatched: vec![crate::gc::Unwatched::between(
                UnixNanos::from_secs(130 * MIN),
                UnixNanos::from_secs(280 * MIN),
            )],
        };
        let explained = |watch: &WatchHistory| {
            explain_in(
                &records,
                None,
                policy(85, 80, 0, 60 * 60),
                None,
                now,
                &ExplainContext {
                    pulling: &BTreeSet::new(),
                    kubelet: &KubeletView::default(),
                    watch,
                    image_fs: None,
                    warm: &BTreeSet::new(),
                    protections: &Protections::default(),
                },
            )
        };
        let e = explained(&watch);
        assert_eq!(e.images[0].decision, Decision::KeepSpaceNotEvaluated);
        assert!(
            e.images[0]
                .reason
                .contains("unused for 30m0s of watched time (2h30m0s unwatched since, not counted), not longer than MaxAge 1h0m0s"),
            "{}",
            e.images[0].reason
        );
        assert_eq!(e.watch, watch);
        let e = explained(&WatchHistory::default());
        assert_eq!(e.images[0].decision, Decision::RemoveForAge);
        assert_eq!(
            e.images[0].reason,
            "unused for 3h0m0s, longer than MaxAge 1h0m0s"
        );
    }

    #[test]
    fn what_max_age_frees_counts_toward_available() {
        let now = UnixNanos::from_secs(100 * MIN);
        let records = vec![
            rec("old", MIN, 10 * MIN, 100, false),
            rec("recent", MIN, 95 * MIN, 100, false),
        ];
        // 90% used; MaxAge frees 100 bytes: 80% used, below 85: no space pass.
        let e = explain(
            &records,
            None,
            policy(85, 80, 0, 30 * 60),
            Some(FsSpace {
                capacity: 1000,
                available: 100,
            }),
            now,
        );
        assert_eq!(e.removed(), vec![records[0].key.clone()]);
        assert!(matches!(
            e.space,
            SpacePass::BelowHighThreshold {
                usage_percent: 80,
                available_after_age_pass: 200
            }
        ));
    }

    /// Issue 28: the byte budget walks as the space rule does, under its own decision; with
    /// inode use over the high inode threshold the eligible images left are inode
    /// candidates; the explanation names the filesystem.
    #[test]
    fn the_budget_walks_and_the_inode_pass_names_its_candidates() {
        let records = vec![
            rec("a", 0, 10, 400, false),
            rec("b", 0, 20, 300, false),
            rec("c", 0, 30, 200, false),
            rec("d", 0, 40, 100, false),
        ];
        let policy = GcPolicy {
            bytes: Some(super::super::ByteBudget {
                high: 800,
                low: 500,
            }),
            ..policy(85, 80, 0, 0)
        };
        let now = UnixNanos::from_secs(1000);
        let e = explain(&records, Some(UnixNanos::from_secs(999)), policy, None, now);
        let got: Vec<Decision> = e.images.iter().map(|i| i.decision).collect();
        assert_eq!(
            got,
            [
                Decision::RemoveForBudget,
                Decision::RemoveForBudget,
                Decision::KeepBeyondAmountToFree,
                Decision::KeepBeyondAmountToFree,
            ]
        );
        let budget = e.budget.expect("a budget is set");
        assert_eq!(budget.need.amount_to_free, Some(500));
        assert_eq!((budget.freed, budget.sufficient), (700, true));

        // The byte rule needs one image, the budget two: the larger need wins.
        let fs = FsSpace {
            capacity: 10_000,
            available: 1_550,
        };
        let stats =
            ImageFsStats::new("/var/lib/containerd", 0, 10_000, 1_550).with_inodes(1000, 100);
        let policy = GcPolicy {
            inodes: Some(super::super::InodeThresholds { high: 85, low: 80 }),
            ..policy
        };
        let watch = WatchHistory::default();
        let e = explain_in(
            &records,
            Some(UnixNanos::from_secs(999)),
            policy,
            Some(fs),
            now,
            &ExplainContext {
                pulling: &BTreeSet::new(),
                kubelet: &KubeletView::default(),
                watch: &watch,
                image_fs: Some(&stats),
                warm: &BTreeSet::new(),
                protections: &Protections::default(),
            },
        );
        let got: Vec<Decision> = e.images.iter().map(|i| i.decision).collect();
        assert_eq!(
            got,
            [
                Decision::RemoveForBudget,
                Decision::RemoveForBudget,
                Decision::InodeCandidate,
                Decision::InodeCandidate,
            ]
        );
        assert_eq!(e.filesystem.as_deref(), Some("/var/lib/containerd"));
        let inodes = e.inodes.expect("inodes counted");
        assert_eq!(
            (inodes.usage_percent, inodes.target_used, inodes.runs),
            (90, 800, true)
        );
        assert!(
            e.images[2].reason.contains("more than 800 of 1000 inodes"),
            "{}",
            e.images[2].reason
        );
        assert_eq!(
            e.removed(),
            vec![records[0].key.clone(), records[1].key.clone()]
        );
    }

    #[test]
    fn pinned_and_irreplaceable_images_are_kept_with_their_reasons_before_any_other() {
        use crate::model::{ImagePin, PinKey, RuntimeImage};
        // Three old, unused images past MaxAge at 100 % usage: one pinned until T, one with
        // no repo digest, one that goes.
        let records = vec![
            rec("a", 10, 10, 100, false),
            rec("b", 10, 11, 100, false),
            rec("c", 10, 12, 100, false),
        ];
        let listed = |id: &str, tag: &str, digest: bool| RuntimeImage {
            id: crate::model::ImageId::new(id),
            repo_tags: vec![tag.to_owned()],
            repo_digests: if digest {
                vec![format!("docker.io/library/{id}@sha256:00")]
            } else {
                Vec::new()
            },
            ..RuntimeImage::default()
        };
        let images = [
            listed("sha256:a", "docker.io/library/model:1", true),
            listed("sha256:b", "docker.io/library/airgap:1", false),
            listed("sha256:c", "docker.io/library/web:1", true),
        ];
        let now = UnixNanos::from_secs(10_000);
        let pins = vec![(
            PinKey::new("docker.io/library/model:1", ""),
            ImagePin {
                created_at: UnixNanos::from_secs(1),
                until: UnixNanos::from_secs(20_000),
                reason: "rollout".into(),
            },
        )];
        let protections = Protections::resolve(
            &images,
            &pins,
            Some(&super::super::protect::Irreplaceable::default()),
            now,
        );
        let e = explain_in(
            &records,
            None,
            policy(85, 80, 0, 60),
            Some(FsSpace {
                capacity: 1000,
                available: 0,
            }),
            now,
            &ExplainContext {
                pulling: &BTreeSet::new(),
                kubelet: &KubeletView::default(),
                watch: &WatchHistory::default(),
                image_fs: None,
                warm: &BTreeSet::new(),
                protections: &protections,
            },
        );
        let got: Vec<(Decision, &str)> = e
            .images
            .iter()
            .map(|i| (i.decision, i.reason.as_str()))
            .collect();
        assert_eq!(got[0].0, Decision::KeepPinnedByImagekeeper);
        assert!(
            got[0]
                .1
                .starts_with("pinned by imagekeeper until 1970-01-01T05:33:20Z (rollout)"),
            "{}",
            got[0].1
        );
        assert_eq!(got[1].0, Decision::KeepIrreplaceable);
        assert!(got[1].1.contains("no repo digest"), "{}", got[1].1);
        assert_eq!(got[2].0, Decision::RemoveForAge);
        assert_eq!(e.removed(), vec![RecordKey::new("sha256:c", "")]);
    }
}
