use std::time::Duration;

use super::super::{Batch, Store, StoreError, Violation, temp_store};
use super::retention_keys;
use crate::model::{
    EvictionNote, FsUsage, ImageNames, ImageRecord, JournalRetention, RecordKey, RemovalReason,
    Remover, UnixNanos,
};

const DAY: i64 = 24 * 3600;

fn key(id: &str) -> RecordKey {
    RecordKey::new(format!("sha256:{id}"), "")
}

fn record(first: i64, last: i64, size: u64) -> ImageRecord {
    ImageRecord {
        first_detected: UnixNanos::from_secs(first),
        last_used: UnixNanos::from_secs(last),
        size,
        pinned: false,
    }
}

fn names(tag: &str) -> ImageNames {
    ImageNames {
        repo_tags: vec![tag.to_owned()],
        repo_digests: vec![format!(
            "{}@sha256:feed",
            tag.split(':').next().unwrap_or(tag)
        )],
    }
}

fn note(at: i64, reason: RemovalReason, rank: u32) -> EvictionNote {
    EvictionNote {
        removed_at: UnixNanos::from_secs(at),
        reason,
        rank,
        fs: Some(FsUsage {
            capacity: 100,
            used_before: 90,
            target_used: 80,
        }),
    }
}

/// A record with names, as detect leaves it.
fn seed(store: &Store, id: &str, tag: &str) {
    let mut batch = Batch::new();
    batch.upsert(key(id), record(10, 20, 7));
    batch.set_names(key(id), names(tag));
    assert!(store.apply(&batch).expect("apply"));
}

/// `inspect check`'s check, with the clock at the journal's newest entry (the journal's age
/// needs a clock).
fn check(store: &mut Store) -> Vec<Violation> {
    // An undecodable journal leaves the clock at 0.
    let now = store
        .journal()
        .ok()
        .and_then(|j| j.last().map(|(k, _)| k.removed_at))
        .unwrap_or(UnixNanos(0));
    store.check_at(now).expect("check")
}

#[test]
fn an_eviction_deletes_the_record_and_journals_it_in_one_commit_keeping_its_names() {
    let (_dir, mut store) = temp_store();
    seed(&store, "a", "busybox:1.35");
    let commits = store.commits();
    let mut batch = Batch::new();
    batch.evict(key("a"), note(100, RemovalReason::Space, 3));
    assert!(store.apply(&batch).expect("apply"));
    assert_eq!(store.commits(), commits + 1, "one transaction");
    assert_eq!(store.get(&key("a")).expect("get"), None);
    let journal = store.journal().expect("journal");
    assert_eq!(journal.len(), 1);
    let (jkey, entry) = &journal[0];
    assert_eq!(
        (jkey.removed_at, &jkey.key),
        (UnixNanos::from_secs(100), &key("a"))
    );
    assert_eq!(entry.size, 7);
    assert_eq!(entry.first_detected, UnixNanos::from_secs(10));
    assert_eq!(entry.last_used, UnixNanos::from_secs(20));
    assert_eq!(entry.reason, Some(RemovalReason::Space));
    assert_eq!(entry.rank, Some(3));
    assert_eq!(entry.remover, Remover::Imagekeeper);
    assert_eq!(entry.fs.map(|f| f.used_before), Some(90));
    assert_eq!(
        store.names(&key("a")).expect("names"),
        Some(names("busybox:1.35"))
    );
    assert!(check(&mut store).is_empty());
    // Evicting a record that is gone writes nothing.
    assert!(!store.apply(&batch).expect("apply"));
}

#[test]
fn an_unlisted_record_is_journaled_as_external_and_a_plain_removal_drops_its_names() {
    let (_dir, mut store) = temp_store();
    seed(&store, "a", "a:1");
    seed(&store, "b", "b:1");
    let mut batch = Batch::new();
    batch.remove_unlisted_journaled(key("a"), UnixNanos::from_secs(20), UnixNanos::from_secs(50));
    batch.remove(key("b"));
    assert!(store.apply(&batch).expect("apply"));
    let journal = store.journal().expect("journal");
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].1.remover, Remover::External);
    assert_eq!((journal[0].1.reason, journal[0].1.rank), (None, None));
    assert!(store.names(&key("a")).expect("names").is_some());
    assert_eq!(store.names(&key("b")).expect("names"), None);
    assert!(check(&mut store).is_empty());
}

#[test]
fn names_are_written_only_for_records_and_only_when_they_change() {
    let (_dir, store) = temp_store();
    seed(&store, "a", "a:1");
    let mut same = Batch::new();
    same.set_names(key("a"), names("a:1"));
    assert!(
        !store.apply(&same).expect("apply"),
        "unchanged names commit nothing"
    );
    let mut absent = Batch::new();
    absent.set_names(key("zzz"), names("z:1"));
    assert!(!store.apply(&absent).expect("apply"), "no record, no names");
    assert_eq!(store.names(&key("zzz")).expect("names"), None);
}

/// Retention by count and by age (measured from the newest entry), pruned in the journaling
/// transaction itself; a pruned entry's names go unless its record came back.
#[test]
fn the_journal_is_pruned_by_count_and_age_in_the_transaction_that_writes_it() {
    let (_dir, mut store) = temp_store();
    store.set_journal_retention(JournalRetention {
        max_age: Duration::from_secs(10 * 86_400),
        max_entries: 3,
    });
    for (n, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
        seed(&store, id, &format!("{id}:1"));
        let mut batch = Batch::new();
        let at = 100 + i64::try_from(n).expect("small") * DAY;
        batch.evict(key(id), note(at, RemovalReason::Age, 1));
        store.apply(&batch).expect("apply");
    }
    let ids = |store: &Store| -> Vec<String> {
        store
            .journal()
            .expect("journal")
            .into_iter()
            .map(|(k, _)| k.key.image_id.short().to_owned())
            .collect()
    };
    assert_eq!(ids(&store), ["b", "c", "d"], "the oldest beyond 3 went");
    assert_eq!(store.names(&key("a")).expect("names"), None);
    // "c" comes back as a record before its entry ages out: its names stay.
    seed(&store, "c", "c:2");
    seed(&store, "e", "e:1");
    let mut batch = Batch::new();
    batch.evict(key("e"), note(100 + 13 * DAY, RemovalReason::Age, 1));
    store.apply(&batch).expect("apply");
    assert_eq!(
        ids(&store),
        ["d", "e"],
        "b and c are more than 10 days older than e"
    );
    assert_eq!(store.names(&key("b")).expect("names"), None);
    assert_eq!(store.names(&key("c")).expect("names"), Some(names("c:2")));
    assert_eq!(
        store.meta(retention_keys::MAX_ENTRIES).expect("meta"),
        Some(3)
    );
    assert_eq!(
        store.meta(retention_keys::MAX_AGE_SECS).expect("meta"),
        Some(10 * 86_400)
    );
    assert!(check(&mut store).is_empty(), "{:?}", check(&mut store));
}

/// The regret: a pull's mark (or a detect's sighting) that creates a record of an image id
/// with a journal entry within retention marks the newest entry re-pulled, once.
#[test]
fn a_record_created_for_an_evicted_id_within_retention_marks_the_entry_re_pulled_once() {
    let (_dir, store) = temp_store();
    seed(&store, "a", "a:1");
    let mut evict = Batch::new();
    evict.evict(key("a"), note(1_000, RemovalReason::Space, 2));
    store.apply(&evict).expect("apply");
    let mut pull = Batch::new();
    pull.mark_used(key("a"), UnixNanos::from_secs(1_300), Some(7));
    let applied = store.apply_reporting(&pull).expect("apply");
    assert!(applied.committed);
    assert_eq!(applied.repulls.len(), 1);
    let repull = &applied.repulls[0];
    assert_eq!(repull.delay, Duration::from_secs(300));
    assert_eq!(repull.reason_label(), "space");
    let journal = store.journal().expect("journal");
    assert_eq!(journal[0].1.repulled_at, Some(UnixNanos::from_secs(1_300)));
    // A later mark of the existing record re-pulls nothing.
    let mut again = Batch::new();
    again.mark_used(key("a"), UnixNanos::from_secs(1_400), None);
    assert!(
        store
            .apply_reporting(&again)
            .expect("apply")
            .repulls
            .is_empty()
    );
}

#[test]
fn a_re_pull_after_the_retention_age_is_no_regret() {
    let (_dir, store) = temp_store();
    store.set_journal_retention(JournalRetention {
        max_age: Duration::from_secs(3_600),
        max_entries: 10,
    });
    seed(&store, "a", "a:1");
    let mut evict = Batch::new();
    evict.evict(key("a"), note(1_000, RemovalReason::Age, 1));
    store.apply(&evict).expect("apply");
    let mut pull = Batch::new();
    pull.mark_used(key("a"), UnixNanos::from_secs(1_000 + 3_601), Some(7));
    assert!(
        store
            .apply_reporting(&pull)
            .expect("apply")
            .repulls
            .is_empty()
    );
    assert_eq!(store.journal().expect("journal")[0].1.repulled_at, None);
}

fn kinds(violations: &[Violation]) -> Vec<&'static str> {
    violations
        .iter()
        .map(|v| match v {
            Violation::OrphanNames { .. } => "orphan_names",
            Violation::JournalOverCount { .. } => "over_count",
            Violation::JournalPastMaxAge { .. } => "past_max_age",
            Violation::FutureStamp { .. } => "future_stamp",
            Violation::Undecodable { table, .. } => table,
            _ => "other",
        })
        .collect()
}

#[test]
fn check_reports_names_of_nothing() {
    let (_dir, mut store) = temp_store();
    store.raw_insert_for_tests("names", &key("x"), &names("x:1"));
    assert_eq!(kinds(&check(&mut store)), ["orphan_names"]);
}

#[test]
fn check_reports_a_journal_beyond_its_count() {
    let (_dir, mut store) = temp_store();
    for id in ["a", "b"] {
        seed(&store, id, "t:1");
        let mut batch = Batch::new();
        batch.evict(key(id), note(100, RemovalReason::Age, 1));
        store.apply(&batch).expect("apply");
    }
    assert!(check(&mut store).is_empty());
    let mut batch = Batch::new();
    batch.set_meta(retention_keys::MAX_ENTRIES, 1);
    store.apply(&batch).expect("apply");
    assert_eq!(kinds(&check(&mut store)), ["over_count"]);
}

#[test]
fn check_reports_a_journal_entry_past_its_age() {
    let (_dir, mut store) = temp_store();
    for (id, at) in [("a", 100), ("b", 100 + 2 * DAY)] {
        seed(&store, id, "t:1");
        let mut batch = Batch::new();
        batch.evict(key(id), note(at, RemovalReason::Age, 1));
        store.apply(&batch).expect("apply");
    }
    assert!(check(&mut store).is_empty());
    let mut batch = Batch::new();
    batch.set_meta(retention_keys::MAX_AGE_SECS, DAY);
    store.apply(&batch).expect("apply");
    assert_eq!(kinds(&check(&mut store)), ["past_max_age"]);
}

#[test]
fn check_reports_undecodable_journal_and_names_entries() {
    let (_dir, mut store) = temp_store();
    store.raw_bytes_for_tests("journal", b"\x01short", &[9; 64]);
    store.raw_bytes_for_tests("names", b"\x07", b"\x01");
    let mut found = kinds(&check(&mut store));
    found.sort_unstable();
    assert_eq!(found, ["journal", "names"]);
}

/// A reopened store prunes with the retention the file records (a `pull` without an agent
/// keeps the agent's), until it is set again.
#[test]
fn a_reopened_store_keeps_the_retention_the_file_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.redb");
    let retention = JournalRetention {
        max_age: Duration::from_secs(7 * 86_400),
        max_entries: 2,
    };
    {
        let store = Store::open(&path, UnixNanos::from_secs(1)).expect("open");
        assert_eq!(store.journal_retention(), JournalRetention::default());
        store.set_journal_retention(retention);
        seed(&store, "a", "a:1");
        let mut batch = Batch::new();
        batch.evict(key("a"), note(100, RemovalReason::Age, 1));
        store.apply(&batch).expect("apply");
    }
    let store = Store::open(&path, UnixNanos::from_secs(1)).expect("reopen");
    assert_eq!(store.journal_retention(), retention);
}

/// Detect's comparison of names: the last entry of a key in the runtime's list wins, and only
/// differences come back (an image without names and none stored is none).
#[test]
fn names_that_differ_takes_the_last_entry_of_a_key_and_only_differences() {
    use crate::model::{ImageId, RuntimeImage};
    let (_dir, store) = temp_store();
    seed(&store, "a", "a:2");
    let listed = |id: &str, tag: Option<&str>| RuntimeImage {
        id: ImageId::new(format!("sha256:{id}")),
        repo_tags: tag.map(|t| vec![t.to_owned()]).unwrap_or_default(),
        repo_digests: tag
            .map(|t| vec![format!("{}@sha256:feed", t.split(':').next().unwrap_or(t))])
            .unwrap_or_default(),
        ..RuntimeImage::default()
    };
    // a listed twice, the last entry as stored: no difference; b new with names; c without.
    let images = vec![
        listed("a", Some("a:1")),
        listed("b", Some("b:1")),
        listed("a", Some("a:2")),
        listed("c", None),
    ];
    let differ = store.names_that_differ(&images).expect("names");
    assert_eq!(differ, vec![(key("b"), names("b:1"))]);
    // The other way round, the last entry differs from the stored names.
    let swapped = vec![listed("a", Some("a:2")), listed("a", Some("a:1"))];
    let differ = store.names_that_differ(&swapped).expect("names");
    assert_eq!(differ, vec![(key("a"), names("a:1"))]);
}

/// The merged walk over a list in key order finds exactly the differences the per-image
/// lookups find (in key order), for random stored names and random lists, handlers
/// included; a list out of key order is refused.
#[test]
fn names_that_differ_in_key_order_is_names_that_differ_over_the_folded_list() {
    use crate::model::{ImageId, RuntimeImage};
    for seed_no in 0..30u64 {
        let mut rng = fastrand::Rng::with_seed(seed_no);
        let (_dir, store) = temp_store();
        let handlers = ["", "kata", "runc"];
        let mut batch = Batch::new();
        for id in 0..12u8 {
            for handler in handlers {
                if rng.bool() {
                    let key = RecordKey::new(format!("sha256:{id:02}"), handler);
                    batch.upsert(key.clone(), record(10, 20, 7));
                    batch.set_names(key, names(&format!("t{}:{}", id, rng.u8(0..2))));
                }
            }
        }
        store.apply(&batch).expect("apply");
        let images: Vec<RuntimeImage> = (0..rng.usize(0..40))
            .map(|_| {
                let id = rng.u8(0..14);
                let tag = (rng.u8(0..4) > 0).then(|| format!("t{}:{}", id, rng.u8(0..2)));
                RuntimeImage {
                    id: ImageId::new(format!("sha256:{id:02}")),
                    runtime_handler: handlers[rng.usize(0..3)].to_owned(),
                    repo_tags: tag.iter().cloned().collect(),
                    repo_digests: tag
                        .map(|t| vec![format!("{}@sha256:feed", t.split(':').next().unwrap_or(&t))])
                        .unwrap_or_default(),
                    ..RuntimeImage::default()
                }
            })
            .collect();
        let mut want = store.names_that_differ(&images).expect("names");
        want.sort_by(|a, b| a.0.cmp(&b.0));
        // The list folded as detect folds it: the last entry of a key, in key order.
        let mut folded: std::collections::BTreeMap<RecordKey, &RuntimeImage> =
            std::collections::BTreeMap::new();
        for image in &images {
            folded.insert(image.record_key(), image);
        }
        let got = store
            .names_that_differ_in_key_order(folded.values().copied())
            .expect("names");
        assert_eq!(got, want, "seed {seed_no}");
        if folded.len() > 1 {
            let backwards = store.names_that_differ_in_key_order(folded.values().rev().copied());
            assert!(
                matches!(backwards, Err(StoreError::UnorderedNames { .. })),
                "seed {seed_no}: {backwards:?}"
            );
        }
    }
}

/// Regression: one removal journaled while the clock was ahead (2099), the clock corrected;
/// a later removal (2026) is kept, by age and by count, and the check flags only the stamp
/// from the future.
#[test]
fn a_journal_entry_from_a_clock_once_ahead_does_not_prune_later_entries() {
    const Y2099: i64 = 4_070_908_800;
    const Y2026: i64 = 1_780_000_000;
    // (max_entries, the journal after b, what check_at(2026) reports)
    let cases: [(u32, &[&str], &[&str]); 2] = [
        (2, &["b", "a"], &["future_stamp"]),
        // Full: the count drops the oldest entry not written by this transaction.
        (1, &["b"], &[]),
    ];
    for (max_entries, want, want_violations) in cases {
        let (_dir, mut store) = temp_store();
        store.set_journal_retention(JournalRetention {
            max_age: Duration::from_secs(30 * 86_400),
            max_entries,
        });
        seed(&store, "a", "a:1");
        let mut batch = Batch::new();
        batch.evict(key("a"), note(Y2099, RemovalReason::Age, 1));
        store.apply(&batch).expect("apply");
        seed(&store, "b", "b:1");
        let mut batch = Batch::new();
        batch.evict(key("b"), note(Y2026, RemovalReason::Age, 1));
        store.apply(&batch).expect("apply");
        let ids: Vec<String> = store
            .journal()
            .expect("journal")
            .into_iter()
            .map(|(k, _)| k.key.image_id.short().to_owned())
            .collect();
        assert_eq!(ids, want, "max_entries {max_entries}");
        assert_eq!(store.names(&key("b")).expect("names"), Some(names("b:1")));
        let violations = store.check_at(UnixNanos::from_secs(Y2026)).expect("check");
        assert_eq!(kinds(&violations), want_violations, "{violations:?}");
        for v in &violations {
            assert!(v.to_string().starts_with("journal entry of "), "{v}");
        }
    }
}

/// An entry a transaction marks re-pulled is not pruned by that transaction, even when a
/// newer entry (here 5 minutes ahead, inside the future tolerance) puts it past the age.
#[test]
fn an_entry_marked_re_pulled_is_not_pruned_by_the_marking_transaction() {
    let (_dir, store) = temp_store();
    store.set_journal_retention(JournalRetention {
        max_age: Duration::from_secs(DAY as u64),
        max_entries: 100,
    });
    let now = 1_000 + DAY - 60;
    seed(&store, "b", "b:1");
    let mut batch = Batch::new();
    batch.evict(key("b"), note(now + 300, RemovalReason::Space, 1));
    store.apply(&batch).expect("apply");
    seed(&store, "a", "a:1");
    let mut batch = Batch::new();
    batch.evict(key("a"), note(1_000, RemovalReason::Space, 1));
    store.apply(&batch).expect("apply");
    let mut pull = Batch::new();
    pull.mark_used(key("a"), UnixNanos::from_secs(now), Some(7));
    let applied = store.apply_reporting(&pull).expect("apply");
    assert_eq!(applied.repulls.len(), 1);
    let journal = store.journal().expect("journal");
    let marked: Vec<_> = journal
        .iter()
        .filter(|(_, e)| e.repulled_at.is_some())
        .map(|(k, _)| k.key.image_id.short().to_owned())
        .collect();
    assert_eq!(marked, ["a"]);
}

/// The journal's keys the store holds (`journal_keys.rs`) are the committed journal's after
/// every transaction: random evictions, re-pulls, plain removals, batches that change nothing
/// and a small retention pruning by count, over a few ids and two handlers.
#[test]
fn the_journal_keys_held_in_memory_are_the_journals_after_every_transaction() {
    use super::super::journal_keys::JournalKeys;
    for seed_no in 0..20u64 {
        let mut rng = fastrand::Rng::with_seed(seed_no);
        let (_dir, store) = temp_store();
        store.set_journal_retention(JournalRetention {
            max_age: Duration::from_secs(30 * DAY as u64),
            max_entries: 6,
        });
        let mut at = 100;
        for _ in 0..80 {
            at += rng.i64(1..50);
            let key = RecordKey::new(
                format!("sha256:{}", rng.u8(0..5)),
                ["", "kata"][rng.usize(0..2)],
            );
            let mut batch = Batch::new();
            match rng.u8(0..4) {
                0 => batch.evict(key.clone(), note(at, RemovalReason::Space, 1)),
                1 => batch.remove(key.clone()),
                2 => batch.mark_used(key.clone(), UnixNanos::from_secs(at), Some(7)),
                _ => {
                    batch.upsert(key.clone(), record(at, at, 7));
                    batch.set_names(key.clone(), names(&format!("t{}:1", rng.u8(0..3))));
                }
            }
            store.apply(&batch).expect("apply");
            let held = store.lock_journal_keys().clone();
            let mut want = JournalKeys::default();
            for (k, _) in store.journal().expect("journal") {
                want.added(&k.key);
            }
            if let Some(held) = held {
                assert_eq!(held, want, "seed {seed_no} at {at}");
            }
        }
        assert!(store.lock_journal_keys().is_some(), "seed {seed_no}: built");
    }
}

/// Issue 53 item 4: a new image's record, a plain removal and the names walk read no more of
/// the history when the journal is long: before, each read the journal whole (or stepped over
/// every journaled image's names), so every simulated step cost in proportion to the past.
#[test]
fn a_new_record_a_removal_and_the_names_walk_read_no_more_rows_when_the_journal_is_longer() {
    use crate::model::{ImageId, RuntimeImage};
    let rows_for = |journaled: u32| {
        let (_dir, store) = temp_store();
        let mut batch = Batch::new();
        for i in 0..journaled {
            batch.upsert(key(&format!("j{i:05}")), record(10, 20, 7));
            batch.set_names(key(&format!("j{i:05}")), names(&format!("j{i}:1")));
        }
        store.apply(&batch).expect("apply");
        let mut evict = Batch::new();
        for i in 0..journaled {
            evict.evict(
                key(&format!("j{i:05}")),
                note(100 + i64::from(i), RemovalReason::Space, 1),
            );
        }
        store.apply(&evict).expect("apply");
        assert_eq!(store.journal().expect("journal").len(), journaled as usize);
        seed(&store, "zz", "zz:1");
        let before = store.history_rows_read();
        // A new image's record (a pull's mark), then a plain removal of another.
        let mut pull = Batch::new();
        pull.mark_used(key("new"), UnixNanos::from_secs(50_000), Some(7));
        assert!(
            store
                .apply_reporting(&pull)
                .expect("apply")
                .repulls
                .is_empty()
        );
        let mut remove = Batch::new();
        remove.remove(key("zz"));
        assert!(store.apply(&remove).expect("apply"));
        // The names walk for the one listed image past every journaled image's names.
        let listed = RuntimeImage {
            id: ImageId::new("sha256:zz"),
            repo_tags: vec!["zz:2".to_owned()],
            ..RuntimeImage::default()
        };
        assert_eq!(
            store
                .names_that_differ_in_key_order(std::iter::once(&listed))
                .expect("names")
                .len(),
            1
        );
        store.history_rows_read() - before
    };
    let short = rows_for(20);
    let long = rows_for(2_000);
    assert_eq!(
        short, long,
        "rows read: {short} with 20 entries, {long} with 2,000"
    );
    assert!(long <= 4, "{long} rows read");
}
