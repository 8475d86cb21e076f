//! The plan of `imagekeeper prune --orphans`: which orphaned snapshots and unreferenced blobs
//! an accounting ([`DiskReport`]) found may go, in the order they can go, and why each other
//! leftover stays. Pure: the report and the operator's limits in, the plan out.
//!
//! Invariants: only `orphanSnapshot` and `unreferencedBlob` rows are ever planned: an object an
//! image, a container or a lease holds is counted in that owner's row and never appears here.
//! A leftover younger than the minimum age (or of unknown age) stays; so does one in a
//! namespace the operator did not name (the CRI's `k8s.io` is named by default; a blob is
//! planned only when every namespace listing it is named). Snapshots come children first
//! (a longer parent chain first: containerd refuses to remove a snapshot that has a child), and
//! a snapshot an orphan that stays has as an ancestor stays too.

use serde::{Deserialize, Serialize};

use super::{DiskReport, DiskRow, RowKind};

/// One leftover the plan removes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrphanRemoval {
    /// `orphanSnapshot` or `unreferencedBlob`.
    pub kind: RowKind,
    /// Its namespace (a blob's: every namespace listing it, comma-separated).
    pub namespace: String,
    /// The snapshot's key or the blob's digest.
    pub name: String,
    /// A snapshot's snapshotter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshotter: Option<String>,
    /// The bytes it frees.
    pub bytes: u64,
    /// Its age in seconds.
    pub age_seconds: u64,
    /// Why it may go.
    pub reason: String,
}

/// One leftover the plan keeps, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrphanKept {
    /// Its kind.
    pub kind: RowKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its bytes.
    pub bytes: u64,
    /// Why it stays.
    pub reason: String,
}

/// What `prune --orphans` would remove and what it leaves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrphanPlan {
    /// The removals, in the order they can be made.
    pub removals: Vec<OrphanRemoval>,
    /// Their bytes.
    pub bytes: u64,
    /// The leftovers kept.
    pub kept: Vec<OrphanKept>,
}

fn why(row: &DiskRow) -> String {
    let held = match row.gc_root {
        Some(true) => "kept from containerd's garbage collection by a containerd.io/gc.root label",
        _ => "not yet collected by containerd",
    };
    match row.kind {
        RowKind::OrphanSnapshot => {
            format!("no container, image or lease holds this snapshot; {held}")
        }
        _ => format!("no image, snapshot, container or lease references this blob; {held}"),
    }
}

/// Why `row` stays, or `None` when it may go.
fn keeps(row: &DiskRow, min_age_seconds: u64, namespaces: &[&str]) -> Option<String> {
    let outside: Vec<&str> = row
        .namespace
        .split(',')
        .filter(|ns| !namespaces.contains(ns))
        .collect();
    if !outside.is_empty() {
        return Some(format!(
            "in namespace {}, which was not named (--namespace)",
            outside.join(", ")
        ));
    }
    match row.age_seconds {
        None => Some("its age is unknown (containerd sent no creation time)".to_owned()),
        Some(age) if age < min_age_seconds => Some(format!(
            "younger than the minimum age ({age} s < {min_age_seconds} s)"
        )),
        Some(_) => None,
    }
}

/// The plan over `report`'s leftovers: those at least `min_age_seconds` old in `namespaces`.
pub fn orphan_plan(report: &DiskReport, min_age_seconds: u64, namespaces: &[&str]) -> OrphanPlan {
    let mut plan = OrphanPlan::default();
    let mut planned: Vec<(usize, OrphanRemoval)> = Vec::new();
    for row in &report.rows {
        if !matches!(
            row.kind,
            RowKind::OrphanSnapshot | RowKind::UnreferencedBlob
        ) {
            continue;
        }
        match keeps(row, min_age_seconds, namespaces) {
            Some(reason) => plan.kept.push(OrphanKept {
                kind: row.kind,
                namespace: row.namespace.clone(),
                name: row.name.clone(),
                bytes: row.bytes,
                reason,
            }),
            None => planned.push((
                row.parent_chain.as_ref().map_or(0, Vec::len),
                OrphanRemoval {
                    kind: row.kind,
                    namespace: row.namespace.clone(),
                    name: row.name.clone(),
                    snapshotter: row.snapshotter.clone(),
                    bytes: row.bytes,
                    age_seconds: row.age_seconds.unwrap_or_default(),
                    reason: why(row),
                },
            )),
        }
    }
    // A snapshot whose child stays, stays: containerd refuses to remove a snapshot that has a
    // child (each ancestor of a kept snapshot, in its namespace and snapshotter).
    let mut held: std::collections::HashMap<(&str, Option<&str>, &str), &str> =
        std::collections::HashMap::new();
    for row in &report.rows {
        let kept = plan
            .kept
            .iter()
            .any(|k| k.kind == row.kind && k.namespace == row.namespace && k.name == row.name);
        if row.kind != RowKind::OrphanSnapshot || !kept {
            continue;
        }
        for ancestor in row.parent_chain.iter().flatten() {
            held.insert(
                (
                    row.namespace.as_str(),
                    row.snapshotter.as_deref(),
                    ancestor.as_str(),
                ),
                row.name.as_str(),
            );
        }
    }
    planned.retain(|(_, r)| {
        let key = (
            r.namespace.as_str(),
            r.snapshotter.as_deref(),
            r.name.as_str(),
        );
        let Some(child) = held.get(&key).filter(|_| r.kind == RowKind::OrphanSnapshot) else {
            return true;
        };
        plan.kept.push(OrphanKept {
            kind: r.kind,
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            bytes: r.bytes,
            reason: format!(
                "its child {child} stays (containerd refuses to remove a snapshot that has a \
                 child)"
            ),
        });
        false
    });
    // Snapshots first, the deepest first: a child before its parent.
    planned.sort_by(|(da, a), (db, b)| {
        (a.kind, std::cmp::Reverse(*da), &a.namespace, &a.name).cmp(&(
            b.kind,
            std::cmp::Reverse(*db),
            &b.namespace,
            &b.name,
        ))
    });
    plan.removals = planned.into_iter().map(|(_, r)| r).collect();
    plan.bytes = plan
        .removals
        .iter()
        .fold(0u64, |a, r| a.saturating_add(r.bytes));
    plan
}
