//! containerd as it is, read through its own API (not the CRI): every namespace's images,
//! containers and their tasks, snapshots (each snapshotter's, with their own usage), content
//! blobs (with their labels), ingests in progress and leases (with their resources), and where
//! its stores live. `cri::ContainerdView` reads it; `disk` accounts the image filesystem's
//! bytes from it. Plain values: no tonic, no I/O.
//!
//! Invariants: names, digests, keys and labels are exactly containerd's; times are
//! [`UnixNanos`] (0 when containerd sent none); sizes are containerd's, negative ones read as
//! 0. A snapshot's `usage` is `None` when its Usage call failed (the snapshot is still listed).

use std::collections::BTreeMap;

use super::UnixNanos;

/// Everything `inspect disk` reads of one containerd.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdState {
    /// Each namespace, in containerd's order.
    pub namespaces: Vec<NamespaceState>,
    /// The content store (one for every namespace: a blob is stored once by digest).
    pub content_store: Option<StoreRoot>,
    /// The snapshotters read (loaded without an init error), by plugin id (`overlayfs`).
    pub snapshotters: Vec<StoreRoot>,
    /// containerd's own databases (the metadata store's `meta.db`, each snapshotter's
    /// `metadata.db`) and their bytes on disk.
    pub metadata_files: Vec<FileUsage>,
    /// What could not be read (a snapshotter whose List failed, a Usage call that failed), each
    /// a sentence; the accounting is short by those objects.
    pub warnings: Vec<String>,
}

/// Where a store keeps its files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreRoot {
    /// The plugin id (`content`, `overlayfs`, `native`, ...).
    pub name: String,
    /// The plugin's exported `root`, when it says one.
    pub root: Option<String>,
    /// The device (`st_dev`) of `root`, when it could be read.
    pub device: Option<u64>,
}

/// A file's bytes on disk (st_blocks × 512) and its device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileUsage {
    /// The file's path.
    pub path: String,
    /// Bytes allocated on disk.
    pub bytes: u64,
    /// Its device (`st_dev`).
    pub device: Option<u64>,
}

/// One containerd namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceState {
    /// The namespace (`k8s.io` is the CRI's).
    pub name: String,
    /// Its image names.
    pub images: Vec<ContainerdImage>,
    /// Its containers (with their task's status).
    pub containers: Vec<ContainerdContainer>,
    /// Its snapshots, of every snapshotter read.
    pub snapshots: Vec<ContainerdSnapshot>,
    /// Its content blobs (the namespace's view of the shared content store).
    pub content: Vec<ContainerdBlob>,
    /// Its ingests in progress (partial writes to the content store).
    pub ingests: Vec<ContainerdIngest>,
    /// Its leases.
    pub leases: Vec<ContainerdLease>,
}

/// An image name and the content it names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdImage {
    /// The name (a CRI pull stores two: the tag and `repo@sha256:...`).
    pub name: String,
    /// The target descriptor's digest (an index or a manifest).
    pub target_digest: String,
    /// The target's media type.
    pub target_media_type: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// What a container's task is doing, as containerd's Tasks service says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum TaskState {
    /// No task: the container exists but nothing runs (a CRI container that exited and whose
    /// task was deleted, a container created and never started).
    #[default]
    None,
    /// Created, not started.
    Created,
    /// Running (or pausing/paused).
    Running,
    /// Exited.
    Stopped,
    /// A status this reader does not know.
    Unknown,
}

impl TaskState {
    /// Whether the container counts as running (running, pausing or paused).
    pub fn is_running(self) -> bool {
        self == TaskState::Running
    }
}

/// A container record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdContainer {
    /// Its id.
    pub id: String,
    /// The image it was made from (a name; may be gone).
    pub image: String,
    /// The snapshotter of its root filesystem.
    pub snapshotter: String,
    /// Its read-write snapshot's key (empty when the rootfs is not a snapshot).
    pub snapshot_key: String,
    /// When it was created.
    pub created_at: UnixNanos,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its task's state.
    pub task: TaskState,
}

/// A snapshot's kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum SnapshotKind {
    /// Unknown to this reader.
    #[default]
    Unknown,
    /// A read-only view.
    View,
    /// Writable (a container's root filesystem, an unpack in progress).
    Active,
    /// Committed (an image layer).
    Committed,
}

/// Bytes and inodes a snapshot holds itself (not its parents).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotUsage {
    /// Bytes on disk.
    pub bytes: u64,
    /// Inodes.
    pub inodes: u64,
}

/// A snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdSnapshot {
    /// Its snapshotter.
    pub snapshotter: String,
    /// Its name (key).
    pub name: String,
    /// Its parent's name (empty for a base layer).
    pub parent: String,
    /// Its kind.
    pub kind: SnapshotKind,
    /// When it was created.
    pub created_at: UnixNanos,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its own usage (Snapshots.Usage); `None` when that call failed.
    pub usage: Option<SnapshotUsage>,
}

/// A content blob as one namespace sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdBlob {
    /// Its digest.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was committed.
    pub created_at: UnixNanos,
    /// Its labels in this namespace.
    pub labels: BTreeMap<String, String>,
}

/// A write to the content store in progress (or abandoned).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdIngest {
    /// Its ref.
    pub reference: String,
    /// Bytes written so far.
    pub offset: u64,
    /// The expected total (0 when unknown).
    pub total: u64,
    /// The expected digest, when given.
    pub expected: String,
    /// When it was last written.
    pub updated_at: UnixNanos,
}

/// What a lease holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LeaseResource {
    /// A content blob by digest.
    Content(String),
    /// A snapshot: (snapshotter, key).
    Snapshot(String, String),
    /// An ingest by ref.
    Ingest(String),
    /// An image by name.
    Image(String),
    /// A type this reader does not know: (type, id).
    Other(String, String),
}

/// A lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdLease {
    /// Its id.
    pub id: String,
    /// When it was created.
    pub created_at: UnixNanos,
    /// Its labels (`containerd.io/gc.expire`, `containerd.io/gc.flat`).
    pub labels: BTreeMap<String, String>,
    /// What it holds.
    pub resources: Vec<LeaseResource>,
}

/// The filesystem an accounting covers, from statvfs: what is used of it by anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilesystemUsage {
    /// The path it was read at (the image filesystem's mountpoint, as ImageFsInfo says).
    pub path: String,
    /// Size in bytes (`f_blocks × f_frsize`).
    pub capacity: u64,
    /// Bytes in use by anything, reserved blocks not counted
    /// (`(f_blocks − f_bfree) × f_frsize`).
    pub used_bytes: u64,
    /// Inodes (`f_files`; 0 on a filesystem that does not count them).
    pub inodes: u64,
    /// Inodes in use (`f_files − f_ffree`).
    pub inodes_used: u64,
    /// Its fragment size (`f_frsize`): a file of n bytes takes n rounded up to it.
    pub block_size: u64,
    /// Its device (`st_dev` of `path`).
    pub device: Option<u64>,
}
