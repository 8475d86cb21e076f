//! The agent's container events path on the lab's real containerd (named `events::lab::...`,
//! run one at a time), on whichever release the lab runs (lab.env's CRI_LAB_CONTAINERD).
//!
//! The watcher is the agent's own (`watch_container_events`, as `Agent::run` spawns it) over the
//! lab's CRI client, marking into a real store through a GC manager; no detect loop runs, so
//! only the event stream can mark an image before the test's own detect. Its notes are the
//! test's signals (connected, marked, broken), and each subscription passes a gate the test
//! holds, so a container can be started while the watcher is away, deterministically.
//!
//! - 1.7 and 2.1 serve GetContainerEvents: a started container marks its image at once. Across a
//!   containerd restart the watcher subscribes again; containerd holds the events that find no
//!   subscriber for the next one (a container started while the watcher was away is marked
//!   when it comes back), but a restart drops what it held: such a container is caught up by
//!   the next detect (no mark lost); the next container is marked by the new stream.
//! - 1.6 answers Unimplemented: the watcher ends by itself after that one call (the documented
//!   fallback) and detect alone marks a started container.

use std::sync::Arc;
use std::time::Duration;

use imagekeeper::agent::{EventsNote, watch_container_events};
use imagekeeper::clock::ManualClock;
use imagekeeper::config::ContainerEvents;
use imagekeeper::cri::{ContainerEventStream, CriClient, CriError, ImageRuntime, RpcCode};
use imagekeeper::gc::{GcConfig, ImageGcManager};
use imagekeeper::model::{RecordKey, UnixNanos};
use imagekeeper::runtime::AgentRuntime;
use tokio::sync::{mpsc, watch};

use crate::gc::hooked::{Hooked, Hooks};
use crate::support;

const T0: i64 = 1_800_000_000;

/// Each GetContainerEvents subscription is announced on `asked`, then waits until `open` is
/// true before it reaches containerd.
#[derive(Clone)]
struct Gate {
    open: watch::Receiver<bool>,
    asked: mpsc::UnboundedSender<()>,
}

impl Hooks for Gate {}

type GatedRuntime = Hooked<CriClient, Gate>;

impl AgentRuntime for GatedRuntime {
    type Events = ContainerEventStream;

    async fn container_events(&self) -> Result<ContainerEventStream, CriError> {
        let _ = self.hooks.asked.send(());
        let mut open = self.hooks.open.clone();
        open.wait_for(|open| *open)
            .await
            .expect("the test holds the gate's sender");
        self.inner.container_events().await
    }
}

/// The next note of the watcher (a deadline only against a hang).
async fn next_note(notes: &mut mpsc::UnboundedReceiver<EventsNote>, what: &str) -> EventsNote {
    tokio::time::timeout(Duration::from_secs(60), notes.recv())
        .await
        .unwrap_or_else(|_| panic!("no watcher note within 60 s while waiting for {what}"))
        .unwrap_or_else(|| panic!("the watcher ended while waiting for {what}"))
}

/// Skips notes until the one `pick` accepts; a failed mark of `container_id` fails the test.
async fn wait_note<T>(
    notes: &mut mpsc::UnboundedReceiver<EventsNote>,
    what: &str,
    mut pick: impl FnMut(&EventsNote) -> Option<T>,
) -> T {
    loop {
        let note = next_note(notes, what).await;
        if let Some(found) = pick(&note) {
            return found;
        }
        if let EventsNote::MarkFailed { error, .. } = &note {
            println!("a mark failed while waiting for {what}: {error}");
        }
    }
}

/// The keys the watcher marked for `container_id`'s CONTAINER_CREATED event.
async fn marked(
    notes: &mut mpsc::UnboundedReceiver<EventsNote>,
    container_id: &str,
) -> Vec<RecordKey> {
    wait_note(
        notes,
        &format!("the mark of container {container_id}"),
        |note| match note {
            EventsNote::Marked {
                container_id: id,
                keys,
            } if id == container_id => Some(keys.clone()),
            EventsNote::MarkFailed {
                container_id: id,
                error,
            } if id == container_id => {
                panic!("marking container {container_id}'s image failed: {error}")
            }
            _ => None,
        },
    )
    .await
}

fn last_used(gc: &ImageGcManager<CriClient>, image_id: &str) -> UnixNanos {
    gc.store()
        .get(&RecordKey::new(image_id, ""))
        .expect("store get")
        .unwrap_or_else(|| panic!("no record of {image_id}"))
        .last_used
}

#[tokio::test]
#[ignore = "needs the cri lab: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn on_1_7_and_2_1_a_started_container_marks_its_image_through_the_event_stream_and_detect_catches_up_across_containerd_restarts_on_1_6_the_watcher_ends()
 {
    let lab = support::lab(
        "events::lab::on_1_7_and_2_1_a_started_container_marks_its_image_through_the_event_stream_and_detect_catches_up_across_containerd_restarts_on_1_6_the_watcher_ends",
    ).await;
    let release = lab.containerd_release();
    let client = lab.client().await;
    // One image per container, so each mark is the mark of one container.
    let first = lab.image("data:1mb").clone();
    let lost = lab.image("data:5mb").clone();
    let held = lab.image("user:name").clone();
    let live = lab.image("user:uid").clone();
    for image in [&first, &lost, &held, &live] {
        client
            .pull_image(&image.reference, "", None)
            .await
            .expect("pull");
    }
    let t = |s: i64| UnixNanos::from_secs(T0 + s);
    let (_dir, store) = crate::support::temp_store(t(0));
    let store = Arc::new(store);
    let gc =
        Arc::new(ImageGcManager::new(client.clone(), store, GcConfig::default()).expect("policy"));
    let clock = Arc::new(ManualClock::new(t(0)));
    // The images are recorded, none in use by a container of this test.
    gc.detect(t(0)).await.expect("detect");
    for image in [&first, &lost, &held, &live] {
        assert!(
            last_used(&gc, &image.image_id) < t(1),
            "{} unused before the test's containers",
            image.reference
        );
    }

    let (gate, open) = watch::channel(true);
    let (asked_tx, mut asked) = mpsc::unbounded_channel();
    let runtime = GatedRuntime {
        inner: client.clone(),
        hooks: Gate {
            open,
            asked: asked_tx,
        },
    };
    let (notes_tx, mut notes) = mpsc::unbounded_channel();
    let (stop, stop_rx) = watch::channel(false);
    let watcher = {
        let (gc, clock) = (gc.clone(), clock.clone());
        tokio::spawn(async move {
            watch_container_events(
                &runtime,
                &*gc,
                &*clock,
                ContainerEvents::Auto,
                stop_rx,
                |note| {
                    let _ = notes_tx.send(note);
                },
            )
            .await
        })
    };

    if !release.serves_container_events() {
        // 1.6: GetContainerEvents is Unimplemented and the watcher ends after that one call.
        let err = client.container_events().await.unwrap_err();
        assert_eq!(err.code(), Some(RpcCode::Unimplemented), "{err}");
        assert!(
            err.to_string()
                .contains("GetContainerEvents not implemented"),
            "containerd 1.6's answer: {err}"
        );
        tokio::time::timeout(Duration::from_secs(60), watcher)
            .await
            .expect("on 1.6 the watcher ends by itself")
            .expect("the watcher does not panic");
        let mut seen = Vec::new();
        while let Ok(note) = notes.try_recv() {
            seen.push(note);
        }
        assert_eq!(seen, [EventsNote::Unsupported], "containerd 1.6");
        asked.recv().await.expect("one subscription asked");
        assert!(asked.try_recv().is_err(), "no second subscription on 1.6");
        // The fallback: the container's image is marked by the next detect.
        clock.set(t(10));
        let (_pod, _id) = support::run_in_new_pod(
            &lab,
            &client,
            "ik-events-first",
            &support::sleeper("first", &first.reference),
        )
        .await;
        gc.detect(t(20)).await.expect("detect");
        assert_eq!(
            last_used(&gc, &first.image_id),
            t(20),
            "detect marks it on 1.6"
        );
        return;
    }

    // 1.7 and 2.1: a started container marks its image at once. (containerd sends the
    // stream's headers with its first event, so the subscription is not reported open before
    // one; events that find no subscriber wait for the next one, so the order of the two does
    // not matter here.)
    clock.set(t(10));
    let (_first_pod, first_id) = support::run_in_new_pod(
        &lab,
        &client,
        "ik-events-first",
        &support::sleeper("first", &first.reference),
    )
    .await;
    let keys = marked(&mut notes, &first_id).await;
    assert_eq!(keys, [RecordKey::new(first.image_id.as_str(), "")]);
    assert_eq!(
        last_used(&gc, &first.image_id),
        t(10),
        "containerd {}: the CONTAINER_CREATED event marked the image (no detect ran)",
        release.name()
    );

    // containerd restarts under the subscription; the watcher's next subscription waits at
    // the closed gate. Meanwhile a container starts (`lost`) and containerd restarts again,
    // which drops the event it held for the next subscriber; then another starts (`held`).
    gate.send(false).expect("the watcher holds the gate");
    while asked.try_recv().is_ok() {}
    lab.run_lab_script("restart-containerd");
    wait_note(&mut notes, "the stream to break at the restart", |n| {
        matches!(n, EventsNote::Broken { .. }).then_some(())
    })
    .await;
    tokio::time::timeout(Duration::from_secs(60), asked.recv())
        .await
        .expect("the watcher subscribes again after its backoff")
        .expect("asked");
    clock.set(t(20));
    let (_lost_pod, lost_id) = support::run_in_new_pod(
        &lab,
        &client,
        "ik-events-lost",
        &support::sleeper("lost", &lost.reference),
    )
    .await;
    lab.run_lab_script("restart-containerd");
    clock.set(t(30));
    let (held_pod, held_id) = support::run_in_new_pod(
        &lab,
        &client,
        "ik-events-held",
        &support::sleeper("held", &held.reference),
    )
    .await;
    gate.send(true).expect("the watcher holds the gate");
    // The new subscription gets the event containerd held for it.
    let mut before_held = Vec::new();
    let keys = wait_note(&mut notes, "the held container's mark", |n| match n {
        EventsNote::Marked { container_id, keys } if *container_id == held_id => Some(keys.clone()),
        other => {
            before_held.push(other.clone());
            None
        }
    })
    .await;
    assert_eq!(keys, [RecordKey::new(held.image_id.as_str(), "")]);
    assert_eq!(
        last_used(&gc, &held.image_id),
        t(30),
        "containerd {}: the event of a container started while no one subscribed reaches the next subscriber",
        release.name()
    );
    // Events come in order: the lost container's would have come first.
    assert!(
        !before_held.iter().any(
            |n| matches!(n, EventsNote::Marked { container_id, .. } if *container_id == lost_id)
        ),
        "the restart dropped container {lost_id}'s event: {before_held:?}"
    );
    assert!(
        last_used(&gc, &lost.image_id) < t(20),
        "no event marked the container started before the second restart"
    );
    // The next detect catches up: no mark is lost.
    clock.set(t(40));
    gc.detect(t(40)).await.expect("detect");
    assert_eq!(
        last_used(&gc, &lost.image_id),
        t(40),
        "detect marks the container whose event the restart dropped"
    );

    // The new stream marks the next container at once.
    clock.set(t(50));
    let live_id = {
        let sandbox = support::sandbox_spec(&lab, "ik-events-held");
        let id = client
            .create_container(
                &held_pod.sandbox_id,
                &sandbox,
                &support::sleeper("live", &live.reference),
            )
            .await
            .expect("CreateContainer after the restarts");
        client.start_container(&id).await.expect("StartContainer");
        id
    };
    let keys = marked(&mut notes, &live_id).await;
    assert_eq!(keys, [RecordKey::new(live.image_id.as_str(), "")]);
    assert_eq!(
        last_used(&gc, &live.image_id),
        t(50),
        "containerd {}: the stream opened again after the restarts marks the next container",
        release.name()
    );
    stop.send(true).expect("the watcher listens");
    tokio::time::timeout(Duration::from_secs(60), watcher)
        .await
        .expect("the watcher stops")
        .expect("the watcher does not panic");
}
