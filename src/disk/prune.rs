//! What `imagekeeper prune --orphans` did with its plan ([`PruneReport`]): each planned
//! removal with its result (planned in a dry run; removed, skipped or failed otherwise), the
//! bytes, and the rule that decides, before each removal, whether a fresh read still plans it
//! ([`still_planned`]). Pure: the I/O (the reads, the removals, the journal) is the caller's.
//!
//! Invariants: a dry run's report and a removal's have the same fields (one not measured is
//! null): every row is a planned [`OrphanRemoval`] plus its `result` and `error` (null unless
//! it failed or was skipped), so a script reads either the same way. A removal is made only when a fresh plan, with the same minimum
//! age and namespaces, still plans the same object (kind, namespace, name, snapshotter): an
//! object a container, image or lease took since the first read is skipped, never removed.

use serde::{Deserialize, Serialize};

use super::{OrphanKept, OrphanPlan, OrphanRemoval};

/// What became of one planned removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PruneResult {
    /// A dry run: it would be removed.
    Planned,
    /// Removed (and journaled).
    Removed,
    /// Not removed: a fresh read no longer plans it (`error` says why).
    Skipped,
    /// containerd refused or failed the removal, or its journal entry could not be written
    /// (`error` says which).
    Failed,
}

impl PruneResult {
    /// The result as JSON and the table print it.
    pub fn as_str(self) -> &'static str {
        match self {
            PruneResult::Planned => "planned",
            PruneResult::Removed => "removed",
            PruneResult::Skipped => "skipped",
            PruneResult::Failed => "failed",
        }
    }
}

/// One planned removal and its result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneRow {
    /// The plan's row.
    #[serde(flatten)]
    pub removal: OrphanRemoval,
    /// What became of it.
    pub result: PruneResult,
    /// Why it was skipped or failed.
    #[serde(default)]
    pub error: Option<String>,
}

/// `prune --orphans`'s answer: the plan, each row's result, and the totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneReport {
    /// Whether nothing was removed because it was a dry run.
    pub dry_run: bool,
    /// The planned removals, in the order they were (or would be) made.
    pub removals: Vec<PruneRow>,
    /// The planned bytes.
    pub bytes: u64,
    /// The bytes of the rows removed.
    pub freed_bytes: u64,
    /// How many rows failed.
    pub failed: u64,
    /// The leftovers the plan keeps, and why.
    #[serde(default)]
    pub kept: Vec<OrphanKept>,
    /// The image filesystem's used bytes before the removals and after containerd's garbage
    /// collection (statvfs); null in a dry run or when it could not be measured.
    #[serde(default)]
    pub used_bytes_before: Option<u64>,
    /// See `used_bytes_before`.
    #[serde(default)]
    pub used_bytes_after: Option<u64>,
    /// What could not be read or done beside the rows (containerd's garbage collection).
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl PruneReport {
    /// The report of a dry run of `plan`: every row planned.
    pub fn planned(plan: OrphanPlan) -> PruneReport {
        PruneReport {
            dry_run: true,
            removals: plan
                .removals
                .into_iter()
                .map(|removal| PruneRow {
                    removal,
                    result: PruneResult::Planned,
                    error: None,
                })
                .collect(),
            bytes: plan.bytes,
            kept: plan.kept,
            ..PruneReport::default()
        }
    }

    /// Records `row`'s result, counting its bytes or its failure.
    pub fn push(&mut self, removal: OrphanRemoval, result: PruneResult, error: Option<String>) {
        match result {
            PruneResult::Removed => {
                self.freed_bytes = self.freed_bytes.saturating_add(removal.bytes);
            }
            PruneResult::Failed => self.failed = self.failed.saturating_add(1),
            PruneResult::Planned | PruneResult::Skipped => {}
        }
        // A removal whose journal entry failed is removed, and still a failure.
        if result == PruneResult::Removed && error.is_some() {
            self.failed = self.failed.saturating_add(1);
        }
        self.removals.push(PruneRow {
            removal,
            result,
            error,
        });
    }
}

/// Whether `fresh` (a plan over a fresh read, same minimum age and namespaces) still plans
/// `removal`: `Ok` when it does, else why it stays.
pub fn still_planned(fresh: &OrphanPlan, removal: &OrphanRemoval) -> Result<(), String> {
    let same = |kind, namespace: &str, name: &str| {
        kind == removal.kind && namespace == removal.namespace && name == removal.name
    };
    if fresh
        .removals
        .iter()
        .any(|r| same(r.kind, &r.namespace, &r.name) && r.snapshotter == removal.snapshotter)
    {
        return Ok(());
    }
    if let Some(kept) = fresh
        .kept
        .iter()
        .find(|k| same(k.kind, &k.namespace, &k.name))
    {
        return Err(format!("a fresh read keeps it: {}", kept.reason));
    }
    Err(
        "a fresh read no longer finds it a leftover: a container, image or lease references it \
         now, or it is gone"
            .to_owned(),
    )
}
