//! The power-loss harness (feature `fault-injection`): drives the real [`Store`] API on a
//! [`PowerLossDisk`] through a [`Scenario`] of batches and clean reopens, cuts power at a chosen
//! disk operation, rebuilds the disk from the synced image plus a seeded subset of the unsynced
//! writes, reopens it read-write (redb's recovery), and holds the result against a `BTreeMap`
//! model: the store must hold exactly the state after the last acknowledged commit, or after
//! the commit in flight at the cut, whole; [`Store::check`] must pass; the eviction index must
//! walk; and the recovered store must take a new commit that survives a reopen.
//!
//! The proptest in `tests` runs it under `cargo test`; `fuzz/fuzz_targets/power_loss.rs` drives
//! it from fuzz input.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::power_loss::PowerLossDisk;
use super::{
    Batch, CommitMode, JournalKey, Store, StoreError, Violation, age_cutoff, meta_keys,
    retention_keys,
};
use crate::model::{
    BackoffEntry, EvictionNote, ImageNames, ImagePin, ImageRecord, JournalEntry, JournalRetention,
    PinKey, PullEntry, PullKey, PullOrigin, RecordKey, RemovalReason, Remover, StoredWarmState,
    UnixNanos, UseInterval, UseKey, WarmRow,
};

/// The creation time of every simulated database.
const CREATED_AT: UnixNanos = UnixNanos(1_000_000_000_000);
const LABEL: &str = "<power-loss disk>";
const HANDLERS: [&str; 3] = ["", "runc", "kata"];
const META_NAMES: [&str; 3] = [
    meta_keys::LAST_DETECT,
    meta_keys::AGENT_STARTED_AT,
    "marker",
];

/// One operation of a batch; small numbers pick among a few keys so operations collide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A detect-like upsert of the whole record.
    Upsert {
        image: u8,
        handler: u8,
        first_detected: i64,
        last_used: i64,
        size: u64,
        pinned: bool,
    },
    /// A last-used bump (creating the record if missing).
    MarkUsed {
        image: u8,
        handler: u8,
        now: i64,
        size: Option<u64>,
    },
    Remove {
        image: u8,
        handler: u8,
    },
    /// Detect's merge of a listed image (`BatchOp::Sight`).
    Sight {
        image: u8,
        handler: u8,
        now: i64,
        in_use: bool,
        size: u64,
        pinned: bool,
    },
    /// Detect's removal of an unlisted record unless marked since (`BatchOp::RemoveUnlisted`).
    RemoveUnlisted {
        image: u8,
        handler: u8,
        seen_last_used: i64,
    },
    /// The same, journaled at `at` as an external removal (schema 2).
    RemoveUnlistedJournaled {
        image: u8,
        handler: u8,
        seen_last_used: i64,
        at: i64,
    },
    /// GC's removal: the record's deletion and its journal entry (`BatchOp::Evict`).
    Evict {
        image: u8,
        handler: u8,
        at: i64,
        rank: u32,
    },
    /// Detect's names of an image (`BatchOp::SetNames`): `names` picks one of a few lists.
    SetNames {
        image: u8,
        handler: u8,
        names: u8,
    },
    PutBackoff {
        key: u8,
        backoff_secs: u32,
        last_update: i64,
        /// The error message is this many bytes (cut to 4096): long ones spill redb pages.
        message_len: u16,
    },
    RemoveBackoff {
        key: u8,
    },
    SetMeta {
        name: u8,
        value: i64,
    },
    /// `stamp_if_changed(last_detect, value)`.
    Stamp {
        value: i64,
    },
    /// Schema 4: an operator's pin (`BatchOp::PutPin`); `key` picks one of a few names.
    PutPin {
        key: u8,
        created_at: i64,
        until: i64,
        /// The reason is this many bytes (cut to 1024): long ones spill redb pages.
        reason_len: u16,
    },
    RemovePin {
        key: u8,
    },
    /// A detect's pruning of pins expired for longer than the journal's max age.
    PruneExpiredPins {
        now: i64,
    },
    /// Schema 5: a detect's view of the images in use (`BatchOp::ObserveUses`); bit `i` of
    /// `in_use` names image `i` (of 8) under handler `i % 3`.
    ObserveUses {
        now: i64,
        in_use: u8,
    },
    /// Schema 5: a container event's use (`BatchOp::OpenUse`).
    OpenUse {
        image: u8,
        handler: u8,
        now: i64,
    },
    /// Schema 5: a pull in the history (`BatchOp::RecordPull`).
    RecordPull {
        image: u8,
        handler: u8,
        at: i64,
        size: u64,
        origin: u8,
        /// The name is this many bytes (cut to 4096): long ones spill redb pages.
        name_len: u16,
    },
    /// Schema 5: the warm table replaced by `rows` rows (`BatchOp::ReplaceWarm`).
    ReplaceWarm {
        rows: u8,
        state: u8,
        since: i64,
    },
}

/// A step of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// One `Store::apply`.
    Batch(Vec<Op>),
    /// Drop the store and open the disk again (no crash).
    Reopen,
    /// `Store::compact` (whatever the file's size): changes no content.
    Compact,
}

/// One run: the steps, when power is cut (the number of the mutating disk operation, counted
/// from the end of the first open, that fails first; past the end, power is cut after the last
/// step), which unsynced writes survive (a seed), and how the store commits.
///
/// The first open, which creates the database, always completes: a cut while redb creates a
/// new file leaves a file that it refuses (see `docs/testing-fuzz.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub steps: Vec<Step>,
    pub cut_after: u64,
    pub crash_seed: u64,
    pub mode: CommitMode,
}

/// Which acceptable state the recovered store held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// The state after the last acknowledged commit (with a commit in flight or not).
    Acknowledged,
    /// The state after the commit in flight at the cut, whole.
    InFlight,
}

/// What a run that kept the promise did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Commits the store acknowledged before the cut.
    pub acknowledged: usize,
    /// Whether power was cut during a step (rather than after the last one).
    pub cut_during_run: bool,
    /// Whether a commit that changes something was in flight at the cut.
    pub in_flight: bool,
    pub recovered: Recovered,
    /// Mutating disk operations before the cut.
    pub disk_ops: u64,
}

/// How a run broke the promise (or could not be run).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessFailure {
    #[error(
        "after the crash the store holds neither the acknowledged state nor the in-flight one: {detail}"
    )]
    WrongState { detail: String },
    #[error("the database does not open after the crash: {0}")]
    ReopenFailed(#[source] Box<StoreError>),
    #[error("check after recovery: {}", list(.0))]
    CheckFailed(Vec<Violation>),
    #[error("{what} failed without a power cut: {source}")]
    Unexpected {
        what: &'static str,
        #[source]
        source: Box<StoreError>,
    },
    #[error("the store says batch {step} changed {store}, the model says {model}")]
    ModelDisagrees {
        step: usize,
        store: bool,
        model: bool,
    },
    #[error("the recovered store: {detail}")]
    AfterRecovery { detail: String },
}

fn list(v: &[Violation]) -> String {
    v.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

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
    fn initial() -> Model {
        let mut meta = BTreeMap::new();
        meta.insert(
            meta_keys::SCHEMA_VERSION.to_owned(),
            super::CURRENT_SCHEMA_VERSION,
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
    fn apply(&mut self, ops: &[Op]) -> bool {
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

fn record_key(op: &Op) -> RecordKey {
    let (image, handler) = match op {
        Op::Upsert { image, handler, .. }
        | Op::MarkUsed { image, handler, .. }
        | Op::Remove { image, handler }
        | Op::Sight { image, handler, .. }
        | Op::RemoveUnlisted { image, handler, .. }
        | Op::RemoveUnlistedJournaled { image, handler, .. }
        | Op::Evict { image, handler, .. }
        | Op::SetNames { image, handler, .. }
        | Op::OpenUse { image, handler, .. }
        | Op::RecordPull { image, handler, .. } => (*image, *handler),
        _ => (0, 0),
    };
    RecordKey::new(
        format!("sha256:{:064x}", image % 16),
        HANDLERS[usize::from(handler) % HANDLERS.len()],
    )
}

/// GC's note of an eviction at `at` (unix nanoseconds) with `rank`.
fn evict_note(at: i64, rank: u32) -> EvictionNote {
    EvictionNote {
        removed_at: UnixNanos(at),
        reason: RemovalReason::Space,
        rank,
        fs: None,
    }
}

/// One of a few name lists (0: none), so that names collide and change.
fn names_of(n: u8) -> ImageNames {
    match n % 4 {
        0 => ImageNames::default(),
        1 => ImageNames {
            repo_tags: vec!["registry.example/app:1".to_owned()],
            repo_digests: Vec::new(),
        },
        2 => ImageNames {
            repo_tags: vec!["registry.example/app:2".to_owned()],
            repo_digests: vec!["registry.example/app@sha256:feed".to_owned()],
        },
        _ => ImageNames {
            repo_tags: Vec::new(),
            repo_digests: vec!["registry.example/app@sha256:beef".to_owned()],
        },
    }
}

fn backoff_key(key: u8) -> String {
    format!("pod-{}_registry.example/app:{}", key % 4, key % 3)
}

fn backoff_entry(op: &Op) -> BackoffEntry {
    match op {
        Op::PutBackoff {
            backoff_secs,
            last_update,
            message_len,
            ..
        } => BackoffEntry {
            backoff: Duration::from_secs(u64::from(*backoff_secs)),
            last_update: UnixNanos(*last_update),
            last_error: "x".repeat(usize::from(*message_len).min(super::codec::MAX_ERROR_BYTES)),
        },
        _ => BackoffEntry {
            backoff: Duration::ZERO,
            last_update: UnixNanos::NEVER,
            last_error: String::new(),
        },
    }
}

fn pin_key(key: u8) -> PinKey {
    PinKey::new(
        format!("registry.example/app:{}", key % 3),
        HANDLERS[usize::from(key / 3) % HANDLERS.len()],
    )
}

fn pin_of(op: &Op) -> ImagePin {
    match op {
        Op::PutPin {
            created_at,
            until,
            reason_len,
            ..
        } => ImagePin {
            created_at: UnixNanos(*created_at),
            until: UnixNanos(*until),
            reason: "r".repeat(usize::from(*reason_len).min(crate::model::MAX_PIN_REASON_BYTES)),
        },
        _ => ImagePin {
            created_at: UnixNanos::NEVER,
            until: UnixNanos::NEVER,
            reason: String::new(),
        },
    }
}

/// The images bit `i` of `mask` names: image `i` under handler `i % 3`, as `record_key`.
fn uses_of(mask: u8) -> BTreeSet<RecordKey> {
    (0u8..8)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| {
            record_key(&Op::OpenUse {
                image: i,
                handler: i % 3,
                now: 0,
            })
        })
        .collect()
}

fn pull_of(op: &Op) -> PullEntry {
    match op {
        Op::RecordPull {
            size,
            origin,
            name_len,
            at,
            ..
        } => PullEntry {
            size: *size,
            origin: PullOrigin::ALL[usize::from(*origin) % PullOrigin::ALL.len()],
            took: Duration::from_nanos(at.unsigned_abs() % 1_000_000_000_000),
            name: "n".repeat(usize::from(*name_len).min(crate::model::MAX_IMAGE_NAME_BYTES)),
        },
        _ => PullEntry {
            size: 0,
            origin: PullOrigin::Detected,
            took: Duration::ZERO,
            name: String::new(),
        },
    }
}

const WARM_STATES: [StoredWarmState; 6] = [
    StoredWarmState::Present,
    StoredWarmState::Pulling,
    StoredWarmState::Queued,
    StoredWarmState::DoesNotFit,
    StoredWarmState::Failed,
    StoredWarmState::Expired,
];

fn warm_of(op: &Op) -> Vec<WarmRow> {
    let Op::ReplaceWarm { rows, state, since } = op else {
        return Vec::new();
    };
    (0..*rows % 6)
        .map(|i| WarmRow {
            image: format!("registry.example/warm:{i}"),
            runtime_handler: HANDLERS[usize::from(i) % HANDLERS.len()].to_owned(),
            state: WARM_STATES[usize::from(state.wrapping_add(i)) % WARM_STATES.len()],
            since: UnixNanos(*since),
            image_id: if i % 2 == 0 {
                format!("sha256:{:064x}", i)
            } else {
                String::new()
            },
        })
        .collect()
}

fn meta_name(name: u8) -> &'static str {
    META_NAMES[usize::from(name) % META_NAMES.len()]
}

fn to_batch(ops: &[Op]) -> Batch {
    let mut batch = Batch::new();
    for op in ops {
        match op {
            Op::Upsert { .. } => {
                let mut m = Model::default();
                m.apply(std::slice::from_ref(op));
                let (key, record) = m
                    .records
                    .into_iter()
                    .next()
                    .expect("an upsert into an empty model creates exactly one record");
                batch.upsert(key, record);
            }
            Op::MarkUsed { now, size, .. } => {
                batch.mark_used(record_key(op), UnixNanos(*now), *size)
            }
            Op::Remove { .. } => batch.remove(record_key(op)),
            Op::Sight {
                now,
                in_use,
                size,
                pinned,
                ..
            } => batch.sight(
                record_key(op),
                crate::model::Sighting {
                    now: UnixNanos(*now),
                    in_use: *in_use,
                    size: *size,
                    pinned: *pinned,
                    used_at: UnixNanos::NEVER,
                },
            ),
            Op::RemoveUnlisted { seen_last_used, .. } => {
                batch.remove_unlisted(record_key(op), UnixNanos(*seen_last_used))
            }
            Op::RemoveUnlistedJournaled {
                seen_last_used, at, ..
            } => batch.remove_unlisted_journaled(
                record_key(op),
                UnixNanos(*seen_last_used),
                UnixNanos(*at),
            ),
            Op::Evict { at, rank, .. } => batch.evict(record_key(op), evict_note(*at, *rank)),
            Op::SetNames { names, .. } => batch.set_names(record_key(op), names_of(*names)),
            Op::PutBackoff { key, .. } => batch.put_backoff(backoff_key(*key), backoff_entry(op)),
            Op::RemoveBackoff { key } => batch.remove_backoff(backoff_key(*key)),
            Op::SetMeta { name, value } => batch.set_meta(meta_name(*name), *value),
            Op::Stamp { value } => batch.stamp_if_changed(meta_keys::LAST_DETECT, *value),
            Op::PutPin { key, .. } => batch.put_pin(pin_key(*key), pin_of(op)),
            Op::RemovePin { key } => batch.remove_pin(pin_key(*key)),
            Op::PruneExpiredPins { now } => batch.prune_expired_pins(UnixNanos(*now)),
            Op::ObserveUses { now, in_use } => {
                batch.observe_uses(UnixNanos(*now), uses_of(*in_use).into_iter().collect())
            }
            Op::OpenUse { now, .. } => batch.open_use(record_key(op), UnixNanos(*now)),
            Op::RecordPull { at, .. } => batch.record_pull(
                PullKey {
                    at: UnixNanos(*at),
                    key: record_key(op),
                },
                pull_of(op),
            ),
            Op::ReplaceWarm { .. } => batch.replace_warm(warm_of(op)),
        }
    }
    batch
}

fn open(disk: &PowerLossDisk, mode: CommitMode) -> Result<Store, StoreError> {
    Store::open_with_backend(disk.backend(), Path::new(LABEL), CREATED_AT, mode)
}

/// How many mutating disk operations `scenario` makes after the first open when power is never
/// cut: the range in which a cut lands inside the run.
pub fn count_disk_ops(scenario: &Scenario) -> Result<u64, HarnessFailure> {
    let disk = PowerLossDisk::new(Vec::new(), None);
    let unexpected = |what| {
        move |source| HarnessFailure::Unexpected {
            what,
            source: Box::new(source),
        }
    };
    let mut store = Some(open(&disk, scenario.mode).map_err(unexpected("open"))?);
    let created = disk.ops();
    for step in &scenario.steps {
        match step {
            Step::Batch(ops) => {
                if let Some(s) = &store {
                    s.apply(&to_batch(ops)).map_err(unexpected("apply"))?;
                }
            }
            Step::Reopen => {
                drop(store.take());
                store = Some(open(&disk, scenario.mode).map_err(unexpected("reopen"))?);
            }
            Step::Compact => {
                if let Some(s) = &store {
                    s.compact().map_err(unexpected("compact"))?;
                }
            }
        }
    }
    Ok(disk.ops() - created)
}

/// Runs `scenario`; `Ok` when the store kept its promise.
pub fn run(scenario: &Scenario) -> Result<Outcome, HarnessFailure> {
    let disk = PowerLossDisk::new(Vec::new(), None);
    let mut acked = Model::initial();
    let mut in_flight: Option<Model> = None;
    let mut acknowledged = 0;
    let unexpected = |what| {
        move |source| HarnessFailure::Unexpected {
            what,
            source: Box::new(source),
        }
    };

    let mut store = Some(open(&disk, scenario.mode).map_err(unexpected("open"))?);
    disk.cut_after(scenario.cut_after);
    for (index, step) in scenario.steps.iter().enumerate() {
        let Some(current) = store.as_ref() else { break };
        match step {
            Step::Batch(ops) => {
                let mut next = acked.clone();
                let model_changed = next.apply(ops);
                match current.apply(&to_batch(ops)) {
                    Ok(changed) => {
                        if changed != model_changed {
                            return Err(HarnessFailure::ModelDisagrees {
                                step: index,
                                store: changed,
                                model: model_changed,
                            });
                        }
                        acknowledged += usize::from(changed);
                        acked = next;
                    }
                    Err(_) if disk.is_cut() => {
                        in_flight = model_changed.then_some(next);
                        store = None;
                    }
                    Err(e) => return Err(unexpected("apply")(e)),
                }
            }
            Step::Reopen => {
                drop(store.take());
                match open(&disk, scenario.mode) {
                    Ok(s) => store = Some(s),
                    Err(_) if disk.is_cut() => {}
                    Err(e) => return Err(unexpected("reopen")(e)),
                }
            }
            // Compaction commits nothing new: after a cut the acknowledged state is the only
            // one allowed.
            Step::Compact => match current.compact() {
                Ok(_) => {}
                Err(_) if disk.is_cut() => store = None,
                Err(e) => return Err(unexpected("compact")(e)),
            },
        }
    }
    let cut_during_run = disk.is_cut();
    let disk_ops = disk.ops();
    // Power goes off with the store still open: nothing of a clean close reaches the disk.
    disk.cut_now();
    drop(store);

    let after = PowerLossDisk::new(disk.crash_image(scenario.crash_seed), None);
    let mut store =
        open(&after, CommitMode::Durable).map_err(|e| HarnessFailure::ReopenFailed(Box::new(e)))?;
    let found = Model::read(&store).map_err(|e| HarnessFailure::ReopenFailed(Box::new(e)))?;
    let recovered = if found == acked {
        Recovered::Acknowledged
    } else if in_flight.as_ref() == Some(&found) {
        Recovered::InFlight
    } else {
        return Err(HarnessFailure::WrongState {
            detail: describe(&acked, in_flight.as_ref(), &found),
        });
    };
    let violations = store.check().map_err(|e| HarnessFailure::AfterRecovery {
        detail: format!("check failed to run: {e}"),
    })?;
    if !violations.is_empty() {
        return Err(HarnessFailure::CheckFailed(violations));
    }
    usable_after_recovery(store, &after, found)?;
    Ok(Outcome {
        acknowledged,
        cut_during_run,
        in_flight: in_flight.is_some(),
        recovered,
        disk_ops,
    })
}

/// The recovered store walks its eviction index in order and takes a commit that a clean
/// reopen still holds.
fn usable_after_recovery(
    store: Store,
    disk: &PowerLossDisk,
    mut model: Model,
) -> Result<(), HarnessFailure> {
    let fail = |detail: String| HarnessFailure::AfterRecovery { detail };
    let walked: Vec<_> = store
        .eviction_order()
        .map_err(|e| fail(format!("eviction scan: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| fail(format!("eviction scan: {e}")))?;
    if walked.len() != model.records.len()
        || walked.windows(2).any(|w| {
            (w[0].record.last_used, w[0].record.first_detected)
                > (w[1].record.last_used, w[1].record.first_detected)
        })
    {
        return Err(fail(
            "the eviction walk is out of order or incomplete".to_owned(),
        ));
    }
    let op = Op::MarkUsed {
        image: 15,
        handler: 0,
        now: i64::MAX,
        size: Some(1),
    };
    model.apply(std::slice::from_ref(&op));
    store
        .apply(&to_batch(&[op]))
        .map_err(|e| fail(format!("a commit after recovery: {e}")))?;
    drop(store);
    let store = open(disk, CommitMode::Durable).map_err(|e| fail(format!("reopen: {e}")))?;
    let found = Model::read(&store).map_err(|e| fail(format!("read after reopen: {e}")))?;
    if found != model {
        return Err(fail(format!(
            "a commit after recovery did not survive a clean reopen: {}",
            describe(&model, None, &found)
        )));
    }
    Ok(())
}

/// A short account of how `found` differs from the expected states.
fn describe(acked: &Model, in_flight: Option<&Model>, found: &Model) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "found {} records, {} backoff entries, meta {:?}; acknowledged state has {} records, {} \
         backoff entries, meta {:?}",
        found.records.len(),
        found.backoff.len(),
        found.meta,
        acked.records.len(),
        acked.backoff.len(),
        acked.meta
    );
    if let Some(m) = in_flight {
        let _ = write!(
            out,
            "; in-flight state has {} records, {} backoff entries, meta {:?}",
            m.records.len(),
            m.backoff.len(),
            m.meta
        );
    } else {
        let _ = write!(out, "; no commit was in flight");
    }
    let differing: Vec<String> = acked
        .records
        .iter()
        .filter(|(k, v)| found.records.get(k) != Some(v))
        .map(|(k, _)| k.to_string())
        .chain(
            found
                .records
                .keys()
                .filter(|k| !acked.records.contains_key(k))
                .map(|k| k.to_string()),
        )
        .take(4)
        .collect();
    if !differing.is_empty() {
        let _ = write!(
            out,
            "; records differing from the acknowledged state: {differing:?}"
        );
    }
    out
}

#[cfg(test)]
mod tests;
