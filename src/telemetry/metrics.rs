//! The agent's Prometheus exposition: the one module that registers and encodes metrics, with
//! the `prometheus-client` crate (OpenMetrics text). The layers keep owning their counters
//! (`gc::metrics::GcMetrics`, `pull::metrics::PullMetrics`, the store's commit and reopen
//! counts, atomics or small locked maps); each scrape copies them into a [`Snapshot`], which a
//! `prometheus-client` collector encodes under the prefix `imagekeeper_`.
//!
//! Invariants: every metric name starts with `imagekeeper_` and keeps the kubelet's name,
//! suffixes and labels where the kubelet has the metric (`kubelet_image_garbage_collected_total`
//! becomes `imagekeeper_image_garbage_collected_total{reason}`), or where a KEP proposes it:
//! the image GC series of KEP-6053 as proposed (alpha, text of 2026; `gc::attempt` holds their
//! label values and how imagekeeper's cycles map onto them); no label takes an image name
//! (labels are fixed enums: reasons, size buckets, pull policies); a scrape never writes the
//! store; every family is one entry of [`METRICS`], the single list the encoder and the
//! generated reference (`docs/src/reference/metrics.md`) read. To add a metric: keep its
//! counter in its layer, copy it in `Snapshot::gather`, add its [`MetricFamily`] to
//! [`METRICS`], encode it in `Snapshot::encode` with that entry, and run `scripts/docs`.
//!
//! This file holds what the agent keeps ([`AgentMetrics`]) and the copy a scrape takes
//! (`Snapshot::gather`); the family list is `metrics/families.rs`, the encoder
//! `metrics/encode.rs`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tracing::warn;

use crate::gc::metrics::GcProgress;
use crate::gc::{AttemptCounts, AttemptResult, GcOperation, GcReport, GcTrigger, ImageGcManager};
use crate::model::UnixNanos;
use crate::pull::metrics::{EnsureLabels, Histogram};
use crate::pull::{BackoffStore, ImageManager, PullRuntime};
use crate::runtime::ImageRuntime;
use crate::store::Store;
use crate::warm::{WarmPlan, WarmState};

mod encode;
mod families;
#[cfg(test)]
mod tests;

pub use families::{METRICS, MetricFamily, MetricKind};

/// The prefix of every metric name (with `_` after it).
pub(crate) const METRIC_PREFIX: &str = "imagekeeper";

/// The Content-Type of [`AgentMetrics::render`]'s text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// kubelet's buckets for GC durations (prometheus.DefBuckets).
const GC_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The crate's version (Cargo.toml's `version`).
pub(super) const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git revision the crate was built from (`build.rs`; "unknown" when built outside a git
/// checkout without `IMAGEKEEPER_REVISION`).
pub(super) const BUILD_REVISION: &str = env!("IMAGEKEEPER_REVISION");

/// The labels of `image_gc_duration_seconds` (KEP-6053): operation, trigger, result.
pub(crate) type DurationLabels = (GcOperation, GcTrigger, AttemptResult);

/// Metrics the agent itself keeps.
#[derive(Debug)]
pub struct AgentMetrics {
    /// The durations of the GC attempts the agent ran, by KEP-6053's labels.
    gc_durations: Mutex<BTreeMap<DurationLabels, Histogram>>,
    /// Configuration reloads: [successes, failures].
    config_reloads: [std::sync::atomic::AtomicU64; 2],
    /// GC cycles the agent ran: [succeeded, failed].
    gc_cycles: [std::sync::atomic::AtomicU64; 2],
    /// Whether the image cache (the GC manager's `image_list`) has been filled once: the
    /// runtime image gauges are exported from then on.
    image_cache_filled: std::sync::atomic::AtomicBool,
    /// The last warm cycle's entries by state (`WarmState::ALL`'s order), once one ran.
    warm_images: Mutex<Option<[u64; WarmState::ALL.len()]>>,
    /// Warm pulls (and `restore`'s): [succeeded, failed].
    warm_pulls: [std::sync::atomic::AtomicU64; 2],
    /// Warm cycles whose bound pods' prefetch yielded to the kubelet's pulls.
    prefetch_yields: std::sync::atomic::AtomicU64,
    /// The runtime pins, once `auto` decided (or with `off`).
    runtime_pins: Mutex<Option<RuntimePinsSample>>,
    /// The last disk accounting (`diskAccountingPeriod`), once one succeeded.
    disk: Mutex<Option<DiskSample>>,
    /// Disk accountings: [succeeded, failed].
    disk_accountings: [std::sync::atomic::AtomicU64; 2],
    /// The agent's own orphan prunes (`diskPruneOrphans`): [removed, failed, skipped].
    disk_orphans_pruned: [std::sync::atomic::AtomicU64; 3],
    /// The bytes those removals freed.
    disk_orphans_pruned_bytes: std::sync::atomic::AtomicU64,
}

/// What the disk accounting's metrics show: the image filesystem's bytes and inodes by owner
/// kind (`inspect disk`'s totals) and what no owner explains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskSample {
    /// Each owner kind's bytes and inodes (`criImage`, `orphanSnapshot`, ...), in the report's
    /// order.
    pub owners: Vec<(&'static str, u64, u64)>,
    /// The filesystem's used bytes less the owners' (0 when the stores count more).
    pub unexplained_bytes: u64,
    /// The filesystem's bytes in use.
    pub used_bytes: u64,
}

/// What the runtime pins' metrics show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RuntimePinsSample {
    /// Labels are written (`auto` on a runtime that carries pins).
    pub enabled: bool,
    /// Kept images CRI ListImages listed as pinned at the last detect.
    pub pinned_images: u64,
    /// Kept images whose pinned label and CRI `pinned` flag disagreed at the last reconcile.
    pub disagreeing_images: u64,
    /// containerd names labelled by other imagekeeper instances at the last reconcile.
    pub other_instance_names: u64,
    /// Names this agent labelled whose own label another client stripped, the pinned label
    /// left, at the last reconcile.
    pub orphaned_names: u64,
    /// Names carrying this agent's labels it never wrote (its record does not hold them) at the
    /// last reconcile.
    pub foreign_names: u64,
    /// The last reconcile did not carry every keep (or was given up on).
    pub failing: bool,
    /// Label writes: [succeeded, failed].
    pub writes: [u64; 2],
}

impl Default for AgentMetrics {
    fn default() -> AgentMetrics {
        AgentMetrics {
            gc_durations: Mutex::new(BTreeMap::new()),
            config_reloads: Default::default(),
            gc_cycles: Default::default(),
            image_cache_filled: std::sync::atomic::AtomicBool::new(false),
            warm_images: Mutex::new(None),
            warm_pulls: Default::default(),
            prefetch_yields: Default::default(),
            runtime_pins: Mutex::new(None),
            disk: Mutex::new(None),
            disk_accountings: Default::default(),
            disk_orphans_pruned: Default::default(),
            disk_orphans_pruned_bytes: Default::default(),
        }
    }
}

impl AgentMetrics {
    /// A GC attempt the agent ran took `took`: observed under the labels its report's
    /// attempt carries (an attempt without them is not observed: every cycle sets them).
    pub(crate) fn observe_gc(&self, report: &GcReport, took: Duration) {
        let Some(attempt) = report.attempt else {
            return;
        };
        let labels = (attempt.operation, attempt.trigger, attempt.result);
        let mut durations = self
            .gc_durations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        durations
            .entry(labels)
            .or_insert_with(|| Histogram::new(GC_BUCKETS))
            .observe(took.as_secs_f64());
    }

    /// The image cache was refreshed: its images are the runtime image gauges' values.
    pub(crate) fn image_cache_filled(&self) {
        self.image_cache_filled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A GC cycle ended, without an error or with one.
    pub(crate) fn record_gc_cycle(&self, success: bool) {
        self.gc_cycles[usize::from(!success)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A warm cycle's plan: its entries counted by state.
    pub(crate) fn record_warm_plan(&self, plan: &WarmPlan) {
        let counts = WarmState::ALL.map(|state| plan.count(state) as u64);
        match self.warm_images.lock() {
            Ok(mut w) => *w = Some(counts),
            Err(p) => *p.into_inner() = Some(counts),
        }
    }

    /// The runtime pins after a reconcile (or a decision).
    pub(crate) fn record_runtime_pins(&self, sample: RuntimePinsSample) {
        match self.runtime_pins.lock() {
            Ok(mut w) => *w = Some(sample),
            Err(p) => *p.into_inner() = Some(sample),
        }
    }

    /// A disk accounting ended: its sample, or `None` when it failed (the last sample stays).
    pub(crate) fn record_disk(&self, sample: Option<DiskSample>) {
        self.disk_accountings[usize::from(sample.is_none())]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(sample) = sample {
            match self.disk.lock() {
                Ok(mut w) => *w = Some(sample),
                Err(p) => *p.into_inner() = Some(sample),
            }
        }
    }

    /// The agent's own orphan prune ended: how many were removed, failed and skipped, and the
    /// removed ones' bytes.
    pub(crate) fn record_orphans_pruned(&self, counts: [u64; 3], bytes: u64) {
        for (counter, n) in self.disk_orphans_pruned.iter().zip(counts) {
            counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        self.disk_orphans_pruned_bytes
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// A warm (or restore) pull ended.
    /// A warm cycle added no bound pod's image: the kubelet was pulling.
    pub(crate) fn record_prefetch_yielded(&self) {
        self.prefetch_yields
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn record_warm_pull(&self, success: bool) {
        self.warm_pulls[usize::from(!success)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn record_reload(&self, success: bool) {
        self.config_reloads[usize::from(!success)]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Renders every metric in the OpenMetrics text format (ends with `# EOF`), but
    /// `imagekeeper_image_pins`, which needs the time (`render_at`, the agent's).
    pub fn render<R: ImageRuntime, P: PullRuntime, S: BackoffStore>(
        &self,
        gc: &ImageGcManager<R>,
        images: &ImageManager<P, S>,
        store: &Store,
    ) -> String {
        self.render_snapshot(Snapshot::gather(self, gc, images, store, None))
    }

    /// Renders every metric in the OpenMetrics text format (ends with `# EOF`), the pins in
    /// force counted at `now` (the agent's clock).
    pub(crate) fn render_at<R: ImageRuntime, P: PullRuntime, S: BackoffStore>(
        &self,
        gc: &ImageGcManager<R>,
        images: &ImageManager<P, S>,
        store: &Store,
        now: UnixNanos,
    ) -> String {
        self.render_snapshot(Snapshot::gather(self, gc, images, store, Some(now)))
    }

    fn render_snapshot(&self, snapshot: Snapshot) -> String {
        let mut registry = Registry::with_prefix(METRIC_PREFIX);
        registry.register_collector(Box::new(snapshot));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            // Writing to a String does not fail; an encoder error would be a bug of ours.
            warn!(error = %e, "metrics: cannot encode");
        }
        out
    }
}

/// Every value of one scrape, copied from the layers that own them.
#[derive(Debug)]
struct Snapshot {
    collected: [(&'static str, u64); 4],
    rescued: Vec<(&'static str, u64)>,
    remove_failures: u64,
    /// The image cache's (count, total bytes), once it has been filled.
    runtime_images: Option<(u64, u64)>,
    future_stamps_clamped: u64,
    clock_went_back: u64,
    /// GC cycles whose wait for the runtime's release reached its bound.
    release_wait_timeouts: u64,
    /// Kubelet pull intents older than the intent max age at the last read, when read.
    kubelet_stale_intents: Option<u64>,
    progress: GcProgress,
    image_fs: Option<(u64, u64)>,
    /// The image filesystem's inodes (total, free, used by images when reported).
    image_fs_inodes: Option<(u64, u64, Option<u64>)>,
    gc_durations: BTreeMap<DurationLabels, Histogram>,
    /// KEP-6053's attempt, freed, target, deletion, skip and usage series.
    attempts: AttemptCounts,
    pull_durations: BTreeMap<&'static str, Histogram>,
    ensure_requests: BTreeMap<EnsureLabels, u64>,
    store_healthy: bool,
    store_reopens: u64,
    records: Option<u64>,
    /// Operator pins in force at the scrape's time, when the store could be read.
    pins: Option<u64>,
    commits: u64,
    commit_seconds: f64,
    /// Configuration reloads: [successes, failures].
    config_reloads: [u64; 2],
    /// GC cycles: [succeeded, failed].
    gc_cycles: [u64; 2],
    /// The byte thresholds in force (high, low), in percent.
    thresholds: (i64, i64),
    repulls: [(&'static str, u64); 6],
    repull_delays: Histogram,
    warm_images: Option<[u64; WarmState::ALL.len()]>,
    warm_pulls: [u64; 2],
    prefetch_yields: u64,
    runtime_pins: Option<RuntimePinsSample>,
    /// The cluster signals, once their watch started.
    cluster_signals: Option<crate::gc::BoundPodsSample>,
    /// The CronJobs' and ReplicaSets' signals, once one of their watches started.
    cluster_knowledge: Option<crate::gc::ClusterSignalsSample>,
    /// The last disk accounting, once one succeeded; the accountings [succeeded, failed].
    disk: (Option<DiskSample>, [u64; 2]),
    /// The agent's own orphan prunes: [removed, failed, skipped], and the removed bytes.
    disk_orphans_pruned: ([u64; 3], u64),
}

impl Snapshot {
    fn gather<R: ImageRuntime, P: PullRuntime, S: BackoffStore>(
        agent: &AgentMetrics,
        gc: &ImageGcManager<R>,
        images: &ImageManager<P, S>,
        store: &Store,
        now: Option<UnixNanos>,
    ) -> Snapshot {
        let g = gc.metrics();
        // Before the record count, whose read of the store reopens it after an I/O failure:
        // the gauge is the state as the scrape found it.
        let store_healthy = store.is_healthy();
        let records = match store.len() {
            Ok(n) => Some(n),
            Err(e) => {
                warn!(error = %e, "metrics: cannot count records");
                None
            }
        };
        let pins = now.and_then(|now| match store.pins() {
            Ok(pins) => Some(pins.iter().filter(|(_, pin)| pin.active_at(now)).count() as u64),
            Err(e) => {
                warn!(error = %e, "metrics: cannot count pins");
                None
            }
        });
        Snapshot {
            collected: g.collected(),
            rescued: g.rescued().to_vec(),
            remove_failures: g.remove_failures(),
            runtime_images: agent
                .image_cache_filled
                .load(std::sync::atomic::Ordering::Relaxed)
                .then(|| gc.image_list_totals()),
            future_stamps_clamped: g.future_stamps_clamped(),
            clock_went_back: g.clock_went_back(),
            release_wait_timeouts: g.release_wait_timeouts(),
            kubelet_stale_intents: gc.kubelet_stale_intents(),
            progress: g.progress(),
            image_fs: g.image_fs(),
            image_fs_inodes: g.image_fs_inodes(),
            gc_durations: match agent.gc_durations.lock() {
                Ok(h) => h.clone(),
                Err(p) => p.into_inner().clone(),
            },
            attempts: g.attempts().counts(),
            pull_durations: images.metrics().snapshot(),
            ensure_requests: images.metrics().ensure_requests(),
            store_healthy,
            store_reopens: store.reopens(),
            records,
            pins,
            commits: store.commits(),
            commit_seconds: store.commit_nanos_total() as f64 / 1e9,
            repulls: g.repulls().counts(),
            repull_delays: g.repulls().delays(),
            config_reloads: [0, 1]
                .map(|i| agent.config_reloads[i].load(std::sync::atomic::Ordering::Relaxed)),
            gc_cycles: [0, 1]
                .map(|i| agent.gc_cycles[i].load(std::sync::atomic::Ordering::Relaxed)),
            warm_images: match agent.warm_images.lock() {
                Ok(w) => *w,
                Err(p) => *p.into_inner(),
            },
            warm_pulls: [0, 1]
                .map(|i| agent.warm_pulls[i].load(std::sync::atomic::Ordering::Relaxed)),
            prefetch_yields: agent
                .prefetch_yields
                .load(std::sync::atomic::Ordering::Relaxed),
            runtime_pins: match agent.runtime_pins.lock() {
                Ok(w) => *w,
                Err(p) => *p.into_inner(),
            },
            cluster_signals: gc.cluster_signals().with_watches(gc.bound_pods().sample()),
            cluster_knowledge: now.and_then(|now| gc.cluster_signals().sample(now)),
            disk: (
                match agent.disk.lock() {
                    Ok(w) => w.clone(),
                    Err(p) => p.into_inner().clone(),
                },
                [0, 1]
                    .map(|i| agent.disk_accountings[i].load(std::sync::atomic::Ordering::Relaxed)),
            ),
            disk_orphans_pruned: (
                [0, 1, 2].map(|i| {
                    agent.disk_orphans_pruned[i].load(std::sync::atomic::Ordering::Relaxed)
                }),
                agent
                    .disk_orphans_pruned_bytes
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            thresholds: {
                let config = gc.config();
                (
                    config.policy.high_threshold_percent,
                    config.policy.low_threshold_percent,
                )
            },
        }
    }
}
