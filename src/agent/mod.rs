//! The agent: opens the store, connects to the runtime and runs the kubelet's loops — detect
//! every 5 minutes, the image cache every 30 seconds, GC every 5 minutes — plus the container
//! events watcher ([`watch_container_events`]), the admin socket and the metrics endpoint. It owns wiring and scheduling only; what a cycle does lives
//! in `gc` and `pull`, which take `now` from the agent's [`Clock`].
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

mod config;
mod events;
mod notify;
mod reload;
mod runtime;
mod runtime_pins;
mod warm;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::admin::{AdminBackend, AdminError, EnsureImageError, EnsureRequest, GcOutcome};
use crate::clock::Clock;
use crate::cri::{CriClient, CriError};
use crate::gc::{CycleTime, GcError, ImageGcManager, PinView, pin_view, pin_views, stored_images};
use crate::model::{ImagePin, PinKey, PullOrigin, RuntimeImage, UnixNanos};
use crate::pull::{ImageManager, PodRef, PullAuth, PullPolicy, PullsInFlight};
use crate::store::{Batch, Store, StoreError, meta_keys};

pub use crate::telemetry::{
    AgentMetrics, BUILD_REVISION, BUILD_VERSION, CONTENT_TYPE, EVENT_TOP_IMAGES, EventSink, Health,
    HttpEndpoints, HttpLimits, MAX_HEAD_BYTES, METRIC_PREFIX, METRICS, MetricFamily, MetricKind,
    MetricUnit, NodeEvent, NodeEventType, NodeEvents, serve_http, serve_probes,
};
#[cfg(feature = "kube")]
pub use crate::telemetry::{EventLimits, KubeEventSink};
pub use config::{
    AgentConfig, CONFIG_FIELDS, ConfigError, ConfigField, ContainerEvents, DEFAULT_ADMIN_SOCKET,
    EMPTY_CONFIG_MARKER, FileConfig, FlagValues, MIN_INTENT_MAX_AGE, OnReload, RuntimePins,
};
pub use events::{EventsNote, MAX_RECONNECT_DELAY, watch_container_events};
pub use notify::{
    NOTIFY_SOCKET, Notifier, reloading_message as notify_reloading_message, status as notify_status,
};
pub use reload::{ConfigSource, ReloadReport};
pub use runtime::{AgentRuntime, EventStream, NoEvents};
pub use runtime_pins::{
    LabelChange, OWN_LABEL, PINNED_LABEL, PINNED_VALUE, PinsState, plan_label_changes,
    remove_runtime_pin_labels, runtime_carries_pins,
};
pub use warm::{WARM_POD_NAME, restore_images};

/// Why the agent could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Runtime(#[from] CriError),
    #[error(transparent)]
    Gc(#[from] GcError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("credential providers: {0}")]
    CredentialProviders(#[from] crate::pull::credentials::ProviderConfigError),
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// A setup step of [`Agent::serve`] failed: `step` names it as `imagekeeper run` reports
    /// it ("removing a stale admin socket", "starting the admin socket", "the admin socket just
    /// bound", "the metrics endpoint's address", "serving the metrics endpoint"); the source
    /// says why.
    #[error("{step}")]
    Serve {
        step: &'static str,
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
    /// The last warm cycle's plan (`warm.rs`).
    warm_last: Mutex<Option<crate::warm::WarmPlan>>,
    /// The warm entries whose "does not fit" was logged, until they fit again.
    warm_logged: Mutex<std::collections::BTreeSet<(String, String)>>,
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

/// One of the agent's periodic loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loop {
    Detect,
    ImageCache,
    Gc,
}

impl Agent<CriClient> {
    /// Opens the store, records the start, and connects (lazily) to the runtime.
    pub async fn start(config: AgentConfig, clock: Arc<dyn Clock>) -> Result<Agent, AgentError> {
        let client = CriClient::connect(config.cri.clone()).await?;
        Agent::with_runtime(config, clock, client)
    }
}

impl<R: AgentRuntime> Agent<R> {
    /// Opens the store, records the start, and runs against `client` (the configuration's
    /// CRI endpoints are not used). Must run inside a tokio runtime.
    pub fn with_runtime(
        config: AgentConfig,
        clock: Arc<dyn Clock>,
        client: R,
    ) -> Result<Agent<R>, AgentError> {
        let now = clock.now();
        let mut config = config;
        // `for` lifetimes count from now.
        config.gc.warm =
            std::mem::take(&mut config.gc.warm).stamped(now, &crate::warm::WarmSet::default());
        let store = Arc::new(Store::open(&config.db, now)?);
        let mut batch = Batch::new();
        batch.set_meta(meta_keys::AGENT_STARTED_AT, now.0);
        store.apply(&batch)?;
        // One registry of pulls in flight: GC keeps what the image manager is pulling.
        let in_flight = PullsInFlight::new();
        let gc = ImageGcManager::new(client.clone(), store.clone(), config.gc.clone())?
            .with_pulls_in_flight(in_flight.clone())
            // Both loops detect, and so write a heartbeat: in normal operation one comes at
            // the shorter period (a longer wait, a GC cycle holding the lock, only leaves a
            // stretch unwatched: images kept longer, never removed sooner).
            .with_watch_period(config.detect_period.min(config.gc_period));
        let images = ImageManager::new(
            &config.pull,
            Arc::new(client.clone()),
            store.clone(),
            clock.clone(),
        )
        .map_err(ConfigError::from)?
        .with_pulls_in_flight(in_flight)
        .with_credential_sources(Arc::new(config.credential_sources()?))
        .with_repull_metrics(gc.metrics().repulls().clone());
        let provider_config_at_start = config
            .credential_providers
            .as_ref()
            .and_then(|p| crate::pull::credentials::plugin::config_snapshot(&p.config));
        let runtime_pins =
            runtime_pins::RuntimePinner::new(config.runtime_pins, &config.containerd_address)
                .map_err(|e| ConfigError::Invalid {
                    origin: "--containerd-address".to_owned(),
                    message: e.to_string(),
                })?;
        Ok(Agent {
            runtime_pins,
            config: Mutex::new(config),
            source: None,
            reload_lock: tokio::sync::Mutex::new(()),
            provider_config_at_start,
            detect_state: watch::Sender::new(DetectState::NotYet),
            events_client: client,
            store,
            gc,
            images,
            clock,
            metrics: AgentMetrics::default(),
            health: Health::default(),
            gc_failed_before: Mutex::new(false),
            node_events: NodeEvents::off(),
            gc_last_unreachable: Mutex::new(false),
            warm_last: Mutex::new(None),
            warm_logged: Mutex::new(Default::default()),
            #[cfg(test)]
            warm_judged_on: Mutex::new(Vec::new()),
        })
    }

    /// The running configuration (a reload replaces its GC settings).
    pub fn config(&self) -> AgentConfig {
        lock_ignoring_poison(&self.config).clone()
    }

    /// Where the first detect stands; changes once when a detect first succeeds (and on each
    /// failure before that).
    pub fn detect_state(&self) -> watch::Receiver<DetectState> {
        self.detect_state.subscribe()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn gc_manager(&self) -> &ImageGcManager<R> {
        &self.gc
    }

    pub fn metrics(&self) -> &AgentMetrics {
        &self.metrics
    }

    /// Publishes Node Events through `events` (built by `imagekeeper run --events`).
    pub fn with_node_events(mut self, events: NodeEvents) -> Agent<R> {
        self.node_events = events;
        self
    }

    /// Whether the agent can do its job: false while the record store is closed after an I/O
    /// failure (a full disk) and not yet reopened; the metric `imagekeeper_store_healthy`
    /// reports the same.
    /// The loops go on meanwhile: their next use of the store tries the reopen.
    pub fn ready(&self) -> bool {
        self.store.is_healthy()
    }

    /// `/readyz`: Ok once a detect completed, while the runtime answers and the store is
    /// healthy; else every reason, one per line.
    pub fn readiness(&self) -> Result<String, String> {
        self.health
            .readiness(self.store.is_healthy(), self.clock.now())
    }

    /// `/healthz`: Ok while the process answers and its database file is still there.
    pub fn liveness(&self) -> Result<String, String> {
        // The database path is a flag only: a reload never changes it.
        let db = lock_ignoring_poison(&self.config).db.clone();
        Health::liveness(&db, self.store.is_healthy())
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn render_metrics(&self) -> String {
        self.metrics
            .render_at(&self.gc, &self.images, &self.store, self.clock.now())
    }

    /// The whole agent: binds the admin socket (a stale one of an earlier run removed
    /// first), serves the metrics/health endpoint on `listeners.metrics` if given, runs the
    /// loops until `shutdown` resolves ([`Agent::run`], with `grace` for the cycle in flight),
    /// then stops the admin server (waiting up to [`ADMIN_STOP_GRACE`] for calls in flight) and
    /// the HTTP endpoint, and removes the admin socket it bound, and only that one (by device
    /// and inode: another agent may have bound the path meanwhile).
    pub async fn serve(
        self: Arc<Self>,
        listeners: Listeners,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
    ) -> Result<(), AgentError> {
        let socket = self.config().admin_socket;
        let step = |step: &'static str| {
            move |source: Box<dyn std::error::Error + Send + Sync + 'static>| AgentError::Serve {
                step,
                source,
            }
        };
        // The store is ours now. A socket left at the path is removed only if it is still a
        // socket nobody answers on (checked again: another process may have bound it since).
        crate::admin::remove_stale_socket(&socket)
            .map_err(|e| step("removing a stale admin socket")(e.into()))?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let admin = crate::admin::serve_with_limits(
            &socket,
            self.clone(),
            wait_stop(stop_rx),
            listeners.admin_limits,
        )
        .await
        .map_err(|e| step("starting the admin socket")(e.into()))?;
        // From here on a setup failure stops the admin server and removes the socket it bound.
        let bound = match socket_identity(&socket) {
            Ok(bound) => bound,
            Err(source) => {
                // The path is no socket of ours any more (gone, or replaced by something that
                // is not a socket): nothing there is ours to remove.
                admin.abort();
                return Err(step("the admin socket just bound")(
                    AdminError::Bind {
                        path: socket.clone(),
                        source,
                    }
                    .into(),
                ));
            }
        };
        let abandon = |admin: tokio::task::JoinHandle<()>, error: AgentError| {
            admin.abort();
            if socket_identity(&socket).ok() == Some(bound) {
                let _ = std::fs::remove_file(&socket);
            }
            error
        };
        let http = match listeners.metrics {
            Some(listener) => {
                let address = match listener.local_addr() {
                    Ok(address) => address,
                    Err(e) => {
                        return Err(abandon(
                            admin,
                            step("the metrics endpoint's address")(e.into()),
                        ));
                    }
                };
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(e) => {
                        return Err(abandon(
                            admin,
                            step("serving the metrics endpoint")(e.into()),
                        ));
                    }
                };
                let endpoints: Arc<dyn HttpEndpoints> = self.clone();
                info!(%address, "Serving metrics");
                Some(tokio::spawn(serve_http(
                    listener,
                    endpoints,
                    listeners.http_limits,
                )))
            }
            None => None,
        };
        if let Some(bound) = listeners.bound {
            let _ = bound.send(());
        }
        self.clone().run(shutdown, grace).await;
        let _ = stop_tx.send(true);
        if tokio::time::timeout(ADMIN_STOP_GRACE, admin).await.is_err() {
            warn!(grace = ?ADMIN_STOP_GRACE, "Admin calls in flight did not end in time; leaving them");
        }
        if let Some(http) = http {
            http.abort();
        }
        // Our socket, unless something else was put there meanwhile (another agent that
        // found ours stale while we were shutting down and bound its own).
        if socket_identity(&socket).ok() == Some(bound) {
            let _ = std::fs::remove_file(&socket);
        }
        Ok(())
    }

    /// Runs the loops until `shutdown` resolves. The cycle in flight then gets `grace` to
    /// finish.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>, grace: Duration) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let events = {
            let agent = self.clone();
            let stop = stop_rx.clone();
            let mode = self.config().container_events;
            tokio::spawn(async move {
                events::watch_container_events(
                    &agent.events_client,
                    &agent.gc,
                    agent.clock.as_ref(),
                    mode,
                    stop,
                    |_| {},
                )
                .await
            })
        };
        // The warm loop on a task of its own: a long warm pull never delays detect or GC.
        let warm = {
            let agent = self.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move { agent.warm_loop(stop).await })
        };
        let loops = {
            let agent = self.clone();
            tokio::spawn(async move { agent.run_loops(stop_rx).await })
        };
        shutdown.await;
        info!("Shutting down: letting the cycle in flight finish");
        let _ = stop_tx.send(true);
        match tokio::time::timeout(grace, loops).await {
            Ok(_) => info!("Loops stopped"),
            Err(_) => warn!(
                ?grace,
                "A cycle did not finish within the grace period; abandoned it (every store write is atomic)"
            ),
        }
        // The watcher returns on stop; a mark in flight is one atomic write.
        events.abort();
        // A warm pull in flight is dropped: the runtime finishes or drops it, and the next
        // start's cycle sees what landed.
        warm.abort();
    }

    async fn run_loops(self: Arc<Self>, stop: watch::Receiver<bool>) {
        let config = self.config();
        let periods = [
            (Loop::Detect, config.detect_period),
            (Loop::ImageCache, config.image_cache_period),
            (Loop::Gc, config.gc_period),
        ];
        run_schedule(periods, stop, |which| {
            let agent = self.clone();
            async move { agent.run_cycle(which).await }
        })
        .await;
    }

    /// Runs one cycle; returns how it ended.
    async fn run_cycle(&self, which: Loop) -> CycleOutcome {
        // The cycles read the clock once they hold the cycle lock (`CycleTime`).
        let now = &*self.clock;
        // A detect or image-cache cycle waits on the runtime: readiness sees how long.
        let _waiting = matches!(which, Loop::Detect | Loop::ImageCache)
            .then(|| self.health.waiting_for_runtime(self.clock.now()));
        match which {
            Loop::Detect => match self.gc.detect(now).await {
                Ok(report) => {
                    self.health.detect_succeeded();
                    info!(
                        records = report.records,
                        added = report.added,
                        removed = report.removed,
                        committed = report.committed,
                        "Detected images"
                    );
                    self.detect_state.send_if_modified(|state| {
                        let first = *state != DetectState::Done;
                        *state = DetectState::Done;
                        first
                    });
                    self.reconcile_runtime_pins().await;
                    CycleOutcome::Done
                }
                Err(e) => {
                    error!(error = %e, "Image detection failed");
                    self.detect_state.send_if_modified(|state| {
                        if *state == DetectState::Done {
                            return false;
                        }
                        *state = DetectState::Failing(e.to_string());
                        true
                    });
                    self.failed_cycle(&e)
                }
            },
            Loop::ImageCache => match self.gc.refresh_image_cache().await {
                Ok(()) => {
                    self.metrics.image_cache_filled();
                    // The image filesystem gauges; a failure here (statvfs of a mountpoint
                    // the agent cannot see) is logged and fails nothing else.
                    if let Err(e) = self.gc.observe_image_fs().await {
                        warn!(error = %e, "Failed to read the image filesystem");
                    }
                    self.health.runtime_reached();
                    CycleOutcome::Done
                }
                Err(e) => {
                    warn!(error = %e, "Failed to update image list");
                    self.failed_cycle(&e)
                }
            },
            Loop::Gc => match self.garbage_collect_cycle(now).await.error {
                None => CycleOutcome::Done,
                Some(_) => match self.gc_failure_unreachable() {
                    true => CycleOutcome::RuntimeUnreachable,
                    false => CycleOutcome::Failed,
                },
            },
        }
    }

    /// After a detect: `auto` decides (once the runtime answers Version) and, when on,
    /// containerd's labels are made to match what the detect found kept. A detect after the
    /// runtime came back reconciles too, so a restart of either side heals at its first cycle.
    async fn reconcile_runtime_pins(&self) {
        if self.runtime_pins.state() == runtime_pins::PinsState::Undecided {
            self.runtime_pins
                .decide(self.events_client.runtime_version().await);
        }
        if let Some(keeps) = self.gc.last_keeps() {
            self.runtime_pins.reconcile(&keeps).await;
        }
        if let Some(sample) = self.runtime_pins.sample() {
            self.metrics.record_runtime_pins(sample);
        }
    }

    /// Where the runtime pins stand (`auto` undecided, on, or off and why).
    pub fn runtime_pins_state(&self) -> runtime_pins::PinsState {
        self.runtime_pins.state()
    }

    /// A detect or image-cache cycle failed: readiness learns whether the runtime was reached.
    fn failed_cycle(&self, e: &GcError) -> CycleOutcome {
        let outcome = CycleOutcome::failed(e);
        match outcome {
            CycleOutcome::RuntimeUnreachable => self.health.runtime_unreachable(e.to_string()),
            // The runtime answered (with an error): it is reachable.
            _ if matches!(e, GcError::Runtime { .. }) => self.health.runtime_reached(),
            _ => {}
        }
        outcome
    }

    /// Whether the last GC failed because the runtime could not be reached (the outcome of
    /// `garbage_collect_cycle` carries the error as text only).
    fn gc_failure_unreachable(&self) -> bool {
        *lock_ignoring_poison(&self.gc_last_unreachable)
    }

    async fn garbage_collect_cycle(&self, now: impl CycleTime) -> GcOutcome {
        let started = std::time::Instant::now();
        let report = self.gc.garbage_collect(now).await;
        self.metrics.observe_gc(started.elapsed());
        // Between cycles: give churned space back to the file system (store::compact). It
        // blocks on disk for up to a fraction of a second, so it runs on tokio's blocking pool,
        // not on this worker; a failure is logged, never fatal.
        let store = Arc::clone(self.gc.store());
        match tokio::task::spawn_blocking(move || store.compact_if_needed()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!(error = %e, "Cannot compact the database"),
            Err(e) => warn!(error = %e, "The database compaction task failed"),
        }
        *lock_ignoring_poison(&self.gc_last_unreachable) =
            report.error.as_ref().is_some_and(runtime_unreachable);
        self.metrics.record_gc_cycle(report.error.is_none());
        // GC detected first: containerd's labels follow what it found kept (the GC loop's
        // cycle and `imagekeeper gc` through the agent alike; the latter returns after it).
        if report.error.is_none() {
            self.reconcile_runtime_pins().await;
        }
        self.node_events.gc_cycle(&report);
        self.node_events.store_health(self.store.is_healthy());
        let mut failed_before = lock_ignoring_poison(&self.gc_failed_before);
        match &report.error {
            Some(e) if *failed_before => {
                error!(error = %e, reason = "ImageGCFailed", "Image garbage collection failed multiple times in a row");
            }
            Some(e) => {
                error!(error = %e, "Image garbage collection failed once. Stats initialization may not have completed yet");
                *failed_before = true;
            }
            None => {
                info!(
                    removed = report.removed.len(),
                    freed = report.freed,
                    "Image garbage collection succeeded"
                );
                *failed_before = false;
            }
        }
        GcOutcome::from_report(report, false)
    }
}

/// How long the admin server may finish calls in flight at shutdown.
pub const ADMIN_STOP_GRACE: Duration = Duration::from_secs(5);

/// What [`Agent::serve`] serves beside its loops.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Listeners {
    /// The metrics/health HTTP endpoint, bound beforehand (non-blocking) so a bad address
    /// fails before anything is created; `None`: no endpoint.
    pub metrics: Option<std::net::TcpListener>,
    pub http_limits: HttpLimits,
    pub admin_limits: crate::admin::AdminLimits,
    /// Told once the admin socket is bound and the metrics endpoint set up, before the loops
    /// start (`imagekeeper run` logs "agent started" and talks to the service manager from
    /// then on); dropped unsent when the setup fails.
    pub bound: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Listeners {
    /// The default limits, and the metrics endpoint on `metrics` if given.
    pub fn new(metrics: Option<std::net::TcpListener>) -> Listeners {
        Listeners {
            metrics,
            ..Listeners::default()
        }
    }
}

/// A socket file's device and inode, if it is a socket.
fn socket_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.file_type().is_socket() {
        return Err(std::io::Error::other("not a socket"));
    }
    Ok((meta.dev(), meta.ino()))
}

async fn wait_stop(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// How one cycle of a loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CycleOutcome {
    Done,
    /// Failed for a reason a quick retry does not fix (not enough space freed, a removal
    /// failed, a store error): the loop keeps its period, as the kubelet's wait.Until does.
    Failed,
    /// The runtime could not be reached: retried soon (1 s doubling up to the period).
    RuntimeUnreachable,
}

impl CycleOutcome {
    fn failed(e: &GcError) -> CycleOutcome {
        if runtime_unreachable(e) {
            CycleOutcome::RuntimeUnreachable
        } else {
            CycleOutcome::Failed
        }
    }
}

/// A runtime error that means the runtime is not there: a failed dial, or Unavailable.
fn runtime_unreachable(e: &GcError) -> bool {
    match e {
        GcError::Runtime { source, .. } => {
            matches!(source, CriError::Connect { .. })
                || source.code() == Some(crate::cri::RpcCode::Unavailable)
        }
        _ => false,
    }
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The agent's loops: each runs once at start (in the order given, so detect comes first and
/// the first GC sees fresh records), then every period (the kubelet's wait.Until). A cycle
/// that failed keeps the period; only a runtime that cannot be reached is retried sooner, 1 s
/// doubling up to the period. Returns when `stop` turns true (the cycle in flight runs to its
/// end). Timers are tokio's, so tests drive the schedule with paused time.
async fn run_schedule<F, Fut>(
    periods: [(Loop, Duration); 3],
    mut stop: watch::Receiver<bool>,
    mut run: F,
) where
    F: FnMut(Loop) -> Fut,
    Fut: Future<Output = CycleOutcome>,
{
    let start = Instant::now();
    let mut next = periods.map(|(which, period)| (which, start, Backoff::new(period)));
    loop {
        let Some(index) = (0..next.len()).min_by_key(|&i| next[i].1) else {
            return;
        };
        let (which, when, _) = next[index];
        tokio::select! {
            _ = tokio::time::sleep_until(when) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let outcome = run(which).await;
        if *stop.borrow() {
            return;
        }
        let backoff = &mut next[index].2;
        let delay = match outcome {
            CycleOutcome::Done | CycleOutcome::Failed => backoff.reset(),
            CycleOutcome::RuntimeUnreachable => backoff.next_delay(),
        };
        next[index].1 = Instant::now() + delay;
    }
}

/// The retry delay of one loop: its period after a cycle, 1 s doubling up to the period while
/// the runtime cannot be reached.
#[derive(Clone, Copy, Debug)]
struct Backoff {
    period: Duration,
    current: Duration,
}

impl Backoff {
    fn new(period: Duration) -> Backoff {
        Backoff {
            period,
            current: Duration::ZERO,
        }
    }

    fn reset(&mut self) -> Duration {
        self.current = Duration::ZERO;
        self.period
    }

    fn next_delay(&mut self) -> Duration {
        self.current = if self.current.is_zero() {
            Duration::from_secs(1)
        } else {
            self.current.saturating_mul(2)
        }
        .min(self.period);
        self.current
    }
}

impl<R: AgentRuntime> AdminBackend for Agent<R> {
    async fn ensure_image(&self, request: EnsureRequest) -> Result<String, EnsureImageError> {
        let policy = match request.pull_policy.as_str() {
            "" | "IfNotPresent" => PullPolicy::IfNotPresent,
            "Always" => PullPolicy::Always,
            "Never" => PullPolicy::Never,
            other => return Err(EnsureImageError::InvalidPullPolicy(other.to_owned())),
        };
        let pod = PodRef {
            uid: request.pod_uid,
            namespace: request.pod_namespace,
            name: request.pod_name,
            annotations: Default::default(),
            origin: PullOrigin::Pull,
        };
        let mut pull_secrets = Vec::with_capacity(request.pull_secrets.len());
        for (i, secret) in request.pull_secrets.iter().enumerate() {
            let what = format!("pull secret {}", i + 1);
            match crate::pull::credentials::parse_pull_secret(&what, secret) {
                Ok(config) => pull_secrets.push(config),
                Err(e) => return Err(EnsureImageError::InvalidPullSecret(e)),
            }
        }
        self.images
            .ensure_image_exists_with(
                &pod,
                &request.image,
                policy,
                PullAuth::Keyring(&pull_secrets),
                &request.runtime_handler,
            )
            .await
            .map_err(EnsureImageError::Pull)
    }

    async fn garbage_collect(&self, dry_run: bool) -> GcOutcome {
        if dry_run {
            return self.with_warm_does_not_fit(GcOutcome::from_plan(
                self.gc.plan(self.clock.now(), false).await,
            ));
        }
        self.garbage_collect_cycle(&*self.clock).await
    }

    async fn delete_unused(&self, dry_run: bool) -> GcOutcome {
        if dry_run {
            return self.with_warm_does_not_fit(GcOutcome::from_plan(
                self.gc.plan(self.clock.now(), true).await,
            ));
        }
        GcOutcome::from_report(self.gc.delete_unused_images(&*self.clock).await, false)
    }

    async fn restore(
        &self,
        options: crate::warm::RestoreOptions,
    ) -> Result<crate::warm::RestoreOutcome, String> {
        Agent::restore(self, options)
            .await
            .map_err(|e| e.to_string())
    }

    fn now(&self) -> UnixNanos {
        self.clock.now()
    }

    async fn pin(&self, key: PinKey, until: UnixNanos, reason: String) -> Result<PinView, String> {
        let now = self.clock.now();
        // The admin server checked the request; a caller in-process is checked here too, so
        // no name with credentials reaches the database or the log.
        crate::gc::check_pin_request(&key, until, &reason, now).map_err(|e| e.to_string())?;
        let pin = ImagePin {
            created_at: now,
            until,
            reason,
        };
        let mut batch = Batch::new();
        batch.put_pin(key.clone(), pin.clone());
        let store = self.gc.store().clone();
        store.apply(&batch).map_err(|e| e.to_string())?;
        info!(
            image = key.image.as_str(),
            runtime_handler = key.runtime_handler.as_str(),
            until = %if until == UnixNanos::NEVER { "never".to_owned() } else { crate::format::format_rfc3339(until) },
            "Pinned an image"
        );
        let images = self.pin_images().map_err(|e| e.to_string())?;
        let mut view = pin_view(key, pin, &images, now);
        self.runtime_pins.annotate(&mut view);
        Ok(view)
    }

    async fn unpin(&self, key: PinKey) -> Result<bool, String> {
        let store = self.gc.store().clone();
        let existed = store.pin(&key).map_err(|e| e.to_string())?.is_some();
        let mut batch = Batch::new();
        batch.remove_pin(key.clone());
        store.apply(&batch).map_err(|e| e.to_string())?;
        if existed {
            info!(
                image = crate::pull::redact_image_name(&key.image).as_str(),
                runtime_handler = key.runtime_handler.as_str(),
                "Unpinned an image"
            );
        }
        Ok(existed)
    }

    async fn runtime_pins(&self) -> Result<crate::admin::RuntimePinsReport, String> {
        let db = self.config().db;
        let note = self.runtime_pins.state_note();
        let keeps = match note {
            None => self
                .runtime_pins
                .carried_keeps()
                .into_iter()
                .map(|(key, (why, carried))| (key, why, carried))
                .collect(),
            // Off or undecided: nothing is carried, but the last detect's keeps are known.
            Some(_) => self
                .gc
                .last_keeps()
                .unwrap_or_default()
                .into_iter()
                .map(|k| (k.key, k.why, false))
                .collect(),
        };
        Ok(crate::admin::RuntimePinsReport {
            note: note.unwrap_or_default(),
            db: std::fs::canonicalize(&db).unwrap_or(db),
            keeps,
        })
    }

    async fn pins(&self) -> Result<Vec<PinView>, String> {
        let pins = self.gc.store().pins().map_err(|e| e.to_string())?;
        let images = self.pin_images().map_err(|e| e.to_string())?;
        let mut views = pin_views(pins, &images, self.clock.now());
        for view in &mut views {
            self.runtime_pins.annotate(view);
        }
        Ok(views)
    }
}

impl<R: AgentRuntime> Agent<R> {
    /// The images a pin is resolved against for the admin's answers: the image cache (the
    /// runtime's list), else, before the cache's first refresh, the store's records with their
    /// names.
    fn pin_images(&self) -> Result<Vec<RuntimeImage>, crate::store::StoreError> {
        let cached = self.gc.image_list();
        if cached.is_empty() {
            stored_images(self.gc.store())
        } else {
            Ok(cached)
        }
    }
}

impl<R: AgentRuntime> HttpEndpoints for Agent<R> {
    fn metrics(&self) -> String {
        self.render_metrics()
    }

    fn healthz(&self) -> Result<String, String> {
        self.liveness()
    }

    fn readyz(&self) -> Result<String, String> {
        self.readiness()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GC loop after failures, under paused time: a failed GC (space not freed, a removal
    /// failed) waits the full period as the kubelet's wait.Until does; only an unreachable
    /// runtime is retried at 1 s, 2 s, 4 s ...; a success resets.
    #[tokio::test(start_paused = true)]
    async fn gc_failures_keep_the_period_and_only_an_unreachable_runtime_retries_fast() {
        use std::collections::VecDeque;
        let period = Duration::from_secs(300);
        let mut script: VecDeque<CycleOutcome> = VecDeque::from([
            CycleOutcome::Failed,
            CycleOutcome::Failed,
            CycleOutcome::RuntimeUnreachable,
            CycleOutcome::RuntimeUnreachable,
            CycleOutcome::RuntimeUnreachable,
            CycleOutcome::Done,
            CycleOutcome::Failed,
        ]);
        let start = Instant::now();
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut gc_times = Vec::new();
        let long = Duration::from_secs(1_000_000);
        run_schedule(
            [
                (Loop::Detect, long),
                (Loop::ImageCache, long),
                (Loop::Gc, period),
            ],
            stop_rx,
            |which| {
                let outcome = if which == Loop::Gc {
                    gc_times.push(start.elapsed().as_secs());
                    match script.pop_front() {
                        Some(outcome) => outcome,
                        None => {
                            let _ = stop_tx.send(true);
                            CycleOutcome::Done
                        }
                    }
                } else {
                    CycleOutcome::Done
                };
                async move { outcome }
            },
        )
        .await;
        // start; Failed +300; Failed +300; unreachable +1, +2, +4; Done +300; Failed +300.
        assert_eq!(gc_times, [0, 300, 600, 601, 603, 607, 907, 1207]);
    }

    use std::collections::BTreeMap;

    use crate::cri::ImageRuntime;
    use crate::model::{ImageFsStats, ImageId, PullCredentials, RuntimeContainer, RuntimeImage};
    use crate::replay::ScriptedRuntime;

    /// The scripted runtime, recording each call (with the paused clock's seconds since the
    /// test began) and parking ListImages while `park` is set.
    #[derive(Clone)]
    struct Recorder {
        inner: ScriptedRuntime,
        start: Instant,
        calls: Arc<Mutex<Vec<(u64, &'static str)>>>,
        park: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Recorder {
        fn new() -> Recorder {
            Recorder {
                inner: ScriptedRuntime::new(),
                start: Instant::now(),
                calls: Arc::default(),
                park: Arc::default(),
            }
        }

        fn note(&self, method: &'static str) {
            let at = self.start.elapsed().as_secs();
            lock_ignoring_poison(&self.calls).push((at, method));
        }

        fn calls(&self, method: &str) -> Vec<u64> {
            lock_ignoring_poison(&self.calls)
                .iter()
                .filter(|(_, m)| *m == method)
                .map(|(at, _)| *at)
                .collect()
        }
    }

    impl ImageRuntime for Recorder {
        async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
            self.note("ListImages");
            if self.park.load(std::sync::atomic::Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            self.inner.list_images().await
        }
        async fn image_status(
            &self,
            image: &str,
            handler: &str,
        ) -> Result<Option<RuntimeImage>, CriError> {
            self.inner.image_status(image, handler).await
        }
        async fn pull_image(
            &self,
            image: &str,
            handler: &str,
            credentials: Option<&PullCredentials>,
        ) -> Result<String, CriError> {
            self.inner.pull_image(image, handler, credentials).await
        }
        async fn remove_image(&self, image: &str, handler: &str) -> Result<(), CriError> {
            self.note("RemoveImage");
            self.inner.remove_image(image, handler).await
        }
        async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
            self.note("ImageFsInfo");
            self.inner.image_fs_stats().await
        }
        async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
            self.note("ListContainers");
            self.inner.list_containers().await
        }
    }

    impl AgentRuntime for Recorder {
        type Events = NoEvents;

        async fn container_events(&self) -> Result<NoEvents, CriError> {
            self.inner.container_events().await
        }
    }

    /// A pulled image: it has a repo digest, so `--protect-irreplaceable` (on by default)
    /// does not keep it.
    fn image(id: &str, size: u64) -> RuntimeImage {
        RuntimeImage {
            id: ImageId(id.to_owned()),
            repo_digests: vec![format!("registry.example/app@{id}")],
            size,
            ..RuntimeImage::default()
        }
    }

    /// An agent over `runtime` with detect every 300 s, the image cache every 30 s and GC
    /// every 600 s, its database and admin socket in `dir`.
    fn agent_in(dir: &Path, runtime: Recorder) -> Arc<Agent<Recorder>> {
        let flags = FlagValues {
            db: Some(dir.join("records.redb")),
            admin_socket: Some(dir.join("admin.sock")),
            detect_period: Some("300s".into()),
            image_cache_period: Some("30s".into()),
            gc_period: Some("600s".into()),
            minimum_image_ttl_duration: Some("0s".into()),
            ..FlagValues::default()
        };
        let config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
        let clock = Arc::new(crate::clock::ManualClock::new(
            crate::model::UnixNanos::from_secs(1_800_000_000),
        ));
        Arc::new(Agent::with_runtime(config, clock, runtime).expect("agent"))
    }

    /// Node Events as published, in order.
    #[derive(Debug, Default, Clone)]
    struct RecordedEvents(Arc<Mutex<Vec<NodeEvent>>>);

    impl EventSink for RecordedEvents {
        fn publish(&self, event: NodeEvent) {
            lock_ignoring_poison(&self.0).push(event);
        }
    }

    /// `imagekeeper_image_pins` counts the operator pins in force at the agent's clock: an
    /// expired one (not pruned yet) is left out.
    #[tokio::test(start_paused = true)]
    async fn the_pins_gauge_counts_the_pins_in_force() {
        let dir = tempfile::tempdir().expect("temp dir");
        let agent = agent_in(dir.path(), Recorder::new());
        assert!(
            agent
                .render_metrics()
                .contains("\nimagekeeper_image_pins 0\n"),
            "no pins yet"
        );
        let now = agent.clock.now();
        let mut batch = crate::store::Batch::new();
        for (image, until) in [
            ("forever:1", UnixNanos::NEVER),
            ("later:1", UnixNanos(now.0 + 1_000_000_000)),
            ("expired:1", UnixNanos(now.0 - 1)),
        ] {
            batch.put_pin(
                PinKey::new(image, ""),
                ImagePin {
                    created_at: now,
                    until,
                    reason: String::new(),
                },
            );
        }
        agent.store.apply(&batch).expect("pins written");
        let metrics = agent.render_metrics();
        assert!(
            metrics.contains("\nimagekeeper_image_pins 2\n"),
            "{metrics}"
        );
    }

    /// The agent's GC cycle tells its Node Events what it removed and why it failed.
    #[tokio::test(start_paused = true)]
    async fn a_gc_cycle_publishes_node_events_for_its_removals_and_its_failure() {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = Recorder::new();
        runtime.inner.state().images = vec![image("sha256:a", 700)].into();
        // 90 % used (capacity 1000, 100 available): above the default 85.
        runtime.inner.state().fs = Some((1000, 100));
        let events = RecordedEvents::default();
        let Ok(agent) = Arc::try_unwrap(agent_in(dir.path(), runtime.clone())) else {
            panic!("agent_in returns the only reference");
        };
        let agent = agent.with_node_events(NodeEvents::new(Box::new(events.clone())));
        let now = crate::model::UnixNanos::from_secs(1_800_000_100);
        agent.garbage_collect_cycle(now).await;
        assert_eq!(runtime.inner.state().removed, ["sha256:a"]);
        // Nothing left to remove, and the disk full again: the kubelet's FreeDiskSpaceFailed.
        runtime.inner.state().fs = Some((1000, 50));
        agent.garbage_collect_cycle(now).await;
        let said = lock_ignoring_poison(&events.0).clone();
        let reasons: Vec<(NodeEventType, &str)> =
            said.iter().map(|e| (e.type_, e.reason)).collect();
        assert_eq!(
            reasons,
            [
                (NodeEventType::Normal, "ImageGarbageCollected"),
                (NodeEventType::Warning, "FreeDiskSpaceFailed")
            ],
            "{said:?}"
        );
        assert_eq!(
            said[0].note,
            format!(
                "Removed 1 image, freed 700 bytes ({0}): a ({0})",
                crate::format::format_size(700)
            )
        );
    }

    /// A metrics endpoint that fails its setup after the admin socket is bound: `serve` names
    /// the step, as `imagekeeper run` always did, removes the socket it bound, and never
    /// reports itself bound. The
    /// "listener" is a regular file's descriptor, whose `local_addr` fails (ENOTSOCK) with no
    /// timing involved.
    #[tokio::test]
    async fn a_metrics_setup_failure_names_the_step_and_removes_the_bound_admin_socket() {
        use std::os::fd::{FromRawFd, IntoRawFd};
        let dir = tempfile::tempdir().expect("temp dir");
        let agent = agent_in(dir.path(), Recorder::new());
        let file = std::fs::File::create(dir.path().join("not-a-socket")).expect("file");
        // SAFETY: the descriptor is open and owned by nothing else from here on.
        let listener = unsafe { std::net::TcpListener::from_raw_fd(file.into_raw_fd()) };
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let mut listeners = Listeners::new(Some(listener));
        listeners.bound = Some(bound_tx);
        let err = agent
            .serve(listeners, std::future::pending(), Duration::from_secs(1))
            .await
            .expect_err("the metrics setup fails");
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(
            (err.to_string(), source.is_some()),
            ("the metrics endpoint's address".to_owned(), true),
            "{err:?}"
        );
        assert!(
            !dir.path().join("admin.sock").exists(),
            "the admin socket the agent bound is removed"
        );
        assert!(bound_rx.await.is_err(), "never reported bound");
    }

    /// Once set up, `serve` reports itself bound, with the admin socket there already.
    #[tokio::test]
    async fn serve_reports_bound_only_once_the_admin_socket_exists() {
        let dir = tempfile::tempdir().expect("temp dir");
        let agent = agent_in(dir.path(), Recorder::new());
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let listeners = Listeners {
            bound: Some(bound_tx),
            ..Listeners::default()
        };
        let serving = tokio::spawn(agent.clone().serve(
            listeners,
            async move {
                let _ = stop_rx.await;
            },
            Duration::from_secs(30),
        ));
        bound_rx.await.expect("reported bound");
        assert!(dir.path().join("admin.sock").exists());
        let _ = stop_tx.send(());
        serving.await.expect("join").expect("serve");
        assert!(!dir.path().join("admin.sock").exists());
    }

    /// The whole agent in-process (admin socket, loops) against a scripted runtime, under
    /// paused time: detect runs first, then the image cache, then GC (ImageFsInfo); then each
    /// loop keeps its own period; the admin socket answers meanwhile, and the image cache
    /// serves the runtime image gauges; at shutdown the socket is removed.
    #[tokio::test(start_paused = true)]
    async fn the_agent_runs_detect_then_image_cache_then_gc_and_each_on_its_period() {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = Recorder::new();
        runtime.inner.state().images = vec![image("sha256:a", 700), image("sha256:b", 300)].into();
        runtime.inner.state().fs = Some((1_000_000, 900_000));
        let agent = agent_in(dir.path(), runtime.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(agent.clone().serve(
            Listeners::default(),
            async move {
                let _ = stop_rx.await;
            },
            Duration::from_secs(30),
        ));
        // Just past the third detect (0, 300, 600).
        tokio::time::sleep(Duration::from_secs(601)).await;
        let first: Vec<&str> = lock_ignoring_poison(&runtime.calls)
            .iter()
            .take(7)
            .map(|(_, m)| *m)
            .collect();
        // Detect (ListImages, ListContainers), then the image cache (ListImages, and
        // ImageFsInfo for the filesystem gauges), then GC (its own detect, and ImageFsInfo for
        // the space pass).
        assert_eq!(
            first,
            [
                "ListImages",
                "ListContainers",
                "ListImages",
                "ImageFsInfo",
                "ListImages",
                "ListContainers",
                "ImageFsInfo"
            ]
        );
        // Detect every 300 s, GC every 600 s (each with its detect's ListContainers).
        assert_eq!(runtime.calls("ListContainers"), [0, 0, 300, 600, 600]);
        // The image cache every 30 s, GC at 0 and 600.
        let mut want_fs: Vec<u64> = (0..=600).step_by(30).collect();
        want_fs.insert(0, 0);
        want_fs.push(600);
        assert_eq!(runtime.calls("ImageFsInfo"), want_fs);
        assert_eq!(*agent.detect_state().borrow(), DetectState::Done);
        let metrics = agent.render_metrics();
        assert!(
            metrics.contains("\nimagekeeper_runtime_images 2\n"),
            "{metrics}"
        );
        assert!(
            metrics.contains("\nimagekeeper_runtime_images_size_bytes 1000\n"),
            "{metrics}"
        );
        // The admin socket the agent owns answers.
        let mut client = crate::admin::AdminClient::connect(&dir.path().join("admin.sock"))
            .await
            .expect("connect");
        let outcome = client.garbage_collect(true).await.expect("dry run");
        assert!(outcome.dry_run && outcome.error.is_none(), "{outcome:?}");
        drop(client);
        stop_tx.send(()).expect("the agent waits for the stop");
        serving.await.expect("join").expect("served");
        assert!(
            !dir.path().join("admin.sock").exists(),
            "the agent removed its socket"
        );
    }

    /// A removal the runtime refuses is counted and exported as
    /// `imagekeeper_image_gc_remove_failures_total`; the other image goes.
    #[tokio::test(start_paused = true)]
    async fn a_refused_removal_is_exported_as_image_gc_remove_failures_total() {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = Recorder::new();
        runtime.inner.state().images =
            vec![image("sha256:stuck", 10), image("sha256:b", 10)].into();
        runtime.inner.state().fs = Some((1_000_000, 900_000));
        runtime
            .inner
            .state()
            .remove_fails
            .insert("sha256:stuck".into());
        let agent = agent_in(dir.path(), runtime.clone());
        let before = agent.render_metrics();
        assert!(
            before.contains("\nimagekeeper_image_gc_remove_failures_total 0\n"),
            "{before}"
        );
        let outcome = agent.delete_unused(false).await;
        assert!(outcome.error.is_some(), "{outcome:?}");
        assert_eq!(runtime.inner.state().removed, ["sha256:b"]);
        let after = agent.render_metrics();
        assert!(
            after.contains("\nimagekeeper_image_gc_remove_failures_total 1\n"),
            "{after}"
        );
    }

    /// A runtime that is not there: detect and the image cache retry at 1 s, 2 s, 4 s ...
    /// (GC too), not at their periods; once it is back they return to their periods.
    #[tokio::test(start_paused = true)]
    async fn an_unreachable_runtime_is_retried_at_1_2_4_8_seconds_then_the_period_resumes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = Recorder::new();
        runtime.inner.state().down = Some("connection refused".into());
        runtime.inner.state().fs = Some((1_000_000, 900_000));
        let agent = agent_in(dir.path(), runtime.clone());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(agent.clone().run(
            async move {
                let _ = stop_rx.await;
            },
            Duration::from_secs(30),
        ));
        tokio::time::sleep(Duration::from_millis(15_500)).await;
        runtime.inner.state().down = None;
        tokio::time::sleep(Duration::from_secs(300)).await;
        // Each of the three loops (detect, image cache, GC: each lists images) tried at 0,
        // then +1, +2, +4, +8 (15 s) while down; up from 15.5 s, so the tries at 31 s succeed.
        // Then the image cache every 30 s; detect's next is at 331, GC's at 631.
        let mut per_second = BTreeMap::new();
        for t in runtime.calls("ListImages") {
            *per_second.entry(t).or_insert(0) += 1;
        }
        let mut want: BTreeMap<u64, u32> = [0, 1, 3, 7, 15, 31].map(|t| (t, 3)).into();
        want.extend((61..=301).step_by(30).map(|t| (t, 1)));
        assert_eq!(per_second, want);
        // ListContainers only once the runtime answers: detect's and GC's at 31.
        assert_eq!(runtime.calls("ListContainers"), [31, 31]);
        // The GC cycles as the alerts see them: five failed (0, 1, 3, 7, 15 s), one succeeded
        // (31 s); and the thresholds in force (the kubelet's defaults here).
        let metrics = agent.render_metrics();
        for line in [
            "\nimagekeeper_image_gc_cycles_total{result=\"failure\"} 5\n",
            "\nimagekeeper_image_gc_cycles_total{result=\"success\"} 1\n",
            "\nimagekeeper_image_gc_high_threshold_percent 85\n",
            "\nimagekeeper_image_gc_low_threshold_percent 80\n",
        ] {
            assert!(metrics.contains(line), "{line:?} in {metrics}");
        }
        stop_tx.send(()).expect("the agent waits for the stop");
        running.await.expect("join");
    }

    /// Shutdown with a cycle that never ends: the agent waits the grace period, exactly, and
    /// then returns (abandoning the cycle); with a cycle that ends, it returns at once.
    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_the_grace_period_for_a_stuck_cycle_and_no_longer() {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = Recorder::new();
        runtime.inner.state().fs = Some((1_000_000, 900_000));
        runtime
            .park
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let agent = agent_in(dir.path(), runtime.clone());
        let grace = Duration::from_secs(42);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(agent.clone().run(
            async move {
                let _ = stop_rx.await;
            },
            grace,
        ));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            runtime.calls("ListImages"),
            [0],
            "the first detect is parked"
        );
        let asked = Instant::now();
        stop_tx.send(()).expect("the agent waits for the stop");
        running.await.expect("join");
        assert_eq!(asked.elapsed(), grace);
    }

    #[test]
    fn loop_backoff_doubles_from_one_second_up_to_the_period_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(10));
        let delays: Vec<u64> = (0..6).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(b.reset(), Duration::from_secs(10));
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }
}
