//! Unit tests of explain: every decision and its sentence, the byte walk's stop, MaxAge over
//! watched time, the budget and inode passes, pins and irreplaceable images first.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::model::ImageRecord;

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
    let warm: BTreeMap<RecordKey, String> =
        [(records[0].key.clone(), "KeepSet/gpu-warm".to_owned())].into();
    let run = |warm: &BTreeMap<RecordKey, String>| {
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
                sets: &KeepSets {
                    warm: warm.clone(),
                    ..KeepSets::default()
                },
                kubelet: &KubeletView::default(),
                watch: &WatchHistory::default(),
                image_fs: None,
                protections: &Protections::default(),
            },
        )
    };
    let kept = run(&warm);
    assert_eq!(kept.images[0].verdict, Verdict::Warm);
    assert_eq!(kept.images[0].decision, Decision::KeepWarm);
    assert_eq!(
        kept.images[0].reason,
        "in the warm set (KeepSet/gpu-warm): kept present ahead of use"
    );
    assert_eq!(
        kept.images[0].warm_origin.as_deref(),
        Some("KeepSet/gpu-warm")
    );
    assert_eq!(kept.images[1].decision, Decision::RemoveForAge);
    let cold = run(&BTreeMap::new());
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

/// `each_rule_gives_its_decision`'s cases: (name, policy, filesystem, the decision on each of
/// its six records in eviction order).
fn rule_cases() -> Vec<(&'static str, GcPolicy, Option<FsSpace>, Vec<Decision>)> {
    use Decision::*;
    vec![
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
    ]
}

#[test]
fn each_rule_gives_its_decision() {
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
    for (name, policy, fs, want) in rule_cases() {
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
                sets: &KeepSets::default(),
                kubelet: &KubeletView::default(),
                watch,
                image_fs: None,
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

/// Four records of 1,000 bytes in all, and a byte budget of 800 down to 500.
fn budget_case() -> (Vec<StoredRecord>, GcPolicy) {
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
    (records, policy)
}

/// Issue 28: the byte budget walks as the space rule does, under its own decision.
#[test]
fn the_budget_walks_under_its_own_decision() {
    let (records, policy) = budget_case();
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
}

/// Issue 28: the byte rule needs one image, the budget two: the larger need wins; with inode
/// use over the high inode threshold the eligible images left are inode candidates; the
/// explanation names the filesystem.
#[test]
fn the_larger_byte_need_wins_and_the_inode_pass_names_its_candidates() {
    let (records, policy) = budget_case();
    let now = UnixNanos::from_secs(1000);
    let fs = FsSpace {
        capacity: 10_000,
        available: 1_550,
    };
    let stats = ImageFsStats::new("/var/lib/containerd", 0, 10_000, 1_550).with_inodes(1000, 100);
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
            sets: &KeepSets::default(),
            kubelet: &KubeletView::default(),
            watch: &watch,
            image_fs: Some(&stats),
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
            sets: &KeepSets::default(),
            kubelet: &KubeletView::default(),
            watch: &WatchHistory::default(),
            image_fs: None,
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
