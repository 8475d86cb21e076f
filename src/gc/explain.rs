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
//!
//! This file holds the walk (`explain_in` and its entry points); beside it in `explain/`:
//! `decision.rs` (the output types, a JSON contract), `reason.rs` (each decision's sentence),
//! `notes.rs` (prior evictions and the adaptive and predictive ranks noted afterwards).

use std::collections::BTreeSet;

use crate::model::{ImageFsStats, RecordKey, UnixNanos};
use crate::store::StoredRecord;

use super::GcPolicy;
use super::evict::{Verdict, past_max_age, protection_verdict, space_verdict};
use super::kubelet::KubeletView;
use super::protect::Protections;
use super::space::{BudgetNeed, FsNeed, InodeNeed, SpaceNeed};
use super::watch::WatchHistory;

mod decision;
mod notes;
mod reason;
#[cfg(test)]
mod tests;

pub use decision::{
    BudgetPass, Decision, Explanation, FsSpace, ImageExplanation, PriorEviction, RuntimePinStatus,
    SpacePass,
};
pub use notes::{note_adaptive_ranks, note_predictive_ranks, note_prior_evictions};
use reason::reason;

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
/// `Store::eviction_order` yields them). The tests' shorthand: no pulls in flight, no kubelet
/// records.
#[cfg(test)]
pub(crate) fn explain(
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

/// [`explain`] with pulls in flight and the kubelet's pull records (the tests' shorthand for
/// [`explain_in`] with no watch history, warm set or protections).
#[cfg(test)]
pub(crate) fn explain_with_kubelet(
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

/// Explains one GarbageCollect at `now`: the running agent's dry run and `inspect explain`
/// (from the file's heartbeat). `records` must be in eviction order (as
/// `Store::eviction_order` yields them) and their last_used must already count the kubelet's
/// pulled records' times (detect folds them in). From `context`: the pulls in flight keep
/// their images as in use ("pull in progress", as the manager keeps them); the images the
/// kubelet's pull intents name are kept ("the kubelet is pulling it", before any other reason,
/// as detect marks them in use), each image's pulled record time is shown and the intents too
/// old to keep anything are listed; MaxAge counts only the watched time.
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
                kubelet_preloaded: kubelet.preloaded.get(&r.key).cloned().unwrap_or_default(),
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
        if !image.kubelet_preloaded.is_empty() {
            image.reason.push_str(&format!(
                "; the kubelet saw it preloaded (as {}): not a use",
                preloaded_names(&image.kubelet_preloaded)
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

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The names of a preloaded record as explain's reason gives them: at most three, quoted,
/// quoted as Go's `%q` quotes them, then how many more.
fn preloaded_names(names: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text: Vec<String> = names
        .iter()
        .take(SHOWN)
        .map(|n| crate::format::go_quote(n))
        .collect();
    if names.len() > SHOWN {
        text.push(format!("and {} more", names.len() - SHOWN));
    }
    text.join(", ")
}
