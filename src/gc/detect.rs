//! Detect: turn the runtime's image and container lists into one batch of record changes.
//! Pure: takes the records, the lists and `now`; the manager applies the batch.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ImageRecord, RecordKey, RuntimeContainer, RuntimeImage, UnixNanos};
use crate::store::{Batch, meta_keys};

use super::pins::PinPatterns;

/// The record keys in use: the images of every container (running or not), plus the images
/// the sandbox image name refers to.
pub fn images_in_use(
    images: &[RuntimeImage],
    containers: &[RuntimeContainer],
    sandbox_image: Option<&str>,
) -> BTreeSet<RecordKey> {
    let mut in_use: BTreeSet<RecordKey> = containers
        .iter()
        .map(|c| RecordKey {
            image_id: c.image_id.clone(),
            runtime_handler: c.runtime_handler.clone(),
        })
        .collect();
    if let Some(sandbox) = sandbox_image.filter(|s| !s.is_empty()) {
        for image in images {
            let named = image.id.as_str() == sandbox
                || image.repo_tags.iter().any(|t| t == sandbox)
                || image.repo_digests.iter().any(|d| d == sandbox);
            if named {
                in_use.insert(image.record_key());
            }
        }
    }
    in_use
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

/// Plans one detect cycle at `now`: new images get first_detected = now, images in use get
/// last_used = now, size and pinned are refreshed, and records of images the runtime no
/// longer lists are removed.
pub fn plan_detect(
    existing: &BTreeMap<RecordKey, ImageRecord>,
    images: &[RuntimeImage],
    in_use: &BTreeSet<RecordKey>,
    pins: &PinPatterns,
    now: UnixNanos,
) -> DetectPlan {
    let mut plan = DetectPlan::default();
    let mut current: BTreeSet<RecordKey> = BTreeSet::new();
    for image in images {
        let key = image.record_key();
        let old = existing.get(&key);
        if old.is_none() && !current.contains(&key) {
            plan.added += 1;
        }
        let mut record = old.copied().unwrap_or(ImageRecord {
            first_detected: now,
            last_used: UnixNanos::NEVER,
            size: 0,
            pinned: false,
        });
        if in_use.contains(&key) {
            record.last_used = now;
        }
        record.size = image.size;
        record.pinned = pins.pins(image);
        if old != Some(&record) {
            plan.batch.upsert(key.clone(), record);
        }
        current.insert(key);
    }
    for key in existing.keys() {
        if !current.contains(key) {
            plan.batch.remove(key.clone());
            plan.removed += 1;
        }
    }
    plan.records = current.len();
    plan.batch.stamp_if_changed(meta_keys::LAST_DETECT, now.0);
    plan
}
