//! The agent: opens the store, connects to the runtime and runs the kubelet's loops — detect
//! every 5 minutes, the image cache every 30 seconds, GC every 5 minutes — plus the container
//! events watcher ([`watch_container_events`]), the admin socket and the metrics endpoint. It
//! owns wiring and scheduling only; what a cycle does lives in `gc`, `pull` and `warm`, which
//! take `now` from the agent's [`Clock`], and what the agent tells the outside (metrics, the
//! HTTP endpoint, health, Node Events) lives in `crate::telemetry`.
//!
//! Files: `start.rs` builds the agent, `loops.rs` runs the periodic loops and one cycle of
//! each, `serve.rs` serves the admin socket and the HTTP endpoint until shutdown,
//! `admin_backend.rs` answers the admin server, `warm.rs` runs the warm loop and restore,
//! `events.rs` watches container events, `reload.rs` reloads on SIGHUP, `runtime_pins.rs`
//! keeps containerd's pin labels, `notify.rs` talks to the service manager, `doctor_events.rs`
//! turns the doctor's conflicts at start into Node Events, `memory.rs` gives the heap's free
//! pages back after each cycle, `prune_orphans.rs` runs `prune --orphans` (for the admin call
//! and for the command without an agent), `signal_record.rs` records the cluster signals'
//! changes after each detect.
//!
//! Invariants: a failed cycle is logged and the loop keeps its period, as the kubelet's
//! wait.Until loops do; only a cycle that could not reach the runtime is retried sooner (1 s
//! doubling up to the period), so the agent survives the runtime going away; the GC manager
//! and the image manager share one registry of pulls in flight; on shutdown the cycle in
//! flight gets a grace period to finish and is otherwise dropped, which is safe because every
//! store write is one synchronous, atomic transaction; the admin socket is bound only after the
//! store is open, so a second agent on the same database fails before it can touch the first
//! one's socket; an I/O failure of the store (a full disk) makes the agent not ready
//! ([`Agent::ready`], `/readyz`, metric `imagekeeper_store_healthy`) but stops no loop: the
//! store reopens itself at its next use, so the agent recovers without a restart once space is
//! back. A reload ([`Agent::reload`], on SIGHUP) swaps the GC settings between cycles, never within
//! one, and keeps the running configuration when the file is invalid. [`Agent::detect_state`]
//! says when the first detect is done (the service manager's readiness, [`Notifier`]).

mod admin_backend;
mod disk;
mod doctor_events;
mod events;
mod keep_sets;
mod loops;
mod notify;
mod prune_orphans;
mod reload;
mod runtime_pins;
mod serve;
mod service_manager;
mod signal_record;
mod start;
mod warm;

use std::sync::Arc;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::admin::AdminError;
use crate::clock::Clock;
// Child modules name the configuration as `super::config` (it was `agent::config`).
use crate::config;
use crate::cri::CriClient;
use crate::gc::{GcError, ImageGcManager};
use crate::pull::ImageManager;
use crate::runtime::CriError;
use crate::store::{Store, StoreError};

use crate::config::{AgentConfig, ConfigError};
use crate::runtime::AgentRuntime;
use crate::telemetry::Health;
use crate::telemetry::{AgentMetrics, HttpEndpoints, HttpLimits, NodeEvents, serve_http};
pub use events::{EventsNote, watch_container_events};
pub use notify::{NOTIFY_SOCKET, Notifier};
pub use prune_orphans::{PruneOrphans, prune_orphans};
pub use reload::{ConfigSource, ReloadReport};
pub use runtime_pins::{
    INSTANCE_ID_META, LabelRecord, RecordFindings, RemovedPinLabel, RemovedPinLabels, instance_id,
    label_record, remove_recorded_runtime_pin_labels, remove_runtime_pin_labels,
    stored_instance_id,
};
pub use serve::Listeners;
pub use service_manager::serve_service_manager;
pub use warm::{WARM_POD_NAME, restore_images};

/// Why the agent could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The record database could not be opened or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The container runtime could not be reached or refused a call.
    #[error(transparent)]
    Runtime(#[from] CriError),
    /// The GC manager could not be built from the configuration.
    #[error(transparent)]
    Gc(#[from] GcError),
    /// The configuration is invalid (the error names the flag or field).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The credential provider config could not be read or is invalid.
    #[error("credential providers: {0}")]
    CredentialProviders(#[from] crate::pull::credentials::ProviderConfigError),
    /// The admin socket could not be set up.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// A setup step of [`Agent::serve`] failed: `step` names it as `imagekeeper run` reports
    /// it ("removing a stale admin socket", "starting the admin socket", "the admin socket just
    /// bound", "the metrics endpoint's address", "serving the metrics endpoint"); the source
    /// says why.
    #[error("{step}")]
    Serve {
        /// The step, as `imagekeeper run` reports it.
        step: &'static str,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// A running node agent over the runtime `R` (the CRI client in production; any
/// [`AgentRuntime`], such as the replay's scripted runtime, in tests).
pub struct Agent<R: AgentRuntime = CriClient> {
    /// The running configuration; its GC part is replaced by a reload.
    config: Mutex<AgentConfig>,
    /// Where the configuration came from, read again by a reload.
    source: Option<ConfigSource>,
    /// Reloads run one at a time.
    reload_lock: tokio::sync::Mutex<()>,
    /// The credential provider config file's bytes as the plugins were loaded from them at
    /// start (`None`: no providers, or unreadable): a reload compares the file with them, as
    /// the plugins are not reloaded.
    provider_config_at_start: Option<Vec<u8>>,
    /// Whether a detect has succeeded yet, and the last failure before it did.
    detect_state: watch::Sender<DetectState>,
    /// The runtime client the container events watcher streams from.
    events_client: R,
    store: Arc<Store>,
    gc: ImageGcManager<R>,
    images: ImageManager<R, Store>,
    clock: Arc<dyn Clock>,
    metrics: AgentMetrics,
    health: Health,
    gc_failed_before: Mutex<bool>,
    gc_last_unreachable: Mutex<bool>,
    /// Events on the Node object (`--events`); off unless set by `with_node_events`.
    node_events: NodeEvents,
    /// The runtime pins (`runtime_pins.rs`).
    runtime_pins: runtime_pins::RuntimePinner,
    /// Reconciles of the runtime pins run one at a time, each with the keeps of the latest
    /// detect (a loop's and an admin call's may overlap: the later must not undo the earlier).
    runtime_pins_turn: tokio::sync::Mutex<()>,
    /// A detect cycle asks the runtime pins' own task for a reconcile (`loops.rs`): the cycle
    /// never waits on containerd's Images service.
    runtime_pins_wanted: tokio::sync::Notify,
    /// A warm cycle that pulled a KeepSet's image (or found it failed or not fitting) asks the
    /// keep-set loop for a cycle (`warm.rs`), so the set's report says so then, not at the
    /// loop's next period.
    keep_sets_wanted: tokio::sync::Notify,
    /// The last line recorded of each cluster signal (`signal_record.rs`), read from the
    /// store at the first detect that has any; `None` until then.
    signal_record: tokio::sync::Mutex<Option<crate::gc::SignalRecord>>,
    /// The last warm cycle's plan (`warm.rs`).
    warm_last: Mutex<Option<crate::warm::WarmPlan>>,
    /// The warm entries whose "does not fit" was logged, until they fit again.
    warm_logged: Mutex<std::collections::BTreeSet<(String, String)>>,
    /// The bound pods' images the prefetch leaves out, logged once each until they are no
    /// longer left out (image, pod).
    prefetch_logged: Mutex<std::collections::BTreeSet<(String, String)>>,
    /// Whether this process wrote the warm table empty and has written no row since: a warm
    /// cycle with no entry then has nothing to read or write (`warm.rs`). False at start, so
    /// the first cycle clears what an earlier configuration left.
    warm_table_cleared: std::sync::atomic::AtomicBool,
    /// The last warm cycle that found every entry present, written whole (`warm.rs`): a
    /// cycle with the same entries over the same listing plans and writes the same, so it
    /// does neither.
    warm_settled: Mutex<Option<warm::WarmSettled>>,
    /// Whether the last warm cycle found every entry present with every entry the cluster's
    /// (no configured set, no history window): the loop then waits for a change, not the
    /// period (`warm.rs`).
    warm_waits_for_change: std::sync::atomic::AtomicBool,
    /// A detect saw an image leave the node (`loops.rs`): the warm loop plans again.
    warm_wanted: tokio::sync::Notify,
    /// The threads the warm cycle's judge ran on (a test checks it is never the async
    /// worker's).
    #[cfg(test)]
    warm_judged_on: Mutex<Vec<std::thread::ThreadId>>,
}

/// Where the agent's first detect stands: the service manager is told the agent is ready
/// once it is `Done` (the database is open and the runtime's images are recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DetectState {
    /// No detect has ended yet.
    NotYet,
    /// Every detect so far failed; the last error.
    Failing(String),
    /// A detect succeeded.
    Done,
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
