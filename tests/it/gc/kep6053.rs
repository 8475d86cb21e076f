//! KEP-6053's image GC series ("Kubelet Image Garbage Collection Observability", proposed,
//! alpha) as the agent exports them: one case per outcome the KEP's unit tests name (noop below
//! the threshold, a stats error, invalid capacity, success, partial for too little freed, a
//! deletion error, age-based cleanup, DeleteUnusedImages), a failed detect, an image MinAge keeps
//! and the byte budget (imagekeeper's own threshold rule), each run against
//! the scripted runtime and a real store at fixed times, its scrape's KEP lines compared whole:
//! every series with its labels and value, nothing more. A changed mapping (a result, a reason,
//! a trigger, a skip or deletion reason) changes a line and fails its case.

use std::sync::Arc;

use imagekeeper::gc::{ByteBudget, GcPolicy, GcReport, GcTrigger};
use imagekeeper::pull::{ImageManager, PullConfig};
use imagekeeper::telemetry::AgentMetrics;

use super::{Node, at, container, image, policy};

/// What a case runs after its setup.
#[derive(Clone, Copy, Debug)]
enum Run {
    /// GarbageCollect asked for by the trigger (`Unknown` through `garbage_collect`).
    Gc(GcTrigger),
    /// DeleteUnusedImages asked for by the trigger (`Unknown` through `delete_unused_images`).
    DeleteUnused(GcTrigger),
}

/// One case: a node's images (id, size, pinned), the containers' images, the image
/// filesystem, the faults, the run at t=100, and the KEP lines its scrape must show.
struct Case {
    name: &'static str,
    policy: GcPolicy,
    /// Images detected at t=0, before the run.
    earlier: &'static [(&'static str, u64, bool)],
    /// Images listed at the run (the earlier ones are listed too unless removed here).
    images: &'static [(&'static str, u64, bool)],
    in_use: &'static [&'static str],
    /// (capacity, available); `None`: capacity 0.
    fs: Option<(u64, u64)>,
    remove_fails: &'static [&'static str],
    fs_error: bool,
    down: bool,
    run: Run,
    want: &'static [&'static str],
}

/// The lines of KEP-6053's families in `text` (histograms by their `_count` and `_sum`), and
/// `image_garbage_collected_total`'s non-zero ones (the KEP keeps it beside its deletions).
fn kep_lines(text: &str) -> Vec<String> {
    const FAMILIES: [&str; 8] = [
        "imagekeeper_image_gc_attempts_total{",
        "imagekeeper_image_gc_freed_bytes_count{",
        "imagekeeper_image_gc_freed_bytes_sum{",
        "imagekeeper_image_gc_target_bytes_count{",
        "imagekeeper_image_gc_target_bytes_sum{",
        "imagekeeper_image_gc_image_deletions_total{",
        "imagekeeper_image_gc_skipped_images_total{",
        "imagekeeper_image_gc_image_fs_usage_percent{",
    ];
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| {
            FAMILIES.iter().any(|f| l.starts_with(f))
                || (l.starts_with("imagekeeper_image_garbage_collected_total{")
                    && !l.ends_with(" 0"))
        })
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

fn scrape(node: &Node) -> String {
    let manager = node.manager();
    let store = manager.store().clone();
    let images = ImageManager::new(
        &PullConfig::default(),
        Arc::new(node.runtime.clone()),
        store.clone(),
        Arc::new(imagekeeper::clock::ManualClock::new(at(100))),
    )
    .expect("valid pull config");
    AgentMetrics::default().render(manager, &images, &store)
}

fn listed(images: &[(&str, u64, bool)]) -> Vec<imagekeeper::model::RuntimeImage> {
    images
        .iter()
        .map(|(id, size, pinned)| {
            let mut i = image(id, *size);
            i.pinned = *pinned;
            i
        })
        .collect()
}

async fn run_case(case: &Case) -> (GcReport, Vec<String>) {
    let node = Node::new(case.policy);
    node.set_fs(1000, 1000);
    if !case.earlier.is_empty() {
        node.set_images(listed(case.earlier));
        node.detect(0).await;
    }
    node.set_images(listed(case.images));
    node.set_containers(
        case.in_use
            .iter()
            .enumerate()
            .map(|(n, id)| container(&format!("c{n}"), id))
            .collect(),
    );
    {
        let mut state = node.runtime.state();
        state.fs = case.fs;
        state.remove_fails = case.remove_fails.iter().map(|s| (*s).to_owned()).collect();
        if case.fs_error {
            state.fs_error = Some("cadvisor is not ready".to_owned());
        }
        if case.down {
            state.down = Some("connection refused".to_owned());
        }
    }
    let manager = node.manager();
    let report = match case.run {
        Run::Gc(GcTrigger::Unknown) => manager.garbage_collect(at(100)).await,
        Run::Gc(trigger) => manager.garbage_collect_for(trigger, at(100)).await,
        Run::DeleteUnused(GcTrigger::Unknown) => manager.delete_unused_images(at(100)).await,
        Run::DeleteUnused(trigger) => manager.delete_unused_images_for(trigger, at(100)).await,
    };
    let lines = kep_lines(&scrape(&node));
    (report, lines)
}

const GC: &str = "operation=\"garbage_collect\"";
const DUI: &str = "operation=\"delete_unused_images\"";

/// GarbageCollect by the GC loop at 85/80 %, MinAge and MaxAge 0, the image filesystem half
/// full, no faults.
fn base() -> Case {
    Case {
        name: "",
        policy: policy(85, 80, 0, 0),
        earlier: &[],
        images: &[],
        in_use: &[],
        fs: Some((1000, 500)),
        remove_fails: &[],
        fs_error: false,
        down: false,
        run: Run::Gc(GcTrigger::Periodic),
        want: &[],
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "below the high threshold: noop, threshold",
            images: &[("a", 100, false)],
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"noop\",reason=\"threshold\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"noop\",reason=\"threshold\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"noop\",reason=\"threshold\"} 0.0",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 50",
            ],
            ..base()
        },
        Case {
            name: "ImageFsInfo fails: error, stats_error (no usage read)",
            images: &[("a", 100, false)],
            fs_error: true,
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"stats_error\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"stats_error\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"stats_error\"} 0.0",
            ],
            ..base()
        },
        Case {
            name: "capacity 0: error, invalid_capacity",
            images: &[("a", 100, false)],
            fs: None,
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"invalid_capacity\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"invalid_capacity\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"invalid_capacity\"} 0.0",
            ],
            ..base()
        },
        Case {
            name: "the runtime is down: error, detect_error",
            images: &[("a", 100, false)],
            down: true,
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"detect_error\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"detect_error\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"detect_error\"} 0.0",
            ],
            ..base()
        },
        Case {
            // 90 % used, 100 bytes to free: the pinned image is read first and passed over,
            // `a` frees 300 and the walk stops before the image in use.
            name: "freed down to the low threshold: success, threshold; a pinned image skipped",
            earlier: &[("0pinned", 50, true)],
            images: &[("0pinned", 50, true), ("a", 300, false), ("b", 200, false)],
            in_use: &["b"],
            fs: Some((1000, 100)),
            want: &[
                "imagekeeper_image_garbage_collected_total{reason=\"space\"} 1",
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"threshold\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"threshold\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"threshold\"} 300.0",
                "imagekeeper_image_gc_image_deletions_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"space\",result=\"success\"} 1",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 90",
                "imagekeeper_image_gc_skipped_images_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"pinned\"} 1",
                "imagekeeper_image_gc_target_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\"} 100.0",
            ],
            ..base()
        },
        Case {
            // 95 % used, 150 to free; `a` frees 100, the image in use is passed over.
            name: "too little freed after a removal: partial, insufficient_freed",
            images: &[("a", 100, false), ("b", 800, false)],
            in_use: &["b"],
            fs: Some((1000, 50)),
            want: &[
                "imagekeeper_image_garbage_collected_total{reason=\"space\"} 1",
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"partial\",reason=\"insufficient_freed\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"partial\",reason=\"insufficient_freed\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"partial\",reason=\"insufficient_freed\"} 100.0",
                "imagekeeper_image_gc_image_deletions_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"space\",result=\"success\"} 1",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 95",
                "imagekeeper_image_gc_skipped_images_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"in_use\"} 1",
                "imagekeeper_image_gc_target_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\"} 150.0",
            ],
            ..base()
        },
        Case {
            name: "nothing eligible above the threshold: noop, insufficient_freed",
            images: &[("b", 900, false)],
            in_use: &["b"],
            fs: Some((1000, 50)),
            run: Run::Gc(GcTrigger::Unknown),
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"unknown\",result=\"noop\",reason=\"insufficient_freed\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"unknown\",result=\"noop\",reason=\"insufficient_freed\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"unknown\",result=\"noop\",reason=\"insufficient_freed\"} 0.0",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 95",
                "imagekeeper_image_gc_skipped_images_total{operation=\"garbage_collect\",trigger=\"unknown\",reason=\"in_use\"} 1",
                "imagekeeper_image_gc_target_bytes_count{operation=\"garbage_collect\",trigger=\"unknown\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"garbage_collect\",trigger=\"unknown\"} 150.0",
            ],
            ..base()
        },
        Case {
            // MinAge 60 s: the image first seen at the run is too young.
            name: "only an image younger than MinAge: noop, insufficient_freed; skipped min_age",
            policy: policy(85, 80, 60, 0),
            images: &[("a", 900, false)],
            fs: Some((1000, 50)),
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"noop\",reason=\"insufficient_freed\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"noop\",reason=\"insufficient_freed\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"noop\",reason=\"insufficient_freed\"} 0.0",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 95",
                "imagekeeper_image_gc_skipped_images_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"min_age\"} 1",
                "imagekeeper_image_gc_target_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\"} 150.0",
            ],
            ..base()
        },
        Case {
            // Under the percentage thresholds, over the byte budget (350 > 300, down to 200):
            // the budget is a threshold rule, its removal a `space` deletion.
            name: "the byte budget frees enough: success, threshold; deletion reason space",
            policy: GcPolicy {
                bytes: Some(ByteBudget {
                    high: 300,
                    low: 200,
                }),
                ..policy(85, 80, 0, 0)
            },
            images: &[("a", 150, false), ("b", 200, false)],
            in_use: &["b"],
            want: &[
                "imagekeeper_image_garbage_collected_total{reason=\"budget\"} 1",
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"threshold\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"threshold\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"threshold\"} 150.0",
                "imagekeeper_image_gc_image_deletions_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"space\",result=\"success\"} 1",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 50",
                "imagekeeper_image_gc_target_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\"} 150.0",
            ],
            ..base()
        },
        Case {
            name: "RemoveImage fails: error, delete_error; the deletion counted as an error",
            images: &[("a", 300, false), ("b", 200, false)],
            in_use: &["b"],
            fs: Some((1000, 100)),
            remove_fails: &["a"],
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"delete_error\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"delete_error\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"error\",reason=\"delete_error\"} 0.0",
                "imagekeeper_image_gc_image_deletions_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"space\",result=\"error\"} 1",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 90",
                "imagekeeper_image_gc_skipped_images_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"in_use\"} 1",
                "imagekeeper_image_gc_target_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\"} 100.0",
            ],
            ..base()
        },
        Case {
            // MaxAge 60 s: `a`, unused since t=0, goes at t=100; usage is then under the
            // threshold, so the threshold pass has nothing to do.
            name: "MaxAge removes an image: success, age",
            policy: policy(85, 80, 0, 60),
            earlier: &[("a", 100, false)],
            images: &[("a", 100, false)],
            fs: Some((1000, 900)),
            want: &[
                "imagekeeper_image_garbage_collected_total{reason=\"age\"} 1",
                "imagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"age\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"age\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"garbage_collect\",trigger=\"periodic\",result=\"success\",reason=\"age\"} 100.0",
                "imagekeeper_image_gc_image_deletions_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"age\",result=\"success\"} 1",
                "imagekeeper_image_gc_image_fs_usage_percent{phase=\"before\"} 0",
            ],
            ..base()
        },
        Case {
            // prune: every eligible image; the target is their total size, not i64::MAX.
            name: "DeleteUnusedImages (prune): success, all_unused; target the eligible bytes",
            images: &[("a", 100, false), ("b", 300, false), ("c", 200, false)],
            in_use: &["b"],
            run: Run::DeleteUnused(GcTrigger::Unknown),
            want: &[
                "imagekeeper_image_garbage_collected_total{reason=\"space\"} 2",
                "imagekeeper_image_gc_attempts_total{operation=\"delete_unused_images\",trigger=\"unknown\",result=\"success\",reason=\"all_unused\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"delete_unused_images\",trigger=\"unknown\",result=\"success\",reason=\"all_unused\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"delete_unused_images\",trigger=\"unknown\",result=\"success\",reason=\"all_unused\"} 300.0",
                "imagekeeper_image_gc_image_deletions_total{operation=\"delete_unused_images\",trigger=\"unknown\",reason=\"all_unused\",result=\"success\"} 2",
                "imagekeeper_image_gc_skipped_images_total{operation=\"delete_unused_images\",trigger=\"unknown\",reason=\"in_use\"} 1",
                "imagekeeper_image_gc_target_bytes_count{operation=\"delete_unused_images\",trigger=\"unknown\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"delete_unused_images\",trigger=\"unknown\"} 300.0",
            ],
            ..base()
        },
        Case {
            name: "DeleteUnusedImages by an eviction manager with nothing eligible: noop, all_unused",
            images: &[("b", 300, false)],
            in_use: &["b"],
            run: Run::DeleteUnused(GcTrigger::Eviction),
            want: &[
                "imagekeeper_image_gc_attempts_total{operation=\"delete_unused_images\",trigger=\"eviction\",result=\"noop\",reason=\"all_unused\"} 1",
                "imagekeeper_image_gc_freed_bytes_count{operation=\"delete_unused_images\",trigger=\"eviction\",result=\"noop\",reason=\"all_unused\"} 1",
                "imagekeeper_image_gc_freed_bytes_sum{operation=\"delete_unused_images\",trigger=\"eviction\",result=\"noop\",reason=\"all_unused\"} 0.0",
                "imagekeeper_image_gc_skipped_images_total{operation=\"delete_unused_images\",trigger=\"eviction\",reason=\"in_use\"} 1",
                "imagekeeper_image_gc_target_bytes_count{operation=\"delete_unused_images\",trigger=\"eviction\"} 1",
                "imagekeeper_image_gc_target_bytes_sum{operation=\"delete_unused_images\",trigger=\"eviction\"} 0.0",
            ],
            ..base()
        },
    ]
}

#[tokio::test]
async fn each_gc_outcome_is_exported_with_the_kep_6053_series_and_labels() {
    let mut failures = Vec::new();
    for case in cases() {
        let (report, got) = run_case(&case).await;
        let want: Vec<String> = {
            let mut w: Vec<String> = case.want.iter().map(|s| (*s).to_owned()).collect();
            w.sort();
            w
        };
        if got != want {
            failures.push(format!(
                "{}:\n  got  {got:#?}\n  want {want:#?}\n  report error {:?}",
                case.name, report.error
            ));
        }
        // The report names the attempt as the series count it.
        let attempt = report.attempt.expect("every cycle sets its attempt");
        let operation = match case.run {
            Run::Gc(_) => GC,
            Run::DeleteUnused(_) => DUI,
        };
        let line = format!(
            "imagekeeper_image_gc_attempts_total{{{operation},trigger=\"{}\",result=\"{}\",reason=\"{}\"}} 1",
            attempt.trigger.as_str(),
            attempt.result.as_str(),
            attempt.reason.as_str()
        );
        if !got.contains(&line) {
            failures.push(format!(
                "{}: the report's attempt {line} not scraped",
                case.name
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every deletion KEP-6053's counter counts as a success is also in the kubelet's older
/// `image_garbage_collected_total`, which stays (the KEP: both increment on success).
#[tokio::test]
async fn the_kubelets_older_counter_still_counts_every_successful_deletion() {
    let node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![image("a", 100), image("b", 200)]);
    node.set_fs(1000, 1000);
    let report = node
        .manager()
        .delete_unused_images_for(GcTrigger::Eviction, at(100))
        .await;
    assert_eq!(report.removed.len(), 2, "{:?}", report.error);
    let text = scrape(&node);
    assert!(
        text.contains("\nimagekeeper_image_garbage_collected_total{reason=\"space\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("\nimagekeeper_image_gc_image_deletions_total{operation=\"delete_unused_images\",trigger=\"eviction\",reason=\"all_unused\",result=\"success\"} 2\n"),
        "{text}"
    );
}

/// A record protected by something other than a container (here an operator's pin, kept in the
/// walk's protected set beside the images in use) is skipped as `pinned`, not `in_use`.
#[tokio::test]
async fn an_operators_pin_is_a_pinned_skip_not_an_in_use_one() {
    use imagekeeper::model::{ImagePin, PinKey};
    use imagekeeper::store::Batch;
    let node = Node::new(policy(85, 80, 0, 0));
    node.set_images(vec![image("a", 100), image("b", 200), image("c", 300)]);
    node.set_containers(vec![container("c1", "c")]);
    node.set_fs(1000, 500);
    let mut batch = Batch::new();
    batch.put_pin(
        PinKey::new("registry.example/a:1", ""),
        ImagePin {
            created_at: at(0),
            until: at(1000),
            reason: "rollout".to_owned(),
        },
    );
    node.manager().store().apply(&batch).expect("pin");
    let report = node.manager().delete_unused_images(at(100)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let skipped: Vec<String> = kep_lines(&scrape(&node))
        .into_iter()
        .filter(|l| l.starts_with("imagekeeper_image_gc_skipped_images_total{"))
        .collect();
    assert_eq!(
        skipped,
        [
            "imagekeeper_image_gc_skipped_images_total{operation=\"delete_unused_images\",trigger=\"unknown\",reason=\"in_use\"} 1",
            "imagekeeper_image_gc_skipped_images_total{operation=\"delete_unused_images\",trigger=\"unknown\",reason=\"pinned\"} 1",
        ]
    );
}
