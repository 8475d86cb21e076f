//! The agent: opens the store, connects to the runtime and runs the kubelet's loops — detect
//! every 5 minutes, the image cache every 30 seconds, GC every 5 minutes — plus the container
//! events watcher ([`events`]), the admin socket and the metrics endpoint. It owns wiring and scheduling only; what a cycle does lives
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
//! back. A reload ([`reload`], on SIGHUP) swaps the GC settings between cycles, never within
//! one, and keeps the running configuration when the file is invalid. [`Agent::detect_state`]
//! says when the first detect is done (the service manager's readiness, [`notify`]).

pub mod config;
pub mod events;
mod health;
mod http;
mod metrics;
pub mod notify;
pub mod reload;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::admin::{AdminBackend, AdminError, EnsureRequest, GcOutcome};
use crate::clock::Clock;
use crate::cri::{CriClient, CriError};
use crate::gc::{CycleTime, GcError, ImageGcManager};
use crate::pull::{ImageManager, PodRef, PullAuth, PullError, PullPolicy, PullsInFlight};
use crate::store::{Batch, Store, StoreError, StoredRecord, meta_keys};

pub use config::{AgentConfig, ConfigError, FileConfig, FlagValues};
pub use health::Health;
pub use http::{HttpEndpoints, HttpLimits, MAX_HEAD_BYTES, serve_http};
pub use metrics::{AgentMetrics, BUILD_REVISION, BUILD_VERSION, CONTENT_TYPE, METRIC_PREFIX};
pub use reload::{ConfigSource, ReloadReport};

/// Why the agent could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Runtime(#[from] CriError),
    #[error(transparent)]
    Gc(#[from] GcError),
    #[error("pull settings: {0}")]
    Pull(String),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("metrics endpoint {address}: {source}")]
    Metrics {
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A running node agent.
pub struct Agent {
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
    events_client: CriClient,
    store: Arc<Store>,
    gc: ImageGcManager<CriClient>,
    images: ImageManager<CriClient, Store>,
    clock: Arc<dyn Clock>,
    metrics: AgentMetrics,
    health: Health,
    gc_failed_before: Mutex<bool>,
    gc_last_unreachable: Mutex<bool>,
}

/// Where the agent's first detect stands: the service manager is told the agent is ready
/// once it is `Done` (the database is open and the runtime's images are recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
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

impl Agent {
    /// Opens the store, records the start, and connects (lazily) to the runtime.
    pub async fn start(config: AgentConfig, clock: Arc<dyn Clock>) -> Result<Agent, AgentError> {
        let now = clock.now();
        let store = Arc::new(Store::open(&config.db, now)?);
        let mut batch = Batch::new();
        batch.set_meta(meta_keys::AGENT_STARTED_AT, now.0);
        store.apply(&batch)?;
        let client = CriClient::connect(config.cri.clone()).await?;
        // One registry of pulls in flight: GC keeps what the image manager is pulling.
        let in_flight = PullsInFlight::new();
        let gc = ImageGcManager::new(client.clone(), store.clone(), config.gc.clone())?
            .with_pulls_in_flight(in_flight.clone());
        let images = ImageManager::new(
            &config.pull,
            Arc::new(client.clone()),
            store.clone(),
            clock.clone(),
        )
        .map_err(|e| AgentError::Pull(e.to_string()))?
        .with_pulls_in_flight(in_flight)
        .with_credential_sources(Arc::new(
            config
                .credential_sources()
                .map_err(|e| AgentError::Pull(e.to_string()))?,
        ))
        .with_repull_metrics(gc.metrics().repulls().clone());
        let provider_config_at_start = config
            .credential_providers
            .as_ref()
            .and_then(|p| std::fs::read(&p.config).ok());
        Ok(Agent {
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
            gc_last_unreachable: Mutex::new(false),
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

    pub fn gc_manager(&self) -> &ImageGcManager<CriClient> {
        &self.gc
    }

    pub fn metrics(&self) -> &AgentMetrics {
        &self.metrics
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
        self.health.readiness(self.store.is_healthy())
    }

    /// `/healthz`: Ok while the process answers and its database file is still there.
    pub fn liveness(&self) -> Result<String, String> {
        // The database path is a flag only: a reload never changes it.
        let db = lock_ignoring_poison(&self.config).db.clone();
        Health::liveness(&db, self.store.is_healthy())
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn render_metrics(&self) -> String {
        self.metrics.render(&self.gc, &self.images, &self.store)
    }

    /// Runs the loops until `shutdown` resolves. The cycle in flight then gets `grace` to
    /// finish.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>, grace: Duration) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let events = {
            let agent = self.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move {
                events::watch_container_events(
                    &agent.events_client,
                    &agent.gc,
                    agent.clock.as_ref(),
                    stop,
                    |_| {},
                )
                .await
            })
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
        // Between cycles: give churned space back to the file system (store::compact).
        let _ = (self.gc.store().compact_if_needed())
            .inspect_err(|e| warn!(error = %e, "Cannot compact the database"));
        *lock_ignoring_poison(&self.gc_last_unreachable) =
            report.error.as_ref().is_some_and(runtime_unreachable);
        let mut failed_before = match self.gc_failed_before.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
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

impl AdminBackend for Agent {
    async fn ensure_image(&self, request: EnsureRequest) -> Result<String, String> {
        let policy = match request.pull_policy.as_str() {
            "" | "IfNotPresent" => PullPolicy::IfNotPresent,
            "Always" => PullPolicy::Always,
            "Never" => PullPolicy::Never,
            other => {
                return Err(format!(
                    "unknown pull policy {other:?}: Always, IfNotPresent or Never"
                ));
            }
        };
        let pod = PodRef {
            uid: request.pod_uid,
            namespace: request.pod_namespace,
            name: request.pod_name,
            annotations: Default::default(),
        };
        let mut pull_secrets = Vec::with_capacity(request.pull_secrets.len());
        for (i, secret) in request.pull_secrets.iter().enumerate() {
            let what = format!("pull secret {}", i + 1);
            match crate::pull::credentials::parse_pull_secret(&what, secret) {
                Ok(config) => pull_secrets.push(config),
                Err(e) => return Err(format!("InvalidPullSecret: {e}")),
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
            .map_err(|e: PullError| format!("{}: {}", e.reason(), e.message()))
    }

    async fn list_records(&self) -> Result<Vec<StoredRecord>, String> {
        let scan = self.store.eviction_order().map_err(|e| e.to_string())?;
        scan.collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())
    }

    async fn explain(&self) -> Result<String, String> {
        let plan = self
            .gc
            .plan(self.clock.now(), false)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_string(&plan.explanation).map_err(|e| e.to_string())
    }

    async fn garbage_collect(&self, dry_run: bool) -> GcOutcome {
        if dry_run {
            return GcOutcome::from_plan(self.gc.plan(self.clock.now(), false).await);
        }
        self.garbage_collect_cycle(&*self.clock).await
    }

    async fn delete_unused(&self, dry_run: bool) -> GcOutcome {
        if dry_run {
            return GcOutcome::from_plan(self.gc.plan(self.clock.now(), true).await);
        }
        GcOutcome::from_report(self.gc.delete_unused_images(&*self.clock).await, false)
    }
}

/// Removes a stale admin socket (ours from an earlier run) before binding: only a socket, and
/// only when a connect to it is refused (see [`crate::admin::remove_stale_socket`]).
pub fn remove_stale_socket(path: &Path) -> Result<(), AdminError> {
    crate::admin::remove_stale_socket(path)
}

impl HttpEndpoints for Agent {
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

    #[test]
    fn loop_backoff_doubles_from_one_second_up_to_the_period_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(10));
        let delays: Vec<u64> = (0..6).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(b.reset(), Duration::from_secs(10));
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }
}
