//! The harness's model: everything the store holds, as plain maps ([`Model`]), and the rules
//! of `Store::apply` written out again over them, independently of the store's code (the
//! records and their merges, names, the journal with its pruning and re-pull marks, pins, the
//! use and pull histories, warm rows, meta stamps and notes). [`Model::apply`] says whether a
//! batch changes anything, and the harness fails when the store's commit says otherwise; it
//! holds the recovered store to the model after the last acknowledged commit or after the one
//! in flight, so a rule changed on one side only makes the harness fail.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::ops::{
    backoff_entry, backoff_key, evict_note, labelled_name, meta_name, names_of, pin_key, pin_of,
    pull_of, record_key, runtime_label_of, uses_of, warm_of,
};
use super::{CREATED_AT, Op};
use crate::model::{
    BackoffEntry, ImageNames, ImagePin, ImageRecord, JournalEntry, JournalRetention, PinKey,
    PullEntry, PullKey, PullOrigin, RecordKey, Remover, UnixNanos, UseInterval, UseKey, WarmRow,
};
use crate::store::{JournalKey, Store, StoreError, age_cutoff, meta_keys, retention_keys};

/// Everything the store holds, as plain maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub records: BTreeMap<RecordKey, ImageRecord>,
    pub backoff: BTreeMap<String, BackoffEntry>,
    pub meta: BTreeMap<String, i64>,
    pub names: BTreeMap<RecordKey, ImageNames>,
    pub journal: BTreeMap<JournalKey, JournalEntry>,
    pub pins: BTreeMap<PinKey, ImagePin>,
    pub uses: BTreeMap<UseKey, UseInterval>,
    pub pulls: BTreeMap<PullKey, PullEntry>,
    pub warm: Vec<WarmRow>,
    pub runtime_labels: BTreeMap<String, crate::model::RuntimeLabel>,
    pub signals: Vec<crate::model::SignalEntry>,
}

impl Model {
    /// A freshly initialized database.
    pub(super) fn initial() -> Model {
        let mut meta = BTreeMap::new();
        meta.insert(
            meta_keys::SCHEMA_VERSION.to_owned(),
            crate::store::CURRENT_SCHEMA_VERSION,
        );
        meta.insert(meta_keys::CREATED_AT.to_owned(), CREATED_AT.0);
        Model {
            meta,
            ..Model::default()
        }
    }

    /// Reads everything from `store`.
    pub fn read(store: &Store) -> Result<Model, StoreError> {
        Ok(Model {
            records: store
                .records()?
                .into_iter()
                .map(|r| (r.key, r.record))
                .collect(),
            backoff: store.backoff_entries()?.into_iter().collect(),
            meta: store.meta_entries()?.into_iter().collect(),
            names: store.all_names()?.into_iter().collect(),
            journal: store.journal()?.into_iter().collect(),
            pins: store.pins()?.into_iter().collect(),
            uses: store.uses()?.into_iter().collect(),
            pulls: store.pulls()?.into_iter().collect(),
            warm: store.warm_rows()?,
            runtime_labels: store.runtime_labels()?.into_iter().collect(),
            signals: store.signals()?,
        })
    }
}

/// One `apply`'s running state: what its operations changed, the stamps it holds back until
/// it knows, and the journal writes and times its prunes take.
struct Transaction {
    retention: JournalRetention,
    /// Whether a counted write changed anything (the stamps follow it).
    changed: bool,
    /// The `Stamp` values, written only if the transaction changed something.
    stamps: Vec<i64>,
    journal_written: bool,
    /// The transaction's journal writes and its `now` (the latest time it journaled or
    /// marked re-pulled), as the store's prune takes them.
    fresh: BTreeSet<JournalKey>,
    txn_now: Option<i64>,
    uses_now: Option<i64>,
    /// Whether a history changed beyond the counted writes: committed, but not a change for
    /// the stamps.
    uses_changed: bool,
    pulls_now: Option<i64>,
    /// The records the batch records a pull of itself: no detected pull is added for them.
    explicit: BTreeSet<RecordKey>,
}

impl Transaction {
    fn new(ops: &[Op]) -> Transaction {
        Transaction {
            retention: JournalRetention::default(),
            changed: false,
            stamps: Vec::new(),
            journal_written: false,
            fresh: BTreeSet::new(),
            txn_now: None,
            uses_now: None,
            uses_changed: false,
            pulls_now: None,
            explicit: ops
                .iter()
                .filter(|op| matches!(op, Op::RecordPull { .. }))
                .map(record_key)
                .collect(),
        }
    }

    /// Notes a journal write at `jkey` made at `now`, for the prune at the end.
    fn journaled(&mut self, jkey: JournalKey, now: i64) {
        self.fresh.insert(jkey);
        self.txn_now = self.txn_now.max(Some(now));
        self.journal_written = true;
    }
}

/// The record a record operation leaves (`None`: no record), given the one it found.
fn next_record(op: &Op, old: Option<ImageRecord>) -> Option<ImageRecord> {
    match op {
        Op::Upsert {
            first_detected,
            last_used,
            size,
            pinned,
            ..
        } => Some(ImageRecord {
            first_detected: UnixNanos(*first_detected),
            last_used: UnixNanos(*last_used),
            size: *size,
            pinned: *pinned,
        }),
        Op::MarkUsed { now, size, .. } => Some(match old {
            Some(old) => ImageRecord {
                last_used: UnixNanos((*now).max(old.last_used.0.saturating_add(1))),
                size: size.unwrap_or(old.size),
                ..old
            },
            None => ImageRecord {
                first_detected: UnixNanos(*now),
                last_used: UnixNanos(*now),
                size: size.unwrap_or(0),
                pinned: false,
            },
        }),
        // The merge rules written out again, independently of the store's.
        Op::Sight {
            now,
            in_use,
            size,
            pinned,
            ..
        } => {
            let used = if *in_use { *now } else { 0 };
            Some(match old {
                Some(old) => ImageRecord {
                    first_detected: UnixNanos(old.first_detected.0.min(*now)),
                    last_used: UnixNanos(old.last_used.0.max(used)),
                    size: *size,
                    pinned: *pinned,
                },
                None => ImageRecord {
                    first_detected: UnixNanos(*now),
                    last_used: UnixNanos(used),
                    size: *size,
                    pinned: *pinned,
                },
            })
        }
        Op::RemoveUnlisted { seen_last_used, .. } => match old {
            Some(r) if r.last_used.0 > *seen_last_used => Some(r),
            _ => None,
        },
        _ => None,
    }
}

impl Model {
    /// Applies `ops` as `Store::apply` does; returns whether anything changed. The rules are
    /// written out again here, independently of the store's (`store/journal.rs`).
    pub(super) fn apply(&mut self, ops: &[Op]) -> bool {
        let mut txn = Transaction::new(ops);
        for op in ops {
            let key = record_key(op);
            let creates_at = self.creates_at(op, &key);
            let op_changed = self.apply_op(op, &key, &mut txn);
            txn.changed |= op_changed;
            if let Some(now) = creates_at {
                self.record_detected_pull(&key, now, &mut txn);
                self.mark_repulled(&key, now, &mut txn);
            }
        }
        self.finish(txn)
    }

    /// A pull's mark or a detect's sighting that creates a record: the regret check's time.
    fn creates_at(&self, op: &Op, key: &RecordKey) -> Option<i64> {
        match op {
            Op::MarkUsed { now, .. } | Op::Sight { now, .. } if !self.records.contains_key(key) => {
                Some(*now)
            }
            _ => None,
        }
    }

    /// One operation's writes; returns whether it changed anything the stamps count.
    fn apply_op(&mut self, op: &Op, key: &RecordKey, txn: &mut Transaction) -> bool {
        match op {
            Op::Upsert { .. }
            | Op::MarkUsed { .. }
            | Op::Remove { .. }
            | Op::Sight { .. }
            | Op::RemoveUnlisted { .. } => self.apply_record_op(op, key),
            Op::RemoveUnlistedJournaled {
                seen_last_used, at, ..
            } => self.remove_unlisted_journaled(key, *seen_last_used, *at, txn),
            Op::Evict { at, rank, .. } => self.evict(key, *at, *rank, txn),
            Op::SetNames { names, .. } => self.set_names(key, names_of(*names)),
            Op::PutBackoff { key: which, .. } => {
                self.put_backoff(backoff_key(*which), backoff_entry(op))
            }
            Op::RemoveBackoff { key: which } => self.backoff.remove(&backoff_key(*which)).is_some(),
            Op::SetMeta { name, value } => self.set_meta(meta_name(*name), *value),
            Op::Stamp { value } => {
                txn.stamps.push(*value);
                false
            }
            Op::PutPin { key: which, .. } => {
                let pin = pin_of(op);
                self.pins.insert(pin_key(*which), pin.clone()) != Some(pin)
            }
            Op::RemovePin { key: which } => self.pins.remove(&pin_key(*which)).is_some(),
            Op::PruneExpiredPins { now } => self.prune_expired_pins(txn.retention, UnixNanos(*now)),
            // Committed, but not a change for the stamps.
            Op::ObserveUses { now, in_use } => {
                txn.uses_now = txn.uses_now.max(Some(*now));
                txn.uses_changed |= self.observe_uses(UnixNanos(*now), &uses_of(*in_use));
                false
            }
            Op::OpenUse { now, .. } => {
                txn.uses_now = txn.uses_now.max(Some(*now));
                txn.uses_changed |= self.observe_open(key, UnixNanos(*now));
                false
            }
            Op::RecordPull { at, .. } => {
                txn.pulls_now = txn.pulls_now.max(Some(*at));
                self.record_pull(key, UnixNanos(*at), pull_of(op))
            }
            Op::ReplaceWarm { .. } => {
                let rows = warm_of(op);
                let same = self.warm == rows;
                self.warm = rows;
                !same
            }
            Op::PutRuntimeLabel { name, .. } => {
                let label = runtime_label_of(op);
                self.runtime_labels
                    .insert(labelled_name(*name), label.clone())
                    != Some(label)
            }
            Op::RemoveRuntimeLabel { name } => {
                self.runtime_labels.remove(&labelled_name(*name)).is_some()
            }
        }
    }

    /// An upsert, mark, removal or sighting of the record at `key`, and the names a deletion
    /// drops; returns whether it changed anything the stamps count.
    fn apply_record_op(&mut self, op: &Op, key: &RecordKey) -> bool {
        let old = self.records.get(key).copied();
        let next = next_record(op, old);
        let record_changed = match next {
            _ if next == old => false,
            Some(r) => {
                self.records.insert(key.clone(), r);
                true
            }
            None => self.records.remove(key).is_some(),
        };
        // A deletion without a journal entry drops the names no entry keeps.
        let deleted = old.is_some() && !self.records.contains_key(key);
        let names_dropped = (matches!(op, Op::Remove { .. })
            || (matches!(op, Op::RemoveUnlisted { .. }) && deleted))
            && !self.records.contains_key(key)
            && !self.journal.keys().any(|k| k.key == *key)
            && self.names.remove(key).is_some();
        // The store counts a plain removal's names; detect's removal changed the record
        // anyway.
        record_changed || (matches!(op, Op::Remove { .. }) && names_dropped)
    }

    /// Detect's removal of an unlisted record not used since it read it, journaled at `at`
    /// as an external removal.
    fn remove_unlisted_journaled(
        &mut self,
        key: &RecordKey,
        seen_last_used: i64,
        at: i64,
        txn: &mut Transaction,
    ) -> bool {
        match self.records.get(key).copied() {
            Some(old) if old.last_used.0 <= seen_last_used => {
                self.records.remove(key);
                let jkey = JournalKey {
                    removed_at: UnixNanos(at),
                    key: key.clone(),
                };
                txn.journaled(jkey.clone(), at);
                self.journal.insert(
                    jkey,
                    JournalEntry {
                        size: old.size,
                        first_detected: old.first_detected,
                        last_used: old.last_used,
                        reason: None,
                        rank: None,
                        fs: None,
                        remover: Remover::External,
                        repulled_at: None,
                    },
                );
                true
            }
            _ => false,
        }
    }

    /// GC's removal: the record goes and its journal entry carries the eviction's note.
    fn evict(&mut self, key: &RecordKey, at: i64, rank: u32, txn: &mut Transaction) -> bool {
        let Some(old) = self.records.remove(key) else {
            return false;
        };
        let note = evict_note(at, rank);
        let jkey = JournalKey {
            removed_at: note.removed_at,
            key: key.clone(),
        };
        txn.journaled(jkey.clone(), note.removed_at.0);
        self.journal.insert(
            jkey,
            JournalEntry {
                size: old.size,
                first_detected: old.first_detected,
                last_used: old.last_used,
                reason: Some(note.reason),
                rank: Some(note.rank),
                fs: note.fs,
                remover: Remover::Imagekeeper,
                repulled_at: None,
            },
        );
        true
    }

    /// Detect's names of an existing record; an absent list and an empty one are the same.
    fn set_names(&mut self, key: &RecordKey, next: ImageNames) -> bool {
        let old = self.names.get(key);
        if !self.records.contains_key(key)
            || old == Some(&next)
            || (old.is_none() && next.is_empty())
        {
            return false;
        }
        self.names.insert(key.clone(), next);
        true
    }

    fn put_backoff(&mut self, key: String, entry: BackoffEntry) -> bool {
        if self.backoff.get(&key) == Some(&entry) {
            return false;
        }
        self.backoff.insert(key, entry);
        true
    }

    /// Drops the pins that expired before the retention's age cutoff; `NEVER` pins stay.
    fn prune_expired_pins(&mut self, retention: JournalRetention, now: UnixNanos) -> bool {
        let cutoff = now.saturating_sub(retention.max_age);
        let before = self.pins.len();
        self.pins
            .retain(|_, p| p.until == UnixNanos::NEVER || p.until >= cutoff);
        self.pins.len() != before
    }

    fn record_pull(&mut self, key: &RecordKey, at: UnixNanos, entry: PullEntry) -> bool {
        let pkey = PullKey {
            at,
            key: key.clone(),
        };
        self.pulls.insert(pkey, entry.clone()) != Some(entry)
    }

    /// A record created at `now` by anything but the batch's own pull records a detected
    /// pull of it.
    fn record_detected_pull(&mut self, key: &RecordKey, now: i64, txn: &mut Transaction) {
        if txn.explicit.contains(key) {
            return;
        }
        let Some(record) = self.records.get(key) else {
            return;
        };
        let entry = PullEntry {
            size: record.size,
            origin: PullOrigin::Detected,
            took: Duration::ZERO,
            name: String::new(),
        };
        txn.changed |= self.record_pull(key, UnixNanos(now), entry);
        txn.pulls_now = txn.pulls_now.max(Some(now));
    }

    /// A record created at `now` marks the image's newest journal entry not yet re-pulled as
    /// re-pulled, if that entry is within the retention's age.
    fn mark_repulled(&mut self, key: &RecordKey, now: i64, txn: &mut Transaction) {
        if !self.records.contains_key(key) {
            return;
        }
        let newest = self
            .journal
            .iter()
            .rev()
            .find(|(k, e)| k.key.image_id == key.image_id && e.repulled_at.is_none())
            .map(|(k, _)| k.clone());
        if let Some(jkey) =
            newest.filter(|k| k.removed_at >= age_cutoff(UnixNanos(now), txn.retention.max_age))
            && let Some(entry) = self.journal.get_mut(&jkey)
        {
            entry.repulled_at = Some(UnixNanos(now));
            txn.journaled(jkey, now);
        }
    }

    /// The transaction's end: the histories' and the journal's prunes, and the stamps if
    /// anything changed; returns whether anything changed.
    fn finish(&mut self, mut txn: Transaction) -> bool {
        let retention = txn.retention;
        if let Some(now) = txn.uses_now {
            txn.uses_changed |= self.prune_uses(retention, UnixNanos(now));
        }
        if let Some(now) = txn.pulls_now {
            txn.changed |= self.prune_pulls(retention, UnixNanos(now));
        }
        if txn.journal_written {
            let now = UnixNanos(txn.txn_now.unwrap_or(i64::MIN));
            self.prune(retention, now, &txn.fresh);
            // As the store: the histories follow the retention just written.
            txn.uses_changed |= self.prune_uses(retention, now);
            txn.uses_changed |= self.prune_pulls(retention, now);
        }
        if txn.changed {
            for value in txn.stamps {
                self.set_meta(meta_keys::LAST_DETECT, value);
            }
        }
        txn.changed || txn.uses_changed
    }
}

/// The transaction's prunes, history writes and meta, as the store does them.
impl Model {
    /// The journal's pruning, as `store/journal.rs` does it, with the retention in `meta`.
    fn prune(&mut self, retention: JournalRetention, now: UnixNanos, fresh: &BTreeSet<JournalKey>) {
        self.set_meta(
            retention_keys::MAX_AGE_SECS,
            i64::try_from(retention.max_age.as_secs()).unwrap_or(i64::MAX),
        );
        self.set_meta(
            retention_keys::MAX_ENTRIES,
            i64::from(retention.max_entries),
        );
        let Some(newest) = self.journal.keys().next_back().map(|k| k.removed_at) else {
            return;
        };
        // The reference: the newest entry, at most `now` + the tolerance.
        let reference = newest.min(now.saturating_add(crate::model::FUTURE_STAMP_TOLERANCE));
        let cutoff = age_cutoff(reference, retention.max_age);
        let surplus = self
            .journal
            .len()
            .saturating_sub(retention.max_entries as usize);
        let doomed: Vec<JournalKey> = self
            .journal
            .keys()
            .filter(|k| !fresh.contains(*k))
            .enumerate()
            .take_while(|(n, k)| *n < surplus || k.removed_at < cutoff)
            .map(|(_, k)| k.clone())
            .collect();
        let mut pruned: BTreeSet<RecordKey> = BTreeSet::new();
        for k in doomed {
            self.journal.remove(&k);
            pruned.insert(k.key);
        }
        for key in pruned {
            if !self.records.contains_key(&key) && !self.journal.keys().any(|k| k.key == key) {
                self.names.remove(&key);
            }
        }
    }

    /// A detect's uses, as `store/history.rs` applies them, written out again.
    fn observe_uses(&mut self, now: UnixNanos, in_use: &BTreeSet<RecordKey>) -> bool {
        let open: Vec<(UseKey, UseInterval)> = self
            .uses
            .iter()
            .filter(|(k, _)| !k.closed)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let mut changed = false;
        let mut seen = BTreeSet::new();
        for (k, v) in open {
            if in_use.contains(&k.key) {
                seen.insert(k.key.clone());
                if now > v.last_seen {
                    self.uses.insert(k, UseInterval { last_seen: now });
                    changed = true;
                }
            } else {
                self.uses.remove(&k);
                let closed = UseKey { closed: true, ..k };
                let last_seen = self
                    .uses
                    .get(&closed)
                    .map_or(v.last_seen, |old| old.last_seen.max(v.last_seen));
                self.uses.insert(closed, UseInterval { last_seen });
                changed = true;
            }
        }
        for key in in_use.difference(&seen) {
            self.uses.insert(
                UseKey {
                    closed: false,
                    started_at: now,
                    key: key.clone(),
                },
                UseInterval { last_seen: now },
            );
            changed = true;
        }
        changed
    }

    /// A container event's use.
    fn observe_open(&mut self, key: &RecordKey, now: UnixNanos) -> bool {
        let open: Vec<(UseKey, UseInterval)> = self
            .uses
            .iter()
            .filter(|(k, _)| !k.closed && k.key == *key)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if open.is_empty() {
            self.uses.insert(
                UseKey {
                    closed: false,
                    started_at: now,
                    key: key.clone(),
                },
                UseInterval { last_seen: now },
            );
            return true;
        }
        let mut changed = false;
        for (k, v) in open {
            if now > v.last_seen {
                self.uses.insert(k, UseInterval { last_seen: now });
                changed = true;
            }
        }
        changed
    }

    /// The closed intervals' retention: in start order, a row goes while fewer than the
    /// surplus went, or when it was last seen before the age cutoff.
    fn prune_uses(&mut self, retention: JournalRetention, now: UnixNanos) -> bool {
        let cutoff = age_cutoff(now, retention.max_age);
        let closed: Vec<(UseKey, UseInterval)> = self
            .uses
            .iter()
            .filter(|(k, _)| k.closed)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let surplus = closed.len().saturating_sub(retention.max_entries as usize);
        let mut doomed = 0usize;
        for (k, v) in closed {
            if doomed < surplus || v.last_seen < cutoff {
                self.uses.remove(&k);
                doomed += 1;
            }
        }
        doomed > 0
    }

    /// The pulls' retention: oldest first, while within the surplus or older than the cutoff.
    fn prune_pulls(&mut self, retention: JournalRetention, now: UnixNanos) -> bool {
        let cutoff = age_cutoff(now, retention.max_age);
        let surplus = self
            .pulls
            .len()
            .saturating_sub(retention.max_entries as usize);
        let doomed: Vec<PullKey> = self
            .pulls
            .keys()
            .enumerate()
            .take_while(|(n, k)| *n < surplus || k.at < cutoff)
            .map(|(_, k)| k.clone())
            .collect();
        for k in &doomed {
            self.pulls.remove(k);
        }
        !doomed.is_empty()
    }

    fn set_meta(&mut self, name: &str, value: i64) -> bool {
        self.meta.insert(name.to_owned(), value) != Some(value)
    }
}
