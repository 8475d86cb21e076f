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
                zone,
                suspend,
                images,
                ..
            } => self.cluster.set_cronjob(
                name.clone(),
                CronJobSignal {
                    schedule: *cron,
                    zone: zone.clone(),
                    suspend: *suspend,
                    images: images.clone(),
                    here: false,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound pod's images are needed until a run of each starts: the bound pods' set loses
    /// each image at its run, and the pod once none is left; `[]` unbinds at once.
    #[test]
    fn a_bound_pods_images_are_needed_until_each_ones_run_starts() {
        let mut feed = SignalFeed::new(0);
        let bound = |pod: &str, images: &[&str]| WorkloadOp::Bound {
            pod: pod.to_owned(),
            images: images.iter().map(|i| (*i).to_owned()).collect(),
        };
        feed.apply(&bound("ml/a", &["init:1", "serve:2"]));
        feed.apply(&bound("ml/b", &["serve:2"]));
        let held = |feed: &SignalFeed| feed.pods.images().keys().cloned().collect::<Vec<_>>();
        assert_eq!(held(&feed), ["init:1", "serve:2"]);
        feed.run_starts("init:1");
        assert_eq!(held(&feed), ["serve:2"]);
        feed.run_starts("other:1");
        assert_eq!(held(&feed), ["serve:2"]);
        feed.run_starts("serve:2");
        assert!(held(&feed).is_empty(), "{:?}", held(&feed));
        assert!(feed.bound.is_empty());
        feed.apply(&bound("ml/c", &["x:1"]));
        feed.apply(&bound("ml/c", &[]));
        assert!(held(&feed).is_empty());
    }
}
