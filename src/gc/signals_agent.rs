//! The agent's side of [`ClusterSignals`]: what its CronJob and ReplicaSet watches write (a
//! relist replaces a whole set at once), the keep of a CronJob's images from a lead before its
//! next run ([`ClusterSignals::due_within_lead`]: kept and runtime-pinned like a bound pod's,
//! pulled ahead when the CronJob's runs are this node's), the instant the next lead starts
//! (the agent's timer), and the sample the metrics and doctor read.
//!
//! Invariants: a lead of zero keeps nothing and pulls nothing ahead (the simulator's default:
//! its figures are the order's alone); the lead is at most [`MAX_CRONJOB_LEAD`]; every set
//! written here keeps the caps of `signals.rs` (refusals counted in the watch's health).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::{
    ClusterSignals, CronJobSignal, MAX_CRONJOBS, MAX_WORKLOADS, Revisions, bounded, next_run,
};
use crate::gc::{WatchHealth, WatchSample};
use crate::model::UnixNanos;

/// The longest lead a CronJob's images are kept and pulled ahead of its run.
pub const MAX_CRONJOB_LEAD: Duration = Duration::from_secs(24 * 3600);

/// A CronJob run due within the lead, as the keeps and the prefetch read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueRun {
    /// The CronJob, `namespace/name` (the first by name when several name the image).
    pub cronjob: String,
    /// Its next run.
    pub at: UnixNanos,
    /// Its runs are this node's ([`CronJobSignal::here`]).
    pub here: bool,
}

impl DueRun {
    /// How the keep names its source: `CronJob batch/nightly runs at 2026-11-30T02:00:00Z`.
    pub fn source(&self) -> String {
        format!(
            "CronJob {} runs at {}",
            self.cronjob,
            crate::format::format_rfc3339(self.at)
        )
    }
}

/// The CronJobs' and ReplicaSets' signals at one moment, for the metrics and doctor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterSignalsSample {
    /// CronJobs held.
    pub cronjobs: u64,
    /// Workloads (Deployments) with revisions held.
    pub workloads: u64,
    /// Distinct images of the CronJob runs due within the lead.
    pub due_images: u64,
    /// Distinct images of the workloads' rollback sets.
    pub rollback_images: u64,
    /// The CronJobs' watch; `None` until it started.
    pub cronjobs_watch: Option<WatchSample>,
    /// The ReplicaSets' watch; `None` until it started.
    pub replicasets_watch: Option<WatchSample>,
    /// CronJobs and workloads not held (a cap reached, or a schedule not read).
    pub refused: u64,
}

impl ClusterSignals {
    /// The CronJobs' watch's health, for its driver.
    pub fn cronjobs_watch_health(&self) -> Arc<WatchHealth> {
        Arc::clone(&self.cronjobs_health)
    }

    /// The ReplicaSets' watch's health, for its driver.
    pub fn replicasets_watch_health(&self) -> Arc<WatchHealth> {
        Arc::clone(&self.replicasets_health)
    }

    /// Counts a CronJob the watch could not read (its schedule or time zone).
    pub fn refuse_cronjob(&self) {
        self.write().refused += 1;
        self.cronjobs_health.refuse();
    }

    /// Replaces every CronJob at once (a relist): the first [`MAX_CRONJOBS`] by name.
    pub fn replace_cronjobs(&self, jobs: BTreeMap<String, CronJobSignal>) {
        let mut kept = BTreeMap::new();
        for (name, mut job) in jobs {
            if kept.len() >= MAX_CRONJOBS {
                self.write().refused += 1;
                self.cronjobs_health.refuse();
                continue;
            }
            job.images = bounded(job.images);
            kept.insert(name, job);
        }
        let changed = {
            let mut state = self.write();
            let changed = state.cronjobs != kept;
            state.cronjobs = kept;
            changed
        };
        self.cronjobs_health.mark_synced();
        self.told(changed);
    }

    /// Sets `workload`'s revisions (none with an image: forgets it).
    pub fn set_revisions(&self, workload: String, revisions: Revisions) {
        let revisions = Revisions {
            current: bounded(revisions.current),
            previous: bounded(revisions.previous),
            superseded: revisions.superseded,
        };
        let mut state = self.write();
        if revisions == Revisions::default() {
            state.workloads.remove(&workload);
        } else if state.workloads.len() >= MAX_WORKLOADS && !state.workloads.contains_key(&workload)
        {
            state.refused += 1;
            self.replicasets_health.refuse();
        } else {
            state.workloads.insert(workload, revisions);
        }
    }

    /// Replaces every workload's revisions at once (a relist).
    pub fn replace_workloads(&self, workloads: BTreeMap<String, Revisions>) {
        self.write().workloads.clear();
        for (name, revisions) in workloads {
            self.set_revisions(name, revisions);
        }
        self.replicasets_health.mark_synced();
    }

    /// The CronJobs held, by `namespace/name`; `None` until the CronJobs' watch listed them
    /// once (until then the set is not the cluster's: what the agent records reads it).
    pub fn listed_cronjobs(&self) -> Option<BTreeMap<String, CronJobSignal>> {
        self.cronjobs_health
            .is_synced()
            .then(|| self.read().cronjobs.clone())
    }

    /// The workloads' revisions held, by `namespace/name`; `None` until the ReplicaSets'
    /// watch listed them once.
    pub fn listed_workloads(&self) -> Option<BTreeMap<String, Revisions>> {
        self.replicasets_health
            .is_synced()
            .then(|| self.read().workloads.clone())
    }

    /// Keeps a CronJob's images from `lead` before its next run (at most
    /// [`MAX_CRONJOB_LEAD`]; zero: not at all).
    pub fn set_lead(&self, lead: Duration) {
        self.write().lead = lead.min(MAX_CRONJOB_LEAD);
        self.told(true);
    }

    /// The lead in force.
    pub fn lead(&self) -> Duration {
        self.read().lead
    }

    /// Each image of a CronJob run due within the lead at `now` (its next run at or after
    /// `now`, no later than `now` plus the lead), with the earliest such run (the first
    /// CronJob by name among equals); a run that is this node's wins over one that is not.
    pub fn due_within_lead(&self, now: UnixNanos) -> BTreeMap<String, DueRun> {
        self.due_within_lead_of(now, |_, _| true)
    }

    /// [`ClusterSignals::due_within_lead`] of the CronJobs `wanted` accepts only: the next
    /// run of no other one is computed (the warm loop's minute cycle reads the few whose runs
    /// are this node's, not a cluster's thousand).
    pub fn due_within_lead_of(
        &self,
        now: UnixNanos,
        wanted: impl Fn(&str, &CronJobSignal) -> bool,
    ) -> BTreeMap<String, DueRun> {
        let state = self.read();
        let mut due: BTreeMap<String, DueRun> = BTreeMap::new();
        if state.lead.is_zero() {
            return due;
        }
        let horizon = now.saturating_add(state.lead);
        for (name, job) in state
            .cronjobs
            .iter()
            .filter(|(name, job)| wanted(name, job))
        {
            let Some(at) = next_run(job, state.calendar_offset_s, now).filter(|at| *at <= horizon)
            else {
                continue;
            };
            for image in &job.images {
                let run = DueRun {
                    cronjob: name.clone(),
                    at,
                    here: job.here,
                };
                let better = |old: &DueRun| (!run.here, run.at) < (!old.here, old.at);
                match due.get(image) {
                    Some(old) if !better(old) => {}
                    _ => {
                        due.insert(image.clone(), run);
                    }
                }
            }
        }
        due
    }

    /// The first instant after `now` at which the run of a CronJob `wanted` accepts enters
    /// the lead (its next run minus the lead), or such a run due within it passes (its keep
    /// ends); `None` with no lead or no such run to come. The agent's timers pass only the
    /// CronJobs whose keep or pull ahead can change something on this node (a node beside
    /// 1,000 CronJobs of other nodes would otherwise detect at each of their runs).
    pub fn next_lead_change(
        &self,
        now: UnixNanos,
        wanted: impl Fn(&str, &CronJobSignal) -> bool,
    ) -> Option<UnixNanos> {
        let state = self.read();
        if state.lead.is_zero() {
            return None;
        }
        state
            .cronjobs
            .iter()
            .filter(|(name, job)| wanted(name, job))
            .filter_map(|(_, job)| next_run(job, state.calendar_offset_s, now))
            .map(|at| {
                let enters = at.saturating_sub(state.lead);
                // Within the lead already: the change to come is the run passing.
                if enters <= now {
                    UnixNanos(at.0.saturating_add(1))
                } else {
                    enters
                }
            })
            .min()
    }

    /// Records the CronJobs (`namespace/name`) an image of which the last detect listed;
    /// tells [`ClusterSignals::present_changed`] when the set changed.
    pub fn set_present_cronjobs(&self, present: BTreeSet<String>) {
        let changed = {
            let mut state = self.write();
            let changed = state.present_cronjobs != present;
            state.present_cronjobs = present;
            changed
        };
        if changed {
            self.present_changed.notify_one();
        }
    }

    /// Whether an image of CronJob `name` was listed by the last detect.
    pub fn cronjob_present(&self, name: &str) -> bool {
        self.read().present_cronjobs.contains(name)
    }

    /// Records which CronJobs name an image of `listed` (the detect's list): one index of
    /// their images, one lookup per listed image. With no lead nothing is read.
    pub(crate) fn note_listed(&self, listed: &crate::gc::detect::ListedImages) {
        let present = {
            let state = self.read();
            if state.lead.is_zero() || state.cronjobs.is_empty() {
                BTreeSet::new()
            } else {
                let named: Vec<(&str, &str)> = state
                    .cronjobs
                    .iter()
                    .flat_map(|(name, job)| job.images.iter().map(|i| (name.as_str(), i.as_str())))
                    .collect();
                let index =
                    crate::reference::MatchIndex::of_names(named.iter().map(|(_, i)| (*i, "")));
                listed
                    .iter()
                    .flat_map(|image| index.naming(&image))
                    .filter_map(|at| named.get(at).map(|(name, _)| (*name).to_owned()))
                    .collect()
            }
        };
        self.set_present_cronjobs(present);
    }

    /// Resolves when the set of CronJobs with a listed image changed since the last call
    /// resolved (the detect's timer reads their runs again).
    pub async fn present_changed(&self) {
        self.present_changed.notified().await;
    }

    /// Resolves at the CronJobs' (or the lead's) next change (at once when they changed since
    /// the last call resolved).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// [`ClusterSignals::changed`] for the warm loop.
    pub async fn changed_for_warm(&self) {
        self.changed_for_warm.notified().await;
    }

    pub(super) fn told(&self, changed: bool) {
        if changed {
            self.changed.notify_one();
            self.changed_for_warm.notify_one();
        }
    }

    /// `pods` with the CronJobs' and ReplicaSets' watches' health (the admin call's answer).
    pub fn with_watches(
        &self,
        pods: Option<crate::gc::BoundPodsSample>,
    ) -> Option<crate::gc::BoundPodsSample> {
        pods.map(|sample| crate::gc::BoundPodsSample {
            cronjobs: self
                .cronjobs_health
                .sample(self.cronjobs_health.is_synced()),
            replicasets: self
                .replicasets_health
                .sample(self.replicasets_health.is_synced()),
            over_share: self.keeps_over_share().map(|o| o.sample()),
            ..sample
        })
    }

    /// The state at `now`; `None` until a watch of the CronJobs or ReplicaSets started.
    pub fn sample(&self, now: UnixNanos) -> Option<ClusterSignalsSample> {
        let cronjobs_watch = self
            .cronjobs_health
            .sample(self.cronjobs_health.is_synced());
        let replicasets_watch = self
            .replicasets_health
            .sample(self.replicasets_health.is_synced());
        if cronjobs_watch.is_none() && replicasets_watch.is_none() {
            return None;
        }
        let due_images = self.due_within_lead(now).len() as u64;
        let state = self.read();
        let rollback: std::collections::BTreeSet<&String> =
            state.workloads.values().flat_map(|r| &r.previous).collect();
        Some(ClusterSignalsSample {
            cronjobs: state.cronjobs.len() as u64,
            workloads: state.workloads.len() as u64,
            due_images,
            rollback_images: rollback.len() as u64,
            cronjobs_watch,
            replicasets_watch,
            refused: state.refused,
        })
    }
}
