//! The runtime's view as CRI reports it: images, containers and their events, the image
//! filesystem's figures, and a pod's sandbox config.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ImageId, RecordKey};

/// One image as the runtime lists it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
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
