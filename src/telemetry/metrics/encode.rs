//! The encoding of one scrape: the `prometheus-client` [`Collector`] of a [`Snapshot`], which
//! writes every family of [`METRICS`] in its order, each from its entry (`# HELP`, `# TYPE`,
//! `# UNIT`), and the small helpers that write a counter, a gauge or a histogram.
//!
//! Invariants: the encoder only reads the snapshot (a scrape never writes the store); a
//! family's samples carry exactly the label names its entry lists.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};

use super::families::*;
use super::{BUILD_REVISION, BUILD_VERSION, Snapshot};
use crate::gc::attempt_metrics::AttemptLabels;
use crate::pull::metrics::Histogram;
use crate::warm::WarmState;

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
        counter(
            &mut enc,
            &GC_RELEASE_WAIT_TIMEOUTS,
            self.release_wait_timeouts,
        )?;
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
        let durations: Vec<_> = self
            .gc_durations
            .iter()
            .map(|((operation, trigger, result), h)| {
                (
                    [
                        ("operation", operation.as_str()),
                        ("trigger", trigger.as_str()),
                        ("result", result.as_str()),
                    ],
                    h,
                )
            })
            .collect();
        histogram_family(&mut enc, &IMAGE_GC_DURATION, &durations)?;
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
            counter(&mut enc, &WARM_PREFETCH_YIELDS, self.prefetch_yields)?;
        }
        if let Some(pins) = self.runtime_pins {
            gauge(&mut enc, &RUNTIME_PINS_ENABLED, u64::from(pins.enabled))?;
            gauge(&mut enc, &RUNTIME_PINNED_IMAGES, pins.pinned_images)?;
            gauge(
                &mut enc,
                &RUNTIME_PIN_DISAGREEMENTS,
                pins.disagreeing_images,
            )?;
            gauge(
                &mut enc,
                &RUNTIME_PIN_OTHER_INSTANCES,
                pins.other_instance_names,
            )?;
            gauge_family(
                &mut enc,
                &RUNTIME_PIN_LABELS,
                &[
                    ([("state", "orphaned")], pins.orphaned_names),
                    ([("state", "foreign")], pins.foreign_names),
                ],
            )?;
            gauge(&mut enc, &RUNTIME_PINS_FAILING, u64::from(pins.failing))?;
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
        if let Some(signals) = self.cluster_signals {
            gauge(&mut enc, &CLUSTER_SIGNAL_PODS, signals.pods)?;
            counter(&mut enc, &CLUSTER_SIGNAL_PODS_REFUSED, signals.refused)?;
            let mut images = vec![([("kind", "bound_pod")], signals.images)];
            let pods = [("resource", "pods")];
            let mut synced = vec![(pods, u64::from(signals.synced))];
            let mut failing = vec![(pods, u64::from(signals.failing))];
            let mut errors = vec![(pods, signals.errors)];
            if let Some(ds) = signals.daemonsets {
                let daemonsets = [("resource", "daemonsets")];
                images.push(([("kind", "daemonset")], ds.images));
                synced.push((daemonsets, u64::from(ds.watch.synced)));
                failing.push((daemonsets, u64::from(ds.watch.failing)));
                errors.push((daemonsets, ds.watch.errors));
            }
            if let Some(known) = self.cluster_knowledge {
                images.push(([("kind", "cronjob")], known.due_images));
                images.push(([("kind", "rollback")], known.rollback_images));
                for (resource, watch) in [
                    ("cronjobs", known.cronjobs_watch),
                    ("replicasets", known.replicasets_watch),
                ] {
                    if let Some(watch) = watch {
                        synced.push(([("resource", resource)], u64::from(watch.synced)));
                        failing.push(([("resource", resource)], u64::from(watch.failing)));
                        errors.push(([("resource", resource)], watch.errors));
                    }
                }
                counter(&mut enc, &CLUSTER_SIGNAL_OBJECTS_REFUSED, known.refused)?;
            }
            gauge_family(&mut enc, &CLUSTER_SIGNAL_IMAGES, &images)?;
            let over = signals.over_share.map_or((0, 0), |o| (o.images, o.bytes));
            gauge(&mut enc, &CLUSTER_SIGNAL_KEEPS_OVER_SHARE, over.0)?;
            gauge(&mut enc, &CLUSTER_SIGNAL_KEEPS_OVER_SHARE_BYTES, over.1)?;
            gauge_family(&mut enc, &CLUSTER_WATCH_SYNCED, &synced)?;
            gauge_family(&mut enc, &CLUSTER_WATCH_FAILING, &failing)?;
            counter_family(&mut enc, &CLUSTER_WATCH_ERRORS, &errors)?;
        }
        if let Some(disk) = &self.disk.0 {
            let mut bytes: Vec<([(&str, &str); 1], u64)> = disk
                .owners
                .iter()
                .map(|(owner, b, _)| ([("owner", *owner)], *b))
                .collect();
            bytes.push(([("owner", "unexplained")], disk.unexplained_bytes));
            gauge_family(&mut enc, &DISK_BYTES, &bytes)?;
            let inodes: Vec<([(&str, &str); 1], u64)> = disk
                .owners
                .iter()
                .map(|(owner, _, i)| ([("owner", *owner)], *i))
                .collect();
            gauge_family(&mut enc, &DISK_INODES, &inodes)?;
        }
        let [succeeded, failed] = self.disk.1;
        counter_family(
            &mut enc,
            &DISK_ACCOUNTINGS,
            &[
                ([("result", "success")], succeeded),
                ([("result", "failure")], failed),
            ],
        )?;
        let ([removed, failed, skipped], pruned_bytes) = self.disk_orphans_pruned;
        counter_family(
            &mut enc,
            &DISK_ORPHANS_PRUNED,
            &[
                ([("result", "removed")], removed),
                ([("result", "failed")], failed),
                ([("result", "skipped")], skipped),
            ],
        )?;
        counter(&mut enc, &DISK_ORPHANS_PRUNED_BYTES, pruned_bytes)?;
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
        self.encode_attempts(&mut enc)
    }
}

impl Snapshot {
    /// KEP-6053's series, each sample labelled with the KEP's names and values.
    fn encode_attempts(&self, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let a = &self.attempts;
        let attempt_labels = |(operation, trigger, result, reason): &AttemptLabels| {
            [
                ("operation", operation.as_str()),
                ("trigger", trigger.as_str()),
                ("result", result.as_str()),
                ("reason", reason.as_str()),
            ]
        };
        let attempts: Vec<_> = a
            .attempts
            .iter()
            .map(|(labels, n)| (attempt_labels(labels), *n))
            .collect();
        counter_family(enc, &IMAGE_GC_ATTEMPTS, &attempts)?;
        let freed: Vec<_> = a
            .freed
            .iter()
            .map(|(labels, h)| (attempt_labels(labels), h))
            .collect();
        histogram_family(enc, &IMAGE_GC_FREED, &freed)?;
        let target: Vec<_> = a
            .target
            .iter()
            .map(|((operation, trigger), h)| {
                (
                    [
                        ("operation", operation.as_str()),
                        ("trigger", trigger.as_str()),
                    ],
                    h,
                )
            })
            .collect();
        histogram_family(enc, &IMAGE_GC_TARGET, &target)?;
        let deletions: Vec<_> = a
            .deletions
            .iter()
            .map(|((operation, trigger, reason, success), n)| {
                (
                    [
                        ("operation", operation.as_str()),
                        ("trigger", trigger.as_str()),
                        ("reason", reason.as_str()),
                        ("result", if *success { "success" } else { "error" }),
                    ],
                    *n,
                )
            })
            .collect();
        counter_family(enc, &IMAGE_GC_IMAGE_DELETIONS, &deletions)?;
        let skipped: Vec<_> = a
            .skipped
            .iter()
            .map(|((operation, trigger, reason), n)| {
                (
                    [
                        ("operation", operation.as_str()),
                        ("trigger", trigger.as_str()),
                        ("reason", reason.as_str()),
                    ],
                    *n,
                )
            })
            .collect();
        counter_family(enc, &IMAGE_GC_SKIPPED_IMAGES, &skipped)?;
        if let Some(percent) = a.usage_before {
            gauge_family(
                enc,
                &IMAGE_GC_IMAGE_FS_USAGE_PERCENT,
                &[([("phase", "before")], u64::try_from(percent).unwrap_or(0))],
            )?;
        }
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
