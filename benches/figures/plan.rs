//! The GC plan: our index scan against the kubelet's load-filter-sort (over the same store and
//! over records already in memory), at every n. Asserts that all three choose exactly the same
//! victims in the same order; times them in interleaved pairs (`report::Paired`).

use std::collections::BTreeSet;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use imagekeeper::gc::plan_space_victims;
use imagekeeper::gc::{Verdict, space_verdict};
use imagekeeper::model::{RecordKey, UnixNanos};
use imagekeeper::store::{Store, StoredRecord};

use crate::Timing;
use crate::report::{Figures, Paired, print_clocks, show, thread_cpu_resolution_ns};
use crate::synth::{Node, SEED, build_store, synth_node};

/// The space walk's MinAge (kubelet's default).
const MIN_AGE: Duration = Duration::from_secs(120);
/// How many victims the plan figure chooses.
pub const VICTIMS: usize = 50;

/// kubelet's freeSpace loop over candidates already in eviction order.
fn walk<'a>(
    candidates: impl Iterator<Item = &'a StoredRecord>,
    in_use: &BTreeSet<RecordKey>,
    free_time: UnixNanos,
    bytes_to_free: i64,
) -> Vec<StoredRecord> {
    let mut planned: i64 = 0;
    let mut out = Vec::new();
    for r in candidates {
        if space_verdict(&r.key, &r.record, in_use, free_time, MIN_AGE) != Verdict::Eligible {
            continue;
        }
        planned = planned.saturating_add(r.record.size as i64);
        out.push(r.clone());
        if planned >= bytes_to_free {
            break;
        }
    }
    out
}

/// kubelet's order: (last_used, first_detected); the sort is stable and the input is ordered
/// by key, so ties fall to the key as in the store's index.
fn kubelet_order(candidates: &mut [&StoredRecord]) {
    candidates.sort_by(|a, b| {
        (a.record.last_used, a.record.first_detected)
            .cmp(&(b.record.last_used, b.record.first_detected))
    });
}

/// Ours: the manager's walk, a lazy scan of the eviction index.
pub fn plan_ours(store: &Store, node: &Node, bytes: i64) -> Vec<StoredRecord> {
    plan_space_victims(store, &node.in_use, node.now, MIN_AGE, bytes).expect("plan")
}

/// kubelet's approach over the same store: load every record, filter in-use and pinned, sort,
/// walk.
fn plan_kubelet_store(store: &Store, node: &Node, bytes: i64) -> Vec<StoredRecord> {
    let all = store.records().expect("records");
    plan_kubelet_memory(&all, node, bytes)
}

/// kubelet's approach with the records already in memory (its imageRecords map).
fn plan_kubelet_memory(records: &[StoredRecord], node: &Node, bytes: i64) -> Vec<StoredRecord> {
    let mut candidates: Vec<&StoredRecord> = records
        .iter()
        .filter(|r| !node.in_use_hash.contains(&r.key) && !r.record.pinned)
        .collect();
    kubelet_order(&mut candidates);
    walk(candidates.into_iter(), &node.in_use, node.now, bytes)
}

/// A node of `n` images, its store at `work/node-<n>.redb`, and the bytes its first
/// [`VICTIMS`] eligible images free. Asserts that the index scan, the kubelet's sort over the
/// store and the same sort over records in memory choose the same victims in the same order.
pub struct PlanNode {
    pub node: Node,
    pub store: Store,
    pub bytes: i64,
}

pub fn build(n: usize, work: &Path) -> PlanNode {
    let started = Instant::now();
    let node = synth_node(n, SEED);
    let path = work.join(format!("node-{n}.redb"));
    let store = build_store(&path, &node.records, node.now);
    let order = plan_kubelet_memory(&node.records, &node, i64::MAX);
    assert!(order.len() >= VICTIMS, "n={n}: too few eligible images");
    let bytes: i64 = order[..VICTIMS].iter().map(|r| r.record.size as i64).sum();
    let ours = plan_ours(&store, &node, bytes);
    let kubelet = plan_kubelet_store(&store, &node, bytes);
    let memory = plan_kubelet_memory(&node.records, &node, bytes);
    assert_eq!(
        ours.len(),
        VICTIMS,
        "n={n}: our plan has {} victims",
        ours.len()
    );
    assert!(
        ours == kubelet,
        "n={n}: index scan and kubelet's sort chose different victims"
    );
    assert!(
        ours == memory,
        "n={n}: index scan and the in-memory sort differ"
    );
    println!(
        "node n={n}: {} in use, {} pinned, {} containers, victims identical ({VICTIMS}, {} MB), built in {:.1} s",
        node.in_use.len(),
        node.records.iter().filter(|r| r.record.pinned).count(),
        node.containers.len(),
        bytes / 1_000_000,
        started.elapsed().as_secs_f64()
    );
    PlanNode { node, store, bytes }
}

/// `gc_plan_*` at every n: our time, the kubelet's over the store and in memory, the speedups,
/// and how our time grows from the smallest n to the largest (flat: it reads ~VICTIMS
/// entries whatever n). Every ratio is the median of interleaved pairs ([`Paired`]): our
/// plan and the kubelet's, one after the other, pair after pair (issue 40: timed in separate
/// phases, the speedup at 100k was 760x on a quiet machine and 309x beside one busy process),
/// each side in thread CPU time (all of it is CPU: the store's pages are in the page cache);
/// the same figures in wall time are printed beside them as `*_wall_*`.
pub fn figures(nodes: &[PlanNode], timing: &Timing, figures: &mut Figures) {
    print_clocks();
    let pairs = if timing.quick { 11 } else { 41 };
    let mut ours_at = Vec::new();
    let mut shortest_side_ns = f64::INFINITY;
    for p in nodes {
        let (node, store, bytes) = (&p.node, &p.store, p.bytes);
        let n = node.records.len();
        let k = n / 1000;
        let ours = || {
            black_box(plan_ours(store, node, bytes));
        };
        let kubelet = Paired::measure(pairs, ours, || {
            black_box(plan_kubelet_store(store, node, bytes));
        });
        let memory = Paired::measure(pairs, ours, || {
            black_box(plan_kubelet_memory(&node.records, node, bytes));
        });
        shortest_side_ns = shortest_side_ns
            .min(kubelet.shortest_side_ns)
            .min(memory.shortest_side_ns);
        let (ours_ns, kubelet_ns) = kubelet.medians_ns();
        let (_, memory_ns) = memory.medians_ns();
        let (ours_wall_ns, kubelet_wall_ns) = kubelet.wall_medians_ns();
        let (_, memory_wall_ns) = memory.wall_medians_ns();
        ours_at.push((n, store, node, bytes));
        figures.add(&format!("gc_plan_ours_{k}k_us"), ours_ns / 1e3, "us");
        figures.add(
            &format!("gc_plan_ours_wall_{k}k_us"),
            ours_wall_ns / 1e3,
            "us",
        );
        figures.add(&format!("gc_plan_kubelet_{k}k_us"), kubelet_ns / 1e3, "us");
        figures.add(
            &format!("gc_plan_kubelet_wall_{k}k_us"),
            kubelet_wall_ns / 1e3,
            "us",
        );
        figures.add(
            &format!("gc_plan_kubelet_in_memory_{k}k_us"),
            memory_ns / 1e3,
            "us",
        );
        figures.add(
            &format!("gc_plan_kubelet_in_memory_wall_{k}k_us"),
            memory_wall_ns / 1e3,
            "us",
        );
        let speedup = kubelet.median_ratio_b_over_a();
        if n == 100_000 {
            figures.target(&format!("gc_plan_speedup_{k}k"), speedup, "x", ">=", 500.0);
        } else {
            figures.add(&format!("gc_plan_speedup_{k}k"), speedup, "x");
        }
        figures.add(
            &format!("gc_plan_speedup_wall_{k}k"),
            kubelet.median_wall_ratio_b_over_a(),
            "x",
        );
        figures.add(
            &format!("gc_plan_speedup_in_memory_{k}k"),
            memory.median_ratio_b_over_a(),
            "x",
        );
        figures.add(
            &format!("gc_plan_speedup_in_memory_wall_{k}k"),
            memory.median_wall_ratio_b_over_a(),
            "x",
        );
    }
    if let (Some(&(small, s_store, s_node, s_bytes)), Some(&(large, l_store, l_node, l_bytes))) =
        (ours_at.first(), ours_at.last())
    {
        let growth = Paired::measure(
            pairs,
            || {
                black_box(plan_ours(s_store, s_node, s_bytes));
            },
            || {
                black_box(plan_ours(l_store, l_node, l_bytes));
            },
        );
        shortest_side_ns = shortest_side_ns.min(growth.shortest_side_ns);
        let (large_k, small_k) = (large / 1000, small / 1000);
        figures.target(
            &format!("gc_plan_ours_{large_k}k_over_{small_k}k"),
            growth.median_ratio_b_over_a(),
            "x",
            "<=",
            3.0,
        );
        figures.add(
            &format!("gc_plan_ours_wall_{large_k}k_over_{small_k}k"),
            growth.median_wall_ratio_b_over_a(),
            "x",
        );
    }
    println!(
        "plan pairs: {pairs} per ratio, the shortest timed side {} ms of thread CPU time, {}x the clock's resolution",
        show(shortest_side_ns / 1e6),
        show(shortest_side_ns / thread_cpu_resolution_ns())
    );
}
