//! The warm loop's cluster entries (issue 55): what the cluster signals add to the warm set
//! (a DaemonSet's template on this node, a CronJob run due within the lead, the bound pods'
//! prefetch, a KeepSet in mode warm) and what the prefetch leaves out, with why, for the log
//! and a dry run's `explain`.
//!
//! Invariants: a configured warm entry names an image first, then DaemonSets and CronJobs,
//! then the bound pods' prefetch (the lowest priority, none while the kubelet is pulling);
//! one image is one entry, so one pull.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use crate::model::UnixNanos;
use crate::pull::MatchIndex;
use crate::warm::WarmEntry;

use super::super::{Agent, AgentRuntime, lock_ignoring_poison};
use super::POD_ORIGIN_PREFIX;

impl<R: AgentRuntime> Agent<R> {
    /// The cluster's prefetch as warm entries: each image the template of a DaemonSet owning a
    /// pod bound to this node names (`clusterSignals`), that pod's next run here (origin
    /// `DaemonSet namespace/name`), and each image of a CronJob run due within the lead whose
    /// runs are this node's (its template names the node, or a pod of one of its Jobs is bound
    /// here; origin `CronJob namespace/name`), and each image of a KeepSet in mode warm in
    /// force (origin `KeepSet/name`, until the set's lifetime), unless the configured set (or,
    /// for a KeepSet's, a pod's need) names it already. No size hint, so an image of unknown
    /// size is pulled only below the low threshold, one a cycle (the warm plan's rule). The GC
    /// keeps these images through the bound pods, the CronJobs' lead and the KeepSets' warm
    /// set, not the configured set.
    pub(super) fn cluster_warm_entries(
        &self,
        configured: &[WarmEntry],
        now: UnixNanos,
    ) -> Vec<WarmEntry> {
        let pods = self.gc.bound_pods();
        let mut wanted: BTreeMap<String, String> = pods
            .daemonset_images()
            .into_iter()
            .map(|(image, ds)| (image, format!("DaemonSet {ds}")))
            .collect();
        // Only the CronJobs whose runs are this node's: the others' next runs are not computed.
        let due = self
            .gc
            .cluster_signals()
            .due_within_lead_of(now, |name, job| job.here || pods.ran_cronjob(name));
        for (image, run) in due {
            wanted
                .entry(image)
                .or_insert_with(|| format!("CronJob {}", run.cronjob));
        }
        self.bound_pods_prefetch(&pods, now, &mut wanted);
        let keep_sets = self.gc.node_keep_sets().warm_set();
        if wanted.is_empty() && keep_sets.is_empty() {
            return Vec::new();
        }
        // One lookup per image, not a scan of the configured set (up to MAX_WARM_ENTRIES).
        let configured: BTreeSet<&str> = configured.iter().map(|e| e.image.as_str()).collect();
        let mut entries: Vec<WarmEntry> = wanted
            .into_iter()
            .filter(|(image, _)| !configured.contains(image.as_str()))
            .map(|(image, origin)| WarmEntry {
                image,
                runtime_handler: String::new(),
                until: None,
                lifetime: None,
                size_hint: None,
                origin,
            })
            .collect();
        let named: BTreeSet<String> = entries.iter().map(|e| e.image.clone()).collect();
        entries.extend(
            keep_sets
                .entries()
                .iter()
                .filter(|e| {
                    e.active(now)
                        && !configured.contains(e.image.as_str())
                        && !named.contains(&e.image)
                })
                .cloned(),
        );
        entries
    }

    /// Issue 55's prefetch: the images the pods bound here name (but those of a pod naming an
    /// `imagePullSecret`: `BoundPods::prefetch_images`), pulled ahead as warm entries of
    /// origin `Pod namespace/name` within the warm plan's disk rule, so an image the kubelet
    /// will pull only when it starts its container (a main container after the init
    /// containers) is present by then. The lowest priority: DaemonSets' and CronJobs' entries
    /// name an image first, and while the kubelet is pulling (a fresh pull intent, KEP-2535)
    /// no pod's image is added, so a prefetch never competes with the kubelet's own pull
    /// (never two pulls of one image). The next warm cycle, or the next change of the bound
    /// pods, tries again.
    fn bound_pods_prefetch(
        &self,
        pods: &crate::gc::BoundPods,
        now: UnixNanos,
        wanted: &mut BTreeMap<String, String>,
    ) {
        self.log_not_pulled_ahead(pods);
        let images = pods.prefetch_images();
        if images.is_empty() {
            return;
        }
        let pulling = self.gc.kubelet_pulling(now);
        if !pulling.is_empty() {
            self.metrics.record_prefetch_yielded();
            return;
        }
        for (image, pod) in images {
            wanted
                .entry(image)
                .or_insert_with(|| format!("{POD_ORIGIN_PREFIX}{pod}"));
        }
    }

    /// Logs each bound pod's image the prefetch leaves out once (with why), until it is no
    /// longer left out.
    fn log_not_pulled_ahead(&self, pods: &crate::gc::BoundPods) {
        let left_out = pods.not_pulled_ahead();
        let mut logged = lock_ignoring_poison(&self.prefetch_logged);
        let now: BTreeSet<(String, String)> = left_out
            .iter()
            .map(|n| (n.image.clone(), n.pod.clone()))
            .collect();
        for n in &left_out {
            if !logged.contains(&(n.image.clone(), n.pod.clone())) {
                info!(
                    image = n.image.as_str(),
                    pod = n.pod.as_str(),
                    reason = n.reason.as_str(),
                    "A bound pod's image is not pulled ahead"
                );
            }
        }
        *logged = now;
    }

    /// A dry run's outcome with the warm entries that do not fit, as the last warm cycle
    /// judged them (issue 25: "does not fit" is shown by `explain`), and the bound pods'
    /// images the prefetch leaves out that the runtime does not hold, with why.
    pub(in crate::agent) async fn with_warm_does_not_fit(
        &self,
        mut outcome: crate::admin::GcOutcome,
    ) -> crate::admin::GcOutcome {
        if let Some(plan) = self.warm_status() {
            outcome.warm_does_not_fit = crate::admin::WarmDoesNotFit::of_plan(&plan);
        }
        let mut left_out = self.gc.bound_pods().not_pulled_ahead();
        if !left_out.is_empty() {
            match self.gc.runtime().list_images().await {
                Ok(images) => {
                    let listed = MatchIndex::of_images(&images);
                    left_out.retain(|n| listed.named_by(&n.image, "").is_empty());
                }
                Err(e) => {
                    warn!(error = %e, "Dry run: cannot list the runtime's images; the bound pods' images not pulled ahead are all shown");
                }
            }
            outcome.not_pulled_ahead = left_out;
        }
        outcome
    }
}
