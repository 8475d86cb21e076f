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
//! store. To add a metric: keep its counter in its layer, copy it in `Snapshot::gather` and
//! encode it in `Snapshot::encode` with the helpers below.

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
use crate::model::saturating_total;
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

    /// A warm (or restore) pull ended.
    pub fn record_warm_pull(&self, success: bool) {
        self.warm_pulls[usize::from(!success)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn record_reload(&self, success: bool) {
        self.config_reloads[usize::from(!success)]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Renders every metric in the OpenMetrics text format (ends with `# EOF`).
    pub fn render<R: ImageRuntime, P: PullRuntime, S: BackoffStore>(
        &self,
        gc: &ImageGcManager<R>,
        images: &ImageManager<P, S>,
        store: &Store,
    ) -> String {
        let snapshot = Snapshot::gather(self, gc, images, store);
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
    collected: [(&'static str, u64); 2],
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
    gc_durations: Histogram,
    pull_durations: BTreeMap<&'static str, Histogram>,
    ensure_requests: BTreeMap<EnsureLabels, u64>,
    store_healthy: bool,
    store_reopens: u64,
    records: Option<u64>,
    commits: u64,
    commit_seconds: f64,
    /// Configuration reloads: [successes, failures].
    config_reloads: [u64; 2],
    /// GC cycles: [succeeded, failed].
    gc_cycles: [u64; 2],
    /// The byte thresholds in force (high, low), in percent.
    thresholds: (i64, i64),
    repulls: [(&'static str, u64); 4],
    repull_delays: Histogram,
    warm_images: Option<[u64; WarmState::ALL.len()]>,
    warm_pulls: [u64; 2],
}

impl Snapshot {
    fn gather<R: ImageRuntime, P: PullRuntime, S: BackoffStore>(
        agent: &AgentMetrics,
        gc: &ImageGcManager<R>,
        images: &ImageManager<P, S>,
        store: &Store,
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
            gc_durations: match agent.gc_durations.lock() {
                Ok(h) => h.clone(),
                Err(p) => p.into_inner().clone(),
            },
            pull_durations: images.metrics().snapshot(),
            ensure_requests: images.metrics().ensure_requests(),
            store_healthy,
            store_reopens: store.reopens(),
            records,
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

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge_family(
            &mut enc,
            "build_info",
            "The imagekeeper version and the git revision it was built from; always 1.",
            None,
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
        counter_family(
            &mut enc,
            "image_garbage_collected",
            "Images removed by GC, by reason.",
            &collected,
        )?;
        let rescued: Vec<_> = self
            .rescued
            .iter()
            .map(|(why, n)| ([("why", *why)], *n))
            .collect();
        counter_family(
            &mut enc,
            "gc_victims_rescued",
            "Images GC chose but kept at its last look before removing them, by why.",
            &rescued,
        )?;
        gauge(
            &mut enc,
            "image_gc_progress_running",
            "Whether a GC cycle is running now.",
            None,
            u64::from(self.progress.running),
        )?;
        gauge(
            &mut enc,
            "image_gc_progress_removed",
            "Images removed by the running (else the last) GC cycle.",
            None,
            self.progress.removed,
        )?;
        gauge(
            &mut enc,
            "image_gc_progress_freed",
            "Bytes freed by the running (else the last) GC cycle.",
            Some(Unit::Bytes),
            self.progress.freed_bytes,
        )?;
        counter(
            &mut enc,
            "image_gc_remove_failures",
            "RemoveImage calls of GC that failed.",
            self.remove_failures,
        )?;
        // The kubelet's image list cache serves the node status's images; here it serves
        // these gauges (the node status's image count and sizes, without the names).
        if let Some((count, bytes)) = self.runtime_images {
            gauge(
                &mut enc,
                "runtime_images",
                "Images the runtime lists, as the image cache last saw them.",
                None,
                count,
            )?;
            gauge(
                &mut enc,
                "runtime_images_size",
                "Total size of the images the runtime lists, as the image cache last saw them.",
                Some(Unit::Bytes),
                bytes,
            )?;
        }
        counter(
            &mut enc,
            "gc_future_stamps_clamped",
            "Image records whose first_detected or last_used lay in the future (beyond the tolerance) and that detect clamped to its time.",
            self.future_stamps_clamped,
        )?;
        counter(
            &mut enc,
            "gc_clock_went_back",
            "Detects that found the stored last_detect later than their own time (beyond the tolerance): the clock went back.",
            self.clock_went_back,
        )?;
        if let Some(stale) = self.kubelet_stale_intents {
            gauge(
                &mut enc,
                "kubelet_stale_pull_intents",
                "Kubelet pull intents older than --kubelet-intent-max-age at the last read: they keep no image.",
                None,
                stale,
            )?;
        }
        if let Some((capacity, available)) = self.image_fs {
            gauge(
                &mut enc,
                "image_fs_capacity",
                "Size of the image filesystem (statvfs of the mountpoint ImageFsInfo reports), as the last GC read it.",
                Some(Unit::Bytes),
                capacity,
            )?;
            gauge(
                &mut enc,
                "image_fs_available",
                "Bytes available to unprivileged users on the image filesystem, as the last GC read them.",
                Some(Unit::Bytes),
                available,
            )?;
        }
        let repulls: Vec<_> = self
            .repulls
            .iter()
            .map(|(reason, n)| ([("reason", *reason)], *n))
            .collect();
        counter_family(
            &mut enc,
            "image_repulls_after_eviction",
            "Images pulled (or detected) again while the eviction journal held their removal, by the removal's reason (external: not removed by imagekeeper).",
            &repulls,
        )?;
        let mut repull_delays = enc.encode_descriptor(
            "image_repull_delay",
            "Seconds from an image's removal to its re-pull.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        repull_delays.encode_histogram::<NoLabelSet>(
            self.repull_delays.sum(),
            self.repull_delays.count(),
            &self.repull_delays.buckets(),
            None,
        )?;
        let mut gc_durations = enc.encode_descriptor(
            "image_gc_duration",
            "Duration of image GC cycles.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        gc_durations.encode_histogram::<NoLabelSet>(
            self.gc_durations.sum(),
            self.gc_durations.count(),
            &self.gc_durations.buckets(),
            None,
        )?;
        let pulls: Vec<_> = self
            .pull_durations
            .iter()
            .map(|(bucket, h)| ([("image_size_in_bytes", *bucket)], h))
            .collect();
        histogram_family(
            &mut enc,
            "image_pull_duration",
            "Duration of image pulls, by image size bucket.",
            &pulls,
        )?;
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
        counter_family(
            &mut enc,
            "ensure_image_requests",
            "EnsureImageExists requests by pull policy, presence and whether a pull was required.",
            &ensure,
        )?;
        gauge(
            &mut enc,
            "store_healthy",
            "Whether the record store is usable (1), or failed an I/O operation (a full disk) and has not reopened yet (0).",
            None,
            u64::from(self.store_healthy),
        )?;
        counter(
            &mut enc,
            "store_reopens",
            "Times the record store reopened its file after an I/O failure.",
            self.store_reopens,
        )?;
        if let Some(records) = self.records {
            gauge(
                &mut enc,
                "image_records",
                "Image records in the store.",
                None,
                records,
            )?;
        }
        // Sum and count only (one +Inf bucket): the store keeps totals, not a distribution.
        let mut commits = enc.encode_descriptor(
            "store_commit_duration",
            "Durable commits of the record store.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        commits.encode_histogram::<NoLabelSet>(
            self.commit_seconds,
            self.commits,
            &[(f64::INFINITY, self.commits)],
            None,
        )?;
        let [successes, failures] = self.config_reloads;
        counter_family(
            &mut enc,
            "config_reloads",
            "Configuration reloads (SIGHUP), by result.",
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
            gauge_family(
                &mut enc,
                "warm_images",
                "Warm set entries by state at the last warm cycle (does_not_fit: pulling it would take the image filesystem above the GC's low threshold).",
                None,
                &samples,
            )?;
            let [succeeded, failed] = self.warm_pulls;
            counter_family(
                &mut enc,
                "warm_pulls",
                "Pulls of warm set entries and of restore, by result.",
                &[
                    ([("result", "success")], succeeded),
                    ([("result", "failure")], failed),
                ],
            )?;
        }
        let [succeeded, failed] = self.gc_cycles;
        counter_family(
            &mut enc,
            "image_gc_cycles",
            "Image GC cycles the agent ran, by result (failure: the cycle ended with an error, as the kubelet's ImageGCFailed).",
            &[
                ([("result", "success")], succeeded),
                ([("result", "failure")], failed),
            ],
        )?;
        let (high, low) = self.thresholds;
        gauge(
            &mut enc,
            "image_gc_high_threshold_percent",
            "The imageGCHighThresholdPercent in force: GC starts when image filesystem use is above it.",
            None,
            u64::try_from(high).unwrap_or(0),
        )?;
        gauge(
            &mut enc,
            "image_gc_low_threshold_percent",
            "The imageGCLowThresholdPercent in force: GC frees down to it.",
            None,
            u64::try_from(low).unwrap_or(0),
        )?;
        Ok(())
    }
}

/// One counter without labels; the encoder adds `_total`.
fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    m.encode_counter::<NoLabelSet, u64, u64>(&value, None)
}

/// One counter with a sample per label set; the encoder adds `_total`.
fn counter_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(L, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        m.encode_family(labels)?
            .encode_counter::<NoLabelSet, u64, u64>(value, None)?;
    }
    Ok(())
}

/// One gauge without labels; `unit` is appended to the name (`_bytes`).
fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    m.encode_gauge(&value)
}

fn gauge_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    samples: &[(L, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    for (labels, value) in samples {
        m.encode_family(labels)?.encode_gauge(value)?;
    }
    Ok(())
}

/// One histogram in seconds (`_seconds` is appended) with a sample per label set.
fn histogram_family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(L, &Histogram)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
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
    use super::saturating_total;

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
