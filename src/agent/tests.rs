//! Tests of the agent's loops, serving and admin backend against a recording runtime, under
//! tokio's paused time: the schedule and its backoff, the metrics and Node Events a cycle
//! publishes, the setup and shutdown of `serve`.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::loops::{Backoff, CycleOutcome, Loop, run_schedule};
use super::*;
use crate::admin::AdminBackend;
use crate::config::{FileConfig, FlagValues};
use crate::model::{ImagePin, PinKey, UnixNanos};
use crate::runtime::NoEvents;
use crate::telemetry::{EventSink, NodeEvent, NodeEventType};

/// The GC loop after failures, under paused time: a failed GC (space not freed, a removal
/// failed) waits the full period as the kubelet's wait.Until does; only an unreachable
/// runtime is retried at 1 s, 2 s, 4 s ...; a success resets.
#[tokio::test(start_paused = true)]
async fn gc_failures_keep_the_period_and_only_an_unreachable_runtime_retries_fast() {
    use std::collections::VecDeque;
    let period = Duration::from_secs(300);
    let mut script: VecDeque<CycleOutcome> = VecDeque::from([
        CycleOutcome::Failed,
        CycleOutcome::Failed,
        CycleOutcome::RuntimeUnreachable,
        CycleOutcome::RuntimeUnreachable,
        CycleOutcome::RuntimeUnreachable,
        CycleOutcome::Done,
        CycleOutcome::Failed,
    ]);
    let start = Instant::now();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut gc_times = Vec::new();
    let long = Duration::from_secs(1_000_000);
    run_schedule(
        [
            (Loop::Detect, long),
            (Loop::ImageCache, long),
            (Loop::Gc, period),
        ],
        stop_rx,
        |which| {
            let outcome = if which == Loop::Gc {
                gc_times.push(start.elapsed().as_secs());
                match script.pop_front() {
                    Some(outcome) => outcome,
                    None => {
                        let _ = stop_tx.send(true);
                        CycleOutcome::Done
                    }
                }
            } else {
                CycleOutcome::Done
            };
            async move { outcome }
        },
    )
    .await;
    // start; Failed +300; Failed +300; unreachable +1, +2, +4; Done +300; Failed +300.
    assert_eq!(gc_times, [0, 300, 600, 601, 603, 607, 907, 1207]);
}

use std::collections::BTreeMap;

use crate::model::{ImageId, RuntimeImage};
use crate::replay::ScriptedRuntime;

/// The scripted runtime, recording each call (with the paused clock's seconds since the
/// test began) and parking ListImages while `park` is set.
#[derive(Clone)]
struct Recorder {
    inner: ScriptedRuntime,
    start: Instant,
    calls: Arc<Mutex<Vec<(u64, &'static str)>>>,
    park: Arc<std::sync::atomic::AtomicBool>,
}

impl Recorder {
    fn new() -> Recorder {
        Recorder {
            inner: ScriptedRuntime::new(),
            start: Instant::now(),
            calls: Arc::default(),
            park: Arc::default(),
        }
    }

    fn note(&self, method: &'static str) {
        let at = self.start.elapsed().as_secs();
        lock_ignoring_poison(&self.calls).push((at, method));
    }

    fn calls(&self, method: &str) -> Vec<u64> {
        lock_ignoring_poison(&self.calls)
            .iter()
            .filter(|(_, m)| *m == method)
            .map(|(at, _)| *at)
            .collect()
    }
}

impl crate::runtime::forward::Forward for Recorder {
    type Inner = ScriptedRuntime;

    fn inner(&self) -> &ScriptedRuntime {
        &self.inner
    }

    /// Notes ListImages (parked while `park` is set), RemoveImage, ImageFsInfo and
    /// ListContainers before they reach the scripted runtime.
    async fn around<T, Fut>(
        &self,
        method: &'static str,
        _arg: &str,
        call: impl FnOnce() -> Fut + Send,
    ) -> Result<T, CriError>
    where
        T: Send,
        Fut: std::future::Future<Output = Result<T, CriError>> + Send,
    {
        if matches!(
            method,
            "ListImages" | "RemoveImage" | "ImageFsInfo" | "ListContainers"
        ) {
            self.note(method);
        }
        if method == "ListImages" && self.park.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        call().await
    }
}

crate::forward_image_runtime!(impl[] for Recorder);

impl AgentRuntime for Recorder {
    type Events = NoEvents;

    async fn container_events(&self) -> Result<NoEvents, CriError> {
        self.inner.container_events().await
    }
}

/// A pulled image: it has a repo digest, so `protectIrreplaceable` (on by default)
/// does not keep it.
fn image(id: &str, size: u64) -> RuntimeImage {
    RuntimeImage {
        id: ImageId(id.to_owned()),
        repo_digests: vec![format!("registry.example/app@{id}")],
        size,
        ..RuntimeImage::default()
    }
}

/// An agent over `runtime` with detect every 300 s, the image cache every 30 s and GC
/// every 600 s, its database and admin socket in `dir`.
fn agent_in(dir: &Path, runtime: Recorder) -> Arc<Agent<Recorder>> {
    agent_and_clock_in(dir, runtime).0
}

/// [`agent_in`], with its manual clock (at 2027-01-15T08:00:00Z).
fn agent_and_clock_in(
    dir: &Path,
    runtime: Recorder,
) -> (Arc<Agent<Recorder>>, Arc<crate::clock::ManualClock>) {
    let flags = FlagValues {
        db: Some(dir.join("records.redb")),
        admin_socket: Some(dir.join("admin.sock")),
        detect_period: Some("300s".into()),
        image_cache_period: Some("30s".into()),
        gc_period: Some("600s".into()),
        minimum_image_ttl_duration: Some("0s".into()),
        ..FlagValues::default()
    };
    let config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
    let clock = Arc::new(crate::clock::ManualClock::new(
        crate::model::UnixNanos::from_secs(1_800_000_000),
    ));
    let agent = Arc::clone(&clock) as Arc<dyn crate::clock::Clock>;
    (
        Arc::new(Agent::with_runtime(config, agent, runtime).expect("agent")),
        clock,
    )
}

/// Node Events as published, in order.
#[derive(Debug, Default, Clone)]
struct RecordedEvents(Arc<Mutex<Vec<NodeEvent>>>);

impl EventSink for RecordedEvents {
    fn publish(&self, event: NodeEvent) {
        lock_ignoring_poison(&self.0).push(event);
    }
}

/// `imagekeeper_image_pins` counts the operator pins in force at the agent's clock: an
/// expired one (not pruned yet) is left out.
#[tokio::test(start_paused = true)]
async fn the_pins_gauge_counts_the_pins_in_force() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = agent_in(dir.path(), Recorder::new());
    assert!(
        agent
            .render_metrics()
            .contains("\nimagekeeper_image_pins 0\n"),
        "no pins yet"
    );
    let now = agent.clock.now();
    let mut batch = crate::store::Batch::new();
    for (image, until) in [
        ("forever:1", UnixNanos::NEVER),
        ("later:1", UnixNanos(now.0 + 1_000_000_000)),
        ("expired:1", UnixNanos(now.0 - 1)),
    ] {
        batch.put_pin(
            PinKey::new(image, ""),
            ImagePin {
                created_at: now,
                until,
                reason: String::new(),
            },
        );
    }
    agent.store.apply(&batch).expect("pins written");
    let metrics = agent.render_metrics();
    assert!(
        metrics.contains("\nimagekeeper_image_pins 2\n"),
        "{metrics}"
    );
}

/// The agent's GC cycle tells its Node Events what it removed and why it failed.
#[tokio::test(start_paused = true)]
async fn a_gc_cycle_publishes_node_events_for_its_removals_and_its_failure() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Recorder::new();
    runtime.inner.state().images = vec![image("sha256:a", 700)].into();
    // 90 % used (capacity 1000, 100 available): above the default 85.
    runtime.inner.state().fs = Some((1000, 100));
    let events = RecordedEvents::default();
    let Ok(agent) = Arc::try_unwrap(agent_in(dir.path(), runtime.clone())) else {
        panic!("agent_in returns the only reference");
    };
    let agent = agent.with_node_events(NodeEvents::new(Box::new(events.clone())));
    let now = crate::model::UnixNanos::from_secs(1_800_000_100);
    agent
        .garbage_collect_cycle(crate::gc::GcTrigger::Periodic, now)
        .await;
    assert_eq!(runtime.inner.state().removed, ["sha256:a"]);
    // Nothing left to remove, and the disk full again: the kubelet's FreeDiskSpaceFailed.
    runtime.inner.state().fs = Some((1000, 50));
    agent
        .garbage_collect_cycle(crate::gc::GcTrigger::Periodic, now)
        .await;
    let said = lock_ignoring_poison(&events.0).clone();
    let reasons: Vec<(NodeEventType, &str)> = said.iter().map(|e| (e.type_, e.reason)).collect();
    assert_eq!(
        reasons,
        [
            (NodeEventType::Normal, "ImageGarbageCollected"),
            (NodeEventType::Warning, "FreeDiskSpaceFailed")
        ],
        "{said:?}"
    );
    assert_eq!(
        said[0].note,
        format!(
            "Removed 1 image, freed 700 bytes ({0}): a ({0})",
            crate::format::format_size(700)
        )
    );
}

/// The images a pod bound here needs do not fit `clusterSignalsKeepShare` (a 700-byte image,
/// half of a 1,000-byte disk): the agent's GC cycle says so with one Warning Event,
/// `KeepsOverShare`, naming the share and the image left to the order, and not again at the
/// next cycle while it stays over (the disk 10 % used: nothing is removed).
#[tokio::test(start_paused = true)]
async fn a_gc_cycle_over_the_keep_share_publishes_one_keeps_over_share_event() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Recorder::new();
    runtime.inner.state().images = vec![RuntimeImage {
        repo_tags: vec!["registry.example/app:1".into()],
        ..image("sha256:a", 700)
    }]
    .into();
    runtime.inner.state().fs = Some((1000, 900));
    let events = RecordedEvents::default();
    let Ok(agent) = Arc::try_unwrap(agent_in(dir.path(), runtime.clone())) else {
        panic!("agent_in returns the only reference");
    };
    let agent = agent.with_node_events(NodeEvents::new(Box::new(events.clone())));
    agent.gc.cluster_signals().set_keep_share(50);
    agent
        .gc
        .bound_pods()
        .set_pod("ns/big".into(), vec!["registry.example/app:1".into()]);
    let now = crate::model::UnixNanos::from_secs(1_800_000_100);
    for _ in 0..2 {
        agent
            .garbage_collect_cycle(crate::gc::GcTrigger::Periodic, now)
            .await;
    }
    let said = lock_ignoring_poison(&events.0).clone();
    let over: Vec<_> = said
        .iter()
        .filter(|e| e.reason == "KeepsOverShare")
        .collect();
    assert_eq!(over.len(), 1, "{said:?}");
    assert_eq!(over[0].type_, NodeEventType::Warning);
    assert!(
        over[0].note.starts_with(&format!(
            "The images the cluster needs on this node do not fit clusterSignalsKeepShare (50% of the image filesystem, {}; {} kept): 1 image(s), {}, are left to the GC's order, the first sha256:a (needed by ns/big)",
            crate::format::format_size(500),
            crate::format::format_size(0),
            crate::format::format_size(700),
        )),
        "{}",
        over[0].note
    );
    assert!(runtime.inner.state().removed.is_empty(), "no pressure");
    assert!(
        agent.gc.cluster_signals().keeps_over_share().is_some(),
        "still over"
    );
}

/// A metrics endpoint that fails its setup after the admin socket is bound: `serve` names
/// the step, as `imagekeeper run` always did, removes the socket it bound, and never
/// reports itself bound. The
/// "listener" is a regular file's descriptor, whose `local_addr` fails (ENOTSOCK) with no
/// timing involved.
#[tokio::test]
async fn a_metrics_setup_failure_names_the_step_and_removes_the_bound_admin_socket() {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = agent_in(dir.path(), Recorder::new());
    let file = std::fs::File::create(dir.path().join("not-a-socket")).expect("file");
    // SAFETY: the descriptor is open and owned by nothing else from here on.
    let listener = unsafe { std::net::TcpListener::from_raw_fd(file.into_raw_fd()) };
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let mut listeners = Listeners::new(Some(listener));
    listeners.bound = Some(bound_tx);
    let err = agent
        .serve(listeners, std::future::pending(), Duration::from_secs(1))
        .await
        .expect_err("the metrics setup fails");
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert_eq!(
        (err.to_string(), source.is_some()),
        ("the metrics endpoint's address".to_owned(), true),
        "{err:?}"
    );
    assert!(
        !dir.path().join("admin.sock").exists(),
        "the admin socket the agent bound is removed"
    );
    assert!(bound_rx.await.is_err(), "never reported bound");
}

/// Once set up, `serve` reports itself bound, with the admin socket there already.
#[tokio::test]
async fn serve_reports_bound_only_once_the_admin_socket_exists() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = agent_in(dir.path(), Recorder::new());
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let listeners = Listeners {
        bound: Some(bound_tx),
        ..Listeners::default()
    };
    let serving = tokio::spawn(agent.clone().serve(
        listeners,
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(30),
    ));
    bound_rx.await.expect("reported bound");
    assert!(dir.path().join("admin.sock").exists());
    let _ = stop_tx.send(());
    serving.await.expect("join").expect("serve");
    assert!(!dir.path().join("admin.sock").exists());
}

/// The whole agent in-process (admin socket, loops) against a scripted runtime, under
/// paused time: detect runs first, then the image cache, then GC (ImageFsInfo); then each
/// loop keeps its own period; the admin socket answers meanwhile, and the image cache
/// serves the runtime image gauges; at shutdown the socket is removed.
#[tokio::test(start_paused = true)]
async fn the_agent_runs_detect_then_image_cache_then_gc_and_each_on_its_period() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Recorder::new();
    runtime.inner.state().images = vec![image("sha256:a", 700), image("sha256:b", 300)].into();
    runtime.inner.state().fs = Some((1_000_000, 900_000));
    let agent = agent_in(dir.path(), runtime.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(agent.clone().serve(
        Listeners::default(),
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(30),
    ));
    // Just past the third detect (0, 300, 600).
    tokio::time::sleep(Duration::from_secs(601)).await;
    let first: Vec<&str> = lock_ignoring_poison(&runtime.calls)
        .iter()
        .take(7)
        .map(|(_, m)| *m)
        .collect();
    // Detect (ListImages, ListContainers), then the image cache (ListImages, and
    // ImageFsInfo for the filesystem gauges), then GC (its own detect, and ImageFsInfo for
    // the space pass).
    assert_eq!(
        first,
        [
            "ListImages",
            "ListContainers",
            "ListImages",
            "ImageFsInfo",
            "ListImages",
            "ListContainers",
            "ImageFsInfo"
        ]
    );
    // Detect every 300 s, GC every 600 s (each with its detect's ListContainers).
    assert_eq!(runtime.calls("ListContainers"), [0, 0, 300, 600, 600]);
    // The image cache every 30 s, GC at 0 and 600.
    let mut want_fs: Vec<u64> = (0..=600).step_by(30).collect();
    want_fs.insert(0, 0);
    want_fs.push(600);
    assert_eq!(runtime.calls("ImageFsInfo"), want_fs);
    assert_eq!(*agent.detect_state().borrow(), DetectState::Done);
    let metrics = agent.render_metrics();
    assert!(
        metrics.contains("\nimagekeeper_runtime_images 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nimagekeeper_runtime_images_size_bytes 1000\n"),
        "{metrics}"
    );
    // The admin socket the agent owns answers.
    let mut client = crate::admin::AdminClient::connect(&dir.path().join("admin.sock"))
        .await
        .expect("connect");
    let outcome = client.garbage_collect(true).await.expect("dry run");
    assert!(outcome.dry_run && outcome.error.is_none(), "{outcome:?}");
    drop(client);
    stop_tx.send(()).expect("the agent waits for the stop");
    serving.await.expect("join").expect("served");
    assert!(
        !dir.path().join("admin.sock").exists(),
        "the agent removed its socket"
    );
}

/// A removal the runtime refuses is counted and exported as
/// `imagekeeper_image_gc_remove_failures_total`; the other image goes.
#[tokio::test(start_paused = true)]
async fn a_refused_removal_is_exported_as_image_gc_remove_failures_total() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Recorder::new();
    runtime.inner.state().images = vec![image("sha256:stuck", 10), image("sha256:b", 10)].into();
    runtime.inner.state().fs = Some((1_000_000, 900_000));
    runtime
        .inner
        .state()
        .remove_fails
        .insert("sha256:stuck".into());
    let agent = agent_in(dir.path(), runtime.clone());
    let before = agent.render_metrics();
    assert!(
        before.contains("\nimagekeeper_image_gc_remove_failures_total 0\n"),
        "{before}"
    );
    let outcome = agent.delete_unused(false).await;
    assert!(outcome.error.is_some(), "{outcome:?}");
    assert_eq!(runtime.inner.state().removed, ["sha256:b"]);
    let after = agent.render_metrics();
    assert!(
        after.contains("\nimagekeeper_image_gc_remove_failures_total 1\n"),
        "{after}"
    );
}

/// A runtime that is not there: detect and the image cache retry at 1 s, 2 s, 4 s ...
/// (GC too), not at their periods; once it is back they return to their periods.
#[tokio::test(start_paused = true)]
async fn an_unreachable_runtime_is_retried_at_1_2_4_8_seconds_then_the_period_resumes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Recorder::new();
    runtime.inner.state().down = Some("connection refused".into());
    runtime.inner.state().fs = Some((1_000_000, 900_000));
    let agent = agent_in(dir.path(), runtime.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.clone().run(
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(30),
    ));
    tokio::time::sleep(Duration::from_millis(15_500)).await;
    runtime.inner.state().down = None;
    tokio::time::sleep(Duration::from_secs(300)).await;
    // Each of the three loops (detect, image cache, GC: each lists images) tried at 0,
    // then +1, +2, +4, +8 (15 s) while down; up from 15.5 s, so the tries at 31 s succeed.
    // Then the image cache every 30 s; detect's next is at 331, GC's at 631.
    let mut per_second = BTreeMap::new();
    for t in runtime.calls("ListImages") {
        *per_second.entry(t).or_insert(0) += 1;
    }
    let mut want: BTreeMap<u64, u32> = [0, 1, 3, 7, 15, 31].map(|t| (t, 3)).into();
    want.extend((61..=301).step_by(30).map(|t| (t, 1)));
    assert_eq!(per_second, want);
    // ListContainers only once the runtime answers: detect's and GC's at 31.
    assert_eq!(runtime.calls("ListContainers"), [31, 31]);
    // The GC cycles as the alerts see them: five failed (0, 1, 3, 7, 15 s), one succeeded
    // (31 s); and the thresholds in force (the kubelet's defaults here).
    let metrics = agent.render_metrics();
    for line in [
        "\nimagekeeper_image_gc_cycles_total{result=\"failure\"} 5\n",
        "\nimagekeeper_image_gc_cycles_total{result=\"success\"} 1\n",
        "\nimagekeeper_image_gc_high_threshold_percent 85\n",
        "\nimagekeeper_image_gc_low_threshold_percent 80\n",
    ] {
        assert!(metrics.contains(line), "{line:?} in {metrics}");
    }
    stop_tx.send(()).expect("the agent waits for the stop");
    running.await.expect("join");
}

/// Shutdown with a cycle that never ends: the agent waits the grace period, exactly, and
/// then returns (abandoning the cycle); with a cycle that ends, it returns at once.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_the_grace_period_for_a_stuck_cycle_and_no_longer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Recorder::new();
    runtime.inner.state().fs = Some((1_000_000, 900_000));
    runtime
        .park
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let agent = agent_in(dir.path(), runtime.clone());
    let grace = Duration::from_secs(42);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent.clone().run(
        async move {
            let _ = stop_rx.await;
        },
        grace,
    ));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        runtime.calls("ListImages"),
        [0],
        "the first detect is parked"
    );
    let asked = Instant::now();
    stop_tx.send(()).expect("the agent waits for the stop");
    running.await.expect("join");
    assert_eq!(asked.elapsed(), grace);
}

#[test]
fn loop_backoff_doubles_from_one_second_up_to_the_period_and_resets() {
    let mut b = Backoff::new(Duration::from_secs(10));
    let delays: Vec<u64> = (0..6).map(|_| b.next_delay().as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
    assert_eq!(b.reset(), Duration::from_secs(10));
    assert_eq!(b.next_delay(), Duration::from_secs(1));
}

/// The CronJobs' lead wakes the detect only for a CronJob an image of which is on the node: a
/// node beside a thousand CronJobs of other nodes does not detect at each of their runs. Under
/// paused time, the clock stepped with it: the run of a CronJob whose image is listed enters
/// the lead and starts a detect then; the run of one whose image is absent passes and starts
/// none (the detects of their periods aside).
#[tokio::test(start_paused = true)]
async fn the_cronjob_lead_wakes_the_detect_only_for_a_cronjob_whose_image_is_on_the_node() {
    use crate::gc::{CronJobSignal, CronSchedule, CronZone};
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = Recorder::new();
    let mut etl = image("sha256:e", 700);
    etl.repo_tags = vec!["docker.io/library/etl:1".into()];
    runtime.inner.state().images = vec![etl, image("sha256:b", 300)].into();
    // (capacity, available): far below the GC's threshold, nothing is removed.
    runtime.inner.state().fs = Some((1_000_000, 990_000));
    let (agent, clock) = agent_and_clock_in(dir.path(), runtime.clone());
    let start = clock.now();
    let signals = agent.gc.cluster_signals();
    signals.set_lead(Duration::from_secs(500));
    let job = |schedule: &str, image: &str| CronJobSignal {
        schedule: CronSchedule::parse(schedule).expect("a schedule"),
        zone: CronZone::utc(),
        suspend: false,
        images: vec![image.into()],
        here: false,
    };
    // 08:20, its image listed: enters the lead at +700 s. 08:05, its image absent: due from
    // the start, its run passes at +300 s.
    signals.set_cronjob("batch/etl".into(), job("20 8 * * *", "etl:1"));
    signals.set_cronjob("batch/away".into(), job("5 8 * * *", "away:1"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(agent.clone().serve(
        Listeners::default(),
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(30),
    ));
    for second in 1..=900 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        clock.set(start.saturating_add(Duration::from_secs(second)));
    }
    // The detects' ListContainers: its periods' (0, 300, 600, and GC's at 0 and 600), the
    // lead's of batch/etl at 700 s (or the second after: the clock steps once a second).
    let detects = runtime.calls("ListContainers");
    assert!(
        detects.iter().any(|at| (700..=701).contains(at)),
        "batch/etl's run entered the lead: {detects:?}"
    );
    assert!(
        !detects.iter().any(|at| (301..=305).contains(at)),
        "batch/away's run passed, its image not here: no detect {detects:?}"
    );
    assert!(signals.cronjob_present("batch/etl"));
    assert!(!signals.cronjob_present("batch/away"));
    stop_tx.send(()).expect("the agent waits for the stop");
    serving.await.expect("join").expect("served");
}
