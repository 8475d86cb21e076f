//! Unit tests of detect's planner: the merge of the stored records with the runtime's lists,
//! the use and sighting rules, the clock clamps, and the planner against `reference.rs`.

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

/// Issue 40: a first detect of n images holds its n sightings as one operation of entries
/// pointing into the runtime's list (no operation, key or names of its own per image: at
/// 100k that batch was the replay's peak), standing for the reference's operations.
#[test]
fn a_first_detect_holds_its_sightings_as_positions_in_the_list_not_an_op_per_image() {
    let images: Vec<RuntimeImage> = (0..50)
        .map(|n| image(&format!("sha256:{:064x}", (n * 7919) % 50), 10, false))
        .collect();
    let now = UnixNanos::from_secs(100);
    let (in_use, pins) = (BTreeSet::new(), PinPatterns::default());
    let plan = plan_from_map(&BTreeMap::new(), None, &images, &in_use, &pins, now);
    assert_eq!(plan.added, 50);
    assert!(
        matches!(plan.batch.ops(), [BatchOp::Sightings(_)]),
        "{:?}",
        plan.batch.ops().len()
    );
    let want = reference::plan_detect(&BTreeMap::new(), None, &images, &in_use, &pins, now);
    assert_eq!(want.batch.ops().len(), 50, "the reference: an op per image");
    assert_eq!(plan, want);
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

/// A key of an id drawn from a pool of `pool` (so records and the list overlap), under the
/// default handler (twice as likely) or another.
fn random_key(rng: &mut fastrand::Rng, pool: u64) -> RecordKey {
    RecordKey::new(
        format!("sha256:{:064x}", rng.u64(0..pool)),
        ["", "", "runc", "kata"][rng.usize(0..4)],
    )
}

/// A stamp: never, in the future, or in the past.
fn random_stamp(rng: &mut fastrand::Rng, now: UnixNanos) -> UnixNanos {
    match rng.u8(0..10) {
        0 => UnixNanos::NEVER,
        // Beyond the tolerance (a clock that was ahead), or just within it.
        1 => UnixNanos(now.0 + FUTURE_STAMP_TOLERANCE.as_nanos() as i64 * 2),
        2 => UnixNanos(now.0 + 1),
        _ => UnixNanos::from_secs(rng.i64(1..1_000_000)),
    }
}

/// What a randomized detect reads.
struct RandomDetect {
    existing: BTreeMap<RecordKey, ImageRecord>,
    images: Vec<RuntimeImage>,
    in_use: BTreeSet<RecordKey>,
    used_at: BTreeMap<RecordKey, UnixNanos>,
    last_detect: Option<UnixNanos>,
}

/// `n` stored records (duplicate keys fold), sized and pinned at random.
fn random_records(
    rng: &mut fastrand::Rng,
    n: usize,
    pool: u64,
    now: UnixNanos,
) -> BTreeMap<RecordKey, ImageRecord> {
    let mut existing = BTreeMap::new();
    for _ in 0..n {
        let record = ImageRecord {
            first_detected: random_stamp(rng, now),
            last_used: random_stamp(rng, now),
            size: rng.u64(1..4),
            pinned: rng.bool(),
        };
        existing.insert(random_key(rng, pool), record);
    }
    existing
}

/// A list of `n` images (duplicates kept), one in eight tagged under the pinned pattern.
fn random_images(rng: &mut fastrand::Rng, n: usize, pool: u64) -> Vec<RuntimeImage> {
    (0..n)
        .map(|_| {
            let key = random_key(rng, pool);
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
        .collect()
}

/// The records, list, keys in use, kubelet uses and stored last_detect of `seed` and `n`.
fn random_detect(seed: u64, n: usize, now: UnixNanos) -> RandomDetect {
    let mut rng = fastrand::Rng::with_seed(seed.wrapping_mul(7919) ^ n as u64);
    // Ids drawn from a pool about the size of n, so records and the list overlap.
    let pool = (n as u64 * 3 / 2).max(1);
    let existing = random_records(&mut rng, n, pool, now);
    let images = random_images(&mut rng, n, pool);
    let mut in_use: BTreeSet<RecordKey> = images
        .iter()
        .filter(|_| rng.u8(0..4) == 0)
        .map(RuntimeImage::record_key)
        .collect();
    let mut used_at: BTreeMap<RecordKey, UnixNanos> = BTreeMap::new();
    for image in &images {
        if rng.u8(0..6) == 0 {
            used_at.insert(image.record_key(), random_stamp(&mut rng, now));
        }
    }
    // Keys in use and uses recorded elsewhere that the runtime may not list (a pull
    // the kubelet has in flight, its pulled records), between the listed keys.
    for _ in 0..rng.usize(0..4) {
        in_use.insert(random_key(&mut rng, pool));
        used_at.insert(random_key(&mut rng, pool), random_stamp(&mut rng, now));
    }
    let last_detect = match rng.u8(0..3) {
        0 => None,
        1 => Some(UnixNanos(now.0 - 1)),
        _ => Some(UnixNanos(
            now.0 + FUTURE_STAMP_TOLERANCE.as_nanos() as i64 + 1,
        )),
    };
    RandomDetect {
        existing,
        images,
        in_use,
        used_at,
        last_detect,
    }
}

/// The streaming detect plans what the reference plans over `detect`, and both leave the
/// same records; from 500 images (`n`) on, the case has every kind of op.
fn check_streaming_against_reference(
    detect: RandomDetect,
    pins: &PinPatterns,
    now: UnixNanos,
    n: usize,
    case: &str,
) {
    let RandomDetect {
        existing,
        images,
        in_use,
        used_at,
        last_detect,
    } = detect;
    let want = reference::plan_detect_with_uses(
        &existing,
        last_detect,
        &images,
        &in_use,
        &used_at,
        pins,
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
        pins,
        now,
    };
    let got =
        plan_detect(records, &ListedImages::new(images), &input).expect("records in key order");
    assert_eq!(got, want, "{case}");
    if n >= 500 {
        // The case exercises every kind of op, not only the easy ones.
        assert!(
            got.added > 0 && got.removed > 0 && got.clamped > 0,
            "{case}"
        );
        let sights = got
            .batch
            .expanded_ops()
            .iter()
            .filter(|op| matches!(op.as_ref(), BatchOp::Sight { .. }))
            .count();
        assert!(sights > got.added, "{case}: no changed record sighted");
    }
    let (mut after_want, mut after_got) = (existing.clone(), existing);
    apply_to_copy(&mut after_want, &want.batch);
    apply_to_copy(&mut after_got, &got.batch);
    assert_eq!(after_got, after_want, "{case}");
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
            let detect = random_detect(seed, n, now);
            check_streaming_against_reference(
                detect,
                &pins,
                now,
                n,
                &format!("seed {seed}, n {n}"),
            );
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
    let failing: [Result<StoredRecord, GcError>; 1] = [Err(GcError::InvalidCapacity)];
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

/// A stamp `minutes` after the epoch.
fn at_minute(minutes: i64) -> UnixNanos {
    UnixNanos::from_secs(minutes * 60)
}

/// Stored rows as the property draws them: (id, handler) -> (first, used, size, pinned).
type DrawnRecords = BTreeMap<(String, String), (i64, i64, u64, bool)>;

/// The drawn records, first detected no later than last used.
fn drawn_records(stored: &DrawnRecords) -> BTreeMap<RecordKey, ImageRecord> {
    stored
        .iter()
        .map(|((id, handler), &(first, used, size, pinned))| {
            (
                RecordKey::new(id.as_str(), handler.as_str()),
                ImageRecord {
                    first_detected: at_minute(first.min(used)),
                    last_used: at_minute(used),
                    size,
                    pinned,
                },
            )
        })
        .collect()
}

/// The list: the stored keys `listed_stored` picks (sized as stored), and other ids.
fn drawn_list(
    records: &BTreeMap<RecordKey, ImageRecord>,
    listed_stored: &[bool],
    listed_ids: &[(String, String, u64, bool)],
) -> Vec<RuntimeImage> {
    let mut images: Vec<RuntimeImage> = records
        .iter()
        .zip(listed_stored)
        .filter(|(_, listed)| **listed)
        .map(|((key, record), _)| RuntimeImage {
            id: key.image_id.clone(),
            runtime_handler: key.runtime_handler.clone(),
            size: record.size,
            pinned: record.pinned,
            ..RuntimeImage::default()
        })
        .collect();
    images.extend(
        listed_ids
            .iter()
            .map(|(id, handler, size, pinned)| RuntimeImage {
                id: ImageId::new(id.as_str()),
                runtime_handler: handler.clone(),
                size: *size,
                pinned: *pinned,
                ..RuntimeImage::default()
            }),
    );
    images
}

/// An in-memory store holding `records`.
fn store_holding(
    records: &BTreeMap<RecordKey, ImageRecord>,
    now: UnixNanos,
) -> crate::store::Store {
    let store =
        crate::store::Store::open_in_memory(std::path::Path::new("scan.redb"), now).expect("open");
    let mut batch = Batch::new();
    for (key, record) in records {
        batch.upsert(key.clone(), *record);
    }
    store.apply(&batch).expect("write records");
    store
}

/// The scan in place yields the decoded scan's records, keys ordered as RecordKey's; the
/// decoded scan's records are returned.
fn in_place_scan_matches_decoded(
    store: &crate::store::Store,
    records: &BTreeMap<RecordKey, ImageRecord>,
) -> Result<Vec<StoredRecord>, proptest::test_runner::TestCaseError> {
    let scanned: Vec<ScannedRecord> = store
        .records_in_key_order()
        .expect("scan")
        .in_place()
        .collect::<Result<_, _>>()
        .expect("scan in place");
    let decoded: Vec<StoredRecord> = store
        .records_in_key_order()
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("scan");
    proptest::prop_assert_eq!(scanned.len(), records.len());
    for (s, d) in scanned.iter().zip(&decoded) {
        proptest::prop_assert_eq!(&s.key(), &d.key);
        proptest::prop_assert_eq!(s.record, d.record);
        proptest::prop_assert_eq!(MergedRecord::key_bytes(s), listed::borrowed(&d.key));
    }
    for a in &scanned {
        for b in &scanned {
            proptest::prop_assert_eq!(a.key_bytes().cmp(&b.key_bytes()), a.key().cmp(&b.key()));
        }
    }
    Ok(decoded)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// The store's in-place scan (keys compared as bytes where redb keeps them, an owned key
    /// only for the records the batch writes) plans exactly what the decoded records plan:
    /// ids that are prefixes of each other or differ past the shared `sha256:`, any handler,
    /// non-ASCII text, stamps in the future, listed or not, in use or not. The scan yields the
    /// decoded scan's keys and records, and its keys' byte order is `RecordKey`'s.
    #[test]
    fn the_in_place_record_scan_plans_what_the_decoded_records_plan(
        stored in proptest::collection::btree_map(
            ("sha256:[a-cé]{1,3}", "(|runc|run|é)"),
            (0i64..40, 0i64..40, 0u64..3, proptest::bool::ANY),
            0..24,
        ),
        listed_ids in proptest::collection::vec(("sha256:[a-cé]{1,3}", "(|runc|run|é)", 0u64..3, proptest::bool::ANY), 0..24),
        in_use_picks in proptest::collection::vec(proptest::bool::ANY, 0..48),
        listed_stored in proptest::collection::vec(proptest::bool::ANY, 0..24),
    ) {
        let now = UnixNanos::from_secs(1200);
        // Stamps up to 40 minutes: some beyond `now` plus the tolerance, which the plan clamps.
        let records = drawn_records(&stored);
        let images = drawn_list(&records, &listed_stored, &listed_ids);
        let in_use: BTreeSet<RecordKey> = images
            .iter()
            .zip(&in_use_picks)
            .filter(|(_, used)| **used)
            .map(|(i, _)| i.record_key())
            .collect();
        let store = store_holding(&records, now);
        let decoded = in_place_scan_matches_decoded(&store, &records)?;
        let (used_at, pins) = (BTreeMap::new(), PinPatterns::default());
        let input = DetectInput {
            last_detect: Some(at_minute(10)),
            in_use: &in_use,
            used_at: &used_at,
            pins: &pins,
            now,
        };
        let listed = ListedImages::new(images);
        let want = plan_detect(decoded.into_iter().map(Ok::<_, GcError>), &listed, &input)
            .expect("decoded records in key order");
        let got = plan_detect(store.records_in_key_order().expect("scan").in_place(), &listed, &input)
            .expect("scanned records in key order");
        proptest::prop_assert_eq!(got, want);
    }
}
