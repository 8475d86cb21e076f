//! [`Store::apply`]: a [`Batch`] applied as one write transaction, and the table writes every
//! operation is made of. Every operation is checked before the transaction begins
//! (`validate.rs`: a bad key is [`StoreError::InvalidKey`] and nothing is written); then the
//! operations run in the batch's order in that one transaction, each table opened at its
//! first use ([`LazyTable`]). It commits with the store's durability (`Durability::Immediate`,
//! except on a store opened in `CommitMode::NonDurableForTests`, and on a store held in memory
//! but for one commit in `MEMORY_DURABLE_EVERY`) and only if something
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

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Instant;

use redb::{Durability, ReadableTable, TableDefinition, WriteTransaction};

use super::codec::{BackoffKey, Codec, IndexKey, JournalKey, MetaKey, MetaValue, WarmPosition};
use super::eviction::row_records;
use super::history_mirror::HistoryLog;
use super::journal_keys::JournalKeys;
use super::rows::{ImagesTable, get_record, put_meta};
use super::tables::{
    BACKOFF, EVICTION_PREFIX, Encoded, IMAGES, JOURNAL, META, NAMES, PINS, PULLS, RUNTIME_LABELS,
    Stored, USES, WARM,
};
use super::validate::validate_op;
use super::{
    Applied, Batch, BatchOp, Handle, IndexMismatch, ListedSightings, Store, StoreError, TxnError,
    history, journal, runtime_labels,
};
use crate::model::MAX_ACTIVE_PINS;
use crate::model::{
    BackoffEntry, EvictionNote, ImageLike, ImageNames, ImagePin, ImageRecord, JournalEntry,
    JournalRetention, PinKey, PullEntry, PullKey, PullOrigin, RecordKey, RemovalReason, Remover,
    Repull, RuntimeLabel, Sighting, UnixNanos, UseInterval, UseKey, WarmRow,
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

    /// A write transaction on `handle`'s database with the store's commit durability and
    /// quick repair (every write but a schema upgrade's), or why there is none: a read-only
    /// or closed store. The caller holds `handle` for the whole transaction, so a reopen
    /// never drops it mid-commit.
    pub(super) fn begin_store_write(
        &self,
        handle: &Handle,
    ) -> Result<WriteTransaction, StoreError> {
        let db = match handle {
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
        txn.set_durability(self.commit_durability())
            .map_err(|e| self.redb_err(e))?;
        txn.set_quick_repair(self.options.quick_repair);
        Ok(txn)
    }

    fn apply_once(&self, batch: &Batch) -> Result<Applied, StoreError> {
        // Held for the whole transaction: a reopen never drops a handle mid-commit.
        let handle = self.read_handle();
        let txn = self.begin_store_write(&handle)?;
        let retention = self.journal_retention();
        // Held to the commit: the next transaction takes the keys this one leaves.
        let mut held_keys = self.lock_journal_keys();
        // Held to the commit too: a walk never builds the mirror between the commit and the
        // playing of its log (`history_mirror.rs`). The log records only for a held mirror.
        let mut held_mirror = self.lock_history_mirror();
        let ((changed, repulls, journaled), keys) = apply_ops(
            &txn,
            batch,
            retention,
            held_keys.take(),
            held_mirror.is_some(),
        )
        .map_err(|e| self.wrap(e))?;
        self.history_rows_read
            .fetch_add(keys.rows_read, Ordering::Relaxed);
        if !changed {
            txn.abort().map_err(|e| self.redb_err(e))?;
            if !keys.journal_written {
                *held_keys = keys.keys;
            }
            return Ok(Applied::default());
        }
        let started = Instant::now();
        // A failed commit drops the mirror: what it left is not known.
        let mirror = held_mirror.take();
        txn.commit().map_err(|e| self.redb_err(e))?;
        *held_keys = keys.keys;
        *held_mirror = mirror.map(|mut mirror| {
            mirror.apply(&keys.history);
            mirror
        });
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

impl Store {
    /// The durability of the next commit: the store's, except on a store held in memory
    /// (`durable_every` > 0), where a commit is `Immediate` only once every `durable_every`
    /// commits and `None` otherwise. What a transaction reads does not depend on it: redb
    /// reads a non-durable commit as any other; it only skips writing redb's header and
    /// freeing the superseded pages at once, which a memory backend has no use for (its
    /// `sync` does nothing), and the periodic durable commit frees them.
    pub(super) fn commit_durability(&self) -> Durability {
        match self.durable_every {
            0 => self.durability,
            every if (self.commits() + 1).is_multiple_of(every) => Durability::Immediate,
            _ => Durability::None,
        }
    }
}

/// What [`apply_ops`] did: whether anything changed, the journal entries marked re-pulled and
/// those written.
type OpsOutcome = (bool, Vec<Repull>, Vec<(JournalKey, JournalEntry)>);

/// The journal's keys a transaction leaves (`journal_keys.rs`): for the store to hold after
/// its commit, and after an abort (only when it wrote nothing to the journal).
struct KeysAfter {
    keys: Option<JournalKeys>,
    /// Whether the transaction wrote to the journal: its keys are then the committed ones
    /// only once it commits.
    journal_written: bool,
    /// The journal entries the transaction read (`Store::history_rows_read`).
    rows_read: u64,
    /// The rows it wrote and removed in the history tables and the journal, for the history
    /// mirror (`history_mirror.rs`).
    history: HistoryLog,
}

/// Applies every operation, in the batch's order, then what the transaction owes at its end
/// (the histories' and the journal's prunes, the batch's stamps and notes). `keys`: the
/// journal's committed keys, if the store holds them.
fn apply_ops(
    txn: &WriteTransaction,
    batch: &Batch,
    retention: JournalRetention,
    keys: Option<JournalKeys>,
    log_history: bool,
) -> Result<(OpsOutcome, KeysAfter), TxnError> {
    let mut writer = BatchWriter::new(txn, batch, retention, keys);
    writer.history = HistoryLog::new(log_history);
    let mut changed = false;
    for op in &batch.ops {
        changed |= writer.apply(op)?;
    }
    writer.finish(batch, changed)
}

/// One batch's writes inside its write transaction: the tables, each opened at its first use
/// (a one-record batch opens `images` and the index alone, not the schema's ten tables), and
/// what the operations so far wrote that the transaction's end needs.
struct BatchWriter<'t, 'b> {
    // The tables close (each staging its root in the transaction) when the writer is dropped
    // at the transaction's end, in the order of these fields: `labels` first, `images` last.
    labels: LazyTable<'t, Stored<super::codec::LabelledName>, Stored<RuntimeLabel>>,
    warm: LazyTable<'t, Stored<WarmPosition>, Stored<WarmRow>>,
    pulls: LazyTable<'t, Stored<PullKey>, Stored<PullEntry>>,
    uses: LazyTable<'t, Stored<UseKey>, Stored<UseInterval>>,
    pins: LazyTable<'t, Stored<PinKey>, Stored<ImagePin>>,
    journal: TrackedJournal<'t>,
    names: LazyTable<'t, Stored<RecordKey>, Stored<ImageNames>>,
    meta: LazyTable<'t, Stored<MetaKey>, Stored<MetaValue>>,
    backoff: LazyTable<'t, Stored<BackoffKey>, Stored<BackoffEntry>>,
    index: LazyTable<'t, Stored<IndexKey>, ()>,
    images: LazyTable<'t, Stored<RecordKey>, Stored<ImageRecord>>,
    /// The journal's retention in force: what the prunes keep.
    retention: JournalRetention,
    /// The records the batch records a pull of itself (`RecordPull`): a record it creates
    /// without one gets a `detected` pull entry.
    explicit_pulls: BTreeSet<&'b RecordKey>,
    /// The history's `now`s: the latest use time and pull time this transaction writes, for
    /// their prunes.
    uses_now: Option<UnixNanos>,
    /// Whether the use history (or a history prune) changed: it commits, but like a note it
    /// does not move the batch's stamps.
    uses_changed: bool,
    pulls_now: Option<UnixNanos>,
    /// Whether a journal entry was written or marked re-pulled: the journal is then pruned.
    journal_written: bool,
    /// The journal entries marked re-pulled, and when.
    repulls: Vec<Repull>,
    repull_times: Vec<UnixNanos>,
    /// The journal entries written (each with the deletion of its record).
    journaled: Vec<(JournalKey, JournalEntry)>,
    /// The pins in force counted by this batch's first new pin, plus the new pins written
    /// since; `None` until a new pin is written, and again after a pin is removed or pruned.
    active_pins: Option<usize>,
    /// The history tables' and the journal's rows written and removed.
    history: HistoryLog,
}

impl<'t, 'b> BatchWriter<'t, 'b> {
    fn new(
        txn: &'t WriteTransaction,
        batch: &'b Batch,
        retention: JournalRetention,
        journal_keys: Option<JournalKeys>,
    ) -> Self {
        BatchWriter {
            images: LazyTable::new(txn, IMAGES),
            index: LazyTable::new(txn, EVICTION_PREFIX),
            backoff: LazyTable::new(txn, BACKOFF),
            meta: LazyTable::new(txn, META),
            names: LazyTable::new(txn, NAMES),
            journal: TrackedJournal {
                table: LazyTable::new(txn, JOURNAL),
                keys: journal_keys,
                rows_read: 0,
            },
            pins: LazyTable::new(txn, PINS),
            uses: LazyTable::new(txn, USES),
            pulls: LazyTable::new(txn, PULLS),
            warm: LazyTable::new(txn, WARM),
            labels: LazyTable::new(txn, RUNTIME_LABELS),
            retention,
            explicit_pulls: batch
                .ops
                .iter()
                .filter_map(|op| match op {
                    BatchOp::RecordPull { key, .. } => Some(&key.key),
                    _ => None,
                })
                .collect(),
            uses_now: None,
            uses_changed: false,
            pulls_now: None,
            journal_written: false,
            repulls: Vec::new(),
            journaled: Vec::new(),
            repull_times: Vec::new(),
            active_pins: None,
            history: HistoryLog::default(),
        }
    }

    /// Applies one operation; returns whether it changed anything that moves the batch's
    /// stamps.
    fn apply(&mut self, op: &BatchOp) -> Result<bool, TxnError> {
        match op {
            BatchOp::Upsert { key, record } => self.upsert(key, *record),
            BatchOp::MarkUsed { key, now, size } => self.mark_used(key, *now, *size),
            BatchOp::Sight {
                key,
                sighting,
                names,
            } => self.sight(key, *sighting, names.as_ref()),
            BatchOp::Sightings(sightings) => self.sightings(sightings),
            BatchOp::ClampFuture { key, limit, now } => self.clamp_future(key, *limit, *now),
            BatchOp::Remove { key } => self.remove(key),
            BatchOp::RemoveUnlisted {
                key,
                seen_last_used,
                journal_at,
                note,
            } => self.remove_unlisted(key, *seen_last_used, *journal_at, note.as_ref()),
            BatchOp::Evict { key, note } => self.evict(key, note),
            BatchOp::JournalLeftover {
                key,
                removed_at,
                size,
                created,
            } => self.journal_leftover(key, *removed_at, *size, *created),
            BatchOp::SetNames { key, names } => self.set_names(key, names),
            BatchOp::PutBackoff { key, entry } => self.put_backoff(key, entry),
            BatchOp::RemoveBackoff { key } => self.remove_backoff(key),
            BatchOp::SetMeta { name, value } => self.set_meta(name, *value),
            BatchOp::PutPin { key, pin } => self.put_pin(key, pin),
            BatchOp::RemovePin { key } => self.remove_pin(key),
            BatchOp::PruneExpiredPins { now } => self.prune_expired_pins(*now),
            BatchOp::ObserveUses { now, in_use } => self.observe_uses(*now, in_use),
            BatchOp::OpenUse { key, now } => self.open_use(key, *now),
            BatchOp::RecordPull { key, entry } => self.record_pull(key, entry),
            BatchOp::ReplaceWarm { rows } => self.replace_warm(rows),
            BatchOp::PutRuntimeLabel { name, label } => {
                runtime_labels::put_label(self.labels.get()?, name, label)
            }
            BatchOp::RemoveRuntimeLabel { name } => {
                runtime_labels::remove_label(self.labels.get()?, name)
            }
        }
    }

    /// [`BatchOp::Upsert`]: the record as given.
    fn upsert(&mut self, key: &RecordKey, record: ImageRecord) -> Result<bool, TxnError> {
        put_record(self.images.get()?, self.index.get()?, key, Some(record))
    }

    /// [`BatchOp::MarkUsed`]: a pull's or a container event's use. Reads its record once; the
    /// write starts from that read.
    fn mark_used(
        &mut self,
        key: &RecordKey,
        now: UnixNanos,
        size: Option<u64>,
    ) -> Result<bool, TxnError> {
        let old = get_record(self.images.get()?, key)?;
        let creates = old.is_none();
        let next = match old {
            // A mark never moves last_used back, and always moves it: with the
            // clock gone back, a mark at or before the stored time lands one
            // nanosecond after it, so detect's RemoveUnlisted and GC's last look
            // (which compare last_used with what they read before) see the mark.
            // (Found by the simulator.)
            Some(old) => ImageRecord {
                last_used: now.max(UnixNanos(old.last_used.0.saturating_add(1))),
                size: size.unwrap_or(old.size),
                ..old
            },
            None => ImageRecord {
                first_detected: now,
                last_used: now,
                size: size.unwrap_or(0),
                pinned: false,
            },
        };
        let changed = put_record_over(self.images.get()?, self.index.get()?, key, old, Some(next))?;
        self.after_write(changed, creates.then_some((key, now)))
    }

    /// [`BatchOp::Sight`]: a detect's sighting merged with the record, then the names it
    /// carries as a `SetNames` right after the sighting would write them.
    fn sight(
        &mut self,
        key: &RecordKey,
        sighting: Sighting,
        sighted: Option<&ImageNames>,
    ) -> Result<bool, TxnError> {
        let old = get_record(self.images.get()?, key)?;
        let creates = old.is_none();
        let next = ImageRecord::after_sighting(old, sighting);
        let record_changed =
            put_record_over(self.images.get()?, self.index.get()?, key, old, Some(next))?;
        let names_changed = match sighted {
            Some(next) => journal::set_names(self.names.get()?, self.images.get()?, key, next)?,
            None => false,
        };
        self.after_write(
            record_changed | names_changed,
            creates.then_some((key, sighting.now)),
        )
    }

    /// [`BatchOp::Sightings`]: each entry as the operations it stands for, a clamp (when
    /// flagged) then the sighting, the key and names read from the listed image (a key built
    /// for the entry's writes and dropped after them: the batch holds none).
    fn sightings(&mut self, sightings: &ListedSightings) -> Result<bool, TxnError> {
        let mut changed = false;
        for (image, clamp, sighting, names) in sightings.iter() {
            let key = image.record_key();
            if let Some(limit) = clamp {
                changed |= self.clamp_future(&key, limit, sighting.now)?;
            }
            let names = names.then(|| ImageNames::of(&image));
            changed |= self.sight(&key, sighting, names.as_ref())?;
        }
        Ok(changed)
    }

    /// What follows a mark's or a sighting's write, `changed` saying whether it changed
    /// anything. When it created the record (`created`: its key and time), the regret check:
    /// a record created without an explicit pull of its key in this batch was pulled by
    /// someone else, and imagekeeper records it as first seen (`detected`); a journal entry
    /// of its image id within the retention is marked re-pulled.
    fn after_write(
        &mut self,
        mut changed: bool,
        created: Option<(&RecordKey, UnixNanos)>,
    ) -> Result<bool, TxnError> {
        if let Some((key, now)) = created
            && !self.explicit_pulls.contains(key)
            && let Some(record) = get_record(self.images.get()?, key)?
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
            changed |= history::record_pull(self.pulls.get()?, &pkey, &entry, &mut self.history)?;
            self.pulls_now = self.pulls_now.max(Some(now));
        }
        if let Some((key, now)) = created
            && get_record(self.images.get()?, key)?.is_some()
            && let (table, keys, rows_read) = self.journal.open()?
            && let Some(repull) = journal::mark_repull(
                table,
                keys,
                key,
                now,
                self.retention.max_age,
                rows_read,
                &mut self.history,
            )?
        {
            self.repulls.push(repull);
            self.repull_times.push(now);
            self.journal_written = true;
        }
        Ok(changed)
    }

    /// [`BatchOp::ClampFuture`]: a record's stamps past `limit` brought back to `now`, judged
    /// on the record as this transaction reads it.
    fn clamp_future(
        &mut self,
        key: &RecordKey,
        limit: UnixNanos,
        now: UnixNanos,
    ) -> Result<bool, TxnError> {
        match get_record(self.images.get()?, key)? {
            Some(old) if old.has_stamp_after(limit) => put_record_over(
                self.images.get()?,
                self.index.get()?,
                key,
                Some(old),
                Some(old.clamped(limit, now)),
            ),
            _ => Ok(false),
        }
    }

    /// [`BatchOp::Remove`]: the record, and its names unless a journal entry still needs them.
    fn remove(&mut self, key: &RecordKey) -> Result<bool, TxnError> {
        let removed = put_record(self.images.get()?, self.index.get()?, key, None)?;
        let (_, keys, _) = self.journal.open()?;
        Ok(removed | journal::forget_names(self.names.get()?, keys, key)?)
    }

    /// [`BatchOp::RemoveUnlisted`]: detect's removal of a record the runtime no longer lists,
    /// only if it was not marked after detect's snapshot; journaled with the GC's note, or
    /// as external at `journal_at`, or (neither) not journaled and its names forgotten.
    fn remove_unlisted(
        &mut self,
        key: &RecordKey,
        seen_last_used: UnixNanos,
        journal_at: Option<UnixNanos>,
        note: Option<&EvictionNote>,
    ) -> Result<bool, TxnError> {
        match get_record(self.images.get()?, key)? {
            Some(old) if old.last_used <= seen_last_used => {
                put_record_over(self.images.get()?, self.index.get()?, key, Some(old), None)?;
                match (note, journal_at) {
                    (Some(note), _) => {
                        let jkey = JournalKey {
                            removed_at: note.removed_at,
                            key: key.clone(),
                        };
                        let entry = journal::entry_of(&old, Remover::Imagekeeper, Some(note));
                        self.write_journal_entry(jkey, entry)?;
                    }
                    (None, Some(at)) => {
                        let jkey = JournalKey {
                            removed_at: at,
                            key: key.clone(),
                        };
                        let entry = journal::entry_of(&old, Remover::External, None);
                        self.write_journal_entry(jkey, entry)?;
                    }
                    (None, None) => {
                        let (_, keys, _) = self.journal.open()?;
                        journal::forget_names(self.names.get()?, keys, key)?;
                    }
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// [`BatchOp::Evict`]: the GC's removal of a record, journaled with its note.
    fn evict(&mut self, key: &RecordKey, note: &EvictionNote) -> Result<bool, TxnError> {
        match get_record(self.images.get()?, key)? {
            Some(old) => {
                put_record_over(self.images.get()?, self.index.get()?, key, Some(old), None)?;
                let jkey = JournalKey {
                    removed_at: note.removed_at,
                    key: key.clone(),
                };
                let entry = journal::entry_of(&old, Remover::Imagekeeper, Some(note));
                self.write_journal_entry(jkey, entry)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// [`BatchOp::JournalLeftover`]: a containerd leftover's removal, journaled (no record to
    /// delete, no names to keep).
    fn journal_leftover(
        &mut self,
        key: &RecordKey,
        removed_at: UnixNanos,
        size: u64,
        created: UnixNanos,
    ) -> Result<bool, TxnError> {
        let jkey = JournalKey {
            removed_at,
            key: key.clone(),
        };
        let entry = JournalEntry {
            size,
            first_detected: created,
            last_used: UnixNanos(0),
            reason: Some(RemovalReason::Orphan),
            rank: None,
            fs: None,
            remover: Remover::Imagekeeper,
            repulled_at: None,
        };
        self.write_journal_entry(jkey, entry)?;
        Ok(true)
    }

    /// A removal's journal entry, written and kept for the transaction's report and prune.
    fn write_journal_entry(
        &mut self,
        jkey: JournalKey,
        entry: JournalEntry,
    ) -> Result<(), TxnError> {
        let (table, keys, _) = self.journal.open()?;
        if journal::put_entry(table, &jkey, &entry, &mut self.history)? {
            keys.added(&jkey.key);
        }
        self.journaled.push((jkey, entry));
        self.journal_written = true;
        Ok(())
    }

    /// [`BatchOp::SetNames`].
    fn set_names(&mut self, key: &RecordKey, next: &ImageNames) -> Result<bool, TxnError> {
        journal::set_names(self.names.get()?, self.images.get()?, key, next)
    }
}

/// The operations on backoff, meta, pins, the use and pull histories and the warm table, and
/// the transaction's end.
impl BatchWriter<'_, '_> {
    /// [`BatchOp::PutBackoff`]: written only when it differs from the stored entry.
    fn put_backoff(&mut self, key: &str, entry: &BackoffEntry) -> Result<bool, TxnError> {
        let k = BackoffKey(key.to_owned()).encode();
        let backoff = self.backoff.get()?;
        let old = match backoff.get(Encoded::new(&k))? {
            Some(g) => Some(g.value().decode().map_err(TxnError::Decode)?),
            None => None,
        };
        if old.as_ref() == Some(entry) {
            Ok(false)
        } else {
            backoff.insert(Encoded::new(&k), Encoded::new(&entry.encode()))?;
            Ok(true)
        }
    }

    /// [`BatchOp::RemoveBackoff`].
    fn remove_backoff(&mut self, key: &str) -> Result<bool, TxnError> {
        let k = BackoffKey(key.to_owned()).encode();
        Ok(self.backoff.get()?.remove(Encoded::new(&k))?.is_some())
    }

    /// [`BatchOp::SetMeta`].
    fn set_meta(&mut self, name: &str, value: i64) -> Result<bool, TxnError> {
        put_meta(self.meta.get()?, name, value)
    }

    /// [`BatchOp::PutPin`]: written only when its bytes differ from the stored pin's. A new
    /// key is refused when [`MAX_ACTIVE_PINS`] pins are in force at the pin's creation (a
    /// pin replaced, or a table already past the cap, is not refused for it).
    fn put_pin(&mut self, key: &PinKey, pin: &ImagePin) -> Result<bool, TxnError> {
        let k = key.encode();
        let v = pin.encode();
        let pins = self.pins.get()?;
        let same = match pins.get(Encoded::new(&k))? {
            Some(g) => g.value().bytes() == v.as_slice(),
            None => {
                // Counted once per batch (at its first new pin's creation), then kept: a batch
                // of many new pins reads the table once, not once per pin.
                let active = match self.active_pins {
                    Some(n) => n,
                    None => active_pins(pins, pin.created_at)?,
                };
                if active >= MAX_ACTIVE_PINS {
                    return Err(TxnError::TooManyPins { active });
                }
                self.active_pins = Some(active + 1);
                false
            }
        };
        if !same {
            pins.insert(Encoded::new(&k), Encoded::new(&v))?;
        }
        Ok(!same)
    }

    /// [`BatchOp::RemovePin`].
    fn remove_pin(&mut self, key: &PinKey) -> Result<bool, TxnError> {
        self.active_pins = None;
        Ok(self
            .pins
            .get()?
            .remove(Encoded::new(&key.encode()))?
            .is_some())
    }

    /// [`BatchOp::PruneExpiredPins`]: pins expired for longer than the journal's max age.
    fn prune_expired_pins(&mut self, now: UnixNanos) -> Result<bool, TxnError> {
        self.active_pins = None;
        let cutoff = now.saturating_sub(self.retention.max_age);
        let pins = self.pins.get()?;
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
        Ok(!expired.is_empty())
    }

    // The use history commits, but like a note it does not make the batch's stamps
    // (`last_detect`: the latest detect that changed a record) move.

    /// [`BatchOp::ObserveUses`].
    fn observe_uses(&mut self, now: UnixNanos, in_use: &[RecordKey]) -> Result<bool, TxnError> {
        self.uses_now = self.uses_now.max(Some(now));
        self.uses_changed |=
            history::observe_uses(self.uses.get()?, now, in_use, &mut self.history)?;
        Ok(false)
    }

    /// [`BatchOp::OpenUse`].
    fn open_use(&mut self, key: &RecordKey, now: UnixNanos) -> Result<bool, TxnError> {
        self.uses_now = self.uses_now.max(Some(now));
        self.uses_changed |= history::open_use(self.uses.get()?, key, now, &mut self.history)?;
        Ok(false)
    }

    /// [`BatchOp::RecordPull`].
    fn record_pull(&mut self, key: &PullKey, entry: &PullEntry) -> Result<bool, TxnError> {
        self.pulls_now = self.pulls_now.max(Some(key.at));
        history::record_pull(self.pulls.get()?, key, entry, &mut self.history)
    }

    /// [`BatchOp::ReplaceWarm`].
    fn replace_warm(&mut self, rows: &[WarmRow]) -> Result<bool, TxnError> {
        history::replace_warm(self.warm.get()?, rows)
    }

    /// The transaction's end, after every operation (`changed`: whether one changed anything
    /// that moves the stamps): the histories pruned at their latest times; when the journal
    /// was written, the journal pruned to the retention (keeping what this transaction wrote
    /// or marked) and the histories with it; the batch's stamps if something changed, its
    /// notes whenever they differ.
    fn finish(
        mut self,
        batch: &Batch,
        mut changed: bool,
    ) -> Result<(OpsOutcome, KeysAfter), TxnError> {
        let retention = self.retention;
        if let Some(now) = self.uses_now {
            self.uses_changed |=
                history::prune_uses(self.uses.get()?, retention, now, &mut self.history)?;
        }
        if let Some(now) = self.pulls_now {
            changed |= history::prune_pulls(self.pulls.get()?, retention, now, &mut self.history)?;
        }
        if self.journal_written {
            // The transaction's `now`: the latest time it journaled or marked re-pulled (the
            // store has no clock; the batch's times come from the caller's).
            let now = self
                .journaled
                .iter()
                .map(|(k, _): &(JournalKey, JournalEntry)| k.removed_at)
                .chain(std::mem::take(&mut self.repull_times))
                .max()
                .unwrap_or(UnixNanos(i64::MIN));
            // The entries it wrote or marked re-pulled are kept whatever the retention.
            let fresh: BTreeSet<JournalKey> = self
                .journaled
                .iter()
                .map(|(k, _)| k.clone())
                .chain(self.repulls.iter().map(|r| JournalKey {
                    removed_at: r.removed_at,
                    key: r.key.clone(),
                }))
                .collect();
            journal::record_retention(self.meta.get()?, retention)?;
            let (table, keys, _) = self.journal.open()?;
            let pruned = journal::prune(
                table,
                self.names.get()?,
                self.images.get()?,
                keys,
                retention,
                now,
                &fresh,
            )?;
            for key in &pruned {
                self.history.journal_removed(key);
            }
            // The histories follow the retention this transaction wrote to `meta`, so a
            // lowered retention never leaves them over it (`Store::check` holds them to it).
            self.uses_changed |=
                history::prune_uses(self.uses.get()?, retention, now, &mut self.history)?;
            self.uses_changed |=
                history::prune_pulls(self.pulls.get()?, retention, now, &mut self.history)?;
        }
        if changed {
            for (name, value) in &batch.stamps {
                put_meta(self.meta.get()?, name, *value)?;
            }
        }
        let mut noted = false;
        for (name, value) in &batch.notes {
            noted |= put_meta(self.meta.get()?, name, *value)?;
        }
        let keys = KeysAfter {
            keys: self.journal.keys,
            journal_written: self.journal_written,
            rows_read: self.journal.rows_read,
            history: self.history,
        };
        Ok((
            (
                changed || noted || self.uses_changed,
                self.repulls,
                self.journaled,
            ),
            keys,
        ))
    }
}

/// The journal table of a batch's transaction and its keys (`journal_keys.rs`), opened and
/// built together at their first use: every read or write of the journal goes through
/// [`TrackedJournal::open`], so the keys always describe the table beside them.
struct TrackedJournal<'t> {
    table: LazyTable<'t, Stored<JournalKey>, Stored<JournalEntry>>,
    /// The keys as this transaction sees them; `None` until built, when the store held none.
    keys: Option<JournalKeys>,
    /// The journal entries read (building the keys, regret lookups):
    /// `Store::history_rows_read`.
    rows_read: u64,
}

impl<'t> TrackedJournal<'t> {
    /// The table, its keys and the count of entries read.
    fn open(
        &mut self,
    ) -> Result<(&mut journal::JournalTable<'t>, &mut JournalKeys, &mut u64), TxnError> {
        let table = self.table.get()?;
        let keys = match &mut self.keys {
            Some(keys) => keys,
            none => none.insert(JournalKeys::build(table, &mut self.rows_read)?),
        };
        Ok((table, keys, &mut self.rows_read))
    }
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

type IndexTable<'t> = redb::Table<'t, Stored<IndexKey>, ()>;

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
    let old_row = old.map(|old| IndexKey::of_encoded(&k, &old));
    let new_row = next.map(|record| IndexKey::of_encoded(&k, &record));
    if let Some(old_row) = &old_row {
        let row_bytes = old_row.encode();
        let present = if row_records(images, old_row)?.is_empty() {
            note_index_write();
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
    // A record whose times did not change (a size or pin update) keeps its row, found present
    // above: inserting it again would copy the index's path to it, a few pages, for nothing.
    if let Some(new_row) = new_row.filter(|row| old_row.as_ref() != Some(row)) {
        note_index_write();
        index.insert(Encoded::new(&new_row.encode()), ())?;
    }
    Ok(true)
}

/// Counts an index row write, in test builds (`apply_tests::INDEX_WRITES`).
fn note_index_write() {
    #[cfg(test)]
    super::apply_tests::INDEX_WRITES.with(|n| n.set(n.get() + 1));
}

/// How many pins of `pins` are in force at `now`; one decode per row, counted only when a new
/// pin is written.
fn active_pins(
    pins: &redb::Table<'_, Stored<PinKey>, Stored<ImagePin>>,
    now: UnixNanos,
) -> Result<usize, TxnError> {
    let mut active = 0;
    for entry in pins.iter()? {
        let (_, v) = entry?;
        if v.value().decode().map_err(TxnError::Decode)?.active_at(now) {
            active += 1;
        }
    }
    Ok(active)
}
