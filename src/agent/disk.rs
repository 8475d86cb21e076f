//! The disk accounting loop (`diskAccountingPeriod`, issue 57): every period, containerd as it
//! is (every namespace, read-only: `cri::ContainerdView`) and the image filesystem (statvfs of
//! the mountpoint CRI ImageFsInfo names) are accounted by owner (`crate::disk::account`, the
//! split `inspect disk` prints), and the totals are published as the `imagekeeper_disk_*`
//! metrics. With `diskPruneOrphans` set, an accounting that finds the CRI namespace's orphaned
//! snapshots or unreferenced blobs at least that old is followed by `prune --orphans` of that
//! namespace (`agent::prune_orphans`: each removal re-checked against a fresh read, journaled),
//! counted in `imagekeeper_disk_orphans_pruned_*`.
//!
//! Invariants: the loop runs on its own task, never holding up detect or GC; it only reads;
//! the accounting (work that grows with the snapshots and blobs) runs off the async workers;
//! the prune touches the CRI namespace (`k8s.io`) only, never another, and runs only when the
//! accounting just planned something (no removal without a leftover seen twice: by the
//! accounting, then by the prune's own re-check);
//! a failure (a runtime that is not containerd, a socket that does not answer) keeps the last
//! figures, is counted, and is logged once until an accounting succeeds again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use crate::cri::{CONTAINERD_CRI_NAMESPACE, ContainerdView, filesystem_usage};
use crate::disk::{DiskReport, PruneResult, account, orphan_plan};
use crate::telemetry::DiskSample;

use super::{Agent, AgentRuntime, PruneOrphans, prune_orphans};

/// How long one containerd call of the accounting may take.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl<R: AgentRuntime> Agent<R> {
    /// The disk accounting loop: an accounting at start, then every `diskAccountingPeriod`,
    /// until `stop`; returns at once when the period is off.
    pub(super) async fn disk_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let Some(period) = self.config().disk_accounting_period else {
            return;
        };
        let mut failing = false;
        loop {
            if *stop.borrow() {
                return;
            }
            match self.account_disk().await {
                Ok(report) => {
                    if failing {
                        info!("Disk accounting works again");
                        failing = false;
                    }
                    self.metrics.record_disk(Some(sample_of(&report)));
                    if let Some(min_age) = self.config().disk_prune_orphans {
                        self.prune_orphans_seen(&report, min_age).await;
                    }
                }
                Err(e) => {
                    if !failing {
                        warn!(error = %e, "Disk accounting failed: the imagekeeper_disk_* metrics keep the last figures; retrying every period");
                        failing = true;
                    }
                    self.metrics.record_disk(None);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// One accounting now: containerd's state, the image filesystem's usage, the split.
    pub async fn account_disk(&self) -> Result<DiskReport, String> {
        let address = self.config().containerd_address;
        let view = ContainerdView::connect(&address, Duration::from_secs(5), CALL_TIMEOUT)
            .map_err(|e| e.to_string())?;
        let state = view
            .read()
            .await
            .map_err(|e| format!("containerd at {address}: {e}"))?;
        let image_fs = self
            .gc
            .runtime()
            .image_fs_stats()
            .await
            .map_err(|e| format!("ImageFsInfo: {e}"))?;
        let now = self.clock.now();
        tokio::task::spawn_blocking(move || {
            let fs = filesystem_usage(Path::new(&image_fs.mountpoint))
                .map_err(|e| format!("{}: {e}", image_fs.mountpoint))?;
            Ok(account(&state, &fs, CONTAINERD_CRI_NAMESPACE, now))
        })
        .await
        .map_err(|e| format!("the accounting's thread: {e}"))?
    }
}

impl<R: AgentRuntime> Agent<R> {
    /// `diskPruneOrphans`: when `report` plans a removal in the CRI namespace at `min_age`,
    /// `prune --orphans --min-age` of that namespace, logged and counted; a failure to run it
    /// at all is logged and retried at the next accounting.
    async fn prune_orphans_seen(&self, report: &DiskReport, min_age: Duration) {
        let planned = orphan_plan(report, min_age.as_secs(), &[CONTAINERD_CRI_NAMESPACE]);
        if planned.removals.is_empty() {
            return;
        }
        let request = PruneOrphans {
            min_age,
            namespaces: Vec::new(),
            dry_run: false,
        };
        let address = self.config().containerd_address;
        let pruned = prune_orphans(
            &address,
            Path::new(&report.filesystem.path),
            CALL_TIMEOUT,
            &*self.clock,
            Some(self.gc.store().as_ref()),
            &request,
        )
        .await;
        match pruned {
            Ok((pruned, _)) => {
                let count = |result: PruneResult| {
                    pruned
                        .removals
                        .iter()
                        .filter(|r| r.result == result)
                        .count() as u64
                };
                let counts = [
                    count(PruneResult::Removed),
                    count(PruneResult::Failed),
                    count(PruneResult::Skipped),
                ];
                self.metrics
                    .record_orphans_pruned(counts, pruned.freed_bytes);
                info!(
                    removed = counts[0],
                    failed = counts[1],
                    skipped = counts[2],
                    freed = pruned.freed_bytes,
                    min_age = %crate::format::go_duration(min_age),
                    "Pruned containerd's orphaned snapshots and unreferenced blobs (diskPruneOrphans)"
                );
                for row in pruned
                    .removals
                    .iter()
                    .filter(|r| r.result == PruneResult::Failed)
                {
                    warn!(
                        kind = row.removal.kind.as_str(),
                        name = row.removal.name.as_str(),
                        error = row.error.as_deref().unwrap_or_default(),
                        "An orphan's removal failed; retried at the next accounting"
                    );
                }
            }
            Err(e) => {
                warn!(error = %e, "diskPruneOrphans: the prune could not run; retried at the next accounting");
            }
        }
    }
}

/// The metrics' view of a report.
fn sample_of(report: &DiskReport) -> DiskSample {
    DiskSample {
        owners: report
            .totals
            .iter()
            .map(|t| (t.kind.as_str(), t.bytes, t.inodes))
            .collect(),
        unexplained_bytes: u64::try_from(report.unexplained_bytes).unwrap_or(0),
        used_bytes: report.filesystem.used_bytes,
    }
}
