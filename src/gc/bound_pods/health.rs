//! How one cluster signals' watch fares (started, failing, errors, refusals at its cap), for
//! the metrics. Shared by the pods' and the DaemonSets' sets; only atomics, no lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How a watch fares.
#[derive(Debug, Default)]
pub(super) struct WatchHealth {
    /// A watch was started (`clusterSignals` on, with the API server's credentials).
    pub(super) started: AtomicBool,
    /// Its last event was an error: the set is the last one seen, perhaps stale.
    pub(super) failing: AtomicBool,
    /// Errors it met (each retried with kube-rs's backoff).
    pub(super) errors: AtomicU64,
    /// Objects not held because the set was at its cap (each refusal counted).
    pub(super) refused: AtomicU64,
    /// The set is at its cap and refused an object since it last was not (logged once).
    pub(super) full: AtomicBool,
    /// The watch has listed its resource once.
    pub(super) synced: AtomicBool,
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
    pub(super) fn sample(&self, synced: bool) -> Option<WatchSample> {
        self.started.load(Ordering::Relaxed).then(|| WatchSample {
            synced,
            failing: self.failing.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        })
    }

    pub(super) fn started(&self) {
        self.started.store(true, Ordering::Relaxed);
    }

    pub(super) fn failed(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.failing.store(true, Ordering::Relaxed);
    }

    pub(super) fn answered(&self) {
        self.failing.store(false, Ordering::Relaxed);
    }
}
