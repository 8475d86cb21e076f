//! Plain data types shared by every layer: identifiers, persisted records, backoff state and
//! the runtime's view of images, containers and the image filesystem.
//!
//! Invariants: persisted times are [`UnixNanos`] (i64 nanoseconds since the Unix epoch), never
//! `Instant`; `UnixNanos::NEVER` (0) means "never used" and sorts before every real time, as in
//! the kubelet. Nothing here talks to redb, tonic or the clock: these are values only.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

// The runtime's image list as detect holds it (`ImageList`) and `ImageLike`.
pub(crate) mod image_list;

pub use image_list::{ImageLike, ImageList, ImageRef, Names};

/// A point in time as i64 nanoseconds since the Unix epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct UnixNanos(pub i64);

impl UnixNanos {
    /// "Never used": sorts before every real time.
    pub const NEVER: UnixNanos = UnixNanos(0);

    /// `secs` seconds after the Unix epoch (saturating at the ends of the i64 range).
    pub fn from_secs(secs: i64) -> UnixNanos {
        UnixNanos(secs.saturating_mul(1_000_000_000))
    }

    /// Whole seconds since the Unix epoch, rounded down.
    pub fn as_secs(self) -> i64 {
        self.0.div_euclid(1_000_000_000)
    }

    /// `self + d`, saturating at the ends of the i64 range.
    pub fn saturating_add(self, d: Duration) -> UnixNanos {
        UnixNanos(self.0.saturating_add(duration_nanos(d)))
    }

    /// `self - d`, saturating at the ends of the i64 range.
    pub fn saturating_sub(self, d: Duration) -> UnixNanos {
        UnixNanos(self.0.saturating_sub(duration_nanos(d)))
    }

    /// The time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: UnixNanos) -> Duration {
        let nanos = self.0.saturating_sub(earlier.0);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
    }
}

/// How far after `now` a stored stamp may lie before detect clamps it to `now` and
/// `inspect check` reports it, and how far a detect's `now` may fall behind the stored
/// `last_detect` before it counts as the clock going back. Smaller gaps are ordinary (an NTP
/// slew, a detect that queued behind another for the cycle lock, a pull's mark taken a moment
/// after the detect's `now`) and cost nothing: such a stamp ages normally within minutes.
pub const FUTURE_STAMP_TOLERANCE: Duration = Duration::from_secs(10 * 60);

/// The sum of runtime-reported sizes, saturating at `u64::MAX`: a runtime may report sizes near
/// the top of the range, and a plain sum would panic in debug builds and wrap in release ones.
pub fn saturating_total(sizes: impl IntoIterator<Item = u64>) -> u64 {
    sizes.into_iter().fold(0, u64::saturating_add)
}

/// A `Duration` as i64 nanoseconds, saturating at `i64::MAX`.
pub fn duration_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// An image id as the runtime reports it (`sha256:<config digest>` for containerd).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ImageId(pub String);

impl ImageId {
    /// An image id as the runtime gives it (e.g. `sha256:…`).
    pub fn new(id: impl Into<String>) -> ImageId {
        ImageId(id.into())
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id without its `sha256:` prefix, cut to 13 characters, as `crictl images` shows it.
    pub fn short(&self) -> &str {
        let hex = self.0.strip_prefix("sha256:").unwrap_or(&self.0);
        hex.get(..13).unwrap_or(hex)
    }
}

impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The key of an image record: the image id and the runtime handler it was pulled for
/// (KEP-4216). The empty handler is the runtime's default.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RecordKey {
    /// The image id.
    pub image_id: ImageId,
    /// The runtime handler the image is for; empty for the default.
    pub runtime_handler: String,
}

impl RecordKey {
    /// The key of `image_id` under `runtime_handler`.
    pub fn new(image_id: impl Into<String>, runtime_handler: impl Into<String>) -> RecordKey {
        RecordKey {
            image_id: ImageId::new(image_id),
            runtime_handler: runtime_handler.into(),
        }
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.runtime_handler.is_empty() {
            write!(f, "{}", self.image_id)
        } else {
            write!(f, "{} ({})", self.image_id, self.runtime_handler)
        }
    }
}

/// What the store keeps of one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// When imagekeeper first saw the image.
    pub first_detected: UnixNanos,
    /// When a container last used the image; `UnixNanos::NEVER` when never.
    pub last_used: UnixNanos,
    /// Size as the runtime reports it, in bytes.
    pub size: u64,
    /// The runtime (or a pin pattern) says this image must never be collected.
    pub pinned: bool,
}

/// What one detect saw of an image: its size and pin as the runtime lists it now, whether a
/// container used it at `now`, and a use someone else recorded (`used_at`: the kubelet's
/// pulled record's time, never later than `now`; `UnixNanos::NEVER` when none).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// When the detect ran.
    pub now: UnixNanos,
    /// Whether a container used the image at `now`.
    pub in_use: bool,
    /// The image's size as listed.
    pub size: u64,
    /// Whether the runtime lists it pinned.
    pub pinned: bool,
    /// A use recorded elsewhere; `UnixNanos::NEVER` when none.
    pub used_at: UnixNanos,
}

impl ImageRecord {
    /// The record after a detect's `sighting`, merged with the record as it is stored at that
    /// moment (`stored`, read inside the write transaction, or `None`). The merge is what keeps
    /// a concurrent pull's mark: last_used never goes back (a mark newer than the detect
    /// stays), first_detected never moves forward (a record a pull created keeps the pull's
    /// time), and size and pinned are the runtime's current values. A recorded use
    /// (`used_at`, capped at `now`) counts like a container's, and never moves last_used back.
    pub fn after_sighting(stored: Option<ImageRecord>, sighting: Sighting) -> ImageRecord {
        let used_now = if sighting.in_use {
            sighting.now
        } else {
            UnixNanos::NEVER
        }
        .max(sighting.used_at.min(sighting.now));
        match stored {
            Some(old) => ImageRecord {
                first_detected: old.first_detected.min(sighting.now),
                last_used: old.last_used.max(used_now),
                size: sighting.size,
                pinned: sighting.pinned,
            },
            None => ImageRecord {
                first_detected: sighting.now,
                last_used: used_now,
                size: sighting.size,
                pinned: sighting.pinned,
            },
        }
    }
}

impl ImageRecord {
    /// Whether first_detected or last_used lies after `limit`.
    pub fn has_stamp_after(&self, limit: UnixNanos) -> bool {
        self.first_detected > limit || self.last_used > limit
    }

    /// The record with each of first_detected and last_used that lies after `limit` set to
    /// `now`, the other fields as they are: how detect undoes stamps written while the clock
    /// was ahead (see [`FUTURE_STAMP_TOLERANCE`]).
    pub fn clamped(self, limit: UnixNanos, now: UnixNanos) -> ImageRecord {
        let clamp = |t: UnixNanos| if t > limit { now } else { t };
        ImageRecord {
            first_detected: clamp(self.first_detected),
            last_used: clamp(self.last_used),
            ..self
        }
    }
}

/// Why imagekeeper removed an image (the `reason` of a journal entry and of
/// `image_garbage_collected_total`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemovalReason {
    /// Unused for longer than MaxAge.
    Age,
    /// Freed for disk space.
    Space,
    /// DeleteUnusedImages.
    Unused,
    /// Freed for inodes: the image filesystem's inode use was at or above the high inode
    /// threshold.
    Inodes,
    /// Freed for the byte budget: the images' total size was above the high budget.
    Budget,
}

impl RemovalReason {
    /// Every reason, in declaration order.
    pub const ALL: [RemovalReason; 5] = [
        RemovalReason::Age,
        RemovalReason::Space,
        RemovalReason::Unused,
        RemovalReason::Inodes,
        RemovalReason::Budget,
    ];

    /// The reason's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::Age => "age",
            RemovalReason::Space => "space",
            RemovalReason::Unused => "unused",
            RemovalReason::Inodes => "inodes",
            RemovalReason::Budget => "budget",
        }
    }

    /// Parses [`RemovalReason::as_str`]'s names.
    pub fn parse(s: &str) -> Option<RemovalReason> {
        RemovalReason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The `reason` label of `image_garbage_collected_total`: the kubelet counts
    /// DeleteUnusedImages under "space"; imagekeeper's own rules under their names.
    pub fn metric_label(self) -> &'static str {
        match self {
            RemovalReason::Age => "age",
            RemovalReason::Space | RemovalReason::Unused => "space",
            RemovalReason::Inodes => "inodes",
            RemovalReason::Budget => "budget",
        }
    }
}

/// An image's names as the runtime last listed them (CRI `repo_tags`, `repo_digests`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ImageNames {
    /// CRI `repo_tags`.
    pub repo_tags: Vec<String>,
    /// CRI `repo_digests`.
    pub repo_digests: Vec<String>,
}

impl ImageNames {
    /// The names `image` lists.
    pub fn of(image: &impl ImageLike) -> ImageNames {
        ImageNames {
            repo_tags: image.repo_tags().to_strings(),
            repo_digests: image.repo_digests().to_strings(),
        }
    }

    /// Whether the image has neither tags nor digests.
    pub fn is_empty(&self) -> bool {
        self.repo_tags.is_empty() && self.repo_digests.is_empty()
    }
}

/// Who removed an image a journal entry records.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Remover {
    /// imagekeeper's GC, MaxAge pass or DeleteUnusedImages.
    Imagekeeper,
    /// Someone else (the kubelet's own GC, `crictl rmi`, another cleaner): a detect found the
    /// image gone while its record was still there.
    External,
}

impl Remover {
    /// The remover's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            Remover::Imagekeeper => "imagekeeper",
            Remover::External => "external",
        }
    }
}

/// The image filesystem around a removal for space: its capacity, the bytes used when the
/// cycle started, and the bytes used the cycle aimed for (the low threshold).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsUsage {
    /// The filesystem's capacity in bytes.
    pub capacity: u64,
    /// Bytes used when the cycle started.
    pub used_before: u64,
    /// Bytes used the cycle aimed for.
    pub target_used: u64,
}

/// What the journal keeps of one removal (its key is the removal time and the record key).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The record as it was when removed.
    pub size: u64,
    /// When the record was first detected.
    pub first_detected: UnixNanos,
    /// When the image was last used.
    pub last_used: UnixNanos,
    /// Why imagekeeper removed it; `None` for an external removal.
    pub reason: Option<RemovalReason>,
    /// Its place in the cycle's eviction order, from 1; `None` for an external removal.
    pub rank: Option<u32>,
    /// The filesystem when the cycle started and its target: removals for space only.
    pub fs: Option<FsUsage>,
    /// Who removed it.
    pub remover: Remover,
    /// When the same image id was seen again (a pull or a detect) within retention.
    pub repulled_at: Option<UnixNanos>,
}

/// How an imagekeeper removal is journaled: the fields the store cannot know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvictionNote {
    /// When imagekeeper removed the image.
    pub removed_at: UnixNanos,
    /// Why.
    pub reason: RemovalReason,
    /// Its place in the cycle's eviction order, from 1.
    pub rank: u32,
    /// The filesystem around the removal: removals for space only.
    pub fs: Option<FsUsage>,
}

/// How long and how many removals the journal keeps; older and surplus entries are pruned in
/// the transactions that write the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalRetention {
    /// Entries older than this are pruned.
    pub max_age: Duration,
    /// At most this many entries are kept, the oldest pruned first.
    pub max_entries: u32,
}

impl Default for JournalRetention {
    /// 30 days and 10,000 entries.
    fn default() -> JournalRetention {
        JournalRetention {
            max_age: Duration::from_secs(30 * 24 * 3600),
            max_entries: 10_000,
        }
    }
}

/// A journal entry that a pull or a detect marked re-pulled, as the store reports it so that
/// the caller can count it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repull {
    /// The image's record key.
    pub key: RecordKey,
    /// When it had been removed.
    pub removed_at: UnixNanos,
    /// Why imagekeeper removed it; `None` for an external removal.
    pub reason: Option<RemovalReason>,
    /// Who removed it.
    pub remover: Remover,
    /// How long after the removal it came back.
    pub delay: Duration,
}

impl Repull {
    /// The `reason` label of `image_repulls_after_eviction_total`: the removal's reason, or
    /// `external`.
    pub fn reason_label(&self) -> &'static str {
        self.reason.map_or("external", RemovalReason::as_str)
    }
}

/// The longest pod uid a pull accepts, in bytes (a Kubernetes uid is a 36-byte UUID); the
/// store refuses a backoff key whose uid part is longer.
pub const MAX_POD_UID_BYTES: usize = 128;
/// The longest image name a pull accepts, in bytes (a reference's name is at most 255 bytes;
/// a tag and a digest add under 200 more); with [`MAX_POD_UID_BYTES`] it bounds a backoff
/// key (`<pod uid>_<image>`).
pub const MAX_IMAGE_NAME_BYTES: usize = 4096;

/// The image-pull backoff state of one key (`<pod uid>_<image>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffEntry {
    /// The current backoff period.
    pub backoff: Duration,
    /// When the entry was last updated (the last failure).
    pub last_update: UnixNanos,
    /// The message of the failure that started this period.
    pub last_error: String,
}

/// One image as the runtime lists it.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RuntimeImage {
    /// The image id.
    pub id: ImageId,
    /// CRI `repo_tags`.
    pub repo_tags: Vec<String>,
    /// CRI `repo_digests`.
    pub repo_digests: Vec<String>,
    /// Size in bytes as the runtime reports it.
    pub size: u64,
    /// Whether the runtime pins it (CRI `pinned`).
    pub pinned: bool,
    /// The runtime handler the image was pulled for; empty for the default.
    pub runtime_handler: String,
}

impl RuntimeImage {
    /// The image's record key (id and runtime handler).
    pub fn record_key(&self) -> RecordKey {
        RecordKey {
            image_id: self.id.clone(),
            runtime_handler: self.runtime_handler.clone(),
        }
    }
}

/// The state of a container as CRI reports it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    /// CRI `CONTAINER_CREATED`.
    Created,
    /// CRI `CONTAINER_RUNNING`.
    Running,
    /// CRI `CONTAINER_EXITED`.
    Exited,
    /// CRI `CONTAINER_UNKNOWN`.
    #[default]
    Unknown,
}

/// One container as the runtime lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeContainer {
    /// The container id.
    pub id: String,
    /// The pod sandbox it belongs to.
    pub pod_sandbox_id: String,
    /// The image as the container spec named it.
    pub image: String,
    /// The image id the container runs (CRI `image_ref`).
    pub image_id: ImageId,
    /// Its state.
    pub state: ContainerState,
    /// The runtime handler of the container's image; empty for the default.
    pub runtime_handler: String,
}

/// What one container needs of the image store, as its ContainerStatus reports it: the image
/// it runs and the images mounted into it as image volumes (KEP-4639).
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerUsage {
    /// The container's state.
    pub state: ContainerState,
    /// The image id the container runs; empty when the runtime did not say.
    pub image_id: ImageId,
    /// The runtime handler of the container's image (its ImageSpec); empty for the default.
    pub runtime_handler: String,
    /// Each image volume's image as the mount names it: the image id the kubelet pulled
    /// (`Mount.image.image`) and, when the runtime reports it, its digest
    /// (`Mount.image.image_ref`, KEP-5365). Empty names are left out.
    pub image_volumes: Vec<String>,
}

/// One container lifecycle event of CRI GetContainerEvents (evented PLEG).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerEventKind {
    /// CRI `CONTAINER_CREATED_EVENT`.
    Created,
    /// CRI `CONTAINER_STARTED_EVENT`.
    Started,
    /// CRI `CONTAINER_STOPPED_EVENT`.
    Stopped,
    /// CRI `CONTAINER_DELETED_EVENT`.
    Deleted,
    /// A type this version does not know.
    Unknown,
}

/// A container event as the runtime streams it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerEvent {
    /// The container the event is about.
    pub container_id: String,
    /// What happened to it.
    pub kind: ContainerEventKind,
    /// Unix nanoseconds, as the runtime stamped it.
    pub created_at: i64,
}

/// The image filesystem: what the runtime reports plus statvfs of its mountpoint.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageFsStats {
    /// Where the image filesystem is mounted.
    pub mountpoint: String,
    /// Bytes used by images, as the runtime reports it.
    pub used_bytes: u64,
    /// Filesystem size in bytes (statvfs).
    pub capacity: u64,
    /// Bytes available to unprivileged users (statvfs).
    pub available: u64,
    /// Inodes images use there, as the runtime reports it (ImageFsInfo `inodes_used`), when
    /// it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
    /// The filesystem's inodes (statvfs `f_files`); 0 when it does not count inodes.
    #[serde(default)]
    pub inodes: u64,
    /// Free inodes (statvfs `f_ffree`).
    #[serde(default)]
    pub inodes_free: u64,
    /// The mountpoints of the container filesystems ImageFsInfo reports beside the image
    /// filesystem (KEP-4191's split: the containers' writable layers elsewhere). Empty when
    /// it reports none (the writable layers share the image filesystem). GC never acts on
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_filesystems: Vec<String>,
    /// The mountpoints of further image filesystems ImageFsInfo reports after the first (the
    /// one the fields above describe).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_image_filesystems: Vec<String>,
    /// The further image filesystems' readings, in ImageFsInfo's order (the mountpoints of
    /// `other_image_filesystems`): what the runtime reports plus statvfs of each mountpoint
    /// (capacity 0 when it could not be read). Their own lists are empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_image_fs: Vec<ImageFsStats>,
    /// The device the mountpoint is on (`st_dev` of stat(2)), when it could be read: two
    /// readings with the same device are one filesystem (containerd may report one image
    /// filesystem per snapshotter, all on the same disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u64>,
}

impl ImageFsStats {
    /// A reading of `mountpoint` with `used_bytes` by images, the filesystem's `capacity`
    /// and `available` bytes, and no inode counts.
    pub fn new(
        mountpoint: impl Into<String>,
        used_bytes: u64,
        capacity: u64,
        available: u64,
    ) -> Self {
        ImageFsStats {
            mountpoint: mountpoint.into(),
            used_bytes,
            capacity,
            available,
            inodes_used: None,
            inodes: 0,
            inodes_free: 0,
            container_filesystems: Vec::new(),
            other_image_filesystems: Vec::new(),
            other_image_fs: Vec::new(),
            device: None,
        }
    }

    /// With the filesystem's `inodes` and `inodes_free` (statvfs).
    pub fn with_inodes(mut self, inodes: u64, inodes_free: u64) -> Self {
        self.inodes = inodes;
        self.inodes_free = inodes_free;
        self
    }

    /// With the further image filesystems' readings, and their mountpoints in
    /// `other_image_filesystems`, in the same order.
    pub fn with_other_image_fs(mut self, readings: Vec<ImageFsStats>) -> Self {
        self.other_image_filesystems = readings.iter().map(|fs| fs.mountpoint.clone()).collect();
        self.other_image_fs = readings;
        self
    }

    /// Inodes in use on the filesystem (by anything): `inodes - inodes_free`.
    pub fn inodes_in_use(&self) -> u64 {
        self.inodes.saturating_sub(self.inodes_free)
    }
}

/// The pod a pull is for, as CRI's PodSandboxConfig carries it to PullImage (the fields the
/// kubelet fills from the pod that imagekeeper knows of: metadata, labels, annotations).
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSandboxConfig {
    /// The pod's name.
    pub name: String,
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The sandbox's attempt number.
    pub attempt: u32,
    /// The pod's labels.
    pub labels: BTreeMap<String, String>,
    /// The pod's annotations.
    pub annotations: BTreeMap<String, String>,
}

/// One PullImage call's image and context, as the kubelet's `PullImage(ctx, ImageSpec, auth,
/// podSandboxConfig)` sends them: the image name and runtime handler, the pod's annotations as
/// the ImageSpec's annotations, and the pod's sandbox config.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullSpec {
    /// The image name to pull.
    pub image: String,
    /// The runtime handler to pull it for; empty for the default.
    pub runtime_handler: String,
    /// The ImageSpec's annotations (the pod's).
    pub annotations: BTreeMap<String, String>,
    /// The pod the pull is for, when known.
    pub sandbox: Option<PodSandboxConfig>,
}

impl PullSpec {
    /// A pull of `image` for `runtime_handler` with no pod context.
    pub fn new(image: impl Into<String>, runtime_handler: impl Into<String>) -> PullSpec {
        PullSpec {
            image: image.into(),
            runtime_handler: runtime_handler.into(),
            ..PullSpec::default()
        }
    }
}

/// Registry credentials for one pull. They pass through to the runtime and are never logged or
/// stored: `Debug` prints only which fields are set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PullCredentials {
    /// CRI AuthConfig `username`.
    pub username: String,
    /// CRI AuthConfig `password`.
    pub password: String,
    /// CRI AuthConfig `auth` (base64 of `user:password`).
    pub auth: String,
    /// CRI AuthConfig `server_address`.
    pub server_address: String,
    /// CRI AuthConfig `identity_token`.
    pub identity_token: String,
    /// CRI AuthConfig `registry_token`.
    pub registry_token: String,
}

impl PullCredentials {
    /// Writes the credentials as a struct named `name` with every secret shown only as set
    /// or empty: the one redaction rule for every type that carries them.
    pub fn fmt_redacted(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &str| {
            if s.is_empty() {
                "<empty>"
            } else {
                "<redacted>"
            }
        };
        f.debug_struct(name)
            .field("username", &set(&self.username))
            .field("password", &set(&self.password))
            .field("auth", &set(&self.auth))
            .field("server_address", &self.server_address)
            .field("identity_token", &set(&self.identity_token))
            .field("registry_token", &set(&self.registry_token))
            .finish()
    }
}

impl fmt::Debug for PullCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_redacted("PullCredentials", f)
    }
}

#[cfg(test)]
mod tests;

/// The most bytes of a pin's reason the store keeps (a longer one is refused at the CLI and
/// by the store).
pub const MAX_PIN_REASON_BYTES: usize = 1024;

/// The most pins in force (`imagekeeper pin`) the store takes: a new pin beyond them is refused
/// (`StoreError::TooManyPins`); replacing a pin, removing one and a database already holding
/// more (written before the cap) work as before. Every detect resolves every pin against every
/// listed image name (issue 53), so the count is kept within what one detect does at once.
pub const MAX_ACTIVE_PINS: usize = 10_000;

/// What an operator pinned (`imagekeeper pin`): an image name as the runtime resolves names
/// (a tag, a digest reference or an image id) and the runtime handler it is pinned under
/// (empty: the default). Schema 4's `pins` table is keyed by it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PinKey {
    /// The image name as pinned.
    pub image: String,
    /// The runtime handler; empty for the default.
    pub runtime_handler: String,
}

impl PinKey {
    /// The pin key of `image` under `runtime_handler`.
    pub fn new(image: impl Into<String>, runtime_handler: impl Into<String>) -> PinKey {
        PinKey {
            image: image.into(),
            runtime_handler: runtime_handler.into(),
        }
    }
}

/// One pin: when it was written, until when it protects (`UnixNanos::NEVER`: no expiry) and
/// the operator's reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePin {
    /// When the pin was written.
    pub created_at: UnixNanos,
    /// The pin protects while `now < until`; `NEVER` (0) is a pin without expiry.
    pub until: UnixNanos,
    /// The operator's reason.
    pub reason: String,
}

impl ImagePin {
    /// Whether the pin still protects at `now`.
    pub fn active_at(&self, now: UnixNanos) -> bool {
        self.until == UnixNanos::NEVER || now < self.until
    }
}

/// Schema 5: the key of one recorded use interval of an image: whether it is closed, when
/// it started, and the image's record key. Open intervals sort before closed ones, so the open
/// ones (one per image in use, at most) are a short prefix range; the closed ones follow in
/// start order, oldest first, so retention prunes from the front. (Field order is byte order.)
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UseKey {
    /// Whether the interval has ended.
    pub closed: bool,
    /// When the interval started.
    pub started_at: UnixNanos,
    /// The image's record key.
    pub key: RecordKey,
}

/// Schema 5: one use interval's last sighting: the latest time a detect saw the image used by
/// a running container, or a container event marked it (at least the interval's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UseInterval {
    /// The latest time the image was seen in use.
    pub last_seen: UnixNanos,
}

/// Who pulled an image, as the pull history (schema 5's `pulls` table) records it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PullOrigin {
    /// imagekeeper's own pull: `imagekeeper pull`, directly or through the agent's admin
    /// socket (EnsureImage).
    #[default]
    Pull,
    /// The agent's warm cycle pulled a warm set entry.
    Warm,
    /// `imagekeeper restore` (or `[warm.fromHistory]`'s restore) pulled it back.
    Restore,
    /// Someone else pulled it (the kubelet, `ctr`, another tool): imagekeeper first saw it at
    /// a detect or a container event, and records it then.
    Detected,
}

impl PullOrigin {
    /// Every origin, in declaration order.
    pub const ALL: [PullOrigin; 4] = [
        PullOrigin::Pull,
        PullOrigin::Warm,
        PullOrigin::Restore,
        PullOrigin::Detected,
    ];

    /// The origin's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            PullOrigin::Pull => "pull",
            PullOrigin::Warm => "warm",
            PullOrigin::Restore => "restore",
            PullOrigin::Detected => "detected",
        }
    }
}

/// Schema 5: the key of one pull in the pull history: when it completed (or, for
/// `Detected`, when imagekeeper first saw the image), then the image's record key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PullKey {
    /// When the pull completed (or the image was first seen).
    pub at: UnixNanos,
    /// The image's record key.
    pub key: RecordKey,
}

/// Schema 5: one pull: the image's size, who pulled it, how long the pull took (zero when
/// imagekeeper did not make it) and the name it was pulled by (empty when not known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullEntry {
    /// The image's size in bytes.
    pub size: u64,
    /// Who pulled it.
    pub origin: PullOrigin,
    /// How long the pull took; zero when imagekeeper did not make it.
    pub took: Duration,
    /// The name it was pulled by; empty when not known.
    pub name: String,
}

/// Where one warm set entry stood at the agent's last warm cycle, as schema 5's `warm` table
/// keeps it for `inspect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoredWarmState {
    /// The image is present.
    Present,
    /// A pull is running.
    Pulling,
    /// Waiting for a pull slot.
    Queued,
    /// It does not fit the space the warm plan allows.
    DoesNotFit,
    /// Its last pull failed.
    Failed,
    /// The entry has expired.
    Expired,
}

impl StoredWarmState {
    /// The state's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            StoredWarmState::Present => "present",
            StoredWarmState::Pulling => "pulling",
            StoredWarmState::Queued => "queued",
            StoredWarmState::DoesNotFit => "does_not_fit",
            StoredWarmState::Failed => "failed",
            StoredWarmState::Expired => "expired",
        }
    }
}

/// Schema 5: one warm set entry's state at the last warm cycle, keyed in the `warm` table by
/// its position in the set (priority order). `image_id` is the image the runtime listed for
/// the entry (empty when it has none): how `inspect list` marks warm images offline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmRow {
    /// The entry's image name.
    pub image: String,
    /// The runtime handler; empty for the default.
    pub runtime_handler: String,
    /// Where the entry stood.
    pub state: StoredWarmState,
    /// When the entry entered this state (kept from the previous cycle while it stays).
    pub since: UnixNanos,
    /// The image the runtime listed for the entry; empty when none.
    pub image_id: String,
}
