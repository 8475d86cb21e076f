//! What cluster signals cost an ordinary node (issue 55): two agents of the same binary on
//! nodes of 2,000 images, side by side, one with `clusterSignals` on against the stand-in API
//! server of [`crate::apiserver`] (5,000 pods, 110 bound to its node, 1,000 CronJobs, 2,000
//! ReplicaSets, its churn and bookmarks) and one without. Measured over the same windows after
//! both have listed: the median over [`WINDOWS`] windows of the steady RSS difference (on
//! minus off), and the CPU per hour over the whole measured time (the windows' mean: the
//! CPU comes in bursts, a detect now and then, which a median of windows steps over).
//!
//! The binary needs the `kube` feature: `IMAGEKEEPER_BENCH_SIGNALS_AGENT` names it
//! (`scripts/bench --signals` builds `cargo build --release --features kube`, the container
//! image's features), else this bench's own build (which carries `kube`). The bench asserts
//! (panics) that the agent with signals listed and watched every kind, so a figure never
//! comes from an agent whose signals failed to start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::apiserver::{self, StubApiServer};
use crate::node::{self, NodeAgent, NodeCost};
use crate::report::Figures;

/// How many windows the medians are taken over.
const WINDOWS: usize = 5;
/// The images on each node.
const IMAGES: usize = 2_000;
/// The longest the agent with signals may take to list every kind before the windows start.
const LIST_WAIT: Duration = Duration::from_secs(300);

/// The kinds the agent with signals lists and watches.
const KINDS: [&str; 4] = ["Pod", "DaemonSet", "CronJob", "ReplicaSet"];

/// How many requests named `name` (`"list Pod"`, `"watch CronJob"`) the stand-in has seen.
fn count(requests: &[(String, u64)], name: &str) -> u64 {
    requests
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, c)| *c)
}

/// The first kind the stand-in has not seen both listed and watched, if any (a watch starts
/// from its list's resourceVersion, so a watch seen means the list ran before it).
fn kind_not_watched(requests: &[(String, u64)]) -> Option<&'static str> {
    KINDS.into_iter().find(|kind| {
        count(requests, &format!("list {kind}")) == 0
            || count(requests, &format!("watch {kind}")) == 0
    })
}

/// The agent binary: `IMAGEKEEPER_BENCH_SIGNALS_AGENT`, else the bench's own build.
fn signals_binary() -> PathBuf {
    match std::env::var_os("IMAGEKEEPER_BENCH_SIGNALS_AGENT") {
        Some(path) if !path.is_empty() => path.into(),
        _ => env!("CARGO_BIN_EXE_imagekeeper").into(),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn figures(work: &Path, quick: bool, figures: &mut Figures) {
    let total = std::env::var("IMAGEKEEPER_BENCH_NODE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 60 } else { 300 });
    let window = Duration::from_secs((total / WINDOWS as u64).max(5));
    // The names the fake runtime lists (`RuntimeProcess` serves `synth_lists(n, SEED)`).
    let node_images: Vec<String> = crate::synth::synth_lists(IMAGES, crate::synth::SEED)
        .0
        .into_iter()
        .filter_map(|image| image.repo_tags.into_iter().next())
        .collect();
    let server = StubApiServer::start(&node_images);
    let kubeconfig = work.join("signals-kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("write the kubeconfig");
    let binary = signals_binary();
    let on_env = vec![
        ("NODE_NAME".to_owned(), apiserver::NODE.to_owned()),
        ("KUBECONFIG".to_owned(), kubeconfig.display().to_string()),
    ];
    let agents = [
        NodeAgent::start_binary(&binary, "signals-off", IMAGES, work, &[], &[]),
        NodeAgent::start_binary(
            &binary,
            "signals-on",
            IMAGES,
            work,
            &["--set=clusterSignals=true".to_owned()],
            &on_env,
        ),
    ];
    // The one with signals has listed every kind once it watches every kind (a watch starts
    // from its list's resourceVersion); on a loaded machine that takes more than the start-up
    // below, and the lists' tail in the first window would count as the steady cost.
    let listed = Instant::now();
    while kind_not_watched(&server.requests()).is_some() && listed.elapsed() < LIST_WAIT {
        std::thread::sleep(Duration::from_millis(200));
    }
    let listed = listed.elapsed();
    let mut windows: Vec<Vec<NodeCost>> = Vec::with_capacity(WINDOWS);
    // The first window after a 30 s start-up from then: both have detected and the one with
    // signals has written what it listed.
    windows.push(node::measure(&agents, Duration::from_secs(30), window));
    for _ in 1..WINDOWS {
        windows.push(node::measure(&agents, Duration::ZERO, window));
    }
    // What the resident memory is made of at the end (anonymous: the heap and stacks; file:
    // the binary's pages touched), per agent, in MiB.
    let parts: Vec<(f64, f64)> = agents
        .iter()
        .map(|a| {
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", a.pid())).unwrap_or_default();
            let mib = |key| node::status_field(&status, key) as f64 / 1024.0;
            (mib("RssAnon"), mib("RssFile"))
        })
        .collect();
    let requests = server.requests();
    drop(agents);
    if let Some(kind) = kind_not_watched(&requests) {
        panic!(
            "the agent with signals did not list and watch the {kind}s: {requests:?} (its log: {})",
            work.join("node-signals-on/agent.log").display()
        );
    }
    let rss_delta = median(
        windows
            .iter()
            .map(|w| w[1].rss_mib - w[0].rss_mib)
            .collect(),
    );
    // The CPU over the whole measured time (the windows are of one length: their mean), not
    // a median: a detect now and then is a burst a median of windows would step over.
    let cpu_per_window: Vec<f64> = windows
        .iter()
        .map(|w| w[1].cpu_seconds_per_hour - w[0].cpu_seconds_per_hour)
        .collect();
    let cpu_delta = cpu_per_window.iter().sum::<f64>() / cpu_per_window.len() as f64;
    let per_window: Vec<String> = cpu_per_window.iter().map(|d| format!("{d:.2}")).collect();
    let last = windows.last().expect("WINDOWS > 0");
    println!(
        "signals: two `imagekeeper run` of {} ({:.1} MB) with the default periods against the fake runtime, {IMAGES} images each, side by side; one with clusterSignals on against a stand-in API server on loopback ({} pods, {} bound to its node, {} CronJobs, {} ReplicaSets, {} DaemonSets; a status change every 4 s, a bookmark a minute per watch); RSS median and CPU over all of {WINDOWS} windows of {:.0} s after a 30 s start-up; RSS on {:.1} MiB / off {:.1} MiB (peak {:.1} / {:.1}; anonymous {:.1} / {:.1}, file {:.1} / {:.1}), CPU per hour on {:.2} s / off {:.2} s (last window), on minus off per window [{}] s; the lists took {:.1} s; API requests {requests:?}",
        binary.display(),
        std::fs::metadata(&binary).map_or(f64::NAN, |m| m.len() as f64 / 1e6),
        apiserver::PODS,
        apiserver::BOUND_PODS,
        apiserver::CRONJOBS,
        apiserver::REPLICASETS,
        apiserver::DAEMONSETS,
        window.as_secs_f64(),
        last[1].rss_mib,
        last[0].rss_mib,
        last[1].hwm_mib,
        last[0].hwm_mib,
        parts[1].0,
        parts[0].0,
        parts[1].1,
        parts[0].1,
        last[1].cpu_seconds_per_hour,
        last[0].cpu_seconds_per_hour,
        per_window.join(", "),
        listed.as_secs_f64(),
    );
    figures.target("agent_signals_rss_delta_mib", rss_delta, "MiB", "<=", 8.0);
    figures.target(
        "agent_signals_cpu_delta_s_per_hour",
        cpu_delta,
        "s",
        "<=",
        1.0,
    );
    figures.add(
        "agent_signals_hwm_delta_mib",
        last[1].hwm_mib - last[0].hwm_mib,
        "MiB",
    );
}
