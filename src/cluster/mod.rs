//! The cluster's knowledge of what runs next, read from the API server (feature `kube`,
//! `clusterSignals`): the pods bound to this node (`pods.rs`), whose images are needed now
//! whether or not their containers exist yet, and the templates of the DaemonSets owning them
//! (`daemonsets.rs`), which those pods run next (the GC keeps them, [`crate::gc::BoundPods`],
//! and the warm loop pulls a template's images ahead); the CronJobs (`cronjobs.rs`: each
//! image's next run) and the Deployments' revisions (`replicasets.rs`: current, rollback,
//! superseded), which the predictive order reads ([`crate::gc::ClusterSignals`]); the fleet's
//! KeepSets selecting this node (`keepsets.rs`, `keepSets`), which the agent pins, and this
//! node's report of them (`keepset_report.rs`, its one write: its own `KeepSetReport`), and the
//! fleet's count of each set from every node's report (`keepset_fleet.rs`), written into the
//! sets' status by one agent at a time (`fleet_writer.rs`, elected by a Lease, `lease.rs`).
//! The sets' pull Secrets are read in the agent's own namespace (`pull_secrets.rs`). Every
//! watch runs one loop (`drive.rs`), told by the API server's probe (`reach.rs`) when it is
//! away and when it is back; the pods', CronJobs', DaemonSets' and ReplicaSets' watches decode
//! only the fields they read (`slim.rs`).
//!
//! Invariants: only reads (list, watch, and get of a pull Secret in the agent's namespace) but
//! the node's own KeepSetReport and, while it holds the Lease, that Lease and the KeepSets'
//! status subresource; the pods' watch has a field selector on `spec.nodeName`, so the API
//! server sends this node's pods only; each pod is held as its image names, never as the
//! object; a relist replaces the set at once when it is complete, not before; with the API
//! server away the last set holds, and when it is back every watch lists anew.

mod client;
mod cronjobs;
mod daemonsets;
mod drive;
mod fleet_writer;
mod keepset_fleet;
mod keepset_report;
mod keepsets;
mod lease;
mod pods;
mod pull_secrets;
mod reach;
mod replicasets;
mod slim;
#[cfg(test)]
mod test_specs;

pub use client::{MAX_ANSWER_BYTES, capped_client};
pub use cronjobs::{CronJobWatch, cronjob_signal, watch_cronjobs};
pub use daemonsets::{DaemonSetWatch, daemonset_images, watch_daemonsets};
pub use fleet_writer::{
    COUNT_INTERVAL, FIELD_MANAGER, LEASE_DURATION_SECONDS, LEASE_NAME, MAX_WORKLOADS,
    publish_fleet_counts,
};
pub use keepset_fleet::{
    FleetCount, changed_statuses, fleet_counts, ready_sets_of_report, status_of,
};
pub use keepset_report::{publish_keep_set_reports, report_body};
pub use keepsets::{
    GROUP, KeepSetObject, KeepSetSpec, KeepSetStatus, KeepSetWatch, VERSION, WorkloadRef,
    keep_set_of, selects, watch_keep_sets,
};
pub use lease::{LeaseStep, LeaseView, RENEW_AFTER_FRACTION, lease_step};
pub use pods::{
    PodWatch, controller_daemonset, controller_job, pod_images, spec_images, watch_bound_pods,
};
pub use pull_secrets::{PodPullSecretReader, PullSecretReader};
pub use reach::{ApiReach, ProbeState, ProbeTiming, Reach, api_reach, probe_api_server};
pub use replicasets::{
    MAX_REPLICASETS, REVISION_ANNOTATION, ReplicaSetRevision, ReplicaSetWatch, replicaset_revision,
    revisions_of, watch_replicasets,
};
