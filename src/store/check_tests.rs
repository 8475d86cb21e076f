//! `Store::check`'s negative tests: one per violation kind of the records, the eviction index,
//! backoff and meta, each written through the test-only raw path (`raw_write_for_tests`), which
//! bypasses every rule of `apply`, and each asserting the exact violations reported. A check
//! that reported nothing fails every one of them. (The journal's and names' kinds are in
//! `journal/tests.rs`; the clock's in `check.rs`.)

use super::codec::{Codec, IndexKey, MetaKey};
use super::{Batch, IndexMismatch, Store, StoreError, Violation, meta_keys};
use crate::model::{ImageRecord, RecordKey, UnixNanos};

/// The record key of image `sha256:<id>` (default handler).
pub(super) fn key(id: &str) -> RecordKey {
    RecordKey::new(format!("sha256:{id}"), "")
}

/// A record of 10 bytes first detected at `first` and last used at `last` (seconds).
pub(super) fn record(first: i64, last: i64) -> ImageRecord {
    ImageRecord {
        first_detected: UnixNanos::from_secs(first),
        last_used: UnixNanos::from_secs(last),
        size: 10,
        pinned: false,
    }
}

/// A store with two records written through `apply`, checked clean.
fn store_with_two() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Store::open(&dir.path().join("db.redb"), UnixNanos(1)).expect("open");
    let mut batch = Batch::new();
    batch.upsert(key("a"), record(1, 5));
    batch.upsert(key("b"), record(2, 6));
    store.apply(&batch).expect("apply");
    assert_eq!(store.check().expect("check"), []);
    (dir, store)
}

fn row(key: &RecordKey, record: &ImageRecord) -> Vec<u8> {
    IndexKey::of(key, record).encode()
}

#[test]
fn check_reports_an_index_entry_without_a_record() {
    let (_dir, mut store) = store_with_two();
    let ghost = IndexKey::of(&key("ghost"), &record(3, 4));
    store.raw_write_for_tests("eviction_prefix", &ghost.encode(), Some(&[]));
    assert_eq!(
        store.check().expect("check"),
        [Violation::StrayIndexEntry {
            entry: ghost.to_string()
        }]
    );
    // The scan meets it too, and says so rather than skipping it.
    let err = store
        .eviction_order()
        .expect("scan")
        .find_map(Result::err)
        .expect("the stray row is an error");
    match err {
        StoreError::IndexMismatch {
            detail: IndexMismatch::EntryWithoutRecord { row },
            ..
        } => assert_eq!(row, ghost),
        other => panic!("not the stray row: {other}"),
    }
}

#[test]
fn check_reports_a_record_without_its_index_entry() {
    let (_dir, mut store) = store_with_two();
    store.raw_write_for_tests("images", &key("c").encode(), Some(&record(3, 7).encode()));
    assert_eq!(
        store.check().expect("check"),
        [Violation::MissingIndexEntry {
            key: key("c").to_string()
        }]
    );
    // Removing a record's only row is the same violation.
    store.raw_write_for_tests("eviction_prefix", &row(&key("a"), &record(1, 5)), None);
    assert_eq!(
        store.check().expect("check"),
        [
            Violation::MissingIndexEntry {
                key: key("a").to_string()
            },
            Violation::MissingIndexEntry {
                key: key("c").to_string()
            },
        ]
    );
    // A write that moves such a record meets the missing row and refuses, naming the record.
    let mut batch = Batch::new();
    batch.upsert(key("a"), record(1, 9));
    match store.apply(&batch) {
        Err(StoreError::IndexMismatch {
            detail: IndexMismatch::RecordWithoutEntry { key: found },
            ..
        }) => assert_eq!(found, key("a")),
        other => panic!("the missing row was not refused: {other:?}"),
    }
}

#[test]
fn check_reports_an_index_entry_that_does_not_match_its_record() {
    let (_dir, mut store) = store_with_two();
    // The record moves without its row: the old row matches nothing, the record has none.
    store.raw_write_for_tests("images", &key("a").encode(), Some(&record(1, 9).encode()));
    assert_eq!(
        store.check().expect("check"),
        [
            Violation::StrayIndexEntry {
                entry: IndexKey::of(&key("a"), &record(1, 5)).to_string()
            },
            Violation::MissingIndexEntry {
                key: key("a").to_string()
            },
        ]
    );
    // A write through `apply` refuses to build on the broken index.
    let mut batch = Batch::new();
    batch.upsert(key("a"), record(1, 10));
    let err = store.apply(&batch).expect_err("mismatch");
    assert!(err.to_string().contains("no eviction-index entry"), "{err}");
}

#[test]
fn a_row_shared_by_two_records_checks_clean_and_stays_until_the_last_goes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Store::open(&dir.path().join("db.redb"), UnixNanos(1)).expect("open");
    // Same times, same 16-byte prefix: one row.
    let (x, y) = (key("00000000aa"), key("00000000bb"));
    assert_eq!(row(&x, &record(1, 5)), row(&y, &record(1, 5)));
    let mut batch = Batch::new();
    batch.upsert(x.clone(), record(1, 5));
    batch.upsert(y.clone(), record(1, 5));
    store.apply(&batch).expect("apply");
    assert_eq!(store.check().expect("check"), []);
    let mut batch = Batch::new();
    batch.remove(x.clone());
    store.apply(&batch).expect("apply");
    assert_eq!(store.check().expect("check"), []);
    let order: Vec<RecordKey> = store
        .eviction_order()
        .expect("scan")
        .map(|r| r.expect("entry").key)
        .collect();
    assert_eq!(order, std::slice::from_ref(&y));
    // The row's last record removed raw: the row is now stray.
    store.raw_write_for_tests("images", &y.encode(), None);
    assert_eq!(
        store.check().expect("check"),
        [Violation::StrayIndexEntry {
            entry: IndexKey::of(&y, &record(1, 5)).to_string()
        }]
    );
}

#[test]
fn check_reports_undecodable_records_index_rows_backoff_and_meta() {
    let cases: [(&str, Vec<u8>, Vec<u8>, &str); 5] = [
        // Fixed-width columns (record, index row, meta value) get the right width: redb
        // itself refuses any other.
        // A record value of an unknown layout version.
        (
            "images",
            key("bad").encode(),
            {
                let mut b = record(1, 1).encode();
                b[0] = 9;
                b
            },
            "image record: unknown layout version 9",
        ),
        // A record key without its terminator.
        (
            "images",
            b"\x01sha256:x".to_vec(),
            record(1, 1).encode(),
            "record key: invalid image id terminator",
        ),
        // An index row of an unknown layout version (the right width).
        (
            "eviction_prefix",
            {
                let mut b = IndexKey::of(&key("a"), &record(1, 5)).encode();
                b[0] = 9;
                b
            },
            Vec::new(),
            "eviction index key: unknown layout version 9",
        ),
        (
            "backoff",
            vec![1, b'k'],
            vec![7],
            "unknown layout version 7",
        ),
        (
            "meta",
            MetaKey("x".into()).encode(),
            vec![7; 9],
            "unknown layout version 7",
        ),
    ];
    for (table, k, v, detail) in cases {
        let (_dir, mut store) = store_with_two();
        store.raw_write_for_tests(table, &k, Some(&v));
        let found = store.check().expect("check");
        assert_eq!(found.len(), 1, "{table}: {found:?}");
        match &found[0] {
            Violation::Undecodable {
                table: t,
                detail: d,
            } => {
                assert_eq!(*t, table);
                assert!(d.contains(detail), "{table}: {d}");
            }
            other => panic!("{table}: {other:?}"),
        }
    }
}

#[test]
fn check_reports_a_missing_schema_version() {
    let (_dir, mut store) = store_with_two();
    store.raw_write_for_tests(
        "meta",
        &MetaKey(meta_keys::SCHEMA_VERSION.into()).encode(),
        None,
    );
    assert_eq!(
        store.check().expect("check"),
        [Violation::MissingSchemaVersion]
    );
}

/// Schema 4's pins and schema 5's tables: an undecodable row of each is reported, naming its
/// table.
#[test]
fn check_reports_undecodable_pins_uses_pulls_and_warm_rows() {
    let (_dir, mut store) = store_with_two();
    store.raw_bytes_for_tests("pins", &[1, b'a', 0], &[9]);
    store.raw_bytes_for_tests("uses", &[1, 7, 0, 0, 0, 0, 0, 0, 0, 0], &[2; 9]);
    store.raw_bytes_for_tests("pulls", &[1], &[1]);
    store.raw_bytes_for_tests("warm", &[1, 0, 0, 0, 0], &[2]);
    let tables: Vec<&str> = store
        .check()
        .expect("check")
        .iter()
        .map(|v| match v {
            Violation::Undecodable { table, .. } => *table,
            other => panic!("not an undecodable row: {other}"),
        })
        .collect();
    assert_eq!(tables, ["pins", "uses", "pulls", "warm"]);
}

#[test]
fn check_reports_two_open_uses_of_one_image_and_a_use_seen_before_it_started() {
    use crate::model::{UseInterval, UseKey};
    let (_dir, mut store) = store_with_two();
    let mut batch = Batch::new();
    batch.observe_uses(UnixNanos::from_secs(10), vec![key("a")]);
    store.apply(&batch).expect("apply");
    assert_eq!(store.check().expect("check"), []);
    // A second open interval of `a`, last seen before it started.
    let second = UseKey {
        closed: false,
        started_at: UnixNanos::from_secs(20),
        key: key("a"),
    };
    let early = UseInterval {
        last_seen: UnixNanos::from_secs(15),
    };
    store.raw_bytes_for_tests("uses", &second.encode(), &early.encode());
    assert_eq!(
        store.check().expect("check"),
        [
            Violation::UseSeenBeforeStart {
                key: key("a").to_string(),
                started_at: UnixNanos::from_secs(20).0,
                last_seen: UnixNanos::from_secs(15).0,
            },
            Violation::DuplicateOpenUse {
                key: key("a").to_string(),
                open: 2,
            },
        ]
    );
}

#[test]
fn check_reports_pulls_over_the_retention_and_a_gap_in_the_warm_rows() {
    use super::codec::WarmPosition;
    use crate::model::{PullEntry, PullKey, PullOrigin, StoredWarmState, WarmRow};
    let (_dir, mut store) = store_with_two();
    let mut batch = Batch::new();
    batch.set_meta(super::retention_keys::MAX_ENTRIES, 1);
    store.apply(&batch).expect("apply");
    for at in [1, 2] {
        let k = PullKey {
            at: UnixNanos::from_secs(at),
            key: key("a"),
        };
        let v = PullEntry {
            size: 1,
            origin: PullOrigin::Warm,
            took: std::time::Duration::ZERO,
            name: String::new(),
        };
        store.raw_bytes_for_tests("pulls", &k.encode(), &v.encode());
    }
    let row = WarmRow {
        image: "app:1".to_owned(),
        runtime_handler: String::new(),
        state: StoredWarmState::Present,
        since: UnixNanos(1),
        image_id: String::new(),
    };
    store.raw_bytes_for_tests("warm", &WarmPosition(1).encode(), &row.encode());
    assert_eq!(
        store.check().expect("check"),
        [
            Violation::HistoryOverCount {
                table: "pulls",
                entries: 2,
                max_entries: 1,
            },
            Violation::WarmPositionGap {
                position: 1,
                expected: 0,
            },
        ]
    );
}
