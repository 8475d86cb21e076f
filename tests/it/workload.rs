//! `imagekeeper inspect workload` and `inspect pulls` (schema 5's use and pull history, issue
//! 26 part 3 and issue 25's warm visibility), as a process: databases written by replaying the
//! traces of `tests/replay/` (the real GC manager's detects record the uses) or through the
//! library, the workload's exact lines, its images against the trace's, `--since`, an empty
//! database, restarts from the unwatched stretches, and the pull listing in every format.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use imagekeeper::model::{
    ImageNames, ImageRecord, PullEntry, PullKey, PullOrigin, RecordKey, StoredWarmState, UnixNanos,
    WarmRow,
};
use imagekeeper::store::{Batch, Store, meta_keys};
use serde_json::Value;

use crate::support::{bin, table_rows};

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin::output(bin::imagekeeper().args(args));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Replays `tests/replay/NAME.jsonl` into a database in `dir`.
fn replayed(dir: &Path, name: &str) -> PathBuf {
    let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/replay")
        .join(format!("{name}.jsonl"));
    let db = dir.join(format!("{name}.redb"));
    let (code, _, stderr) = run(&[
        "replay",
        trace.to_str().expect("utf8"),
        "--db",
        db.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 0, "replay {name}: {stderr}");
    db
}

fn workload(db: &Path, extra: &[&str]) -> String {
    let mut args = vec!["inspect", "--db", db.to_str().expect("utf8"), "workload"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "inspect workload {extra:?}: {stderr}");
    stdout
}

#[test]
fn workload_of_a_replayed_trace_is_exactly_its_recorded_uses() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = replayed(dir.path(), "lru_order_survives_restart");
    // The GC at 02:00:01 removed for space with the filesystem at 85 000 of 100 000 bytes
    // used, of which the three images held 9 000: 76 000 used by other things. app:2 was in
    // use at the first detect only, app:1 at the second only (a use seen by one detect lasts
    // 0 s: `for_s` is the time it was seen in use).
    assert_eq!(
        workload(&db, &[]),
        concat!(
            r#"{"at":0,"node":{"capacity":100000,"other_used":76000,"pull_bytes_per_s":100000000},"policy":{"high":85,"low":80,"min_age_s":120,"max_age_s":0},"gc_period_s":300}"#,
            "\n",
            r#"{"at":0,"run":{"image":"app:2","size":3000,"for_s":0}}"#,
            "\n",
            r#"{"at":3600,"run":{"image":"app:1","size":4000,"for_s":0}}"#,
            "\n",
        )
    );
    let db = replayed(dir.path(), "a_full_disk_an_eviction_and_a_repull");
    let lines: Vec<String> = workload(&db, &["--high", "80", "--low", "70"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines[1..],
        [
            r#"{"at":0,"run":{"image":"registry.example/shop/app:v1","size":4000000000,"for_s":0}}"#,
            r#"{"at":3600,"run":{"image":"docker.io/library/redis:7.4","size":1100000000,"for_s":21600}}"#,
            r#"{"at":3600,"run":{"image":"registry.example/shop/app:v2","size":4200000000,"for_s":21600}}"#,
            r#"{"at":21600,"run":{"image":"registry.example/ml/cuda-train:12.4","size":30000000000,"for_s":3600}}"#,
        ]
    );
    let node: Value = serde_json::from_str(&lines[0]).expect("json");
    assert_eq!(node["policy"]["high"], 80);
    assert_eq!(node["policy"]["low"], 70);
    assert_eq!(node["node"]["capacity"], 100_000_000_000u64);
    // The same file gives the same bytes.
    assert_eq!(
        workload(&db, &["--high", "80", "--low", "70"]),
        lines.join("\n") + "\n"
    );
}

/// The names (first tag, else id) of the images running containers use in a replay trace:
/// what the history used.
fn images_used_by_the_trace(trace: &str) -> BTreeSet<String> {
    let mut tags: std::collections::BTreeMap<String, String> = Default::default();
    let mut used = BTreeSet::new();
    for line in trace.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("trace line");
        if let Some(images) = v["images"].as_array() {
            for image in images {
                // Its first tag, else its id (an image without names goes by its id).
                if let Some(id) = image["id"].as_str() {
                    let name = image["tags"][0].as_str().unwrap_or(id);
                    tags.insert(id.to_owned(), name.to_owned());
                }
            }
        }
        if let Some(containers) = v["containers"].as_array() {
            for c in containers {
                if c["state"] == "running"
                    && let Some(tag) = c["image_id"].as_str().and_then(|id| tags.get(id))
                {
                    used.insert(tag.clone());
                }
            }
        }
    }
    used
}

/// The directory of the repository's replay traces and their file names, sorted.
fn replay_traces() -> (PathBuf, Vec<String>) {
    let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/replay");
    let mut names: Vec<String> = std::fs::read_dir(&traces)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jsonl") && !n.ends_with(".expected.jsonl"))
        .collect();
    names.sort();
    (traces, names)
}

/// Over every replay trace of the repository: the distinct images of the `run` lines are the
/// distinct images running containers used in the trace.
#[test]
fn the_run_lines_name_exactly_the_images_each_replay_trace_used() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (traces, names) = replay_traces();
    let mut checked = 0;
    for name in names {
        let stem = name.trim_end_matches(".jsonl");
        let trace = std::fs::read_to_string(traces.join(&name)).expect("read trace");
        let want = images_used_by_the_trace(&trace);
        let db = replayed(dir.path(), stem);
        let got: BTreeSet<String> = workload(&db, &[])
            .lines()
            .skip(1)
            .map(|l| serde_json::from_str::<Value>(l).expect("json"))
            .filter_map(|v| v["run"]["image"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(got, want, "{stem}");
        checked += usize::from(!want.is_empty());
    }
    assert!(checked >= 5, "only {checked} traces use images");
}

/// Issue 26's pipeline: `inspect workload` of a database written by each replay trace is a
/// workload `simulate` accepts, and with no failed run every policy's first pulls are exactly
/// the distinct images the history used (with nothing printed on stderr).
#[test]
fn simulate_accepts_the_workload_of_every_replayed_trace_and_first_pulls_its_images() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, names) = replay_traces();
    let mut simulated = 0;
    for name in names {
        let stem = name.trim_end_matches(".jsonl");
        let db = replayed(dir.path(), stem);
        let trace = workload(&db, &[]);
        let distinct: BTreeSet<String> = trace
            .lines()
            .skip(1)
            .map(|l| serde_json::from_str::<Value>(l).expect("json"))
            .filter_map(|v| v["run"]["image"].as_str().map(str::to_owned))
            .collect();
        let file = dir.path().join(format!("{stem}.workload.jsonl"));
        std::fs::write(&file, &trace).expect("write workload");
        let (code, stdout, stderr) = run(&["simulate", file.to_str().expect("utf8"), "-o", "json"]);
        assert_eq!(code, 0, "simulate {stem}: {stderr}");
        // Only the progress lines a run past a second prints (their timing is the machine's).
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("simulate: policy "))
            .collect();
        assert!(
            said.is_empty(),
            "simulate {stem} printed on stderr: {stderr}"
        );
        let outcomes: Vec<Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(
            outcomes.len(),
            imagekeeper::simulate::SimPolicy::ALL.len(),
            "{stem}: one object per policy"
        );
        for outcome in outcomes {
            if outcome["failed_runs"] == 0 {
                assert_eq!(
                    outcome["first_pulls"].as_u64(),
                    Some(distinct.len() as u64),
                    "{stem}: {outcome}"
                );
            }
        }
        simulated += usize::from(!distinct.is_empty());
    }
    assert!(simulated >= 5, "only {simulated} traces used images");
}

#[test]
fn since_bounds_the_workload_by_a_duration_or_a_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = replayed(dir.path(), "lru_order_survives_restart");
    let only_app1 = workload(&db, &["--since", "2026-01-01T00:30:00Z"]);
    let lines: Vec<&str> = only_app1.lines().collect();
    assert_eq!(lines.len(), 2, "{only_app1}");
    // Relative to the first event kept.
    assert_eq!(
        lines[1],
        r#"{"at":0,"run":{"image":"app:1","size":4000,"for_s":0}}"#
    );
    let by_duration = workload(&db, &["--since", "1h30m", "--now", "2026-01-01T02:00:00Z"]);
    assert_eq!(by_duration, only_app1);
    let none = workload(&db, &["--since", "2026-01-02T00:00:00Z"]);
    assert_eq!(none.lines().count(), 1, "{none}");
    let (code, _, stderr) = run(&[
        "inspect",
        "--db",
        db.to_str().expect("utf8"),
        "workload",
        "--since",
        "yesterday",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--since"), "{stderr}");
}

#[test]
fn an_empty_database_gives_just_the_node_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("empty.redb");
    drop(Store::open(&db, UnixNanos::from_secs(1)).expect("open"));
    assert_eq!(
        workload(&db, &[]),
        concat!(
            r#"{"at":0,"node":{"capacity":100000000000,"other_used":0,"pull_bytes_per_s":100000000},"policy":{"high":85,"low":80,"min_age_s":120,"max_age_s":0},"gc_period_s":300}"#,
            "\n"
        )
    );
}

fn key(n: u8) -> RecordKey {
    RecordKey::new(format!("sha256:{n:064x}"), "")
}

fn secs(s: i64) -> UnixNanos {
    UnixNanos::from_secs(s)
}

/// A database written through the library: two images, uses with a stretch the agent did not
/// watch between them, a warm pull and a restore pull of measured duration, a detected one, and
/// the warm set's state.
fn history_db(dir: &Path) -> PathBuf {
    let db = dir.join("history.redb");
    let store = Store::open(&db, secs(1_000)).expect("open");
    let mut batch = Batch::new();
    for (n, tag, size) in [(1, "reg/a:1", 500_000_000u64), (2, "reg/b:1", 250_000_000)] {
        batch.upsert(
            key(n),
            ImageRecord {
                first_detected: secs(1_000),
                last_used: secs(1_000),
                size,
                pinned: false,
            },
        );
        batch.set_names(
            key(n),
            ImageNames {
                repo_tags: vec![tag.to_owned()],
                repo_digests: Vec::new(),
            },
        );
    }
    store.apply(&batch).expect("apply");
    let pull = |n: u8, at: i64, size: u64, origin: PullOrigin, took: u64, name: &str| {
        let mut batch = Batch::new();
        batch.record_pull(
            PullKey {
                at: secs(at),
                key: key(n),
            },
            PullEntry {
                size,
                origin,
                took: std::time::Duration::from_secs(took),
                name: name.to_owned(),
            },
        );
        store.apply(&batch).expect("pull");
    };
    pull(1, 1_100, 500_000_000, PullOrigin::Warm, 5, "reg/a:1");
    pull(2, 1_200, 250_000_000, PullOrigin::Restore, 5, "reg/b:1");
    pull(2, 900, 250_000_000, PullOrigin::Detected, 0, "");
    let observe = |at: i64, in_use: Vec<RecordKey>| {
        let mut batch = Batch::new();
        batch.observe_uses(secs(at), in_use);
        store.apply(&batch).expect("uses");
    };
    observe(1_000, vec![key(1)]);
    observe(1_600, vec![key(1), key(2)]);
    observe(1_900, vec![key(2)]);
    observe(2_500, vec![]);
    // The agent was down from 2 500 to 4 000; b runs again after.
    let mut meta = Batch::new();
    let (from, to) = meta_keys::unwatched(0);
    meta.set_meta(from, secs(2_500).0);
    meta.set_meta(to, secs(4_000).0);
    meta.set_meta(meta_keys::HEARTBEAT, secs(4_000).0);
    store.apply(&meta).expect("meta");
    observe(4_000, vec![key(2)]);
    observe(4_000 + 90, vec![key(2)]);
    let mut warm = Batch::new();
    warm.replace_warm(vec![
        WarmRow {
            image: "reg/a:1".to_owned(),
            runtime_handler: String::new(),
            state: StoredWarmState::Present,
            since: secs(1_100),
            image_id: key(1).image_id.as_str().to_owned(),
        },
        WarmRow {
            image: "reg/huge:1".to_owned(),
            runtime_handler: String::new(),
            state: StoredWarmState::DoesNotFit,
            since: secs(1_100),
            image_id: String::new(),
        },
    ]);
    store.apply(&warm).expect("warm");
    db
}

#[test]
fn restarts_come_from_the_unwatched_stretches_and_the_pull_rate_from_imagekeepers_pulls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = history_db(dir.path());
    assert_eq!(
        workload(&db, &["--capacity", "2000000000"]),
        concat!(
            r#"{"at":0,"node":{"capacity":2000000000,"other_used":0,"pull_bytes_per_s":75000000},"policy":{"high":85,"low":80,"min_age_s":120,"max_age_s":0},"gc_period_s":300}"#,
            "\n",
            r#"{"at":0,"run":{"image":"reg/a:1","size":500000000,"for_s":600}}"#,
            "\n",
            r#"{"at":600,"run":{"image":"reg/b:1","size":250000000,"for_s":300}}"#,
            "\n",
            r#"{"at":3000,"restart":{}}"#,
            "\n",
            r#"{"at":3000,"run":{"image":"reg/b:1","size":250000000,"for_s":90}}"#,
            "\n",
        )
    );
}

#[test]
fn inspect_pulls_lists_each_origin_in_every_format_and_list_marks_warm_images() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = history_db(dir.path());
    let db = db.to_str().expect("utf8");
    let now = "--now=1970-01-01T02:00:00Z";
    let (code, table, stderr) = run(&["inspect", "--db", db, now, "pulls"]);
    assert_eq!(code, 0, "{stderr}");
    let rows = table_rows(&table);
    assert_eq!(
        rows[0],
        [
            "PULLED", "ORIGIN", "IMAGE", "IMAGE ID", "SIZE", "TOOK", "HANDLER"
        ]
    );
    let origins: Vec<&str> = rows[1..].iter().map(|r| r[1]).collect();
    assert_eq!(origins, ["restore", "warm", "detected"], "{table}");
    let (code, json, _) = run(&[
        "inspect", "--db", db, now, "-o", "json", "pulls", "--origin", "warm",
    ]);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(json.as_array().map(Vec::len), Some(1));
    assert_eq!(json[0]["origin"], "warm");
    assert_eq!(json[0]["name"], "reg/a:1");
    assert_eq!(json[0]["size"], 500_000_000u64);
    assert_eq!(json[0]["took_nanos"], 5_000_000_000u64);
    assert_eq!(json[0]["repo_tags"][0], "reg/a:1");
    let (code, yaml, _) = run(&["inspect", "--db", db, now, "-o", "yaml", "pulls"]);
    assert_eq!(code, 0);
    assert!(
        yaml.contains("kind: ImagePullList") || yaml.contains("ImagePull"),
        "{yaml}"
    );
    assert!(yaml.contains("origin: restore"), "{yaml}");
    let (code, names, _) = run(&["inspect", "--db", db, now, "-o", "name", "pulls"]);
    assert_eq!(code, 0);
    assert_eq!(names.lines().count(), 3, "{names}");
    // `inspect list` marks the warm image, offline.
    let (code, list, _) = run(&["inspect", "--db", db, now, "-o", "json", "list"]);
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(&list).expect("json");
    let warm: Vec<(String, Value, Value)> = list
        .as_array()
        .expect("array")
        .iter()
        .map(|r| {
            (
                r["repo_tags"][0].as_str().unwrap_or_default().to_owned(),
                r["warm"].clone(),
                r["warm_state"].clone(),
            )
        })
        .collect();
    assert!(
        warm.contains(&(
            "reg/a:1".to_owned(),
            Value::Bool(true),
            Value::from("present")
        )),
        "{warm:?}"
    );
    assert!(
        warm.contains(&("reg/b:1".to_owned(), Value::Bool(false), Value::Null)),
        "{warm:?}"
    );
    let (code, table, _) = run(&["inspect", "--db", db, now, "list"]);
    assert_eq!(code, 0);
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("WARM"), "{table}");
    let a_row = table
        .lines()
        .find(|l| l.starts_with("reg/a"))
        .unwrap_or_default();
    assert!(a_row.contains("present"), "{table}");
}

/// Issue 55 item 4: the signals an agent recorded (schema 7's `signals` table) come out of
/// `inspect workload` as the trace's `cronjob`, `bound` and `rollout` lines, among the runs in
/// time order, and `parse_workload` reads them back as those signals; with `--since`, the last
/// line of each key before it is written at 0 (a pod already gone is not), and the node line
/// carries the trace's start for the CronJobs' calendar.
#[test]
fn recorded_signals_are_written_as_signal_lines_the_parser_reads_back() {
    use imagekeeper::model::{RecordedSignal, SignalEntry};
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("signals.redb");
    let t = 1_800_000_000;
    let at = |s: i64| UnixNanos::from_secs(t + s);
    {
        let store = Store::open(&db, at(0)).expect("open");
        let mut batch = Batch::new();
        batch.upsert(
            RecordKey::new("sha256:aa", ""),
            ImageRecord {
                first_detected: at(30),
                last_used: at(30),
                size: 1_000,
                pinned: false,
            },
        );
        batch.set_names(
            RecordKey::new("sha256:aa", ""),
            ImageNames {
                repo_tags: vec!["reg/build:4".to_owned()],
                repo_digests: vec![],
            },
        );
        batch.observe_uses(at(30), vec![RecordKey::new("sha256:aa", "")]);
        store.apply(&batch).expect("apply");
        let images = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let nightly = |suspend| RecordedSignal::CronJob {
            name: "batch/nightly".to_owned(),
            schedule: "0 2 * * *".to_owned(),
            time_zone: Some("Europe/Paris".to_owned()),
            suspend,
            images: images(&["reg/etl:1"]),
        };
        let entries = [
            (0, nightly(false)),
            (
                0,
                RecordedSignal::Bound {
                    pod: "ci/build-7".to_owned(),
                    images: images(&["reg/build:4", "reg/init:1"]),
                },
            ),
            (
                60,
                RecordedSignal::Rollout {
                    workload: "shop/web".to_owned(),
                    images: images(&["reg/web:2"]),
                    previous: images(&["reg/web:1"]),
                },
            ),
            (
                90,
                RecordedSignal::Bound {
                    pod: "ci/gone".to_owned(),
                    images: images(&["reg/x:1"]),
                },
            ),
            (
                95,
                RecordedSignal::Bound {
                    pod: "ci/gone".to_owned(),
                    images: vec![],
                },
            ),
            (
                120,
                RecordedSignal::Bound {
                    pod: "ci/build-7".to_owned(),
                    images: vec![],
                },
            ),
            (180, nightly(true)),
        ]
        .map(|(s, signal)| SignalEntry { at: at(s), signal });
        store.append_signals(&entries).expect("append");
    }
    let node = |capacity: u64, start: i64| {
        format!(
            r#"{{"at":0,"node":{{"capacity":{capacity},"other_used":0,"pull_bytes_per_s":100000000}},"policy":{{"high":85,"low":80,"min_age_s":120,"max_age_s":0}},"gc_period_s":300,"start_unix_s":{start}}}"#
        )
    };
    let cron = |at: i64, suspend: bool| {
        format!(
            r#"{{"at":{at},"cronjob":{{"name":"batch/nightly","schedule":"0 2 * * *","time_zone":"Europe/Paris","suspend":{suspend},"images":["reg/etl:1"]}}}}"#
        )
    };
    let build = |at: i64, images: &str| {
        format!(r#"{{"at":{at},"bound":{{"pod":"ci/build-7","images":[{images}]}}}}"#)
    };
    let rollout = |at: i64| {
        format!(
            r#"{{"at":{at},"rollout":{{"workload":"shop/web","images":["reg/web:2"],"previous":["reg/web:1"]}}}}"#
        )
    };
    let all = workload(&db, &[]);
    let want = [
        // Every image of the trace fits under the low threshold: 1,000 bytes at 80 %.
        node(1250, t),
        cron(0, false),
        build(0, r#""reg/build:4","reg/init:1""#),
        r#"{"at":30,"run":{"image":"reg/build:4","size":1000,"for_s":0}}"#.to_owned(),
        rollout(60),
        r#"{"at":90,"bound":{"pod":"ci/gone","images":["reg/x:1"]}}"#.to_owned(),
        r#"{"at":95,"bound":{"pod":"ci/gone","images":[]}}"#.to_owned(),
        build(120, ""),
        cron(180, true),
    ];
    assert_eq!(all.lines().collect::<Vec<_>>(), want);
    // The parser reads back those signals: its own writing of them is the same lines.
    let parsed = imagekeeper::workload::parse_workload(&all).expect("the parser reads it");
    assert!(parsed.declares_signals());
    assert_eq!(parsed.to_string(), all);

    // From 100 s on: the last line of each key before it at 0, the pod gone left out.
    let since = imagekeeper::format::format_rfc3339(at(100));
    let from = workload(&db, &["--since", &since]);
    let want = [
        // No run from then on: the default size.
        node(100_000_000_000, t + 120),
        cron(0, false),
        build(0, r#""reg/build:4","reg/init:1""#),
        rollout(0),
        build(0, ""),
        cron(60, true),
    ];
    assert_eq!(from.lines().collect::<Vec<_>>(), want);
    let parsed = imagekeeper::workload::parse_workload(&from).expect("the parser reads it");
    assert_eq!(parsed.to_string(), from);
}
