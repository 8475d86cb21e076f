use std::sync::{Arc, Mutex};

use super::*;
use crate::gc::{GcError, Removal};
use crate::model::{RecordKey, RemovalReason};

#[derive(Debug, Default, Clone)]
struct Recorded(Arc<Mutex<Vec<NodeEvent>>>);

impl EventSink for Recorded {
    fn publish(&self, event: NodeEvent) {
        self.0.lock().unwrap().push(event);
    }
}

impl Recorded {
    fn take(&self) -> Vec<NodeEvent> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn removal(id: &str, size: u64) -> Removal {
    Removal {
        key: RecordKey::new(id, ""),
        size,
        reason: RemovalReason::Space,
        evicted_before: None,
    }
}

fn report(removed: Vec<Removal>, error: Option<GcError>) -> GcReport {
    GcReport {
        freed: removed.iter().map(|r| r.size).sum(),
        removed,
        error,
        ..GcReport::default()
    }
}

#[test]
fn a_cycle_that_removed_images_is_one_event_naming_the_three_largest() {
    let sink = Recorded::default();
    let events = NodeEvents::new(Box::new(sink.clone()));
    events.gc_cycle(&report(
        vec![
            removal("sha256:1111111111111111aaaa", 100),
            removal("sha256:2222222222222222bbbb", 5 << 20),
            removal("sha256:3333333333333333cccc", 2048),
            removal("sha256:4444444444444444dddd", 3 << 30),
            removal("sha256:5555555555555555eeee", 10),
        ],
        None,
    ));
    assert_eq!(
        sink.take(),
        [NodeEvent {
            type_: NodeEventType::Normal,
            reason: "ImageGarbageCollected",
            action: "GarbageCollect",
            note: format!(
                "Removed 5 images, freed {} bytes (3.0 GiB): 4444444444444 (3.0 GiB), \
                 2222222222222 (5.0 MiB), 3333333333333 (2.0 KiB) and 2 more",
                (3u64 << 30) + (5 << 20) + 2048 + 110
            )
        }]
    );
    // A quiet cycle says nothing.
    events.gc_cycle(&report(vec![], None));
    assert_eq!(sink.take(), []);
}

/// The Events of a run of GC cycles as kubelet master publishes them: the image GC manager's
/// `FreeDiskSpaceFailed` / `InvalidDiskCapacity` at every such failure
/// (pkg/kubelet/images/image_gc_manager.go `GarbageCollect`), none for a failed removal
/// (`freeSpace`'s error), and `ImageGCFailed` with the error's text only from the second
/// failed cycle in a row (pkg/kubelet/kubelet.go `StartGarbageCollection`,
/// `prevImageGCFailed`); a success in between starts the count again. imagekeeper's own rules
/// have names of their own.
#[test]
fn failed_cycles_publish_the_kubelets_events_in_the_kubelets_order() {
    let sink = Recorded::default();
    let events = NodeEvents::new(Box::new(sink.clone()));
    let space = || GcError::InsufficientSpace {
        usage_percent: 93,
        capacity: 100 << 30,
        freed: 0,
    };
    let deletion = || GcError::SpaceDeletion {
        wanted: 10,
        freed: 0,
        errors: vec!["rpc error: code = Unknown desc = busy".to_owned()],
    };
    let inodes = || GcError::InsufficientInodes {
        usage_percent: 95,
        inodes: 1000,
        freed: 0,
    };
    let budget = || GcError::InsufficientBudget {
        total: 10,
        high: 5,
        low: 4,
        freed: 0,
    };
    // (what, the cycle's error, the Events it publishes: reason and note)
    type Cycle<'a> = (&'a str, Option<GcError>, Vec<(&'a str, String)>);
    let cycles: Vec<Cycle<'_>> = vec![
        (
            "a first insufficient-space failure: the manager's Event only",
            Some(space()),
            vec![("FreeDiskSpaceFailed", space().to_string())],
        ),
        (
            "the second in a row: FreeDiskSpaceFailed, then ImageGCFailed with the same text",
            Some(space()),
            vec![
                ("FreeDiskSpaceFailed", space().to_string()),
                ("ImageGCFailed", space().to_string()),
            ],
        ),
        ("a success", None, vec![]),
        (
            "a failed removal, first in a row: nothing",
            Some(deletion()),
            vec![],
        ),
        (
            "a failed removal again: ImageGCFailed alone, no FreeDiskSpaceFailed",
            Some(deletion()),
            vec![("ImageGCFailed", deletion().to_string())],
        ),
        (
            "a capacity of 0 after a failure: InvalidDiskCapacity, then ImageGCFailed",
            Some(GcError::InvalidCapacity),
            vec![
                ("InvalidDiskCapacity", GcError::InvalidCapacity.to_string()),
                ("ImageGCFailed", GcError::InvalidCapacity.to_string()),
            ],
        ),
        ("a success", None, vec![]),
        (
            "the inode rule, imagekeeper's own: its own name",
            Some(inodes()),
            vec![("FreeInodesFailed", inodes().to_string())],
        ),
        (
            "the byte budget, imagekeeper's own, after a failure",
            Some(budget()),
            vec![
                ("ImageBudgetNotMet", budget().to_string()),
                ("ImageGCFailed", budget().to_string()),
            ],
        ),
    ];
    for (what, error, want) in cycles {
        events.gc_cycle(&report(vec![], error));
        let said: Vec<(&str, String)> = sink
            .take()
            .into_iter()
            .map(|e| {
                assert_eq!(e.type_, NodeEventType::Warning, "{what}");
                (e.reason, e.note)
            })
            .collect();
        assert_eq!(said, want, "{what}");
    }
    assert!(
        space().to_string().starts_with(
            "Insufficient free disk space on the node's image filesystem (93% of 100.0 GiB used)"
        ),
        "{}",
        space()
    );
}

#[test]
fn the_store_turning_unhealthy_is_said_once_until_it_recovers() {
    let sink = Recorded::default();
    let events = NodeEvents::new(Box::new(sink.clone()));
    events.store_health(true);
    events.store_health(false);
    events.store_health(false);
    let said = sink.take();
    assert_eq!(said.len(), 1);
    assert_eq!(
        (said[0].type_, said[0].reason),
        (NodeEventType::Warning, "RecordStoreUnhealthy")
    );
    events.store_health(true);
    events.store_health(false);
    assert_eq!(sink.take().len(), 1);
}

#[test]
fn events_off_say_nothing_and_notes_stay_under_one_kilobyte() {
    let off = NodeEvents::off();
    assert!(!off.enabled());
    off.gc_cycle(&report(vec![removal("sha256:a", 1)], None));
    off.store_health(false);
    let long = truncate("é".repeat(2000));
    assert!(
        long.len() <= MAX_NOTE_BYTES && long.ends_with("..."),
        "{}",
        long.len()
    );
}

#[test]
fn each_doctor_conflict_at_start_is_one_warning_with_its_fix() {
    use crate::doctor::{Finding, Status};
    let finding = |check: &str, status, fix: Option<&str>| Finding {
        check: check.to_owned(),
        status,
        message: format!("{check} message."),
        fix: fix.map(str::to_owned),
    };
    let sink = Recorded::default();
    let events = NodeEvents::new(Box::new(sink.clone()));
    events.doctor_conflicts(&[
        finding("image-gc-thresholds", Status::Ok, None),
        finding(
            "eviction-hard-imagefs",
            Status::Conflict,
            Some("Lower imagekeeper's high threshold."),
        ),
        finding("container-events", Status::NotChecked, None),
        finding(
            "runtime-endpoint",
            Status::Conflict,
            Some("Use one endpoint."),
        ),
    ]);
    let said = sink.take();
    assert_eq!(
        said,
        [
            NodeEvent {
                type_: NodeEventType::Warning,
                reason: "KubeletConfigConflict",
                action: "CheckConfiguration",
                note: "eviction-hard-imagefs: eviction-hard-imagefs message. Fix: Lower \
                       imagekeeper's high threshold."
                    .to_owned(),
            },
            NodeEvent {
                type_: NodeEventType::Warning,
                reason: "KubeletConfigConflict",
                action: "CheckConfiguration",
                note: "runtime-endpoint: runtime-endpoint message. Fix: Use one endpoint."
                    .to_owned(),
            },
        ]
    );
    NodeEvents::off().doctor_conflicts(&[finding("x", Status::Conflict, Some("y"))]);
}

#[test]
fn a_warm_image_that_does_not_fit_is_a_warning_naming_it_and_its_handler() {
    let recorded = Recorded::default();
    let events = NodeEvents::new(Box::new(recorded.clone()));
    events.warm_does_not_fit("registry.example/model:1", "nvidia", "needs 21 GiB");
    events.warm_does_not_fit("registry.example/small:1", "", &"x".repeat(2000));
    let said = recorded.take();
    assert_eq!(
        said[0],
        NodeEvent {
            type_: NodeEventType::Warning,
            reason: "WarmImageDoesNotFit",
            action: "PullWarmImage",
            note: "Warm image registry.example/model:1 (runtime handler nvidia) is not pulled: \
                   needs 21 GiB"
                .to_owned(),
        }
    );
    assert!(
        said[1]
            .note
            .starts_with("Warm image registry.example/small:1 is not pulled: x")
    );
    assert!(
        said[1].note.len() <= MAX_NOTE_BYTES,
        "{}",
        said[1].note.len()
    );
    NodeEvents::off().warm_does_not_fit("a", "", "b");
}
