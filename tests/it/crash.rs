//! Process kills: the real `imagekeeper replay` binary runs a long generated trace against a
//! database on disk and is SIGKILLed after a random number of its output lines (each line is a
//! commit already made). After every kill the database must open read-write (crash recovery),
//! `Store::check()` must pass, every image whose "removed" line was printed must have no record,
//! and the last detect time must never go backwards. Each round reuses the database with a new
//! trace whose times come after the previous round's.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use imagekeeper::model::{RecordKey, UnixNanos};
use imagekeeper::store::{Store, meta_keys};

const ROUND_SECS: i64 = 100_000;

fn image_id(round: u32, i: u32) -> String {
    format!("sha256:{round:08x}{i:056x}")
}

/// Round `round`'s trace: `steps` times, new images appear, a detect records them, and a
/// delete_unused removes those no container uses; the odd ones stay in use for a while.
fn trace(round: u32, steps: u32) -> String {
    let mut out = String::new();
    let base = 1_000_000 + i64::from(round) * ROUND_SECS;
    let _ = writeln!(
        out,
        r#"{{"at": {base}, "policy": {{"high": 85, "low": 80, "min_age_s": 0, "max_age_s": 0}}}}"#
    );
    for step in 0..steps {
        let at = base + 1 + i64::from(step) * 10;
        let images: Vec<String> = (0..3)
            .map(|j| {
                format!(
                    r#"{{"id": "{}", "size": {}}}"#,
                    image_id(round, step * 3 + j),
                    1000 + j
                )
            })
            .collect();
        let in_use = image_id(round, step * 3 + 1);
        let _ = writeln!(out, r#"{{"at": {at}, "images": [{}]}}"#, images.join(", "));
        let _ = writeln!(
            out,
            r#"{{"at": {at}, "containers": [{{"id": "c{step}", "image_id": "{in_use}", "state": "running"}}]}}"#
        );
        let _ = writeln!(out, r#"{{"at": {}, "detect": {{}}}}"#, at + 1);
        let _ = writeln!(out, r#"{{"at": {}, "delete_unused": {{}}}}"#, at + 2);
    }
    out
}

/// Reads `child`'s output until `lines` lines or the end; returns the lines.
fn read_lines(child: &mut Child, lines: usize) -> Vec<String> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut out = Vec::new();
    for line in BufReader::new(stdout).lines() {
        match line {
            Ok(l) => out.push(l),
            Err(_) => break,
        }
        if out.len() >= lines {
            break;
        }
    }
    out
}

/// What one kill left: the facts the printed lines promise.
#[derive(Default)]
struct Promised {
    removed: BTreeSet<String>,
    last_detect: Option<i64>,
}

fn promised(lines: &[String], into: &mut Promised) {
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("output lines are JSON");
        let at = v["at"].as_i64().expect("every line has \"at\"");
        match v["op"].as_str() {
            Some("removed") => {
                let id = v["image"].as_str().expect("a removed line names its image");
                into.removed.insert(id.to_owned());
            }
            Some("detect") => {
                let t = UnixNanos::from_secs(at).0;
                into.last_detect = Some(into.last_detect.map_or(t, |p| p.max(t)));
            }
            _ => {}
        }
    }
}

/// Opens the database after a kill and holds it to what the output promised.
fn verify(db: &Path, promised: &Promised, last_seen: &mut i64, context: &str) {
    let mut store = Store::open(db, UnixNanos::from_secs(1))
        .unwrap_or_else(|e| panic!("{context}: the database does not open after a kill: {e}"));
    let violations = store.check().expect("check runs");
    assert!(violations.is_empty(), "{context}: {violations:?}");
    for id in &promised.removed {
        let key = RecordKey::new(id.clone(), "");
        assert_eq!(
            store.get(&key).expect("get"),
            None,
            "{context}: {id} was reported removed but its record is back"
        );
    }
    let last_detect = store
        .meta(meta_keys::LAST_DETECT)
        .expect("meta")
        .unwrap_or(0);
    assert!(
        last_detect >= *last_seen,
        "{context}: last_detect went back from {last_seen} to {last_detect}"
    );
    if let Some(t) = promised.last_detect {
        assert!(
            last_detect >= t,
            "{context}: a detect at {t} was printed but last_detect is {last_detect}"
        );
    }
    *last_seen = last_detect;
}

/// Runs `kills` rounds; returns how many ended in a kill (the rest finished first), how many
/// output lines were read, and how many removals those lines promised.
pub fn crash_loop(kills: u32, seed: u64, dir: &Path) -> (u32, usize, usize) {
    let db = dir.join("crash.redb");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut promised_all = Promised::default();
    let mut last_seen = 0;
    let mut killed = 0;
    let mut total_lines = 0;
    for round in 0..kills {
        let steps = 40;
        let trace_path = dir.join(format!("trace-{round}.jsonl"));
        std::fs::write(&trace_path, trace(round, steps)).expect("write the trace");
        let mut child = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
            .arg("replay")
            .arg(&trace_path)
            .arg("--db")
            .arg(&db)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start imagekeeper replay");
        // Each step prints a detect line, one or two removed lines and a delete_unused line.
        let wait_for = 1 + rng.usize(..usize::try_from(steps * 4).expect("a small step count"));
        let lines = read_lines(&mut child, wait_for);
        let pid = libc::pid_t::try_from(child.id()).expect("pids fit in pid_t");
        // SAFETY: kill(2) on our own child, which has not been waited for, so the pid is ours.
        let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill failed");
        let status = child.wait().expect("wait for the child");
        // The lines it printed before dying were read above; a few more may sit in the pipe.
        promised(&lines, &mut promised_all);
        total_lines += lines.len();
        if status.code().is_none() {
            killed += 1;
        }
        let context = format!(
            "seed {seed:#x} round {round} (killed after {} lines)",
            lines.len()
        );
        verify(&db, &promised_all, &mut last_seen, &context);
        let _ = std::fs::remove_file(&trace_path);
    }
    (killed, total_lines, promised_all.removed.len())
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let seed = std::env::var("IMAGEKEEPER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xC0FFEE);
    eprintln!("crash loop: seed {seed:#x}");
    let rounds = std::env::var("IMAGEKEEPER_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let (killed, lines, removed) = crash_loop(rounds, seed, dir.path());
    eprintln!(
        "crash loop: {rounds} rounds, {killed} killed by SIGKILL after {lines} output lines in \
         all; every kill recovered, check() clean, all {removed} printed removals held, \
         last_detect never went back"
    );
    assert!(
        killed > rounds / 2,
        "too few rounds were actually killed: {killed}"
    );
}
