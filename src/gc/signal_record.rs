//! What the agent records of the cluster's declarations (issue 55 item 4): the *changes* of
//! the signals its watches hold ([`super::ClusterSignals`]'s CronJobs and workloads,
//! [`super::BoundPods`]' pods), each as the workload trace's signal line that states it
//! (`cronjob`, `bound`, `rollout`), for the store's `signals` table and `inspect workload`.
//!
//! [`SignalRecord`] holds the last line recorded of each key that stands (rebuilt from the
//! table at start, so a restart records nothing that did not change); [`SignalRecord::changes`]
//! compares what the watches hold at `now` with it. The rules, where a trace line cannot say
//! everything:
//! - a pod no longer bound is `bound` with no images;
//! - a CronJob removed, or whose job template names no image (a `cronjob` line must name one),
//!   is its last line again with `suspend` set: the trace has no removal line, and a suspended
//!   CronJob has no run to come;
//! - a workload removed, or whose current revision names no image, writes nothing (a `rollout`
//!   line cannot say it): the trace keeps its last revisions;
//! - a kind whose watch has not listed its objects yet (or does not run: `clusterSignals` off)
//!   is not compared at all, so an agent starting, or one without the watches, writes nothing.
//!
//! Invariants: every line produced passes the store's and the trace parser's bounds (images
//! sorted, without repeats or empty names, at most [`MAX_SIGNAL_ENTRY_IMAGES`]; a line that
//! cannot be stated is left out); nothing here reads a clock (`now` is an argument); memory is
//! bounded by the keys that stand (a key that no longer does is forgotten once its last line is
//! recorded).

use std::collections::{BTreeMap, BTreeSet};

use super::{BoundPods, ClusterSignals, CronJobSignal, Revisions};
use crate::model::{MAX_SIGNAL_ENTRY_IMAGES, RecordedSignal, SignalEntry, SignalKind, UnixNanos};

/// A signal's key: its kind and its name.
type Key = (SignalKind, String);

/// What the watches hold at one moment, each kind `None` until its watch listed it once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignalsNow {
    /// The pods bound to the node and their images.
    pub pods: Option<BTreeMap<String, Vec<String>>>,
    /// The CronJobs.
    pub cronjobs: Option<BTreeMap<String, CronJobSignal>>,
    /// The workloads' revisions.
    pub workloads: Option<BTreeMap<String, Revisions>>,
}

impl SignalsNow {
    /// What `signals` and `pods` hold now.
    pub fn of(signals: &ClusterSignals, pods: &BoundPods) -> SignalsNow {
        SignalsNow {
            pods: pods.listed_pods(),
            cronjobs: signals.listed_cronjobs(),
            workloads: signals.listed_workloads(),
        }
    }

    /// The kinds known, and the line of each key that stands.
    fn lines(&self) -> (BTreeSet<SignalKind>, BTreeMap<Key, RecordedSignal>) {
        let mut kinds = BTreeSet::new();
        let mut lines = Vec::new();
        if let Some(pods) = &self.pods {
            kinds.insert(SignalKind::Bound);
            lines.extend(pods.iter().map(|(pod, images)| RecordedSignal::Bound {
                pod: pod.clone(),
                images: trace_images(images),
            }));
        }
        if let Some(cronjobs) = &self.cronjobs {
            kinds.insert(SignalKind::CronJob);
            lines.extend(cronjobs.iter().map(|(name, job)| cronjob_line(name, job)));
        }
        if let Some(workloads) = &self.workloads {
            kinds.insert(SignalKind::Rollout);
            lines.extend(workloads.iter().map(|(name, r)| RecordedSignal::Rollout {
                workload: name.clone(),
                images: trace_images(&r.current),
                previous: trace_images(&r.previous),
            }));
        }
        let lines = lines
            .into_iter()
            .filter(|line| stands(line) && line.invalid().is_none())
            .map(|line| (key_of(&line), line))
            .collect();
        (kinds, lines)
    }
}

/// A CronJob's line: its schedule as five fields, its zone unless UTC.
fn cronjob_line(name: &str, job: &CronJobSignal) -> RecordedSignal {
    RecordedSignal::CronJob {
        name: name.to_owned(),
        schedule: job.schedule.spec(),
        time_zone: (!job.zone.is_utc()).then(|| job.zone.name().to_owned()),
        suspend: job.suspend,
        images: trace_images(&job.images),
    }
}

/// `images` sorted, without repeats or empty names, the first [`MAX_SIGNAL_ENTRY_IMAGES`].
fn trace_images(images: &[String]) -> Vec<String> {
    let set: BTreeSet<&String> = images.iter().filter(|i| !i.is_empty()).collect();
    set.into_iter()
        .take(MAX_SIGNAL_ENTRY_IMAGES)
        .cloned()
        .collect()
}

/// Whether a line says its key stands: a pod, CronJob or current revision naming an image.
fn stands(line: &RecordedSignal) -> bool {
    match line {
        RecordedSignal::Bound { images, .. }
        | RecordedSignal::CronJob { images, .. }
        | RecordedSignal::Rollout { images, .. } => !images.is_empty(),
    }
}

fn key_of(line: &RecordedSignal) -> Key {
    let (kind, name) = line.key();
    (kind, name.to_owned())
}

/// The last line recorded of each key that stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignalRecord {
    last: BTreeMap<Key, RecordedSignal>,
}

impl SignalRecord {
    /// The record `entries` (the table, oldest first) leave: each key's last line, but for a
    /// pod gone.
    pub fn from_entries(entries: &[SignalEntry]) -> SignalRecord {
        let mut record = SignalRecord::default();
        record.apply(entries);
        record
    }

    fn apply(&mut self, entries: &[SignalEntry]) {
        for entry in entries {
            let key = key_of(&entry.signal);
            if stands(&entry.signal) {
                self.last.insert(key, entry.signal.clone());
            } else {
                self.last.remove(&key);
            }
        }
    }

    /// The lines to record at `at` for what `now` holds: each key whose line differs from
    /// the last recorded, and the end of each recorded key of a known kind that no longer
    /// stands (see the module's rules). Nothing for a kind not known.
    pub fn changes(&self, now: &SignalsNow, at: UnixNanos) -> Vec<SignalEntry> {
        let (kinds, lines) = now.lines();
        let mut out: Vec<RecordedSignal> = lines
            .iter()
            .filter(|(key, line)| self.last.get(*key) != Some(*line))
            .map(|(_, line)| line.clone())
            .collect();
        for (key, last) in &self.last {
            if !kinds.contains(&key.0) || lines.contains_key(key) {
                continue;
            }
            match last {
                RecordedSignal::Bound { pod, .. } => out.push(RecordedSignal::Bound {
                    pod: pod.clone(),
                    images: Vec::new(),
                }),
                RecordedSignal::CronJob {
                    suspend: false,
                    name,
                    schedule,
                    time_zone,
                    images,
                } => out.push(RecordedSignal::CronJob {
                    name: name.clone(),
                    schedule: schedule.clone(),
                    time_zone: time_zone.clone(),
                    suspend: true,
                    images: images.clone(),
                }),
                RecordedSignal::CronJob { .. } | RecordedSignal::Rollout { .. } => {}
            }
        }
        out.into_iter()
            .map(|signal| SignalEntry { at, signal })
            .collect()
    }

    /// Takes in `written` (what [`SignalRecord::changes`] gave for `now`, once stored), then
    /// forgets the keys of a known kind that no longer stand in `now`.
    pub fn recorded(&mut self, now: &SignalsNow, written: &[SignalEntry]) {
        self.apply(written);
        let (kinds, lines) = now.lines();
        self.last
            .retain(|key, _| !kinds.contains(&key.0) || lines.contains_key(key));
    }
}

#[cfg(test)]
#[path = "signal_record_tests.rs"]
mod tests;
