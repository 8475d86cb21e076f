//! How one cluster signals' watch fares (started, failing, errors, refusals at its cap, listed
//! once), for the metrics and doctor. One per watch (pods, DaemonSets, CronJobs, ReplicaSets),
//! shared by the watch's driver (`cluster`) and the set it writes; only atomics, no lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How a watch fares.
#[derive(Debug, Default)]
pub struct WatchHealth {
    /// A watch was started (`clusterSignals` on, with the API server's credentials).
    pub(crate) started: AtomicBool,
    /// Its last event was an error: the set is the last one seen, perhaps stale.
    pub(crate) failing: AtomicBool,
    /// Errors it met (each retried with kube-rs's backoff).
    pub(crate) errors: AtomicU64,
    /// Objects not held because the set was at its cap (each refusal counted).
    pub(crate) refused: AtomicU64,
    /// The set is at its cap and refused an object since it last was not (logged once).
    pub(crate) full: AtomicBool,
    /// The watch has listed its resource once.
    pub(crate) synced: AtomicBool,
}

/// A watch's state at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchSample {
    /// The watch has listed its resource once.
    pub synced: bool,
    /// The watch's last event was an error.
    pub failing: bool,
    /// Errors the watch met.
    pub errors: u64,
}

impl WatchHealth {
    /// The state now; `None` until a watch started.
    pub fn sample(&self, synced: bool) -> Option<WatchSample> {
        self.started.load(Ordering::Relaxed).then(|| WatchSample {
            synced,
            failing: self.failing.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        })
    }

    /// A watch started.
    pub fn started(&self) {
        self.started.store(true, Ordering::Relaxed);
    }

    /// The watch met an error (it retries; its set holds).
    pub fn failed(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.failing.store(true, Ordering::Relaxed);
    }

    /// The watch delivered an event again.
    pub fn answered(&self) {
        self.failing.store(false, Ordering::Relaxed);
    }
}

impl WatchHealth {
    /// Marks the watch as having listed its resource once.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    /// Whether the watch has listed its resource once.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    /// Counts one object not held because the set was at its cap.
    pub fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Objects not held because the set was at its cap.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}
