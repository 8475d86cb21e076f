//! The pull path over the CRI fake runtime (a real gRPC server on a unix socket) and the real
//! store: pulled images are recorded at once, and runtime errors reach kubelet's messages.
//! `cli` runs the `imagekeeper pull` binary where no runtime is needed; `lab` runs pulls (in
//! process and through the binary) against the real containerd of `scripts/cri-lab`.

mod cli;
mod lab;

use std::sync::Arc;

use imagekeeper::clock::ManualClock;
use imagekeeper::cri::fake::FakeRuntime;
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
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(
        Store::open(&dir.path().join("db.redb"), UnixNanos::from_secs(NOW)).expect("store"),
    );
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
