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
            "line 2: invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 90 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 70",
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

/// The rows of the testing page's table of the kubelet's rules (between the `rules-table`
/// markers): (rule, the names in backticks of its last column).
fn rules_table() -> Vec<(String, Vec<String>)> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/design/testing.md");
    let text = std::fs::read_to_string(&page).expect("the testing page");
    let table = text
        .split("<!-- rules-table -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /rules-table -->").next())
        .expect("the rules table between its markers");
    table
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("| rule") && !l.starts_with("| ---"))
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {row}");
            let names = cells[2]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (cells[0].trim().to_owned(), names)
        })
        .collect()
}

/// Every `.rs` file's text under `dir`.
fn sources(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("a source dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(std::fs::read_to_string(&path).expect("source"));
        }
    }
}

/// The guard of issue 37: each rule names tests that exist, and every trace pins some rule.
#[test]
fn every_trace_belongs_to_a_rule_and_every_rule_names_existing_tests() {
    let rows = rules_table();
    assert!(rows.len() >= 15, "rows: {rows:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = Vec::new();
    sources(&root.join("src"), &mut code);
    sources(&root.join("tests"), &mut code);
    let mut named = std::collections::BTreeSet::new();
    for (rule, names) in &rows {
        assert!(!names.is_empty(), "{rule}: names no test");
        for name in names {
            match name.rsplit_once("::") {
                Some((_, function)) => {
                    let def = format!("fn {function}(");
                    assert!(
                        code.iter().any(|text| text.contains(&def)),
                        "{rule}: no test {name}"
                    );
                }
                None => {
                    assert!(
                        replay_dir().join(format!("{name}.jsonl")).is_file(),
                        "{rule}: no trace tests/replay/{name}.jsonl"
                    );
                    named.insert(name.clone());
                }
            }
        }
    }
    for entry in std::fs::read_dir(replay_dir()).expect("tests/replay") {
        let file = entry.expect("entry").file_name();
        let file = file.to_str().expect("utf8");
        if let Some(name) = file.strip_suffix(".jsonl")
            && !file.ends_with(".expected.jsonl")
        {
            assert!(
                named.contains(name),
                "tests/replay/{file} pins no rule of docs/src/design/testing.md's table"
            );
        }
    }
}

/// Every case of the kubelet's image GC tests has its trace (kubelet master
/// pkg/kubelet/images/image_gc_manager_test.go, and the MaxAge cases of
/// test/e2e_node/image_gc_test.go), opening with a note that names it; the one that is not a
/// trace is named with the test that ports it.
#[test]
fn every_kubelet_gc_test_is_ported() {
    const GC_TESTS: [&str; 23] = [
        "TestDetectImagesInitialDetect",
        "TestDetectImagesInitialDetectWithRuntimeHandlerInImageCriAPIFeatureGate",
        "TestDetectImagesWithNewImage",
        "TestDeleteUnusedImagesExemptSandboxImage",
        "TestDeletePinnedImage",
        "TestDoNotDeletePinnedImage",
        "TestDeleteUnPinnedImage",
        "TestAllPinnedImages",
        "TestDetectImagesContainerStopped",
        "TestDetectImagesWithRemovedImages",
        "TestFreeSpaceImagesInUseContainersAreIgnored",
        "TestDeleteUnusedImagesRemoveAllUnusedImages",
        "TestDeleteUnusedImagesLimitByImageLiveTime",
        "TestFreeSpaceRemoveByLeastRecentlyUsed",
        "TestFreeSpaceTiesBrokenByDetectedTime",
        "TestGarbageCollectBelowLowThreshold",
        "TestGarbageCollectCadvisorFailure",
        "TestGarbageCollectBelowSuccess",
        "TestGarbageCollectNotEnoughFreed",
        "TestGarbageCollectImageNotOldEnough",
        "TestGarbageCollectImageTooOld",
        "TestGarbageCollectImageMaxAgeDisabled",
        "TestValidateImageGCPolicy",
    ];
    // Policy validation refuses the whole trace, so its cases are a unit test's table.
    const NOT_TRACES: [(&str, &str); 1] = [(
        "TestValidateImageGCPolicy",
        "src/gc/policy.rs: kubelet_test_validate_image_gc_policy",
    )];
    let e2e = [
        "e2e_ImageMaximumGCAge_should_GC_unused_images",
        "e2e_ImageMaximumGCAge_should_not_GC_unused_images_prematurely",
    ];
    let mut expected = std::collections::BTreeSet::new();
    for test in GC_TESTS {
        if let Some((_, ported)) = NOT_TRACES.iter().find(|(t, _)| *t == test) {
            let (file, function) = ported.split_once(": ").expect("file: function");
            let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
                .expect("the porting test's file");
            assert!(text.contains(&format!("fn {function}(")), "{ported}");
            assert!(text.contains(test), "{file} names {test}");
            continue;
        }
        expected.insert(format!("kubelet_{test}"));
    }
    expected.extend(e2e.iter().map(|t| format!("kubelet_{t}")));
    let mut found = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(replay_dir()).expect("tests/replay") {
        let file = entry.expect("entry").file_name();
        let file = file.to_str().expect("utf8").to_owned();
        if let Some(name) = file.strip_suffix(".jsonl")
            && name.starts_with("kubelet_")
            && !file.ends_with(".expected.jsonl")
        {
            let text = std::fs::read_to_string(replay_dir().join(&file)).expect("trace");
            let first = text.lines().next().unwrap_or("");
            let test = name.trim_start_matches("kubelet_");
            let named = if let Some(case) = test.strip_prefix("e2e_") {
                first.contains("test/e2e_node/image_gc_test.go")
                    && first.contains(&case.replace("ImageMaximumGCAge_", "").replace('_', " "))
            } else {
                first.contains("pkg/kubelet/images/image_gc_manager_test.go")
                    && first.contains(&format!(" {test}:"))
            };
            assert!(
                first.contains("\"note\"") && named,
                "{file} opens with a note naming the kubelet test it ports: {first}"
            );
            found.insert(name.to_owned());
        }
    }
    assert_eq!(found, expected);
}
