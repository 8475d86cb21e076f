//! Plain data types shared by every layer: identifiers, persisted records, backoff state and
//! the runtime's view of images, containers and the image filesystem.
//!
//! Invariants: persisted times are [`UnixNanos`] (i64 nanoseconds since the Unix epoch), never
//! `Instant`; `UnixNanos::NEVER` (0) means "never used" and sorts before every real time, as in
//! the kubelet. Nothing here talks to redb, tonic or the clock: these are values only.

// The runtime's image list as detect holds it (`ImageList`) and `ImageLike`.
pub(crate) mod image_list;

pub use image_list::{ImageLike, ImageList, ImageRef, Names};

mod containerd;
mod history;
mod image;
mod journal;
mod pin;
mod pull;
mod runtime;
mod runtime_label;
mod signal;
mod time;
mod warm;

pub use containerd::{
    ContainerdBlob, ContainerdContainer, ContainerdImage, ContainerdIngest, ContainerdLease,
    ContainerdSnapshot, ContainerdState, FileUsage, FilesystemUsage, LeaseResource, NamespaceState,
    SnapshotKind, SnapshotUsage, StoreRoot, TaskState,
};
pub use history::{PullEntry, PullKey, PullOrigin, UseInterval, UseKey};
pub use image::{ImageId, ImageRecord, RecordKey, Sighting};
pub use journal::{
    EvictionNote, FsUsage, ImageNames, JournalEntry, JournalRetention, RemovalReason, Remover,
    Repull, leftover_key,
};
pub use pin::{ImagePin, MAX_ACTIVE_PINS, MAX_PIN_REASON_BYTES, PinKey};
pub use pull::{BackoffEntry, MAX_IMAGE_NAME_BYTES, MAX_POD_UID_BYTES, PullCredentials, PullSpec};
pub use runtime::{
    ContainerEvent, ContainerEventKind, ContainerState, ContainerUsage, ImageFsStats,
    PodSandboxConfig, RuntimeContainer, RuntimeImage,
};
pub use runtime_label::{MAX_RUNTIME_LABEL_VALUE_BYTES, RuntimeLabel};
pub use signal::{
    MAX_SIGNAL_ENTRIES, MAX_SIGNAL_ENTRY_IMAGES, RecordedSignal, SignalEntry, SignalKind,
};
pub use time::{FUTURE_STAMP_TOLERANCE, UnixNanos, duration_nanos, saturating_total};
pub use warm::{StoredWarmState, WarmRow};

#[cfg(test)]
mod tests;
