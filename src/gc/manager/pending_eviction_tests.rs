//! Unit tests of the manager against the scripted runtime: a removal whose record deletion
//! failed, capacity 0 with a byte budget, the measured pass on further image filesystems, and
//! the first detect's one operation per new image.

use std::path::Path;
use std::time::Duration;

use super::measured::UNLOWERED_REMOVALS;
use super::*;
use std::sync::Arc;

use crate::model::{RecordKey, Remover, RuntimeImage, UnixNanos};
use crate::store::Store;

use crate::gc::metrics::RemovalReason;
use crate::gc::space::FsNeed;
use crate::gc::{GcError, GcPolicy};
use crate::model::ImageId;
use crate::replay::{ScriptState, ScriptedRuntime};
use crate::runtime::CriError;
use crate::store::power_loss::PowerLossDisk;
use crate::store::{BatchOp, CommitMode};
use std::collections::BTreeMap;

/// The scripted runtime on a disk that fails every write from the moment an image is
/// removed: GC's RemoveImage succeeds and its record deletion (`Evict`) fails, as on a
/// full disk.
struct FullAfterRemove {
    inner: ScriptedRuntime,
    disk: PowerLossDisk,
}

impl crate::runtime::forward::Forward for FullAfterRemove {
    type Inner = ScriptedRuntime;

    fn inner(&self) -> &ScriptedRuntime {
        &self.inner
    }

    /// Cuts the disk's power right after RemoveImage answered.
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
        let done = call().await;
        if method == "RemoveImage" {
            self.disk.cut_now();
        }
        done
    }
}

crate::forward_image_runtime!(impl[] for FullAfterRemove);

/// A GC removal whose record deletion failed is journaled by the next detect as
/// imagekeeper's removal with the cycle's note, not as an external one.
#[tokio::test]
async fn a_removal_whose_record_deletion_failed_is_journaled_as_imagekeepers() {
    let t0 = UnixNanos::from_secs(10_000);
    let t1 = UnixNanos::from_secs(20_000);
    let t2 = UnixNanos::from_secs(30_000);
    let disk = PowerLossDisk::new(Vec::new(), None);
    let store = Arc::new(
        Store::open_with_backend(
            disk.backend(),
            Path::new("simulated"),
            t0,
            CommitMode::Durable,
        )
        .expect("open"),
    );
    let inner = ScriptedRuntime::new();
    let image = RuntimeImage {
        id: ImageId::new(format!("sha256:{:064x}", 7)),
        size: 1000,
        ..RuntimeImage::default()
    };
    inner.state().images = vec![image.clone()].into();
    let runtime = FullAfterRemove {
        inner,
        disk: disk.clone(),
    };
    let config = GcConfig {
        policy: GcPolicy {
            min_age: Duration::ZERO,
            ..GcPolicy::default()
        },
        ..GcConfig::default()
    };
    let manager = ImageGcManager::new(runtime, store.clone(), config).expect("new");
    manager.detect(t0).await.expect("detect");
    let report = manager.delete_unused_images(t1).await;
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert!(disk.is_cut(), "RemoveImage ran and the disk then failed");
    disk.restore_power();
    assert!(
        store.get(&image.record_key()).expect("read").is_some(),
        "the record outlived its image"
    );

    let detect = manager.detect(t2).await.expect("detect");
    assert!(
        detect.external_removals.is_empty(),
        "{:?}",
        detect.external_removals
    );
    assert_eq!(detect.removed, 0);
    let journal = store.journal().expect("journal");
    assert_eq!(journal.len(), 1, "{journal:?}");
    let (key, entry) = &journal[0];
    assert_eq!(key.key, image.record_key());
    assert_eq!(entry.remover, Remover::Imagekeeper, "{entry:?}");
    assert_eq!(entry.reason, Some(RemovalReason::Unused), "{entry:?}");
    assert_eq!(key.removed_at, t1);
    assert_eq!(store.get(&image.record_key()).expect("read"), None);
    // The note is spent: nothing more to journal.
    manager.detect(t2).await.expect("detect");
    assert_eq!(store.journal().expect("journal").len(), 1);
}

/// Capacity 0 fails the percentage rule alone: the byte budget still frees down to its
/// low line, the cycle reports the kubelet's InvalidDiskCapacity error, and the dry run
/// (`explain`) plans exactly the removals the cycle makes.
#[tokio::test]
async fn capacity_zero_fails_the_percentage_rule_and_the_budget_still_runs_as_planned() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = UnixNanos::from_secs(10_000);
    let t1 = UnixNanos::from_secs(20_000);
    let store = Arc::new(Store::open(&dir.path().join("db.redb"), t0).expect("open"));
    let runtime = ScriptedRuntime::new();
    runtime.state().images = [(1u8, 400u64), (2, 300), (3, 200), (4, 100)]
        .map(|(n, size)| RuntimeImage {
            id: ImageId::new(format!("sha256:{n:064x}")),
            size,
            ..RuntimeImage::default()
        })
        .to_vec()
        .into();
    // No filesystem scripted: ImageFsInfo reports capacity 0.
    let config = GcConfig {
        policy: GcPolicy {
            min_age: Duration::ZERO,
            bytes: Some(crate::gc::ByteBudget {
                high: 800,
                low: 500,
            }),
            ..GcPolicy::default()
        },
        ..GcConfig::default()
    };
    let manager = ImageGcManager::new(runtime.clone(), store, config).expect("new");
    manager.detect(t0).await.expect("detect");
    let plan = manager.plan(t1, false).await.expect("plan");
    assert_eq!(
        plan.explanation.space,
        crate::gc::SpacePass::InvalidCapacity
    );
    let planned: Vec<RecordKey> = plan.removals.iter().map(|r| r.key.clone()).collect();
    let report = manager.garbage_collect(t1).await;
    let removed: Vec<RecordKey> = report.removed.iter().map(|r| r.key.clone()).collect();
    assert_eq!(removed.len(), 2, "{report:?}");
    assert!(
        report
            .removed
            .iter()
            .all(|r| r.reason == RemovalReason::Budget),
        "{report:?}"
    );
    assert_eq!(removed, planned, "the cycle removes what explain plans");
    assert!(
        matches!(report.error, Some(GcError::InvalidCapacity)),
        "{report:?}"
    );
}

/// Several image filesystems (issue 28): the thresholds apply to each. The first is
/// healthy; the second, 95 % used, gets a measured pass: in eviction order, ImageFsInfo
/// read again after each removal, until it is at or below the low threshold (80 %) or the
/// images removed add up to what its first reading asked (150 bytes). The first image
/// lives on the first filesystem (its removal frees nothing there, so the walk goes on),
/// the next two on the second; the cap stops the pass after the second (85 % used), and
/// the next cycle removes the third; the fourth stays. The dry run names the filesystem
/// and marks the candidates.
#[tokio::test]
async fn a_further_image_filesystem_over_high_is_freed_by_a_measured_pass_to_low() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t1 = UnixNanos::from_secs(20_000);
    let id = |n: u8| format!("sha256:{n:064x}");
    let (runtime, manager) = other_fs_fixture(dir.path(), 4, 100, |state| {
        state.fs = Some((100_000, 90_000));
        state.other_image_fs = vec![(1000, 50, None)];
        for n in 2u8..=4 {
            state.image_fs_of.insert(id(n), 1);
        }
    })
    .await;
    let plan = manager.plan(t1, false).await.expect("plan");
    let others = &plan.explanation.other_filesystems;
    assert_eq!(others.len(), 1, "{others:?}");
    assert_eq!(others[0].mountpoint, "/scripted-1");
    assert!(others[0].runs(), "{others:?}");
    let decisions: Vec<crate::gc::Decision> =
        plan.explanation.images.iter().map(|i| i.decision).collect();
    assert_eq!(decisions, [crate::gc::Decision::OtherFsCandidate; 4]);
    assert!(
        plan.explanation.images[0]
            .reason
            .contains("further image filesystem(s) /scripted-1"),
        "{}",
        plan.explanation.images[0].reason
    );

    let report = manager.garbage_collect(t1).await;
    assert!(report.error.is_none(), "{report:?}");
    let removed: Vec<String> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.to_string())
        .collect();
    assert_eq!(removed, [id(1), id(2)], "{report:?}");
    assert!(
        report
            .removed
            .iter()
            .all(|r| r.reason == RemovalReason::Space)
    );
    assert_eq!(runtime.state().other_image_fs, vec![(1000, 150, None)]);

    // Still at the high threshold (85 %): the next cycle's pass goes on to low.
    let report = manager.garbage_collect(UnixNanos::from_secs(30_000)).await;
    assert!(report.error.is_none(), "{report:?}");
    let removed: Vec<String> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.to_string())
        .collect();
    assert_eq!(removed, [id(3)], "{report:?}");
    assert_eq!(runtime.state().other_image_fs, vec![(1000, 250, None)]);

    // Nothing left to remove while it is still over low: the kubelet's failure.
    runtime.state().other_image_fs = vec![(1000, 0, None)];
    let report = manager.garbage_collect(UnixNanos::from_secs(40_000)).await;
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert!(
        matches!(
            report.error,
            Some(GcError::InsufficientSpace {
                usage_percent: 90,
                capacity: 1000,
                freed: 100
            })
        ),
        "{report:?}"
    );
}

/// Issue 29: a first detect held two operations per new image (a `Sight`, then a
/// `SetNames` with a second copy of the key); each new image's names now ride on its
/// sighting, and an image whose names change later gets a `SetNames` of its own.
#[tokio::test]
async fn a_first_detect_holds_one_operation_per_new_image() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = UnixNanos::from_secs(10_000);
    let store = Arc::new(Store::open(&dir.path().join("db.redb"), t0).expect("open"));
    let runtime = ScriptedRuntime::new();
    runtime.state().images = (1..=50u32)
        .map(|n| RuntimeImage {
            id: ImageId::new(format!("sha256:{n:064x}")),
            repo_tags: vec![format!("app-{n}:v1")],
            size: 10,
            ..RuntimeImage::default()
        })
        .collect();
    let manager = ImageGcManager::new(runtime.clone(), store, GcConfig::default()).expect("new");
    let count = |ops: Vec<std::borrow::Cow<'_, BatchOp>>| {
        let sights = ops
            .iter()
            .filter(|op| matches!(op.as_ref(), BatchOp::Sight { .. }))
            .count();
        let named = ops
            .iter()
            .filter(|op| matches!(op.as_ref(), BatchOp::Sight { names: Some(_), .. }))
            .count();
        let set_names = ops
            .iter()
            .filter(|op| matches!(op.as_ref(), BatchOp::SetNames { .. }))
            .count();
        (sights, named, set_names)
    };
    let settings = manager.settings();
    let (_, plan) = manager
        .observe_and_plan(&settings, t0, None)
        .await
        .expect("plan");
    assert_eq!(count(plan.batch.expanded_ops()), (50, 50, 0));
    manager.detect(t0).await.expect("detect");
    let key = runtime.state().images[6].record_key();
    assert_eq!(
        manager
            .store()
            .names(&key)
            .expect("names")
            .expect("stored")
            .repo_tags,
        vec!["app-7:v1".to_owned()],
        "written with the sighting"
    );
    // A later detect: one image's names changed, no record did.
    runtime.state().images[6].repo_tags = vec!["app-7:v2".to_owned()];
    let (_, plan) = manager
        .observe_and_plan(&settings, t0, None)
        .await
        .expect("plan");
    assert_eq!(count(plan.batch.expanded_ops()), (0, 0, 1));
}

/// A manager over `images` (id n, `size` bytes each) on a scripted runtime, detected at
/// 10 000 s, with MinAge 0; `script` sets the rest of the state.
pub(super) async fn other_fs_fixture(
    dir: &Path,
    images: u8,
    size: u64,
    script: impl FnOnce(&mut ScriptState),
) -> (ScriptedRuntime, ImageGcManager<ScriptedRuntime>) {
    let t0 = UnixNanos::from_secs(10_000);
    let store = Arc::new(Store::open(&dir.join("db.redb"), t0).expect("open"));
    let runtime = ScriptedRuntime::new();
    {
        let mut state = runtime.state();
        state.images = (1..=images)
            .map(|n| RuntimeImage {
                id: ImageId::new(format!("sha256:{n:064x}")),
                size,
                ..RuntimeImage::default()
            })
            .collect();
        script(&mut state);
    }
    let config = GcConfig {
        policy: GcPolicy {
            min_age: Duration::ZERO,
            ..GcPolicy::default()
        },
        ..GcConfig::default()
    };
    let manager = ImageGcManager::new(runtime.clone(), store, config).expect("new");
    manager.detect(t0).await.expect("detect");
    (runtime, manager)
}

/// A further image filesystem full of data that is not images (none of the images is on
/// it): the measured pass removes images adding up to what its first reading asked to
/// free (100 % used, down to 80 %: 200 bytes, two images of 100), never every image.
#[tokio::test]
async fn a_further_image_filesystem_full_of_other_data_frees_at_most_what_its_reading_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (runtime, manager) = other_fs_fixture(dir.path(), 6, 100, |state| {
        state.fs = Some((100_000, 90_000));
        state.other_image_fs = vec![(1000, 0, None)];
    })
    .await;
    let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
    assert_eq!(report.removed.len(), 2, "{report:?}");
    assert!(report.error.is_none(), "{report:?}");
    assert_eq!(runtime.state().other_image_fs, vec![(1000, 0, None)]);
}

/// The same with small images (the cap allows twenty): the pass stops after three
/// removals in a row that did not lower the filesystem's reading, and fails with the
/// kubelet's wording.
#[tokio::test]
async fn a_further_image_filesystem_pass_stops_after_three_removals_that_did_not_lower_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (runtime, manager) = other_fs_fixture(dir.path(), 10, 10, |state| {
        state.fs = Some((100_000, 90_000));
        state.other_image_fs = vec![(1000, 0, None)];
    })
    .await;
    let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
    assert_eq!(report.removed.len(), UNLOWERED_REMOVALS, "{report:?}");
    assert!(
        matches!(
            report.error,
            Some(GcError::InsufficientSpace {
                usage_percent: 100,
                capacity: 1000,
                freed: 30
            })
        ),
        "{report:?}"
    );
    assert_eq!(runtime.state().removed.len(), 3);
}

/// Further image filesystems on the device of the first or of an earlier further one
/// (containerd's snapshotters under one root) are skipped, in the cycle and in the dry
/// run: their readings are that filesystem's, which removals judged by them would never
/// lower. /scripted-1 is /scripted's device and full; /scripted-2 is healthy; /scripted-3
/// is /scripted-2's device and full. Nothing is removed.
#[tokio::test]
async fn a_further_image_filesystem_on_the_same_device_as_an_earlier_one_is_skipped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (runtime, manager) = other_fs_fixture(dir.path(), 4, 100, |state| {
        state.fs = Some((100_000, 90_000));
        state.other_image_fs = vec![(1000, 0, None), (1000, 900, None), (1000, 0, None)];
        state.fs_device = BTreeMap::from([(0, 7), (1, 7), (2, 8), (3, 8)]);
    })
    .await;
    let t1 = UnixNanos::from_secs(20_000);
    let plan = manager.plan(t1, false).await.expect("plan");
    let others = &plan.explanation.other_filesystems;
    let same: Vec<Option<&str>> = others
        .iter()
        .map(|o| o.same_filesystem_as.as_deref())
        .collect();
    assert_eq!(same, [Some("/scripted"), None, Some("/scripted-2")]);
    assert!(!others.iter().any(FsNeed::runs), "{others:?}");
    assert!(plan.removals.is_empty(), "{:?}", plan.removals);

    let report = manager.garbage_collect(t1).await;
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(report.error.is_none(), "{report:?}");
    assert!(runtime.state().removed.is_empty());
}

/// The first filesystem's walk already brought a further one to its low threshold (the
/// image it removed was there): the measured pass reads it again first and removes
/// nothing more.
#[tokio::test]
async fn a_further_image_filesystem_freed_by_the_first_walk_gets_no_removal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (runtime, manager) = other_fs_fixture(dir.path(), 3, 100, |state| {
        // 90 % used: the first walk frees 100 bytes (down to 80 %), counted by sizes.
        state.fs = Some((1000, 100));
        state.other_image_fs = vec![(1000, 100, None)];
        for n in 1u8..=3 {
            state.image_fs_of.insert(format!("sha256:{n:064x}"), 1);
        }
    })
    .await;
    let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
    let removed: Vec<String> = report
        .removed
        .iter()
        .map(|r| r.key.image_id.to_string())
        .collect();
    assert_eq!(removed, [format!("sha256:{:064x}", 1)], "{report:?}");
    assert!(report.error.is_none(), "{report:?}");
    assert_eq!(runtime.state().other_image_fs, vec![(1000, 200, None)]);
}
