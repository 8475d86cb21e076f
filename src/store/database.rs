//! One redb database opened with the store's settings: redb's builder (single writer, the
//! page cache, the integrity check on every read-write open), [`StoreOptions`], the guard that
//! turns a panic inside redb into [`StoreError::Corrupt`] ([`refuse_panics`]) and the mapping
//! of redb's open errors to ours ([`map_open_error`]). Below `open.rs`, `backup.rs` and
//! `file.rs`, which each open files through it. Invariant: every `redb::Builder` of the store
//! comes from [`builder`] or [`builder_with`], so no open skips the integrity check.

use std::io;
use std::path::Path;

use redb::{Builder, ConcurrencyMode, DatabaseError, Durability, StorageError};

use super::{Handle, Source, Store, StoreError};

/// redb's page cache by default. The agent reads its records once per detect cycle (every few
/// minutes) and the GC walk touches a few index pages: the kernel's page cache serves those
/// reads, so redb's own cache is kept small to keep the agent's memory small. Measured at 100k
/// records (a process that opens the file and walks every record and the eviction order; peak
/// RSS / walk time): 1 MiB 4.4 MiB / 535 ms, 4 MiB 7.7 / 516, 8 MiB 11.8 / 425, 16 MiB 19.1 /
/// 411, 64 MiB 19.2 / 436 (the whole file fits): 8 MiB is the knee.
pub const DEFAULT_CACHE_BYTES: usize = 8 * 1024 * 1024;

/// How a read-write store is opened ([`Store::open_with_options`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    /// redb's page cache, in bytes ([`DEFAULT_CACHE_BYTES`]).
    pub cache_bytes: usize,
    /// Whether every commit saves redb's allocator state (quick repair), so that the open
    /// after a crash skips the full repair walk; see docs/src/design/performance.md for its cost.
    pub quick_repair: bool,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            cache_bytes: DEFAULT_CACHE_BYTES,
            // On. Measured by benches/store_figures.rs at 100k records on this disk: quick
            // repair made the one-record commit p50 1.48x slower (11.9 ms vs 8.0 ms, in a run
            // where a bare fsync took 4.0 ms) and bought little on the open after a SIGKILL
            // (87.8 ms with it, 85.6 ms without, 93.1 ms for a clean open: every read-write
            // open verifies the whole file anyway). It stays on because `inspect` beside a
            // running agent copies the file mid-commit and opens the copy: without quick repair
            // such a copy needs redb's full repair and failed verification in 3 of 24 runs of
            // `inspect_beside_a_writer_in_a_gc_burst_never_calls_the_database_corrupt` (0 with).
            quick_repair: true,
        }
    }
}

impl StoreOptions {
    /// Sets the cache size in bytes.
    pub fn with_cache_bytes(mut self, bytes: usize) -> StoreOptions {
        self.cache_bytes = bytes;
        self
    }

    /// Sets whether quick repair is on.
    pub fn with_quick_repair(mut self, on: bool) -> StoreOptions {
        self.quick_repair = on;
        self
    }
}

pub(super) fn builder() -> Builder {
    builder_with(&StoreOptions::default())
}

fn builder_with(options: &StoreOptions) -> Builder {
    let mut b = Builder::new();
    b.set_concurrency_mode(ConcurrencyMode::SingleWriter);
    b.set_cache_size(options.cache_bytes);
    // Verify every page's checksum on a read-write open: redb trusts the pages of a plain open
    // and may panic reading a damaged one (a zeroed btree page hits an `unreachable!`); with
    // this, a damaged file fails to open as corrupt. It reads the whole file once per open.
    b.set_check_integrity_on_open(true);
    b
}

/// Runs an open, turning a panic inside redb into [`StoreError::Corrupt`]. redb 4.5 panics on
/// some corrupt files (e.g. invalid UTF-8 in a table's type name, `types.rs` `TypeName::
/// from_bytes`) even with its debug assertions off; there is no other way to refuse such a file
/// gracefully. Only the open path is guarded; it needs `panic = "unwind"` (the default).
pub(super) fn refuse_panics(
    path: &Path,
    open: impl FnOnce() -> Result<Store, StoreError>,
) -> Result<Store, StoreError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            Err(StoreError::Corrupt {
                path: path.to_owned(),
                detail: format!("redb panicked reading it: {message}"),
                source: None,
            })
        }
    }
}

/// A read-only open without the schema check, for `open.rs`'s `identify_read_only`.
pub(super) fn open_read_only_unchecked(path: &Path) -> Result<Store, StoreError> {
    let db = builder()
        .open_read_only(path)
        .map_err(|e| map_open_error(path, e, true))?;
    Ok(Store::new(
        Handle::Read(db),
        Source::Fixed,
        path,
        Durability::Immediate,
    ))
}

pub(super) fn open_writable(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
    let db = builder_with(&options)
        .create(path)
        .map_err(|e| map_open_error(path, e, false))?;
    let mut store = Store::new(Handle::Write(db), Source::File, path, Durability::Immediate);
    store.options = options;
    Ok(store)
}

pub(super) fn map_open_error(path: &Path, e: DatabaseError, read_only: bool) -> StoreError {
    let path_buf = path.to_owned();
    match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            StoreError::AlreadyOpen { path: path_buf }
        }
        DatabaseError::RepairAborted if read_only => StoreError::NeedsRecovery { path: path_buf },
        DatabaseError::UpgradeRequired(v) => StoreError::Corrupt {
            path: path_buf,
            detail: format!("redb file format {v} is not supported"),
            source: None,
        },
        DatabaseError::Storage(StorageError::Corrupted(detail)) => StoreError::Corrupt {
            path: path_buf,
            detail,
            source: None,
        },
        DatabaseError::Storage(StorageError::Io(io))
            if matches!(
                io.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData
            ) =>
        {
            StoreError::Corrupt {
                path: path_buf,
                detail: io.to_string(),
                source: Some(io),
            }
        }
        other => StoreError::from_redb(path, other.into()),
    }
}
