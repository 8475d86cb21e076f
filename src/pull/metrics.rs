//! Pull metrics: kubelet's `kubelet_image_pull_duration_seconds` histogram, labelled by the
//! image-size bucket (`GetImageSizeBucket`), and Go's `time.Duration` text for messages.
//!
//! Invariants: bucket bounds are kubelet's `imagePullDurationBuckets`; a value lands in every
//! bucket whose upper bound is `>=` it (Prometheus `le`), counts are cumulative on read.
//!
//! [`RepullMetrics`]: the regret counters (`image_repulls_after_eviction_total{reason}` and the
//! delay histogram), shared by pulls and detect.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Kubelet's `imagePullDurationBuckets`, in seconds.
pub const IMAGE_PULL_DURATION_BUCKETS: [f64; 18] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0,
    1200.0, 1800.0, 2700.0, 3600.0,
];

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// Kubelet's `imageSizeBuckets`: (lower bound in bytes, label).
pub const IMAGE_SIZE_BUCKETS: [(u64, &str); 12] = [
    (0, "0-10MB"),
    (10 * MIB, "10MB-100MB"),
    (100 * MIB, "100MB-500MB"),
    (500 * MIB, "500MB-1GB"),
    (GIB, "1GB-5GB"),
    (5 * GIB, "5GB-10GB"),
    (10 * GIB, "10GB-20GB"),
    (20 * GIB, "20GB-30GB"),
    (30 * GIB, "30GB-40GB"),
    (40 * GIB, "40GB-60GB"),
    (60 * GIB, "60GB-100GB"),
    (100 * GIB, "GT100GB"),
];

/// Kubelet's `GetImageSizeBucket` (kubelet master pkg/kubelet/metrics/metrics.go): `N/A`
/// for size 0 (the size could not be read), else the bucket whose lower bound the size is
/// strictly above (`>`: exactly 10 MiB is still `0-10MB`).
pub fn image_size_bucket(size: u64) -> &'static str {
    if size == 0 {
        return "N/A";
    }
    IMAGE_SIZE_BUCKETS
        .iter()
        .rev()
        .find(|(lower, _)| size > *lower)
        .map(|(_, label)| *label)
        .unwrap_or("N/A")
}

/// A fixed-bucket histogram.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Non-cumulative counts per bucket; the last slot is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// (upper bound, cumulative count) per bucket, ending with +Inf.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        let bounds = self
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY));
        bounds
            .zip(&self.counts)
            .map(|(b, c)| {
                acc += c;
                (b, acc)
            })
            .collect()
    }

    /// (upper bound, count in that bucket alone) per bucket, ending with +Inf: the
    /// non-cumulative form the exposition encoder takes.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
            .collect()
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn count(&self) -> u64 {
        self.count
    }
}

/// `image_pull_duration_seconds{image_size_in_bytes=<bucket>}` and
/// `ensure_image_requests_total{pull_policy,present_locally,pull_required}`.
#[derive(Debug, Default)]
pub struct PullMetrics {
    by_size: Mutex<BTreeMap<&'static str, Histogram>>,
    ensure_requests: Mutex<BTreeMap<EnsureLabels, u64>>,
}

/// The labels of `ensure_image_requests_total`: pull policy, present locally
/// ("true", "false", or "unknown" when the policy skips the check), pull required.
pub type EnsureLabels = (&'static str, &'static str, &'static str);

impl PullMetrics {
    /// Counts one EnsureImageExists decision.
    pub fn count_ensure(&self, labels: EnsureLabels) {
        let mut m = self
            .ensure_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *m.entry(labels).or_default() += 1;
    }

    /// A copy of `ensure_image_requests_total` by labels.
    pub fn ensure_requests(&self) -> BTreeMap<EnsureLabels, u64> {
        self.ensure_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records one pull: its image's size and how long it took.
    pub fn observe_pull(&self, image_size: u64, total: Duration) {
        let mut m = self.by_size.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(image_size_bucket(image_size))
            .or_insert_with(|| Histogram::new(&IMAGE_PULL_DURATION_BUCKETS))
            .observe(total.as_secs_f64());
    }

    /// A copy of the histograms by size label.
    pub fn snapshot(&self) -> BTreeMap<&'static str, Histogram> {
        self.by_size
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_buckets_follow_kubelets_lower_bounds() {
        // GetImageSizeBucket: "N/A" for 0, then `size > lower bound`.
        let cases = [
            (0, "N/A"),
            (1, "0-10MB"),
            (5 * MIB, "0-10MB"),
            (10 * MIB, "0-10MB"),
            (10 * MIB + 1, "10MB-100MB"),
            (15 * MIB, "10MB-100MB"),
            (500 * MIB, "100MB-500MB"),
            (500 * MIB + 1, "500MB-1GB"),
            (15 * GIB, "10GB-20GB"),
            (100 * GIB, "60GB-100GB"),
            (100 * GIB + 1, "GT100GB"),
            (200 * GIB, "GT100GB"),
        ];
        for (size, want) in cases {
            assert_eq!(image_size_bucket(size), want, "{size}");
        }
    }

    #[test]
    fn histogram_counts_values_in_le_buckets() {
        let mut h = Histogram::new(&IMAGE_PULL_DURATION_BUCKETS);
        for v in [0.0, 1.0, 1.5, 10_000.0] {
            h.observe(v);
        }
        let c = h.cumulative();
        assert_eq!(c[0], (1.0, 2));
        assert_eq!(c[1], (5.0, 3));
        assert_eq!(c.last().copied(), Some((f64::INFINITY, 4)));
        assert_eq!(h.count(), 4);
        assert!((h.sum() - 10_002.5).abs() < 1e-9);
    }
}

/// Bounds of `image_repull_delay_seconds`: from a minute to the journal's default retention
/// (30 days).
const REPULL_DELAY_BUCKETS: &[f64] = &[
    60.0,
    300.0,
    900.0,
    3_600.0,
    21_600.0,
    86_400.0,
    604_800.0,
    2_592_000.0,
];

/// The regret counters: images seen again (by a pull or a detect) after a removal the journal
/// still holds. Shared by the GC manager (detect) and the image manager (pulls) through one
/// `Arc`, so each re-pull is counted once, by whichever committed it.
#[derive(Debug)]
pub struct RepullMetrics {
    /// `image_repulls_after_eviction_total{reason}`, by `age`, `space`, `unused`, `inodes`,
    /// `budget`, `external`.
    by_reason: [AtomicU64; 6],
    /// Seconds from the removal to the re-pull.
    delays: Mutex<Histogram>,
}

impl Default for RepullMetrics {
    fn default() -> RepullMetrics {
        RepullMetrics {
            by_reason: Default::default(),
            delays: Mutex::new(Histogram::new(REPULL_DELAY_BUCKETS)),
        }
    }
}

impl RepullMetrics {
    /// The `reason` labels, in the order of [`RepullMetrics::counts`].
    pub const REASONS: [&'static str; 6] =
        ["age", "space", "unused", "inodes", "budget", "external"];

    pub fn record(&self, repull: &crate::model::Repull) {
        let label = repull.reason_label();
        if let Some(i) = Self::REASONS.iter().position(|r| *r == label) {
            self.by_reason[i].fetch_add(1, Ordering::Relaxed);
        }
        match self.delays.lock() {
            Ok(mut h) => h.observe(repull.delay.as_secs_f64()),
            Err(p) => p.into_inner().observe(repull.delay.as_secs_f64()),
        }
    }

    /// `image_repulls_after_eviction_total` by reason label.
    pub fn counts(&self) -> [(&'static str, u64); 6] {
        let mut out = [("", 0); 6];
        for (i, reason) in Self::REASONS.iter().enumerate() {
            out[i] = (*reason, self.by_reason[i].load(Ordering::Relaxed));
        }
        out
    }

    /// `image_repull_delay_seconds`.
    pub fn delays(&self) -> Histogram {
        match self.delays.lock() {
            Ok(h) => h.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}
