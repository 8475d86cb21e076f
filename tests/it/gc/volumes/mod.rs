//! Image volumes (KEP-4639) through the in-process fake CRI server: an image a container (of
//! any state) mounts as a volume is in use at detect and in the last look before a removal,
//! and finding them costs one ContainerStatus per container in its life (its mounts are fixed
//! when it is created). A container gone between the list and its ContainerStatus is skipped
//! where the kubelet fails the cycle (a deviation, stated by its test). `lab` proves it on the
//! real containerd 2.1 (1.6 and 1.7 serve no image volumes: it asserts what they answer).

mod lab;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::hooked::{Hooked, Hooks};
use imagekeeper::cri::FakeRuntime;
use imagekeeper::cri::{CriClient, ImageRuntime};
use imagekeeper::gc::{GcConfig, ImageGcManager};
use imagekeeper::model::{ContainerState, RuntimeContainer, RuntimeImage};
use imagekeeper::runtime::RpcCode;
use imagekeeper::store::Store;

use super::{at, container, image, policy};

const DIGEST: &str =
    "registry.example/data@sha256:5f3ca9e4d82e32203c2fafb410dfae9c8047bc6ebe57d642fe264d479e152955";

async fn fake() -> Arc<FakeRuntime> {
    Arc::new(FakeRuntime::start().await.expect("the fake starts"))
}

async fn client(fake: &FakeRuntime) -> CriClient {
    CriClient::connect(fake.client_config())
        .await
        .expect("the fake's endpoint is valid")
}

fn manager<R: ImageRuntime>(runtime: R, dir: &tempfile::TempDir) -> ImageGcManager<R> {
    let store = Arc::new(Store::open(&dir.path().join("records.redb"), at(0)).expect("store"));
    let config = GcConfig {
        policy: policy(85, 80, 0, 0),
        ..GcConfig::default()
    };
    ImageGcManager::new(runtime, store, config).expect("valid policy")
}

fn ids(images: &[RuntimeImage]) -> Vec<String> {
    let mut ids: Vec<String> = images.iter().map(|i| i.id.as_str().to_string()).collect();
    ids.sort();
    ids
}

fn exited(id: &str, image_id: &str) -> RuntimeContainer {
    RuntimeContainer {
        state: ContainerState::Exited,
        ..container(id, image_id)
    }
}

#[tokio::test]
async fn an_image_a_running_container_mounts_as_a_volume_is_in_use_at_detect() {
    let fake = fake().await;
    let mut digested = image("sha256:digested", 100);
    digested.repo_digests = vec![DIGEST.into()];
    fake.set_images(vec![
        image("sha256:app", 100),
        image("sha256:volume", 100),
        digested,
        image("sha256:idle", 100),
    ]);
    fake.set_containers(vec![container("c1", "sha256:app")]);
    // One volume named by image id (Mount.image.image), one by digest (Mount.image.image_ref).
    fake.set_image_volumes("c1", vec!["sha256:volume".into(), DIGEST.into()]);
    let dir = tempfile::tempdir().expect("temp dir");
    let gc = manager(client(&fake).await, &dir);
    let report = gc.delete_unused_images(at(10)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(
        ids(&fake.images()),
        ["sha256:app", "sha256:digested", "sha256:volume"]
    );
    let detect = gc.detect(at(20)).await.expect("detect");
    assert_eq!(detect.in_use, 3, "the app image and both volumes");
}

/// Hooks over the fake that start a container right after detect has listed the containers:
/// only the last look before the removal can see its image volume.
struct StartsAfterDetect {
    fake: Arc<FakeRuntime>,
    lists: AtomicUsize,
    late: Mutex<Option<(RuntimeContainer, Vec<String>)>>,
}

impl Hooks for StartsAfterDetect {
    async fn after(&self, method: &'static str, _: &str, _: bool) {
        if method == "ListContainers" && self.lists.fetch_add(1, Ordering::SeqCst) == 0 {
            let late = self.late.lock().expect("lock").take();
            if let Some((started, volumes)) = late {
                self.fake.set_image_volumes(started.id.clone(), volumes);
                self.fake.set_containers(vec![started]);
            }
        }
    }
}

#[tokio::test]
async fn the_last_look_keeps_an_image_a_container_started_since_detect_mounts() {
    let fake = fake().await;
    fake.set_images(vec![
        image("sha256:app", 100),
        image("sha256:volume", 100),
        image("sha256:idle", 100),
    ]);
    let runtime = Hooked {
        inner: client(&fake).await,
        hooks: StartsAfterDetect {
            fake: fake.clone(),
            lists: AtomicUsize::new(0),
            late: Mutex::new(Some((
                container("late", "sha256:app"),
                vec!["sha256:volume".into()],
            ))),
        },
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let gc = manager(runtime, &dir);
    let report = gc.delete_unused_images(at(10)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    let removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(
        removed,
        ["sha256:idle"],
        "the volume and the app image are kept"
    );
    assert_eq!(ids(&fake.images()), ["sha256:app", "sha256:volume"]);
    // The last look's answer is kept: the next detect asks no container.
    let before = fake.calls("ContainerStatus");
    gc.detect(at(20)).await.expect("detect");
    assert_eq!(
        fake.calls("ContainerStatus") - before,
        0,
        "the container the last look asked about is not asked again"
    );
}

/// The cost: one ContainerStatus per container (of any state) the first time a detect lists
/// it, none in the cycles after it while it is listed, also when a cycle removes many images,
/// each after a last look; a container created since is asked once. Prints the time of a
/// detect with and without image volumes (not asserted: the machine is shared).
#[tokio::test]
async fn finding_image_volumes_costs_one_container_status_per_container_in_its_life() {
    const RUNNING: usize = 200;
    const EXITED: usize = 100;
    const IDLE: usize = 20;
    let fake = fake().await;
    let mut images = vec![image("sha256:app", 100)];
    images.extend((0..RUNNING).map(|n| image(&format!("sha256:volume{n}"), 100)));
    images.extend((0..IDLE).map(|n| image(&format!("sha256:idle{n}"), 100)));
    fake.set_images(images);
    let mut containers = Vec::new();
    for n in 0..RUNNING {
        containers.push(container(&format!("run{n}"), "sha256:app"));
        fake.set_image_volumes(format!("run{n}"), vec![format!("sha256:volume{n}")]);
    }
    containers.extend((0..EXITED).map(|n| exited(&format!("exit{n}"), "sha256:app")));
    fake.set_containers(containers.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let gc = manager(client(&fake).await, &dir);

    let started = std::time::Instant::now();
    let detect = gc.detect(at(10)).await.expect("detect");
    let with_volumes = started.elapsed();
    assert_eq!(detect.in_use, 1 + RUNNING);
    assert_eq!(
        fake.calls("ContainerStatus"),
        (RUNNING + EXITED) as u64,
        "one per container"
    );

    let before = fake.calls("ContainerStatus");
    let report = gc.delete_unused_images(at(20)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.removed.len(), IDLE);
    assert_eq!(
        fake.calls("ContainerStatus") - before,
        0,
        "the next cycle's detect and its {IDLE} last looks reuse the answers"
    );

    // A container created since: asked once, and the volume it mounts (an image no other
    // container uses) is in use; the detect after it asks none.
    let mut images = fake.images();
    images.push(image("sha256:late-volume", 100));
    fake.set_images(images);
    containers.push(container("late", "sha256:app"));
    fake.set_image_volumes("late", vec!["sha256:late-volume".into()]);
    fake.set_containers(containers);
    let before = fake.calls("ContainerStatus");
    let detect = gc.detect(at(25)).await.expect("detect");
    assert_eq!(detect.in_use, 2 + RUNNING);
    assert_eq!(
        fake.calls("ContainerStatus") - before,
        1,
        "the new one alone"
    );
    let before = fake.calls("ContainerStatus");
    gc.detect(at(26)).await.expect("detect");
    assert_eq!(fake.calls("ContainerStatus") - before, 0);

    // The same node without running containers: the detect's other calls alone.
    fake.set_containers(Vec::new());
    let started = std::time::Instant::now();
    gc.detect(at(30)).await.expect("detect");
    let without = started.elapsed();
    eprintln!(
        "detect with {RUNNING} running containers' ContainerStatus: {with_volumes:?} \
         ({:?} per container); without: {without:?}",
        with_volumes.saturating_sub(without) / RUNNING as u32
    );
}

/// A crash-looping pod: its container has exited (back-off) and will be created again with
/// the same image volume, so the volume stays in use as the container's own image does.
#[tokio::test]
async fn an_image_an_exited_container_mounts_as_a_volume_stays_in_use() {
    let fake = fake().await;
    fake.set_images(vec![
        image("sha256:app", 100),
        image("sha256:volume", 100),
        image("sha256:idle", 100),
    ]);
    fake.set_containers(vec![exited("c1", "sha256:app")]);
    fake.set_image_volumes("c1", vec!["sha256:volume".into()]);
    let dir = tempfile::tempdir().expect("temp dir");
    let gc = manager(client(&fake).await, &dir);
    let report = gc.delete_unused_images(at(10)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(ids(&fake.images()), ["sha256:app", "sha256:volume"]);
}

/// Hooks over the fake that leave only `left` listed right after detect's first
/// ListContainers: a container removed then answers ContainerStatus with NotFound, as
/// containerd answers for a container removed between the list and the status (the kubelet's
/// container GC, a pod deleted).
struct GoneAfterList {
    fake: Arc<FakeRuntime>,
    left: Mutex<Option<Vec<RuntimeContainer>>>,
}

impl Hooks for GoneAfterList {
    async fn after(&self, method: &'static str, _: &str, _: bool) {
        if method == "ListContainers" {
            let left = self.left.lock().expect("lock").take();
            if let Some(left) = left {
                self.fake.set_containers(left);
            }
        }
    }
}

/// A container gone between the list and its ContainerStatus (NotFound), and one whose status
/// fails otherwise. Kubelet master fails the whole detect, and so the GC cycle or
/// DeleteUnusedImages, on any ContainerStatus error, NotFound included:
/// pkg/kubelet/images/image_gc_manager.go, `handleImageVolumes` returns `get container status:
/// %w` and `detectImages` returns it (kubelet v1.37.2). imagekeeper skips the gone container,
/// a deviation (docs: beside-the-kubelet.md): it mounts nothing any more, the next cycle
/// would not list it either, and failing for it would hold a full disk for a GC period on a
/// node whose pods come and go. Any other failure fails the cycle as the kubelet's does, with
/// its words. Fails if either choice changes.
#[tokio::test]
async fn a_container_gone_before_its_status_is_skipped_where_the_kubelet_fails_the_cycle_and_other_status_errors_fail_it()
 {
    let fake = fake().await;
    fake.set_images(vec![
        image("sha256:app", 100),
        image("sha256:volume", 100),
        image("sha256:gone-volume", 100),
        image("sha256:idle", 100),
    ]);
    fake.set_containers(vec![
        container("c1", "sha256:app"),
        container("gone", "sha256:app"),
    ]);
    fake.set_image_volumes("c1", vec!["sha256:volume".into()]);
    fake.set_image_volumes("gone", vec!["sha256:gone-volume".into()]);
    let runtime = Hooked {
        inner: client(&fake).await,
        hooks: GoneAfterList {
            fake: fake.clone(),
            left: Mutex::new(Some(vec![container("c1", "sha256:app")])),
        },
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let gc = manager(runtime, &dir);
    let report = gc.delete_unused_images(at(10)).await;
    // imagekeeper: the cycle goes on without the gone container. (The kubelet: this cycle
    // fails with "get container status: runtime container status: rpc error: code = NotFound
    // desc = an error occurred when try to find container \"gone\": not found" and removes
    // nothing.)
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(fake.calls("ContainerStatus"), 2, "c1's and the gone one's");
    let mut removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    removed.sort();
    assert_eq!(
        removed,
        ["sha256:gone-volume", "sha256:idle"],
        "the gone container's volume is used by nothing left"
    );
    assert_eq!(ids(&fake.images()), ["sha256:app", "sha256:volume"]);

    // Any other ContainerStatus failure: the cycle fails, as the kubelet's does, with its
    // words, and nothing is removed.
    let fake = self::fake().await;
    fake.set_images(vec![image("sha256:app", 100), image("sha256:idle", 100)]);
    fake.set_containers(vec![container("c1", "sha256:app")]);
    fake.fail("ContainerStatus", RpcCode::Internal, "status unavailable");
    let dir = tempfile::tempdir().expect("temp dir");
    let gc = manager(client(&fake).await, &dir);
    let report = gc.delete_unused_images(at(10)).await;
    assert_eq!(
        report.error.map(|e| e.to_string()).as_deref(),
        Some(
            "get container status: runtime container status: rpc error: code = Internal desc = \
             status unavailable"
        )
    );
    assert!(report.removed.is_empty());
    assert_eq!(ids(&fake.images()), ["sha256:app", "sha256:idle"]);
}
