use std::collections::BTreeMap;
use std::time::Duration;

use super::HistoryMirror;
use crate::model::{
    EvictionNote, ImageId, JournalRetention, PullEntry, PullKey, PullOrigin, RecordKey,
    RemovalReason, UnixNanos,
};
use crate::store::{Batch, HistoryRows, KeyParts, Store, temp_store};

const DAY: i64 = 24 * 3600;

fn note(at: i64) -> EvictionNote {
    EvictionNote {
        removed_at: UnixNanos::from_secs(at),
        reason: RemovalReason::Space,
        rank: 1,
        fs: None,
    }
}

fn pull(key: &RecordKey, at: i64) -> (PullKey, PullEntry) {
    (
        PullKey {
            at: UnixNanos::from_secs(at),
            key: key.clone(),
        },
        PullEntry {
            size: 7,
            origin: PullOrigin::Pull,
            took: Duration::ZERO,
            name: String::new(),
        },
    )
}

/// The mirror a walk would build now from the committed tables.
fn built(store: &Store) -> HistoryMirror {
    let txn = store.begin_read().expect("read");
    HistoryMirror::build(store, &txn)
        .expect("build")
        .expect("rows that decode")
}

/// The tables' rows of `keys`, each key's rows together, as the mirror gives them.
fn grouped(rows: HistoryRows) -> HistoryRows {
    let mut out = rows;
    out.uses.sort_by_key(|&(at, _, _)| at);
    out.pulls.sort_by_key(|&(at, _)| at);
    out
}

/// One random transaction on a few images under two handlers: uses seen and opened, pulls,
/// marks (a mark that creates a record re-pulls its journaled image), evictions, removals.
fn random_batch(rng: &mut fastrand::Rng, at: i64) -> Batch {
    let key = |rng: &mut fastrand::Rng| {
        RecordKey::new(
            format!("sha256:{}", rng.u8(0..5)),
            ["", "kata"][rng.usize(0..2)],
        )
    };
    let mut batch = Batch::new();
    let now = UnixNanos::from_secs(at);
    match rng.u8(0..6) {
        0 => batch.observe_uses(now, (0..rng.usize(0..3)).map(|_| key(rng)).collect()),
        1 => batch.open_use(key(rng), now),
        2 => {
            let (k, entry) = pull(&key(rng), at);
            batch.record_pull(k, entry);
        }
        3 => batch.mark_used(key(rng), now, Some(7)),
        4 => batch.evict(key(rng), note(at)),
        _ => batch.remove(key(rng)),
    }
    batch
}

/// The history mirror the store holds is the committed tables' after every transaction:
/// random uses, pulls, marks, re-pulls, evictions and removals, batches that change nothing,
/// and a small retention pruning the journal and the histories by count and by age; what the
/// walks read from it is what the tables give.
#[test]
fn the_history_mirror_is_the_committed_tables_after_every_transaction() {
    for seed_no in 0..20u64 {
        let mut rng = fastrand::Rng::with_seed(seed_no);
        let (_dir, store) = temp_store();
        store.set_journal_retention(JournalRetention {
            max_age: Duration::from_secs(DAY as u64),
            max_entries: 6,
        });
        let mut at = 100;
        for step in 0..120 {
            at += rng.i64(1..3000);
            store.apply(&random_batch(&mut rng, at)).expect("apply");
            if step == 10 {
                // The first walk builds the mirror; every later transaction keeps it.
                store.repulled_counts().expect("returns");
            }
            let held = store.lock_history_mirror().clone();
            if let Some(held) = held {
                assert_eq!(held, built(&store), "seed {seed_no} step {step}");
            }
            let mut want: BTreeMap<ImageId, u32> = BTreeMap::new();
            for (k, _) in store.journal_repulled().expect("journal") {
                *want.entry(k.key.image_id).or_default() += 1;
            }
            assert_eq!(store.repulled_counts().expect("returns"), want);
            let mut keys: Vec<RecordKey> = store
                .uses()
                .expect("uses")
                .into_iter()
                .map(|(k, _)| k.key)
                .collect();
            keys.extend(
                store
                    .pulls()
                    .expect("pulls")
                    .into_iter()
                    .map(|(k, _)| k.key),
            );
            keys.sort();
            keys.dedup();
            let parts: Vec<KeyParts<'_>> = keys
                .iter()
                .map(|k| (k.image_id.as_str().as_bytes(), k.runtime_handler.as_bytes()))
                .collect();
            assert_eq!(
                store.histories_of_sorted_keys(&parts).expect("mirror"),
                grouped(store.histories_of_keys(&parts).expect("tables")),
                "seed {seed_no} step {step}"
            );
        }
        assert!(
            store.lock_history_mirror().is_some(),
            "seed {seed_no}: held"
        );
    }
}

/// A walk after a transaction sees what it wrote: the use, the pull and the re-pull written
/// since the last walk, each in the returns and histories the next walk reads; a raw write
/// (any writer but `apply`) drops the mirror, and the next walk reads the tables again.
#[test]
fn the_next_walk_sees_the_uses_pulls_and_repulls_written_since_the_last() {
    let (_dir, store) = temp_store();
    let a = RecordKey::new("sha256:a", "");
    let parts: Vec<KeyParts<'_>> = vec![(a.image_id.as_str().as_bytes(), b"")];
    let mut first = Batch::new();
    first.mark_used(a.clone(), UnixNanos::from_secs(10), Some(7));
    first.evict(a.clone(), note(20));
    store.apply(&first).expect("apply");
    // The walk before: one detected pull, no use, no return.
    assert!(store.repulled_counts().expect("returns").is_empty());
    let before = store.histories_of_sorted_keys(&parts).expect("rows");
    assert_eq!(before.pulls, [(0, UnixNanos::from_secs(10))]);
    assert!(before.uses.is_empty());
    let mut back = Batch::new();
    back.mark_used(a.clone(), UnixNanos::from_secs(30), Some(7));
    back.open_use(a.clone(), UnixNanos::from_secs(31));
    store.apply(&back).expect("apply");
    let after = store.histories_of_sorted_keys(&parts).expect("rows");
    assert_eq!(
        after.pulls,
        [(0, UnixNanos::from_secs(10)), (0, UnixNanos::from_secs(30))]
    );
    assert_eq!(
        after.uses,
        [(0, UnixNanos::from_secs(31), UnixNanos::from_secs(31))]
    );
    assert_eq!(
        store.repulled_counts().expect("returns"),
        BTreeMap::from([(a.image_id.clone(), 1)])
    );
    let (k, _) = pull(&a, 40);
    use crate::store::Codec;
    store.raw_bytes_for_tests("pulls", &k.encode(), &[1, 0, 0, 0, 0, 0, 0, 0, 7, 0]);
    assert!(
        store.lock_history_mirror().is_none(),
        "dropped by the raw write"
    );
    let raw = store.histories_of_sorted_keys(&parts);
    assert_eq!(raw.ok(), store.histories_of_keys(&parts).ok().map(grouped));
}
