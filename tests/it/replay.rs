//! `imagekeeper replay` as a process: the traces under tests/replay/ give exactly their
//! `.expected.jsonl` output, a reused --db carries history, and bad traces exit 2 naming the
//! line.

use crate::support::bin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn imagekeeper(args: &[&str]) -> Output {
    bin::run(args)
}

fn replay_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/replay")
}

#[test]
fn every_trace_gives_its_expected_output() {
    let mut traces: Vec<PathBuf> = std::fs::read_dir(replay_dir())
        .expect("tests/replay")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".jsonl") && !name.ends_with(".expected.jsonl")
        })
        .collect();
    traces.sort();
    assert!(traces.len() >= 3, "traces found: {traces:?}");
    for trace in traces {
        let expected_path = trace.with_extension("expected.jsonl");
        let expected = std::fs::read_to_string(&expected_path).expect("expected output");
        let out = imagekeeper(&["replay", trace.to_str().expect("utf8 path")]);
        assert!(
            out.status.success(),
            "{}: {}",
            trace.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            expected,
            "{}",
            trace.display()
        );
    }
}

#[test]
fn a_reused_db_keeps_history_between_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("replay.redb");
    let first = dir.path().join("first.jsonl");
    let second = dir.path().join("second.jsonl");
    std::fs::write(
        &first,
        r#"{"at": 1000, "images": [{"id": "sha256:a", "size": 10}, {"id": "sha256:b", "size": 10}]}
{"at": 1000, "containers": [{"id": "c", "image_id": "sha256:b", "state": "running"}]}
{"at": 1000, "detect": {}}
"#,
    )
    .expect("write");
    // A new process knows nothing of the runtime but the store remembers b's last use, so
    // a, never used, goes first.
    std::fs::write(
        &second,
        r#"{"at": 5000, "policy": {"high": 85, "low": 80, "min_age_s": 0, "max_age_s": 0}}
{"at": 5000, "images": [{"id": "sha256:a", "size": 10}, {"id": "sha256:b", "size": 10}]}
{"at": 5000, "fs": {"capacity": 100, "available": 10}}
{"at": 5000, "gc": {}}
"#,
    )
    .expect("write");
    let db_arg = db.to_str().expect("utf8");
    let out = imagekeeper(&["replay", first.to_str().expect("utf8"), "--db", db_arg]);
    assert!(out.status.success());
    let out = imagekeeper(&["replay", second.to_str().expect("utf8"), "--db", db_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first_removed = stdout.lines().next().expect("a line");
    assert!(first_removed.contains("\"image\":\"sha256:a\""), "{stdout}");
}

#[test]
fn bad_traces_exit_2_with_the_line_and_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let detect = "{\"at\": 1, \"detect\": {}}\n";
    let cases: Vec<(String, &str)> = vec![
        (
            "{\"at\": 1, \"detect\": {}}\n{\"at\": 2, \"policy\": {\"high\": 70, \"low\": 90, \"min_age_s\": 0, \"max_age_s\": 0}}\n".into(),
            "line 2: LowThresholdPercent 90 can not be higher than HighThresholdPercent 70",
        ),
        ("{\"at\": 1, \"gc\": {}}\n\n{oops\n".into(), "line 3: not JSON"),
        ("[1, 2]\n".into(), "line 1: a trace line must be a JSON object"),
        // Image ids the store cannot key a record by are refused before anything runs.
        (
            format!("{detect}{{\"at\": 2, \"images\": [{{\"id\": \"\", \"size\": 1}}]}}\n"),
            "line 2: image \"id\" is empty",
        ),
        (
            format!("{detect}{detect}{{\"at\": 3, \"images\": [{{\"id\": \"sha256:a\\u0000\", \"size\": 1}}]}}\n"),
            "line 3: image \"id\" contains a NUL byte",
        ),
        (
            format!(
                "{detect}{{\"at\": 2, \"containers\": [{{\"id\": \"c\", \"image_id\": \"{}\", \"state\": \"running\"}}]}}\n",
                "a".repeat(65_536)
            ),
            "line 2: container \"image_id\" is 65536 bytes long; an image id is at most 65535 bytes",
        ),
        (
            format!("{detect}{{\"at\": 2, \"remove_fails\": [\"\"]}}\n"),
            "line 2: \"remove_fails\" entry is empty",
        ),
        (
            format!("{detect}{{\"at\": \"3000-01-01T00:00:00Z\", \"gc\": {{}}}}\n"),
            "line 2: \"at\" \"3000-01-01T00:00:00Z\" is outside the representable range",
        ),
        (
            "{\"at\": 18446744073709551615, \"gc\": {}}\n".into(),
            "line 1: \"at\" 18446744073709551615 seconds is outside the representable range",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.jsonl"));
        std::fs::write(&path, text.as_bytes()).expect("write");
        let db = dir.path().join(format!("bad{i}.redb"));
        let out = imagekeeper(&[
            "replay",
            path.to_str().expect("utf8"),
            "--db",
            db.to_str().expect("utf8"),
        ]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}",
            &text[..text.len().min(300)]
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "nothing runs before the whole trace is checked"
        );
        assert!(!db.exists(), "no database is created for a rejected trace");
    }
    let out = imagekeeper(&["replay", "/nonexistent/trace.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reading trace /nonexistent/trace.jsonl: No such file or directory"),
        "{stderr}"
    );
}

#[test]
fn a_trace_from_a_pipe_gives_the_same_output_as_from_its_file() {
    // A pipe cannot be read twice (check, then run): it is held in memory instead.
    let trace = replay_dir().join("repull_after_eviction_is_reported.jsonl");
    let expected = std::fs::read_to_string(trace.with_extension("expected.jsonl")).expect("read");
    let out = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(["replay", "/dev/stdin"])
        .stdin(std::fs::File::open(&trace).expect("open the trace"))
        .output()
        .expect("run imagekeeper");
    // A file as stdin is still a regular file; a pipe is not.
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    let mut child = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .args(["replay", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run imagekeeper");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(&std::fs::read(&trace).expect("read the trace"))
            .expect("write the trace");
    }
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

/// Runs imagekeeper with its stdout a pipe whose reader has already gone away (as
/// `imagekeeper ... | head` once head exits).
fn with_stdout_closed(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    bin::imagekeeper()
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run imagekeeper")
}

#[test]
fn stdout_closed_by_its_reader_is_not_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = replay_dir().join("lru_order_survives_restart.jsonl");
    let db = dir.path().join("replay.redb");
    let db_arg = db.to_str().expect("utf8");
    let out = with_stdout_closed(&["replay", trace.to_str().expect("utf8"), "--db", db_arg]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A command that prints with println! (inspect's table) behaves the same.
    let out = with_stdout_closed(&["inspect", "--db", db_arg, "list"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 31: a trace line was held whole however long. The command refuses a line over
/// 64 MiB with exit 2, naming the trace and the line, and runs nothing.
#[test]
fn a_trace_line_over_64_mib_exits_2_naming_its_line() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("long.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&trace).expect("create"));
    writeln!(file, r#"{{"at": 1, "detect": {{}}}}"#).expect("write");
    let chunk = [b' '; 1 << 16];
    for _ in 0..((64 << 20) / chunk.len() + 1) {
        file.write_all(&chunk).expect("write");
    }
    writeln!(file).expect("write");
    drop(file);
    let out = imagekeeper(&["replay", trace.to_str().expect("utf8 path")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "trace {}: line 2: the line is longer than 67108864 bytes, the most a trace line may hold",
            trace.display()
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}

/// Runs `replay /dev/stdin` with a writer thread feeding it `first` and then `chunk` over and
/// over, until the command stops reading (Ok: the bytes written) or `limit` bytes are written
/// without it stopping (Err: the bytes written; the command is killed).
fn replay_a_pipe_fed_without_end(
    first: &'static [u8],
    chunk: Vec<u8>,
    limit: usize,
) -> (Result<usize, usize>, std::process::Output) {
    use std::io::Write;
    let mut child = bin::imagekeeper()
        .args(["replay", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run imagekeeper");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        if stdin.write_all(first).is_err() {
            return Ok(0);
        }
        let mut written = first.len();
        while written <= limit {
            if stdin.write_all(&chunk).is_err() {
                return Ok(written);
            }
            written += chunk.len();
        }
        Err(written)
    });
    let written = writer.join().expect("the writer thread");
    if written.is_err() {
        let _ = child.kill();
    }
    (written, child.wait_with_output().expect("wait"))
}

/// Issue 31: a trace that is not a regular file (a pipe, a device) cannot be read twice and is
/// held in memory; it was read whole before any line was checked, so a pipe with one endless
/// line (or `replay /dev/zero`) grew without bound. The line cap now applies while it is read:
/// a writer that never ends its line is cut off once the command has read the cap and a few
/// bytes of it (the command exits 2 naming the line, and the writer's next write fails), never
/// after twice the cap.
#[test]
fn a_trace_line_over_64_mib_from_a_pipe_is_refused_without_reading_the_rest() {
    const CAP: usize = 64 << 20;
    // The line never ends: only the reader's going away stops the writer, and twice the cap
    // (far above what a capped read takes, the pipe's buffer included) is a failure.
    let (written, out) = replay_a_pipe_fed_without_end(
        b"{\"at\": 1, \"detect\": {}}\n",
        vec![b' '; 1 << 16],
        2 * CAP,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let written = written.unwrap_or_else(|n| {
        panic!("replay read {n} bytes of one line from a pipe without refusing it: {stderr}")
    });
    assert!(written > CAP, "refused after {written} bytes only");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "trace /dev/stdin: line 2: the line is longer than 67108864 bytes, the most a trace line may hold"
        ),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}

/// A trace that is not a regular file is held in memory: besides the line cap, at most
/// `MAX_PIPED_TRACE_BYTES` in all, so a pipe of endless short lines is refused (exit 2, naming
/// the cap) once it has read that much, never after twice it.
#[test]
fn a_piped_trace_of_endless_short_lines_is_refused_at_the_total_cap() {
    const CAP: usize = imagekeeper::replay::MAX_PIPED_TRACE_BYTES as usize;
    let line = b"{\"at\": 1, \"detect\": {}}\n";
    let chunk: Vec<u8> = line
        .iter()
        .copied()
        .cycle()
        .take(line.len() * 4096)
        .collect();
    let (written, out) = replay_a_pipe_fed_without_end(b"", chunk, 2 * CAP);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let written = written.unwrap_or_else(|n| {
        panic!("replay held {n} bytes of a piped trace without refusing it: {stderr}")
    });
    assert!(written > CAP, "refused after {written} bytes only");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("longer than 268435456 bytes, the most held: give it as a file"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}
