//! The record store on real files in temp dirs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use imagekeeper::model::{BackoffEntry, ImageRecord, RecordKey, UnixNanos};
use imagekeeper::store::{
    BackupConflict, Batch, CURRENT_SCHEMA_VERSION, Store, StoreError, meta_keys,
};
use proptest::prelude::*;

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.redb");
    (dir, path)
}

fn open(path: &Path) -> Store {
    Store::open(path, UnixNanos::from_secs(1_000)).expect("open store")
}

fn record(first: i64, last: i64, size: u64, pinned: bool) -> ImageRecord {
    ImageRecord {
        first_detected: UnixNanos::from_secs(first),
        last_used: UnixNanos::from_secs(last),
        size,
        pinned,
    }
}

fn key(id: &str) -> RecordKey {
    RecordKey::new(format!("sha256:{id}"), "")
}

fn eviction_ids(store: &Store) -> Vec<String> {
    store
        .eviction_order()
        .expect("scan")
        .map(|r| r.expect("entry").key.image_id.0)
        .collect()
}

#[test]
fn new_file_is_0600_in_a_0700_directory_with_schema_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nested/records.redb");
    let store = open(&path);
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().expect("parent")), 0o700);
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(CURRENT_SCHEMA_VERSION)
    );
    assert_eq!(
        store.meta(meta_keys::CREATED_AT).expect("meta"),
        Some(UnixNanos::from_secs(1_000).0)
    );
}

#[test]
fn eviction_order_is_last_used_then_first_detected_then_key() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let mut batch = Batch::new();
    batch.upsert(key("c"), record(10, 50, 1, false));
    batch.upsert(key("b"), record(20, 0, 1, false)); // never used sorts first
    batch.upsert(key("a"), record(30, 50, 1, false)); // tie on last_used: first_detected
    batch.upsert(key("d"), record(10, 50, 1, true)); // tie on both: key
    batch.upsert(key("e"), record(5, 40, 1, false));
    store.apply(&batch).expect("apply");
    assert_eq!(
        eviction_ids(&store),
        ["sha256:b", "sha256:e", "sha256:c", "sha256:d", "sha256:a"]
    );
    let before: Vec<String> = store
        .eviction_order_before(UnixNanos::from_secs(50))
        .expect("scan")
        .map(|r| r.expect("entry").key.image_id.0)
        .collect();
    assert_eq!(before, ["sha256:b", "sha256:e"]);
}

#[test]
fn records_in_key_order_walks_every_record_by_key_from_one_snapshot_and_resumes_at_a_key() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let mut rng = fastrand::Rng::with_seed(16);
    let mut batch = Batch::new();
    for i in 0..300u32 {
        let handler = if i % 7 == 0 { "kata" } else { "" };
        let id = format!("sha256:{:08x}", rng.u32(..));
        let rec = record(
            rng.i64(0..1_000),
            rng.i64(0..1_000),
            u64::from(i),
            i % 5 == 0,
        );
        batch.upsert(RecordKey::new(id, handler), rec);
    }
    store.apply(&batch).expect("apply");
    let all = store.records().expect("records");
    assert_eq!(all.len(), 300);
    let scan = store.records_in_key_order().expect("scan");
    // A write after the scan began is not in its snapshot.
    let mut late = Batch::new();
    late.upsert(key("0-late"), record(1, 1, 1, false));
    store.apply(&late).expect("apply");
    let scanned: Vec<_> = scan.map(|r| r.expect("entry")).collect();
    assert_eq!(scanned, all);
    let keys: Vec<&RecordKey> = scanned.iter().map(|r| &r.key).collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "strictly ascending keys"
    );
    // Resuming at a key includes it; at a key between two records, starts at the next one.
    let after_late = store.records().expect("records");
    let middle = &after_late[150].key;
    let resumed: Vec<_> = store
        .records_in_key_order_from(middle)
        .expect("scan")
        .map(|r| r.expect("entry"))
        .collect();
    assert_eq!(resumed, after_late[150..]);
    let between = RecordKey::new(middle.image_id.0.clone(), "\u{1}");
    let next = store
        .records_in_key_order_from(&between)
        .expect("scan")
        .next()
        .expect("a record after")
        .expect("entry");
    assert_eq!(next, after_late[151]);
    let empty_dir = tempfile::tempdir().expect("temp dir");
    let empty = open(&empty_dir.path().join("empty.redb"));
    assert_eq!(empty.records_in_key_order().expect("scan").count(), 0);
}

/// `get_many` reads sorted keys by one range scan merged with them and others by one lookup
/// each: both give every key's record (or `None`) in the keys' order, with keys missing before
/// the first record, between records, past the last, and a handler sorting between two.
#[test]
fn get_many_gives_each_keys_record_in_order_sorted_by_one_scan_or_unsorted_by_lookups() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let mut rng = fastrand::Rng::with_seed(39);
    let mut batch = Batch::new();
    for i in 0..400u32 {
        let handler = if i % 9 == 0 { "kata" } else { "" };
        let id = format!("sha256:{:08x}", rng.u32(1..u32::MAX - 1));
        batch.upsert(
            RecordKey::new(id, handler),
            record(rng.i64(0..1_000), rng.i64(0..1_000), u64::from(i), false),
        );
    }
    store.apply(&batch).expect("apply");
    let all = store.records().expect("records");
    let stored: BTreeMap<RecordKey, ImageRecord> =
        all.iter().map(|r| (r.key.clone(), r.record)).collect();
    // Every other record, and keys no record has: before the first, past the last, with a
    // handler between a record's and the next, and random ones.
    let mut keys: Vec<RecordKey> = all.iter().step_by(2).map(|r| r.key.clone()).collect();
    keys.push(RecordKey::new("sha256:00000000", ""));
    keys.push(RecordKey::new("sha256:ffffffff", "z"));
    keys.push(RecordKey::new(all[7].key.image_id.0.clone(), "\u{1}"));
    for _ in 0..50 {
        keys.push(RecordKey::new(format!("sha256:{:08x}", rng.u32(..)), ""));
    }
    keys.sort();
    keys.dedup();
    let expected: Vec<Option<ImageRecord>> = keys.iter().map(|k| stored.get(k).copied()).collect();
    assert!(expected.iter().filter(|r| r.is_some()).count() >= 200);
    assert!(expected.first().is_some_and(Option::is_none));
    assert!(expected.last().is_some_and(Option::is_none));
    assert_eq!(store.get_many(&keys).expect("sorted"), expected);
    // The same keys shuffled (read by lookups), and a prefix of the sorted ones.
    let mut shuffled: Vec<usize> = (0..keys.len()).collect();
    rng.shuffle(&mut shuffled);
    let got = store
        .get_many(shuffled.iter().map(|&i| &keys[i]))
        .expect("shuffled");
    let want: Vec<Option<ImageRecord>> = shuffled.iter().map(|&i| expected[i]).collect();
    assert_eq!(got, want);
    assert_eq!(store.get_many(&keys[..30]).expect("prefix"), expected[..30]);
    assert_eq!(store.get_many(&keys[..0]).expect("none"), Vec::new());
    assert_eq!(store.get_many(&keys[3..4]).expect("one"), expected[3..4]);
}

/// Records drawn so that many share (last_used, first_detected) and many share the 16-byte
/// key prefix schema 3's index keeps, so index rows stand for several records.
fn crowded_records(rng: &mut fastrand::Rng, n: usize) -> Vec<(RecordKey, ImageRecord)> {
    (0..n)
        .map(|_| {
            // "sha256:" + 8 hex digits fill the prefix; only 4 distinct prefixes.
            let id = format!("sha256:{:08x}{:056x}", rng.u32(0..4), rng.u64(..));
            let handler = ["", "kata", "runc"][rng.usize(0..3)];
            let first = rng.i64(0..5);
            let last = if rng.bool() { 0 } else { first + rng.i64(0..3) };
            let rec = record(first, last, rng.u64(..1 << 30), rng.u8(..10) == 0);
            (RecordKey::new(id, handler), rec)
        })
        .collect()
}

/// The old path: every record loaded and sorted by (last_used, first_detected, key).
fn sorted_eviction_order(store: &Store) -> Vec<imagekeeper::store::StoredRecord> {
    let mut all = store.records().expect("records");
    all.sort_by(|a, b| {
        (a.record.last_used, a.record.first_detected, &a.key).cmp(&(
            b.record.last_used,
            b.record.first_detected,
            &b.key,
        ))
    });
    all
}

#[test]
fn eviction_scan_gives_exactly_the_sorted_order_at_every_n_with_shared_index_rows() {
    use imagekeeper::store::EvictionKey;
    let mut rng = fastrand::Rng::with_seed(0x16);
    for n in [0usize, 1, 2, 10, 100, 1_000, 3_000] {
        let (_dir, path) = temp_db();
        let mut store = open(&path);
        let mut batch = Batch::new();
        let recs = crowded_records(&mut rng, n);
        for (k, r) in &recs {
            batch.upsert(k.clone(), *r);
        }
        store.apply(&batch).expect("apply");
        // Move, resize and remove a third of them, so rows are shared, split and emptied.
        let mut batch = Batch::new();
        for (i, (k, r)) in recs.iter().enumerate() {
            match i % 6 {
                0 => batch.remove(k.clone()),
                1 => batch.upsert(
                    k.clone(),
                    ImageRecord {
                        last_used: UnixNanos::from_secs(7),
                        ..*r
                    },
                ),
                2 => batch.upsert(
                    k.clone(),
                    ImageRecord {
                        size: r.size + 1,
                        ..*r
                    },
                ),
                _ => {}
            }
        }
        store.apply(&batch).expect("apply");
        let want = sorted_eviction_order(&store);
        let got: Vec<_> = store
            .eviction_order()
            .expect("scan")
            .map(|r| r.expect("entry"))
            .collect();
        assert_eq!(got, want, "n={n}");
        assert!(store.check().expect("check").is_empty(), "n={n}");
        // Resuming after any record gives the rest, in order.
        for at in (0..want.len()).step_by(want.len() / 25 + 1) {
            let after = EvictionKey::of(&want[at].key, &want[at].record);
            let rest: Vec<_> = store
                .eviction_order_after(&after)
                .expect("scan")
                .map(|r| r.expect("entry"))
                .collect();
            assert_eq!(rest, want[at + 1..], "n={n} after {at}");
        }
        // Bounded by last_used.
        for bound in 0..8 {
            let bound = UnixNanos::from_secs(bound);
            let before: Vec<_> = store
                .eviction_order_before(bound)
                .expect("scan")
                .map(|r| r.expect("entry"))
                .collect();
            let expected: Vec<_> = want
                .iter()
                .filter(|r| r.record.last_used < bound)
                .cloned()
                .collect();
            assert_eq!(before, expected, "n={n} before {bound:?}");
        }
    }
}

/// A file churned far above its live size (large backoff entries written, then removed) is
/// compacted by the next open, keeping every record; `compact_if_needed` gives way to a scan
/// still held, compacts once it is dropped, and then finds nothing to do.
#[test]
fn a_churned_file_is_compacted_at_open_and_between_cycles_keeping_every_record() {
    use imagekeeper::store::CompactOutcome;
    let (_dir, path) = temp_db();
    let churn = |store: &Store| {
        for chunk in 0..4 {
            let mut batch = Batch::new();
            for i in 0..500 {
                batch.put_backoff(
                    format!("pod_{chunk}-{i}"),
                    backoff(10, 1, &"x".repeat(4000)),
                );
            }
            store.apply(&batch).expect("apply");
        }
        for chunk in 0..4 {
            let mut batch = Batch::new();
            for i in 0..500 {
                batch.remove_backoff(format!("pod_{chunk}-{i}"));
            }
            store.apply(&batch).expect("apply");
        }
    };
    let store = open(&path);
    let mut batch = Batch::new();
    for i in 0..200 {
        batch.upsert(key(&format!("{i:03}")), record(i, i + 1, 10, false));
    }
    store.apply(&batch).expect("apply");
    let records = store.records().expect("records");
    churn(&store);
    let churned = std::fs::metadata(&path).expect("stat").len();
    assert!(churned > 8 << 20, "{churned}");
    drop(store);
    let mut store = open(&path);
    let reopened = std::fs::metadata(&path).expect("stat").len();
    assert!(
        reopened * 4 < churned,
        "{reopened} after open, {churned} before"
    );
    assert_eq!(store.records().expect("records"), records);
    assert!(store.check().expect("check").is_empty());

    churn(&store);
    let held = store.records_in_key_order().expect("scan");
    assert!(matches!(
        store.compact_if_needed().expect("compact"),
        CompactOutcome::ReadersActive { .. }
    ));
    drop(held);
    match store.compact_if_needed().expect("compact") {
        CompactOutcome::Compacted {
            file_bytes_before,
            file_bytes_after,
            ..
        } => assert!(file_bytes_after * 4 < file_bytes_before),
        other => panic!("{other:?}"),
    }
    // Not grown since: the file's size settles it, without counting the tables' pages.
    assert!(matches!(
        store.compact_if_needed().expect("compact"),
        CompactOutcome::NotNeeded {
            live_bytes: None,
            ..
        }
    ));
    assert_eq!(store.records().expect("records"), records);
    assert!(store.check().expect("check").is_empty());
}

#[test]
fn unchanged_batch_commits_nothing_and_a_changed_one_commits_once() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let start = store.commits();
    let mut batch = Batch::new();
    batch.upsert(key("a"), record(1, 2, 3, false));
    batch.put_backoff("uid_img".into(), backoff(10, 1, "boom"));
    batch.stamp_if_changed(meta_keys::LAST_DETECT, 5);
    assert!(store.apply(&batch).expect("apply"));
    assert_eq!(store.commits(), start + 1);
    assert!(
        !store.apply(&batch).expect("apply again"),
        "same batch again changes nothing"
    );
    assert!(!store.apply(&Batch::new()).expect("empty"), "empty batch");
    let mut removal_of_absent = Batch::new();
    removal_of_absent.remove(key("zzz"));
    removal_of_absent.remove_backoff("nope".into());
    assert!(!store.apply(&removal_of_absent).expect("apply"));
    assert_eq!(store.commits(), start + 1);
    assert_eq!(store.meta(meta_keys::LAST_DETECT).expect("meta"), Some(5));
}

#[test]
fn mark_used_creates_or_bumps_last_used() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let mut batch = Batch::new();
    batch.mark_used(key("new"), UnixNanos::from_secs(100), Some(42));
    batch.upsert(key("old"), record(10, 20, 5, true));
    store.apply(&batch).expect("apply");
    let mut bump = Batch::new();
    bump.mark_used(key("old"), UnixNanos::from_secs(200), None);
    store.apply(&bump).expect("apply");
    assert_eq!(
        store.get(&key("new")).expect("get"),
        Some(record(100, 100, 42, false))
    );
    assert_eq!(
        store.get(&key("old")).expect("get"),
        Some(record(10, 200, 5, true))
    );
    assert!(store.check_invariants().expect("check").is_empty());
}

/// A mark at or before the stored last_used (the clock went back, or the same instant) moves
/// it one nanosecond forward: never back, and always visibly, so a detect or a GC that read
/// the record before the mark sees it (a scenario the simulator found: the mark set last_used
/// back and detect's RemoveUnlisted, seeing it no newer than its snapshot, deleted it).
#[test]
fn a_mark_at_or_before_the_stored_last_used_moves_it_one_nanosecond_forward() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let mut batch = Batch::new();
    batch.upsert(key("a"), record(10, 200, 5, false));
    store.apply(&batch).expect("apply");
    let mut back = Batch::new();
    back.mark_used(key("a"), UnixNanos::from_secs(60), None);
    assert!(store.apply(&back).expect("apply"), "a mark always commits");
    let after = UnixNanos(UnixNanos::from_secs(200).0 + 1);
    assert_eq!(
        store.get(&key("a")).expect("get").expect("a").last_used,
        after
    );
    let mut same = Batch::new();
    same.mark_used(key("a"), after, None);
    assert!(store.apply(&same).expect("apply"));
    assert_eq!(
        store.get(&key("a")).expect("get").expect("a").last_used,
        UnixNanos(after.0 + 1)
    );
    assert!(store.check_invariants().expect("check").is_empty());
}

fn backoff(secs: u64, at: i64, msg: &str) -> BackoffEntry {
    BackoffEntry {
        backoff: Duration::from_secs(secs),
        last_update: UnixNanos::from_secs(at),
        last_error: msg.into(),
    }
}

#[test]
fn drop_and_reopen_keeps_records_backoff_and_meta() {
    let (_dir, path) = temp_db();
    {
        let store = open(&path);
        let mut batch = Batch::new();
        batch.upsert(key("a"), record(1, 2, 3, false));
        batch.upsert(RecordKey::new("sha256:a", "gpu"), record(4, 5, 6, true));
        batch.put_backoff("uid_img".into(), backoff(20, 9, "rpc error"));
        batch.set_meta(meta_keys::AGENT_STARTED_AT, 77);
        store.apply(&batch).expect("apply");
    }
    let store = open(&path);
    assert_eq!(store.len().expect("len"), 2);
    assert_eq!(
        store.get(&key("a")).expect("get"),
        Some(record(1, 2, 3, false))
    );
    assert_eq!(
        store.get(&RecordKey::new("sha256:a", "gpu")).expect("get"),
        Some(record(4, 5, 6, true))
    );
    assert_eq!(
        store.backoff("uid_img").expect("backoff"),
        Some(backoff(20, 9, "rpc error"))
    );
    assert_eq!(
        store.meta(meta_keys::AGENT_STARTED_AT).expect("meta"),
        Some(77)
    );
    assert_eq!(
        store.meta(meta_keys::CREATED_AT).expect("meta"),
        Some(UnixNanos::from_secs(1_000).0),
        "reopening does not re-stamp creation"
    );
}

#[test]
fn newer_schema_is_refused_naming_both_versions() {
    let (_dir, path) = temp_db();
    {
        let store = open(&path);
        let mut batch = Batch::new();
        batch.set_meta(meta_keys::SCHEMA_VERSION, CURRENT_SCHEMA_VERSION + 1);
        store.apply(&batch).expect("apply");
    }
    let before = std::fs::read(&path).expect("read");
    for result in [
        Store::open(&path, UnixNanos(1)),
        Store::open_read_only(&path),
    ] {
        let err = result.err().expect("newer schema must be refused");
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 8,
                    supported: 7,
                    ..
                }
            ),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("schema version 8") && msg.contains("version 7"),
            "{msg}"
        );
    }
    assert!(
        std::fs::read(&path).expect("read") == before,
        "refusal leaves the file alone"
    );
}

#[test]
fn bad_files_give_documented_errors_and_are_left_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A real database, to truncate.
    let good = dir.path().join("good.redb");
    {
        let store = open(&good);
        let mut batch = Batch::new();
        for i in 0..200 {
            batch.upsert(key(&format!("{i:064}")), record(i, i, 1, false));
        }
        store.apply(&batch).expect("apply");
    }
    let good_bytes = std::fs::read(&good).expect("read");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "garbage",
            b"this is not a database at all, just some text\n".repeat(200),
        ),
        ("tiny", b"x".to_vec()),
        ("truncated header", good_bytes[..300].to_vec()),
        ("truncated", good_bytes[..good_bytes.len() / 3].to_vec()),
        ("zeroed header", {
            let mut b = good_bytes.clone();
            b[..64].fill(0);
            b
        }),
    ];
    for (name, bytes) in cases {
        let path = dir.path().join(format!("{}.redb", name.replace(' ', "-")));
        std::fs::write(&path, &bytes).expect("write");
        for (mode, result) in [
            ("read-write", Store::open(&path, UnixNanos(1))),
            ("read-only", Store::open_read_only(&path)),
        ] {
            match result {
                Err(StoreError::Corrupt { path: p, .. }) => assert_eq!(p, path),
                Err(StoreError::NeedsRecovery { .. }) if mode == "read-only" => {}
                Err(other) => {
                    let msg = other.to_string();
                    assert!(
                        msg.contains(path.to_str().expect("utf8")),
                        "{name} {mode}: {msg}"
                    );
                }
                Ok(mut store) => {
                    // redb may repair a truncated tail; then what is left must be consistent.
                    let violations = store.check().expect("check");
                    assert!(violations.is_empty(), "{name} {mode}: {violations:?}");
                }
            }
        }
        if name == "garbage" || name == "tiny" {
            assert!(
                std::fs::read(&path).expect("read") == bytes,
                "{name} left alone"
            );
        }
    }
}

#[test]
fn missing_file_read_only_is_a_clear_error() {
    let (_dir, path) = temp_db();
    let err = Store::open_read_only(&path).err().expect("missing");
    assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("does not exist"));
}

#[test]
fn old_schema_without_an_upgrade_path_is_refused_before_any_write() {
    let (dir, path) = temp_db();
    // Our tables with schema version 0, which no migration upgrades.
    {
        let store = open(&path);
        let mut batch = Batch::new();
        batch.set_meta(meta_keys::SCHEMA_VERSION, 0);
        store.apply(&batch).expect("apply");
    }
    let before = std::fs::read(&path).expect("read");
    let err = Store::open(&path, UnixNanos(1))
        .err()
        .expect("old schema with no upgrade");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("schema version 0 has no upgrade path"),
        "{err}"
    );
    assert!(
        std::fs::read(&path).expect("read") == before,
        "the refused file's bytes are unchanged"
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["records.redb"],
        "no backup of a file that is not upgraded"
    );
}

/// Another program's redb file is refused by every way of opening one (read-write, which
/// would otherwise initialize it, and read-only), each time with its bytes unchanged: one
/// with only its own tables, and one that also has a table named `meta` of its own types.
#[test]
fn foreign_redb_file_is_refused_with_its_bytes_unchanged() {
    #[derive(Debug, Clone, Copy)]
    enum Foreign {
        OwnTablesOnly,
        OwnMetaTable,
    }
    type Opener = fn(&Path) -> Result<Store, StoreError>;
    let openers: [(&str, Opener); 2] = [
        ("read-write", |p| Store::open(p, UnixNanos(1))),
        ("read-only", Store::open_read_only),
    ];
    for case in [Foreign::OwnTablesOnly, Foreign::OwnMetaTable] {
        let (_dir, path) = temp_db();
        {
            let db = redb::Database::create(&path).expect("create a foreign redb file");
            let txn = db.begin_write().expect("begin");
            {
                let mut table = txn
                    .open_table(redb::TableDefinition::<u64, u64>::new("their_data"))
                    .expect("table");
                for i in 0..100u64 {
                    table.insert(i, i * 7).expect("insert");
                }
                if let Foreign::OwnMetaTable = case {
                    let mut meta = txn
                        .open_table(redb::TableDefinition::<&str, u64>::new("meta"))
                        .expect("their meta table");
                    meta.insert("schema_version", 3).expect("insert");
                }
            }
            txn.commit().expect("commit");
        }
        let before = std::fs::read(&path).expect("read");
        for (how, open) in openers {
            for attempt in 0..2 {
                let err = open(&path)
                    .err()
                    .unwrap_or_else(|| panic!("{case:?} {how}: a foreign file is refused"));
                let refused_as_foreign = match (case, how, &err) {
                    (Foreign::OwnTablesOnly, "read-write", StoreError::Corrupt { detail, .. }) => {
                        detail.contains("their_data") && detail.contains("none of ours")
                    }
                    (Foreign::OwnTablesOnly, "read-only", StoreError::Corrupt { detail, .. }) => {
                        detail == "it has no meta table"
                    }
                    // redb itself refuses our typed view of their `meta` table.
                    (
                        Foreign::OwnMetaTable,
                        _,
                        StoreError::Redb {
                            source: redb::Error::TableTypeMismatch { table, .. },
                            ..
                        },
                    ) => table == "meta",
                    _ => false,
                };
                assert!(refused_as_foreign, "{case:?} {how}: {err:?}");
                assert!(
                    std::fs::read(&path).expect("read") == before,
                    "{case:?} {how} attempt {attempt}: the foreign file's bytes changed"
                );
            }
        }
    }
}

#[test]
fn database_path_at_a_device_fifo_directory_or_dangling_link_is_refused_and_left_alone() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let c = |p: &Path| std::ffi::CString::new(p.to_str().expect("utf8")).expect("no NUL");
    let device = dir.path().join("null-device");
    // SAFETY: mknod(2) on a path in our temp dir; a character device like /dev/null (1, 3).
    let made = unsafe {
        libc::mknod(
            c(&device).as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 3),
        )
    };
    assert_eq!(made, 0, "mknod (the tests run as root)");
    let fifo = dir.path().join("fifo");
    // SAFETY: mkfifo(3) on a path in our temp dir.
    assert_eq!(
        unsafe { libc::mkfifo(c(&fifo).as_ptr(), 0o600) },
        0,
        "mkfifo"
    );
    let directory = dir.path().join("a-directory");
    std::fs::create_dir(&directory).expect("mkdir");
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nothing-here"), &dangling).expect("symlink");
    let to_device = dir.path().join("link-to-device");
    std::os::unix::fs::symlink(&device, &to_device).expect("symlink");
    let cases: [(&Path, &str); 5] = [
        (&device, "a character device"),
        (&fifo, "a FIFO (named pipe)"),
        (&directory, "a directory"),
        (&dangling, "a symbolic link to a file that does not exist"),
        (&to_device, "a symbolic link to a character device"),
    ];
    for (path, kind) in cases {
        let before = std::fs::symlink_metadata(path).expect("stat");
        let err = Store::open(path, UnixNanos(1)).err().expect(kind);
        assert!(
            matches!(&err, StoreError::NotARegularFile { kind: k, .. } if k == kind),
            "{kind}: {err}"
        );
        assert!(err.to_string().contains("not a regular file"), "{err}");
        assert!(matches!(
            Store::check_path(path),
            Err(StoreError::NotARegularFile { .. })
        ));
        let after = std::fs::symlink_metadata(path).expect("still there");
        assert_eq!(
            after.file_type(),
            before.file_type(),
            "{kind} left as it was"
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&after),
            std::os::unix::fs::MetadataExt::ino(&before),
            "{kind} not replaced"
        );
    }
    let device_meta = std::fs::metadata(&device).expect("stat");
    assert!(
        device_meta.file_type().is_char_device(),
        "the device is still a device"
    );
    assert!(
        !dir.path().join("nothing-here").exists(),
        "nothing created behind a dangling link"
    );
}

/// A loop of symbolic links at `--db` is bad input: exit 2 naming it, from the commands that
/// open the database without an agent and from `inspect` (it exited 1, an I/O failure).
#[test]
fn a_symlink_loop_at_db_exits_2_naming_it() {
    use crate::support::bin;
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::os::unix::fs::symlink(&b, &a).expect("a -> b");
    std::os::unix::fs::symlink(&a, &b).expect("b -> a");
    let db = format!("--db={}", a.display());
    let socket = format!("--admin-socket={}", dir.path().join("none.sock").display());
    let runs: [Vec<&str>; 3] = [
        vec!["gc", "--dry-run", &db, &socket],
        vec!["prune", "--dry-run", &db, &socket],
        vec!["inspect", &db, "stats"],
    ];
    for args in runs {
        let out = bin::output(bin::imagekeeper().args(&args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("a loop of symbolic links"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn symlinked_database_path_is_followed_and_the_link_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("real.redb");
    std::fs::write(&target, b"").expect("an empty leftover file");
    let link = dir.path().join("records.redb");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    {
        let store = open(&link);
        let mut batch = Batch::new();
        batch.upsert(key("a"), record(1, 2, 3, false));
        store.apply(&batch).expect("apply");
    }
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("stat")
            .file_type()
            .is_symlink(),
        "the link is still a link"
    );
    assert_eq!(std::fs::read_link(&link).expect("readlink"), target);
    let store = Store::open_read_only(&target).expect("the database is at the link's target");
    assert_eq!(
        store.get(&key("a")).expect("get"),
        Some(record(1, 2, 3, false))
    );
    drop(store);
    // Reopened through the link, the same records.
    assert_eq!(
        open(&link).get(&key("a")).expect("get"),
        Some(record(1, 2, 3, false))
    );
}

#[test]
fn looser_database_file_is_tightened_to_0600_on_a_read_write_open() {
    let (_dir, path) = temp_db();
    drop(open(&path));
    for loose in [0o644, 0o666, 0o640, 0o604] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).expect("chmod");
        drop(open(&path));
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600, "{loose:o} tightened");
    }
    // A read-only open changes nothing.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    drop(Store::open_read_only(&path).expect("read-only"));
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644);
}

#[test]
fn reader_opens_alongside_a_writer_and_sees_its_commits() {
    let (_dir, path) = temp_db();
    let writer = open(&path);
    let reader = Store::open_read_only(&path).expect("read-only alongside the writer");
    let mut batch = Batch::new();
    batch.upsert(key("a"), record(1, 2, 3, false));
    writer.apply(&batch).expect("apply");
    assert_eq!(
        reader.get(&key("a")).expect("get"),
        Some(record(1, 2, 3, false))
    );
    assert!(matches!(
        reader.apply(&batch),
        Err(StoreError::ReadOnly { .. })
    ));
}

#[test]
fn second_writer_is_refused_as_already_open() {
    let (_dir, path) = temp_db();
    let _writer = open(&path);
    let err = Store::open(&path, UnixNanos(1))
        .err()
        .expect("second writer");
    assert!(matches!(err, StoreError::AlreadyOpen { .. }), "{err}");
    assert!(err.to_string().contains("already open by another process"));
}

#[test]
fn invalid_keys_are_refused_before_writing() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let mut batch = Batch::new();
    batch.upsert(RecordKey::new("", ""), record(1, 1, 1, false));
    assert!(matches!(
        store.apply(&batch),
        Err(StoreError::InvalidKey { .. })
    ));
    assert_eq!(store.len().expect("len"), 0);
}

/// A backoff key is `<pod uid>_<image>`: a uid part (before the first `_`) over 128 bytes or
/// a key over 128 + 1 + 4096 bytes is refused before writing; the limits themselves are
/// accepted, and removing an over-long key (as an older version may have stored one) is not
/// refused.
#[test]
fn over_long_backoff_keys_are_refused_before_writing_and_removals_never_are() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let image = |n: usize| "i".repeat(n);
    let cases = [
        (format!("{}_{}", "u".repeat(128), image(4096)), true),
        (format!("{}_{}", "u".repeat(129), "busybox"), false),
        (format!("{}_{}", "u".repeat(128), image(4097)), false),
        // The store bounds the key, not the image part: a short uid leaves room (the pull
        // path refuses an image name over 4096 bytes before it gets here).
        (format!("{}_{}", "u".repeat(36), image(4097)), true),
    ];
    for (key, accepted) in cases {
        let mut batch = Batch::new();
        batch.put_backoff(key.clone(), backoff(10, 1, "boom"));
        let got = store.apply(&batch);
        let case = format!("key of {} bytes", key.len());
        if accepted {
            assert!(got.expect(&case), "{case}");
        } else {
            let err = got.expect_err(&case);
            assert!(
                matches!(err, StoreError::InvalidKey { .. }),
                "{case}: {err}"
            );
            assert_eq!(store.backoff(&key).expect("read"), None, "{case}");
        }
        let mut removal = Batch::new();
        removal.remove_backoff(key.clone());
        assert_eq!(store.apply(&removal).expect(&case), accepted, "{case}");
    }
    assert!(store.backoff_entries().expect("read").is_empty());
}

#[derive(Clone, Debug)]
enum Op {
    Upsert(u8, i64, i64, u64, bool),
    MarkUsed(u8, i64),
    Remove(u8),
    Backoff(u8, u64),
    ClearBackoff(u8),
}

fn arb_op() -> impl Strategy<Value = Op> {
    let id = 0u8..12;
    let t = 0i64..20;
    prop_oneof![
        (id.clone(), t.clone(), t.clone(), 0u64..5, any::<bool>())
            .prop_map(|(i, a, b, s, p)| Op::Upsert(i, a, b, s, p)),
        (id.clone(), t).prop_map(|(i, n)| Op::MarkUsed(i, n)),
        id.clone().prop_map(Op::Remove),
        (id.clone(), 1u64..5).prop_map(|(i, s)| Op::Backoff(i, s)),
        id.prop_map(Op::ClearBackoff),
    ]
}

fn model_key(i: u8) -> RecordKey {
    RecordKey::new(
        format!("sha256:{i:02}"),
        if i.is_multiple_of(3) { "gpu" } else { "" },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random batches against a BTreeMap model: after every batch the records, the backoff
    /// table and the eviction order match the model, the invariant holds, and the commit
    /// counter moves exactly when the model changed.
    #[test]
    fn random_batches_match_a_btreemap_model(batches in proptest::collection::vec(proptest::collection::vec(arb_op(), 0..6), 1..8)) {
        let (_dir, path) = temp_db();
        let store = open(&path);
        let mut records: BTreeMap<RecordKey, ImageRecord> = BTreeMap::new();
        let mut backoffs: BTreeMap<String, BackoffEntry> = BTreeMap::new();
        for ops in batches {
            // A batch commits when any of its operations changed the state as it was then,
            // even if a later one in the same batch changed it back.
            let mut changed = false;
            let mut batch = Batch::new();
            for op in ops {
                let before_op = (records.clone(), backoffs.clone());
                match op {
                    Op::Upsert(i, a, b, s, p) => {
                        let r = record(a, b, s, p);
                        records.insert(model_key(i), r);
                        batch.upsert(model_key(i), r);
                    }
                    Op::MarkUsed(i, n) => {
                        let now = UnixNanos::from_secs(n);
                        let next = match records.get(&model_key(i)) {
                            // A mark always moves last_used forward (never back).
                            Some(old) => ImageRecord {
                                last_used: now.max(UnixNanos(old.last_used.0.saturating_add(1))),
                                ..*old
                            },
                            None => ImageRecord { first_detected: now, last_used: now, size: 0, pinned: false },
                        };
                        records.insert(model_key(i), next);
                        batch.mark_used(model_key(i), now, None);
                    }
                    Op::Remove(i) => {
                        records.remove(&model_key(i));
                        batch.remove(model_key(i));
                    }
                    Op::Backoff(i, s) => {
                        let e = backoff(s, i64::from(i), "err");
                        backoffs.insert(format!("pod_{i}"), e.clone());
                        batch.put_backoff(format!("pod_{i}"), e);
                    }
                    Op::ClearBackoff(i) => {
                        backoffs.remove(&format!("pod_{i}"));
                        batch.remove_backoff(format!("pod_{i}"));
                    }
                }
                changed |= before_op != (records.clone(), backoffs.clone());
            }
            let commits = store.commits();
            let committed = store.apply(&batch).expect("apply");
            prop_assert_eq!(committed, changed);
            prop_assert_eq!(store.commits(), commits + u64::from(changed));

            let stored: BTreeMap<RecordKey, ImageRecord> = store.records().expect("records")
                .into_iter().map(|r| (r.key, r.record)).collect();
            prop_assert_eq!(&stored, &records);
            let stored_backoff: BTreeMap<String, BackoffEntry> = store.backoff_entries().expect("backoff").into_iter().collect();
            prop_assert_eq!(&stored_backoff, &backoffs);

            let mut expected_order: Vec<(UnixNanos, UnixNanos, RecordKey)> = records.iter()
                .map(|(k, r)| (r.last_used, r.first_detected, k.clone())).collect();
            expected_order.sort();
            let order: Vec<RecordKey> = store.eviction_order().expect("scan").map(|r| r.expect("entry").key).collect();
            prop_assert_eq!(order, expected_order.into_iter().map(|e| e.2).collect::<Vec<_>>());
            prop_assert!(store.check_invariants().expect("check").is_empty());
        }
        drop(store);
        let mut reopened = open(&path);
        let stored: BTreeMap<RecordKey, ImageRecord> = reopened.records().expect("records")
            .into_iter().map(|r| (r.key, r.record)).collect();
        prop_assert_eq!(stored, records);
        prop_assert!(reopened.check().expect("check").is_empty());
    }
}

/// Schema 1 → 2 → 3 (`migrations/0002_names_and_journal.md`,
/// `migrations/0003_short_eviction_index.md`): opening the v1 fixture read-write copies it to
/// `<db>.bak-v1` (0600, the v1 bytes), upgrades it in one commit per step, and every record,
/// the eviction order, the backoff entry and the meta values read back as written.
#[test]
fn v1_fixture_is_backed_up_and_upgraded_to_v3_reading_back_every_record() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v1.redb");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("v1.redb");
    std::fs::copy(&fixture, &copy).expect("copy fixture");
    let original = std::fs::read(&fixture).expect("read");
    let mut store = Store::open(&copy, UnixNanos(1)).expect("schema 1 opens and upgrades");
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(7)
    );
    assert_eq!(
        store.commits(),
        6,
        "the upgrade is one transaction per step"
    );
    let backup = dir.path().join("v1.redb.bak-v1");
    // The backup holds the v1 content (copied under the read-write lock, so its header is
    // redb's, not the fixture's bytes): upgraded in turn, it reads back the same records.
    {
        let again = dir.path().join("again.redb");
        std::fs::copy(&backup, &again).expect("copy backup");
        let from_backup = Store::open(&again, UnixNanos(1)).expect("the backup upgrades");
        assert_eq!(
            from_backup.records().expect("records"),
            store.records().expect("records")
        );
        drop(from_backup);
        for name in ["again.redb", "again.redb.bak-v1"] {
            std::fs::remove_file(dir.path().join(name)).expect("remove");
        }
    }
    let mode = std::fs::metadata(&backup)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let stored: Vec<(String, ImageRecord)> = store
        .records()
        .expect("records")
        .into_iter()
        .map(|r| {
            (
                format!("{}/{}", r.key.image_id.short(), r.key.runtime_handler),
                r.record,
            )
        })
        .collect();
    assert_eq!(
        stored,
        [
            (
                "0410e513415e6/".to_owned(),
                record(1_700_000_000, 1_700_000_600, 1_088_964, true)
            ),
            (
                "51d22a12d89b6/".to_owned(),
                record(1_700_000_100, 1_700_000_200, 22_063_620, false)
            ),
            (
                "51d22a12d89b6/gpu".to_owned(),
                record(1_700_000_300, 1_700_000_300, 22_063_620, false)
            ),
            (
                "ee91f6568d150/".to_owned(),
                record(1_700_000_000, 0, 1_088_852, false)
            ),
        ]
    );
    let order: Vec<String> = store
        .eviction_order()
        .expect("scan")
        .map(|r| {
            let r = r.expect("entry");
            format!("{}/{}", r.key.image_id.short(), r.key.runtime_handler)
        })
        .collect();
    assert_eq!(
        order,
        [
            "ee91f6568d150/",
            "51d22a12d89b6/",
            "51d22a12d89b6/gpu",
            "0410e513415e6/"
        ]
    );
    let backoff = store
        .backoff("pod-uid-1_registry.example/app:broken")
        .expect("backoff")
        .expect("fixture has a backoff entry");
    assert_eq!(backoff.backoff, Duration::from_secs(40));
    assert_eq!(
        store.meta(meta_keys::LAST_DETECT).expect("meta"),
        Some(UnixNanos::from_secs(1_700_000_600).0)
    );
    assert_eq!(
        store.meta(meta_keys::CREATED_AT).expect("meta"),
        Some(UnixNanos::from_secs(1_700_000_000).0)
    );
    assert!(store.journal().expect("journal").is_empty());
    assert!(store.all_names().expect("names").is_empty());
    assert!(store.check().expect("check").is_empty());
    drop(store);
    // A second open finds v3: no second backup, no commit.
    std::fs::remove_file(&backup).expect("remove backup");
    let store = Store::open(&copy, UnixNanos(1)).expect("v3 opens");
    assert_eq!(store.commits(), 0);
    assert!(!backup.exists());
    // Read-only, the committed v1 fixture is refused cleanly (it must be upgraded by a
    // read-write open first) and left untouched.
    let err = Store::open_read_only(&fixture)
        .err()
        .expect("v1 read-only is refused");
    assert!(err.to_string().contains("must be upgraded"), "{err}");
    assert!(std::fs::read(&fixture).expect("read") == original);
}

/// The v2 fixture (`cargo run --example make_v2_fixture`) is backed up to `<db>.bak-v2` and
/// upgraded to schema 3 in one commit (`migrations/0003_short_eviction_index.md`), with its
/// records, eviction order, names and journal.
#[test]
fn v2_fixture_is_backed_up_and_upgraded_to_v3_with_its_names_and_journal() {
    use imagekeeper::model::{RemovalReason, Remover};
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v2.redb");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("v2.redb");
    std::fs::copy(&fixture, &copy).expect("copy fixture");
    let mut store = Store::open(&copy, UnixNanos(1)).expect("schema 2 opens and upgrades");
    assert_eq!(
        store.commits(),
        5,
        "the upgrade is one transaction per step"
    );
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(7)
    );
    let backup = dir.path().join("v2.redb.bak-v2");
    {
        // The backup holds the v2 content: upgraded in turn, it reads back the same records.
        let again = dir.path().join("again.redb");
        std::fs::copy(&backup, &again).expect("copy backup");
        let from_backup = Store::open(&again, UnixNanos(1)).expect("the backup upgrades");
        assert_eq!(
            from_backup.records().expect("records"),
            store.records().expect("records")
        );
    }
    assert_eq!(store.len().expect("len"), 2);
    let mut sorted = store.records().expect("records");
    sorted.sort_by_key(|r| (r.record.last_used, r.record.first_detected, r.key.clone()));
    let scanned: Vec<_> = store
        .eviction_order()
        .expect("scan")
        .map(|r| r.expect("entry"))
        .collect();
    assert_eq!(scanned, sorted);
    let names = store
        .names(&RecordKey::new(
            "sha256:0410e513415e62ba17f2362099aa7f44c71c379344c08ff9a565f145be9dfa26",
            "",
        ))
        .expect("names")
        .expect("the pause image has names");
    assert_eq!(names.repo_tags, ["registry.k8s.io/pause:3.10"]);
    let journal = store.journal().expect("journal");
    type Summary<'a> = (
        i64,
        &'a str,
        Option<RemovalReason>,
        Option<u32>,
        Remover,
        bool,
    );
    let summary: Vec<Summary> = journal
        .iter()
        .map(|(k, e)| {
            (
                k.removed_at.as_secs(),
                k.key.image_id.short(),
                e.reason,
                e.rank,
                e.remover,
                e.repulled_at.is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                1_700_001_000,
                "51d22a12d89b6",
                Some(RemovalReason::Space),
                Some(1),
                Remover::Imagekeeper,
                true
            ),
            (
                1_700_001_000,
                "ee91f6568d150",
                Some(RemovalReason::Space),
                Some(2),
                Remover::Imagekeeper,
                false
            ),
            (
                1_700_002_000,
                "c0ffee0000000",
                None,
                None,
                Remover::External,
                false
            ),
        ]
    );
    assert!(store.check().expect("check").is_empty());
}

/// The v3 fixture (`cargo run --example make_v3_fixture`) is backed up to `<db>.bak-v3` and
/// upgraded to schema 4 in one commit (`migrations/0004_pins.md`): every table keeps its
/// content and an empty `pins` table is added.
#[test]
fn v3_fixture_is_backed_up_and_upgraded_to_v4_with_an_empty_pins_table() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v3.redb");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("v3.redb");
    std::fs::copy(&fixture, &copy).expect("copy fixture");
    let mut store = Store::open(&copy, UnixNanos(1)).expect("schema 3 opens and upgrades");
    assert_eq!(
        store.commits(),
        4,
        "the upgrade is one transaction per step"
    );
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(imagekeeper::store::CURRENT_SCHEMA_VERSION)
    );
    {
        // The backup holds the v3 content: upgraded in turn, it reads back the same records.
        let again = dir.path().join("again.redb");
        std::fs::copy(dir.path().join("v3.redb.bak-v3"), &again).expect("copy backup");
        let from_backup = Store::open(&again, UnixNanos(1)).expect("the backup upgrades");
        assert_eq!(
            from_backup.commits(),
            4,
            "the backup was a v3 file, upgraded in one commit per step (3 -> 4 -> 5 -> 6 -> 7)"
        );
        assert!(
            from_backup.records().expect("records") == store.records().expect("records"),
            "the backup's records differ"
        );
    }
    assert!(store.pins().expect("pins").is_empty());
    assert_eq!(store.len().expect("len"), 2);
    assert_eq!(store.journal().expect("journal").len(), 3);
    let backoff = store
        .backoff("pod-1_registry.example/missing:1")
        .expect("backoff")
        .expect("the fixture's backoff entry");
    assert_eq!(backoff.backoff, Duration::from_secs(20));
    assert!(store.check().expect("check").is_empty());
}

/// The v4 fixture (`cargo run --example make_v4_fixture`, written by the schema-4 build) is
/// backed up to `<db>.bak-v4` and upgraded to schema 5 in one commit
/// (`migrations/0005_use_and_pull_history.md`): every table keeps its content, pins included,
/// and empty `uses`, `pulls` and `warm` tables are added, which then take writes.
#[test]
fn v4_fixture_is_backed_up_and_upgraded_to_v5_with_empty_history_tables() {
    use imagekeeper::model::{PullEntry, PullKey, PullOrigin, RecordKey};
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v4.redb");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("v4.redb");
    std::fs::copy(&fixture, &copy).expect("copy fixture");
    let mut store = Store::open(&copy, UnixNanos(1)).expect("schema 4 opens and upgrades");
    assert_eq!(
        store.commits(),
        3,
        "the upgrade is one transaction per step"
    );
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(7)
    );
    {
        let again = dir.path().join("again.redb");
        std::fs::copy(dir.path().join("v4.redb.bak-v4"), &again).expect("copy backup");
        let from_backup = Store::open(&again, UnixNanos(1)).expect("the backup upgrades");
        assert_eq!(from_backup.commits(), 3, "the backup was a v4 file");
        assert!(from_backup.pins().expect("pins") == store.pins().expect("pins"));
    }
    let pins: Vec<(String, String)> = store
        .pins()
        .expect("pins")
        .into_iter()
        .map(|(k, p)| (k.image, p.reason))
        .collect();
    assert_eq!(
        pins,
        [
            ("docker.io/library/busybox:1.35".to_owned(), String::new()),
            (
                "registry.k8s.io/pause:3.10".to_owned(),
                "the sandbox image".to_owned()
            ),
        ]
    );
    assert_eq!(store.len().expect("len"), 2);
    assert_eq!(store.journal().expect("journal").len(), 3);
    assert!(store.uses().expect("uses").is_empty());
    assert!(store.pulls().expect("pulls").is_empty());
    assert!(store.warm_rows().expect("warm").is_empty());
    assert!(store.check().expect("check").is_empty());
    // The new tables take writes.
    let key = RecordKey::new(
        "sha256:0410e513415e62ba17f2362099aa7f44c71c379344c08ff9a565f145be9dfa26",
        "",
    );
    let mut batch = Batch::new();
    batch.observe_uses(UnixNanos::from_secs(1_700_004_000), vec![key.clone()]);
    batch.record_pull(
        PullKey {
            at: UnixNanos::from_secs(1_700_004_000),
            key: key.clone(),
        },
        PullEntry {
            size: 1_088_964,
            origin: PullOrigin::Pull,
            took: Duration::from_secs(2),
            name: "registry.k8s.io/pause:3.10".to_owned(),
        },
    );
    assert!(store.apply(&batch).expect("apply"));
    assert_eq!(store.uses().expect("uses").len(), 1);
    assert_eq!(store.pulls().expect("pulls").len(), 1);
    assert!(store.check().expect("check").is_empty());
}

/// The v5 fixture (`cargo run --example make_v5_fixture`, written by the schema-5 build) is
/// backed up to `<db>.bak-v5` and upgraded to schema 6 in one commit, then to 7 in another
/// (`migrations/0006_runtime_labels.md`): every table keeps its content, the agent's instance
/// included, and an empty `runtime_labels` table is added, without `runtime_labels_adopted`
/// (the agent's first reconcile adopts its labels once), which then takes writes.
#[test]
fn v5_fixture_is_backed_up_and_upgraded_to_v6_with_an_empty_runtime_labels_table() {
    use imagekeeper::model::RuntimeLabel;
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v5.redb");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("v5.redb");
    std::fs::copy(&fixture, &copy).expect("copy fixture");
    let mut store = Store::open(&copy, UnixNanos(1)).expect("schema 5 opens and upgrades");
    assert_eq!(
        store.commits(),
        2,
        "the upgrade is one transaction per step"
    );
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(7)
    );
    {
        let again = dir.path().join("again.redb");
        std::fs::copy(dir.path().join("v5.redb.bak-v5"), &again).expect("copy backup");
        let from_backup = Store::open(&again, UnixNanos(1)).expect("the backup upgrades");
        assert_eq!(from_backup.commits(), 2, "the backup was a v5 file");
        assert!(from_backup.pulls().expect("pulls") == store.pulls().expect("pulls"));
    }
    assert_eq!(store.len().expect("len"), 2);
    assert_eq!(store.journal().expect("journal").len(), 3);
    assert_eq!(store.pins().expect("pins").len(), 2);
    assert_eq!(store.uses().expect("uses").len(), 1);
    assert_eq!(store.pulls().expect("pulls").len(), 1);
    assert_eq!(
        imagekeeper::agent::stored_instance_id(&store).expect("meta"),
        Some("00000000c0ffee05".to_owned()),
        "the agent's instance is kept"
    );
    assert!(store.runtime_labels().expect("labels").is_empty());
    assert_eq!(
        store.meta(meta_keys::RUNTIME_LABELS_ADOPTED).expect("meta"),
        None,
        "adoption is the agent's first reconcile's"
    );
    assert!(store.check().expect("check").is_empty());
    // The new table takes writes and removals.
    let label = RuntimeLabel {
        written_at: UnixNanos::from_secs(1_700_004_000),
        value: "pin".to_owned(),
    };
    let mut batch = Batch::new();
    batch.put_runtime_label("registry.k8s.io/pause:3.10".to_owned(), label.clone());
    assert!(store.apply(&batch).expect("apply"));
    assert!(
        !store.apply(&batch).expect("apply"),
        "the same row commits nothing"
    );
    assert_eq!(
        store.runtime_labels().expect("labels"),
        [("registry.k8s.io/pause:3.10".to_owned(), label)]
    );
    assert!(store.check().expect("check").is_empty());
    let mut batch = Batch::new();
    batch.remove_runtime_label("registry.k8s.io/pause:3.10".to_owned());
    assert!(store.apply(&batch).expect("apply"));
    assert!(store.runtime_labels().expect("labels").is_empty());
}

/// The v6 fixture (`cargo run --example make_v6_fixture`, written by the schema-6 build) is
/// backed up to `<db>.bak-v6` and upgraded to schema 7 in one commit
/// (`migrations/0007_signals.md`): every table keeps its content, the runtime labels and their
/// adoption included, and an empty `signals` table is added, which then takes appends.
#[test]
fn v6_fixture_is_backed_up_and_upgraded_to_v7_with_an_empty_signals_table() {
    use imagekeeper::model::{RecordedSignal, SignalEntry};
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v6.redb");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("v6.redb");
    std::fs::copy(&fixture, &copy).expect("copy fixture");
    let mut store = Store::open(&copy, UnixNanos(1)).expect("schema 6 opens and upgrades");
    assert_eq!(store.commits(), 1, "the upgrade is one transaction");
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(7)
    );
    {
        let again = dir.path().join("again.redb");
        std::fs::copy(dir.path().join("v6.redb.bak-v6"), &again).expect("copy backup");
        let from_backup = Store::open(&again, UnixNanos(1)).expect("the backup upgrades");
        assert_eq!(from_backup.commits(), 1, "the backup was a v6 file");
        assert!(
            from_backup.runtime_labels().expect("labels")
                == store.runtime_labels().expect("labels")
        );
    }
    assert_eq!(store.len().expect("len"), 2);
    assert_eq!(store.journal().expect("journal").len(), 3);
    assert_eq!(store.pins().expect("pins").len(), 2);
    assert_eq!(store.uses().expect("uses").len(), 1);
    assert_eq!(store.pulls().expect("pulls").len(), 1);
    assert_eq!(store.runtime_labels().expect("labels").len(), 1);
    assert!(
        store
            .meta(meta_keys::RUNTIME_LABELS_ADOPTED)
            .expect("meta")
            .is_some(),
        "the adoption is kept"
    );
    assert!(store.signals().expect("signals").is_empty());
    assert!(store.check().expect("check").is_empty());
    // The new table takes appends.
    let entry = SignalEntry {
        at: UnixNanos::from_secs(1_700_005_000),
        signal: RecordedSignal::Bound {
            pod: "ci/build-7".to_owned(),
            images: vec!["reg/build:4".to_owned()],
        },
    };
    store
        .append_signals(std::slice::from_ref(&entry))
        .expect("append");
    assert_eq!(store.signals().expect("signals"), [entry]);
    assert!(store.check().expect("check").is_empty());
}

/// Pins (schema 4) are written, replaced and removed in durable batches, survive a reopen,
/// and a detect's pruning deletes only pins expired for longer than the journal's max age.
#[test]
fn pins_survive_a_reopen_and_only_long_expired_ones_are_pruned() {
    use imagekeeper::model::{ImagePin, PinKey};
    let (_dir, path) = temp_db();
    let day = 24 * 3600;
    let pin = |until: i64, reason: &str| ImagePin {
        created_at: UnixNanos::from_secs(1_000),
        until: UnixNanos::from_secs(until),
        reason: reason.to_owned(),
    };
    {
        let store = open(&path);
        let mut batch = Batch::new();
        batch.put_pin(PinKey::new("vllm:1", ""), pin(0, "forever"));
        batch.put_pin(PinKey::new("old:1", ""), pin(2_000, "expired long ago"));
        batch.put_pin(
            PinKey::new("recent:1", "gpu"),
            pin(40 * day, "expired lately"),
        );
        assert!(store.apply(&batch).expect("apply"));
        // The same pin again changes nothing and commits nothing.
        let mut again = Batch::new();
        again.put_pin(PinKey::new("vllm:1", ""), pin(0, "forever"));
        let commits = store.commits();
        assert!(!store.apply(&again).expect("apply"));
        assert_eq!(store.commits(), commits);
    }
    let store = open(&path);
    let names: Vec<String> = store
        .pins()
        .expect("pins")
        .into_iter()
        .map(|(k, _)| k.image)
        .collect();
    assert_eq!(names, ["old:1", "recent:1", "vllm:1"]);
    // At day 41 with the default 30-day retention: "old" expired 41 days ago and goes,
    // "recent" expired one day ago and stays (listed as expired), the pin without expiry stays.
    let mut prune = Batch::new();
    prune.prune_expired_pins(UnixNanos::from_secs(41 * day));
    assert!(store.apply(&prune).expect("prune"));
    let names: Vec<String> = store
        .pins()
        .expect("pins")
        .into_iter()
        .map(|(k, _)| k.image)
        .collect();
    assert_eq!(names, ["recent:1", "vllm:1"]);
    let mut unpin = Batch::new();
    unpin.remove_pin(PinKey::new("recent:1", "gpu"));
    assert!(store.apply(&unpin).expect("unpin"));
    assert!(
        store
            .pin(&PinKey::new("recent:1", "gpu"))
            .expect("pin")
            .is_none()
    );
    // Bad pins are refused, naming the rule.
    let mut bad = Batch::new();
    bad.put_pin(PinKey::new("", ""), pin(0, ""));
    let err = store.apply(&bad).expect_err("an empty name is refused");
    assert!(err.to_string().contains("empty"), "{err}");
    let mut long = Batch::new();
    long.put_pin(PinKey::new("a:1", ""), pin(0, &"x".repeat(1025)));
    let err = store.apply(&long).expect_err("a long reason is refused");
    assert!(err.to_string().contains("1024"), "{err}");
}

#[test]
fn creation_is_atomic_and_an_empty_leftover_file_is_created_anew() {
    let (dir, path) = temp_db();
    // A crash between creating the file and redb writing its header leaves an empty file.
    std::fs::write(&path, b"").expect("write");
    let store = open(&path);
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(CURRENT_SCHEMA_VERSION)
    );
    drop(store);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["records.redb"], "no temporary file is left behind");
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// A batch of `n` records with long ids (about 1 KiB each), numbered from `from`.
fn bulky_batch(from: usize, n: usize) -> Batch {
    let mut batch = Batch::new();
    for i in from..from + n {
        batch.upsert(
            key(&format!("{i:08}-{}", "f".repeat(1000))),
            record(1_000, 1_000 + i64::try_from(i).expect("small"), 1, false),
        );
    }
    batch
}

/// Regression (issue 12, item 5): a real filesystem fills up under the database. The commit
/// that meets the full disk fails with a clear "filesystem is full" error and marks the store
/// unhealthy; once the filler is deleted, the next `apply` on the same `Store` reopens the file
/// and commits, and everything committed before is intact. Before the fix, every commit after
/// the first ENOSPC failed with redb's "Previous I/O error" until the process restarted.
#[test]
fn full_filesystem_fails_one_commit_and_the_same_store_commits_again_once_space_is_back() {
    let Some(fs) = crate::support::Tmpfs::mount(
        "full_filesystem_fails_one_commit_and_the_same_store_commits_again_once_space_is_back",
        "2m",
    ) else {
        return;
    };
    let path = fs.path().join("records.redb");
    let store = open(&path);
    assert!(
        store
            .apply(&bulky_batch(0, 20))
            .expect("commit before the disk fills")
    );
    let filler = fs.path().join("filler");
    fs.fill(&filler);

    // Commit until one meets the full disk (redb has some free pages in its file first).
    let mut committed = 20;
    let failure = loop {
        match store.apply(&bulky_batch(committed, 20)) {
            Ok(_) => committed += 20,
            Err(e) => break e,
        }
        assert!(
            committed < 2_000,
            "2 MiB cannot hold {committed} KiB of records"
        );
    };
    assert!(matches!(failure, StoreError::NoSpace { .. }), "{failure:?}");
    let message = failure.to_string();
    assert!(message.contains("filesystem is full"), "{message}");
    assert!(!store.is_healthy());

    std::fs::remove_file(&filler).expect("delete the filler");
    assert!(
        store
            .apply(&bulky_batch(committed, 20))
            .expect("the same store commits once space is back")
    );
    committed += 20;
    assert!(store.is_healthy());
    assert_eq!(store.reopens(), 1);
    let records = store.records().expect("records");
    assert_eq!(records.len(), committed);
    for (i, stored) in records.iter().enumerate() {
        assert_eq!(stored.key, key(&format!("{i:08}-{}", "f".repeat(1000))));
        assert_eq!(
            stored.record.last_used.0,
            UnixNanos::from_secs(1_000 + i as i64).0
        );
    }
    assert_eq!(store.check_invariants().expect("check"), []);
    drop(store);
    // And the file opens as ever after a restart.
    assert_eq!(open(&path).len().expect("len"), committed as u64);
}

/// The reopen after a full disk never creates a database: with the file moved away meanwhile,
/// it fails naming the path and leaves nothing there; with the file back, the same store
/// reopens it with its records.
#[test]
fn reopen_after_a_full_disk_never_creates_a_new_database_in_place_of_a_missing_one() {
    let Some(fs) = crate::support::Tmpfs::mount(
        "reopen_after_a_full_disk_never_creates_a_new_database_in_place_of_a_missing_one",
        "2m",
    ) else {
        return;
    };
    let path = fs.path().join("records.redb");
    let store = open(&path);
    assert!(
        store
            .apply(&bulky_batch(0, 20))
            .expect("commit before the disk fills")
    );
    let filler = fs.path().join("filler");
    fs.fill(&filler);
    let mut committed = 20;
    while store.apply(&bulky_batch(committed, 20)).is_ok() {
        committed += 20;
        assert!(
            committed < 2_000,
            "2 MiB cannot hold {committed} KiB of records"
        );
    }
    assert!(!store.is_healthy());
    std::fs::remove_file(&filler).expect("delete the filler");

    let moved = fs.path().join("moved.redb");
    std::fs::rename(&path, &moved).expect("move the database away");
    let err = store
        .apply(&bulky_batch(committed, 1))
        .expect_err("nothing to reopen");
    assert!(matches!(err, StoreError::Missing { .. }), "{err:?}");
    assert!(!path.exists(), "the reopen created a file");
    assert!(!store.is_healthy());

    std::fs::rename(&moved, &path).expect("move the database back");
    assert!(store.apply(&bulky_batch(committed, 1)).expect("reopened"));
    assert_eq!(store.len().expect("len"), committed as u64 + 1);
    assert!(store.is_healthy());
}

/// Another agent (another container, where it may have the same pid) is creating the same
/// database: its temporary file is never removed or reused by this one.
#[test]
fn creating_a_database_leaves_another_processs_temporary_file_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let theirs = dir
        .path()
        .join(format!("records.redb.creating-{}", std::process::id()));
    std::fs::write(&theirs, b"another agent's database in the making").expect("write");
    drop(Store::open(&db, imagekeeper::model::UnixNanos(1)).expect("create"));
    assert_eq!(
        std::fs::read(&theirs).expect("still there"),
        b"another agent's database in the making"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".creating-") && !theirs.ends_with(n))
        .collect();
    assert!(left.is_empty(), "our temporary file is gone: {left:?}");
}

/// Regression: the v1 backup never writes through, over or away what is already at
/// `<db>.bak-v1`. A symlink (to a victim file, or dangling) or a regular file with other
/// content is kept as it was (the victim's bytes and mode 0644 too) and the backup takes the
/// next name, `<db>.bak-v1.1`; a copy of the same content (an upgrade interrupted after its
/// copy) is reused and no other backup is written.
#[test]
fn a_pre_existing_v1_backup_is_never_overwritten_and_only_a_copy_of_its_content_is_reused() {
    use std::os::unix::fs::symlink;
    #[derive(Debug)]
    enum InTheWay {
        LinkToVictim,
        DanglingLink,
        OtherBytes,
        IdenticalCopy,
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v1.redb");
    let original = std::fs::read(&fixture).expect("read");
    for case in [
        InTheWay::LinkToVictim,
        InTheWay::DanglingLink,
        InTheWay::OtherBytes,
        InTheWay::IdenticalCopy,
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("v1.redb");
        std::fs::copy(&fixture, &db).expect("copy fixture");
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let backup = dir.path().join("v1.redb.bak-v1");
        let victim = dir.path().join("victim");
        let victim_bytes = b"someone else's file\n".to_vec();
        std::fs::write(&victim, &victim_bytes).expect("victim");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        match case {
            InTheWay::LinkToVictim => symlink(&victim, &backup).expect("link"),
            InTheWay::DanglingLink => symlink(dir.path().join("nowhere"), &backup).expect("link"),
            InTheWay::OtherBytes => std::fs::write(&backup, b"not the database").expect("write"),
            InTheWay::IdenticalCopy => std::fs::write(&backup, &original).expect("write"),
        }
        let opened = Store::open(&db, UnixNanos(1));
        assert!(
            std::fs::read(&victim).expect("victim") == victim_bytes,
            "{case:?}: the victim's bytes changed"
        );
        let mode = std::fs::metadata(&victim)
            .expect("stat")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o644, "{case:?}");
        assert!(
            !dir.path().join("nowhere").exists(),
            "{case:?}: written through a dangling link"
        );
        let store = opened.unwrap_or_else(|e| panic!("{case:?}: the upgrade was refused: {e}"));
        assert_eq!(
            store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
            Some(7),
            "{case:?}"
        );
        drop(store);
        let next = dir.path().join("v1.redb.bak-v1.1");
        match case {
            InTheWay::IdenticalCopy => {
                assert!(std::fs::read(&backup).expect("backup") == original);
                assert!(!next.exists(), "{case:?}: a second backup");
            }
            InTheWay::OtherBytes => {
                assert_eq!(std::fs::read(&backup).expect("kept"), b"not the database");
            }
            InTheWay::LinkToVictim | InTheWay::DanglingLink => {
                assert!(
                    std::fs::symlink_metadata(&backup)
                        .expect("kept")
                        .file_type()
                        .is_symlink(),
                    "{case:?}: the link is gone"
                );
            }
        }
        if !matches!(case, InTheWay::IdenticalCopy) {
            let meta = std::fs::symlink_metadata(&next).expect("the backup at the next name");
            assert!(meta.file_type().is_file(), "{case:?}");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{case:?}");
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.to_string_lossy().contains("creating"))
            .collect();
        assert!(leftovers.is_empty(), "{case:?}: {leftovers:?}");
    }
}

/// Every backup name taken by a file that is not a copy of the database: the upgrade is
/// refused with the typed reason, every file is kept as it was, and the database is still the
/// v1 file (it upgrades once a name is free).
#[test]
fn an_upgrade_with_every_backup_name_taken_is_refused_and_keeps_every_file() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v1.redb");
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("v1.redb");
    std::fs::copy(&fixture, &db).expect("copy fixture");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let names: Vec<PathBuf> = (0..100)
        .map(|n| match n {
            0 => dir.path().join("v1.redb.bak-v1"),
            n => dir.path().join(format!("v1.redb.bak-v1.{n}")),
        })
        .collect();
    for name in &names {
        std::fs::write(name, b"not the database").expect("write");
    }
    let err = match Store::open(&db, UnixNanos(1)) {
        Ok(_) => panic!("upgraded with every backup name taken"),
        Err(e) => e,
    };
    match &err {
        StoreError::BackupInTheWay { detail, .. } => match detail {
            BackupConflict::AllNamesTaken { tried, last } => {
                assert_eq!(*tried, 100);
                assert!(
                    matches!(**last, BackupConflict::NotADatabase(_)),
                    "{last:?}"
                );
            }
            other => panic!("refused for the wrong reason: {other:?}"),
        },
        other => panic!("not BackupInTheWay: {other:?}"),
    }
    assert!(err.to_string().contains("backup"), "{err}");
    for name in &names {
        assert_eq!(std::fs::read(name).expect("kept"), b"not the database");
    }
    assert!(!dir.path().join("v1.redb.bak-v1.100").exists());
    // The database is still the v1 file: with one name freed, it upgrades and backs up there.
    std::fs::remove_file(&names[99]).expect("free one name");
    let store = Store::open(&db, UnixNanos(1)).expect("the upgrade with a free name");
    assert_eq!(
        store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
        Some(CURRENT_SCHEMA_VERSION)
    );
    assert!(!store.records().expect("records").is_empty());
    drop(store);
    assert_ne!(
        std::fs::read(&names[99]).expect("the backup"),
        b"not the database"
    );
    for name in &names[..99] {
        assert_eq!(std::fs::read(name).expect("kept"), b"not the database");
    }
}

/// Issue 57: a containerd leftover's removal (`prune --orphans`) is journaled with reason
/// orphan, by imagekeeper, under a key no image shares: no record, no names row, no re-pull
/// mark when an image record of another id is written, and the store checks clean; the file
/// reopens and reads it back.
#[test]
fn a_leftover_removal_is_journaled_as_orphan_without_a_record_and_the_file_checks_clean() {
    use imagekeeper::model::{RemovalReason, Remover, leftover_key};
    let (_dir, path) = temp_db();
    let mut store = open(&path);
    let snapshot = leftover_key(
        "snapshot",
        "k8s.io",
        Some("overlayfs"),
        "rootfs-left-behind",
    );
    let blob = leftover_key("blob", "k8s.io", None, "sha256:c33948620b09");
    assert_eq!(
        snapshot.image_id.as_str(),
        "snapshot:k8s.io/overlayfs/rootfs-left-behind"
    );
    assert_eq!(blob.image_id.as_str(), "blob:k8s.io/sha256:c33948620b09");
    let mut batch = Batch::new();
    batch.journal_leftover(
        snapshot.clone(),
        UnixNanos::from_secs(2_000),
        4_800_000,
        UnixNanos::from_secs(1_500),
    );
    batch.journal_leftover(
        blob.clone(),
        UnixNanos::from_secs(2_001),
        3_000_000,
        UnixNanos::from_secs(1_600),
    );
    // An image record written in the same batch: the journal's entries are not its.
    batch.upsert(key("c33948620b09"), record(1_000, 1_900, 10, false));
    store.apply(&batch).expect("apply");
    let check = |store: &mut Store| {
        assert!(store.check().expect("check").is_empty());
        let journal = store.journal().expect("journal");
        let rows: Vec<_> = journal
            .iter()
            .map(|(k, e)| {
                (
                    k.key.clone(),
                    k.removed_at,
                    e.size,
                    e.first_detected,
                    e.reason,
                    e.remover,
                    e.repulled_at,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (
                    snapshot.clone(),
                    UnixNanos::from_secs(2_000),
                    4_800_000,
                    UnixNanos::from_secs(1_500),
                    Some(RemovalReason::Orphan),
                    Remover::Imagekeeper,
                    None
                ),
                (
                    blob.clone(),
                    UnixNanos::from_secs(2_001),
                    3_000_000,
                    UnixNanos::from_secs(1_600),
                    Some(RemovalReason::Orphan),
                    Remover::Imagekeeper,
                    None
                ),
            ]
        );
        assert!(store.all_names().expect("names").is_empty(), "no names row");
    };
    check(&mut store);
    drop(store);
    let mut reopened = open(&path);
    check(&mut reopened);
}
