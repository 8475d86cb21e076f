//! `imagekeeper inspect` end to end, as a process, on databases built through the library:
//! every subcommand's table and JSON output, bad files and bad flags, reading beside a live
//! writer in a child process and after it is SIGKILLed, the file's bytes unchanged by every
//! command, and explain agreeing with what the real GC manager removes.

use crate::support::{bin, table_rows};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use imagekeeper::gc::{GcConfig, GcPolicy, ImageGcManager};
use imagekeeper::model::{
    BackoffEntry, ContainerState, ImageId, ImageRecord, RecordKey, RuntimeContainer, RuntimeImage,
    UnixNanos,
};
use imagekeeper::replay::ScriptedRuntime;
use imagekeeper::store::{Batch, CURRENT_SCHEMA_VERSION, Store, StoreError, meta_keys};
use serde_json::Value;

/// "Now" for every command: 2026-01-02T08:00:00Z.
const NOW: i64 = 1_767_340_800;
const HOUR: i64 = 3600;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

/// Runs `imagekeeper inspect ARGS` and checks that it did not panic.
fn run(args: &[&str]) -> Run {
    let out = bin::output(bin::imagekeeper().arg("inspect").args(args));
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `imagekeeper inspect --db DB --now NOW ARGS` and checks the file's bytes did not
/// change.
fn inspect(db: &Path, args: &[&str]) -> Run {
    let before = std::fs::read(db).ok();
    let now = NOW.to_string();
    let mut all = vec!["--db", db.to_str().expect("utf8 path"), "--now", &now];
    all.extend_from_slice(args);
    let run = run(&all);
    assert!(
        std::fs::read(db).ok() == before,
        "inspect {args:?} changed the file's bytes"
    );
    run
}

fn id(hex: &str) -> String {
    format!("sha256:{hex:0<64}")
}

fn key(hex: &str, handler: &str) -> RecordKey {
    RecordKey::new(id(hex), handler)
}

fn at(secs: i64) -> UnixNanos {
    UnixNanos::from_secs(secs)
}

fn record(first: i64, last: i64, size: u64, pinned: bool) -> ImageRecord {
    ImageRecord {
        first_detected: at(first),
        last_used: if last == 0 {
            UnixNanos::NEVER
        } else {
            at(last)
        },
        size,
        pinned,
    }
}

/// The example database: five records, one backoff entry, meta with the last detect two
/// hours ago (image `c0ffee` was in use then).
fn example_db(dir: &Path) -> PathBuf {
    let path = dir.join("records.redb");
    let store = Store::open(&path, at(NOW - 10 * HOUR)).expect("open");
    let mut batch = Batch::new();
    batch.upsert(key("aaa1", ""), record(NOW - 9 * HOUR, 0, 1536, false));
    batch.upsert(key("aaa2", ""), record(NOW - 9 * HOUR, 0, 50 << 20, true));
    batch.upsert(
        key("b0b", ""),
        record(NOW - 9 * HOUR, NOW - 8 * HOUR, 100 << 20, false),
    );
    batch.upsert(
        key("c0ffee", ""),
        record(NOW - 9 * HOUR, NOW - 2 * HOUR, 20 << 20, false),
    );
    batch.upsert(key("c0ffee", "kata"), record(NOW - 60, 0, 10, false));
    batch.put_backoff(
        "uid-1_nginx:bad".to_owned(),
        BackoffEntry {
            backoff: Duration::from_secs(20),
            last_update: at(NOW - 30),
            last_error: "ErrImagePull: not found".to_owned(),
        },
    );
    batch.set_meta(meta_keys::LAST_DETECT, at(NOW - 2 * HOUR).0);
    // An agent that watched until a minute ago: no unwatched time for MaxAge to leave out.
    batch.set_meta(meta_keys::HEARTBEAT, at(NOW - 60).0);
    batch.set_meta(meta_keys::AGENT_STARTED_AT, at(NOW - 10 * HOUR).0);
    store.apply(&batch).expect("apply");
    path
}

fn ids(v: &Value, field: &str) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|r| {
            let id = r[field].as_str().expect("id");
            format!(
                "{}{}",
                id.trim_start_matches("sha256:").trim_end_matches('0'),
                match r["runtime_handler"].as_str() {
                    Some("") | None => String::new(),
                    Some(h) => format!("/{h}"),
                }
            )
        })
        .collect()
}

#[test]
fn list_shows_every_record_in_eviction_order_or_sorted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let cases: Vec<(&[&str], Vec<&str>)> = vec![
        (&[], vec!["aaa1", "aaa2", "c0ffee/kata", "b0b", "c0ffee"]),
        (
            &["--sort", "size"],
            vec!["b0b", "aaa2", "c0ffee", "aaa1", "c0ffee/kata"],
        ),
        (
            &["--sort", "last-used"],
            vec!["c0ffee", "b0b", "aaa1", "aaa2", "c0ffee/kata"],
        ),
        (
            &["--sort", "first-detected"],
            vec!["c0ffee/kata", "aaa1", "aaa2", "b0b", "c0ffee"],
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["list", "--output", "json"];
        args.extend_from_slice(extra);
        let r = inspect(&db, &args);
        assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
        assert_eq!(ids(&r.json(), "id"), want, "{extra:?}");
    }
    let v = inspect(&db, &["list", "--output", "json"]).json();
    let b0b = &v[3];
    assert_eq!(b0b["size"], 100 << 20);
    assert_eq!(b0b["size_human"], "100.0 MiB");
    assert_eq!(b0b["last_used"], "2026-01-02T00:00:00Z");
    assert_eq!(b0b["last_used_unix_nanos"], at(NOW - 8 * HOUR).0);
    assert_eq!(b0b["last_used_ago"], "8h ago");
    assert_eq!(v[0]["last_used"], Value::Null);
    assert_eq!(v[0]["last_used_ago"], "never");
    assert_eq!(v[1]["pinned"], true);

    let table = inspect(&db, &["list"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let lines: Vec<&str> = table.stdout.lines().collect();
    for column in [
        "IMAGE ID",
        "HANDLER",
        "SIZE",
        "FIRST DETECTED",
        "LAST USED",
        "PINNED",
    ] {
        assert!(lines[0].contains(column), "{column} in {}", lines[0]);
    }
    assert_eq!(lines.len(), 6);
    let b0b_line = lines[4];
    for cell in [
        "b0b0000000000",
        "100.0 MiB",
        "8h ago (2026-01-02T00:00:00Z)",
        "9h ago (2026-01-01T23:00:00Z)",
        "false",
    ] {
        assert!(b0b_line.contains(cell), "{cell} in {b0b_line}");
    }
    assert!(lines[1].contains("never"), "{}", lines[1]);
    assert!(lines[3].contains("kata"), "{}", lines[3]);
}

#[test]
fn show_finds_a_unique_prefix_and_refuses_ambiguous_or_unknown_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    // (prefix, exit code, shown ids or a stderr fragment)
    let cases: Vec<(&str, i32, &str)> = vec![
        ("b0b", 0, "b0b"),
        ("sha256:b0b", 0, "b0b"),
        ("aaa1", 0, "aaa1"),
        ("c0f", 0, "c0ffee/kata,c0ffee"),
        ("aaa", 1, "ambiguous, it matches: sha256:aaa1"),
        ("dead", 1, "no image id starts with \"dead\""),
        ("sha256:", 2, "the image id prefix is empty"),
    ];
    for (prefix, code, want) in cases {
        let r = inspect(&db, &["show", prefix, "--output", "json"]);
        assert_eq!(r.code, code, "{prefix}: {}", r.stderr);
        if code == 0 {
            assert_eq!(ids(&r.json(), "id").join(","), want, "{prefix}");
        } else {
            assert!(r.stderr.contains(want), "{prefix}: {}", r.stderr);
        }
    }
    let r = inspect(&db, &["show", "aaa"]);
    assert!(
        r.stderr.contains(&id("aaa2")),
        "lists every match: {}",
        r.stderr
    );
    let r = inspect(&db, &["show", "b0b"]);
    assert_eq!(r.code, 0);
    let id_line = format!("ID:              {}", id("b0b"));
    for line in [
        id_line.as_str(),
        "SIZE:            100.0 MiB (104857600 bytes)",
        "LAST USED:       8h ago (2026-01-02T00:00:00Z)",
        "PINNED:          false",
        "EVICTION RANK:   4 of 5",
    ] {
        assert!(r.stdout.contains(line), "{line} in {}", r.stdout);
    }
}

#[test]
fn backoff_lists_entries_with_go_durations() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let v = inspect(&db, &["backoff", "--output", "json"]).json();
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    assert_eq!(v[0]["key"], "uid-1_nginx:bad");
    assert_eq!(v[0]["backoff"], "20s");
    assert_eq!(v[0]["last_update"], "2026-01-02T07:59:30Z");
    assert_eq!(v[0]["last_error"], "ErrImagePull: not found");
    let t = inspect(&db, &["backoff"]);
    assert_eq!(t.code, 0);
    let lines: Vec<&str> = t.stdout.lines().collect();
    assert!(lines[0].starts_with("KEY") && lines[0].contains("LAST ERROR"));
    for cell in [
        "uid-1_nginx:bad",
        "20s",
        "30s ago",
        "ErrImagePull: not found",
    ] {
        assert!(lines[1].contains(cell), "{cell} in {}", lines[1]);
    }
}

#[test]
fn stats_count_records_and_show_meta() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let v = inspect(&db, &["stats", "--output", "json"]).json();
    assert_eq!(v["records"], 5);
    assert_eq!(v["pinned"], 1);
    assert_eq!(v["never_used"], 3);
    assert_eq!(v["backoff_entries"], 1);
    assert_eq!(
        v["total_size"],
        1536 + (50 << 20) + (100 << 20) + (20 << 20) + 10
    );
    let histogram: Vec<(String, u64)> = v["last_used_histogram"]
        .as_array()
        .expect("histogram")
        .iter()
        .map(|b| {
            (
                b["label"].as_str().unwrap_or_default().to_owned(),
                b["count"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = [
        ("<1h", 0),
        ("<1d", 2),
        ("<7d", 0),
        ("<30d", 0),
        ("older", 0),
        ("never", 3),
    ]
    .iter()
    .map(|(l, c)| ((*l).to_owned(), *c))
    .collect();
    assert_eq!(histogram, want);
    assert_eq!(v["meta"]["schema_version"], CURRENT_SCHEMA_VERSION);
    assert_eq!(v["meta"]["created_at"], "2026-01-01T22:00:00Z");
    assert_eq!(v["meta"]["agent_started_at"], "2026-01-01T22:00:00Z");
    assert_eq!(v["meta"]["last_detect"], "2026-01-02T06:00:00Z");
    let t = inspect(&db, &["stats"]);
    for line in [
        "records:          5",
        "never used:       3",
        "last detect:      2h ago (2026-01-02T06:00:00Z)",
        "schema version:   7",
    ] {
        assert!(t.stdout.contains(line), "{line} in {}", t.stdout);
    }
}

#[test]
fn export_writes_every_record_as_a_json_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    for output in ["json", "table"] {
        let r = inspect(&db, &["export", "--output", output]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let lines: Vec<Value> = r
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 5);
        let b0b = lines
            .iter()
            .find(|l| l["id"] == id("b0b"))
            .expect("b0b exported");
        assert_eq!(b0b["first_detected_unix_nanos"], at(NOW - 9 * HOUR).0);
        assert_eq!(b0b["first_detected"], "2026-01-01T23:00:00Z");
        assert_eq!(b0b["last_used_unix_nanos"], at(NOW - 8 * HOUR).0);
        assert_eq!(b0b["size"], 100 << 20);
        assert_eq!(b0b["pinned"], false);
        assert_eq!(b0b["runtime_handler"], "");
    }
}

#[test]
fn check_says_ok_on_a_sound_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let t = inspect(&db, &["check"]);
    assert_eq!((t.code, t.stdout.as_str()), (0, "ok\n"), "{}", t.stderr);
    let v = inspect(&db, &["check", "--output", "json"]).json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["needed_recovery"], false);
    assert_eq!(v["violations"], Value::Array(vec![]));
}

/// A file written while the clock was a year ahead: `check` reports each stamp later than its
/// `--now` by more than 10 minutes and the `last_detect` ahead of it (exit 1), and calls the
/// same file ok once `--now` has caught up.
#[test]
fn check_reports_stamps_in_the_future_and_a_last_detect_the_clock_went_back_from() {
    const YEAR: i64 = 365 * 24 * HOUR;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    {
        let store = Store::open(&db, at(NOW)).expect("open");
        let mut batch = Batch::new();
        batch.upsert(key("ahead", ""), record(NOW - HOUR, NOW + YEAR, 1, false));
        batch.upsert(key("near", ""), record(NOW + 600, NOW + 600, 1, false));
        batch.set_meta(meta_keys::LAST_DETECT, at(NOW + YEAR).0);
        store.apply(&batch).expect("apply");
    }
    let t = inspect(&db, &["check"]);
    assert_eq!(t.code, 1, "{}", t.stderr);
    let lines: Vec<&str> = t.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", t.stdout);
    assert!(
        lines[0].starts_with(&format!(
            "violation: record {}: last_used 2027-01-02T08:00:00Z",
            id("ahead")
        )),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with(
            "violation: last_detect 2027-01-02T08:00:00Z is later than now (2026-01-02T08:00:00Z)"
        ),
        "{}",
        lines[1]
    );
    let v = inspect(&db, &["check", "--output", "json"]).json();
    assert_eq!(v["ok"], false);
    assert_eq!(
        v["violations"][0]["violation"]["FutureStamp"]["field"],
        "last_used"
    );
    assert_eq!(
        v["violations"][1]["violation"]["LastDetectInFuture"]["last_detect"],
        at(NOW + YEAR).0
    );
    let later = (NOW + YEAR).to_string();
    let t = run(&["--db", db.to_str().expect("utf8"), "--now", &later, "check"]);
    assert_eq!((t.code, t.stdout.as_str()), (0, "ok\n"), "{}", t.stderr);
}

/// `--now` is a documented flag of every inspect command (it was hidden from `--help`), given
/// before or after the subcommand: a database stamped by a trace's (or a wrong clock's) times
/// is checked, counted and explained as of that time.
#[test]
fn now_is_a_documented_flag_of_check_stats_and_explain() {
    const YEAR: i64 = 365 * 24 * HOUR;
    for command in ["check", "stats", "explain"] {
        let r = run(&[command, "--help"]);
        assert_eq!(r.code, 0, "{command}: {}", r.stderr);
        assert!(
            r.stdout.contains("--now <TIME>") && r.stdout.contains("instead of the wall clock"),
            "{command} --help: {}",
            r.stdout
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let store = Store::open(&db, at(NOW + YEAR)).expect("open");
    let mut batch = Batch::new();
    batch.upsert(key("a", ""), record(NOW + YEAR, NOW + YEAR, 10, false));
    batch.set_meta(meta_keys::LAST_DETECT, at(NOW + YEAR).0);
    batch.set_meta(meta_keys::HEARTBEAT, at(NOW + YEAR).0);
    store.apply(&batch).expect("apply");
    drop(store);
    let db_arg = db.to_str().expect("utf8");
    // At the wall clock the stamps are a year in the future; at the trace's time they are not.
    let wall = run(&["--db", db_arg, "check"]);
    assert_eq!(wall.code, 1, "{}", wall.stdout);
    let then = "2027-01-02T08:00:00Z";
    let t = run(&["--db", db_arg, "check", "--now", then]);
    assert_eq!((t.code, t.stdout.as_str()), (0, "ok\n"), "{}", t.stderr);
    let t = run(&["--db", db_arg, "stats", "--now", then, "--output", "json"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(t.json()["meta"]["heartbeat"], then, "{}", t.stdout);
    let t = run(&["--db", db_arg, "explain", "--now", then, "--output", "json"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(
        t.json()["images"][0]["decision"],
        "keep_in_use",
        "{}",
        t.stdout
    );
}

#[test]
fn explain_says_why_each_image_stays_or_goes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let decisions = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["explain", "--output", "json"];
        all.extend_from_slice(args);
        let r = inspect(&db, &all);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        r.json()["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| i["decision"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    // Eviction order: aaa1, aaa2 (pinned), c0ffee/kata (60s old), b0b, c0ffee (in use).
    let cases: Vec<(&[&str], [&str; 5])> = vec![
        (
            &[],
            [
                "keep_space_not_evaluated",
                "keep_pinned",
                "keep_younger_than_min_age",
                "keep_space_not_evaluated",
                "keep_in_use",
            ],
        ),
        (
            &["--max-age", "8h30m"],
            [
                "remove_for_age",
                "keep_pinned",
                "keep_younger_than_min_age",
                "keep_space_not_evaluated",
                "keep_in_use",
            ],
        ),
        (
            // 1 GiB, 100 MiB available: 91% used; free 104.8 MiB: aaa1 and b0b.
            &["--capacity", "1073741824", "--available", "104857600"],
            [
                "remove_for_space",
                "keep_pinned",
                "keep_younger_than_min_age",
                "remove_for_space",
                "keep_in_use",
            ],
        ),
        (
            &["--capacity", "1073741824", "--available", "904857600"],
            [
                "keep_below_high_threshold",
                "keep_pinned",
                "keep_younger_than_min_age",
                "keep_below_high_threshold",
                "keep_in_use",
            ],
        ),
        (
            &["--high", "100", "--capacity", "100", "--available", "0"],
            ["keep_gc_disabled"; 5],
        ),
    ];
    for (args, want) in cases {
        assert_eq!(decisions(args), want, "{args:?}");
    }
    let t = inspect(&db, &["explain"]);
    assert!(
        t.stdout
            .contains("space pass:  not evaluated (give --capacity and --available"),
        "{}",
        t.stdout
    );
    let header = t
        .stdout
        .lines()
        .find(|l| l.starts_with("RANK"))
        .unwrap_or_default();
    for column in ["IMAGE ID", "SIZE", "LAST USED", "REMOVE", "WHY"] {
        assert!(header.contains(column), "{column} in {header}");
    }
    for why in [
        "pinned",
        "in use at the last detect (2026-01-02T06:00:00Z)",
        "first detected 1m0s ago, younger than MinAge 2m0s",
    ] {
        assert!(t.stdout.contains(why), "{why} in {}", t.stdout);
    }
}

#[test]
fn bad_flag_values_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let cases: Vec<(&[&str], &str)> = vec![
        (
            &["explain", "--high", "101"],
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
        ),
        (&["explain", "--high", "101"], "--high"),
        (
            &["explain", "--low", "90"],
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85",
        ),
        (
            &["explain", "--low", "-1"],
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100, inclusive",
        ),
        (&["explain", "--min-age", "2x"], "--min-age"),
        (
            &["explain", "--min-age", "2x"],
            "unknown unit \"x\" in duration \"2x\"",
        ),
        (
            &["explain", "--max-age", "5"],
            "missing unit in duration \"5\"",
        ),
        (&["explain", "--max-age=-1h"], "--max-age"),
        (
            &["explain", "--max-age", "1m"],
            "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
        ),
        (&["explain", "--capacity", "100"], "--available"),
        (
            &["explain", "--capacity", "0", "--available", "0"],
            "--capacity",
        ),
        (
            &["explain", "--capacity", "lots", "--available", "0"],
            "--capacity",
        ),
        (&["list", "--sort", "name"], "--sort"),
        (&["list", "--output", "xml"], "--output"),
        (&["list", "--now", "yesterday"], "--now"),
    ];
    for (args, want) in cases {
        let r = inspect(&db, args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(want),
            "{args:?}: want {want:?} in {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
}

#[test]
fn bad_files_are_clear_errors_naming_the_path_for_every_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = example_db(dir.path());
    let good_bytes = std::fs::read(&good).expect("read");
    let newer = dir.path().join("newer.redb");
    {
        let store = Store::open(&newer, at(NOW)).expect("open");
        let mut batch = Batch::new();
        batch.set_meta(meta_keys::SCHEMA_VERSION, CURRENT_SCHEMA_VERSION + 1);
        store.apply(&batch).expect("apply");
    }
    let mut files: Vec<(&str, PathBuf, &str)> = vec![
        ("missing", dir.path().join("missing.redb"), "does not exist"),
        (
            "newer schema",
            newer,
            "schema version 8, newer than version 7",
        ),
    ];
    let written: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage",
            b"this is not a database at all, just some text\n".repeat(200),
            "",
        ),
        ("empty", Vec::new(), "the file is empty"),
        ("tiny", b"x".to_vec(), "only 1 bytes long"),
        (
            "truncated",
            good_bytes[..300].to_vec(),
            "only 300 bytes long",
        ),
        (
            "truncated half",
            good_bytes[..good_bytes.len() / 2].to_vec(),
            "",
        ),
    ];
    for (name, bytes, want) in written {
        let path = dir.path().join(format!("{}.redb", name.replace(' ', "-")));
        std::fs::write(&path, bytes).expect("write");
        files.push((name, path, want));
    }
    let commands: Vec<&[&str]> = vec![
        &["list"],
        &["show", "b0b"],
        &["backoff"],
        &["stats"],
        &["explain"],
        &["check"],
        &["export"],
    ];
    for (name, path, want) in &files {
        for command in &commands {
            let r = inspect(path, command);
            let shown = path.display().to_string();
            if *name == "truncated half" && r.code == 0 {
                // redb may find the tail it needs is gone or may not need it; either way no
                // panic and no change to the file (checked by `inspect`).
                continue;
            }
            assert_ne!(r.code, 0, "{name} {command:?}: {}", r.stdout);
            assert!(
                r.stderr.contains(&shown) && r.stderr.contains(want),
                "{name} {command:?}: want {shown} and {want:?} in {}",
                r.stderr
            );
        }
        if *name == "missing" {
            assert!(!path.exists(), "inspect must not create a missing file");
        }
    }
}

/// The test binary run again as a child process that holds the store open read-write: it runs
/// the real test [`WRITER_TEST`], which turns into [`writer_child`] when IMAGEKEEPER_IT_WRITER_DB
/// is set (a helper that is not counted as a test of its own).
struct Writer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

const WRITER_ENV: &str = "IMAGEKEEPER_IT_WRITER_DB";
/// The test whose process becomes the writer child when [`WRITER_ENV`] is set.
const WRITER_TEST: &str =
    "inspect::reads_beside_a_live_writer_and_a_repaired_copy_after_it_is_killed";

impl Writer {
    fn start(db: &Path) -> Writer {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([WRITER_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(WRITER_ENV, db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the writer");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut writer = Writer {
            child,
            stdin,
            lines,
        };
        writer.wait_for("committed 1");
        writer
    }

    /// Waits, with a deadline, for the child to print `want`.
    fn wait_for(&mut self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.ends_with(want) => return,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("writer never said {want:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("writer exited before saying {want:?}")
                }
            }
        }
    }

    /// Asks the child to commit one more record.
    fn commit_more(&mut self) {
        writeln!(self.stdin, "more").expect("tell the writer");
        self.stdin.flush().expect("flush");
        self.wait_for("committed 2");
    }

    /// SIGKILLs the child: the file is left as a crash leaves it.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL the writer");
        self.child.wait().expect("reap the writer");
    }
}

impl Drop for Writer {
    /// A test that fails (panics) while its writer runs takes the writer down with it.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The writer child's whole life (see [`Writer`]): it runs inside the test binary started
/// again on [`WRITER_TEST`] with [`WRITER_ENV`] set, so no `#[test]` exists only to host it.
fn writer_child(db: &std::ffi::OsStr) {
    let store = Store::open(Path::new(&db), at(NOW)).expect("child: open read-write");
    let mut batch = Batch::new();
    batch.upsert(key("1111", ""), record(NOW - HOUR, NOW - 30, 4096, false));
    batch.set_meta(meta_keys::LAST_DETECT, at(NOW - 30).0);
    store.apply(&batch).expect("child: apply");
    println!("committed 1");
    let (tx, commands) = channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Ok(command) = commands.recv() {
        if command == "burst" {
            let commits = gc_burst(&store, &commands);
            println!("stopped after {commits} commits");
            continue;
        }
        let mut batch = Batch::new();
        batch.upsert(key("2222", ""), record(NOW - HOUR, 0, 8192, false));
        store.apply(&batch).expect("child: apply");
        println!("committed 2");
    }
}

/// Commits as a GC burst does, back to back, until `stop` arrives: each commit removes the
/// `CHURN` oldest of `LIVE` records and records as many new ones (freeing and reusing pages),
/// and moves the last detect. Backoff entries it never touches make the file tens of MiB, so
/// that copying it takes as long as many commits. Returns how many commits it made.
fn gc_burst(store: &Store, commands: &Receiver<String>) -> u64 {
    const LIVE: u64 = 400;
    const CHURN: u64 = 40;
    for chunk in 0..8 {
        let mut batch = Batch::new();
        for n in 0..256 {
            batch.put_backoff(
                format!("pod-{chunk}-{n}_app:1"),
                BackoffEntry {
                    backoff: Duration::from_secs(10),
                    last_update: at(NOW - 60),
                    last_error: format!("pull failed: {}", "e".repeat(16 << 10)),
                },
            );
        }
        store.apply(&batch).expect("child: apply");
    }
    let mut batch = Batch::new();
    for n in 0..LIVE {
        batch.upsert(key(&format!("b{n:x}"), ""), record(NOW - HOUR, 0, n, false));
    }
    store.apply(&batch).expect("child: apply");
    let mut commits = 9u64;
    println!("bursting");
    let mut next = LIVE;
    // Until `stop`, or until the test that started it is gone (its stdin closed): a writer
    // orphaned by a failed test once committed back to back for over an hour.
    while matches!(
        commands.try_recv(),
        Err(std::sync::mpsc::TryRecvError::Empty)
    ) {
        let mut batch = Batch::new();
        for n in next - LIVE..next - LIVE + CHURN {
            batch.remove(key(&format!("b{n:x}"), ""));
        }
        for n in next..next + CHURN {
            batch.upsert(
                key(&format!("b{n:x}"), ""),
                record(NOW - HOUR, NOW - 60, n, false),
            );
        }
        batch.set_meta(meta_keys::LAST_DETECT, at(NOW - 60).0 + commits as i64);
        store.apply(&batch).expect("child: apply");
        next += CHURN;
        commits += 1;
    }
    commits
}

/// `inspect check` used to copy the file with `fs::copy` while a writer committed, and called
/// the torn copy corrupt (53 of 233 runs in GC bursts). Every command, run again and again
/// while the writer commits back to back, must see a healthy database.
#[test]
fn inspect_beside_a_writer_in_a_gc_burst_never_calls_the_database_corrupt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let mut writer = Writer::start(&db);
    writeln!(writer.stdin, "burst").expect("tell the writer");
    writer.stdin.flush().expect("flush");
    writer.wait_for("bursting");
    let db_arg = db.to_str().expect("utf8 path");
    let commands: [&[&str]; 4] = [
        &["check"],
        &["check", "--output", "json"],
        &["export"],
        &["stats", "--output", "json"],
    ];
    let runs = 24;
    let mut failed = Vec::new();
    let mut retried = 0;
    for i in 0..runs {
        let command = commands[i % commands.len()];
        let mut args = vec!["--db", db_arg];
        args.extend_from_slice(command);
        let r = run(&args);
        let healthy = r.code == 0
            && !r.stderr.contains("corrupt")
            && (command[0] != "check" || r.stdout.contains("ok"));
        if !healthy {
            failed.push(format!(
                "run {i} {command:?}: exit {}: {}",
                r.code, r.stderr
            ));
        }
        retried += usize::from(r.stderr.contains("changed while it was being copied"));
    }
    writeln!(writer.stdin, "stop").expect("tell the writer");
    writer.stdin.flush().expect("flush");
    let deadline = Instant::now() + Duration::from_secs(60);
    let commits = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = writer.lines.recv_timeout(left).expect("the writer stops");
        if let Some(n) = line
            .strip_prefix("stopped after ")
            .and_then(|rest| rest.strip_suffix(" commits"))
        {
            break n.parse::<u64>().expect("a count");
        }
    };
    writer.kill();
    eprintln!(
        "{runs} inspect runs beside {commits} back-to-back commits; {retried} took a copy again"
    );
    assert!(
        failed.is_empty(),
        "{} of {runs} runs called a healthy database bad:\n{}",
        failed.len(),
        failed.join("\n")
    );
    assert!(
        commits > runs as u64,
        "the writer committed throughout: {commits}"
    );
}

fn listed(db: &Path) -> (Vec<String>, String) {
    let r = inspect(db, &["list", "--output", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    (ids(&r.json(), "id"), r.stderr)
}

#[test]
fn reads_beside_a_live_writer_and_a_repaired_copy_after_it_is_killed() {
    if let Some(db) = std::env::var_os(WRITER_ENV) {
        return writer_child(&db);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let mut writer = Writer::start(&db);

    // Beside the live writer: every command works and sees its commits.
    let (seen, stderr) = listed(&db);
    assert_eq!(seen, ["1111"]);
    assert!(stderr.is_empty(), "{stderr}");
    writer.commit_more();
    assert_eq!(listed(&db).0, ["2222", "1111"]);
    for command in [
        &["stats"][..],
        &["backoff"],
        &["explain"],
        &["export"],
        &["show", "1111"],
    ] {
        let r = inspect(&db, command);
        assert_eq!(r.code, 0, "{command:?} beside the writer: {}", r.stderr);
    }
    let r = inspect(&db, &["explain", "--output", "json"]);
    assert_eq!(r.json()["images"][1]["decision"], "keep_in_use");

    // Killed mid-life: the file needs recovery; inspect reads a repaired copy and says so.
    writer.kill();
    let needs_recovery = Store::open_read_only(&db).err().map(|e| e.to_string());
    assert!(
        needs_recovery
            .as_deref()
            .is_some_and(|e| e.contains("needs recovery")),
        "a killed writer leaves a file that needs recovery: {needs_recovery:?}"
    );
    let (seen, stderr) = listed(&db);
    assert_eq!(seen, ["2222", "1111"], "every commit survives the crash");
    assert!(
        stderr
            .contains("needs recovery; showing a repaired copy, the file itself was not modified"),
        "{stderr}"
    );
    assert!(stderr.contains(db.to_str().expect("utf8")), "{stderr}");
    for command in [
        &["stats"][..],
        &["backoff"],
        &["explain"],
        &["export"],
        &["show", "2222"],
        &["check"],
    ] {
        let r = inspect(&db, command);
        assert_eq!(r.code, 0, "{command:?} after the crash: {}", r.stderr);
        assert!(
            r.stderr.contains("needs recovery"),
            "{command:?}: {}",
            r.stderr
        );
    }
    let reopened = Store::open_read_only(&db);
    assert!(
        matches!(&reopened, Err(StoreError::NeedsRecovery { path }) if path == &db),
        "the file itself is still unrepaired: {:?}",
        reopened.err()
    );
}

/// One GarbageCollect scenario: records (hex id, first detected and last used as seconds
/// before NOW, 0 = never used, size, pinned, in use at the last detect).
struct Scenario {
    name: &'static str,
    records: Vec<(&'static str, i64, i64, u64, bool, bool)>,
    policy: GcPolicy,
    capacity: u64,
    available: u64,
}

fn policy(high: i64, low: i64, min_age: u64, max_age: u64) -> GcPolicy {
    GcPolicy {
        high_threshold_percent: high,
        low_threshold_percent: low,
        min_age: Duration::from_secs(min_age),
        max_age: Duration::from_secs(max_age),
        ..GcPolicy::default()
    }
}

fn scenarios() -> Vec<Scenario> {
    let records = vec![
        ("01d", 9 * HOUR, 0, 60, false, false),
        ("02d", 9 * HOUR, 8 * HOUR, 50, false, false),
        ("03", 9 * HOUR, 7 * HOUR, 500, true, false),
        ("04", 9 * HOUR, 30 * 60, 100, false, true),
        ("05", 60, 0, 40, false, false),
        ("06", 9 * HOUR, 3 * HOUR, 30, false, false),
        ("07", 9 * HOUR, 2 * HOUR, 70, false, false),
    ];
    vec![
        Scenario {
            name: "90% used: frees 100 bytes, two images",
            records: records.clone(),
            policy: GcPolicy::default(),
            capacity: 1000,
            available: 100,
        },
        Scenario {
            name: "100% used: not enough eligible bytes",
            records: records.clone(),
            policy: GcPolicy::default(),
            capacity: 1000,
            available: 0,
        },
        Scenario {
            name: "below the high threshold: nothing",
            records: records.clone(),
            policy: GcPolicy::default(),
            capacity: 1000,
            available: 600,
        },
        Scenario {
            name: "MaxAge 4h, then space with what it freed",
            records: records.clone(),
            policy: policy(85, 80, 120, 4 * 3600),
            capacity: 1000,
            available: 50,
        },
        Scenario {
            name: "MaxAge 1h alone",
            records: records.clone(),
            policy: policy(85, 80, 0, 3600),
            capacity: 1000,
            available: 900,
        },
        Scenario {
            // The smallest valid thresholds (low must be below high, as the kubelet's
            // config validation says): 1 % used, 10 bytes to free, met by the first eligible.
            name: "a few bytes to free still removes the first eligible",
            records: records.clone(),
            policy: policy(1, 0, 0, 0),
            capacity: 1000,
            available: 990,
        },
        Scenario {
            name: "GC disabled",
            records,
            policy: policy(100, 80, 120, 0),
            capacity: 1000,
            available: 0,
        },
    ]
}

#[test]
fn explain_removes_exactly_what_the_real_manager_removes() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    for s in scenarios() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("records.redb");
        let last_detect = NOW - 30 * 60;
        {
            let store = Store::open(&db, at(NOW - 10 * HOUR)).expect("open");
            let mut batch = Batch::new();
            for &(hex, first, last, size, pinned, in_use) in &s.records {
                let last_used = if in_use {
                    last_detect
                } else if last == 0 {
                    0
                } else {
                    NOW - last
                };
                batch.upsert(key(hex, ""), record(NOW - first, last_used, size, pinned));
            }
            batch.set_meta(meta_keys::LAST_DETECT, at(last_detect).0);
            store.apply(&batch).expect("apply");
        }

        // What explain says, through the CLI.
        let p = &s.policy;
        let (high, low) = (
            p.high_threshold_percent.to_string(),
            p.low_threshold_percent.to_string(),
        );
        let (min_age, max_age) = (
            format!("{}s", p.min_age.as_secs()),
            format!("{}s", p.max_age.as_secs()),
        );
        let (capacity, available) = (s.capacity.to_string(), s.available.to_string());
        let r = inspect(
            &db,
            &[
                "explain",
                "--output",
                "json",
                "--high",
                &high,
                "--low",
                &low,
                "--min-age",
                &min_age,
                "--max-age",
                &max_age,
                "--capacity",
                &capacity,
                "--available",
                &available,
            ],
        );
        assert_eq!(r.code, 0, "{}: {}", s.name, r.stderr);
        let v = r.json();
        let explained: BTreeSet<String> = v["images"]
            .as_array()
            .expect("images")
            .iter()
            .filter(|i| i["remove"] == true)
            .map(|i| i["id"].as_str().unwrap_or_default().to_owned())
            .collect();
        let sufficient = v["space_pass"]["sufficient"].as_bool().unwrap_or(true);

        // What the manager does, on the same file.
        let runtime = ScriptedRuntime::new();
        {
            let mut state = runtime.state();
            for &(hex, _, _, size, pinned, in_use) in &s.records {
                state.images.push(RuntimeImage {
                    id: ImageId::new(id(hex)),
                    size,
                    pinned,
                    ..RuntimeImage::default()
                });
                if in_use {
                    state.containers.push(RuntimeContainer {
                        id: format!("c-{hex}"),
                        pod_sandbox_id: "pod".to_owned(),
                        image: hex.to_owned(),
                        image_id: ImageId::new(id(hex)),
                        state: ContainerState::Running,
                        runtime_handler: String::new(),
                    });
                }
            }
            state.fs = Some((s.capacity, s.available));
        }
        let store = Arc::new(Store::open(&db, at(NOW)).expect("reopen"));
        let config = GcConfig {
            policy: s.policy,
            ..GcConfig::default()
        };
        let manager = ImageGcManager::new(runtime, store, config).expect("manager");
        let report = rt.block_on(manager.garbage_collect(at(NOW)));
        let removed: BTreeSet<String> = report
            .removed
            .iter()
            .map(|r| r.key.image_id.0.clone())
            .collect();
        assert_eq!(explained, removed, "{}", s.name);
        assert_eq!(
            sufficient,
            report.error.is_none(),
            "{}: {:?}",
            s.name,
            report.error.map(|e| e.to_string())
        );
    }
}

/// Every subcommand, as `inspect` takes them.
const EVERY_SUBCOMMAND: [&[&str]; 7] = [
    &["list"],
    &["show", "b0b"],
    &["backoff"],
    &["stats"],
    &["explain"],
    &["check"],
    &["export"],
];

/// Runs `imagekeeper inspect --db DB ARGS` with a deadline: a run that hangs is SIGKILLed and
/// fails the test.
fn run_with_deadline(db: &Path, args: &[&str]) -> Run {
    let out = bin::output(
        bin::imagekeeper()
            .arg("inspect")
            .arg("--db")
            .arg(db)
            .args(args),
    );
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn a_fifo_device_socket_or_directory_is_refused_naming_its_type_never_opened_or_waited_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = example_db(dir.path());
    let fifo = dir.path().join("fifo.redb");
    let c_path = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("no NUL");
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    let socket = dir.path().join("socket.redb");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let directory = dir.path().join("directory.redb");
    std::fs::create_dir(&directory).expect("mkdir");
    let link_to_fifo = dir.path().join("link-to-fifo.redb");
    std::os::unix::fs::symlink(&fifo, &link_to_fifo).expect("symlink");
    let mut cases: Vec<(PathBuf, &str)> = vec![
        (fifo.clone(), "FIFO (named pipe)"),
        (link_to_fifo, "FIFO (named pipe)"),
        (socket, "socket"),
        (directory, "directory"),
    ];
    if Path::new("/dev/null").exists() {
        cases.push((PathBuf::from("/dev/null"), "character device"));
    }
    for (path, kind) in &cases {
        for command in EVERY_SUBCOMMAND {
            let r = run_with_deadline(path, command);
            let want = format!(
                "database {} is a {kind}, not a regular file",
                path.display()
            );
            assert_eq!(r.code, 2, "{} {command:?}: {}", path.display(), r.stderr);
            assert!(r.stderr.contains(&want), "want {want:?} in {}", r.stderr);
            assert!(r.stdout.is_empty(), "{command:?}: {}", r.stdout);
        }
    }
    use std::os::unix::fs::FileTypeExt;
    let still = std::fs::symlink_metadata(&fifo).expect("the FIFO is still there");
    assert!(still.file_type().is_fifo(), "the FIFO was left as it is");

    // A symlink to a regular database is followed.
    let link_to_db = dir.path().join("link-to-db.redb");
    std::os::unix::fs::symlink(&good, &link_to_db).expect("symlink");
    let r = run_with_deadline(&link_to_db, &["list", "--output", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json().as_array().map(Vec::len), Some(5));
    assert!(
        std::fs::symlink_metadata(&link_to_db)
            .expect("link")
            .file_type()
            .is_symlink(),
        "the link is still a link"
    );
}

/// No character that could drive a terminal: controls other than the line ends, and the
/// bidirectional overrides.
fn terminal_safe(text: &str) -> bool {
    !text
        .chars()
        .any(|c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c))
}

#[test]
fn table_output_escapes_terminal_control_characters_and_json_keeps_them_exact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let evil_id = "sha256:\u{1b}[31mred\u{7}\u{1b}]0;title\u{7}";
    let evil_handler = "kata\u{1b}[2J";
    let evil_key = "uid\u{1b}[2J_nginx:\u{9b}1";
    let evil_error = "line one\nline two\r\u{1b}[0m\u{202e}txt.exe";
    {
        let store = Store::open(&db, at(NOW - HOUR)).expect("open");
        let mut batch = Batch::new();
        batch.upsert(
            RecordKey::new(evil_id, evil_handler),
            record(NOW - HOUR, NOW - 60, 10, false),
        );
        batch.upsert(
            RecordKey::new("sha256:\u{1b}[32mgreen", ""),
            record(NOW - HOUR, 0, 20, false),
        );
        batch.put_backoff(
            evil_key.to_owned(),
            BackoffEntry {
                backoff: Duration::from_secs(10),
                last_update: at(NOW - 30),
                last_error: evil_error.to_owned(),
            },
        );
        store.apply(&batch).expect("apply");
    }
    let tables: Vec<Vec<&str>> = vec![
        vec!["list"],
        vec!["show", evil_id],
        vec!["backoff"],
        vec!["explain"],
        vec!["stats"],
        vec!["check"],
    ];
    for args in &tables {
        let r = inspect(&db, args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert!(terminal_safe(&r.stdout), "{args:?}: {:?}", r.stdout);
    }
    let backoff = inspect(&db, &["backoff"]).stdout;
    for shown in [
        "uid\\u{1b}[2J_nginx:\\u{9b}1",
        "line one\\nline two\\r\\u{1b}[0m\\u{202e}txt.exe",
    ] {
        assert!(backoff.contains(shown), "{shown} in {backoff}");
    }
    let show = inspect(&db, &["show", evil_id]).stdout;
    assert!(
        show.contains("sha256:\\u{1b}[31mred\\u{7}\\u{1b}]0;title\\u{7}"),
        "{show}"
    );
    assert!(show.contains("kata\\u{1b}[2J"), "{show}");

    // An error that lists ids from the file escapes them too.
    let r = inspect(&db, &["show", "\u{1b}"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("ambiguous"), "{}", r.stderr);
    assert!(terminal_safe(&r.stderr), "{:?}", r.stderr);

    // JSON is exact.
    let v = inspect(&db, &["backoff", "--output", "json"]).json();
    assert_eq!(v[0]["key"], evil_key);
    assert_eq!(v[0]["last_error"], evil_error);
    let v = inspect(&db, &["show", evil_id, "--output", "json"]).json();
    assert_eq!(v[0]["id"], evil_id);
    assert_eq!(v[0]["runtime_handler"], evil_handler);
    let export = inspect(&db, &["export"]).stdout;
    let first: Value =
        serde_json::from_str(export.lines().next().unwrap_or_default()).expect("a JSON line");
    assert_eq!(first["id"], evil_id);
}

/// The directory's entries and, for each, its bytes and modification time.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|e| {
            let e = e.expect("entry");
            let meta = e.metadata().expect("metadata");
            let bytes = if meta.is_file() {
                std::fs::read(e.path()).expect("read")
            } else {
                Vec::new()
            };
            (
                e.file_name().to_string_lossy().into_owned(),
                bytes,
                meta.modified().expect("mtime"),
            )
        })
        .collect();
    entries.sort();
    entries
}

#[test]
fn inspect_creates_and_changes_nothing_for_every_subcommand() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A sound file, one a killed writer left needing recovery, and one with a flipped byte.
    let sound = dir.path().join("sound");
    std::fs::create_dir(&sound).expect("mkdir");
    example_db(&sound);
    let crashed = dir.path().join("crashed");
    std::fs::create_dir(&crashed).expect("mkdir");
    let writer = Writer::start(&crashed.join("records.redb"));
    writer.kill();
    let damaged = dir.path().join("damaged");
    std::fs::create_dir(&damaged).expect("mkdir");
    let mut bytes = std::fs::read(sound.join("records.redb")).expect("read");
    let last = bytes.iter().rposition(|b| *b != 0).expect("non-zero bytes");
    bytes[last] ^= 0x5a;
    std::fs::write(damaged.join("records.redb"), bytes).expect("write");
    let now = NOW.to_string();
    for folder in [&sound, &crashed, &damaged] {
        let db = folder.join("records.redb");
        for command in EVERY_SUBCOMMAND {
            for output in ["table", "json"] {
                let before = tree(folder);
                let mut args = vec!["--now", &now, "--output", output];
                args.extend_from_slice(command);
                let r = run_with_deadline(&db, &args);
                assert!(r.code <= 1, "{command:?}: {}", r.stderr);
                assert!(
                    tree(folder) == before,
                    "{} {command:?} --output {output} changed or created something in {}",
                    db.display(),
                    folder.display()
                );
            }
        }
    }

    // A missing database, in a missing directory: nothing is created.
    let missing = dir.path().join("not-yet").join("records.redb");
    for command in EVERY_SUBCOMMAND {
        let r = run_with_deadline(&missing, command);
        assert_eq!(r.code, 1, "{command:?}: {}", r.stderr);
        assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
        assert!(
            !dir.path().join("not-yet").exists(),
            "{command:?} created the directory"
        );
    }
}

/// Writes a kubelet image pull record file (KEP-2535 format) named as the kubelet names it.
fn write_kubelet_record(root: &Path, dir: &str, key: &str, json: &str) {
    let dir = root.join("image_manager").join(dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join(imagekeeper::kubelet::record_file_name(key)), json).expect("write");
}

#[test]
fn explain_reads_the_kubelets_pull_intents_and_pulled_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let kubelet = tempfile::tempdir().expect("temp dir");
    let root = kubelet.path().to_str().expect("utf8").to_owned();
    let intent = |image: &str| {
        format!(
            r#"{{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"{image}"}}"#
        )
    };
    write_kubelet_record(kubelet.path(), "pulling", &id("aaa1"), &intent(&id("aaa1")));
    write_kubelet_record(kubelet.path(), "pulling", "nginx:1", &intent("nginx:1"));
    let b0b = id("b0b");
    write_kubelet_record(
        kubelet.path(),
        "pulled",
        &b0b,
        &format!(
            r#"{{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2026-01-02T07:00:00Z","imageRef":"{b0b}","credentialMapping":{{}}}}"#
        ),
    );
    let r = inspect(
        &db,
        &["explain", "--output", "json", "--kubelet-root-dir", &root],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("the kubelet is pulling \"nginx:1\""),
        "{}",
        r.stderr
    );
    let v = r.json();
    let images = v["images"].as_array().expect("images");
    let rows: Vec<(String, &str)> = images
        .iter()
        .map(|i| {
            (
                ids(&Value::Array(vec![i.clone()]), "id").remove(0),
                i["decision"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    // b0b's pulled record (an hour ago) puts it after c0ffee (two hours ago).
    assert_eq!(
        rows,
        [
            ("aaa1".to_owned(), "keep_kubelet_pulling"),
            ("aaa2".to_owned(), "keep_pinned"),
            ("c0ffee/kata".to_owned(), "keep_younger_than_min_age"),
            ("c0ffee".to_owned(), "keep_in_use"),
            ("b0b".to_owned(), "keep_space_not_evaluated"),
        ]
    );
    let b0b_row = images.iter().find(|i| i["id"] == b0b).expect("b0b");
    assert_eq!(b0b_row["kubelet_pulled_at"], "2026-01-02T07:00:00Z");
    assert!(
        b0b_row["reason"]
            .as_str()
            .is_some_and(|r| r.contains("used by a kubelet pull record")),
        "{b0b_row}"
    );
    let aaa1 = &images[0]["reason"];
    assert!(
        aaa1.as_str()
            .is_some_and(|r| r.contains("the kubelet is pulling it")),
        "{aaa1}"
    );

    // An empty root reads nothing.
    let off = inspect(
        &db,
        &["explain", "--output", "json", "--kubelet-root-dir", ""],
    );
    assert_eq!(off.code, 0, "{}", off.stderr);
    assert_eq!(
        off.json()["images"][0]["decision"],
        "keep_space_not_evaluated"
    );
}

/// The kubelet's observed preloaded records (kubelet master `image_manager/observed-preloaded/`,
/// pkg/kubelet/images/pullmanager/fs_pullrecords.go): explain shows their names on the image
/// (`kubelet_preloaded`; `kubeletPreloaded` in the kube lists; the reason in the table) and
/// counts them as no use: the order and every decision are those without the record. A
/// damaged record file is skipped.
#[test]
fn explain_shows_the_kubelets_observed_preloaded_records_and_counts_them_as_no_use() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let kubelet = tempfile::tempdir().expect("temp dir");
    let root = kubelet.path().to_str().expect("utf8").to_owned();
    let decisions = |r: &Run| -> Vec<(String, String)> {
        r.json()["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| {
                (
                    i["id"].as_str().unwrap_or_default().to_owned(),
                    i["decision"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let explain = |format: &str| {
        let r = inspect(
            &db,
            &["explain", "--output", format, "--kubelet-root-dir", &root],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        r
    };
    let without = decisions(&explain("json"));

    let b0b = id("b0b");
    write_kubelet_record(
        kubelet.path(),
        "observed-preloaded",
        &b0b,
        &format!(
            r#"{{"kind":"ImagePreloadedRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"{b0b}","observedImages":{{"registry.example/app":{{}}}}}}"#
        ),
    );
    let damaged = kubelet
        .path()
        .join("image_manager/observed-preloaded/sha256-00");
    std::fs::write(&damaged, b"{").expect("write");
    let r = explain("json");
    assert_eq!(decisions(&r), without, "the record changes no decision");
    let v = r.json();
    let images = v["images"].as_array().expect("images");
    let b0b_row = images.iter().find(|i| i["id"] == b0b).expect("b0b");
    assert_eq!(
        b0b_row["kubelet_preloaded"],
        serde_json::json!(["registry.example/app"])
    );
    assert!(b0b_row.get("kubelet_pulled_at").is_none(), "{b0b_row}");
    assert!(
        b0b_row["reason"]
            .as_str()
            .is_some_and(|r| r
                .contains("the kubelet saw it preloaded (as \"registry.example/app\"): not a use")),
        "{b0b_row}"
    );
    assert!(
        images
            .iter()
            .filter(|i| i["id"] != b0b)
            .all(|i| i.get("kubelet_preloaded").is_none()),
        "only b0b has the field"
    );
    let table = explain("wide").stdout;
    assert!(table.contains("the kubelet saw it preloaded"), "{table}");
    let list = explain("kube-json").stdout;
    assert!(
        list.contains(r#""kubeletPreloaded":["registry.example/app"]"#)
            || list.contains(r#""kubeletPreloaded": ["#),
        "{list}"
    );
}

/// An intent older than kubeletIntentMaxAge (its file's mtime against --now) keeps
/// nothing: explain says so on stderr, in the table's summary and in the JSON.
#[test]
fn explain_shows_a_stale_pull_intent_and_does_not_keep_its_image() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let kubelet = tempfile::tempdir().expect("temp dir");
    let root = kubelet.path().to_str().expect("utf8").to_owned();
    let aaa1 = id("aaa1");
    write_kubelet_record(
        kubelet.path(),
        "pulling",
        &aaa1,
        &format!(
            r#"{{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"{aaa1}"}}"#
        ),
    );
    let file = kubelet
        .path()
        .join("image_manager/pulling")
        .join(imagekeeper::kubelet::record_file_name(&aaa1));
    let set_written = |secs_before_now: u64| {
        let at = std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::from_secs(
                u64::try_from(NOW).expect("positive") - secs_before_now,
            );
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(at))
            .expect("set mtime");
    };
    let decision = |r: &Run| {
        let v = r.json();
        let images = v["images"].as_array().expect("images").clone();
        images
            .iter()
            .find(|i| i["id"] == aaa1)
            .map(|i| i["decision"].as_str().unwrap_or_default().to_owned())
    };
    let args = ["explain", "--output", "json", "--kubelet-root-dir", &root];
    // Written an hour ago: the kubelet is pulling it.
    set_written(3_600);
    let r = inspect(&db, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(decision(&r).as_deref(), Some("keep_kubelet_pulling"));
    assert!(r.json().get("stale_kubelet_intents").is_none());
    // Written 48 hours ago: stale.
    set_written(48 * 3_600);
    let r = inspect(&db, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_ne!(decision(&r).as_deref(), Some("keep_kubelet_pulling"));
    assert!(
        r.stderr
            .contains("written 48h0m0s ago, more than kubeletIntentMaxAge 24h0m0s"),
        "{}",
        r.stderr
    );
    assert_eq!(r.json()["stale_kubelet_intents"][0]["image"], aaa1.as_str());
    // A longer max age keeps it again.
    let r = inspect(
        &db,
        &[
            "explain",
            "--output",
            "json",
            "--kubelet-root-dir",
            &root,
            "--kubelet-intent-max-age",
            "72h",
        ],
    );
    assert_eq!(decision(&r).as_deref(), Some("keep_kubelet_pulling"));
    // The table's summary says it too.
    let r = inspect(&db, &["explain", "--kubelet-root-dir", &root]);
    assert!(
        r.stdout
            .contains("stale:       the kubelet's pull intent for"),
        "{}",
        r.stdout
    );
}

/// kubectl's habits on every `inspect` printer: `-o kube-json` and `-o yaml` are one
/// Kubernetes-style List (apiVersion, kind, items with their own apiVersion, kind and
/// metadata.name), with RFC 3339 UTC times and sizes in bytes that match the legacy JSON;
/// `-o name` prints each item's `kind/name`; `-o json` is the command's own JSON as before
/// (`-o` is `--output`).
#[test]
fn every_inspect_printer_speaks_kube_json_yaml_and_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let shown = id("b0b");
    let commands: [(&[&str], &str, usize); 7] = [
        (&["list"], "ImageRecord", 5),
        (&["show", &shown], "ImageRecord", 1),
        (&["backoff"], "PullBackoff", 1),
        (&["stats"], "RecordStats", 1),
        (&["explain"], "ImageDecision", 5),
        (&["check"], "Violation", 0),
        (&["export"], "ImageRecord", 5),
    ];
    for (command, kind, count) in commands {
        let with = |format: &str| {
            let mut args = command.to_vec();
            args.extend(["-o", format]);
            let r = inspect(&db, &args);
            assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
            r
        };
        let list = with("kube-json").json();
        assert_eq!(list["apiVersion"], "imagekeeper.io/v1alpha1", "{command:?}");
        assert_eq!(list["kind"], "List", "{command:?}");
        let items = list["items"].as_array().expect("items");
        assert_eq!(items.len(), count, "{command:?}");
        for item in items {
            assert_eq!(item["apiVersion"], "imagekeeper.io/v1alpha1");
            assert_eq!(item["kind"], kind, "{command:?}");
            assert!(item["metadata"]["name"].is_string(), "{item}");
        }
        let yaml: Value = serde_yaml_ng::from_str(&with("yaml").stdout).expect("YAML");
        assert_eq!(yaml, list, "{command:?}: YAML and kube-json differ");
        let names: Vec<String> = items
            .iter()
            .map(|i| {
                format!(
                    "{}/{}",
                    kind.to_lowercase(),
                    i["metadata"]["name"].as_str().expect("name")
                )
            })
            .collect();
        let printed: Vec<String> = with("name").stdout.lines().map(str::to_owned).collect();
        assert_eq!(printed, names, "{command:?}");
        let short = with("json").stdout;
        let mut long_args = command.to_vec();
        long_args.extend(["--output", "json"]);
        assert_eq!(short, inspect(&db, &long_args).stdout, "{command:?}");
    }

    // The List's fields against the legacy JSON of the same records.
    let legacy = inspect(&db, &["list", "--output", "json"]).json();
    let list = inspect(&db, &["list", "-o", "kube-json"]).json();
    for (old, new) in legacy
        .as_array()
        .expect("array")
        .iter()
        .zip(list["items"].as_array().expect("items"))
    {
        assert_eq!(new["metadata"]["name"], old["id"]);
        assert_eq!(new["sizeBytes"], old["size"]);
        assert_eq!(new["firstDetected"], old["first_detected"]);
        assert_eq!(new["lastUsed"], old["last_used"]);
        assert_eq!(new["runtimeHandler"], old["runtime_handler"]);
    }
    let b0b = &list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["id"] == id("b0b"))
        .expect("b0b");
    assert_eq!(b0b["lastUsed"], "2026-01-02T00:00:00Z");
    assert_eq!(b0b["sizeBytes"], 100 << 20);
}

/// Tables: `--no-headers` drops the header line (and explain's summary above it), `-o wide`
/// adds the size in bytes, `--no-trunc` shows whole image ids.
#[test]
fn tables_take_no_headers_wide_and_no_trunc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let plain = inspect(&db, &["list"]).stdout;
    let first = plain.lines().next().expect("a header");
    assert!(first.starts_with("IMAGE    TAG      IMAGE ID"), "{plain}");
    assert!(!first.contains("BYTES"), "{plain}");
    assert!(
        !plain.contains(&id("b0b")),
        "ids are short by default: {plain}"
    );

    let bare = inspect(&db, &["list", "--no-headers"]).stdout;
    assert_eq!(bare.lines().count(), 5, "{bare}");
    assert!(!bare.contains("IMAGE ID"), "{bare}");

    let wide = inspect(&db, &["list", "-o", "wide"]).stdout;
    let header = wide.lines().next().expect("a header");
    assert!(header.contains("   BYTES   "), "{wide}");
    assert!(wide.contains(&(100u64 << 20).to_string()), "{wide}");

    let whole = inspect(&db, &["list", "--no-trunc"]).stdout;
    assert!(whole.contains(&id("b0b")), "{whole}");

    let explain = inspect(&db, &["explain", "--no-headers"]).stdout;
    assert_eq!(explain.lines().count(), 5, "{explain}");
    assert!(
        explain.lines().all(|l| !l.starts_with("policy:")),
        "{explain}"
    );
}

/// A copy of the v2 fixture (`migrations/fixtures/v2.redb`): pause and busybox recorded with
/// names; busybox and alpine removed by GC for space (rank 1 and 2, busybox pulled back 2000 s
/// later), another image removed by someone else.
fn v2_fixture(dir: &Path) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/fixtures/v2.redb");
    let db = dir.join("v2.redb");
    std::fs::copy(&fixture, &db).expect("copy fixture");
    db
}

/// `inspect ARGS` on `db` at the v2 fixture's "now" (1_700_004_000).
fn at_fixture(db: &Path, args: &[&str]) -> Run {
    let mut all = vec![
        "--db",
        db.to_str().expect("utf8 path"),
        "--now",
        "1700004000",
    ];
    all.extend_from_slice(args);
    let r = run(&all);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r
}

const BUSYBOX_ID: &str = "sha256:51d22a12d89b69d6e2d33af188455f089a1f71f72ccb71ec8042a6873b5fe61c";
const ALPINE_ID: &str = "sha256:ee91f6568d15085a44bda25832255be39b27b6c31a5650b0e52e39fe2d0baa60";

#[test]
fn evictions_lists_the_journal_newest_first_with_names_and_re_pulls_and_filters() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = v2_fixture(dir.path());
    let v = at_fixture(&db, &["evictions", "--output", "json"]).json();
    let rows: Vec<(String, String, Value, Value, bool)> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|e| {
            (
                e["short_id"].as_str().unwrap_or_default().to_owned(),
                e["remover"].as_str().unwrap_or_default().to_owned(),
                e["reason"].clone(),
                e["rank"].clone(),
                e["repulled"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                "c0ffee0000000".to_owned(),
                "external".to_owned(),
                Value::Null,
                Value::Null,
                false
            ),
            (
                "ee91f6568d150".to_owned(),
                "imagekeeper".to_owned(),
                "space".into(),
                2.into(),
                false
            ),
            (
                "51d22a12d89b6".to_owned(),
                "imagekeeper".to_owned(),
                "space".into(),
                1.into(),
                true
            ),
        ]
    );
    let busybox = &v[2];
    assert_eq!(busybox["repo_tags"][0], "docker.io/library/busybox:1.35");
    assert_eq!(busybox["repull_delay_seconds"], 2000);
    assert_eq!(busybox["fs"]["used_before"], 90_000_000);
    assert_eq!(busybox["removed_at"], "2023-11-14T22:30:00Z");

    let count = |args: &[&str]| at_fixture(&db, args).json().as_array().map_or(0, Vec::len);
    assert_eq!(
        count(&["evictions", "--output", "json", "--reason", "external"]),
        1
    );
    assert_eq!(
        count(&["evictions", "--output", "json", "--reason", "space"]),
        2
    );
    assert_eq!(
        count(&["evictions", "--output", "json", "--reason", "age"]),
        0
    );
    assert_eq!(
        count(&["evictions", "--output", "json", "--since", "40m"]),
        1
    );

    let table = at_fixture(&db, &["evictions"]);
    let lines: Vec<&str> = table.stdout.lines().collect();
    for column in [
        "REMOVED",
        "IMAGE",
        "IMAGE ID",
        "SIZE",
        "BY",
        "REASON",
        "RANK",
        "RE-PULLED",
    ] {
        assert!(lines[0].contains(column), "{column} in {}", lines[0]);
    }
    assert_eq!(lines.len(), 4, "{}", table.stdout);
    for cell in [
        "docker.io/library/busybox:1.35",
        "imagekeeper",
        "space",
        "90% -> 80%",
        "after 33m20s",
    ] {
        assert!(lines[3].contains(cell), "{cell} in {}", lines[3]);
    }
    assert!(
        lines[1].contains("external") && lines[1].ends_with("no"),
        "{}",
        lines[1]
    );

    let bad = run(&[
        "--db",
        db.to_str().expect("utf8"),
        "evictions",
        "--reason",
        "lru",
    ]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

#[test]
fn list_reads_like_crictl_images_and_json_carries_every_tag_and_digest() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = v2_fixture(dir.path());
    let table = at_fixture(&db, &["list"]);
    let lines: Vec<&str> = table.stdout.lines().collect();
    let header = table_rows(lines[0]).remove(0);
    assert_eq!(
        header,
        [
            "IMAGE",
            "TAG",
            "IMAGE ID",
            "SIZE",
            "FIRST DETECTED",
            "LAST USED",
            "PINNED",
            "HANDLER",
            "WARM"
        ]
    );
    let pause = lines
        .iter()
        .find(|l| l.contains("0410e513415e6"))
        .expect("pause row");
    assert!(
        pause.starts_with("registry.k8s.io/pause   3.10")
            || pause.starts_with("registry.k8s.io/pause "),
        "{pause}"
    );
    assert!(pause.contains(" 3.10 "), "{pause}");
    let v = at_fixture(&db, &["list", "--output", "json"]).json();
    let busybox = v
        .as_array()
        .expect("array")
        .iter()
        .find(|r| r["id"] == BUSYBOX_ID)
        .expect("busybox listed");
    assert_eq!(
        busybox["repo_tags"],
        serde_json::json!(["docker.io/library/busybox:1.35"])
    );
    assert_eq!(busybox["repo_digests"].as_array().map(Vec::len), Some(1));
    // The fields from before names stay.
    assert_eq!(busybox["short_id"], "51d22a12d89b6");
    assert_eq!(busybox["size"], 22_063_620);
}

#[test]
fn show_accepts_a_name_or_a_digest_and_includes_the_images_removals() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = v2_fixture(dir.path());
    let digest = format!("docker.io/library/busybox@sha256:{}", "ab".repeat(32));
    for query in [
        "busybox:1.35",
        "docker.io/library/busybox:1.35",
        digest.as_str(),
        "51d22a",
    ] {
        let v = at_fixture(&db, &["show", query, "--output", "json"]).json();
        assert_eq!(v[0]["id"], BUSYBOX_ID, "{query}");
        assert_eq!(
            v[0]["removals"].as_array().map(Vec::len),
            Some(1),
            "{query}"
        );
        assert_eq!(v[0]["removals"][0]["reason"], "space", "{query}");
    }
    // Gone from the records, still in the journal: shown with its removal.
    let v = at_fixture(&db, &["show", "alpine:3.19", "--output", "json"]).json();
    assert_eq!(v[0]["id"], ALPINE_ID);
    assert_eq!(v[0]["removals"][0]["rank"], 2);
    let table = at_fixture(&db, &["show", "busybox:1.35"]);
    for part in [
        "REPO TAGS:",
        "docker.io/library/busybox:1.35",
        "REMOVALS:",
        "after 33m20s",
    ] {
        assert!(table.stdout.contains(part), "{part} in {}", table.stdout);
    }
    let missing = run(&["--db", db.to_str().expect("utf8"), "show", "nginx:1"]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(missing.stderr.contains("nginx:1"), "{}", missing.stderr);
}

#[test]
fn stats_show_the_re_pull_rate_of_the_last_day_and_week() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = v2_fixture(dir.path());
    let v = at_fixture(&db, &["stats", "--output", "json"]).json();
    assert_eq!(v["journal_entries"], 3);
    assert_eq!(v["repulls"]["last_day"]["removals"], 3);
    assert_eq!(v["repulls"]["last_day"]["repulled"], 1);
    let table = at_fixture(&db, &["stats"]);
    assert!(
        table
            .stdout
            .contains("re-pulls 1d:      1 of 3 removals pulled again (33%)"),
        "{}",
        table.stdout
    );
    // Eight days on, neither the last day nor the last week has a removal.
    let later = run(&[
        "--db",
        db.to_str().expect("utf8"),
        "--now",
        "1700700000",
        "stats",
        "--output",
        "json",
    ]);
    let v = later.json();
    assert_eq!(v["repulls"]["last_day"]["removals"], 0);
    assert_eq!(v["repulls"]["last_week"]["removals"], 0);
}

/// `inspect explain` says of an image that it was evicted before and pulled back (from the
/// journal), in its reason and as `evicted_before` in JSON.
#[test]
fn explain_notes_an_image_evicted_before_and_pulled_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = v2_fixture(dir.path());
    let v = at_fixture(
        &db,
        &["explain", "--kubelet-root-dir", "", "--output", "json"],
    )
    .json();
    let images = v["images"].as_array().expect("images");
    let busybox = images
        .iter()
        .find(|i| i["id"] == BUSYBOX_ID)
        .expect("busybox explained");
    assert_eq!(busybox["evicted_before"]["reason"], "space");
    assert_eq!(busybox["evicted_before"]["remover"], "imagekeeper");
    assert_eq!(
        busybox["evicted_before"]["repulled_at"],
        "2023-11-14T23:03:20Z"
    );
    let reason = busybox["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("evicted before (space by imagekeeper at 2023-11-14T22:30:00Z) and pulled back 33m20s later"),
        "{reason}"
    );
    let pause = images
        .iter()
        .find(|i| i["id"] != BUSYBOX_ID)
        .expect("pause explained");
    assert!(pause.get("evicted_before").is_none(), "{pause}");
}

/// A prefix that matches exactly one record resolves to it even when ids known only from the
/// journal share the prefix (as a name does); only records that share it are ambiguous, and a
/// prefix matching journal-only ids alone still finds them.
#[test]
fn show_prefers_the_one_record_a_prefix_matches_over_journal_only_ids() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let store = Store::open(&db, at(NOW - 10 * HOUR)).expect("open");
    let mut batch = Batch::new();
    batch.upsert(key("abc1", ""), record(NOW - 9 * HOUR, 0, 10, false));
    batch.upsert(key("abc2", ""), record(NOW - 9 * HOUR, 0, 10, false));
    batch.upsert(key("abd1", ""), record(NOW - 9 * HOUR, 0, 10, false));
    batch.upsert(key("fe1", ""), record(NOW - 9 * HOUR, 0, 10, false));
    store.apply(&batch).expect("apply");
    let mut batch = Batch::new();
    batch.evict(
        key("abd1", ""),
        imagekeeper::model::EvictionNote {
            removed_at: at(NOW - HOUR),
            reason: imagekeeper::model::RemovalReason::Space,
            rank: 1,
            fs: None,
        },
    );
    store.apply(&batch).expect("apply");
    let mut batch = Batch::new();
    batch.upsert(key("abd2", ""), record(NOW - 9 * HOUR, 0, 10, false));
    store.apply(&batch).expect("apply");
    drop(store);
    // `abd` matches the record abd2 and the journal-only abd1.
    let v = inspect(&db, &["show", "abd", "--output", "json"]).json();
    assert_eq!(v[0]["id"], id("abd2"));
    // `abd1` is journal-only and exact.
    let v = inspect(&db, &["show", "abd1", "--output", "json"]).json();
    assert_eq!(v[0]["id"], id("abd1"));
    // Two records share `abc`: still ambiguous.
    let r = inspect(&db, &["show", "abc"]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains(&id("abc1")), "{}", r.stderr);
}

/// Offline `inspect explain` names the images that cannot come back as far as the file
/// tells: stored names with no repo digest (kept by default, as the agent's
/// `protectIrreplaceable`), the sandbox image only when `--pod-infra-container-image` names
/// it; a record with no names stored is not judged, and stderr says what the file cannot tell.
#[test]
fn explain_names_irreplaceable_images_the_file_can_tell() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.redb");
    let store = Store::open(&path, at(NOW - 10 * HOUR)).expect("open");
    let mut batch = Batch::new();
    // Eviction order: imported (no digest), pulled (a digest), pause (a digest), unnamed.
    batch.upsert(key("aaa1", ""), record(NOW - 9 * HOUR, 0, 10, false));
    batch.upsert(key("aaa2", ""), record(NOW - 9 * HOUR + 1, 0, 10, false));
    batch.upsert(key("aaa3", ""), record(NOW - 9 * HOUR + 2, 0, 10, false));
    batch.upsert(key("aaa4", ""), record(NOW - 9 * HOUR + 3, 0, 10, false));
    let names = |tag: &str, digest: Option<&str>| imagekeeper::model::ImageNames {
        repo_tags: vec![tag.to_owned()],
        repo_digests: digest.map(str::to_owned).into_iter().collect(),
    };
    batch.set_names(key("aaa1", ""), names("docker.io/airgap/tool:1", None));
    batch.set_names(
        key("aaa2", ""),
        names(
            "docker.io/library/app:1",
            Some("docker.io/library/app@sha256:2"),
        ),
    );
    batch.set_names(
        key("aaa3", ""),
        names(
            "registry.k8s.io/pause:3.10",
            Some("registry.k8s.io/pause@sha256:3"),
        ),
    );
    store.apply(&batch).expect("apply");
    drop(store);
    let decisions = |args: &[&str]| -> (Vec<String>, String) {
        let mut all = vec!["explain", "--output", "json"];
        all.extend_from_slice(args);
        let r = inspect(&path, &all);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        let decisions = r.json()["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| i["decision"].as_str().unwrap_or_default().to_owned())
            .collect();
        (decisions, r.stderr)
    };
    let (got, stderr) = decisions(&[]);
    assert_eq!(
        got,
        [
            "keep_irreplaceable",
            "keep_space_not_evaluated",
            "keep_space_not_evaluated",
            "keep_space_not_evaluated"
        ]
    );
    assert!(
        stderr.contains("the runtime's sandbox image is not in the database")
            && stderr.contains("1 record(s) have no names stored"),
        "{stderr}"
    );
    let (got, stderr) = decisions(&["--pod-infra-container-image", "registry.k8s.io/pause:3.10"]);
    assert_eq!(
        got,
        [
            "keep_irreplaceable",
            "keep_space_not_evaluated",
            "keep_irreplaceable",
            "keep_space_not_evaluated"
        ]
    );
    assert!(
        stderr.contains("the sandbox image is \"registry.k8s.io/pause:3.10\""),
        "{stderr}"
    );
    let (got, _) = decisions(&["--protect-irreplaceable=false"]);
    assert_eq!(got, ["keep_space_not_evaluated"; 4]);
}

/// Issue 38: `inspect explain --config` applies the file's `pinnedImages` as the agent's
/// detect does (a record whose stored names match a pattern is pinned), over the `pinned` the
/// database stores: an image a pattern names is kept (`keep_pinned`) where without the
/// pattern the space pass removes it; `--set pinnedImages=...` does the same; the runtime's
/// stored `pinned` still keeps its image.
#[test]
fn explain_keeps_an_image_a_pinned_pattern_of_the_config_file_names() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.redb");
    let store = Store::open(&path, at(NOW - 10 * HOUR)).expect("open");
    let mut batch = Batch::new();
    // Eviction order: the app to keep, another app, the runtime-pinned pause image.
    batch.upsert(key("bbb1", ""), record(NOW - 9 * HOUR, 0, 10, false));
    batch.upsert(key("bbb2", ""), record(NOW - 9 * HOUR + 1, 0, 10, false));
    batch.upsert(key("bbb3", ""), record(NOW - 9 * HOUR + 2, 0, 10, true));
    let names = |tag: &str, digest: &str| imagekeeper::model::ImageNames {
        repo_tags: vec![tag.to_owned()],
        repo_digests: vec![digest.to_owned()],
    };
    batch.set_names(
        key("bbb1", ""),
        names(
            "registry.example/keep/app:1",
            "registry.example/keep/app@sha256:1",
        ),
    );
    batch.set_names(
        key("bbb2", ""),
        names(
            "registry.example/other:1",
            "registry.example/other@sha256:2",
        ),
    );
    batch.set_names(
        key("bbb3", ""),
        names(
            "registry.k8s.io/pause:3.10",
            "registry.k8s.io/pause@sha256:3",
        ),
    );
    store.apply(&batch).expect("apply");
    drop(store);
    let config = dir.path().join("imagekeeper.toml");
    std::fs::write(&config, "pinnedImages = [\"registry.example/keep/*\"]\n").expect("write");
    let decisions = |args: &[&str]| -> Vec<String> {
        // 95% used: the space pass frees 15 bytes down to 80%, two images of 10.
        let mut all = vec![
            "explain",
            "--output",
            "json",
            "--kubelet-root-dir",
            "",
            "--capacity",
            "100",
            "--available",
            "5",
        ];
        all.extend_from_slice(args);
        let r = inspect(&path, &all);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        r.json()["images"]
            .as_array()
            .expect("images")
            .iter()
            .map(|i| i["decision"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(
        decisions(&[]),
        ["remove_for_space", "remove_for_space", "keep_pinned"]
    );
    let config = config.to_str().expect("utf8");
    let pinned = decisions(&["--config", config]);
    assert_eq!(pinned, ["keep_pinned", "remove_for_space", "keep_pinned"]);
    assert_eq!(
        decisions(&["--set", "pinnedImages=[\"registry.example/keep/*\"]"]),
        pinned
    );
}

/// Issue 57: a containerd leftover `prune --orphans` journaled is listed by `evictions` (and
/// `--reason orphan`) with its key where an image's name would be, and never resolves a
/// `show` query (`blob:` is not an image id, though `b` is a hex prefix).
#[test]
fn a_journaled_leftover_is_listed_by_evictions_and_is_no_image_to_show() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = example_db(dir.path());
    let store = Store::open(&db, at(NOW)).expect("open");
    let mut batch = Batch::new();
    let blob = imagekeeper::model::leftover_key("blob", "k8s.io", None, "sha256:b1ab");
    batch.journal_leftover(blob, at(NOW - HOUR), 4 << 20, at(NOW - 2 * HOUR));
    store.apply(&batch).expect("apply");
    drop(store);
    let r = inspect(&db, &["evictions", "--reason", "orphan"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows: Vec<&str> = r.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{}", r.stdout);
    for cell in [
        "blob:k8s.io/sha256:b1ab",
        "4.0 MiB",
        "imagekeeper",
        "orphan",
    ] {
        assert!(rows[0].contains(cell), "{cell} in {}", rows[0]);
    }
    let r = inspect(&db, &["show", "bl"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stderr.contains("no image id starts with"), "{}", r.stderr);
}
