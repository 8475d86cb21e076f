//! The record store: the only module that imports redb.
//!
//! It owns one redb file with the twelve tables of schema 7 (see `tables.rs`): `images`
//! (RecordKey → ImageRecord), `eviction_prefix` ((last_used, first_detected, 16-byte key
//! prefix) → (); schema 3, see [`IndexKey`]; schemas 1 and 2 had `eviction` with the whole
//! key), `backoff`, `meta`, from schema 2 `names` (RecordKey → repo tags and digests) and
//! `journal` ((removed_at, RecordKey) → JournalEntry; see `journal.rs`), from schema 4 `pins`,
//! from schema 5 `uses`, `pulls` and `warm` (see `history.rs`), from schema 6
//! `runtime_labels` (the containerd names the agent labelled; see `runtime_labels.rs`), and
//! from schema 7 `signals` (the changes the agent saw in the cluster's declarations; see
//! `signals.rs`). Invariants:
//! - every record has exactly one eviction-index entry matching its current fields (records
//!   with the same times and key prefix share it), and the index holds nothing else; every
//!   mutation keeps this inside its own write transaction (`apply.rs`);
//! - a [`Batch`] is one durable (`Durability::Immediate`) write transaction, and a batch that
//!   changes nothing commits nothing ([`Store::commits`] counts real commits);
//! - eviction order is read as a lazy range scan over the index, never by loading and sorting
//!   (`eviction.rs`);
//! - a record's deletion by GC or by detect (an external removal) is journaled in the same
//!   transaction, and the journal is pruned to its retention in every transaction that writes
//!   it;
//! - every byte read from the file is decoded through `codec`, which fails instead of
//!   panicking; a file that is not ours, corrupt or from a newer schema is refused, never
//!   wiped (`open.rs`).
//!
//! This file holds [`Store`] itself (its handle, its counters, the transaction helpers every
//! part uses) and the public types; the reads are `read.rs`, `names.rs`, `scan.rs` and
//! `eviction.rs`, the writes `apply.rs` (checked first by `validate.rs`), opening `open.rs`
//! with `file.rs`, `schema.rs` and `backup.rs`, and the reopen after an I/O failure
//! `reopen.rs`.

mod apply;
#[cfg(test)]
mod apply_tests;
mod backup;
mod batch;
mod check;
#[cfg(test)]
mod check_tests;
mod codec;
mod compact;
mod database;
mod error;
mod eviction;
mod file;
mod history;
mod history_mirror;
mod journal;
mod journal_keys;
mod names;
mod open;
#[cfg(test)]
mod pin_cap_tests;
#[cfg(any(test, feature = "fault-injection"))]
pub mod power_loss;
#[cfg(any(test, feature = "fault-injection"))]
pub mod power_loss_harness;
#[cfg(test)]
mod raw_writes;
mod read;
mod reopen;
mod rows;
mod runtime_labels;
mod scan;
mod schema;
mod signals;
mod sorted_reads;
mod tables;
#[cfg(test)]
mod upgrade_tests;
mod validate;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use redb::{
    Database, Durability, ReadOnlyDatabase, ReadOnlyTable, ReadTransaction, ReadableDatabase,
    TableDefinition,
};

pub use batch::{Batch, BatchOp, ListedSightings, SightedNames};
pub use check::Violation;
/// The byte layouts the fuzz `decode` target (and the crate's own tests) round-trip.
#[cfg(any(test, feature = "fault-injection"))]
pub use codec::{BackoffKey, Codec, LabelledName, MetaKey, MetaValue, SignalKey, WarmPosition};
pub use codec::{DecodeError, EvictionKey, IndexKey, JournalKey};
pub use compact::CompactOutcome;
pub use database::{DEFAULT_CACHE_BYTES, StoreOptions};
pub use error::{BackupConflict, IndexMismatch, StoreError};
pub use eviction::EvictionIter;
pub use journal::{age_cutoff, retention_keys};
pub use scan::{InPlaceScan, RecordScan, ScannedRecord};
pub use schema::{CURRENT_SCHEMA_VERSION, meta_keys};
pub use sorted_reads::{HistoryRows, KeyParts};

/// A store at `records.redb` in a fresh temporary directory (opened at 1 s past the epoch),
/// kept while the returned directory lives: the journal's and the history mirror's tests'
/// common start.
#[cfg(test)]
pub(crate) fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(
        &dir.path().join("records.redb"),
        crate::model::UnixNanos::from_secs(1),
    )
    .expect("open store");
    (dir, store)
}

use reopen::{Liveness, ScanTie};

#[cfg(not(any(test, feature = "fault-injection")))]
use codec::Codec;
use tables::Stored;

use crate::model::{ImageRecord, JournalEntry, JournalRetention, RecordKey, Repull};

enum Handle {
    Write(Database),
    Read(ReadOnlyDatabase),
    /// The read-write handle was dropped after an I/O failure and its reopen failed; the next
    /// call tries the reopen again.
    Closed,
}

/// What a read-write handle is reopened from after an I/O failure.
enum Source {
    /// Never reopened: a read-only handle, or a verified copy for `inspect`.
    Fixed,
    /// The file at `Store::path`, with the checks of [`Store::open`] but never created anew.
    File,
    /// A simulated disk (tests and fuzzing).
    #[cfg(any(test, feature = "fault-injection"))]
    Disk {
        disk: power_loss::PowerLossDisk,
        mode: CommitMode,
    },
}

/// The record database. `Send + Sync`: share it as `Arc<Store>`. Every call blocks on disk.
///
/// After an I/O failure (a full disk, EIO) redb refuses every later operation until its handle
/// is closed and opened again. The store does that itself: the failure marks it unhealthy
/// ([`Store::is_healthy`]), and the next call first replaces the redb handle with a fresh,
/// checked open of the same file; a call that meets redb's "previous I/O error" reopens and
/// is retried once. The file is never rewritten or wiped to recover: redb's own crash recovery
/// on open is the only repair.
pub struct Store {
    /// Held shared for a whole write transaction and while a read transaction begins; held
    /// exclusively only to swap in a reopened handle.
    handle: RwLock<Handle>,
    source: Source,
    path: PathBuf,
    commits: AtomicU64,
    commit_nanos_total: AtomicU64,
    /// `Immediate` always, except on a store opened in [`CommitMode::NonDurableForTests`].
    durability: Durability,
    /// 0, except on a store held in memory ([`Store::open_in_memory`]): then only every this
    /// many commits is `Immediate`, the others `None` (`apply.rs`, `commit_durability`).
    durable_every: u64,
    /// The health flag and handle generation, shared with the lazy scans
    /// ([`RecordScan`], [`EvictionIter`]) so they can tell a reopen happened under them.
    liveness: Arc<Liveness>,
    reopens: AtomicU64,
    /// The file's size after this handle's last compaction (0: none yet).
    last_compacted_bytes: AtomicU64,
    /// The tables' live bytes, as counted, when this handle last compacted the file (0:
    /// never): with `last_compacted_bytes`, how much file redb needs per counted live byte
    /// (`compact.rs`).
    last_compacted_live_bytes: AtomicU64,
    /// Whether this handle has seen its file hold fewer blocks than its length: the file
    /// system keeps holes, and compaction keeps the blocks within their own bound
    /// (`compact.rs`).
    file_holes_seen: AtomicBool,
    /// The journal's retention, applied by every transaction that writes the journal.
    retention: RwLock<JournalRetention>,
    /// How the file was opened (kept for a reopen) and whether commits set quick repair.
    options: database::StoreOptions,
    /// The schema version the file had before this handle's open upgraded it (a verified
    /// copy for `inspect`), if it did.
    upgraded_from: Option<i64>,
    /// The committed journal's keys (`journal_keys.rs`), once a write transaction built
    /// them; locked for a whole write transaction.
    journal_keys: std::sync::Mutex<Option<journal_keys::JournalKeys>>,
    /// The history tables' rows the space walks read (`history_mirror.rs`), once a walk built
    /// them; locked for a whole write transaction.
    history_mirror: std::sync::Mutex<Option<history_mirror::HistoryMirror>>,
    /// The history rows the lookups whose cost once grew with the history have read: journal
    /// entries (regret lookups, building the journal's keys) and names rows the names walk
    /// stepped over ([`Store::history_rows_read`]).
    history_rows_read: AtomicU64,
}

/// What one [`Store::apply_reporting`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Whether it committed (a batch that changes nothing commits nothing).
    pub committed: bool,
    /// Journal entries it marked re-pulled: records it created whose image id had a journal
    /// entry within retention.
    pub repulls: Vec<Repull>,
    /// Journal entries it wrote (each with the deletion of its record).
    pub journaled: Vec<(JournalKey, JournalEntry)>,
}

/// How [`Store::apply`] commits. Only the `fault-injection` feature can choose anything but
/// durable commits: the other mode exists to prove the power-loss harness catches lost commits.
#[cfg(any(test, feature = "fault-injection"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitMode {
    /// `Durability::Immediate`, as in production.
    Durable,
    /// `Durability::None`: acknowledged commits may be lost on power loss. A deliberate bug.
    NonDurableForTests,
}

/// One image record, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// The record's key.
    pub key: RecordKey,
    /// The record.
    pub record: ImageRecord,
}

impl Store {
    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many write transactions this handle has committed.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }

    /// The total time spent in commits by this handle, in nanoseconds.
    pub fn commit_nanos_total(&self) -> u64 {
        self.commit_nanos_total.load(Ordering::SeqCst)
    }

    /// Whether this handle was opened read-only.
    pub fn is_read_only(&self) -> bool {
        matches!(*self.read_handle(), Handle::Read(_))
    }

    fn new(handle: Handle, source: Source, path: &Path, durability: Durability) -> Store {
        let reopenable = !matches!(source, Source::Fixed);
        Store {
            handle: RwLock::new(handle),
            source,
            path: path.to_owned(),
            commits: AtomicU64::new(0),
            commit_nanos_total: AtomicU64::new(0),
            durability,
            durable_every: 0,
            liveness: Arc::new(Liveness {
                healthy: AtomicBool::new(true),
                generation: RwLock::new(0),
                reopenable,
            }),
            reopens: AtomicU64::new(0),
            last_compacted_bytes: AtomicU64::new(0),
            last_compacted_live_bytes: AtomicU64::new(0),
            file_holes_seen: AtomicBool::new(false),
            retention: RwLock::new(JournalRetention::default()),
            options: database::StoreOptions::default(),
            upgraded_from: None,
            journal_keys: std::sync::Mutex::new(None),
            history_mirror: std::sync::Mutex::new(None),
            history_rows_read: AtomicU64::new(0),
        }
    }

    /// How many history rows this handle's lookups have read (journal entries by regret
    /// lookups and by building the journal's keys, names rows stepped over by the names
    /// walk): a count tests hold flat as the history grows (issue 53 item 4).
    pub fn history_rows_read(&self) -> u64 {
        self.history_rows_read.load(Ordering::Relaxed)
    }

    /// The journal's keys, locked: held by a write transaction to its commit.
    fn lock_journal_keys(&self) -> std::sync::MutexGuard<'_, Option<journal_keys::JournalKeys>> {
        // A panic while holding the lock leaves whole keys or none (each write replaces them).
        self.journal_keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the journal's keys: called by every writer of the journal other than
    /// [`Store::apply`] (a migration, a reopen, raw test writes); the next transaction that
    /// needs them reads them from the journal.
    fn forget_journal_keys(&self) {
        *self.lock_journal_keys() = None;
    }

    /// The history mirror, locked: held by a write transaction to its commit.
    fn lock_history_mirror(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<history_mirror::HistoryMirror>> {
        // A panic while holding the lock leaves a whole mirror or none (a log is played only
        // after its commit).
        self.history_mirror
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the history mirror: called after their commit by every writer of the history
    /// tables or the journal other than [`Store::apply`] (a migration, a reopen, raw test
    /// writes); the next walk builds it from the tables.
    fn forget_history_mirror(&self) {
        *self.lock_history_mirror() = None;
    }

    /// The schema version the file had when this handle was opened, if the open upgraded it
    /// ([`Store::open_verified_copy`] upgrades `inspect`'s private copy of an older file):
    /// the file's own version, where the meta table now holds the upgraded one.
    pub fn upgraded_from(&self) -> Option<i64> {
        self.upgraded_from
    }

    fn into_handle(self) -> Handle {
        self.handle.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    fn read_handle(&self) -> RwLockReadGuard<'_, Handle> {
        // A panic while holding the lock leaves a whole handle (every write is one assignment).
        self.handle.read().unwrap_or_else(|p| p.into_inner())
    }

    fn redb_err(&self, e: impl Into<redb::Error>) -> StoreError {
        StoreError::from_redb(&self.path, e.into())
    }

    fn decode_err(&self, e: DecodeError) -> StoreError {
        StoreError::Decode {
            path: self.path.clone(),
            source: e,
        }
    }

    fn begin_read(&self) -> Result<ReadTransaction, StoreError> {
        self.begin_read_on(&self.read_handle())
    }

    fn begin_read_on(&self, handle: &Handle) -> Result<ReadTransaction, StoreError> {
        let txn = match handle {
            Handle::Write(db) => db.begin_read(),
            Handle::Read(db) => db.begin_read(),
            Handle::Closed => {
                return Err(StoreError::Closed {
                    path: self.path.clone(),
                });
            }
        };
        txn.map_err(|e| self.redb_err(e))
    }

    fn open_read_table<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        txn: &ReadTransaction,
        def: TableDefinition<Stored<K>, Stored<V>>,
    ) -> Result<ReadOnlyTable<Stored<K>, Stored<V>>, StoreError> {
        txn.open_table(def).map_err(|e| self.redb_err(e))
    }

    fn wrap(&self, e: TxnError) -> StoreError {
        match e {
            TxnError::Redb(e) => self.redb_err(e),
            TxnError::Decode(e) => self.decode_err(e),
            TxnError::Mismatch(detail) => StoreError::IndexMismatch {
                path: self.path.clone(),
                detail,
            },
            TxnError::TooManyPins { active } => StoreError::TooManyPins {
                active,
                limit: crate::model::MAX_ACTIVE_PINS,
            },
        }
    }
}

/// Errors inside a transaction, before the path is attached.
enum TxnError {
    Redb(redb::Error),
    Decode(DecodeError),
    Mismatch(IndexMismatch),
    /// A new pin past [`crate::model::MAX_ACTIVE_PINS`] pins in force.
    TooManyPins {
        /// The pins in force at the new pin's creation.
        active: usize,
    },
}

impl<E: Into<redb::Error>> From<E> for TxnError {
    fn from(e: E) -> TxnError {
        TxnError::Redb(e.into())
    }
}
