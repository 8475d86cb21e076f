//! `imagekeeper replay TRACE.jsonl [--db PATH]`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use imagekeeper::replay::{ReplayDb, ReplayError, parse_trace, run_trace};

use super::{Failure, db};

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The trace: JSON lines, each with "at" and one operation.
    trace: PathBuf,
    /// The database to use (reused if it exists); a temporary file when absent.
    #[arg(long)]
    db: Option<PathBuf>,
}

pub fn run(args: ReplayArgs) -> Result<(), Failure> {
    let text = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("reading trace {}", args.trace.display()))
        .map_err(Failure::usage)?;
    let trace = parse_trace(&text)
        .with_context(|| format!("trace {}", args.trace.display()))
        .map_err(Failure::usage)?;
    if let Some(db) = &args.db {
        db::check_path(db)?;
    }
    let db = ReplayDb::new(args.db.as_deref()).context("creating a temporary database")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    rt.block_on(run_trace(&trace, db.path(), &mut out))
        .map_err(|e| match e {
            ReplayError::Trace(_) => Failure::usage(e),
            other => Failure::from(other),
        })
}
