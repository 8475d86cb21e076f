//! The GC manager against a scripted runtime and a real store on disk: kubelet's
//! image_gc_manager_test.go scenarios in our terms, each also run with a restart (drop the
//! manager and the store, reopen the file) in the middle that must not change the outcome, and
//! the restart cases where the kubelet goes wrong because it forgets history.
//!
//! `lab` runs detect and GarbageCollect against the real containerd of `scripts/cri-lab`.

pub(crate) mod hooked;
mod journal;
mod kep6053;
mod kubelet_records;
mod lab;
mod late_release;
mod pins;
mod races;
mod volumes;
mod warm;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hooked::{Hooked, Hooks};
use imagekeeper::gc::{
    GcConfig, GcError, GcPolicy, GcReport, ImageGcManager, PinPatterns, RemovalReason,
};
use imagekeeper::model::{
    ContainerState, ImageId, ImageRecord, RecordKey, RuntimeContainer, RuntimeImage, UnixNanos,
};
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::{Store, meta_keys};

/// A node: a scripted runtime, a store file and a manager that can be restarted.
struct Node {
    _dir: tempfile::TempDir,
    path: PathBuf,
    runtime: ScriptedRuntime,
    config: GcConfig,
    manager: Option<ImageGcManager<ScriptedRuntime>>,
}

const T0: i64 = 1_800_000_000;

fn at(secs_after_t0: i64) -> UnixNanos {
    UnixNanos::from_secs(T0 + secs_after_t0)
}

fn image(id: &str, size: u64) -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec![format!("registry.example/{id}:1")],
        size,
        ..RuntimeImage::default()
    }
}

fn container(id: &str, image_id: &str) -> RuntimeContainer {
    RuntimeContainer {
        id: id.to_owned(),
        pod_sandbox_id: "pod".to_owned(),
        image: image_id.to_owned(),
        image_id: ImageId::new(image_id),
        state: ContainerState::Running,
        runtime_handler: String::new(),
    }
}

fn policy(high: i64, low: i64, min_age_s: u64, max_age_s: u64) -> GcPolicy {
    GcPolicy {
        high_threshold_percent: high,
        low_threshold_percent: low,
        min_age: Duration::from_secs(min_age_s),
        max_age: Duration::from_secs(max_age_s),
        ..GcPolicy::default()
    }
}

impl Node {
    fn new(policy: GcPolicy) -> Node {
        Node::with_config(GcConfig {
            policy,
            ..GcConfig::default()
        })
    }

    fn with_config(config: GcConfig) -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("records.redb");
        let mut node = Node {
            _dir: dir,
            path,
            runtime: ScriptedRuntime::new(),
            config,
            manager: None,
        };
        node.open();
        node
    }

    fn open(&mut self) {
        let store = Arc::new(Store::open(&self.path, at(0)).expect("open store"));
        self.manager = Some(
            ImageGcManager::new(self.runtime.clone(), store, self.config.clone())
                .expect("valid policy"),
        );
    }

    /// Drops the manager and the store and reopens the file, when `restart` is set.
    fn maybe_restart(&mut self, restart: bool) {
        if restart {
            self.manager = None;
            self.open();
        }
    }

    fn manager(&self) -> &ImageGcManager<ScriptedRuntime> {
        self.manager
            .as_ref()
            .expect("manager is open between restarts")
    }

    fn set_images(&self, images: Vec<RuntimeImage>) {
        self.runtime.state().images = images.into();
    }

    fn set_containers(&self, containers: Vec<RuntimeContainer>) {
        self.runtime.state().containers = containers;
    }

    fn set_fs(&self, capacity: u64, available: u64) {
        self.runtime.state().fs = Some((capacity, available));
    }

    async fn detect(&self, t: i64) {
        self.manager().detect(at(t)).await.expect("detect");
    }

    async fn gc(&self, t: i64) -> GcReport {
        self.manager().garbage_collect(at(t)).await
    }

    fn record(&self, id: &str) -> Option<ImageRecord> {
        self.manager()
            .store()
            .get(&RecordKey::new(id, ""))
            .expect("get record")
    }

    fn record_ids(&self) -> BTreeSet<String> {
        self.manager()
            .store()
            .records()
            .expect("records")
            .into_iter()
            .map(|r| r.key.image_id.0)
            .collect()
    }

    fn runtime_ids(&self) -> BTreeSet<String> {
        self.runtime
            .state()
            .images
            .iter()
            .map(|i| i.id.0.clone())
            .collect()
    }
}

fn removed_ids(report: &GcReport) -> Vec<&str> {
    report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// Runs `scenario` without and with a restart in the middle.
macro_rules! both_ways {
    ($scenario:ident) => {
        for restart in [false, true] {
            $scenario(restart).await;
        }
    };
}

#[tokio::test]
async fn initial_detect_records_every_image_and_marks_in_use_ones_used() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(GcPolicy::default());
        node.set_images(vec![image("a", 1024), image("b", 2048), image("c", 4096)]);
        node.set_containers(vec![container("c1", "b")]);
        node.detect(10).await;
        node.maybe_restart(restart);
        let a = node.record("a").expect("a recorded");
        let b = node.record("b").expect("b recorded");
        assert_eq!(a.first_detected, at(10));
        assert_eq!(a.last_used, UnixNanos::NEVER, "unused image was never used");
        assert_eq!(a.size, 1024);
        assert_eq!(b.last_used, at(10), "in-use image is used at detect time");
        assert_eq!(node.record_ids(), set(&["a", "b", "c"]));
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn new_image_gets_its_own_detect_time_and_old_ones_keep_theirs() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(GcPolicy::default());
        node.set_images(vec![image("a", 1), image("b", 2)]);
        node.set_containers(vec![container("c1", "a")]);
        node.detect(0).await;
        node.maybe_restart(restart);
        node.set_images(vec![image("a", 1), image("b", 2), image("c", 3)]);
        node.detect(100).await;
        assert_eq!(node.record("c").expect("c").first_detected, at(100));
        assert_eq!(node.record("a").expect("a").first_detected, at(0));
        assert_eq!(node.record("a").expect("a").last_used, at(100));
        assert_eq!(node.record("b").expect("b").first_detected, at(0));
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn stopped_container_leaves_last_used_where_it_was() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(GcPolicy::default());
        node.set_images(vec![image("a", 1)]);
        node.set_containers(vec![container("c1", "a")]);
        node.detect(10).await;
        node.maybe_restart(restart);
        node.set_containers(vec![]);
        node.detect(20).await;
        assert_eq!(node.record("a").expect("a").last_used, at(10));
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn exited_containers_still_keep_their_image_in_use() {
    let node = Node::new(GcPolicy::default());
    node.set_images(vec![image("a", 1)]);
    let mut exited = container("c1", "a");
    exited.state = ContainerState::Exited;
    node.set_containers(vec![exited]);
    node.detect(10).await;
    assert_eq!(node.record("a").expect("a").last_used, at(10));
}

#[tokio::test]
async fn images_gone_from_the_runtime_lose_their_records() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(GcPolicy::default());
        node.set_images(vec![image("a", 1), image("b", 2)]);
        node.detect(0).await;
        node.maybe_restart(restart);
        node.set_images(vec![image("b", 2)]);
        node.detect(10).await;
        assert_eq!(node.record_ids(), set(&["b"]));
    }
    both_ways!(scenario);
}

/// A detect that changes no record still commits once: the heartbeat (the last time the node
/// was watched, which MaxAge needs). A detect repeated at the same instant writes nothing.
#[tokio::test]
async fn a_detect_that_changes_no_record_commits_its_heartbeat_once() {
    let node = Node::new(GcPolicy::default());
    node.set_images(vec![image("a", 1)]);
    node.detect(0).await;
    let store = node.manager().store().clone();
    let records = store.records().expect("records");
    let last_detect = store.meta(meta_keys::LAST_DETECT).expect("meta");
    let commits = store.commits();
    let report = node.manager().detect(at(10)).await.expect("detect");
    assert!(report.committed);
    assert_eq!(store.commits(), commits + 1);
    assert_eq!(store.records().expect("records"), records);
    assert_eq!(
        store.meta(meta_keys::HEARTBEAT).expect("meta"),
        Some(at(10).0)
    );
    // last_detect stays the latest detect that changed something.
    assert_eq!(
        store.meta(meta_keys::LAST_DETECT).expect("meta"),
        last_detect
    );
    let report = node.manager().detect(at(10)).await.expect("detect");
    assert!(!report.committed);
    assert_eq!(store.commits(), commits + 1);
}

/// Capacity 10 000 with 1 000 available: usage 90 %, so with 85/80 GC must free 1 000 bytes.
fn over_high(node: &Node) {
    node.set_fs(10_000, 1_000);
}

#[tokio::test]
async fn in_use_images_are_never_freed() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 0));
        node.set_images(vec![image("a", 1_000), image("b", 1_000)]);
        node.set_containers(vec![container("c1", "a")]);
        node.detect(0).await;
        node.maybe_restart(restart);
        over_high(&node);
        let report = node.gc(100).await;
        assert_eq!(removed_ids(&report), ["b"]);
        assert!(report.error.is_none(), "{:?}", report.error);
        assert_eq!(node.record_ids(), set(&["a"]));
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn least_recently_used_goes_first() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 0));
        node.set_images(vec![image("old", 1_000), image("new", 1_000)]);
        node.set_containers(vec![container("c1", "old")]);
        node.detect(0).await;
        node.set_containers(vec![container("c2", "new")]);
        node.detect(50).await;
        node.maybe_restart(restart);
        node.set_containers(vec![]);
        over_high(&node);
        let report = node.gc(100).await;
        assert_eq!(removed_ids(&report), ["old"]);
        assert_eq!(report.freed, 1_000);
        assert_eq!(node.record_ids(), set(&["new"]));
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn ties_on_last_used_are_broken_by_first_detected() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 0));
        node.set_images(vec![image("early", 1_000)]);
        node.detect(0).await;
        node.set_images(vec![image("early", 1_000), image("late", 1_000)]);
        node.detect(10).await;
        node.maybe_restart(restart);
        over_high(&node);
        let report = node.gc(100).await;
        assert_eq!(
            removed_ids(&report),
            ["early"],
            "both never used: first detected goes first"
        );
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn pinned_images_are_never_freed_and_all_pinned_frees_nothing() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 0));
        let mut pinned = image("pinned", 5_000);
        pinned.pinned = true;
        node.set_images(vec![pinned.clone(), image("plain", 1_000)]);
        node.detect(0).await;
        node.maybe_restart(restart);
        over_high(&node);
        let report = node.gc(100).await;
        assert_eq!(removed_ids(&report), ["plain"]);

        let mut all = Node::new(policy(85, 80, 0, 0));
        let mut other = image("pinned2", 1_000);
        other.pinned = true;
        all.set_images(vec![pinned, other]);
        all.detect(0).await;
        all.maybe_restart(restart);
        over_high(&all);
        let report = all.gc(100).await;
        assert!(report.removed.is_empty());
        assert!(matches!(
            report.error,
            Some(GcError::InsufficientSpace { freed: 0, .. })
        ));
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn pin_patterns_protect_images_the_runtime_does_not_pin() {
    let node = Node::with_config(GcConfig {
        policy: policy(85, 80, 0, 0),
        pins: PinPatterns::new(vec!["registry.example/keep*".into()]),
        ..GcConfig::default()
    });
    node.set_images(vec![image("keep", 1_000), image("drop", 1_000)]);
    node.detect(0).await;
    over_high(&node);
    let report = node.gc(100).await;
    assert_eq!(removed_ids(&report), ["drop"]);
    assert!(node.record("keep").expect("keep").pinned);
}

#[tokio::test]
async fn sandbox_image_is_in_use() {
    let node = Node::with_config(GcConfig {
        policy: policy(85, 80, 0, 0),
        sandbox_image: Some("registry.example/pause:1".into()),
        ..GcConfig::default()
    });
    node.set_images(vec![image("pause", 1_000), image("app", 1_000)]);
    node.detect(0).await;
    let report = node.manager().delete_unused_images(at(100)).await;
    assert_eq!(removed_ids(&report), ["app"]);
    assert_eq!(node.record("pause").expect("pause").last_used, at(100));
}

#[tokio::test]
async fn below_the_high_threshold_nothing_is_removed() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 0));
        node.set_images(vec![image("a", 1_000)]);
        node.detect(0).await;
        node.maybe_restart(restart);
        node.set_fs(10_000, 1_600); // usage 84 %
        let report = node.gc(100).await;
        assert!(report.removed.is_empty());
        assert!(report.error.is_none());
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn image_filesystem_failures_are_errors() {
    let node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![image("a", 1_000)]);
    // No fs scripted: capacity 0.
    let report = node.gc(100).await;
    assert_eq!(
        report.error.map(|e| e.to_string()).as_deref(),
        Some("invalid capacity 0 on image filesystem")
    );
    node.runtime.state().down = Some("connection refused".into());
    let report = node.gc(200).await;
    let error = report.error.expect("runtime down is an error").to_string();
    assert!(error.contains("connection refused"), "{error}");
}

#[tokio::test]
async fn enough_freed_is_success_and_stops_at_the_amount() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 0));
        node.set_images(vec![image("a", 600), image("b", 600), image("c", 600)]);
        node.detect(0).await;
        node.set_images(vec![image("a", 600), image("b", 600), image("c", 600)]);
        node.maybe_restart(restart);
        over_high(&node);
        let report = node.gc(100).await;
        assert_eq!(
            removed_ids(&report),
            ["a", "b"],
            "1 200 >= 1 000: stop after two"
        );
        assert!(report.error.is_none());
        assert_eq!(node.record_ids(), node.runtime_ids());
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn not_enough_freed_gives_kubelets_message() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 0));
        node.set_images(vec![image("a", 300)]);
        node.detect(0).await;
        node.maybe_restart(restart);
        node.set_fs(100 * 1024 * 1024 * 1024, 1024 * 1024 * 1024);
        let report = node.gc(100).await;
        assert_eq!(removed_ids(&report), ["a"]);
        assert_eq!(
            report.error.map(|e| e.to_string()).as_deref(),
            Some(
                "Insufficient free disk space on the node's image filesystem (99% of 100.0 GiB used). Failed to free sufficient space by deleting unused images (freed 300 bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
            )
        );
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn min_age_protects_young_images() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 120, 0));
        node.set_images(vec![image("a", 1_000)]);
        node.detect(0).await;
        node.maybe_restart(restart);
        over_high(&node);
        let report = node.gc(60).await;
        assert!(report.removed.is_empty(), "60 s old < MinAge 2m");
        assert!(matches!(
            report.error,
            Some(GcError::InsufficientSpace { .. })
        ));
        let report = node.gc(121).await;
        assert_eq!(removed_ids(&report), ["a"]);
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn max_age_removes_images_unused_for_longer_and_counts_never_used_from_first_detected() {
    async fn scenario(restart: bool) {
        let mut node = Node::new(policy(85, 80, 0, 3600));
        node.set_images(vec![image("used", 1), image("never", 1), image("busy", 1)]);
        node.set_containers(vec![container("c1", "used"), container("c2", "busy")]);
        node.detect(0).await;
        node.set_containers(vec![container("c2", "busy")]);
        node.set_images(vec![
            image("used", 1),
            image("never", 1),
            image("busy", 1),
            image("fresh", 1),
        ]);
        node.detect(1800).await;
        node.maybe_restart(restart);
        node.set_fs(10_000, 9_000);
        let report = node.gc(3600).await;
        assert!(
            report.removed.is_empty(),
            "exactly MaxAge is not older than MaxAge"
        );
        let report = node.gc(3601).await;
        let mut removed = removed_ids(&report);
        removed.sort_unstable();
        assert_eq!(removed, ["never", "used"]);
        assert!(
            report
                .removed
                .iter()
                .all(|r| r.reason == RemovalReason::Age)
        );
        assert_eq!(node.record_ids(), set(&["busy", "fresh"]));
        assert_eq!(node.manager().metrics().collected()[0], ("age", 2));
    }
    both_ways!(scenario);
}

/// A node whose clock ran a year ahead, then was set right: the stamps written meanwhile
/// would keep "ran-ahead" used-recently (and both images young) for a year. The detect at the
/// real time clamps them to its time, logs and counts it and the clock going back, and MaxAge
/// then counts from the clamped stamps, across a restart too.
#[tokio::test]
async fn stamps_written_while_the_clock_was_ahead_are_clamped_so_max_age_applies_again() {
    async fn scenario(restart: bool) {
        const YEAR: i64 = 365 * 24 * 3600;
        let mut node = Node::new(policy(85, 80, 600, 3600));
        node.set_images(vec![image("ran-ahead", 1), image("seen-ahead", 1)]);
        node.set_containers(vec![container("c1", "ran-ahead")]);
        node.detect(YEAR).await;
        let store = node.manager().store().clone();
        let future = store.check_clock(at(0)).expect("check clock");
        assert_eq!(
            future.len(),
            4,
            "3 future stamps and last_detect: {future:?}"
        );

        node.set_containers(vec![]);
        node.detect(0).await;
        let ran = node.record("ran-ahead").expect("recorded");
        assert_eq!((ran.first_detected, ran.last_used), (at(0), at(0)));
        let seen = node.record("seen-ahead").expect("recorded");
        assert_eq!(
            (seen.first_detected, seen.last_used),
            (at(0), UnixNanos::NEVER)
        );
        let last_detect = store.meta(meta_keys::LAST_DETECT).expect("meta");
        assert_eq!(
            last_detect,
            Some(at(0).0),
            "last_detect follows the clock back"
        );
        assert!(store.check_clock(at(0)).expect("check clock").is_empty());
        let metrics = node.manager().metrics();
        assert_eq!(metrics.future_stamps_clamped(), 2);
        assert_eq!(metrics.clock_went_back(), 1);
        drop(store);

        node.maybe_restart(restart);
        node.set_fs(10_000, 9_000);
        let report = node.gc(3600).await;
        assert!(report.removed.is_empty(), "{:?}", report.removed);
        let report = node.gc(3601).await;
        let mut removed = removed_ids(&report);
        removed.sort_unstable();
        assert_eq!(removed, ["ran-ahead", "seen-ahead"]);
        assert!(
            report
                .removed
                .iter()
                .all(|r| r.reason == RemovalReason::Age)
        );
        // Detects at the real time again: no more clock events.
        let metrics = node.manager().metrics();
        assert_eq!(metrics.clock_went_back(), if restart { 0 } else { 1 });
        assert_eq!(metrics.future_stamps_clamped(), if restart { 0 } else { 2 });
    }
    both_ways!(scenario);
}

#[tokio::test]
async fn max_age_disabled_removes_nothing_for_age() {
    let node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![image("a", 1)]);
    node.detect(0).await;
    node.set_fs(10_000, 9_000);
    let report = node.gc(1_000_000).await;
    assert!(report.removed.is_empty());
}

#[tokio::test]
async fn invalid_policies_are_refused_with_kubelets_messages() {
    let (_dir, store) = crate::support::temp_store(at(0));
    let store = Arc::new(store);
    let cases = [
        (
            policy(101, 80, 0, 0),
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
        ),
        (
            policy(80, 90, 0, 0),
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80",
        ),
    ];
    for (policy, message) in cases {
        let config = GcConfig {
            policy,
            ..GcConfig::default()
        };
        let err = ImageGcManager::new(ScriptedRuntime::new(), store.clone(), config)
            .err()
            .expect("invalid policy refused");
        assert_eq!(err.to_string(), message);
    }
}

#[tokio::test]
async fn failed_removals_are_skipped_the_walk_goes_on_and_the_cycle_errs() {
    let node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![image("a-stuck", 1_000), image("b", 1_000)]);
    node.detect(0).await;
    node.runtime.state().remove_fails.insert("a-stuck".into());
    over_high(&node);
    let report = node.gc(100).await;
    assert_eq!(removed_ids(&report), ["b"]);
    assert!(
        node.record("a-stuck").is_some(),
        "record kept until the runtime confirms"
    );
    let error = report.error.expect("cycle reports the failure").to_string();
    assert!(error.starts_with("wanted to free 1000 bytes, but freed 1000 bytes space with errors in image deletion: rpc error"), "{error}");
    assert_eq!(node.manager().metrics().remove_failures(), 1);
}

#[tokio::test]
async fn delete_unused_removes_all_unused_but_honours_min_age_and_in_use() {
    let node = Node::new(policy(85, 80, 120, 0));
    node.set_images(vec![image("old", 1), image("busy", 1)]);
    node.set_containers(vec![container("c1", "busy")]);
    node.detect(0).await;
    node.set_images(vec![image("old", 1), image("busy", 1), image("young", 1)]);
    node.detect(200).await;
    let report = node.manager().delete_unused_images(at(250)).await;
    assert_eq!(removed_ids(&report), ["old"]);
    assert!(
        report
            .removed
            .iter()
            .all(|r| r.reason == RemovalReason::Unused)
    );
    assert_eq!(node.record_ids(), set(&["busy", "young"]));
}

#[tokio::test]
async fn image_cache_is_sorted_by_size_then_id_descending() {
    let node = Node::new(GcPolicy::default());
    node.set_images(vec![image("a", 5), image("b", 10), image("c", 5)]);
    node.manager().refresh_image_cache().await.expect("refresh");
    let ids: Vec<String> = node
        .manager()
        .image_list()
        .into_iter()
        .map(|i| i.id.0)
        .collect();
    assert_eq!(ids, ["b", "c", "a"]);
}

// Restart cases where the kubelet goes wrong because it forgets history.

#[tokio::test]
async fn restart_keeps_first_detected_so_old_images_are_not_young_again() {
    let mut node = Node::new(policy(85, 80, 120, 0));
    node.set_images(vec![image("a", 1_000)]);
    node.detect(0).await;
    node.maybe_restart(true);
    // The kubelet would now set first detected = restart time and MinAge would protect it.
    over_high(&node);
    let report = node.gc(3600).await;
    assert_eq!(removed_ids(&report), ["a"]);
}

#[tokio::test]
async fn image_first_seen_after_a_restart_is_protected_by_min_age() {
    let mut node = Node::new(policy(85, 80, 120, 0));
    node.detect(0).await;
    node.maybe_restart(true);
    node.set_images(vec![image("new", 1_000)]);
    node.detect(3600).await;
    over_high(&node);
    let report = node.gc(3630).await;
    assert!(report.removed.is_empty());
}

#[tokio::test]
async fn max_age_applies_right_after_a_restart() {
    let mut node = Node::new(policy(85, 80, 0, 3600));
    node.set_images(vec![image("stale", 1)]);
    node.set_containers(vec![container("c1", "stale")]);
    node.detect(0).await;
    node.set_containers(vec![]);
    node.maybe_restart(true);
    node.set_fs(10_000, 9_000);
    // The kubelet skips MaxAge until it has been up longer than MaxAge.
    let report = node.gc(7200).await;
    assert_eq!(removed_ids(&report), ["stale"]);
}

#[tokio::test]
async fn last_used_order_survives_a_restart() {
    let mut node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![
        image("b-used-early", 1_000),
        image("a-used-late", 1_000),
    ]);
    node.set_containers(vec![container("c1", "b-used-early")]);
    node.detect(0).await;
    node.set_containers(vec![container("c2", "a-used-late")]);
    node.detect(100).await;
    node.set_containers(vec![]);
    node.maybe_restart(true);
    over_high(&node);
    // The kubelet would have last_used = 0 for both and fall back to detect time and id.
    let report = node.gc(200).await;
    assert_eq!(removed_ids(&report), ["b-used-early"]);
}

/// The kubelet's TestDeletePinnedImage: the runtime lists one image twice, pinned and then
/// unpinned; the last entry wins (on every detect, not only the first), so DeleteUnusedImages
/// removes it.
#[tokio::test]
async fn an_image_listed_pinned_then_unpinned_is_unpinned_and_collected() {
    let node = Node::new(policy(85, 80, 0, 0));
    let mut pinned = image("1", 1_024);
    pinned.pinned = true;
    let unpinned = image("1", 1_024);
    node.set_images(vec![unpinned.clone()]);
    node.detect(0).await;
    node.set_images(vec![pinned, unpinned]);
    node.detect(10).await;
    node.detect(20).await;
    assert!(!node.record("1").expect("recorded").pinned);
    let report = node.manager().delete_unused_images(at(30)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(removed_ids(&report), ["1"]);
}

/// The kubelet's TestDetectImagesInitialDetectWithRuntimeHandlerInImageCriAPIFeatureGate:
/// records are keyed by (id, runtime handler). imagekeeper differs in one way, on the safe
/// side: a container keeps its image in use whatever handler either is listed with.
#[tokio::test]
async fn records_are_keyed_by_id_and_runtime_handler_and_a_container_of_any_handler_uses_its_image()
{
    let node = Node::new(GcPolicy::default());
    let mut kata = image("a", 1);
    kata.runtime_handler = "kata".into();
    let mut plain_b = image("b", 2);
    plain_b.runtime_handler = String::new();
    node.set_images(vec![kata, plain_b]);
    let mut c = container("c1", "a");
    c.runtime_handler = "runc".into();
    node.set_containers(vec![c]);
    node.detect(10).await;
    let store = node.manager().store();
    let a = store
        .get(&RecordKey::new("a", "kata"))
        .expect("get")
        .expect("keyed with its handler");
    assert_eq!(a.last_used, at(10));
    assert_eq!(store.get(&RecordKey::new("a", "")).expect("get"), None);
    assert_eq!(node.record("b").expect("b").last_used, UnixNanos::NEVER);
}

/// The kubelet's TestDeleteUnusedImagesLimitByImageLiveTime: MinAge keeps young images from
/// DeleteUnusedImages, and the same images go once they are old enough.
#[tokio::test]
async fn delete_unused_keeps_young_images_until_they_reach_min_age() {
    let node = Node::new(policy(85, 80, 3, 0));
    node.set_images(vec![image("a", 1), image("b", 2), image("busy", 3)]);
    node.set_containers(vec![container("c1", "busy")]);
    node.detect(0).await;
    let report = node.manager().delete_unused_images(at(1)).await;
    assert!(report.removed.is_empty());
    let report = node.manager().delete_unused_images(at(3)).await;
    assert_eq!(removed_ids(&report), ["a", "b"]);
}

/// The kubelet's TestFreeSpaceTiesBrokenByDetectedTime as it asserts: an image never used,
/// though detected later, goes before one that was used.
#[tokio::test]
async fn a_never_used_image_goes_before_a_used_one_detected_earlier() {
    let node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![image("used", 1_000)]);
    node.set_containers(vec![container("c1", "used")]);
    node.detect(0).await;
    node.set_containers(vec![]);
    node.set_images(vec![image("used", 1_000), image("never", 2_000)]);
    node.detect(10).await;
    over_high(&node);
    let report = node.gc(100).await;
    assert_eq!(removed_ids(&report), ["never"]);
}

/// The kubelet's TestGarbageCollectCadvisorFailure: only the image filesystem stats fail
/// (detect works); GarbageCollect reports the runtime's error as it is, not wrapped (the
/// kubelet returns ImageFsStats' error unchanged), and removes nothing.
#[tokio::test]
async fn gc_fails_when_only_the_image_filesystem_stats_fail() {
    let node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![image("a", 1_000)]);
    node.runtime.state().fs_error = Some("cadvisor: no stats".into());
    let report = node.gc(100).await;
    let error = report.error.expect("stats failure is an error").to_string();
    assert_eq!(error, "rpc error: code = Unknown desc = cadvisor: no stats");
    assert!(report.removed.is_empty());
    assert!(node.record("a").is_some(), "detect ran before the failure");
}

/// Hooks that run `after_remove` once RemoveImage has succeeded: what happens to the node
/// between the runtime's confirmation and the record's deletion.
struct AfterRemove {
    after_remove: Arc<dyn Fn() + Send + Sync>,
}

impl Hooks for AfterRemove {
    async fn after(&self, method: &'static str, _: &str, ok: bool) {
        if method == "RemoveImage" && ok {
            (self.after_remove)();
        }
    }
}

/// Commits junk records until the store cannot commit even one after reopening: the
/// filesystem (already full) and the database's own free pages are both used up.
pub(crate) fn exhaust(store: &Store) {
    let junk = |n: usize, size: usize| {
        let mut batch = imagekeeper::store::Batch::new();
        for i in 0..size {
            batch.upsert(
                RecordKey::new(format!("junk-{n:06}-{i:03}-{}", "j".repeat(1000)), ""),
                ImageRecord {
                    first_detected: at(0),
                    last_used: at(0),
                    size: 1,
                    pinned: false,
                },
            );
        }
        batch
    };
    let mut n = 0;
    while store.apply(&junk(n, 20)).is_ok() {
        n += 1;
        assert!(n < 200, "a 2 MiB filesystem never filled");
    }
    while store.apply(&junk(n, 1)).is_ok() {
        n += 1;
        assert!(n < 4_000, "single records kept fitting");
    }
}

/// Regression (issue 12, item 5): the disk under the database fills between the runtime
/// removing GC's victim and the record's deletion. The deletion fails, the removal is still
/// reported (the image is gone), the record stays, and nothing is lost: once space is back,
/// the next detect on the same manager and store drops the victim's record (and every other
/// record the runtime does not list). Before the fix, that detect failed with redb's
/// "Previous I/O error" until a restart.
#[tokio::test]
async fn gc_whose_record_delete_fails_on_a_full_disk_converges_at_the_next_detect() {
    let Some(fs) = crate::support::Tmpfs::mount(
        "gc_whose_record_delete_fails_on_a_full_disk_converges_at_the_next_detect",
        "2m",
    ) else {
        return;
    };
    let store = Arc::new(Store::open(&fs.path().join("records.redb"), at(0)).expect("open"));
    let scripted = ScriptedRuntime::new();
    scripted.state().images = vec![image("victim", 1_000), image("kept", 1_000)].into();
    scripted.state().containers = vec![container("c1", "kept")];
    scripted.state().fs = Some((10_000, 1_000));
    let filler = fs.path().join("filler");
    let after_remove: Arc<dyn Fn() + Send + Sync> = {
        let store = store.clone();
        let filler = filler.clone();
        let root = fs.path().to_owned();
        Arc::new(move || {
            crate::support::Tmpfs::fill_at(&root, &filler);
            exhaust(&store);
        })
    };
    let manager = ImageGcManager::new(
        Hooked {
            inner: scripted.clone(),
            hooks: AfterRemove { after_remove },
        },
        store.clone(),
        GcConfig {
            policy: policy(85, 80, 0, 0),
            ..GcConfig::default()
        },
    )
    .expect("valid policy");
    manager.detect(at(0)).await.expect("detect");

    let report = manager.garbage_collect(at(100)).await;
    assert_eq!(removed_ids(&report), ["victim"], "{:?}", report.error);
    assert_eq!(scripted.state().removed, ["victim"]);
    assert!(!store.is_healthy(), "the record delete met the full disk");
    // Reading reopens the store (a read needs no space); the record is still there.
    assert!(
        store
            .get(&RecordKey::new("victim", ""))
            .expect("read")
            .is_some()
    );

    std::fs::remove_file(&filler).expect("delete the filler");
    let detected = manager
        .detect(at(200))
        .await
        .expect("detect after space is back");
    assert!(detected.committed);
    assert!(store.is_healthy());
    assert!(store.reopens() >= 1);
    let ids: BTreeSet<String> = store
        .records()
        .expect("records")
        .into_iter()
        .map(|r| r.key.image_id.0)
        .collect();
    assert_eq!(ids, set(&["kept"]));
    assert_eq!(store.check_invariants().expect("check"), []);
}
