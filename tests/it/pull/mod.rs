//! The pull path over the CRI fake runtime (a real gRPC server on a unix socket) and the real
//! store: pulled images are recorded at once, and runtime errors reach kubelet's messages.
//! `cli` runs the `imagekeeper pull` binary where no runtime is needed; `lab` runs pulls (in
//! process and through the binary) against the real containerd of `scripts/cri-lab`.

mod cli;
mod credentials;
mod lab;
mod registry;

use std::sync::Arc;

use imagekeeper::clock::ManualClock;
use imagekeeper::cri::FakeRuntime;
use imagekeeper::cri::{CriClient, RpcCode};
use imagekeeper::model::{ImageId, RecordKey, RuntimeImage, UnixNanos};
use imagekeeper::pull::{ImageManager, PodRef, PullConfig, PullPolicy};
use imagekeeper::store::Store;

const NOW: i64 = 1_700_000_000;

fn pod() -> PodRef {
    PodRef {
        uid: "uid-1".into(),
        namespace: "default".into(),
        name: "web".into(),
        ..PodRef::default()
    }
}

async fn setup() -> (
    FakeRuntime,
    ImageManager<CriClient, Store>,
    Arc<Store>,
    tempfile::TempDir,
) {
    let fake = FakeRuntime::start().await.expect("fake runtime");
    let client = CriClient::connect(fake.client_config())
        .await
        .expect("connect");
    let (dir, store) = crate::support::temp_store(UnixNanos::from_secs(NOW));
    let store = Arc::new(store);
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(NOW)));
    let manager = ImageManager::new(
        &PullConfig::default(),
        Arc::new(client),
        store.clone(),
        clock,
    )
    .expect("valid config");
    (fake, manager, store, dir)
}

#[tokio::test]
async fn pull_over_cri_records_the_image_with_its_size_at_once() {
    let (fake, manager, store, _dir) = setup().await;
    fake.add_pullable(
        "busybox:latest",
        RuntimeImage {
            id: ImageId::new("sha256:aaaa"),
            repo_tags: vec!["busybox:latest".into()],
            size: 4_269_694,
            ..RuntimeImage::default()
        },
    );
    let got = manager
        .ensure_image_exists(&pod(), "busybox", PullPolicy::IfNotPresent, &[], "")
        .await;
    assert_eq!(got, Ok("sha256:aaaa".to_owned()));
    let record = store
        .get(&RecordKey::new("sha256:aaaa", ""))
        .expect("read")
        .expect("recorded at once");
    assert_eq!(record.size, 4_269_694);
    assert_eq!(record.last_used, UnixNanos::from_secs(NOW));
    // Present now: IfNotPresent does not pull again.
    let again = manager
        .ensure_image_exists(&pod(), "busybox", PullPolicy::IfNotPresent, &[], "")
        .await;
    assert_eq!(again, Ok("sha256:aaaa".to_owned()));
    assert_eq!(fake.pulls().len(), 1);
    // The pull history (schema 5) holds the one pull, imagekeeper's own, by the name asked.
    let pulls: Vec<(String, imagekeeper::model::PullOrigin, String, u64)> = store
        .pulls()
        .expect("pulls")
        .into_iter()
        .map(|(k, e)| (k.key.image_id.as_str().to_owned(), e.origin, e.name, e.size))
        .collect();
    assert_eq!(
        pulls,
        [(
            "sha256:aaaa".to_owned(),
            imagekeeper::model::PullOrigin::Pull,
            "busybox".to_owned(),
            4_269_694
        )]
    );
}

#[tokio::test]
async fn cri_errors_become_kubelets_reasons_and_messages() {
    // (code, runtime message, reason, message)
    let cases = [
        (
            RpcCode::Unknown,
            "RegistryUnavailable: dial tcp 10.0.0.1:443: i/o timeout",
            "RegistryUnavailable",
            "image pull failed for quay.io/a/b:1 because the registry is unavailable: dial tcp 10.0.0.1:443: i/o timeout",
        ),
        (
            RpcCode::Unknown,
            "SignatureValidationFailed",
            "SignatureValidationFailed",
            "image pull failed for quay.io/a/b:1 because the signature validation failed",
        ),
        (
            RpcCode::NotFound,
            "not found",
            "ErrImagePull",
            "rpc error: code = NotFound desc = not found",
        ),
    ];
    for (code, runtime_msg, reason, msg) in cases {
        let (fake, manager, store, _dir) = setup().await;
        fake.fail("PullImage", code, runtime_msg);
        let err = manager
            .ensure_image_exists(&pod(), "quay.io/a/b:1", PullPolicy::Always, &[], "")
            .await
            .expect_err("the pull fails");
        assert_eq!(
            (err.reason(), err.message()),
            (reason, msg),
            "{runtime_msg}"
        );
        let entry = store
            .backoff("uid-1_quay.io/a/b:1")
            .expect("read")
            .expect("backoff kept");
        assert_eq!(entry.last_error, format!("{reason}: {msg}"));
    }
}

/// The kubelet's TestPullAndListImageWithPodAnnotations (image_manager_test.go) and
/// TestPullThenListWithAnnotations (kuberuntime_image_test.go): the pod's annotations reach
/// the runtime as the ImageSpec's annotations, and the pod as PullImage's sandbox config.
#[tokio::test]
async fn pull_carries_the_pods_annotations_and_sandbox_config_to_the_runtime() {
    let (fake, manager, _store, _dir) = setup().await;
    fake.add_pullable(
        "missing_image:latest",
        RuntimeImage {
            id: ImageId::new("sha256:bbbb"),
            repo_tags: vec!["missing_image:latest".into()],
            size: 1,
            ..RuntimeImage::default()
        },
    );
    let mut pod = pod();
    pod.annotations = [(
        "kubernetes.io/runtimehandler".to_owned(),
        "handler_name".to_owned(),
    )]
    .into();
    manager
        .ensure_image_exists(&pod, "missing_image", PullPolicy::IfNotPresent, &[], "")
        .await
        .expect("pull");
    let pulls = fake.pulls();
    assert_eq!(pulls.len(), 1);
    let spec = &pulls[0].spec;
    assert_eq!(spec.image, "missing_image:latest");
    assert_eq!(spec.annotations, pod.annotations);
    let sandbox = spec.sandbox.as_ref().expect("the pod's sandbox config");
    assert_eq!(
        (
            sandbox.name.as_str(),
            sandbox.uid.as_str(),
            sandbox.namespace.as_str()
        ),
        ("web", "uid-1", "default")
    );
    assert_eq!(sandbox.annotations, pod.annotations);
}

/// remote_image.go's checks: an ImageStatus image with no id or size 0 is an error
/// (ErrImageInspect for a pull that inspects first), and a PullImage reply with no image ref
/// is a failed pull (ErrImagePull, backoff started).
#[tokio::test]
async fn runtime_replies_the_kubelet_refuses_are_errors() {
    // An image listed with size 0.
    let (fake, manager, _store, _dir) = setup().await;
    fake.set_images(vec![RuntimeImage {
        id: ImageId::new("sha256:cccc"),
        repo_tags: vec!["sized:1".into()],
        size: 0,
        ..RuntimeImage::default()
    }]);
    let err = manager
        .ensure_image_exists(&pod(), "sized:1", PullPolicy::IfNotPresent, &[], "")
        .await
        .expect_err("size 0 is refused");
    assert_eq!(err.reason(), "ImageInspectError");
    assert!(
        err.message()
            .contains("Id or size of image \"sized:1\" is not set"),
        "{}",
        err.message()
    );

    // A pull answered with an empty image ref.
    let (fake, manager, store, _dir) = setup().await;
    fake.answer_empty_image_ref(true);
    let err = manager
        .ensure_image_exists(&pod(), "quay.io/a/b:1", PullPolicy::Always, &[], "")
        .await
        .expect_err("an empty image ref is a failed pull");
    assert_eq!(
        (err.reason(), err.message()),
        (
            "ErrImagePull",
            "imageRef of image \"quay.io/a/b:1\" is not set"
        )
    );
    let entry = store
        .backoff("uid-1_quay.io/a/b:1")
        .expect("read")
        .expect("the failure starts backoff");
    assert_eq!(entry.backoff, std::time::Duration::from_secs(10));
    assert!(store.records().expect("records").is_empty());
}

/// PullImage has no client deadline (the kubelet only cancels a pull): a pull slower than
/// every other call's deadline still succeeds.
#[tokio::test]
async fn a_pull_slower_than_the_call_deadline_still_succeeds() {
    let fake = FakeRuntime::start().await.expect("fake runtime");
    fake.add_pullable(
        "slow:1",
        RuntimeImage {
            id: ImageId::new("sha256:dddd"),
            repo_tags: vec!["slow:1".into()],
            size: 1,
            ..RuntimeImage::default()
        },
    );
    let mut config = fake.client_config();
    config.call_timeout = std::time::Duration::from_millis(200);
    assert_eq!(config.pull_timeout, None);
    let client = CriClient::connect(config).await.expect("connect");
    fake.delay("PullImage", std::time::Duration::from_millis(600));
    let image_ref = imagekeeper::cri::ImageRuntime::pull_image(&client, "slow:1", "", None)
        .await
        .expect("no deadline on PullImage");
    assert_eq!(image_ref, "sha256:dddd");
    // Every other call keeps its deadline.
    fake.delay("ListImages", std::time::Duration::from_millis(600));
    let err = imagekeeper::cri::ImageRuntime::list_images(&client)
        .await
        .expect_err("ListImages times out");
    assert_eq!(err.code(), Some(RpcCode::DeadlineExceeded));
}
