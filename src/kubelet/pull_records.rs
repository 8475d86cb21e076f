//! The kubelet's image pull records (KEP-2535), read-only.
//!
//! Kubelets from 1.33 keep, under `<kubelet root>/image_manager/`, a `pulling/` directory of
//! ImagePullIntent files (an image name the kubelet is pulling now) and a `pulled/` directory
//! of ImagePulledRecord files (an image id, the time the record was last written, and the
//! credentials it was pulled or verified with). Each file is JSON of
//! `kubelet.config.k8s.io/v1alpha1` or `v1beta1`, written to `<name>.tmp` and renamed, and
//! named `sha256-<hex>` after the SHA-256 of the intent's `image` or the record's `imageRef`
//! (the kubelet's pkg/kubelet/images/pullmanager/fs_pullrecords.go, `cacheFilename`).
//!
//! Invariants: this module never writes, renames or removes anything there; it opens regular
//! files only (no symlink followed, no FIFO blocked on), reads at most
//! [`MAX_RECORD_FILE_BYTES`] of each, and skips what it cannot use (unreadable, too large,
//! malformed, a name that does not match the content) with one warning per file for the life
//! of the reader; it never fails and never panics. Files not named `sha256-*`, `*.tmp` files
//! and directories are ignored as the kubelet ignores them. Unknown JSON fields are ignored
//! (the kubelet decodes strictly, but a newer kubelet may add fields). A missing
//! `image_manager` directory (an older kubelet, or the gate off) is normal and logged once.
//! Credentials in the records are never decoded, stored or logged.

use std::collections::BTreeSet;
use std::fs::{DirEntry, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;
use tracing::{info, warn};

use crate::format::parse_rfc3339;
use crate::model::UnixNanos;

use super::sha256::sha256_hex;

/// The kubelet's default `--root-dir`.
pub const DEFAULT_KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";

/// The largest record file read; the kubelet's are a few hundred bytes (a record lists the
/// pull secrets' coordinates, so a busy image may reach kilobytes).
pub const MAX_RECORD_FILE_BYTES: u64 = 1 << 20;

/// How many files' warnings a reader remembers (so a directory flooded with bad files cannot
/// grow it without bound; past this, bad files are still skipped, and warned about again).
const MAX_WARNED_FILES: usize = 4096;

const API_VERSIONS: [&str; 2] = [
    "kubelet.config.k8s.io/v1alpha1",
    "kubelet.config.k8s.io/v1beta1",
];
const FILE_PREFIX: &str = "sha256-";
const TMP_SUFFIX: &str = ".tmp";

/// The two kinds of record, and the directory each lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordKind {
    Intent,
    Pulled,
}

impl RecordKind {
    fn kind(self) -> &'static str {
        match self {
            RecordKind::Intent => "ImagePullIntent",
            RecordKind::Pulled => "ImagePulledRecord",
        }
    }

    fn dir(self) -> &'static str {
        match self {
            RecordKind::Intent => "pulling",
            RecordKind::Pulled => "pulled",
        }
    }
}

/// Why one record file is skipped. The cause is in the message (and not also a `source`, so
/// that it is said once).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("cannot read it: {0}")]
    Io(std::io::Error),
    #[error("it is not a regular file")]
    NotAFile,
    #[error("it is larger than {MAX_RECORD_FILE_BYTES} bytes")]
    TooLarge,
    #[error("it is not a kubelet record: {0}")]
    Json(serde_json::Error),
    #[error("its apiVersion {0:?} is neither kubelet.config.k8s.io/v1alpha1 nor v1beta1")]
    ApiVersion(String),
    #[error("its kind is {found:?}, not {expected}")]
    Kind {
        found: String,
        expected: &'static str,
    },
    #[error("its {0} is empty")]
    Empty(&'static str),
    #[error("its lastUpdatedTime {0:?} is not an RFC 3339 time from 1970 on")]
    Time(String),
    #[error("its name does not match its content (the kubelet would name it {expected})")]
    NameMismatch { expected: String },
}

/// An ImagePullIntent: the kubelet is pulling `image` (a name as the pod spec gives it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullIntent {
    pub image: String,
}

/// An ImagePulledRecord: the image `image_ref` (the id the runtime returned from the pull)
/// was pulled, or its credentials checked for a pod, at `last_updated` (`None` when the
/// record has no time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PulledRecord {
    pub image_ref: String,
    pub last_updated: Option<UnixNanos>,
}

/// The fields read; every other field (credentials included) is skipped unread.
#[derive(Deserialize)]
struct Wire {
    kind: Option<String>,
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    image: Option<String>,
    #[serde(rename = "imageRef")]
    image_ref: Option<String>,
    #[serde(rename = "lastUpdatedTime")]
    last_updated_time: Option<String>,
}

fn decode_wire(bytes: &[u8], kind: RecordKind) -> Result<Wire, RecordError> {
    let wire: Wire = serde_json::from_slice(bytes).map_err(RecordError::Json)?;
    let version = wire.api_version.clone().unwrap_or_default();
    if !API_VERSIONS.contains(&version.as_str()) {
        return Err(RecordError::ApiVersion(version));
    }
    let found = wire.kind.clone().unwrap_or_default();
    if found != kind.kind() {
        return Err(RecordError::Kind {
            found,
            expected: kind.kind(),
        });
    }
    Ok(wire)
}

/// Decodes an ImagePullIntent file's bytes.
pub fn decode_intent(bytes: &[u8]) -> Result<PullIntent, RecordError> {
    let wire = decode_wire(bytes, RecordKind::Intent)?;
    let image = wire.image.unwrap_or_default();
    if image.is_empty() {
        return Err(RecordError::Empty("image"));
    }
    Ok(PullIntent { image })
}

/// Decodes an ImagePulledRecord file's bytes.
pub fn decode_pulled_record(bytes: &[u8]) -> Result<PulledRecord, RecordError> {
    let wire = decode_wire(bytes, RecordKind::Pulled)?;
    let image_ref = wire.image_ref.unwrap_or_default();
    if image_ref.is_empty() {
        return Err(RecordError::Empty("imageRef"));
    }
    let last_updated = match wire.last_updated_time {
        None => None,
        Some(t) => Some(parse_rfc3339(&t).ok_or(RecordError::Time(t))?),
    };
    Ok(PulledRecord {
        image_ref,
        last_updated,
    })
}

/// The name the kubelet gives the record of `key` (an intent's image, a record's imageRef).
pub fn record_file_name(key: &str) -> String {
    format!("{FILE_PREFIX}{}", sha256_hex(key.as_bytes()))
}

/// What one directory held: the records read, and the files skipped with why.
#[derive(Debug)]
pub struct Scan<T> {
    pub found: Vec<T>,
    pub skipped: Vec<(PathBuf, RecordError)>,
}

impl<T> Default for Scan<T> {
    fn default() -> Self {
        Scan {
            found: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

#[derive(Debug, Default)]
struct Warned {
    missing_logged: bool,
    files: BTreeSet<PathBuf>,
}

/// Reads one kubelet's pull records. Cheap to call often: each call lists a directory and
/// reads its few small files.
#[derive(Debug)]
pub struct PullRecordsReader {
    image_manager: PathBuf,
    warned: Mutex<Warned>,
}

impl PullRecordsReader {
    /// A reader of `<kubelet_root>/image_manager`.
    pub fn new(kubelet_root: &Path) -> PullRecordsReader {
        PullRecordsReader {
            image_manager: kubelet_root.join("image_manager"),
            warned: Mutex::new(Warned::default()),
        }
    }

    /// The directory read.
    pub fn image_manager_dir(&self) -> &Path {
        &self.image_manager
    }

    /// The pull intents: the images the kubelet is pulling now.
    pub fn intents(&self) -> Scan<PullIntent> {
        self.scan(RecordKind::Intent, |bytes| {
            decode_intent(bytes).map(|i| (i.image.clone(), i))
        })
    }

    /// The pulled records.
    pub fn pulled(&self) -> Scan<PulledRecord> {
        self.scan(RecordKind::Pulled, |bytes| {
            decode_pulled_record(bytes).map(|r| (r.image_ref.clone(), r))
        })
    }

    /// The pulled record of `image_ref`, read from the one file the kubelet would name for
    /// it; `None` when there is none or it cannot be used (warned about once).
    pub fn pulled_for(&self, image_ref: &str) -> Option<PulledRecord> {
        let name = record_file_name(image_ref);
        let path = self
            .image_manager
            .join(RecordKind::Pulled.dir())
            .join(&name);
        let result = read_path(&path).and_then(|bytes| {
            let record = decode_pulled_record(&bytes)?;
            if record.image_ref == image_ref {
                Ok(Some(record))
            } else {
                Err(RecordError::NameMismatch {
                    expected: record_file_name(&record.image_ref),
                })
            }
        });
        match result {
            Ok(found) => found,
            Err(RecordError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                self.warn_once(&path, &e);
                None
            }
        }
    }

    fn scan<T>(
        &self,
        kind: RecordKind,
        decode: impl Fn(&[u8]) -> Result<(String, T), RecordError>,
    ) -> Scan<T> {
        let mut scan = Scan::default();
        let dir = self.image_manager.join(kind.dir());
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.missing_once(&dir);
                return scan;
            }
            Err(e) => {
                self.warn_once(&dir, &RecordError::Io(e));
                return scan;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    self.warn_once(&dir, &RecordError::Io(e));
                    continue;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(FILE_PREFIX) || name.ends_with(TMP_SUFFIX) {
                continue;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            let result = read_record(&entry).and_then(|bytes| {
                let (key, record) = decode(&bytes)?;
                let expected = record_file_name(&key);
                if expected == name {
                    Ok(record)
                } else {
                    Err(RecordError::NameMismatch { expected })
                }
            });
            match result {
                Ok(record) => scan.found.push(record),
                Err(e) => {
                    self.warn_once(&path, &e);
                    scan.skipped.push((path, e));
                }
            }
        }
        scan
    }

    fn missing_once(&self, dir: &Path) {
        let mut warned = lock(&self.warned);
        if !warned.missing_logged {
            warned.missing_logged = true;
            info!(
                dir = %dir.display(),
                "No kubelet image pull records (an older kubelet, or its pull records are off)"
            );
        }
    }

    fn warn_once(&self, path: &Path, error: &RecordError) {
        let mut warned = lock(&self.warned);
        if warned.files.contains(path) {
            return;
        }
        if warned.files.len() < MAX_WARNED_FILES {
            warned.files.insert(path.to_owned());
        }
        warn!(file = %path.display(), error = %error, "Skipped a kubelet image pull record");
    }
}

fn lock(m: &Mutex<Warned>) -> std::sync::MutexGuard<'_, Warned> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Reads one record file: a regular file (checked before opening and on the open handle,
/// which follows no symlink and never blocks), at most [`MAX_RECORD_FILE_BYTES`].
fn read_record(entry: &DirEntry) -> Result<Vec<u8>, RecordError> {
    let file_type = entry.file_type().map_err(RecordError::Io)?;
    if !file_type.is_file() {
        return Err(RecordError::NotAFile);
    }
    read_path(&entry.path())
}

/// Reads one record file by path, with the checks of [`read_record`] on the open handle (a
/// symlink fails to open: `O_NOFOLLOW`).
fn read_path(path: &Path) -> Result<Vec<u8>, RecordError> {
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                RecordError::NotAFile
            } else {
                RecordError::Io(e)
            }
        })?;
    let meta = file.metadata().map_err(RecordError::Io)?;
    if !meta.is_file() {
        return Err(RecordError::NotAFile);
    }
    if meta.len() > MAX_RECORD_FILE_BYTES {
        return Err(RecordError::TooLarge);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_RECORD_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(RecordError::Io)?;
    if bytes.len() as u64 > MAX_RECORD_FILE_BYTES {
        return Err(RecordError::TooLarge);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
