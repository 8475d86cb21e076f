//! Pins (schema 4) and irreplaceable images through the real GC manager over a scripted
//! runtime: GC (space and MaxAge), prune and DeleteUnusedImages keep them; pins survive a
//! restart, expire by the cycle's clock, and follow a tag that moves at the next detect.

mod lab;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use imagekeeper::gc::{Decision, GcConfig, ImageGcManager};
use imagekeeper::model::{ImagePin, PinKey, RuntimeImage, UnixNanos};
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::{Batch, Store};

use super::hooked::{Hooked, Hooks};
use super::{Node, at, image, policy, removed_ids};

/// A pulled image: a tag and a repo digest.
fn pulled(id: &str, tag: &str) -> RuntimeImage {
    let repo = tag.rsplit_once(':').map_or(tag, |(r, _)| r);
    RuntimeImage {
        repo_tags: vec![tag.to_owned()],
        repo_digests: vec![format!("{repo}@sha256:{}", "0".repeat(64))],
        ..image(id, 100)
    }
}

/// A pin made at t0, in force until `until`.
fn made_at_t0(until: UnixNanos, reason: &str) -> ImagePin {
    ImagePin {
        created_at: at(0),
        until,
        reason: reason.to_owned(),
    }
}

fn pin(node: &Node, name: &str, until: UnixNanos, reason: &str) {
    let mut batch = Batch::new();
    batch.put_pin(PinKey::new(name, ""), made_at_t0(until, reason));
    node.manager().store().apply(&batch).expect("pin");
}

#[tokio::test]
async fn a_pin_keeps_its_image_through_prune_and_gc_until_it_expires_by_the_clock() {
    let node = Node::new(policy(50, 40, 0, 0));
    node.set_images(vec![
        pulled("model", "registry.example/model:1"),
        pulled("web", "registry.example/web:1"),
    ]);
    node.set_fs(1_000, 0);
    node.detect(0).await;
    pin(&node, "registry.example/model:1", at(3), "rollout");
    // prune at 1 s: the pin holds.
    let report = node.manager().delete_unused_images(at(1)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(removed_ids(&report), ["web"]);
    // gc (space) at 2 s: still held, and the walk cannot free enough.
    let report = node.gc(2).await;
    assert!(removed_ids(&report).is_empty());
    // At 3 s the pin has expired: prune removes the image.
    let report = node.manager().delete_unused_images(at(3)).await;
    assert_eq!(removed_ids(&report), ["model"]);
}

#[tokio::test]
async fn max_age_never_removes_a_pinned_image() {
    let node = Node::new(policy(100, 90, 0, 60));
    node.set_images(vec![
        pulled("model", "registry.example/model:1"),
        pulled("web", "registry.example/web:1"),
    ]);
    node.set_fs(1_000, 1_000);
    node.detect(0).await;
    pin(&node, "registry.example/model:1", UnixNanos::NEVER, "");
    let report = node.gc(3_600).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(removed_ids(&report), ["web"]);
}

#[tokio::test]
async fn pins_survive_a_restart() {
    let mut node = Node::new(policy(50, 40, 0, 0));
    node.set_images(vec![pulled("model", "registry.example/model:1")]);
    node.detect(0).await;
    pin(&node, "model", UnixNanos::NEVER, "by id");
    node.maybe_restart(true);
    let report = node.manager().delete_unused_images(at(10)).await;
    assert!(
        removed_ids(&report).is_empty(),
        "the pin outlived the restart"
    );
    let plan = node.manager().plan(at(10), true).await.expect("plan");
    let model = &plan.explanation.images[0];
    assert_eq!(model.decision, Decision::KeepPinnedByImagekeeper);
    assert_eq!(model.reason, "pinned by imagekeeper with no expiry (by id)");
}

#[tokio::test]
async fn a_pin_by_tag_moves_with_the_tag_at_the_next_detect() {
    let node = Node::new(policy(50, 40, 0, 0));
    node.set_images(vec![
        pulled("old", "registry.example/app:stable"),
        pulled("new", "registry.example/app:next"),
    ]);
    node.detect(0).await;
    pin(&node, "registry.example/app:stable", UnixNanos::NEVER, "");
    // The tag moves to "new": at the next detect the pin keeps "new", and "old" may go.
    let mut old = pulled("old", "registry.example/app:previous");
    old.repo_tags = vec![];
    node.set_images(vec![old, pulled("new", "registry.example/app:stable")]);
    let report = node.manager().delete_unused_images(at(5)).await;
    assert_eq!(removed_ids(&report), ["old"]);
}

/// Issue 53: 10,000 pins beside 10,000 listed images (a tag and a repo digest each), through
/// one detect of the real manager: each pin keeps exactly the image it names, by tag, by
/// digest, by id or by a short name (the path without the registry), an expired one keeps
/// nothing, one naming nothing listed keeps nothing; `pins` lists each pin's image; and a new
/// pin past the 10,000 in force is refused with nothing written. Correctness only: the time
/// of the detect is in the performance page (tests assert no time).
#[tokio::test]
async fn ten_thousand_pins_beside_ten_thousand_images_keep_exactly_what_they_name() {
    const N: usize = 10_000;
    let id = |i: usize| format!("sha256:{i:064x}");
    let node = Node::new(policy(100, 90, 0, 0));
    node.set_images(
        (0..N)
            .map(|i| RuntimeImage {
                repo_tags: vec![format!("registry.example/team/app-{i}:1")],
                repo_digests: vec![format!("registry.example/team/app-{i}@{}", id(i))],
                ..image(&id(i), 1)
            })
            .collect(),
    );
    let mut batch = Batch::new();
    for i in 0..N {
        let name = match i % 5 {
            0 => format!("registry.example/team/app-{i}:1"),
            1 => format!("registry.example/team/app-{i}@{}", id(i)),
            2 => id(i),
            3 => format!("team/app-{i}:1"),
            _ => format!("registry.example/team/absent-{i}:1"),
        };
        let until = if i % 7 == 3 { at(1) } else { UnixNanos::NEVER };
        batch.put_pin(PinKey::new(name, ""), made_at_t0(until, ""));
    }
    let store = node.manager().store().clone();
    store.apply(&batch).expect("10,000 pins, the cap");
    node.detect(2).await;
    let kept: std::collections::BTreeSet<String> = node
        .manager()
        .last_keeps()
        .expect("a detect ran")
        .into_iter()
        .filter(|k| k.why == imagekeeper::gc::KeepReason::Pin)
        .map(|k| k.key.image_id.as_str().to_owned())
        .collect();
    let want: std::collections::BTreeSet<String> = (0..N)
        .filter(|i| i % 5 != 4 && i % 7 != 3)
        .map(id)
        .collect();
    assert_eq!(kept.len(), want.len());
    assert!(
        kept == want,
        "the pinned images differ from the pins' names"
    );
    // The pins listing: every pin, active or not, with the image its name resolves to.
    let pins = store.pins().expect("pins");
    let images: Vec<RuntimeImage> = node.runtime.state().images.iter().cloned().collect();
    let views = imagekeeper::gc::pin_views(pins, &images, at(2));
    assert_eq!(views.len(), N);
    for view in &views {
        let named: Option<usize> = view
            .key
            .image
            .split(['-', ':', '@'])
            .find_map(|part| part.parse().ok());
        let absent = view.key.image.contains("absent");
        let want: Vec<String> = match named {
            _ if view.key.image.starts_with("sha256:") => vec![view.key.image.clone()],
            Some(i) if !absent => vec![id(i)],
            _ => Vec::new(),
        };
        let got: Vec<String> = view
            .image_ids
            .iter()
            .map(|i| i.as_str().to_owned())
            .collect();
        assert_eq!(got, want, "{}", view.key.image);
    }
    // The cap: the 10,001st pin is refused, nothing written; renewing a pin is not refused.
    let mut one_more = Batch::new();
    one_more.put_pin(
        PinKey::new("registry.example/team/one-more:1", ""),
        made_at_t0(UnixNanos::NEVER, ""),
    );
    let err = store.apply(&one_more).expect_err("past the cap");
    assert!(
        matches!(
            err,
            imagekeeper::store::StoreError::TooManyPins {
                active: N,
                limit: N
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("remove pins no longer needed"),
        "{err}"
    );
    assert_eq!(store.pins().expect("pins").len(), N);
    pin(&node, "registry.example/team/app-0:1", at(9), "renewed");
}

/// Writes a pin right before the cycle's second ListContainers (the last look's, after the
/// detect read the pins).
struct PinDuringCycle {
    store: std::sync::OnceLock<Arc<Store>>,
    lists: AtomicUsize,
}

impl Hooks for PinDuringCycle {
    async fn before(&self, method: &'static str, _arg: &str) {
        if method == "ListContainers" && self.lists.fetch_add(1, Ordering::SeqCst) == 1 {
            let mut batch = Batch::new();
            batch.put_pin(
                PinKey::new("registry.example/model:1", ""),
                made_at_t0(UnixNanos::NEVER, ""),
            );
            let store = self.store.get().expect("the store is set before the cycle");
            store.apply(&batch).expect("pin");
        }
    }
}

#[tokio::test]
async fn a_pin_written_during_a_cycle_is_seen_by_the_last_look() {
    let (_dir, store) = crate::support::temp_store(at(0));
    let store = Arc::new(store);
    let runtime = Hooked {
        inner: ScriptedRuntime::new(),
        hooks: PinDuringCycle {
            store: std::sync::OnceLock::new(),
            lists: AtomicUsize::new(0),
        },
    };
    runtime.inner.state().images = vec![pulled("model", "registry.example/model:1")].into();
    let _ = runtime.hooks.store.set(store.clone());
    let manager = ImageGcManager::new(
        runtime,
        store,
        GcConfig {
            policy: policy(50, 40, 0, 0),
            ..GcConfig::default()
        },
    )
    .expect("manager");
    let report = manager.delete_unused_images(at(1)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(
        removed_ids(&report).is_empty(),
        "the last look read the new pin"
    );
    let rescued = manager.metrics().rescued();
    assert!(rescued.contains(&("pinned", 1)), "{rescued:?}");
}

#[tokio::test]
async fn irreplaceable_images_are_kept_unless_protection_is_off() {
    let config = |protect| GcConfig {
        policy: policy(50, 40, 0, 0),
        sandbox_image: Some("registry.example/pause:3".into()),
        protect_irreplaceable: protect,
        ..GcConfig::default()
    };
    for protect in [true, false] {
        let node = Node::with_config(config(protect));
        node.set_images(vec![
            pulled("pause", "registry.example/pause:3"),
            // Imported: a tag, no repo digest.
            image("imported", 100),
            pulled("web", "registry.example/web:1"),
        ]);
        node.detect(0).await;
        let plan = node.manager().plan(at(1), true).await.expect("plan");
        let report = node.manager().delete_unused_images(at(1)).await;
        if protect {
            assert_eq!(removed_ids(&report), ["web"]);
            let imported = plan
                .explanation
                .images
                .iter()
                .find(|i| i.key.image_id.as_str() == "imported")
                .expect("explained");
            assert_eq!(imported.decision, Decision::KeepIrreplaceable);
            assert!(
                imported.reason.contains("no repo digest"),
                "{}",
                imported.reason
            );
        } else {
            // The configured sandbox image stays in use, as before; the imported one goes.
            assert_eq!(removed_ids(&report), ["imported", "web"]);
        }
    }
}

/// The CLI without an agent: bad input exits 2 naming the flag and writes nothing; a pin on
/// the database directly is listed by `pins` in every format, survives (the file is the
/// state), and `unpin` of a name with no pin exits 1.
#[test]
fn the_cli_checks_its_input_and_pins_on_the_database_without_an_agent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let socket = dir.path().join("admin.sock");
    let (db_arg, socket_arg) = (
        db.to_str().expect("utf8").to_owned(),
        socket.to_str().expect("utf8").to_owned(),
    );
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&["--db", &db_arg, "--admin-socket", &socket_arg]);
        crate::support::bin::run(&all)
    };
    for (args, says) in [
        (
            vec![
                "pin",
                "app:1",
                "--for",
                "3s",
                "--until",
                "2099-01-01T00:00:00Z",
            ],
            "--until",
        ),
        (vec!["pin", "app:1", "--for", "soon"], "--for"),
        (vec!["pin", "app:1", "--for", "0s"], "--for"),
        (vec!["pin", "app:1", "--until", "tomorrow"], "--until"),
        (
            vec!["pin", "app:1", "--until", "2001-01-01T00:00:00Z"],
            "not in the future",
        ),
        (vec!["pin", ""], "IMAGE"),
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let long = "x".repeat(1025);
    assert_eq!(
        run(&["pin", "app:1", "--reason", &long]).status.code(),
        Some(2)
    );
    assert!(!db.exists(), "bad input writes nothing");

    let out = run(&[
        "pin",
        "registry.example/app:1",
        "--until",
        "2099-01-01T00:00:00Z",
        "--reason",
        "keep",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("the database directly"), "{stderr}");
    assert!(stderr.contains("no image on the node matches"), "{stderr}");
    let out = run(&["pins", "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "imagepin/registry.example/app:1\n"
    );
    let out = run(&["pins", "-o", "kube-json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list["items"][0]["until"], "2099-01-01T00:00:00Z");
    assert_eq!(list["items"][0]["reason"], "keep");
    let out = run(&["pins", "--no-headers"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("registry.example/app:1") && table.contains("active"),
        "{table}"
    );
    let out = run(&["unpin", "registry.example/other:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(run(&["unpin", "registry.example/app:1"]).status.success());
    assert_eq!(
        String::from_utf8_lossy(&run(&["pins", "-o", "json"]).stdout).trim(),
        "[]"
    );
}
