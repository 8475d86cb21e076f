//! The figures of issues 8 and 16, measured side by side in one run: the indexed eviction scan
//! against the kubelet's load-and-sort at every n, a durable detect cycle against the
//! kubelet's in-memory map at every n, reopen, file size, the peak RSS of an agent at 10k and
//! 100k images and of `imagekeeper replay` of a 100k-image trace, the durable commit, and (when
//! the lab is up) GC of the lab's images against the real containerd. (The store's own
//! figures, file growth under churn and the commit against redb's floor, are
//! `benches/store_figures.rs`.)
//!
//! Run it with `scripts/bench`. Timed here: medians of repeated runs, and every ratio with a
//! target the median of interleaved pairs (`report::Paired`). Every figure is printed and written to `target/bench/figures.txt` as
//! `name: value unit`, with `(target OP BOUND: ok|MISSED)` when it has one, and to
//! `target/bench/summary.json`. The bench asserts (panics, failing `scripts/bench`) only facts
//! that do not depend on timing: at every n the index scan chooses exactly the victims of the
//! kubelet's sort in the same order, detect leaves exactly the records of the reference map
//! detect and commits once per changed cycle and never for an unchanged one, the GCs removed
//! images.
//!
//! Every random choice comes from `fastrand::Rng::with_seed` with the fixed seeds of `synth`.
//!
//! Env: `IMAGEKEEPER_BENCH_QUICK=1` shortens the measurements (for trying the bench out, not
//! for quoting); `IMAGEKEEPER_LAB_ENV=<lab.env>` enables `e2e_gc_lab`;
//! `IMAGEKEEPER_BENCH_ONLY=bytes` measures only the file-size figures on the 100k node
//! (`scripts/bench --bytes`), `IMAGEKEEPER_BENCH_ONLY=detect` only the detect figures at every
//! n (`scripts/bench --detect`), `IMAGEKEEPER_BENCH_ONLY=rss` only the peak RSS figures
//! (`scripts/bench --rss`), `IMAGEKEEPER_BENCH_ONLY=node` only what an ordinary node pays
//! (`scripts/bench --node`; `IMAGEKEEPER_BENCH_NODE_SECS` sets its window, 300 s by
//! default, 60 s with `--quick`), `IMAGEKEEPER_BENCH_ONLY=predictive` only the predictive
//! order's ranking per space walk at 2k and 100k images (`scripts/bench --predictive`),
//! `IMAGEKEEPER_BENCH_ONLY=signals` only what cluster signals cost a node of 2,000 images
//! beside a stand-in API server (`scripts/bench --signals`; its window as the node figures'),
//! `IMAGEKEEPER_BENCH_ONLY=ratios` only the timed ratios with a target (`scripts/bench
//! --ratios`, with the commit's from `store_figures`).

mod apiserver;
mod bytes;
mod detect;
mod lab;
mod node;
mod pins;
mod pins_agent;
mod plan;
mod predictive;
mod report;
mod rss;
mod runtime;
mod signals;
mod synth;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use report::Figures;
use synth::{SEED, build_store, synth_node};

/// The node sizes every comparison runs at.
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// How long criterion warms up and measures, and where it keeps its data.
pub struct Timing {
    pub warm_up: Duration,
    pub measure: Duration,
    pub criterion_dir: PathBuf,
    pub quick: bool,
}

fn main() {
    if let Ok(kib_file) = std::env::var(rss::MEASURE_ENV) {
        rss::measure_child(&kib_file);
        return;
    }
    if let Ok(arg) = std::env::var(rss::CHILD_ENV) {
        rss::agent_child(&arg);
        return;
    }
    if let Ok(n) = std::env::var(runtime::RUNTIME_ENV) {
        runtime::runtime_child(&n);
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
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    // One work dir per group, so two groups (`--node` beside `--detect`) can run at once.
    let only = std::env::var("IMAGEKEEPER_BENCH_ONLY").ok();
    let work = out_dir.join(match &only {
        Some(group) => format!("tmp-{group}"),
        None => "tmp".to_owned(),
    });
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).expect("create target/bench/tmp");
    let timing = timing(&out_dir);
    let mut figures = Figures::default();
    match only.as_deref() {
        Some("bytes") => bytes_only(&work, &mut figures),
        Some("detect") => detect_only(&work, &timing, &mut figures),
        Some("ratios") => ratios_only(&work, &timing, &mut figures),
        Some("rss") => rss_figures(&work, &synth_node(100_000, SEED), &mut figures),
        Some("node") => node_figures(&work, &timing, &mut figures),
        Some("signals") => signals::figures(&work, timing.quick, &mut figures),
        Some("predictive") => predictive::figures(&work, &timing, &mut figures),
        Some("pins") => {
            pins::figures(&work, timing.quick, &mut figures);
            pins_agent::figures(&work, timing.quick, &mut figures);
        }
        // `scripts/bench --commit` / `--repair` / `--churn`: the store's figures only
        // (`store_figures`).
        Some("commit" | "repair" | "churn") => {}
        _ => all_figures(&work, &timing, &mut figures),
    }
    figures.write(&out_dir);
    // `IMAGEKEEPER_BENCH_KEEP_WORK=1` keeps the work dir (the traces and files measured), to
    // profile one figure's process by hand.
    if std::env::var("IMAGEKEEPER_BENCH_KEEP_WORK").is_ok_and(|v| v == "1") {
        println!("work dir kept: {}", work.display());
    } else {
        let _ = fs::remove_dir_all(&work);
    }
}

fn timing(out_dir: &Path) -> Timing {
    let quick = std::env::var("IMAGEKEEPER_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (warm_up, measure) = if quick {
        (Duration::from_millis(200), Duration::from_millis(600))
    } else {
        (Duration::from_secs(1), Duration::from_secs(4))
    };
    Timing {
        warm_up,
        measure,
        criterion_dir: out_dir.join("criterion"),
        quick,
    }
}

/// `scripts/bench --bytes`: the file-size figures of the 100k node only.
fn bytes_only(work: &Path, figures: &mut Figures) {
    let node = synth_node(100_000, SEED);
    let path = work.join("node-100000.redb");
    drop(build_store(&path, &node.records, node.now));
    bytes::size_figures(&node, &path, work, figures);
}

/// `scripts/bench --detect`: the detect figures and their assertions at every n only.
fn detect_only(work: &Path, timing: &Timing, figures: &mut Figures) {
    let nodes: Vec<synth::Node> = SIZES.iter().map(|&n| synth_node(n, SEED)).collect();
    let refs: Vec<&synth::Node> = nodes.iter().collect();
    detect::figures(&refs, work, timing.quick, figures);
}

/// `scripts/bench --ratios`: every timed ratio with a target (the plan's speedup and growth,
/// detect's overhead; `store_figures` adds the commit's), each the median of interleaved
/// pairs, and the absolute times beside them.
fn ratios_only(work: &Path, timing: &Timing, figures: &mut Figures) {
    let nodes: Vec<plan::PlanNode> = SIZES.iter().map(|&n| plan::build(n, work)).collect();
    plan::figures(&nodes, timing, figures);
    let detect_nodes: Vec<&synth::Node> = nodes.iter().map(|p| &p.node).collect();
    detect::figures(&detect_nodes, work, timing.quick, figures);
}

fn all_figures(work: &Path, timing: &Timing, figures: &mut Figures) {
    let mut nodes: Vec<plan::PlanNode> = SIZES.iter().map(|&n| plan::build(n, work)).collect();
    plan::figures(&nodes, timing, figures);
    predictive::figures(work, timing, figures);
    pins::figures(work, timing.quick, figures);
    pins_agent::figures(work, timing.quick, figures);

    let node100k = nodes.pop().expect("the 100k node");
    let path100k = node100k.store.path().to_owned();
    let (node100k, bytes100k) = {
        let plan::PlanNode { node, store, bytes } = node100k;
        drop(store);
        (node, bytes)
    };
    bytes::size_figures(&node100k, &path100k, work, figures);
    bytes::reopen_figures(&node100k, bytes100k, &path100k, figures);
    let _ = fs::remove_file(&path100k);

    let mut detect_nodes: Vec<&synth::Node> = nodes.iter().map(|p| &p.node).collect();
    detect_nodes.push(&node100k);
    detect::figures(&detect_nodes, work, timing.quick, figures);

    let node10k = nodes.pop().expect("the 10k node");
    bytes::commit_figures(&node10k, figures);
    drop(nodes);
    drop(node10k);

    rss_figures(work, &node100k, figures);
    drop(node100k);
    node_figures(work, timing, figures);
    signals::figures(work, timing.quick, figures);

    match std::env::var_os("IMAGEKEEPER_LAB_ENV") {
        Some(env) if Path::new(&env).is_file() => lab::e2e_gc_lab(Path::new(&env), work, figures),
        _ => figures.skip("e2e_gc_lab", "no lab"),
    }
}

/// The peak RSS figures: an agent restarting at 10k and 100k images (and its floors), and
/// `imagekeeper replay` of the 100k node's trace. `scripts/bench --rss` runs these alone.
///
/// The agent is measured alone: the fake runtime serves the node from a process of its own
/// on a unix socket, and the agent child talks to it through the real tonic client.
fn rss_figures(work: &Path, node100k: &synth::Node, figures: &mut Figures) {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    for (n, target) in [(10_000, 24.0), (100_000, 48.0)] {
        let k = n / 1000;
        let runtime = runtime::RuntimeProcess::start(n);
        println!(
            "agent at {k}k: the fake runtime in its own process on a unix socket ({} images, {} containers), the agent child through the real tonic client; ListImagesResponse {} bytes ({:.1} MiB)",
            n,
            runtime.containers,
            runtime.response_bytes,
            mib(runtime.response_bytes)
        );
        let db = work.join(format!("agent-{n}.redb"));
        let (first_mib, removed) = rss::agent_peak_rss(n, &db, "first", work, &runtime);
        println!("agent at {k}k, first detect (empty db) + GC: removed {removed} images");
        let one_txn_bytes = fs::metadata(&db).expect("stat").len();
        // The runtime's state is what the first GC left: a fresh runtime for the restart.
        drop(runtime);
        let runtime = runtime::RuntimeProcess::start(n);
        let (steady_mib, removed) = rss::agent_peak_rss(n, &db, "steady", work, &runtime);
        println!("agent at {k}k, restart on the {k}k db, detect + GC: removed {removed} images");
        figures.target(
            &format!("agent_peak_rss_{k}k_mib"),
            steady_mib,
            "MiB",
            "<=",
            target,
        );
        figures.add(
            &format!("agent_peak_rss_{k}k_response_mib"),
            mib(runtime.response_bytes),
            "MiB",
        );
        figures.add(
            &format!("agent_peak_rss_{k}k_first_detect_mib"),
            first_mib,
            "MiB",
        );
        let (floor_mib, _) = rss::agent_peak_rss(n, &db, "floor", work, &runtime);
        figures.add(
            &format!("agent_peak_rss_{k}k_client_list_mib"),
            floor_mib,
            "MiB",
        );
        figures.add(
            &format!("db_bytes_per_record_{k}k_one_txn"),
            one_txn_bytes as f64 / n as f64,
            "B",
        );
        let _ = fs::remove_file(&db);
    }
    let (rss_mib, removed) = rss::replay_peak_rss(work, node100k);
    println!("replay at 100k: removed {removed} images");
    figures.target("replay_peak_rss_100k_mib", rss_mib, "MiB", "<=", 64.0);
}

/// What an ordinary node pays: the real agent (`imagekeeper run`, default periods: detect
/// 5m, GC 5m, image cache 30s) on a node of 2,000 images and on an idle node of 50, each
/// against the fake runtime in its own process, measured side by side over one window of
/// wall time after a 20 s start-up (its first detect). `scripts/bench --node` runs these
/// alone.
fn node_figures(work: &Path, timing: &Timing, figures: &mut Figures) {
    let window = std::env::var("IMAGEKEEPER_BENCH_NODE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if timing.quick { 60 } else { 300 });
    let agents = [
        node::NodeAgent::start("2k", 2_000, work),
        node::NodeAgent::start("idle", 50, work),
    ];
    let costs = node::measure(
        &agents,
        Duration::from_secs(20),
        Duration::from_secs(window),
    );
    drop(agents);
    let (binary, binary_what) = node::agent_binary();
    let binary_mb = std::fs::metadata(&binary)
        .map(|m| m.len() as f64 / 1e6)
        .unwrap_or(f64::NAN);
    for (name, cost) in ["2k", "idle"].into_iter().zip(costs) {
        println!(
            "node {name}: `imagekeeper run` ({}: {}, {:.1} MB) with the default periods (detect 5m, GC 5m, image cache 30s) against the fake runtime in its own process (image filesystem: /dev/shm, below the GC threshold), {} images, {} containers, measured over {:.0} s of wall time after a 20 s start-up; RSS peak (VmHWM) {:.1} MiB",
            binary_what,
            binary.display(),
            binary_mb,
            cost.images,
            cost.containers,
            cost.window.as_secs_f64(),
            cost.hwm_mib
        );
        figures.target(
            &format!("agent_cpu_seconds_per_hour_{name}"),
            cost.cpu_seconds_per_hour,
            "s",
            "<=",
            2.0,
        );
        figures.target(
            &format!("agent_rss_steady_{name}_mib"),
            cost.rss_mib,
            "MiB",
            "<=",
            16.0,
        );
        figures.add(
            &format!("agent_wakeups_per_minute_{name}"),
            cost.wakeups_per_minute,
            "",
        );
    }
}
