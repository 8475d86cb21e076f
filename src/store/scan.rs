//! The lazy scan of every record in [`RecordKey`] order ([`Store::records_in_key_order`]): one
//! read transaction, one record decoded at a time, so a caller that merges the store with
//! another sorted list (detect) never holds all records. The scan sees the snapshot of the
//! moment it began; writes committed later are not in it. A reopen of the store after an I/O
//! failure ends it with [`StoreError::Reopened`] (see `reopen.rs`).

use std::ops::Bound;
use std::path::PathBuf;

use redb::{ReadOnlyTable, ReadTransaction};

use super::codec::Codec;
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

impl Iterator for RecordScan {
    type Item = Result<StoredRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let Self {
            range, path, tie, ..
        } = self;
        tie.step(|| next_record(range, path))
    }
}

fn next_record(
    range: &mut redb::Range<'static, Stored<RecordKey>, Stored<ImageRecord>>,
    path: &std::path::Path,
) -> Option<Result<StoredRecord, StoreError>> {
    {
        let (k, v) = match range.next()? {
            Ok(entry) => entry,
            Err(e) => return Some(Err(StoreError::from_redb(path, e.into()))),
        };
        let decoded = k.value().decode().and_then(|key| {
            v.value()
                .decode()
                .map(|record| StoredRecord { key, record })
        });
        Some(decoded.map_err(|source| StoreError::Decode {
            path: path.to_owned(),
            source,
        }))
    }
}
