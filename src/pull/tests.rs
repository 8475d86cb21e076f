//! Unit tests of the image manager: kubelet's puller case table for both pullers under a
//! manual clock (in `kubelet_table`), the parallel limit, and backoff across a restart of the
//! manager.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

use super::*;
use crate::clock::ManualClock;
use crate::model::{ImageId, RuntimeImage};

/// A runtime whose answers the test sets; it records the calls it gets.
#[derive(Default)]
struct FakeRuntime {
    images: Mutex<HashMap<String, RuntimeImage>>,
    pull_err: Option<String>,
    inspect_err: Option<String>,
    calls: Mutex<Vec<&'static str>>,
    creds_seen: Mutex<Vec<Option<PullCredentials>>>,
    specs_seen: Mutex<Vec<PullSpec>>,
    /// Usernames whose credentials the registry refuses.
    refused_users: Vec<String>,
    /// After a pull returns, another pull moves the name to this image (a tag moved).
    retag_after_pull: Option<RuntimeImage>,
    /// When set, each pull waits for a permit of this semaphore.
    gate: Option<Arc<Semaphore>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    started: Option<watch::Sender<usize>>,
}

impl FakeRuntime {
    fn with_image(self, name: &str, id: &str, size: u64) -> FakeRuntime {
        self.images.lock().unwrap().insert(
            name.to_owned(),
            RuntimeImage {
                id: ImageId::new(id),
                repo_tags: vec![name.to_owned()],
                size,
                ..Default::default()
            },
        );
        self
    }

    fn take_calls(&self) -> Vec<&'static str> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl PullRuntime for FakeRuntime {
    async fn image_status(
        &self,
        image: &str,
        _runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, RuntimeError> {
        self.calls.lock().unwrap().push("ImageStatus");
        if let Some(e) = &self.inspect_err {
            return Err(RuntimeError::new(e.clone()));
        }
        let images = self.images.lock().unwrap();
        Ok(images
            .get(image)
            .or_else(|| images.values().find(|i| i.id.as_str() == image))
            .cloned())
    }

    async fn pull_image(
        &self,
        spec: &PullSpec,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, RuntimeError> {
        let image = spec.image.as_str();
        self.specs_seen.lock().unwrap().push(spec.clone());
        self.calls.lock().unwrap().push("PullImage");
        self.creds_seen.lock().unwrap().push(credentials.cloned());
        let now_in = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now_in, Ordering::SeqCst);
        if let Some(tx) = &self.started {
            tx.send_modify(|n| *n += 1);
        }
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate is never closed").forget();
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Some(e) = &self.pull_err {
            return Err(RuntimeError::new(e.clone()));
        }
        if let Some(user) = credentials
            .map(|c| c.username.clone())
            .filter(|u| self.refused_users.contains(u))
        {
            return Err(RuntimeError::new(format!("unauthorized: {user}")));
        }
        let id = format!("sha256:{image}");
        // The runtime names the image it pulled by the name it was asked for.
        let pulled = RuntimeImage {
            id: ImageId::new(id.clone()),
            repo_tags: vec![image.to_owned()],
            size: 1234,
            ..Default::default()
        };
        let now_named = self.retag_after_pull.clone().unwrap_or(pulled);
        self.images
            .lock()
            .unwrap()
            .insert(image.to_owned(), now_named);
        Ok(id)
    }
}

/// Records events.
#[derive(Default)]
struct Recorder(Mutex<Vec<(EventType, String, String)>>);

impl Recorder {
    fn take_reasons(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
            .into_iter()
            .map(|(_, r, _)| r)
            .collect()
    }
}

impl EventRecorder for Recorder {
    fn event(&self, _pod: &PodRef, event_type: EventType, reason: &str, message: &str) {
        self.0
            .lock()
            .unwrap()
            .push((event_type, reason.to_owned(), message.to_owned()));
    }
}

fn pod() -> PodRef {
    PodRef {
        uid: "bar".into(),
        namespace: "test-ns".into(),
        name: "test_pod".into(),
        annotations: BTreeMap::new(),
        origin: Default::default(),
    }
}

const T0: i64 = 1_700_000_000;

/// The runtime calls of an `ensure_image_exists`: a pull of a missing image, a pull under
/// `Always`, a pull that failed, a presence check alone.
const PULL_OK: &[&str] = &["ImageStatus", "PullImage", "ImageStatus"];
const ALWAYS_OK: &[&str] = &["PullImage", "ImageStatus"];
const PULL_FAIL: &[&str] = &["ImageStatus", "PullImage"];
const STATUS: &[&str] = &["ImageStatus"];

mod kubelet_table;

#[tokio::test]
async fn success_reports_size_and_durations_and_records_the_image() {
    let runtime = Arc::new(FakeRuntime::default());
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(T0)));
    let store = Arc::new(MemoryBackoffStore::new());
    let recorder = Arc::new(Recorder::default());
    let manager = ImageManager::new(
        &PullConfig::default(),
        runtime.clone(),
        store.clone(),
        clock.clone(),
    )
    .expect("valid config")
    .with_recorder(recorder.clone());
    let got = manager
        .ensure_image_exists(&pod(), "busybox", PullPolicy::IfNotPresent, &[], "kata")
        .await;
    assert_eq!(got, Ok("sha256:busybox:latest".to_owned()));
    let events = recorder.0.lock().unwrap().clone();
    assert_eq!(
        events.last().map(|(_, _, m)| m.as_str()),
        Some(
            "Successfully pulled image \"busybox\" in 0s (0s including waiting). Image size: 1234 bytes."
        )
    );
    // The mark is keyed as the runtime lists the image (this runtime, like containerd 1.6,
    // lists it with no handler), not by the request's handler: that is the key detect uses.
    let now = UnixNanos::from_secs(T0);
    assert_eq!(
        store.record(&RecordKey::new("sha256:busybox:latest", "")),
        Some((now, now, 1234))
    );
    assert_eq!(
        store.record(&RecordKey::new("sha256:busybox:latest", "kata")),
        None
    );
    let hist = manager.metrics().snapshot();
    assert_eq!(hist.get("0-10MB").map(|h| h.count()), Some(1));
}

#[tokio::test]
async fn credentials_reach_the_runtime_and_no_event_or_store() {
    let runtime = Arc::new(FakeRuntime {
        pull_err: Some("unauthorized".into()),
        ..Default::default()
    });
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(T0)));
    let store = Arc::new(MemoryBackoffStore::new());
    let recorder = Arc::new(Recorder::default());
    let manager = ImageManager::new(
        &PullConfig::default(),
        runtime.clone(),
        store.clone(),
        clock,
    )
    .expect("valid config")
    .with_recorder(recorder.clone());
    let creds = PullCredentials {
        username: "alice".into(),
        password: "hunter2".into(),
        ..Default::default()
    };
    let got = manager
        .ensure_image_exists(
            &pod(),
            "private/app:1",
            PullPolicy::Always,
            std::slice::from_ref(&creds),
            "",
        )
        .await;
    assert_eq!(got.map_err(|e| e.reason()), Err("ErrImagePull"));
    assert_eq!(
        runtime.creds_seen.lock().unwrap().as_slice(),
        &[Some(creds)]
    );
    let everything = format!(
        "{:?}{:?}",
        recorder.0.lock().unwrap(),
        store.backoff_entries().expect("memory store")
    );
    assert!(
        !everything.contains("hunter2") && !everything.contains("alice"),
        "{everything}"
    );
}

/// kuberuntime_image.go's PullImage: each credential in turn until one works; when none
/// does, every failure in one aggregate (identical ones once), and no anonymous try.
#[tokio::test]
async fn every_credential_is_tried_in_turn_and_the_failures_are_aggregated() {
    let cred = |user: &str| PullCredentials {
        username: user.into(),
        password: "pw".into(),
        ..Default::default()
    };
    let users = |runtime: &FakeRuntime| -> Vec<Option<String>> {
        runtime
            .creds_seen
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.as_ref().map(|c| c.username.clone()))
            .collect()
    };
    // (credentials, refused users, result, users the runtime saw)
    type Case<'a> = (
        &'a [&'a str],
        &'a [&'a str],
        Result<(), &'a str>,
        Vec<Option<&'a str>>,
    );
    let cases: Vec<Case> = vec![
        (
            &["a", "b", "c"],
            &["a", "b"],
            Ok(()),
            vec![Some("a"), Some("b"), Some("c")],
        ),
        (&["a", "b"], &[], Ok(()), vec![Some("a")]),
        (
            &["a", "b"],
            &["a", "b"],
            Err("[unauthorized: a, unauthorized: b]"),
            vec![Some("a"), Some("b")],
        ),
        (&[], &["a"], Ok(()), vec![None]),
    ];
    for (creds, refused, want, seen) in cases {
        let runtime = Arc::new(FakeRuntime {
            refused_users: refused.iter().map(|u| u.to_string()).collect(),
            ..Default::default()
        });
        let manager = ImageManager::new(
            &PullConfig::default(),
            runtime.clone(),
            Arc::new(MemoryBackoffStore::new()),
            Arc::new(ManualClock::new(UnixNanos::from_secs(T0))),
        )
        .expect("valid config");
        let creds: Vec<PullCredentials> = creds.iter().map(|u| cred(u)).collect();
        let got = manager
            .ensure_image_exists(&pod(), "private/app:1", PullPolicy::Always, &creds, "")
            .await;
        match want {
            Ok(()) => assert!(got.is_ok(), "{creds:?}: {got:?}"),
            Err(message) => {
                let err = got.expect_err("every credential refused");
                assert_eq!((err.reason(), err.message()), ("ErrImagePull", message));
            }
        }
        let seen: Vec<Option<String>> = seen.iter().map(|u| u.map(str::to_owned)).collect();
        assert_eq!(users(&runtime), seen, "{refused:?}");
    }
}

/// The tag a pull fetched moves to another image before the pull asks the image's status:
/// the pull still marks (and protects) the image it returned, asked by its ref as the
/// kubelet's GetImageSize(imageRef) does, never the image the tag names now.
#[tokio::test]
async fn a_pull_marks_the_image_it_returned_even_if_the_tag_moved_meanwhile() {
    let moved_to = RuntimeImage {
        id: ImageId::new("sha256:other"),
        size: 99,
        ..Default::default()
    };
    let runtime = Arc::new(FakeRuntime {
        retag_after_pull: Some(moved_to),
        ..Default::default()
    });
    let store = Arc::new(MemoryBackoffStore::new());
    let manager = ImageManager::new(
        &PullConfig::default(),
        runtime.clone(),
        store.clone(),
        Arc::new(ManualClock::new(UnixNanos::from_secs(T0))),
    )
    .expect("valid config");
    let got = manager
        .ensure_image_exists(&pod(), "app:1", PullPolicy::Always, &[], "")
        .await;
    assert_eq!(got, Ok("sha256:app:1".to_owned()));
    let now = UnixNanos::from_secs(T0);
    assert!(
        store
            .record(&RecordKey::new("sha256:app:1", ""))
            .is_some_and(|(_, used, _)| used == now)
    );
    assert_eq!(store.record(&RecordKey::new("sha256:other", "")), None);
}

/// The pod's annotations go to the runtime on the ImageSpec, and the pod as the sandbox.
#[tokio::test]
async fn the_pods_annotations_and_sandbox_reach_the_pull() {
    let runtime = Arc::new(FakeRuntime::default());
    let manager = ImageManager::new(
        &PullConfig::default(),
        runtime.clone(),
        Arc::new(MemoryBackoffStore::new()),
        Arc::new(ManualClock::new(UnixNanos::from_secs(T0))),
    )
    .expect("valid config");
    let mut pod = pod();
    pod.annotations = [("a".to_owned(), "1".to_owned())].into();
    manager
        .ensure_image_exists(&pod, "busybox", PullPolicy::Always, &[], "kata")
        .await
        .expect("pull");
    let specs = runtime.specs_seen.lock().unwrap().clone();
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].image, "busybox:latest");
    assert_eq!(specs[0].runtime_handler, "kata");
    assert_eq!(specs[0].annotations, pod.annotations);
    assert_eq!(
        specs[0].sandbox.as_ref().map(|s| s.uid.as_str()),
        Some(pod.uid.as_str())
    );
}

#[tokio::test]
async fn parallel_pulls_stop_at_max_in_flight_and_the_rest_wait_for_a_slot() {
    let gate = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = watch::channel(0usize);
    let runtime = Arc::new(FakeRuntime {
        gate: Some(gate.clone()),
        started: Some(started_tx),
        ..Default::default()
    });
    let config = PullConfig {
        serialize_image_pulls: false,
        max_parallel_image_pulls: Some(5),
        registry_pull_qps: 0.0,
        ..PullConfig::default()
    };
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(T0)));
    let manager = Arc::new(
        ImageManager::new(
            &config,
            runtime.clone(),
            Arc::new(MemoryBackoffStore::new()),
            clock,
        )
        .expect("valid config"),
    );
    let mut tasks = Vec::new();
    for i in 0..8 {
        let m = manager.clone();
        tasks.push(tokio::spawn(async move {
            m.ensure_image_exists(&pod(), &format!("img{i}"), PullPolicy::Always, &[], "")
                .await
        }));
    }
    started.wait_for(|n| *n == 5).await.expect("runtime alive");
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        *started.borrow(),
        5,
        "a sixth pull started while five were in flight"
    );
    assert_eq!(runtime.in_flight.load(Ordering::SeqCst), 5);

    gate.add_permits(1);
    started.wait_for(|n| *n == 6).await.expect("runtime alive");
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        *started.borrow(),
        6,
        "one finished pull frees exactly one slot"
    );

    gate.add_permits(7);
    for t in tasks {
        assert!(t.await.expect("task").is_ok());
    }
    assert_eq!(runtime.max_in_flight.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn serial_puller_runs_one_pull_at_a_time() {
    let gate = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = watch::channel(0usize);
    let runtime = Arc::new(FakeRuntime {
        gate: Some(gate.clone()),
        started: Some(started_tx),
        ..Default::default()
    });
    let config = PullConfig {
        registry_pull_qps: 0.0,
        ..PullConfig::default()
    };
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(T0)));
    let manager = Arc::new(
        ImageManager::new(
            &config,
            runtime.clone(),
            Arc::new(MemoryBackoffStore::new()),
            clock,
        )
        .expect("valid config"),
    );
    // More callers than the queue holds: the extra ones wait to enqueue.
    let n = MAX_QUEUE_PLUS;
    let mut tasks = Vec::new();
    for i in 0..n {
        let m = manager.clone();
        tasks.push(tokio::spawn(async move {
            m.ensure_image_exists(&pod(), &format!("img{i}"), PullPolicy::Always, &[], "")
                .await
        }));
    }
    started.wait_for(|n| *n == 1).await.expect("runtime alive");
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(*started.borrow(), 1);
    gate.add_permits(n);
    for t in tasks {
        assert!(t.await.expect("task").is_ok());
    }
    assert_eq!(*started.borrow(), n);
    assert_eq!(runtime.max_in_flight.load(Ordering::SeqCst), 1);
}

const MAX_QUEUE_PLUS: usize = puller::MAX_IMAGE_PULL_REQUESTS + 3;

/// Fails once, drops the manager, and checks the backoff with a new manager over `store`.
async fn backoff_survives_restart<S: BackoffStore>(open: impl Fn() -> Arc<S>) {
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(T0)));
    let failing = || {
        Arc::new(FakeRuntime {
            pull_err: Some("RegistryUnavailable: dial tcp: i/o timeout".into()),
            ..Default::default()
        })
    };
    let config = PullConfig::default();
    {
        let manager =
            ImageManager::new(&config, failing(), open(), clock.clone()).expect("valid config");
        let got = manager
            .ensure_image_exists(&pod(), "quay.io/x/y:1", PullPolicy::IfNotPresent, &[], "")
            .await;
        assert_eq!(got.map_err(|e| e.reason()), Err("RegistryUnavailable"));
    }
    // (seconds after the failure, runtime calls, outcome reason)
    let steps: [(i64, &[&str], &str); 4] = [
        (5, STATUS, "ImagePullBackOff"),
        (10, PULL_FAIL, "RegistryUnavailable"),
        (29, STATUS, "ImagePullBackOff"),
        (30, PULL_FAIL, "RegistryUnavailable"),
    ];
    for (after, calls, reason) in steps {
        clock.set(UnixNanos::from_secs(T0 + after));
        let runtime = failing();
        let manager = ImageManager::new(&config, runtime.clone(), open(), clock.clone())
            .expect("valid config");
        let got = manager
            .ensure_image_exists(&pod(), "quay.io/x/y:1", PullPolicy::IfNotPresent, &[], "")
            .await;
        assert_eq!(runtime.take_calls(), calls, "at +{after}s");
        let err = got.expect_err("the runtime always fails");
        assert_eq!(err.reason(), reason, "at +{after}s: {err}");
        if reason == "ImagePullBackOff" {
            assert_eq!(
                err.message(),
                "Back-off pulling image \"quay.io/x/y:1\": RegistryUnavailable: image pull failed for quay.io/x/y:1 because the registry is unavailable: dial tcp: i/o timeout"
            );
        }
    }
    // Another pod's key is not in backoff.
    let runtime = failing();
    let manager =
        ImageManager::new(&config, runtime.clone(), open(), clock.clone()).expect("valid config");
    let other = PodRef {
        uid: "other".into(),
        ..pod()
    };
    let got = manager
        .ensure_image_exists(&other, "quay.io/x/y:1", PullPolicy::IfNotPresent, &[], "")
        .await;
    assert_eq!(got.map_err(|e| e.reason()), Err("RegistryUnavailable"));
}

#[tokio::test]
async fn backoff_survives_a_restart_of_the_manager() {
    let store = Arc::new(MemoryBackoffStore::new());
    backoff_survives_restart(|| store.clone()).await;
}

#[tokio::test]
async fn backoff_survives_a_restart_with_the_real_store_reopened() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("images.redb");
    let now = UnixNanos::from_secs(T0);
    // Each manager gets the store freshly opened; the previous one is dropped first, as a
    // restarted agent would find it.
    let slot: Mutex<Option<Arc<crate::store::Store>>> = Mutex::new(None);
    backoff_survives_restart(|| {
        let mut slot = slot.lock().unwrap();
        *slot = None;
        let store = Arc::new(crate::store::Store::open(&path, now).expect("open store"));
        *slot = Some(store.clone());
        store
    })
    .await;
    drop(slot.lock().unwrap().take());
    let store = crate::store::Store::open(&path, now);
    let entries = store.map(|s| s.backoff_entries());
    assert!(
        matches!(entries, Ok(Ok(ref v)) if v.len() == 2),
        "{entries:?}"
    );
}

#[tokio::test]
async fn success_marks_the_image_used_in_the_real_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("images.redb");
    let now = UnixNanos::from_secs(T0);
    let store = Arc::new(crate::store::Store::open(&path, now).expect("open store"));
    let clock = Arc::new(ManualClock::new(now));
    let runtime = Arc::new(FakeRuntime::default());
    let m = ImageManager::new(
        &PullConfig::default(),
        runtime.clone(),
        store.clone(),
        clock,
    )
    .expect("valid config");
    let got = m
        .ensure_image_exists(&pod(), "busybox:1", PullPolicy::Always, &[], "")
        .await;
    assert_eq!(got, Ok("sha256:busybox:1".to_owned()));
    let key = RecordKey::new("sha256:busybox:1", "");
    let record = store
        .get(&key)
        .expect("read store")
        .expect("record written at once");
    assert_eq!(
        (record.first_detected, record.last_used, record.size),
        (now, now, 1234)
    );
    // The runtime's names of the image are written with the mark: `inspect list` shows them
    // before the next detect.
    let asked = runtime.specs_seen.lock().unwrap()[0].image.clone();
    assert_eq!(
        store.names(&key).expect("read names"),
        Some(crate::model::ImageNames {
            repo_tags: vec![asked],
            repo_digests: Vec::new(),
        })
    );
}

#[tokio::test]
async fn success_keeps_live_backoff_entries_and_collects_expired_ones() {
    let clock = Arc::new(ManualClock::new(UnixNanos::from_secs(T0)));
    let store = Arc::new(MemoryBackoffStore::new());
    let failing = Arc::new(FakeRuntime {
        pull_err: Some("boom".into()),
        ..Default::default()
    });
    let config = PullConfig::default();
    let m =
        ImageManager::new(&config, failing, store.clone(), clock.clone()).expect("valid config");
    let got = m
        .ensure_image_exists(&pod(), "a", PullPolicy::Always, &[], "")
        .await;
    assert_eq!(got.map_err(|e| e.reason()), Err("ErrImagePull"));

    let ok = Arc::new(FakeRuntime::default());
    let m = ImageManager::new(&config, ok, store.clone(), clock.clone()).expect("valid config");
    // (seconds after the failure, is the entry still there after a success?)
    for (after, kept) in [(20, true), (600, true), (601, false)] {
        clock.set(UnixNanos::from_secs(T0 + after));
        let got = m
            .ensure_image_exists(&pod(), "b", PullPolicy::Always, &[], "")
            .await;
        assert!(got.is_ok());
        let present = store.backoff("bar_a").expect("memory store").is_some();
        assert_eq!(present, kept, "at +{after}s");
    }
}

#[test]
fn config_validation_uses_kubelets_messages() {
    type Case = (bool, Option<i32>, f64, Result<(), &'static str>);
    let cases: [Case; 6] = [
        (true, None, 5.0, Ok(())),
        (true, Some(1), 5.0, Ok(())),
        (false, Some(5), 5.0, Ok(())),
        (
            false,
            Some(0),
            5.0,
            Err("invalid configuration: maxParallelImagePulls 0 must be a positive number"),
        ),
        (
            true,
            Some(2),
            5.0,
            Err(
                "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false",
            ),
        ),
        (
            false,
            None,
            -1.0,
            Err(
                "invalid configuration: registryPullQPS (--registry-qps) -1 must not be a negative number",
            ),
        ),
    ];
    for (serialize, max, qps, want) in cases {
        let c = PullConfig {
            serialize_image_pulls: serialize,
            max_parallel_image_pulls: max,
            registry_pull_qps: qps,
            ..PullConfig::default()
        };
        let got = c.validate().map_err(|e| e.to_string());
        assert_eq!(
            got,
            want.map_err(str::to_owned),
            "{serialize} {max:?} {qps}"
        );
    }
}

#[test]
fn eval_cri_pull_err_classifies_by_prefix() {
    let cases = [
        (
            "RegistryUnavailable",
            "RegistryUnavailable",
            "image pull failed for img because the registry is unavailable",
        ),
        (
            "RegistryUnavailable: x",
            "RegistryUnavailable",
            "image pull failed for img because the registry is unavailable: x",
        ),
        (
            "SignatureValidationFailed: y",
            "SignatureValidationFailed",
            "image pull failed for img because the signature validation failed: y",
        ),
        ("not found", "ErrImagePull", "not found"),
        (
            "rpc error: RegistryUnavailable",
            "ErrImagePull",
            "rpc error: RegistryUnavailable",
        ),
    ];
    for (err, reason, msg) in cases {
        let runtime = RuntimeError::new(err);
        let got = eval_cri_pull_err("img", &runtime);
        assert_eq!((got.reason(), got.message()), (reason, msg), "{err}");
        // The runtime's error stays the source.
        let source = std::error::Error::source(&got).expect("the runtime error is the source");
        assert_eq!(source.to_string(), err);
    }
}

/// A pod uid over 128 bytes or an image name over 4096 bytes would make a backoff key the
/// store refuses: the pull is refused first, as an invalid image name (exit 2 in the CLI),
/// with no runtime call and nothing stored; at the limits the pull goes ahead.
#[tokio::test]
async fn over_long_pod_uids_and_image_names_are_refused_before_any_runtime_call() {
    let dir = tempfile::tempdir().expect("temp dir");
    let now = UnixNanos::from_secs(T0);
    let store = Arc::new(
        crate::store::Store::open(&dir.path().join("images.redb"), now).expect("open store"),
    );
    let runtime = Arc::new(FakeRuntime {
        pull_err: Some("boom".into()),
        ..Default::default()
    });
    let m = ImageManager::new(
        &PullConfig::default(),
        runtime.clone(),
        store.clone(),
        Arc::new(ManualClock::new(now)),
    )
    .expect("valid config");
    let uid = |n: usize| PodRef {
        uid: "u".repeat(n),
        ..pod()
    };
    let long_digest = format!("busybox@sha256:{}", "a".repeat(4096));
    // (pod uid bytes, image, refused with this message part)
    let cases: [(usize, &str, Option<&str>); 4] = [
        (
            129,
            "busybox:1",
            Some("pod uid for the image pull backoff key: 129 bytes"),
        ),
        (
            36,
            &long_digest,
            Some("4111 bytes, longer than the limit of 4096"),
        ),
        (128, "busybox:1", None),
        (36, "busybox:1", None),
    ];
    for (uid_len, image, refused) in cases {
        let got = m
            .ensure_image_exists(&uid(uid_len), image, PullPolicy::Always, &[], "")
            .await;
        let calls = runtime.take_calls();
        let case = format!("uid of {uid_len} bytes, image of {} bytes", image.len());
        match refused {
            Some(part) => {
                let err = got.expect_err(&case);
                assert_eq!(err.reason(), "InvalidImageName", "{case}");
                assert!(err.message().contains(part), "{case}: {}", err.message());
                assert!(calls.is_empty(), "{case}: {calls:?}");
            }
            None => {
                assert_eq!(got.map_err(|e| e.reason()), Err("ErrImagePull"), "{case}");
                assert_eq!(calls, vec!["PullImage"], "{case}");
            }
        }
    }
    let keys: Vec<usize> = store
        .backoff_entries()
        .expect("read store")
        .into_iter()
        .map(|(k, _)| k.len())
        .collect();
    assert_eq!(keys, vec![36 + 1 + 9, 128 + 1 + 9]);
}

/// A keyring pull: the pull secrets' matching credentials reach the runtime in turn, the
/// longest location first; an image no secret matches is pulled anonymously.
#[tokio::test]
async fn keyring_pulls_try_the_matching_pull_secrets_in_turn_then_pull_anonymously() {
    use crate::pull::credentials::{DockerConfig, DockerConfigEntry};
    let entry = |user: &str| DockerConfigEntry {
        username: user.into(),
        password: "pw".into(),
        email: String::new(),
    };
    let secret = DockerConfig(
        [
            ("reg.example.com".to_owned(), entry("host")),
            ("reg.example.com/team".to_owned(), entry("team")),
            ("other.example.com".to_owned(), entry("other")),
        ]
        .into(),
    );
    // (image, refused users, users the runtime saw)
    type Case<'a> = (&'a str, &'a [&'a str], &'a [Option<&'a str>]);
    let cases: [Case; 3] = [
        (
            "reg.example.com/team/app:1",
            &["team"],
            &[Some("team"), Some("host")],
        ),
        ("reg.example.com/solo/app:1", &[], &[Some("host")]),
        ("quay.io/team/app:1", &[], &[None]),
    ];
    for (image, refused, seen) in cases {
        let runtime = Arc::new(FakeRuntime {
            refused_users: refused.iter().map(|u| u.to_string()).collect(),
            ..Default::default()
        });
        let manager = ImageManager::new(
            &PullConfig::default(),
            runtime.clone(),
            Arc::new(MemoryBackoffStore::new()),
            Arc::new(ManualClock::new(UnixNanos::from_secs(T0))),
        )
        .expect("valid config");
        let got = manager
            .ensure_image_exists_with(
                &pod(),
                image,
                PullPolicy::Always,
                PullAuth::Keyring(std::slice::from_ref(&secret)),
                "",
            )
            .await;
        assert!(got.is_ok(), "{image}: {got:?}");
        let users: Vec<Option<String>> = runtime
            .creds_seen
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.as_ref().map(|c| c.username.clone()))
            .collect();
        let want: Vec<Option<String>> = seen.iter().map(|u| u.map(str::to_owned)).collect();
        assert_eq!(users, want, "{image}");
    }
}

/// A credential provider plugin that fails: ErrImagePull naming the plugin, the backoff
/// recorded, and no PullImage call (not even an anonymous one).
#[tokio::test]
async fn a_failing_credential_plugin_fails_the_pull_with_backoff_and_no_runtime_pull() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("broken");
    std::fs::write(&plugin, "#!/bin/sh\nexit 1\n").expect("write");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: broken\n  matchImages: ['*.example.com']\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    )
    .expect("write");
    let sources = credentials::CredentialSources {
        node: None,
        plugins: Some(credentials::PluginProviders::load(&config, dir.path()).expect("valid")),
    };
    let runtime = Arc::new(FakeRuntime::default());
    let store = Arc::new(MemoryBackoffStore::new());
    let manager = ImageManager::new(
        &PullConfig::default(),
        runtime.clone(),
        store.clone(),
        Arc::new(ManualClock::new(UnixNanos::from_secs(T0))),
    )
    .expect("valid config")
    .with_credential_sources(Arc::new(sources));
    let err = manager
        .ensure_image_exists_with(
            &pod(),
            "reg.example.com/app:1",
            PullPolicy::Always,
            PullAuth::Keyring(&[]),
            "",
        )
        .await
        .expect_err("the plugin fails");
    assert_eq!(err.reason(), "ErrImagePull");
    assert!(
        err.message().starts_with("credential provider broken: error execing credential provider plugin broken for image reg.example.com/app: exit status: 1"),
        "{}",
        err.message()
    );
    assert!(runtime.creds_seen.lock().unwrap().is_empty());
    let key = format!("{}_reg.example.com/app:1", pod().uid);
    assert!(store.backoff(&key).expect("memory store").is_some());
}
