//! What `Store::apply` opens and writes for a small batch: a batch opens only the tables its
//! operations touch (each opened at its first use), and a one-record batch writes exactly its
//! record and its index row, leaving every other table as it was.

use std::cell::{Cell, RefCell};

use super::check_tests::{key, record};
use super::{Batch, Store};
use crate::model::{
    BackoffEntry, EvictionNote, ImageNames, ImagePin, ImageRecord, PinKey, PullEntry, PullKey,
    PullOrigin, RecordKey, RemovalReason, UnixNanos,
};

thread_local! {
    /// The tables `apply` opened on this thread, in order (test builds only).
    pub(super) static OPENED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    /// The eviction-index rows `apply` removed or inserted on this thread (test builds only).
    pub(super) static INDEX_WRITES: Cell<u32> = const { Cell::new(0) };
}

const SECOND: i64 = 1_000_000_000;

/// The tables one `apply` of `batch` opened.
fn opened_by(store: &Store, batch: &Batch) -> Vec<String> {
    OPENED.with(|o| o.borrow_mut().clear());
    store.apply(batch).expect("apply");
    OPENED.with(|o| o.take())
}

/// A store with something in every table: records a, b, c (c then evicted, so the journal has
/// an entry), names, a backoff entry, a pin, a use, a pull and the meta written by all that.
fn populated() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("db.redb"), UnixNanos(1)).expect("open");
    let mut batch = Batch::new();
    for (id, first, last) in [("a", 1, 5), ("b", 2, 6), ("c", 3, 7)] {
        batch.upsert(key(id), record(first, last));
    }
    batch.set_names(
        key("a"),
        ImageNames {
            repo_tags: vec!["example.com/a:1".into()],
            repo_digests: vec![],
        },
    );
    batch.put_backoff(
        "uid_a".into(),
        BackoffEntry {
            backoff: std::time::Duration::from_secs(10),
            last_update: UnixNanos::from_secs(8),
            last_error: "boom".into(),
        },
    );
    batch.put_pin(
        PinKey::new("example.com/a:1", ""),
        ImagePin {
            created_at: UnixNanos::from_secs(8),
            until: UnixNanos::NEVER,
            reason: "test".into(),
        },
    );
    batch.open_use(key("a"), UnixNanos::from_secs(8));
    batch.record_pull(
        PullKey {
            at: UnixNanos::from_secs(8),
            key: key("b"),
        },
        PullEntry {
            size: 10,
            origin: PullOrigin::Pull,
            took: std::time::Duration::from_secs(1),
            name: "example.com/b:1".into(),
        },
    );
    batch.note_meta("last_heartbeat", 8);
    assert!(store.apply(&batch).expect("populate"));
    let mut evict = Batch::new();
    evict.evict(
        key("c"),
        EvictionNote {
            removed_at: UnixNanos::from_secs(9),
            reason: RemovalReason::Age,
            rank: 0,
            fs: None,
        },
    );
    assert!(store.apply(&evict).expect("evict"));
    (dir, store)
}

#[test]
fn a_batch_opens_only_the_tables_its_operations_touch() {
    let (_dir, mut store) = populated();
    // A mark of an existing record: the record and its index row, nothing else.
    let mut mark = Batch::new();
    mark.mark_used(key("a"), UnixNanos::from_secs(20), None);
    assert_eq!(opened_by(&store, &mark), ["images", "eviction_prefix"]);
    // A note alone: the meta table.
    let mut note = Batch::new();
    note.note_meta("last_heartbeat", 21);
    assert_eq!(opened_by(&store, &note), ["meta"]);
    // A mark that creates a record also records its detected pull (and prunes the pulls)
    // and looks for a journal entry to mark re-pulled.
    let mut create = Batch::new();
    create.mark_used(key("new"), UnixNanos::from_secs(22), Some(5));
    assert_eq!(
        opened_by(&store, &create),
        ["images", "eviction_prefix", "pulls", "journal"]
    );
    assert_eq!(store.check().expect("check"), []);
}

/// Every table's contents, through the store's readers.
#[derive(Debug, PartialEq)]
struct Contents {
    records: Vec<(RecordKey, ImageRecord)>,
    eviction_order: Vec<RecordKey>,
    names: Vec<(RecordKey, ImageNames)>,
    journal: String,
    backoff: Vec<(String, BackoffEntry)>,
    meta: Vec<(String, i64)>,
    pins: Vec<(PinKey, ImagePin)>,
    uses: String,
    pulls: String,
    warm: String,
}

fn contents(store: &Store) -> Contents {
    Contents {
        records: (store.records().expect("records").into_iter())
            .map(|r| (r.key, r.record))
            .collect(),
        eviction_order: (store.eviction_order().expect("order"))
            .map(|r| r.expect("record").key)
            .collect(),
        names: store.all_names().expect("names"),
        journal: format!("{:?}", store.journal().expect("journal")),
        backoff: store.backoff_entries().expect("backoff"),
        meta: store.meta_entries().expect("meta"),
        pins: store.pins().expect("pins"),
        uses: format!("{:?}", store.uses().expect("uses")),
        pulls: format!("{:?}", store.pulls().expect("pulls")),
        warm: format!("{:?}", store.warm_rows().expect("warm")),
    }
}

/// The image `sha256:<id>` with `tags`, as a runtime lists it.
fn listed(id: &str, tags: &[&str]) -> crate::model::RuntimeImage {
    crate::model::RuntimeImage {
        id: crate::model::ImageId::new(format!("sha256:{id}")),
        repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        size: 20,
        ..Default::default()
    }
}

fn names(tags: &[&str]) -> ImageNames {
    ImageNames {
        repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        repo_digests: Vec::new(),
    }
}

/// A listed image's sighting at `now`, as the listed-sightings test makes them.
fn listed_sighting(now: UnixNanos, in_use: bool) -> crate::model::Sighting {
    crate::model::Sighting {
        now,
        in_use,
        size: 20,
        pinned: false,
        used_at: UnixNanos::NEVER,
    }
}

/// The operations that test's batch expands to: a's clamp to `limit`, the sightings in key
/// order with the names each lists, and the names of the key not sighted (b) and of the
/// image that lists none (e).
fn expanded_listed_sightings(now: UnixNanos, limit: UnixNanos) -> Vec<super::BatchOp> {
    let sight = |id: &str, in_use: bool, tags: Option<&[&str]>| super::BatchOp::Sight {
        key: key(id),
        sighting: listed_sighting(now, in_use),
        names: tags.map(names),
    };
    vec![
        super::BatchOp::ClampFuture {
            key: key("a"),
            limit,
            now,
        },
        sight("a", true, Some(&["a:2"])),
        sight("c", false, Some(&["c:1"])),
        sight("d", false, Some(&["d:1"])),
        sight("e", false, None),
        super::BatchOp::SetNames {
            key: key("b"),
            names: names(&["b:9"]),
        },
        super::BatchOp::SetNames {
            key: key("e"),
            names: names(&["e:9"]),
        },
    ]
}

/// Issue 40: a detect's sightings held as positions in the runtime's list
/// (`Batch::sight_listed`, no owned key or names) write exactly what the same operations with
/// owned keys and names write: records, index, names, the detected pulls of the records it
/// creates and the re-pull mark of c's journal entry; the names a listed image does not list
/// go to a `SetNames` at the end, as for a key not sighted.
#[test]
fn listed_sightings_write_what_their_expanded_operations_write() {
    let images: crate::model::ImageList = vec![
        listed("d", &["d:1"]),
        listed("a", &["a:2"]),
        listed("e", &[]),
        listed("c", &["c:1"]),
    ]
    .into();
    let now = UnixNanos(30 * SECOND);
    let sighting = |in_use: bool| listed_sighting(now, in_use);
    let limit = UnixNanos(3 * SECOND);
    let mut compact = Batch::new();
    // Key order: a (clamped: its last_used 5 s is after the limit), c, d, e.
    assert!(compact.sight_listed(&images, 1, Some(limit), sighting(true)));
    assert!(compact.sight_listed(&images, 3, None, sighting(false)));
    assert!(compact.sight_listed(&images, 0, None, sighting(false)));
    assert!(compact.sight_listed(&images, 2, None, sighting(false)));
    assert!(
        !compact.sight_listed(&images, 4, None, sighting(false)),
        "outside the list"
    );
    let mut writer = compact.names_in_key_order();
    writer.set(key("a"), names(&["a:2"]));
    writer.set(key("b"), names(&["b:9"]));
    writer.set(key("c"), names(&["c:1"]));
    writer.set(key("d"), names(&["d:1"]));
    writer.set(key("e"), names(&["e:9"]));
    compact.stamp_if_changed("last_detect", now.0);
    assert_eq!(compact.ops().len(), 3, "one Sightings, two SetNames");
    let expanded: Vec<super::BatchOp> = compact
        .expanded_ops()
        .into_iter()
        .map(std::borrow::Cow::into_owned)
        .collect();
    assert_eq!(expanded, expanded_listed_sightings(now, limit));
    let classic = Batch {
        ops: expanded,
        stamps: compact.stamps.clone(),
        notes: compact.notes.clone(),
    };
    assert_eq!(classic, compact, "equal batches: the same operations");
    let (_dir_a, mut store_a) = populated();
    let (_dir_b, store_b) = populated();
    let applied = store_a.apply_reporting(&compact).expect("compact");
    assert_eq!(applied, store_b.apply_reporting(&classic).expect("classic"));
    assert_eq!(applied.repulls.len(), 1, "c came back: {applied:?}");
    assert_eq!(contents(&store_a), contents(&store_b));
    assert_eq!(store_a.check().expect("check"), []);
}

#[test]
fn a_one_record_mark_writes_its_record_and_index_row_and_nothing_else() {
    let (_dir, mut store) = populated();
    let before = contents(&store);
    let commits = store.commits();
    let now = UnixNanos(30 * SECOND);
    let mut mark = Batch::new();
    mark.mark_used(key("a"), now, None);
    assert!(store.apply(&mark).expect("mark"));
    assert_eq!(store.commits(), commits + 1, "one commit");
    let after = contents(&store);
    let mut expected = before;
    for (k, r) in &mut expected.records {
        if *k == key("a") {
            r.last_used = now;
        }
    }
    // a is now the most recently used: last in eviction order.
    expected.eviction_order = vec![key("b"), key("a")];
    assert_eq!(after, expected);
    assert_eq!(store.check().expect("check"), []);
    // The same mark again still moves last_used (one nanosecond), so it commits again.
    assert!(store.apply(&mark).expect("mark again"));
    assert_eq!(
        store.get(&key("a")).expect("get").map(|r| r.last_used),
        Some(UnixNanos(now.0 + 1))
    );
}

/// The index rows one `apply` of `batch` removed or inserted.
fn index_writes_by(store: &Store, batch: &Batch) -> u32 {
    INDEX_WRITES.with(|n| n.set(0));
    assert!(store.apply(batch).expect("apply"));
    INDEX_WRITES.with(Cell::get)
}

#[test]
fn a_record_update_that_keeps_its_times_keeps_its_index_row_unwritten() {
    let (_dir, mut store) = populated();
    let a = store.get(&key("a")).expect("get").expect("a");
    // A size or pin change keeps the record's times, so its row: not written again (each
    // write copies the index's path to the row, a few pages per commit).
    for changed in [
        ImageRecord {
            size: a.size + 1,
            ..a
        },
        ImageRecord {
            size: a.size + 1,
            pinned: !a.pinned,
            ..a
        },
    ] {
        let mut update = Batch::new();
        update.upsert(key("a"), changed);
        assert_eq!(index_writes_by(&store, &update), 0, "{changed:?}");
        assert_eq!(store.get(&key("a")).expect("get"), Some(changed));
    }
    // A mark moves the row: the old one removed, the new one inserted.
    let mut mark = Batch::new();
    mark.mark_used(key("a"), UnixNanos(40 * SECOND), None);
    assert_eq!(index_writes_by(&store, &mark), 2);
    assert_eq!(
        (store.eviction_order().expect("order"))
            .map(|r| r.expect("record").key)
            .collect::<Vec<_>>(),
        [key("b"), key("a")]
    );
    assert_eq!(store.check().expect("check"), []);
}

/// A store held in memory commits durably once in `MEMORY_DURABLE_EVERY` commits and with
/// `Durability::None` otherwise: after every batch, before, at and after its durable commits,
/// it reads the records and the journal a file store applying the same batches reads.
#[test]
fn a_store_held_in_memory_reads_what_a_file_store_reads_across_its_durable_commits() {
    use super::open::MEMORY_DURABLE_EVERY;
    use redb::Durability;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = Store::open(&dir.path().join("db.redb"), UnixNanos(1)).expect("open");
    let memory =
        Store::open_in_memory(std::path::Path::new("memory.redb"), UnixNanos(1)).expect("open");
    let mut durable = 0;
    for i in 0..(2 * MEMORY_DURABLE_EVERY + 10) {
        let at = i64::try_from(i).expect("small") + 10;
        let id = format!("{}", i % 40);
        let mut batch = Batch::new();
        if i % 7 == 3 {
            batch.evict(
                key(&id),
                EvictionNote {
                    removed_at: UnixNanos::from_secs(at),
                    reason: RemovalReason::Unused,
                    rank: 1,
                    fs: None,
                },
            );
        } else {
            batch.upsert(key(&id), record(at, at + 1));
        }
        let immediate = matches!(memory.commit_durability(), Durability::Immediate);
        let committed = memory.apply(&batch).expect("memory apply");
        assert_eq!(committed, file.apply(&batch).expect("file apply"));
        if committed && immediate {
            durable += 1;
            assert!(memory.commits().is_multiple_of(MEMORY_DURABLE_EVERY));
        }
        assert_eq!(
            memory.records().expect("records"),
            file.records().expect("records")
        );
        assert_eq!(
            memory.journal().expect("journal"),
            file.journal().expect("journal")
        );
    }
    assert_eq!(durable, memory.commits() / MEMORY_DURABLE_EVERY);
    assert!(durable >= 1);
}
