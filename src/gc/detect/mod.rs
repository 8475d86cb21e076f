//! Detect: turn the runtime's image and container lists into one batch of record changes.
//! Pure: takes the records, the lists and `now`; the manager applies the batch.
//!
//! Streaming: the runtime's list is sorted once by record key ([`ListedImages`]) and merged
//! with the records as an iterator in key order (the store's lazy `records_in_key_order`
//! scan), so a detect holds the runtime's list, the keys in use and the batch (the
//! differences), never every record: one record at a time. A scan that yields a key not
//! after the previous one fails the detect ([`GcError::UnorderedRecords`]) rather than
//! merging wrongly. The batch is exactly the one the map-based [`mod@reference`] plans, op for
//! op: sightings and clamps in key order, then the unlisted records' removals in key order,
//! then `last_detect`.
//!
//! Invariants: the runtime's list is folded by record key first, the last entry of a key
//! winning (the kubelet's detectImages assigns every entry in list order, so its last one
//! stands: TestDeletePinnedImage lists the pause image pinned, then unpinned); the batch never
//! writes a record blindly: a listed image is a [`Sighting`] merged with the record as it is
//! inside the write transaction, and an unlisted record is removed only if no pull marked it
//! after the snapshot was read, so a pull committed while detect lists the runtime keeps its
//! mark.
//!
//! A clock that was ahead leaves stamps in the future, which would keep an image "too young"
//! or "used recently" until the clock caught up (years, after a bad RTC). A listed record with
//! a stamp later than `now` + [`FUTURE_STAMP_TOLERANCE`] gets a [`BatchOp::ClampFuture`] before
//! its sighting: the stamp becomes `now` (judged again inside the write transaction, so a
//! pull's mark at the real time is never clamped); stamps within the tolerance and every other
//! merge rule are left as they are. `last_detect` is the time of the latest detect as its clock
//! said, so it moves back with the clock: a detect whose `now` is more than the tolerance
//! before the stored `last_detect` reports the clock going back and writes its own time even
//! when nothing else changed (keeping the later value would flag every detect until the clock
//! caught up, and `inspect explain` takes the records whose last_used equals `last_detect` as
//! the ones in use at it).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    FUTURE_STAMP_TOLERANCE, ImageLike, ImageRecord, ImageRef, RecordKey, RuntimeContainer,
    Sighting, UnixNanos,
};
use crate::reference::image_matches;
use crate::store::{Batch, BatchOp, ScannedRecord, StoredRecord, meta_keys};

use super::GcError;
use super::pins::PinPatterns;

mod listed;
#[doc(hidden)]
pub mod reference;

pub use listed::ListedImages;

/// Whether a container uses `image`: its image id is the image's id or one of its repo
/// digests. The runtime handler is not compared: a container of any handler keeps the image
/// (the kubelet compares ids alone unless its RuntimeClassInImageCriApi gate is on, and a
/// record kept too long is cheaper than an image taken from a pod).
pub fn container_uses(container: &RuntimeContainer, image: &impl ImageLike) -> bool {
    let id = container.image_id.as_str();
    !id.is_empty() && (id == image.id() || image.repo_digests().any(|d| d == id))
}

/// The record keys in use: the images of every container (running or not), the images
/// mounted as image volumes (`image_volumes`: the names the running containers' status mounts
/// give, see [`volume_uses`]), plus the images the sandbox image name refers to (matched as
/// the runtime resolves names: see [`image_matches`]).
pub fn images_in_use<'c, I: ImageLike>(
    images: impl IntoIterator<Item = I>,
    containers: impl IntoIterator<Item = &'c RuntimeContainer>,
    image_volumes: &[String],
    sandbox_image: Option<&str>,
) -> BTreeSet<RecordKey> {
    let sandbox = sandbox_image.filter(|s| !s.is_empty());
    // The containers' image ids, once: `container_uses` for every (container, image) pair
    // without the pairs (an id matches the image's id or one of its repo digests). Every
    // listed image's id and digests are looked up here, so the set hashes with foldhash (seeded
    // per process, as std's SipHash is, and several times faster on these 71-byte ids).
    let container_ids: foldhash::HashSet<&str> = containers
        .into_iter()
        .map(|c| c.image_id.as_str())
        .filter(|id| !id.is_empty())
        .collect();
    images
        .into_iter()
        .filter(|image| {
            container_ids.contains(image.id())
                || image.repo_digests().any(|d| container_ids.contains(d))
                || image_volumes.iter().any(|v| volume_uses(v, image))
                || sandbox.is_some_and(|s| image_matches(s, image))
        })
        .map(|image| image.record_key())
        .collect()
}

/// Whether an image volume named `name` mounts `image`. The kubelet compares the mount's
/// `image.image` with the image id (pkg/kubelet/images/image_gc_manager.go, detectImages'
/// image-volume pass over the containers' GetContainerStatus mounts, added with
/// ImageVolume in kubernetes#125663); a runtime may also name it by a repo digest or tag, so
/// any name that resolves to the image keeps it (a record kept too long is cheaper than a
/// volume taken from a pod).
pub fn volume_uses(name: &str, image: &impl ImageLike) -> bool {
    image_matches(name, image)
}

/// What one detect cycle changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DetectPlan {
    pub batch: Batch,
    /// Records after the cycle.
    pub records: usize,
    pub added: usize,
    pub removed: usize,
    /// Listed records with a stamp later than `now` + [`FUTURE_STAMP_TOLERANCE`], which the
    /// batch clamps to `now`.
    pub clamped: usize,
    /// The stored `last_detect`, when `now` is more than [`FUTURE_STAMP_TOLERANCE`] before
    /// it: the clock went back.
    pub clock_went_back_from: Option<UnixNanos>,
    /// The heartbeat and unwatched stretches after this detect, which the manager writes in
    /// the same batch (`WatchHistory::after_detect`; `plan_detect` leaves the default).
    pub watch: super::WatchHistory,
    /// The stretch this detect found unwatched, if any.
    pub unwatched: Option<super::Unwatched>,
}

/// What a detect plans from, besides the records and the runtime's images.
#[derive(Clone, Copy, Debug)]
pub struct DetectInput<'a> {
    /// The stored time of the last detect, if any.
    pub last_detect: Option<UnixNanos>,
    /// The record keys in use (see [`images_in_use`]).
    pub in_use: &'a BTreeSet<RecordKey>,
    /// Uses recorded elsewhere (the kubelet's pulled records): by key, a time the image was
    /// used; it raises last_used up to `now` at most, never lowering it (the store's merge
    /// takes the later time). A time later than `now` + [`FUTURE_STAMP_TOLERANCE`] is ignored
    /// (a clock that was ahead), one within it counts as `now`.
    pub used_at: &'a BTreeMap<RecordKey, UnixNanos>,
    pub pins: &'a PinPatterns,
    pub now: UnixNanos,
}

/// Plans one detect cycle at `input.now` by merging `records` (the records as read before the
/// runtime was listed, in key order, one at a time) with `listed`: new images get
/// first_detected = now, images in use get last_used = now, size and pinned are refreshed,
/// and records of images the runtime no longer lists are removed. Only what differs from the
/// records is written, and every write merges with the record as it is when the batch is
/// applied (see the module's invariants). Stamps in the future and a clock that went back
/// are handled as the module says. Fails with the records' first error, or when they are not
/// in strictly increasing key order.
pub fn plan_detect<R: MergedRecord, E>(
    records: impl IntoIterator<Item = Result<R, E>>,
    listed: &ListedImages,
    input: &DetectInput<'_>,
) -> Result<DetectPlan, GcError>
where
    GcError: From<E>,
{
    let now = input.now;
    let mut plan = DetectPlan::default();
    let limit = now.saturating_add(FUTURE_STAMP_TOLERANCE);
    let mut records = Cursor::start(records.into_iter())?;
    if records.peek().is_none() {
        // A first detect (no record yet): a sighting per listed image, held at that length
        // rather than grown by doubling (issue 40: the first detect of 100k images is the
        // replay's peak), each 40 bytes pointing into the list (`Batch::sight_listed`).
        plan.batch
            .reserve_sightings(listed.as_listed(), listed.len());
    }
    // Unlisted records' removals, written after every sighting as the reference orders them.
    let mut unlisted: Vec<(RecordKey, UnixNanos)> = Vec::new();
    // The keys in use and the uses recorded elsewhere, walked beside the list (all three in
    // key order): one comparison or two per image instead of a tree lookup of its key.
    let mut in_use = input.in_use.iter().peekable();
    let mut used_at = input.used_at.iter().peekable();
    for (position, image) in listed.iter_with_positions() {
        // One comparison per key passed or taken (a key equal to the image's is compared
        // once, not once to pass and again to take).
        let image_in_use = take_equal(&mut in_use, |k| k, image).is_some();
        let image_used_at = take_equal(&mut used_at, |(k, _)| k, image).map(|(_, t)| *t);
        let stored = records.take_listed(image, &mut unlisted)?;
        let old = stored.as_ref().map(MergedRecord::record);
        let used_at = image_used_at
            .filter(|t| *t <= limit)
            .map_or(UnixNanos::NEVER, |t| t.min(now));
        let sighting = Sighting {
            now,
            in_use: image_in_use,
            size: image.size(),
            pinned: input.pins.pins(&image),
            used_at,
        };
        plan_sighting(&mut plan, listed, position, old, sighting, limit);
    }
    while let Some(r) = records.pop()? {
        unlisted.push((r.key(), r.record().last_used));
    }
    for (key, last_used) in unlisted {
        // Still recorded but no longer listed: someone else removed it (imagekeeper deletes
        // its own removals' records at once), journaled as an external removal.
        plan.batch.remove_unlisted_journaled(key, last_used, now);
        plan.removed += 1;
    }
    plan.records = listed.len();
    plan.clock_went_back_from = input.last_detect.filter(|&stored| limit < stored);
    if plan.clock_went_back_from.is_some() {
        plan.batch.set_meta(meta_keys::LAST_DETECT, now.0);
    } else {
        plan.batch.stamp_if_changed(meta_keys::LAST_DETECT, now.0);
    }
    Ok(plan)
}

/// Writes the sighting of the listed image at `position` when it changes its record `old`
/// (the image's key is the stored record's: the batch reads it from the list, so no key is
/// copied); a record stamped after `limit` is clamped to it.
fn plan_sighting(
    plan: &mut DetectPlan,
    listed: &ListedImages,
    position: usize,
    old: Option<ImageRecord>,
    sighting: Sighting,
    limit: UnixNanos,
) {
    if old.is_none() {
        plan.added += 1;
    }
    let mut base = old;
    let mut clamp = None;
    if let Some(future) = old.filter(|r| r.has_stamp_after(limit)) {
        clamp = Some(limit);
        plan.clamped += 1;
        base = Some(future.clamped(limit, sighting.now));
    }
    if clamp.is_some() || old != Some(ImageRecord::after_sighting(base, sighting)) {
        let added = plan
            .batch
            .sight_listed(listed.as_listed(), position, clamp, sighting);
        debug_assert!(added, "a listed position is inside its list");
    }
}

/// Advances `keys` (in key order) past the keys before `image`'s and takes the one equal to
/// it, if any: one comparison per key passed or taken.
fn take_equal<'k, T: Copy>(
    keys: &mut std::iter::Peekable<impl Iterator<Item = T>>,
    key: impl Fn(T) -> &'k RecordKey,
    image: ImageRef<'_>,
) -> Option<T> {
    while let Some(&k) = keys.peek() {
        match listed::compare(key(k), image) {
            Ordering::Less => {
                keys.next();
            }
            Ordering::Equal => return keys.next(),
            Ordering::Greater => return None,
        }
    }
    None
}

/// A stored record as detect's merge reads it: its key as (image id, runtime handler) bytes,
/// compared with the listed keys in place, and its record; an owned key is built only for a
/// record the batch writes. The store's in-place scan ([`ScannedRecord`]) and a decoded
/// [`StoredRecord`] answer alike.
pub trait MergedRecord {
    /// The key's (image id, runtime handler) as UTF-8 bytes, ordered as [`RecordKey`] is.
    fn key_bytes(&self) -> (&[u8], &[u8]);
    fn record(&self) -> ImageRecord;
    /// The key, owned.
    fn key(&self) -> RecordKey;
}

impl MergedRecord for StoredRecord {
    fn key_bytes(&self) -> (&[u8], &[u8]) {
        listed::borrowed(&self.key)
    }
    fn record(&self) -> ImageRecord {
        self.record
    }
    fn key(&self) -> RecordKey {
        self.key.clone()
    }
}

impl MergedRecord for ScannedRecord {
    fn key_bytes(&self) -> (&[u8], &[u8]) {
        ScannedRecord::key_bytes(self)
    }
    fn record(&self) -> ImageRecord {
        self.record
    }
    fn key(&self) -> RecordKey {
        ScannedRecord::key(self)
    }
}

/// The records' iterator with one record looked ahead, checking that keys strictly increase.
struct Cursor<I, R> {
    records: I,
    head: Option<R>,
}

impl<R: MergedRecord, E, I: Iterator<Item = Result<R, E>>> Cursor<I, R>
where
    GcError: From<E>,
{
    fn start(mut records: I) -> Result<Cursor<I, R>, GcError> {
        let head = records.next().transpose()?;
        Ok(Cursor { records, head })
    }

    fn peek(&self) -> Option<&R> {
        self.head.as_ref()
    }

    /// Passes the records before `image`'s key (not listed: each goes to `unlisted` with its
    /// last use) and takes the one with its key, if any.
    fn take_listed(
        &mut self,
        image: ImageRef<'_>,
        unlisted: &mut Vec<(RecordKey, UnixNanos)>,
    ) -> Result<Option<R>, GcError> {
        while let Some(r) = self.peek() {
            match listed::compare_bytes(r.key_bytes(), image) {
                Ordering::Less => {
                    if let Some(r) = self.pop()? {
                        unlisted.push((r.key(), r.record().last_used));
                    }
                }
                Ordering::Equal => return self.pop(),
                Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    /// Takes the record looked at and looks at the next one.
    fn pop(&mut self) -> Result<Option<R>, GcError> {
        let Some(current) = self.head.take() else {
            return Ok(None);
        };
        self.head = self.records.next().transpose()?;
        if let Some(next) = &self.head
            && next.key_bytes() <= current.key_bytes()
        {
            return Err(GcError::UnorderedRecords {
                previous: current.key(),
                next: next.key(),
            });
        }
        Ok(Some(current))
    }
}

/// Applies a detect plan's batch to an in-memory copy of the records with the store's own
/// merge rules (the dry run's view of what the detect would leave).
pub fn apply_to_copy(records: &mut BTreeMap<RecordKey, ImageRecord>, batch: &Batch) {
    for op in batch.expanded_ops() {
        match op.as_ref() {
            BatchOp::Sight { key, sighting, .. } => {
                let next = ImageRecord::after_sighting(records.get(key).copied(), *sighting);
                records.insert(key.clone(), next);
            }
            BatchOp::RemoveUnlisted {
                key,
                seen_last_used,
                ..
            } if records
                .get(key)
                .is_some_and(|r| r.last_used <= *seen_last_used) =>
            {
                records.remove(key);
            }
            BatchOp::ClampFuture { key, limit, now } => {
                if let Some(record) = records.get_mut(key) {
                    *record = record.clamped(*limit, *now);
                }
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
mod tests;
