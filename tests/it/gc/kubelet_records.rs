//! The kubelet's image pull records (KEP-2535) in GC, over a scripted runtime and a kubelet
//! root directory holding files in the kubelet's own format: a pull intent keeps the images
//! it names through GarbageCollect, DeleteUnusedImages (prune) and the dry run; a pulled
//! record's time counts as a use for LRU order and MaxAge, never moving last_used back; an
//! observed preloaded record is shown by the dry run and counts as no use.

use std::path::Path;

use imagekeeper::gc::{Decision, GcConfig, GcPolicy, ImageGcManager};
use imagekeeper::kubelet::record_file_name;
use imagekeeper::model::{ImageId, RuntimeImage, UnixNanos};
use imagekeeper::replay::ScriptedRuntime;

use super::{Node, at, container, image, policy, removed_ids};

/// Writes an ImagePullIntent as the kubelet does (tmp file, then rename).
pub(crate) fn write_intent(root: &Path, version: &str, image: &str) {
    write(
        root,
        "pulling",
        image,
        &format!(
            r#"{{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/{version}","image":"{image}"}}"#
        ),
    );
}

/// Writes an ImagePulledRecord as the kubelet does.
pub(crate) fn write_pulled(root: &Path, image_ref: &str, last_updated: &str) {
    write(
        root,
        "pulled",
        image_ref,
        &format!(
            r#"{{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"{last_updated}","imageRef":"{image_ref}","credentialMapping":{{"registry.example/x":{{"kubernetesSecrets":[{{"uid":"u","namespace":"default","name":"pull-secret","credentialHash":"h"}}]}}}}}}"#
        ),
    );
}

fn write(root: &Path, dir: &str, key: &str, json: &str) {
    write_at(root, dir, key, json, at(0));
}

/// Writes a record file whose mtime is `written` (the tests' clock, not the wall clock: an
/// intent's age is its mtime against the injected now).
fn write_at(root: &Path, dir: &str, key: &str, json: &str, written: UnixNanos) {
    let dir = root.join("image_manager").join(dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let target = dir.join(record_file_name(key));
    let tmp = target.with_extension("tmp");
    std::fs::write(&tmp, json).expect("write tmp");
    let mtime = std::time::SystemTime::UNIX_EPOCH
        + std::time::Duration::from_nanos(u64::try_from(written.0).expect("after 1970"));
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .and_then(|f| f.set_modified(mtime))
        .expect("set mtime");
    std::fs::rename(&tmp, &target).expect("rename");
}

/// The time `secs` after the tests' T0, as the kubelet writes it.
fn rfc3339(secs: i64) -> String {
    imagekeeper::format::format_rfc3339(at(secs))
}

fn node_reading(root: &Path, policy: GcPolicy) -> Node {
    Node::with_config(GcConfig {
        policy,
        kubelet_root_dir: Some(root.to_owned()),
        ..GcConfig::default()
    })
}

fn busybox(id: &str) -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec!["docker.io/library/busybox:latest".into()],
        size: 1_000,
        ..RuntimeImage::default()
    }
}

#[tokio::test]
async fn images_a_kubelet_pull_intent_names_survive_gc_and_prune_while_equal_ones_go() {
    for prune in [false, true] {
        let kubelet = tempfile::tempdir().expect("tempdir");
        // One intent by full name (v1alpha1), one by a short name the runtime resolves to
        // docker.io/library/busybox:latest (v1beta1).
        write_intent(kubelet.path(), "v1alpha1", "registry.example/a:1");
        write_intent(kubelet.path(), "v1beta1", "busybox");
        let node = node_reading(kubelet.path(), policy(85, 0, 0, 0));
        node.set_images(vec![image("a", 1_000), image("b", 1_000), busybox("bb")]);
        node.set_fs(3_000, 0);
        node.detect(0).await;
        for id in ["a", "bb"] {
            let record = node.record(id).expect("recorded");
            assert_eq!(record.last_used, at(0), "{id}: in use at detect");
        }
        let report = if prune {
            node.manager().delete_unused_images(at(1_000)).await
        } else {
            node.gc(1_000).await
        };
        assert_eq!(removed_ids(&report), ["b"], "prune: {prune}");
        assert_eq!(
            node.runtime_ids(),
            super::set(&["a", "bb"]),
            "prune: {prune}"
        );
    }
}

#[tokio::test]
async fn without_a_kubelet_root_dir_the_intents_are_not_read() {
    let kubelet = tempfile::tempdir().expect("tempdir");
    write_intent(kubelet.path(), "v1alpha1", "registry.example/a:1");
    let node = Node::new(policy(85, 0, 0, 0));
    node.set_images(vec![image("a", 1_000)]);
    node.detect(0).await;
    let report = node.manager().delete_unused_images(at(1_000)).await;
    assert_eq!(removed_ids(&report), ["a"]);
}

#[tokio::test]
async fn a_kubelet_pulled_record_counts_as_a_use_for_lru_order() {
    let kubelet = tempfile::tempdir().expect("tempdir");
    let node = node_reading(kubelet.path(), policy(85, 80, 0, 0));
    // x is detected first, so without the record it would go first.
    node.set_images(vec![image("x", 1_000)]);
    node.detect(0).await;
    node.set_images(vec![image("x", 1_000), image("y", 1_000)]);
    node.detect(10).await;
    write_pulled(kubelet.path(), "x", &rfc3339(500));
    node.detect(1_000).await;
    assert_eq!(node.record("x").expect("x").last_used, at(500));
    assert_eq!(node.record("y").expect("y").last_used.0, 0, "y never used");
    node.set_fs(10_000, 1_000); // 90 % used: free 1,000.
    let report = node.gc(2_000).await;
    assert_eq!(removed_ids(&report), ["y"]);
}

#[tokio::test]
async fn a_kubelet_pulled_record_never_moves_last_used_back_nor_forward_past_now() {
    let kubelet = tempfile::tempdir().expect("tempdir");
    let node = node_reading(kubelet.path(), policy(100, 80, 0, 0));
    node.set_images(vec![image("x", 1), image("far", 1), image("near", 1)]);
    node.set_containers(vec![container("c", "x")]);
    node.detect(600).await;
    node.set_containers(vec![]);
    // Older than the container's use: ignored.
    write_pulled(kubelet.path(), "x", &rfc3339(100));
    // Far in the future (a clock that was ahead): ignored; a little ahead: counts as now.
    write_pulled(kubelet.path(), "far", &rfc3339(1_000 + 3_600));
    write_pulled(kubelet.path(), "near", &rfc3339(1_000 + 60));
    node.detect(1_000).await;
    assert_eq!(node.record("x").expect("x").last_used, at(600));
    assert_eq!(node.record("far").expect("far").last_used.0, 0);
    assert_eq!(node.record("near").expect("near").last_used, at(1_000));
}

#[tokio::test]
async fn a_kubelet_pulled_record_keeps_an_image_from_max_age() {
    let kubelet = tempfile::tempdir().expect("tempdir");
    let node = node_reading(kubelet.path(), policy(100, 80, 0, 600));
    node.set_images(vec![image("x", 1), image("y", 1)]);
    node.set_fs(10, 10);
    node.detect(0).await;
    write_pulled(kubelet.path(), "x", &rfc3339(900));
    let report = node.gc(1_000).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(removed_ids(&report), ["y"]);
    assert_eq!(node.record("x").expect("kept").last_used, at(900));
}

#[tokio::test]
async fn damaged_kubelet_records_never_fail_a_cycle() {
    let kubelet = tempfile::tempdir().expect("tempdir");
    let pulling = kubelet.path().join("image_manager/pulling");
    std::fs::create_dir_all(&pulling).expect("mkdir");
    std::fs::write(pulling.join("sha256-00"), b"{\"kind\":").expect("write");
    std::fs::write(
        pulling.join(record_file_name("registry.example/a:1")),
        vec![b' '; 2 << 20],
    )
    .expect("write");
    let node = node_reading(kubelet.path(), policy(85, 0, 0, 0));
    node.set_images(vec![image("a", 1_000)]);
    node.detect(0).await;
    let report = node.manager().delete_unused_images(at(1_000)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(
        removed_ids(&report),
        ["a"],
        "a damaged intent protects nothing"
    );
}

#[tokio::test]
async fn the_dry_run_says_the_kubelet_is_pulling_it_and_shows_the_pulled_record() {
    let kubelet = tempfile::tempdir().expect("tempdir");
    write_intent(kubelet.path(), "v1beta1", "registry.example/a:1");
    write_pulled(kubelet.path(), "b", &rfc3339(500));
    let runtime = ScriptedRuntime::new();
    runtime.state().images = vec![image("a", 1_000), image("b", 1_000), image("c", 1_000)].into();
    runtime.state().fs = Some((3_000, 0));
    let (_dir, store) = crate::support::temp_store(at(0));
    let store = std::sync::Arc::new(store);
    let manager = ImageGcManager::new(
        runtime,
        store,
        GcConfig {
            policy: policy(85, 0, 0, 0),
            kubelet_root_dir: Some(kubelet.path().to_owned()),
            ..GcConfig::default()
        },
    )
    .expect("valid");
    manager.detect(at(0)).await.expect("detect");
    let plan = manager.plan(at(1_000), false).await.expect("plan");
    let by_id = |id: &str| {
        plan.explanation
            .images
            .iter()
            .find(|i| i.key.image_id.as_str() == id)
            .expect("explained")
            .clone()
    };
    let a = by_id("a");
    assert_eq!(a.decision, Decision::KeepKubeletPulling);
    assert!(
        a.reason.contains("the kubelet is pulling it"),
        "{}",
        a.reason
    );
    let b = by_id("b");
    assert_eq!(b.kubelet_pulled_at, Some(at(500)));
    assert!(b.reason.contains("kubelet pull record"), "{}", b.reason);
    let removed: Vec<&str> = plan
        .removals
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(
        removed,
        ["c", "b"],
        "c never used goes before b used at 500"
    );
}

#[tokio::test]
async fn an_image_the_kubelet_pulled_less_than_min_age_ago_survives_gc_and_prune() {
    for prune in [false, true] {
        let kubelet = tempfile::tempdir().expect("tempdir");
        // MinAge 2m; a and b were first detected long ago.
        let node = node_reading(kubelet.path(), policy(85, 0, 120, 0));
        node.set_images(vec![image("a", 1_000), image("b", 1_000)]);
        node.set_fs(2_000, 0);
        node.detect(0).await;
        write_pulled(kubelet.path(), "a", &rfc3339(950));
        let node = &node;
        let cycle = |t: i64| async move {
            if prune {
                node.manager().delete_unused_images(at(t)).await
            } else {
                node.gc(t).await
            }
        };
        let report = cycle(1_000).await;
        assert_eq!(removed_ids(&report), ["b"], "prune: {prune}");
        // 150s after the record: no longer just pulled.
        node.set_fs(2_000, 0);
        let report = cycle(1_100).await;
        assert_eq!(
            removed_ids(&report),
            ["a"],
            "prune: {prune}: {:?}",
            report.error
        );
    }
}

/// An intent the kubelet never removed (its name is not the runtime's tag) keeps its image
/// only until it is older than the intent max age (24 h by default): the same file keeps the
/// image at a GC 1 h after it was written and not at one 48 h after; the dry run lists it.
#[tokio::test]
async fn a_stale_pull_intent_stops_keeping_its_image() {
    let kubelet = tempfile::tempdir().expect("tempdir");
    write_at(
        kubelet.path(),
        "pulling",
        "busybox",
        r#"{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"busybox"}"#,
        at(0),
    );
    let node = node_reading(kubelet.path(), policy(85, 0, 0, 0));
    node.set_images(vec![busybox("bb"), image("a", 1_000)]);
    node.set_fs(2_000, 0);
    let hour = 3_600;
    node.detect(hour).await;
    let plan = node.manager().plan(at(hour), true).await.expect("plan");
    let kept = plan
        .explanation
        .images
        .iter()
        .find(|i| i.key.image_id.as_str() == "bb");
    assert_eq!(
        kept.map(|i| i.decision),
        Some(Decision::KeepKubeletPulling),
        "{plan:?}"
    );
    assert!(plan.explanation.stale_kubelet_intents.is_empty());
    let report = node.manager().delete_unused_images(at(hour)).await;
    assert_eq!(removed_ids(&report), vec!["a"], "{report:?}");

    let later = 48 * hour;
    node.detect(later).await;
    let plan = node.manager().plan(at(later), true).await.expect("plan");
    assert_eq!(plan.explanation.stale_kubelet_intents.len(), 1, "{plan:?}");
    assert_eq!(plan.explanation.stale_kubelet_intents[0].image, "busybox");
    assert_eq!(
        node.manager().kubelet_stale_intents(),
        Some(1),
        "the metric's gauge"
    );
    let report = node.manager().delete_unused_images(at(later)).await;
    assert_eq!(removed_ids(&report), vec!["bb"], "{report:?}");
}

/// Writes an ImagePreloadedRecord as kubelet master does (`observed-preloaded/`, named after
/// its imageRef: pkg/kubelet/images/pullmanager/fs_pullrecords.go), observed under `names`.
pub(crate) fn write_preloaded(root: &Path, image_ref: &str, names: &[&str]) {
    let observed: Vec<String> = names.iter().map(|n| format!(r#""{n}":{{}}"#)).collect();
    write(
        root,
        "observed-preloaded",
        image_ref,
        &format!(
            r#"{{"kind":"ImagePreloadedRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"{image_ref}","observedImages":{{{}}}}}"#,
            observed.join(",")
        ),
    );
}

/// The kubelet's observed preloaded record names an image the kubelet found present without
/// pulling it. It has no time and lives as long as the image, and the kubelet's own GC does
/// not read it (pkg/kubelet/images/image_gc_manager.go reads no pull record): it is no use.
/// GC and prune remove such an image like any unused one, in the same order as without the
/// record, and the dry run shows the names. Fails if the record starts counting as a use.
#[tokio::test]
async fn an_observed_preloaded_record_is_shown_by_the_dry_run_and_counts_as_no_use() {
    for prune in [false, true] {
        let kubelet = tempfile::tempdir().expect("tempdir");
        write_preloaded(
            kubelet.path(),
            "p",
            &["registry.example/app", "docker.io/library/busybox"],
        );
        // A damaged file beside it is skipped, never a failure.
        let dir = kubelet.path().join("image_manager/observed-preloaded");
        std::fs::write(dir.join("sha256-00"), b"{\"kind\":").expect("write");
        let node = node_reading(kubelet.path(), policy(85, 80, 0, 0));
        // p is detected first, so it goes first by LRU whether or not the record counted.
        node.set_images(vec![image("p", 1_000)]);
        node.detect(0).await;
        node.set_images(vec![image("p", 1_000), image("q", 1_000)]);
        node.detect(10).await;
        node.detect(1_000).await;
        assert_eq!(
            node.record("p").expect("p").last_used.0,
            0,
            "no use from the record"
        );

        node.set_fs(10_000, 1_000); // 90 % used: free 1,000.
        let plan = node.manager().plan(at(2_000), prune).await.expect("plan");
        let p = plan
            .explanation
            .images
            .iter()
            .find(|i| i.key.image_id.as_str() == "p")
            .expect("p explained");
        assert_eq!(
            p.kubelet_preloaded,
            ["docker.io/library/busybox", "registry.example/app"]
        );
        assert!(
            p.reason.contains(
                "the kubelet saw it preloaded (as \"docker.io/library/busybox\", \
                 \"registry.example/app\"): not a use"
            ),
            "{}",
            p.reason
        );
        assert_eq!(p.kubelet_pulled_at, None);
        let planned: Vec<&str> = plan
            .removals
            .iter()
            .map(|r| r.key.image_id.as_str())
            .collect();
        let report = if prune {
            node.manager().delete_unused_images(at(2_000)).await
        } else {
            node.gc(2_000).await
        };
        assert!(report.error.is_none(), "{:?}", report.error);
        let expected: &[&str] = if prune { &["p", "q"] } else { &["p"] };
        assert_eq!(planned, expected, "prune: {prune}");
        assert_eq!(removed_ids(&report), expected, "prune: {prune}");
    }
}
