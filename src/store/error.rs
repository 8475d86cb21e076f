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
    AlreadyOpen { path: PathBuf },
    #[error(
        "database {path} is {kind}, not a regular file; refusing to use it (the database is \
         created, replaced or written only as a regular file)"
    )]
    NotARegularFile { path: PathBuf, kind: String },
    #[error(
        "database {path} needs an upgrade, but its backup {backup} already exists and is not a \
         copy of it ({detail}); the database was left as it is: move {backup} away (or restore \
         it) and start again"
    )]
    BackupInTheWay {
        path: PathBuf,
        backup: PathBuf,
        #[source]
        detail: BackupConflict,
    },
    #[error("database {path} does not exist")]
    Missing { path: PathBuf },
    #[error(
        "database {path} is corrupt or is not an imagekeeper database: {detail}; it was left \
         as it is: inspect it with `imagekeeper inspect check --db {path}` or restore a backup"
    )]
    Corrupt {
        path: PathBuf,
        detail: String,
        /// The read error that showed it, when one did (a file shorter than redb expects).
        #[source]
        source: Option<std::io::Error>,
    },
    #[error(
        "database {path} has schema version {found}, newer than version {supported} that this \
         imagekeeper understands; run a newer imagekeeper or restore an older backup"
    )]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error(
        "database {path} needs recovery after a crash and was opened read-only; open it \
         read-write once (start the agent) or inspect a repaired copy"
    )]
    NeedsRecovery { path: PathBuf },
    #[error("database {path} is open read-only; it cannot be written")]
    ReadOnly { path: PathBuf },
    #[error("record key {key:?} is invalid: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    /// `Store::names_that_differ_in_key_order` was given a list out of record key order.
    #[error("names compared out of record key order: {next} after {previous}")]
    UnorderedNames {
        previous: RecordKey,
        next: RecordKey,
    },
    #[error("database {path}: a stored value does not decode: {source}")]
    Decode {
        path: PathBuf,
        #[source]
        source: DecodeError,
    },
    #[error("database {path}: the eviction index disagrees with the records: {detail}")]
    IndexMismatch {
        path: PathBuf,
        #[source]
        detail: IndexMismatch,
    },
    #[error("database {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "database {path}: its filesystem is full ({source}); free space there: the agent \
         reopens the database by itself once it can write again, and a command can be rerun"
    )]
    NoSpace {
        path: PathBuf,
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
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "database {path} is closed after an I/O failure and could not be reopened yet; it is \
         tried again at the next use"
    )]
    Closed { path: PathBuf },
    #[error(
        "database {path} was reopened after an I/O failure while a scan was reading it; the \
         scan's snapshot is gone: start it again"
    )]
    Reopened { path: PathBuf },
    #[error("database {path}: {source}")]
    Redb {
        path: PathBuf,
        #[source]
        source: redb::Error,
    },
}

/// Why an upgrade's backup name is taken by something that is not a copy of the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupConflict {
    #[error("it cannot be examined: {0}")]
    Unreadable(#[source] std::io::Error),
    #[error("it is not a regular file")]
    NotARegularFile,
    #[error("it does not open read-only as a database: {0}")]
    NotADatabase(#[source] Box<StoreError>),
    #[error("reading it failed: {0}")]
    ReadFailed(#[source] Box<StoreError>),
    #[error("its schema version is {found:?}, not {want}")]
    OtherSchema { found: Option<i64>, want: i64 },
    #[error("its tables {found:?} differ from {want:?}")]
    OtherTables {
        found: Vec<String>,
        want: Vec<String>,
    },
    #[error("it has a table {table:?} this build does not know")]
    UnknownTable { table: String },
    #[error("its table {table:?} differs from the database's")]
    OtherContents { table: String },
    #[error("it appeared while the backup was written")]
    AppearedMeanwhile,
    /// Every backup name (`.bak-vN`, `.bak-vN.1`, ...) is taken by something kept as it is.
    #[error("all {tried} backup names are taken; the last: {last}")]
    AllNamesTaken {
        tried: u32,
        #[source]
        last: Box<BackupConflict>,
    },
}

/// How the eviction index was found to disagree with the records during a write or a walk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexMismatch {
    #[error("record {key} has no eviction-index entry")]
    RecordWithoutEntry { key: RecordKey },
    #[error("index entry {row} has no record")]
    EntryWithoutRecord { row: IndexKey },
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
