//! Issue 53 (6): the agent keeps a record of the containerd names it labelled (schema 6's
//! `runtime_labels`) and changes only those, against the in-process fake runtime's containerd
//! Images service: imagekeeper's labels forged on a pin the agent never set (the sandbox
//! image's) are reported and left; a name whose own label another client stripped is an
//! orphan the agent reports and still clears once it is no longer kept; an agent upgraded from
//! schema 5 adopts its instance's labels once, at its first reconcile.

use std::collections::BTreeMap;
use std::path::Path;

use imagekeeper::admin::AdminBackend;
use imagekeeper::agent::Agent;
use imagekeeper::cri::{FakeRuntime, RuntimeVersion};
use imagekeeper::model::{ImagePin, PinKey, UnixNanos};
use imagekeeper::store::{Batch, meta_keys};

use crate::support::agent::AgentFixture;

const TAG: &str = "registry.example/app:1";
const PAUSE: &str = "registry.k8s.io/pause:3.10";
const PINNED: &str = "io.cri-containerd.pinned";
const OWN: &str = "io.imagekeeper.pinned";
const INSTANCE: &str = "io.imagekeeper.instance";

/// An agent on `fake` (containerd 2.1, which lists a labelled image pinned) with `db`, keeping
/// only what it is told (no irreplaceable images: the sandbox image is not its keep).
async fn start(fake: &FakeRuntime, dir: &Path, db: std::path::PathBuf) -> Agent {
    fake.set_version(RuntimeVersion {
        version: "0.1.0".into(),
        runtime_name: "containerd".into(),
        runtime_version: "v2.1.0".into(),
        runtime_api_version: "v1".into(),
    });
    fake.list_pin_labels_as_pinned(true);
    let mut flags = super::agent_flags(fake, dir, db);
    flags.protect_irreplaceable = Some(false);
    super::start_agent(flags).await
}

fn instance(agent: &Agent) -> String {
    super::instance_of(agent)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn gauge(agent: &Agent, state: &str) -> Option<String> {
    let prefix = format!("imagekeeper_runtime_pin_labels{{state=\"{state}\"}} ");
    agent
        .render_metrics()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
}

fn pin(agent: &Agent, keep: bool) {
    let key = PinKey::new(TAG.to_owned(), String::new());
    let mut batch = Batch::new();
    match keep {
        true => batch.put_pin(
            key,
            ImagePin {
                created_at: UnixNanos::from_secs(1_800_000_000),
                until: UnixNanos::NEVER,
                reason: "test".to_owned(),
            },
        ),
        false => batch.remove_pin(key),
    }
    agent.store().apply(&batch).expect("the pin is written");
}

fn recorded(agent: &Agent) -> Vec<String> {
    agent
        .store()
        .runtime_labels()
        .expect("the record")
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// Before: the sandbox image, pinned by containerd, with `io.imagekeeper.pinned` and this
/// agent's instance forged on it looked like the agent's own label, and the agent (which does
/// not keep it) removed containerd's pin. Now the agent's record does not hold the name: it is
/// left as it is, reported as foreign (a metric, the log), and `remove-runtime-pins` with the
/// database leaves it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_forged_on_the_sandbox_images_pin_is_left_alone_and_reported() {
    let AgentFixture { fake, dir, db, .. } = AgentFixture::builder()
        .image("sha256:aaa", TAG, 1000)
        .image("sha256:ppp", PAUSE, 1000)
        .image_fs_used(1000)
        .start()
        .await;
    fake.set_image_labels(PAUSE, labels(&[(PINNED, "pinned")]));
    let agent = start(&fake, dir.path(), db).await;
    assert_eq!(agent.garbage_collect(false).await.error, None);
    let me = instance(&agent);
    let forged = labels(&[(PINNED, "pinned"), (OWN, "pin"), (INSTANCE, &me)]);
    fake.set_image_labels(PAUSE, forged.clone());

    for _ in 0..2 {
        assert_eq!(agent.garbage_collect(false).await.error, None);
        assert_eq!(
            fake.image_labels(PAUSE),
            forged,
            "the sandbox image's pin stays: the agent never labelled it"
        );
    }
    assert_eq!(gauge(&agent, "foreign").as_deref(), Some("1"));
    assert_eq!(gauge(&agent, "orphaned").as_deref(), Some("0"));
    assert!(recorded(&agent).is_empty());

    let client = imagekeeper::cri::ContainerdImages::connect(
        &fake.endpoint(),
        imagekeeper::cri::CONTAINERD_CRI_NAMESPACE,
        std::time::Duration::from_secs(5),
        std::time::Duration::from_secs(5),
    )
    .expect("a client");
    let record = imagekeeper::agent::label_record(agent.store())
        .expect("read")
        .expect("a record");
    let removed =
        imagekeeper::agent::remove_recorded_runtime_pin_labels(&client, false, None, &record)
            .await
            .expect("remove");
    assert!(removed.removed.is_empty(), "{removed:?}");
    assert_eq!(removed.foreign, [PAUSE]);
    assert_eq!(fake.image_labels(PAUSE), forged);
}

/// Before: another client stripping `io.imagekeeper.pinned` from a name the agent labelled left
/// its `io.cri-containerd.pinned=pinned` there for good (nothing carried imagekeeper's label,
/// so the agent never removed it). Now the record says the agent wrote it: it is reported as
/// orphaned, labelled again while kept, and cleared once the image is no longer kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripped_own_label_is_an_orphan_reported_and_cleared_once_not_kept() {
    let AgentFixture { fake, dir, db, .. } = AgentFixture::builder()
        .image("sha256:aaa", TAG, 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let agent = start(&fake, dir.path(), db).await;
    pin(&agent, true);
    assert_eq!(agent.garbage_collect(false).await.error, None);
    let me = instance(&agent);
    assert_eq!(
        fake.image_labels(TAG),
        labels(&[(PINNED, "pinned"), (OWN, "pin"), (INSTANCE, &me)])
    );
    assert!(recorded(&agent).contains(&TAG.to_owned()), "recorded");

    // Stripped while kept: reported, and labelled again.
    fake.set_image_labels(TAG, labels(&[(PINNED, "pinned")]));
    assert_eq!(agent.garbage_collect(false).await.error, None);
    assert_eq!(gauge(&agent, "orphaned").as_deref(), Some("1"));
    assert_eq!(
        fake.image_labels(TAG).get(OWN).map(String::as_str),
        Some("pin")
    );

    // Stripped again, and no longer kept: the pinned label the agent wrote is cleared.
    fake.set_image_labels(TAG, labels(&[(PINNED, "pinned")]));
    pin(&agent, false);
    assert_eq!(agent.garbage_collect(false).await.error, None);
    assert_eq!(gauge(&agent, "orphaned").as_deref(), Some("1"));
    assert!(
        !fake.image_labels(TAG).contains_key(PINNED),
        "the orphaned pinned label is cleared: {:?}",
        fake.image_labels(TAG)
    );
    assert!(!recorded(&agent).contains(&TAG.to_owned()), "forgotten");
    assert_eq!(agent.garbage_collect(false).await.error, None);
    assert_eq!(gauge(&agent, "orphaned").as_deref(), Some("0"));
}

/// An agent upgraded from schema 5 (the v5 fixture: instance `00000000c0ffee05`) finds the
/// labels it wrote before the record existed: its first reconcile adopts them, so those no
/// longer kept are cleared (without adoption they would stay forever); it adopts once, so the
/// same labels forged afterwards are foreign and left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_agent_adopts_its_labels_once_and_clears_those_no_longer_kept() {
    const OLD: &str = "registry.example/old:1";
    let AgentFixture { fake, dir, db, .. } = AgentFixture::builder()
        .image("sha256:aaa", TAG, 1000)
        .image("sha256:ccc", OLD, 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v5.redb");
    std::fs::copy(&fixture, &db).expect("copy the v5 fixture");
    let ours = labels(&[
        (PINNED, "pinned"),
        (OWN, "pin"),
        (INSTANCE, "00000000c0ffee05"),
    ]);
    let unnamed = labels(&[(PINNED, "pinned"), (OWN, "warm")]);
    fake.set_image_labels(TAG, ours.clone());
    fake.set_image_labels(OLD, unnamed);
    let agent = start(&fake, dir.path(), db).await;
    assert_eq!(instance(&agent), "00000000c0ffee05");
    assert_eq!(
        agent
            .store()
            .meta(meta_keys::RUNTIME_LABELS_ADOPTED)
            .expect("meta"),
        None
    );

    assert_eq!(agent.garbage_collect(false).await.error, None);
    for name in [TAG, OLD] {
        assert!(
            fake.image_labels(name).is_empty(),
            "{name}: adopted and cleared: {:?}",
            fake.image_labels(name)
        );
    }
    assert!(recorded(&agent).is_empty());
    assert!(
        agent
            .store()
            .meta(meta_keys::RUNTIME_LABELS_ADOPTED)
            .expect("meta")
            .is_some()
    );
    assert_eq!(gauge(&agent, "foreign").as_deref(), Some("0"));

    // Adopted once: the same labels forged now are not the agent's.
    fake.set_image_labels(TAG, ours.clone());
    assert_eq!(agent.garbage_collect(false).await.error, None);
    assert_eq!(fake.image_labels(TAG), ours);
    assert_eq!(gauge(&agent, "foreign").as_deref(), Some("1"));
}
