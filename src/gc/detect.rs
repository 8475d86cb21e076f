//! Detect: turn the runtime's image and container lists into one batch of record changes.
//! Pure: takes the records, the lists and `now`; the manager applies the batch.
//!
//! Invariants: the runtime's list is folded by record key first, the last entry of a key
//! winning (the kubelet's detectImages assigns every entry in list order, so its last one
//! stands: TestDeletePinnedImage lists the pause image pinned, then unpinned); the batch never
//! writes a record blindly: a listed image is a [`Sighting`] merged with the record as it is
//! inside the write transaction, and an unlisted record is removed only if no pull marked it
//! after the snapshot was read, so a pull committed while detect lists the runtime keeps its
//! mark.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ImageRecord, RecordKey, RuntimeContainer, RuntimeImage, Sighting, UnixNanos};
use crate::pull::reference::image_matches;
use crate::store::{Batch, meta_keys};

use super::pins::PinPatterns;

/// The runtime's images by record key, duplicates folded: the last entry of a key wins.
pub fn fold_images(images: &[RuntimeImage]) -> BTreeMap<RecordKey, &RuntimeImage> {
    images.iter().map(|i| (i.record_key(), i)).collect()
}

/// Whether a container uses `image`: its image id is the image's id or one of its repo
/// digests. The runtime handler is not compared: a container of any handler keeps the image
/// (the kubelet compares ids alone unless its RuntimeClassInImageCriApi gate is on, and a
/// record kept too long is cheaper than an image taken from a pod).
pub fn container_uses(container: &RuntimeContainer, image: &RuntimeImage) -> bool {
    let id = container.image_id.as_str();
    !id.is_empty() && (id == image.id.as_str() || image.repo_digests.iter().any(|d| d == id))
}

/// The record keys in use: the images of every container (running or not), plus the images
/// the sandbox image name refers to (matched as the runtime resolves names: see
/// [`image_matches`]).
pub fn images_in_use(
    images: &[RuntimeImage],
    containers: &[RuntimeContainer],
    sandbox_image: Option<&str>,
) -> BTreeSet<RecordKey> {
    let sandbox = sandbox_image.filter(|s| !s.is_empty());
    images
        .iter()
        .filter(|image| {
            containers.iter().any(|c| container_uses(c, image))
                || sandbox.is_some_and(|s| image_matches(s, image))
        })
        .map(RuntimeImage::record_key)
        .collect()
}

/// What one detect cycle changes.
#[derive(Debug, Default)]
pub struct DetectPlan {
    pub batch: Batch,
    /// Records after the cycle.
    pub records: usize,
    pub added: usize,
    pub removed: usize,
}

/// Plans one detect cycle at `now` against `existing`, the records as read before the runtime
/// was listed: new images get first_detected = now, images in use get last_used = now, size
/// and pinned are refreshed, and records of images the runtime no longer lists are removed.
/// Only what differs from `existing` is written, and every write merges with the record as
/// it is when the batch is applied (see the module's invariants).
pub fn plan_detect(
    existing: &BTreeMap<RecordKey, ImageRecord>,
    images: &[RuntimeImage],
    in_use: &BTreeSet<RecordKey>,
    pins: &PinPatterns,
    now: UnixNanos,
) -> DetectPlan {
    let mut plan = DetectPlan::default();
    let listed = fold_images(images);
    for (key, image) in &listed {
        let old = existing.get(key).copied();
        if old.is_none() {
            plan.added += 1;
        }
        let sighting = Sighting {
            now,
            in_use: in_use.contains(key),
            size: image.size,
            pinned: pins.pins(image),
        };
        if old != Some(ImageRecord::after_sighting(old, sighting)) {
            plan.batch.sight(key.clone(), sighting);
        }
    }
    for (key, record) in existing {
        if !listed.contains_key(key) {
            plan.batch.remove_unlisted(key.clone(), record.last_used);
            plan.removed += 1;
        }
    }
    plan.records = listed.len();
    plan.batch.stamp_if_changed(meta_keys::LAST_DETECT, now.0);
    plan
}

/// Applies a detect plan's batch to an in-memory copy of the records with the store's own
/// merge rules (the dry run's view of what the detect would leave).
pub fn apply_to_copy(records: &mut BTreeMap<RecordKey, ImageRecord>, batch: &Batch) {
    use crate::store::BatchOp;
    for op in batch.ops() {
        match op {
            BatchOp::Sight { key, sighting } => {
                let next = ImageRecord::after_sighting(records.get(key).copied(), *sighting);
                records.insert(key.clone(), next);
            }
            BatchOp::RemoveUnlisted {
                key,
                seen_last_used,
            } if records
                .get(key)
                .is_some_and(|r| r.last_used <= *seen_last_used) =>
            {
                records.remove(key);
            }
            BatchOp::Upsert { key, record } => {
                records.insert(key.clone(), *record);
            }
            BatchOp::Remove { key } => {
                records.remove(key);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerState, ImageId};

    fn image(id: &str, size: u64, pinned: bool) -> RuntimeImage {
        RuntimeImage {
            id: ImageId::new(id),
            size,
            pinned,
            ..RuntimeImage::default()
        }
    }

    fn container(image_id: &str, handler: &str) -> RuntimeContainer {
        RuntimeContainer {
            id: format!("c-{image_id}"),
            pod_sandbox_id: "sandbox".into(),
            image: image_id.into(),
            image_id: ImageId::new(image_id),
            state: ContainerState::Exited,
            runtime_handler: handler.into(),
        }
    }

    /// The kubelet's TestDeletePinnedImage lists the pause image pinned and then unpinned and
    /// expects it collected: the last entry wins, and it wins the same way on every detect.
    #[test]
    fn duplicate_list_entries_fold_last_wins_and_stay_stable_across_detects() {
        let listed = vec![image("pause", 10, true), image("pause", 20, false)];
        let mut records = BTreeMap::new();
        for cycle in 0..3 {
            let now = UnixNanos::from_secs(100 + cycle);
            let plan = plan_detect(
                &records,
                &listed,
                &BTreeSet::new(),
                &PinPatterns::default(),
                now,
            );
            apply_to_copy(&mut records, &plan.batch);
            let stored = records[&RecordKey::new("pause", "")];
            assert_eq!((stored.size, stored.pinned), (20, false), "cycle {cycle}");
            if cycle > 0 {
                assert!(plan.batch.is_empty(), "cycle {cycle} rewrote the record");
            }
        }
    }

    #[test]
    fn a_container_of_any_runtime_handler_keeps_the_image_in_use() {
        let images = vec![image("sha256:a", 1, false), image("sha256:b", 1, false)];
        let in_use = images_in_use(&images, &[container("sha256:a", "runc")], None);
        assert_eq!(
            in_use.into_iter().collect::<Vec<_>>(),
            vec![RecordKey::new("sha256:a", "")]
        );
    }

    #[test]
    fn a_container_naming_a_repo_digest_keeps_the_image_in_use() {
        let mut listed = image("sha256:a", 1, false);
        listed.repo_digests = vec!["docker.io/library/busybox@sha256:feed".into()];
        let in_use = images_in_use(
            &[listed],
            &[container("docker.io/library/busybox@sha256:feed", "")],
            None,
        );
        assert!(in_use.contains(&RecordKey::new("sha256:a", "")));
    }

    #[test]
    fn an_unlisted_record_marked_after_the_snapshot_is_not_removed() {
        let key = RecordKey::new("sha256:a", "");
        let seen = ImageRecord {
            first_detected: UnixNanos::from_secs(1),
            last_used: UnixNanos::from_secs(2),
            size: 1,
            pinned: false,
        };
        let existing = BTreeMap::from([(key.clone(), seen)]);
        let plan = plan_detect(
            &existing,
            &[],
            &BTreeSet::new(),
            &PinPatterns::default(),
            UnixNanos::from_secs(10),
        );
        // A pull marked the image after the snapshot.
        let mut now = BTreeMap::from([(
            key.clone(),
            ImageRecord {
                last_used: UnixNanos::from_secs(5),
                ..seen
            },
        )]);
        apply_to_copy(&mut now, &plan.batch);
        assert!(now.contains_key(&key));
        // Unmarked, it goes.
        let mut unchanged = existing.clone();
        apply_to_copy(&mut unchanged, &plan.batch);
        assert!(unchanged.is_empty());
    }
}
