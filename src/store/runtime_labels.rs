//! Schema 6's `runtime_labels` table inside the store's transactions: the containerd image
//! names the agent labelled (`io.cri-containerd.pinned` with its own `io.imagekeeper.*`
//! labels) and what it wrote there (`migrations/0006_runtime_labels.md`).
//!
//! Invariants: a row is written (durably, in its own batch) before the label write it stands
//! for, and removed only after the labels are gone (or containerd no longer lists the name),
//! so a crash leaves at most a row without its labels, which the next reconcile settles; a
//! row is rewritten only when its bytes differ; `Store::check` verifies every row decodes.

use redb::ReadableTable;

use super::codec::{Codec, LabelledName};
use super::tables::{Encoded, RUNTIME_LABELS, Stored};
use super::{Store, StoreError, TxnError, Violation};
use crate::model::RuntimeLabel;

pub(super) type LabelsTable<'t> = redb::Table<'t, Stored<LabelledName>, Stored<RuntimeLabel>>;

/// [`super::BatchOp::PutRuntimeLabel`]: written when its bytes differ from the stored row's.
pub(super) fn put_label(
    table: &mut LabelsTable<'_>,
    name: &str,
    label: &RuntimeLabel,
) -> Result<bool, TxnError> {
    let k = LabelledName(name.to_owned()).encode();
    let v = label.encode();
    let same = match table.get(Encoded::new(&k))? {
        Some(old) => old.value().bytes() == v.as_slice(),
        None => false,
    };
    if !same {
        table.insert(Encoded::new(&k), Encoded::new(&v))?;
    }
    Ok(!same)
}

/// [`super::BatchOp::RemoveRuntimeLabel`].
pub(super) fn remove_label(table: &mut LabelsTable<'_>, name: &str) -> Result<bool, TxnError> {
    let k = LabelledName(name.to_owned()).encode();
    Ok(table.remove(Encoded::new(&k))?.is_some())
}

impl Store {
    /// Schema 6's runtime labels: every key and value decodes (a name non-empty and at most
    /// 4096 bytes, a value at most 256).
    pub(super) fn check_runtime_labels(
        &self,
        txn: &redb::ReadTransaction,
    ) -> Result<Vec<Violation>, StoreError> {
        let mut violations = Vec::new();
        let labels = txn
            .open_table(RUNTIME_LABELS)
            .map_err(|e| self.redb_err(e))?;
        for entry in labels.iter().map_err(|e| self.redb_err(e))? {
            let (k, v) = entry.map_err(|e| self.redb_err(e))?;
            if let Err(e) = k.value().decode().and_then(|_| v.value().decode()) {
                violations.push(Violation::Undecodable {
                    table: "runtime_labels",
                    detail: e.to_string(),
                });
            }
        }
        Ok(violations)
    }
}
