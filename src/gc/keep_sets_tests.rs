use super::*;

fn set(name: &str, images: &[&str], until: i64, priority: i32) -> KeepSet {
    KeepSet {
        name: name.to_owned(),
        generation: 1,
        images: images.iter().map(|s| (*s).to_owned()).collect(),
        until: UnixNanos(until),
        priority,
        reason: String::new(),
        mode: KeepSetMode::Pin,
        pull_secrets: Vec::new(),
    }
}

fn pin(reason: &str, until: i64, created: i64) -> ImagePin {
    ImagePin {
        created_at: UnixNanos(created),
        until: UnixNanos(until),
        reason: reason.to_owned(),
    }
}

fn key(image: &str) -> PinKey {
    PinKey::new(image, "")
}

#[test]
fn a_keep_sets_images_become_pins_until_its_lifetime_with_its_name_as_reason() {
    let sets = [set("gpu-rollout", &["model:v2", "runner:1"], 500, 0)];
    let changes = keep_set_pin_changes(&sets, &[], UnixNanos(100));
    assert_eq!(
        changes.put,
        vec![
            (key("model:v2"), pin("KeepSet/gpu-rollout", 500, 100)),
            (key("runner:1"), pin("KeepSet/gpu-rollout", 500, 100)),
        ]
    );
    assert!(changes.remove.is_empty());
}

#[test]
fn pins_already_written_as_the_set_says_need_no_write() {
    let sets = [set("a", &["x:1"], 0, 0)];
    let existing = [(key("x:1"), pin("KeepSet/a", 0, 7))];
    assert!(keep_set_pin_changes(&sets, &existing, UnixNanos(100)).is_empty());
}

#[test]
fn a_changed_lifetime_rewrites_the_pin_keeping_its_creation_time() {
    let sets = [set("a", &["x:1"], 900, 0)];
    let existing = [(key("x:1"), pin("KeepSet/a", 500, 7))];
    let changes = keep_set_pin_changes(&sets, &existing, UnixNanos(100));
    assert_eq!(changes.put, vec![(key("x:1"), pin("KeepSet/a", 900, 7))]);
}

#[test]
fn an_expired_or_deleted_sets_pins_are_removed_and_operator_pins_stay() {
    let sets = [set("old", &["x:1"], 50, 0)];
    let existing = [
        (key("x:1"), pin("KeepSet/old", 50, 7)),
        (key("gone:1"), pin("KeepSet/deleted: rollout", 0, 7)),
        (key("mine:1"), pin("operator's own", 0, 7)),
    ];
    let changes = keep_set_pin_changes(&sets, &existing, UnixNanos(100));
    assert!(changes.put.is_empty());
    assert_eq!(changes.remove, vec![key("gone:1"), key("x:1")]);
}

#[test]
fn an_operators_pin_of_the_same_image_is_never_replaced() {
    let sets = [set("a", &["x:1"], 0, 0)];
    let existing = [(key("x:1"), pin("pinned by hand", 500, 7))];
    assert!(keep_set_pin_changes(&sets, &existing, UnixNanos(100)).is_empty());
}

#[test]
fn overlapping_sets_give_an_image_to_priority_then_lifetime_then_name() {
    let cases: &[(&[KeepSet], &str)] = &[
        (
            &[set("low", &["x:1"], 0, 0), set("high", &["x:1"], 500, 5)],
            "KeepSet/high",
        ),
        (
            &[
                set("short", &["x:1"], 500, 0),
                set("forever", &["x:1"], 0, 0),
            ],
            "KeepSet/forever",
        ),
        (
            &[set("b", &["x:1"], 500, 0), set("a", &["x:1"], 500, 0)],
            "KeepSet/a",
        ),
    ];
    for (sets, owner) in cases {
        let changes = keep_set_pin_changes(sets, &[], UnixNanos(100));
        assert_eq!(changes.put.len(), 1, "{sets:?}");
        assert_eq!(changes.put[0].1.reason, *owner, "{sets:?}");
        // The order the sets come in changes nothing.
        let reversed: Vec<KeepSet> = sets.iter().rev().cloned().collect();
        assert_eq!(
            keep_set_pin_changes(&reversed, &[], UnixNanos(100)),
            changes
        );
    }
}

#[test]
fn the_reason_names_the_set_and_is_cut_to_the_pins_bound() {
    let mut s = set("gpu-rollout", &[], 0, 0);
    s.reason = "model v2\nrollout".to_owned();
    assert_eq!(keep_set_reason(&s), "KeepSet/gpu-rollout: model v2rollout");
    assert_eq!(
        keep_set_of_reason(&keep_set_reason(&s)),
        Some("gpu-rollout")
    );
    assert_eq!(keep_set_of_reason("KeepSet/a"), Some("a"));
    assert_eq!(keep_set_of_reason("by hand"), None);
    s.reason = "é".repeat(2_000);
    let reason = keep_set_reason(&s);
    assert!(reason.len() <= MAX_PIN_REASON_BYTES);
    assert!(reason.starts_with("KeepSet/gpu-rollout: é"));
}

#[test]
fn a_report_is_ready_when_every_image_is_pinned_and_none_failed() {
    let ready = KeepSetReport {
        images: 2,
        present: 2,
        pinned: 2,
        ..KeepSetReport::default()
    };
    assert!(ready.ready());
    assert!(
        !KeepSetReport {
            pinned: 1,
            ..ready.clone()
        }
        .ready()
    );
    assert!(
        !KeepSetReport {
            failed: 1,
            ..ready.clone()
        }
        .ready()
    );
    assert!(
        !KeepSetReport {
            expired: true,
            ..ready.clone()
        }
        .ready()
    );
    assert!(
        !KeepSetReport {
            images: 0,
            present: 0,
            pinned: 0,
            ..ready
        }
        .ready(),
        "a set whose workloads are not read yet holds nothing"
    );
}

#[test]
fn a_warm_sets_report_is_ready_when_every_image_is_present_pinned_or_not() {
    let warm = KeepSetReport {
        images: 2,
        present: 2,
        pinned: 0,
        mode: KeepSetMode::Warm,
        ..KeepSetReport::default()
    };
    assert!(warm.ready());
    assert!(
        !KeepSetReport {
            present: 1,
            ..warm.clone()
        }
        .ready()
    );
    assert!(
        !KeepSetReport {
            mode: KeepSetMode::Pin,
            ..warm
        }
        .ready(),
        "the same counts in mode pin: not pinned, not ready"
    );
}

/// A warm set writes no pin (a pin set naming the same image still does); its images are
/// warm entries, each once, from the set the pins' order gives it to, until that set's
/// lifetime (none: no end), origin `KeepSet/<name>`.
#[test]
fn a_warm_sets_images_are_warm_entries_not_pins() {
    let warm = |name: &str, images: &[&str], until: i64, priority: i32| KeepSet {
        mode: KeepSetMode::Warm,
        ..set(name, images, until, priority)
    };
    let sets = [
        warm("models", &["model:3", "shared:1"], 500, 0),
        warm("urgent", &["shared:1"], 400, 5),
        warm("forever", &["base:1"], 0, 0),
        set("pinned", &["shared:1"], 900, 0),
    ];
    let changes = keep_set_pin_changes(&sets, &[], UnixNanos(100));
    let pinned: Vec<&str> = changes.put.iter().map(|(k, _)| k.image.as_str()).collect();
    assert_eq!(pinned, ["shared:1"], "only the pin set's image is pinned");
    let by_name: BTreeMap<String, KeepSet> =
        sets.iter().map(|s| (s.name.clone(), s.clone())).collect();
    let entries = warm_entries(&by_name);
    let got: Vec<(&str, Option<UnixNanos>, &str)> = entries
        .iter()
        .map(|e| (e.image.as_str(), e.until, e.origin.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("base:1", None, "KeepSet/forever"),
            ("model:3", Some(UnixNanos(500)), "KeepSet/models"),
            ("shared:1", Some(UnixNanos(400)), "KeepSet/urgent"),
        ]
    );
    let handle = NodeKeepSets::default();
    handle.replace(by_name);
    assert_eq!(handle.warm_set().entries(), entries.as_slice());
    let image = crate::model::RuntimeImage {
        repo_tags: vec!["docker.io/library/model:3".to_owned()],
        ..crate::model::RuntimeImage::default()
    };
    assert!(handle.warm_set().keeps(&image, UnixNanos(499)).is_some());
    assert!(
        handle.warm_set().keeps(&image, UnixNanos(500)).is_none(),
        "ended"
    );
}

#[tokio::test]
async fn the_handle_is_synced_by_its_first_list_and_keeps_at_most_the_cap() {
    let handle = NodeKeepSets::default();
    assert!(!handle.is_synced());
    let many: BTreeMap<String, KeepSet> = (0..MAX_KEEPSETS + 3)
        .map(|i| (format!("s{i:05}"), set(&format!("s{i:05}"), &["x:1"], 0, 0)))
        .collect();
    handle.replace(many);
    handle.synced().await;
    assert_eq!(handle.sets().len(), MAX_KEEPSETS);
    assert_eq!(handle.health().refused(), 3);
    handle.changed().await;
}
