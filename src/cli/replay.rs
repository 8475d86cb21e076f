//! `imagekeeper replay TRACE.jsonl [--db PATH]`.

use std::io::{BufRead, BufReader, Cursor};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use imagekeeper::replay::{
    MAX_PIPED_TRACE_BYTES, MAX_TRACE_LINE_BYTES, ReplayDb, ReplayError, TraceReadError,
    TraceReader, check_trace, run_lines,
};

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
    let source = TraceSource::open(&args.trace)
        .with_context(|| format!("reading trace {}", args.trace.display()))
        .map_err(Failure::usage)?;
    // The first pass checks every line, so nothing runs before the whole trace is checked;
    // the second runs it. Neither holds more than one line.
    let first = source
        .reader()
        .with_context(|| format!("reading trace {}", args.trace.display()))
        .map_err(Failure::usage)?;
    match check_trace(first) {
        Ok(_) => {}
        Err(TraceReadError::Io(e)) => {
            return Err(Failure::usage(
                anyhow::Error::new(e).context(format!("reading trace {}", args.trace.display())),
            ));
        }
        Err(TraceReadError::Line(e)) => {
            return Err(Failure::usage(
                anyhow::Error::new(e).context(format!("trace {}", args.trace.display())),
            ));
        }
    }
    if let Some(db) = &args.db {
        db::check_path(db)?;
    }
    let db = ReplayDb::new(args.db.as_deref()).context("creating a temporary database")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let second = source
        .reader()
        .with_context(|| format!("reading trace {}", args.trace.display()))
        .map_err(Failure::usage)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    rt.block_on(run_lines(TraceReader::new(second), db.path(), &mut out))
        .map_err(|e| match e {
            ReplayError::Trace(_) | ReplayError::ReadTrace(_) => Failure::usage(e),
            other => Failure::from(other),
        })
}

/// Where the trace is read from: a regular file is read twice from disk; anything else (a
/// pipe, a character device) cannot be read twice and is held in memory, as before streaming,
/// read through the line cap ([`read_capped_lines`]).
enum TraceSource {
    File(PathBuf),
    Memory(Vec<u8>),
}

impl TraceSource {
    fn open(path: &Path) -> std::io::Result<TraceSource> {
        if std::fs::metadata(path)?.is_file() {
            Ok(TraceSource::File(path.to_owned()))
        } else {
            let file = std::fs::File::open(path)?;
            read_capped_lines(
                &mut BufReader::new(file),
                MAX_TRACE_LINE_BYTES,
                MAX_PIPED_TRACE_BYTES,
            )
            .map(TraceSource::Memory)
        }
    }

    fn reader(&self) -> std::io::Result<Box<dyn BufRead + '_>> {
        match self {
            TraceSource::File(path) => Ok(Box::new(BufReader::with_capacity(
                1 << 16,
                std::fs::File::open(path)?,
            ))),
            TraceSource::Memory(bytes) => Ok(Box::new(Cursor::new(bytes.as_slice()))),
        }
    }
}

/// Reads `reader` to its end, line by line, but stops after a line longer than `max_line`
/// (its line end not counted): of that line only as much as [`TraceReader`] reads to refuse it
/// (the cap, a `\r\n` and one byte) is kept, so the check names it as from a file, and the
/// rest, however long (a pipe that never ends its line, `/dev/zero`), is never read. More than
/// `max_total` bytes in all (endless short lines) is an error, read no further.
fn read_capped_lines(
    reader: &mut impl BufRead,
    max_line: usize,
    max_total: u64,
) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let most = u64::try_from(max_line.saturating_add(3)).unwrap_or(u64::MAX);
    let mut bytes = Vec::new();
    loop {
        let start = bytes.len();
        if u64::try_from(start).unwrap_or(u64::MAX) > max_total {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "a trace that is not a regular file is held in memory, and this one is \
                     longer than {max_total} bytes, the most held: give it as a file"
                ),
            ));
        }
        let n = (&mut *reader).take(most).read_until(b'\n', &mut bytes)?;
        if n == 0
            || (u64::try_from(n).unwrap_or(u64::MAX) == most
                && bytes[start..].last() != Some(&b'\n'))
        {
            return Ok(bytes);
        }
    }
}
