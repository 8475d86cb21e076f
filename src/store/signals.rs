//! Schema 7's `signals` table inside the store: the changes the agent saw in what the cluster
//! declared (CronJobs, pods bound to the node, rollouts), each as a workload trace's signal
//! line would state it, keyed by when the agent saw it (`migrations/0007_signals.md`).
//!
//! Invariants: [`Store::append_signals`] writes a whole slice in one durable transaction or
//! nothing (every entry is checked first: [`RecordedSignal::invalid`]); entries of the same
//! instant keep their order (the key's `seq`); the table holds at most [`MAX_SIGNAL_ENTRIES`]
//! rows, the oldest dropped past it in the same transaction; `Store::check` verifies every row
//! decodes and the cap holds.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use redb::{ReadableTable, ReadableTableMetadata};

use super::codec::{Codec, SignalKey};
use super::tables::{Encoded, SIGNALS, Stored};
use super::{Store, StoreError, TxnError, Violation};
use crate::model::{MAX_SIGNAL_ENTRIES, RecordedSignal, SignalEntry, SignalKind, UnixNanos};

type SignalsTable<'t> = redb::Table<'t, Stored<SignalKey>, Stored<RecordedSignal>>;

/// The next free key of instant `at`: after the last row of that instant.
fn next_key(table: &SignalsTable<'_>, at: UnixNanos) -> Result<SignalKey, TxnError> {
    let first = SignalKey { at, seq: 0 }.encode();
    let last = SignalKey { at, seq: u32::MAX }.encode();
    let taken = table
        .range(Encoded::new(&first)..=Encoded::new(&last))?
        .next_back()
        .transpose()?;
    let seq = match taken {
        Some((k, _)) => k
            .value()
            .decode()
            .map_err(TxnError::Decode)?
            .seq
            .saturating_add(1),
        None => 0,
    };
    Ok(SignalKey { at, seq })
}

/// Writes `entries` after the rows already there, then drops the oldest past the cap.
fn append(table: &mut SignalsTable<'_>, entries: &[SignalEntry]) -> Result<(), TxnError> {
    for entry in entries {
        let key = next_key(table, entry.at)?.encode();
        let value = entry.signal.encode();
        table.insert(Encoded::new(&key), Encoded::new(&value))?;
    }
    let len = usize::try_from(table.len()?).unwrap_or(usize::MAX);
    for _ in 0..len.saturating_sub(MAX_SIGNAL_ENTRIES) {
        table.pop_first()?;
    }
    Ok(())
}

impl Store {
    /// Appends `entries` (in their order) to the signals the agent saw, in one durable write
    /// transaction, dropping the oldest rows past [`MAX_SIGNAL_ENTRIES`]. An entry the store
    /// refuses ([`RecordedSignal::invalid`]) is [`StoreError::InvalidKey`] and nothing is
    /// written; an empty slice commits nothing.
    pub fn append_signals(&self, entries: &[SignalEntry]) -> Result<(), StoreError> {
        for entry in entries {
            if let Some(reason) = entry.signal.invalid() {
                return Err(StoreError::InvalidKey {
                    key: entry.signal.key().1.chars().take(80).collect(),
                    reason,
                });
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        self.guarded(|| self.append_signals_once(entries))
    }

    fn append_signals_once(&self, entries: &[SignalEntry]) -> Result<(), StoreError> {
        // Held for the whole transaction: a reopen never drops a handle mid-commit.
        let handle = self.read_handle();
        let txn = self.begin_store_write(&handle)?;
        {
            let mut table = txn.open_table(SIGNALS).map_err(|e| self.redb_err(e))?;
            append(&mut table, entries).map_err(|e| self.wrap(e))?;
        }
        txn.commit().map_err(|e| self.redb_err(e))?;
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Every signal the agent recorded (schema 7), oldest first (entries of one instant in the
    /// order they were appended).
    pub fn signals(&self) -> Result<Vec<SignalEntry>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(SIGNALS))?
            .into_iter()
            .map(|(key, signal)| SignalEntry { at: key.at, signal })
            .collect())
    }

    /// The last line of each signal of `kind` named in `names` that the table still holds
    /// (the one [`Store::signals`] reads last of its key), in the table's order from the
    /// newest: a scan from the newest row that stops once every name is found. A name whose
    /// lines were all dropped past [`MAX_SIGNAL_ENTRIES`] is not in the answer.
    pub fn last_signals(
        &self,
        kind: SignalKind,
        names: &BTreeSet<String>,
    ) -> Result<Vec<RecordedSignal>, StoreError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, SIGNALS)?;
            let mut found = Vec::new();
            let mut left: BTreeSet<&str> = names.iter().map(String::as_str).collect();
            for entry in table.iter().map_err(|e| self.redb_err(e))?.rev() {
                let (_, v) = entry.map_err(|e| self.redb_err(e))?;
                let signal = v.value().decode().map_err(|e| self.decode_err(e))?;
                let (signal_kind, name) = signal.key();
                if signal_kind == kind && left.remove(name) {
                    found.push(signal);
                    if left.is_empty() {
                        break;
                    }
                }
            }
            Ok(found)
        })
    }

    /// Schema 7's signals: every key and value decodes, and there are no more than
    /// [`MAX_SIGNAL_ENTRIES`].
    pub(super) fn check_signals(
        &self,
        txn: &redb::ReadTransaction,
    ) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let table = txn.open_table(SIGNALS).map_err(|e| self.redb_err(e))?;
        let mut entries = 0u64;
        for entry in table.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            entries += 1;
            if let Err(e) = k.value().decode().and_then(|_| v.value().decode()) {
                violations.push(Violation::Undecodable {
                    table: "signals",
                    detail: e.to_string(),
                });
            }
        }
        let max_entries = i64::try_from(MAX_SIGNAL_ENTRIES).unwrap_or(i64::MAX);
        if i64::try_from(entries).unwrap_or(i64::MAX) > max_entries {
            violations.push(Violation::HistoryOverCount {
                table: "signals",
                entries,
                max_entries,
            });
        }
        Ok(violations)
    }
}

#[cfg(test)]
#[path = "signals_tests.rs"]
mod tests;
