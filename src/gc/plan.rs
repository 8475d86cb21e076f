//! Planning the space walk: which records the eviction walk would remove, read lazily from the
//! store's eviction index, without removing anything. The manager removes what a step plans
//! and resumes after it; benches and tools call [`plan_space_victims`] for the whole plan.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::model::RecordKey;
use crate::model::UnixNanos;
use crate::store::{EvictionKey, Store, StoreError, StoredRecord};

use super::evict::{Verdict, space_verdict};

/// One step of the space walk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpaceStep {
    /// Eligible records, oldest first.
    pub victims: Vec<StoredRecord>,
    /// Each victim's 1-based position among the index entries this step read.
    pub positions: Vec<usize>,
    /// How many index entries this step read.
    pub read: usize,
    /// The last index entry the step read; the next step resumes after it. `None` when the
    /// step read nothing.
    pub resume: Option<EvictionKey>,
    /// The entries the step read and passed over, each with why (KEP-6053's skipped images).
    pub skipped: Vec<(Verdict, RecordKey)>,
}

/// The fixed inputs of one space walk (kubelet's freeSpace).
#[derive(Clone, Copy, Debug)]
pub struct SpaceWalk<'a> {
    /// Record keys in use at the last detect.
    pub in_use: &'a BTreeSet<RecordKey>,
    /// The GC's start: images used at or after it are kept.
    pub free_time: UnixNanos,
    /// Images first detected less than this before `free_time` are kept.
    pub min_age: Duration,
    /// The walk stops once this many bytes are planned.
    pub bytes_to_free: i64,
}

impl SpaceWalk<'_> {
    /// One synchronous step of the walk over the index: starting after `after` (from the
    /// oldest entry when `None`), picks eligible records (see [`space_verdict`]) until
    /// `already_planned` plus their sizes reaches `bytes_to_free` or `max_victims` are picked.
    /// The read transaction ends when this returns.
    pub fn step(
        &self,
        store: &Store,
        after: Option<&EvictionKey>,
        already_planned: i64,
        max_victims: usize,
    ) -> Result<SpaceStep, StoreError> {
        if max_victims == 0 {
            return Ok(SpaceStep::default());
        }
        let scan = match after {
            None => store.eviction_order()?,
            Some(after) => store.eviction_order_after(after)?,
        };
        self.step_entries(scan, already_planned, max_victims)
    }

    /// [`SpaceWalk::step`] over any order of `entries` (the adaptive order's ranked list).
    pub fn step_entries(
        &self,
        entries: impl IntoIterator<Item = Result<StoredRecord, StoreError>>,
        already_planned: i64,
        max_victims: usize,
    ) -> Result<SpaceStep, StoreError> {
        let mut step = SpaceStep::default();
        if max_victims == 0 {
            return Ok(step);
        }
        let mut planned = already_planned;
        for entry in entries {
            let entry = entry?;
            step.read += 1;
            step.resume = Some(EvictionKey::of(&entry.key, &entry.record));
            let verdict = space_verdict(
                &entry.key,
                &entry.record,
                self.in_use,
                self.free_time,
                self.min_age,
            );
            if verdict != Verdict::Eligible {
                step.skipped.push((verdict, entry.key));
                continue;
            }
            planned = planned.saturating_add(to_i64(entry.record.size));
            step.victims.push(entry);
            step.positions.push(step.read);
            if planned >= self.bytes_to_free || step.victims.len() >= max_victims {
                break;
            }
        }
        Ok(step)
    }
}

/// The records a space walk at `free_time` would remove to free `bytes_to_free`, oldest
/// first, if every removal succeeded: one lazy scan of the index that stops as soon as enough
/// is planned. Removes nothing.
pub fn plan_space_victims(
    store: &Store,
    in_use: &BTreeSet<RecordKey>,
    free_time: UnixNanos,
    min_age: Duration,
    bytes_to_free: i64,
) -> Result<Vec<StoredRecord>, StoreError> {
    let walk = SpaceWalk {
        in_use,
        free_time,
        min_age,
        bytes_to_free,
    };
    walk.step(store, None, 0, usize::MAX)
        .map(|step| step.victims)
}

pub(super) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::{GcConfig, GcPolicy, ImageGcManager};
    use crate::model::{ImageRecord, RuntimeContainer, RuntimeImage};
    use crate::runtime::ScriptedRuntime;
    use crate::store::Batch;
    use std::sync::Arc;

    fn image(i: u64) -> RuntimeImage {
        RuntimeImage {
            id: crate::model::ImageId::new(format!("sha256:{i:064x}")),
            size: 1000 + i,
            ..RuntimeImage::default()
        }
    }

    /// 20 records, oldest last_used first for odd i; #3 pinned, #5 in use, #7 used at t0.
    fn fill(store: &Store, t0: UnixNanos) {
        let mut batch = Batch::new();
        for i in 0..20u64 {
            let image = image(i);
            batch.upsert(
                image.record_key(),
                ImageRecord {
                    first_detected: UnixNanos(1),
                    last_used: match i {
                        7 => t0,
                        _ if i % 2 == 1 => UnixNanos(100 - i as i64),
                        _ => UnixNanos::NEVER,
                    },
                    size: image.size,
                    pinned: i == 3,
                },
            );
        }
        assert!(store.apply(&batch).expect("apply"));
    }

    #[test]
    fn steps_resume_where_they_stopped_and_match_one_plan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t0 = UnixNanos::from_secs(10_000);
        let store = Store::open(&dir.path().join("db.redb"), t0).expect("open");
        fill(&store, t0);
        let in_use: BTreeSet<RecordKey> = [image(5).record_key()].into_iter().collect();
        let all = plan_space_victims(&store, &in_use, t0, Duration::ZERO, i64::MAX).expect("plan");
        let keys: Vec<String> = all.iter().map(|r| r.key.to_string()).collect();
        assert_eq!(
            all.len(),
            17,
            "20 less pinned, in use and used at t0: {keys:?}"
        );
        assert!(!keys.contains(&image(3).record_key().to_string()));
        // Never used first (by first_detected, then key), then by last_used.
        assert_eq!(all[0].key, image(0).record_key());
        assert_eq!(all[10].key, image(19).record_key());

        let walk = SpaceWalk {
            in_use: &in_use,
            free_time: t0,
            min_age: Duration::ZERO,
            bytes_to_free: i64::MAX,
        };
        let (mut stepped, mut resume) = (Vec::new(), None);
        loop {
            let step = walk.step(&store, resume.as_ref(), 0, 3).expect("step");
            if step.victims.is_empty() {
                break;
            }
            assert!(step.victims.len() <= 3);
            resume = step.resume;
            stepped.extend(step.victims);
        }
        assert_eq!(stepped, all);

        // A byte target stops the plan at the first victim that reaches it.
        let two = to_i64(all[0].record.size + all[1].record.size);
        let plan = plan_space_victims(&store, &in_use, t0, Duration::ZERO, two).expect("plan");
        assert_eq!(plan, all[..2].to_vec());
    }

    #[tokio::test]
    async fn the_manager_removes_what_the_plan_chooses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t0 = UnixNanos::from_secs(10_000);
        let runtime = ScriptedRuntime::new();
        {
            let mut state = runtime.state();
            state.images = (0..20).map(image).collect();
            state.containers = vec![RuntimeContainer {
                id: "c".into(),
                pod_sandbox_id: "p".into(),
                image: "x".into(),
                image_id: image(5).id,
                state: crate::model::ContainerState::Running,
                runtime_handler: String::new(),
            }];
        }
        let store = Arc::new(Store::open(&dir.path().join("db.redb"), t0).expect("open"));
        let config = GcConfig {
            policy: GcPolicy {
                min_age: Duration::ZERO,
                ..GcPolicy::default()
            },
            ..GcConfig::default()
        };
        let manager = ImageGcManager::new(runtime.clone(), store.clone(), config).expect("new");
        manager.detect(t0).await.expect("detect");
        let in_use: BTreeSet<RecordKey> = [image(5).record_key()].into_iter().collect();
        let t1 = UnixNanos::from_secs(20_000);
        let planned =
            plan_space_victims(&store, &in_use, t1, Duration::ZERO, i64::MAX).expect("plan");
        assert_eq!(planned.len(), 19);
        let report = manager.delete_unused_images(t1).await;
        assert!(report.error.is_none(), "{:?}", report.error);
        let removed: Vec<RecordKey> = report.removed.iter().map(|r| r.key.clone()).collect();
        let want: Vec<RecordKey> = planned.iter().map(|r| r.key.clone()).collect();
        assert_eq!(removed, want);
    }
}
