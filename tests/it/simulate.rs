//! `imagekeeper simulate` as a process: each workload under tests/simulate/ gives exactly its
//! `.expected.jsonl` output (one rule each: a pull that does not fit, a failed run, a restart
//! under `kubelet` vs `imagekeeper`, MinAge, the thresholds), the output is the same byte for
//! byte from a file and from stdin, and bad workloads exit 2 naming the line.

use crate::support::{bin, table_rows};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/simulate")
}

#[test]
fn every_workload_gives_its_expected_output() {
    let mut workloads: Vec<PathBuf> = std::fs::read_dir(workloads_dir())
        .expect("tests/simulate")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".jsonl") && !name.ends_with(".expected.jsonl")
        })
        .collect();
    workloads.sort();
    assert!(workloads.len() >= 5, "workloads found: {workloads:?}");
    for workload in workloads {
        let expected = std::fs::read_to_string(workload.with_extension("expected.jsonl"))
            .expect("expected output");
        let out = bin::run(&[
            "simulate",
            workload.to_str().expect("utf8 path"),
            "-o",
            "json",
        ]);
        assert!(
            out.status.success(),
            "{}: {}",
            workload.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            expected,
            "{}",
            workload.display()
        );
    }
}

/// The policies come out in the order given, and `-` reads stdin with the same result.
#[test]
fn policies_in_the_order_given_and_stdin_reads_the_same() {
    let path = workloads_dir().join("restart.jsonl");
    // The shell gives the binary the file as its stdin; the one runner keeps its hang guard.
    let out = bin::output(Command::new("sh").args([
        "-c",
        "exec \"$0\" simulate - --policy imagekeeper --policy kubelet -o json < \"$1\"",
        env!("CARGO_BIN_EXE_imagekeeper"),
        path.to_str().expect("utf8 path"),
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected =
        std::fs::read_to_string(workloads_dir().join("restart.expected.jsonl")).expect("expected");
    let line = |policy: &str| {
        expected
            .lines()
            .find(|l| l.contains(&format!("\"policy\":\"{policy}\"")))
            .expect("a line per policy")
            .to_owned()
    };
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n{}\n", line("imagekeeper"), line("kubelet"))
    );
}

/// The table adds each policy's re-pulled bytes as a ratio of clairvoyant's.
#[test]
fn the_table_gives_the_ratio_to_clairvoyant() {
    let path = workloads_dir().join("pull-does-not-fit.jsonl");
    let out = bin::run(&["simulate", path.to_str().expect("utf8 path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Columns are separated by at least three spaces.
    let rows = table_rows(&stdout);
    assert_eq!(rows[0][6..8], ["REPULLED", "VS CLAIRVOYANT"], "{stdout}");
    // clairvoyant re-pulled nothing, the others 400 bytes.
    assert_eq!(rows[1][..1], ["kubelet"]);
    assert_eq!(rows[1][6..8], ["400 B", "inf"], "{stdout}");
    let last = rows.len() - 1;
    assert_eq!(rows[last][..1], ["clairvoyant"], "{stdout}");
    assert_eq!(rows[last][6..8], ["0 B", "1.00"], "{stdout}");
}

#[test]
fn bad_workloads_exit_2_naming_the_line() {
    let node = r#"{"at": 0, "node": {"capacity": 1000, "pull_bytes_per_s": 10}}"#;
    let run =
        |at: u32| format!(r#"{{"at": {at}, "run": {{"image": "a", "size": 1, "for_s": 1}}}}"#);
    let cases: Vec<(String, &str)> = vec![
        (
            format!(
                "{node}\n{}\n{{\"at\": 6, \"run\": {{\"image\": \"a\", \"size\": 1, \"for_s\": 1, \"gpu\": 1}}}}\n",
                run(5)
            ),
            "line 3: unknown field \"gpu\" in \"run\"",
        ),
        (
            format!("{node}\n{{\"at\": 6, \"evict\": {{}}}}\n"),
            "line 2: unknown operation \"evict\"",
        ),
        (
            format!("{node}\n{}\n{}\n", run(9), run(8)),
            "line 3: \"at\" goes back in time (line 2 is later)",
        ),
        (
            format!("{}\n{node}\n", run(0)),
            "line 1: the first line must be the \"node\" line",
        ),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, (text, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad-{i}.jsonl"));
        std::fs::write(&path, text).expect("write");
        let out = bin::run(&["simulate", path.to_str().expect("utf8 path")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert!(
            stderr.contains(&format!("workload {}: {want}", path.display())),
            "{want}: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "nothing runs before the whole workload is read"
        );
    }
}

/// `inspect explain` with `imageGCPolicy = adaptive` lists the images in the adaptive order and
/// says why each ranks where it does; the default keeps the kubelet's order.
#[test]
fn inspect_explain_says_where_the_adaptive_order_puts_each_image() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("db.redb");
    let trace = dir.path().join("trace.jsonl");
    // app:1 is used from 1000 s to 9000 s, then app:2 arrives (superseding it); scan:1 is never
    // used.
    std::fs::write(
        &trace,
        r#"{"at": 1000, "images": [{"id": "sha256:a", "size": 10, "tags": ["reg/app:1"]}, {"id": "sha256:c", "size": 10, "tags": ["reg/scan:1"]}]}
{"at": 1000, "containers": [{"id": "x", "image_id": "sha256:a", "state": "running"}]}
{"at": 1000, "detect": {}}
{"at": 9000, "images": [{"id": "sha256:a", "size": 10, "tags": ["reg/app:1"]}, {"id": "sha256:c", "size": 10, "tags": ["reg/scan:1"]}, {"id": "sha256:b", "size": 10, "tags": ["reg/app:2"]}]}
{"at": 9000, "detect": {}}
{"at": 9100, "containers": []}
{"at": 9100, "detect": {}}
"#,
    )
    .expect("write trace");
    let out = bin::run(&[
        "replay",
        trace.to_str().expect("utf8"),
        "--db",
        db.to_str().expect("utf8"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explain = |extra: &[&str]| -> Vec<(String, String)> {
        let mut args = vec![
            "inspect",
            "--db",
            db.to_str().expect("utf8"),
            "explain",
            "--now",
            "1970-01-01T02:40:00Z",
            "--kubelet-root-dir",
            "",
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = bin::run(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        json["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| {
                (
                    i["id"].as_str().unwrap_or_default().to_owned(),
                    i["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let kubelet: Vec<String> = explain(&[]).into_iter().map(|(id, _)| id).collect();
    assert_eq!(kubelet, ["sha256:c", "sha256:b", "sha256:a"]);
    let adaptive = explain(&["--image-gc-policy", "adaptive"]);
    let ids: Vec<&str> = adaptive.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["sha256:a", "sha256:c", "sha256:b"], "{adaptive:?}");
    assert!(
        adaptive[0]
            .1
            .contains("adaptive: superseded by \"reg/app:2\""),
        "{adaptive:?}"
    );
    assert!(adaptive[1].1.contains("adaptive: one-off"), "{adaptive:?}");
    // Issue 39: the predictive order names each image's estimate and what it came from.
    let predictive = explain(&["--image-gc-policy", "predictive"]);
    let ids: Vec<&str> = predictive.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["sha256:a", "sha256:c", "sha256:b"], "{predictive:?}");
    assert!(
        predictive[0]
            .1
            .contains("predictive: not expected again (superseded by a newer tag"),
        "{predictive:?}"
    );
    assert!(
        predictive[1]
            .1
            .contains("predictive: next use in 168h0m0s (prior for a one-off image"),
        "{predictive:?}"
    );
    let out = bin::run(&[
        "inspect",
        "--db",
        db.to_str().expect("utf8"),
        "explain",
        "--now",
        "1970-01-01T02:40:00Z",
        "--kubelet-root-dir",
        "",
        "-o",
        "json",
        "--image-gc-policy",
        "predictive",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let first = &json["images"][0];
    assert_eq!(first["rank"], 1, "{first}");
    assert_eq!(
        first["predictive"]["basis"]["kind"], "superseded",
        "{first}"
    );
    assert_eq!(
        json["images"][1]["predictive"]["next_use_in_s"], 604_800,
        "{json}"
    );
    let bad = bin::run(&[
        "inspect",
        "--db",
        db.to_str().expect("utf8"),
        "explain",
        "--image-gc-policy",
        "lfu",
    ]);
    assert_eq!(bad.status.code(), Some(2));
}

fn simulate_quietly(
    workload: &imagekeeper::workload::Workload,
    options: imagekeeper::simulate::SimOptions,
) -> Vec<(
    imagekeeper::simulate::Outcome,
    imagekeeper::simulate::SimStats,
)> {
    simulate_policies_quietly(workload, &imagekeeper::simulate::SimPolicy::ALL, options)
}

fn simulate_policies_quietly(
    workload: &imagekeeper::workload::Workload,
    policies: &[imagekeeper::simulate::SimPolicy],
    options: imagekeeper::simulate::SimOptions,
) -> Vec<(
    imagekeeper::simulate::Outcome,
    imagekeeper::simulate::SimStats,
)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
        rt.block_on(imagekeeper::simulate::simulate_with(
            workload, policies, options,
        ))
        .expect("the workload simulates")
    })
}

/// The policies the every-cycle comparison runs on a workload: all of them, but on the long
/// generated signal families (days of one-minute GC periods: minutes of every-cycle stepping in
/// a debug build) only `signals`, the policy those families add.
fn policies_to_step(text: &str) -> Vec<imagekeeper::simulate::SimPolicy> {
    use imagekeeper::simulate::SimPolicy;
    if text.lines().count() > 1_000 && has_signal_lines(text) {
        vec![SimPolicy::Signals]
    } else {
        SimPolicy::ALL.to_vec()
    }
}

/// A small seeded workload: a few images of fixed sizes, runs with gaps from a second to days
/// (idle stretches GC skips), containers running from a second to days (stretches time jumps
/// over while they run), restarts, and a policy with MinAge and sometimes MaxAge.
fn generated_workload(seed: u64) -> String {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let high = 50 + next(51);
    let low = 10 + next(high - 10);
    let min_age = next(3) * 100;
    let max_age = if next(3) == 0 {
        min_age + 500 + next(5000)
    } else {
        0
    };
    let period = 60 + next(300);
    let mut out = format!(
        "{{\"at\": 0, \"node\": {{\"capacity\": 2000, \"other_used\": {}, \"pull_bytes_per_s\": {}}}, \"policy\": {{\"high\": {high}, \"low\": {low}, \"min_age_s\": {min_age}, \"max_age_s\": {max_age}}}, \"gc_period_s\": {period}}}\n",
        next(300),
        50 + next(500),
    );
    let sizes: Vec<u64> = (0..6).map(|_| 100 + next(600)).collect();
    let mut at = 0u64;
    for _ in 0..(10 + next(30)) {
        at += match next(4) {
            0 => next(5),
            1 => next(500),
            2 => next(5_000),
            _ => next(30_000),
        };
        if next(12) == 0 {
            out.push_str(&format!("{{\"at\": {at}, \"restart\": {{}}}}\n"));
        } else {
            let image = next(6) as usize;
            // Some containers run for hours or days: time jumps over the cycles meanwhile.
            let for_s = match next(5) {
                0 => 3_600 + next(100_000),
                _ => 1 + next(2_000),
            };
            out.push_str(&format!(
                "{{\"at\": {at}, \"run\": {{\"image\": \"reg/i{image}:1\", \"size\": {}, \"for_s\": {for_s}}}}}\n",
                sizes[image],
            ));
        }
    }
    out
}

/// Event-driven time (jumping over the GC cycles that change nothing, idle or while
/// containers run and pulls land) gives the same outcomes as stepping every cycle: each
/// workload of tests/simulate/ and seeded generated ones, every policy.
#[test]
fn event_driven_time_gives_the_outcomes_of_stepping_every_cycle() {
    use imagekeeper::simulate::SimOptions;
    let mut workloads: Vec<(String, String)> = std::fs::read_dir(workloads_dir())
        .expect("tests/simulate")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".jsonl") && !name.ends_with(".expected.jsonl")
        })
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("workload");
            (p.display().to_string(), text)
        })
        .collect();
    workloads.sort();
    assert!(workloads.len() >= 5, "workloads found: {workloads:?}");
    for seed in 0..24 {
        workloads.push((format!("seed {seed}"), generated_workload(seed)));
    }
    let mut skipped = 0;
    let mut skipped_busy = 0;
    for (name, text) in workloads {
        let workload = imagekeeper::workload::parse_workload(&text)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        let policies = policies_to_step(&text);
        let every = simulate_policies_quietly(&workload, &policies, SimOptions::every_cycle());
        let skipping = simulate_policies_quietly(&workload, &policies, SimOptions::default());
        for ((all, all_stats), (some, some_stats)) in every.iter().zip(&skipping) {
            assert_eq!(all, some, "{name}\n{text}");
            assert_eq!(all_stats.gc_cycles_skipped, 0, "{name}");
            assert_eq!(
                some_stats.gc_cycles + some_stats.gc_cycles_skipped,
                all_stats.gc_cycles,
                "{name}: every tick is run or skipped"
            );
            skipped += some_stats.gc_cycles_skipped;
            skipped_busy += some_stats.gc_cycles_skipped_busy;
        }
        let json = |v: &[(imagekeeper::simulate::Outcome, _)]| {
            v.iter()
                .map(|(o, _)| serde_json::to_string(o).expect("json"))
                .collect::<Vec<_>>()
        };
        assert_eq!(json(&every), json(&skipping), "{name}");
    }
    // The comparison is not vacuous: the generated idle stretches were skipped, and so were
    // stretches with containers running.
    assert!(skipped > 500, "cycles skipped: {skipped}");
    assert!(
        skipped_busy > 500,
        "cycles skipped while busy: {skipped_busy}"
    );
}

/// The issue's reproducer: one container running for a year (default 5-minute period, over
/// 100,000 ticks) runs a handful of GC cycles per policy, not one per tick, and gives the
/// outcome of one run and one pull.
#[test]
fn a_year_long_container_runs_a_handful_of_gc_cycles() {
    let text = "{\"at\": 0, \"node\": {\"capacity\": 1000000000000, \"pull_bytes_per_s\": 1000000000}}\n{\"at\": 1, \"run\": {\"image\": \"a\", \"size\": 1000, \"for_s\": 31536000}}\n";
    let workload = imagekeeper::workload::parse_workload(text).expect("the workload parses");
    let ticks = 31_536_000 / 300;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    // One policy at a time, so a policy that steps every tick fails the test at its end.
    for policy in imagekeeper::simulate::SimPolicy::ALL {
        let (outcome, stats) =
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
                rt.block_on(imagekeeper::simulate::simulate_with(
                    &workload,
                    &[policy],
                    imagekeeper::simulate::SimOptions::default(),
                ))
                .expect("the workload simulates")
            })
            .pop()
            .expect("one outcome");
        assert_eq!((outcome.runs, outcome.pulls), (1, 1), "{outcome:?}");
        assert!(stats.gc_cycles <= 5, "{}: {stats:?}", outcome.policy);
        assert!(
            stats.gc_cycles + stats.gc_cycles_skipped >= ticks,
            "{}: {stats:?}",
            outcome.policy
        );
    }
}

/// A workload whose simulation would take more steps than the bound stops with a clear error
/// naming the policy and the bound, not after unbounded work.
#[test]
fn a_simulation_past_its_step_bound_stops_with_a_clear_error() {
    let mut text =
        "{\"at\": 0, \"node\": {\"capacity\": 1000000, \"pull_bytes_per_s\": 1000}}\n".to_owned();
    for i in 0..200 {
        text.push_str(&format!(
            "{{\"at\": {i}, \"run\": {{\"image\": \"reg/i{i}:1\", \"size\": 10, \"for_s\": 5}}}}\n"
        ));
    }
    let workload = imagekeeper::workload::parse_workload(&text).expect("the workload parses");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let options = imagekeeper::simulate::SimOptions::default().with_max_steps(100);
    let err =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            rt.block_on(imagekeeper::simulate::simulate_with(
                &workload,
                &[imagekeeper::simulate::SimPolicy::Imagekeeper],
                options,
            ))
            .map_err(|e| e.to_string())
        })
        .expect_err("past the bound");
    assert_eq!(
        err,
        "policy imagekeeper: the simulation took more than 100 steps (GC cycles run, pulls landing, containers ending, workload lines), the most one policy may take: simulate a shorter stretch of the workload"
    );
    // The same workload within the default bound answers.
    let outcomes =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            rt.block_on(imagekeeper::simulate::simulate_with(
                &workload,
                &[imagekeeper::simulate::SimPolicy::Imagekeeper],
                imagekeeper::simulate::SimOptions::default(),
            ))
            .map_err(|e| e.to_string())
        })
        .expect("within the bound");
    assert_eq!(outcomes[0].0.runs, 200);
}

/// A `simulate` stopped by SIGTERM or SIGINT in the middle of a long run (its progress line
/// on stderr shows it under way) leaves nothing in its $TMPDIR, as one that ends.
#[test]
fn a_simulate_stopped_by_sigterm_or_sigint_leaves_no_temporary_files() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("temp dir");
    // Many runs with containers overlapping: seconds of work per policy.
    let path = dir.path().join("long.jsonl");
    let mut text = "{\"at\": 0, \"node\": {\"capacity\": 100000000, \"pull_bytes_per_s\": 1000000}, \"gc_period_s\": 60}\n".to_owned();
    for i in 0..300_000u64 {
        text.push_str(&format!(
            "{{\"at\": {}, \"run\": {{\"image\": \"reg/i{}:1\", \"size\": 1000000, \"for_s\": 600}}}}\n",
            i * 7,
            i % 97
        ));
    }
    std::fs::write(&path, text).expect("write the workload");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let tmp = dir.path().join(format!("tmp-{signal}"));
        std::fs::create_dir(&tmp).expect("a TMPDIR of its own");
        let mut child = bin::imagekeeper()
            .args(["simulate", path.to_str().expect("utf8 path")])
            .env("TMPDIR", &tmp)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start simulate");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Under way: a progress line, or (a build that writes its databases to $TMPDIR)
        // something in $TMPDIR. Bounded by the hang guard.
        let started = std::time::Instant::now();
        let under_way = loop {
            match rx.recv_timeout(std::time::Duration::from_millis(20)) {
                Ok(line) if line.starts_with("simulate: policy") => break line,
                Ok(line) => panic!("unexpected stderr: {line}"),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("simulate ended before it showed progress")
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            let entries = std::fs::read_dir(&tmp).expect("read TMPDIR").count();
            if entries > 0 {
                break format!("{entries} entries in TMPDIR");
            }
            assert!(started.elapsed() < bin::HANG_GUARD, "no progress shown");
        };
        // SAFETY: kill(2) on the pid of our own child, not reaped yet (wait comes below).
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let status = child.wait().expect("wait for simulate");
        assert_eq!(
            status.signal(),
            Some(signal),
            "stopped by the signal mid-run ({under_way}): {status:?}"
        );
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .expect("read TMPDIR")
            .map(|e| e.expect("entry").path())
            .collect();
        assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    }
}

/// Ten idle years between the node line and the one run (the latest time a workload may
/// give) at the default 5-minute period: a handful of GC cycles run, not a million.
#[test]
fn ten_idle_years_run_a_handful_of_gc_cycles() {
    let text = "{\"at\": 0, \"node\": {\"capacity\": 1000, \"other_used\": 0, \"pull_bytes_per_s\": 100}}\n{\"at\": 315360000, \"run\": {\"image\": \"reg/a:1\", \"size\": 100, \"for_s\": 60}}\n";
    let workload = imagekeeper::workload::parse_workload(text).expect("the workload parses");
    let ticks = 315_360_000 / 300;
    for (outcome, stats) in
        simulate_quietly(&workload, imagekeeper::simulate::SimOptions::default())
    {
        assert_eq!(outcome.runs, 1, "{outcome:?}");
        assert_eq!(outcome.pulls, 1, "{outcome:?}");
        assert!(stats.gc_cycles <= 5, "{}: {stats:?}", outcome.policy);
        assert!(
            stats.gc_cycles_skipped >= ticks - 5,
            "{}: {stats:?}",
            outcome.policy
        );
    }
}

/// The families of tests/simulate/ and their expected outputs: (name, workload text, the
/// outcomes by policy).
fn families() -> Vec<(
    String,
    String,
    std::collections::BTreeMap<String, serde_json::Value>,
)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(workloads_dir()).expect("tests/simulate") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        if !name.ends_with(".jsonl") || name.ends_with(".expected.jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("workload");
        let expected =
            std::fs::read_to_string(path.with_extension("expected.jsonl")).expect("expected");
        let outcomes = expected
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("an outcome");
                (v["policy"].as_str().expect("policy").to_owned(), v)
            })
            .collect();
        out.push((name, text, outcomes));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Whether a workload has signal lines (`cronjob`, `bound`, `rollout`).
fn has_signal_lines(text: &str) -> bool {
    text.lines().filter(|l| !l.trim().is_empty()).any(|l| {
        let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
        ["cronjob", "bound", "rollout"]
            .iter()
            .any(|k| v.get(k).is_some())
    })
}

/// Issue 55's done-when on the repository's families (each one's expected output, which
/// `every_workload_gives_its_expected_output` holds to the code): the signal-reading policy
/// pulls again no more than `predictive` on every family, and no more than 1.2 times the
/// clairvoyant reference on each family with signal lines (at least two); on a family without
/// any it is `predictive` exactly.
#[test]
fn the_signals_policy_repulls_no_more_than_predictive_and_near_clairvoyant_with_signals() {
    let families = families();
    let mut with_signals = 0;
    for (name, text, outcomes) in &families {
        let bytes = |p: &str| {
            outcomes[p]["repulled_bytes"]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: {p}"))
        };
        let (signals, predictive, clairvoyant) =
            (bytes("signals"), bytes("predictive"), bytes("clairvoyant"));
        assert!(
            signals <= predictive,
            "{name}: signals re-pulled {signals} bytes, predictive {predictive}"
        );
        if has_signal_lines(text) {
            with_signals += 1;
            assert!(
                signals as f64 <= 1.2 * clairvoyant as f64,
                "{name}: signals re-pulled {signals} bytes, more than 1.2 x clairvoyant's {clairvoyant}"
            );
        } else {
            let mut as_predictive = outcomes["signals"].clone();
            as_predictive["policy"] = "predictive".into();
            assert_eq!(as_predictive, outcomes["predictive"], "{name}");
        }
    }
    assert!(
        with_signals >= 2,
        "families with signal lines: {with_signals}"
    );
}

/// Every policy but `signals` runs a workload as if its signal lines were not there: the
/// outcomes with them are those of the workload without them.
#[test]
fn policies_that_read_no_signals_ignore_the_signal_lines() {
    use imagekeeper::simulate::{SimOptions, SimPolicy, simulate_with};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let all_others: Vec<SimPolicy> = SimPolicy::ALL
        .into_iter()
        .filter(|p| *p != SimPolicy::Signals)
        .collect();
    let mut compared = 0;
    for (name, text, _) in families() {
        if !has_signal_lines(&text) {
            continue;
        }
        let stripped: String = text
            .lines()
            .filter(|l| {
                !(l.contains("\"cronjob\"") || l.contains("\"bound\"") || l.contains("\"rollout\""))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(!has_signal_lines(&stripped), "{name}");
        // Every other policy on the small families; on the long generated ones (minutes in a
        // debug build) the one the signals policy is measured against and the kubelet's: the
        // lines are skipped before any policy's step (`Sim::run`), whichever it is.
        let others = if text.lines().count() > 1_000 {
            vec![SimPolicy::Predictive, SimPolicy::Kubelet]
        } else {
            all_others.clone()
        };
        let run = |t: &str| {
            let workload = imagekeeper::workload::parse_workload(t).expect("parses");
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
                rt.block_on(simulate_with(&workload, &others, SimOptions::default()))
                    .expect("simulates")
                    .into_iter()
                    .map(|(o, _)| serde_json::to_string(&o).expect("json"))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(run(&text), run(&stripped), "{name}");
        compared += 1;
    }
    assert!(compared >= 2, "families compared: {compared}");
}

/// The workload trace page (`docs/src/reference/workload-trace.md`, written by hand) stays the
/// parser's: it has a row for every operation the parser reads, and each example line it shows
/// parses (after a node line, for the examples that show none).
#[test]
fn the_workload_trace_page_names_every_operation_and_its_examples_parse() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference/workload-trace.md"),
    )
    .expect("the page");
    for op in imagekeeper::workload::WORKLOAD_OPERATIONS {
        assert!(page.contains(&format!("| `{op}` |")), "no row for {op:?}");
    }
    let node = r#"{"at": 0, "node": {"capacity": 1000, "pull_bytes_per_s": 10}}"#;
    let mut blocks = 0;
    for block in page.split("```").skip(1).step_by(2) {
        let lines: Vec<&str> = block.lines().filter(|l| l.starts_with("{\"at\"")).collect();
        if lines.is_empty() {
            continue;
        }
        let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        if !lines[0].contains("\"node\"") {
            text = format!("{node}\n{text}");
        }
        imagekeeper::workload::parse_workload(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
        blocks += 1;
    }
    assert!(blocks >= 2, "example blocks: {blocks}");
}

/// `simulate` runs `signals` once with `predictive` on a workload without signal lines (the
/// CLI gives it `predictive`'s outcome, renamed): the `signals` policy run alone, through the
/// library, gives that outcome on every such family of tests/simulate/.
#[test]
fn on_a_workload_without_signal_lines_the_signals_policy_run_alone_is_predictive() {
    use imagekeeper::simulate::{SimOptions, SimPolicy};
    let mut checked = 0;
    for (name, text, outcomes) in families() {
        if has_signal_lines(&text) {
            continue;
        }
        let workload = imagekeeper::workload::parse_workload(&text).expect("the family parses");
        assert!(!workload.declares_signals(), "{name}");
        let ran =
            simulate_policies_quietly(&workload, &[SimPolicy::Signals], SimOptions::default());
        let mut outcome = serde_json::to_value(&ran[0].0).expect("an outcome");
        outcome["policy"] = "predictive".into();
        assert_eq!(outcome, outcomes["predictive"], "{name}");
        checked += 1;
    }
    assert!(checked >= 8, "families without signal lines: {checked}");
}
