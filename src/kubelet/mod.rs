//! What imagekeeper reads of the kubelet's own state, read-only: the image pull records the
//! kubelet keeps under `<kubelet root>/image_manager/` (KEP-2535): pull intents, pulled records
//! and observed preloaded records. Nothing here ever writes,
//! renames or removes a file of the kubelet's; everything malformed is skipped with a warning,
//! never fatal; a pull intent older than the intent max age is reported stale and keeps
//! nothing.

mod pull_records;
mod sha256;

#[cfg(feature = "harness")]
pub(crate) use sha256::sha256_hex;

pub use pull_records::{
    DEFAULT_INTENT_MAX_AGE, DEFAULT_KUBELET_ROOT_DIR, IntentAge, MAX_RECORD_FILE_BYTES,
    MAX_WARNED_FILES, PreloadedRecord, PullIntent, PullRecordsReader, PulledRecord, RecordError,
    RecordKind, Scan, StaleIntent, decode_intent, decode_preloaded_record, decode_pulled_record,
    record_file_name,
};
