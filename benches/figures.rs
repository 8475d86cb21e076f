//! The figures of issue 8, measured in one run: the indexed eviction scan against kubelet's
//! load-and-sort, the cost of a durable detect cycle against kubelet's in-memory map, reopen,
//! file size, peak RSS of a process holding 100k records, the durable commit, and (when the lab
//! is up) GC of the lab's images against the real containerd.
//!
//! Run it with `scripts/bench`. Criterion measures the timed comparisons; the rest is measured
//! here directly. Every figure is written to `target/bench/figures.txt` (one `name: value unit`
//! line each) and `target/bench/summary.json`. The bench asserts only facts that do not depend
//! on timing: both planners choose identical victims, a detect cycle commits once when
//! something changed and never when nothing did, the replay removed images.
//!
//! Env: `IMAGEKEEPER_BENCH_QUICK=1` shortens criterion's measurement (for trying the bench out,
//! not for quoting); `IMAGEKEEPER_LAB_ENV=<lab.env>` enables `e2e_gc_lab`;
//! `IMAGEKEEPER_BENCH_ONLY=bytes` measures only the file-size figures (record + index, names,
//! journal) on the 100k node (`scripts/bench --bytes`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::{self, File};
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use serde_json::{Value, json};

use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::cri::{CriClient, CriConfig, CriError, ImageRuntime};
use imagekeeper::gc::detect::images_in_use;
use imagekeeper::gc::detect::reference::plan_detect;
use imagekeeper::gc::evict::{Verdict, space_verdict};
use imagekeeper::gc::{GcConfig, GcPolicy, ImageGcManager, PinPatterns, plan_space_victims};
use imagekeeper::model::{
    ContainerState, EvictionNote, FsUsage, ImageFsStats, ImageId, ImageNames, ImageRecord,
    PullCredentials, RecordKey, RemovalReason, RuntimeContainer, RuntimeImage, UnixNanos,
};
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::{Batch, BatchOp, Store, StoredRecord, meta_keys};

/// The synthetic nodes' "now": 2026-01-01T00:00:00Z.
const NOW_SECS: i64 = 1_767_225_600;
const SEED: u64 = 0x1a6e_4ee9_e200_0008;
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// The space walk's MinAge (kubelet's default).
const MIN_AGE: Duration = Duration::from_secs(120);
/// How many victims the plan figure chooses.
const VICTIMS: usize = 50;

// ------------------------------------------------------------------------------ synthetic nodes

/// splitmix64: a tiny, fixed-seed PRNG (no crate needed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform nanoseconds in [lo, hi).
    fn nanos_between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }

    fn hex64(&mut self) -> String {
        format!(
            "{:016x}{:016x}{:016x}{:016x}",
            self.next(),
            self.next(),
            self.next(),
            self.next()
        )
    }

    /// A size between 5 MB and 5 GB, bell-shaped in log space (the mean of three uniforms):
    /// most images are a few hundred MB.
    fn image_size(&mut self) -> u64 {
        let (lo, hi) = (5e6f64.ln(), 5e9f64.ln());
        let u = (self.unit() + self.unit() + self.unit()) / 3.0;
        (lo + u * (hi - lo)).exp() as u64
    }
}

/// A node: what the runtime lists and what the store holds.
struct Node {
    now: UnixNanos,
    images: Vec<RuntimeImage>,
    containers: Vec<RuntimeContainer>,
    in_use: BTreeSet<RecordKey>,
    /// The same keys in a hash set: kubelet's imagesInUse is a Go map.
    in_use_hash: HashSet<RecordKey>,
    /// The records, ordered by key (as `Store::records` returns them).
    records: Vec<StoredRecord>,
}

fn secs(s: i64) -> i64 {
    s * 1_000_000_000
}

/// One synthetic image: 10 % in use, 5 % pinned, 30 % of the rest never used.
fn synth_image(rng: &mut Rng, i: usize, now: i64) -> (RuntimeImage, ImageRecord, bool) {
    let id = format!("sha256:{}", rng.hex64());
    let size = rng.image_size();
    let roll = rng.below(100);
    let in_use = roll < 10;
    let pinned = (10..15).contains(&roll);
    let first_detected = now - rng.nanos_between(secs(3600), secs(90 * 86_400));
    let last_used = if in_use {
        now - rng.nanos_between(0, secs(300))
    } else if rng.below(10) < 3 {
        0
    } else {
        rng.nanos_between(first_detected, now - secs(600))
    };
    let image = RuntimeImage {
        id: ImageId::new(id),
        repo_tags: vec![format!(
            "registry.example.com/team-{}/app-{i}:v1.{}.{}",
            i % 40,
            rng.below(30),
            rng.below(10)
        )],
        repo_digests: Vec::new(),
        size,
        pinned,
        runtime_handler: String::new(),
    };
    let record = ImageRecord {
        first_detected: UnixNanos(first_detected),
        last_used: UnixNanos(last_used),
        size,
        pinned,
    };
    (image, record, in_use)
}

fn container_for(rng: &mut Rng, image: &RuntimeImage) -> RuntimeContainer {
    RuntimeContainer {
        id: rng.hex64(),
        pod_sandbox_id: rng.hex64(),
        image: image.repo_tags[0].clone(),
        image_id: image.id.clone(),
        state: ContainerState::Running,
        runtime_handler: String::new(),
    }
}

/// Only what the runtime lists for `synth_node(n, seed)`: the same images and containers.
fn synth_lists(n: usize, seed: u64) -> (Vec<RuntimeImage>, Vec<RuntimeContainer>) {
    let mut rng = Rng(seed ^ n as u64);
    let mut images = Vec::with_capacity(n);
    let mut containers = Vec::new();
    for i in 0..n {
        let (image, _, in_use) = synth_image(&mut rng, i, secs(NOW_SECS));
        if in_use {
            containers.push(container_for(&mut rng, &image));
        }
        images.push(image);
    }
    (images, containers)
}

fn synth_node(n: usize, seed: u64) -> Node {
    let mut rng = Rng(seed ^ n as u64);
    let now = secs(NOW_SECS);
    let mut images = Vec::with_capacity(n);
    let mut containers = Vec::new();
    let mut records = Vec::with_capacity(n);
    for i in 0..n {
        let (image, record, in_use) = synth_image(&mut rng, i, now);
        if in_use {
            containers.push(container_for(&mut rng, &image));
        }
        records.push(StoredRecord {
            key: image.record_key(),
            record,
        });
        images.push(image);
    }
    records.sort_by(|a, b| a.key.cmp(&b.key));
    let in_use = images_in_use(&images, &containers, &[], None);
    Node {
        now: UnixNanos(now),
        images,
        containers,
        in_use_hash: in_use.iter().cloned().collect(),
        in_use,
        records,
    }
}

/// A store at `path` holding `records`, written 1000 records per commit.
fn build_store(path: &Path, records: &[StoredRecord], now: UnixNanos) -> Store {
    let store = Store::open(path, now).expect("open a new store");
    for chunk in records.chunks(1000) {
        let mut batch = Batch::new();
        for r in chunk {
            batch.upsert(r.key.clone(), r.record);
        }
        store.apply(&batch).expect("write records");
    }
    assert_eq!(store.len().expect("count"), records.len() as u64);
    store
}

// ------------------------------------------------------------------------------ the planners

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
fn plan_ours(store: &Store, node: &Node, bytes: i64) -> Vec<StoredRecord> {
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

// ------------------------------------------------------------------------------ figures

struct Figure {
    name: String,
    value: f64,
    unit: &'static str,
    /// (">=" or "<=", bound)
    target: Option<(&'static str, f64)>,
    note: Option<String>,
}

#[derive(Default)]
struct Figures(Vec<Figure>);

impl Figures {
    fn add(&mut self, name: &str, value: f64, unit: &'static str) {
        self.push(name, value, unit, None);
    }

    fn target(&mut self, name: &str, value: f64, unit: &'static str, op: &'static str, bound: f64) {
        self.push(name, value, unit, Some((op, bound)));
    }

    fn push(
        &mut self,
        name: &str,
        value: f64,
        unit: &'static str,
        target: Option<(&'static str, f64)>,
    ) {
        let line = format!("{name}: {} {unit}", show(value));
        println!("FIGURE {line}");
        self.0.push(Figure {
            name: name.to_owned(),
            value,
            unit,
            target,
            note: None,
        });
    }

    fn skip(&mut self, name: &str, why: &str) {
        println!("FIGURE {name}: skipped ({why})");
        self.0.push(Figure {
            name: name.to_owned(),
            value: f64::NAN,
            unit: "",
            target: None,
            note: Some(format!("skipped ({why})")),
        });
    }

    fn write(&self, dir: &Path) {
        let mut lines = String::new();
        let mut targets = String::new();
        let mut summary = serde_json::Map::new();
        for f in &self.0 {
            let mut entry = serde_json::Map::new();
            if let Some(note) = &f.note {
                lines.push_str(&format!("{}: {note}\n", f.name));
                entry.insert("skipped".into(), json!(note));
            } else {
                lines.push_str(&format!("{}: {} {}\n", f.name, show(f.value), f.unit));
                entry.insert("value".into(), json!(round(f.value)));
                entry.insert("unit".into(), json!(f.unit));
                if let Some((op, bound)) = f.target {
                    let met = if op == ">=" {
                        f.value >= bound
                    } else {
                        f.value <= bound
                    };
                    entry.insert("target".into(), json!(format!("{op} {bound}")));
                    entry.insert("met".into(), json!(met));
                    targets.push_str(&format!(
                        "{}: {} ({} {}, target {op} {bound})\n",
                        f.name,
                        if met { "met" } else { "MISSED" },
                        show(f.value),
                        f.unit
                    ));
                }
            }
            summary.insert(f.name.clone(), Value::Object(entry));
        }
        fs::write(dir.join("figures.txt"), lines).expect("write figures.txt");
        fs::write(dir.join("targets.txt"), targets).expect("write targets.txt");
        let text = serde_json::to_string_pretty(&Value::Object(summary)).expect("json");
        fs::write(dir.join("summary.json"), text + "\n").expect("write summary.json");
    }
}

/// Three significant digits, no exponent.
fn show(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn round(v: f64) -> f64 {
    show(v).parse().unwrap_or(v)
}

/// Criterion's median estimate (ns) of `group/function/parameter`.
fn criterion_median_ns(dir: &Path, id: &str) -> f64 {
    let path = dir.join(id).join("new/estimates.json");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("criterion estimates {}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("estimates.json");
    v["median"]["point_estimate"]
        .as_f64()
        .expect("median point estimate")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ------------------------------------------------------------------------------ main

fn main() {
    if let Ok(phase) = std::env::var(CHILD_ENV) {
        agent_child(&phase);
        return;
    }
    // `cargo bench` passes --bench. Under `cargo test --all-targets` or nextest (which lists
    // with --list) this binary has no tests: the figures take minutes and need a release build.
    if !std::env::args().any(|a| a == "--bench") {
        if !std::env::args().any(|a| a == "--list") {
            println!("figures: not run (use scripts/bench or cargo bench --bench figures)");
        }
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = root.join("target/bench");
    let crit_dir = out_dir.join("criterion");
    let work = out_dir.join("tmp");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).expect("create target/bench/tmp");
    let quick = std::env::var("IMAGEKEEPER_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (warm_up, measure) = if quick {
        (Duration::from_millis(200), Duration::from_millis(600))
    } else {
        (Duration::from_secs(1), Duration::from_secs(4))
    };
    let mut criterion = Criterion::default()
        .output_directory(&crit_dir)
        .without_plots()
        .configure_from_args();
    let mut figures = Figures::default();

    if std::env::var("IMAGEKEEPER_BENCH_ONLY").is_ok_and(|v| v == "bytes") {
        let node = synth_node(100_000, SEED);
        let path = work.join("node-100000.redb");
        drop(build_store(&path, &node.records, node.now));
        let file_bytes = fs::metadata(&path).expect("stat").len();
        figures.target(
            "db_bytes_per_record_100k",
            file_bytes as f64 / node.records.len() as f64,
            "B",
            "<=",
            300.0,
        );
        figures.add(
            "db_bytes_per_record_100k_compacted",
            compacted_size(&path, &work) as f64 / node.records.len() as f64,
            "B",
        );
        names_and_journal_bytes(&node, file_bytes, &work, &mut figures);
        figures.write(&out_dir);
        let _ = fs::remove_dir_all(&work);
        return;
    }

    // --- GC plan: index scan vs kubelet's load-and-sort, n = 1k, 10k, 100k -------------------
    let mut nodes = Vec::new();
    for n in SIZES {
        let started = Instant::now();
        let node = synth_node(n, SEED);
        let path = work.join(format!("node-{n}.redb"));
        let store = build_store(&path, &node.records, node.now);
        // The bytes that the first VICTIMS eligible images free.
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
        nodes.push((node, store, bytes));
    }
    {
        let mut group = criterion.benchmark_group("gc_plan");
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(20)
            .warm_up_time(warm_up)
            .measurement_time(measure);
        for (node, store, bytes) in &nodes {
            let n = node.records.len();
            group.bench_with_input(BenchmarkId::new("index_scan", n), &n, |b, _| {
                b.iter(|| black_box(plan_ours(store, node, *bytes)))
            });
            group.bench_with_input(BenchmarkId::new("kubelet_sort", n), &n, |b, _| {
                b.iter(|| black_box(plan_kubelet_store(store, node, *bytes)))
            });
            group.bench_with_input(BenchmarkId::new("kubelet_in_memory", n), &n, |b, _| {
                b.iter(|| black_box(plan_kubelet_memory(&node.records, node, *bytes)))
            });
        }
        group.finish();
    }
    let us = |id: String| criterion_median_ns(&crit_dir, &id) / 1e3;
    let mut ours_us = BTreeMap::new();
    for n in SIZES {
        let k = n / 1000;
        let ours = us(format!("gc_plan/index_scan/{n}"));
        let kubelet = us(format!("gc_plan/kubelet_sort/{n}"));
        let memory = us(format!("gc_plan/kubelet_in_memory/{n}"));
        ours_us.insert(n, ours);
        figures.add(&format!("gc_plan_ours_{k}k_us"), ours, "us");
        figures.add(&format!("gc_plan_kubelet_{k}k_us"), kubelet, "us");
        figures.add(&format!("gc_plan_kubelet_in_memory_{k}k_us"), memory, "us");
        let speedup = kubelet / ours;
        if n == 100_000 {
            figures.target(&format!("gc_plan_speedup_{k}k"), speedup, "x", ">=", 50.0);
        } else {
            figures.add(&format!("gc_plan_speedup_{k}k"), speedup, "x");
        }
        figures.add(
            &format!("gc_plan_speedup_in_memory_{k}k"),
            memory / ours,
            "x",
        );
    }
    figures.target(
        "gc_plan_ours_100k_over_1k",
        ours_us[&100_000] / ours_us[&1_000],
        "x",
        "<=",
        3.0,
    );

    // --- db size, reopen + first plan at 100k ---------------------------------------------------
    let (node100k, store100k, bytes100k) = nodes.pop().expect("100k node");
    let path100k = store100k.path().to_owned();
    drop(store100k);
    let file_bytes = fs::metadata(&path100k).expect("stat").len();
    figures.target(
        "db_bytes_per_record_100k",
        file_bytes as f64 / node100k.records.len() as f64,
        "B",
        "<=",
        300.0,
    );
    figures.add("db_file_100k_mib", file_bytes as f64 / 1048576.0, "MiB");
    figures.add(
        "db_bytes_per_record_100k_compacted",
        compacted_size(&path100k, &work) as f64 / node100k.records.len() as f64,
        "B",
    );
    names_and_journal_bytes(&node100k, file_bytes, &work, &mut figures);
    let reopen = |evict_cache: bool| -> f64 {
        if evict_cache {
            drop_file_cache(&path100k);
        }
        let started = Instant::now();
        let store = Store::open(&path100k, node100k.now).expect("reopen");
        let victims = plan_ours(&store, &node100k, bytes100k);
        let took = started.elapsed().as_secs_f64() * 1e3;
        assert_eq!(victims.len(), VICTIMS);
        took
    };
    let mut warm: Vec<f64> = (0..11).map(|_| reopen(false)).collect();
    figures.target("reopen_plan_100k_ms", median(&mut warm), "ms", "<=", 100.0);
    let mut cold: Vec<f64> = (0..5).map(|_| reopen(true)).collect();
    figures.add("reopen_plan_100k_cold_ms", median(&mut cold), "ms");

    // --- detect: one cycle at 10k with 1 % changed, store vs in-memory map ---------------------
    let (node10k, store10k, _) = nodes.pop().expect("10k node");
    let detect = DetectSetup::new(&node10k);
    let store10k = Arc::new(store10k);
    detect.check_commits(&store10k);
    let mut in_memory: BTreeMap<RecordKey, ImageRecord> = store10k
        .records()
        .expect("records")
        .into_iter()
        .map(|r| (r.key, r.record))
        .collect();
    let commits_before = store10k.commits();
    let mut store_cycles = 0u64;
    {
        let mut group = criterion.benchmark_group("detect_10k");
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(20)
            .warm_up_time(warm_up)
            .measurement_time(measure);
        let mut flip = false;
        group.bench_function("store", |b| {
            b.iter(|| {
                flip = !flip;
                store_cycles += 1;
                black_box(detect.cycle_store(&store10k, flip))
            })
        });
        let mut flip = false;
        group.bench_function("in_memory", |b| {
            b.iter(|| {
                flip = !flip;
                black_box(detect.cycle_memory(&mut in_memory, flip))
            })
        });
        group.finish();
    }
    // Every timed cycle changed 1 % and so committed exactly once.
    assert_eq!(store10k.commits() - commits_before, store_cycles);
    let store_us = us("detect_10k/store".into());
    let memory_us = us("detect_10k/in_memory".into());
    figures.add("detect_store_10k_us", store_us, "us");
    figures.add("detect_in_memory_10k_us", memory_us, "us");
    figures.target("detect_overhead_10k", store_us / memory_us, "x", "<=", 3.0);
    figures.add("detect_commits_changed", 1.0, "commits");
    figures.add("detect_commits_unchanged", 0.0, "commits");

    // --- one durable commit (a one-record batch) on the 10k store -------------------------------
    let mut took = Vec::with_capacity(1000);
    let keys: Vec<RecordKey> = node10k.records.iter().map(|r| r.key.clone()).collect();
    for i in 0..1000 {
        let mut batch = Batch::new();
        batch.mark_used(
            keys[i * 7 % keys.len()].clone(),
            UnixNanos(node10k.now.0 + secs(1 + i as i64)),
            None,
        );
        let started = Instant::now();
        assert!(store10k.apply(&batch).expect("commit"));
        took.push(started.elapsed().as_secs_f64() * 1e6);
    }
    took.sort_by(f64::total_cmp);
    figures.add("commit_p50_us", percentile(&took, 50.0), "us");
    figures.add("commit_p99_us", percentile(&took, 99.0), "us");
    drop(store10k);
    drop(nodes);

    // --- peak RSS of `imagekeeper replay` holding 100k records ----------------------------------
    let agent_db = work.join("agent-100k.redb");
    let (first_mib, removed) = agent_peak_rss(&agent_db, "first", &work);
    println!("agent at 100k, first detect (empty db) + GC: removed {removed} images");
    let one_txn_bytes = fs::metadata(&agent_db).expect("stat").len();
    let (steady_mib, removed) = agent_peak_rss(&agent_db, "steady", &work);
    println!("agent at 100k, restart on the 100k db, detect + GC: removed {removed} images");
    figures.target("agent_peak_rss_100k_mib", steady_mib, "MiB", "<=", 64.0);
    figures.add("agent_peak_rss_100k_first_detect_mib", first_mib, "MiB");
    figures.add(
        "db_bytes_per_record_100k_one_txn",
        one_txn_bytes as f64 / node100k.records.len() as f64,
        "B",
    );
    let (rss_mib, removed) = replay_peak_rss(&work, &node100k);
    println!("replay at 100k: removed {removed} images");
    figures.target("replay_peak_rss_100k_mib", rss_mib, "MiB", "<=", 64.0);

    // --- e2e GC against the lab's containerd ----------------------------------------------------
    match std::env::var_os("IMAGEKEEPER_LAB_ENV") {
        Some(env) if Path::new(&env).is_file() => e2e_gc_lab(Path::new(&env), &work, &mut figures),
        _ => figures.skip("e2e_gc_lab", "no lab"),
    }

    figures.write(&out_dir);
    let _ = fs::remove_dir_all(&work);
}

/// Synthetic names of image `i`: one repo tag and one repo digest, as long as a registry's.
fn synth_names(i: usize, rng: &mut Rng) -> ImageNames {
    let repo = format!("registry.example.com/team-{}/app-{i:06}", i % 37);
    ImageNames {
        repo_tags: vec![format!("{repo}:v{}.{}.{}", i % 9, i % 17, i % 5)],
        repo_digests: vec![format!("{repo}@sha256:{}", rng.hex64())],
    }
}

/// The schema-2 file-size figures, apart from record + index (`plain_bytes`, the file of the
/// same records without names): the same 100k records with their names, and a journal of
/// 10,000 removals (the default retention) with their names, on a file of its own.
fn names_and_journal_bytes(node: &Node, plain_bytes: u64, work: &Path, figures: &mut Figures) {
    let n = node.records.len();
    let mut rng = Rng(SEED ^ 0x6e61_6d65);
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

// ------------------------------------------------------------------------------ detect

/// Two runtime lists 1 % apart (50 images gone, 50 new), and the same containers.
struct DetectSetup {
    lists: [Vec<RuntimeImage>; 2],
    in_use: BTreeSet<RecordKey>,
    pins: PinPatterns,
    now: UnixNanos,
}

impl DetectSetup {
    fn new(node: &Node) -> DetectSetup {
        let mut rng = Rng(SEED ^ 0x00de_7ec7);
        let a = node.images.clone();
        let mut b = a.clone();
        let change = node.images.len() / 200; // 0.5 % gone + 0.5 % new = 1 % changed
        let mut gone = 0;
        while gone < change {
            let i = rng.below(b.len() as u64) as usize;
            if !node.in_use.contains(&b[i].record_key()) {
                b.swap_remove(i);
                gone += 1;
            }
        }
        for i in 0..change {
            let (image, _, _) = synth_image(&mut rng, node.images.len() + i, node.now.0);
            b.push(image);
        }
        DetectSetup {
            lists: [a, b],
            in_use: node.in_use.clone(),
            pins: PinPatterns::default(),
            now: UnixNanos(node.now.0 + secs(60)),
        }
    }

    /// The manager's detect minus the runtime calls: load the records, plan, apply durably.
    fn cycle_store(&self, store: &Store, second: bool) -> bool {
        let existing: BTreeMap<RecordKey, ImageRecord> = store
            .records()
            .expect("records")
            .into_iter()
            .map(|r| (r.key, r.record))
            .collect();
        let last_detect = store
            .meta(meta_keys::LAST_DETECT)
            .expect("meta")
            .map(UnixNanos);
        let images = &self.lists[usize::from(second)];
        let plan = plan_detect(
            &existing,
            last_detect,
            images,
            &self.in_use,
            &self.pins,
            self.now,
        );
        store.apply(&plan.batch).expect("apply")
    }

    /// The same cycle on kubelet's structure: a map in memory, changed in place.
    fn cycle_memory(&self, map: &mut BTreeMap<RecordKey, ImageRecord>, second: bool) -> usize {
        let images = &self.lists[usize::from(second)];
        let plan = plan_detect(map, None, images, &self.in_use, &self.pins, self.now);
        for op in plan.batch.ops() {
            match op {
                BatchOp::Upsert { key, record } => {
                    map.insert(key.clone(), *record);
                }
                BatchOp::Remove { key } => {
                    map.remove(key);
                }
                _ => {}
            }
        }
        plan.batch.ops().len()
    }

    /// Asserts the commit counts: 1 for a cycle that changed something, 0 for one that did not.
    /// Leaves the store at list A.
    fn check_commits(&self, store: &Store) {
        let count = |second: bool| {
            let before = store.commits();
            self.cycle_store(store, second);
            store.commits() - before
        };
        // From the node's records to list A at `now`: the in-use images' last use changes.
        assert_eq!(count(false), 1, "first detect cycle");
        assert_eq!(count(false), 0, "a cycle that changed nothing committed");
        assert_eq!(count(true), 1, "a cycle with 1 % changed");
        assert_eq!(count(true), 0, "a cycle that changed nothing committed");
        assert_eq!(count(false), 1, "a cycle with 1 % changed");
        println!("detect commits: 1 per cycle with 1 % changed, 0 when nothing changed (asserted)");
    }
}

// ------------------------------------------------------------------------------ peak RSS

/// Runs `imagekeeper replay` on a 100k-image trace (detect, then GC that frees ~10 GiB) in a
/// child process and returns its peak RSS (wait4's ru_maxrss) in MiB and the images removed.
fn replay_peak_rss(work: &Path, node: &Node) -> (f64, usize) {
    let trace = work.join("trace-100k.jsonl");
    let db = work.join("replay-100k.redb");
    let out = work.join("replay-100k.out");
    {
        let t0 = NOW_SECS;
        let images: Vec<Value> = node
            .images
            .iter()
            .map(|i| {
                json!({"id": i.id.as_str(), "size": i.size, "pinned": i.pinned, "tags": i.repo_tags})
            })
            .collect();
        let containers: Vec<Value> = node
            .containers
            .iter()
            .map(|c| json!({"id": c.id, "image_id": c.image_id.as_str(), "state": "running"}))
            .collect();
        let gib = 1u64 << 30;
        let mut w = BufWriter::new(File::create(&trace).expect("create trace"));
        for line in [
            json!({"at": t0, "images": images}),
            json!({"at": t0, "containers": containers}),
            // 85 % used: GC frees down to 80 %, 10 GiB.
            json!({"at": t0, "fs": {"capacity": 200 * gib, "available": 30 * gib}}),
            json!({"at": t0, "detect": {}}),
            json!({"at": t0 + 3600, "gc": {}}),
        ] {
            writeln!(w, "{line}").expect("write trace");
        }
        w.flush().expect("flush trace");
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_imagekeeper"));
    command.arg("replay").arg(&trace).arg("--db").arg(&db);
    let rss = run_measured(&mut command, &out);
    let output = fs::read_to_string(&out).expect("replay output");
    let removed = output
        .lines()
        .filter(|l| l.contains("\"op\":\"removed\""))
        .count();
    let gc: Value = serde_json::from_str(output.lines().last().expect("gc line")).expect("json");
    assert_eq!(gc["op"], "gc");
    assert!(gc["error"].is_null(), "replay GC failed: {gc}");
    assert!(removed > 0, "replay GC removed nothing");
    (rss, removed)
}

/// Runs `command` with stdout to `out`, waits for it and returns its peak RSS (wait4's
/// ru_maxrss) in MiB. Panics unless it exits 0.
fn run_measured(command: &mut Command, out: &Path) -> f64 {
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below by wait4, which also returns its rusage"
    )]
    let child = command
        .stdout(File::create(out).expect("create child output"))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{command:?} failed: status {status}"
    );
    usage.ru_maxrss as f64 / 1024.0
}

/// The environment variable that makes this bench binary the agent child.
const CHILD_ENV: &str = "IMAGEKEEPER_BENCH_CHILD";

/// Runs this bench binary as a child holding 100k records: the real GC manager and store over
/// a scripted runtime listing the 100k-image node (what ListImages would return), no trace to
/// parse. Returns its peak RSS in MiB and the images its GC removed.
fn agent_peak_rss(db: &Path, phase: &str, work: &Path) -> (f64, usize) {
    let out = work.join(format!("agent-{phase}.out"));
    let exe = std::env::current_exe().expect("current exe");
    let mut command = Command::new(exe);
    command.env(CHILD_ENV, format!("{phase}:{}", db.display()));
    let rss = run_measured(&mut command, &out);
    let removed: usize = fs::read_to_string(&out)
        .expect("child output")
        .trim()
        .parse()
        .expect("child prints the images removed");
    assert!(removed > 0, "the agent child's GC removed nothing");
    (rss, removed)
}

/// The child: `first:<db>` detects the 100k images into an empty store (one transaction), then
/// GCs an hour later; `steady:<db>` reopens that store two hours later and GCs (detect + free
/// 10 GiB), as an agent restarting on a 100k node. Prints the images removed.
fn agent_child(arg: &str) {
    let (phase, db) = arg.split_once(':').expect("phase:db");
    let (images, containers) = synth_lists(100_000, SEED);
    let runtime = ScriptedRuntime::new();
    {
        let mut state = runtime.state();
        state.images = images;
        state.containers = containers;
        let gib = 1u64 << 30;
        state.fs = Some((200 * gib, 30 * gib));
    }
    let start = UnixNanos(secs(NOW_SECS));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let removed = rt.block_on(async {
        let at = match phase {
            "first" => start,
            _ => UnixNanos(start.0 + secs(7200)),
        };
        let store = Arc::new(Store::open(Path::new(db), at).expect("open"));
        let manager = ImageGcManager::new(runtime, store, GcConfig::default()).expect("manager");
        if phase == "first" {
            manager.detect(at).await.expect("detect");
        }
        let report = manager.garbage_collect(UnixNanos(at.0 + secs(3600))).await;
        assert!(report.error.is_none(), "GC failed: {:?}", report.error);
        report.removed.len()
    });
    println!("{removed}");
}

/// The size of a compacted copy of `path` (redb's compaction, bench-only: the store does not
/// compact).
fn compacted_size(path: &Path, work: &Path) -> u64 {
    let copy = work.join("compacted.redb");
    fs::copy(path, &copy).expect("copy the db");
    let mut db = redb::Database::open(&copy).expect("open the copy");
    while db.compact().expect("compact") {}
    drop(db);
    let size = fs::metadata(&copy).expect("stat").len();
    let _ = fs::remove_file(&copy);
    size
}

// ------------------------------------------------------------------------------ e2e lab

/// A runtime that times the calls it passes on.
struct Timed<R> {
    inner: R,
    remove_nanos: AtomicU64,
    other_nanos: AtomicU64,
    removes: AtomicU64,
}

impl<R> Timed<R> {
    fn new(inner: R) -> Timed<R> {
        Timed {
            inner,
            remove_nanos: AtomicU64::new(0),
            other_nanos: AtomicU64::new(0),
            removes: AtomicU64::new(0),
        }
    }

    async fn time<T>(counter: &AtomicU64, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = call.await;
        counter.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }
}

impl<R: ImageRuntime> ImageRuntime for Timed<R> {
    async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
        Self::time(&self.other_nanos, self.inner.list_images()).await
    }

    async fn image_status(
        &self,
        image: &str,
        runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, CriError> {
        Self::time(
            &self.other_nanos,
            self.inner.image_status(image, runtime_handler),
        )
        .await
    }

    async fn pull_image(
        &self,
        image: &str,
        runtime_handler: &str,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        Self::time(
            &self.other_nanos,
            self.inner.pull_image(image, runtime_handler, credentials),
        )
        .await
    }

    async fn remove_image(&self, image: &str, runtime_handler: &str) -> Result<(), CriError> {
        self.removes.fetch_add(1, Ordering::Relaxed);
        Self::time(
            &self.remove_nanos,
            self.inner.remove_image(image, runtime_handler),
        )
        .await
    }

    async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
        Self::time(&self.other_nanos, self.inner.image_fs_stats()).await
    }

    async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
        Self::time(&self.other_nanos, self.inner.list_containers()).await
    }
}

/// One GC round's times in ms: total, in RemoveImage, in other CRI calls; and images removed.
struct Round {
    total_ms: f64,
    remove_ms: f64,
    other_cri_ms: f64,
    removed: usize,
}

/// Pulls every lab image, then DeleteUnusedImages through the real containerd with a fresh
/// store, three times; reports the round with the median total.
fn e2e_gc_lab(env_file: &Path, work: &Path, figures: &mut Figures) {
    let env: BTreeMap<String, String> = fs::read_to_string(env_file)
        .expect("read lab.env")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let endpoint = env.get("CRI_ENDPOINT").expect("lab.env has CRI_ENDPOINT");
    let tsv = env
        .get("CRI_LAB_IMAGES_TSV")
        .expect("lab.env has CRI_LAB_IMAGES_TSV");
    let references: Vec<String> = fs::read_to_string(tsv)
        .expect("read images.tsv")
        .lines()
        .filter_map(|l| l.split('\t').next())
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let mut rounds: Vec<Round> = Vec::new();
    for round in 0..3 {
        let result = rt.block_on(async {
            let client = CriClient::connect(CriConfig {
                runtime_endpoint: endpoint.clone(),
                ..CriConfig::default()
            })
            .await
            .expect("connect");
            let containers = client.list_containers().await.expect("list containers");
            for reference in &references {
                client
                    .pull_image(reference, "", None)
                    .await
                    .unwrap_or_else(|e| panic!("pull {reference}: {e}"));
            }
            let listed = client.list_images().await.expect("list images");
            let in_use = images_in_use(&listed, &containers, &[], None);
            let expected = listed
                .iter()
                .filter(|i| !in_use.contains(&i.record_key()) && !i.pinned)
                .count();
            let db = work.join(format!("e2e-{round}.redb"));
            let now = SystemClock.now();
            let store = Arc::new(Store::open(&db, now).expect("store"));
            let config = GcConfig {
                policy: GcPolicy {
                    min_age: Duration::ZERO,
                    ..GcPolicy::default()
                },
                ..GcConfig::default()
            };
            let manager = ImageGcManager::new(Timed::new(client), store, config).expect("manager");
            let started = Instant::now();
            let report = manager.delete_unused_images(now).await;
            let total = started.elapsed();
            assert!(report.error.is_none(), "GC failed: {:?}", report.error);
            assert_eq!(report.removed.len(), expected, "removed every unused image");
            let timed = manager.runtime();
            assert_eq!(timed.removes.load(Ordering::Relaxed), expected as u64);
            Round {
                total_ms: total.as_secs_f64() * 1e3,
                remove_ms: timed.remove_nanos.load(Ordering::Relaxed) as f64 / 1e6,
                other_cri_ms: timed.other_nanos.load(Ordering::Relaxed) as f64 / 1e6,
                removed: report.removed.len(),
            }
        });
        println!(
            "e2e round {round}: {} images, total {:.1} ms, RemoveImage {:.1} ms, other CRI {:.1} ms",
            result.removed, result.total_ms, result.remove_ms, result.other_cri_ms
        );
        rounds.push(result);
    }
    rounds.sort_by(|a, b| a.total_ms.total_cmp(&b.total_ms));
    let r = &rounds[rounds.len() / 2];
    let inside = r.total_ms - r.remove_ms - r.other_cri_ms;
    figures.add("e2e_gc_lab_images", r.removed as f64, "images");
    figures.add("e2e_gc_lab_total_ms", r.total_ms, "ms");
    figures.add("e2e_gc_lab_remove_image_ms", r.remove_ms, "ms");
    figures.add("e2e_gc_lab_other_cri_ms", r.other_cri_ms, "ms");
    figures.add("e2e_gc_lab_imagekeeper_ms", inside, "ms");
    figures.add(
        "e2e_gc_lab_imagekeeper_share",
        100.0 * inside / r.total_ms,
        "%",
    );
}
