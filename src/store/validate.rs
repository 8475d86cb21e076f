//! The checks every operation of a [`Batch`](super::Batch) passes before its write
//! transaction begins ([`Store::apply_reporting`](super::Store::apply_reporting) checks them
//! all first): a record key's image id is non-empty, holds no NUL byte and fits its layout
//! ([`MAX_ID_BYTES`]); a backoff key's pod uid and length, a pin's image name, handler and
//! reason, a pulled image's name, a warm row's fields and a runtime label row are bounded as the codec's layouts
//! need. A refused operation is [`StoreError::InvalidKey`] (naming at most 80 characters of the
//! key) and nothing of its batch is written. Removals are never refused, so an entry an older
//! version stored under a longer key stays removable.

use super::codec::MAX_ID_BYTES;
use super::{BatchOp, StoreError};
use crate::model::{
    ImagePin, MAX_IMAGE_NAME_BYTES, MAX_PIN_REASON_BYTES, MAX_POD_UID_BYTES,
    MAX_RUNTIME_LABEL_VALUE_BYTES, PinKey, RecordKey, RuntimeLabel, WarmRow,
};

/// Refuses to write a backoff key (`<pod uid>_<image>`) longer than [`MAX_POD_UID_BYTES`] +
/// 1 + [`MAX_IMAGE_NAME_BYTES`], or whose part before the first `_` (the pod uid, unless the
/// uid itself holds a `_`) is longer than [`MAX_POD_UID_BYTES`].
fn validate_backoff_key(key: &str) -> Result<(), StoreError> {
    let uid = key.split('_').next().unwrap_or_default();
    let reason = if uid.len() > MAX_POD_UID_BYTES {
        "the pod uid is longer than 128 bytes"
    } else if key.len() > MAX_POD_UID_BYTES + 1 + MAX_IMAGE_NAME_BYTES {
        "the backoff key is longer than 4225 bytes (a pod uid of 128, `_`, an image name of 4096)"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: key.chars().take(80).collect(),
        reason,
    })
}

/// Refuses a pin whose image name is empty, holds a NUL byte or is longer than
/// [`MAX_IMAGE_NAME_BYTES`], whose runtime handler holds a NUL byte, or whose reason is longer
/// than [`MAX_PIN_REASON_BYTES`].
fn validate_pin(key: &PinKey, pin: &ImagePin) -> Result<(), StoreError> {
    let reason = if key.image.is_empty() {
        "the image name is empty"
    } else if key.image.contains('\0') || key.runtime_handler.contains('\0') {
        "the image name or runtime handler contains a NUL byte"
    } else if key.image.len() > MAX_IMAGE_NAME_BYTES {
        "the image name is longer than 4096 bytes"
    } else if pin.reason.len() > MAX_PIN_REASON_BYTES {
        "the pin's reason is longer than 1024 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: key.image.chars().take(80).collect(),
        reason,
    })
}

pub(super) fn validate_op(op: &BatchOp) -> Result<(), StoreError> {
    let key = match op {
        BatchOp::Upsert { key, .. }
        | BatchOp::MarkUsed { key, .. }
        | BatchOp::Sight { key, .. }
        | BatchOp::ClampFuture { key, .. }
        | BatchOp::Remove { key }
        | BatchOp::RemoveUnlisted { key, .. }
        | BatchOp::Evict { key, .. }
        | BatchOp::JournalLeftover { key, .. }
        | BatchOp::SetNames { key, .. } => key,
        BatchOp::PutBackoff { key, .. } => return validate_backoff_key(key),
        BatchOp::PutPin { key, pin } => return validate_pin(key, pin),
        BatchOp::RemovePin { .. } | BatchOp::PruneExpiredPins { .. } => return Ok(()),
        BatchOp::OpenUse { key, .. } => key,
        BatchOp::RecordPull { key, entry } => {
            if entry.name.len() > MAX_IMAGE_NAME_BYTES {
                return Err(StoreError::InvalidKey {
                    key: entry.name.chars().take(80).collect(),
                    reason: "the pulled image name is longer than 4096 bytes",
                });
            }
            &key.key
        }
        BatchOp::Sightings(sightings) => {
            for (image, ..) in sightings.iter() {
                validate_image_id(image.id_str())?;
            }
            return Ok(());
        }
        BatchOp::ObserveUses { in_use, .. } => {
            for key in in_use {
                validate_record_key(key)?;
            }
            return Ok(());
        }
        BatchOp::ReplaceWarm { rows } => {
            for row in rows {
                validate_warm_row(row)?;
            }
            return Ok(());
        }
        // A removal is never refused: an entry an older version stored under a longer key
        // must stay removable, and a pull's success removes every expired key in the batch
        // that marks its image.
        BatchOp::RemoveBackoff { .. }
        | BatchOp::SetMeta { .. }
        | BatchOp::RemoveRuntimeLabel { .. } => return Ok(()),
        BatchOp::PutRuntimeLabel { name, label } => return validate_runtime_label(name, label),
    };
    validate_record_key(key)
}

/// Refuses a runtime label row whose image name is empty or longer than
/// [`MAX_IMAGE_NAME_BYTES`], or whose value is longer than [`MAX_RUNTIME_LABEL_VALUE_BYTES`].
fn validate_runtime_label(name: &str, label: &RuntimeLabel) -> Result<(), StoreError> {
    let reason = if name.is_empty() {
        "the labelled image name is empty"
    } else if name.len() > MAX_IMAGE_NAME_BYTES {
        "the labelled image name is longer than 4096 bytes"
    } else if label.value.len() > MAX_RUNTIME_LABEL_VALUE_BYTES {
        "the runtime label's value is longer than 256 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: name.chars().take(80).collect(),
        reason,
    })
}

/// Refuses a warm row whose image name is empty or longer than [`MAX_IMAGE_NAME_BYTES`],
/// whose runtime handler is longer than that, or whose image id is longer than
/// [`MAX_ID_BYTES`] (the layout would cut them).
fn validate_warm_row(row: &WarmRow) -> Result<(), StoreError> {
    let reason = if row.image.is_empty() {
        "the warm image name is empty"
    } else if row.image.len() > MAX_IMAGE_NAME_BYTES {
        "the warm image name is longer than 4096 bytes"
    } else if row.runtime_handler.len() > MAX_IMAGE_NAME_BYTES {
        "the warm entry's runtime handler is longer than 4096 bytes"
    } else if row.image_id.len() > MAX_ID_BYTES {
        "the warm entry's image id is longer than 65535 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: row.image.chars().take(80).collect(),
        reason,
    })
}

fn validate_record_key(key: &RecordKey) -> Result<(), StoreError> {
    validate_image_id(key.image_id.as_str())
}

/// A record key's check: only its image id has rules.
fn validate_image_id(id: &str) -> Result<(), StoreError> {
    let reason = if id.is_empty() {
        "the image id is empty"
    } else if id.contains('\0') {
        "the image id contains a NUL byte"
    } else if id.len() > MAX_ID_BYTES {
        "the image id is longer than 65535 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        key: id.chars().take(80).collect(),
        reason,
    })
}
