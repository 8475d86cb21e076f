//! Schema 2's eviction journal and image names, inside the store's write transactions.
//!
//! Invariants:
//! - a record deleted by imagekeeper (`BatchOp::Evict`) or found gone by detect
//!   (`BatchOp::RemoveUnlisted` with `journal_at`) gets its journal entry in the same
//!   transaction as its deletion;
//! - the journal is pruned in every transaction that writes it: entries more than
//!   `max_age` before the reference time, then the oldest beyond `max_entries`, never an entry
//!   the transaction itself wrote or marked re-pulled; the reference is the newest entry, but at most the
//!   transaction's `now` + `FUTURE_STAMP_TOLERANCE` (so one entry journaled while the clock
//!   was ahead does not age out, or push out by count, every later one); the retention
//!   in force is written to `meta` (`journal_max_age_secs`, `journal_max_entries`) in the same
//!   transaction, so `Store::check` can verify it without a clock;
//! - a containerd leftover `prune --orphans` removed (`BatchOp::JournalLeftover`) is journaled
//!   with reason orphan under its `model::leftover_key`, which no record or names row shares;
//! - a names row lives while the record of its key or a journal entry of its key does;
//! - a record created by a pull's mark or a detect's sighting whose image id has a journal
//!   entry within retention, not marked yet, marks the newest such entry re-pulled with its
//!   time (the regret), and the transaction reports it ([`super::Applied::repulls`]).
//!
//! The journal is bounded (10,000 entries by default). Which keys it holds is known without
//! reading it (`journal_keys.rs`), so a removal's names and a prune's kept names read no
//! entry, and a regret lookup reads entries only for an image the journal has entries of:
//! newest first, back to the retention's age or that image's first unmarked entry.

use std::collections::BTreeSet;
use std::time::Duration;

use redb::{ReadableTable, ReadableTableMetadata};

use super::TxnError;
use super::codec::{Codec, JournalKey};
use super::history_mirror::HistoryLog;
use super::journal_keys::JournalKeys;
use super::rows::{ImagesTable, MetaTable, get_record, put_meta};
use super::tables::{Encoded, Stored};
use crate::model::{
    EvictionNote, FUTURE_STAMP_TOLERANCE, ImageNames, ImageRecord, JournalEntry, JournalRetention,
    RecordKey, Remover, Repull, UnixNanos, duration_nanos,
};

pub(super) type JournalTable<'t> = redb::Table<'t, Stored<JournalKey>, Stored<JournalEntry>>;
pub(super) type NamesTable<'t> = redb::Table<'t, Stored<RecordKey>, Stored<ImageNames>>;

/// Names of the meta entries holding the retention in force.
pub mod retention_keys {
    /// The journal's maximum age, in seconds.
    pub const MAX_AGE_SECS: &str = "journal_max_age_secs";
    /// The journal's maximum number of entries.
    pub const MAX_ENTRIES: &str = "journal_max_entries";
}

/// The journal entry of a removal of `record`.
pub(super) fn entry_of(
    record: &ImageRecord,
    remover: Remover,
    note: Option<&EvictionNote>,
) -> JournalEntry {
    JournalEntry {
        size: record.size,
        first_detected: record.first_detected,
        last_used: record.last_used,
        reason: note.map(|n| n.reason),
        rank: note.map(|n| n.rank),
        fs: note.and_then(|n| n.fs),
        remover,
        repulled_at: None,
    }
}

/// Writes `entry` at `key`; returns whether the key is new (not an entry rewritten).
pub(super) fn put_entry(
    journal: &mut JournalTable<'_>,
    key: &JournalKey,
    entry: &JournalEntry,
    log: &mut HistoryLog,
) -> Result<bool, TxnError> {
    let old = journal.insert(Encoded::new(&key.encode()), Encoded::new(&entry.encode()))?;
    log.journal_put(key, entry);
    Ok(old.is_none())
}

/// After a record's deletion without a journal entry: drops its names unless a journal entry
/// of the key keeps them (`keys`: the journal's keys, see `journal_keys.rs`).
pub(super) fn forget_names(
    names: &mut NamesTable<'_>,
    keys: &JournalKeys,
    key: &RecordKey,
) -> Result<bool, TxnError> {
    let k = key.encode();
    if names.get(Encoded::new(&k))?.is_none() || keys.holds(key) {
        return Ok(false);
    }
    names.remove(Encoded::new(&k))?;
    Ok(true)
}

/// Sets a record's names if the record exists and they differ; returns whether it wrote.
pub(super) fn set_names(
    names: &mut NamesTable<'_>,
    images: &ImagesTable<'_>,
    key: &RecordKey,
    next: &ImageNames,
) -> Result<bool, TxnError> {
    if get_record(images, key)?.is_none() {
        return Ok(false);
    }
    let k = key.encode();
    let old = match names.get(Encoded::new(&k))? {
        Some(g) => Some(g.value().decode().map_err(TxnError::Decode)?),
        None => None,
    };
    if old.as_ref() == Some(next) || (old.is_none() && next.is_empty()) {
        return Ok(false);
    }
    names.insert(Encoded::new(&k), Encoded::new(&next.encode()))?;
    Ok(true)
}

/// Records the retention in force in `meta` (the prune's rule, for `Store::check`).
pub(super) fn record_retention(
    meta: &mut MetaTable<'_>,
    retention: JournalRetention,
) -> Result<(), TxnError> {
    put_meta(
        meta,
        retention_keys::MAX_AGE_SECS,
        i64::try_from(retention.max_age.as_secs()).unwrap_or(i64::MAX),
    )?;
    put_meta(
        meta,
        retention_keys::MAX_ENTRIES,
        i64::from(retention.max_entries),
    )?;
    Ok(())
}

/// Prunes the journal to `retention` (see the module's invariants), `keys` with it; drops
/// the names only pruned entries kept. Returns the keys of the entries it removed (none:
/// nothing changed). (The retention is recorded in `meta` by [`record_retention`], in the
/// same transaction.)
pub(super) fn prune(
    journal: &mut JournalTable<'_>,
    names: &mut NamesTable<'_>,
    images: &ImagesTable<'_>,
    keys: &mut JournalKeys,
    retention: JournalRetention,
    now: UnixNanos,
    fresh: &BTreeSet<JournalKey>,
) -> Result<Vec<JournalKey>, TxnError> {
    let newest = match journal.last()? {
        Some((k, _)) => k.value().decode().map_err(TxnError::Decode)?.removed_at,
        None => return Ok(Vec::new()),
    };
    let cutoff = age_cutoff(prune_reference(newest, now), retention.max_age);
    let mut doomed: Vec<JournalKey> = Vec::new();
    let len = usize::try_from(journal.len()?).unwrap_or(usize::MAX);
    let surplus = len.saturating_sub(retention.max_entries as usize);
    for row in journal.iter()? {
        let (k, _) = row?;
        let key = k.value().decode().map_err(TxnError::Decode)?;
        if fresh.contains(&key) {
            continue;
        }
        if doomed.len() < surplus || key.removed_at < cutoff {
            doomed.push(key);
        } else {
            break;
        }
    }
    let mut removed = Vec::with_capacity(doomed.len());
    for key in doomed {
        if journal.remove(Encoded::new(&key.encode()))?.is_some() {
            keys.removed(&key.key);
            removed.push(key);
        }
    }
    let pruned: BTreeSet<&RecordKey> = removed.iter().map(|k| &k.key).collect();
    for key in pruned.into_iter().filter(|k| !keys.holds(k)) {
        if get_record(images, key)?.is_none() {
            names.remove(Encoded::new(&key.encode()))?;
        }
    }
    Ok(removed)
}

/// The time the journal's age is measured from: the newest entry's, but no later than `now`
/// + [`FUTURE_STAMP_TOLERANCE`] (an entry journaled while the clock was ahead).
pub fn prune_reference(newest: UnixNanos, now: UnixNanos) -> UnixNanos {
    newest.min(now.saturating_add(FUTURE_STAMP_TOLERANCE))
}

/// The oldest removal time retention keeps, given the newest.
pub fn age_cutoff(newest: UnixNanos, max_age: Duration) -> UnixNanos {
    UnixNanos(newest.0.saturating_sub(duration_nanos(max_age)))
}

/// Marks the newest unmarked journal entry of `key`'s image id removed within `max_age`
/// before `now` as re-pulled at `now`; returns it. Reads nothing when `keys` has no entry of
/// the image; else the journal newest first, keys only, stopping at the first entry older
/// than the window: at most the window's entries (the journal is bounded).
pub(super) fn mark_repull(
    journal: &mut JournalTable<'_>,
    keys: &JournalKeys,
    key: &RecordKey,
    now: UnixNanos,
    max_age: Duration,
    rows_read: &mut u64,
    log: &mut HistoryLog,
) -> Result<Option<Repull>, TxnError> {
    if !keys.holds_image(&key.image_id) {
        // No entry of the image at all: nothing to read (a new image's record, the common
        // case, costs no journal read).
        return Ok(None);
    }
    let cutoff = age_cutoff(now, max_age);
    let mut found: Option<(JournalKey, JournalEntry)> = None;
    for row in journal.iter()?.rev() {
        *rows_read += 1;
        let (k, v) = row?;
        let jkey = k.value().decode().map_err(TxnError::Decode)?;
        if jkey.removed_at < cutoff {
            break;
        }
        if jkey.key.image_id != key.image_id {
            continue;
        }
        let entry = v.value().decode().map_err(TxnError::Decode)?;
        if entry.repulled_at.is_none() {
            found = Some((jkey, entry));
            break;
        }
    }
    let Some((jkey, mut entry)) = found else {
        return Ok(None);
    };
    entry.repulled_at = Some(now);
    put_entry(journal, &jkey, &entry, log)?;
    Ok(Some(Repull {
        key: jkey.key,
        removed_at: jkey.removed_at,
        reason: entry.reason,
        remover: entry.remover,
        delay: now.since(jkey.removed_at),
    }))
}

#[cfg(test)]
mod tests;
