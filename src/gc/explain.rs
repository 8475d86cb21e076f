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
use super::cycle::{ByteGoal, ByteRule, ByteWalk, CycleNeeds, KeepSets, Keeps, SpaceRule};
use super::evict::{Verdict, past_max_age};
use super::kubelet::KubeletView;
use super::protect::Protections;
use super::space::FsNeed;
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
pub use notes::{
    note_adaptive_ranks, note_over_keep_share, note_predictive_ranks, note_prior_evictions,
};
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
    let sets = KeepSets {
        pulling: pulling.clone(),
        ..KeepSets::default()
    };
    let context = ExplainContext {
        sets: &sets,
        kubelet,
        watch: &watch,
        image_fs: None,
        protections: &protections,
    };
    explain_in(records, last_detect, policy, fs, now, &context)
}

/// What explain knows besides the records and the policy.
#[derive(Clone, Copy, Debug)]
pub struct ExplainContext<'a> {
    /// The agent's own keep sets: the images pulls through imagekeeper are fetching (the
    /// running agent's explain), those a warm set entry keeps (the running agent's explain,
    /// and a one-shot command's from its configuration).
    pub sets: &'a KeepSets,
    /// The kubelet's pull records.
    pub kubelet: &'a KubeletView,
    /// The heartbeat and unwatched stretches, as the cycle's detect at `now` leaves them
    /// (`WatchHistory::after_detect`): MaxAge counts only watched time.
    pub watch: &'a WatchHistory,
    /// The image filesystem as the runtime and statvfs report it (the running agent's dry
    /// run): its mountpoint and inodes, for the inode rule.
    pub image_fs: Option<&'a ImageFsStats>,
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
///
/// It walks the cycle's own rules (`cycle.rs`): the keeps, the MaxAge pass, the needs after
/// it, the byte walk, the cycle's end.
pub fn explain_in(
    records: &[StoredRecord],
    last_detect: Option<UnixNanos>,
    policy: GcPolicy,
    fs: Option<FsSpace>,
    now: UnixNanos,
    context: &ExplainContext<'_>,
) -> Explanation {
    let in_use = in_use_at(records, last_detect);
    let keeps = Keeps {
        in_use: &in_use,
        sets: context.sets,
        kubelet_pulling: &context.kubelet.pulling,
        kubelet_just_pulled: &context.kubelet.just_pulled,
        protections: context.protections,
    };
    let mut images = judge(records, &keeps, &policy, now, context);
    let freed_for_age: u64 = images
        .iter()
        .filter(|i| i.decision == Decision::RemoveForAge)
        .fold(0u64, |acc, i| acc.saturating_add(i.record.size));
    // The byte budget counts the images' sizes, less what the MaxAge pass frees; what the
    // MaxAge pass frees is available when the manager reads the filesystem again.
    let total = images
        .iter()
        .fold(0u64, |acc, i| acc.saturating_add(i.record.size))
        .saturating_sub(freed_for_age);
    let fs = fs.map(|fs| FsSpace {
        capacity: fs.capacity,
        available: fs.available.saturating_add(freed_for_age),
    });
    let needs = CycleNeeds::plan(&policy, fs, total, context.image_fs);
    let goal = needs.byte_goal();
    let freed = goal.map_or(0, |goal| walk_bytes(&mut images, goal));
    let space = space_pass(&needs, freed);
    let budget = budget_pass(&needs, freed);
    let other_filesystems: Vec<FsNeed> = match (context.image_fs, needs.space) {
        (Some(fs), rule) if rule != SpaceRule::Disabled => FsNeed::others(fs, &policy)
            .into_iter()
            .map(|(_, need)| need)
            .collect(),
        _ => Vec::new(),
    };
    let later = LaterPasses {
        inodes: needs.inode_goal().is_some(),
        other_filesystems: other_filesystems.iter().any(FsNeed::runs),
        budget: needs.budget.and_then(|n| n.amount_to_free).is_some(),
    };
    for image in &mut images {
        if !image.decision.removes() {
            image.decision = keep_decision(image.verdict, space, later);
        }
    }
    let passes = (space, budget, needs.inodes);
    for image in &mut images {
        image.reason = full_reason(image, &policy, last_detect, passes, now, context);
        if image.decision == Decision::OtherFsCandidate {
            image.reason = other_fs_reason(&other_filesystems);
        }
    }
    Explanation {
        now,
        policy,
        last_detect,
        watch: context.watch.clone(),
        freed_for_age,
        space,
        filesystem: context.image_fs.map(|fs| fs.mountpoint.clone()),
        budget,
        inodes: needs.inodes,
        other_filesystems,
        images,
        stale_kubelet_intents: context.kubelet.stale_intents.clone(),
    }
}

/// Each record's verdict ([`Keeps::verdict`]) and whether the MaxAge pass removes it, in
/// eviction order; every other decision is settled once the byte walk is done.
fn judge(
    records: &[StoredRecord],
    keeps: &Keeps<'_>,
    policy: &GcPolicy,
    now: UnixNanos,
    context: &ExplainContext<'_>,
) -> Vec<ImageExplanation> {
    let protected = keeps.protected();
    let disabled = policy.disabled();
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let aged = !disabled
                && past_max_age(
                    &r.key,
                    &r.record,
                    &protected,
                    now,
                    policy.max_age,
                    context.watch,
                );
            ImageExplanation {
                rank: i + 1,
                key: r.key.clone(),
                record: r.record,
                in_use: keeps.in_use.contains(&r.key),
                verdict: keeps.verdict(&r.key, &r.record, now, policy.min_age),
                decision: if aged {
                    Decision::RemoveForAge
                } else {
                    Decision::KeepSpaceNotEvaluated
                },
                freed_after: None,
                kubelet_pulled_at: context.kubelet.used_at.get(&r.key).copied(),
                kubelet_preloaded: context
                    .kubelet
                    .preloaded
                    .get(&r.key)
                    .cloned()
                    .unwrap_or_default(),
                evicted_before: None,
                protection: context.protections.get(&r.key).cloned(),
                needed_by: context.sets.needed_by_pods.get(&r.key).cloned(),
                past_keep_share: None,
                warm_origin: context.sets.warm.get(&r.key).cloned(),
                adaptive: None,
                predictive: None,
                runtime_pin: None,
                reason: String::new(),
            }
        })
        .collect()
}

/// The passes after the byte walk that an eligible image it did not reach may still meet.
#[derive(Clone, Copy, Debug)]
struct LaterPasses {
    /// The inode rule runs.
    inodes: bool,
    /// A further image filesystem is over a high line.
    other_filesystems: bool,
    /// The byte budget needs room.
    budget: bool,
}

/// The decision on an image neither the MaxAge pass nor the byte walk removes: the rule that
/// keeps it, or, eligible, the pass that may still reach it or why none runs.
fn keep_decision(verdict: Verdict, space: SpacePass, later: LaterPasses) -> Decision {
    if space == SpacePass::Disabled {
        return Decision::KeepGcDisabled;
    }
    if let Some(kept) = Decision::keeping(verdict) {
        return kept;
    }
    match space {
        _ if later.inodes => Decision::InodeCandidate,
        _ if later.other_filesystems => Decision::OtherFsCandidate,
        SpacePass::Runs { .. } => Decision::KeepBeyondAmountToFree,
        _ if later.budget => Decision::KeepBeyondAmountToFree,
        SpacePass::Off | SpacePass::BelowHighThreshold { .. } => Decision::KeepBelowHighThreshold,
        SpacePass::NotEvaluated | SpacePass::InvalidCapacity | SpacePass::Disabled => {
            Decision::KeepSpaceNotEvaluated
        }
    }
}

/// The decision's sentence ([`reason`]) with the kubelet's records of the image after it.
fn full_reason(
    image: &ImageExplanation,
    policy: &GcPolicy,
    last_detect: Option<UnixNanos>,
    passes: reason::Passes,
    now: UnixNanos,
    context: &ExplainContext<'_>,
) -> String {
    let mut text = reason(image, policy, last_detect, passes, now, context.watch);
    if let Some(at) = image.kubelet_pulled_at {
        text.push_str(&format!(
            "; used by a kubelet pull record at {}",
            crate::format::format_rfc3339(at)
        ));
    }
    if !image.kubelet_preloaded.is_empty() {
        text.push_str(&format!(
            "; the kubelet saw it preloaded (as {}): not a use",
            preloaded_names(&image.kubelet_preloaded)
        ));
    }
    text
}

/// The reason of an eligible image left to the measured pass of further filesystems.
fn other_fs_reason(other_filesystems: &[FsNeed]) -> String {
    let over: Vec<String> = other_filesystems
        .iter()
        .filter(|n| n.runs())
        .map(|n| n.mountpoint.clone())
        .collect();
    format!(
        "eligible, in the measured pass of the further image filesystem(s) {}: removed \
         if one is still above its low threshold when the walk reaches it (CRI does not \
         say which filesystem an image is on: measured after each removal)",
        over.join(", ")
    )
}

/// The byte budget as explain shows it, once the walk freed `freed` bytes (counted for the
/// budget when it needs room, whichever rule the walk freed for).
fn budget_pass(needs: &CycleNeeds, freed: u64) -> Option<BudgetPass> {
    needs.budget.map(|need| {
        let walked = need.amount_to_free.map_or(0, |_| freed);
        BudgetPass {
            need,
            freed: walked,
            sufficient: need
                .amount_to_free
                .is_none_or(|amount| to_i64(walked) >= amount),
        }
    })
}

/// The percentage rule as explain shows it, once the walk freed `freed` bytes.
fn space_pass(needs: &CycleNeeds, freed: u64) -> SpacePass {
    match needs.space {
        SpaceRule::Disabled => SpacePass::Disabled,
        SpaceRule::Off => SpacePass::Off,
        SpaceRule::NotRead => SpacePass::NotEvaluated,
        SpaceRule::InvalidCapacity => SpacePass::InvalidCapacity,
        SpaceRule::Need(need) => match need.amount_to_free {
            None => SpacePass::BelowHighThreshold {
                usage_percent: need.usage_percent,
                available_after_age_pass: need.available,
            },
            Some(amount_to_free) => SpacePass::Runs {
                usage_percent: need.usage_percent,
                available_after_age_pass: need.available,
                amount_to_free,
                freed,
                sufficient: to_i64(freed) >= amount_to_free,
            },
        },
    }
}

/// The byte walk in eviction order ([`ByteWalk`]), every removal assumed to succeed, marking
/// each removal with the goal's decision. Returns the bytes freed.
fn walk_bytes(images: &mut [ImageExplanation], goal: ByteGoal) -> u64 {
    let decision = match goal.rule {
        ByteRule::Space(_) => Decision::RemoveForSpace,
        ByteRule::Budget(_) => Decision::RemoveForBudget,
    };
    let mut walk = ByteWalk::new(Some(goal.amount));
    for image in images.iter_mut() {
        if image.decision == Decision::RemoveForAge || image.verdict != Verdict::Eligible {
            continue;
        }
        let done = walk.removed(image.record.size);
        image.decision = decision;
        image.freed_after = Some(u64::try_from(walk.freed()).unwrap_or(0));
        if done {
            break;
        }
    }
    u64::try_from(walk.freed()).unwrap_or(0)
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
