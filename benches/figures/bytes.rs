//! The database file: bytes per record (plain, with names, the journal), compacted sizes,
//! reopen + first plan at 100k, and the durable one-record commit.

use std::fs::{self, File};
use std::path::Path;
use std::time::Instant;

use fastrand::Rng;
use imagekeeper::model::{EvictionNote, FsUsage, RecordKey, RemovalReason, UnixNanos};
use imagekeeper::store::{Batch, Store};

use crate::plan::{PlanNode, VICTIMS, plan_ours};
use crate::report::{Figures, median, percentile};
use crate::synth::{Node, SEED, secs, synth_names};

/// `db_bytes_per_record_100k` (target <= 200 B: records + eviction index only) and its
/// compacted twin, then the names and journal figures; `path` is the node's store file.
pub fn size_figures(node: &Node, path: &Path, work: &Path, figures: &mut Figures) {
    let file_bytes = fs::metadata(path).expect("stat").len();
    let n = node.records.len();
    figures.target(
        &format!("db_bytes_per_record_{}k", n / 1000),
        file_bytes as f64 / n as f64,
        "B",
        "<=",
        200.0,
    );
    figures.add(
        &format!("db_file_{}k_mib", n / 1000),
        file_bytes as f64 / 1048576.0,
        "MiB",
    );
    figures.add(
        &format!("db_bytes_per_record_{}k_compacted", n / 1000),
        compacted_size(path, work) as f64 / n as f64,
        "B",
    );
    written_once_bytes(node, work, figures);
    names_and_journal_bytes(node, file_bytes, work, figures);
}

/// The same records + index written in one transaction (as a first detect writes them), in
/// key order and shuffled, each into a new file: `db_bytes_per_record_100k` writes 1,000
/// records per commit, so these say how much of its size is the commits' freed pages and
/// how much redb's growth (a file below its 4 GiB region grows by doubling).
fn written_once_bytes(node: &Node, work: &Path, figures: &mut Figures) {
    let n = node.records.len();
    for (name, shuffled) in [("key_order", false), ("shuffled", true)] {
        let mut records: Vec<_> = node.records.iter().collect();
        if shuffled {
            Rng::with_seed(SEED ^ 0x0005_4f1e).shuffle(&mut records);
        }
        let path = work.join(format!("written-once-{name}.redb"));
        let _ = fs::remove_file(&path);
        let store = Store::open(&path, node.now).expect("open a new store");
        let mut batch = Batch::new();
        for r in records {
            batch.upsert(r.key.clone(), r.record);
        }
        store
            .apply(&batch)
            .expect("write every record in one transaction");
        drop(store);
        let bytes = fs::metadata(&path).expect("stat").len();
        figures.add(
            &format!("db_bytes_per_record_{}k_one_txn_{name}", n / 1000),
            bytes as f64 / n as f64,
            "B",
        );
        let _ = fs::remove_file(&path);
    }
}

/// `reopen_plan_100k_ms`: `Store::open` of the file and the first plan, warm (median of 11)
/// and with the file evicted from the page cache (median of 5).
pub fn reopen_figures(node: &Node, bytes: i64, path: &Path, figures: &mut Figures) {
    let reopen = |evict_cache: bool| -> f64 {
        if evict_cache {
            drop_file_cache(path);
        }
        let started = Instant::now();
        let store = Store::open(path, node.now).expect("reopen");
        let victims = plan_ours(&store, node, bytes);
        let took = started.elapsed().as_secs_f64() * 1e3;
        assert_eq!(victims.len(), VICTIMS);
        took
    };
    let mut warm: Vec<f64> = (0..11).map(|_| reopen(false)).collect();
    figures.target("reopen_plan_100k_ms", median(&mut warm), "ms", "<=", 100.0);
    let mut cold: Vec<f64> = (0..5).map(|_| reopen(true)).collect();
    figures.add("reopen_plan_100k_cold_ms", median(&mut cold), "ms");
}

/// `commit_p50_us` / `commit_p99_us`: 1000 durable one-record batches (a use mark) on `store`.
pub fn commit_figures(p: &PlanNode, figures: &mut Figures) {
    let mut took = Vec::with_capacity(1000);
    let keys: Vec<RecordKey> = p.node.records.iter().map(|r| r.key.clone()).collect();
    for i in 0..1000 {
        let mut batch = Batch::new();
        batch.mark_used(
            keys[i * 7 % keys.len()].clone(),
            UnixNanos(p.node.now.0 + secs(1 + i as i64)),
            None,
        );
        let started = Instant::now();
        assert!(p.store.apply(&batch).expect("commit"));
        took.push(started.elapsed().as_secs_f64() * 1e6);
    }
    took.sort_by(f64::total_cmp);
    figures.add("commit_p50_us", percentile(&took, 50.0), "us");
    figures.add("commit_p99_us", percentile(&took, 99.0), "us");
}

/// The schema-2 file-size figures, apart from record + index (`plain_bytes`, the file of the
/// same records without names): the same 100k records with their names, and a journal of
/// 10,000 removals (the default retention) with their names, on a file of its own.
pub fn names_and_journal_bytes(node: &Node, plain_bytes: u64, work: &Path, figures: &mut Figures) {
    let n = node.records.len();
    let mut rng = Rng::with_seed(SEED ^ 0x6e61_6d65);
    let path = work.join("names-100k.redb");
    let store = Store::open(&path, node.now).expect("open a new store");
    for (c, chunk) in node.records.chunks(1000).enumerate() {
        let mut batch = Batch::new();
        for (j, r) in chunk.iter().enumerate() {
            batch.upsert(r.key.clone(), r.record);
            batch.set_names(r.key.clone(), synth_names(c * 1000 + j, &mut rng));
        }
        store.apply(&batch).expect("write records and names");
    }
    assert_eq!(store.all_names().expect("names").len(), n);
    drop(store);
    let with_names = fs::metadata(&path).expect("stat").len();
    figures.add(
        "db_bytes_per_record_100k_with_names",
        with_names as f64 / n as f64,
        "B",
    );
    figures.add(
        "db_names_bytes_per_record_100k",
        (with_names as f64 - plain_bytes as f64) / n as f64,
        "B",
    );
    let _ = fs::remove_file(&path);

    // The journal: 10,000 records with names, each removed by GC (one transaction per 100, as
    // a long cycle commits one removal at a time), leaving 10,000 entries and their names.
    const ENTRIES: usize = 10_000;
    let path = work.join("journal-10k.redb");
    let store = Store::open(&path, node.now).expect("open a new store");
    let records = &node.records[..ENTRIES];
    for (c, chunk) in records.chunks(1000).enumerate() {
        let mut batch = Batch::new();
        for (j, r) in chunk.iter().enumerate() {
            batch.upsert(r.key.clone(), r.record);
            batch.set_names(r.key.clone(), synth_names(c * 1000 + j, &mut rng));
        }
        store.apply(&batch).expect("write records and names");
    }
    let fs_usage = Some(FsUsage {
        capacity: 100 << 30,
        used_before: 90 << 30,
        target_used: 80 << 30,
    });
    for (c, chunk) in records.chunks(100).enumerate() {
        let mut batch = Batch::new();
        for (j, r) in chunk.iter().enumerate() {
            let rank = c * 100 + j + 1;
            batch.evict(
                r.key.clone(),
                EvictionNote {
                    removed_at: UnixNanos(node.now.0 + secs(rank as i64)),
                    reason: RemovalReason::Space,
                    rank: rank as u32,
                    fs: fs_usage,
                },
            );
        }
        store.apply(&batch).expect("evict");
    }
    assert_eq!(store.journal().expect("journal").len(), ENTRIES);
    assert!(store.is_empty().expect("count"));
    drop(store);
    let journal_bytes = fs::metadata(&path).expect("stat").len();
    figures.add(
        "db_bytes_per_journal_entry_10k",
        journal_bytes as f64 / ENTRIES as f64,
        "B",
    );
    figures.add(
        "db_bytes_per_journal_entry_10k_compacted",
        compacted_size(&path, work) as f64 / ENTRIES as f64,
        "B",
    );
    let _ = fs::remove_file(&path);
}

/// Evicts `path` from the page cache (its pages are clean: every commit was fsynced).
fn drop_file_cache(path: &Path) {
    use std::os::fd::AsRawFd;
    let file = File::open(path).expect("open for fadvise");
    // SAFETY: a valid open descriptor; posix_fadvise only advises the kernel.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise");
}

/// The size of a compacted copy of `path` (redb's compaction, bench-only: the store does not
/// compact).
pub fn compacted_size(path: &Path, work: &Path) -> u64 {
    let copy = work.join("compacted.redb");
    fs::copy(path, &copy).expect("copy the db");
    let mut db = redb::Database::open(&copy).expect("open the copy");
    while db.compact().expect("compact") {}
    drop(db);
    let size = fs::metadata(&copy).expect("stat").len();
    let _ = fs::remove_file(&copy);
    size
}
