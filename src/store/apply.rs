//! [`Store::apply`]: a [`Batch`] applied as one write transaction, and the table writes every
//! operation is made of. Every operation is checked before the transaction begins
//! (`validate.rs`: a bad key is [`StoreError::InvalidKey`] and nothing is written); then the
//! operations run in the batch's order in that one transaction, each table opened at its
//! first use ([`LazyTable`]). It commits with the store's durability (`Durability::Immediate`,
//! except on a store opened in `CommitMode::NonDurableForTests`) and only if something
//! changed: a batch that changes nothing is aborted and commits nothing ([`Store::commits`]
//! counts real commits). The handle lock is held shared for the whole transaction, so a
//! reopen never drops a handle mid-commit.
//!
//! Invariants kept here, inside the one transaction: every record write goes through
//! [`put_record_over`], which keeps exactly one eviction-index row per record's (times, key
//! prefix) and removes a row only when no record stands behind it any more; a record's
//! deletion by GC (`Evict`) or by detect (`RemoveUnlisted` with a note or a journal time)
//! writes its journal entry; a transaction that writes the journal prunes it, and the use and
//! pull histories, to the retention in force (never an entry it wrote or marked re-pulled); a
//! record created without an explicit `RecordPull` of its key in the batch gets a `detected`
//! pull entry, and one whose image id has a journal entry within retention marks it
//! re-pulled; the batch's stamps are written only when something changed, its notes whenever
//! they differ.

use std::sync::atomic::Ordering;
use std::time::Instant;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::codec::{BackoffKey, Codec, IndexKey, JournalKey, MetaKey, MetaValue};
use super::eviction::row_records;
use super::read::read_meta;
use super::tables::{
    BACKOFF, EVICTION_PREFIX, Encoded, IMAGES, JOURNAL, META, NAMES, PINS, PULLS, Stored, USES,
    WARM,
};
use super::validate::validate_op;
use super::{
    Applied, Batch, BatchOp, Handle, IndexMismatch, Store, StoreError, TxnError, history, journal,
};
use crate::model::{
    ImageRecord, JournalEntry, JournalRetention, PullEntry, PullKey, PullOrigin, RecordKey,
    Remover, Repull, UnixNanos,
};

impl Store {
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
                super::apply_tests::OPENED.with(|o| {
                    o.borrow_mut()
                        .push(redb::TableHandle::name(&self.def).to_owned())
                });
                self.txn.open_table(self.def)?
            }
        };
        Ok(self.table.insert(table))
    }
}

pub(super) type ImagesTable<'t> = redb::Table<'t, Stored<RecordKey>, Stored<ImageRecord>>;
type IndexTable<'t> = redb::Table<'t, Stored<IndexKey>, ()>;
pub(super) type MetaTable<'t> = redb::Table<'t, Stored<MetaKey>, Stored<MetaValue>>;

pub(super) fn get_record(
    images: &ImagesTable<'_>,
    key: &RecordKey,
) -> Result<Option<ImageRecord>, TxnError> {
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

pub(super) fn put_meta(meta: &mut MetaTable<'_>, name: &str, value: i64) -> Result<bool, TxnError> {
    if read_meta(meta, name)? == Some(value) {
        return Ok(false);
    }
    let k = MetaKey(name.to_owned()).encode();
    meta.insert(Encoded::new(&k), Encoded::new(&MetaValue(value).encode()))?;
    Ok(true)
}
