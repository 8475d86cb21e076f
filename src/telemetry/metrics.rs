//! The agent's Prometheus exposition: the one module that registers and encodes metrics, with
//! the `prometheus-client` crate (OpenMetrics text). The layers keep owning their counters
//! (`gc::metrics::GcMetrics`, `pull::metrics::PullMetrics`, the store's commit and reopen
//! counts, atomics or small locked maps); each scrape copies them into a [`Snapshot`], which a
//! `prometheus-client` collector encodes under the prefix `imagekeeper_`.
//!
//! Invariants: every metric name starts with `imagekeeper_` and keeps the kubelet's name,
//! suffixes and labels where the kubelet has the metric (`kubelet_image_garbage_collected_total`
//! becomes `imagekeeper_image_garbage_collected_total{reason}`); no label takes an image name
//! (labels are fixed enums: reasons, size buckets, pull policies); a scrape never writes the
//! store; every family is one entry of [`METRICS`], the single list the encoder and the
//! generated reference (`docs/src/reference/metrics.md`) read. To add a metric: keep its
//! counter in its layer, copy it in `Snapshot::gather`, add its [`MetricFamily`] to
//! [`METRICS`], encode it in `Snapshot::encode` with that entry, and run `scripts/docs`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tracing::warn;

use crate::cri::ImageRuntime;
use crate::gc::ImageGcManager;
use crate::gc::metrics::GcProgress;
use crate::model::{UnixNanos, saturating_total};
use crate::pull::metrics::{EnsureLabels, Histogram};
use crate::pull::{BackoffStore, ImageManager, PullRuntime};
use crate::store::Store;
use crate::warm::{WarmPlan, WarmState};

/// The prefix of every metric name (with `_` after it).
pub const METRIC_PREFIX: &str = "imagekeeper";

/// The Content-Type of [`AgentMetrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// kubelet's buckets for GC durations (prometheus.DefBuckets).
const GC_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The crate's version and the git revision it was built from (`build.rs`; "unknown" when
/// built outside a git checkout without `IMAGEKEEPER_REVISION`).
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const BUILD_REVISION: &str = env!("IMAGEKEEPER_REVISION");

/// Metrics the agent itself keeps.
#[derive(Debug)]
pub struct AgentMetrics {
    gc_durations: Mutex<Histogram>,
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
    /// The runtime pins, once `auto` decided (or with `off`).
    runtime_pins: Mutex<Option<RuntimePinsSample>>,
}

/// What the runtime pins' metrics show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimePinsSample {
    /// Labels are written (`auto` on a runtime that carries pins).
    pub enabled: bool,
    /// Kept images the runtime lists as pinned at the last reconcile.
    pub pinned_images: u64,
    /// Label writes: [succeeded, failed].
    pub writes: [u64; 2],
}

impl Default for AgentMetrics {
    fn default() -> AgentMetrics {
        AgentMetrics {
            gc_durations: Mutex::new(Histogram::new(GC_BUCKETS)),
            config_reloads: Default::default(),
            gc_cycles: Default::default(),
            image_cache_filled: std::sync::atomic::AtomicBool::new(false),
            warm_images: Mutex::new(None),
            warm_pulls: Default::default(),
            runtime_pins: Mutex::new(None),
        }
    }
}

impl AgentMetrics {
    pub fn observe_gc(&self, took: Duration) {
        match self.gc_durations.lock() {
            Ok(mut h) => h.observe(took.as_secs_f64()),
            Err(p) => p.into_inner().observe(took.as_secs_f64()),
        }
    }

    /// The image cache was refreshed: its images are the runtime image gauges' values.
    pub fn image_cache_filled(&self) {
        self.image_cache_filled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A GC cycle ended, without an error or with one.
    pub fn record_gc_cycle(&self, success: bool) {
        self.gc_cycles[usize::from(!success)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A warm cycle's plan: its entries counted by state.
    pub fn record_warm_plan(&self, plan: &WarmPlan) {
        let counts = WarmState::ALL.map(|state| plan.count(state) as u64);
        match self.warm_images.lock() {
            Ok(mut w) => *w = Some(counts),
            Err(p) => *p.into_inner() = Some(counts),
        }
    }

    /// The runtime pins after a reconcile (or a decision).
    pub fn record_runtime_pins(&self, sample: RuntimePinsSample) {
        match self.runtime_pins.lock() {
            Ok(mut w) => *w = Some(sample),
            Err(p) => *p.into_inner() = Some(sample),
        }
    }

    /// A warm (or restore) pull ended.
    pub fn record_warm_pull(&self, success: bool) {
        self.warm_pulls[usize::from(!success)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn record_reload(&self, success: bool) {
        self.config_reloads[usize::from(!success)]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Renders every metric in the OpenMetrics text format (ends with `# EOF`), but
    /// `imagekeeper_image_pins`, which needs the time ([`AgentMetrics::render_at`]).
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
    pub fn render_at<R: ImageRuntime, P: PullRuntime, S: BackoffStore>(
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
    /// Kubelet pull intents older than the intent max age at the last read, when read.
    kubelet_stale_intents: Option<u64>,
    progress: GcProgress,
    image_fs: Option<(u64, u64)>,
    /// The image filesystem's inodes (total, free, used by images when reported).
    image_fs_inodes: Option<(u64, u64, Option<u64>)>,
    gc_durations: Histogram,
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
    runtime_pins: Option<RuntimePinsSample>,
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
                .then(|| {
                    let images = gc.image_list();
                    (
                        images.len() as u64,
                        saturating_total(images.iter().map(|i| i.size)),
                    )
                }),
            future_stamps_clamped: g.future_stamps_clamped(),
            clock_went_back: g.clock_went_back(),
            kubelet_stale_intents: gc.kubelet_stale_intents(),
            progress: g.progress(),
            image_fs: g.image_fs(),
            image_fs_inodes: g.image_fs_inodes(),
            gc_durations: match agent.gc_durations.lock() {
                Ok(h) => h.clone(),
                Err(p) => p.into_inner().clone(),
            },
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
            runtime_pins: match agent.runtime_pins.lock() {
                Ok(w) => *w,
                Err(p) => *p.into_inner(),
            },
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

/// What kind of metric a family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    /// The OpenMetrics type name (`# TYPE` line).
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }

    fn metric_type(self) -> MetricType {
        match self {
            MetricKind::Counter => MetricType::Counter,
            MetricKind::Gauge => MetricType::Gauge,
            MetricKind::Histogram => MetricType::Histogram,
        }
    }
}

/// The unit a family's name ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricUnit {
    Bytes,
    Seconds,
}

impl MetricUnit {
    fn unit(self) -> &'static Unit {
        static BYTES: Unit = Unit::Bytes;
        static SECONDS: Unit = Unit::Seconds;
        match self {
            MetricUnit::Bytes => &BYTES,
            MetricUnit::Seconds => &SECONDS,
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            MetricUnit::Bytes => "bytes",
            MetricUnit::Seconds => "seconds",
        }
    }
}

/// One metric family the agent exports. [`METRICS`] lists them all: the exporter encodes each
/// family's name, type, unit and help from its entry (never from a second string), and the
/// reference page `docs/src/reference/metrics.md` is generated from the same list
/// (`scripts/docs`), so the two cannot drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricFamily {
    /// The name after `imagekeeper_`, without the unit suffix or the `_total` the encoder adds.
    pub name: &'static str,
    pub kind: MetricKind,
    pub unit: Option<MetricUnit>,
    /// The label names of every sample, in order (a unit test checks them against a scrape).
    pub labels: &'static [&'static str],
    pub help: &'static str,
    /// When the family is left out of a scrape; `None`: always there.
    pub absent_when: Option<&'static str>,
}

impl MetricFamily {
    /// The family's name on the wire: `imagekeeper_<name>[_<unit>]`; a counter's samples add
    /// `_total`, a histogram's `_bucket`, `_sum` and `_count`.
    pub fn exposed_name(&self) -> String {
        let mut name = format!("{METRIC_PREFIX}_{}", self.name);
        if let Some(unit) = self.unit {
            name.push('_');
            name.push_str(unit.suffix());
        }
        name
    }
}

const fn family(
    name: &'static str,
    kind: MetricKind,
    unit: Option<MetricUnit>,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricFamily {
    MetricFamily {
        name,
        kind,
        unit,
        labels,
        help,
        absent_when: None,
    }
}

const fn absent_when(family: MetricFamily, when: &'static str) -> MetricFamily {
    MetricFamily {
        absent_when: Some(when),
        ..family
    }
}

use MetricKind::{Counter as C, Gauge as G, Histogram as H};
use MetricUnit::{Bytes as B, Seconds as S};

const BUILD_INFO: MetricFamily = family(
    "build_info",
    G,
    None,
    &["version", "revision"],
    "The imagekeeper version and the git revision it was built from; always 1.",
);
const IMAGE_GARBAGE_COLLECTED: MetricFamily = family(
    "image_garbage_collected",
    C,
    None,
    &["reason"],
    "Images removed by GC, by reason.",
);
const GC_VICTIMS_RESCUED: MetricFamily = family(
    "gc_victims_rescued",
    C,
    None,
    &["why"],
    "Images GC chose but kept at its last look before removing them, by why.",
);
const IMAGE_GC_PROGRESS_RUNNING: MetricFamily = family(
    "image_gc_progress_running",
    G,
    None,
    &[],
    "Whether a GC cycle is running now.",
);
const IMAGE_GC_PROGRESS_REMOVED: MetricFamily = family(
    "image_gc_progress_removed",
    G,
    None,
    &[],
    "Images removed by the running (else the last) GC cycle.",
);
const IMAGE_GC_PROGRESS_FREED: MetricFamily = family(
    "image_gc_progress_freed",
    G,
    Some(B),
    &[],
    "Bytes freed by the running (else the last) GC cycle.",
);
const IMAGE_GC_REMOVE_FAILURES: MetricFamily = family(
    "image_gc_remove_failures",
    C,
    None,
    &[],
    "RemoveImage calls of GC that failed.",
);
const RUNTIME_IMAGES: MetricFamily = absent_when(
    family(
        "runtime_images",
        G,
        None,
        &[],
        "Images the runtime lists, as the image cache last saw them.",
    ),
    "until the image cache has been filled once",
);
const RUNTIME_IMAGES_SIZE: MetricFamily = absent_when(
    family(
        "runtime_images_size",
        G,
        Some(B),
        &[],
        "Total size of the images the runtime lists, as the image cache last saw them.",
    ),
    "until the image cache has been filled once",
);
const GC_FUTURE_STAMPS_CLAMPED: MetricFamily = family(
    "gc_future_stamps_clamped",
    C,
    None,
    &[],
    "Image records whose first_detected or last_used lay in the future (beyond the tolerance) and that detect clamped to its time.",
);
const GC_CLOCK_WENT_BACK: MetricFamily = family(
    "gc_clock_went_back",
    C,
    None,
    &[],
    "Detects that found the stored last_detect later than their own time (beyond the tolerance): the clock went back.",
);
const KUBELET_STALE_PULL_INTENTS: MetricFamily = absent_when(
    family(
        "kubelet_stale_pull_intents",
        G,
        None,
        &[],
        "Kubelet pull intents older than --kubelet-intent-max-age at the last read: they keep no image.",
    ),
    "until the kubelet's pull records have been read (never with --kubelet-root-dir \"\")",
);
const IMAGE_FS_CAPACITY: MetricFamily = absent_when(
    family(
        "image_fs_capacity",
        G,
        Some(B),
        &[],
        "Size of the image filesystem (statvfs of the mountpoint ImageFsInfo reports), as the last GC read it.",
    ),
    "until a GC has read the image filesystem",
);
const IMAGE_FS_INODES: MetricFamily = absent_when(
    family(
        "image_fs_inodes",
        G,
        None,
        &["kind"],
        "Inodes of the image filesystem as the last GC read them: capacity and free (statvfs f_files, f_ffree of the mountpoint ImageFsInfo reports) and, when the runtime reports it, those images use (ImageFsInfo inodes_used).",
    ),
    "until a GC has read the image filesystem's inodes",
);
const IMAGE_FS_AVAILABLE: MetricFamily = absent_when(
    family(
        "image_fs_available",
        G,
        Some(B),
        &[],
        "Bytes available to unprivileged users on the image filesystem, as the last GC read them.",
    ),
    "until a GC has read the image filesystem",
);
const IMAGE_REPULLS_AFTER_EVICTION: MetricFamily = family(
    "image_repulls_after_eviction",
    C,
    None,
    &["reason"],
    "Images pulled (or detected) again while the eviction journal held their removal, by the removal's reason (external: not removed by imagekeeper).",
);
const IMAGE_REPULL_DELAY: MetricFamily = family(
    "image_repull_delay",
    H,
    Some(S),
    &[],
    "Seconds from an image's removal to its re-pull.",
);
const IMAGE_GC_DURATION: MetricFamily = family(
    "image_gc_duration",
    H,
    Some(S),
    &[],
    "Duration of image GC cycles.",
);
const IMAGE_PULL_DURATION: MetricFamily = family(
    "image_pull_duration",
    H,
    Some(S),
    &["image_size_in_bytes"],
    "Duration of image pulls, by image size bucket (the kubelet's: N/A when the size is unknown).",
);
const ENSURE_IMAGE_REQUESTS: MetricFamily = family(
    "ensure_image_requests",
    C,
    None,
    &["pull_policy", "present_locally", "pull_required"],
    "EnsureImageExists requests by pull policy (always, ifnotpresent, never), presence and whether a pull was required (unknown: not determined), as the kubelet counts them.",
);
const STORE_HEALTHY: MetricFamily = family(
    "store_healthy",
    G,
    None,
    &[],
    "Whether the record store is usable (1), or failed an I/O operation (a full disk) and has not reopened yet (0).",
);
const STORE_REOPENS: MetricFamily = family(
    "store_reopens",
    C,
    None,
    &[],
    "Times the record store reopened its file after an I/O failure.",
);
const IMAGE_RECORDS: MetricFamily = absent_when(
    family("image_records", G, None, &[], "Image records in the store."),
    "when the scrape cannot count the records (the store failed)",
);
const IMAGE_PINS: MetricFamily = absent_when(
    family(
        "image_pins",
        G,
        None,
        &[],
        "Operator pins (`imagekeeper pin`) in force: names whose images GC never removes while the pin lasts (the config's pinnedImages patterns are not counted).",
    ),
    "when the scrape cannot read the pins (the store failed), or from `AgentMetrics::render` (no time given)",
);
const STORE_COMMIT_DURATION: MetricFamily = family(
    "store_commit_duration",
    H,
    Some(S),
    &[],
    "Durable commits of the record store.",
);
const CONFIG_RELOADS: MetricFamily = family(
    "config_reloads",
    C,
    None,
    &["result"],
    "Configuration reloads (SIGHUP), by result.",
);
const IMAGE_GC_CYCLES: MetricFamily = family(
    "image_gc_cycles",
    C,
    None,
    &["result"],
    "Image GC cycles the agent ran, by result (failure: the cycle ended with an error, as the kubelet's ImageGCFailed).",
);
const IMAGE_GC_HIGH_THRESHOLD_PERCENT: MetricFamily = family(
    "image_gc_high_threshold_percent",
    G,
    None,
    &[],
    "The imageGCHighThresholdPercent in force: GC starts when image filesystem use is above it.",
);
const IMAGE_GC_LOW_THRESHOLD_PERCENT: MetricFamily = family(
    "image_gc_low_threshold_percent",
    G,
    None,
    &[],
    "The imageGCLowThresholdPercent in force: GC frees down to it.",
);
const WARM_IMAGES: MetricFamily = absent_when(
    family(
        "warm_images",
        G,
        None,
        &["state"],
        "Warm set entries by state at the last warm cycle (does_not_fit: pulling it would take the image filesystem above the GC's low threshold).",
    ),
    "until the first warm cycle has run",
);
const RUNTIME_PINS_ENABLED: MetricFamily = absent_when(
    family(
        "runtime_pins_enabled",
        G,
        None,
        &[],
        "1 while the images imagekeeper keeps are labelled io.cri-containerd.pinned in containerd (--runtime-pins auto on containerd 1.7.3 and later); 0 when off (set off, or auto on containerd 1.6 or another runtime: the kubelet's image GC and eviction cannot see imagekeeper's keeps).",
    ),
    "until --runtime-pins auto has read the runtime's version",
);
const RUNTIME_PINNED_IMAGES: MetricFamily = absent_when(
    family(
        "runtime_pinned_images",
        G,
        None,
        &[],
        "Images imagekeeper keeps that containerd carries as pinned (one of their names labelled io.cri-containerd.pinned=pinned) at the last reconcile.",
    ),
    "until --runtime-pins auto has read the runtime's version",
);
const RUNTIME_PIN_WRITES: MetricFamily = absent_when(
    family(
        "runtime_pin_label_writes",
        C,
        None,
        &["result"],
        "Label writes of the runtime pins (containerd Images.Update), by result; a failed write is retried at the next cycle.",
    ),
    "until --runtime-pins auto has read the runtime's version",
);
const WARM_PULLS: MetricFamily = absent_when(
    family(
        "warm_pulls",
        C,
        None,
        &["result"],
        "Pulls of warm set entries and of restore, by result.",
    ),
    "until the first warm cycle has run",
);

/// Every metric family the agent exports, in the order a scrape encodes them. To add a
/// metric: add its entry here, encode it in `Snapshot::encode` with that entry, and run
/// `scripts/docs` to regenerate the reference page.
pub const METRICS: &[MetricFamily] = &[
    BUILD_INFO,
    IMAGE_GARBAGE_COLLECTED,
    GC_VICTIMS_RESCUED,
    IMAGE_GC_PROGRESS_RUNNING,
    IMAGE_GC_PROGRESS_REMOVED,
    IMAGE_GC_PROGRESS_FREED,
    IMAGE_GC_REMOVE_FAILURES,
    RUNTIME_IMAGES,
    RUNTIME_IMAGES_SIZE,
    GC_FUTURE_STAMPS_CLAMPED,
    GC_CLOCK_WENT_BACK,
    KUBELET_STALE_PULL_INTENTS,
    IMAGE_FS_CAPACITY,
    IMAGE_FS_AVAILABLE,
    IMAGE_FS_INODES,
    IMAGE_REPULLS_AFTER_EVICTION,
    IMAGE_REPULL_DELAY,
    IMAGE_GC_DURATION,
    IMAGE_PULL_DURATION,
    ENSURE_IMAGE_REQUESTS,
    STORE_HEALTHY,
    STORE_REOPENS,
    IMAGE_RECORDS,
    IMAGE_PINS,
    STORE_COMMIT_DURATION,
    CONFIG_RELOADS,
    WARM_IMAGES,
    WARM_PULLS,
    RUNTIME_PINS_ENABLED,
    RUNTIME_PINNED_IMAGES,
    RUNTIME_PIN_WRITES,
    IMAGE_GC_CYCLES,
    IMAGE_GC_HIGH_THRESHOLD_PERCENT,
    IMAGE_GC_LOW_THRESHOLD_PERCENT,
];

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge_family(
            &mut enc,
            &BUILD_INFO,
            &[(
                [("version", BUILD_VERSION), ("revision", BUILD_REVISION)],
                1,
            )],
        )?;
        let collected: Vec<_> = self
            .collected
            .iter()
            .map(|(reason, n)| ([("reason", *reason)], *n))
            .collect();
        counter_family(&mut enc, &IMAGE_GARBAGE_COLLECTED, &collected)?;
        let rescued: Vec<_> = self
            .rescued
            .iter()
            .map(|(why, n)| ([("why", *why)], *n))
            .collect();
        counter_family(&mut enc, &GC_VICTIMS_RESCUED, &rescued)?;
        gauge(
            &mut enc,
            &IMAGE_GC_PROGRESS_RUNNING,
            u64::from(self.progress.running),
        )?;
        gauge(&mut enc, &IMAGE_GC_PROGRESS_REMOVED, self.progress.removed)?;
        gauge(
            &mut enc,
            &IMAGE_GC_PROGRESS_FREED,
            self.progress.freed_bytes,
        )?;
        counter(&mut enc, &IMAGE_GC_REMOVE_FAILURES, self.remove_failures)?;
        // The kubelet's image list cache serves the node status's images; here it serves
        // these gauges (the node status's image count and sizes, without the names).
        if let Some((count, bytes)) = self.runtime_images {
            gauge(&mut enc, &RUNTIME_IMAGES, count)?;
            gauge(&mut enc, &RUNTIME_IMAGES_SIZE, bytes)?;
        }
        counter(
            &mut enc,
            &GC_FUTURE_STAMPS_CLAMPED,
            self.future_stamps_clamped,
        )?;
        counter(&mut enc, &GC_CLOCK_WENT_BACK, self.clock_went_back)?;
        if let Some(stale) = self.kubelet_stale_intents {
            gauge(&mut enc, &KUBELET_STALE_PULL_INTENTS, stale)?;
        }
        if let Some((capacity, available)) = self.image_fs {
            gauge(&mut enc, &IMAGE_FS_CAPACITY, capacity)?;
            gauge(&mut enc, &IMAGE_FS_AVAILABLE, available)?;
        }
        if let Some((total, free, images)) = self.image_fs_inodes {
            let mut samples = vec![([("kind", "capacity")], total), ([("kind", "free")], free)];
            if let Some(images) = images {
                samples.push(([("kind", "images")], images));
            }
            gauge_family(&mut enc, &IMAGE_FS_INODES, &samples)?;
        }
        let repulls: Vec<_> = self
            .repulls
            .iter()
            .map(|(reason, n)| ([("reason", *reason)], *n))
            .collect();
        counter_family(&mut enc, &IMAGE_REPULLS_AFTER_EVICTION, &repulls)?;
        histogram(&mut enc, &IMAGE_REPULL_DELAY, &self.repull_delays)?;
        histogram(&mut enc, &IMAGE_GC_DURATION, &self.gc_durations)?;
        let pulls: Vec<_> = self
            .pull_durations
            .iter()
            .map(|(bucket, h)| ([("image_size_in_bytes", *bucket)], h))
            .collect();
        histogram_family(&mut enc, &IMAGE_PULL_DURATION, &pulls)?;
        let ensure: Vec<_> = self
            .ensure_requests
            .iter()
            .map(|((policy, present, required), n)| {
                (
                    [
                        ("pull_policy", *policy),
                        ("present_locally", *present),
                        ("pull_required", *required),
                    ],
                    *n,
                )
            })
            .collect();
        counter_family(&mut enc, &ENSURE_IMAGE_REQUESTS, &ensure)?;
        gauge(&mut enc, &STORE_HEALTHY, u64::from(self.store_healthy))?;
        counter(&mut enc, &STORE_REOPENS, self.store_reopens)?;
        if let Some(records) = self.records {
            gauge(&mut enc, &IMAGE_RECORDS, records)?;
        }
        if let Some(pins) = self.pins {
            gauge(&mut enc, &IMAGE_PINS, pins)?;
        }
        // Sum and count only (one +Inf bucket): the store keeps totals, not a distribution.
        let mut commits = descriptor(&mut enc, &STORE_COMMIT_DURATION)?;
        commits.encode_histogram::<NoLabelSet>(
            self.commit_seconds,
            self.commits,
            &[(f64::INFINITY, self.commits)],
            None,
        )?;
        let [successes, failures] = self.config_reloads;
        counter_family(
            &mut enc,
            &CONFIG_RELOADS,
            &[
                ([("result", "success")], successes),
                ([("result", "failure")], failures),
            ],
        )?;
        if let Some(counts) = self.warm_images {
            let samples: Vec<_> = WarmState::ALL
                .iter()
                .zip(counts)
                .map(|(state, n)| ([("state", state.as_str())], n))
                .collect();
            gauge_family(&mut enc, &WARM_IMAGES, &samples)?;
            let [succeeded, failed] = self.warm_pulls;
            counter_family(
                &mut enc,
                &WARM_PULLS,
                &[
                    ([("result", "success")], succeeded),
                    ([("result", "failure")], failed),
                ],
            )?;
        }
        if let Some(pins) = self.runtime_pins {
            gauge(&mut enc, &RUNTIME_PINS_ENABLED, u64::from(pins.enabled))?;
            gauge(&mut enc, &RUNTIME_PINNED_IMAGES, pins.pinned_images)?;
            let [succeeded, failed] = pins.writes;
            counter_family(
                &mut enc,
                &RUNTIME_PIN_WRITES,
                &[
                    ([("result", "success")], succeeded),
                    ([("result", "failure")], failed),
                ],
            )?;
        }
        let [succeeded, failed] = self.gc_cycles;
        counter_family(
            &mut enc,
            &IMAGE_GC_CYCLES,
            &[
                ([("result", "success")], succeeded),
                ([("result", "failure")], failed),
            ],
        )?;
        let (high, low) = self.thresholds;
        gauge(
            &mut enc,
            &IMAGE_GC_HIGH_THRESHOLD_PERCENT,
            u64::try_from(high).unwrap_or(0),
        )?;
        gauge(
            &mut enc,
            &IMAGE_GC_LOW_THRESHOLD_PERCENT,
            u64::try_from(low).unwrap_or(0),
        )?;
        Ok(())
    }
}

/// The family's descriptor (`# HELP`, `# TYPE`, `# UNIT`), from its [`METRICS`] entry.
fn descriptor<'a>(
    enc: &'a mut DescriptorEncoder,
    family: &MetricFamily,
) -> Result<prometheus_client::encoding::MetricEncoder<'a>, std::fmt::Error> {
    enc.encode_descriptor(
        family.name,
        family.help,
        family.unit.map(MetricUnit::unit),
        family.kind.metric_type(),
    )
}

/// One counter without labels; the encoder adds `_total`.
fn counter(
    enc: &mut DescriptorEncoder,
    family: &MetricFamily,
    value: u64,
) -> Result<(), std::fmt::Error> {
    descriptor(enc, family)?.encode_counter::<NoLabelSet, u64, u64>(&value, None)
}

/// One counter with a sample per label set; the encoder adds `_total`.
fn counter_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    family: &MetricFamily,
    samples: &[(L, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = descriptor(enc, family)?;
    for (labels, value) in samples {
        m.encode_family(labels)?
            .encode_counter::<NoLabelSet, u64, u64>(value, None)?;
    }
    Ok(())
}

/// One gauge without labels; the unit is appended to the name (`_bytes`).
fn gauge(
    enc: &mut DescriptorEncoder,
    family: &MetricFamily,
    value: u64,
) -> Result<(), std::fmt::Error> {
    descriptor(enc, family)?.encode_gauge(&value)
}

fn gauge_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    family: &MetricFamily,
    samples: &[(L, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = descriptor(enc, family)?;
    for (labels, value) in samples {
        m.encode_family(labels)?.encode_gauge(value)?;
    }
    Ok(())
}

/// One histogram without labels.
fn histogram(
    enc: &mut DescriptorEncoder,
    family: &MetricFamily,
    h: &Histogram,
) -> Result<(), std::fmt::Error> {
    descriptor(enc, family)?.encode_histogram::<NoLabelSet>(h.sum(), h.count(), &h.buckets(), None)
}

/// One histogram with a sample per label set.
fn histogram_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    family: &MetricFamily,
    samples: &[(L, &Histogram)],
) -> Result<(), std::fmt::Error> {
    let mut m = descriptor(enc, family)?;
    for (labels, h) in samples {
        m.encode_family(labels)?.encode_histogram::<NoLabelSet>(
            h.sum(),
            h.count(),
            &h.buckets(),
            None,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scrape in which every family has samples: every optional one present, every labelled
    /// one with at least one label set.
    fn full_snapshot() -> Snapshot {
        let mut h = Histogram::new(GC_BUCKETS);
        h.observe(0.2);
        Snapshot {
            collected: [("unused", 1), ("age", 2), ("inodes", 3), ("budget", 4)],
            rescued: vec![("in_use", 1)],
            remove_failures: 0,
            runtime_images: Some((3, 300)),
            future_stamps_clamped: 0,
            clock_went_back: 0,
            kubelet_stale_intents: Some(0),
            progress: GcProgress::default(),
            image_fs: Some((1000, 500)),
            image_fs_inodes: Some((1000, 400, Some(300))),
            gc_durations: h.clone(),
            pull_durations: BTreeMap::from([("0-1MB", h.clone())]),
            ensure_requests: BTreeMap::from([(("always", "unknown", "true"), 1)]),
            store_healthy: true,
            store_reopens: 0,
            records: Some(3),
            pins: Some(1),
            commits: 1,
            commit_seconds: 0.01,
            config_reloads: [1, 0],
            gc_cycles: [1, 0],
            thresholds: (85, 80),
            repulls: [
                ("unused", 0),
                ("age", 0),
                ("prune", 0),
                ("external", 0),
                ("inodes", 0),
                ("budget", 0),
            ],
            repull_delays: h,
            warm_images: Some([1, 0, 0, 1, 0, 0]),
            warm_pulls: [1, 0],
            runtime_pins: Some(RuntimePinsSample {
                enabled: true,
                pinned_images: 2,
                writes: [3, 1],
            }),
        }
    }

    /// The scrape's families, in order, and each sample's label names: what [`METRICS`]
    /// documents is what the encoder writes (the name, type and help come from the entries;
    /// this checks the label names, which the encode calls spell out).
    #[test]
    fn every_family_a_scrape_encodes_is_in_metrics_with_its_labels() {
        let mut registry = Registry::with_prefix(METRIC_PREFIX);
        registry.register_collector(Box::new(full_snapshot()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let mut seen: Vec<(String, String)> = Vec::new();
        let mut labels: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("name and type");
                seen.push((name.to_owned(), kind.to_owned()));
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let Some((_, rest)) = line.split_once('{') else {
                continue;
            };
            let family = seen.last().expect("a sample after its TYPE").0.clone();
            let names: Vec<String> = rest
                .split_once('}')
                .expect("closing brace")
                .0
                .split(',')
                .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.to_owned()))
                .filter(|k| k != "le")
                .collect();
            let had = labels.insert(family.clone(), names.clone());
            if let Some(had) = had {
                assert_eq!(had, names, "{family}: samples with different label names");
            }
        }
        let documented: Vec<(String, String)> = METRICS
            .iter()
            .map(|f| (f.exposed_name(), f.kind.as_str().to_owned()))
            .collect();
        assert_eq!(seen, documented, "the scrape's families and METRICS differ");
        for family in METRICS {
            let want: Vec<String> = family.labels.iter().map(|l| (*l).to_owned()).collect();
            let got = labels
                .get(&family.exposed_name())
                .cloned()
                .unwrap_or_default();
            assert_eq!(got, want, "{}: label names", family.exposed_name());
        }
    }

    #[test]
    fn runtime_image_bytes_saturate_instead_of_overflowing_on_huge_reported_sizes() {
        let cases: &[(&[u64], u64)] = &[
            (&[], 0),
            (&[1, 2, 3], 6),
            (&[u64::MAX - 1, 5], u64::MAX),
            (&[u64::MAX, u64::MAX, 1], u64::MAX),
        ];
        for (sizes, want) in cases {
            assert_eq!(
                saturating_total(sizes.iter().copied()),
                *want,
                "sizes {sizes:?}"
            );
        }
    }
}
