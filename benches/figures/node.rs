//! What an ordinary node pays: the real agent (`imagekeeper run`, default periods) against
//! the fake runtime in a process of its own, measured from /proc over a window of wall time
//! after its start-up detect.
//!
//! The agent is the shipped build when `IMAGEKEEPER_BENCH_AGENT` names it (`scripts/bench`
//! builds it with `cargo build --release --bin imagekeeper`), else this bench's own build of the
//! binary, which carries the dev-dependency's features (`testing`, `kube`: a larger binary, so
//! more resident pages); [`agent_binary`] says which, and the figures' log line names it.
//!
//! CPU is the process's utime + stime (/proc/PID/stat, every thread, exited ones included)
//! over the window, scaled to an hour; RSS is VmRSS at the window's end (VmHWM beside it);
//! wakeups are the voluntary + involuntary context switches of its threads
//! (/proc/PID/task/TID/status), sampled every second, per thread from its first to its last
//! sample (a thread born and gone between two samples is missed), scaled to a minute.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::runtime::RuntimeProcess;

/// One node's cost over the window.
pub struct NodeCost {
    pub images: usize,
    pub containers: usize,
    pub window: Duration,
    pub cpu_seconds_per_hour: f64,
    pub rss_mib: f64,
    pub hwm_mib: f64,
    pub wakeups_per_minute: f64,
}

/// An agent on a node of `n` images (and the containers `synth_lists` gives it).
pub struct NodeAgent {
    runtime: RuntimeProcess,
    agent: Child,
    n: usize,
}

impl NodeAgent {
    /// Starts the runtime and `imagekeeper run` with the default periods on it.
    pub fn start(name: &str, n: usize, work: &Path) -> NodeAgent {
        NodeAgent::start_binary(&agent_binary().0, name, n, work, &[], &[])
    }

    /// [`NodeAgent::start`] of `binary`, with more arguments (`--set=...`) and environment.
    pub fn start_binary(
        binary: &Path,
        name: &str,
        n: usize,
        work: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> NodeAgent {
        // An ordinary node is below the GC threshold: the image filesystem reported is a
        // tmpfs (/dev/shm, next to empty), not this disk, which may be past 85 %.
        let runtime = RuntimeProcess::start_on(n, Some(Path::new("/dev/shm")));
        // One directory per agent: the store locks its database's directory.
        let dir = work.join(format!("node-{name}"));
        fs::create_dir_all(&dir).expect("the agent's dir");
        let db = dir.join("records.redb");
        let admin = dir.join("admin.sock");
        let log = File::create(dir.join("agent.log")).expect("agent log");
        let agent = Command::new(binary)
            .arg("run")
            .arg("--db")
            .arg(&db)
            .arg("--admin-socket")
            .arg(&admin)
            .arg("--container-runtime-endpoint")
            .arg(runtime.endpoint())
            .arg("--kubelet-root-dir")
            .arg("")
            // No probes' listener: its default port is the DaemonSet's, which a lab's agent on
            // this machine may need while the bench runs (it then fails to start).
            .arg("--healthz-address=")
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start imagekeeper run");
        NodeAgent { runtime, agent, n }
    }

    pub fn pid(&self) -> u32 {
        self.agent.id()
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        // SIGTERM: the agent's own shutdown.
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.agent.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.agent.wait();
    }
}

/// utime + stime of the process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// A `key: value kB` (or count) line of a /proc status file.
pub fn status_field(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim_start_matches(':').split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Each thread's context switches (voluntary + involuntary) now.
fn switches(pid: u32) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let tid = task.file_name().to_string_lossy().into_owned();
        if let Ok(status) = fs::read_to_string(task.path().join("status")) {
            let n = status_field(&status, "voluntary_ctxt_switches")
                + status_field(&status, "nonvoluntary_ctxt_switches");
            out.insert(tid, n);
        }
    }
    out
}

/// The agent binary the node figures run, and what it is: `IMAGEKEEPER_BENCH_AGENT` (the shipped
/// build, as `scripts/bench` sets it) or this bench's own build.
pub fn agent_binary() -> (std::path::PathBuf, &'static str) {
    match std::env::var_os(AGENT_ENV) {
        Some(path) if !path.is_empty() => (path.into(), "the shipped build"),
        _ => (
            env!("CARGO_BIN_EXE_imagekeeper").into(),
            "the bench's own build (with the `testing` and `kube` features)",
        ),
    }
}

/// Names the agent binary the node figures run (see the module).
const AGENT_ENV: &str = "IMAGEKEEPER_BENCH_AGENT";

/// Measures every agent over the same window (they run side by side), after `warm_up`.
pub fn measure(agents: &[NodeAgent], warm_up: Duration, window: Duration) -> Vec<NodeCost> {
    sleep(warm_up);
    let cpu0: Vec<f64> = agents.iter().map(|a| cpu_seconds(a.pid())).collect();
    // Per agent, per thread: (first, last) switch count seen in the window.
    let mut seen: Vec<HashMap<String, (u64, u64)>> = agents
        .iter()
        .map(|a| {
            switches(a.pid())
                .into_iter()
                .map(|(tid, n)| (tid, (n, n)))
                .collect()
        })
        .collect();
    let start = Instant::now();
    while start.elapsed() < window {
        sleep(Duration::from_secs(1).min(window.saturating_sub(start.elapsed())));
        for (agent, seen) in agents.iter().zip(&mut seen) {
            for (tid, n) in switches(agent.pid()) {
                // A thread first seen in the window started from zero.
                seen.entry(tid).and_modify(|e| e.1 = n).or_insert((0, n));
            }
        }
    }
    let elapsed = start.elapsed();
    agents
        .iter()
        .zip(cpu0)
        .zip(seen)
        .map(|((agent, cpu0), seen)| {
            let cpu = cpu_seconds(agent.pid()) - cpu0;
            let status =
                fs::read_to_string(format!("/proc/{}/status", agent.pid())).expect("status");
            let wakeups: u64 = seen.values().map(|(first, last)| last - first).sum();
            NodeCost {
                images: agent.n,
                containers: agent.runtime.containers,
                window: elapsed,
                cpu_seconds_per_hour: cpu * 3600.0 / elapsed.as_secs_f64(),
                rss_mib: status_field(&status, "VmRSS") as f64 / 1024.0,
                hwm_mib: status_field(&status, "VmHWM") as f64 / 1024.0,
                wakeups_per_minute: wakeups as f64 * 60.0 / elapsed.as_secs_f64(),
            }
        })
        .collect()
}
