//! Opening the database, every way it is opened: read-write ([`Store::open`], creating a new
//! file), read-only beside a running agent, `inspect`'s verified private copy and its read
//! pin, a simulated disk (fault injection), memory (`simulate`), and the reopen after an I/O
//! failure. redb's builder (concurrency mode, page cache, integrity check), [`StoreOptions`],
//! the guard against redb's panics and the mapping of its open errors are `database.rs`, below
//! this file and `backup.rs`, which both open files. Invariants: an existing file is identified read-only before any
//! read-write open ([`identify_read_only`]), so a foreign, newer-schema or unupgradable file is
//! refused with its bytes untouched; every open of a file runs under `catch_unwind`
//! ([`refuse_panics`]; `inspect` guards the open of its verified copy itself) and read-write
//! opens with redb's integrity check, so a damaged file is [`StoreError::Corrupt`], never a
//! crash; redb's open errors map to ours ([`map_open_error`]); a file is never wiped or
//! rewritten to fix it. The file's checks, lock and creation are `file.rs`; the schema
//! version, initialization and upgrades `schema.rs`; the copy before an upgrade `backup.rs`.

use std::fs;
use std::path::Path;

use redb::{ConcurrencyMode, Durability, TableHandle};

use super::backup::backup;
use super::database::{
    StoreOptions, builder, map_open_error, open_read_only_unchecked, open_writable, refuse_panics,
};
use super::file::{
    check_not_empty, create_durably, locate, lock_dir, open_io_error, prepare_dir, prepare_file,
    remove_stale_temporaries,
};
use super::schema::{CURRENT_SCHEMA_VERSION, MIGRATIONS};
use super::tables::META;
use super::{Handle, Source, Store, StoreError};
use crate::model::UnixNanos;

/// On a store held in memory, one commit in this many is durable
/// ([`Store::open_in_memory`]): enough to amortize a durable commit and its epilogue, while
/// the bookkeeping redb keeps for the non-durable commits since the last durable one stays
/// small.
pub(super) const MEMORY_DURABLE_EVERY: u64 = 256;

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
        // Nothing to lose at a crash: most commits skip redb's durable commit and its
        // epilogue (`apply.rs`, `commit_durability`).
        store.durable_every = MEMORY_DURABLE_EVERY;
        store.initialize(now)?;
        store.read_table_definitions()?;
        Ok(store)
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

#[cfg(test)]
mod lock_tests {
    use std::io;

    use super::*;
    use crate::store::file::free_inodes;
    use crate::store::meta_keys;

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
