//! Building the agent: [`Agent::start`] (the CRI client) and [`Agent::with_runtime`] (any
//! [`AgentRuntime`]) open the store, record the start and wire the GC manager, the image
//! manager and the runtime pins together; the accessors the binary, the admin server and the
//! tests read.
//!
//! Invariants: the GC manager and the image manager share one registry of pulls in flight; the
//! warm set's `for` lifetimes count from the start; nothing here runs a cycle.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::clock::{Clock, TokioPause};
use crate::cri::CriClient;
use crate::gc::ImageGcManager;
use crate::pull::{ImageManager, PullsInFlight};
use crate::store::{Batch, Store, meta_keys};

use super::*;

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
            .with_watch_period(config.detect_period.min(config.gc_period))
            // The wait for the runtime to release MaxAge's removals pauses on tokio's timer.
            .with_release_pause(Arc::new(TokioPause));
        // With the cluster signals, a CronJob's images are kept from the lead before its run.
        if config.cluster_signals {
            gc.cluster_signals()
                .set_lead(config.cluster_signals_cronjob_lead);
            gc.cluster_signals()
                .set_keep_share(config.cluster_signals_keep_share);
        }
        // The GC loop's deletion and skip series exist at 0 from the start (KEP-6053's, for
        // the dashboard's rates before the first removal).
        gc.metrics().attempts().seed(
            crate::gc::GcOperation::GarbageCollect,
            crate::gc::GcTrigger::Periodic,
        );
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
        let runtime_pins = runtime_pins::RuntimePinner::new(
            config.runtime_pins,
            &config.containerd_address,
            runtime_pins::instance_id(&store)?,
        )
        .map_err(|e| ConfigError::Invalid {
            origin: "containerdAddress".to_owned(),
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
            signal_record: tokio::sync::Mutex::new(None),
            warm_last: Mutex::new(None),
            warm_logged: Mutex::new(Default::default()),
            prefetch_logged: Mutex::new(Default::default()),
            warm_table_cleared: std::sync::atomic::AtomicBool::new(false),
            warm_settled: Mutex::new(None),
            warm_waits_for_change: std::sync::atomic::AtomicBool::new(false),
            warm_wanted: tokio::sync::Notify::new(),
            runtime_pins_turn: tokio::sync::Mutex::new(()),
            runtime_pins_wanted: tokio::sync::Notify::new(),
            keep_sets_wanted: tokio::sync::Notify::new(),
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

    /// The record database the agent opened.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The GC manager the detect, image cache and GC loops run.
    pub fn gc_manager(&self) -> &ImageGcManager<R> {
        &self.gc
    }

    /// The counters the agent keeps for `/metrics`.
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
    /// Runtime pins that cannot be carried (containerd's Images service failing or not
    /// answering within its bound) leave the agent ready (its GC works) with a `degraded:`
    /// line that says so: the kubelet's image GC and eviction may then remove its keeps.
    pub fn readiness(&self) -> Result<String, String> {
        let ready = self
            .health
            .readiness(self.store.is_healthy(), self.clock.now());
        let Some(why) = self.runtime_pins.failure() else {
            return ready;
        };
        let degraded = format!(
            "degraded: the runtime pins cannot be carried to containerd ({why}): the kubelet's image GC and eviction manager may remove imagekeeper's keeps\n"
        );
        match ready {
            Ok(text) => Ok(text + &degraded),
            Err(text) => Err(text + &degraded),
        }
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
}
