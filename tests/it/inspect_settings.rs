//! Issue 38 item 4: `inspect explain` and `inspect workload` resolve their GC settings as `run`
//! does: the agent's config file (`--config`), then `--set KEY=VALUE`, then the flags `run`
//! has (`--image-gc-high-threshold`, ...); their old flags (`--high`, `--low`, `--min-age`,
//! `--max-age`) still work, as explicit flags, with a warning naming the setting. As a process,
//! on a database replayed from `tests/replay/`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::bin;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Out {
    let out = bin::output(bin::imagekeeper().args(args));
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The README tour's database: `tests/replay/a_full_disk_an_eviction_and_a_repull.jsonl`
/// replayed into `dir`.
fn tour_db(dir: &Path) -> PathBuf {
    let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/replay/a_full_disk_an_eviction_and_a_repull.jsonl");
    let db = dir.join("tour.redb");
    let r = run(&[
        "replay",
        trace.to_str().expect("utf8"),
        "--db",
        db.to_str().expect("utf8"),
    ]);
    assert_eq!(r.code, 0, "replay: {}", r.stderr);
    db
}

/// `imagekeeper inspect --db DB COMMAND ARGS` at the tour's last time, without the kubelet's
/// records.
fn inspect(db: &Path, command: &str, args: &[&str]) -> Out {
    let mut all = vec![
        "inspect",
        "--db",
        db.to_str().expect("utf8"),
        command,
        "--now",
        "2026-11-20T14:00:00Z",
    ];
    if command == "explain" {
        all.extend(["--kubelet-root-dir", ""]);
    }
    all.extend_from_slice(args);
    run(&all)
}

/// The policy line `inspect explain` prints first.
fn policy_line(r: &Out) -> &str {
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .find(|l| l.starts_with("policy:"))
        .unwrap_or_else(|| panic!("no policy line in {}", r.stdout))
}

/// The workload's node line's policy and GC period.
fn workload_policy(r: &Out) -> (Value, Value) {
    assert_eq!(r.code, 0, "{}", r.stderr);
    let first = r.stdout.lines().next().expect("a node line");
    let node: Value = serde_json::from_str(first).expect("json");
    (node["policy"].clone(), node["gc_period_s"].clone())
}

fn policy(high: i64, low: i64, min_age: &str, max_age: &str) -> String {
    format!(
        "policy:      HighThresholdPercent {high}, LowThresholdPercent {low}, MinAge {min_age}, \
         MaxAge {max_age}"
    )
}

fn config_file(dir: &Path, text: &str) -> String {
    let path = dir.join("imagekeeper.toml");
    std::fs::write(&path, text).expect("write config");
    path.to_str().expect("utf8").to_owned()
}

const FILE: &str = "imageGCHighThresholdPercent = 70\nimageGCLowThresholdPercent = 60\n\
                    imageMinimumGCAge = \"5m\"\nimageMaximumGCAge = \"48h\"\n";

#[test]
fn explain_takes_the_config_file_then_set_then_run_flags_then_its_old_flags_as_flags() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = tour_db(dir.path());
    let file = config_file(dir.path(), FILE);
    // (args, the policy line, a warning that must be on stderr, or "" for none)
    let cases: Vec<(Vec<&str>, String, &str)> = vec![
        (vec![], policy(85, 80, "2m0s", "0s"), ""),
        (
            vec!["--config", &file],
            policy(70, 60, "5m0s", "48h0m0s"),
            "",
        ),
        (
            vec![
                "--config",
                &file,
                "--set",
                "imageGCHighThresholdPercent=75",
                "--set",
                "imageMaximumGCAge=72h",
            ],
            policy(75, 60, "5m0s", "72h0m0s"),
            "",
        ),
        (
            vec![
                "--config",
                &file,
                "--set",
                "imageGCHighThresholdPercent=75",
                "--image-gc-high-threshold",
                "78",
                "--minimum-image-ttl-duration",
                "10m",
            ],
            policy(78, 60, "10m0s", "48h0m0s"),
            "",
        ),
        (
            vec![
                "--config",
                &file,
                "--set",
                "imageGCHighThresholdPercent=75",
                "--high",
                "79",
                "--min-age",
                "3m",
            ],
            policy(79, 60, "3m0s", "48h0m0s"),
            "warning: --high is deprecated; use --image-gc-high-threshold",
        ),
        (
            vec!["--low", "50", "--max-age", "1h"],
            policy(85, 50, "2m0s", "1h0m0s"),
            "warning: --max-age is deprecated; use --image-maximum-gc-age",
        ),
    ];
    for (args, want, warning) in &cases {
        let r = inspect(&db, "explain", args);
        assert_eq!(policy_line(&r), want, "{args:?}");
        if warning.is_empty() {
            assert!(!r.stderr.contains("deprecated"), "{args:?}: {}", r.stderr);
        } else {
            assert!(r.stderr.contains(warning), "{args:?}: {}", r.stderr);
        }
    }
    // The file's thresholds decide: at 95% used, 70/60 frees more than the default 85/80.
    let fs = ["--capacity", "100000000000", "--available", "5000000000"];
    let with_file = inspect(&db, "explain", &[&["--config", &file][..], &fs].concat());
    assert!(
        with_file
            .stdout
            .contains("free 32.6 GiB (35000000000 bytes) down to LowThresholdPercent 60"),
        "{}",
        with_file.stdout
    );
    // The file's other GC settings too: the order, and the irreplaceable images kept.
    let other = config_file(
        dir.path(),
        "imageGCPolicy = \"adaptive\"\nprotectIrreplaceable = false\n",
    );
    let r = inspect(&db, "explain", &["--config", &other, "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: Value = serde_json::from_str(&r.stdout).expect("json");
    assert!(
        adaptive_reasons(&json) > 0,
        "the adaptive order's reasons: {json}"
    );
    assert!(!r.stderr.contains("irreplaceable"), "{}", r.stderr);
    let r = inspect(&db, "explain", &["-o", "json"]);
    let json: Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(adaptive_reasons(&json), 0, "{json}");
    assert!(r.stderr.contains("irreplaceable"), "{}", r.stderr);
}

/// How many images' reasons say where the adaptive order puts them.
fn adaptive_reasons(json: &Value) -> usize {
    json["images"]
        .as_array()
        .expect("images")
        .iter()
        .filter(|i| {
            i["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("adaptive:")
        })
        .count()
}

#[test]
fn workload_takes_the_config_file_then_set_then_run_flags_then_its_old_flags_as_flags() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = tour_db(dir.path());
    let file = config_file(dir.path(), FILE);
    let p = |high: i64, low: i64, min: u64, max: u64| serde_json::json!({"high": high, "low": low, "min_age_s": min, "max_age_s": max});
    let cases: Vec<(Vec<&str>, Value, &str)> = vec![
        (vec![], p(85, 80, 120, 0), ""),
        (vec!["--config", &file], p(70, 60, 300, 172_800), ""),
        (
            vec!["--config", &file, "--set", "imageGCLowThresholdPercent=65"],
            p(70, 65, 300, 172_800),
            "",
        ),
        (
            vec![
                "--config",
                &file,
                "--set",
                "imageGCLowThresholdPercent=65",
                "--image-gc-low-threshold",
                "55",
            ],
            p(70, 55, 300, 172_800),
            "",
        ),
        (
            vec!["--config", &file, "--low", "40", "--min-age", "1h"],
            p(70, 40, 3600, 172_800),
            "warning: --low is deprecated; use --image-gc-low-threshold",
        ),
    ];
    for (args, want, warning) in &cases {
        let r = inspect(&db, "workload", args);
        let (policy, period) = workload_policy(&r);
        assert_eq!(policy, *want, "{args:?}");
        assert_eq!(period, 300, "{args:?}");
        if warning.is_empty() {
            assert!(!r.stderr.contains("deprecated"), "{args:?}: {}", r.stderr);
        } else {
            assert!(r.stderr.contains(warning), "{args:?}: {}", r.stderr);
        }
    }
    let r = inspect(&db, "workload", &["--config", &file, "--gc-period", "1m"]);
    assert_eq!(workload_policy(&r).1, 60);
}

/// A bad `--set`, a bad file, a missing file or an old flag beside its replacement: exit 2,
/// nothing on stdout, the message naming what was wrong.
#[test]
fn bad_settings_for_explain_and_workload_exit_2_naming_the_setting() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = tour_db(dir.path());
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "imageGCHighThresholdPercent = 101\n").expect("write");
    let bad = bad.to_str().expect("utf8").to_owned();
    let missing = dir.path().join("missing.toml");
    let missing = missing.to_str().expect("utf8").to_owned();
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--set", "notAKey=1"],
            "unknown key \"notAKey\"".to_owned(),
        ),
        (
            vec!["--set", "imageGCHighThresholdPercent=lots"],
            "imageGCHighThresholdPercent".to_owned(),
        ),
        (
            vec!["--config", &bad],
            format!("imageGCHighThresholdPercent in {bad}: invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive"),
        ),
        (vec!["--config", &missing], missing.clone()),
        (
            vec!["--high", "101"],
            "--high: invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive".to_owned(),
        ),
        (
            vec!["--high", "80", "--image-gc-high-threshold", "80"],
            "--high".to_owned(),
        ),
    ];
    for command in ["explain", "workload"] {
        for (args, want) in &cases {
            let r = inspect(&db, command, args);
            assert_eq!(r.code, 2, "{command} {args:?}: {}", r.stderr);
            assert!(
                r.stderr.contains(want.as_str()),
                "{command} {args:?}: want {want:?} in {}",
                r.stderr
            );
            assert!(r.stdout.is_empty(), "{command} {args:?}: {}", r.stdout);
        }
    }
}
