//! `Store::check`: verifies the store's invariant (every record has exactly one matching
//! eviction-index entry and the index holds nothing else), that every stored byte decodes,
//! that the schema version is present, and redb's own integrity check. It reports every
//! violation it finds rather than stopping at the first.
//!
//! Schema 2's tables: every `names` and `journal` key and value decodes; every names row
//! belongs to a record or a journal entry of its key; the journal respects the retention in
//! force (`meta` `journal_max_entries` and `journal_max_age_secs`, the defaults when unset):
//! no more entries than the maximum. The journal's age needs the clock (pruning measures it
//! from the newest entry, but at most the writing transaction's `now` + the tolerance), so
//! `check_at` checks it: none removed more than the maximum age before the newest entry (at
//! most `now` + tolerance), and none removed later than `now` + tolerance.
//!
//! Schema 4's `pins` and schema 5's tables: every key and value decodes; an image has at most
//! one open use interval; no interval was last seen before it started; the closed intervals
//! and the pulls are each no more than the retention's maximum count; the warm rows are at
//! positions 0, 1, 2, ... with no gap. Schema 6's `runtime_labels`: every key (a non-empty
//! name of at most 4096 bytes) and value decodes (`runtime_labels.rs`). Schema 7's `signals`:
//! every key and value decodes and there are at most 20,000 rows (`signals.rs`).
//!
//! `Store::check_at(now)` adds the clock: a record's first_detected or last_used, a journal
//! entry's removal time, or the
//! `last_detect` meta, later than the check's own `now` + `FUTURE_STAMP_TOLERANCE` is a
//! violation (stamped while the clock was ahead, or the clock went back since). The check's
//! `now` is the yardstick, not the file's `last_detect`: a pull marks records after the last
//! detect (which is stamped only when a detect changes something), so `last_detect` is no
//! bound on them, and only a clock outside the file can show that `last_detect` itself lies
//! ahead. The agent's next detect clamps such stamps and moves `last_detect` back, which
//! clears these violations.

use std::collections::BTreeSet;
use std::fmt;

use redb::{ReadableTable, ReadableTableMetadata};

use super::codec::{Codec, IndexKey};
use super::journal::{age_cutoff, prune_reference, retention_keys};
use super::tables::{
    BACKOFF, EVICTION_PREFIX, IMAGES, JOURNAL, META, NAMES, PINS, PULLS, USES, WARM,
};
use super::{Handle, Store, StoreError, meta_keys};
use crate::format::{format_rfc3339, go_duration};
use crate::model::{FUTURE_STAMP_TOLERANCE, JournalRetention, RecordKey, UnixNanos};

/// [`Violation::FutureStamp`]'s `field` for a journal entry's removal time.
pub const JOURNAL_REMOVED_AT: &str = "journal_removed_at";

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Violation {
    /// A stored key or value does not decode.
    Undecodable {
        /// The table.
        table: &'static str,
        /// What does not decode.
        detail: String,
    },
    /// A record has no eviction-index entry matching its fields.
    MissingIndexEntry {
        /// The record's key.
        key: String,
    },
    /// An index entry matches no record.
    StrayIndexEntry {
        /// The index entry.
        entry: String,
    },
    /// The meta table has no schema version.
    MissingSchemaVersion,
    /// redb's integrity check failed or repaired something.
    Integrity {
        /// What redb reported.
        detail: String,
    },
    /// A record's `field` (first_detected or last_used) is later than the check's `now` by
    /// more than the tolerance (unix nanoseconds).
    FutureStamp {
        /// The record's key.
        key: String,
        /// `first_detected` or `last_used`.
        field: &'static str,
        /// The stored stamp.
        stamp: i64,
        /// The check's time.
        now: i64,
    },
    /// The `last_detect` meta is later than the check's `now` by more than the tolerance:
    /// the clock went back since the last detect (unix nanoseconds).
    LastDetectInFuture {
        /// The stored `last_detect`.
        last_detect: i64,
        /// The check's time.
        now: i64,
    },
    /// A names row whose key has neither a record nor a journal entry.
    OrphanNames {
        /// The names row's key.
        key: String,
    },
    /// The journal holds more entries than its retention allows.
    JournalOverCount {
        /// Entries held.
        entries: u64,
        /// Entries the retention allows.
        max_entries: i64,
    },
    /// A journal entry removed more than the retention's maximum age before the newest one
    /// (unix nanoseconds).
    JournalPastMaxAge {
        /// The entry's record key.
        key: String,
        /// When it was removed.
        removed_at: i64,
        /// The newest entry's removal time.
        newest: i64,
        /// The retention's maximum age in seconds.
        max_age_secs: i64,
    },
    /// Schema 5: an image with more than one open use interval.
    DuplicateOpenUse {
        /// The image's record key.
        key: String,
        /// Its open intervals.
        open: u64,
    },
    /// Schema 5: a use interval last seen before it started (unix nanoseconds).
    UseSeenBeforeStart {
        /// The image's record key.
        key: String,
        /// When the interval started.
        started_at: i64,
        /// When it was last seen.
        last_seen: i64,
    },
    /// Schema 5: the use history (`uses`, closed intervals) or the pull history (`pulls`)
    /// holds more rows than the retention allows; schema 7: `signals` more than its cap.
    HistoryOverCount {
        /// `uses`, `pulls` or `signals`.
        table: &'static str,
        /// Rows held.
        entries: u64,
        /// Rows the retention allows.
        max_entries: i64,
    },
    /// Schema 5: the warm rows' positions are not 0, 1, 2, ...: `position` is where the
    /// first gap or stray row is.
    WarmPositionGap {
        /// Where the first gap or stray row is.
        position: u32,
        /// The position expected there.
        expected: u32,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Undecodable { table, detail } => {
                write!(f, "table {table}: undecodable entry: {detail}")
            }
            Violation::MissingIndexEntry { key } => {
                write!(f, "record {key} has no matching eviction-index entry")
            }
            Violation::StrayIndexEntry { entry } => {
                write!(f, "eviction-index entry {entry} matches no record")
            }
            Violation::MissingSchemaVersion => write!(f, "meta table has no schema version"),
            Violation::Integrity { detail } => write!(f, "redb integrity: {detail}"),
            Violation::FutureStamp {
                key,
                field,
                stamp,
                now,
            } => write_future_stamp(f, key, field, *stamp, *now),
            Violation::OrphanNames { key } => {
                write!(f, "names of {key} belong to no record and no journal entry")
            }
            Violation::JournalOverCount {
                entries,
                max_entries,
            } => write!(
                f,
                "the journal holds {entries} entries, more than its retention of {max_entries}"
            ),
            Violation::JournalPastMaxAge {
                key,
                removed_at,
                newest,
                max_age_secs,
            } => write!(
                f,
                "journal entry of {key} removed at {} is more than {max_age_secs}s before the \
                 newest entry ({}): past its retention",
                format_rfc3339(UnixNanos(*removed_at)),
                format_rfc3339(UnixNanos(*newest))
            ),
            Violation::DuplicateOpenUse { key, open } => write!(
                f,
                "image {key} has {open} open use intervals; at most one may be open"
            ),
            Violation::UseSeenBeforeStart {
                key,
                started_at,
                last_seen,
            } => write!(
                f,
                "use interval of {key} started at {} is last seen before it, at {}",
                format_rfc3339(UnixNanos(*started_at)),
                format_rfc3339(UnixNanos(*last_seen))
            ),
            Violation::HistoryOverCount {
                table,
                entries,
                max_entries,
            } => write!(
                f,
                "table {table} holds {entries} rows, more than its retention of {max_entries}"
            ),
            Violation::WarmPositionGap { position, expected } => write!(
                f,
                "warm row at position {position} where position {expected} was expected: the \
                 warm table is written whole, with no gap"
            ),
            Violation::LastDetectInFuture { last_detect, now } => {
                write_last_detect_in_future(f, *last_detect, *now)
            }
        }
    }
}

/// [`Violation::FutureStamp`]'s message: a journal entry's removal time (retention drops it
/// in time) or a record's stamp (the next detect clamps it).
fn write_future_stamp(
    f: &mut fmt::Formatter<'_>,
    key: &str,
    field: &str,
    stamp: i64,
    now: i64,
) -> fmt::Result {
    if field == JOURNAL_REMOVED_AT {
        write!(
            f,
            "journal entry of {key}: removed at {}, later than now ({}) by more than {}: \
             journaled while the clock was ahead; pruning measures the journal's age from \
             no later than now + {}, and retention drops the entry in time",
            format_rfc3339(UnixNanos(stamp)),
            format_rfc3339(UnixNanos(now)),
            go_duration(FUTURE_STAMP_TOLERANCE),
            go_duration(FUTURE_STAMP_TOLERANCE)
        )
    } else {
        write!(
            f,
            "record {key}: {field} {} is later than now ({}) by more than {}: stamped while \
             the clock was ahead; the agent's next detect clamps it to its time",
            format_rfc3339(UnixNanos(stamp)),
            format_rfc3339(UnixNanos(now)),
            go_duration(FUTURE_STAMP_TOLERANCE)
        )
    }
}

/// [`Violation::LastDetectInFuture`]'s message.
fn write_last_detect_in_future(
    f: &mut fmt::Formatter<'_>,
    last_detect: i64,
    now: i64,
) -> fmt::Result {
    write!(
        f,
        "last_detect {} is later than now ({}) by more than {}: the clock went back since the \
         last detect; the agent's next detect moves it back",
        format_rfc3339(UnixNanos(last_detect)),
        format_rfc3339(UnixNanos(now)),
        go_duration(FUTURE_STAMP_TOLERANCE)
    )
}

/// A row of `table` that does not decode.
fn undecodable(table: &'static str, e: super::DecodeError) -> Violation {
    Violation::Undecodable {
        table,
        detail: e.to_string(),
    }
}

impl Store {
    /// Checks the store's invariants (not redb's page integrity); works on read-only handles.
    pub fn check_invariants(&self) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let txn = self.begin_read()?;
        let images = txn.open_table(IMAGES).map_err(|e| self.redb_err(e))?;
        let index = txn
            .open_table(EVICTION_PREFIX)
            .map_err(|e| self.redb_err(e))?;
        let backoff = txn.open_table(BACKOFF).map_err(|e| self.redb_err(e))?;
        let meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;

        // What the index must hold, as encoded rows, with the first record of each.
        let mut expected: std::collections::BTreeMap<Vec<u8>, RecordKey> =
            std::collections::BTreeMap::new();
        for entry in images.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(key), Ok(record)) => {
                    expected
                        .entry(IndexKey::of(&key, &record).encode())
                        .or_insert(key);
                }
                (Err(e), _) | (_, Err(e)) => violations.push(Violation::Undecodable {
                    table: "images",
                    detail: e.to_string(),
                }),
            }
        }
        for entry in index.iter().map_err(|e| self.redb_err(e))? {
            let (k, _) = entry.map_err(|e| self.redb_err(e))?;
            match k.value().decode() {
                Ok(entry) => {
                    if expected.remove(&entry.encode()).is_none() {
                        violations.push(Violation::StrayIndexEntry {
                            entry: entry.to_string(),
                        });
                    }
                }
                Err(e) => violations.push(Violation::Undecodable {
                    table: "eviction_prefix",
                    detail: e.to_string(),
                }),
            }
        }
        for key in expected.into_values() {
            violations.push(Violation::MissingIndexEntry {
                key: key.to_string(),
            });
        }
        for entry in backoff.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            if let Err(e) = k.value().decode().and_then(|_| v.value().decode()) {
                violations.push(Violation::Undecodable {
                    table: "backoff",
                    detail: e.to_string(),
                });
            }
        }
        let mut has_version = false;
        for entry in meta.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(name), Ok(_)) => has_version |= name.0 == meta_keys::SCHEMA_VERSION,
                (Err(e), _) | (_, Err(e)) => violations.push(Violation::Undecodable {
                    table: "meta",
                    detail: e.to_string(),
                }),
            }
        }
        if !has_version {
            violations.push(Violation::MissingSchemaVersion);
        }
        violations.extend(self.check_journal(&txn)?);
        violations.extend(self.check_history(&txn)?);
        let _ = images.len();
        Ok(violations)
    }

    /// Schema 2's tables: see the module's paragraph.
    fn check_journal(&self, txn: &redb::ReadTransaction) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let images = txn.open_table(IMAGES).map_err(|e| self.redb_err(e))?;
        let journal = txn.open_table(JOURNAL).map_err(|e| self.redb_err(e))?;
        let names = txn.open_table(NAMES).map_err(|e| self.redb_err(e))?;
        let meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;
        let defaults = JournalRetention::default();
        let read = |name: &str| super::read::read_meta(&meta, name).ok().flatten();
        let max_entries =
            read(retention_keys::MAX_ENTRIES).unwrap_or(i64::from(defaults.max_entries));
        let mut journaled: BTreeSet<RecordKey> = BTreeSet::new();
        for entry in journal.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(key), Ok(_)) => {
                    journaled.insert(key.key);
                }
                (Err(e), _) | (_, Err(e)) => violations.push(Violation::Undecodable {
                    table: "journal",
                    detail: e.to_string(),
                }),
            }
        }
        let count = journal.len().map_err(|e| self.redb_err(e))?;
        if i64::try_from(count).unwrap_or(i64::MAX) > max_entries {
            violations.push(Violation::JournalOverCount {
                entries: count,
                max_entries,
            });
        }
        for entry in names.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(key), Ok(_)) => {
                    let has_record = images
                        .get(super::tables::Encoded::new(&key.encode()))
                        .map_err(|e| self.redb_err(e))?
                        .is_some();
                    if !has_record && !journaled.contains(&key) {
                        violations.push(Violation::OrphanNames {
                            key: key.to_string(),
                        });
                    }
                }
                (Err(e), _) | (_, Err(e)) => violations.push(Violation::Undecodable {
                    table: "names",
                    detail: e.to_string(),
                }),
            }
        }
        Ok(violations)
    }

    /// Schema 4's pins and schema 5's tables: see the module's paragraph.
    fn check_history(&self, txn: &redb::ReadTransaction) -> Result<Vec<Violation>, StoreError> {
        let meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;
        let defaults = JournalRetention::default();
        let max_entries = super::read::read_meta(&meta, retention_keys::MAX_ENTRIES)
            .ok()
            .flatten()
            .unwrap_or(i64::from(defaults.max_entries));
        let mut violations = self.check_pins(txn)?;
        violations.extend(self.check_uses(txn, max_entries)?);
        violations.extend(self.check_pulls(txn, max_entries)?);
        violations.extend(self.check_warm(txn)?);
        violations.extend(self.check_runtime_labels(txn)?);
        violations.extend(self.check_signals(txn)?);
        Ok(violations)
    }

    /// Schema 4's pins: every key and value decodes.
    fn check_pins(&self, txn: &redb::ReadTransaction) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let pins = txn.open_table(PINS).map_err(|e| self.redb_err(e))?;
        for entry in pins.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            if let Err(e) = k.value().decode().and_then(|_| v.value().decode()) {
                violations.push(undecodable("pins", e));
            }
        }
        Ok(violations)
    }

    /// The use history: every row decodes, none was last seen before it started, an image
    /// has at most one open interval, and the closed intervals are no more than
    /// `max_entries`.
    fn check_uses(
        &self,
        txn: &redb::ReadTransaction,
        max_entries: i64,
    ) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let uses = txn.open_table(USES).map_err(|e| self.redb_err(e))?;
        let mut open: std::collections::BTreeMap<RecordKey, u64> = Default::default();
        let mut closed = 0u64;
        for entry in uses.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(key), Ok(interval)) => {
                    if interval.last_seen < key.started_at {
                        violations.push(Violation::UseSeenBeforeStart {
                            key: key.key.to_string(),
                            started_at: key.started_at.0,
                            last_seen: interval.last_seen.0,
                        });
                    }
                    if key.closed {
                        closed += 1;
                    } else {
                        *open.entry(key.key).or_default() += 1;
                    }
                }
                (Err(e), _) | (_, Err(e)) => violations.push(undecodable("uses", e)),
            }
        }
        for (key, count) in open.into_iter().filter(|(_, n)| *n > 1) {
            violations.push(Violation::DuplicateOpenUse {
                key: key.to_string(),
                open: count,
            });
        }
        if i64::try_from(closed).unwrap_or(i64::MAX) > max_entries {
            violations.push(Violation::HistoryOverCount {
                table: "uses",
                entries: closed,
                max_entries,
            });
        }
        Ok(violations)
    }

    /// The pull history: every row decodes, and the rows are no more than `max_entries`.
    fn check_pulls(
        &self,
        txn: &redb::ReadTransaction,
        max_entries: i64,
    ) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let pulls = txn.open_table(PULLS).map_err(|e| self.redb_err(e))?;
        for entry in pulls.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            if let Err(e) = k.value().decode().and_then(|_| v.value().decode()) {
                violations.push(undecodable("pulls", e));
            }
        }
        let count = pulls.len().map_err(|e| self.redb_err(e))?;
        if i64::try_from(count).unwrap_or(i64::MAX) > max_entries {
            violations.push(Violation::HistoryOverCount {
                table: "pulls",
                entries: count,
                max_entries,
            });
        }
        Ok(violations)
    }

    /// The warm rows: every row decodes, at positions 0, 1, 2, ... with no gap (the first gap
    /// or stray row is reported, once).
    fn check_warm(&self, txn: &redb::ReadTransaction) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let warm = txn.open_table(WARM).map_err(|e| self.redb_err(e))?;
        let mut expected = 0u32;
        for entry in warm.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            match (k.value().decode(), v.value().decode()) {
                (Ok(position), Ok(_)) => {
                    if position.0 != expected {
                        violations.push(Violation::WarmPositionGap {
                            position: position.0,
                            expected,
                        });
                        break;
                    }
                    expected = expected.saturating_add(1);
                }
                (Err(e), _) | (_, Err(e)) => violations.push(undecodable("warm", e)),
            }
        }
        Ok(violations)
    }

    /// Stamps later than `now` + [`FUTURE_STAMP_TOLERANCE`]: each record's first_detected and
    /// last_used, then `last_detect`. Undecodable entries are left to `check_invariants`.
    pub fn check_clock(&self, now: UnixNanos) -> Result<Vec<Violation>, StoreError> {
        let limit = now.saturating_add(FUTURE_STAMP_TOLERANCE);
        let mut violations = Vec::new();
        let txn = self.begin_read()?;
        let images = txn.open_table(IMAGES).map_err(|e| self.redb_err(e))?;
        for entry in images.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            let (Ok(key), Ok(record)) = (k.value().decode(), v.value().decode()) else {
                continue;
            };
            for (field, stamp) in [
                ("first_detected", record.first_detected),
                ("last_used", record.last_used),
            ] {
                if stamp > limit {
                    violations.push(Violation::FutureStamp {
                        key: key.to_string(),
                        field,
                        stamp: stamp.0,
                        now: now.0,
                    });
                }
            }
        }
        let meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;
        let last_detect = super::read::read_meta(&meta, meta_keys::LAST_DETECT)
            .ok()
            .flatten()
            .map(UnixNanos);
        violations.extend(self.check_journal_clock(&txn, now)?);
        if let Some(last_detect) = last_detect.filter(|&t| t > limit) {
            violations.push(Violation::LastDetectInFuture {
                last_detect: last_detect.0,
                now: now.0,
            });
        }
        Ok(violations)
    }

    /// The journal against the clock: entries removed later than `now` +
    /// [`FUTURE_STAMP_TOLERANCE`] (journaled while the clock was ahead), and entries more than
    /// the retention's maximum age before the reference pruning measures from (the newest
    /// entry, but at most `now` + the tolerance: see `journal::prune_reference`).
    fn check_journal_clock(
        &self,
        txn: &redb::ReadTransaction,
        now: UnixNanos,
    ) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let limit = now.saturating_add(FUTURE_STAMP_TOLERANCE);
        let journal = txn.open_table(JOURNAL).map_err(|e| self.redb_err(e))?;
        let meta = txn.open_table(META).map_err(|e| self.redb_err(e))?;
        let defaults = JournalRetention::default();
        let max_age_secs = super::read::read_meta(&meta, retention_keys::MAX_AGE_SECS)
            .ok()
            .flatten()
            .unwrap_or(i64::try_from(defaults.max_age.as_secs()).unwrap_or(i64::MAX));
        let mut removals: Vec<(i64, RecordKey)> = Vec::new();
        for entry in journal.iter().map_err(|e| self.redb_err(e))? {
            let (k, _) = entry.map_err(|e| self.redb_err(e))?;
            if let Ok(key) = k.value().decode() {
                if key.removed_at > limit {
                    violations.push(Violation::FutureStamp {
                        key: key.key.to_string(),
                        field: JOURNAL_REMOVED_AT,
                        stamp: key.removed_at.0,
                        now: now.0,
                    });
                }
                removals.push((key.removed_at.0, key.key));
            }
        }
        if let Some(newest) = removals.iter().map(|(t, _)| *t).max() {
            let newest = prune_reference(UnixNanos(newest), now).0;
            let max_age = std::time::Duration::from_secs(u64::try_from(max_age_secs).unwrap_or(0));
            let cutoff = age_cutoff(UnixNanos(newest), max_age);
            for (removed_at, key) in &removals {
                if UnixNanos(*removed_at) < cutoff {
                    violations.push(Violation::JournalPastMaxAge {
                        key: key.to_string(),
                        removed_at: *removed_at,
                        newest,
                        max_age_secs,
                    });
                }
            }
        }
        Ok(violations)
    }

    /// [`Store::check`] and [`Store::check_clock`] at `now`: what `inspect check` reports.
    pub fn check_at(&mut self, now: UnixNanos) -> Result<Vec<Violation>, StoreError> {
        let mut violations = self.check()?;
        violations.extend(self.check_clock(now)?);
        Ok(violations)
    }

    /// Checks the store's invariants and, on a read-write handle, redb's integrity; no clock
    /// (see [`Store::check_at`]).
    pub fn check(&mut self) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let handle = self.handle.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Handle::Write(db) = handle {
            match db.check_integrity() {
                Ok(true) => {}
                Ok(false) => violations.push(Violation::Integrity {
                    detail: "the file was damaged and has been repaired".to_owned(),
                }),
                Err(e) => violations.push(Violation::Integrity {
                    detail: e.to_string(),
                }),
            }
        }
        violations.extend(self.check_invariants()?);
        Ok(violations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ImageRecord, RecordKey};
    use crate::store::Batch;

    const NOW: i64 = 1_800_000_000;
    const YEAR: i64 = 365 * 24 * 3600;

    fn record(first: i64, last: i64) -> ImageRecord {
        ImageRecord {
            first_detected: UnixNanos::from_secs(first),
            last_used: UnixNanos::from_secs(last),
            size: 1,
            pinned: false,
        }
    }

    /// A store holding what a clock a year ahead leaves: `ahead` stamped at NOW + a year on
    /// both fields, `used` first seen long ago and used a year ahead, `near` within the
    /// tolerance, and `last_detect` a year ahead.
    fn store_stamped_ahead() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("records.redb"), UnixNanos::from_secs(NOW))
            .expect("open store");
        let mut batch = Batch::new();
        batch.upsert(RecordKey::new("ahead", ""), record(NOW + YEAR, NOW + YEAR));
        batch.upsert(RecordKey::new("used", ""), record(NOW - YEAR, NOW + YEAR));
        batch.upsert(RecordKey::new("near", ""), record(NOW + 600, NOW + 600));
        batch.set_meta(meta_keys::LAST_DETECT, UnixNanos::from_secs(NOW + YEAR).0);
        store.apply(&batch).expect("apply");
        (dir, store)
    }

    fn future_stamps(violations: &[Violation]) -> Vec<(String, &'static str)> {
        violations
            .iter()
            .filter_map(|v| match v {
                Violation::FutureStamp { key, field, .. } => Some((key.clone(), *field)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn check_at_reports_stamps_and_a_last_detect_later_than_now_beyond_the_tolerance() {
        let (_dir, mut store) = store_stamped_ahead();
        let violations = store.check_at(UnixNanos::from_secs(NOW)).expect("check");
        assert_eq!(
            future_stamps(&violations),
            vec![
                ("ahead".to_owned(), "first_detected"),
                ("ahead".to_owned(), "last_used"),
                ("used".to_owned(), "last_used"),
            ],
            "{violations:?}"
        );
        let last_detect = Violation::LastDetectInFuture {
            last_detect: UnixNanos::from_secs(NOW + YEAR).0,
            now: UnixNanos::from_secs(NOW).0,
        };
        assert!(violations.contains(&last_detect), "{violations:?}");
        assert_eq!(violations.len(), 4, "{violations:?}");
        let message = last_detect.to_string();
        assert!(
            message.contains("the clock went back") && message.contains("10m0s"),
            "{message}"
        );
        // The structural check has no clock and finds nothing wrong.
        assert!(store.check().expect("check").is_empty());
        // Once the clock has caught up, nothing is in the future.
        assert!(
            store
                .check_at(UnixNanos::from_secs(NOW + YEAR))
                .expect("check")
                .is_empty()
        );
    }

    /// The store's clamp op: stamps after the limit become `now`, the eviction index follows
    /// (the structural check stays clean) and check_at no longer reports them.
    #[test]
    fn clamp_future_fixes_what_check_at_reports_and_keeps_the_index_in_step() {
        let (_dir, mut store) = store_stamped_ahead();
        let now = UnixNanos::from_secs(NOW);
        let limit = now.saturating_add(FUTURE_STAMP_TOLERANCE);
        let mut batch = Batch::new();
        for id in ["ahead", "used", "near", "absent"] {
            batch.clamp_future(RecordKey::new(id, ""), limit, now);
        }
        batch.set_meta(meta_keys::LAST_DETECT, now.0);
        assert!(store.apply(&batch).expect("apply"));
        let get = |id: &str| store.get(&RecordKey::new(id, "")).expect("get");
        assert_eq!(get("ahead"), Some(record(NOW, NOW)));
        assert_eq!(get("used"), Some(record(NOW - YEAR, NOW)));
        assert_eq!(get("near"), Some(record(NOW + 600, NOW + 600)));
        assert_eq!(get("absent"), None);
        assert!(store.check_at(now).expect("check").is_empty());
        // Clamping again changes nothing and commits nothing.
        let commits = store.commits();
        assert!(!store.apply(&batch).expect("apply"));
        assert_eq!(store.commits(), commits);
    }
}
