//! The agent under 10,000 pins beside 10,000 images (issue 53, item 1), end to end: the real
//! agent (`imagekeeper run`, a detect every second, its own GC off) against the fake runtime
//! in a process of its own serving the synthetic node of 10,000 images, with one pin in its
//! database for every image (its first tag, or its id), the cap of pins in force. From the
//! agent's start on, `/healthz` is asked every 20 ms over a window of wall time (a fresh
//! connection each time, as the kubelet's probe); then SIGTERM is sent right after a detect
//! starts and the exit is timed.
//!
//! Figures: `healthz_max_ms_10k_pins` (the slowest answer after the first; target: under
//! 100 ms), `healthz_p99_ms_10k_pins`, `detects_in_window_10k_pins` (how many detects the
//! probes ran beside, from the agent's log) and `sigterm_exit_ms_10k_pins` (target: within the
//! chart's termination grace period, 30 s). Before the pins met the names through an index, a
//! detect of 9,191 pins took 2 min 39 s with `/healthz` dead for minutes and SIGTERM ignored
//! for over 63 s (the reproducer).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use imagekeeper::model::{ImagePin, PinKey, UnixNanos};
use imagekeeper::store::{Batch, Store};

use crate::node::agent_binary;
use crate::report::{Figures, percentile};
use crate::runtime::RuntimeProcess;
use crate::synth::{SEED, secs, synth_lists};

/// Images and pins.
const N: usize = 10_000;

/// One `/healthz` answer's time, or `None` when the agent did not answer (not serving yet, or
/// the connection failed).
fn probe(port: u16) -> Option<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    answer
        .starts_with(b"HTTP/1.1 200")
        .then(|| started.elapsed())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn detects(log: &Path) -> usize {
    fs::read_to_string(log)
        .unwrap_or_default()
        .matches("Detected images")
        .count()
}

pub fn figures(work: &Path, quick: bool, figures: &mut Figures) {
    let dir = work.join("pins-agent");
    fs::create_dir_all(&dir).expect("the agent's dir");
    let db = dir.join("records.redb");
    let (images, _) = synth_lists(N, SEED);
    {
        let store = Store::open(&db, UnixNanos(secs(1))).expect("open store");
        let mut batch = Batch::new();
        for image in &images {
            let name = image
                .repo_tags
                .first()
                .cloned()
                .unwrap_or_else(|| image.id.0.clone());
            batch.put_pin(
                PinKey::new(name, ""),
                ImagePin {
                    created_at: UnixNanos(secs(1)),
                    until: UnixNanos::NEVER,
                    reason: String::new(),
                },
            );
        }
        store.apply(&batch).expect("10,000 pins");
    }
    let runtime = RuntimeProcess::start_on(N, Some(Path::new("/dev/shm")));
    let port = free_port();
    let log = dir.join("agent.log");
    let mut agent = Command::new(agent_binary().0)
        .arg("run")
        .arg("--db")
        .arg(&db)
        .arg("--admin-socket")
        .arg(dir.join("admin.sock"))
        .arg("--container-runtime-endpoint")
        .arg(runtime.endpoint())
        .arg("--kubelet-root-dir")
        .arg("")
        .args(["--metrics-address", "127.0.0.1:0"])
        .args(["--healthz-address", &format!("127.0.0.1:{port}")])
        .args(["--detect-period", "1s", "--runtime-pins", "off"])
        .args(["--image-gc-high-threshold", "100"])
        .args(["--image-gc-low-threshold", "99"])
        .env("IMAGEKEEPER_LOG", "imagekeeper=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("agent log"))
        .spawn()
        .expect("start imagekeeper run");
    let started = Instant::now();
    let window = Duration::from_secs(if quick { 6 } else { 20 });
    let mut answers = Vec::new();
    let mut missed_after_first = 0;
    while started.elapsed() < window + Duration::from_secs(30) {
        let asked = Instant::now();
        match probe(port) {
            Some(took) => answers.push(took.as_secs_f64() * 1e3),
            None if !answers.is_empty() => missed_after_first += 1,
            None => {}
        }
        if !answers.is_empty() && started.elapsed() >= window {
            break;
        }
        sleep(Duration::from_millis(20).saturating_sub(asked.elapsed()));
    }
    assert!(
        !answers.is_empty(),
        "the agent never answered /healthz ({log:?})"
    );
    let detected = detects(&log);
    // SIGTERM right after a detect starts: the next "Detected images" line is the end of the
    // one running, so wait for a new line, then for the next detect to begin (period 1 s).
    let before = detects(&log);
    while detects(&log) == before && started.elapsed() < window + Duration::from_secs(60) {
        sleep(Duration::from_millis(5));
    }
    sleep(Duration::from_millis(1_050));
    let term = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success(), "kill -TERM");
    let status = loop {
        if let Some(status) = agent.try_wait().expect("wait") {
            break status;
        }
        if term.elapsed() > Duration::from_secs(120) {
            let _ = agent.kill();
            break agent.wait().expect("wait");
        }
        sleep(Duration::from_millis(5));
    };
    let exit_ms = term.elapsed().as_secs_f64() * 1e3;
    drop(runtime);
    let mut sorted = answers.clone();
    sorted.sort_by(f64::total_cmp);
    let first = answers[0];
    let rest = &answers[1..];
    let max = rest.iter().copied().fold(0.0, f64::max);
    println!(
        "pins agent: {N} pins beside {N} images ({}), {} /healthz answers ({missed_after_first} \
         missed after the first; first {first:.1} ms), {detected} detects in {:.1} s; SIGTERM: \
         exit {status} after {exit_ms:.0} ms",
        agent_binary().1,
        answers.len(),
        window.as_secs_f64()
    );
    assert!(status.success(), "the agent exits 0 on SIGTERM: {status}");
    figures.target("healthz_max_ms_10k_pins", max, "ms", "<=", 100.0);
    figures.add("healthz_p99_ms_10k_pins", percentile(&sorted, 99.0), "ms");
    figures.add(
        "healthz_missed_after_first_10k_pins",
        missed_after_first as f64,
        "",
    );
    figures.add("detects_in_window_10k_pins", detected as f64, "");
    figures.target("sigterm_exit_ms_10k_pins", exit_ms, "ms", "<=", 30_000.0);
    let _ = fs::remove_dir_all(&dir);
}
