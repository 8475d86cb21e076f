//! Peak RSS of whole processes (wait4's ru_maxrss): the real manager, store and CRI client as
//! an agent restarting on an n-image node (this bench binary run as a child) against a fake
//! runtime in a process of its own (`runtime.rs`), and `imagekeeper replay` of a 100k-image
//! trace.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};

use imagekeeper::cri::{CriClient, CriConfig, ImageRuntime};
use imagekeeper::gc::{GcConfig, ImageGcManager};
use imagekeeper::model::{ImageFsStats, UnixNanos};
use imagekeeper::store::Store;

use crate::runtime::RuntimeProcess;
use crate::synth::{NOW_SECS, Node, secs};
use imagekeeper::forward_image_runtime;
use imagekeeper::runtime::forward::Forward;

/// Runs `imagekeeper replay` on a 100k-image trace (detect, then GC that frees ~10 GiB) in a
/// child process and returns its peak RSS (wait4's ru_maxrss) in MiB and the images removed.
pub fn replay_peak_rss(work: &Path, node: &Node) -> (f64, usize) {
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
    let rss = run_measured(&command, &out);
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

/// The environment variable that makes this bench binary the measuring spawner: it runs
/// its arguments as a command, waits for it and writes its peak RSS (KiB) to the file named.
pub const MEASURE_ENV: &str = "IMAGEKEEPER_BENCH_MEASURE";

/// Runs `command` with stdout to `out`, waits for it and returns its peak RSS in MiB. Panics
/// unless it exits 0.
///
/// The command is started by a small spawner (this bench binary, fresh), not by the bench
/// itself: a child started with vfork/posix_spawn inherits into its ru_maxrss the peak RSS of
/// the process that spawned it (Linux keeps the larger of the old and new memory's high
/// water mark across exec), so a child of the bench, which holds the 100k node, would report
/// the bench's peak. The spawner is a few MiB.
pub fn run_measured(command: &Command, out: &Path) -> f64 {
    let kib_file = out.with_extension("maxrss");
    let exe = std::env::current_exe().expect("current exe");
    let mut spawner = Command::new(exe);
    spawner
        .env(MEASURE_ENV, &kib_file)
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(v) => spawner.env(key, v),
            None => spawner.env_remove(key),
        };
    }
    let status = spawner
        .stdout(File::create(out).expect("create child output"))
        .stderr(Stdio::inherit())
        .status()
        .expect("spawn the measuring spawner");
    assert!(status.success(), "{command:?} failed: {status}");
    let kib: f64 = fs::read_to_string(&kib_file)
        .expect("the spawner's maxrss file")
        .trim()
        .parse()
        .expect("KiB");
    kib / 1024.0
}

/// The spawner (see [`run_measured`]): runs argv[1..] with this process's stdout and stderr,
/// reaps it with wait4 and writes its ru_maxrss (KiB) to `kib_file`. Exits 1 unless the
/// command exited 0.
pub fn measure_child(kib_file: &str) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (program, rest) = args.split_first().expect("a command to measure");
    #[expect(
        clippy::zombie_processes,
        reason = "reaped below by wait4, which also returns its rusage"
    )]
    let child = Command::new(program)
        .args(rest)
        .env_remove(MEASURE_ENV)
        .spawn()
        .expect("spawn child");
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4");
    fs::write(kib_file, usage.ru_maxrss.to_string()).expect("write the maxrss file");
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        std::process::exit(1);
    }
}

/// The environment variable that makes this bench binary the agent child.
pub const CHILD_ENV: &str = "IMAGEKEEPER_BENCH_CHILD";
/// The runtime's socket the agent child talks to.
pub const SOCKET_ENV: &str = "IMAGEKEEPER_BENCH_SOCKET";

/// Runs this bench binary as a child holding n records: the real GC manager and store over
/// the real CRI client talking to `runtime` (a fake runtime in its own process listing the
/// n-image node). Returns its peak RSS in MiB and the images its GC removed.
pub fn agent_peak_rss(
    n: usize,
    db: &Path,
    phase: &str,
    work: &Path,
    runtime: &RuntimeProcess,
) -> (f64, usize) {
    let out = work.join(format!("agent-{n}-{phase}.out"));
    let exe = std::env::current_exe().expect("current exe");
    let mut command = Command::new(exe);
    command
        .env(CHILD_ENV, format!("{phase}:{n}:{}", db.display()))
        .env(SOCKET_ENV, &runtime.socket);
    let rss = run_measured(&command, &out);
    let removed: usize = fs::read_to_string(&out)
        .expect("child output")
        .trim()
        .parse()
        .expect("child prints the images removed");
    assert!(removed > 0, "the agent child's GC removed nothing");
    (rss, removed)
}

/// The agent's runtime: the real CRI client for everything but the image filesystem's
/// capacity, which is synthetic (85 % of 200 GiB used, so GC frees 10 GiB down to the
/// default 80 %) where the client would statvfs the fake's temp dir.
struct BenchRuntime {
    client: CriClient,
}

impl Forward for BenchRuntime {
    type Inner = CriClient;

    fn inner(&self) -> &CriClient {
        &self.client
    }

    fn image_fs(&self, mut stats: ImageFsStats) -> ImageFsStats {
        let gib = 1u64 << 30;
        stats.capacity = 200 * gib;
        stats.available = 30 * gib;
        stats
    }
}

forward_image_runtime!(impl[] for BenchRuntime);

/// The child: `first:<n>:<db>` detects the n images into an empty store (one transaction),
/// then GCs an hour later; `steady:<n>:<db>` reopens that store two hours later and GCs
/// (detect + free 10 GiB), as an agent restarting on an n-image node; `floor:<n>:<db>` only
/// lists the images through the client (the decoded list, no store, no manager). Prints
/// the images removed (listed, for the floor).
pub fn agent_child(arg: &str) {
    let (phase, rest) = arg.split_once(':').expect("phase:n:db");
    let (_n, db) = rest.split_once(':').expect("phase:n:db");
    let socket = std::env::var(SOCKET_ENV).expect("the runtime's socket");
    let config = CriConfig {
        runtime_endpoint: format!("unix://{socket}"),
        ..CriConfig::default()
    };
    let start = UnixNanos(secs(NOW_SECS));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let client = rt
        .block_on(CriClient::connect(config))
        .expect("connect to the runtime");
    if phase == "floor" {
        // The decoded list alone, as the client returns it: no store, no manager.
        let listed = rt.block_on(client.list_image_list()).expect("list images");
        println!("{}", listed.len());
        return;
    }
    let runtime = BenchRuntime { client };
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
