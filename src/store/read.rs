//! The store's reads: point lookups and whole-table scans of the records, backoff, pins, the
//! use and pull histories, the warm rows, the journal and `meta` (the names table's reads are
//! `names.rs`, the eviction walk `eviction.rs`, the key-ordered record scan `scan.rs`). Each
//! public read runs in one read transaction under [`Store::guarded`] (an unhealthy store
//! reopens first; a call that meets redb's latched I/O error reopens and runs once more), and
//! every key and value it returns is decoded through `codec`: bad bytes are
//! [`StoreError::Decode`], never a panic. The filtered scans (`uses_of`, `pulls_of`,
//! `journal_repulled`) test each row's raw bytes (or, for the journal, its decoded entry)
//! first and return the rows the unfiltered scan would, in its order. The journal's retention
//! in force on this handle, which every transaction writing the journal applies, is set and
//! read here too.

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use super::codec::{self, BackoffKey, Codec, JournalKey, MetaKey, MetaValue};
use super::tables::{
    BACKOFF, Encoded, IMAGES, JOURNAL, META, PINS, PULLS, RUNTIME_LABELS, Stored, USES, WARM,
};
use super::{Store, StoreError, StoredRecord, TxnError};
use crate::model::{
    BackoffEntry, ImagePin, ImageRecord, JournalEntry, JournalRetention, PinKey, PullEntry,
    PullKey, RecordKey, RuntimeLabel, UseInterval, UseKey, WarmRow,
};

impl Store {
    /// The record of `key`, if any.
    pub fn get(&self, key: &RecordKey) -> Result<Option<ImageRecord>, StoreError> {
        self.guarded(|| self.point_get(IMAGES, key))
    }

    /// The records of `keys`, in their order (`None` where there is none), read in one read
    /// transaction: a ranking that looks up every listed image pays one transaction, not one
    /// per image (at 100k images the per-image transactions were most of a predictive walk).
    /// Keys in strictly ascending order (a detect's list is) are read by one range scan
    /// merged with them (`Store::merge_sorted`); others by one lookup each.
    pub fn get_many<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k RecordKey> + Clone,
    ) -> Result<Vec<Option<ImageRecord>>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, IMAGES)?;
            let encoded: Vec<Vec<u8>> = keys.clone().into_iter().map(Codec::encode).collect();
            // The codec's byte order is the keys' order (`OrderedCodec`).
            if encoded.windows(2).all(|w| w[0] < w[1]) {
                return self.merge_sorted(&table, &encoded);
            }
            let mut out = Vec::with_capacity(encoded.len());
            for encoded in encoded {
                let found = table
                    .get(Encoded::new(&encoded))
                    .map_err(|e| self.redb_err(e))?;
                out.push(match found {
                    None => None,
                    Some(guard) => Some(guard.value().decode().map_err(|e| self.decode_err(e))?),
                });
            }
            Ok(out)
        })
    }

    /// One decoded value of `table`, if `key` is there.
    pub(super) fn point_get<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
        key: &K,
    ) -> Result<Option<V>, StoreError> {
        let txn = self.begin_read()?;
        let table = self.open_read_table(&txn, table)?;
        let encoded = key.encode();
        let found = table
            .get(Encoded::new(&encoded))
            .map_err(|e| self.redb_err(e))?;
        match found {
            None => Ok(None),
            Some(guard) => guard
                .value()
                .decode()
                .map(Some)
                .map_err(|e| self.decode_err(e)),
        }
    }

    /// Every decoded entry of `table`, in key order.
    pub(super) fn scan_all<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
    ) -> Result<Vec<(K, V)>, StoreError> {
        let txn = self.begin_read()?;
        let table = self.open_read_table(&txn, table)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            let key = k.value().decode().map_err(|e| self.decode_err(e))?;
            let value = v.value().decode().map_err(|e| self.decode_err(e))?;
            out.push((key, value));
        }
        Ok(out)
    }

    /// The rows of `table` whose raw key and value `keep` accepts, decoded, in key order: a
    /// scan that decodes (and allocates) only the rows a caller wants.
    fn scan_matching<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
        keep: &dyn Fn(&[u8], &[u8]) -> bool,
    ) -> Result<Vec<(K, V)>, StoreError> {
        let txn = self.begin_read()?;
        let table = self.open_read_table(&txn, table)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            if !keep(k.value().bytes(), v.value().bytes()) {
                continue;
            }
            let key = k.value().decode().map_err(|e| self.decode_err(e))?;
            let value = v.value().decode().map_err(|e| self.decode_err(e))?;
            out.push((key, value));
        }
        Ok(out)
    }

    /// How many image records there are.
    pub fn len(&self) -> Result<u64, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let images = self.open_read_table(&txn, IMAGES)?;
            images.len().map_err(|e| self.redb_err(e))
        })
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// Every record, ordered by key, loaded at once. Prefer [`Store::records_in_key_order`]
    /// where the caller can walk them one by one.
    pub fn records(&self) -> Result<Vec<StoredRecord>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(IMAGES))?
            .into_iter()
            .map(|(key, record)| StoredRecord { key, record })
            .collect())
    }

    /// The backoff entry of `key` (`<pod uid>_<image>`), if any.
    pub fn backoff(&self, key: &str) -> Result<Option<BackoffEntry>, StoreError> {
        let key = BackoffKey(key.to_owned());
        self.guarded(|| self.point_get(BACKOFF, &key))
    }

    /// Every backoff entry, ordered by key.
    pub fn backoff_entries(&self) -> Result<Vec<(String, BackoffEntry)>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(BACKOFF))?
            .into_iter()
            .map(|(k, v)| (k.0, v))
            .collect())
    }

    /// Every pin (schema 4), ordered by key, active or expired (expired pins stay until a
    /// detect prunes them: see [`crate::store::BatchOp::PruneExpiredPins`]).
    pub fn pins(&self) -> Result<Vec<(PinKey, ImagePin)>, StoreError> {
        self.guarded(|| self.scan_all(PINS))
    }

    /// The pin of `key`, if any.
    pub fn pin(&self, key: &PinKey) -> Result<Option<ImagePin>, StoreError> {
        self.guarded(|| self.point_get(PINS, key))
    }

    /// Every use interval (schema 5), open ones first, then closed ones oldest first.
    pub fn uses(&self) -> Result<Vec<(UseKey, UseInterval)>, StoreError> {
        self.guarded(|| self.scan_all(USES))
    }

    /// The use history of the images `keys` only (as [`Store::uses`] filtered, in the same
    /// order), the others' rows not decoded: the predictive order's read once per space walk
    /// (issue 41: with the histories full, decoding every row was most of a simulated cycle).
    pub fn uses_of(
        &self,
        keys: &std::collections::BTreeSet<&RecordKey>,
    ) -> Result<Vec<(UseKey, UseInterval)>, StoreError> {
        // A use key is [layout][closed][started_at: 8][record key] (`codec.rs`).
        self.history_of(USES, 10, keys)
    }

    /// The pull history of the images `keys` only (as [`Store::pulls`] filtered, in the same
    /// order), the others' rows not decoded.
    pub fn pulls_of(
        &self,
        keys: &std::collections::BTreeSet<&RecordKey>,
    ) -> Result<Vec<(PullKey, PullEntry)>, StoreError> {
        // A pull key is [layout][at: 8][record key] (`codec.rs`).
        self.history_of(PULLS, 9, keys)
    }

    /// The rows of a history table whose encoded key ends with one of `keys`' encodings,
    /// starting at byte `record_key_at` (the history keys' layout), others not decoded.
    fn history_of<K: codec::OrderedCodec + 'static, V: Codec + 'static>(
        &self,
        table: TableDefinition<Stored<K>, Stored<V>>,
        record_key_at: usize,
        keys: &std::collections::BTreeSet<&RecordKey>,
    ) -> Result<Vec<(K, V)>, StoreError> {
        let wanted = encoded_keys(keys);
        self.guarded(|| {
            self.scan_matching(table, &|k, _| {
                k.get(record_key_at..)
                    .is_some_and(|key| wanted.contains(key))
            })
        })
    }

    /// The journal entries marked re-pulled (as [`Store::journal`] filtered, in the same
    /// order), the others' keys not decoded: what the adaptive order's returns count.
    /// Each entry is decoded once (the filter is on the decoded entry).
    pub fn journal_repulled(&self) -> Result<Vec<(JournalKey, JournalEntry)>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, JOURNAL)?;
            let mut out = Vec::new();
            for entry in table.iter().map_err(|e| self.redb_err(e))? {
                let (k, v) = entry.map_err(|e| self.redb_err(e))?;
                let value: JournalEntry = v.value().decode().map_err(|e| self.decode_err(e))?;
                if value.repulled_at.is_none() {
                    continue;
                }
                let key = k.value().decode().map_err(|e| self.decode_err(e))?;
                out.push((key, value));
            }
            Ok(out)
        })
    }

    /// The pull history (schema 5), oldest first.
    pub fn pulls(&self) -> Result<Vec<(PullKey, PullEntry)>, StoreError> {
        self.guarded(|| self.scan_all(PULLS))
    }

    /// What the agent labelled in containerd (schema 6), by image name: each name's
    /// [`RuntimeLabel`] (`migrations/0006_runtime_labels.md`).
    pub fn runtime_labels(&self) -> Result<Vec<(String, RuntimeLabel)>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(RUNTIME_LABELS))?
            .into_iter()
            .map(|(name, label)| (name.0, label))
            .collect())
    }

    /// The warm set's state at the agent's last warm cycle (schema 5), in priority order.
    pub fn warm_rows(&self) -> Result<Vec<WarmRow>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(WARM))?
            .into_iter()
            .map(|(_, row)| row)
            .collect())
    }

    /// Sets the journal's retention, applied from the next transaction that writes the journal
    /// (default: 30 days, 10,000 entries).
    pub fn set_journal_retention(&self, retention: JournalRetention) {
        match self.retention.write() {
            Ok(mut r) => *r = retention,
            Err(p) => *p.into_inner() = retention,
        }
    }

    /// The journal's retention in force on this handle.
    pub fn journal_retention(&self) -> JournalRetention {
        match self.retention.read() {
            Ok(r) => *r,
            Err(p) => *p.into_inner(),
        }
    }

    /// Every journal entry, oldest first.
    pub fn journal(&self) -> Result<Vec<(JournalKey, JournalEntry)>, StoreError> {
        self.guarded(|| self.scan_all(JOURNAL))
    }

    /// A meta value, if set.
    pub fn meta(&self, name: &str) -> Result<Option<i64>, StoreError> {
        self.guarded(|| {
            let txn = self.begin_read()?;
            let table = self.open_read_table(&txn, META)?;
            read_meta(&table, name).map_err(|e| self.wrap(e))
        })
    }

    /// Every meta value, ordered by name.
    pub fn meta_entries(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(self
            .guarded(|| self.scan_all(META))?
            .into_iter()
            .map(|(k, v)| (k.0, v.0))
            .collect())
    }
}

pub(super) fn read_meta<T: ReadableTable<Stored<MetaKey>, Stored<MetaValue>>>(
    table: &T,
    name: &str,
) -> Result<Option<i64>, TxnError> {
    let encoded = MetaKey(name.to_owned()).encode();
    match table.get(Encoded::new(&encoded))? {
        None => Ok(None),
        Some(guard) => guard
            .value()
            .decode()
            .map(|v| Some(v.0))
            .map_err(TxnError::Decode),
    }
}

/// `keys` as their stored bytes, for matching raw rows.
fn encoded_keys(
    keys: &std::collections::BTreeSet<&RecordKey>,
) -> std::collections::HashSet<Vec<u8>> {
    keys.iter().map(|k| k.encode()).collect()
}
