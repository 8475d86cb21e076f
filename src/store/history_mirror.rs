//! The use and pull histories and the journal's re-pulled entries in memory, by image: what
//! the `adaptive` and `predictive` space walks read, answered without reading the tables
//! (issue 53 item 4: each walk read the journal's re-pulled entries and both history tables
//! whole, up to the retention's 10,000 rows a table, so on a node reusing 200 images the two
//! orders cost 3x and 4x the kubelet's in `simulate`).
//!
//! Invariants:
//! - while the [`Store`](super::Store) holds it, it is exactly the committed tables' rows:
//!   each image's use intervals ((closed, start) → last seen) and pull times, and the keys of
//!   the journal entries marked re-pulled, with their count by image id. A write transaction
//!   holds its lock from before it begins to after its commit and records every row it
//!   writes or removes in those tables in a [`HistoryLog`] of assignments (a key's new value,
//!   or its absence), which [`HistoryMirror::apply`] plays only after the commit; a
//!   transaction that aborts or fails changed no committed row, so the mirror stays; one whose
//!   commit fails drops it;
//! - every other writer of those tables (a migration, a reopened handle, raw test writes)
//!   drops it after its commit ([`Store::forget_history_mirror`](super::Store)); the next
//!   walk builds it, under the lock, from one read transaction: one read of each table (at
//!   most the retention's rows), the bound that also holds its memory (about 40 bytes a row);
//! - only a handle that may write holds it (a read-only handle may see another process's
//!   writes); a row the build cannot decode leaves it unbuilt, and the walk reads the tables
//!   as before, with the same result or error;
//! - locks are taken in one order, the handle's, the journal's keys', the mirror's, by a write
//!   transaction, a reopen and a walk alike.

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;
use redb::{ReadTransaction, ReadableTable};

use super::codec::{Codec, JournalKey, LAYOUT_V1};
use super::sorted_reads::KeyParts;
use super::tables::{JOURNAL, PULLS, USES};
use super::{Handle, HistoryRows, Store, StoreError};
use crate::model::{ImageId, JournalEntry, PullKey, UnixNanos, UseInterval, UseKey};

/// One image's history rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ImageRows {
    /// Its use intervals: (closed, start) → last seen, in the table's order.
    uses: BTreeMap<(bool, UnixNanos), UnixNanos>,
    /// Its pulls' times, oldest first.
    pulls: BTreeSet<UnixNanos>,
}

/// The committed history tables' rows that the walks read, by image (see the module's
/// invariants).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct HistoryMirror {
    /// By encoded record key (`[1][id][0][handler]`); an image without rows has no entry.
    images: HashMap<Vec<u8>, ImageRows>,
    /// The journal entries marked re-pulled.
    repulled: BTreeSet<JournalKey>,
    /// How many of them each image id has.
    returns: BTreeMap<ImageId, u32>,
}

/// One row's new state, as a write transaction left it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Change {
    /// A use interval written with this last seen.
    UsePut(UseKey, UnixNanos),
    UseRemoved(UseKey),
    PullPut(PullKey),
    PullRemoved(PullKey),
    /// A journal entry written, marked re-pulled or not.
    JournalPut(JournalKey, bool),
    JournalRemoved(JournalKey),
}

/// What one write transaction did to the history tables, in order: each change assigns one
/// row's state, so playing the log gives the committed rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct HistoryLog {
    /// Whether changes are recorded: only when the store holds a mirror to play them on.
    enabled: bool,
    changes: Vec<Change>,
}

impl HistoryLog {
    /// A log that records changes when `enabled` (else records nothing).
    pub(super) fn new(enabled: bool) -> HistoryLog {
        HistoryLog {
            enabled,
            changes: Vec::new(),
        }
    }

    fn push(&mut self, change: impl FnOnce() -> Change) {
        if self.enabled {
            self.changes.push(change());
        }
    }

    /// A use interval `key` written with `last_seen`.
    pub(super) fn use_put(&mut self, key: &UseKey, last_seen: UnixNanos) {
        self.push(|| Change::UsePut(key.clone(), last_seen));
    }

    /// The use interval `key` removed.
    pub(super) fn use_removed(&mut self, key: &UseKey) {
        self.push(|| Change::UseRemoved(key.clone()));
    }

    /// The pull `key` written.
    pub(super) fn pull_put(&mut self, key: &PullKey) {
        self.push(|| Change::PullPut(key.clone()));
    }

    /// The pull `key` removed.
    pub(super) fn pull_removed(&mut self, key: PullKey) {
        self.push(|| Change::PullRemoved(key));
    }

    /// The journal entry `key` written as `entry`.
    pub(super) fn journal_put(&mut self, key: &JournalKey, entry: &JournalEntry) {
        self.push(|| Change::JournalPut(key.clone(), entry.repulled_at.is_some()));
    }

    /// The journal entry `key` removed.
    pub(super) fn journal_removed(&mut self, key: &JournalKey) {
        self.push(|| Change::JournalRemoved(key.clone()));
    }
}

impl HistoryMirror {
    /// Plays a committed transaction's log.
    pub(super) fn apply(&mut self, log: &HistoryLog) {
        for change in &log.changes {
            match change {
                Change::UsePut(key, last_seen) => {
                    self.rows_mut(key.key.encode())
                        .uses
                        .insert((key.closed, key.started_at), *last_seen);
                }
                Change::UseRemoved(key) => self.remove_row(key.key.encode(), |rows| {
                    rows.uses.remove(&(key.closed, key.started_at));
                }),
                Change::PullPut(key) => {
                    self.rows_mut(key.key.encode()).pulls.insert(key.at);
                }
                Change::PullRemoved(key) => self.remove_row(key.key.encode(), |rows| {
                    rows.pulls.remove(&key.at);
                }),
                Change::JournalPut(key, true) => {
                    if self.repulled.insert(key.clone()) {
                        *self.returns.entry(key.key.image_id.clone()).or_default() += 1;
                    }
                }
                Change::JournalPut(key, false) | Change::JournalRemoved(key) => {
                    if self.repulled.remove(key)
                        && let Some(count) = self.returns.get_mut(&key.key.image_id)
                    {
                        *count = count.saturating_sub(1);
                        if *count == 0 {
                            self.returns.remove(&key.key.image_id);
                        }
                    }
                }
            }
        }
    }

    fn rows_mut(&mut self, key: Vec<u8>) -> &mut ImageRows {
        self.images.entry(key).or_default()
    }

    /// Removes a row with `remove`, and the image's entry when it has no row left.
    fn remove_row(&mut self, key: Vec<u8>, remove: impl FnOnce(&mut ImageRows)) {
        if let Some(rows) = self.images.get_mut(&key) {
            remove(rows);
            if rows.uses.is_empty() && rows.pulls.is_empty() {
                self.images.remove(&key);
            }
        }
    }

    /// The rows of `txn`'s tables; `None` when a row does not decode.
    fn build(store: &Store, txn: &ReadTransaction) -> Result<Option<HistoryMirror>, StoreError> {
        let mut log = HistoryLog::new(true);
        let uses = store.open_read_table(txn, USES)?;
        for row in uses.iter().map_err(|e| store.redb_err(e))? {
            let (k, v) = row.map_err(|e| store.redb_err(e))?;
            let (Ok(key), Ok(value)) = (k.value().decode(), v.value().decode()) else {
                return Ok(None);
            };
            let value: UseInterval = value;
            log.changes.push(Change::UsePut(key, value.last_seen));
        }
        let pulls = store.open_read_table(txn, PULLS)?;
        for row in pulls.iter().map_err(|e| store.redb_err(e))? {
            let (k, _) = row.map_err(|e| store.redb_err(e))?;
            let Ok(key) = k.value().decode() else {
                return Ok(None);
            };
            log.changes.push(Change::PullPut(key));
        }
        let journal = store.open_read_table(txn, JOURNAL)?;
        for row in journal.iter().map_err(|e| store.redb_err(e))? {
            let (k, v) = row.map_err(|e| store.redb_err(e))?;
            let (Ok(key), Ok(entry)) = (k.value().decode(), v.value().decode()) else {
                return Ok(None);
            };
            let entry: JournalEntry = entry;
            log.changes
                .push(Change::JournalPut(key, entry.repulled_at.is_some()));
        }
        let mut mirror = HistoryMirror::default();
        mirror.apply(&log);
        Ok(Some(mirror))
    }

    /// The rows of the images `keys` (strictly ascending), as [`Store::histories_of_keys`]
    /// gives them, grouped by image: each image's rows in the tables' order.
    fn rows_of(&self, keys: &[KeyParts<'_>]) -> HistoryRows {
        let mut out = HistoryRows::default();
        let mut encoded = Vec::new();
        for (at, &(id, handler)) in keys.iter().enumerate() {
            encoded.clear();
            encoded.push(LAYOUT_V1);
            encoded.extend_from_slice(id);
            encoded.push(0);
            encoded.extend_from_slice(handler);
            let Some(rows) = self.images.get(encoded.as_slice()) else {
                continue;
            };
            let at = u32::try_from(at).unwrap_or(u32::MAX);
            out.uses.extend(
                rows.uses
                    .iter()
                    .map(|(&(_, started_at), &last_seen)| (at, started_at, last_seen)),
            );
            out.pulls
                .extend(rows.pulls.iter().map(|&pulled_at| (at, pulled_at)));
        }
        out
    }
}

impl Store {
    /// Runs `read` on the history mirror, built first when the store holds none; `None`
    /// when it cannot be held (a read-only handle, a row that does not decode).
    fn with_history_mirror<T>(&self, read: impl Fn(&HistoryMirror) -> T) -> Option<T> {
        // The handle first, then the mirror: the order of a write transaction and of a
        // reopen (which drops the mirror under the handle's write lock).
        let handle = self.read_handle();
        if !matches!(*handle, Handle::Write(_)) || !self.is_healthy() {
            return None;
        }
        let mut held = self.lock_history_mirror();
        if held.is_none() {
            // Not `guarded`: a reopen drops the mirror under this lock. A failed read leaves
            // the mirror unbuilt, and the caller's guarded read of the tables meets the
            // failure (or recovers from it) as before.
            let built = self
                .begin_read_on(&handle)
                .and_then(|txn| HistoryMirror::build(self, &txn));
            *held = built.ok().flatten();
        }
        held.as_ref().map(read)
    }

    /// The use and pull rows of the images `keys` (strictly ascending, as a detect's list
    /// is): [`Store::histories_of_keys`]'s rows, each image's together (its rows in the
    /// tables' order), read from the history mirror (`history_mirror.rs`), or from the tables
    /// when the store cannot hold one.
    pub fn histories_of_sorted_keys(
        &self,
        keys: &[KeyParts<'_>],
    ) -> Result<HistoryRows, StoreError> {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys in key order");
        match self.with_history_mirror(|mirror| mirror.rows_of(keys)) {
            Some(rows) => Ok(rows),
            None => self.histories_of_keys(keys),
        }
    }

    /// How many journal entries marked re-pulled each image id has (what the adaptive order's
    /// returns count: [`Store::journal_repulled`] counted by id), from the history mirror, or
    /// from the journal when the store cannot hold one.
    pub fn repulled_counts(&self) -> Result<BTreeMap<ImageId, u32>, StoreError> {
        self.with_repulled_counts(BTreeMap::clone)
    }

    /// `read` of [`Store::repulled_counts`]'s counts, read in place in the history mirror (no
    /// copy of them: a walk reads a few ids of the map), or from the journal when the store
    /// cannot hold one. The mirror stays locked while `read` runs: it must not use the store.
    pub fn with_repulled_counts<T>(
        &self,
        read: impl Fn(&BTreeMap<ImageId, u32>) -> T,
    ) -> Result<T, StoreError> {
        match self.with_history_mirror(|mirror| read(&mirror.returns)) {
            Some(answer) => Ok(answer),
            None => {
                let mut out: BTreeMap<ImageId, u32> = BTreeMap::new();
                for (key, _) in self.journal_repulled()? {
                    *out.entry(key.key.image_id).or_default() += 1;
                }
                Ok(read(&out))
            }
        }
    }
}

#[cfg(test)]
#[path = "history_mirror_tests.rs"]
mod tests;
