//! The map-based detect this crate used before the streaming one ([`super::plan_detect`]):
//! every record in a map and every listed key in another. Kept, unchanged, as the reference
//! the streaming detect is tested against (the same batch, op for op, at every n) and as the
//! bench's in-memory baseline (`detect_overhead_100k`). Not used by the agent.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    FUTURE_STAMP_TOLERANCE, ImageRecord, RecordKey, RuntimeImage, Sighting, UnixNanos,
};
use crate::store::meta_keys;

use super::DetectPlan;
use crate::gc::PinPatterns;

/// The runtime's images by record key, duplicates folded: the last entry of a key wins.
pub fn fold_images(images: &[RuntimeImage]) -> BTreeMap<RecordKey, &RuntimeImage> {
    images.iter().map(|i| (i.record_key(), i)).collect()
}

/// Plans one detect cycle at `now` against `existing`, the records as read before the runtime
/// was listed: new images get first_detected = now, images in use get last_used = now, size
/// and pinned are refreshed, and records of images the runtime no longer lists are removed.
/// Only what differs from `existing` is written, and every write merges with the record as
/// it is when the batch is applied (see the module's invariants). `last_detect` is the stored
/// time of the last detect, if any; stamps in the future and a clock that went back are
/// handled as the module says.
pub fn plan_detect(
    existing: &BTreeMap<RecordKey, ImageRecord>,
    last_detect: Option<UnixNanos>,
    images: &[RuntimeImage],
    in_use: &BTreeSet<RecordKey>,
    pins: &PinPatterns,
    now: UnixNanos,
) -> DetectPlan {
    plan_detect_with_uses(
        existing,
        last_detect,
        images,
        in_use,
        &BTreeMap::new(),
        pins,
        now,
    )
}

/// [`plan_detect`] with uses recorded elsewhere (the kubelet's pulled records): `used_at`
/// holds, by key, a time the image was used; it raises last_used up to `now` at most, never
/// lowering it (the store's merge takes the later time). A time later than `now` +
/// [`FUTURE_STAMP_TOLERANCE`] is ignored (a clock that was ahead), one within it counts as
/// `now`.
pub fn plan_detect_with_uses(
    existing: &BTreeMap<RecordKey, ImageRecord>,
    last_detect: Option<UnixNanos>,
    images: &[RuntimeImage],
    in_use: &BTreeSet<RecordKey>,
    used_at: &BTreeMap<RecordKey, UnixNanos>,
    pins: &PinPatterns,
    now: UnixNanos,
) -> DetectPlan {
    let mut plan = DetectPlan::default();
    let limit = now.saturating_add(FUTURE_STAMP_TOLERANCE);
    let listed = fold_images(images);
    for (key, image) in &listed {
        let old = existing.get(key).copied();
        if old.is_none() {
            plan.added += 1;
        }
        let mut base = old;
        if let Some(future) = old.filter(|r| r.has_stamp_after(limit)) {
            plan.batch.clamp_future(key.clone(), limit, now);
            plan.clamped += 1;
            base = Some(future.clamped(limit, now));
        }
        let sighting = Sighting {
            now,
            in_use: in_use.contains(key),
            size: image.size,
            pinned: pins.pins(image),
            used_at: used_at
                .get(key)
                .filter(|t| **t <= limit)
                .map_or(UnixNanos::NEVER, |t| (*t).min(now)),
        };
        if old != Some(ImageRecord::after_sighting(base, sighting)) {
            plan.batch.sight(key.clone(), sighting);
        }
    }
    for (key, record) in existing {
        if !listed.contains_key(key) {
            // Still recorded but no longer listed: someone else removed it (imagekeeper deletes
            // its own removals' records at once), journaled as an external removal.
            plan.batch
                .remove_unlisted_journaled(key.clone(), record.last_used, now);
            plan.removed += 1;
        }
    }
    plan.records = listed.len();
    plan.clock_went_back_from = last_detect.filter(|&stored| limit < stored);
    if plan.clock_went_back_from.is_some() {
        plan.batch.set_meta(meta_keys::LAST_DETECT, now.0);
    } else {
        plan.batch.stamp_if_changed(meta_keys::LAST_DETECT, now.0);
    }
    plan
}
