//! The plan against the record, data-driven: only recorded names are changed, a forged label
//! is reported and left, a stripped one is an orphan the agent still clears, adoption is once.

use super::*;
use crate::gc::runtime_pins::{INSTANCE_LABEL, PINNED_LABEL, PINNED_VALUE};
use crate::model::RecordKey;

const ME: &str = "00000000000000aa";
const OTHER: &str = "00000000000000bb";
const NOW: UnixNanos = UnixNanos(1_800_000_000_000_000_000);

fn image(name: &str, labels: &[(&str, &str)]) -> LabelledImage {
    LabelledImage {
        name: name.to_owned(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..LabelledImage::default()
    }
}

fn kept(name: &str) -> KeptImage {
    KeptImage {
        key: RecordKey::new(format!("sha256:{name}"), ""),
        names: vec![name.to_owned()],
        why: KeepReason::Pin,
        listed_pinned: false,
    }
}

const OURS: [(&str, &str); 3] = [
    (PINNED_LABEL, PINNED_VALUE),
    (OWN_LABEL, "pin"),
    (INSTANCE_LABEL, ME),
];

fn record(names: &[&str]) -> BTreeMap<String, RuntimeLabel> {
    names
        .iter()
        .map(|n| ((*n).to_owned(), label("pin".to_owned(), UnixNanos(1))))
        .collect()
}

fn changes(plan: &RecordPlan, images: &[LabelledImage]) -> Vec<(String, LabelChange)> {
    plan.changes
        .iter()
        .map(|(i, c)| (images[*i].name.clone(), *c))
        .collect()
}

#[test]
fn a_label_forged_on_a_name_the_agent_never_labelled_is_reported_and_left_alone() {
    // The sandbox image's pin (containerd's own), with imagekeeper's labels forged on it.
    let images = [image("r/pause:1", &OURS), image("r/a:1", &OURS)];
    let plan = plan_with_record(&[], &images, ME, &record(&["r/a:1"]), false, NOW);
    assert_eq!(
        changes(&plan, &images),
        [("r/a:1".to_owned(), LabelChange::Unpin)],
        "only the recorded name is unpinned"
    );
    assert_eq!(plan.foreign, ["r/pause:1"]);
    assert!(plan.put.is_empty() && plan.forget.is_empty() && plan.orphaned.is_empty());
}

#[test]
fn a_stripped_own_label_is_an_orphan_relabelled_while_kept_and_cleared_after() {
    let stripped = [image("r/a:1", &[(PINNED_LABEL, PINNED_VALUE)])];
    let kept_plan = plan_with_record(
        &[kept("r/a:1")],
        &stripped,
        ME,
        &record(&["r/a:1"]),
        false,
        NOW,
    );
    assert_eq!(kept_plan.orphaned, ["r/a:1"]);
    assert_eq!(
        changes(&kept_plan, &stripped),
        [("r/a:1".to_owned(), LabelChange::Pin(KeepReason::Pin))]
    );
    assert_eq!(
        kept_plan.put,
        [("r/a:1".to_owned(), label("pin".to_owned(), NOW))]
    );
    let ended = plan_with_record(&[], &stripped, ME, &record(&["r/a:1"]), false, NOW);
    assert_eq!(ended.orphaned, ["r/a:1"]);
    assert_eq!(
        changes(&ended, &stripped),
        [("r/a:1".to_owned(), LabelChange::Unpin)]
    );
    // Unrecorded, the same pinned label is someone else's: never cleared, not reported.
    let theirs = plan_with_record(&[], &stripped, ME, &BTreeMap::new(), false, NOW);
    assert_eq!(theirs, RecordPlan::default());
}

#[test]
fn rows_are_forgotten_when_nothing_of_the_agent_is_left_on_the_name() {
    let images = [
        image("r/bare:1", &[]),
        image(
            "r/other:1",
            &[
                (PINNED_LABEL, PINNED_VALUE),
                (OWN_LABEL, "pin"),
                (INSTANCE_LABEL, OTHER),
            ],
        ),
    ];
    let plan = plan_with_record(
        &[],
        &images,
        ME,
        &record(&["r/bare:1", "r/other:1", "r/gone:1"]),
        false,
        NOW,
    );
    assert!(plan.changes.is_empty(), "{plan:?}");
    assert_eq!(plan.forget, ["r/bare:1", "r/other:1", "r/gone:1"]);
    // Kept again, a name with a row and no label is pinned (a crash between row and label).
    let plan = plan_with_record(
        &[kept("r/bare:1")],
        &images,
        ME,
        &record(&["r/bare:1"]),
        false,
        NOW,
    );
    assert_eq!(
        changes(&plan, &images),
        [("r/bare:1".to_owned(), LabelChange::Pin(KeepReason::Pin))]
    );
}

#[test]
fn adoption_takes_this_instances_and_unnamed_labels_as_they_stand_once() {
    let images = [
        image("r/mine:1", &OURS),
        image(
            "r/unnamed:1",
            &[(PINNED_LABEL, PINNED_VALUE), (OWN_LABEL, "warm")],
        ),
        image(
            "r/other:1",
            &[
                (PINNED_LABEL, PINNED_VALUE),
                (OWN_LABEL, "pin"),
                (INSTANCE_LABEL, OTHER),
            ],
        ),
        image("r/theirs:1", &[(PINNED_LABEL, PINNED_VALUE)]),
    ];
    let plan = plan_with_record(&[], &images, ME, &BTreeMap::new(), true, NOW);
    assert!(plan.adopts);
    assert_eq!(
        plan.put,
        [
            ("r/mine:1".to_owned(), label("pin".to_owned(), NOW)),
            ("r/unnamed:1".to_owned(), label("warm".to_owned(), NOW)),
        ]
    );
    assert_eq!(
        changes(&plan, &images),
        [
            ("r/mine:1".to_owned(), LabelChange::Unpin),
            ("r/unnamed:1".to_owned(), LabelChange::Unpin),
        ]
    );
    assert!(plan.foreign.is_empty());
    // Without adoption the same labels are foreign and left.
    let later = plan_with_record(&[], &images, ME, &BTreeMap::new(), false, NOW);
    assert!(later.changes.is_empty());
    assert_eq!(later.foreign, ["r/mine:1", "r/unnamed:1"]);
}

/// The one rule of orphaned and foreign the reconcile, `doctor` and `remove-runtime-pins`
/// share, case by case: whose labels, pinned or not, recorded or not.
#[test]
fn a_names_standing_against_the_record_is_one_rule_case_by_case() {
    use super::{RecordStanding as S, record_standing};
    use crate::gc::runtime_pins::LabelOwner as O;
    let cases = [
        (O::Mine, true, true, S::Own),
        (O::Unnamed, false, true, S::Own),
        (O::Mine, true, false, S::Foreign),
        (O::Unnamed, true, false, S::Foreign),
        (O::NotImagekeepers, true, true, S::Orphaned),
        (O::NotImagekeepers, false, true, S::Cleared),
        (O::NotImagekeepers, true, false, S::NotImagekeepers),
        (O::Other("b"), true, true, S::OtherInstance),
        (O::Other("b"), true, false, S::OtherInstance),
    ];
    for (owner, pinned, recorded, want) in cases {
        assert_eq!(
            record_standing(owner, pinned, recorded),
            want,
            "{owner:?} pinned {pinned} recorded {recorded}"
        );
    }
    assert_eq!(O::of(None, "a"), O::NotImagekeepers);
    assert_eq!(O::of(Some(None), "a"), O::Unnamed);
    assert_eq!(O::of(Some(Some("a")), "a"), O::Mine);
    assert_eq!(O::of(Some(Some("b")), "a"), O::Other("b"));
}
