//! Fast tests of `CriClient` against the in-process `FakeRuntime`, and against endpoints where
//! nothing answers. No real runtime is needed.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use imagekeeper::cri::FakeRuntime;
use imagekeeper::cri::{CriClient, CriConfig, CriError, ImageRuntime, RpcCode, RuntimeVersion};
use imagekeeper::model::{
    ContainerEvent, ContainerEventKind, ContainerState, ImageId, PullCredentials, RuntimeContainer,
    RuntimeImage,
};

fn busybox() -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new("sha256:977ea2e3d7fd87c71dcf05a906fb190976cf2170de5dbff31d8fde4885f2236a"),
        repo_tags: vec![
            "registry.local/busybox:1.35".into(),
            "registry.local/busybox:latest".into(),
        ],
        repo_digests: vec!["registry.local/busybox@sha256:efa532cd97f6".into()],
        size: 1_088_844,
        pinned: false,
        runtime_handler: String::new(),
    }
}

fn pause_pinned_for_kata() -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new("sha256:6157ae0f52dcf55df6b8941b09feaf1d98ec62165e95b97c81d1022dd5ee0324"),
        repo_tags: vec!["registry.local/pause:1.0".into()],
        repo_digests: vec![],
        size: 1_088_956,
        pinned: true,
        runtime_handler: "kata".into(),
    }
}

async fn fake_and_client() -> (FakeRuntime, CriClient) {
    let fake = FakeRuntime::start()
        .await
        .expect("the fake binds a socket in a fresh temp dir");
    let client = CriClient::connect(fake.client_config())
        .await
        .expect("the fake's endpoint is valid");
    (fake, client)
}

#[tokio::test]
async fn listed_images_round_trip_every_field() {
    let (fake, client) = fake_and_client().await;
    let images = vec![busybox(), pause_pinned_for_kata()];
    fake.set_images(images.clone());
    assert_eq!(
        client.list_images().await.expect("ListImages answers"),
        images
    );
}

#[tokio::test]
async fn image_status_of_an_absent_image_is_none() {
    let (fake, client) = fake_and_client().await;
    fake.set_images(vec![busybox()]);
    let absent = client
        .image_status("registry.local/nothing:1", "")
        .await
        .expect("absent is not an error");
    assert_eq!(absent, None);
    let present = client
        .image_status("registry.local/busybox:latest", "")
        .await
        .expect("ImageStatus answers");
    assert_eq!(present, Some(busybox()));
}

#[tokio::test]
async fn pull_returns_the_image_id_and_passes_credentials_and_handler_through() {
    let (fake, client) = fake_and_client().await;
    fake.add_pullable("registry.local/pause:1.0", pause_pinned_for_kata());
    let credentials = PullCredentials {
        username: "alice".into(),
        password: "hunter2".into(),
        server_address: "registry.local".into(),
        ..Default::default()
    };
    let image_ref = client
        .pull_image("registry.local/pause:1.0", "kata", Some(&credentials))
        .await
        .expect("a pullable reference pulls");
    assert_eq!(image_ref, pause_pinned_for_kata().id.as_str());
    let pulls = fake.pulls();
    assert_eq!(pulls.len(), 1);
    assert_eq!(pulls[0].image, "registry.local/pause:1.0");
    assert_eq!(pulls[0].runtime_handler, "kata");
    assert_eq!(pulls[0].credentials.as_ref(), Some(&credentials));
    assert_eq!(fake.images(), vec![pause_pinned_for_kata()]);
}

#[tokio::test]
async fn pull_without_credentials_sends_no_auth() {
    let (fake, client) = fake_and_client().await;
    fake.add_pullable("registry.local/busybox:1.35", busybox());
    client
        .pull_image("registry.local/busybox:1.35", "", None)
        .await
        .expect("a pullable reference pulls");
    assert_eq!(fake.pulls()[0].credentials, None);
}

#[tokio::test]
async fn pull_of_an_unknown_reference_is_not_found() {
    let (_fake, client) = fake_and_client().await;
    let err = client
        .pull_image("registry.local/busybox:missing", "", None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(RpcCode::NotFound), "{err}");
    assert!(
        err.to_string()
            .starts_with("rpc error: code = NotFound desc = failed to pull and unpack image")
    );
}

#[tokio::test]
async fn runtime_error_keeps_its_code_and_message() {
    let (fake, client) = fake_and_client().await;
    fake.fail(
        "RemoveImage",
        RpcCode::FailedPrecondition,
        "image is in use by container abc",
    );
    let err = client
        .remove_image("registry.local/busybox:1.35", "")
        .await
        .unwrap_err();
    match &err {
        CriError::Rpc {
            method,
            code,
            message,
        } => {
            assert_eq!(*method, "RemoveImage");
            assert_eq!(*code, RpcCode::FailedPrecondition);
            assert_eq!(message, "image is in use by container abc");
        }
        other => panic!("expected an Rpc error, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "rpc error: code = FailedPrecondition desc = image is in use by container abc"
    );
    fake.clear("RemoveImage");
    client
        .remove_image("registry.local/busybox:1.35", "")
        .await
        .expect("cleared failure no longer fails");
}

#[tokio::test]
async fn removing_by_one_tag_removes_the_whole_image_and_absent_is_ok() {
    let (fake, client) = fake_and_client().await;
    fake.set_images(vec![busybox(), pause_pinned_for_kata()]);
    client
        .remove_image("registry.local/busybox:1.35", "")
        .await
        .expect("RemoveImage answers");
    assert_eq!(
        client
            .image_status("registry.local/busybox:latest", "")
            .await
            .expect("answers"),
        None
    );
    client
        .remove_image("registry.local/busybox:1.35", "")
        .await
        .expect("removing an absent image is OK");
    assert_eq!(fake.images(), vec![pause_pinned_for_kata()]);
}

#[tokio::test]
async fn containers_round_trip_in_every_state() {
    let (fake, client) = fake_and_client().await;
    let containers: Vec<RuntimeContainer> = [
        ContainerState::Created,
        ContainerState::Running,
        ContainerState::Exited,
        ContainerState::Unknown,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, state)| RuntimeContainer {
        id: format!("container-{i}"),
        pod_sandbox_id: "sandbox-1".into(),
        image: "registry.local/busybox:1.35".into(),
        image_id: busybox().id,
        state,
        runtime_handler: if i == 0 { "kata".into() } else { String::new() },
    })
    .collect();
    fake.set_containers(containers.clone());
    assert_eq!(
        client
            .list_containers()
            .await
            .expect("ListContainers answers"),
        containers
    );
}

#[tokio::test]
async fn image_fs_stats_adds_statvfs_of_the_reported_mountpoint() {
    let (fake, client) = fake_and_client().await;
    let mountpoint = fake.dir().display().to_string();
    fake.set_image_fs(mountpoint.clone(), 123_456);
    let stats = client
        .image_fs_stats()
        .await
        .expect("ImageFsInfo answers and statvfs works");
    assert_eq!(stats.mountpoint, mountpoint);
    assert_eq!(stats.used_bytes, 123_456);
    assert!(stats.capacity > 0);
    assert!(stats.available <= stats.capacity);
}

#[tokio::test]
async fn image_fs_stats_of_a_missing_mountpoint_is_a_statvfs_error() {
    let (fake, client) = fake_and_client().await;
    fake.set_image_fs("/nonexistent/imagekeeper/imagefs", 1);
    let err = client.image_fs_stats().await.unwrap_err();
    assert!(matches!(err, CriError::Statvfs { .. }), "{err:?}");
    assert_eq!(err.code(), None);
}

#[tokio::test]
async fn image_fs_stats_without_an_image_filesystem_is_an_error() {
    let (_fake, client) = fake_and_client().await;
    let err = client.image_fs_stats().await.unwrap_err();
    assert!(matches!(err, CriError::NoImageFilesystem), "{err:?}");
}

#[tokio::test]
async fn version_reports_the_runtime() {
    let (fake, client) = fake_and_client().await;
    let version = RuntimeVersion {
        version: "0.1.0".into(),
        runtime_name: "containerd".into(),
        runtime_version: "1.6.20".into(),
        runtime_api_version: "v1".into(),
    };
    fake.set_version(version.clone());
    assert_eq!(client.version().await.expect("Version answers"), version);
}

#[tokio::test]
async fn image_calls_go_to_the_separate_image_endpoint() {
    let runtime = FakeRuntime::start().await.expect("fake starts");
    let images = FakeRuntime::start().await.expect("fake starts");
    images.set_images(vec![busybox()]);
    runtime.set_containers(vec![RuntimeContainer {
        id: "c".into(),
        pod_sandbox_id: "p".into(),
        image: "i".into(),
        image_id: busybox().id,
        state: ContainerState::Running,
        runtime_handler: String::new(),
    }]);
    let config = CriConfig {
        image_endpoint: Some(images.endpoint()),
        ..runtime.client_config()
    };
    let client = CriClient::connect(config)
        .await
        .expect("both endpoints are valid");
    assert_eq!(client.image_endpoint(), images.endpoint());
    assert_eq!(
        client.list_images().await.expect("answers"),
        vec![busybox()]
    );
    assert_eq!(client.list_containers().await.expect("answers").len(), 1);
}

/// Paused time (the fake serves on the same runtime): the clock jumps to the next timer only
/// when every task is idle, so the call ends exactly at its deadline, never by wall-clock
/// luck. The fake parks the call forever once it has it, so only the deadline can end it.
#[tokio::test(start_paused = true)]
async fn a_runtime_that_never_answers_fails_at_the_deadline() {
    let fake = FakeRuntime::start().await.expect("fake starts");
    fake.hang("ListImages");
    let deadline = Duration::from_secs(120);
    let config = CriConfig {
        call_timeout: deadline,
        ..fake.client_config()
    };
    let client = CriClient::connect(config).await.expect("valid endpoint");
    let start = tokio::time::Instant::now();
    let err = client.list_images().await.unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        matches!(err, CriError::Timeout { method: "ListImages", after } if after == deadline),
        "{err:?}"
    );
    assert_eq!(err.code(), Some(RpcCode::DeadlineExceeded), "{err:?}");
    assert_eq!(fake.calls("ListImages"), 1, "the runtime had the call");
    assert!(
        elapsed >= deadline,
        "ended after {elapsed:?}, before its {deadline:?} deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_socket_is_a_connect_error_before_the_deadline() {
    let dir = tempfile::tempdir().expect("temp dir");
    let endpoint = format!("unix://{}", dir.path().join("no-such.sock").display());
    assert_dead_endpoint(&endpoint).await;
}

#[tokio::test(start_paused = true)]
async fn a_socket_with_no_listener_is_a_connect_error_before_the_deadline() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind a socket in a fresh temp dir"));
    assert!(
        path.exists(),
        "the socket file stays after its listener is gone"
    );
    assert_dead_endpoint(&format!("unix://{}", path.display())).await;
}

/// A refused connect is an error at once, twice in a row (no cached broken channel). Run on
/// paused time: the clock moves only to a timer, so an elapsed time below the deadline means
/// the call did not wait for any of its deadlines.
async fn assert_dead_endpoint(endpoint: &str) {
    let deadline = Duration::from_secs(2);
    let config = CriConfig {
        runtime_endpoint: endpoint.to_string(),
        image_endpoint: None,
        connect_timeout: deadline,
        call_timeout: deadline,
        pull_timeout: Some(deadline),
    };
    let client = CriClient::connect(config)
        .await
        .expect("a lazy client connects to nothing yet");
    for _ in 0..2 {
        let start = tokio::time::Instant::now();
        let err = client.list_images().await.unwrap_err();
        let elapsed = start.elapsed();
        assert!(
            matches!(err, CriError::Connect { .. }),
            "expected a connect error, got {err:?}"
        );
        assert_eq!(err.code(), Some(RpcCode::Unavailable));
        assert!(err.to_string().contains(endpoint), "{err}");
        assert!(
            elapsed < deadline,
            "waited {elapsed:?} for a {deadline:?} deadline"
        );
    }
}

#[tokio::test]
async fn non_unix_endpoint_is_rejected() {
    let config = CriConfig {
        runtime_endpoint: "tcp://127.0.0.1:1234".into(),
        ..CriConfig::default()
    };
    let err = CriClient::connect(config).await.unwrap_err();
    assert!(matches!(err, CriError::InvalidEndpoint { .. }), "{err:?}");
}

/// A `MakeWriter` that appends everything to one shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn credentials_never_appear_in_trace_output_or_debug() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The test runs on a current-thread runtime: client, connection and fake server tasks all
    // run on this thread, where this subscriber is the default.
    let _guard = tracing::subscriber::set_default(subscriber);
    let (fake, client) = fake_and_client().await;
    fake.add_pullable("registry.local/busybox:1.35", busybox());
    let secrets = [
        "s3cr3t-user",
        "s3cr3t-password",
        "s3cr3t-auth",
        "s3cr3t-identity",
        "s3cr3t-registry-token",
    ];
    let credentials = PullCredentials {
        username: secrets[0].into(),
        password: secrets[1].into(),
        auth: secrets[2].into(),
        server_address: "registry.local".into(),
        identity_token: secrets[3].into(),
        registry_token: secrets[4].into(),
    };
    client
        .pull_image("registry.local/busybox:1.35", "", Some(&credentials))
        .await
        .expect("pull works");
    fake.fail("PullImage", RpcCode::Unauthenticated, "bad credentials");
    let _ = client
        .pull_image("registry.local/busybox:1.35", "", Some(&credentials))
        .await
        .unwrap_err();
    let output =
        String::from_utf8_lossy(&captured.0.lock().unwrap_or_else(|p| p.into_inner())).to_string();
    assert!(
        output.contains("pulling image"),
        "the capture works and saw the pull: {output}"
    );
    let pulls_debug = format!("{:?}", fake.pulls());
    for secret in secrets {
        assert!(
            !output.contains(secret),
            "{secret} leaked into trace output"
        );
        assert!(!pulls_debug.contains(secret), "{secret} leaked into Debug");
    }
}

fn running(id: &str, image: &RuntimeImage) -> RuntimeContainer {
    RuntimeContainer {
        id: id.into(),
        pod_sandbox_id: "pod".into(),
        image: image.repo_tags[0].clone(),
        image_id: image.id.clone(),
        state: ContainerState::Running,
        runtime_handler: String::new(),
    }
}

#[tokio::test]
async fn container_status_reports_the_image_and_the_image_volumes_of_its_mounts() {
    let (fake, client) = fake_and_client().await;
    let volume = pause_pinned_for_kata();
    let kata = RuntimeContainer {
        runtime_handler: "kata".into(),
        ..running("c2", &busybox())
    };
    fake.set_containers(vec![running("c1", &busybox()), kata]);
    fake.set_image_volumes(
        "c1",
        vec![
            volume.id.as_str().to_string(),
            "registry.local/pause@sha256:937f".into(),
        ],
    );
    let usage = client.container_usage("c1").await.expect("ContainerStatus");
    assert_eq!(usage.state, ContainerState::Running);
    assert_eq!(usage.image_id, busybox().id);
    assert_eq!(
        usage.image_volumes,
        vec![
            volume.id.as_str().to_string(),
            "registry.local/pause@sha256:937f".to_string()
        ]
    );
    assert_eq!(usage.runtime_handler, "");
    let plain = client.container_usage("c2").await.expect("ContainerStatus");
    assert!(plain.image_volumes.is_empty(), "{plain:?}");
    assert_eq!(
        plain.runtime_handler, "kata",
        "the handler of its ImageSpec"
    );
    let report = client
        .container_status("c1")
        .await
        .expect("ContainerStatus");
    assert_eq!(report.image_volumes, usage.image_volumes);
    let gone = client.container_usage("c3").await.unwrap_err();
    assert_eq!(gone.code(), Some(RpcCode::NotFound), "{gone}");
}

fn created(id: &str) -> ContainerEvent {
    ContainerEvent {
        container_id: id.into(),
        kind: ContainerEventKind::Created,
        created_at: 1_700_000_000_000_000_000,
    }
}

#[tokio::test]
async fn container_events_stream_what_the_runtime_sends_until_it_breaks() {
    let (fake, client) = fake_and_client().await;
    let mut stream = client.container_events().await.expect("the stream opens");
    assert_eq!(fake.open_event_streams(), 1);
    let kinds = [
        ContainerEventKind::Created,
        ContainerEventKind::Started,
        ContainerEventKind::Stopped,
        ContainerEventKind::Deleted,
        ContainerEventKind::Unknown,
    ];
    for kind in kinds {
        let event = ContainerEvent {
            kind,
            ..created("c1")
        };
        assert_eq!(fake.push_event(&event), 1);
        let got = stream
            .next()
            .await
            .expect("an event")
            .expect("not an error");
        assert_eq!(got, event);
    }
    fake.end_event_streams(Some(RpcCode::Unavailable));
    let broken = stream.next().await.expect("the end is reported");
    assert_eq!(
        broken.unwrap_err().code(),
        Some(RpcCode::Unavailable),
        "a broken stream is an error"
    );
    // A clean end is None.
    let mut second = client.container_events().await.expect("opens again");
    fake.end_event_streams(None);
    assert!(second.next().await.is_none());
}

#[tokio::test]
async fn container_events_of_a_runtime_without_them_are_unimplemented() {
    let (fake, client) = fake_and_client().await;
    fake.fail(
        "GetContainerEvents",
        RpcCode::Unimplemented,
        "method GetContainerEvents not implemented",
    );
    let err = client.container_events().await.unwrap_err();
    assert_eq!(err.code(), Some(RpcCode::Unimplemented), "{err}");
}
