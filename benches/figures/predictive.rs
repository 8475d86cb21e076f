//! The predictive order's ranking cost per space walk (issue 39), at 2k and 100k images: the
//! function the manager's space walk calls once per walk under `imageGCPolicy = "predictive"`
//! (`gc::predictive_walk`: read the listed images' records, the journal's returns, the use
//! history and the pull history once each, estimate and sort), over a store whose journal and
//! histories are full (the journal's retention count: 10,000 removals, one in ten of an image
//! listed again, 10,000 closed use intervals and 10,000 pulls, spread over the node's images). Run alone with
//! `IMAGEKEEPER_BENCH_ONLY=predictive` (`scripts/bench --predictive`); timed by criterion in
//! the `gc_plan` group as `gc_plan/predictive_rank/<n>`.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode};
use imagekeeper::gc::{ListedImages, predictive_walk};
use imagekeeper::model::{
    EvictionNote, ImageRecord, PullEntry, PullKey, PullOrigin, RecordKey, RemovalReason, UnixNanos,
};
use imagekeeper::store::{Batch, Store};

use crate::Timing;
use crate::report::{Figures, criterion_median_ns};
use crate::synth::{Node, SEED, build_store, hex64, synth_node};

/// The node sizes the ranking is timed at.
pub const SIZES: [usize; 2] = [2_000, 100_000];

/// The histories' rows: the journal retention's default count, each.
const HISTORY_ROWS: usize = 10_000;

/// A node's store with its records and full use and pull histories over the last week.
fn build(n: usize, work: &Path) -> (Node, Store) {
    let node = synth_node(n, SEED);
    let store = build_store(
        &work.join(format!("predictive-{n}.redb")),
        &node.records,
        node.now,
    );
    let mut rng = fastrand::Rng::with_seed(SEED ^ 0x39);
    let week = 7 * 86_400 * 1_000_000_000i64;
    let start = node.now.0 - week;
    // Uses: 100 rounds of 100 images opened, then closed by a detect that sees none in use.
    for round in 0..HISTORY_ROWS / 100 {
        let at = start + round as i64 * (week / 200);
        let mut batch = Batch::new();
        for _ in 0..100 {
            let r = &node.records[rng.usize(..node.records.len())];
            batch.open_use(r.key.clone(), UnixNanos(at));
        }
        store.apply(&batch).expect("open uses");
        let mut close = Batch::new();
        close.observe_uses(UnixNanos(at + 60_000_000_000), Vec::new());
        store.apply(&close).expect("close uses");
    }
    for chunk in 0..HISTORY_ROWS / 1000 {
        let mut batch = Batch::new();
        for i in 0..1000 {
            let r = &node.records[rng.usize(..node.records.len())];
            let at = start + ((chunk * 1000 + i) as i64) * (week / HISTORY_ROWS as i64);
            batch.record_pull(
                PullKey {
                    at: UnixNanos(at),
                    key: r.key.clone(),
                },
                PullEntry {
                    size: r.record.size,
                    origin: PullOrigin::Detected,
                    took: Duration::ZERO,
                    name: String::new(),
                },
            );
        }
        store.apply(&batch).expect("record pulls");
    }
    // The journal: the retention's 10,000 removals over the week, one in ten of an image
    // listed now, pulled back an hour after its removal (the returns the ranking counts).
    for chunk in 0..HISTORY_ROWS / 1000 {
        let (mut gone, mut evict, mut back) = (Batch::new(), Batch::new(), Batch::new());
        let mut pulled_back = 0;
        for i in 0..1000 {
            let at = start + ((chunk * 1000 + i) as i64) * (week / HISTORY_ROWS as i64);
            let note = EvictionNote {
                removed_at: UnixNanos(at),
                reason: RemovalReason::Space,
                rank: 1,
                fs: None,
            };
            if rng.u8(0..10) == 0 {
                // Distinct within the chunk: an image is removed once per batch.
                let r = &node.records[(chunk * 100 + pulled_back) % node.records.len()];
                pulled_back += 1;
                evict.evict(r.key.clone(), note);
                // A pull's mark creates the record (the journal marks the return), then its
                // record as the node has it.
                back.mark_used(
                    r.key.clone(),
                    UnixNanos(at + 3_600_000_000_000),
                    Some(r.record.size),
                );
                back.upsert(r.key.clone(), r.record);
            } else {
                let key = RecordKey::new(format!("sha256:{}", hex64(&mut rng)), "");
                let record = ImageRecord {
                    first_detected: UnixNanos(at - 86_400_000_000_000),
                    last_used: UnixNanos(at - 3_600_000_000_000),
                    size: 100_000_000,
                    pinned: false,
                };
                gone.upsert(key.clone(), record);
                evict.evict(key, note);
            }
        }
        for batch in [gone, evict, back] {
            store.apply(&batch).expect("journal removals");
        }
    }
    (node, store)
}

/// One walk's ranking: the function the manager's space walk calls once per walk under
/// `imageGCPolicy = "predictive"` (`gc::predictive_walk`, every read of the store included),
/// on the listed images as a detect's list holds them.
fn rank(store: &Store, node: &Node, listed: &ListedImages) -> usize {
    predictive_walk(store, listed, node.now)
        .expect("predictive walk")
        .len()
}

/// `gc_plan_predictive_rank_<k>k_us` at 2k and 100k images.
pub fn figures(work: &Path, timing: &Timing, figures: &mut Figures) {
    let mut criterion = Criterion::default()
        .output_directory(&timing.criterion_dir)
        .without_plots()
        .configure_from_args();
    let nodes: Vec<(Node, Store, ListedImages)> = SIZES
        .iter()
        .map(|&n| {
            let (node, store) = build(n, work);
            let listed = ListedImages::new(node.images.clone());
            (node, store, listed)
        })
        .collect();
    let mut group = criterion.benchmark_group("gc_plan");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(timing.warm_up)
        .measurement_time(timing.measure);
    for (node, store, listed) in &nodes {
        let n = node.records.len();
        assert_eq!(
            rank(store, node, listed),
            n,
            "n={n}: every listed image ranked"
        );
        assert!(store.uses().expect("uses").len() >= HISTORY_ROWS / 2);
        let journal = store.journal().expect("journal");
        assert_eq!(journal.len(), HISTORY_ROWS, "n={n}: a full journal");
        assert!(
            journal
                .iter()
                .filter(|(_, e)| e.repulled_at.is_some())
                .count()
                >= HISTORY_ROWS / 20,
            "n={n}: returns in the journal"
        );
        group.bench_with_input(BenchmarkId::new("predictive_rank", n), &n, |b, _| {
            b.iter(|| black_box(rank(store, node, listed)))
        });
    }
    group.finish();
    for (node, _, _) in &nodes {
        let n = node.records.len();
        let us = criterion_median_ns(
            &timing.criterion_dir,
            &format!("gc_plan/predictive_rank/{n}"),
        ) / 1e3;
        figures.add(
            &format!("gc_plan_predictive_rank_{}k_us", n / 1000),
            us,
            "us",
        );
    }
}
