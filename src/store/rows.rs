//! The one-row reads and writes that every write path of the store shares (a batch's ops, the
//! journal's pruning, the schema's upgrades): the typed tables of a write transaction, one
//! record read, one meta value written. Below `apply.rs`, `journal.rs` and `schema.rs`, so that
//! they share these without importing each other.

use redb::ReadableTable;

use super::TxnError;
use super::codec::{Codec, MetaKey, MetaValue};
use super::read::read_meta;
use super::tables::{Encoded, Stored};
use crate::model::{ImageRecord, RecordKey};

pub(super) type ImagesTable<'t> = redb::Table<'t, Stored<RecordKey>, Stored<ImageRecord>>;
pub(super) type MetaTable<'t> = redb::Table<'t, Stored<MetaKey>, Stored<MetaValue>>;

pub(super) fn get_record(
    images: &ImagesTable<'_>,
    key: &RecordKey,
) -> Result<Option<ImageRecord>, TxnError> {
    let k = key.encode();
    match images.get(Encoded::new(&k))? {
        Some(g) => Ok(Some(g.value().decode().map_err(TxnError::Decode)?)),
        None => Ok(None),
    }
}

/// Sets the meta value `name`; returns whether it changed.
pub(super) fn put_meta(meta: &mut MetaTable<'_>, name: &str, value: i64) -> Result<bool, TxnError> {
    if read_meta(meta, name)? == Some(value) {
        return Ok(false);
    }
    let k = MetaKey(name.to_owned()).encode();
    meta.insert(Encoded::new(&k), Encoded::new(&MetaValue(value).encode()))?;
    Ok(true)
}
