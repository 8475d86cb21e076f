//! Opening the database: file and directory permissions, redb's concurrency mode, mapping
//! redb's open errors to ours, and the schema version (create, refuse newer, migrate older
//! after a backup copy).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use redb::{
    Builder, ConcurrencyMode, DatabaseError, Durability, StorageError, TableHandle,
    WriteTransaction,
};

use redb::{ReadableTable, ReadableTableMetadata};

use super::apply::put_meta;
use super::codec::{Codec, IndexKey};
use super::tables::{
    BACKOFF, EVICTION, EVICTION_PREFIX, Encoded, IMAGES, JOURNAL, META, NAMES, PINS, PULLS, USES,
    WARM,
};
use super::{BackupConflict, Handle, Source, Store, StoreError, TxnError};
use crate::model::UnixNanos;

/// The schema version this build writes and reads.
pub const CURRENT_SCHEMA_VERSION: i64 = 5;

/// Names of the entries of the `meta` table.
pub mod meta_keys {
    /// The schema version of the file.
    pub const SCHEMA_VERSION: &str = "schema_version";
    /// When the file was created (unix nanoseconds).
    pub const CREATED_AT: &str = "created_at";
    /// When an agent last started on this file (unix nanoseconds).
    pub const AGENT_STARTED_AT: &str = "agent_started_at";
    /// The time of the last detect cycle that changed something (unix nanoseconds), as its
    /// clock said: it moves back with the clock (a detect more than the tolerance before it
    /// writes its own time even when nothing else changed; see `gc::detect`).
    pub const LAST_DETECT: &str = "last_detect";
    /// The time of the last detect, written at every detect even when nothing else changed:
    /// the last time the agent watched the node (unix nanoseconds; see `gc::WatchHistory`).
    pub const HEARTBEAT: &str = "heartbeat";

    /// The names of the `i`-th unwatched stretch's start and end (unix nanoseconds), oldest
    /// first: `unwatched_<i>_from`, `unwatched_<i>_to` (see `gc::WatchHistory`).
    pub fn unwatched(i: usize) -> (String, String) {
        (format!("unwatched_{i}_from"), format!("unwatched_{i}_to"))
    }

    /// The unwatched nanoseconds within stretch `i` (less than its span once merged).
    pub fn unwatched_nanos(i: usize) -> String {
        format!("unwatched_{i}_nanos")
    }
}

/// One schema upgrade step, from `from` to `from + 1`. See `migrations/`.
struct Migration {
    from: i64,
    apply: fn(&WriteTransaction) -> Result<(), TxnError>,
}

/// Registered upgrade steps, in order (`migrations/000N_*.md`).
const MIGRATIONS: &[Migration] = &[
    Migration {
        from: 1,
        apply: add_names_and_journal,
    },
    Migration {
        from: 2,
        apply: short_eviction_index,
    },
    Migration {
        from: 3,
        apply: add_pins,
    },
    Migration {
        from: 4,
        apply: add_history,
    },
];

/// Schema 1 → 2 (`migrations/0002_names_and_journal.md`): the `names` and `journal` tables,
/// empty. Records, the eviction index, backoff and meta keep their bytes.
fn add_names_and_journal(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(NAMES)?;
    txn.open_table(JOURNAL)?;
    Ok(())
}

/// Schema 2 → 3 (`migrations/0003_short_eviction_index.md`): the eviction index keyed by the
/// whole record key (`eviction`) is replaced by `eviction_prefix`, keyed by a 16-byte prefix
/// of it (see [`IndexKey`]), rebuilt from `images` in the same transaction. Every other
/// table keeps its bytes.
fn short_eviction_index(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.delete_table(EVICTION)?;
    let images = txn.open_table(IMAGES)?;
    let mut index = txn.open_table(EVICTION_PREFIX)?;
    for entry in images.iter()? {
        let (k, v) = entry?;
        let record = v.value().decode().map_err(TxnError::Decode)?;
        let row = IndexKey::of_encoded(k.value().bytes(), &record).encode();
        index.insert(Encoded::new(&row), ())?;
    }
    Ok(())
}

/// Schema 3 → 4 (`migrations/0004_pins.md`): the `pins` table, empty. Every other table
/// keeps its bytes.
fn add_pins(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(PINS)?;
    Ok(())
}

/// Schema 4 → 5 (`migrations/0005_use_and_pull_history.md`): the `uses`, `pulls` and
/// `warm` tables, empty. Every other table keeps its bytes.
fn add_history(txn: &WriteTransaction) -> Result<(), TxnError> {
    txn.open_table(USES)?;
    txn.open_table(PULLS)?;
    txn.open_table(WARM)?;
    Ok(())
}

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
    pub fn with_cache_bytes(mut self, bytes: usize) -> StoreOptions {
        self.cache_bytes = bytes;
        self
    }

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

impl Store {
    /// A store over `handle` that never reopens itself (read-only opens, inspect's verified
    /// copies, a recovery check).
    fn fixed(handle: Handle, label: &Path) -> Store {
        Store::new(handle, Source::Fixed, label, Durability::Immediate)
    }

    /// Refuses a store that is not an existing imagekeeper database of the current schema
    /// (never initializing or migrating it), and reads every table definition (redb panics
    /// on some damaged ones: callers run this under `refuse_panics`).
    fn existing_current_schema(self) -> Result<Store, StoreError> {
        self.check_schema_read_only()?;
        self.read_table_definitions()?;
        Ok(self)
    }

    /// Opens (creating if missing) the database at `path` for reading and writing. A new file
    /// is created 0600 in a directory created 0700. `now` stamps a new file's creation time.
    ///
    /// A file so damaged that redb panics reading it (redb 4.5 unwraps the UTF-8 of the type
    /// names in its table directory) is refused as [`StoreError::Corrupt`]: the open path runs
    /// under `catch_unwind` and reads every table definition before it returns the store.
    ///
    /// The journal's retention starts as the one the file records (`meta`, written by the
    /// last transaction that wrote the journal), else the default, so a command without an
    /// agent (`pull`) prunes as the agent does; [`Store::set_journal_retention`] replaces it.
    pub fn open(path: &Path, now: UnixNanos) -> Result<Store, StoreError> {
        Store::open_with_options(path, now, StoreOptions::default())
    }

    /// [`Store::open`] with other than the default [`StoreOptions`].
    pub fn open_with_options(
        path: &Path,
        now: UnixNanos,
        options: StoreOptions,
    ) -> Result<Store, StoreError> {
        let store = refuse_panics(path, || Store::open_unguarded(path, now, options))?;
        store.load_journal_retention()?;
        // A file well above its live size (churn before this start) is compacted now; one
        // that cannot be is still opened (an I/O failure marks the store for a reopen).
        match store.compact_if_needed() {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(path = %store.path.display(), error = %e, "Cannot compact the database at open")
            }
        }
        Ok(store)
    }

    /// Takes the retention the file records, when it records a valid one.
    fn load_journal_retention(&self) -> Result<(), StoreError> {
        use super::journal::retention_keys;
        let age = self.meta(retention_keys::MAX_AGE_SECS)?;
        let entries = self.meta(retention_keys::MAX_ENTRIES)?;
        if let (Some(age), Some(entries)) = (age, entries)
            && let (Ok(age), Ok(entries)) = (u64::try_from(age), u32::try_from(entries))
            && age >= 1
            && entries >= 1
        {
            self.set_journal_retention(crate::model::JournalRetention {
                max_age: std::time::Duration::from_secs(age),
                max_entries: entries,
            });
        }
        Ok(())
    }

    /// Refuses, before anything is created, a database path that names something other than
    /// a regular file, a symlink to one, or nothing ([`StoreError::NotARegularFile`]). The CLI
    /// calls it to exit 2 on such a setting; [`Store::open`] checks the same itself.
    pub fn check_path(path: &Path) -> Result<(), StoreError> {
        locate(path).map(|_| ())
    }

    fn open_unguarded(
        given: &Path,
        now: UnixNanos,
        options: StoreOptions,
    ) -> Result<Store, StoreError> {
        prepare_dir(given)?;
        // Everything below acts on the regular file the path names: a symlink is followed to
        // its target (the link itself is never replaced), anything else is refused.
        let target = locate(given)?.map_or_else(|| given.to_owned(), |found| found.real);
        // Creation and open happen under an exclusive lock on the file's directory, so of two
        // processes creating or opening the database at once exactly one goes on and the
        // other is refused as "already open" (never both replacing an empty leftover file).
        // Held until the read-write handle holds redb's own lock on the file.
        let _lock = lock_dir(&target)?;
        // Looked at again under the lock: another process may have created it meanwhile.
        let (real, len) = match locate(given)? {
            Some(found) => (found.real, Some(found.len)),
            None => (given.to_owned(), None),
        };
        let path = real.as_path();
        // Only under the lock: without it another process may be creating one right now.
        if _lock.held() {
            remove_stale_temporaries(path);
        }
        if len.is_none_or(|len| len == 0) {
            create_durably(path, now)?;
        }
        // The file is identified read-only first (a file that is not ours, or of a newer
        // schema, is refused with its bytes untouched; one that needs crash recovery cannot be
        // opened read-only and is checked after the read-write open, below). An older schema is
        // copied only after the read-write open: redb's read-only handles do not exclude a
        // writer, so only the read-write open's lock keeps another agent (an old binary still
        // running) from writing the file while it is copied. A failed open leaves no backup.
        if prepare_file(path)? > 0 {
            identify_read_only(path)?;
        }
        let store = open_writable(path, options)?;
        let version = if store.has_meta_table()? {
            store.meta(super::meta_keys::SCHEMA_VERSION)?
        } else {
            None
        };
        match version {
            None => store.initialize(now)?,
            Some(v) if v == CURRENT_SCHEMA_VERSION => {}
            Some(v) if v > CURRENT_SCHEMA_VERSION => {
                return Err(StoreError::SchemaTooNew {
                    path: path.to_owned(),
                    found: v,
                    supported: CURRENT_SCHEMA_VERSION,
                });
            }
            Some(v) => {
                backup(&store, v)?;
                store.migrate(v)?;
            }
        }
        store.read_table_definitions()?;
        Ok(store)
    }

    /// Opens an existing database read-only, alongside a running agent. It never writes the
    /// file; a file that needs crash recovery is refused with [`StoreError::NeedsRecovery`].
    /// Like [`Store::open`], a file that makes redb panic is refused as corrupt.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        refuse_panics(path, || Store::open_read_only_unguarded(path))
    }

    fn open_read_only_unguarded(path: &Path) -> Result<Store, StoreError> {
        let file = fs::File::open(path).map_err(|e| open_io_error(path, e))?;
        check_not_empty(path, &file)?;
        drop(file);
        let db = builder()
            .open_read_only(path)
            .map_err(|e| map_open_error(path, e, true))?;
        Store::fixed(Handle::Read(db), path).existing_current_schema()
    }

    /// Opens, for `imagekeeper inspect`, a private copy of a database read-write with redb's
    /// integrity check (`builder` in this module): the checksum of every page of the committed trees is
    /// verified before anything is read, so a damaged copy is refused, never read wrong. Then
    /// it refuses, as [`Store::open_read_only`] does, a copy that is not a current-schema
    /// imagekeeper database (never initializing or migrating it; redb's repair is the only
    /// write to the copy). Errors name `label` (the inspected file), not the copy. Not guarded
    /// against redb's panics: the caller is.
    pub fn open_verified_copy(copy: &Path, label: &Path) -> Result<Store, StoreError> {
        let file = fs::File::open(copy).map_err(|source| StoreError::Io {
            path: label.to_owned(),
            source,
        })?;
        check_not_empty(label, &file)?;
        drop(file);
        let db = builder()
            .open(copy)
            .map_err(|e| map_open_error(label, e, false))?;
        let mut store = Store::fixed(Handle::Write(db), label);
        // An older schema is upgraded in the private copy (never in the inspected file), so
        // `inspect` reads a file an older agent wrote; the file's own version is kept.
        if store.has_meta_table()?
            && let Some(v) = store.meta(super::meta_keys::SCHEMA_VERSION)?
            && v < CURRENT_SCHEMA_VERSION
            && MIGRATIONS.iter().any(|m| m.from == v)
        {
            store.migrate(v)?;
            store.upgraded_from = Some(v);
        }
        store.existing_current_schema()
    }

    /// Opens `file` (the database at `path`, opened by the caller) read-only and begins a read
    /// transaction, for `imagekeeper inspect` to copy the file under. While the returned pin
    /// lives, a writer in another process reuses no page of the commit it reads or of any later
    /// commit, so a copy taken meanwhile holds whole trees of whichever commit its header names.
    /// A file that needs crash recovery is [`StoreError::NeedsRecovery`]; any other failure
    /// (including a redb panic on a damaged file) is an error the caller may copy without a pin.
    pub fn pin_read_only(file: fs::File, path: &Path) -> Result<ReadPin, StoreError> {
        use redb::ReadableDatabase;
        let pin = || -> Result<ReadPin, StoreError> {
            let backend = redb::backends::FileBackend::new(file)
                .map_err(|e| map_open_error(path, e, true))?;
            let db = builder()
                .open_read_only_with_backend(backend)
                .map_err(|e| map_open_error(path, e, true))?;
            let txn = db
                .begin_read()
                .map_err(|e| StoreError::from_redb(path, e.into()))?;
            Ok(ReadPin { _txn: txn, _db: db })
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(pin)).unwrap_or_else(|_| {
            Err(StoreError::Corrupt {
                path: path.to_owned(),
                detail: "redb failed reading it read-only".to_owned(),
                source: None,
            })
        })
    }

    /// Opens every table once, so that redb decodes every table definition while the open is
    /// still guarded against its panics; later opens read the same bytes.
    fn read_table_definitions(&self) -> Result<(), StoreError> {
        let txn = self.begin_read()?;
        let _ = txn.list_tables().map_err(|e| self.redb_err(e))?.count();
        txn.open_table(IMAGES).map_err(|e| self.redb_err(e))?;
        txn.open_table(EVICTION_PREFIX)
            .map_err(|e| self.redb_err(e))?;
        txn.open_table(BACKOFF).map_err(|e| self.redb_err(e))?;
        txn.open_table(META).map_err(|e| self.redb_err(e))?;
        txn.open_table(NAMES).map_err(|e| self.redb_err(e))?;
        txn.open_table(JOURNAL).map_err(|e| self.redb_err(e))?;
        txn.open_table(PINS).map_err(|e| self.redb_err(e))?;
        txn.open_table(USES).map_err(|e| self.redb_err(e))?;
        txn.open_table(PULLS).map_err(|e| self.redb_err(e))?;
        txn.open_table(WARM).map_err(|e| self.redb_err(e))?;
        Ok(())
    }

    /// Opens (creating if empty) a database on a simulated disk, as [`Store::open`] does a
    /// file: redb's crash recovery, then the schema check, initializing an empty disk with
    /// `now` as its creation time. `label` stands for the path in errors. Tests and fuzzing
    /// only.
    #[cfg(any(test, feature = "fault-injection"))]
    pub fn open_with_backend(
        backend: super::power_loss::PowerLossBackend,
        label: &Path,
        now: UnixNanos,
        mode: super::CommitMode,
    ) -> Result<Store, StoreError> {
        let mut builder = builder();
        if mode == super::CommitMode::NonDurableForTests {
            // redb refuses `Durability::None` when other processes may share the file.
            builder.set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
        }
        let disk = backend.disk();
        let db = builder
            .create_with_backend(backend)
            .map_err(|e| map_open_error(label, e, false))?;
        let source = super::Source::Disk { disk, mode };
        let mut store = Store::new(Handle::Write(db), source, label, Durability::Immediate);
        let version = if store.has_meta_table()? {
            store.meta(super::meta_keys::SCHEMA_VERSION)?
        } else {
            None
        };
        match version {
            None => store.initialize(now)?,
            Some(CURRENT_SCHEMA_VERSION) => {}
            // An older schema is upgraded as on a file (a simulated disk has no backup copy).
            Some(v) if v < CURRENT_SCHEMA_VERSION => store.migrate(v)?,
            Some(v) => {
                return Err(StoreError::SchemaTooNew {
                    path: label.to_owned(),
                    found: v,
                    supported: CURRENT_SCHEMA_VERSION,
                });
            }
        }
        if mode == super::CommitMode::NonDurableForTests {
            store.durability = Durability::None;
        }
        Ok(store)
    }

    /// A scratch database held in memory (redb's in-memory backend), initialized with `now`
    /// as its creation time: `simulate`'s databases. A commit never reaches a disk, so it
    /// costs no `fdatasync` (the backend's sync does nothing) and nothing is left behind when
    /// the process ends, however it ends. `label` stands for the path in errors. Quick repair
    /// is off: there is no crash to repair after.
    pub fn open_in_memory(label: &Path, now: UnixNanos) -> Result<Store, StoreError> {
        let mut builder = builder();
        // The only handle on it: no other process can share memory, and the in-memory backend
        // has no locks for the other modes.
        builder.set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
        let db = builder
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|e| map_open_error(label, e, false))?;
        let mut store = Store::fixed(Handle::Write(db), label);
        store.options = StoreOptions {
            quick_repair: false,
            ..StoreOptions::default()
        };
        store.initialize(now)?;
        store.read_table_definitions()?;
        Ok(store)
    }

    fn has_meta_table(&self) -> Result<bool, StoreError> {
        let txn = self.begin_read()?;
        let found = txn
            .list_tables()
            .map_err(|e| self.redb_err(e))?
            .any(|t| t.name() == META.name());
        Ok(found)
    }

    fn check_schema_read_only(&self) -> Result<(), StoreError> {
        if !self.has_meta_table()? {
            return Err(self.not_ours("it has no meta table"));
        }
        match self.meta(super::meta_keys::SCHEMA_VERSION)? {
            Some(CURRENT_SCHEMA_VERSION) => Ok(()),
            Some(v) if v > CURRENT_SCHEMA_VERSION => Err(StoreError::SchemaTooNew {
                path: self.path.clone(),
                found: v,
                supported: CURRENT_SCHEMA_VERSION,
            }),
            Some(v) => Err(self.not_ours(&format!(
                "schema version {v} must be upgraded by opening it read-write first"
            ))),
            None => Err(self.not_ours("it has no schema version")),
        }
    }

    fn not_ours(&self, detail: &str) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            detail: detail.to_owned(),
            source: None,
        }
    }

    /// Writes the tables and meta entries of a new file, or refuses a redb file that holds
    /// other tables.
    fn initialize(&self, now: UnixNanos) -> Result<(), StoreError> {
        let handle = self.read_handle();
        let Handle::Write(db) = &*handle else {
            return Err(StoreError::ReadOnly {
                path: self.path.clone(),
            });
        };
        let txn = db.begin_write().map_err(|e| self.redb_err(e))?;
        let foreign: Vec<String> = txn
            .list_tables()
            .map_err(|e| self.redb_err(e))?
            .map(|t| t.name().to_owned())
            .filter(|n| n != META.name())
            .collect();
        if !foreign.is_empty() {
            return Err(self.not_ours(&format!("it has tables {foreign:?} but no schema version")));
        }
        let init = || -> Result<(), TxnError> {
            txn.open_table(IMAGES)?;
            txn.open_table(EVICTION_PREFIX)?;
            txn.open_table(BACKOFF)?;
            txn.open_table(NAMES)?;
            txn.open_table(JOURNAL)?;
            txn.open_table(PINS)?;
            txn.open_table(USES)?;
            txn.open_table(PULLS)?;
            txn.open_table(WARM)?;
            let mut meta = txn.open_table(META)?;
            put_meta(
                &mut meta,
                super::meta_keys::SCHEMA_VERSION,
                CURRENT_SCHEMA_VERSION,
            )?;
            put_meta(&mut meta, super::meta_keys::CREATED_AT, now.0)?;
            Ok(())
        };
        init().map_err(|e| self.wrap(e))?;
        self.commit(txn)
    }

    fn migrate(&self, mut version: i64) -> Result<(), StoreError> {
        let handle = self.read_handle();
        let Handle::Write(db) = &*handle else {
            return Err(StoreError::ReadOnly {
                path: self.path.clone(),
            });
        };
        while version < CURRENT_SCHEMA_VERSION {
            let step = MIGRATIONS
                .iter()
                .find(|m| m.from == version)
                .ok_or_else(|| {
                    self.not_ours(&format!("no upgrade from schema version {version}"))
                })?;
            let txn = db.begin_write().map_err(|e| self.redb_err(e))?;
            (step.apply)(&txn).map_err(|e| self.wrap(e))?;
            {
                let mut meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;
                put_meta(&mut meta, super::meta_keys::SCHEMA_VERSION, version + 1)
                    .map_err(|e| self.wrap(e))?;
            }
            self.commit(txn)?;
            version += 1;
        }
        Ok(())
    }

    fn commit(&self, mut txn: WriteTransaction) -> Result<(), StoreError> {
        txn.set_durability(Durability::Immediate)
            .map_err(|e| self.redb_err(e))?;
        txn.set_quick_repair(self.options.quick_repair);
        txn.commit().map_err(|e| self.redb_err(e))?;
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// A fresh read-write handle on the existing database at `path` (already resolved), for a
/// store reopening after an I/O failure: the checks of [`Store::open`] (a regular, plausible,
/// 0600 file, identified read-only before any read-write open, redb's integrity check and
/// crash recovery, the current schema, every table definition), under the same guard against
/// redb's panics. Unlike an open, it never creates, initializes or migrates: the file the
/// store had open must still be there, as it was.
pub(super) fn reopen_file(path: &Path, options: StoreOptions) -> Result<Handle, StoreError> {
    let store = refuse_panics(path, || {
        let found = locate(path)?.ok_or_else(|| StoreError::Missing {
            path: path.to_owned(),
        })?;
        let real = found.real.as_path();
        if found.len == 0 || prepare_file(real)? == 0 {
            return Err(StoreError::Corrupt {
                path: path.to_owned(),
                detail: "the file became empty while the database was open".to_owned(),
                source: None,
            });
        }
        identify_read_only(real)?;
        open_writable(real, options)?.existing_current_schema()
    })?;
    Ok(store.into_handle())
}

/// The schema version and table names of a simulated disk after redb's crash recovery, with
/// no initialization or migration: what the upgrade's power-loss test inspects.
#[cfg(test)]
pub(super) fn schema_on_disk(
    disk: &super::power_loss::PowerLossDisk,
) -> Result<(Option<i64>, Vec<String>), StoreError> {
    let label = Path::new("<power-loss disk>");
    let db = builder()
        .create_with_backend(disk.backend())
        .map_err(|e| map_open_error(label, e, false))?;
    let store = Store::fixed(Handle::Write(db), label);
    let version = store.meta(super::meta_keys::SCHEMA_VERSION)?;
    let txn = store.begin_read()?;
    let mut tables: Vec<String> = txn
        .list_tables()
        .map_err(|e| store.redb_err(e))?
        .map(|t| t.name().to_owned())
        .collect();
    tables.sort();
    Ok((version, tables))
}

/// A fresh handle on a simulated disk, as [`reopen_file`] for a file.
#[cfg(any(test, feature = "fault-injection"))]
pub(super) fn reopen_disk(
    disk: &super::power_loss::PowerLossDisk,
    label: &Path,
    mode: super::CommitMode,
) -> Result<Handle, StoreError> {
    let mut builder = builder();
    if mode == super::CommitMode::NonDurableForTests {
        builder.set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
    }
    let db = builder
        .create_with_backend(disk.backend())
        .map_err(|e| map_open_error(label, e, false))?;
    Ok(Store::fixed(Handle::Write(db), label)
        .existing_current_schema()?
        .into_handle())
}

/// A read transaction on a database opened read-only ([`Store::pin_read_only`]); dropping it
/// ends the transaction, then closes the handle.
pub struct ReadPin {
    _txn: redb::ReadTransaction,
    _db: redb::ReadOnlyDatabase,
}

/// Runs an open, turning a panic inside redb into [`StoreError::Corrupt`]. redb 4.5 panics on
/// some corrupt files (e.g. invalid UTF-8 in a table's type name, `types.rs` `TypeName::
/// from_bytes`) even with its debug assertions off; there is no other way to refuse such a file
/// gracefully. Only the open path is guarded; it needs `panic = "unwind"` (the default).
fn refuse_panics(
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

/// Identifies an existing file read-only, before a read-write open can write to it (redb
/// rewrites pages and may shrink the file as it opens it read-write): a redb file holding
/// other tables, a file of a newer schema, or one of an older schema that no migration
/// upgrades is refused with its bytes untouched. A file that needs crash recovery cannot be
/// opened read-only; the checks after the read-write open cover it. Returns the schema version
/// found, if it was read.
fn identify_read_only(path: &Path) -> Result<Option<i64>, StoreError> {
    let Ok(store) = refuse_panics(path, || open_read_only_unchecked(path)) else {
        return Ok(None);
    };
    let tables: Vec<String> = {
        let txn = store.begin_read()?;
        txn.list_tables()
            .map_err(|e| store.redb_err(e))?
            .map(|t| t.name().to_owned())
            .filter(|n| n != META.name())
            .collect()
    };
    if !store.has_meta_table()? {
        if tables.is_empty() {
            // An empty redb file: the read-write open initializes it.
            return Ok(None);
        }
        return Err(store.not_ours(&format!("it has tables {tables:?} and none of ours")));
    }
    match store.meta(super::meta_keys::SCHEMA_VERSION)? {
        None if tables.is_empty() => Ok(None),
        None => Err(store.not_ours(&format!("it has tables {tables:?} but no schema version"))),
        Some(CURRENT_SCHEMA_VERSION) => Ok(Some(CURRENT_SCHEMA_VERSION)),
        Some(v) if v > CURRENT_SCHEMA_VERSION => Err(StoreError::SchemaTooNew {
            path: path.to_owned(),
            found: v,
            supported: CURRENT_SCHEMA_VERSION,
        }),
        Some(v) => {
            let mut version = v;
            while version < CURRENT_SCHEMA_VERSION {
                if !MIGRATIONS.iter().any(|m| m.from == version) {
                    return Err(store.not_ours(&format!(
                        "schema version {v} has no upgrade path to version {CURRENT_SCHEMA_VERSION}"
                    )));
                }
                version += 1;
            }
            Ok(Some(v))
        }
    }
}

/// A read-only open without the schema check, for [`identify_read_only`].
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

fn open_writable(path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
    let db = builder_with(&options)
        .create(path)
        .map_err(|e| map_open_error(path, e, false))?;
    let mut store = Store::new(Handle::Write(db), Source::File, path, Durability::Immediate);
    store.options = options;
    Ok(store)
}

/// Creates the file's directory (0700) if it does not exist yet.
fn prepare_dir(path: &Path) -> Result<(), StoreError> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| StoreError::Io {
                path: path.to_owned(),
                source,
            })?;
    }
    Ok(())
}

/// An exclusive lock on a database's directory, held while a database there is created and
/// opened read-write (released when dropped).
#[derive(Debug)]
pub(super) struct DirLock {
    /// `None` where the directory cannot be locked (see [`lock_dir`]).
    _dir: Option<fs::File>,
}

impl DirLock {
    /// Whether the lock is held (not a directory opened without it).
    pub(super) fn held(&self) -> bool {
        self._dir.is_some()
    }
}

/// Takes the exclusive lock (`flock`) on the directory of `path` without waiting: another
/// process creating or opening a database there holds it, and this open is refused as
/// [`StoreError::AlreadyOpen`] (the commands without an agent retry it for a while). An
/// `flock` is per open file description, so two opens in one process exclude each other too.
/// A directory that cannot be read (mode without `r`) or locked (a file system without
/// `flock`) is opened without the lock, as before it existed, with a warning: redb's own lock
/// on the file still refuses a second read-write handle.
pub(super) fn lock_dir(path: &Path) -> Result<DirLock, StoreError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let unlocked = |e: io::Error| {
        tracing::warn!(dir = %dir.display(), error = %e, "Cannot lock the database's directory; opening without the lock");
        Ok(DirLock { _dir: None })
    };
    let file = match fs::File::open(dir) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return unlocked(e),
        Err(source) => {
            return Err(StoreError::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    match file.try_lock() {
        Ok(()) => Ok(DirLock { _dir: Some(file) }),
        Err(fs::TryLockError::WouldBlock) => Err(StoreError::AlreadyOpen {
            path: path.to_owned(),
        }),
        Err(fs::TryLockError::Error(e))
            if e.kind() == io::ErrorKind::Unsupported || e.raw_os_error() == Some(libc::ENOLCK) =>
        {
            unlocked(e)
        }
        Err(fs::TryLockError::Error(source)) => Err(StoreError::Io {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// Removes `<db>.creating-<pid>-<hex>-<n>` files (the temporary names of
/// [`create_new_temporary`]) left by processes that died while creating the database or its
/// upgrade backup (a SIGKILL mid-copy leaves a full-size copy). Called with the directory lock
/// held, so no process is creating one now. Only regular files whose whole name is that
/// pattern for this database, and whose pid names no live process (no `/proc/<pid>`) or is
/// this process's own (nothing of ours exists before the lock is taken: a container's pid 1
/// restarted), are removed; anything else is left, and a failure is only logged. Without
/// `/proc` nothing is removed.
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let proc_root = Path::new("/proc");
    if !proc_root.join("self").exists() {
        return;
    }
    let Some(prefix) = name.to_str().map(|n| format!("{n}.creating-")) else {
        return;
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let own = std::process::id();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(temporary_pid)
        else {
            continue;
        };
        if pid != own && proc_root.join(pid.to_string()).exists() {
            continue;
        }
        let stale = dir.join(&file_name);
        if !fs::symlink_metadata(&stale).is_ok_and(|m| m.is_file()) {
            continue;
        }
        match fs::remove_file(&stale) {
            Ok(()) => {
                tracing::info!(path = %stale.display(), pid, "Removed a temporary database file a dead process left")
            }
            Err(e) => {
                tracing::warn!(path = %stale.display(), error = %e, "Cannot remove a temporary database file a dead process left")
            }
        }
    }
}

/// The pid of a temporary name's rest after `<db>.creating-`: `<pid>-<hex>-<n>`, exactly.
fn temporary_pid(rest: &str) -> Option<u32> {
    let mut parts = rest.split('-');
    let (pid, random, n) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let hex = !random.is_empty() && random.bytes().all(|b| b.is_ascii_hexdigit());
    if parts.next().is_some() || !digits(pid) || !hex || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

/// The regular file a database path names.
struct Found {
    /// The path itself, or the target of a symlink (fully resolved).
    real: PathBuf,
    len: u64,
}

/// What is at `path`, without touching it: `None` when nothing is there; the regular file it
/// names (following symlinks) otherwise. Anything else (a device node, a FIFO, a socket, a
/// directory, a symlink to one of those or to nothing) is refused as
/// [`StoreError::NotARegularFile`], naming what it is: the store creates, replaces and
/// truncates only regular files.
fn locate(path: &Path) -> Result<Option<Found>, StoreError> {
    let io_err = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    // A loop of symbolic links (at the path or in its directories) is bad input, not a
    // failure: refused like any path that names no regular file.
    let symlink_loop = || StoreError::NotARegularFile {
        path: path.to_owned(),
        kind: "a loop of symbolic links".to_owned(),
    };
    let link = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(symlink_loop()),
        Err(e) => return Err(io_err(e)),
    };
    if link.file_type().is_symlink() {
        let target = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotARegularFile {
                    path: path.to_owned(),
                    kind: "a symbolic link to a file that does not exist".to_owned(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(symlink_loop()),
            Err(e) => return Err(io_err(e)),
        };
        if !target.is_file() {
            return Err(StoreError::NotARegularFile {
                path: path.to_owned(),
                kind: format!("a symbolic link to {}", file_kind(&target.file_type())),
            });
        }
        let real = fs::canonicalize(path).map_err(io_err)?;
        return Ok(Some(Found {
            real,
            len: target.len(),
        }));
    }
    if !link.is_file() {
        return Err(StoreError::NotARegularFile {
            path: path.to_owned(),
            kind: file_kind(&link.file_type()),
        });
    }
    Ok(Some(Found {
        real: path.to_owned(),
        len: link.len(),
    }))
}

/// What a file type is, for messages: "a FIFO (named pipe)", "a character device", ...
fn file_kind(t: &fs::FileType) -> String {
    use std::os::unix::fs::FileTypeExt;
    let kind = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    };
    kind.to_owned()
}

/// Whether `path` is an empty regular file (not a symlink, not a device, not a FIFO).
fn is_empty_regular_file(path: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.is_file() && m.len() == 0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Io {
            path: path.to_owned(),
            source: e,
        }),
    }
}

/// Creates a new database so that a crash at any moment leaves either no file (or the empty
/// one that was there) or a complete, initialized one: the file is written and committed
/// durably under a temporary name, linked into place (never replacing a file another process
/// created meanwhile), and the directory is synced. A power cut while redb initializes a file
/// in place can leave one it refuses, and the store never wipes files.
fn create_durably(path: &Path, now: UnixNanos) -> Result<(), StoreError> {
    // Creating files: an ENOSPC here may be the inodes running out (said as such).
    let io_err = |p: &Path| {
        let p = p.to_owned();
        move |source| StoreError::creating(&p, source, free_inodes)
    };
    // A name no other process uses: never removed before it is ours (two agents in two
    // containers can share a pid, 1, and a hostPath directory during a rolling update).
    let tmp = create_new_temporary(path).map_err(io_err(path))?;
    let created = (|| {
        let store = open_writable(&tmp, StoreOptions::default())?;
        store.initialize(now)?;
        drop(store);
        // Only an empty regular file is replaced (a crash between creating a file and redb
        // writing its header leaves one); `path` was resolved by `locate`, and is checked
        // again here because the directory may have changed since.
        if is_empty_regular_file(path)? {
            fs::remove_file(path).map_err(io_err(path))?;
        }
        match fs::hard_link(&tmp, path) {
            Ok(()) => {}
            // Another process created it first: use theirs.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(path)(e)),
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(dir))?;
        }
        Ok(())
    })();
    let _ = fs::remove_file(&tmp);
    created
}

/// Creates `<db>.creating-<pid>-<random>-<n>` (0600) next to `path` with `O_EXCL`, trying
/// another name while one exists; returns its path. Nothing is removed to make room.
/// The inodes an unprivileged process may still create on `dir`'s filesystem (statvfs's
/// `f_favail`); `None` when statvfs fails or the filesystem does not count them (0 files).
fn free_inodes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes one struct into `st`, which we own; `c` is NUL-terminated.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 || st.f_files == 0 {
        return None;
    }
    Some(st.f_favail)
}

fn create_new_temporary(path: &Path) -> io::Result<PathBuf> {
    use std::hash::{BuildHasher, Hasher};
    // std's per-process random hash keys: a random number without a clock or a crate.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    for n in 0..64u32 {
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(format!(".creating-{}-{random:x}-{n}", std::process::id()));
        let tmp = path.with_file_name(name);
        match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(_) => return Ok(tmp),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary name to create the database under",
    ))
}

/// Creates the file (0600) if it does not exist yet, tightens an existing file's mode to 0600
/// (logging once when it was looser), and refuses a non-empty file too short to be a database
/// or anything but a regular file. Returns the file's length.
fn prepare_file(path: &Path) -> Result<u64, StoreError> {
    let io_err = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // `path` is already resolved: a symlink here now was put there meanwhile.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| open_io_error(path, e))?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(StoreError::NotARegularFile {
            path: path.to_owned(),
            kind: file_kind(&meta.file_type()),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if meta.len() == 0 || mode & 0o7077 != 0 {
        if meta.len() > 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{mode:04o}"),
                "the database file was readable or writable by others; its mode is now 0600"
            );
        }
        // A file we just created (whatever the umask), or an existing looser one.
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io_err)?;
    }
    check_not_empty_or_plausible(path, meta.len())?;
    Ok(meta.len())
}

/// redb's header is one page; anything shorter but non-empty is a truncated or foreign file.
const MIN_DATABASE_BYTES: u64 = 512;

fn check_not_empty_or_plausible(path: &Path, len: u64) -> Result<(), StoreError> {
    if len > 0 && len < MIN_DATABASE_BYTES {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            detail: format!("the file is only {len} bytes long (truncated, or not a database)"),
            source: None,
        });
    }
    Ok(())
}

fn check_not_empty(path: &Path, file: &fs::File) -> Result<(), StoreError> {
    let len = file
        .metadata()
        .map_err(|e| StoreError::Io {
            path: path.to_owned(),
            source: e,
        })?
        .len();
    if len == 0 {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            detail: "the file is empty".to_owned(),
            source: None,
        });
    }
    check_not_empty_or_plausible(path, len)
}

fn open_io_error(path: &Path, e: io::Error) -> StoreError {
    if e.kind() == io::ErrorKind::NotFound {
        StoreError::Missing {
            path: path.to_owned(),
        }
    } else {
        StoreError::Io {
            path: path.to_owned(),
            source: e,
        }
    }
}

fn map_open_error(path: &Path, e: DatabaseError, read_only: bool) -> StoreError {
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

/// How many backup names (`.bak-vN`, `.bak-vN.1`, ...) an upgrade tries before it refuses.
const BACKUP_NAMES: u32 = 100;

/// Backs up `store`'s file, of schema `version`, before its upgrade; `store` is the
/// read-write handle, whose lock keeps every other process from writing the file meanwhile,
/// and nothing has been written through it yet. A backup never overwrites or removes
/// anything: the names `<path>.bak-v<version>`, then `<path>.bak-v<version>.1`, `.2`, ... are
/// tried in turn; an existing one is reused when it is a regular file holding a database of
/// the same schema version with the same table contents as the file (a retry after an upgrade
/// that failed or crashed after its backup: redb rewrites the header at every read-write open,
/// so the bytes differ though the records do not); anything else there is kept and the next
/// name is tried. Only when every name is taken is the upgrade refused
/// ([`StoreError::BackupInTheWay`]), the database left as it is. A new backup is copied (0600)
/// under a pinned read transaction into a new temporary file made with `O_EXCL`, opened once
/// read-write so redb clears the recovery flag the live handle set in the copied header (the
/// backup opens read-only, like the file it copies), synced, hard-linked into place (which
/// fails if the name exists, a symlink included), and the directory is synced before the
/// upgrade commits.
fn backup(store: &Store, version: i64) -> Result<PathBuf, StoreError> {
    let path = store.path.as_path();
    let io_err = |p: &Path| {
        let p = p.to_owned();
        move |source| StoreError::Io { path: p, source }
    };
    let mut last_detail: Option<BackupConflict> = None;
    let mut first = None;
    for n in 0..BACKUP_NAMES {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".bak-v{version}"));
        if n > 0 {
            name.push(format!(".{n}"));
        }
        let dest = PathBuf::from(name);
        first.get_or_insert_with(|| dest.clone());
        match fs::symlink_metadata(&dest) {
            Ok(_) => match reusable_backup(store, version, &dest)? {
                Ok(()) => return Ok(dest),
                Err(detail) => {
                    tracing::warn!(
                        path = %path.display(),
                        backup = %dest.display(),
                        detail = %detail,
                        "Keeping a file at a backup name; trying the next name"
                    );
                    last_detail = Some(detail);
                    continue;
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&dest)(e)),
        }
        let tmp = create_new_temporary(path).map_err(io_err(path))?;
        // The copy's errors, then the link's result. The temporary file is removed whatever
        // happens, so its errors name the backup's final path (a full disk there is what the
        // operator must fix), never the temporary name that is gone by the time they are read.
        let linked = (|| -> Result<io::Result<()>, StoreError> {
            {
                // Nothing writes the file while the copy is read: no write transaction of
                // this handle is begun yet, the lock excludes other processes, and the read
                // transaction pins the committed state besides.
                let _pin = store.begin_read()?;
                let mut from = fs::File::open(path).map_err(io_err(path))?;
                let mut to = fs::OpenOptions::new()
                    .write(true)
                    .open(&tmp)
                    .map_err(io_err(&dest))?;
                io::copy(&mut from, &mut to).map_err(io_err(&dest))?;
            }
            // The live handle's header says "recovery required"; a read-write open of the
            // copy (the temporary file, never a backup) clears it.
            drop(
                builder()
                    .create(&tmp)
                    .map_err(|e| map_open_error(&dest, e, false))?,
            );
            fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(io_err(&dest))?;
            Ok(fs::hard_link(&tmp, &dest))
        })();
        let _ = fs::remove_file(&tmp);
        match linked? {
            Ok(()) => {}
            // Something appeared at the name meanwhile: keep it, try the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                last_detail = Some(BackupConflict::AppearedMeanwhile);
                continue;
            }
            Err(e) => return Err(io_err(&dest)(e)),
        }
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(dir))?;
        }
        tracing::info!(path = %path.display(), backup = %dest.display(), "Backed up the database before its upgrade");
        return Ok(dest);
    }
    Err(StoreError::BackupInTheWay {
        path: path.to_owned(),
        backup: first.unwrap_or_default(),
        detail: BackupConflict::AllNamesTaken {
            tried: BACKUP_NAMES,
            last: Box::new(last_detail.unwrap_or(BackupConflict::AppearedMeanwhile)),
        },
    })
}

/// Whether the file at `dest` is a backup of `store`'s file at schema `version`: a regular
/// file (not a symlink) that opens read-only as a database of that schema version with the
/// same tables holding the same entries. `Err(detail)` says why not; an I/O error reading the
/// database itself is returned as such.
fn reusable_backup(
    store: &Store,
    version: i64,
    dest: &Path,
) -> Result<Result<(), BackupConflict>, StoreError> {
    let meta = match fs::symlink_metadata(dest) {
        Ok(meta) => meta,
        Err(e) => return Ok(Err(BackupConflict::Unreadable(e))),
    };
    if !meta.file_type().is_file() {
        return Ok(Err(BackupConflict::NotARegularFile));
    }
    let backup = match refuse_panics(dest, || open_read_only_unchecked(dest)) {
        Ok(backup) => backup,
        Err(e) => return Ok(Err(BackupConflict::NotADatabase(Box::new(e)))),
    };
    let found = backup
        .has_meta_table()
        .and_then(|has| match has {
            true => backup.meta(super::meta_keys::SCHEMA_VERSION),
            false => Ok(None),
        })
        .map_err(|e| BackupConflict::ReadFailed(Box::new(e)));
    match found {
        Ok(Some(v)) if v == version => {}
        Ok(found) => {
            return Ok(Err(BackupConflict::OtherSchema {
                found,
                want: version,
            }));
        }
        Err(e) => return Ok(Err(e)),
    }
    let ours = store.begin_read()?;
    let theirs = match backup.begin_read() {
        Ok(txn) => txn,
        Err(e) => return Ok(Err(BackupConflict::ReadFailed(Box::new(e)))),
    };
    let names = |txn: &redb::ReadTransaction| -> Result<Vec<String>, redb::StorageError> {
        let mut names: Vec<String> = txn.list_tables()?.map(|t| t.name().to_owned()).collect();
        names.sort();
        Ok(names)
    };
    let ours_names = names(&ours).map_err(|e| store.redb_err(e))?;
    match names(&theirs) {
        Ok(n) if n == ours_names => {}
        Ok(found) => {
            return Ok(Err(BackupConflict::OtherTables {
                found,
                want: ours_names,
            }));
        }
        Err(e) => {
            return Ok(Err(BackupConflict::ReadFailed(Box::new(
                backup.redb_err(e),
            ))));
        }
    }
    for name in &ours_names {
        let same = match name.as_str() {
            n if n == IMAGES.name() => same_table(&ours, &theirs, IMAGES),
            n if n == EVICTION.name() => same_table(&ours, &theirs, EVICTION),
            n if n == EVICTION_PREFIX.name() => same_table(&ours, &theirs, EVICTION_PREFIX),
            n if n == BACKOFF.name() => same_table(&ours, &theirs, BACKOFF),
            n if n == META.name() => same_table(&ours, &theirs, META),
            n if n == NAMES.name() => same_table(&ours, &theirs, NAMES),
            n if n == JOURNAL.name() => same_table(&ours, &theirs, JOURNAL),
            n if n == PINS.name() => same_table(&ours, &theirs, PINS),
            n if n == USES.name() => same_table(&ours, &theirs, USES),
            n if n == PULLS.name() => same_table(&ours, &theirs, PULLS),
            n if n == WARM.name() => same_table(&ours, &theirs, WARM),
            other => {
                return Ok(Err(BackupConflict::UnknownTable {
                    table: other.to_owned(),
                }));
            }
        };
        match same {
            Ok(true) => {}
            Ok(false) => {
                return Ok(Err(BackupConflict::OtherContents {
                    table: name.clone(),
                }));
            }
            Err(e) => {
                return Ok(Err(BackupConflict::ReadFailed(Box::new(
                    backup.redb_err(e),
                ))));
            }
        }
    }
    Ok(Ok(()))
}

/// Whether table `def` holds the same entries (as bytes) in both transactions.
fn same_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    a: &redb::ReadTransaction,
    b: &redb::ReadTransaction,
    def: redb::TableDefinition<K, V>,
) -> Result<bool, redb::Error> {
    let (a, b) = (a.open_table(def)?, b.open_table(def)?);
    if a.len()? != b.len()? {
        return Ok(false);
    }
    for (x, y) in a.iter()?.zip(b.iter()?) {
        let ((xk, xv), (yk, yv)) = (x?, y?);
        if K::as_bytes(&xk.value()).as_ref() != K::as_bytes(&yk.value()).as_ref()
            || V::as_bytes(&xv.value()).as_ref() != V::as_bytes(&yv.value()).as_ref()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod lock_tests {
    use super::*;

    /// Issue 41: creating the database on a filesystem out of inodes said only "No space left
    /// on device"; it says the inodes, and an ENOSPC with inodes left stays an I/O error.
    #[test]
    fn enospc_with_no_free_inodes_says_the_inodes() {
        let enospc = || io::Error::from_raw_os_error(libc::ENOSPC);
        let path = Path::new("/var/lib/imagekeeper/records.redb");
        let mut asked = None;
        let e = StoreError::creating(path, enospc(), |dir| {
            asked = Some(dir.to_owned());
            Some(0)
        });
        assert_eq!(asked.as_deref(), Some(Path::new("/var/lib/imagekeeper")));
        let message = e.to_string();
        assert!(
            message.contains("no free inodes") && message.contains("df -i"),
            "{message}"
        );
        assert!(matches!(
            StoreError::creating(path, enospc(), |_| Some(12)),
            StoreError::Io { .. }
        ));
        assert!(matches!(
            StoreError::creating(path, io::Error::from_raw_os_error(libc::EACCES), |_| Some(
                0
            )),
            StoreError::Io { .. }
        ));
        // A temp dir's filesystem counts its inodes, and has some left.
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(free_inodes(dir.path()).is_none_or(|n| n > 0));
    }

    fn in_use(result: Result<Store, StoreError>) {
        match result {
            Err(StoreError::AlreadyOpen { .. }) => {}
            Err(e) => panic!("expected AlreadyOpen, got {e}"),
            Ok(_) => panic!("expected AlreadyOpen, it opened"),
        }
    }

    /// Another process creating the database holds the directory's lock from before it looks
    /// at the path until its read-write handle holds redb's lock. An open meanwhile is refused
    /// as in use and creates nothing; once the lock is released, it creates the database.
    #[test]
    fn an_open_while_another_creates_the_database_is_refused_as_in_use() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("db.redb");
        let creating = lock_dir(&db).expect("the first creator's lock");
        in_use(Store::open(&db, UnixNanos(1)));
        assert!(!db.exists(), "the refused open created the file");
        drop(creating);
        let store = Store::open(&db, UnixNanos(1)).expect("opens once the lock is free");
        // Held by redb's lock now: the directory lock is free again, and a second open is
        // refused by redb's.
        drop(lock_dir(&db).expect("the directory lock is released after the open"));
        in_use(Store::open(&db, UnixNanos(2)));
        drop(store);
    }

    /// An empty file a crash left (between creating a file and redb writing its header) is
    /// replaced by a new database by exactly one open: one racing another's creation is
    /// refused and leaves the file as it is (before the lock both could replace it, the
    /// second removing the database the first had just linked into place).
    #[test]
    fn an_empty_leftover_file_is_replaced_by_one_open_only() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("db.redb");
        fs::write(&db, b"").expect("the leftover");
        let inode = fs::metadata(&db).expect("stat").ino();
        let creating = lock_dir(&db).expect("the first creator's lock");
        in_use(Store::open(&db, UnixNanos(1)));
        let left = fs::metadata(&db).expect("still there");
        assert_eq!((left.ino(), left.len()), (inode, 0));
        drop(creating);
        let store = Store::open(&db, UnixNanos(1)).expect("replaces the empty file");
        assert_eq!(
            store.meta(meta_keys::SCHEMA_VERSION).expect("meta"),
            Some(CURRENT_SCHEMA_VERSION)
        );
    }

    /// A loop of symbolic links at the path is bad input (a path that names no regular
    /// file), not an I/O failure.
    #[test]
    fn a_loop_of_symbolic_links_is_not_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::os::unix::fs::symlink(&b, &a).expect("a -> b");
        std::os::unix::fs::symlink(&a, &b).expect("b -> a");
        for path in [a.clone(), a.join("db.redb")] {
            match Store::check_path(&path) {
                Err(StoreError::NotARegularFile { kind, .. }) => {
                    assert_eq!(kind, "a loop of symbolic links", "{}", path.display())
                }
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        match Store::open(&a, UnixNanos(1)) {
            Err(StoreError::NotARegularFile { .. }) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a loop opened"),
        }
    }
}
