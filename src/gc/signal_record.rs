//! What the agent records of the cluster's declarations (issue 55 item 4): the *changes* of
//! the signals its watches hold ([`super::ClusterSignals`]'s CronJobs and workloads,
//! [`super::BoundPods`]' pods), each as the workload trace's signal line that states it
//! (`cronjob`, `bound`, `rollout`), for the store's `signals` table and `inspect workload`.
//!
//! [`SignalRecord`] holds a digest of the last line recorded of each key that stands (rebuilt
//! from the table at start, so a restart records nothing that did not change);
//! [`SignalRecord::changes`] compares what the watches hold at `now` with it. The rules, where
//! a trace line cannot say everything:
//! - a pod no longer bound is `bound` with no images;
//! - a CronJob removed, or whose job template names no image (a `cronjob` line must name one),
//!   is its last line again with `suspend` set: the trace has no removal line, and a suspended
//!   CronJob has no run to come (the line is read back from the table, the record holding
//!   none: [`SignalRecord::cronjobs_gone`]; one no longer in the table writes nothing);
//! - a workload removed, or whose current revision names no image, writes nothing (a `rollout`
//!   line cannot say it): the trace keeps its last revisions;
//! - a kind whose watch has not listed its objects yet (or does not run: `clusterSignals` off)
//!   is not compared at all, so an agent starting, or one without the watches, writes nothing.
//!
//! Invariants: every line produced passes the store's and the trace parser's bounds (images
//! sorted, without repeats or empty names, at most [`MAX_SIGNAL_ENTRY_IMAGES`]; a line that
//! cannot be stated is left out); nothing here reads a clock (`now` is an argument); memory is
//! a key and a digest per key that stands (a key that no longer does is forgotten once its
//! last line is recorded), and a comparison builds one line at a time.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

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

    /// The kinds whose watch has listed.
    fn kinds(&self) -> BTreeSet<SignalKind> {
        let mut kinds = BTreeSet::new();
        if self.pods.is_some() {
            kinds.insert(SignalKind::Bound);
        }
        if self.cronjobs.is_some() {
            kinds.insert(SignalKind::CronJob);
        }
        if self.workloads.is_some() {
            kinds.insert(SignalKind::Rollout);
        }
        kinds
    }

    /// Calls `each` with the line of each key that stands, one at a time (the lines are built
    /// as they are visited, never all held at once).
    fn each_line(&self, mut each: impl FnMut(RecordedSignal)) {
        let pods = self.pods.iter().flatten();
        let cronjobs = self.cronjobs.iter().flatten();
        let workloads = self.workloads.iter().flatten();
        pods.map(|(pod, images)| bound_line(pod, images))
            .chain(cronjobs.map(|(name, job)| cronjob_line(name, job)))
            .chain(workloads.map(|(name, r)| rollout_line(name, r)))
            .filter_map(stated)
            .for_each(&mut each);
    }

    /// The line of `key` if it stands now (only that line is built).
    fn line_of(&self, key: &Key) -> Option<RecordedSignal> {
        let name = key.1.as_str();
        let line = match key.0 {
            SignalKind::Bound => bound_line(name, self.pods.as_ref()?.get(name)?),
            SignalKind::CronJob => cronjob_line(name, self.cronjobs.as_ref()?.get(name)?),
            SignalKind::Rollout => rollout_line(name, self.workloads.as_ref()?.get(name)?),
        };
        stated(line)
    }

    /// Whether `key`, recorded, is of a kind known now and no longer stands: its end is to
    /// be written.
    fn gone(&self, kinds: &BTreeSet<SignalKind>, key: &Key) -> bool {
        kinds.contains(&key.0) && self.line_of(key).is_none()
    }
}

/// A bound pod's line.
fn bound_line(pod: &str, images: &[String]) -> RecordedSignal {
    RecordedSignal::Bound {
        pod: pod.to_owned(),
        images: trace_images(images),
    }
}

/// A workload's line: its current and previous revisions' images.
fn rollout_line(name: &str, revisions: &Revisions) -> RecordedSignal {
    RecordedSignal::Rollout {
        workload: name.to_owned(),
        images: trace_images(&revisions.current),
        previous: trace_images(&revisions.previous),
    }
}

/// `line` if it says its key stands and the store and the trace can state it.
fn stated(line: RecordedSignal) -> Option<RecordedSignal> {
    (stands(&line) && line.invalid().is_none()).then_some(line)
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

/// What the record keeps of a key's last line: a digest, not the line (at 1,000 CronJobs and
/// 1,000 Deployments the lines themselves were most of a MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Last {
    /// The line's digest (std's `DefaultHasher`, SipHash with fixed keys: one line, one
    /// digest, within a process; the record is rebuilt from the table at each start, so no
    /// digest outlives its process). Two lines with one digest (a chance of 2^-64 per change)
    /// would leave that change unwritten until the next.
    digest: u64,
    /// A CronJob's line not suspended: its removal writes it again, suspended.
    cronjob_to_suspend: bool,
}

impl Last {
    fn of(line: &RecordedSignal) -> Last {
        let mut hasher = DefaultHasher::new();
        line.hash(&mut hasher);
        Last {
            digest: hasher.finish(),
            cronjob_to_suspend: matches!(line, RecordedSignal::CronJob { suspend: false, .. }),
        }
    }
}

/// What is recorded of the last line of each key that stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignalRecord {
    last: BTreeMap<Key, Last>,
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
                self.last.insert(key, Last::of(&entry.signal));
            } else {
                self.last.remove(&key);
            }
        }
    }

    /// The CronJobs whose removal [`SignalRecord::changes`] writes for `now`: recorded not
    /// suspended, no longer standing. The record holds no line, so their last lines come from
    /// the table (`Store::last_signals`).
    pub fn cronjobs_gone(&self, now: &SignalsNow) -> BTreeSet<String> {
        let kinds = now.kinds();
        self.last
            .iter()
            .filter(|(key, last)| last.cronjob_to_suspend && now.gone(&kinds, key))
            .map(|(key, _)| key.1.clone())
            .collect()
    }

    /// The lines to record at `at` for what `now` holds: each key whose line differs from
    /// the last recorded, and the end of each recorded key of a known kind that no longer
    /// stands (see the module's rules). Nothing for a kind not known. `gone_lines` are the
    /// table's last lines of [`SignalRecord::cronjobs_gone`]; a removed CronJob whose last
    /// line is not among them (dropped past the table's cap) writes nothing.
    pub fn changes(
        &self,
        now: &SignalsNow,
        at: UnixNanos,
        gone_lines: &[RecordedSignal],
    ) -> Vec<SignalEntry> {
        let mut changed: BTreeMap<Key, RecordedSignal> = BTreeMap::new();
        let mut standing = BTreeSet::new();
        now.each_line(|line| {
            let key = key_of(&line);
            if self.last.get(&key).map(|l| l.digest) != Some(Last::of(&line).digest) {
                changed.insert(key.clone(), line);
            }
            standing.insert(key);
        });
        let kinds = now.kinds();
        let mut out: Vec<RecordedSignal> = changed.into_values().collect();
        for (key, last) in &self.last {
            // Gone (`SignalsNow::gone`), from the keys just visited rather than a line anew.
            if !kinds.contains(&key.0) || standing.contains(key) {
                continue;
            }
            match key.0 {
                SignalKind::Bound => out.push(RecordedSignal::Bound {
                    pod: key.1.clone(),
                    images: Vec::new(),
                }),
                SignalKind::CronJob if last.cronjob_to_suspend => {
                    if let Some(RecordedSignal::CronJob {
                        name,
                        schedule,
                        time_zone,
                        images,
                        suspend: false,
                    }) = gone_lines.iter().find(|line| key_of(line) == *key)
                    {
                        out.push(RecordedSignal::CronJob {
                            name: name.clone(),
                            schedule: schedule.clone(),
                            time_zone: time_zone.clone(),
                            suspend: true,
                            images: images.clone(),
                        });
                    }
                }
                SignalKind::CronJob | SignalKind::Rollout => {}
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
        let kinds = now.kinds();
        self.last.retain(|key, _| !now.gone(&kinds, key));
    }
}

#[cfg(test)]
#[path = "signal_record_tests.rs"]
mod tests;
