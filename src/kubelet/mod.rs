//! What imagekeeper reads of the kubelet's own state, read-only: the image pull records the
//! kubelet keeps under `<kubelet root>/image_manager/` (KEP-2535). Nothing here ever writes,
//! renames or removes a file of the kubelet's; everything malformed is skipped with a warning,
//! never fatal.

mod pull_records;
mod sha256;

pub use pull_records::{
    DEFAULT_KUBELET_ROOT_DIR, MAX_RECORD_FILE_BYTES, PullIntent, PullRecordsReader, PulledRecord,
    RecordError, RecordKind, Scan, decode_intent, decode_pulled_record, record_file_name,
};
