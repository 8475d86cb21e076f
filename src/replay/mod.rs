//! Replay: deterministic what-if runs and bug reports. A trace (see `trace`) drives the real
//! GC manager and a real store on disk against a scripted runtime and the trace's own times;
//! the output is one JSON object per line, flushed as it happens, so every line printed is a
//! commit already made. Besides the cycles' lines (`detect`, `removed`, `gc`,
//! `delete_unused`), a detect's journal shows as `removed_externally` (an image gone that
//! imagekeeper did not remove) and `repulled` (an evicted image seen again), printed before
//! the line of the cycle whose detect found them.
//!
//! A trace is run as it is read ([`run_lines`] over a [`TraceReader`]): memory is the
//! runtime's scripted state and the manager's, never the whole trace. The command checks the
//! whole trace first ([`check_trace`]) and then reads it again to run it.

mod trace;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use crate::gc::{DetectReport, GcConfig, GcError, GcReport, ImageGcManager};
use crate::model::UnixNanos;
use crate::store::{Store, StoreError};

/// The scripted runtime lives in `crate::runtime` (no harness needed); same names here.
pub use crate::runtime::{ScriptState, ScriptedRuntime};
pub use trace::{
    MAX_PIPED_TRACE_BYTES, MAX_TRACE_LINE_BYTES, TraceError, TraceLine, TraceOp, TraceReadError,
    TraceReader, check_trace, parse_trace,
};

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// A trace line does not parse.
    #[error("trace {0}")]
    Trace(#[from] TraceError),
    /// The trace could not be read (or is not UTF-8).
    #[error("reading trace: {0}")]
    ReadTrace(std::io::Error),
    /// The replay database failed (opening it, or a commit).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The GC manager refused the trace's policy, or a detect failed.
    #[error(transparent)]
    Gc(#[from] GcError),
    /// An output line could not be written.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

impl From<TraceReadError> for ReplayError {
    fn from(e: TraceReadError) -> ReplayError {
        match e {
            TraceReadError::Io(e) => ReplayError::ReadTrace(e),
            TraceReadError::Line(e) => ReplayError::Trace(e),
        }
    }
}

/// Runs `trace` against the database at `db` (reused if it exists) and writes the output
/// lines to `out`.
pub async fn run_trace(
    trace: &[TraceLine],
    db: &Path,
    out: &mut dyn Write,
) -> Result<(), ReplayError> {
    run_lines(trace.iter().cloned().map(Ok), db, out).await
}

/// Runs the trace `lines` as they come (each line is dropped once it has run; the one held
/// is the runtime's state it set), against the database at `db` (reused if it exists), and
/// writes the output lines to `out`. Stops at the first line that is an error.
pub async fn run_lines<I>(lines: I, db: &Path, out: &mut dyn Write) -> Result<(), ReplayError>
where
    I: IntoIterator<Item = Result<TraceLine, TraceReadError>>,
{
    let runtime = ScriptedRuntime::new();
    let mut config = GcConfig::default();
    let mut manager: Option<ImageGcManager<ScriptedRuntime>> = None;
    for line in lines {
        let line = line?;
        let at = line.at;
        let secs = at.as_secs();
        let current = match manager.take() {
            Some(m) => m,
            None => open_manager(&runtime, db, &config, at)?,
        };
        let current = match line.op {
            TraceOp::Images(images, inodes) => {
                let mut state = runtime.state();
                state.images = images.into();
                state.image_inodes = inodes;
                drop(state);
                current
            }
            TraceOp::Containers(containers) => {
                runtime.state().containers = containers;
                current
            }
            TraceOp::Fs {
                capacity,
                available,
                inodes,
            } => {
                let mut state = runtime.state();
                state.fs = Some((capacity, available));
                state.fs_inodes = inodes;
                drop(state);
                current
            }
            TraceOp::ContainerFs {
                capacity,
                available,
                inodes,
            } => {
                runtime.state().container_fs = Some((capacity, available, inodes));
                current
            }
            TraceOp::RemoveFails(ids) => {
                runtime.state().remove_fails = ids.into_iter().collect();
                current
            }
            TraceOp::FsFails(message) => {
                runtime.state().fs_error = message;
                current
            }
            TraceOp::Note(_) => current,
            TraceOp::Policy(policy) => {
                config.policy = policy;
                let store = current.store().clone();
                drop(current);
                open_manager_on(store, &runtime, &config)?
            }
            TraceOp::Detect => {
                let report = current.detect(at).await?;
                emit_journal(out, secs, &report)?;
                emit(
                    out,
                    json!({"at": secs, "op": "detect", "records": report.records}),
                )?;
                current
            }
            TraceOp::Gc => {
                let report = current.garbage_collect(at).await;
                emit_report(out, secs, "gc", &report)?;
                current
            }
            TraceOp::DeleteUnused => {
                let report = current.delete_unused_images(at).await;
                emit_report(out, secs, "delete_unused", &report)?;
                current
            }
            TraceOp::Restart => {
                // Drop the manager and with it the last handle on the store, then reopen.
                drop(current);
                open_manager(&runtime, db, &config, at)?
            }
        };
        manager = Some(current);
    }
    Ok(())
}

fn open_manager(
    runtime: &ScriptedRuntime,
    db: &Path,
    config: &GcConfig,
    at: UnixNanos,
) -> Result<ImageGcManager<ScriptedRuntime>, ReplayError> {
    let store = Arc::new(Store::open(db, at)?);
    open_manager_on(store, runtime, config)
}

fn open_manager_on(
    store: Arc<Store>,
    runtime: &ScriptedRuntime,
    config: &GcConfig,
) -> Result<ImageGcManager<ScriptedRuntime>, ReplayError> {
    Ok(ImageGcManager::new(runtime.clone(), store, config.clone())?)
}

/// What a detect journaled: images gone that imagekeeper did not remove
/// (`removed_externally`) and evicted images seen again (`repulled`, with the removal's time,
/// reason and the delay). Printed before the cycle's own lines.
fn emit_journal(out: &mut dyn Write, secs: i64, report: &DetectReport) -> Result<(), ReplayError> {
    for (key, entry) in &report.external_removals {
        emit(
            out,
            json!({
                "at": secs,
                "op": "removed_externally",
                "image": key.key.image_id.as_str(),
                "runtime_handler": key.key.runtime_handler,
                "size": entry.size,
            }),
        )?;
    }
    for repull in &report.repulls {
        emit(
            out,
            json!({
                "at": secs,
                "op": "repulled",
                "image": repull.key.image_id.as_str(),
                "runtime_handler": repull.key.runtime_handler,
                "removed_at": repull.removed_at.as_secs(),
                "removed_by": repull.remover.as_str(),
                "reason": repull.reason_label(),
                "delay_s": repull.delay.as_secs(),
            }),
        )?;
    }
    Ok(())
}

fn emit_report(
    out: &mut dyn Write,
    secs: i64,
    op: &str,
    report: &GcReport,
) -> Result<(), ReplayError> {
    if let Some(detect) = &report.detect {
        emit_journal(out, secs, detect)?;
    }
    for removal in &report.removed {
        emit(
            out,
            json!({
                "at": secs,
                "op": "removed",
                "image": removal.key.image_id.as_str(),
                "runtime_handler": removal.key.runtime_handler,
                "reason": removal.reason.as_str(),
                "size": removal.size,
            }),
        )?;
    }
    let error = report.error.as_ref().map(|e| e.to_string());
    emit(
        out,
        json!({"at": secs, "op": op, "freed": report.freed, "error": error}),
    )
}

fn emit(out: &mut dyn Write, value: serde_json::Value) -> Result<(), ReplayError> {
    writeln!(out, "{value}")?;
    out.flush()?;
    Ok(())
}

/// A replay database: the given path, or a file in a temp dir removed on drop.
pub struct ReplayDb {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl ReplayDb {
    /// The database at `db`, or (`None`) `replay.redb` in a new temporary directory, removed
    /// when the `ReplayDb` drops.
    pub fn new(db: Option<&Path>) -> std::io::Result<ReplayDb> {
        match db {
            Some(p) => Ok(ReplayDb {
                path: p.to_owned(),
                _dir: None,
            }),
            None => {
                let dir = tempfile::tempdir()?;
                Ok(ReplayDb {
                    path: dir.path().join("replay.redb"),
                    _dir: Some(dir),
                })
            }
        }
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// Output shared with the trace's iterator.
    #[derive(Clone, Default)]
    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn each_line_runs_before_the_next_is_read() {
        let text = r#"{"at": 10, "images": [{"id": "sha256:a", "size": 5}, {"id": "sha256:b", "size": 5}]}
{"at": 10, "fs": {"capacity": 100, "available": 10}}
{"at": 10, "detect": {}}
{"at": 20, "policy": {"high": 50, "low": 40, "min_age_s": 0, "max_age_s": 0}}
{"at": 30, "gc": {}}
{"at": 40, "delete_unused": {}}"#;
        let out = Shared::default();
        let seen = out.clone();
        let mut asked = Vec::new();
        let lines = TraceReader::new(text.as_bytes()).inspect(|line| {
            // When line n is handed out, the output holds exactly the lines of the
            // operations before it that print one.
            let printed = String::from_utf8_lossy(&seen.0.borrow()).lines().count();
            asked.push((line.as_ref().map(|l| l.line).unwrap_or(0), printed));
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let mut writer = out.clone();
        run_lines(lines, &dir.path().join("replay.redb"), &mut writer)
            .await
            .expect("runs");
        // detect prints 1 line; gc removes both images (2 lines) and prints 1; delete_unused 1.
        assert_eq!(
            asked,
            vec![(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 4)],
            "{}",
            String::from_utf8_lossy(&out.0.borrow())
        );
    }

    #[tokio::test]
    async fn a_line_that_fails_stops_the_run_with_its_number() {
        let text = "{\"at\": 10, \"detect\": {}}\n{\"at\": 5, \"gc\": {}}\n";
        let dir = tempfile::tempdir().expect("temp dir");
        let mut out = Vec::new();
        let err = run_lines(
            TraceReader::new(text.as_bytes()),
            &dir.path().join("replay.redb"),
            &mut out,
        )
        .await
        .expect_err("line 2 goes back in time");
        assert_eq!(
            err.to_string(),
            "trace line 2: \"at\" goes back in time (line 1 is later)"
        );
        assert_eq!(
            String::from_utf8_lossy(&out).lines().count(),
            1,
            "line 1 ran"
        );
    }
}
