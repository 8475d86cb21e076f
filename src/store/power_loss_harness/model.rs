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
    backoff_entry, backoff_key, evict_note, meta_name, names_of, pin_key, pin_of, pull_of,
    record_key, uses_of, warm_of,
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
        })
    }

    /// Applies `ops` as `Store::apply` does; returns whether anything changed. The rules are
    /// written out again here, independently of the store's (`store/journal.rs`).
    pub(super) fn apply(&mut self, ops: &[Op]) -> bool {
        let retention = JournalRetention::default();
        let mut changed = false;
        let mut stamps = Vec::new();
        let mut journal_written = false;
        // The transaction's journal writes and its `now` (the latest time it journaled or
        // marked re-pulled), as the store's prune takes them.
        let mut fresh: BTreeSet<JournalKey> = BTreeSet::new();
        let mut txn_now: Option<i64> = None;
        let mut uses_now: Option<i64> = None;
        let mut uses_changed = false;
        let mut pulls_now: Option<i64> = None;
        let explicit: BTreeSet<RecordKey> = ops
            .iter()
            .filter(|op| matches!(op, Op::RecordPull { .. }))
            .map(record_key)
            .collect();
        for op in ops {
            let key = record_key(op);
            // A pull's mark or a detect's sighting that creates a record: the regret check.
            let creates_at = match op {
                Op::MarkUsed { now, .. } | Op::Sight { now, .. }
                    if !self.records.contains_key(&key) =>
                {
                    Some(*now)
                }
                _ => None,
            };
            changed |= match op {
                Op::Upsert { .. }
                | Op::MarkUsed { .. }
                | Op::Remove { .. }
                | Op::Sight { .. }
                | Op::RemoveUnlisted { .. } => {
                    let old = self.records.get(&key).copied();
                    let next = match op {
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
                    };
                    let record_changed = match next {
                        _ if next == old => false,
                        Some(r) => {
                            self.records.insert(key.clone(), r);
                            true
                        }
                        None => self.records.remove(&key).is_some(),
                    };
                    // A deletion without a journal entry drops the names no entry keeps.
                    let deleted = old.is_some() && !self.records.contains_key(&key);
                    let names_dropped = (matches!(op, Op::Remove { .. })
                        || (matches!(op, Op::RemoveUnlisted { .. }) && deleted))
                        && !self.records.contains_key(&key)
                        && !self.journal.keys().any(|k| k.key == key)
                        && self.names.remove(&key).is_some();
                    // The store counts a plain removal's names; detect's removal changed the
                    // record anyway.
                    record_changed || (matches!(op, Op::Remove { .. }) && names_dropped)
                }
                Op::RemoveUnlistedJournaled {
                    seen_last_used, at, ..
                } => match self.records.get(&key).copied() {
                    Some(old) if old.last_used.0 <= *seen_last_used => {
                        self.records.remove(&key);
                        fresh.insert(JournalKey {
                            removed_at: UnixNanos(*at),
                            key: key.clone(),
                        });
                        txn_now = txn_now.max(Some(*at));
                        self.journal.insert(
                            JournalKey {
                                removed_at: UnixNanos(*at),
                                key: key.clone(),
                            },
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
                        journal_written = true;
                        true
                    }
                    _ => false,
                },
                Op::Evict { at, rank, .. } => match self.records.remove(&key) {
                    Some(old) => {
                        let note = evict_note(*at, *rank);
                        fresh.insert(JournalKey {
                            removed_at: note.removed_at,
                            key: key.clone(),
                        });
                        txn_now = txn_now.max(Some(note.removed_at.0));
                        self.journal.insert(
                            JournalKey {
                                removed_at: note.removed_at,
                                key: key.clone(),
                            },
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
                        journal_written = true;
                        true
                    }
                    None => false,
                },
                Op::SetNames { names, .. } => {
                    let next = names_of(*names);
                    let old = self.names.get(&key);
                    if !self.records.contains_key(&key)
                        || old == Some(&next)
                        || (old.is_none() && next.is_empty())
                    {
                        false
                    } else {
                        self.names.insert(key.clone(), next);
                        true
                    }
                }
                Op::PutBackoff { key, .. } => {
                    let entry = backoff_entry(op);
                    let key = backoff_key(*key);
                    if self.backoff.get(&key) == Some(&entry) {
                        false
                    } else {
                        self.backoff.insert(key, entry);
                        true
                    }
                }
                Op::RemoveBackoff { key } => self.backoff.remove(&backoff_key(*key)).is_some(),
                Op::SetMeta { name, value } => self.set_meta(meta_name(*name), *value),
                Op::Stamp { value } => {
                    stamps.push(*value);
                    false
                }
                Op::PutPin { key, .. } => {
                    let pin = pin_of(op);
                    self.pins.insert(pin_key(*key), pin.clone()) != Some(pin)
                }
                Op::RemovePin { key } => self.pins.remove(&pin_key(*key)).is_some(),
                Op::PruneExpiredPins { now } => {
                    let cutoff = UnixNanos(*now).saturating_sub(retention.max_age);
                    let before = self.pins.len();
                    self.pins
                        .retain(|_, p| p.until == UnixNanos::NEVER || p.until >= cutoff);
                    self.pins.len() != before
                }
                // Committed, but not a change for the stamps.
                Op::ObserveUses { now, in_use } => {
                    uses_now = uses_now.max(Some(*now));
                    uses_changed |= self.observe_uses(UnixNanos(*now), &uses_of(*in_use));
                    false
                }
                Op::OpenUse { now, .. } => {
                    uses_now = uses_now.max(Some(*now));
                    uses_changed |= self.observe_open(&key, UnixNanos(*now));
                    false
                }
                Op::RecordPull { at, .. } => {
                    pulls_now = pulls_now.max(Some(*at));
                    let entry = pull_of(op);
                    let pkey = PullKey {
                        at: UnixNanos(*at),
                        key: key.clone(),
                    };
                    self.pulls.insert(pkey, entry.clone()) != Some(entry)
                }
                Op::ReplaceWarm { .. } => {
                    let rows = warm_of(op);
                    let same = self.warm == rows;
                    self.warm = rows;
                    !same
                }
            };
            if let Some(now) = creates_at
                && !explicit.contains(&key)
                && let Some(record) = self.records.get(&key)
            {
                let entry = PullEntry {
                    size: record.size,
                    origin: PullOrigin::Detected,
                    took: Duration::ZERO,
                    name: String::new(),
                };
                let pkey = PullKey {
                    at: UnixNanos(now),
                    key: key.clone(),
                };
                changed |= self.pulls.insert(pkey, entry.clone()) != Some(entry);
                pulls_now = pulls_now.max(Some(now));
            }
            if let Some(now) = creates_at.filter(|_| self.records.contains_key(&key)) {
                let newest = self
                    .journal
                    .iter()
                    .rev()
                    .find(|(k, e)| k.key.image_id == key.image_id && e.repulled_at.is_none())
                    .map(|(k, _)| k.clone());
                if let Some(jkey) =
                    newest.filter(|k| k.removed_at >= age_cutoff(UnixNanos(now), retention.max_age))
                    && let Some(entry) = self.journal.get_mut(&jkey)
                {
                    entry.repulled_at = Some(UnixNanos(now));
                    txn_now = txn_now.max(Some(now));
                    fresh.insert(jkey.clone());
                    journal_written = true;
                }
            }
        }
        if let Some(now) = uses_now {
            uses_changed |= self.prune_uses(retention, UnixNanos(now));
        }
        if let Some(now) = pulls_now {
            changed |= self.prune_pulls(retention, UnixNanos(now));
        }
        if journal_written {
            let now = UnixNanos(txn_now.unwrap_or(i64::MIN));
            self.prune(retention, now, &fresh);
            // As the store: the histories follow the retention just written.
            uses_changed |= self.prune_uses(retention, now);
            uses_changed |= self.prune_pulls(retention, now);
        }
        if changed {
            for value in stamps {
                self.set_meta(meta_keys::LAST_DETECT, value);
            }
        }
        changed || uses_changed
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
