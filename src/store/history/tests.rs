//! The use and pull history's rules (schema 5), through `Store::apply`.

use std::time::Duration;

use super::super::{Batch, Store};
use crate::model::{
    JournalRetention, PullEntry, PullKey, PullOrigin, RecordKey, StoredWarmState, UnixNanos,
    UseInterval, UseKey, WarmRow,
};

fn key(id: &str) -> RecordKey {
    RecordKey::new(format!("sha256:{id}"), "")
}

fn secs(s: i64) -> UnixNanos {
    UnixNanos::from_secs(s)
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("db.redb"), UnixNanos(1)).expect("open");
    (dir, store)
}

fn observe(store: &Store, at: i64, in_use: &[&str]) -> bool {
    let mut batch = Batch::new();
    batch.observe_uses(secs(at), in_use.iter().map(|id| key(id)).collect());
    store.apply(&batch).expect("apply")
}

fn uses(store: &Store) -> Vec<(bool, i64, String, i64)> {
    store
        .uses()
        .expect("uses")
        .into_iter()
        .map(|(k, v)| {
            (
                k.closed,
                k.started_at.0 / 1_000_000_000,
                k.key.image_id.as_str().to_owned(),
                v.last_seen.0 / 1_000_000_000,
            )
        })
        .collect()
}

#[test]
fn a_long_use_is_one_row_and_closes_when_no_longer_seen() {
    let (_dir, store) = store();
    assert!(observe(&store, 100, &["a", "b"]));
    for t in [400, 700, 1000] {
        assert!(observe(&store, t, &["a", "b"]));
    }
    // A detect at a time not later than last_seen changes nothing and commits nothing.
    let commits = store.commits();
    assert!(!observe(&store, 1000, &["a", "b"]));
    assert_eq!(store.commits(), commits);
    assert_eq!(
        uses(&store),
        [
            (false, 100, "sha256:a".to_owned(), 1000),
            (false, 100, "sha256:b".to_owned(), 1000),
        ]
    );
    // b stops; a goes on; c starts.
    assert!(observe(&store, 1300, &["a", "c"]));
    assert_eq!(
        uses(&store),
        [
            (false, 100, "sha256:a".to_owned(), 1300),
            (false, 1300, "sha256:c".to_owned(), 1300),
            (true, 100, "sha256:b".to_owned(), 1000),
        ]
    );
    // b again: a new interval, not the old one reopened.
    assert!(observe(&store, 1600, &["b"]));
    assert_eq!(
        uses(&store),
        [
            (false, 1600, "sha256:b".to_owned(), 1600),
            (true, 100, "sha256:a".to_owned(), 1300),
            (true, 100, "sha256:b".to_owned(), 1000),
            (true, 1300, "sha256:c".to_owned(), 1300),
        ]
    );
}

#[test]
fn a_container_event_opens_a_use_once_and_the_next_detect_closes_or_keeps_it() {
    let (_dir, store) = store();
    let mut event = Batch::new();
    event.open_use(key("a"), secs(50));
    assert!(store.apply(&event).expect("apply"));
    let mut again = Batch::new();
    again.open_use(key("a"), secs(60));
    assert!(store.apply(&again).expect("apply"));
    assert_eq!(uses(&store), [(false, 50, "sha256:a".to_owned(), 60)]);
    // The detect sees it running: the same interval goes on.
    assert!(observe(&store, 100, &["a"]));
    assert_eq!(uses(&store), [(false, 50, "sha256:a".to_owned(), 100)]);
    // The container exited before the next detect.
    assert!(observe(&store, 200, &[]));
    assert_eq!(uses(&store), [(true, 50, "sha256:a".to_owned(), 100)]);
}

#[test]
fn closed_uses_and_pulls_are_pruned_to_the_retention_open_uses_never() {
    let (_dir, store) = store();
    store.set_journal_retention(JournalRetention {
        max_age: Duration::from_secs(1000),
        max_entries: 2,
    });
    // Four closed intervals (d, e, f, g), one that stays open (a).
    for (t, id) in [(10, "d"), (20, "e"), (30, "f"), (40, "g")] {
        assert!(observe(&store, t, &["a", id]));
    }
    assert!(observe(&store, 50, &["a"]));
    // By count: the two oldest closed ones went.
    assert_eq!(
        uses(&store),
        [
            (false, 10, "sha256:a".to_owned(), 50),
            (true, 30, "sha256:f".to_owned(), 30),
            (true, 40, "sha256:g".to_owned(), 40),
        ]
    );
    // By age: at 1035 the one last seen at 30 is more than 1000 s old, the one last seen at
    // 40 is not; a is open and stays, however old its start.
    assert!(observe(&store, 1035, &["a"]));
    assert_eq!(
        uses(&store),
        [
            (false, 10, "sha256:a".to_owned(), 1035),
            (true, 40, "sha256:g".to_owned(), 40),
        ]
    );
    let pull = |at: i64| {
        let mut batch = Batch::new();
        batch.record_pull(
            PullKey {
                at: secs(at),
                key: key("p"),
            },
            PullEntry {
                size: 7,
                origin: PullOrigin::Warm,
                took: Duration::from_secs(1),
                name: "reg/p:1".to_owned(),
            },
        );
        assert!(store.apply(&batch).expect("apply"));
    };
    for at in [100, 200, 300] {
        pull(at);
    }
    let times = |store: &Store| -> Vec<i64> {
        store
            .pulls()
            .expect("pulls")
            .iter()
            .map(|(k, _)| k.at.0 / 1_000_000_000)
            .collect()
    };
    assert_eq!(times(&store), [200, 300]);
    pull(1250);
    assert_eq!(times(&store), [300, 1250]);
    pull(2300);
    assert_eq!(times(&store), [2300]);
}

#[test]
fn a_record_created_without_a_pull_of_its_own_is_recorded_as_detected() {
    let (_dir, store) = store();
    // A detect's sighting creates `a`: someone else pulled it.
    let mut detect = Batch::new();
    detect.sight(
        key("a"),
        crate::model::Sighting {
            now: secs(10),
            in_use: false,
            size: 123,
            pinned: false,
            used_at: UnixNanos::NEVER,
        },
    );
    store.apply(&detect).expect("apply");
    // imagekeeper's own pull of `b`: its mark with the pull, recorded once, as a pull.
    let mut pulled = Batch::new();
    pulled.mark_used(key("b"), secs(20), Some(456));
    pulled.record_pull(
        PullKey {
            at: secs(20),
            key: key("b"),
        },
        PullEntry {
            size: 456,
            origin: PullOrigin::Pull,
            took: Duration::from_secs(3),
            name: "reg/b:1".to_owned(),
        },
    );
    store.apply(&pulled).expect("apply");
    // A later mark of an existing record records nothing.
    let mut mark = Batch::new();
    mark.mark_used(key("a"), secs(30), None);
    store.apply(&mark).expect("apply");
    let pulls: Vec<(i64, String, u64, &str)> = store
        .pulls()
        .expect("pulls")
        .iter()
        .map(|(k, e)| {
            (
                k.at.0 / 1_000_000_000,
                k.key.image_id.as_str().to_owned(),
                e.size,
                e.origin.as_str(),
            )
        })
        .collect();
    assert_eq!(
        pulls,
        [
            (10, "sha256:a".to_owned(), 123, "detected"),
            (20, "sha256:b".to_owned(), 456, "pull"),
        ]
    );
}

#[test]
fn the_warm_table_is_replaced_whole_and_only_when_it_differs() {
    let (_dir, store) = store();
    let row = |image: &str, state| WarmRow {
        image: image.to_owned(),
        runtime_handler: String::new(),
        state,
        since: secs(5),
        image_id: String::new(),
    };
    let mut batch = Batch::new();
    batch.replace_warm(vec![
        row("a:1", StoredWarmState::Present),
        row("b:1", StoredWarmState::DoesNotFit),
        row("c:1", StoredWarmState::Pulling),
    ]);
    assert!(store.apply(&batch).expect("apply"));
    assert!(!store.apply(&batch).expect("the same rows again"));
    let mut shorter = Batch::new();
    shorter.replace_warm(vec![row("b:1", StoredWarmState::Present)]);
    assert!(store.apply(&shorter).expect("apply"));
    assert_eq!(
        store.warm_rows().expect("warm"),
        [row("b:1", StoredWarmState::Present)]
    );
}

#[test]
fn history_layouts_round_trip_and_refuse_bad_bytes() {
    use super::super::codec::{Codec, WarmPosition};
    let k = UseKey {
        closed: true,
        started_at: UnixNanos(-5),
        key: key("x"),
    };
    assert_eq!(UseKey::decode(&k.encode()), Ok(k.clone()));
    let mut bad = k.encode();
    bad[1] = 2;
    assert!(UseKey::decode(&bad).is_err());
    let v = UseInterval {
        last_seen: UnixNanos(9),
    };
    assert_eq!(UseInterval::decode(&v.encode()), Ok(v));
    let e = PullEntry {
        size: 1,
        origin: PullOrigin::Restore,
        took: Duration::from_nanos(77),
        name: "reg/x:1".to_owned(),
    };
    assert_eq!(PullEntry::decode(&e.encode()), Ok(e.clone()));
    let mut bad = e.encode();
    bad[9] = 9;
    assert!(PullEntry::decode(&bad).is_err());
    assert_eq!(
        WarmPosition::decode(&WarmPosition(3).encode()),
        Ok(WarmPosition(3))
    );
    // Open keys sort before closed ones, byte for byte as by value.
    let open = UseKey {
        closed: false,
        started_at: secs(100),
        key: key("x"),
    };
    assert!(open < k && open.encode() < k.encode());
}

#[test]
fn a_use_commits_but_does_not_move_the_stamps_of_a_detect_that_changed_no_record() {
    use super::super::meta_keys;
    let (_dir, store) = store();
    let mut batch = Batch::new();
    batch.observe_uses(secs(10), vec![key("a")]);
    batch.stamp_if_changed(meta_keys::LAST_DETECT, secs(10).0);
    let commits = store.commits();
    assert!(store.apply(&batch).expect("apply"));
    assert_eq!(store.commits(), commits + 1);
    assert_eq!(store.uses().expect("uses").len(), 1);
    assert_eq!(store.meta(meta_keys::LAST_DETECT).expect("meta"), None);
}

/// A retention lowered while the pull history is over it: the next transaction that writes
/// the journal (a removal, no pull) writes the new retention to `meta` and prunes the
/// histories to it too, so `Store::check` finds nothing over the count.
#[test]
fn a_lowered_retention_prunes_the_histories_with_the_next_journal_write() {
    let (_dir, mut store) = store();
    for at in [100, 200, 300] {
        let mut batch = Batch::new();
        batch.record_pull(
            PullKey {
                at: secs(at),
                key: key(&format!("p{at}")),
            },
            PullEntry {
                size: 7,
                origin: PullOrigin::Pull,
                took: Duration::from_secs(1),
                name: format!("reg/p:{at}"),
            },
        );
        assert!(store.apply(&batch).expect("apply"));
    }
    let mut batch = Batch::new();
    batch.upsert(
        key("gone"),
        crate::model::ImageRecord {
            first_detected: secs(400),
            last_used: secs(400),
            size: 5,
            pinned: false,
        },
    );
    store.apply(&batch).expect("apply");
    store.set_journal_retention(JournalRetention {
        max_age: Duration::from_secs(1_000_000),
        max_entries: 1,
    });
    let mut batch = Batch::new();
    batch.remove_unlisted_journaled(key("gone"), secs(400), secs(500));
    store.apply(&batch).expect("apply");
    assert_eq!(store.pulls().expect("pulls").len(), 1);
    assert_eq!(store.check().expect("check"), Vec::new());
}
