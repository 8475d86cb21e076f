//! `prune --orphans`'s rules without a runtime: the re-check before each removal
//! (`disk::still_planned`) and the report's results and totals (`disk::PruneReport`), the same
//! fields in a dry run and a removal.

use imagekeeper::disk::{
    OrphanKept, OrphanPlan, OrphanRemoval, PruneReport, PruneResult, RowKind, still_planned,
};

fn snapshot(name: &str, bytes: u64) -> OrphanRemoval {
    OrphanRemoval {
        kind: RowKind::OrphanSnapshot,
        namespace: "k8s.io".into(),
        name: name.into(),
        snapshotter: Some("overlayfs".into()),
        bytes,
        age_seconds: 7200,
        reason: "no container, image or lease holds this snapshot".into(),
    }
}

fn blob(digest: &str, bytes: u64) -> OrphanRemoval {
    OrphanRemoval {
        kind: RowKind::UnreferencedBlob,
        namespace: "k8s.io".into(),
        name: digest.into(),
        snapshotter: None,
        bytes,
        age_seconds: 7200,
        reason: "no image, snapshot, container or lease references this blob".into(),
    }
}

#[test]
fn a_removal_goes_ahead_only_when_a_fresh_plan_still_plans_the_same_object() {
    let orphan = snapshot("rootfs-left-behind", 5 << 20);
    let fresh = OrphanPlan {
        removals: vec![orphan.clone(), blob("sha256:aa", 10)],
        bytes: (5 << 20) + 10,
        kept: Vec::new(),
    };
    assert_eq!(still_planned(&fresh, &orphan), Ok(()));

    // A container took it since the first read: the fresh plan has no row of it.
    let taken = OrphanPlan::default();
    let why = still_planned(&taken, &orphan).expect_err("not planned any more");
    assert!(why.contains("no longer finds it a leftover"), "{why}");

    // The same key in another snapshotter or namespace is another object.
    let mut elsewhere = orphan.clone();
    elsewhere.snapshotter = Some("native".into());
    let fresh_native = OrphanPlan {
        removals: vec![elsewhere.clone()],
        ..OrphanPlan::default()
    };
    assert!(still_planned(&fresh_native, &orphan).is_err());
    let mut other_ns = orphan.clone();
    other_ns.namespace = "buildkit".into();
    let fresh_other = OrphanPlan {
        removals: vec![other_ns],
        ..OrphanPlan::default()
    };
    assert!(still_planned(&fresh_other, &orphan).is_err());

    // The fresh plan keeps it (a blob now listed in a namespace not named): why is said.
    let kept = OrphanPlan {
        kept: vec![OrphanKept {
            kind: RowKind::OrphanSnapshot,
            namespace: "k8s.io".into(),
            name: "rootfs-left-behind".into(),
            bytes: 5 << 20,
            reason: "younger than the minimum age (10 s < 3600 s)".into(),
        }],
        ..OrphanPlan::default()
    };
    let why = still_planned(&kept, &orphan).expect_err("kept");
    assert!(why.contains("younger than the minimum age"), "{why}");
}

#[test]
fn a_report_counts_freed_bytes_of_removed_rows_and_failures_and_a_dry_run_has_the_same_fields() {
    let plan = OrphanPlan {
        removals: vec![
            snapshot("a", 100),
            snapshot("b", 200),
            blob("sha256:cc", 300),
            blob("sha256:dd", 400),
        ],
        bytes: 1000,
        kept: Vec::new(),
    };
    let dry = PruneReport::planned(plan.clone());
    assert!(dry.dry_run);
    assert_eq!((dry.bytes, dry.freed_bytes, dry.failed), (1000, 0, 0));
    assert!(
        dry.removals
            .iter()
            .all(|r| r.result == PruneResult::Planned)
    );

    let mut done = PruneReport {
        bytes: plan.bytes,
        ..PruneReport::default()
    };
    let mut rows = plan.removals.into_iter();
    let mut next = || rows.next().expect("a row");
    done.push(next(), PruneResult::Removed, None);
    done.push(
        next(),
        PruneResult::Failed,
        Some("cannot remove snapshot with child".into()),
    );
    done.push(
        next(),
        PruneResult::Skipped,
        Some("a fresh read keeps it".into()),
    );
    // Removed, but its journal entry could not be written: freed, and a failure.
    done.push(
        next(),
        PruneResult::Removed,
        Some("removed, but its journal entry could not be written: disk full".into()),
    );
    assert_eq!((done.freed_bytes, done.failed), (100 + 400, 2));

    let dry_json = serde_json::to_value(&dry).expect("json");
    let done_json = serde_json::to_value(&done).expect("json");
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&dry_json), keys(&done_json));
    assert_eq!(
        keys(&dry_json["removals"][0]),
        keys(&done_json["removals"][0]),
        "a planned row and a removed row have the same fields"
    );
    assert_eq!(dry_json["removals"][0]["result"], "planned");
    assert_eq!(done_json["removals"][1]["result"], "failed");
    assert_eq!(
        done_json["removals"][1]["error"],
        "cannot remove snapshot with child"
    );
    // The agent's answer is this JSON: it reads back the same.
    let back: PruneReport = serde_json::from_value(done_json).expect("read back");
    assert_eq!(back, done);
}
