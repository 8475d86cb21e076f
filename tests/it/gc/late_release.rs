//! A runtime that frees late (issue 57, item 4): the CRI says (cri-api 65ec8e4) that
//! RemoveImage frees space asynchronously and that ImageFsInfo may still count removed
//! images. The space pass after the MaxAge pass plans against the reading before MaxAge less
//! the bytes MaxAge removed (`gc::space::accounted_after_removals`), so it removes what its
//! target needs and no more, whether the runtime frees at once or late.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use imagekeeper::gc::{GcConfig, GcPolicy, ImageGcManager};
use imagekeeper::model::ImageFsStats;
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::Store;

use super::hooked::{Hooked, Hooks};
use super::{at, image, removed_ids};

/// After the first confirmed RemoveImage, ImageFsInfo keeps showing the last reading taken
/// before it (the runtime has not released anything yet), when `late`; else the runtime's
/// own numbers (it frees at once).
#[derive(Default)]
struct FreesLate {
    late: bool,
    /// The last reading before any removal, and whether a removal was confirmed since.
    frozen: Mutex<(Option<ImageFsStats>, bool)>,
}

impl Hooks for Arc<FreesLate> {
    async fn after(&self, method: &'static str, _: &str, ok: bool) {
        if method == "RemoveImage" && ok {
            self.frozen.lock().expect("hook lock").1 = true;
        }
    }

    fn image_fs(&self, stats: ImageFsStats) -> ImageFsStats {
        let mut frozen = self.frozen.lock().expect("hook lock");
        match (&frozen.0, frozen.1) {
            (Some(before), true) if self.late => before.clone(),
            _ => {
                frozen.0 = Some(stats.clone());
                stats
            }
        }
    }
}

/// Capacity 10,000 at `available` bytes, high 85 %, low 80 %, MaxAge 1 h: "old" (1,000
/// bytes, detected at 0) is past MaxAge at 3,700 s; "a", "b", "c" (1,000 bytes each, detected
/// later in that order) are not, but are eligible for the space pass.
async fn cycle(available: u64, late: bool) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(Store::open(&dir.path().join("records.redb"), at(0)).expect("open"));
    let scripted = ScriptedRuntime::new();
    scripted.state().fs = Some((10_000, available));
    let hooks = Arc::new(FreesLate {
        late,
        ..FreesLate::default()
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
    .expect("valid policy");
    let mut listed = Vec::new();
    for (id, t) in [("old", 0), ("a", 3000), ("b", 3100), ("c", 3200)] {
        listed.push(image(id, 1_000));
        scripted.state().images = listed.clone().into();
        manager.detect(at(t)).await.expect("detect");
    }
    let report = manager.garbage_collect(at(3700)).await;
    assert!(report.error.is_none(), "{:?}", report.error);
    removed_ids(&report)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_space_pass_after_max_age_removes_only_what_its_target_needs_when_the_runtime_frees_late()
 {
    // (available before the cycle, what the cycle removes). At 1,000 available (90 %), MaxAge's
    // 1,000 bytes bring usage to 80 %: no space pass. At 500 (95 %), they bring it to 85 %:
    // the pass frees 500 more, one image. A runtime that re-read 90 % or 95 % after MaxAge
    // would free 1,000 or 1,500 more: one or two images too many.
    for (available, expected) in [(1_000, vec!["old"]), (500, vec!["old", "a"])] {
        for late in [false, true] {
            assert_eq!(
                cycle(available, late).await,
                expected,
                "available {available}, runtime frees late: {late}"
            );
        }
    }
}
