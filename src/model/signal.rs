//! What the agent saw the cluster declare (issue 55 item 4), as schema 7's `signals` table
//! keeps it: one [`SignalEntry`] per change, in the shape of a workload trace's signal line
//! (`cronjob`, `bound`, `rollout`; docs/src/reference/workload-trace.md), so `inspect workload`
//! writes the lines `simulate` reads.
//!
//! Invariants: a stored entry's names are non-empty, every name and image at most
//! [`MAX_IMAGE_NAME_BYTES`] bytes, every list at most [`MAX_SIGNAL_ENTRY_IMAGES`] images (the
//! store refuses anything else, as the trace's parser would); the table holds at most
//! [`MAX_SIGNAL_ENTRIES`] entries (the oldest dropped past it).

use serde::{Deserialize, Serialize};

use super::{MAX_IMAGE_NAME_BYTES, UnixNanos};

/// The most entries the `signals` table keeps; the oldest are dropped past it.
pub const MAX_SIGNAL_ENTRIES: usize = 20_000;
/// The most images of one list of an entry (a trace's signal line may hold no more).
pub const MAX_SIGNAL_ENTRY_IMAGES: usize = 128;

/// A signal as a workload trace's line states it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RecordedSignal {
    /// `cronjob`: a CronJob's schedule, zone, suspension and images (set or replaced).
    CronJob {
        /// `namespace/name`.
        name: String,
        /// The schedule, as the trace's parser reads it.
        schedule: String,
        /// `spec.timeZone` (none: UTC).
        time_zone: Option<String>,
        /// `spec.suspend` (also set when the CronJob was removed: no run is to come).
        suspend: bool,
        /// Its job template's images, sorted.
        images: Vec<String>,
    },
    /// `bound`: the images of a pod bound to the node (none: the pod is gone).
    Bound {
        /// `namespace/name`.
        pod: String,
        /// Its images, sorted.
        images: Vec<String>,
    },
    /// `rollout`: a workload's current revision's images and its previous revision's.
    Rollout {
        /// The workload, `namespace/name`.
        workload: String,
        /// The current revision's images, sorted.
        images: Vec<String>,
        /// The previous revision's images, sorted (the rollback set).
        previous: Vec<String>,
    },
}

/// Which kind of line a signal is, in the order the store's layout numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SignalKind {
    /// `cronjob`.
    CronJob,
    /// `bound`.
    Bound,
    /// `rollout`.
    Rollout,
}

impl SignalKind {
    /// The trace's operation name.
    pub fn op(self) -> &'static str {
        match self {
            SignalKind::CronJob => "cronjob",
            SignalKind::Bound => "bound",
            SignalKind::Rollout => "rollout",
        }
    }
}

impl RecordedSignal {
    /// The kind and the name a later line of the same key replaces this one by.
    pub fn key(&self) -> (SignalKind, &str) {
        match self {
            RecordedSignal::CronJob { name, .. } => (SignalKind::CronJob, name),
            RecordedSignal::Bound { pod, .. } => (SignalKind::Bound, pod),
            RecordedSignal::Rollout { workload, .. } => (SignalKind::Rollout, workload),
        }
    }

    /// Why the store refuses this signal, if it does: an empty name, schedule or time zone, a
    /// string longer than
    /// [`MAX_IMAGE_NAME_BYTES`], a list longer than [`MAX_SIGNAL_ENTRY_IMAGES`].
    pub fn invalid(&self) -> Option<&'static str> {
        let (names, lists): (Vec<&str>, Vec<&[String]>) = match self {
            RecordedSignal::CronJob {
                name,
                schedule,
                time_zone,
                images,
                ..
            } => {
                let mut names = vec![name.as_str(), schedule.as_str()];
                names.extend(time_zone.as_deref());
                (names, vec![images.as_slice()])
            }
            RecordedSignal::Bound { pod, images } => (vec![pod.as_str()], vec![images.as_slice()]),
            RecordedSignal::Rollout {
                workload,
                images,
                previous,
            } => (
                vec![workload.as_str()],
                vec![images.as_slice(), previous.as_slice()],
            ),
        };
        if names.iter().any(|s| s.is_empty()) {
            return Some("the signal's name, schedule or time zone is empty");
        }
        let mut strings = names
            .into_iter()
            .chain(lists.iter().flat_map(|l| l.iter().map(String::as_str)));
        if strings.any(|s| s.len() > MAX_IMAGE_NAME_BYTES) {
            return Some("a name or image of the signal is longer than 4096 bytes");
        }
        if lists.iter().any(|l| l.len() > MAX_SIGNAL_ENTRY_IMAGES) {
            return Some("a list of the signal names more than 128 images");
        }
        None
    }
}

/// One change the agent saw, at `at` (unix nanoseconds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalEntry {
    /// When the agent saw the change (its detect cycle's time).
    pub at: UnixNanos,
    /// The signal as it stood from then on.
    pub signal: RecordedSignal,
}
