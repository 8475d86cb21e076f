//! Schema 5's use and pull history and the warm set's state, inside the store's write
//! transactions (`migrations/0005_use_and_pull_history.md`).
//!
//! Invariants:
//! - an image has at most one open use interval; a detect's `ObserveUses` closes every open
//!   interval of an image no running container uses, keeps the others open (moving their
//!   `last_seen`, never back) and opens one for each image newly in use, so a long-running
//!   container is one row however many cycles see it;
//! - every interval's `last_seen` is at or after its start (a clock gone back moves neither);
//! - the closed intervals and the pulls are pruned to the journal's retention (its maximum age
//!   from the transaction's `now`, then the oldest beyond its maximum count) in every
//!   transaction that writes them; open intervals are never pruned (they are in use now);
//! - the warm table is replaced as a whole, in one transaction, only when it differs.
//!
//! Both histories are bounded (10,000 closed intervals and 10,000 pulls by default), so the
//! prunes read at most that many keys; the open intervals are a short prefix range.

use std::collections::{BTreeMap, BTreeSet};

use redb::{ReadableTable, ReadableTableMetadata};

use super::TxnError;
use super::codec::{Codec, WarmPosition, closed_uses_prefix};
use super::history_mirror::HistoryLog;
use super::journal::age_cutoff;
use super::tables::{Encoded, Stored};
use crate::model::{
    JournalRetention, PullEntry, PullKey, RecordKey, UnixNanos, UseInterval, UseKey, WarmRow,
};

pub(super) type UsesTable<'t> = redb::Table<'t, Stored<UseKey>, Stored<UseInterval>>;
pub(super) type PullsTable<'t> = redb::Table<'t, Stored<PullKey>, Stored<PullEntry>>;
pub(super) type WarmTable<'t> = redb::Table<'t, Stored<WarmPosition>, Stored<WarmRow>>;

/// The open intervals, in key order (a prefix range: open keys sort first).
fn open_uses(uses: &UsesTable<'_>) -> Result<Vec<(UseKey, UseInterval)>, TxnError> {
    let end = closed_uses_prefix();
    let mut out = Vec::new();
    for row in uses.range::<Encoded<UseKey>>(..Encoded::new(&end))? {
        let (k, v) = row?;
        let key = k.value().decode().map_err(TxnError::Decode)?;
        let value = v.value().decode().map_err(TxnError::Decode)?;
        out.push((key, value));
    }
    Ok(out)
}

fn put_use(
    uses: &mut UsesTable<'_>,
    key: &UseKey,
    value: UseInterval,
    log: &mut HistoryLog,
) -> Result<(), TxnError> {
    uses.insert(Encoded::new(&key.encode()), Encoded::new(&value.encode()))?;
    log.use_put(key, value.last_seen);
    Ok(())
}

/// Closes the open interval `key`: the row moves to the closed range with its `last_seen`. A
/// closed interval of the same start and image already there (the same use closed twice)
/// keeps the later `last_seen`.
fn close(
    uses: &mut UsesTable<'_>,
    key: &UseKey,
    value: UseInterval,
    log: &mut HistoryLog,
) -> Result<(), TxnError> {
    uses.remove(Encoded::new(&key.encode()))?;
    log.use_removed(key);
    let closed = UseKey {
        closed: true,
        ..key.clone()
    };
    let k = closed.encode();
    let last_seen = match uses.get(Encoded::new(&k))? {
        Some(g) => {
            let old: UseInterval = g.value().decode().map_err(TxnError::Decode)?;
            old.last_seen.max(value.last_seen)
        }
        None => value.last_seen,
    };
    put_use(uses, &closed, UseInterval { last_seen }, log)
}

/// [`super::BatchOp::ObserveUses`]. Returns whether anything changed.
pub(super) fn observe_uses(
    uses: &mut UsesTable<'_>,
    now: UnixNanos,
    in_use: &[RecordKey],
    log: &mut HistoryLog,
) -> Result<bool, TxnError> {
    let wanted: BTreeSet<&RecordKey> = in_use.iter().collect();
    let mut open_keys: BTreeSet<RecordKey> = BTreeSet::new();
    let mut changed = false;
    for (key, value) in open_uses(uses)? {
        if wanted.contains(&key.key) {
            open_keys.insert(key.key.clone());
            changed |= touch(uses, &key, value, now, log)?;
        } else {
            close(uses, &key, value, log)?;
            changed = true;
        }
    }
    for key in wanted {
        if !open_keys.contains(key) {
            open(uses, key, now, log)?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Moves an open interval's `last_seen` to `now` if that is later.
fn touch(
    uses: &mut UsesTable<'_>,
    key: &UseKey,
    value: UseInterval,
    now: UnixNanos,
    log: &mut HistoryLog,
) -> Result<bool, TxnError> {
    if now <= value.last_seen {
        return Ok(false);
    }
    put_use(uses, key, UseInterval { last_seen: now }, log)?;
    Ok(true)
}

fn open(
    uses: &mut UsesTable<'_>,
    key: &RecordKey,
    now: UnixNanos,
    log: &mut HistoryLog,
) -> Result<(), TxnError> {
    let k = UseKey {
        closed: false,
        started_at: now,
        key: key.clone(),
    };
    put_use(uses, &k, UseInterval { last_seen: now }, log)
}

/// The open intervals of the image `key` only, in key order: the other open rows are not
/// decoded (a use key is `[layout][closed][started_at: 8][record key]`, `codec.rs`; issue 41:
/// decoding every open interval at every container event was a sixth of a simulation).
fn open_uses_of(
    uses: &UsesTable<'_>,
    key: &RecordKey,
) -> Result<Vec<(UseKey, UseInterval)>, TxnError> {
    let end = closed_uses_prefix();
    let wanted = key.encode();
    let mut out = Vec::new();
    for row in uses.range::<Encoded<UseKey>>(..Encoded::new(&end))? {
        let (k, v) = row?;
        if k.value().bytes().get(10..) != Some(wanted.as_slice()) {
            continue;
        }
        let key = k.value().decode().map_err(TxnError::Decode)?;
        let value = v.value().decode().map_err(TxnError::Decode)?;
        out.push((key, value));
    }
    Ok(out)
}

/// [`super::BatchOp::OpenUse`]. Returns whether anything changed.
pub(super) fn open_use(
    uses: &mut UsesTable<'_>,
    key: &RecordKey,
    now: UnixNanos,
    log: &mut HistoryLog,
) -> Result<bool, TxnError> {
    let mut found = false;
    let mut changed = false;
    for (k, value) in open_uses_of(uses, key)? {
        debug_assert!(k.key == *key, "open_uses_of keeps the rows of its key only");
        found = true;
        changed |= touch(uses, &k, value, now, log)?;
    }
    if !found {
        open(uses, key, now, log)?;
        changed = true;
    }
    Ok(changed)
}

/// Prunes the closed intervals: those whose `last_seen` is more than `retention.max_age`
/// before `now`, then the oldest (by start) beyond `retention.max_entries`. Returns whether
/// it removed any.
pub(super) fn prune_uses(
    uses: &mut UsesTable<'_>,
    retention: JournalRetention,
    now: UnixNanos,
    log: &mut HistoryLog,
) -> Result<bool, TxnError> {
    let cutoff = age_cutoff(now, retention.max_age);
    // Counted, not decoded: only their number matters here.
    let mut open = 0usize;
    for row in uses.range::<Encoded<UseKey>>(..Encoded::new(&closed_uses_prefix()))? {
        row?;
        open += 1;
    }
    let total = usize::try_from(uses.len()?).unwrap_or(usize::MAX);
    let closed = total.saturating_sub(open);
    let surplus = closed.saturating_sub(retention.max_entries as usize);
    let start = closed_uses_prefix();
    let mut doomed: Vec<(Vec<u8>, UseKey)> = Vec::new();
    let mut counted = 0usize;
    for row in uses.range::<Encoded<UseKey>>(Encoded::new(&start)..)? {
        let (k, v) = row?;
        let key: UseKey = k.value().decode().map_err(TxnError::Decode)?;
        if counted >= surplus && key.started_at >= cutoff {
            // Every later row started at or after the cutoff, so was seen after it too.
            break;
        }
        let value: UseInterval = v.value().decode().map_err(TxnError::Decode)?;
        if counted < surplus || value.last_seen < cutoff {
            doomed.push((k.value().bytes().to_vec(), key));
            counted += 1;
        }
    }
    for (k, key) in &doomed {
        uses.remove(Encoded::new(k))?;
        log.use_removed(key);
    }
    Ok(!doomed.is_empty())
}

/// [`super::BatchOp::RecordPull`]'s write (the prune is [`prune_pulls`]). Returns whether it
/// changed the row.
pub(super) fn record_pull(
    pulls: &mut PullsTable<'_>,
    key: &PullKey,
    entry: &PullEntry,
    log: &mut HistoryLog,
) -> Result<bool, TxnError> {
    let k = key.encode();
    let v = entry.encode();
    let same = match pulls.get(Encoded::new(&k))? {
        Some(g) => g.value().bytes() == v.as_slice(),
        None => false,
    };
    if !same {
        pulls.insert(Encoded::new(&k), Encoded::new(&v))?;
        log.pull_put(key);
    }
    Ok(!same)
}

/// Prunes the pulls: those more than `retention.max_age` before `now`, then the oldest beyond
/// `retention.max_entries`. Returns whether it removed any.
pub(super) fn prune_pulls(
    pulls: &mut PullsTable<'_>,
    retention: JournalRetention,
    now: UnixNanos,
    log: &mut HistoryLog,
) -> Result<bool, TxnError> {
    let cutoff = age_cutoff(now, retention.max_age);
    let len = usize::try_from(pulls.len()?).unwrap_or(usize::MAX);
    let surplus = len.saturating_sub(retention.max_entries as usize);
    // The doomed rows are the first ones in key order (the oldest): each is popped as it is
    // looked at, so no list of them is held (a first detect of 100k images writes 100k
    // `detected` pulls and prunes 90k of them in its own transaction: issue 40).
    let mut removed = 0usize;
    loop {
        let doomed = match pulls.first()? {
            Some((k, _)) => {
                let key: PullKey = k.value().decode().map_err(TxnError::Decode)?;
                (removed < surplus || key.at < cutoff).then_some(key)
            }
            None => None,
        };
        let Some(key) = doomed else {
            break;
        };
        pulls.pop_first()?;
        log.pull_removed(key);
        removed += 1;
    }
    Ok(removed > 0)
}

/// [`super::BatchOp::ReplaceWarm`]: the table becomes exactly `rows` (row `i` at position
/// `i`), written only when it differs. Returns whether it changed.
pub(super) fn replace_warm(warm: &mut WarmTable<'_>, rows: &[WarmRow]) -> Result<bool, TxnError> {
    let mut stored: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for row in warm.iter()? {
        let (k, v) = row?;
        stored.insert(k.value().bytes().to_vec(), v.value().bytes().to_vec());
    }
    let mut next: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let position = WarmPosition(u32::try_from(i).unwrap_or(u32::MAX));
        next.insert(position.encode(), row.encode());
    }
    if stored == next {
        return Ok(false);
    }
    for k in stored.keys() {
        if !next.contains_key(k) {
            warm.remove(Encoded::new(k))?;
        }
    }
    for (k, v) in &next {
        if stored.get(k) != Some(v) {
            warm.insert(Encoded::new(k), Encoded::new(v))?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
