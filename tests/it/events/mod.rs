//! The agent's container events watcher against the in-process fake CRI server: a created
//! container's images are marked used at once, a runtime without GetContainerEvents (as
//! containerd 1.6) ends the watcher after one call, and a broken stream is opened again after
//! a backoff (paused time). `lab` runs the watcher on the lab's real containerd: the stream of
//! 1.7 and 2.1 (and across a containerd restart), 1.6's Unimplemented.

mod lab;

use std::sync::Arc;
use std::time::Duration;

use imagekeeper::agent::{EventsNote, watch_container_events};
use imagekeeper::clock::ManualClock;
use imagekeeper::config::ContainerEvents;
use imagekeeper::cri::FakeRuntime;
use imagekeeper::cri::{CriClient, RpcCode};
use imagekeeper::gc::{GcConfig, ImageGcManager};
use imagekeeper::model::{
    ContainerEvent, ContainerEventKind, ContainerState, ImageId, RecordKey, RuntimeContainer,
    RuntimeImage, UnixNanos,
};
use tokio::sync::{mpsc, watch};

const T0: i64 = 1_800_000_000;

fn image(id: &str) -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec![format!("registry.example/{id}:1")],
        size: 100,
        ..RuntimeImage::default()
    }
}

fn event(id: &str, kind: ContainerEventKind) -> ContainerEvent {
    ContainerEvent {
        container_id: id.into(),
        kind,
        created_at: 0,
    }
}

/// A fake runtime with an app image, a volume image and a container of the first mounting
/// the second; a store; and a running watcher whose notes arrive on the returned channel.
struct Watched {
    fake: Arc<FakeRuntime>,
    gc: Arc<ImageGcManager<CriClient>>,
    notes: mpsc::UnboundedReceiver<EventsNote>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

async fn watched(setup: impl FnOnce(&FakeRuntime)) -> Watched {
    watched_in(ContainerEvents::Auto, setup).await
}

async fn watched_in(mode: ContainerEvents, setup: impl FnOnce(&FakeRuntime)) -> Watched {
    let fake = Arc::new(FakeRuntime::start().await.expect("the fake starts"));
    fake.set_images(vec![image("sha256:app"), image("sha256:volume")]);
    fake.set_containers(vec![RuntimeContainer {
        id: "c1".into(),
        pod_sandbox_id: "pod".into(),
        image: "registry.example/sha256:app:1".into(),
        image_id: ImageId::new("sha256:app"),
        state: ContainerState::Created,
        runtime_handler: String::new(),
    }]);
    fake.set_image_volumes("c1", vec!["sha256:volume".into()]);
    setup(&fake);
    let client = CriClient::connect(fake.client_config())
        .await
        .expect("valid endpoint");
    let (dir, store) = crate::support::temp_store(UnixNanos::from_secs(T0));
    let store = Arc::new(store);
    let gc = Arc::new(
        ImageGcManager::new(client.clone(), store, GcConfig::default()).expect("valid policy"),
    );
    let (tx, notes) = mpsc::unbounded_channel();
    let (stop, stop_rx) = watch::channel(false);
    let task = {
        let gc = gc.clone();
        tokio::spawn(async move {
            let clock = ManualClock::new(UnixNanos::from_secs(T0 + 60));
            watch_container_events(&client, &gc, &clock, mode, stop_rx, |note| {
                let _ = tx.send(note);
            })
            .await
        })
    };
    Watched {
        fake,
        gc,
        notes,
        stop,
        task,
        _dir: dir,
    }
}

impl Watched {
    async fn note(&mut self) -> EventsNote {
        self.notes.recv().await.expect("the watcher reports")
    }
}

#[tokio::test]
async fn a_created_container_marks_its_image_and_image_volume_used_without_waiting_for_detect() {
    let mut w = watched(|_| {}).await;
    assert_eq!(w.note().await, EventsNote::Connected);
    let store = w.gc.store().clone();
    assert!(
        store.records().expect("records").is_empty(),
        "no detect ran"
    );

    // Other events mark nothing.
    w.fake.push_event(&event("c1", ContainerEventKind::Started));
    w.fake.push_event(&event("c1", ContainerEventKind::Created));
    let marked = w.note().await;
    assert_eq!(
        marked,
        EventsNote::Marked {
            container_id: "c1".into(),
            keys: vec![
                RecordKey::new("sha256:app", ""),
                RecordKey::new("sha256:volume", "")
            ],
        }
    );
    for id in ["sha256:app", "sha256:volume"] {
        let record = store
            .get(&RecordKey::new(id, ""))
            .expect("get")
            .expect("the record is created at the event");
        assert_eq!(record.last_used, UnixNanos::from_secs(T0 + 60), "{id}");
        assert_eq!(record.size, 100);
    }
    // The event opens a use of each image (schema 5's use history), and the records it
    // created are pulls someone else made, first seen now.
    let uses: Vec<(bool, UnixNanos, String)> = store
        .uses()
        .expect("uses")
        .into_iter()
        .map(|(k, v)| {
            assert_eq!(v.last_seen, k.started_at);
            (k.closed, k.started_at, k.key.image_id.as_str().to_owned())
        })
        .collect();
    let t = UnixNanos::from_secs(T0 + 60);
    assert_eq!(
        uses,
        [
            (false, t, "sha256:app".to_owned()),
            (false, t, "sha256:volume".to_owned())
        ]
    );
    let pulls: Vec<&str> = store
        .pulls()
        .expect("pulls")
        .iter()
        .map(|(_, e)| e.origin.as_str())
        .collect();
    assert_eq!(pulls, ["detected", "detected"]);
    // A container gone before its status was read marks nothing and the stream goes on.
    w.fake
        .push_event(&event("gone", ContainerEventKind::Created));
    assert_eq!(
        w.note().await,
        EventsNote::Marked {
            container_id: "gone".into(),
            keys: Vec::new()
        }
    );
    let _ = w.stop.send(true);
    w.task.await.expect("the watcher stops");
}

#[tokio::test]
async fn a_runtime_without_container_events_ends_the_watcher_after_one_call() {
    let mut w = watched(|fake| {
        fake.fail(
            "GetContainerEvents",
            RpcCode::Unimplemented,
            "method GetContainerEvents not implemented",
        )
    })
    .await;
    assert_eq!(w.note().await, EventsNote::Unsupported);
    w.task.await.expect("the watcher returns by itself");
    assert_eq!(w.fake.calls("GetContainerEvents"), 1, "never retried");
    assert!(w.notes.recv().await.is_none(), "nothing after the fallback");
}

/// `containerEvents = off`: the watcher never subscribes (on containerd 1.7 and CRI-O
/// 1.26-1.27 the runtime's events go to one subscriber, the kubelet's evented PLEG).
#[tokio::test]
async fn with_container_events_off_the_watcher_never_subscribes() {
    let mut w = watched_in(ContainerEvents::Off, |_| {}).await;
    assert_eq!(w.note().await, EventsNote::Off);
    w.task.await.expect("the watcher returns by itself");
    assert_eq!(w.fake.calls("GetContainerEvents"), 0);
    assert!(w.notes.recv().await.is_none(), "nothing after it");
}

#[tokio::test(start_paused = true)]
async fn a_broken_stream_is_opened_again_after_a_backoff_that_an_event_resets() {
    let mut w = watched(|_| {}).await;
    assert_eq!(w.note().await, EventsNote::Connected);
    let mut waits = Vec::new();
    for _ in 0..3 {
        w.fake.end_event_streams(Some(RpcCode::Unavailable));
        let EventsNote::Broken { retry_in } = w.note().await else {
            panic!("the break is reported");
        };
        let broke = tokio::time::Instant::now();
        assert_eq!(w.note().await, EventsNote::Connected);
        assert!(
            broke.elapsed() >= retry_in,
            "reopened only after the backoff"
        );
        waits.push(retry_in.as_secs());
    }
    assert_eq!(waits, [1, 2, 4], "1 s doubling");
    assert_eq!(w.fake.calls("GetContainerEvents"), 4);

    // An event on the new stream resets the backoff.
    w.fake.push_event(&event("c1", ContainerEventKind::Created));
    assert!(matches!(w.note().await, EventsNote::Marked { .. }));
    w.fake.end_event_streams(None);
    assert_eq!(
        w.note().await,
        EventsNote::Broken {
            retry_in: Duration::from_secs(1)
        },
        "a clean end is a break too, and the backoff starts over"
    );
    let _ = w.stop.send(true);
    w.task.await.expect("the watcher stops during its backoff");
}

#[tokio::test]
async fn a_failed_mark_is_reported_and_the_stream_goes_on() {
    let mut w = watched(|_| {}).await;
    assert_eq!(w.note().await, EventsNote::Connected);
    w.fake
        .fail("ContainerStatus", RpcCode::Internal, "status unavailable");
    w.fake.push_event(&event("c1", ContainerEventKind::Created));
    let EventsNote::MarkFailed {
        container_id,
        error,
    } = w.note().await
    else {
        panic!("the failure is reported");
    };
    assert_eq!(container_id, "c1");
    assert!(error.contains("status unavailable"), "{error}");
    w.fake.clear("ContainerStatus");
    w.fake.push_event(&event("c1", ContainerEventKind::Created));
    assert!(matches!(w.note().await, EventsNote::Marked { .. }));
    assert_eq!(w.fake.calls("GetContainerEvents"), 1, "the same stream");
    let _ = w.stop.send(true);
    w.task.await.expect("the watcher stops");
}

/// containerd 1.7 and 2.1 send a GetContainerEvents stream's headers with its first event: on
/// a quiet node the subscription waits for one, past any call timeout (paused time), and is
/// neither ended nor opened again; the first event then opens it and marks its container.
#[tokio::test(start_paused = true)]
async fn a_subscription_answered_only_with_its_first_event_waits_for_it_past_any_call_timeout() {
    let mut w = watched(|fake| fake.send_event_headers_with_first_event()).await;
    // The call reaches the fake (its stream is registered), unanswered: polled, since the
    // open call reports nothing until it is answered.
    crate::support::wait_for(
        "the subscription to reach the fake",
        Duration::from_secs(60),
        || async { (w.fake.open_event_streams() == 1).then_some(()) },
    )
    .await;
    let call_timeout = w.fake.client_config().call_timeout;
    tokio::time::sleep(call_timeout * 10).await;
    assert_eq!(w.fake.calls("GetContainerEvents"), 1, "never reopened");
    assert!(
        w.notes.try_recv().is_err(),
        "no note before the first event"
    );
    assert_eq!(
        w.fake.push_event(&event("c1", ContainerEventKind::Created)),
        1
    );
    assert_eq!(w.note().await, EventsNote::Connected);
    assert!(matches!(
        w.note().await,
        EventsNote::Marked { container_id, .. } if container_id == "c1"
    ));
    let _ = w.stop.send(true);
    w.task.await.expect("the watcher stops");
}
