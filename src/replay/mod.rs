//! Replay: deterministic what-if runs and bug reports. A trace (see `trace`) drives the real
//! GC manager and a real store on disk against a scripted runtime and the trace's own times;
//! the output is one JSON object per line, flushed as it happens, so every line printed is a
//! commit already made. Besides the cycles' lines (`detect`, `removed`, `gc`,
//! `delete_unused`), a detect's journal shows as `removed_externally` (an image gone that
//! imagekeeper did not remove) and `repulled` (an evicted image seen again), printed before
//! the line of the cycle whose detect found them.

pub mod runtime;
pub mod trace;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use crate::gc::{DetectReport, GcConfig, GcError, GcReport, ImageGcManager};
use crate::model::UnixNanos;
use crate::store::{Store, StoreError};

pub use runtime::{ScriptState, ScriptedRuntime};
pub use trace::{TraceError, TraceLine, TraceOp, parse_trace};

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("trace {0}")]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Gc(#[from] GcError),
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

/// Runs `trace` against the database at `db` (reused if it exists) and writes the output
/// lines to `out`.
pub async fn run_trace(
    trace: &[TraceLine],
    db: &Path,
    out: &mut dyn Write,
) -> Result<(), ReplayError> {
    let runtime = ScriptedRuntime::new();
    let mut config = GcConfig::default();
    let mut manager: Option<ImageGcManager<ScriptedRuntime>> = None;
    for line in trace {
        let at = line.at;
        let secs = at.as_secs();
        let current = match manager.take() {
            Some(m) => m,
            None => open_manager(&runtime, db, &config, at)?,
        };
        let current = match &line.op {
            TraceOp::Images(images) => {
                runtime.state().images = images.clone();
                current
            }
            TraceOp::Containers(containers) => {
                runtime.state().containers = containers.clone();
                current
            }
            TraceOp::Fs {
                capacity,
                available,
            } => {
                runtime.state().fs = Some((*capacity, *available));
                current
            }
            TraceOp::RemoveFails(ids) => {
                runtime.state().remove_fails = ids.iter().cloned().collect();
                current
            }
            TraceOp::Policy(policy) => {
                config.policy = *policy;
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

    pub fn path(&self) -> &Path {
        &self.path
    }
}
