//! The record store: the only module that imports redb.
//!
//! It owns one redb file with six tables (see `tables.rs`): `images` (RecordKey →
//! ImageRecord), `eviction_prefix` ((last_used, first_detected, 16-byte key prefix) → ();
//! schema 3, see [`IndexKey`]; schemas 1 and 2 had `eviction` with the whole key), `backoff`,
//! `meta`,
//! and from schema 2 `names` (RecordKey → repo tags and digests) and `journal` ((removed_at,
//! RecordKey) → JournalEntry; see `journal.rs`). Invariants:
//! - every record has exactly one eviction-index entry matching its current fields (records
//!   with the same times and key prefix share it), and the index holds nothing else; every
//!   mutation keeps this inside its own write transaction;
//! - a [`Batch`] is one durable (`Durability::Immediate`) write transaction, and a batch that
//!   changes nothing commits nothing ([`Store::commits`] counts real commits);
//! - eviction order is read as a lazy range scan over the index, never by loading and sorting;
//! - a record's deletion by GC or by detect (an external removal) is journaled in the same
//!   transaction, and the journal is pruned to its retention in every transaction that writes
//!   it;
//! - every byte read from the file is decoded through `codec`, which fails instead of
//!   panicking; a file that is not ours, corrupt or from a newer schema is refused, never
//!   wiped.

#[cfg(test)]
mod apply_tests;
mod batch;
mod check;
#[cfg(test)]
mod check_tests;
mod codec;
mod compact;
mod error;
mod history;
mod journal;
mod open;
#[cfg(any(test, feature = "fault-injection"))]
pub mod power_loss;
#[cfg(any(test, feature = "fault-injection"))]
pub mod power_loss_harness;
mod reopen;
mod scan;
mod tables;
#[cfg(test)]
mod upgrade_tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Instant;

use redb::{
    Database, Durability, ReadOnlyDatabase, ReadOnlyTable, ReadTransaction, ReadableDatabase,
    ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction,
};

pub use batch::{Batch, BatchOp, SightedNames};
pub use check::Violation;
/// The byte layouts the fuzz `decode` target round-trips.
#[cfg(feature = "fault-injection")]
pub use codec::{BackoffKey, Codec, MetaKey, MetaValue};
pub use codec::{DecodeError, EvictionKey, IndexKey, JournalKey};
pub use compact::CompactOutcome;
pub use error::{BackupConflict, IndexMismatch, StoreError};
pub use journal::{age_cutoff, retention_keys};
pub use open::{CURRENT_SCHEMA_VERSION, DEFAULT_CACHE_BYTES, StoreOptions, meta_keys};
pub use scan::RecordScan;

use reopen::{Liveness, ScanTie};

use codec::MAX_ID_BYTES;
#[cfg(not(feature = "fault-injection"))]
use codec::{BackoffKey, Codec, MetaKey, MetaValue};
use tables::{
    BACKOFF, EVICTION_PREFIX, Encoded, IMAGES, JOURNAL, META, NAMES, PINS, PULLS, Stored, USES,
    WARM,
};

use crate::model::{
    BackoffEntry, ImageNames, ImagePin, ImageRecord, JournalEntry, JournalRetention,
    MAX_IMAGE_NAME_BYTES, MAX_PIN_REASON_BYTES, MAX_POD_UID_BYTES, PinKey, PullEntry, PullKey,
    PullOrigin, RecordKey, Remover, Repull, UnixNanos, UseInterval, UseKey, WarmRow,
};

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
    /// The health flag and handle generation, shared with the lazy scans
    /// ([`RecordScan`], [`EvictionIter`]) so they can tell a reopen happened under them.
    liveness: Arc<Liveness>,
    reopens: AtomicU64,
    /// The file's size after this handle's last compaction (0: none yet).
    last_compacted_bytes: AtomicU64,
    /// The file's size when this handle last compacted it (0: never): a file that has grown
    /// back only to it is not compacted again (`compact.rs`).
    last_compacted_from_bytes: AtomicU64,
    /// The journal's retention, applied by every transaction that writes the journal.
    retention: RwLock<JournalRetention>,
    /// How the file was opened (kept for a reopen) and whether commits set quick repair.
    options: open::StoreOptions,
    /// The schema version the file had before this handle's open upgraded it (a verified
    /// copy for `inspect`), if it did.
    upgraded_from: Option<i64>,
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
    pub key: RecordKey,
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
            liveness: Arc::new(Liveness {
                healthy: AtomicBool::new(true),
                generation: RwLock::new(0),
                reopenable,
            }),
            reopens: AtomicU64::new(0),
            last_compacted_bytes: AtomicU64::new(0),
            last_compacted_from_bytes: AtomicU64::new(0),
            retention: RwLock::new(JournalRetention::default()),
            options: open::StoreOptions::default(),
            upgraded_from: None,
        }
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

    /// The record of `key`, if any.
    pub fn get(&self, key: &RecordKey) -> Result<Option<ImageRecord>, StoreError> {
        self.guarded(|| self.point_get(IMAGES, key))
    }

    /// The records of `keys`, in their order (`None` where there is none), read in one read
    /// transaction: a ranking that looks up every listed image pays one transaction, not one
    /// per image (at 100k images the per-image transactions were most of a predictive walk).
    /// Keys in strictly ascending order (a detect's list is) are read by one range scan
    /// merged with them ([`Store::merge_sorted`]); others by one lookup each.
    pub fn get_many<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k RecordKey> + Clone,
    ) -> Result<Vec<Option<ImageRecord>>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, IMAGES)?;
            let encoded: Vec<Vec<u8>> = keys.clone().into_iter().map(Codec::encode).collect();
            // The codec's byte order is the keys' order (`OrderedCodec`).
            if encoded.windows(2).all(|w| w[0] < w[1]) {
                return self.merge_sorted(&table, &encoded);
            }
            let mut out = Vec::with_capacity(encoded.len());
            for encoded in encoded {
                let found = table
                    .get(Encoded::new(&encoded))
                    .map_err(|e| self.redb_err(e))?;
                out.push(match found {
                    None => None,
                    Some(guard) => Some(guard.value().decode().map_err(|e| self.decode_err(e))?),
                });
            }
            Ok(out)
        })
    }

    /// One decoded value of `table`, if `key` is there.
    fn point_get<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
        key: &K,
    ) -> Result<Option<V>, StoreError> {
        let txn = self.begin_read()?;
        let table = self.open_read_table(&txn, table)?;
        let encoded = key.encode();
        let found = table
            .get(Encoded::new(&encoded))
            .map_err(|e| self.redb_err(e))?;
        match found {
            None => Ok(None),
            Some(guard) => guard
                .value()
                .decode()
                .map(Some)
                .map_err(|e| self.decode_err(e)),
        }
    }

    /// Every decoded entry of `table`, in key order.
    fn scan_all<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
    ) -> Result<Vec<(K, V)>, StoreError> {
        let txn = self.begin_read()?;
        let table = self.open_read_table(&txn, table)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            let key = k.value().decode().map_err(|e| self.decode_err(e))?;
            let value = v.value().decode().map_err(|e| self.decode_err(e))?;
            out.push((key, value));
        }
        Ok(out)
    }

    /// The rows of `table` whose raw key and value `keep` accepts, decoded, in key order: a
    /// scan that decodes (and allocates) only the rows a caller wants.
    fn scan_matching<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
        keep: &dyn Fn(&[u8], &[u8]) -> bool,
    ) -> Result<Vec<(K, V)>, StoreError> {
        let txn = self.begin_read()?;
        let table = self.open_read_table(&txn, table)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            if !keep(k.value().bytes(), v.value().bytes()) {
                continue;
            }
            let key = k.value().decode().map_err(|e| self.decode_err(e))?;
            let value = v.value().decode().map_err(|e| self.decode_err(e))?;
            out.push((key, value));
        }
        Ok(out)
    }

    /// How many image records there are.
    pub fn len(&self) -> Result<u64, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let images = self.open_read_table(&txn, IMAGES)?;
            images.len().map_err(|e| self.redb_err(e))
        })
    }

    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// Every record, ordered by key, loaded at once. Prefer [`Store::records_in_key_order`]
    /// where the caller can walk them one by one.
    pub fn records(&self) -> Result<Vec<StoredRecord>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(IMAGES))?
            .into_iter()
            .map(|(key, record)| StoredRecord { key, record })
            .collect())
    }

    /// Records in eviction order (last_used, then first_detected, then key), oldest first,
    /// read lazily from the index.
    pub fn eviction_order(&self) -> Result<EvictionIter, StoreError> {
        self.eviction_scan(None, None)
    }

    /// Records whose last_used is before `bound`, in eviction order, read lazily.
    pub fn eviction_order_before(&self, bound: UnixNanos) -> Result<EvictionIter, StoreError> {
        self.eviction_scan(None, Some(bound))
    }

    /// Records after `after` in eviction order (exclusive), read lazily: resumes a walk.
    pub fn eviction_order_after(&self, after: &EvictionKey) -> Result<EvictionIter, StoreError> {
        self.eviction_scan(Some(after), None)
    }

    fn eviction_scan(
        &self,
        after: Option<&EvictionKey>,
        before: Option<UnixNanos>,
    ) -> Result<EvictionIter, StoreError> {
        self.guarded(|| self.eviction_scan_once(after, before))
    }

    fn eviction_scan_once(
        &self,
        after: Option<&EvictionKey>,
        before: Option<UnixNanos>,
    ) -> Result<EvictionIter, StoreError> {
        use std::ops::Bound;
        let (txn, tie) = self.begin_scan()?;
        let images = self.open_read_table(&txn, IMAGES)?;
        let index = txn
            .open_table(EVICTION_PREFIX)
            .map_err(|e| self.redb_err(e))?;
        // A resumed walk starts at the row holding `after`'s record (inclusive) and skips
        // the records of that row up to `after`.
        let lower_bytes = after.map(|a| IndexKey::of_eviction_key(a).encode());
        let upper_bytes = before.map(EvictionKey::last_used_prefix);
        let lower = match &lower_bytes {
            Some(b) => Bound::Included(Encoded::<IndexKey>::new(b)),
            None => Bound::Unbounded,
        };
        let upper = match &upper_bytes {
            Some(b) => Bound::Excluded(Encoded::<IndexKey>::new(b)),
            None => Bound::Unbounded,
        };
        let range = index
            .range::<Encoded<IndexKey>>((lower, upper))
            .map_err(|e| self.redb_err(e))?;
        Ok(EvictionIter {
            range,
            images,
            pending: std::collections::VecDeque::new(),
            after: after.cloned(),
            path: self.path.clone(),
            tie,
            _txn: txn,
        })
    }

    /// The backoff entry of `key` (`<pod uid>_<image>`), if any.
    pub fn backoff(&self, key: &str) -> Result<Option<BackoffEntry>, StoreError> {
        let key = BackoffKey(key.to_owned());
        self.guarded(|| self.point_get(BACKOFF, &key))
    }

    /// Every backoff entry, ordered by key.
    pub fn backoff_entries(&self) -> Result<Vec<(String, BackoffEntry)>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(BACKOFF))?
            .into_iter()
            .map(|(k, v)| (k.0, v))
            .collect())
    }

    /// Every pin (schema 4), ordered by key, active or expired (expired pins stay until a
    /// detect prunes them: see [`BatchOp::PruneExpiredPins`]).
    pub fn pins(&self) -> Result<Vec<(PinKey, ImagePin)>, StoreError> {
        self.guarded(|| self.scan_all(PINS))
    }

    /// The pin of `key`, if any.
    pub fn pin(&self, key: &PinKey) -> Result<Option<ImagePin>, StoreError> {
        self.guarded(|| self.point_get(PINS, key))
    }

    /// Every use interval (schema 5), open ones first, then closed ones oldest first.
    pub fn uses(&self) -> Result<Vec<(UseKey, UseInterval)>, StoreError> {
        self.guarded(|| self.scan_all(USES))
    }

    /// The use history of the images `keys` only (as [`Store::uses`] filtered, in the same
    /// order), the others' rows not decoded: the predictive order's read once per space walk
    /// (issue 41: with the histories full, decoding every row was most of a simulated cycle).
    pub fn uses_of(
        &self,
        keys: &std::collections::BTreeSet<&RecordKey>,
    ) -> Result<Vec<(UseKey, UseInterval)>, StoreError> {
        // A use key is [layout][closed][started_at: 8][record key] (`codec.rs`).
        self.history_of(USES, 10, keys)
    }

    /// The pull history of the images `keys` only (as [`Store::pulls`] filtered, in the same
    /// order), the others' rows not decoded.
    pub fn pulls_of(
        &self,
        keys: &std::collections::BTreeSet<&RecordKey>,
    ) -> Result<Vec<(PullKey, PullEntry)>, StoreError> {
        // A pull key is [layout][at: 8][record key] (`codec.rs`).
        self.history_of(PULLS, 9, keys)
    }

    /// The rows of a history table whose encoded key ends with one of `keys`' encodings,
    /// starting at byte `record_key_at` (the history keys' layout), others not decoded.
    fn history_of<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
        record_key_at: usize,
        keys: &std::collections::BTreeSet<&RecordKey>,
    ) -> Result<Vec<(K, V)>, StoreError> {
        let wanted = encoded_keys(keys);
        self.guarded(|| {
            self.scan_matching(table, &|k, _| {
                k.get(record_key_at..)
                    .is_some_and(|key| wanted.contains(key))
            })
        })
    }

    /// The journal entries marked re-pulled (as [`Store::journal`] filtered, in the same
    /// order), the others' keys not decoded: what the adaptive order's returns count.
    /// Each entry is decoded once (the filter is on the decoded entry).
    pub fn journal_repulled(&self) -> Result<Vec<(JournalKey, JournalEntry)>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, JOURNAL)?;
            let mut out = Vec::new();
            for entry in table.iter().map_err(|e| self.redb_err(e))? {
                let (k, v) = entry.map_err(|e| self.redb_err(e))?;
                let value: JournalEntry = v.value().decode().map_err(|e| self.decode_err(e))?;
                if value.repulled_at.is_none() {
                    continue;
                }
                let key = k.value().decode().map_err(|e| self.decode_err(e))?;
                out.push((key, value));
            }
            Ok(out)
        })
    }

    /// The pull history (schema 5), oldest first.
    pub fn pulls(&self) -> Result<Vec<(PullKey, PullEntry)>, StoreError> {
        self.guarded(|| self.scan_all(PULLS))
    }

    /// The warm set's state at the agent's last warm cycle (schema 5), in priority order.
    pub fn warm_rows(&self) -> Result<Vec<WarmRow>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(WARM))?
            .into_iter()
            .map(|(_, row)| row)
            .collect())
    }

    /// Sets the journal's retention, applied from the next transaction that writes the journal
    /// (default: 30 days, 10,000 entries).
    pub fn set_journal_retention(&self, retention: JournalRetention) {
        match self.retention.write() {
            Ok(mut r) => *r = retention,
            Err(p) => *p.into_inner() = retention,
        }
    }

    /// The journal's retention in force on this handle.
    pub fn journal_retention(&self) -> JournalRetention {
        match self.retention.read() {
            Ok(r) => *r,
            Err(p) => *p.into_inner(),
        }
    }

    /// The names of `key`'s image, if stored.
    pub fn names(&self, key: &RecordKey) -> Result<Option<ImageNames>, StoreError> {
        self.guarded(|| self.point_get(NAMES, key))
    }

    /// The stored names of `keys` (each read once; a key without names is absent): what the
    /// warm set's history entries and restore match the journal's removals against. A read
    /// error is an error, never "no names" (which would drop a warm image's protection).
    pub fn names_of_keys<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a RecordKey>,
    ) -> Result<std::collections::BTreeMap<RecordKey, ImageNames>, StoreError> {
        let mut out = std::collections::BTreeMap::new();
        for key in keys {
            if out.contains_key(key) {
                continue;
            }
            if let Some(names) = self.names(key)? {
                out.insert(key.clone(), names);
            }
        }
        Ok(out)
    }

    /// The names of `images` (the runtime's list, the last entry of a key winning) that differ
    /// from the stored ones, read in one transaction without loading the names table: what a
    /// detect writes. An image with no names and none stored is not a difference.
    pub fn names_that_differ(
        &self,
        images: &[crate::model::RuntimeImage],
    ) -> Result<Vec<(RecordKey, ImageNames)>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, NAMES)?;
            // Last entry of a key wins: walk the list backwards and skip keys already seen
            // (borrowed, so no key is copied for a list that changed nothing).
            let mut seen: std::collections::HashSet<(&str, &str)> =
                std::collections::HashSet::with_capacity(images.len());
            let mut out = Vec::new();
            for image in images.iter().rev() {
                if !seen.insert((image.id.as_str(), image.runtime_handler.as_str())) {
                    continue;
                }
                let key = image.record_key();
                let encoded = key.encode();
                let stored = match table
                    .get(Encoded::new(&encoded))
                    .map_err(|e| self.redb_err(e))?
                {
                    Some(g) => Some(g.value().decode().map_err(|e| self.decode_err(e))?),
                    None => None,
                };
                let same = match &stored {
                    Some(n) => {
                        n.repo_tags == image.repo_tags && n.repo_digests == image.repo_digests
                    }
                    None => image.repo_tags.is_empty() && image.repo_digests.is_empty(),
                };
                if !same {
                    out.push((key, ImageNames::of(image)));
                }
            }
            // In list order, as detect's other writes.
            out.reverse();
            Ok(out)
        })
    }

    /// [`Store::names_that_differ`] for a list already folded and sorted by record key (one
    /// image per key, in key order: `gc::ListedImages::iter`): one walk of the names table
    /// merged with the list, no point lookup and no set of the keys seen. The differences
    /// come back in key order. A list out of key order is an error, never a wrong answer.
    pub fn names_that_differ_in_key_order<I: crate::model::ImageLike>(
        &self,
        images: impl Iterator<Item = I> + Clone,
    ) -> Result<Vec<(RecordKey, ImageNames)>, StoreError> {
        let mut out = Vec::new();
        self.for_names_that_differ_in_key_order(images, |key, names| out.push((key, names)))?;
        Ok(out)
    }

    /// [`Store::names_that_differ_in_key_order`] handing each difference to `differs` as it
    /// is found, in key order (detect puts them straight into its batch: a first detect at
    /// 100k holds no list of 100k differences beside the batch). Returns how many differ. A
    /// walk retried after a reopen (`guarded`) may hand a difference twice, the same key with
    /// the same names: a batch keeps the last.
    pub fn for_names_that_differ_in_key_order<I: crate::model::ImageLike>(
        &self,
        images: impl Iterator<Item = I> + Clone,
        differs: impl FnMut(RecordKey, ImageNames),
    ) -> Result<usize, StoreError> {
        let differs = std::cell::RefCell::new(differs);
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, NAMES)?;
            let mut stored = table.iter().map_err(|e| self.redb_err(e))?;
            let mut current: Option<(RecordKey, redb::AccessGuard<'_, Stored<ImageNames>>)> = None;
            let mut count = 0;
            let mut previous: Option<I> = None;
            for image in images.clone() {
                let want = (image.id(), image.runtime_handler());
                if let Some(previous) = previous
                    .as_ref()
                    .filter(|p| (p.id(), p.runtime_handler()) >= want)
                {
                    return Err(StoreError::UnorderedNames {
                        previous: previous.record_key(),
                        next: image.record_key(),
                    });
                }
                // Advance the names walk to the first key at or after the image's.
                loop {
                    if let Some((key, _)) = &current
                        && (key.image_id.as_str(), key.runtime_handler.as_str()) >= want
                    {
                        break;
                    }
                    match stored.next() {
                        None => {
                            current = None;
                            break;
                        }
                        Some(entry) => {
                            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
                            let key = k.value().decode().map_err(|e| self.decode_err(e))?;
                            current = Some((key, v));
                        }
                    }
                }
                let names = match &current {
                    Some((key, v))
                        if (key.image_id.as_str(), key.runtime_handler.as_str()) == want =>
                    {
                        Some(v.value().decode().map_err(|e| self.decode_err(e))?)
                    }
                    _ => None,
                };
                let same = match &names {
                    Some(n) => {
                        image.repo_tags().eq(n.repo_tags.iter().map(String::as_str))
                            && image
                                .repo_digests()
                                .eq(n.repo_digests.iter().map(String::as_str))
                    }
                    None => {
                        image.repo_tags().next().is_none() && image.repo_digests().next().is_none()
                    }
                };
                if !same {
                    (differs.borrow_mut())(image.record_key(), ImageNames::of(&image));
                    count += 1;
                }
                previous = Some(image);
            }
            Ok(count)
        })
    }

    /// Every image's names, by record key.
    pub fn all_names(&self) -> Result<Vec<(RecordKey, ImageNames)>, StoreError> {
        self.guarded(|| self.scan_all(NAMES))
    }

    /// Every journal entry, oldest first.
    pub fn journal(&self) -> Result<Vec<(JournalKey, JournalEntry)>, StoreError> {
        self.guarded(|| self.scan_all(JOURNAL))
    }

    /// A meta value, if set.
    pub fn meta(&self, name: &str) -> Result<Option<i64>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, META)?;
            read_meta(&table, name).map_err(|e| self.wrap(e))
        })
    }

    /// Every meta value, ordered by name.
    pub fn meta_entries(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(META))?
            .into_iter()
            .map(|(k, v)| (k.0, v.0))
            .collect())
    }

    fn wrap(&self, e: TxnError) -> StoreError {
        match e {
            TxnError::Redb(e) => self.redb_err(e),
            TxnError::Decode(e) => self.decode_err(e),
            TxnError::Mismatch(detail) => StoreError::IndexMismatch {
                path: self.path.clone(),
                detail,
            },
        }
    }

    /// Applies `batch` as one durable write transaction. Returns whether it committed: a batch
    /// that changes nothing commits nothing.
    pub fn apply(&self, batch: &Batch) -> Result<bool, StoreError> {
        self.apply_reporting(batch).map(|a| a.committed)
    }

    /// [`Store::apply`], also reporting the journal entries it marked re-pulled.
    pub fn apply_reporting(&self, batch: &Batch) -> Result<Applied, StoreError> {
        for op in &batch.ops {
            validate_op(op)?;
        }
        self.guarded(|| self.apply_once(batch))
    }

    fn apply_once(&self, batch: &Batch) -> Result<Applied, StoreError> {
        // Held for the whole transaction: a reopen never drops a handle mid-commit.
        let handle = self.read_handle();
        let db = match &*handle {
            Handle::Write(db) => db,
            Handle::Read(_) => {
                return Err(StoreError::ReadOnly {
                    path: self.path.clone(),
                });
            }
            Handle::Closed => {
                return Err(StoreError::Closed {
                    path: self.path.clone(),
                });
            }
        };
        let mut txn = db.begin_write().map_err(|e| self.redb_err(e))?;
        txn.set_durability(self.durability)
            .map_err(|e| self.redb_err(e))?;
        txn.set_quick_repair(self.options.quick_repair);
        let retention = self.journal_retention();
        let (changed, repulls, journaled) =
            apply_ops(&txn, batch, retention).map_err(|e| self.wrap(e))?;
        if !changed {
            txn.abort().map_err(|e| self.redb_err(e))?;
            return Ok(Applied::default());
        }
        let started = Instant::now();
        txn.commit().map_err(|e| self.redb_err(e))?;
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.commit_nanos_total.fetch_add(took, Ordering::SeqCst);
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(Applied {
            committed: true,
            repulls,
            journaled,
        })
    }
}

#[cfg(test)]
impl Store {
    /// Writes raw bytes into a table, or with `value` `None` removes the key, bypassing every
    /// rule: for the negative tests of `Store::check`. The index's value is `()`.
    pub(crate) fn raw_write_for_tests(&self, table: &str, key: &[u8], value: Option<&[u8]>) {
        fn put<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
            txn: &WriteTransaction,
            def: TableDefinition<Stored<K>, Stored<V>>,
            key: &[u8],
            value: Option<&[u8]>,
        ) {
            let mut t = txn.open_table(def).expect("table");
            match value {
                Some(v) => {
                    t.insert(Encoded::new(key), Encoded::new(v))
                        .expect("insert");
                }
                None => {
                    t.remove(Encoded::new(key)).expect("remove");
                }
            }
        }
        let Handle::Write(db) = &*self.read_handle() else {
            panic!("a read-write store");
        };
        let txn = db.begin_write().expect("begin");
        match table {
            "images" => put(&txn, IMAGES, key, value),
            "backoff" => put(&txn, BACKOFF, key, value),
            "meta" => put(&txn, META, key, value),
            "names" => put(&txn, NAMES, key, value),
            "journal" => put(&txn, JOURNAL, key, value),
            "pins" => put(&txn, PINS, key, value),
            "uses" => put(&txn, USES, key, value),
            "pulls" => put(&txn, PULLS, key, value),
            "warm" => put(&txn, WARM, key, value),
            "eviction_prefix" => {
                let mut t = txn.open_table(EVICTION_PREFIX).expect("table");
                match value {
                    Some(_) => {
                        t.insert(Encoded::new(key), ()).expect("insert");
                    }
                    None => {
                        t.remove(Encoded::new(key)).expect("remove");
                    }
                }
            }
            other => panic!("no raw writes to {other}"),
        }
        txn.commit().expect("commit");
    }

    /// Writes raw bytes into a table, bypassing every rule.
    pub(crate) fn raw_bytes_for_tests(&self, table: &str, key: &[u8], value: &[u8]) {
        self.raw_write_for_tests(table, key, Some(value));
    }

    /// A names row written as is.
    pub(crate) fn raw_insert_for_tests(&self, table: &str, key: &RecordKey, names: &ImageNames) {
        self.raw_bytes_for_tests(table, &key.encode(), &names.encode());
    }
}

/// Errors inside a transaction, before the path is attached.
enum TxnError {
    Redb(redb::Error),
    Decode(DecodeError),
    Mismatch(IndexMismatch),
}

impl<E: Into<redb::Error>> From<E> for TxnError {
    fn from(e: E) -> TxnError {
        TxnError::Redb(e.into())
    }
}

/// Refuses to write a backoff key (`<pod uid>_<image>`) longer than [`MAX_POD_UID_BYTES`] +
/// 1 + [`MAX_IMAGE_NAME_BYTES`], or whose part before the first `_` (the pod uid, unless the
/// uid itself holds a `_`) is longer than [`MAX_POD_UID_BYTES`].
fn validate_backoff_key(key: &str) -> Result<(), StoreError> {
    let uid = key.split('_').next().unwrap_or_default();
    let reason = if uid.len() > MAX_POD_UID_BYTES {
        "the pod uid is longer than 128 bytes"
    } else if key.len() > MAX_POD_UID_BYTES + 1 + MAX_IMAGE_NAME_BYTES {
        "the backoff key is longer than 4225 bytes (a pod uid of 128, `_`, an image name of 4096)"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: key.chars().take(80).collect(),
        reason,
    })
}

/// Refuses a pin whose image name is empty, holds a NUL byte or is longer than
/// [`MAX_IMAGE_NAME_BYTES`], whose runtime handler holds a NUL byte, or whose reason is longer
/// than [`MAX_PIN_REASON_BYTES`].
fn validate_pin(key: &PinKey, pin: &ImagePin) -> Result<(), StoreError> {
    let reason = if key.image.is_empty() {
        "the image name is empty"
    } else if key.image.contains('\0') || key.runtime_handler.contains('\0') {
        "the image name or runtime handler contains a NUL byte"
    } else if key.image.len() > MAX_IMAGE_NAME_BYTES {
        "the image name is longer than 4096 bytes"
    } else if pin.reason.len() > MAX_PIN_REASON_BYTES {
        "the pin's reason is longer than 1024 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: key.image.chars().take(80).collect(),
        reason,
    })
}

fn validate_op(op: &BatchOp) -> Result<(), StoreError> {
    let key = match op {
        BatchOp::Upsert { key, .. }
        | BatchOp::MarkUsed { key, .. }
        | BatchOp::Sight { key, .. }
        | BatchOp::ClampFuture { key, .. }
        | BatchOp::Remove { key }
        | BatchOp::RemoveUnlisted { key, .. }
        | BatchOp::Evict { key, .. }
        | BatchOp::SetNames { key, .. } => key,
        BatchOp::PutBackoff { key, .. } => return validate_backoff_key(key),
        BatchOp::PutPin { key, pin } => return validate_pin(key, pin),
        BatchOp::RemovePin { .. } | BatchOp::PruneExpiredPins { .. } => return Ok(()),
        BatchOp::OpenUse { key, .. } => key,
        BatchOp::RecordPull { key, entry } => {
            if entry.name.len() > MAX_IMAGE_NAME_BYTES {
                return Err(StoreError::InvalidKey {
                    key: entry.name.chars().take(80).collect(),
                    reason: "the pulled image name is longer than 4096 bytes",
                });
            }
            &key.key
        }
        BatchOp::ObserveUses { in_use, .. } => {
            for key in in_use {
                validate_record_key(key)?;
            }
            return Ok(());
        }
        BatchOp::ReplaceWarm { rows } => {
            for row in rows {
                validate_warm_row(row)?;
            }
            return Ok(());
        }
        // A removal is never refused: an entry an older version stored under a longer key
        // must stay removable, and a pull's success removes every expired key in the batch
        // that marks its image.
        BatchOp::RemoveBackoff { .. } | BatchOp::SetMeta { .. } => return Ok(()),
    };
    validate_record_key(key)
}

/// Refuses a warm row whose image name is empty or longer than [`MAX_IMAGE_NAME_BYTES`],
/// whose runtime handler is longer than that, or whose image id is longer than
/// [`MAX_ID_BYTES`] (the layout would cut them).
fn validate_warm_row(row: &WarmRow) -> Result<(), StoreError> {
    let reason = if row.image.is_empty() {
        "the warm image name is empty"
    } else if row.image.len() > MAX_IMAGE_NAME_BYTES {
        "the warm image name is longer than 4096 bytes"
    } else if row.runtime_handler.len() > MAX_IMAGE_NAME_BYTES {
        "the warm entry's runtime handler is longer than 4096 bytes"
    } else if row.image_id.len() > MAX_ID_BYTES {
        "the warm entry's image id is longer than 65535 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: row.image.chars().take(80).collect(),
        reason,
    })
}

fn validate_record_key(key: &RecordKey) -> Result<(), StoreError> {
    let id = key.image_id.as_str();
    let reason = if id.is_empty() {
        "the image id is empty"
    } else if id.contains('\0') {
        "the image id contains a NUL byte"
    } else if id.len() > MAX_ID_BYTES {
        "the image id is longer than 65535 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: id.chars().take(80).collect(),
        reason,
    })
}

fn read_meta<T: ReadableTable<Stored<MetaKey>, Stored<MetaValue>>>(
    table: &T,
    name: &str,
) -> Result<Option<i64>, TxnError> {
    let encoded = MetaKey(name.to_owned()).encode();
    match table.get(Encoded::new(&encoded))? {
        None => Ok(None),
        Some(guard) => guard
            .value()
            .decode()
            .map(|v| Some(v.0))
            .map_err(TxnError::Decode),
    }
}

/// What [`apply_ops`] did: whether anything changed, the journal entries marked re-pulled and
/// those written.
type OpsOutcome = (bool, Vec<Repull>, Vec<(JournalKey, JournalEntry)>);

/// Applies every operation.
fn apply_ops(
    txn: &WriteTransaction,
    batch: &Batch,
    retention: JournalRetention,
) -> Result<OpsOutcome, TxnError> {
    // Each table is opened at its first use: a one-record batch opens `images` and the index
    // alone, not the schema's ten tables.
    let mut images = LazyTable::new(txn, IMAGES);
    let mut index = LazyTable::new(txn, EVICTION_PREFIX);
    let mut backoff = LazyTable::new(txn, BACKOFF);
    let mut meta = LazyTable::new(txn, META);
    let mut names = LazyTable::new(txn, NAMES);
    let mut journal = LazyTable::new(txn, JOURNAL);
    let mut pins = LazyTable::new(txn, PINS);
    let mut uses = LazyTable::new(txn, USES);
    let mut pulls = LazyTable::new(txn, PULLS);
    let mut warm = LazyTable::new(txn, WARM);
    // The history's `now`s: the latest use time and pull time this transaction writes, for
    // their prunes.
    let mut uses_now: Option<UnixNanos> = None;
    let mut uses_changed = false;
    let mut pulls_now: Option<UnixNanos> = None;
    let explicit_pulls: std::collections::BTreeSet<&RecordKey> = batch
        .ops
        .iter()
        .filter_map(|op| match op {
            BatchOp::RecordPull { key, .. } => Some(&key.key),
            _ => None,
        })
        .collect();
    let mut changed = false;
    let mut journal_written = false;
    let mut repulls = Vec::new();
    let mut journaled = Vec::new();
    let mut repull_times: Vec<UnixNanos> = Vec::new();
    for op in &batch.ops {
        // A pull's mark or a detect's sighting that creates a record: the regret check. Each
        // op reads its record once; the write below starts from that read.
        let mut creates: Option<(&RecordKey, UnixNanos)> = None;
        changed |= match op {
            BatchOp::Upsert { key, record } => {
                put_record(images.get()?, index.get()?, key, Some(*record))?
            }
            BatchOp::MarkUsed { key, now, size } => {
                let old = get_record(images.get()?, key)?;
                if old.is_none() {
                    creates = Some((key, *now));
                }
                let next = match old {
                    // A mark never moves last_used back, and always moves it: with the
                    // clock gone back, a mark at or before the stored time lands one
                    // nanosecond after it, so detect's RemoveUnlisted and GC's last look
                    // (which compare last_used with what they read before) see the mark.
                    // (Found by the simulator.)
                    Some(old) => ImageRecord {
                        last_used: (*now).max(UnixNanos(old.last_used.0.saturating_add(1))),
                        size: size.unwrap_or(old.size),
                        ..old
                    },
                    None => ImageRecord {
                        first_detected: *now,
                        last_used: *now,
                        size: size.unwrap_or(0),
                        pinned: false,
                    },
                };
                put_record_over(images.get()?, index.get()?, key, old, Some(next))?
            }
            BatchOp::Sight {
                key,
                sighting,
                names: sighted,
            } => {
                let old = get_record(images.get()?, key)?;
                if old.is_none() {
                    creates = Some((key, sighting.now));
                }
                let next = ImageRecord::after_sighting(old, *sighting);
                let record_changed =
                    put_record_over(images.get()?, index.get()?, key, old, Some(next))?;
                // The names as a `SetNames` right after the sighting would write them.
                let names_changed = match sighted {
                    Some(next) => journal::set_names(names.get()?, images.get()?, key, next)?,
                    None => false,
                };
                record_changed | names_changed
            }
            BatchOp::ClampFuture { key, limit, now } => match get_record(images.get()?, key)? {
                Some(old) if old.has_stamp_after(*limit) => put_record_over(
                    images.get()?,
                    index.get()?,
                    key,
                    Some(old),
                    Some(old.clamped(*limit, *now)),
                )?,
                _ => false,
            },
            BatchOp::Remove { key } => {
                let removed = put_record(images.get()?, index.get()?, key, None)?;
                removed | journal::forget_names(names.get()?, journal.get()?, key)?
            }
            BatchOp::RemoveUnlisted {
                key,
                seen_last_used,
                journal_at,
                note,
            } => match get_record(images.get()?, key)? {
                Some(old) if old.last_used <= *seen_last_used => {
                    put_record_over(images.get()?, index.get()?, key, Some(old), None)?;
                    match (note, journal_at) {
                        (Some(note), _) => {
                            let jkey = JournalKey {
                                removed_at: note.removed_at,
                                key: key.clone(),
                            };
                            let entry = journal::entry_of(&old, Remover::Imagekeeper, Some(note));
                            journal::put_entry(journal.get()?, &jkey, &entry)?;
                            journaled.push((jkey, entry));
                            journal_written = true;
                        }
                        (None, Some(at)) => {
                            let jkey = JournalKey {
                                removed_at: *at,
                                key: key.clone(),
                            };
                            let entry = journal::entry_of(&old, Remover::External, None);
                            journal::put_entry(journal.get()?, &jkey, &entry)?;
                            journaled.push((jkey, entry));
                            journal_written = true;
                        }
                        (None, None) => {
                            journal::forget_names(names.get()?, journal.get()?, key)?;
                        }
                    }
                    true
                }
                _ => false,
            },
            BatchOp::Evict { key, note } => match get_record(images.get()?, key)? {
                Some(old) => {
                    put_record_over(images.get()?, index.get()?, key, Some(old), None)?;
                    let jkey = JournalKey {
                        removed_at: note.removed_at,
                        key: key.clone(),
                    };
                    let entry = journal::entry_of(&old, Remover::Imagekeeper, Some(note));
                    journal::put_entry(journal.get()?, &jkey, &entry)?;
                    journaled.push((jkey, entry));
                    journal_written = true;
                    true
                }
                None => false,
            },
            BatchOp::SetNames { key, names: next } => {
                journal::set_names(names.get()?, images.get()?, key, next)?
            }
            BatchOp::PutBackoff { key, entry } => {
                let k = BackoffKey(key.clone()).encode();
                let backoff = backoff.get()?;
                let old = match backoff.get(Encoded::new(&k))? {
                    Some(g) => Some(g.value().decode().map_err(TxnError::Decode)?),
                    None => None,
                };
                if old.as_ref() == Some(entry) {
                    false
                } else {
                    backoff.insert(Encoded::new(&k), Encoded::new(&entry.encode()))?;
                    true
                }
            }
            BatchOp::RemoveBackoff { key } => {
                let k = BackoffKey(key.clone()).encode();
                backoff.get()?.remove(Encoded::new(&k))?.is_some()
            }
            BatchOp::SetMeta { name, value } => put_meta(meta.get()?, name, *value)?,
            BatchOp::PutPin { key, pin } => {
                let k = key.encode();
                let v = pin.encode();
                let pins = pins.get()?;
                let same = match pins.get(Encoded::new(&k))? {
                    Some(g) => g.value().bytes() == v.as_slice(),
                    None => false,
                };
                if !same {
                    pins.insert(Encoded::new(&k), Encoded::new(&v))?;
                }
                !same
            }
            BatchOp::RemovePin { key } => {
                pins.get()?.remove(Encoded::new(&key.encode()))?.is_some()
            }
            BatchOp::PruneExpiredPins { now } => {
                let cutoff = now.saturating_sub(retention.max_age);
                let pins = pins.get()?;
                let mut expired = Vec::new();
                for entry in pins.iter()? {
                    let (k, v) = entry?;
                    let pin = v.value().decode().map_err(TxnError::Decode)?;
                    if pin.until != UnixNanos::NEVER && pin.until < cutoff {
                        expired.push(k.value().bytes().to_vec());
                    }
                }
                for k in &expired {
                    pins.remove(Encoded::new(k))?;
                }
                !expired.is_empty()
            }
            // The use history commits, but like a note it does not make the batch's stamps
            // (`last_detect`: the latest detect that changed a record) move.
            BatchOp::ObserveUses { now, in_use } => {
                uses_now = uses_now.max(Some(*now));
                uses_changed |= history::observe_uses(uses.get()?, *now, in_use)?;
                false
            }
            BatchOp::OpenUse { key, now } => {
                uses_now = uses_now.max(Some(*now));
                uses_changed |= history::open_use(uses.get()?, key, *now)?;
                false
            }
            BatchOp::RecordPull { key, entry } => {
                pulls_now = pulls_now.max(Some(key.at));
                history::record_pull(pulls.get()?, key, entry)?
            }
            BatchOp::ReplaceWarm { rows } => history::replace_warm(warm.get()?, rows)?,
        };
        // A record created without an explicit pull of its key in this batch: someone else
        // pulled it, and imagekeeper records it as first seen.
        if let Some((key, now)) = creates
            && !explicit_pulls.contains(key)
            && let Some(record) = get_record(images.get()?, key)?
        {
            let pkey = PullKey {
                at: now,
                key: key.clone(),
            };
            let entry = PullEntry {
                size: record.size,
                origin: PullOrigin::Detected,
                took: std::time::Duration::ZERO,
                name: String::new(),
            };
            changed |= history::record_pull(pulls.get()?, &pkey, &entry)?;
            pulls_now = pulls_now.max(Some(now));
        }
        if let Some((key, now)) = creates
            && get_record(images.get()?, key)?.is_some()
            && let Some(repull) = journal::mark_repull(journal.get()?, key, now, retention.max_age)?
        {
            repulls.push(repull);
            repull_times.push(now);
            journal_written = true;
        }
    }
    if let Some(now) = uses_now {
        uses_changed |= history::prune_uses(uses.get()?, retention, now)?;
    }
    if let Some(now) = pulls_now {
        changed |= history::prune_pulls(pulls.get()?, retention, now)?;
    }
    if journal_written {
        // The transaction's `now`: the latest time it journaled or marked re-pulled (the
        // store has no clock; the batch's times come from the caller's).
        let now = journaled
            .iter()
            .map(|(k, _): &(JournalKey, JournalEntry)| k.removed_at)
            .chain(repull_times)
            .max()
            .unwrap_or(UnixNanos(i64::MIN));
        // The entries it wrote or marked re-pulled are kept whatever the retention.
        let fresh: std::collections::BTreeSet<JournalKey> = journaled
            .iter()
            .map(|(k, _)| k.clone())
            .chain(repulls.iter().map(|r| JournalKey {
                removed_at: r.removed_at,
                key: r.key.clone(),
            }))
            .collect();
        journal::prune(
            journal.get()?,
            names.get()?,
            images.get()?,
            meta.get()?,
            retention,
            now,
            &fresh,
        )?;
        // The histories follow the retention this transaction wrote to `meta`, so a lowered
        // retention never leaves them over it (`Store::check` holds them to it).
        uses_changed |= history::prune_uses(uses.get()?, retention, now)?;
        uses_changed |= history::prune_pulls(pulls.get()?, retention, now)?;
    }
    if changed {
        for (name, value) in &batch.stamps {
            put_meta(meta.get()?, name, *value)?;
        }
    }
    let mut noted = false;
    for (name, value) in &batch.notes {
        noted |= put_meta(meta.get()?, name, *value)?;
    }
    Ok((changed || noted || uses_changed, repulls, journaled))
}

/// A table of the batch's write transaction, opened at its first use, so a batch opens only
/// the tables its operations touch. Not opening a table commits exactly what opening it
/// would: every table exists from the file's creation or upgrade (the open reads each
/// definition), and opening one writes nothing.
struct LazyTable<'t, K: redb::Key + 'static, V: redb::Value + 'static> {
    txn: &'t WriteTransaction,
    def: TableDefinition<'static, K, V>,
    table: Option<redb::Table<'t, K, V>>,
}

impl<'t, K: redb::Key + 'static, V: redb::Value + 'static> LazyTable<'t, K, V> {
    fn new(txn: &'t WriteTransaction, def: TableDefinition<'static, K, V>) -> Self {
        LazyTable {
            txn,
            def,
            table: None,
        }
    }

    /// The table, opened now if this is its first use.
    fn get(&mut self) -> Result<&mut redb::Table<'t, K, V>, TxnError> {
        let table = match self.table.take() {
            Some(table) => table,
            None => {
                #[cfg(test)]
                apply_tests::OPENED.with(|o| {
                    o.borrow_mut()
                        .push(redb::TableHandle::name(&self.def).to_owned())
                });
                self.txn.open_table(self.def)?
            }
        };
        Ok(self.table.insert(table))
    }
}

type ImagesTable<'t> = redb::Table<'t, Stored<RecordKey>, Stored<ImageRecord>>;
type IndexTable<'t> = redb::Table<'t, Stored<IndexKey>, ()>;
type MetaTable<'t> = redb::Table<'t, Stored<MetaKey>, Stored<MetaValue>>;

fn get_record(images: &ImagesTable<'_>, key: &RecordKey) -> Result<Option<ImageRecord>, TxnError> {
    let k = key.encode();
    match images.get(Encoded::new(&k))? {
        Some(g) => Ok(Some(g.value().decode().map_err(TxnError::Decode)?)),
        None => Ok(None),
    }
}

/// Sets (or, with `None`, removes) one record and keeps its index row in step: the old row
/// goes unless another record still shares it. Returns whether anything changed.
fn put_record(
    images: &mut ImagesTable<'_>,
    index: &mut IndexTable<'_>,
    key: &RecordKey,
    next: Option<ImageRecord>,
) -> Result<bool, TxnError> {
    let old = get_record(images, key)?;
    put_record_over(images, index, key, old, next)
}

/// [`put_record`] over `old`, the record as this transaction already read it (nothing wrote
/// it since): the op's one read of its record serves the write too.
fn put_record_over(
    images: &mut ImagesTable<'_>,
    index: &mut IndexTable<'_>,
    key: &RecordKey,
    old: Option<ImageRecord>,
    next: Option<ImageRecord>,
) -> Result<bool, TxnError> {
    if old == next {
        return Ok(false);
    }
    let k = key.encode();
    match next {
        Some(record) => {
            images.insert(Encoded::new(&k), Encoded::new(&record.encode()))?;
        }
        None => {
            images.remove(Encoded::new(&k))?;
        }
    }
    if let Some(old) = old {
        let old_row = IndexKey::of_encoded(&k, &old);
        let row_bytes = old_row.encode();
        let present = if row_records(images, &old_row)?.is_empty() {
            index.remove(Encoded::new(&row_bytes))?.is_some()
        } else {
            index.get(Encoded::new(&row_bytes))?.is_some()
        };
        if !present {
            return Err(TxnError::Mismatch(IndexMismatch::RecordWithoutEntry {
                key: key.clone(),
            }));
        }
    }
    if let Some(record) = next {
        let new_row = IndexKey::of_encoded(&k, &record).encode();
        index.insert(Encoded::new(&new_row), ())?;
    }
    Ok(true)
}

/// The records an index row stands for, in key order: those whose key has the row's prefix
/// and whose times are the row's. A short range scan of `images`.
fn row_records<T: ReadableTable<Stored<RecordKey>, Stored<ImageRecord>>>(
    images: &T,
    row: &IndexKey,
) -> Result<Vec<StoredRecord>, TxnError> {
    let start = Encoded::<RecordKey>::new(row.scan_start());
    let mut out = Vec::new();
    for entry in images.range::<Encoded<RecordKey>>(start..)? {
        let (k, v) = entry?;
        let prefix = codec::key_prefix(k.value().bytes());
        if prefix > row.prefix {
            break;
        }
        if prefix < row.prefix {
            continue;
        }
        let record: ImageRecord = v.value().decode().map_err(TxnError::Decode)?;
        if row.matches(&record) {
            let key = k.value().decode().map_err(TxnError::Decode)?;
            out.push(StoredRecord { key, record });
        }
    }
    Ok(out)
}

fn put_meta(meta: &mut MetaTable<'_>, name: &str, value: i64) -> Result<bool, TxnError> {
    if read_meta(meta, name)? == Some(value) {
        return Ok(false);
    }
    let k = MetaKey(name.to_owned()).encode();
    meta.insert(Encoded::new(&k), Encoded::new(&MetaValue(value).encode()))?;
    Ok(true)
}

/// A lazy walk over the eviction index, oldest first, joined with each record.
pub struct EvictionIter {
    range: redb::Range<'static, Stored<IndexKey>, ()>,
    images: ReadOnlyTable<Stored<RecordKey>, Stored<ImageRecord>>,
    /// The records of the current row not yet returned, in key order.
    pending: std::collections::VecDeque<StoredRecord>,
    /// A resumed walk returns only records after this one.
    after: Option<EvictionKey>,
    path: PathBuf,
    /// Stops the walk once a reopen replaced the handle its transaction began on.
    tie: ScanTie,
    _txn: ReadTransaction,
}

/// The next record of an eviction walk: from `pending`, else from the next index row.
fn next_entry(
    range: &mut redb::Range<'static, Stored<IndexKey>, ()>,
    images: &ReadOnlyTable<Stored<RecordKey>, Stored<ImageRecord>>,
    pending: &mut std::collections::VecDeque<StoredRecord>,
    after: &mut Option<EvictionKey>,
    path: &Path,
) -> Option<Result<StoredRecord, StoreError>> {
    {
        loop {
            if let Some(next) = pending.pop_front() {
                return Some(Ok(next));
            }
            let (k, _) = match range.next()? {
                Ok(entry) => entry,
                Err(e) => return Some(Err(StoreError::from_redb(path, e.into()))),
            };
            let row: IndexKey = match k.value().decode() {
                Ok(row) => row,
                Err(source) => {
                    return Some(Err(StoreError::Decode {
                        path: path.to_owned(),
                        source,
                    }));
                }
            };
            let records = match row_records(images, &row) {
                Ok(records) => records,
                Err(TxnError::Redb(e)) => return Some(Err(StoreError::from_redb(path, e))),
                Err(TxnError::Decode(source)) => {
                    return Some(Err(StoreError::Decode {
                        path: path.to_owned(),
                        source,
                    }));
                }
                Err(TxnError::Mismatch(detail)) => {
                    return Some(Err(StoreError::IndexMismatch {
                        path: path.to_owned(),
                        detail,
                    }));
                }
            };
            if records.is_empty() {
                return Some(Err(StoreError::IndexMismatch {
                    path: path.to_owned(),
                    detail: IndexMismatch::EntryWithoutRecord { row },
                }));
            }
            // Only the first row of a resumed walk can hold records up to `after`.
            let after = after.take();
            pending.extend(records.into_iter().filter(|r| {
                after
                    .as_ref()
                    .is_none_or(|a| EvictionKey::of(&r.key, &r.record) > *a)
            }));
        }
    }
}

impl Iterator for EvictionIter {
    type Item = Result<StoredRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Only the reads from the transaction need the tie; records already read (`pending`)
        // were read under it.
        if let Some(next) = self.pending.pop_front() {
            return Some(Ok(next));
        }
        let Self {
            range,
            images,
            pending,
            after,
            path,
            tie,
            ..
        } = self;
        tie.step(|| next_entry(range, images, pending, after, path))
    }
}

/// `keys` as their stored bytes, for matching raw rows.
fn encoded_keys(
    keys: &std::collections::BTreeSet<&RecordKey>,
) -> std::collections::HashSet<Vec<u8>> {
    keys.iter().map(|k| k.encode()).collect()
}
