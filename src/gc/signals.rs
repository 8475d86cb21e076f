//! What the cluster knows of an image's next use (issue 55 items 2 and 4), as plain data the
//! predictive order reads: [`KnownUses`], each image name's [`KnownUse`], and the rule that
//! places an image with one in the order ([`place`]). The cluster's declarations it comes from
//! are held in [`ClusterSignals`] (CronJobs and rollouts; the pods bound to the node are
//! [`super::BoundPods`], which keeps their images outright): `simulate` fills it from a
//! workload's signal lines, the agent's watches may fill the same later. Nothing here reads a
//! clock: [`ClusterSignals::known_uses`] takes `now`.
//!
//! The rule (the predictive order with the known next use replacing the estimate where there
//! is one):
//! - *needed now* (a pod bound to the node names it): never removed while needed (the
//!   [`super::BoundPods`] keep); in the order, last of all;
//! - *at T* (a CronJob's next run; the earliest, when several name the image): the next use is
//!   T, compared with the other images' estimates in the same buckets;
//! - *rollback* (a previous revision of a workload that rolled out): its next use is taken to
//!   be a week away (the one-off prior, about what the histories keep): removed after every
//!   image expected no sooner (not expected again, an image the predictive order gives the
//!   one-off prior, one idle a week or more), before every image expected sooner, and before
//!   an image whose known use is as far. (The wording, after *every* image with no
//!   known next use, removes the hot current revisions first: on a first version of the
//!   rollout-undo family it re-pulled about 8 times what `predictive` did.)
//! - *current* (a workload's current revision): its estimate, but never removed before its
//!   rollback set (a revision just rolled out has one use and looks like a one-off; after an
//!   undo the predictive order finds it superseded by the newer tag);
//! - *superseded* (an older revision than the rollback set): first, with the images the
//!   predictive order finds superseded.
//!
//! When signals disagree on an image, the nearest use wins: now, then the earliest time, then
//! current, rollback, superseded (so an image one workload runs now is never superseded by
//! another's history).
//!
//! Invariants: with no known use the order is exactly the predictive one (the places are a
//! monotone map of its buckets); a handle is shared (clones see one set); memory is bounded: at
//! most [`MAX_CRONJOBS`] CronJobs and [`MAX_WORKLOADS`] workloads (more are refused, counted),
//! [`MAX_SIGNAL_IMAGES`] images each, [`MAX_SUPERSEDED`] superseded images a workload.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use crate::model::UnixNanos;

use super::cron::CronSchedule;

/// The most CronJobs a [`ClusterSignals`] holds.
pub const MAX_CRONJOBS: usize = 4_096;
/// The most workloads (with rollouts) a [`ClusterSignals`] holds.
pub const MAX_WORKLOADS: usize = 4_096;
/// The most images held for one CronJob or one revision.
pub const MAX_SIGNAL_IMAGES: usize = 128;
/// The most superseded images remembered a workload (the newest).
pub const MAX_SUPERSEDED: usize = 32;

const SEC: i64 = 1_000_000_000;

/// What the cluster knows of one image's next use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnownUse {
    /// An older revision of a workload than its rollback set: not expected again.
    Superseded,
    /// A workload's previous revision: used again if the rollout is undone, at no known time.
    Rollback,
    /// A workload's current revision: its pods run it, so it is expected at least as soon as
    /// its rollback set (its estimate stands when nearer).
    Current,
    /// Used at this time (a CronJob's next run).
    At(UnixNanos),
    /// Needed now (a pod bound to the node names it).
    Now,
}

impl KnownUse {
    /// For `explain`: `needed now`, `used at 2026-11-30T02:00:00Z (a CronJob's next run)`,
    /// `the current revision of a Deployment`, `the rollback set of a Deployment (its previous
    /// revision)`, `superseded (an older revision of a Deployment)`.
    pub fn describe(self) -> String {
        match self {
            KnownUse::Now => "needed now".to_owned(),
            KnownUse::At(t) => format!(
                "used at {} (a CronJob's next run)",
                crate::format::format_rfc3339(t)
            ),
            KnownUse::Current => "the current revision of a Deployment".to_owned(),
            KnownUse::Rollback => {
                "the rollback set of a Deployment (its previous revision)".to_owned()
            }
            KnownUse::Superseded => "superseded (an older revision of a Deployment)".to_owned(),
        }
    }

    /// The nearer of two known uses (see the module's rule).
    fn nearer(self, other: KnownUse) -> KnownUse {
        use KnownUse::*;
        match (self, other) {
            (Now, _) | (_, Now) => Now,
            (At(a), At(b)) => At(a.min(b)),
            (At(a), _) | (_, At(a)) => At(a),
            (Current, _) | (_, Current) => Current,
            (Rollback, _) | (_, Rollback) => Rollback,
            (Superseded, Superseded) => Superseded,
        }
    }
}

/// As JSON, a string: `now`, `at <RFC 3339>`, `current`, `rollback`, `superseded`.
impl serde::Serialize for KnownUse {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            KnownUse::Now => serializer.serialize_str("now"),
            KnownUse::At(t) => {
                serializer.serialize_str(&format!("at {}", crate::format::format_rfc3339(*t)))
            }
            KnownUse::Current => serializer.serialize_str("current"),
            KnownUse::Rollback => serializer.serialize_str("rollback"),
            KnownUse::Superseded => serializer.serialize_str("superseded"),
        }
    }
}

/// Known next uses by image name (as the cluster names images: a pod spec's, a CronJob's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownUses {
    by_name: BTreeMap<String, KnownUse>,
}

impl KnownUses {
    /// Adds `known` for `name`, keeping the nearer when the name has one.
    pub fn insert(&mut self, name: String, known: KnownUse) {
        let entry = self.by_name.entry(name).or_insert(known);
        *entry = entry.nearer(known);
    }

    /// The known use of `name`.
    pub fn get(&self, name: &str) -> Option<KnownUse> {
        self.by_name.get(name).copied()
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The names and their known uses, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, KnownUse)> {
        self.by_name.iter().map(|(n, k)| (n.as_str(), *k))
    }
}

/// Known uses looked up by a listed image's names: the names matched as the runtime resolves
/// them (`reference::MatchIndex`), the nearest use of those naming an image.
pub(crate) struct KnownIndex {
    index: crate::reference::MatchIndex,
    uses: Vec<KnownUse>,
}

impl KnownIndex {
    /// The index of `known`'s names (under the default runtime handler, as the kubelet pulls a
    /// pod's images).
    pub(crate) fn of(known: &KnownUses) -> KnownIndex {
        KnownIndex {
            index: crate::reference::MatchIndex::of_names(known.iter().map(|(n, _)| (n, ""))),
            uses: known.iter().map(|(_, k)| k).collect(),
        }
    }

    /// The nearest known use of the names that name `image`.
    pub(crate) fn of_image(&self, image: &impl crate::model::ImageLike) -> Option<KnownUse> {
        self.index
            .naming(image)
            .into_iter()
            .filter_map(|at| self.uses.get(at).copied())
            .reduce(KnownUse::nearer)
    }
}

/// A CronJob as the signals read it: its schedule, whether it is suspended, its images.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronJobSignal {
    /// The schedule.
    pub schedule: CronSchedule,
    /// The zone the schedule is read in (`spec.timeZone`; UTC when none).
    pub zone: super::CronZone,
    /// `spec.suspend`: no run is scheduled while it is set.
    pub suspend: bool,
    /// The images its job template names.
    pub images: Vec<String>,
    /// Its job template selects this node by name (`nodeName`, or the node selector's
    /// `kubernetes.io/hostname`): its runs are this node's, so its images are pulled ahead.
    pub here: bool,
}

/// A workload's revisions as the signals read them: the images of its current revision, of
/// the one before (the rollback set) and of older ones (superseded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Revisions {
    /// The current revision's images.
    pub current: Vec<String>,
    /// The previous revision's images.
    pub previous: Vec<String>,
    /// Older revisions' images in neither, newest last.
    pub superseded: Vec<String>,
}

#[derive(Debug, Default)]
struct SignalState {
    /// The CronJobs' calendar time of GC time `t` is `t + calendar_offset_s` (0 for the agent:
    /// both are the wall clock; the simulator's own clock otherwise).
    calendar_offset_s: i64,
    cronjobs: BTreeMap<String, CronJobSignal>,
    workloads: BTreeMap<String, Revisions>,
    refused: u64,
    /// How long before a CronJob's next run its images are kept and pulled ahead (zero: not).
    lead: std::time::Duration,
    /// The share of the image filesystem the signals' keeps may hold, in percent (`None`:
    /// no limit, the library's default; the agent sets `clusterSignalsKeepShare`).
    keep_share: Option<u8>,
    /// The CronJobs (`namespace/name`) an image of which the last detect listed.
    present_cronjobs: BTreeSet<String>,
    /// What the share left out at the last detect, if anything.
    over_share: Option<super::KeepsOverShare>,
    /// The share turned from within to over at a detect and nobody has said so yet (the
    /// agent's Event).
    over_share_news: bool,
}

/// The cluster's declarations the known uses come from (CronJobs, rollouts), shared between
/// whoever writes them and the GC that reads them.
#[derive(Clone, Debug, Default)]
pub struct ClusterSignals {
    state: Arc<RwLock<SignalState>>,
    /// Told when the CronJobs change (the agent's keep timer reads their next runs again).
    changed: Arc<tokio::sync::Notify>,
    /// Told with `changed`, for the warm loop (a second waiter: `Notify` wakes one).
    changed_for_warm: Arc<tokio::sync::Notify>,
    /// Told when the CronJobs with a listed image changed (at a detect).
    present_changed: Arc<tokio::sync::Notify>,
    /// The CronJobs' watch's health (`refused`: CronJobs not held at [`MAX_CRONJOBS`], or with
    /// a schedule or time zone the signals do not read).
    cronjobs_health: Arc<super::WatchHealth>,
    /// The ReplicaSets' watch's health.
    replicasets_health: Arc<super::WatchHealth>,
}

/// The first [`MAX_SIGNAL_IMAGES`] of `images`, sorted and without repeats.
fn bounded(images: Vec<String>) -> Vec<String> {
    let set: BTreeSet<String> = images.into_iter().collect();
    set.into_iter().take(MAX_SIGNAL_IMAGES).collect()
}

impl ClusterSignals {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, SignalState> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, SignalState> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets (or replaces) the CronJob `name`.
    pub fn set_cronjob(&self, name: String, mut job: CronJobSignal) {
        job.images = bounded(job.images);
        let mut state = self.write();
        if state.cronjobs.len() >= MAX_CRONJOBS && !state.cronjobs.contains_key(&name) {
            state.refused += 1;
            self.cronjobs_health.refuse();
            return;
        }
        let changed = state.cronjobs.get(&name) != Some(&job);
        state.cronjobs.insert(name, job);
        drop(state);
        self.told(changed);
    }

    /// Forgets the CronJob `name`.
    pub fn remove_cronjob(&self, name: &str) {
        let changed = self.write().cronjobs.remove(name).is_some();
        self.told(changed);
    }

    /// The workload `name` rolled out `images` with `previous` as its previous revision's
    /// images (the rollback set): every image of its earlier revisions that is in neither is
    /// superseded.
    pub fn set_rollout(&self, name: String, images: Vec<String>, previous: Vec<String>) {
        let (images, previous) = (bounded(images), bounded(previous));
        let mut state = self.write();
        if state.workloads.len() >= MAX_WORKLOADS && !state.workloads.contains_key(&name) {
            state.refused += 1;
            return;
        }
        let revisions = state.workloads.entry(name).or_default();
        let mut superseded = std::mem::take(&mut revisions.superseded);
        superseded.append(&mut revisions.current);
        superseded.append(&mut revisions.previous);
        superseded.retain(|i| !images.contains(i) && !previous.contains(i));
        let mut seen = BTreeSet::new();
        // Each once, its newest place kept.
        superseded.reverse();
        superseded.retain(|i| seen.insert(i.clone()));
        superseded.truncate(MAX_SUPERSEDED);
        superseded.reverse();
        *revisions = Revisions {
            current: images,
            previous,
            superseded,
        };
    }

    /// Reads the CronJobs' schedules `offset_s` seconds ahead of the GC's clock (the
    /// simulator's clock starts at its own epoch; the agent's is the wall clock: 0).
    pub fn set_calendar_offset(&self, offset_s: i64) {
        self.write().calendar_offset_s = offset_s;
    }

    /// Declarations refused because a cap was reached.
    pub fn refused(&self) -> u64 {
        self.read().refused
    }

    /// The known next uses at `now`: each CronJob's images at its next run (a run due at this
    /// very second still to come: its Job is created after it), none while suspended or when it
    /// has no run within its horizon; each workload's current revision, its previous one as the
    /// rollback set, its older ones superseded.
    pub fn known_uses(&self, now: UnixNanos) -> KnownUses {
        let state = self.read();
        let mut out = KnownUses::default();
        let offset = state.calendar_offset_s;
        for job in state.cronjobs.values() {
            let Some(at) = next_run(job, offset, now) else {
                continue;
            };
            for image in &job.images {
                out.insert(image.clone(), KnownUse::At(at));
            }
        }
        for revisions in state.workloads.values() {
            for image in &revisions.current {
                out.insert(image.clone(), KnownUse::Current);
            }
            for image in &revisions.previous {
                out.insert(image.clone(), KnownUse::Rollback);
            }
            for image in &revisions.superseded {
                out.insert(image.clone(), KnownUse::Superseded);
            }
        }
        out
    }
}

/// `job`'s next run at or after `now` (a run due at this very second is still to come), its
/// calendar read `offset_s` ahead; none while suspended or past robfig's horizon.
fn next_run(job: &CronJobSignal, offset_s: i64, now: UnixNanos) -> Option<UnixNanos> {
    if job.suspend {
        return None;
    }
    let calendar_now = now.0.div_euclid(SEC).saturating_add(offset_s);
    let next = job
        .schedule
        .next_after_in(calendar_now.saturating_sub(1), &job.zone)?;
    Some(UnixNanos(next.saturating_sub(offset_s).saturating_mul(SEC)))
}

#[path = "signals_agent.rs"]
mod agent;
#[path = "signals_share.rs"]
mod share;
pub use agent::{ClusterSignalsSample, DueRun, MAX_CRONJOB_LEAD};
pub use share::ShareChange;

#[cfg(test)]
#[path = "signals_tests.rs"]
mod tests;
