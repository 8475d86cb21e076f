//! Offline inspection of a record database, for `imagekeeper inspect`: a verified snapshot
//! (`snapshot.rs`: a private copy taken under a read transaction, opened with redb's integrity
//! check, taken again if the file changed while it was copied) that works alongside a running
//! agent and on a file that needs crash recovery, prefix lookup of image ids, sorting,
//! statistics, and the full check. Every read of the snapshot runs under a panic guard
//! (`guard.rs`). Invariants: nothing here ever writes, creates or removes anything at or
//! beside the inspected path; a damaged file is refused, never read wrong.

mod guard;
mod snapshot;
pub mod workload;

use std::cmp::Reverse;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::model::{
    BackoffEntry, ImageId, ImageNames, ImagePin, JournalEntry, PinKey, PullEntry, PullKey,
    RecordKey, RuntimeImage, UnixNanos, UseInterval, UseKey, WarmRow,
};
use crate::reference::image_matches;
use crate::store::{JournalKey, Store, StoreError, StoredRecord, Violation, meta_keys};

/// What can go wrong inspecting a database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The copy could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "database {path} is a {kind}, not a regular file; inspect reads only a regular file \
         (a symlink is followed to one)"
    )]
    /// The path is not a regular file (after symlinks); exit 2.
    NotRegular {
        /// The path given.
        path: PathBuf,
        /// What it is instead (`directory`, `socket`, ...).
        kind: &'static str,
    },
    /// The private copy could not be made (the file unreadable, no room for the copy).
    #[error("database {path}: making a temporary copy: {source}")]
    Copy {
        /// The path given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "database {path} is damaged: redb failed an internal assertion reading a verified copy \
         ({detail}); the file was left as it is"
    )]
    /// redb panicked reading the verified copy: the file is damaged and left as it is.
    Damaged {
        /// The path given.
        path: PathBuf,
        /// The panic's message.
        detail: String,
    },
    #[error(
        "database {path} changed while it was being copied, on each of {attempts} attempts, and \
         no copy verified; it is being written right now: try again"
    )]
    /// Every copy changed under the copier (a writer at work): try again.
    KeptChanging {
        /// The path given.
        path: PathBuf,
        /// The copies taken (`snapshot::COPY_ATTEMPTS`).
        attempts: u32,
    },
    /// An empty image id prefix was given; exit 2.
    #[error("the image id prefix is empty")]
    EmptyPrefix,
    /// No record or journal entry matches the query.
    #[error("no image id starts with {prefix:?} in {path}")]
    NotFound {
        /// The query.
        prefix: String,
        /// The database.
        path: PathBuf,
    },
    #[error(
        "image id prefix {prefix:?} is ambiguous, it matches: {}",
        escaped_list(matches)
    )]
    /// The query matches several image ids.
    Ambiguous {
        /// The query.
        prefix: String,
        /// The ids it matches.
        matches: Vec<String>,
    },
}

impl InspectError {
    /// Whether the error is the operator's input (exit 2) rather than a failure (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            InspectError::EmptyPrefix | InspectError::NotRegular { .. }
        )
    }
}

/// Ids as they are, but with control characters escaped (they come from the file).
fn escaped_list(ids: &[String]) -> String {
    ids.iter()
        .map(|id| escape_control(id))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `s` with every character that could drive a terminal escaped: C0 and C1 controls and DEL
/// (`\n`, `\t`, `\r`, or `\u{1b}`), and the bidirectional and zero-width format characters
/// that reorder or hide text. Everything else, backslashes included, is left as it is.
pub fn escape_control(s: &str) -> std::borrow::Cow<'_, str> {
    let risky = |c: char| {
        c.is_control()
            || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}' | '\u{feff}')
    };
    if !s.chars().any(risky) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if risky(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A verified, consistent, read-only view of a database: a private copy of the file (see
/// `snapshot.rs`), repaired if the file needed crash recovery.
pub struct Snapshot {
    store: Store,
    path: PathBuf,
    repaired: bool,
    discarded: u32,
    _copy: tempfile::TempDir,
}

impl Snapshot {
    /// Takes a verified copy of `path` (alongside a running agent if there is one). A file that
    /// needs recovery is repaired in the copy; the file itself is never written. A damaged
    /// file, a non-regular one and a missing one are refused.
    pub fn open(path: &Path) -> Result<Snapshot, InspectError> {
        guard::refuse_panics(path, || {
            let copy = snapshot::verified_copy(path)?;
            Ok(Snapshot {
                store: copy.store,
                path: path.to_owned(),
                repaired: copy.needed_recovery,
                discarded: copy.discarded,
                _copy: copy.dir,
            })
        })
    }

    /// The verified copy's store and the private directory holding it (the copy lives while
    /// the directory does), for a read-only command that runs the GC's or the pins' own code
    /// on what `inspect` reads (`gc --dry-run`, `prune --dry-run`, `pins`, `restore --dry-run`
    /// without an agent, issue 41): every page's checksum was verified at the open, so the
    /// command reads the file as written or is refused here, never a damaged page.
    pub fn into_store(self) -> (Store, tempfile::TempDir) {
        (self.store, self._copy)
    }

    /// The inspected file (not the copy).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file needed recovery and this is a repaired copy.
    pub fn repaired(&self) -> bool {
        self.repaired
    }

    /// How many copies were discarded because the file changed while they were taken.
    pub fn discarded_copies(&self) -> u32 {
        self.discarded
    }

    /// Runs a read of the copy under the panic guard.
    fn read<T>(&self, f: impl FnOnce(&Store) -> Result<T, StoreError>) -> Result<T, InspectError> {
        guard::refuse_panics(&self.path, || f(&self.store).map_err(InspectError::from))
    }

    /// Every record, in eviction order.
    pub fn records_in_eviction_order(&self) -> Result<Vec<StoredRecord>, InspectError> {
        self.read(|s| s.eviction_order()?.collect())
    }

    /// Every record, ordered by key.
    pub fn records(&self) -> Result<Vec<StoredRecord>, InspectError> {
        self.read(Store::records)
    }

    /// Every pull backoff entry, by key (`{pod uid}_{image}`), ordered by key.
    pub fn backoff_entries(&self) -> Result<Vec<(String, BackoffEntry)>, InspectError> {
        self.read(Store::backoff_entries)
    }

    /// Every image's names (schema 2), by record key.
    pub fn names(&self) -> Result<NamesByKey, InspectError> {
        Ok(self.read(Store::all_names)?.into_iter().collect())
    }

    /// The operators' pins (schema 4), ordered by key, active or expired.
    pub fn pins(&self) -> Result<Vec<(PinKey, ImagePin)>, InspectError> {
        self.read(Store::pins)
    }

    /// The pins active at `now` resolved against the names the store last listed for each
    /// record (a detect refreshes them), as the agent resolves them against the runtime's
    /// list: what `inspect list` marks. `inspect explain` also names irreplaceable images
    /// ([`Self::protections_offline`]).
    pub fn protections(
        &self,
        records: &[StoredRecord],
        now: UnixNanos,
    ) -> Result<crate::gc::Protections, InspectError> {
        let pins = self.pins()?;
        if pins.is_empty() {
            return Ok(crate::gc::Protections::default());
        }
        let names = self.names()?;
        let images: Vec<RuntimeImage> = records
            .iter()
            .map(|r| crate::gc::stored_image(r, &names))
            .collect();
        Ok(crate::gc::Protections::resolve(&images, &pins, None, now))
    }

    /// The use intervals (schema 5): open ones first, then closed ones, oldest start first.
    pub fn uses(&self) -> Result<Vec<(UseKey, UseInterval)>, InspectError> {
        self.read(Store::uses)
    }

    /// The pull history (schema 5), oldest first.
    pub fn pulls(&self) -> Result<Vec<(PullKey, PullEntry)>, InspectError> {
        self.read(Store::pulls)
    }

    /// The cluster signals' changes the agent recorded (schema 7), oldest first.
    pub fn signals(&self) -> Result<Vec<crate::model::SignalEntry>, InspectError> {
        self.read(Store::signals)
    }

    /// The warm set's state at the agent's last warm cycle (schema 5), priority order.
    pub fn warm_rows(&self) -> Result<Vec<WarmRow>, InspectError> {
        self.read(Store::warm_rows)
    }

    /// What `inspect explain` names offline: the active pins (as [`Self::protections`]) and,
    /// with `irreplaceable`, the images that cannot come back as far as the file tells: a
    /// record whose stored names have no repo digest, and the sandbox image the caller names
    /// (the file does not hold the runtime's). A record with no names stored (no detect since
    /// it was recorded) is not judged irreplaceable: returned is how many there are.
    pub fn protections_offline(
        &self,
        records: &[StoredRecord],
        now: UnixNanos,
        irreplaceable: Option<&crate::gc::Irreplaceable>,
    ) -> Result<(crate::gc::Protections, usize), InspectError> {
        let pins = self.pins()?;
        let names = self.names()?;
        let (named, unnamed): (Vec<&StoredRecord>, Vec<&StoredRecord>) =
            records.iter().partition(|r| names.contains_key(&r.key));
        let image = |r: &&StoredRecord| crate::gc::stored_image(r, &names);
        let mut protections = crate::gc::Protections::resolve(
            named.iter().map(image).collect::<Vec<_>>(),
            &pins,
            irreplaceable,
            now,
        );
        protections.extend(crate::gc::Protections::resolve(
            unnamed.iter().map(image).collect::<Vec<_>>(),
            &pins,
            None,
            now,
        ));
        let unnamed = if irreplaceable.is_some() {
            unnamed.len()
        } else {
            0
        };
        Ok((protections, unnamed))
    }

    /// The eviction journal (schema 2), oldest first.
    pub fn journal(&self) -> Result<Vec<(JournalKey, JournalEntry)>, InspectError> {
        self.read(Store::journal)
    }

    /// Every meta value, ordered by name.
    pub fn meta_entries(&self) -> Result<Vec<(String, i64)>, InspectError> {
        self.read(Store::meta_entries)
    }

    /// The file's meta entries the inspector shows (the schema version the file had before
    /// the copy was upgraded).
    pub fn meta(&self) -> Result<MetaInfo, InspectError> {
        let entries = self.read(Store::meta_entries)?;
        let get = |name: &str| entries.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let time = |name: &str| get(name).map(UnixNanos);
        Ok(MetaInfo {
            // The file's own version, not its upgraded private copy's.
            schema_version: self
                .store
                .upgraded_from()
                .or_else(|| get(meta_keys::SCHEMA_VERSION)),
            created_at: time(meta_keys::CREATED_AT),
            agent_started_at: time(meta_keys::AGENT_STARTED_AT),
            last_detect: time(meta_keys::LAST_DETECT),
            heartbeat: time(meta_keys::HEARTBEAT),
        })
    }

    /// The store's invariants, redb's integrity check and stamps later than `now` (beyond
    /// the tolerance: see `Store::check_at`), on the copy.
    pub fn check(&mut self, now: UnixNanos) -> Result<CheckReport, InspectError> {
        let path = self.path.clone();
        let store = &mut self.store;
        let violations = guard::refuse_panics(&path, || Ok(store.check_at(now)?))?;
        Ok(CheckReport {
            needed_recovery: self.repaired,
            violations,
        })
    }
}

/// The meta entries the inspector shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MetaInfo {
    /// The file's schema version (before any upgrade of the copy).
    pub schema_version: Option<i64>,
    /// When the database was created.
    pub created_at: Option<UnixNanos>,
    /// When an agent last started on it.
    pub agent_started_at: Option<UnixNanos>,
    /// The last detect's time (the records' in-use stamp).
    pub last_detect: Option<UnixNanos>,
    /// The latest detect's time, written at every detect: the last time the agent watched.
    pub heartbeat: Option<UnixNanos>,
}

/// How `list` orders records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SortKey {
    /// Eviction order: the order GC walks (never used first, then least recently used).
    Eviction,
    /// Largest first.
    Size,
    /// Most recently used first; never used last.
    LastUsed,
    /// Most recently detected first.
    FirstDetected,
}

/// Sorts records that are in eviction order by `by`; ties keep eviction order.
pub fn sort_records(records: &mut [StoredRecord], by: SortKey) {
    match by {
        SortKey::Eviction => {}
        SortKey::Size => records.sort_by_key(|r| Reverse(r.record.size)),
        SortKey::LastUsed => records.sort_by_key(|r| Reverse(r.record.last_used)),
        SortKey::FirstDetected => records.sort_by_key(|r| Reverse(r.record.first_detected)),
    }
}

/// The records of the one image id that `prefix` names, like crictl: a prefix of the id with
/// or without `sha256:`; an exact id wins over longer ids it is a prefix of. Several records
/// come back when the image is recorded for several runtime handlers.
fn resolve_prefix(
    records: &[StoredRecord],
    prefix: &str,
    path: &Path,
) -> Result<Vec<StoredRecord>, InspectError> {
    let bare = prefix.strip_prefix("sha256:").unwrap_or(prefix);
    if bare.is_empty() {
        return Err(InspectError::EmptyPrefix);
    }
    let strip = |id: &str| id.strip_prefix("sha256:").unwrap_or(id).to_owned();
    let mut ids: Vec<String> = records
        .iter()
        .map(|r| r.key.image_id.0.clone())
        .filter(|id| strip(id).starts_with(bare))
        .collect();
    ids.sort();
    ids.dedup();
    let chosen = match ids.as_slice() {
        [] => {
            return Err(InspectError::NotFound {
                prefix: prefix.to_owned(),
                path: path.to_owned(),
            });
        }
        [one] => one.clone(),
        many => match many.iter().find(|id| strip(id) == bare) {
            Some(exact) => exact.clone(),
            None => {
                return Err(InspectError::Ambiguous {
                    prefix: prefix.to_owned(),
                    matches: ids,
                });
            }
        },
    };
    Ok(records
        .iter()
        .filter(|r| r.key.image_id.0 == chosen)
        .cloned()
        .collect())
}

/// Every image's names, by record key.
pub type NamesByKey = std::collections::BTreeMap<RecordKey, ImageNames>;

/// Finds the image `query` names for `inspect show`: a unique prefix of an image id (with or
/// without `sha256:`) among the records, then among the records and the journal (so a prefix
/// matching one record is that record even if journal-only ids share it), as
/// `resolve_prefix` does (an exact id wins over longer ids it is a prefix of); failing that, a
/// name (`busybox:1.35`, a full reference, `repo@sha256:...`, or a bare digest) matched
/// against the stored names as the runtime resolves names ([`image_matches`]). A name that
/// matches several ids prefers those with a record; several left is ambiguous. Returns the
/// image id.
pub fn resolve_query(
    records: &[StoredRecord],
    names: &NamesByKey,
    journal: &[(JournalKey, JournalEntry)],
    query: &str,
    path: &Path,
) -> Result<ImageId, InspectError> {
    // Records first: a prefix matching exactly one record resolves to it even when ids known
    // only from the journal match too (as the name fallback below prefers records), so a
    // prefix that named one record before the journal existed still does.
    if let Ok(found) = resolve_prefix(records, query, path)
        && let Some(first) = found.first()
    {
        return Ok(first.key.image_id.clone());
    }
    let mut known: Vec<StoredRecord> = records.to_vec();
    for (k, e) in journal {
        // A containerd leftover `prune --orphans` removed is no image: its key never resolves
        // a query (`blob:` would share a hex prefix with image ids).
        if e.reason == Some(crate::model::RemovalReason::Orphan) {
            continue;
        }
        if !known.iter().any(|r| r.key.image_id == k.key.image_id) {
            known.push(StoredRecord {
                key: k.key.clone(),
                record: crate::model::ImageRecord {
                    first_detected: e.first_detected,
                    last_used: e.last_used,
                    size: e.size,
                    pinned: false,
                },
            });
        }
    }
    match resolve_prefix(&known, query, path) {
        Ok(found) => {
            if let Some(first) = found.first() {
                return Ok(first.key.image_id.clone());
            }
        }
        Err(InspectError::NotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    let digest = query.starts_with("sha256:").then(|| format!("@{query}"));
    let mut ids: Vec<ImageId> = names
        .iter()
        .filter(|(key, n)| {
            let image = RuntimeImage {
                id: key.image_id.clone(),
                repo_tags: n.repo_tags.clone(),
                repo_digests: n.repo_digests.clone(),
                ..RuntimeImage::default()
            };
            image_matches(query, &image)
                || digest
                    .as_deref()
                    .is_some_and(|d| n.repo_digests.iter().any(|r| r.ends_with(d)))
        })
        .map(|(key, _)| key.image_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    if ids.len() > 1 {
        let recorded: Vec<ImageId> = ids
            .iter()
            .filter(|id| records.iter().any(|r| &r.key.image_id == *id))
            .cloned()
            .collect();
        if !recorded.is_empty() {
            ids = recorded;
        }
    }
    match ids.as_slice() {
        [] => Err(InspectError::NotFound {
            prefix: query.to_owned(),
            path: path.to_owned(),
        }),
        [one] => Ok(one.clone()),
        many => Err(InspectError::Ambiguous {
            prefix: query.to_owned(),
            matches: many.iter().map(|id| id.0.clone()).collect(),
        }),
    }
}

/// Removals in a window and how many of them came back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RepullRate {
    /// Journaled removals in the window.
    pub removals: u64,
    /// Of those, the images pulled again since.
    pub repulled: u64,
    /// `repulled / removals`; 0 without removals.
    pub rate: f64,
}

/// The re-pull rate of the removals of the `window` before `now`.
pub fn repull_rate(
    journal: &[(JournalKey, JournalEntry)],
    now: UnixNanos,
    window: Duration,
) -> RepullRate {
    let since = now.saturating_sub(window);
    let mut r = RepullRate::default();
    for (_, e) in journal.iter().filter(|(k, _)| k.removed_at >= since) {
        r.removals += 1;
        r.repulled += u64::from(e.repulled_at.is_some());
    }
    if r.removals > 0 {
        r.rate = r.repulled as f64 / r.removals as f64;
    }
    r
}

/// One bucket of the last-use histogram.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgeBucket {
    /// `<1h`, `<1d`, `<7d`, `<30d`, `older` or `never`.
    pub label: &'static str,
    /// Records in the bucket.
    pub count: u64,
    /// Their bytes.
    pub size: u64,
}

/// Counts over the records and the backoff table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Records.
    pub records: u64,
    /// Records of images the runtime pins.
    pub pinned: u64,
    /// Records never used.
    pub never_used: u64,
    /// Pull backoff entries.
    pub backoff_entries: u64,
    /// The records' bytes.
    pub total_size: u64,
    /// Records by time since last use at `now`.
    pub last_used: Vec<AgeBucket>,
}

/// The statistics at `now`.
pub fn stats(records: &[StoredRecord], backoff_entries: usize, now: UnixNanos) -> Stats {
    const HOUR: u64 = 3600;
    let bounds: [(&'static str, u64); 4] = [
        ("<1h", HOUR),
        ("<1d", 24 * HOUR),
        ("<7d", 7 * 24 * HOUR),
        ("<30d", 30 * 24 * HOUR),
    ];
    let mut buckets: Vec<AgeBucket> = bounds
        .iter()
        .map(|(label, _)| *label)
        .chain(["older", "never"])
        .map(|label| AgeBucket {
            label,
            count: 0,
            size: 0,
        })
        .collect();
    let mut s = Stats {
        records: 0,
        pinned: 0,
        never_used: 0,
        backoff_entries: u64::try_from(backoff_entries).unwrap_or(u64::MAX),
        total_size: 0,
        last_used: Vec::new(),
    };
    for r in records {
        s.records += 1;
        s.pinned += u64::from(r.record.pinned);
        s.total_size = s.total_size.saturating_add(r.record.size);
        let index = if r.record.last_used == UnixNanos::NEVER {
            s.never_used += 1;
            bounds.len() + 1
        } else {
            let age = now.since(r.record.last_used);
            bounds
                .iter()
                .position(|(_, b)| age < Duration::from_secs(*b))
                .unwrap_or(bounds.len())
        };
        if let Some(bucket) = buckets.get_mut(index) {
            bucket.count += 1;
            bucket.size = bucket.size.saturating_add(r.record.size);
        }
    }
    s.last_used = buckets;
    s
}

/// The outcome of the full check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The file was not closed cleanly (normal after a crash; the agent repairs it on start).
    pub needed_recovery: bool,
    /// What the check found wrong (empty: the file is sound).
    pub violations: Vec<Violation>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ImageRecord, RecordKey};

    /// A schema-1 file (an upgrade's `.bak-v1`) is read through a private copy upgraded to
    /// the current schema; `stats` reports the file's own version, 1, not the copy's.
    #[test]
    fn the_schema_version_shown_is_the_files_not_its_upgraded_copys() {
        let dir = tempfile::tempdir().expect("temp dir");
        for version in [1i64, 2] {
            let db = dir.path().join(format!("records.redb.bak-v{version}"));
            let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("migrations/fixtures/v{version}.redb"));
            std::fs::copy(&fixture, &db).expect("copy the fixture");
            let snap = Snapshot::open(&db).expect("inspects");
            assert_eq!(snap.meta().expect("meta").schema_version, Some(version));
            assert_eq!(std::fs::read(&db).ok(), std::fs::read(&fixture).ok());
        }
        let current = dir.path().join("records.redb");
        drop(Store::open(&current, UnixNanos::from_secs(1)).expect("create"));
        let snap = Snapshot::open(&current).expect("inspects");
        assert_eq!(
            snap.meta().expect("meta").schema_version,
            Some(crate::store::CURRENT_SCHEMA_VERSION)
        );
    }

    /// A loop of symbolic links at the path is bad input (exit 2), not a failure.
    #[test]
    fn a_loop_of_symbolic_links_is_refused_as_bad_input() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::os::unix::fs::symlink(&b, &a).expect("a -> b");
        std::os::unix::fs::symlink(&a, &b).expect("b -> a");
        let err = Snapshot::open(&a).err().expect("refused");
        assert!(err.is_usage(), "{err}");
        assert!(
            err.to_string().contains("a loop of symbolic links"),
            "{err}"
        );
    }

    fn rec(id: &str, handler: &str, last_used_secs: i64, size: u64) -> StoredRecord {
        StoredRecord {
            key: RecordKey::new(id, handler),
            record: ImageRecord {
                first_detected: UnixNanos::from_secs(1),
                last_used: UnixNanos::from_secs(last_used_secs),
                size,
                pinned: false,
            },
        }
    }

    #[test]
    fn prefixes_resolve_like_crictl() {
        let records = vec![
            rec("sha256:abc123", "", 0, 1),
            rec("sha256:abc123", "kata", 0, 1),
            rec("sha256:abd999", "", 0, 1),
            rec("sha256:ff", "", 0, 1),
            rec("sha256:ff00", "", 0, 1),
        ];
        let path = Path::new("/x.redb");
        let ok = |p: &str| {
            resolve_prefix(&records, p, path)
                .map(|v| v.iter().map(|r| r.key.to_string()).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        };
        let both = vec![
            "sha256:abc123".to_owned(),
            "sha256:abc123 (kata)".to_owned(),
        ];
        assert_eq!(ok("abc"), Ok(both.clone()));
        assert_eq!(ok("sha256:abc1"), Ok(both));
        assert_eq!(ok("abd"), Ok(vec!["sha256:abd999".to_owned()]));
        assert_eq!(ok("ff"), Ok(vec!["sha256:ff".to_owned()]), "exact id wins");
        let ambiguous = ok("ab").err().unwrap_or_default();
        assert!(
            ambiguous.contains("ambiguous") && ambiguous.contains("sha256:abd999"),
            "{ambiguous}"
        );
        let missing = ok("0").err().unwrap_or_default();
        assert!(
            missing.contains("no image id starts with \"0\" in /x.redb"),
            "{missing}"
        );
        assert_eq!(
            ok("sha256:"),
            Err("the image id prefix is empty".to_owned())
        );
    }

    #[test]
    fn control_characters_are_escaped_and_everything_else_is_kept() {
        let cases = [
            ("sha256:abc", "sha256:abc"),
            ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
            ("\u{1b}[31mred\u{7}", "\\u{1b}[31mred\\u{7}"),
            ("del\u{7f} csi\u{9b}", "del\\u{7f} csi\\u{9b}"),
            ("bidi\u{202e}txt zw\u{200b}", "bidi\\u{202e}txt zw\\u{200b}"),
            ("back\\slash, ünïcødé, 日本", "back\\slash, ünïcødé, 日本"),
        ];
        for (raw, shown) in cases {
            assert_eq!(escape_control(raw), shown, "{raw:?}");
        }
        assert!(matches!(
            escape_control("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn histogram_buckets_by_last_use() {
        let now = UnixNanos::from_secs(100 * 86_400);
        let ago = |secs: i64| 100 * 86_400 - secs;
        let records = vec![
            rec("a", "", ago(10), 1),
            rec("b", "", ago(3 * 3600), 2),
            rec("c", "", ago(3 * 86_400), 4),
            rec("d", "", ago(10 * 86_400), 8),
            rec("e", "", ago(40 * 86_400), 16),
            rec("f", "", 0, 32),
            rec("g", "", 0, 64),
        ];
        let s = stats(&records, 3, now);
        let got: Vec<(&str, u64, u64)> = s
            .last_used
            .iter()
            .map(|b| (b.label, b.count, b.size))
            .collect();
        assert_eq!(
            got,
            [
                ("<1h", 1, 1),
                ("<1d", 1, 2),
                ("<7d", 1, 4),
                ("<30d", 1, 8),
                ("older", 1, 16),
                ("never", 2, 96)
            ]
        );
        assert_eq!(
            (s.records, s.never_used, s.total_size, s.backoff_entries),
            (7, 2, 127, 3)
        );
    }

    #[test]
    fn sorting_keeps_eviction_order_on_ties() {
        let mut records = vec![
            rec("a", "", 5, 10),
            rec("b", "", 6, 30),
            rec("c", "", 7, 10),
        ];
        sort_records(&mut records, SortKey::Size);
        let ids: Vec<&str> = records.iter().map(|r| r.key.image_id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "c"]);
        sort_records(&mut records, SortKey::LastUsed);
        let ids: Vec<&str> = records.iter().map(|r| r.key.image_id.as_str()).collect();
        assert_eq!(ids, ["c", "b", "a"]);
    }
}
