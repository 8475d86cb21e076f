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

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::model::{
    FUTURE_STAMP_TOLERANCE, ImageLike, ImageRecord, RecordKey, RuntimeContainer, Sighting,
    UnixNanos,
};
use crate::reference::image_matches;
use crate::store::{Batch, BatchOp, StoredRecord, meta_keys};

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
    // without the pairs (an id matches the image's id or one of its repo digests).
    let container_ids: HashSet<&str> = containers
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
pub fn plan_detect<E>(
    records: impl IntoIterator<Item = Result<StoredRecord, E>>,
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
    // Unlisted records' removals, written after every sighting as the reference orders them.
    let mut unlisted: Vec<(RecordKey, UnixNanos)> = Vec::new();
    for image in listed.iter() {
        // Records before this image's key are not listed.
        while records
            .peek()
            .is_some_and(|r| listed::compare(&r.key, image).is_lt())
        {
            if let Some(r) = records.pop()? {
                unlisted.push((r.key, r.record.last_used));
            }
        }
        let stored = if records
            .peek()
            .is_some_and(|r| listed::compare(&r.key, image).is_eq())
        {
            records.pop()?
        } else {
            None
        };
        let (key, old) = match stored {
            Some(r) => (r.key, Some(r.record)),
            None => {
                plan.added += 1;
                (image.record_key(), None)
            }
        };
        let mut base = old;
        if let Some(future) = old.filter(|r| r.has_stamp_after(limit)) {
            plan.batch.clamp_future(key.clone(), limit, now);
            plan.clamped += 1;
            base = Some(future.clamped(limit, now));
        }
        let sighting = Sighting {
            now,
            in_use: input.in_use.contains(&key),
            size: image.size(),
            pinned: input.pins.pins(&image),
            used_at: input
                .used_at
                .get(&key)
                .filter(|t| **t <= limit)
                .map_or(UnixNanos::NEVER, |t| (*t).min(now)),
        };
        if old != Some(ImageRecord::after_sighting(base, sighting)) {
            plan.batch.sight(key, sighting);
        }
    }
    while let Some(r) = records.pop()? {
        unlisted.push((r.key, r.record.last_used));
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

/// The records' iterator with one record looked ahead, checking that keys strictly increase.
struct Cursor<I> {
    records: I,
    head: Option<StoredRecord>,
}

impl<E, I: Iterator<Item = Result<StoredRecord, E>>> Cursor<I>
where
    GcError: From<E>,
{
    fn start(mut records: I) -> Result<Cursor<I>, GcError> {
        let head = records.next().transpose()?;
        Ok(Cursor { records, head })
    }

    fn peek(&self) -> Option<&StoredRecord> {
        self.head.as_ref()
    }

    /// Takes the record looked at and looks at the next one.
    fn pop(&mut self) -> Result<Option<StoredRecord>, GcError> {
        let Some(current) = self.head.take() else {
            return Ok(None);
        };
        self.head = self.records.next().transpose()?;
        if let Some(next) = &self.head
            && next.key <= current.key
        {
            return Err(GcError::UnorderedRecords {
                previous: current.key,
                next: next.key.clone(),
            });
        }
        Ok(Some(current))
    }
}

/// Applies a detect plan's batch to an in-memory copy of the records with the store's own
/// merge rules (the dry run's view of what the detect would leave).
pub fn apply_to_copy(records: &mut BTreeMap<RecordKey, ImageRecord>, batch: &Batch) {
    for op in batch.ops() {
        match op {
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
mod tests {
    use super::*;
    use crate::model::RuntimeImage;
    use crate::model::{ContainerState, ImageId};

    /// The streaming planner over a map's records (in key order, as the store scans them).
    fn plan_from_map(
        existing: &BTreeMap<RecordKey, ImageRecord>,
        last_detect: Option<UnixNanos>,
        images: &[RuntimeImage],
        in_use: &BTreeSet<RecordKey>,
        pins: &PinPatterns,
        now: UnixNanos,
    ) -> DetectPlan {
        let records = existing.iter().map(|(key, record)| {
            Ok::<_, GcError>(StoredRecord {
                key: key.clone(),
                record: *record,
            })
        });
        let input = DetectInput {
            last_detect,
            in_use,
            used_at: &BTreeMap::new(),
            pins,
            now,
        };
        plan_detect(records, &ListedImages::new(images.to_vec()), &input).expect("in key order")
    }

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
            let plan = plan_from_map(
                &records,
                None,
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
        let in_use = images_in_use(&images, &[container("sha256:a", "runc")], &[], None);
        assert_eq!(
            in_use.into_iter().collect::<Vec<_>>(),
            vec![RecordKey::new("sha256:a", "")]
        );
    }

    /// An image volume keeps its image whether the mount names it by id, by repo digest or by
    /// tag; a name that resolves to no listed image keeps nothing.
    #[test]
    fn an_image_volume_keeps_the_image_it_names_in_use() {
        let digest = "sha256:5f3ca9e4d82e32203c2fafb410dfae9c8047bc6ebe57d642fe264d479e152955";
        let mut by_digest = image("sha256:b", 1, false);
        by_digest.repo_digests = vec![format!("registry.local/b@{digest}")];
        let mut by_tag = image("sha256:c", 1, false);
        by_tag.repo_tags = vec!["registry.local/c:1".into()];
        let images = vec![
            image("sha256:a", 1, false),
            by_digest,
            by_tag,
            image("sha256:d", 1, false),
        ];
        let volumes = [
            "sha256:a".to_string(),
            format!("registry.local/b@{digest}"),
            "registry.local/c:1".to_string(),
            "registry.local/missing:1".to_string(),
        ];
        let in_use = images_in_use(&images, &[], &volumes, None);
        let ids: Vec<&str> = in_use.iter().map(|k| k.image_id.as_str()).collect();
        assert_eq!(ids, ["sha256:a", "sha256:b", "sha256:c"]);
    }

    #[test]
    fn a_container_naming_a_repo_digest_keeps_the_image_in_use() {
        let mut listed = image("sha256:a", 1, false);
        listed.repo_digests = vec!["docker.io/library/busybox@sha256:feed".into()];
        let in_use = images_in_use(
            &[listed],
            &[container("docker.io/library/busybox@sha256:feed", "")],
            &[],
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
        let plan = plan_from_map(
            &existing,
            None,
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

    const HOUR: i64 = 3600;
    const YEAR: i64 = 365 * 24 * HOUR;

    fn stamped(first: i64, last: i64) -> ImageRecord {
        ImageRecord {
            first_detected: UnixNanos::from_secs(first),
            last_used: UnixNanos::from_secs(last),
            size: 1,
            pinned: false,
        }
    }

    /// Data-driven: (stored first_detected, stored last_used, in use now) -> clamped?, the
    /// record after the detect at `now` = 1000 s (tolerance 10 min).
    #[test]
    fn stamps_beyond_the_tolerance_are_clamped_to_now_and_the_rest_merge_as_before() {
        let now = 1_000;
        let cases = [
            // A clock a year ahead stamped both: both come back to now.
            ((now + YEAR, now + YEAR), false, true, (now, now)),
            // Used a year ahead, first seen long ago: last_used comes back, first stays.
            ((10, now + YEAR), false, true, (10, now)),
            // In use now as well: last_used is now either way.
            ((10, now + YEAR), true, true, (10, now)),
            // Within the tolerance: not clamped; last_used keeps its (future) mark, and
            // first_detected merges to now as it always did (min).
            (
                (now + 5 * 60, now + 5 * 60),
                false,
                false,
                (now, now + 5 * 60),
            ),
            // Exactly at the tolerance: not clamped.
            ((10, now + 10 * 60), false, false, (10, now + 10 * 60)),
            // One second past it: clamped.
            ((10, now + 10 * 60 + 1), false, true, (10, now)),
            // Ordinary stamps: untouched.
            ((10, 20), false, false, (10, 20)),
        ];
        for ((first, last), in_use, clamped, (want_first, want_last)) in cases {
            let key = RecordKey::new("sha256:a", "");
            let mut records = BTreeMap::from([(key.clone(), stamped(first, last))]);
            let used = if in_use {
                BTreeSet::from([key.clone()])
            } else {
                BTreeSet::new()
            };
            let plan = plan_from_map(
                &records,
                None,
                &[image("sha256:a", 1, false)],
                &used,
                &PinPatterns::default(),
                UnixNanos::from_secs(now),
            );
            let case = format!("stored ({first}, {last}), in use {in_use}");
            assert_eq!(plan.clamped, usize::from(clamped), "{case}");
            apply_to_copy(&mut records, &plan.batch);
            assert_eq!(records[&key], stamped(want_first, want_last), "{case}");
        }
    }

    /// The choice for a clamped stamp: it becomes the detect's `now`, which the kubelet's
    /// freeSpace rule (`lastUsed` equal to or after freeTime: used too recently) reads as a
    /// use in this cycle: the GC whose detect clamps it keeps it, the next one may take it.
    /// (Clamping to just before `now` would leave it removable in the cycle that found it.)
    #[test]
    fn a_clamped_stamp_protects_its_image_for_the_cycle_that_clamps_it_only() {
        use crate::gc::{Verdict, space_verdict};
        let key = RecordKey::new("sha256:a", "");
        let now = UnixNanos::from_secs(1_000);
        let mut records = BTreeMap::from([(key.clone(), stamped(10, 1_000 + YEAR))]);
        let plan = plan_from_map(
            &records,
            None,
            &[image("sha256:a", 1, false)],
            &BTreeSet::new(),
            &PinPatterns::default(),
            now,
        );
        apply_to_copy(&mut records, &plan.batch);
        let record = records[&key];
        assert_eq!(record.last_used, now);
        let verdict = |free_time| {
            space_verdict(
                &key,
                &record,
                &BTreeSet::new(),
                free_time,
                std::time::Duration::ZERO,
            )
        };
        assert_eq!(verdict(now), Verdict::UsedTooRecently);
        assert_eq!(verdict(UnixNanos(now.0 + 1)), Verdict::Eligible);
    }

    /// The clamp is judged again on the record as it is when the batch is applied: a pull
    /// that marked the image at the real time after detect's snapshot keeps its mark.
    #[test]
    fn a_mark_made_after_the_snapshot_is_not_clamped() {
        let key = RecordKey::new("sha256:a", "");
        let now = UnixNanos::from_secs(1_000);
        let snapshot = BTreeMap::from([(key.clone(), stamped(10, 1_000 + YEAR))]);
        let plan = plan_from_map(
            &snapshot,
            None,
            &[image("sha256:a", 1, false)],
            &BTreeSet::new(),
            &PinPatterns::default(),
            now,
        );
        assert_eq!(plan.clamped, 1);
        let mut marked = BTreeMap::from([(key.clone(), stamped(10, 1_002))]);
        apply_to_copy(&mut marked, &plan.batch);
        assert_eq!(marked[&key].last_used, UnixNanos::from_secs(1_002));
    }

    /// A detect more than the tolerance before the stored last_detect: the clock went back.
    /// last_detect follows the clock even when nothing else changes; a smaller gap is no
    /// event and a detect that changes nothing still writes nothing.
    #[test]
    fn a_detect_before_the_stored_last_detect_reports_the_clock_going_back_and_moves_it_back() {
        let now = UnixNanos::from_secs(1_000);
        let cases = [
            (Some(1_000 + HOUR), true),
            (Some(1_000 + 10 * 60 + 1), true),
            (Some(1_000 + 10 * 60), false),
            (Some(1_000 + 5 * 60), false),
            (Some(900), false),
            (None, false),
        ];
        for (stored, went_back) in cases {
            let plan = plan_from_map(
                &BTreeMap::new(),
                stored.map(UnixNanos::from_secs),
                &[],
                &BTreeSet::new(),
                &PinPatterns::default(),
                now,
            );
            let case = format!("stored last_detect {stored:?}");
            assert_eq!(
                plan.clock_went_back_from,
                stored.filter(|_| went_back).map(UnixNanos::from_secs),
                "{case}"
            );
            let writes_last_detect = plan.batch.ops().iter().any(|op| {
                matches!(op, BatchOp::SetMeta { name, value }
                    if name == meta_keys::LAST_DETECT && *value == now.0)
            });
            assert_eq!(writes_last_detect, went_back, "{case}");
            assert_eq!(plan.batch.is_empty(), !went_back, "{case}");
        }
    }

    /// Randomized (fixed seeds, n from 0 to 2,000): the streaming detect plans exactly the
    /// batch the map-based reference plans, op for op, with the same counts, over records and
    /// lists that overlap partly, duplicate entries, several runtime handlers, images in use,
    /// kubelet uses (past, within and beyond the tolerance), pins, runtime pins, stamps in the
    /// future and a stored last_detect before or after `now`; and both leave the same records.
    #[test]
    fn streaming_detect_plans_exactly_what_the_map_based_reference_plans() {
        let pins = PinPatterns::new(vec!["registry.local/pinned/*".into()]);
        let now = UnixNanos::from_secs(1_000_000);
        for seed in 0..24u64 {
            for n in [0usize, 1, 2, 7, 60, 500, 2_000] {
                let mut rng = fastrand::Rng::with_seed(seed.wrapping_mul(7919) ^ n as u64);
                // Ids drawn from a pool about the size of n, so records and the list overlap.
                let pool = (n as u64 * 3 / 2).max(1);
                let key = |rng: &mut fastrand::Rng| {
                    RecordKey::new(
                        format!("sha256:{:064x}", rng.u64(0..pool)),
                        ["", "", "runc", "kata"][rng.usize(0..4)],
                    )
                };
                let stamp = |rng: &mut fastrand::Rng| match rng.u8(0..10) {
                    0 => UnixNanos::NEVER,
                    // Beyond the tolerance (a clock that was ahead), or just within it.
                    1 => UnixNanos(now.0 + FUTURE_STAMP_TOLERANCE.as_nanos() as i64 * 2),
                    2 => UnixNanos(now.0 + 1),
                    _ => UnixNanos::from_secs(rng.i64(1..1_000_000)),
                };
                let mut existing = BTreeMap::new();
                for _ in 0..n {
                    let record = ImageRecord {
                        first_detected: stamp(&mut rng),
                        last_used: stamp(&mut rng),
                        size: rng.u64(1..4),
                        pinned: rng.bool(),
                    };
                    existing.insert(key(&mut rng), record);
                }
                let images: Vec<RuntimeImage> = (0..n)
                    .map(|_| {
                        let key = key(&mut rng);
                        let tag = if rng.u8(0..8) == 0 {
                            "registry.local/pinned/app:1"
                        } else {
                            "registry.local/app:1"
                        };
                        RuntimeImage {
                            id: key.image_id,
                            runtime_handler: key.runtime_handler,
                            size: rng.u64(1..4),
                            pinned: rng.u8(0..10) == 0,
                            repo_tags: vec![tag.into()],
                            ..RuntimeImage::default()
                        }
                    })
                    .collect();
                let in_use: BTreeSet<RecordKey> = images
                    .iter()
                    .filter(|_| rng.u8(0..4) == 0)
                    .map(RuntimeImage::record_key)
                    .collect();
                let mut used_at: BTreeMap<RecordKey, UnixNanos> = BTreeMap::new();
                for image in &images {
                    if rng.u8(0..6) == 0 {
                        used_at.insert(image.record_key(), stamp(&mut rng));
                    }
                }
                let last_detect = match rng.u8(0..3) {
                    0 => None,
                    1 => Some(UnixNanos(now.0 - 1)),
                    _ => Some(UnixNanos(
                        now.0 + FUTURE_STAMP_TOLERANCE.as_nanos() as i64 + 1,
                    )),
                };
                let want = reference::plan_detect_with_uses(
                    &existing,
                    last_detect,
                    &images,
                    &in_use,
                    &used_at,
                    &pins,
                    now,
                );
                let records = existing.iter().map(|(key, record)| {
                    Ok::<_, GcError>(StoredRecord {
                        key: key.clone(),
                        record: *record,
                    })
                });
                let input = DetectInput {
                    last_detect,
                    in_use: &in_use,
                    used_at: &used_at,
                    pins: &pins,
                    now,
                };
                let got = plan_detect(records, &ListedImages::new(images), &input)
                    .expect("records in key order");
                let case = format!("seed {seed}, n {n}");
                assert_eq!(got, want, "{case}");
                if n >= 500 {
                    // The case exercises every kind of op, not only the easy ones.
                    assert!(
                        got.added > 0 && got.removed > 0 && got.clamped > 0,
                        "{case}"
                    );
                    let sights = got
                        .batch
                        .ops()
                        .iter()
                        .filter(|op| matches!(op, BatchOp::Sight { .. }))
                        .count();
                    assert!(sights > got.added, "{case}: no changed record sighted");
                }
                let (mut after_want, mut after_got) = (existing.clone(), existing);
                apply_to_copy(&mut after_want, &want.batch);
                apply_to_copy(&mut after_got, &got.batch);
                assert_eq!(after_got, after_want, "{case}");
            }
        }
    }

    /// Records out of key order (a scan that broke its contract) stop the detect instead of
    /// being merged wrongly (a listed image judged unlisted and its history dropped); an error
    /// from the scan is returned as it is.
    #[test]
    fn records_out_of_key_order_or_failing_stop_the_detect() {
        let record = stamped(1, 2);
        let (a, b) = (
            RecordKey::new("sha256:a", ""),
            RecordKey::new("sha256:b", ""),
        );
        let listed = ListedImages::new(vec![image("sha256:a", 1, false)]);
        let (in_use, used_at, pins) = (BTreeSet::new(), BTreeMap::new(), PinPatterns::default());
        let input = DetectInput {
            last_detect: None,
            in_use: &in_use,
            used_at: &used_at,
            pins: &pins,
            now: UnixNanos::from_secs(10),
        };
        for keys in [vec![b.clone(), a.clone()], vec![a.clone(), a.clone()]] {
            let records = keys.iter().map(|key| {
                Ok::<_, GcError>(StoredRecord {
                    key: key.clone(),
                    record,
                })
            });
            let got = plan_detect(records, &listed, &input);
            assert!(
                matches!(&got, Err(GcError::UnorderedRecords { previous, next })
                    if *previous == keys[0] && *next == keys[1]),
                "{keys:?}: {got:?}"
            );
        }
        let failing = [Err(GcError::InvalidCapacity)];
        let got = plan_detect(failing, &listed, &input);
        assert!(matches!(got, Err(GcError::InvalidCapacity)), "{got:?}");
    }

    /// Randomized: the keys in use are exactly those of the images some container uses by
    /// [`container_uses`] (checked pair by pair), whatever the list's duplicates and digests.
    #[test]
    fn images_in_use_are_the_images_some_container_uses_pair_by_pair() {
        for seed in 0..20u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let id = |rng: &mut fastrand::Rng| format!("sha256:{}", rng.u8(0..30));
            let images: Vec<RuntimeImage> = (0..rng.usize(0..40))
                .map(|_| {
                    let mut i = image(&id(&mut rng), 1, false);
                    if rng.bool() {
                        i.repo_digests = vec![format!("r/x@{}", id(&mut rng))];
                    }
                    i
                })
                .collect();
            let containers: Vec<RuntimeContainer> = (0..rng.usize(0..10))
                .map(|_| {
                    let named = match rng.u8(0..3) {
                        0 => String::new(),
                        1 => format!("r/x@{}", id(&mut rng)),
                        _ => id(&mut rng),
                    };
                    container(&named, "")
                })
                .collect();
            let want: BTreeSet<RecordKey> = images
                .iter()
                .filter(|i| containers.iter().any(|c| container_uses(c, i)))
                .map(RuntimeImage::record_key)
                .collect();
            assert_eq!(
                images_in_use(&images, &containers, &[], None),
                want,
                "seed {seed}"
            );
        }
    }
}
