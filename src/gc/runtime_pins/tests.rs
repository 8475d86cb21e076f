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
    }
}

const OURS_PIN: [(&str, &str); 2] = [(PINNED_LABEL, PINNED_VALUE), (OWN_LABEL, "pin")];

#[test]
fn the_plan_writes_only_differences_and_never_touches_a_pin_it_did_not_set() {
    use KeepReason::*;
    struct Case {
        what: &'static str,
        keeps: Vec<KeptImage>,
        images: Vec<LabelledImage>,
        want: Vec<(&'static str, LabelChange)>,
    }
    let cases = [
        Case {
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
        Case {
            what: "a steady cycle writes nothing",
            keeps: vec![kept(&["r/a:1", "r/a@sha256:1"], Pin)],
            images: vec![image("r/a:1", &OURS_PIN), image("r/a@sha256:1", &OURS_PIN)],
            want: vec![],
        },
        Case {
            what: "a name pinned by someone else (sandbox image, ctr images label) is carried and left alone",
            keeps: vec![kept(&["r/pause:1"], SandboxImage)],
            images: vec![image("r/pause:1", &[(PINNED_LABEL, PINNED_VALUE)])],
            want: vec![],
        },
        Case {
            what: "a pin someone else set on an image imagekeeper does not keep is never cleared",
            keeps: vec![],
            images: vec![
                image("r/op:1", &[(PINNED_LABEL, PINNED_VALUE)]),
                image("r/b:1", &[]),
            ],
            want: vec![],
        },
        Case {
            what: "a keep that ended loses both labels where imagekeeper's own is present",
            keeps: vec![],
            images: vec![image("r/a:1", &OURS_PIN), image("r/a@sha256:1", &OURS_PIN)],
            want: vec![
                ("r/a:1", LabelChange::Unpin),
                ("r/a@sha256:1", LabelChange::Unpin),
            ],
        },
        Case {
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
        Case {
            what: "a changed reason rewrites imagekeeper's label",
            keeps: vec![kept(&["r/w:1"], Warm)],
            images: vec![image("r/w:1", &OURS_PIN)],
            want: vec![("r/w:1", LabelChange::Pin(Warm))],
        },
        Case {
            what: "imagekeeper's label with the pinned label removed by hand is pinned again",
            keeps: vec![kept(&["r/a:1"], Pin)],
            images: vec![image("r/a:1", &[(OWN_LABEL, "pin")])],
            want: vec![("r/a:1", LabelChange::Pin(Pin))],
        },
        Case {
            what: "a pinned label with another value is not a pin: imagekeeper sets its own",
            keeps: vec![kept(&["r/a:1"], NoRepoDigest)],
            images: vec![image("r/a:1", &[(PINNED_LABEL, "yes")])],
            want: vec![("r/a:1", LabelChange::Pin(NoRepoDigest))],
        },
        Case {
            what: "a kept name containerd does not store is skipped",
            keeps: vec![kept(&["r/gone:1"], Pin)],
            images: vec![image("r/other:1", &[])],
            want: vec![],
        },
    ];
    for case in cases {
        let got: Vec<(&str, LabelChange)> = plan_label_changes(&case.keeps, &case.images)
            .into_iter()
            .map(|(i, c)| (case.images[i].name.as_str(), c))
            .collect();
        assert_eq!(got, case.want, "{}", case.what);
    }
}

#[test]
fn label_changes_set_both_labels_or_empty_both() {
    assert_eq!(
        LabelChange::Pin(KeepReason::Warm).labels(),
        [(PINNED_LABEL, "pinned"), (OWN_LABEL, "warm")]
    );
    assert_eq!(
        LabelChange::Unpin.labels(),
        [(PINNED_LABEL, ""), (OWN_LABEL, "")]
    );
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
    let carried: BTreeMap<RecordKey, bool> = [
        (RecordKey::new("sha256:a", ""), true),
        (RecordKey::new("sha256:b", ""), false),
        (RecordKey::new("sha256:c", "kata"), true),
    ]
    .into_iter()
    .collect();
    check_answers(answer_cases("not reconciled"), |state, view| {
        runtime_pin_answer(state, &carried, view)
    });
}

#[test]
fn a_keep_is_carried_when_any_of_its_names_is_pinned_after_the_writes() {
    use KeepReason::*;
    let images = [
        image("r/a:1", &[(PINNED_LABEL, PINNED_VALUE)]),
        image("r/a@sha256:1", &[]),
        image("r/b:1", &[(PINNED_LABEL, "yes"), (OWN_LABEL, "pin")]),
        image("r/pause:1", &[(PINNED_LABEL, PINNED_VALUE)]),
    ];
    let pinned = pinned_names(&images);
    assert_eq!(
        pinned.into_iter().collect::<Vec<_>>(),
        [
            ("r/a:1", true),
            ("r/a@sha256:1", false),
            ("r/b:1", false),
            ("r/pause:1", true),
        ],
        "only the pinned label with the value `pinned` is a pin"
    );
    // (what, keep, pinned after the writes)
    let cases: [(&str, KeptImage, bool); 5] = [
        (
            "one name of two pinned",
            kept(&["r/a@sha256:1", "r/a:1"], Pin),
            true,
        ),
        ("no name pinned", kept(&["r/a@sha256:1"], Warm), false),
        (
            "pinned by someone else",
            kept(&["r/pause:1"], SandboxImage),
            true,
        ),
        (
            "a name containerd does not store",
            kept(&["r/gone:1"], Pin),
            false,
        ),
        ("no names", kept(&[], NoRepoDigest), false),
    ];
    for (what, keep, want) in cases {
        let pinned = pinned_names(&images);
        let got = carried_keeps(std::slice::from_ref(&keep), &pinned);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [(keep.key.clone(), (keep.why, want))],
            "{what}"
        );
    }
    // A write that succeeded counts: the map is what containerd holds after the writes.
    let mut pinned = pinned_names(&images);
    pinned.insert("r/a@sha256:1", true);
    pinned.insert("r/a:1", false);
    let got = carried_keeps(&[kept(&["r/a@sha256:1"], Warm)], &pinned);
    assert_eq!(got.values().collect::<Vec<_>>(), [&(Warm, true)]);
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
