//! The predictive order's estimates (data-driven: one case per kind of history) and its
//! ranking.

use super::*;
use crate::model::{ImageId, ImageRecord};

const MIN: i64 = 60;
const H: i64 = 3600;
const D: i64 = 86_400;
/// The tests' day 0 starts at a whole UTC day.
const T0: i64 = 10_000 * D;

/// One image's estimate, in buffers of its own.
fn estimate(
    record: &ImageRecord,
    history: &ImageHistory,
    adaptive: &AdaptiveRank,
    now: UnixNanos,
) -> Estimate {
    estimate_in(&mut Scratch::default(), record, history, adaptive, now)
}

fn key(id: &str) -> RecordKey {
    RecordKey {
        image_id: ImageId::new(format!("sha256:{id}")),
        runtime_handler: String::new(),
    }
}

fn t(s: i64) -> UnixNanos {
    UnixNanos::from_secs(T0 + s)
}

/// An image first detected at `uses[0]`'s start (or at `first` when never used), with these
/// use intervals (start, end; seconds from T0), its record's last use the newest end.
fn image(id: &str, first: i64, uses: &[(i64, i64)], size: u64) -> (StoredRecord, ImageHistory) {
    let history = ImageHistory {
        uses: uses.iter().map(|(s, e)| (t(*s), t(*e))).collect(),
        pulls: uses.first().map(|(s, _)| t(*s)).into_iter().collect(),
    };
    let record = ImageRecord {
        first_detected: t(uses.first().map_or(first, |u| u.0)),
        last_used: uses.last().map_or(UnixNanos::NEVER, |(_, e)| t(*e)),
        size,
        pinned: false,
    };
    (
        StoredRecord {
            key: key(id),
            record,
        },
        history,
    )
}

fn class_of(record: &StoredRecord, superseded: bool) -> AdaptiveRank {
    let use_span = if record.record.last_used == UnixNanos::NEVER {
        Duration::ZERO
    } else {
        record.record.last_used.since(record.record.first_detected)
    };
    AdaptiveRank {
        one_off: use_span < adaptive::REUSE_SPAN,
        returns: 0,
        use_span,
        superseded: superseded.then(|| "reg/app:2".to_owned()),
    }
}

/// A daily model: used at 02:00 (+ up to 40 minutes) for 2 hours, on `days` days.
fn daily(days: i64) -> Vec<(i64, i64)> {
    (0..days)
        .map(|d| {
            let start = d * D + 2 * H + (d * 13 % 40) * MIN;
            (start, start + 2 * H)
        })
        .collect()
}

/// A CI tool: a 30-second job every 5 minutes for 3 hours from 08:00.
fn every_five_minutes() -> Vec<(i64, i64)> {
    (0..36)
        .map(|i| (8 * H + i * 5 * MIN, 8 * H + i * 5 * MIN + 30))
        .collect()
}

fn basis_kind(b: &Basis) -> &'static str {
    match b {
        Basis::Superseded => "superseded",
        Basis::Rhythm { .. } => "rhythm",
        Basis::MeanGap { .. } => "mean_gap",
        Basis::PriorOneOff => "prior_one_off",
        Basis::PriorReused => "prior_reused",
    }
}

/// One history's case: (name, uses, superseded, now in seconds from T0, basis, estimate range
/// in seconds).
type Case = (
    &'static str,
    Vec<(i64, i64)>,
    bool,
    i64,
    &'static str,
    Option<(i64, i64)>,
);

/// Each case's estimate has its basis and falls in its range (or is none), and it describes
/// itself as the predictive order.
fn check_estimates(cases: Vec<Case>) {
    for (name, uses, superseded, now, want_basis, want) in cases {
        let (record, history) = image(name, 0, &uses, 10);
        let rank = class_of(&record, superseded);
        let got = estimate(&record.record, &history, &rank, t(now));
        assert_eq!(basis_kind(&got.basis), want_basis, "{name}: {got:?}");
        match (want, got.next_use_in_s) {
            (None, None) => {}
            (Some((lo, hi)), Some(s)) => {
                assert!(
                    lo <= s && s <= hi,
                    "{name}: {s} not in [{lo}, {hi}]: {got:?}"
                )
            }
            (want, got) => panic!("{name}: {got:?}, want {want:?}"),
        }
        let described = PredictiveRank {
            estimate: got,
            adaptive: rank,
            known: None,
        }
        .describe();
        assert!(described.starts_with("predictive: "), "{name}: {described}");
    }
}

/// The end of `every_five_minutes`' last job.
const CI_END: i64 = 8 * H + 35 * 5 * MIN + 30;

#[test]
fn a_daily_rhythm_gives_its_next_window_until_two_missed_days_break_it() {
    check_estimates(vec![
        // Five days at 02:00-02:40, asked at 10:00 on day 4: tomorrow's 02:xx, 16-17 hours.
        (
            "periodic",
            daily(5),
            false,
            4 * D + 10 * H,
            "rhythm",
            Some((16 * H - 40 * MIN, 16 * H + 40 * MIN)),
        ),
        // Asked at 02:50 on day 5, not used yet that day: due now.
        (
            "periodic, due",
            daily(5),
            false,
            5 * D + 2 * H + 50 * MIN,
            "rhythm",
            Some((0, 0)),
        ),
        // One missed day (asked on day 5 at 10:00): the day after.
        (
            "periodic, one day missed",
            daily(5),
            false,
            5 * D + 10 * H,
            "rhythm",
            Some((16 * H - 40 * MIN, 16 * H + 40 * MIN)),
        ),
        // Two missed days: the rhythm is broken (drift); the mean gap (a day) is shorter than
        // the idle time (over two days), which is the estimate.
        (
            "periodic, drifted",
            daily(5),
            false,
            7 * D + 10 * H,
            "mean_gap",
            Some((
                7 * D + 10 * H - (4 * D + 4 * H + 12 * MIN),
                7 * D + 10 * H - (4 * D + 4 * H + 12 * MIN),
            )),
        ),
    ]);
}

#[test]
fn frequent_uses_give_their_mean_gap_recent_gaps_weighing_more_or_the_longer_idle_time() {
    // Twenty hourly gaps, then six of 5 minutes: recent gaps weigh more.
    let mut slowing: Vec<(i64, i64)> = (0..21).map(|i| (i * H, i * H + 10)).collect();
    let fast_from = 20 * H + 10;
    slowing.extend((1..=6).map(|i| (fast_from + i * 5 * MIN, fast_from + i * 5 * MIN + 10)));
    let slowing_end = fast_from + 6 * 5 * MIN + 10;
    check_estimates(vec![
        // A CI tool every 5 minutes, asked 2 minutes after its last job: its mean gap.
        (
            "ci tool",
            every_five_minutes(),
            false,
            CI_END + 2 * MIN,
            "mean_gap",
            Some((5 * MIN - 30, 5 * MIN - 30)),
        ),
        // The same tool, gone cold for a day: the idle time.
        (
            "ci tool, drifted",
            every_five_minutes(),
            false,
            CI_END + D,
            "mean_gap",
            Some((D, D)),
        ),
        // Hourly for 20 hours, then every 5 minutes: the recent gaps weigh more (the plain
        // mean is 47 minutes).
        (
            "recent gaps weigh more",
            slowing,
            false,
            slowing_end + MIN,
            "mean_gap",
            Some((5 * MIN, 30 * MIN)),
        ),
    ]);
}

#[test]
fn one_use_or_none_gives_the_prior_of_its_kind_or_the_longer_idle_time() {
    check_estimates(vec![
        // One use of 3 minutes, 10 minutes ago: the one-off prior.
        (
            "one-off",
            vec![(H, H + 3 * MIN)],
            false,
            H + 13 * MIN,
            "prior_one_off",
            Some((7 * D, 7 * D)),
        ),
        // A one-off idle for longer than the prior: its idle time.
        (
            "one-off, long idle",
            vec![(H, H + 3 * MIN)],
            false,
            H + 3 * MIN + 9 * D,
            "prior_one_off",
            Some((9 * D, 9 * D)),
        ),
        // A pull, its container's start and the record's mark a few seconds apart: one use.
        (
            "one use, marked thrice",
            vec![(H, H), (H + 1, H + 1), (H + 30, H + 30)],
            false,
            H + 13 * MIN,
            "prior_one_off",
            Some((7 * D, 7 * D)),
        ),
        // Never used, detected an hour ago.
        (
            "never used",
            vec![],
            false,
            H,
            "prior_one_off",
            Some((7 * D, 7 * D)),
        ),
        // One stretch of 3 hours, ended 10 minutes ago: an hour at least.
        (
            "one long use",
            vec![(H, 4 * H)],
            false,
            4 * H + 10 * MIN,
            "prior_reused",
            Some((H, H)),
        ),
        // ... ended 5 hours ago: its idle time.
        (
            "one long use, idle",
            vec![(H, 4 * H)],
            false,
            9 * H,
            "prior_reused",
            Some((5 * H, 5 * H)),
        ),
    ]);
}

#[test]
fn a_superseded_image_is_not_expected_whatever_its_history() {
    check_estimates(vec![
        // A newer tag of its repository is listed: not expected, whatever its history.
        (
            "superseded",
            every_five_minutes(),
            true,
            CI_END + 2 * MIN,
            "superseded",
            None,
        ),
    ]);
}

#[test]
fn a_rhythm_is_named_with_its_phase_in_explain() {
    let (record, history) = image("model", 0, &daily(3), 10);
    let rank = class_of(&record, false);
    let estimate = estimate(&record.record, &history, &rank, t(2 * D + 10 * H));
    let described = PredictiveRank {
        estimate,
        adaptive: rank,
        known: None,
    }
    .describe();
    assert!(
        described.contains("daily rhythm from 3 use starts, at 2h"),
        "{described}"
    );
}

fn ids(ranked: &[(StoredRecord, PredictiveRank)]) -> Vec<String> {
    adaptive::short_ids(ranked)
}

type Rows = (Vec<(UseKey, UseInterval)>, Vec<(PullKey, PullEntry)>);

/// The use and pull rows of `images`' histories, as the store's tables hold them.
fn rows(images: &[(StoredRecord, ImageHistory)]) -> Rows {
    let mut uses = Vec::new();
    let mut pulls = Vec::new();
    for (r, h) in images {
        for (start, end) in &h.uses {
            uses.push((
                UseKey {
                    closed: true,
                    started_at: *start,
                    key: r.key.clone(),
                },
                UseInterval { last_seen: *end },
            ));
        }
        for at in &h.pulls {
            pulls.push((
                PullKey {
                    at: *at,
                    key: r.key.clone(),
                },
                pull_entry(),
            ));
        }
    }
    (uses, pulls)
}

fn pull_entry() -> PullEntry {
    PullEntry {
        size: 1,
        origin: crate::model::PullOrigin::Detected,
        took: Duration::ZERO,
        name: String::new(),
    }
}

/// The production ranking (the space walk's) of `images`.
fn ranked(
    images: &[(StoredRecord, ImageHistory)],
    tags: &BTreeMap<RecordKey, Vec<String>>,
    now: i64,
) -> Vec<(StoredRecord, PredictiveRank)> {
    let (uses, pulls) = rows(images);
    let records = images.iter().map(|(r, _)| r.clone()).collect();
    rank_predictive(records, &[], tags, &uses, &pulls, t(now))
}

/// Furthest expected next use first: a superseded image, a one-off, yesterday's hot tool, the
/// nightly model (due in 16 hours), a tool used every 5 minutes. The kubelet's order (least
/// recently used first) would remove the nightly model first and the one-off last.
#[test]
fn images_are_ranked_furthest_expected_use_first() {
    let now = 4 * D + 10 * H;
    let hot: Vec<(i64, i64)> = (0..40)
        .map(|i| (now - (40 - i) * 5 * MIN, now - (40 - i) * 5 * MIN + 30))
        .collect();
    let cold: Vec<(i64, i64)> = (0..40)
        .map(|i| (3 * D + i * 5 * MIN, 3 * D + i * 5 * MIN + 30))
        .collect();
    let images = vec![
        image("hot", 0, &hot, 10),
        image("model", 0, &daily(5), 10),
        image("one-off", 0, &[(now - 30 * MIN, now - 29 * MIN)], 10),
        image("cold", 0, &cold, 10),
        image("old-app", 0, &[(now - 6 * H, now - 3 * H)], 10),
        image("new-app", 0, &[(now - 2 * H, now - H)], 10),
    ];
    let tags: BTreeMap<RecordKey, Vec<String>> = [
        (key("old-app"), vec!["reg/app:1".to_owned()]),
        (key("new-app"), vec!["reg/app:2".to_owned()]),
    ]
    .into_iter()
    .collect();
    let order = ranked(&images, &tags, now);
    assert_eq!(
        ids(&order),
        ["old-app", "one-off", "cold", "model", "new-app", "hot"]
    );
    assert!(matches!(order[3].1.estimate.basis, Basis::Rhythm { .. }));
}

/// Equal estimates (the one-off prior) fall to the kubelet's order, least recently used first;
/// equal in that too, the larger image goes first.
#[test]
fn tied_estimates_fall_back_to_recency_then_size() {
    let now = 10 * H;
    let images = vec![
        image("recent", 0, &[(9 * H, 9 * H + MIN)], 10),
        image("small", 0, &[(5 * H, 5 * H + MIN)], 10),
        image("large", 0, &[(5 * H, 5 * H + MIN)], 99),
    ];
    assert_eq!(
        ids(&ranked(&images, &BTreeMap::new(), now)),
        ["large", "small", "recent"]
    );
}

/// A pure function of its inputs: the same histories in another order give the same ranking.
#[test]
fn the_ranking_does_not_depend_on_the_input_order() {
    let now = 4 * D + 10 * H;
    let mut images: Vec<(StoredRecord, ImageHistory)> = (0..30)
        .map(|i| {
            let uses: Vec<(i64, i64)> = (0..(i % 5))
                .map(|k| (k * (i + 1) * 17 * MIN, k * (i + 1) * 17 * MIN + 60))
                .collect();
            image(&format!("img-{i:02}"), i * MIN, &uses, 10 + i as u64 % 3)
        })
        .collect();
    let first = ranked(&images, &BTreeMap::new(), now);
    images.reverse();
    images.swap(3, 17);
    assert_eq!(ranked(&images, &BTreeMap::new(), now), first);
}

#[test]
fn histories_group_the_tables_by_key_for_the_ranked_images_only() {
    let a = key("a");
    let b = key("b");
    let uses = vec![
        (
            UseKey {
                closed: true,
                started_at: t(10),
                key: a.clone(),
            },
            UseInterval { last_seen: t(20) },
        ),
        (
            UseKey {
                closed: true,
                started_at: t(30),
                key: b.clone(),
            },
            UseInterval { last_seen: t(40) },
        ),
    ];
    let pulls = vec![(
        PullKey {
            at: t(5),
            key: a.clone(),
        },
        pull_entry(),
    )];
    let (one, _) = image("a", 0, &[], 10);
    let (none, _) = image("c", 0, &[], 10);
    let (of, got) = histories(&[one, none], &uses, &pulls);
    assert_eq!(of.len(), 2);
    assert_eq!(of[1], None, "no row names c");
    let a_history = &got[of[0].expect("a has rows") as usize];
    assert_eq!(
        *a_history,
        ImageHistory {
            uses: vec![(t(10), t(20))],
            pulls: vec![t(5)],
        }
    );
}

#[test]
fn buckets_grow_by_about_a_fifth() {
    assert!(bucket(0) < bucket(4) && bucket(4) < bucket(5));
    assert_eq!(bucket(1100), bucket(1200));
    assert!(bucket(1100) < bucket(1400));
    assert!(bucket(u64::MAX) < u32::MAX);
}

#[path = "predictive_reference_tests.rs"]
mod reference;

/// The space walk's ranking (positions, one sort, buffers reused) gives exactly the order and
/// the ranks of the straightforward one (`reference.rs`: maps keyed by image, the adaptive
/// sort then the predictive sort) on generated nodes: seeded histories of rhythms, bursts,
/// one-offs and never-used images, tags that supersede, returns in the journal, rows of
/// images not ranked, ties in every key.
#[test]
fn the_ranking_equals_the_reference_ranking_on_generated_histories() {
    for seed in 0..300u64 {
        let node = reference::generate(seed);
        let expected = reference::rank(
            node.records.clone(),
            &node.journal,
            &node.tags,
            &node.uses,
            &node.pulls,
            node.now,
        );
        let got = rank_predictive(
            node.records.clone(),
            &node.journal,
            &node.tags,
            &node.uses,
            &node.pulls,
            node.now,
        );
        let first_difference = got.iter().zip(&expected).position(|(g, e)| g != e);
        assert_eq!(
            first_difference.map(|at| (&got[at], &expected[at])),
            None,
            "seed {seed}: first difference"
        );
        assert_eq!(got, expected, "seed {seed}");
        // The same by position, as the space walk gives the tags.
        let listed = ListedTags::from_map(&node.records, &node.tags);
        let by_position = rank_listed(
            node.records.clone(),
            &listed,
            &node.journal,
            &node.uses,
            &node.pulls,
            node.now,
        );
        assert_eq!(by_position, expected, "seed {seed}, tags by position");
    }
}

/// The space walk's ranking (`predictive_walk`: the cycle's list sorted by key, the store's
/// sorted reads, only the ranked images' history times decoded, keys built when reached) is
/// the reference ranking of the listed images that have a record over the store's own tables,
/// on generated nodes written to a store: records not listed, listed images without a record,
/// rows of images not ranked, a list in no particular order.
#[test]
fn the_walks_order_is_the_reference_ranking_over_the_stores_tables() {
    use crate::gc::detect::ListedImages;
    use crate::model::RuntimeImage;
    use crate::store::{Codec, Store};

    for seed in 0..100u64 {
        let node = reference::generate(seed);
        let store = Store::open_in_memory(std::path::Path::new("walk.redb"), node.now)
            .expect("an in-memory store");
        for r in &node.records {
            store.raw_bytes_for_tests("images", &r.key.encode(), &r.record.encode());
        }
        for (k, v) in &node.journal {
            store.raw_bytes_for_tests("journal", &k.encode(), &v.encode());
        }
        for (k, v) in &node.uses {
            store.raw_bytes_for_tests("uses", &k.encode(), &v.encode());
        }
        for (k, v) in &node.pulls {
            store.raw_bytes_for_tests("pulls", &k.encode(), &v.encode());
        }
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x39);
        let mut images: Vec<RuntimeImage> = Vec::new();
        for r in &node.records {
            if rng.u8(0..8) == 0 {
                continue; // a record the runtime no longer lists
            }
            images.push(runtime_image_of(r, &node));
        }
        for i in 0..rng.usize(0..4) {
            images.push(RuntimeImage {
                id: ImageId::new(format!("sha256:{i:04x}-no-record")),
                ..RuntimeImage::default()
            });
        }
        rng.shuffle(&mut images);
        let listed = ListedImages::new(images);
        let walk = crate::gc::predictive_walk(&store, &listed, node.now).expect("the walk's reads");
        let expected = reference_order(&store, &listed, &node);
        let got: Vec<StoredRecord> = walk.records_from(&listed, 0).collect();
        assert_eq!(got, expected, "seed {seed}");
        assert_eq!(walk.len(), expected.len(), "seed {seed}");
        let skip = rng.usize(0..=expected.len());
        let rest: Vec<StoredRecord> = walk.records_from(&listed, skip).collect();
        assert_eq!(rest, expected[skip..], "seed {seed}, from {skip}");
    }
}

/// A store holding `node`'s records (written by a batch, with their index), journal and
/// histories (written raw).
fn store_of(node: &reference::Node) -> crate::store::Store {
    use crate::store::{Batch, Codec, Store};
    let store = Store::open_in_memory(std::path::Path::new("walk.redb"), node.now)
        .expect("an in-memory store");
    let mut records = Batch::new();
    for r in &node.records {
        records.upsert(r.key.clone(), r.record);
    }
    store.apply(&records).expect("apply");
    for (k, v) in &node.journal {
        store.raw_bytes_for_tests("journal", &k.encode(), &v.encode());
    }
    for (k, v) in &node.uses {
        store.raw_bytes_for_tests("uses", &k.encode(), &v.encode());
    }
    for (k, v) in &node.pulls {
        store.raw_bytes_for_tests("pulls", &k.encode(), &v.encode());
    }
    store
}

/// The runtime's listing of `r` as the generated `node` has it (its tags, its size).
fn runtime_image_of(r: &StoredRecord, node: &reference::Node) -> crate::model::RuntimeImage {
    crate::model::RuntimeImage {
        id: r.key.image_id.clone(),
        runtime_handler: r.key.runtime_handler.clone(),
        repo_tags: node.tags.get(&r.key).cloned().unwrap_or_default(),
        size: r.record.size,
        ..crate::model::RuntimeImage::default()
    }
}

/// The reference ranking of the records `store` holds that `listed` names, over the store's
/// tables as they are now.
fn reference_order(
    store: &crate::store::Store,
    listed: &crate::gc::detect::ListedImages,
    node: &reference::Node,
) -> Vec<StoredRecord> {
    let ranked: Vec<StoredRecord> = store
        .records()
        .expect("records")
        .into_iter()
        .filter(|r| listed.contains(&r.key))
        .collect();
    reference::rank(
        ranked,
        &store.journal().expect("journal"),
        &node.tags,
        &store.uses().expect("uses"),
        &store.pulls().expect("pulls"),
        node.now,
    )
    .into_iter()
    .map(|(r, _)| r)
    .collect()
}

/// The walk's order over `store` (every record of `node` listed) against the reference
/// ranking of the records the store holds over its tables as they are now.
fn assert_walk_is_reference(store: &crate::store::Store, node: &reference::Node, what: &str) {
    use crate::gc::detect::ListedImages;
    let listed = ListedImages::new(
        node.records
            .iter()
            .map(|r| runtime_image_of(r, node))
            .collect::<Vec<_>>(),
    );
    let walk = crate::gc::predictive_walk(store, &listed, node.now).expect("the walk's reads");
    let expected = reference_order(store, &listed, node);
    let got: Vec<StoredRecord> = walk.records_from(&listed, 0).collect();
    assert_eq!(got, expected, "{what}");
}

/// Issue 53: the store keeps what the walks read in memory between walks (its history
/// mirror), so a walk after transactions that wrote uses, pulls, removals and re-pulls ranks
/// by the history they left, as the reference does over the tables read afresh.
#[test]
fn a_walk_ranks_by_the_uses_pulls_and_repulls_written_since_the_last_walk() {
    use crate::model::{EvictionNote, PullEntry, PullKey, RemovalReason};
    use crate::store::Batch;

    for seed in 0..40u64 {
        let node = reference::generate(seed);
        let store = store_of(&node);
        assert_walk_is_reference(&store, &node, &format!("seed {seed}, first walk"));
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x53);
        for round in 0..6 {
            let mut batch = Batch::new();
            for _ in 0..rng.usize(1..6) {
                let Some(r) = node.records.get(rng.usize(0..node.records.len().max(1))) else {
                    continue;
                };
                let at = UnixNanos(node.now.0 - rng.i64(1..3 * D) * 1_000_000_000);
                match rng.u8(0..4) {
                    0 => batch.open_use(r.key.clone(), at),
                    1 => batch.observe_uses(at, vec![r.key.clone()]),
                    2 => batch.record_pull(
                        PullKey {
                            at,
                            key: r.key.clone(),
                        },
                        PullEntry {
                            size: r.record.size,
                            origin: crate::model::PullOrigin::Pull,
                            took: std::time::Duration::ZERO,
                            name: String::new(),
                        },
                    ),
                    _ => batch.evict(
                        r.key.clone(),
                        EvictionNote {
                            removed_at: at,
                            reason: RemovalReason::Space,
                            rank: 1,
                            fs: None,
                        },
                    ),
                }
                // A mark after a removal brings the image back: a re-pull.
                if rng.bool() {
                    batch.mark_used(r.key.clone(), node.now, Some(r.record.size));
                }
            }
            store.apply(&batch).expect("apply");
            assert_walk_is_reference(&store, &node, &format!("seed {seed}, round {round}"));
        }
    }
}
