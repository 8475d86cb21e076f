//! The store's one error type. Every variant that concerns the file names its path and, where
//! the operator has something to do, says what.

use std::path::PathBuf;

use super::codec::{DecodeError, IndexKey};
use crate::model::RecordKey;

/// What can go wrong opening, reading or writing the record database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error(
        "database {path} is already open by another process (is an imagekeeper agent running? \
         `imagekeeper inspect` can read it alongside the agent)"
    )]
    /// Another process holds the database's lock.
    AlreadyOpen {
        /// The database file.
        path: PathBuf,
    },
    #[error(
        "database {path} is {kind}, not a regular file; refusing to use it (the database is \
         created, replaced or written only as a regular file)"
    )]
    /// The path is not a regular file.
    NotARegularFile {
        /// The database file.
        path: PathBuf,
        /// What the path is instead.
        kind: String,
    },
    #[error(
        "database {path} needs an upgrade, but its backup {backup} already exists and is not a \
         copy of it ({detail}); the database was left as it is: move {backup} away (or restore \
         it) and start again"
    )]
    /// An upgrade's backup name is taken by something that is not a copy.
    BackupInTheWay {
        /// The database file.
        path: PathBuf,
        /// The backup path that is taken.
        backup: PathBuf,
        /// What is there instead of a copy.
        #[source]
        detail: BackupConflict,
    },
    /// The file does not exist (opening read-only).
    #[error("database {path} does not exist")]
    Missing {
        /// The database file.
        path: PathBuf,
    },
    #[error(
        "database {path} is corrupt or is not an imagekeeper database: {detail}; it was left \
         as it is: inspect it with `imagekeeper inspect check --db {path}` or restore a backup"
    )]
    /// The file is not a sound imagekeeper database.
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What was found wrong.
        detail: String,
        /// The read error that showed it, when one did (a file shorter than redb expects).
        #[source]
        source: Option<std::io::Error>,
    },
    #[error(
        "database {path} has schema version {found}, newer than version {supported} that this \
         imagekeeper understands; run a newer imagekeeper or restore an older backup"
    )]
    /// The file's schema is newer than this build.
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The newest version this build reads.
        supported: i64,
    },
    #[error(
        "database {path} needs recovery after a crash and was opened read-only; open it \
         read-write once (start the agent) or inspect a repaired copy"
    )]
    /// A read-only open found a database that needs crash recovery.
    NeedsRecovery {
        /// The database file.
        path: PathBuf,
    },
    /// A new pin past [`crate::model::MAX_ACTIVE_PINS`] pins in force; nothing was written.
    #[error(
        "refusing a new pin: {active} pins are in force and at most {limit} are kept (each is \
         matched against every image at every detect); remove pins no longer needed \
         (`imagekeeper unpin`), or replace one: pinning a name already pinned is not refused"
    )]
    TooManyPins {
        /// The pins in force when the new one was refused.
        active: usize,
        /// [`crate::model::MAX_ACTIVE_PINS`].
        limit: usize,
    },
    /// A write to a database opened read-only.
    #[error("database {path} is open read-only; it cannot be written")]
    ReadOnly {
        /// The database file.
        path: PathBuf,
    },
    /// A record key that cannot be stored.
    #[error("record key {key:?} is invalid: {reason}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `Store::names_that_differ_in_key_order` was given a list out of record key order.
    #[error("names compared out of record key order: {next} after {previous}")]
    UnorderedNames {
        /// The key given first.
        previous: RecordKey,
        /// The key given after it, not after it in order.
        next: RecordKey,
    },
    /// A stored value does not decode.
    #[error("database {path}: a stored value does not decode: {source}")]
    Decode {
        /// The database file.
        path: PathBuf,
        /// What did not decode.
        #[source]
        source: DecodeError,
    },
    /// The eviction index disagrees with the records.
    #[error("database {path}: the eviction index disagrees with the records: {detail}")]
    IndexMismatch {
        /// The database file.
        path: PathBuf,
        /// How they disagree.
        #[source]
        detail: IndexMismatch,
    },
    /// An I/O error on the database's file or directory.
    #[error("database {path}: {source}")]
    Io {
        /// The database file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "database {path}: its filesystem is full ({source}); free space there: the agent \
         reopens the database by itself once it can write again, and a command can be rerun"
    )]
    /// The database's filesystem is full.
    NoSpace {
        /// The database file.
        path: PathBuf,
        /// redb's error.
        #[source]
        source: redb::Error,
    },
    /// Creating a file failed with ENOSPC on a filesystem with no free inodes: the kernel says
    /// "No space left on device" for both, and bytes may well be left.
    #[error(
        "database {path}: its filesystem has no free inodes ({source}): no file can be created \
         there, whatever space is left (`df -i` shows it); free some there and run it again"
    )]
    NoInodes {
        /// The database file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "database {path} is closed after an I/O failure and could not be reopened yet; it is \
         tried again at the next use"
    )]
    /// The database is closed after an I/O failure and not reopened yet.
    Closed {
        /// The database file.
        path: PathBuf,
    },
    #[error(
        "database {path} was reopened after an I/O failure while a scan was reading it; the \
         scan's snapshot is gone: start it again"
    )]
    /// The database was reopened while a scan was reading it.
    Reopened {
        /// The database file.
        path: PathBuf,
    },
    /// Any other error of redb.
    #[error("database {path}: {source}")]
    Redb {
        /// The database file.
        path: PathBuf,
        /// redb's error.
        #[source]
        source: redb::Error,
    },
}

/// Why an upgrade's backup name is taken by something that is not a copy of the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupConflict {
    /// It cannot be examined.
    #[error("it cannot be examined: {0}")]
    Unreadable(#[source] std::io::Error),
    /// The path is not a regular file.
    #[error("it is not a regular file")]
    NotARegularFile,
    /// It does not open read-only as a database.
    #[error("it does not open read-only as a database: {0}")]
    NotADatabase(#[source] Box<StoreError>),
    /// Reading it failed.
    #[error("reading it failed: {0}")]
    ReadFailed(#[source] Box<StoreError>),
    /// Its schema version differs.
    #[error("its schema version is {found:?}, not {want}")]
    OtherSchema {
        /// The backup's schema version, if it has one.
        found: Option<i64>,
        /// The database's.
        want: i64,
    },
    /// Its tables differ.
    #[error("its tables {found:?} differ from {want:?}")]
    OtherTables {
        /// The backup's tables.
        found: Vec<String>,
        /// The database's.
        want: Vec<String>,
    },
    /// It has a table this build does not know.
    #[error("it has a table {table:?} this build does not know")]
    UnknownTable {
        /// The table's name.
        table: String,
    },
    /// A table's contents differ.
    #[error("its table {table:?} differs from the database's")]
    OtherContents {
        /// The table's name.
        table: String,
    },
    /// It appeared while the backup was written.
    #[error("it appeared while the backup was written")]
    AppearedMeanwhile,
    /// Every backup name (`.bak-vN`, `.bak-vN.1`, ...) is taken by something kept as it is.
    #[error("all {tried} backup names are taken; the last: {last}")]
    AllNamesTaken {
        /// How many names were tried.
        tried: u32,
        /// Why the last one was refused.
        #[source]
        last: Box<BackupConflict>,
    },
}

/// How the eviction index was found to disagree with the records during a write or a walk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexMismatch {
    /// A record has no eviction-index entry.
    #[error("record {key} has no eviction-index entry")]
    RecordWithoutEntry {
        /// The record's key.
        key: RecordKey,
    },
    /// An eviction-index entry has no record.
    #[error("index entry {row} has no record")]
    EntryWithoutRecord {
        /// The index entry.
        row: IndexKey,
    },
}

impl StoreError {
    /// The error of an I/O call that creates a file at `path`: ENOSPC on a filesystem whose
    /// free inodes (`free_inodes` of the file's directory, statvfs's `f_favail`) are none is
    /// [`StoreError::NoInodes`], else [`StoreError::Io`].
    pub(super) fn creating(
        path: &std::path::Path,
        source: std::io::Error,
        free_inodes: impl FnOnce(&std::path::Path) -> Option<u64>,
    ) -> StoreError {
        let path = path.to_owned();
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        if source.raw_os_error() == Some(libc::ENOSPC) && free_inodes(dir) == Some(0) {
            return StoreError::NoInodes { path, source };
        }
        StoreError::Io { path, source }
    }

    /// The error of a failed redb call on `path`; a full filesystem gets its own variant.
    pub(super) fn from_redb(path: &std::path::Path, source: redb::Error) -> StoreError {
        let path = path.to_owned();
        match &source {
            redb::Error::Io(io)
                if io.raw_os_error() == Some(libc::ENOSPC)
                    || io.kind() == std::io::ErrorKind::StorageFull =>
            {
                StoreError::NoSpace { path, source }
            }
            _ => StoreError::Redb { path, source },
        }
    }

    /// Whether redb said its handle failed earlier and must be reopened before any use.
    pub(super) fn is_previous_io(&self) -> bool {
        matches!(
            self,
            StoreError::Redb {
                source: redb::Error::PreviousIo | redb::Error::DatabaseClosed,
                ..
            } | StoreError::Closed { .. }
        )
    }

    /// Whether this is an I/O failure after which redb refuses the handle until it is reopened.
    pub(super) fn is_io_failure(&self) -> bool {
        self.is_previous_io()
            || matches!(
                self,
                StoreError::NoSpace { .. }
                    | StoreError::Redb {
                        source: redb::Error::Io(_),
                        ..
                    }
            )
    }
}
