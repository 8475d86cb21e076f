//! Arbitrary text as a replay trace: parsing never panics, and a small trace that parses runs
//! (`run_trace`, real GC manager and store on a temp database) without panicking.
#![no_main]

use imagekeeper::replay::{parse_trace, run_trace};
use libfuzzer_sys::fuzz_target;

/// Longer traces only cost time: every commit is a durable write.
const MAX_LINES: usize = 32;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(trace) = parse_trace(text) else {
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
    let _ = rt.block_on(run_trace(&trace, &dir.path().join("replay.redb"), &mut out));
});
