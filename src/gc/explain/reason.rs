//! The sentence explain gives for each image's decision (`reason`), for people: which rule
//! removes or keeps it, with the numbers that rule read (ages, usage, amounts to free, the
//! unwatched time MaxAge left out).
//!
//! Invariants: pure; every [`super::Decision`] has its sentence; a keep names the first rule
//! that keeps the image, in the order the manager applies them.

use std::time::Duration;

use crate::model::UnixNanos;

use crate::format::{format_size, go_duration};
use crate::gc::GcPolicy;
use crate::gc::protect::Protection;
use crate::gc::space::InodeNeed;
use crate::gc::unused_since;
use crate::gc::watch::WatchHistory;

use super::{BudgetPass, Decision, ImageExplanation, SpacePass};

/// The rules' figures a sentence may quote: the percentage pass, the budget, the inode rule.
pub(super) type Passes = (SpacePass, Option<BudgetPass>, Option<InodeNeed>);

pub(super) fn reason(
    image: &ImageExplanation,
    policy: &GcPolicy,
    last_detect: Option<UnixNanos>,
    passes: Passes,
    now: UnixNanos,
    watch: &WatchHistory,
) -> String {
    let unused = unused_text(image, now, watch);
    match image.decision {
        Decision::RemoveForAge => format!(
            "unused for {unused}, longer than MaxAge {}",
            go_duration(policy.max_age)
        ),
        Decision::RemoveForSpace | Decision::RemoveForBudget | Decision::InodeCandidate => {
            removal_reason(image, passes)
        }
        // Named with its filesystems by `explain_in`.
        Decision::OtherFsCandidate => {
            "eligible, in the measured pass of a further image filesystem".to_owned()
        }
        Decision::KeepBeyondAmountToFree => beyond_amount_reason(passes),
        Decision::KeepBelowHighThreshold => below_high_reason(policy, passes.0),
        Decision::KeepSpaceNotEvaluated => not_evaluated_reason(policy, passes.0, &unused),
        _ => keep_reason(image, policy, last_detect, now),
    }
}

/// How long the image has been unused; MaxAge counts watched time only, so say what was left
/// out.
fn unused_text(image: &ImageExplanation, now: UnixNanos, watch: &WatchHistory) -> String {
    let record = &image.record;
    let unwatched = watch.unwatched_between(unused_since(record), now);
    if unwatched.is_zero() {
        seconds(now.since(unused_since(record)))
    } else {
        format!(
            "{} of watched time ({} unwatched since, not counted)",
            seconds(watch.watched_unused(record, now)),
            seconds(unwatched)
        )
    }
}

/// A Go duration in whole seconds.
fn seconds(d: Duration) -> String {
    go_duration(Duration::from_secs(d.as_secs()))
}

/// The sentence of a removal by the byte walk, or of an inode candidate.
fn removal_reason(image: &ImageExplanation, (space, budget, inodes): Passes) -> String {
    let freed = format_size(image.freed_after.unwrap_or(0));
    match image.decision {
        Decision::RemoveForSpace => {
            let amount = match space {
                SpacePass::Runs { amount_to_free, .. } => amount_to_free,
                _ => 0,
            };
            format!(
                "eligible, inside the amount to free: {freed} freed of {} to free",
                format_size(u64::try_from(amount).unwrap_or(0))
            )
        }
        Decision::RemoveForBudget => {
            let amount = budget.and_then(|b| b.need.amount_to_free).unwrap_or(0);
            format!(
                "eligible, inside the byte budget's amount to free: {freed} freed of {} to free",
                format_size(u64::try_from(amount).unwrap_or(0))
            )
        }
        _ => {
            let (usage, target, total) =
                inodes.map_or((0, 0, 0), |n| (n.usage_percent, n.target_used, n.inodes));
            format!(
                "eligible, in the inode pass's order: inode use {usage}% is at or above the \
                 high inode threshold; removed if more than {target} of {total} inodes are \
                 still in use when the walk reaches it (measured as it runs)"
            )
        }
    }
}

/// The sentence of an image a keep rule keeps: the first rule that keeps it, in the order the
/// manager applies them.
fn keep_reason(
    image: &ImageExplanation,
    policy: &GcPolicy,
    last_detect: Option<UnixNanos>,
    now: UnixNanos,
) -> String {
    match image.decision {
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
        Decision::KeepNeededByPod => match image.needed_by.as_deref() {
            Some(daemonset) if daemonset.starts_with("DaemonSet ") => format!(
                "{daemonset}, which owns a pod bound to this node, names it in its template: \
                 needed by that pod's next run here"
            ),
            Some(cronjob) if cronjob.starts_with("CronJob ") => {
                let when = cronjob
                    .rsplit(" runs at ")
                    .next()
                    .and_then(crate::format::parse_rfc3339)
                    .map(|at| format!(", {}", crate::format::format_ago(now, at)))
                    .unwrap_or_default();
                format!(
                    "{cronjob}{when}: kept (and runtime-pinned) from the cluster signals' lead \
                     before its run"
                )
            }
            Some(pod) => format!(
                "a pod bound to this node names it ({pod}): needed now, whether or not its \
                 container exists yet"
            ),
            None => "a pod bound to this node names it: needed now, whether or not its \
                     container exists yet"
                .to_owned(),
        },
        Decision::KeepPinned => "pinned".to_owned(),
        Decision::KeepWarm => match image.warm_origin.as_deref() {
            Some(origin) if !origin.is_empty() => {
                format!("in the warm set ({origin}): kept present ahead of use")
            }
            _ => "in the warm set: kept present ahead of use".to_owned(),
        },
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
            seconds(now.since(image.record.first_detected)),
            go_duration(policy.min_age)
        ),
        other => other.as_str().to_owned(),
    }
}

/// The sentence of an eligible image the byte walk stopped before.
fn beyond_amount_reason((space, budget, _): Passes) -> String {
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

/// The sentence of an eligible image no rule needs room for.
fn below_high_reason(policy: &GcPolicy, space: SpacePass) -> String {
    match space {
        SpacePass::BelowHighThreshold { usage_percent, .. } => format!(
            "eligible, but usage {usage_percent}% is below HighThresholdPercent {}: no space pass",
            policy.high_threshold_percent
        ),
        _ => "eligible, but no rule needs room: the byte-percentage pass is off \
                  (HighThresholdPercent 100 and MaxAge 0), the budget and inode use are \
                  below their high marks"
            .to_owned(),
    }
}

/// The sentence of an eligible image when the percentage pass could not be judged.
fn not_evaluated_reason(policy: &GcPolicy, space: SpacePass, unused: &str) -> String {
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
