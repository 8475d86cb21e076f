//! The `signals` policy's feed: the workload's signal lines (`cronjob`, `bound`, `rollout`)
//! written into the GC manager's handles as the agent's watches would write them, so the
//! predictive order reads the same rule (`gc::signals`) the agent can feed from the cluster.
//! A bound pod's images go to its `BoundPods` (kept while needed), each until a run of it
//! starts; CronJobs and rollouts to its `ClusterSignals`. The handles outlive a restart (a new
//! manager reads the same ones).
//!
//! Invariant: only a `Sim` of the `signals` policy has a feed; the other policies skip the
//! signal lines before any step (`Sim::run`), so their outputs are those of the workload
//! without them.

use std::collections::BTreeMap;

use crate::gc::{BoundPods, ClusterSignals, CronJobSignal, ImageGcManager};
use crate::replay::ScriptedRuntime;
use crate::workload::WorkloadOp;

use super::Sim;

/// The handles the simulated manager reads, and each bound pod's images still needed.
pub(super) struct SignalFeed {
    pods: BoundPods,
    cluster: ClusterSignals,
    bound: BTreeMap<String, Vec<String>>,
}

impl SignalFeed {
    /// A feed whose CronJob calendar is `calendar_offset_s` seconds ahead of the simulated
    /// clock (the workload's `start_unix_s` against the simulation's epoch).
    pub(super) fn new(calendar_offset_s: i64) -> SignalFeed {
        let cluster = ClusterSignals::default();
        cluster.set_calendar_offset(calendar_offset_s);
        SignalFeed {
            pods: BoundPods::default(),
            cluster,
            bound: BTreeMap::new(),
        }
    }

    /// `manager` reading this feed's handles.
    pub(super) fn fed(
        &self,
        manager: ImageGcManager<ScriptedRuntime>,
    ) -> ImageGcManager<ScriptedRuntime> {
        manager
            .with_bound_pods(self.pods.clone())
            .with_cluster_signals(self.cluster.clone())
    }

    /// A run of `image` starts: no bound pod waits for it any more.
    pub(super) fn run_starts(&mut self, image: &str) {
        for (pod, images) in &mut self.bound {
            if images.iter().any(|i| i == image) {
                images.retain(|i| i != image);
                self.pods.set_pod(pod.clone(), images.clone());
            }
        }
        self.bound.retain(|_, images| !images.is_empty());
    }

    fn apply(&mut self, op: &WorkloadOp) {
        match op {
            WorkloadOp::CronJob {
                name,
                cron,
                suspend,
                images,
                ..
            } => self.cluster.set_cronjob(
                name.clone(),
                CronJobSignal {
                    schedule: *cron,
                    suspend: *suspend,
                    images: images.clone(),
                },
            ),
            WorkloadOp::Rollout {
                workload,
                images,
                previous,
            } => self
                .cluster
                .set_rollout(workload.clone(), images.clone(), previous.clone()),
            WorkloadOp::Bound { pod, images } => {
                if images.is_empty() {
                    self.bound.remove(pod);
                } else {
                    self.bound.insert(pod.clone(), images.clone());
                }
                self.pods.set_pod(pod.clone(), images.clone());
            }
            WorkloadOp::Run { .. } | WorkloadOp::Restart => {}
        }
    }
}

impl Sim<'_> {
    /// A signal line: what the cluster knows changes (the `signals` policy only).
    pub(super) fn signal(&mut self, op: &WorkloadOp) {
        if let Some(feed) = &mut self.signals {
            // A keep or an order may change: the next GC cycle runs.
            self.quiet = false;
            feed.apply(op);
        }
    }
}
