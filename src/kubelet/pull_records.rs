//! The kubelet's image pull records (KEP-2535), read-only.
//!
//! Kubelets from 1.33 keep, under `<kubelet root>/image_manager/`, a `pulling/` directory of
//! ImagePullIntent files (an image name the kubelet is pulling now) and a `pulled/` directory
//! of ImagePulledRecord files (an image id, the time the record was last written, and the
//! credentials it was pulled or verified with); kubelets from master on also keep an
//! `observed-preloaded/` directory of ImagePreloadedRecord files (an image id the kubelet found
//! present without having pulled it, and the names pods asked for it by). Each file is JSON of
//! `kubelet.config.k8s.io/v1alpha1` or `v1beta1`, written to `<name>.tmp` and renamed, and
//! named `sha256-<hex>` after the SHA-256 of the intent's `image` or the record's `imageRef`
//! (the kubelet's pkg/kubelet/images/pullmanager/fs_pullrecords.go, `cacheFilename`;
//! `WriteImagePreloadedRecord` names a preloaded record after its `imageRef` too). The
//! versioned ImagePreloadedRecord type was not at hand (k8s.io/kubelet v0.38.0-beta.0 has
//! none): its JSON names `imageRef` and `observedImages` are the internal type's `ImageRef`
//! and `ObservedImages` in the API's lowerCamel form, as ImagePulledRecord's `imageRef` is;
//! unknown fields are ignored, so a field added there is read as nothing, never refused.
//!
//! An intent is stale once its file (mtime) is older than the intent max age given with
//! `now`: the kubelet deletes an intent when the pull ends, but not always
//! (pkg/kubelet/images/pullmanager/image_pull_manager.go: `RecordImagePulled` keeps the
//! intent when the pulled record cannot be written, and `initialize` turns an intent into a
//! record only when its name is exactly one of the runtime's tags or digests, so an intent for
//! `busybox:1.36` whose image the runtime lists as `docker.io/library/busybox:1.36` is never
//! removed). A stale intent is reported apart ([`Scan::stale`]) and protects nothing.
//!
//! Invariants: this module never writes, renames or removes anything there; it reads files
//! through [`crate::operator_file::read_bytes`] with [`Follow::No`] (regular files only, no
//! symlink followed, no FIFO blocked on, at most [`MAX_RECORD_FILE_BYTES`]), refuses an
//! `image_manager`, `pulling`, `pulled` or `observed-preloaded` directory that is a symlink (it would lead out of
//! the kubelet's root; treated as no records, logged once), and skips what it cannot use
//! (unreadable, too large, malformed, a name that does not match the content) with one warning
//! per file for the life of the reader, up to [`MAX_WARNED_FILES`] files; past that, one
//! summary line per scan counts the bad files not named. It never fails and never panics.
//! Files not named `sha256-*`, `*.tmp` files and directories are ignored as the kubelet
//! ignores them. Unknown JSON fields are ignored (the kubelet decodes strictly, but a newer
//! kubelet may add fields). A missing `image_manager` directory (an older kubelet, or the gate
//! off) is normal and logged once; a missing `observed-preloaded` directory is normal and not
//! logged (the kubelet creates it at its first preloaded record, and kubelets up to 1.38.0-beta.0
//! never do). Credentials in the records are never decoded, stored or
//! logged.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::DirEntry;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::format::{go_duration, parse_rfc3339};
use crate::model::{UnixNanos, duration_nanos};
use crate::operator_file::{Follow, MAX_OPERATOR_FILE_BYTES, OperatorFileError, read_bytes};

use super::sha256::sha256_hex;

/// The kubelet's default `--root-dir`.
pub const DEFAULT_KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";

/// The largest record file read; the kubelet's are a few hundred bytes (a record lists the
/// pull secrets' coordinates, so a busy image may reach kilobytes).
pub const MAX_RECORD_FILE_BYTES: u64 = MAX_OPERATOR_FILE_BYTES;

/// How many bad files a reader names in a warning, once each (so a directory flooded with bad
/// files cannot grow its memory without bound); past this, bad files are still skipped, and
/// each scan logs one line counting those it did not name.
pub const MAX_WARNED_FILES: usize = 4096;

/// The default age past which a pull intent no longer protects its image
/// (`kubeletIntentMaxAge`). The kubelet sets no deadline on a pull (PullImage runs until
/// it ends), so this is a bound no real pull reaches: a 100 GB image at 100 Mbit/s takes about
/// 2h15m; 24 hours is ten times that.
pub const DEFAULT_INTENT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

const API_VERSIONS: [&str; 2] = [
    "kubelet.config.k8s.io/v1alpha1",
    "kubelet.config.k8s.io/v1beta1",
];
const FILE_PREFIX: &str = "sha256-";
const TMP_SUFFIX: &str = ".tmp";

/// The three kinds of record, and the directory each lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordKind {
    /// An ImagePullIntent, in `pulling/`.
    Intent,
    /// An ImagePulledRecord, in `pulled/`.
    Pulled,
    /// An ImagePreloadedRecord, in `observed-preloaded/`.
    Preloaded,
}

impl RecordKind {
    fn kind(self) -> &'static str {
        match self {
            RecordKind::Intent => "ImagePullIntent",
            RecordKind::Pulled => "ImagePulledRecord",
            RecordKind::Preloaded => "ImagePreloadedRecord",
        }
    }

    fn dir(self) -> &'static str {
        match self {
            RecordKind::Intent => "pulling",
            RecordKind::Pulled => "pulled",
            RecordKind::Preloaded => "observed-preloaded",
        }
    }
}

/// Why one record file is skipped. The cause is in the message (and not also a `source`, so
/// that it is said once).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// It cannot be read.
    #[error("cannot read it: {0}")]
    Io(std::io::Error),
    /// It is not a regular file.
    #[error("it is not a regular file")]
    NotAFile,
    /// It is larger than the cap.
    #[error("it is larger than {MAX_RECORD_FILE_BYTES} bytes")]
    TooLarge,
    /// Its JSON does not parse as a record.
    #[error("it is not a kubelet record: {0}")]
    Json(serde_json::Error),
    /// Its apiVersion is not one the kubelet writes.
    #[error("its apiVersion {0:?} is neither kubelet.config.k8s.io/v1alpha1 nor v1beta1")]
    ApiVersion(String),
    /// Its kind is not the directory's.
    #[error("its kind is {found:?}, not {expected}")]
    Kind {
        /// The kind it has.
        found: String,
        /// The directory's kind.
        expected: &'static str,
    },
    /// A required field is empty.
    #[error("its {0} is empty")]
    Empty(&'static str),
    /// Its time does not parse.
    #[error("its lastUpdatedTime {0:?} is not an RFC 3339 time from 1970 on")]
    Time(String),
    #[error("its name does not match its content (the kubelet would name it {expected})")]
    /// Its file name is not the one the kubelet gives its content.
    NameMismatch {
        /// The file name the kubelet would give it.
        expected: String,
    },
}

/// An ImagePullIntent: the kubelet is pulling `image` (a name as the pod spec gives it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullIntent {
    /// The image as the pod spec names it.
    pub image: String,
}

/// A pull intent older than the intent max age: it no longer protects its image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaleIntent {
    /// The intent's image name.
    pub image: String,
    /// The file.
    pub file: PathBuf,
    /// When the file was last written (its mtime).
    pub written: UnixNanos,
    /// How old it was when read, in whole seconds.
    pub age_seconds: u64,
    /// The intent max age it is older than, in whole seconds.
    pub max_age_seconds: u64,
}

impl StaleIntent {
    /// `the kubelet's pull intent for "busybox:1.36" (FILE) was written 48h0m0s ago, more
    /// than kubeletIntentMaxAge 24h0m0s: it no longer keeps any image`.
    pub fn describe(&self) -> String {
        format!(
            "the kubelet's pull intent for {:?} ({}) was written {} ago, more than \
             kubeletIntentMaxAge {}: it no longer keeps any image",
            self.image,
            self.file.display(),
            go_duration(Duration::from_secs(self.age_seconds)),
            go_duration(Duration::from_secs(self.max_age_seconds)),
        )
    }
}

/// An ImagePulledRecord: the image `image_ref` (the id the runtime returned from the pull)
/// was pulled, or its credentials checked for a pod, at `last_updated` (`None` when the
/// record has no time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PulledRecord {
    /// The image id the pull returned.
    pub image_ref: String,
    /// The record's time; `None` when it has none.
    pub last_updated: Option<UnixNanos>,
}

/// An ImagePreloadedRecord: the kubelet found the image `image_ref` (an id as the runtime
/// lists it) present without having pulled it, when pods asked for it by the names in
/// `observed_images` (each without its tag or digest: the kubelet removes one name with
/// `DeleteImagePreloadedRecordObservedImage`, which trims the name first, and the whole file
/// when none is left; pkg/kubelet/images/pullmanager/fs_pullrecords.go). It has no time, so
/// it orders nothing: imagekeeper shows it and counts it as no use (see `gc.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreloadedRecord {
    /// The image id the runtime lists.
    pub image_ref: String,
    /// The names pods asked for it by (tag and digest trimmed), sorted.
    pub observed_images: Vec<String>,
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
    /// A preloaded record's names (the internal type's `ObservedImages`, a map from a name to
    /// a `PreloadedImage`); the values are skipped unread.
    #[serde(rename = "observedImages")]
    observed_images: Option<BTreeMap<String, serde::de::IgnoredAny>>,
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

/// Decodes an ImagePreloadedRecord file's bytes.
pub fn decode_preloaded_record(bytes: &[u8]) -> Result<PreloadedRecord, RecordError> {
    let wire = decode_wire(bytes, RecordKind::Preloaded)?;
    let image_ref = wire.image_ref.unwrap_or_default();
    if image_ref.is_empty() {
        return Err(RecordError::Empty("imageRef"));
    }
    Ok(PreloadedRecord {
        image_ref,
        observed_images: wire
            .observed_images
            .map(|m| m.into_keys().collect())
            .unwrap_or_default(),
    })
}

/// The name the kubelet gives the record of `key` (an intent's image, a record's imageRef).
pub fn record_file_name(key: &str) -> String {
    format!("{FILE_PREFIX}{}", sha256_hex(key.as_bytes()))
}

/// What one directory held: the records read, the intents too old to count (intents only),
/// and the files skipped with why.
#[derive(Debug)]
pub struct Scan<T> {
    /// The records read.
    pub found: Vec<T>,
    /// The intents too old to count.
    pub stale: Vec<StaleIntent>,
    /// The files skipped, with why.
    pub skipped: Vec<(PathBuf, RecordError)>,
}

impl<T> Default for Scan<T> {
    fn default() -> Self {
        Scan {
            found: Vec::new(),
            stale: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

#[derive(Debug)]
struct Warned {
    missing_logged: bool,
    /// Directories refused as symlinks, logged once each.
    linked_dirs: BTreeSet<PathBuf>,
    files: BTreeSet<PathBuf>,
    /// How many files it may name (tests lower it).
    cap: usize,
    /// Warning lines logged about skipped files (named or counted), for tests.
    lines: u64,
}

impl Default for Warned {
    fn default() -> Self {
        Warned {
            missing_logged: false,
            linked_dirs: BTreeSet::new(),
            files: BTreeSet::new(),
            cap: MAX_WARNED_FILES,
            lines: 0,
        }
    }
}

/// The age of a pull intent: its file's mtime and whether that is more than `max_age` before
/// `now` (a zero `max_age` never makes an intent stale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntentAge {
    /// The time intents are judged at.
    pub now: UnixNanos,
    /// The age past which an intent is stale; zero: never.
    pub max_age: Duration,
}

impl IntentAge {
    /// Intents judged at `now` against `max_age`.
    pub fn new(now: UnixNanos, max_age: Duration) -> IntentAge {
        IntentAge { now, max_age }
    }

    /// Whether a file written at `written` is stale at `now`. A time after `now` (a clock
    /// that went back) is not.
    pub fn is_stale(&self, written: UnixNanos) -> bool {
        !self.max_age.is_zero()
            && self.now.0.saturating_sub(written.0) > duration_nanos(self.max_age)
    }
}

/// Reads one kubelet's pull records. Cheap to call often: each call lists a directory and
/// reads its few small files.
#[derive(Debug)]
pub struct PullRecordsReader {
    image_manager: PathBuf,
    warned: Mutex<Warned>,
    /// How many intents the last intents scan found stale (the metric's gauge).
    stale_intents: AtomicU64,
}

impl PullRecordsReader {
    /// A reader of `<kubelet_root>/image_manager`.
    pub fn new(kubelet_root: &Path) -> PullRecordsReader {
        PullRecordsReader {
            image_manager: kubelet_root.join("image_manager"),
            warned: Mutex::new(Warned::default()),
            stale_intents: AtomicU64::new(0),
        }
    }

    /// The directory read.
    pub fn image_manager_dir(&self) -> &Path {
        &self.image_manager
    }

    /// The pull intents: the images the kubelet is pulling now (`found`), and those whose
    /// file is older than `age.max_age` at `age.now` (`stale`), which protect nothing.
    pub fn intents(&self, age: IntentAge) -> Scan<PullIntent> {
        let mut stale = Vec::new();
        let mut scan = self.scan(RecordKind::Intent, |bytes, path| {
            let intent = decode_intent(bytes)?;
            let key = intent.image.clone();
            // The mtime after the read: the file read is this one or an older one of the
            // same name (the kubelet renames a new file over it), so a stale verdict is never
            // given to an intent written after the read.
            let written = std::fs::symlink_metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(unix_nanos);
            match written {
                Some(written) if age.is_stale(written) => {
                    stale.push(StaleIntent {
                        image: intent.image,
                        file: path.to_owned(),
                        written,
                        age_seconds: age.now.since(written).as_secs(),
                        max_age_seconds: age.max_age.as_secs(),
                    });
                    Ok((key, None))
                }
                _ => Ok((key, Some(intent))),
            }
        });
        // A file refused after its decode (its name does not match its image) was judged
        // stale before that check: it is skipped, not stale.
        stale.retain(|s| !scan.skipped.iter().any(|(path, _)| *path == s.file));
        scan.stale = stale;
        self.stale_intents
            .store(scan.stale.len() as u64, Ordering::Relaxed);
        scan
    }

    /// How many intents the last [`PullRecordsReader::intents`] found stale.
    pub fn stale_intents(&self) -> u64 {
        self.stale_intents.load(Ordering::Relaxed)
    }

    /// The pulled records.
    pub fn pulled(&self) -> Scan<PulledRecord> {
        self.scan(RecordKind::Pulled, |bytes, _| {
            decode_pulled_record(bytes).map(|r| (r.image_ref.clone(), Some(r)))
        })
    }

    /// The preloaded records (`observed-preloaded/`): images the kubelet found present without
    /// having pulled them. Read with the pulled records' limits and damaged-file handling.
    pub fn preloaded(&self) -> Scan<PreloadedRecord> {
        self.scan(RecordKind::Preloaded, |bytes, _| {
            decode_preloaded_record(bytes).map(|r| (r.image_ref.clone(), Some(r)))
        })
    }

    /// The pulled record of `image_ref`, read from the one file the kubelet would name for
    /// it; `None` when there is none or it cannot be used (warned about once).
    pub fn pulled_for(&self, image_ref: &str) -> Option<PulledRecord> {
        let name = record_file_name(image_ref);
        let dir = self.image_manager.join(RecordKind::Pulled.dir());
        if !self.dirs_are_real(&dir) {
            return None;
        }
        let path = dir.join(&name);
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

    /// Whether `image_manager` and `dir` (one of its subdirectories) are not symlinks: a
    /// link would lead out of the kubelet's root. A link is logged once and read as no
    /// records; a missing directory is left to the read that follows.
    fn dirs_are_real(&self, dir: &Path) -> bool {
        for d in [self.image_manager.as_path(), dir] {
            let linked = std::fs::symlink_metadata(d).is_ok_and(|m| m.file_type().is_symlink());
            if linked {
                let mut warned = lock(&self.warned);
                if warned.linked_dirs.insert(d.to_owned()) {
                    warn!(
                        dir = %d.display(),
                        "The kubelet's pull records directory is a symlink: not followed out of the kubelet's root, read as no records"
                    );
                }
                return false;
            }
        }
        true
    }

    fn scan<T>(
        &self,
        kind: RecordKind,
        mut decode: impl FnMut(&[u8], &Path) -> Result<(String, Option<T>), RecordError>,
    ) -> Scan<T> {
        let mut scan = Scan::default();
        let dir = self.image_manager.join(kind.dir());
        if !self.dirs_are_real(&dir) {
            return scan;
        }
        let mut unnamed = 0u64;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // The kubelet creates `observed-preloaded` only at its first preloaded record.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if kind != RecordKind::Preloaded {
                    self.missing_once(&dir);
                }
                return scan;
            }
            Err(e) => {
                self.warn_once(&dir, &RecordError::Io(e));
                return scan;
            }
        };
        let mut warn = |path: &Path, e: &RecordError| {
            if !self.warn_once(path, e) {
                unnamed += 1;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    warn(&dir, &RecordError::Io(e));
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
                let (key, record) = decode(&bytes, &path)?;
                let expected = record_file_name(&key);
                if expected == name {
                    Ok(record)
                } else {
                    Err(RecordError::NameMismatch { expected })
                }
            });
            match result {
                Ok(Some(record)) => scan.found.push(record),
                Ok(None) => {}
                Err(e) => {
                    warn(&path, &e);
                    scan.skipped.push((path, e));
                }
            }
        }
        if unnamed > 0 {
            let mut warned = lock(&self.warned);
            warned.lines += 1;
            warn!(
                dir = %dir.display(),
                count = unnamed,
                named = warned.cap,
                "Skipped kubelet image pull records past the first ones named in warnings"
            );
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

    /// Warns about a skipped file once for the life of the reader. Returns false when the
    /// file was not named because the reader already names as many files as it may (the scan
    /// then counts it in its summary line).
    fn warn_once(&self, path: &Path, error: &RecordError) -> bool {
        let mut warned = lock(&self.warned);
        if warned.files.contains(path) {
            return true;
        }
        if warned.files.len() >= warned.cap {
            return false;
        }
        warned.files.insert(path.to_owned());
        warned.lines += 1;
        warn!(file = %path.display(), error = %error, "Skipped a kubelet image pull record");
        true
    }
}

#[cfg(test)]
impl PullRecordsReader {
    /// Names at most `cap` bad files in warnings (the real cap is 4,096 files).
    fn with_warn_cap(self, cap: usize) -> PullRecordsReader {
        lock(&self.warned).cap = cap;
        self
    }

    /// Warning lines logged about skipped files so far.
    fn warning_lines(&self) -> u64 {
        lock(&self.warned).lines
    }
}

fn lock(m: &Mutex<Warned>) -> std::sync::MutexGuard<'_, Warned> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A file time as unix nanoseconds (`None` before 1970 or past 2262).
fn unix_nanos(t: SystemTime) -> Option<UnixNanos> {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_nanos()).ok().map(UnixNanos)
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

/// Reads one record file by path through the operator-file reader ([`Follow::No`]: a symlink
/// is not followed), its errors as the record errors they always were.
fn read_path(path: &Path) -> Result<Vec<u8>, RecordError> {
    read_bytes(path, Follow::No).map_err(|e| match e {
        OperatorFileError::NotFound { .. } => {
            RecordError::Io(std::io::Error::from(std::io::ErrorKind::NotFound))
        }
        OperatorFileError::NotRegular { .. } => RecordError::NotAFile,
        OperatorFileError::TooLarge { .. } => RecordError::TooLarge,
        OperatorFileError::Io { source, .. } => RecordError::Io(source),
        other => RecordError::Io(std::io::Error::other(other.to_string())),
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod preloaded_tests;
