//! Interleavings of GC with pulls and containers, proved deterministically: a runtime that
//! parks one call until the test has done its part on the other side (committed a pull's mark,
//! started a container), then lets it go on. No sleeps: every step waits for a signal.
//!
//! The scenarios are the windows the GC safety work closed: a pull's mark committed while
//! detect lists the runtime, a container started or an image marked used between the walk's
//! choice and its RemoveImage, and a pull in flight while GC runs.

use std::sync::{Arc, Mutex};

use super::hooked::{Hooked, Hooks};
use imagekeeper::clock::ManualClock;
use imagekeeper::gc::{GcConfig, GcError, ImageGcManager};
use imagekeeper::model::{RecordKey, RuntimeImage};
use imagekeeper::pull::{ImageManager, PodRef, PullConfig, PullPolicy, PullsInFlight};
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::Store;
use tokio::sync::oneshot;

use super::{at, container, image, policy};

/// One parked call: the test learns it was reached, does its part, then releases it.
struct Park {
    method: &'static str,
    /// Only a call about this image (RemoveImage, PullImage); `None` parks the first call.
    image: Option<String>,
    reached: Option<oneshot::Sender<()>>,
    release: Option<oneshot::Receiver<()>>,
}

/// Hooks that can park one call. ListImages computes its answer before it parks (a list
/// taken, then delivered late); PullImage, RemoveImage, ImageFsInfo and ContainerStatus park
/// before they act.
#[derive(Clone, Default)]
struct Parking {
    park: Arc<Mutex<Option<Park>>>,
}

/// A scripted runtime that can park one call.
type ParkingRuntime = Hooked<ScriptedRuntime, Parking>;

/// The test's side of a parked call.
struct Parked {
    reached: oneshot::Receiver<()>,
    release: oneshot::Sender<()>,
}

impl Parked {
    async fn reached(&mut self) {
        (&mut self.reached)
            .await
            .expect("the parked call is reached before the runtime is dropped");
    }

    fn release(self) {
        let _ = self.release.send(());
    }
}

impl ParkingRuntime {
    fn park(&self, method: &'static str, image: Option<&str>) -> Parked {
        self.hooks.park(method, image)
    }
}

impl Parking {
    fn park(&self, method: &'static str, image: Option<&str>) -> Parked {
        let (reached_tx, reached_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        *self.park.lock().unwrap() = Some(Park {
            method,
            image: image.map(str::to_owned),
            reached: Some(reached_tx),
            release: Some(release_rx),
        });
        Parked {
            reached: reached_rx,
            release: release_tx,
        }
    }

    async fn maybe_park(&self, method: &'static str, image: &str) {
        let taken = {
            let mut slot = self.park.lock().unwrap();
            let hit = slot.as_ref().is_some_and(|p| {
                p.method == method && p.image.as_deref().is_none_or(|i| i == image)
            });
            if hit { slot.take() } else { None }
        };
        if let Some(mut park) = taken {
            if let Some(reached) = park.reached.take() {
                let _ = reached.send(());
            }
            if let Some(release) = park.release.take() {
                let _ = release.await;
            }
        }
    }
}

impl Hooks for Parking {
    async fn before(&self, method: &'static str, arg: &str) {
        if method != "ListImages" {
            self.maybe_park(method, arg).await;
        }
    }

    async fn after(&self, method: &'static str, arg: &str, _: bool) {
        if method == "ListImages" {
            self.maybe_park(method, arg).await;
        }
    }
}

/// A GC manager and an image manager over one parking runtime, one store file and one
/// registry of pulls in flight, as the agent wires them.
struct Rig {
    _dir: tempfile::TempDir,
    runtime: ParkingRuntime,
    clock: Arc<ManualClock>,
    gc: ImageGcManager<ParkingRuntime>,
    images: ImageManager<ParkingRuntime, Arc<Store>>,
}

impl Rig {
    fn new(config: GcConfig) -> Rig {
        let (dir, store) = crate::support::temp_store(at(0));
        let store = Arc::new(store);
        let runtime = ParkingRuntime::default();
        let clock = Arc::new(ManualClock::new(at(0)));
        let in_flight = PullsInFlight::new();
        let gc = ImageGcManager::new(runtime.clone(), store.clone(), config)
            .expect("valid policy")
            .with_pulls_in_flight(in_flight.clone());
        let images = ImageManager::new(
            &PullConfig {
                registry_pull_qps: 0.0,
                ..PullConfig::default()
            },
            Arc::new(runtime.clone()),
            Arc::new(store),
            clock.clone(),
        )
        .expect("valid pull config")
        .with_pulls_in_flight(in_flight);
        Rig {
            _dir: dir,
            runtime,
            clock,
            gc,
            images,
        }
    }

    fn store(&self) -> &Store {
        self.gc.store()
    }

    fn record(&self, id: &str) -> Option<imagekeeper::model::ImageRecord> {
        self.store().get(&RecordKey::new(id, "")).expect("get")
    }

    /// A pull through imagekeeper (policy Always) at the clock's time.
    async fn pull(&self, reference: &str) -> String {
        self.images
            .ensure_image_exists(&PodRef::default(), reference, PullPolicy::Always, &[], "")
            .await
            .expect("pull succeeds")
    }
}

fn tagged(id: &str, size: u64) -> RuntimeImage {
    image(id, size)
}

/// A pull that completes while detect's ListImages answer is on its way (the list was taken
/// before the image landed): detect must not delete the record the pull created. Before the
/// fix detect read the records after listing, saw the pull's record, found it unlisted and
/// deleted it, losing the mark.
#[tokio::test]
async fn a_pull_committed_while_detect_lists_keeps_its_record_and_mark() {
    let rig = Rig::new(GcConfig::default());
    rig.runtime.inner.state().images = vec![tagged("old", 10)].into();
    let mut parked = rig.runtime.park("ListImages", None);
    let detect = rig.gc.detect(at(100));
    let pull = async {
        parked.reached().await;
        // The pull lands in the runtime and its mark commits while the list is in flight.
        rig.runtime.inner.state().images.push(tagged("new", 20));
        rig.clock.set(at(90));
        let image_ref = rig.pull("registry.example/new:1").await;
        parked.release();
        image_ref
    };
    let (detected, image_ref) = tokio::join!(detect, pull);
    detected.expect("detect");
    assert_eq!(image_ref, "new");
    let record = rig
        .record("new")
        .expect("the pulled image keeps its record");
    assert_eq!(
        record.last_used,
        at(90),
        "the pull's mark survives the detect"
    );
}

/// The list includes the image (the pull landed before ListImages), and the pull's mark
/// commits while the answer is on its way: detect's write merges with it instead of writing
/// "never used" over it.
#[tokio::test]
async fn detect_merges_with_a_pull_mark_committed_after_its_snapshot() {
    let rig = Rig::new(GcConfig::default());
    rig.runtime.inner.state().images = vec![tagged("new", 20)].into();
    let mut parked = rig.runtime.park("ListImages", None);
    let detect = rig.gc.detect(at(100));
    let pull = async {
        parked.reached().await;
        rig.clock.set(at(90));
        rig.pull("registry.example/new:1").await;
        parked.release();
    };
    let (detected, ()) = tokio::join!(detect, pull);
    detected.expect("detect");
    let record = rig.record("new").expect("recorded");
    assert_eq!(record.last_used, at(90), "last_used never goes back");
    assert_eq!(
        record.first_detected,
        at(90),
        "first_detected never moves forward"
    );
    let violations = rig.store().check_invariants().expect("check runs");
    assert!(violations.is_empty(), "{violations:?}");
}

/// While GC removes its first victim, a container starts from the second and a pull marks
/// the third (all three chosen in one step of the walk): both are kept at the last look, and
/// the walk goes on to the fourth and fifth so the amount to free is still met.
#[tokio::test]
async fn victims_that_gain_a_container_or_a_mark_during_the_walk_are_kept_and_the_walk_goes_on() {
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 0, 0),
        ..GcConfig::default()
    });
    {
        let mut state = rig.runtime.inner.state();
        state.fs = Some((20_000, 1_000)); // 95 % used: free 3,000 to reach 80 %.
    }
    // Detected one after another: eviction order a, b, c, d, e.
    for (t, id) in [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")] {
        rig.runtime.inner.state().images = ["a", "b", "c", "d", "e"]
            .iter()
            .take(t)
            .map(|i| tagged(i, 1_000))
            .collect();
        rig.gc.detect(at(t as i64)).await.expect("detect");
        assert!(rig.record(id).is_some());
    }
    let mut parked = rig.runtime.park("RemoveImage", Some("a"));
    let gc = rig.gc.garbage_collect(at(100));
    let meanwhile = async {
        parked.reached().await;
        rig.runtime.inner.state().containers = vec![container("from-b", "b")];
        rig.clock.set(at(101));
        rig.pull("registry.example/c:1").await;
        parked.release();
    };
    let (report, ()) = tokio::join!(gc, meanwhile);
    assert!(report.error.is_none(), "{:?}", report.error);
    let removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(
        removed,
        ["a", "d", "e"],
        "b has a container, c was just pulled"
    );
    assert!(rig.record("b").is_some() && rig.record("c").is_some());
    let rescued: Vec<(&str, u64)> = rig
        .gc
        .metrics()
        .rescued()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(rescued, [("container", 1), ("used", 1)]);
}

/// The same for the MaxAge pass: victims are chosen first, then removed one by one.
#[tokio::test]
async fn max_age_victims_that_gain_a_container_during_the_pass_are_kept() {
    let rig = Rig::new(GcConfig {
        policy: policy(100, 80, 0, 60),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().images = vec![tagged("a", 1), tagged("b", 1)].into();
    rig.runtime.inner.state().fs = Some((10_000, 10_000));
    rig.gc.detect(at(0)).await.expect("detect");
    let mut parked = rig.runtime.park("RemoveImage", Some("a"));
    let gc = rig.gc.garbage_collect(at(1_000));
    let meanwhile = async {
        parked.reached().await;
        rig.runtime.inner.state().containers = vec![container("from-b", "b")];
        parked.release();
    };
    let (report, ()) = tokio::join!(gc, meanwhile);
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.removed.len(), 1);
    assert_eq!(report.removed[0].key.image_id.as_str(), "a");
    assert!(rig.record("b").is_some());
}

/// A pull through imagekeeper is in flight (parked inside PullImage) for an image GC would
/// otherwise take first: GC and the dry run keep it ("pull in progress") and take the next.
#[tokio::test]
async fn an_image_with_a_pull_in_flight_is_kept_by_gc_and_by_the_dry_run() {
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 0, 0),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().images = vec![tagged("a", 1_000)].into();
    rig.gc.detect(at(1)).await.expect("detect");
    rig.runtime.inner.state().images = vec![tagged("a", 1_000), tagged("b", 1_000)].into();
    rig.gc.detect(at(2)).await.expect("detect");
    rig.runtime.inner.state().fs = Some((10_000, 1_000)); // free 1,000.
    let mut parked = rig.runtime.park("PullImage", Some("registry.example/a:1"));
    rig.clock.set(at(50));
    let pull = rig.pull("registry.example/a:1");
    let gc = async {
        parked.reached().await;
        let plan = rig.gc.plan(at(100), false).await.expect("dry run");
        let a = plan
            .explanation
            .images
            .iter()
            .find(|i| i.key.image_id.as_str() == "a")
            .expect("a explained");
        assert_eq!(a.reason, "pull in progress");
        let report = rig.gc.garbage_collect(at(100)).await;
        parked.release();
        report
    };
    let (_, report) = tokio::join!(pull, gc);
    assert!(report.error.is_none(), "{:?}", report.error);
    let removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(removed, ["b"]);
    assert_eq!(rig.record("a").expect("a kept").last_used, at(50));
    assert!(rig.images.pulls_in_flight().is_empty());
}

/// A long GC holds the cycle lock; a dry run (and so the admin's explain) needs none and
/// answers while it runs, and the cycle's progress is visible the whole time.
#[tokio::test]
async fn a_dry_run_answers_while_a_gc_is_removing_and_progress_is_reported() {
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 0, 0),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().images = vec![tagged("a", 1_000), tagged("b", 1_000)].into();
    rig.runtime.inner.state().fs = Some((10_000, 0));
    rig.gc.detect(at(1)).await.expect("detect");
    let mut parked = rig.runtime.park("RemoveImage", Some("b"));
    let gc = rig.gc.garbage_collect(at(100));
    let meanwhile = async {
        parked.reached().await;
        let progress = rig.gc.metrics().progress();
        assert!(progress.running);
        assert_eq!((progress.removed, progress.freed_bytes), (1, 1_000));
        let plan = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            rig.gc.plan(at(100), false),
        )
        .await
        .expect("the dry run does not wait for the GC")
        .expect("dry run");
        assert_eq!(plan.removals.len(), 1, "b is still there to remove");
        parked.release();
    };
    let (report, ()) = tokio::join!(gc, meanwhile);
    assert_eq!(report.removed.len(), 2);
    let progress = rig.gc.metrics().progress();
    assert!(!progress.running);
    assert_eq!(progress.removed, 2);
}

/// While GC removes its first victim, the kubelet writes a pull intent naming the second and
/// a pulled record of the third (both after the cycle's detect read its files): the last look
/// reads them again and keeps both, and the walk goes on to the fourth and fifth.
#[tokio::test]
async fn victims_the_kubelet_starts_pulling_or_records_during_the_walk_are_kept() {
    use super::kubelet_records::{write_intent, write_pulled};
    let kubelet = tempfile::tempdir().expect("temp dir");
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 0, 0),
        kubelet_root_dir: Some(kubelet.path().to_owned()),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().fs = Some((20_000, 1_000)); // 95 % used: free 3,000.
    for (t, _) in [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")] {
        rig.runtime.inner.state().images = ["a", "b", "c", "d", "e"]
            .iter()
            .take(t)
            .map(|i| tagged(i, 1_000))
            .collect();
        rig.gc.detect(at(t as i64)).await.expect("detect");
    }
    let mut parked = rig.runtime.park("RemoveImage", Some("a"));
    let gc = rig.gc.garbage_collect(at(100));
    let meanwhile = async {
        parked.reached().await;
        write_intent(kubelet.path(), "v1alpha1", "registry.example/b:1");
        write_pulled(
            kubelet.path(),
            "c",
            &imagekeeper::format::format_rfc3339(at(99)),
        );
        parked.release();
    };
    let (report, ()) = tokio::join!(gc, meanwhile);
    assert!(report.error.is_none(), "{:?}", report.error);
    let removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(removed, ["a", "d", "e"]);
    let rescued: Vec<(&str, u64)> = rig
        .gc
        .metrics()
        .rescued()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(rescued, [("kubelet_pulling", 1), ("kubelet_pulled", 1)]);
}

/// A detect queued behind a long GC (the cycle lock) reads the clock when it starts, not when
/// it was asked for: an image the kubelet pulled while it waited gets the time of its first
/// detection, so MinAge protects it, and marks written meanwhile are not stamps "from the
/// future". With the clock read before the lock, the new image got the old time.
#[tokio::test]
async fn a_cycle_queued_behind_another_reads_the_clock_when_it_starts() {
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 120, 0),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().images = vec![tagged("a", 1_000)].into();
    rig.runtime.inner.state().fs = Some((10_000, 0));
    rig.gc.detect(at(-1_000)).await.expect("detect");
    rig.clock.set(at(100));
    let mut parked = rig.runtime.park("RemoveImage", Some("a"));
    let gc = rig.gc.garbage_collect(&*rig.clock);
    let queued = async {
        parked.reached().await;
        let detect = rig.gc.detect(&*rig.clock);
        let meanwhile = async {
            rig.clock.set(at(1_000));
            rig.runtime.inner.state().images.push(tagged("new", 1));
            parked.release();
        };
        let (detected, ()) = tokio::join!(detect, meanwhile);
        detected.expect("detect")
    };
    let (report, _) = tokio::join!(gc, queued);
    assert_eq!(report.removed.len(), 1);
    let new = rig.record("new").expect("detected");
    assert_eq!(new.first_detected, at(1_000));
}

/// A reload swaps the configuration between cycles, never within one: `reconfigure` waits for
/// the GC in flight (parked inside its first RemoveImage), which ends with the settings it
/// started with (MaxAge 60 s takes both old images, though the new settings turn MaxAge off
/// and pin `b`); the next cycle runs wholly with the new ones.
#[tokio::test]
async fn a_reconfigure_waits_for_the_cycle_in_flight_which_ends_with_its_own_settings() {
    use imagekeeper::gc::PinPatterns;
    use std::pin::pin;
    use std::time::Duration;
    let old = GcConfig {
        policy: policy(100, 80, 0, 60),
        ..GcConfig::default()
    };
    let new = GcConfig {
        policy: policy(100, 80, 0, 0),
        pins: PinPatterns::new(vec!["registry.example/b:1".to_owned()]),
        ..GcConfig::default()
    };
    let rig = Rig::new(old.clone());
    rig.runtime.inner.state().images = vec![tagged("a", 1), tagged("b", 1)].into();
    rig.runtime.inner.state().fs = Some((10_000, 10_000));
    rig.gc.detect(at(0)).await.expect("detect");
    let mut parked = rig.runtime.park("RemoveImage", Some("a"));
    let gc = rig.gc.garbage_collect(at(1_000));
    let reload = async {
        parked.reached().await;
        let mut reconfigure = pin!(rig.gc.reconfigure(new.clone()));
        // Polled once: it waits for the cycle lock the parked GC holds.
        let early = tokio::time::timeout(Duration::ZERO, &mut reconfigure).await;
        assert!(early.is_err(), "reconfigure finished during a cycle");
        assert_eq!(rig.gc.config(), old, "swapped in the middle of a cycle");
        parked.release();
        reconfigure.await.expect("a valid configuration");
    };
    let (report, ()) = tokio::join!(gc, reload);
    assert!(report.error.is_none(), "{:?}", report.error);
    let removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(
        removed,
        ["a", "b"],
        "the cycle kept its own MaxAge to its end"
    );
    assert_eq!(rig.gc.config(), new);

    // The next cycle runs with the new settings: MaxAge is off, so c stays.
    rig.runtime.inner.state().images = vec![tagged("c", 1)].into();
    rig.gc.detect(at(1_001)).await.expect("detect");
    let report = rig.gc.garbage_collect(at(5_000)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    assert!(report.removed.is_empty(), "MaxAge is off after the reload");

    // An invalid policy is refused and the running configuration kept.
    let invalid = GcConfig {
        policy: policy(80, 90, 0, 0),
        ..GcConfig::default()
    };
    let refused = rig.gc.reconfigure(invalid).await;
    assert!(
        matches!(
            &refused,
            Err(GcError::InvalidPolicy { message })
                if message == "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80"
        ),
        "{refused:?}"
    );
    assert_eq!(rig.gc.config(), new);
}

// Scenarios the deterministic simulator (`scripts/sim`, `src/sim/`) found, each replayed here
// with parked calls.

/// The last look lists the containers, then asks the status of those detect did not see; a
/// container created for the victim during that ContainerStatus call was missed by the list
/// taken before it, and the victim was removed under it. The last look now lists again until
/// a list shows no container it has not asked about.
#[tokio::test]
async fn a_container_created_while_the_last_look_asks_a_new_containers_status_keeps_the_victim() {
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 0, 0),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().images = vec![tagged("a", 1_000), tagged("b", 1_000)].into();
    rig.runtime.inner.state().fs = Some((10_000, 0));
    rig.gc.detect(at(1)).await.expect("detect");
    let mut fs = rig.runtime.park("ImageFsInfo", None);
    let gc = rig.gc.garbage_collect(at(100));
    let meanwhile = async {
        // After the cycle's detect: a container of b appears, so the last look asks its status.
        fs.reached().await;
        rig.runtime.inner.state().containers = vec![container("of-b", "b")];
        let mut status = rig.runtime.park("ContainerStatus", Some("of-b"));
        fs.release();
        // While that status is asked, the kubelet creates a container of a, the victim.
        status.reached().await;
        rig.runtime
            .inner
            .state()
            .containers
            .push(container("of-a", "a"));
        status.release();
    };
    let (report, ()) = tokio::join!(gc, meanwhile);
    assert!(
        report.removed.is_empty(),
        "removed {:?} under a container",
        report.removed
    );
    assert!(rig.runtime.inner.state().removed.is_empty());
    assert!(rig.record("a").is_some() && rig.record("b").is_some());
}

/// A record whose image the cycle's detect did not list (the image was removed behind
/// imagekeeper's back; a pull's mark, committed while detect listed, kept the record) was a
/// GC victim known by id alone, so a pull of it in flight by name did not protect it and GC
/// removed the image the pull was bringing back. A victim detect did not list is now kept.
#[tokio::test]
async fn a_record_detect_did_not_list_is_not_removed_while_a_pull_of_its_image_is_in_flight() {
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 0, 0),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().images = vec![tagged("a", 1_000), tagged("b", 1_000)].into();
    rig.gc.detect(at(1)).await.expect("detect");
    rig.runtime.inner.state().fs = Some((10_000, 0));
    // a is gone from the runtime when the GC's detect lists it.
    rig.runtime.inner.state().images = vec![tagged("b", 1_000)].into();
    let mut list = rig.runtime.park("ListImages", None);
    let (gc_done, gc_done_rx) = oneshot::channel();
    let gc = async {
        let report = rig.gc.garbage_collect(at(100)).await;
        let _ = gc_done.send(());
        report
    };
    let meanwhile = async {
        list.reached().await;
        // A pull brings a back and marks it; then a is removed again behind our back.
        rig.runtime.inner.state().images = vec![tagged("a", 1_000), tagged("b", 1_000)].into();
        rig.clock.set(at(50));
        rig.pull("registry.example/a:1").await;
        rig.runtime.inner.state().images = vec![tagged("b", 1_000)].into();
        let mut remove_b = rig.runtime.park("RemoveImage", Some("b"));
        list.release();
        // While GC removes b, a pull of a starts and is in flight.
        remove_b.reached().await;
        rig.runtime.inner.state().images = vec![tagged("a", 1_000)].into();
        let mut pulling = rig.runtime.park("PullImage", Some("registry.example/a:1"));
        let pod = PodRef::default();
        let pull = rig.images.ensure_image_exists(
            &pod,
            "registry.example/a:1",
            PullPolicy::Always,
            &[],
            "",
        );
        let rest = async {
            pulling.reached().await;
            remove_b.release();
            // GC reaches a's last look and ends with the pull still in flight.
            gc_done_rx.await.expect("the GC ends");
            pulling.release();
        };
        tokio::join!(pull, rest).0
    };
    let (report, pulled) = tokio::join!(gc, meanwhile);
    let removed: Vec<&str> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.as_str())
        .collect();
    assert_eq!(removed, ["b"], "a was removed while its pull was in flight");
    assert_eq!(rig.runtime.inner.state().removed, ["b"]);
    assert_eq!(pulled.expect("the pull finds its image"), "a");
    assert!(rig.record("a").is_some());
}

/// The clock went back; a pull marks an image at the earlier time while a detect that read
/// the record before (with the later last_used) lists a runtime that no longer has the image.
/// The mark set last_used back to the pull's time, below what detect had read, so detect's
/// RemoveUnlisted deleted the record the pull had just marked. A mark now never moves
/// last_used back and always moves it, so detect sees it and keeps the record.
#[tokio::test]
async fn a_pull_marked_after_the_clock_went_back_keeps_its_record_through_a_detect_listing_meanwhile()
 {
    let rig = Rig::new(GcConfig {
        policy: policy(85, 80, 0, 0),
        ..GcConfig::default()
    });
    rig.runtime.inner.state().images = vec![tagged("a", 1_000)].into();
    rig.runtime.inner.state().containers = vec![container("of-a", "a")];
    rig.gc.detect(at(100)).await.expect("detect");
    assert_eq!(rig.record("a").expect("a").last_used, at(100));
    rig.runtime.inner.state().containers.clear();
    rig.runtime.inner.state().images.clear();
    let mut list = rig.runtime.park("ListImages", None);
    let detect = rig.gc.detect(at(200));
    let meanwhile = async {
        list.reached().await;
        rig.runtime.inner.state().images = vec![tagged("a", 1_000)].into();
        rig.clock.set(at(60)); // back 140 s, inside the future-stamp tolerance
        rig.pull("registry.example/a:1").await;
        list.release();
    };
    let (detect, ()) = tokio::join!(detect, meanwhile);
    detect.expect("detect");
    let a = rig
        .record("a")
        .expect("the pull's record survives the detect");
    assert!(a.last_used > at(100), "{a:?}");
}
