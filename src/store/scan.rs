//! The lazy scan of every record in [`RecordKey`] order ([`Store::records_in_key_order`]): one
//! read transaction, one record decoded at a time, so a caller that merges the store with
//! another sorted list (detect) never holds all records. The scan sees the snapshot of the
//! moment it began; writes committed later are not in it. A reopen of the store after an I/O
//! failure ends it with [`StoreError::Reopened`] (see `reopen.rs`).
//!
//! [`RecordScan::in_place`] walks the same snapshot without copying the keys: each
//! [`ScannedRecord`] holds its key's bytes where redb keeps them, checked exactly as the
//! key's decode checks them (`codec::record_key_parts`: the same error for the same bytes),
//! and builds an owned [`RecordKey`] only when asked (detect asks only for the records it
//! writes).

use std::ops::Bound;
use std::path::PathBuf;

use redb::{ReadOnlyTable, ReadTransaction};

use super::codec::{self, Codec};
use super::tables::{Encoded, IMAGES, Stored};
use super::{ScanTie, Store, StoreError, StoredRecord};
use crate::model::{ImageRecord, RecordKey};

impl Store {
    /// Every record in key order, read lazily from one snapshot.
    pub fn records_in_key_order(&self) -> Result<RecordScan, StoreError> {
        self.guarded(|| self.record_scan_once(None))
    }

    /// The records whose key is at or after `from`, in key order, read lazily from one
    /// snapshot: resumes a walk.
    pub fn records_in_key_order_from(&self, from: &RecordKey) -> Result<RecordScan, StoreError> {
        self.guarded(|| self.record_scan_once(Some(from)))
    }

    /// The records of `encoded` (encoded record keys in strictly ascending order), in that
    /// order, `None` where there is none: one range scan from the first key to the last,
    /// merged with the keys (both in byte order, which is the keys' order), each matched
    /// record decoded once, the others' bytes only compared. `get_many`'s read for a sorted
    /// list: at 100k listed images it replaces 100k descents of the tree.
    pub(super) fn merge_sorted(
        &self,
        table: &ReadOnlyTable<Stored<RecordKey>, Stored<ImageRecord>>,
        encoded: &[Vec<u8>],
    ) -> Result<Vec<Option<ImageRecord>>, StoreError> {
        let mut out = Vec::with_capacity(encoded.len());
        let (Some(first), Some(last)) = (encoded.first(), encoded.last()) else {
            return Ok(out);
        };
        let range = table
            .range::<Encoded<RecordKey>>(
                Encoded::<RecordKey>::new(first)..=Encoded::<RecordKey>::new(last),
            )
            .map_err(|e| self.redb_err(e))?;
        let mut wanted = encoded.iter().peekable();
        for entry in range {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            let stored = k.value().bytes();
            while wanted.next_if(|w| w.as_slice() < stored).is_some() {
                out.push(None);
            }
            if wanted.next_if(|w| w.as_slice() == stored).is_some() {
                out.push(Some(v.value().decode().map_err(|e| self.decode_err(e))?));
            }
            if wanted.peek().is_none() {
                break;
            }
        }
        out.extend(wanted.map(|_| None));
        Ok(out)
    }

    fn record_scan_once(&self, from: Option<&RecordKey>) -> Result<RecordScan, StoreError> {
        let (txn, tie) = self.begin_scan()?;
        let images = self.open_read_table(&txn, IMAGES)?;
        let from_bytes = from.map(Codec::encode);
        let lower = match &from_bytes {
            Some(b) => Bound::Included(Encoded::<RecordKey>::new(b)),
            None => Bound::Unbounded,
        };
        let range = images
            .range::<Encoded<RecordKey>>((lower, Bound::Unbounded))
            .map_err(|e| self.redb_err(e))?;
        Ok(RecordScan {
            range,
            path: self.path.clone(),
            tie,
            _txn: txn,
        })
    }
}

/// A lazy walk over the records in key order; see [`Store::records_in_key_order`].
pub struct RecordScan {
    range: redb::Range<'static, Stored<RecordKey>, Stored<ImageRecord>>,
    path: PathBuf,
    /// Stops the walk once a reopen replaced the handle its transaction began on.
    tie: ScanTie,
    _txn: ReadTransaction,
}

impl RecordScan {
    /// The same walk, each record with its key borrowed in place (see the module's doc).
    pub fn in_place(self) -> InPlaceScan {
        InPlaceScan(self)
    }

    fn next_scanned(&mut self) -> Option<Result<ScannedRecord, StoreError>> {
        let Self {
            range, path, tie, ..
        } = self;
        tie.step(|| next_record(range, path))
    }
}

impl Iterator for RecordScan {
    type Item = Result<StoredRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.next_scanned()?.map(|r| StoredRecord {
            key: r.key(),
            record: r.record,
        }))
    }
}

/// [`RecordScan`] yielding [`ScannedRecord`]s: see [`RecordScan::in_place`].
pub struct InPlaceScan(RecordScan);

impl Iterator for InPlaceScan {
    type Item = Result<ScannedRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_scanned()
    }
}

/// One record of an [`InPlaceScan`]: its key's bytes as redb holds them (already checked as a
/// record key's decode checks them) and its record.
pub struct ScannedRecord {
    key: redb::AccessGuard<'static, Stored<RecordKey>>,
    /// The image id's length in bytes (the key is `[1][id][0x00][handler]`).
    id_len: usize,
    /// The record, decoded (fixed width: no allocation).
    pub record: ImageRecord,
}

impl ScannedRecord {
    /// The key's (image id, runtime handler) as UTF-8 bytes: their order is [`RecordKey`]'s.
    pub fn key_bytes(&self) -> (&[u8], &[u8]) {
        let raw = self.key.value().bytes();
        (
            raw.get(1..1 + self.id_len).unwrap_or_default(),
            raw.get(2 + self.id_len..).unwrap_or_default(),
        )
    }

    /// The key, owned.
    pub fn key(&self) -> RecordKey {
        let (id, handler) = codec::record_key_parts(self.key.value().bytes())
            .expect("a scanned key's bytes were checked when it was read and never change");
        RecordKey::new(id, handler)
    }
}

impl std::fmt::Debug for ScannedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScannedRecord")
            .field("key", &self.key())
            .field("record", &self.record)
            .finish()
    }
}

fn next_record(
    range: &mut redb::Range<'static, Stored<RecordKey>, Stored<ImageRecord>>,
    path: &std::path::Path,
) -> Option<Result<ScannedRecord, StoreError>> {
    let (k, v) = match range.next()? {
        Ok(entry) => entry,
        Err(e) => return Some(Err(StoreError::from_redb(path, e.into()))),
    };
    let decoded = codec::record_key_parts(k.value().bytes()).and_then(|(id, _)| {
        let id_len = id.len();
        v.value().decode().map(|record| (id_len, record))
    });
    Some(match decoded {
        Ok((id_len, record)) => Ok(ScannedRecord {
            key: k,
            id_len,
            record,
        }),
        Err(source) => Err(StoreError::Decode {
            path: path.to_owned(),
            source,
        }),
    })
}
