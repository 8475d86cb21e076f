//! Eviction order, read lazily: a walk of the `eviction_prefix` index ((last_used,
//! first_detected, 16-byte record key prefix) -> ()), oldest first, each row joined with its
//! records by a short range scan of `images` in key order ([`row_records`]), so the GC never
//! loads and sorts the records. A walk is one read transaction; it can resume after an
//! [`EvictionKey`] (the row holding it is read again and its records up to it skipped) or stop
//! before a last_used bound (MaxAge's range). The transaction lives outside the handle lock,
//! so each step runs under the [`ScanTie`] of the handle generation it began on: a walk begun
//! before a reopen fails with [`StoreError::Reopened`] instead of reading pages the new handle
//! may reuse. An index row with no record behind it is [`StoreError::IndexMismatch`]: the
//! index holds exactly one row per record's (times, key prefix), kept in step by the writes
//! (`apply.rs`, `put_record_over`).

use std::path::{Path, PathBuf};

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable};

use super::codec::{self, Codec, EvictionKey, IndexKey};
use super::reopen::ScanTie;
use super::tables::{EVICTION_PREFIX, Encoded, IMAGES, Stored};
use super::{IndexMismatch, Store, StoreError, StoredRecord, TxnError};
use crate::model::{ImageRecord, RecordKey, UnixNanos};

impl Store {
    /// Records in eviction order (last_used, then first_detected, then key), oldest first,
    /// read lazily from the index.
    pub fn eviction_order(&self) -> Result<EvictionIter, StoreError> {
        self.eviction_scan(None, None)
    }

    /// Records whose last_used is before `bound`, in eviction order, read lazily.
    pub fn eviction_order_before(&self, bound: UnixNanos) -> Result<EvictionIter, StoreError> {
        self.eviction_scan(None, Some(bound))
    }

    /// Records after `after` in eviction order (exclusive), read lazily: resumes a walk.
    pub fn eviction_order_after(&self, after: &EvictionKey) -> Result<EvictionIter, StoreError> {
        self.eviction_scan(Some(after), None)
    }

    fn eviction_scan(
        &self,
        after: Option<&EvictionKey>,
        before: Option<UnixNanos>,
    ) -> Result<EvictionIter, StoreError> {
        self.guarded(|| self.eviction_scan_once(after, before))
    }

    fn eviction_scan_once(
        &self,
        after: Option<&EvictionKey>,
        before: Option<UnixNanos>,
    ) -> Result<EvictionIter, StoreError> {
        use std::ops::Bound;
        let (txn, tie) = self.begin_scan()?;
        let images = self.open_read_table(&txn, IMAGES)?;
        let index = txn
            .open_table(EVICTION_PREFIX)
            .map_err(|e| self.redb_err(e))?;
        // A resumed walk starts at the row holding `after`'s record (inclusive) and skips
        // the records of that row up to `after`.
        let lower_bytes = after.map(|a| IndexKey::of_eviction_key(a).encode());
        let upper_bytes = before.map(EvictionKey::last_used_prefix);
        let lower = match &lower_bytes {
            Some(b) => Bound::Included(Encoded::<IndexKey>::new(b)),
            None => Bound::Unbounded,
        };
        let upper = match &upper_bytes {
            Some(b) => Bound::Excluded(Encoded::<IndexKey>::new(b)),
            None => Bound::Unbounded,
        };
        let range = index
            .range::<Encoded<IndexKey>>((lower, upper))
            .map_err(|e| self.redb_err(e))?;
        Ok(EvictionIter {
            range,
            images,
            pending: std::collections::VecDeque::new(),
            after: after.cloned(),
            path: self.path.clone(),
            tie,
            _txn: txn,
        })
    }
}

/// The records an index row stands for, in key order: those whose key has the row's prefix
/// and whose times are the row's. A short range scan of `images`.
pub(super) fn row_records<T: ReadableTable<Stored<RecordKey>, Stored<ImageRecord>>>(
    images: &T,
    row: &IndexKey,
) -> Result<Vec<StoredRecord>, TxnError> {
    let start = Encoded::<RecordKey>::new(row.scan_start());
    let mut out = Vec::new();
    for entry in images.range::<Encoded<RecordKey>>(start..)? {
        let (k, v) = entry?;
        let prefix = codec::key_prefix(k.value().bytes());
        if prefix > row.prefix {
            break;
        }
        if prefix < row.prefix {
            continue;
        }
        let record: ImageRecord = v.value().decode().map_err(TxnError::Decode)?;
        if row.matches(&record) {
            let key = k.value().decode().map_err(TxnError::Decode)?;
            out.push(StoredRecord { key, record });
        }
    }
    Ok(out)
}

/// A lazy walk over the eviction index, oldest first, joined with each record.
pub struct EvictionIter {
    range: redb::Range<'static, Stored<IndexKey>, ()>,
    images: ReadOnlyTable<Stored<RecordKey>, Stored<ImageRecord>>,
    /// The records of the current row not yet returned, in key order.
    pending: std::collections::VecDeque<StoredRecord>,
    /// A resumed walk returns only records after this one.
    after: Option<EvictionKey>,
    path: PathBuf,
    /// Stops the walk once a reopen replaced the handle its transaction began on.
    tie: ScanTie,
    _txn: ReadTransaction,
}

/// The next record of an eviction walk: from `pending`, else from the next index row.
fn next_entry(
    range: &mut redb::Range<'static, Stored<IndexKey>, ()>,
    images: &ReadOnlyTable<Stored<RecordKey>, Stored<ImageRecord>>,
    pending: &mut std::collections::VecDeque<StoredRecord>,
    after: &mut Option<EvictionKey>,
    path: &Path,
) -> Option<Result<StoredRecord, StoreError>> {
    {
        loop {
            if let Some(next) = pending.pop_front() {
                return Some(Ok(next));
            }
            let (k, _) = match range.next()? {
                Ok(entry) => entry,
                Err(e) => return Some(Err(StoreError::from_redb(path, e.into()))),
            };
            let row: IndexKey = match k.value().decode() {
                Ok(row) => row,
                Err(source) => {
                    return Some(Err(StoreError::Decode {
                        path: path.to_owned(),
                        source,
                    }));
                }
            };
            let records = match row_records(images, &row) {
                Ok(records) => records,
                Err(TxnError::Redb(e)) => return Some(Err(StoreError::from_redb(path, e))),
                Err(TxnError::Decode(source)) => {
                    return Some(Err(StoreError::Decode {
                        path: path.to_owned(),
                        source,
                    }));
                }
                Err(TxnError::Mismatch(detail)) => {
                    return Some(Err(StoreError::IndexMismatch {
                        path: path.to_owned(),
                        detail,
                    }));
                }
                Err(TxnError::TooManyPins { active }) => {
                    return Some(Err(StoreError::TooManyPins {
                        active,
                        limit: crate::model::MAX_ACTIVE_PINS,
                    }));
                }
            };
            if records.is_empty() {
                return Some(Err(StoreError::IndexMismatch {
                    path: path.to_owned(),
                    detail: IndexMismatch::EntryWithoutRecord { row },
                }));
            }
            // Only the first row of a resumed walk can hold records up to `after`.
            let after = after.take();
            pending.extend(records.into_iter().filter(|r| {
                after
                    .as_ref()
                    .is_none_or(|a| EvictionKey::of(&r.key, &r.record) > *a)
            }));
        }
    }
}

impl Iterator for EvictionIter {
    type Item = Result<StoredRecord, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Only the reads from the transaction need the tie; records already read (`pending`)
        // were read under it.
        if let Some(next) = self.pending.pop_front() {
            return Some(Ok(next));
        }
        let Self {
            range,
            images,
            pending,
            after,
            path,
            tie,
            ..
        } = self;
        tie.step(|| next_entry(range, images, pending, after, path))
    }
}
