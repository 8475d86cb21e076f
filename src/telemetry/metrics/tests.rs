//! Tests of the exposition: every family a scrape encodes is in `METRICS` with its labels,
//! and sums saturate instead of overflowing.

use super::*;
use crate::model::saturating_total;

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
        release_wait_timeouts: 0,
        kubelet_stale_intents: Some(0),
        progress: GcProgress::default(),
        image_fs: Some((1000, 500)),
        image_fs_inodes: Some((1000, 400, Some(300))),
        gc_durations: BTreeMap::from([(
            (
                GcOperation::GarbageCollect,
                GcTrigger::Periodic,
                AttemptResult::Success,
            ),
            h.clone(),
        )]),
        attempts: kep6053_counts(&h),
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
        prefetch_yields: 0,
        runtime_pins: Some(RuntimePinsSample {
            enabled: true,
            pinned_images: 2,
            disagreeing_images: 1,
            other_instance_names: 2,
            orphaned_names: 1,
            foreign_names: 1,
            failing: false,
            writes: [3, 1],
        }),
        cluster_signals: Some(crate::gc::BoundPodsSample {
            pods: 3,
            images: 4,
            synced: true,
            failing: true,
            errors: 2,
            refused: 1,
            daemonsets: Some(crate::gc::DaemonSetsSample {
                held: 7,
                refused: 0,
                images: 2,
                watch: crate::gc::WatchSample {
                    synced: true,
                    failing: false,
                    errors: 5,
                },
            }),
            cronjobs: None,
            replicasets: None,
            over_share: None,
        }),
        cluster_knowledge: Some(crate::gc::ClusterSignalsSample {
            cronjobs: 4,
            workloads: 6,
            due_images: 1,
            rollback_images: 3,
            cronjobs_watch: Some(crate::gc::WatchSample {
                synced: true,
                failing: false,
                errors: 0,
            }),
            replicasets_watch: Some(crate::gc::WatchSample {
                synced: false,
                failing: true,
                errors: 9,
            }),
            refused: 2,
        }),
        disk: (
            Some(super::DiskSample {
                owners: vec![("criImage", 700, 70), ("orphanSnapshot", 30, 3)],
                unexplained_bytes: 12,
                used_bytes: 742,
            }),
            [4, 1],
        ),
        disk_orphans_pruned: ([3, 1, 2], 5_242_880),
    }
}

/// The disk accounting's figures reach the scrape: bytes and inodes by owner, the unexplained
/// bytes, the accountings' count and the agent's own orphan prunes; before the first success only the count is written.
#[test]
fn the_disk_accounting_is_scraped_by_owner_with_the_unexplained_bytes() {
    let text = scrape(full_snapshot());
    for line in [
        "imagekeeper_disk_bytes{owner=\"criImage\"} 700",
        "imagekeeper_disk_bytes{owner=\"orphanSnapshot\"} 30",
        "imagekeeper_disk_bytes{owner=\"unexplained\"} 12",
        "imagekeeper_disk_inodes{owner=\"orphanSnapshot\"} 3",
        "imagekeeper_disk_accountings_total{result=\"success\"} 4",
        "imagekeeper_disk_accountings_total{result=\"failure\"} 1",
        "imagekeeper_disk_orphans_pruned_total{result=\"removed\"} 3",
        "imagekeeper_disk_orphans_pruned_total{result=\"failed\"} 1",
        "imagekeeper_disk_orphans_pruned_total{result=\"skipped\"} 2",
        "imagekeeper_disk_orphans_pruned_bytes_total 5242880",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    let mut none = full_snapshot();
    none.disk.0 = None;
    let text = scrape(none);
    assert!(!text.contains("imagekeeper_disk_bytes"), "{text}");
    assert!(
        text.contains("imagekeeper_disk_accountings_total"),
        "{text}"
    );
}

/// The text a scrape of `snapshot` alone gives.
fn scrape(snapshot: Snapshot) -> String {
    let mut registry = Registry::with_prefix(METRIC_PREFIX);
    registry.register_collector(Box::new(snapshot));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    text
}

/// KEP-6053's counts with one sample in every family.
fn kep6053_counts(h: &Histogram) -> AttemptCounts {
    use crate::gc::{AttemptReason, DeletionReason, SkipReason};
    let attempt = (
        GcOperation::GarbageCollect,
        GcTrigger::Periodic,
        AttemptResult::Success,
        AttemptReason::Threshold,
    );
    AttemptCounts {
        attempts: BTreeMap::from([(attempt, 1)]),
        freed: BTreeMap::from([(attempt, h.clone())]),
        target: BTreeMap::from([(
            (GcOperation::GarbageCollect, GcTrigger::Periodic),
            h.clone(),
        )]),
        deletions: BTreeMap::from([(
            (
                GcOperation::GarbageCollect,
                GcTrigger::Periodic,
                DeletionReason::Space,
                true,
            ),
            1,
        )]),
        skipped: BTreeMap::from([(
            (
                GcOperation::GarbageCollect,
                GcTrigger::Periodic,
                SkipReason::InUse,
            ),
            1,
        )]),
        usage_before: Some(90),
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

/// The cluster signals' sample reaches the scrape: the pods, the images by kind and the
/// watch's health; with no watch started, none of their families is written.
#[test]
fn the_cluster_signals_watch_is_scraped_only_once_it_started() {
    let text = scrape(full_snapshot());
    for line in [
        "imagekeeper_cluster_signal_pods 3",
        "imagekeeper_cluster_signal_pods_refused_total 1",
        "imagekeeper_cluster_signal_images{kind=\"bound_pod\"} 4",
        "imagekeeper_cluster_watch_synced{resource=\"pods\"} 1",
        "imagekeeper_cluster_watch_failing{resource=\"pods\"} 1",
        "imagekeeper_cluster_watch_errors_total{resource=\"pods\"} 2",
        "imagekeeper_cluster_signal_images{kind=\"daemonset\"} 2",
        "imagekeeper_cluster_watch_synced{resource=\"daemonsets\"} 1",
        "imagekeeper_cluster_watch_failing{resource=\"daemonsets\"} 0",
        "imagekeeper_cluster_watch_errors_total{resource=\"daemonsets\"} 5",
        "imagekeeper_cluster_signal_images{kind=\"cronjob\"} 1",
        "imagekeeper_cluster_signal_images{kind=\"rollback\"} 3",
        "imagekeeper_cluster_signal_objects_refused_total 2",
        "imagekeeper_cluster_watch_synced{resource=\"cronjobs\"} 1",
        "imagekeeper_cluster_watch_failing{resource=\"replicasets\"} 1",
        "imagekeeper_cluster_watch_errors_total{resource=\"replicasets\"} 9",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    let mut off = full_snapshot();
    off.cluster_signals = None;
    off.cluster_knowledge = None;
    assert!(!scrape(off).contains("imagekeeper_cluster_"));
}
