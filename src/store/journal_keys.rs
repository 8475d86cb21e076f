//! The journal's record keys in memory, each with its number of entries: which images the
//! journal holds entries of, answered without reading the journal (issue 53 item 4: a regret
//! lookup read the journal newest first for every record a transaction created, a removal's
//! names and a prune's kept names read it whole, so every simulated step cost in proportion to
//! the history).
//!
//! Invariants:
//! - while the [`Store`](super::Store) holds it, it is exactly the committed journal's keys
//!   and entry counts. A write transaction takes it (under its lock, held for the whole
//!   transaction), updates it with every entry it writes or removes, and gives it back only
//!   after its commit, or after an abort if it wrote nothing to the journal; a transaction
//!   that fails drops it;
//! - every other writer of the journal (a migration, a reopened handle, raw test writes)
//!   drops it ([`Store::forget_journal_keys`](super::Store)); the next transaction that needs
//!   it builds it from its own view of the journal: one read of at most the retention's
//!   entries (10,000 by default), the same bound that holds its memory (about 150 bytes a key).

use std::collections::BTreeMap;

use redb::ReadableTable;

use super::TxnError;
use super::codec::JournalKey;
use super::tables::Stored;
use crate::model::{ImageId, JournalEntry, RecordKey};

/// The journal's record keys and how many entries each has.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct JournalKeys {
    counts: BTreeMap<RecordKey, u32>,
}

impl JournalKeys {
    /// The keys of `journal` as the transaction reading it sees them.
    /// Counts the entries read in `rows_read`.
    pub(super) fn build(
        journal: &redb::Table<'_, Stored<JournalKey>, Stored<JournalEntry>>,
        rows_read: &mut u64,
    ) -> Result<JournalKeys, TxnError> {
        let mut keys = JournalKeys::default();
        for row in journal.iter()? {
            *rows_read += 1;
            let (k, _) = row?;
            keys.added(&k.value().decode().map_err(TxnError::Decode)?.key);
        }
        Ok(keys)
    }

    /// Whether the journal has an entry of `key`.
    pub(super) fn holds(&self, key: &RecordKey) -> bool {
        self.counts.contains_key(key)
    }

    /// Whether the journal has an entry of any key of image `id` (any runtime handler).
    pub(super) fn holds_image(&self, id: &ImageId) -> bool {
        let from = RecordKey {
            image_id: id.clone(),
            runtime_handler: String::new(),
        };
        self.counts
            .range(from..)
            .next()
            .is_some_and(|(k, _)| k.image_id == *id)
    }

    /// A new entry of `key` was written.
    pub(super) fn added(&mut self, key: &RecordKey) {
        *self.counts.entry(key.clone()).or_insert(0) += 1;
    }

    /// An entry of `key` was removed.
    pub(super) fn removed(&mut self, key: &RecordKey) {
        if let Some(count) = self.counts.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.counts.remove(key);
            }
        }
    }
}
