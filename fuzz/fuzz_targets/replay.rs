//! Arbitrary bytes as a replay trace: the streaming reader never panics and agrees with
//! `parse_trace` on the same text (bytes that are not UTF-8 are a read error), and a small
//! trace that parses runs as the command runs it (`run_lines` over a `TraceReader`, real GC
//! manager and store on a temp database) without panicking.
#![no_main]

use imagekeeper::replay::{TraceReadError, TraceReader, check_trace, parse_trace, run_lines};
use libfuzzer_sys::fuzz_target;

/// Longer traces only cost time: every commit is a durable write.
const MAX_LINES: usize = 32;

fuzz_target!(|data: &[u8]| {
    let checked = check_trace(data);
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(
            matches!(checked, Err(TraceReadError::Io(_))),
            "bytes that are not UTF-8 must be a read error: {checked:?}"
        );
        return;
    };
    let parsed = parse_trace(text);
    match (&checked, &parsed) {
        (Ok(count), Ok(trace)) => assert_eq!(*count, trace.len()),
        (Err(TraceReadError::Line(a)), Err(b)) => assert_eq!(a, b),
        _ => panic!("check_trace {checked:?} but parse_trace {parsed:?}"),
    }
    let Ok(trace) = parsed else {
        return;
    };
    if trace.is_empty() || trace.len() > MAX_LINES {
        return;
    }
    // tmpfs where there is one: the store fsyncs every commit.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("a temp dir for the replay database");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let mut out = Vec::new();
    // Errors (a GC that cannot free enough, a refused store) are fine; panics are not.
    let _ = rt.block_on(run_lines(
        TraceReader::new(data),
        &dir.path().join("replay.redb"),
        &mut out,
    ));
});
