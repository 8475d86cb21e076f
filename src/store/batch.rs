//! A batch of changes that the store applies as one write transaction: one detect cycle, one
//! pull outcome, one GC removal. Applying a batch that changes nothing commits nothing.

use crate::model::{BackoffEntry, ImageRecord, RecordKey, UnixNanos};

/// One change inside a [`Batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    /// Make the record exactly this.
    Upsert {
        key: RecordKey,
        record: ImageRecord,
    },
    /// Create the record as first detected and used now, or set its last_used to now; a known
    /// size replaces the stored one.
    MarkUsed {
        key: RecordKey,
        now: UnixNanos,
        size: Option<u64>,
    },
    /// Delete the record if it exists.
    Remove {
        key: RecordKey,
    },
    PutBackoff {
        key: String,
        entry: BackoffEntry,
    },
    RemoveBackoff {
        key: String,
    },
    SetMeta {
        name: String,
        value: i64,
    },
}

/// Changes applied together, atomically and durably, by [`super::Store::apply`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub(super) ops: Vec<BatchOp>,
    /// Meta values written only when the other operations changed something, so that a
    /// cycle that changed nothing still commits nothing.
    pub(super) stamps: Vec<(String, i64)>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    pub fn upsert(&mut self, key: RecordKey, record: ImageRecord) {
        self.ops.push(BatchOp::Upsert { key, record });
    }

    pub fn mark_used(&mut self, key: RecordKey, now: UnixNanos, size: Option<u64>) {
        self.ops.push(BatchOp::MarkUsed { key, now, size });
    }

    pub fn remove(&mut self, key: RecordKey) {
        self.ops.push(BatchOp::Remove { key });
    }

    pub fn put_backoff(&mut self, key: String, entry: BackoffEntry) {
        self.ops.push(BatchOp::PutBackoff { key, entry });
    }

    pub fn remove_backoff(&mut self, key: String) {
        self.ops.push(BatchOp::RemoveBackoff { key });
    }

    pub fn set_meta(&mut self, name: impl Into<String>, value: i64) {
        self.ops.push(BatchOp::SetMeta {
            name: name.into(),
            value,
        });
    }

    /// Writes `name = value` only if the rest of the batch changes something.
    pub fn stamp_if_changed(&mut self, name: impl Into<String>, value: i64) {
        self.stamps.push((name.into(), value));
    }
}
