//! A runtime that frees late (issue 57, item 4): the CRI says (cri-api 65ec8e4) that
//! RemoveImage frees space asynchronously and that ImageFsInfo may still count removed
//! images. After the MaxAge pass removed images, the cycle reads the image filesystem again
//! until it shows a release (every `RELEASE_POLL_INTERVAL`, at most `RELEASE_WAIT_BOUND`), and
//! the space pass plans against that reading: it removes what its target needs and no more
//! when the runtime frees late, and what the true reading needs (never 0) when the removed
//! images held no byte of their own, the wait then counted as a timeout. Paused tokio time:
//! the waits take no real time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use imagekeeper::clock::TokioPause;
use imagekeeper::gc::{GcConfig, GcPolicy, ImageGcManager, RELEASE_WAIT_BOUND};
use imagekeeper::model::ImageFsStats;
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::Store;
use tokio::time::Instant;

use super::hooked::{Hooked, Hooks};
use super::{at, image, removed_ids};

/// When the runtime shows a removal released.
#[derive(Clone, Copy, Debug)]
enum Release {
    /// At once (the scripted runtime's own numbers).
    AtOnce,
    /// This long after the first confirmed RemoveImage (tokio time): until then ImageFsInfo
    /// shows the last reading taken before it, as containerd's periodic refresh does.
    After(Duration),
    /// Never: the removed images shared every layer with images that stay, so the reading
    /// before the removal is the truth from then on.
    Never,
}

struct FreesLate {
    release: Release,
    /// The last reading before any removal, and when the first removal was confirmed.
    frozen: Mutex<(Option<ImageFsStats>, Option<Instant>)>,
}

impl Hooks for Arc<FreesLate> {
    async fn after(&self, method: &'static str, _: &str, ok: bool) {
        let mut frozen = self.frozen.lock().expect("hook lock");
        if method == "RemoveImage" && ok && frozen.1.is_none() {
            frozen.1 = Some(Instant::now());
        }
    }

    fn image_fs(&self, stats: ImageFsStats) -> ImageFsStats {
        let mut frozen = self.frozen.lock().expect("hook lock");
        let stale = match (self.release, frozen.1) {
            (_, None) | (Release::AtOnce, _) => false,
            (Release::After(delay), Some(removed)) => removed.elapsed() < delay,
            (Release::Never, Some(_)) => true,
        };
        match (&frozen.0, stale) {
            (Some(before), true) => before.clone(),
            _ => {
                if frozen.1.is_none() {
                    frozen.0 = Some(stats.clone());
                }
                stats
            }
        }
    }
}

/// What a cycle did: the images it removed, the tokio time it took, the timeouts counted.
struct Outcome {
    removed: Vec<String>,
    took: Duration,
    timeouts: u64,
}

/// Capacity 10,000 at 500 available (95 %), high 85 %, low 80 %, MaxAge 1 h: "old" (1,000
/// bytes, detected at 0) is past MaxAge at 3,700 s; "a", "b", "c" (1,000 bytes each, detected
/// later in that order) are not, but are eligible for the space pass.
async fn cycle(release: Release) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(Store::open(&dir.path().join("records.redb"), at(0)).expect("open"));
    let scripted = ScriptedRuntime::new();
    scripted.state().fs = Some((10_000, 500));
    let hooks = Arc::new(FreesLate {
        release,
        frozen: Mutex::new((None, None)),
    });
    let manager = ImageGcManager::new(
        Hooked {
            inner: scripted.clone(),
            hooks: hooks.clone(),
        },
        store,
        GcConfig {
            policy: GcPolicy {
                high_threshold_percent: 85,
                low_threshold_percent: 80,
                min_age: Duration::ZERO,
                max_age: Duration::from_secs(3600),
                ..GcPolicy::default()
            },
            ..GcConfig::default()
        },
    )
    .expect("valid policy")
    .with_release_pause(Arc::new(TokioPause));
    let mut listed = Vec::new();
    for (id, t) in [("old", 0), ("a", 3000), ("b", 3100), ("c", 3200)] {
        listed.push(image(id, 1_000));
        scripted.state().images = listed.clone().into();
        manager.detect(at(t)).await.expect("detect");
    }
    let start = Instant::now();
    let report = manager.garbage_collect(at(3700)).await;
    let took = start.elapsed();
    assert!(report.error.is_none(), "{:?}", report.error);
    Outcome {
        removed: removed_ids(&report)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        took,
        timeouts: manager.metrics().release_wait_timeouts(),
    }
}

#[tokio::test(start_paused = true)]
async fn the_space_pass_after_max_age_waits_for_a_late_release_and_removes_only_what_its_target_needs()
 {
    // MaxAge frees "old"'s 1,000 bytes: 85 % in truth, so the pass frees 500 more, one image.
    // Planning on the stale 95 % would free 1,500: "a" and "b", one image too many.
    let at_once = cycle(Release::AtOnce).await;
    assert_eq!(at_once.removed, ["old", "a"]);
    assert_eq!(
        at_once.took,
        Duration::ZERO,
        "no wait when the reading fell"
    );
    assert_eq!(at_once.timeouts, 0);

    let late = cycle(Release::After(Duration::from_secs(9))).await;
    assert_eq!(
        late.removed,
        ["old", "a"],
        "planned on the released reading"
    );
    // Polls at 2, 4, 6, 8 s still show the stale reading; the one at 10 s shows the release.
    assert!(
        late.took >= Duration::from_secs(10) && late.took < Duration::from_secs(11),
        "{:?}",
        late.took
    );
    assert_eq!(late.timeouts, 0);
}

#[tokio::test(start_paused = true)]
async fn a_reading_that_never_falls_is_waited_for_up_to_the_bound_then_planned_on_and_counted() {
    // The removed image's layers were all shared: 95 % stays the truth, and the pass must
    // free 1,500 bytes ("a" and "b"), not the 500 (or 0) an accounting of removed sizes as
    // freed bytes would plan.
    let never = cycle(Release::Never).await;
    assert_eq!(never.removed, ["old", "a", "b"]);
    assert!(
        never.took >= RELEASE_WAIT_BOUND
            && never.took < RELEASE_WAIT_BOUND + Duration::from_secs(1),
        "{:?}",
        never.took
    );
    assert_eq!(never.timeouts, 1);
}
