//! The counters of KEP-6053's image GC series, kept by the GC layer: attempts by operation,
//! trigger, result and reason; the freed and target bytes of each attempt (histograms); image
//! deletions by reason and result; images skipped by reason; and the image filesystem's usage
//! before the last threshold decision. The agent's metrics module copies them ([`AttemptCounts`])
//! into each scrape; the attempt durations are the agent's, which measures them.
//!
//! Invariants: one cycle runs at a time (the manager's cycle lock), so the cycle in flight's
//! operation and trigger are kept here from its start (`begin`) to its end (`finish`), and a
//! deletion or a skip counted meanwhile carries them; a series exists once counted (or seeded
//! at 0 by [`AttemptMetrics::seed`]), never before; every deletion also counts in
//! `image_garbage_collected_total`, as the KEP asks.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::pull::metrics::Histogram;

use super::attempt::{
    Attempt, AttemptReason, AttemptResult, DeletionReason, GcOperation, GcTrigger, SkipReason,
};

/// Buckets of the freed and target bytes: powers of 4 from 1 MiB to 1 TiB (the KEP names
/// none).
pub const BYTES_BUCKETS: &[f64] = &[
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
    268_435_456.0,
    1_073_741_824.0,
    4_294_967_296.0,
    17_179_869_184.0,
    68_719_476_736.0,
    274_877_906_944.0,
    1_099_511_627_776.0,
];

/// The labels of `image_gc_attempts_total` and `image_gc_freed_bytes`.
pub type AttemptLabels = (GcOperation, GcTrigger, AttemptResult, AttemptReason);

/// The labels of `image_gc_image_deletions_total`: operation, trigger, reason and whether the
/// RemoveImage call succeeded.
pub type DeletionLabels = (GcOperation, GcTrigger, DeletionReason, bool);

/// One copy of every KEP-6053 counter, as a scrape reads them.
#[derive(Clone, Debug, Default)]
pub struct AttemptCounts {
    /// `image_gc_attempts_total`.
    pub attempts: BTreeMap<AttemptLabels, u64>,
    /// `image_gc_freed_bytes`.
    pub freed: BTreeMap<AttemptLabels, Histogram>,
    /// `image_gc_target_bytes`, by operation and trigger.
    pub target: BTreeMap<(GcOperation, GcTrigger), Histogram>,
    /// `image_gc_image_deletions_total`.
    pub deletions: BTreeMap<DeletionLabels, u64>,
    /// `image_gc_skipped_images_total`.
    pub skipped: BTreeMap<(GcOperation, GcTrigger, SkipReason), u64>,
    /// `image_gc_image_fs_usage_percent{phase="before"}`: the percentage rule's usage at the
    /// last GarbageCollect that computed it.
    pub usage_before: Option<i64>,
}

/// What the cycle in flight is, and the counts.
#[derive(Debug, Default)]
struct State {
    current: Option<(GcOperation, GcTrigger)>,
    counts: AttemptCounts,
}

/// KEP-6053's counters, shared by the manager and the metrics endpoint.
#[derive(Debug, Default)]
pub struct AttemptMetrics {
    state: Mutex<State>,
}

impl AttemptMetrics {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the counts.
    pub fn counts(&self) -> AttemptCounts {
        self.state().counts.clone()
    }

    /// Creates at 0 the deletion and skip series of `operation` run by `trigger` (the agent's
    /// periodic GarbageCollect, at its start), so a rate over them has a series before the
    /// first removal or skip.
    pub fn seed(&self, operation: GcOperation, trigger: GcTrigger) {
        let reasons: &[DeletionReason] = match operation {
            GcOperation::GarbageCollect => &[DeletionReason::Space, DeletionReason::Age],
            GcOperation::DeleteUnusedImages => &[DeletionReason::AllUnused],
        };
        let mut state = self.state();
        for reason in reasons {
            for success in [true, false] {
                state
                    .counts
                    .deletions
                    .entry((operation, trigger, *reason, success))
                    .or_insert(0);
            }
        }
        for reason in SkipReason::ALL {
            state
                .counts
                .skipped
                .entry((operation, trigger, reason))
                .or_insert(0);
        }
    }

    /// A cycle of `operation` asked for by `trigger` starts.
    pub(crate) fn begin(&self, operation: GcOperation, trigger: GcTrigger) {
        self.state().current = Some((operation, trigger));
    }

    /// The cycle in flight ended as `attempt`, having freed `freed` bytes.
    pub(crate) fn finish(&self, attempt: &Attempt, freed: u64) {
        let mut state = self.state();
        state.current = None;
        let labels = (
            attempt.operation,
            attempt.trigger,
            attempt.result,
            attempt.reason,
        );
        *state.counts.attempts.entry(labels).or_insert(0) += 1;
        state
            .counts
            .freed
            .entry(labels)
            .or_insert_with(|| Histogram::new(BYTES_BUCKETS))
            .observe(freed as f64);
        if let Some(target) = attempt.target_bytes {
            state
                .counts
                .target
                .entry((attempt.operation, attempt.trigger))
                .or_insert_with(|| Histogram::new(BYTES_BUCKETS))
                .observe(target as f64);
        }
    }

    /// One RemoveImage of the cycle in flight for `reason`, succeeded or not (uncounted
    /// outside a cycle).
    pub(crate) fn deletion(&self, reason: DeletionReason, success: bool) {
        let mut state = self.state();
        if let Some((operation, trigger)) = state.current {
            *state
                .counts
                .deletions
                .entry((operation, trigger, reason, success))
                .or_insert(0) += 1;
        }
    }

    /// `n` images the cycle in flight passed over for `reason` (uncounted outside a cycle).
    pub(crate) fn skipped(&self, reason: SkipReason, n: u64) {
        if n == 0 {
            return;
        }
        let mut state = self.state();
        if let Some((operation, trigger)) = state.current {
            *state
                .counts
                .skipped
                .entry((operation, trigger, reason))
                .or_insert(0) += n;
        }
    }

    /// The image filesystem's usage, in percent, before a GarbageCollect's threshold decision.
    pub(crate) fn usage_before(&self, percent: i64) {
        self.state().counts.usage_before = Some(percent);
    }
}
