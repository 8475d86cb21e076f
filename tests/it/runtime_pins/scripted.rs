//! Runtime pins against the in-process fake runtime, whose containerd Images service keeps the
//! labels the agent writes while its CRI ListImages answers `pinned: false`: what containerd
//! 1.7.3 to 1.7.9 do with a label added to an image already present (containerd issue 9328,
//! fixed by PR 9338, in 1.7 by PR 9381 in 1.7.10), and what a containerd carrying a label it
//! loaded at its start and cannot clear does the other way round. "Carried" is what the CRI
//! lists, never what the label says, and the disagreement is shown in `pins`, the
//! `RuntimePins` answer (`inspect explain`'s source) and a metric.

use std::sync::Arc;

use imagekeeper::admin::AdminBackend;
use imagekeeper::agent::Agent;
use imagekeeper::config::{AgentConfig, FileConfig, FlagValues};
use imagekeeper::cri::RuntimeVersion;
use imagekeeper::model::{ImagePin, PinKey, UnixNanos};
use imagekeeper::store::Batch;

use crate::support::agent::AgentFixture;

const TAG: &str = "registry.example/app:1";

/// The fake answers CRI Version as containerd 2.1 does: runtime pins turn on.
fn speak_containerd_2_1(fake: &imagekeeper::cri::FakeRuntime) {
    fake.set_version(RuntimeVersion {
        version: "0.1.0".into(),
        runtime_name: "containerd".into(),
        runtime_version: "v2.1.0".into(),
        runtime_api_version: "v1".into(),
    });
}

/// An operator's pin of [`TAG`], in force for good, stored in `agent`'s database.
fn pin_tag(agent: &Agent, reason: &str) {
    let mut batch = Batch::new();
    batch.put_pin(
        PinKey::new(TAG.to_owned(), String::new()),
        ImagePin {
            created_at: UnixNanos::from_secs(1_800_000_000),
            until: UnixNanos::NEVER,
            reason: reason.to_owned(),
        },
    );
    agent.store().apply(&batch).expect("the pin is stored");
}

fn metric(metrics: &str, name: &str) -> Option<String> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_the_cri_lists_pinned_false_is_not_carried_and_the_disagreement_is_shown() {
    let AgentFixture { fake, dir, db, .. } = AgentFixture::builder()
        .image("sha256:aaa", TAG, 1000)
        .image_fs_used(1000)
        .start()
        .await;
    speak_containerd_2_1(&fake);
    let flags = FlagValues {
        db: Some(db),
        container_runtime_endpoint: Some(fake.endpoint()),
        admin_socket: Some(dir.path().join("admin.sock")),
        image_gc_high_threshold: Some(100),
        image_gc_low_threshold: Some(99),
        ..FlagValues::default()
    };
    let config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
    let clock = Arc::new(imagekeeper::clock::ManualClock::new(UnixNanos::from_secs(
        1_800_000_000,
    )));
    let agent = Agent::start(config, clock).await.expect("agent starts");
    pin_tag(&agent, "lab");

    // The first cycle labels both names of the kept image; the CRI listed it unpinned.
    assert_eq!(agent.garbage_collect(false).await.error, None);
    assert_eq!(
        fake.image_labels(TAG)
            .get("io.cri-containerd.pinned")
            .map(String::as_str),
        Some("pinned"),
        "the agent labelled the kept image"
    );
    // The next cycle: the label is there, the CRI still lists `pinned: false`.
    assert_eq!(agent.garbage_collect(false).await.error, None);
    let views = agent.pins().await.expect("pins");
    assert_eq!(views.len(), 1);
    assert_eq!(
        (views[0].runtime_pinned, views[0].runtime_labelled),
        (Some(false), Some(true)),
        "pins: not carried (the CRI's answer) though labelled: {:?}",
        views[0]
    );
    let report = agent.runtime_pins().await.expect("runtime pins");
    let keeps: Vec<_> = report
        .keeps
        .iter()
        .map(|(key, keep)| (key.image_id.as_str(), keep.carried, keep.labelled))
        .collect();
    assert_eq!(
        keeps,
        [("sha256:aaa", false, true)],
        "the RuntimePins answer"
    );
    let metrics = agent.render_metrics();
    assert_eq!(
        metric(&metrics, "imagekeeper_runtime_pinned_images").as_deref(),
        Some("0"),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "imagekeeper_runtime_pin_label_disagreements").as_deref(),
        Some("1"),
        "{metrics}"
    );

    // A runtime that carries the label (containerd 1.7.10 and later): carried, no disagreement.
    fake.list_pin_labels_as_pinned(true);
    assert_eq!(agent.garbage_collect(false).await.error, None);
    let views = agent.pins().await.expect("pins");
    assert_eq!(
        (views[0].runtime_pinned, views[0].runtime_labelled),
        (Some(true), Some(true))
    );
    let metrics = agent.render_metrics();
    assert_eq!(
        metric(&metrics, "imagekeeper_runtime_pinned_images").as_deref(),
        Some("1"),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "imagekeeper_runtime_pin_label_disagreements").as_deref(),
        Some("0"),
        "{metrics}"
    );
}

/// Issue 53: two agents on one containerd (a second install, a `run --db other.redb` while
/// debugging). Each labels with its own instance and leaves the other's labels alone: the
/// second agent, which keeps nothing, no longer strips the first one's pin every cycle (before,
/// every label carrying `io.imagekeeper.pinned` was its to remove). It counts the other's
/// names in a metric, and `remove-runtime-pins --instance` removes one instance's labels only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_the_same_containerd_leaves_the_first_ones_pins_alone() {
    let AgentFixture { fake, dir, db, .. } = AgentFixture::builder()
        .image("sha256:aaa", TAG, 1000)
        .image_fs_used(1000)
        .start()
        .await;
    speak_containerd_2_1(&fake);
    fake.list_pin_labels_as_pinned(true);
    let other_dir = tempfile::tempdir().expect("temp dir");
    let first = super::start_agent(super::agent_flags(&fake, dir.path(), db)).await;
    let second = super::start_agent(super::agent_flags(
        &fake,
        other_dir.path(),
        other_dir.path().join("records.redb"),
    ))
    .await;
    let instance = super::instance_of;
    let (first_id, second_id) = (instance(&first), instance(&second));
    assert_ne!(first_id, second_id, "each database has its own instance");

    pin_tag(&first, "first");
    assert_eq!(first.garbage_collect(false).await.error, None);
    let labels = fake.image_labels(TAG);
    assert_eq!(
        labels.get("io.cri-containerd.pinned").map(String::as_str),
        Some("pinned")
    );
    assert_eq!(
        labels.get("io.imagekeeper.instance"),
        Some(&first_id),
        "the first agent's label names its instance"
    );

    // The second agent keeps nothing: its cycles leave the first one's labels as they are.
    for _ in 0..2 {
        assert_eq!(second.garbage_collect(false).await.error, None);
        assert_eq!(
            fake.image_labels(TAG),
            labels,
            "the second agent never touches the first one's labels"
        );
    }
    let others = metric(
        &second.render_metrics(),
        "imagekeeper_runtime_pin_names_of_other_instances",
    );
    assert_ne!(others.as_deref(), Some("0"), "the second agent counts them");
    assert!(others.is_some(), "the gauge is exported");
    assert_eq!(
        metric(
            &first.render_metrics(),
            "imagekeeper_runtime_pin_names_of_other_instances"
        )
        .as_deref(),
        Some("0")
    );

    // The documented removal, scoped to one instance: the second's removes nothing here.
    let client = imagekeeper::cri::ContainerdImages::connect(
        &fake.endpoint(),
        imagekeeper::cri::CONTAINERD_CRI_NAMESPACE,
        std::time::Duration::from_secs(5),
        std::time::Duration::from_secs(5),
    )
    .expect("a client");
    let removed = imagekeeper::agent::remove_runtime_pin_labels(&client, false, Some(&second_id))
        .await
        .expect("remove");
    assert!(removed.is_empty(), "{removed:?}");
    assert_eq!(fake.image_labels(TAG), labels);
    let removed = imagekeeper::agent::remove_runtime_pin_labels(&client, false, Some(&first_id))
        .await
        .expect("remove");
    assert!(!removed.is_empty());
    assert!(
        removed
            .iter()
            .all(|r| r.instance.as_deref() == Some(first_id.as_str())),
        "{removed:?}"
    );
    assert!(
        !fake
            .image_labels(TAG)
            .contains_key("io.cri-containerd.pinned"),
        "the first instance's pin is gone"
    );
}

/// Issue 53: a containerd Images service that accepts calls and never answers. Before, every
/// detect and GC cycle awaited the runtime pins' reconcile (the 30 s call timeout each time),
/// `imagekeeper gc` through the agent timed out and `/readyz` said "ok". Now a detect cycle
/// leaves the reconcile to the runtime pins' own task (the image cache cycle after it runs
/// while that reconcile's call still hangs: no call to the Images service has ended yet), a
/// GC cycle gives up on it after 10 s, and `/readyz` (a `degraded:` line, still ready) and
/// `imagekeeper_runtime_pins_failing` report it until a reconcile carries the keeps again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_containerd_images_service_that_never_answers_holds_no_cycle_and_is_reported() {
    let AgentFixture { fake, dir, db, .. } = AgentFixture::builder()
        .image("sha256:aaa", TAG, 1000)
        .image_fs_used(1000)
        .start()
        .await;
    speak_containerd_2_1(&fake);
    fake.list_pin_labels_as_pinned(true);
    fake.hang("Images.List");
    let flags = FlagValues {
        detect_period: Some("3600s".into()),
        image_cache_period: Some("3600s".into()),
        gc_period: Some("3600s".into()),
        ..super::agent_flags(&fake, dir.path(), db)
    };
    let agent = Arc::new(super::start_agent(flags).await);
    pin_tag(&agent, "lab");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(agent.clone().serve(
        imagekeeper::agent::Listeners::default(),
        async move {
            let _ = stop_rx.await;
        },
        std::time::Duration::from_secs(5),
    ));

    // The start-up detect, then the image cache cycle, with the detect's reconcile hanging.
    crate::support::wait_for(
        "the image cache cycle and a hanging Images.List",
        std::time::Duration::from_secs(60),
        || async {
            (fake.calls("ImageFsInfo") >= 1 && fake.hanging("Images.List") >= 1).then_some(())
        },
    )
    .await;
    assert_eq!(
        fake.calls("Images.List"),
        fake.hanging("Images.List"),
        "the cycles went on while the reconcile's first call still hung (none had ended)"
    );
    // The start-up GC cycle gives its reconcile up: reported, still ready.
    let degraded = crate::support::wait_for(
        "/readyz to say the runtime pins are failing",
        std::time::Duration::from_secs(60),
        || async {
            agent
                .readiness()
                .ok()
                .filter(|text| text.contains("degraded: the runtime pins cannot be carried"))
        },
    )
    .await;
    assert!(
        degraded.contains("did not answer within 10 s"),
        "{degraded}"
    );
    assert_eq!(
        metric(&agent.render_metrics(), "imagekeeper_runtime_pins_failing").as_deref(),
        Some("1")
    );

    // containerd answers again: the next reconcile carries the pin and the report clears.
    fake.clear("Images.List");
    crate::support::wait_for(
        "a reconcile to carry the pin once containerd answers",
        std::time::Duration::from_secs(60),
        || async {
            assert_eq!(agent.garbage_collect(false).await.error, None);
            (agent
                .readiness()
                .is_ok_and(|text| !text.contains("degraded")))
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        fake.image_labels(TAG)
            .get("io.cri-containerd.pinned")
            .map(String::as_str),
        Some("pinned")
    );
    assert_eq!(
        metric(&agent.render_metrics(), "imagekeeper_runtime_pins_failing").as_deref(),
        Some("0")
    );
    stop_tx.send(()).expect("the agent waits for the stop");
    serving.await.expect("join").expect("served");
}

/// Issue 53 (2): an image the agent pulls itself is pinned in the runtime when the pull is
/// answered, not at the next detect (the kubelet's DeleteUnusedImages, every 10 s under
/// pressure, may come first): a pinned name pulled through the admin `ensure`, and a warm
/// entry pulled by the warm cycle. No GC cycle or detect runs in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_agent_pulls_for_a_keep_is_labelled_when_the_pull_is_answered() {
    const WARM: &str = "registry.example/warm:1";
    let AgentFixture { fake, dir, db, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/other:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    speak_containerd_2_1(&fake);
    fake.add_pullable(TAG, crate::support::agent::image("sha256:bbb", TAG, 1000));
    fake.add_pullable(WARM, crate::support::agent::image("sha256:ccc", WARM, 1000));
    let flags = FlagValues {
        db: Some(db),
        container_runtime_endpoint: Some(fake.endpoint()),
        admin_socket: Some(dir.path().join("admin.sock")),
        image_gc_high_threshold: Some(100),
        image_gc_low_threshold: Some(99),
        ..FlagValues::default()
    };
    let file: FileConfig =
        toml::from_str(&format!("[[warm]]\nimage = \"{WARM}\"\n")).expect("toml");
    let config = AgentConfig::resolve(&file, None, &flags).expect("config");
    let clock = Arc::new(imagekeeper::clock::ManualClock::new(UnixNanos::from_secs(
        1_800_000_000,
    )));
    let agent = Arc::new(Agent::start(config, clock).await.expect("agent starts"));
    pin_tag(&agent, "pinned before it was pulled");
    let pinned = |name: &str| {
        fake.image_labels(name)
            .get("io.cri-containerd.pinned")
            .cloned()
    };
    assert_eq!(pinned(TAG), None, "not present, not labelled");

    let image_ref = agent
        .ensure_image(imagekeeper::admin::EnsureRequest {
            image: TAG.to_owned(),
            ..imagekeeper::admin::EnsureRequest::default()
        })
        .await
        .expect("pulled");
    assert_eq!(image_ref, "sha256:bbb");
    assert_eq!(
        pinned(TAG).as_deref(),
        Some("pinned"),
        "the pinned name is labelled when the pull is answered"
    );

    assert_eq!(pinned(WARM), None);
    let plan = agent.warm_cycle().await;
    assert!(
        fake.pulls().iter().any(|p| p.image == WARM),
        "the warm cycle pulled the entry: {plan:?}"
    );
    assert_eq!(
        pinned(WARM).as_deref(),
        Some("pinned"),
        "the warm image is labelled when the warm cycle ends"
    );
}
