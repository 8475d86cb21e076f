//! `prune --orphans`, run: containerd read (`cri::ContainerdView`), accounted and planned
//! (`disk::account`, `disk::orphan_plan`), then each planned removal re-checked against a
//! fresh read and made through containerd's own API (`cri::ContainerdPruner`), journaled in the
//! store, and containerd's garbage collection run to its end. The agent's admin call and the
//! command without an agent (the database opened directly) both run [`prune_orphans`].
//!
//! Invariants: nothing is removed that a fresh read, made right before its removal with the
//! same minimum age and namespaces, does not plan (`disk::still_planned`): a container, image
//! or lease that appeared since keeps it; a namespace not named is never touched. Snapshots
//! go children first (the plan's order). A removal containerd refuses is a failed row and the
//! rest goes on. Each removal is journaled (one durable transaction each) right after
//! containerd answered; a journal write that fails is that row's error. A dry run reads only.
//! The accounting and planning run off the async workers. A fresh read per removal is the
//! cost of the re-check: a whole read of containerd (without Usage calls) each time.

use std::path::Path;
use std::time::Duration;

use crate::clock::Clock;
use crate::cri::{CONTAINERD_CRI_NAMESPACE, ContainerdPruner, ContainerdView, filesystem_usage};
use crate::disk::{
    OrphanPlan, OrphanRemoval, PruneReport, PruneResult, RowKind, account, orphan_plan,
    still_planned,
};
use crate::model::{ContainerdState, UnixNanos, leftover_key};
use crate::store::{Batch, Store};

/// What to prune.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneOrphans {
    /// Only leftovers at least this old.
    pub min_age: Duration,
    /// The namespaces whose leftovers may go besides the CRI's `k8s.io`.
    pub namespaces: Vec<String>,
    /// Plan only.
    pub dry_run: bool,
}

impl PruneOrphans {
    /// The plan over `state`: accounted and planned off the async workers (the work grows
    /// with the snapshots and blobs, and a prune makes it once per removal).
    async fn plan(
        &self,
        state: ContainerdState,
        image_fs: &Path,
        now: UnixNanos,
    ) -> Result<OrphanPlan, String> {
        let image_fs = image_fs.to_path_buf();
        let min_age = self.min_age.as_secs();
        let mut named = vec![CONTAINERD_CRI_NAMESPACE.to_owned()];
        named.extend(self.namespaces.iter().cloned());
        tokio::task::spawn_blocking(move || {
            let fs = filesystem_usage(&image_fs).map_err(|e| e.to_string())?;
            let report = account(&state, &fs, CONTAINERD_CRI_NAMESPACE, now);
            let named: Vec<&str> = named.iter().map(String::as_str).collect();
            Ok(orphan_plan(&report, min_age, &named))
        })
        .await
        .map_err(|e| format!("the plan's thread: {e}"))?
    }
}

/// Runs `request` against containerd at `address` (each call within `call_timeout`), the
/// image filesystem mounted at `image_fs`; journals each removal in `store` (`None` only for a
/// dry run). Returns the report, and the read's warnings first.
pub async fn prune_orphans(
    address: &str,
    image_fs: &Path,
    call_timeout: Duration,
    clock: &dyn Clock,
    store: Option<&Store>,
    request: &PruneOrphans,
) -> Result<(PruneReport, Vec<String>), String> {
    let view = ContainerdView::connect(address, Duration::from_secs(5), call_timeout)
        .map_err(|e| e.to_string())?;
    let state = view
        .read()
        .await
        .map_err(|e| format!("containerd at {address}: {e}"))?;
    let warnings = state.warnings.clone();
    let plan = request.plan(state, image_fs, clock.now()).await?;
    if request.dry_run {
        return Ok((PruneReport::planned(plan), warnings));
    }
    let Some(store) = store else {
        return Err("prune --orphans needs the database to journal its removals".to_owned());
    };
    let pruner = ContainerdPruner::connect(address, Duration::from_secs(5), call_timeout)
        .map_err(|e| e.to_string())?;
    let refs = view.without_usage();
    let mut report = PruneReport {
        dry_run: false,
        bytes: plan.bytes,
        kept: plan.kept,
        used_bytes_before: filesystem_usage(image_fs).ok().map(|f| f.used_bytes),
        ..PruneReport::default()
    };
    for removal in plan.removals {
        // A fresh read right before the removal: a container, image or lease may hold it now.
        let fresh = match refs.read().await {
            Ok(fresh) => request.plan(fresh, image_fs, clock.now()).await,
            Err(e) => Err(format!("containerd at {address}: {e}")),
        };
        let checked = match fresh {
            Ok(fresh) => still_planned(&fresh, &removal),
            Err(e) => Err(format!("the re-check before the removal failed: {e}")),
        };
        if let Err(why) = checked {
            report.push(removal, PruneResult::Skipped, Some(why));
            continue;
        }
        match remove(&pruner, &removal).await {
            Err(e) => report.push(removal, PruneResult::Failed, Some(e)),
            Ok(()) => {
                let journaled = journal(store, &removal, clock.now());
                report.push(removal, PruneResult::Removed, journaled.err());
            }
        }
    }
    if report
        .removals
        .iter()
        .any(|r| r.result == PruneResult::Removed)
    {
        // containerd frees a removed snapshot's directory and a deleted blob's file in its
        // garbage collection: run it now, so the bytes are free when the command answers.
        let tag = format!("{}", clock.now().0);
        if let Err(e) = pruner
            .collect_garbage(CONTAINERD_CRI_NAMESPACE, &tag, clock.now())
            .await
        {
            report.warnings.push(format!(
                "containerd's garbage collection could not be run now ({e}): it frees the \
                 removed leftovers' bytes at its next collection"
            ));
        }
    }
    report.used_bytes_after = filesystem_usage(image_fs).ok().map(|f| f.used_bytes);
    Ok((report, warnings))
}

/// One removal: Snapshots.Remove, or Content.Delete in every namespace listing the blob.
async fn remove(pruner: &ContainerdPruner, removal: &OrphanRemoval) -> Result<(), String> {
    match (removal.kind, &removal.snapshotter) {
        (RowKind::OrphanSnapshot, Some(snapshotter)) => pruner
            .remove_snapshot(&removal.namespace, snapshotter, &removal.name)
            .await
            .map_err(|e| e.to_string()),
        (RowKind::UnreferencedBlob, _) => {
            for ns in removal.namespace.split(',') {
                pruner
                    .delete_blob(ns, &removal.name)
                    .await
                    .map_err(|e| format!("namespace {ns}: {e}"))?;
            }
            Ok(())
        }
        (kind, _) => Err(format!(
            "a {} row without a snapshotter is not removed",
            kind.as_str()
        )),
    }
}

/// The removal's journal entry: under its leftover key, with its bytes and creation time.
fn journal(store: &Store, removal: &OrphanRemoval, now: UnixNanos) -> Result<(), String> {
    let key = leftover_key(
        match removal.kind {
            RowKind::OrphanSnapshot => "snapshot",
            _ => "blob",
        },
        &removal.namespace,
        removal.snapshotter.as_deref(),
        &removal.name,
    );
    let age = i64::try_from(removal.age_seconds).unwrap_or(i64::MAX);
    let created = UnixNanos::from_secs(now.as_secs().saturating_sub(age));
    let mut batch = Batch::new();
    batch.journal_leftover(key, now, removal.bytes, created);
    store
        .apply(&batch)
        .map(|_| ())
        .map_err(|e| format!("removed, but its journal entry could not be written: {e}"))
}
