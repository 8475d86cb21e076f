//! The runtime pins' plan and the answer `pins -o wide` gives, data-driven.

use super::*;
use crate::model::RecordKey;

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

fn kept(names: &[&str], why: KeepReason) -> KeptImage {
    KeptImage {
        key: RecordKey::new(
            format!("sha256:{}", names.first().copied().unwrap_or("x")),
            "",
        ),
        names: names.iter().map(|n| (*n).to_owned()).collect(),
        why,
        listed_pinned: false,
    }
}

/// This instance (the agent planning) and another one on the same containerd.
const ME: &str = "00000000000000aa";
const OTHER: &str = "00000000000000bb";
const OURS_PIN: [(&str, &str); 3] = [
    (PINNED_LABEL, PINNED_VALUE),
    (OWN_LABEL, "pin"),
    (INSTANCE_LABEL, ME),
];
const OTHERS_PIN: [(&str, &str); 3] = [
    (PINNED_LABEL, PINNED_VALUE),
    (OWN_LABEL, "pin"),
    (INSTANCE_LABEL, OTHER),
];
/// imagekeeper's labels as written before instances were named.
const UNNAMED_PIN: [(&str, &str); 2] = [(PINNED_LABEL, PINNED_VALUE), (OWN_LABEL, "pin")];

/// One plan's case: what it shows, the keeps and containerd's images, and the changes wanted.
struct PlanCase {
    what: &'static str,
    keeps: Vec<KeptImage>,
    images: Vec<LabelledImage>,
    want: Vec<(&'static str, LabelChange)>,
}

/// Each case's plan changes exactly the names it wants, as it wants.
fn check_plans(cases: impl IntoIterator<Item = PlanCase>) {
    for case in cases {
        // Every label of this instance taken as the agent's: the plan of the reconcile that
        // adopts them (`gc::runtime_pin_record`), which decides as the labels alone did.
        let plan = crate::gc::runtime_pin_record::plan_with_record(
            &case.keeps,
            &case.images,
            ME,
            &BTreeMap::new(),
            true,
            crate::model::UnixNanos(0),
        );
        let got: Vec<(&str, LabelChange)> = plan
            .changes
            .into_iter()
            .map(|(i, c)| (case.images[i].name.as_str(), c))
            .collect();
        assert_eq!(got, case.want, "{}", case.what);
    }
}

#[test]
fn the_plan_pins_every_kept_name_writing_only_differences() {
    use KeepReason::*;
    check_plans([
        PlanCase {
            what: "every name of a kept image gets both labels",
            keeps: vec![kept(&["r/a:1", "r/a@sha256:1"], Pin)],
            images: vec![
                image("r/a:1", &[]),
                image("r/a@sha256:1", &[("io.cri-containerd.image", "managed")]),
            ],
            want: vec![
                ("r/a:1", LabelChange::Pin(Pin)),
                ("r/a@sha256:1", LabelChange::Pin(Pin)),
            ],
        },
        PlanCase {
            what: "a steady cycle writes nothing",
            keeps: vec![kept(&["r/a:1", "r/a@sha256:1"], Pin)],
            images: vec![image("r/a:1", &OURS_PIN), image("r/a@sha256:1", &OURS_PIN)],
            want: vec![],
        },
        PlanCase {
            what: "a changed reason rewrites imagekeeper's label",
            keeps: vec![kept(&["r/w:1"], Warm)],
            images: vec![image("r/w:1", &OURS_PIN)],
            want: vec![("r/w:1", LabelChange::Pin(Warm))],
        },
        PlanCase {
            what: "imagekeeper's label with the pinned label removed by hand is pinned again",
            keeps: vec![kept(&["r/a:1"], Pin)],
            images: vec![image("r/a:1", &[(OWN_LABEL, "pin"), (INSTANCE_LABEL, ME)])],
            want: vec![("r/a:1", LabelChange::Pin(Pin))],
        },
        PlanCase {
            what: "a pinned label with another value is not a pin: imagekeeper sets its own",
            keeps: vec![kept(&["r/a:1"], NoRepoDigest)],
            images: vec![image("r/a:1", &[(PINNED_LABEL, "yes")])],
            want: vec![("r/a:1", LabelChange::Pin(NoRepoDigest))],
        },
        PlanCase {
            what: "a kept name containerd does not store is skipped",
            keeps: vec![kept(&["r/gone:1"], Pin)],
            images: vec![image("r/other:1", &[])],
            want: vec![],
        },
    ]);
}

#[test]
fn the_plan_unpins_the_names_it_labelled_once_they_are_no_longer_kept() {
    use KeepReason::*;
    check_plans([
        PlanCase {
            what: "a keep that ended loses both labels where imagekeeper's own is present",
            keeps: vec![],
            images: vec![image("r/a:1", &OURS_PIN), image("r/a@sha256:1", &OURS_PIN)],
            want: vec![
                ("r/a:1", LabelChange::Unpin),
                ("r/a@sha256:1", LabelChange::Unpin),
            ],
        },
        PlanCase {
            what: "a moved tag keeps its pin and the old image's digest name loses it",
            keeps: vec![kept(&["r/a:1", "r/a@sha256:2"], Pin)],
            images: vec![
                image("r/a:1", &OURS_PIN),
                image("r/a@sha256:1", &OURS_PIN),
                image("r/a@sha256:2", &[]),
            ],
            want: vec![
                ("r/a@sha256:1", LabelChange::Unpin),
                ("r/a@sha256:2", LabelChange::Pin(Pin)),
            ],
        },
        PlanCase {
            what: "an unnamed label (written before instances) is adopted: stamped when kept, removed when not",
            keeps: vec![kept(&["r/a:1"], Pin)],
            images: vec![image("r/a:1", &UNNAMED_PIN), image("r/b:1", &UNNAMED_PIN)],
            want: vec![
                ("r/a:1", LabelChange::Pin(Pin)),
                ("r/b:1", LabelChange::Unpin),
            ],
        },
    ]);
}

#[test]
fn the_plan_never_touches_a_pin_it_did_not_set() {
    use KeepReason::*;
    check_plans([
        PlanCase {
            what: "a name pinned by someone else (sandbox image, ctr images label) is carried and left alone",
            keeps: vec![kept(&["r/pause:1"], SandboxImage)],
            images: vec![image("r/pause:1", &[(PINNED_LABEL, PINNED_VALUE)])],
            want: vec![],
        },
        PlanCase {
            what: "a pin someone else set on an image imagekeeper does not keep is never cleared",
            keeps: vec![],
            images: vec![
                image("r/op:1", &[(PINNED_LABEL, PINNED_VALUE)]),
                image("r/b:1", &[]),
            ],
            want: vec![],
        },
        PlanCase {
            what: "another instance's pin on a name this one keeps is carried and left alone",
            keeps: vec![kept(&["r/a:1"], Pin)],
            images: vec![image("r/a:1", &OTHERS_PIN)],
            want: vec![],
        },
        PlanCase {
            what: "another instance's pin on a name this one does not keep is never cleared",
            keeps: vec![],
            images: vec![image("r/a:1", &OTHERS_PIN)],
            want: vec![],
        },
        PlanCase {
            what: "another instance's label without the pinned label: this one pins what it keeps",
            keeps: vec![kept(&["r/a:1"], Pin)],
            images: vec![image(
                "r/a:1",
                &[(OWN_LABEL, "pin"), (INSTANCE_LABEL, OTHER)],
            )],
            want: vec![("r/a:1", LabelChange::Pin(Pin))],
        },
    ]);
}

#[test]
fn label_changes_set_the_three_labels_or_empty_them() {
    assert_eq!(
        LabelChange::Pin(KeepReason::Warm).labels(ME),
        [
            (PINNED_LABEL, "pinned"),
            (OWN_LABEL, "warm"),
            (INSTANCE_LABEL, ME)
        ]
    );
    assert_eq!(
        LabelChange::Unpin.labels(ME),
        [(PINNED_LABEL, ""), (OWN_LABEL, ""), (INSTANCE_LABEL, "")]
    );
    assert_eq!(INSTANCE_LABEL, "io.imagekeeper.instance");
    assert_eq!(PINNED_LABEL, "io.cri-containerd.pinned");
}

/// One pin's view: `app:1`, active or not, naming the images `ids`.
fn pin_view(active: bool, ids: &[&str]) -> crate::gc::PinView {
    use crate::model::{ImageId, ImagePin, PinKey, UnixNanos};
    crate::gc::PinView {
        key: PinKey::new("app:1".to_owned(), String::new()),
        pin: ImagePin {
            created_at: UnixNanos(1),
            until: UnixNanos::NEVER,
            reason: String::new(),
        },
        active,
        image_ids: ids.iter().map(|i| ImageId((*i).to_owned())).collect(),
        runtime_pinned: None,
        runtime_pin_note: String::new(),
        runtime_labelled: None,
    }
}

/// The cases both answers are held to, over images `sha256:a` (pinned), `sha256:b` (not) and
/// `sha256:c` (pinned under handler `kata` only): (what, state, view, want pinned, want note
/// contains). The one case whose note differs by answer takes `other_handler_note`.
fn answer_cases(
    other_handler_note: &'static str,
) -> [(
    &'static str,
    PinsState,
    crate::gc::PinView,
    Option<bool>,
    &'static str,
); 8] {
    let off = PinsState::Off("containerd 1.6.20 does not list labelled images as pinned".into());
    [
        (
            "carried",
            PinsState::On,
            pin_view(true, &["sha256:a"]),
            Some(true),
            "",
        ),
        (
            "not carried",
            PinsState::On,
            pin_view(true, &["sha256:b"]),
            Some(false),
            "",
        ),
        (
            "one of two not carried",
            PinsState::On,
            pin_view(true, &["sha256:a", "sha256:b"]),
            Some(false),
            "",
        ),
        (
            "carried under another handler only",
            PinsState::On,
            pin_view(true, &["sha256:c"]),
            None,
            other_handler_note,
        ),
        (
            "expired",
            PinsState::On,
            pin_view(false, &["sha256:a"]),
            None,
            "expired",
        ),
        (
            "no image",
            PinsState::On,
            pin_view(true, &[]),
            None,
            "no image on the node",
        ),
        (
            "off on 1.6",
            off,
            pin_view(true, &["sha256:a"]),
            None,
            "runtime pins off: containerd 1.6.20",
        ),
        (
            "undecided",
            PinsState::Undecided,
            pin_view(true, &["sha256:a"]),
            None,
            "undecided",
        ),
    ]
}

/// Holds `answer` to `cases`: the value, the note, and a note exactly when unknown.
fn check_answers(
    cases: [(&str, PinsState, crate::gc::PinView, Option<bool>, &str); 8],
    answer: impl Fn(&PinsState, &crate::gc::PinView) -> (Option<bool>, String),
) {
    for (what, state, view, want, note) in cases {
        let (got, got_note) = answer(&state, &view);
        assert_eq!(got, want, "{what}");
        assert!(got_note.contains(note), "{what}: note {got_note:?}");
        assert_eq!(
            got.is_some(),
            got_note.is_empty(),
            "{what}: a note exactly when unknown"
        );
    }
}

#[test]
fn a_pin_is_said_carried_only_when_pins_are_on_and_every_image_of_it_was_reconciled_pinned() {
    let keep = |carried| CarriedKeep {
        why: KeepReason::Pin,
        carried,
        labelled: true,
    };
    let carried: BTreeMap<RecordKey, CarriedKeep> = [
        (RecordKey::new("sha256:a", ""), keep(true)),
        (RecordKey::new("sha256:b", ""), keep(false)),
        (RecordKey::new("sha256:c", "kata"), keep(true)),
    ]
    .into_iter()
    .collect();
    check_answers(answer_cases("not reconciled"), |state, view| {
        let (pinned, note, labelled) = runtime_pin_answer(state, &carried, view);
        assert_eq!(
            labelled.is_some(),
            pinned.is_some(),
            "labelled known exactly when pinned is"
        );
        (pinned, note)
    });
}

/// The images whose labels the keeps below are read against.
fn labelled_images() -> [LabelledImage; 4] {
    [
        image("r/a:1", &[(PINNED_LABEL, PINNED_VALUE)]),
        image("r/a@sha256:1", &[]),
        image("r/b:1", &[(PINNED_LABEL, "yes"), (OWN_LABEL, "pin")]),
        image("r/pause:1", &[(PINNED_LABEL, PINNED_VALUE)]),
    ]
}

/// A keep as the CRI listed it, pinned or not.
fn listed(mut keep: KeptImage, pinned: bool) -> KeptImage {
    keep.listed_pinned = pinned;
    keep
}

/// (what, keep with the CRI's flag, want carried, want labelled, want a disagreement)
fn carried_cases() -> [(&'static str, KeptImage, bool, bool, bool); 6] {
    use KeepReason::*;
    [
        (
            "labelled and listed pinned",
            listed(kept(&["r/a@sha256:1", "r/a:1"], Pin), true),
            true,
            true,
            false,
        ),
        (
            "labelled, but the CRI lists it pinned: false (containerd 1.7.3 to 1.7.9)",
            listed(kept(&["r/a@sha256:1", "r/a:1"], Pin), false),
            false,
            true,
            true,
        ),
        (
            "neither (a label written by this reconcile is seen at the next)",
            listed(kept(&["r/a@sha256:1"], Warm), false),
            false,
            false,
            false,
        ),
        (
            "listed pinned with no label (a label removed that the CRI did not clear)",
            listed(kept(&["r/a@sha256:1"], Warm), true),
            true,
            false,
            true,
        ),
        (
            "a name containerd does not store",
            listed(kept(&["r/gone:1"], Pin), false),
            false,
            false,
            false,
        ),
        (
            "pinned by someone else and listed",
            listed(kept(&["r/pause:1"], SandboxImage), true),
            true,
            true,
            false,
        ),
    ]
}

/// Carried is CRI ListImages' own `pinned` flag at the detect (containerd before 1.7.10 keeps a
/// label without listing the image pinned: containerd issue 9328), labelled is containerd's
/// label read before the writes, and the two disagreeing is reported.
#[test]
fn a_keep_is_carried_as_the_cri_lists_it_and_a_label_it_does_not_carry_is_a_disagreement() {
    let images = labelled_images();
    let labelled = pinned_names(&images);
    assert_eq!(
        labelled.clone().into_iter().collect::<Vec<_>>(),
        [
            ("r/a:1", true),
            ("r/a@sha256:1", false),
            ("r/b:1", false),
            ("r/pause:1", true),
        ],
        "only the pinned label with the value `pinned` is a pin"
    );
    for (what, keep, carried, want_labelled, disagrees) in carried_cases() {
        let got = carried_keeps(std::slice::from_ref(&keep), &labelled);
        let want = CarriedKeep {
            why: keep.why,
            carried,
            labelled: want_labelled,
        };
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [(keep.key.clone(), want)],
            "{what}"
        );
        assert_eq!(want.disagrees(), disagrees, "{what}");
    }
}

#[test]
fn the_runtime_pinned_column_names_a_label_the_cri_does_not_carry() {
    let cases = [
        (Some(true), Some(true), "yes"),
        (Some(false), Some(false), "no"),
        (
            Some(false),
            Some(true),
            "no (labelled pinned, but CRI ListImages lists it pinned: false)",
        ),
        (
            Some(true),
            Some(false),
            "yes (listed pinned: true, with no pinned label)",
        ),
        (None, None, "unknown: why"),
    ];
    for (pinned, labelled, want) in cases {
        assert_eq!(
            runtime_pinned_text(pinned, labelled, "unknown: why"),
            want,
            "{pinned:?} {labelled:?}"
        );
    }
}

/// The answer a pin through the agent gives (`pin` waits for it): what CRI ListImages lists,
/// not containerd's labels. An image listed unpinned is `Some(false)` whatever its labels say;
/// one under another handler or gone is unknown.
#[test]
fn a_pin_is_said_carried_from_cri_list_images_only_when_every_image_of_it_is_listed_pinned() {
    use crate::model::{ImageId, RuntimeImage};
    let listed = |id: &str, handler: &str, pinned: bool| RuntimeImage {
        id: ImageId(id.to_owned()),
        runtime_handler: handler.to_owned(),
        pinned,
        ..RuntimeImage::default()
    };
    let images = [
        listed("sha256:a", "", true),
        listed("sha256:b", "", false),
        listed("sha256:c", "kata", true),
    ];
    check_answers(
        answer_cases("no longer lists image sha256:c"),
        |state, view| runtime_pin_answer_listed(state, &images, view),
    );
}

#[test]
fn other_instances_counts_the_names_each_other_instance_labelled() {
    let images = [
        image("r/a:1", &OURS_PIN),
        image("r/b:1", &OTHERS_PIN),
        image("r/c:1", &OTHERS_PIN),
        image("r/d:1", &UNNAMED_PIN),
        image("r/e:1", &[(PINNED_LABEL, PINNED_VALUE)]),
    ];
    assert_eq!(other_instances(&images, ME), BTreeMap::from([(OTHER, 2)]));
    assert_eq!(other_instances(&images, OTHER), BTreeMap::from([(ME, 1)]));
}
