//! The one way the tests run the `imagekeeper` binary: [`imagekeeper`] builds the command,
//! [`output`] runs it to its end with stdin closed and stdout/stderr captured.
//!
//! Invariants: a run that hangs is SIGKILLed after [`HANG_GUARD`] and fails the test naming
//! the command (the guard only turns a hang into a failure; no test waits on it for an
//! interleaving); a child that panicked fails the test.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

/// Longest a single run may take before it counts as hung.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// `imagekeeper` (the binary cargo built for these tests), with no arguments yet.
pub fn imagekeeper() -> Command {
    Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
}

/// `imagekeeper ARGS`, run to its end (see [`output`]).
pub fn run(args: &[&str]) -> Output {
    output(imagekeeper().args(args))
}

/// Runs `command` with stdin closed and stdout/stderr captured; SIGKILLs it and panics after
/// [`HANG_GUARD`]; panics when the child's stderr shows a panic.
pub fn output(command: &mut Command) -> Output {
    let shown = format!("{command:?}");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {shown}: {e}"));
    let pid = child.id();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(HANG_GUARD) {
        Ok(out) => out.unwrap_or_else(|e| panic!("wait for {shown}: {e}")),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped (the
            // waiting thread is still blocked in wait).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{shown} hung for {HANG_GUARD:?}");
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{shown} panicked: {stderr}");
    out
}
