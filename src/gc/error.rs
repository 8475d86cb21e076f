//! The GC layer's one error type, with the kubelet's messages.

use std::time::Duration;

use crate::model::RecordKey;
use crate::runtime::CriError;
use crate::store::StoreError;

use crate::format::{aggregate, format_size, go_duration};

/// What can go wrong in detect, GarbageCollect or DeleteUnusedImages.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GcError {
    /// The policy is one the kubelet refuses; the message is the kubelet's.
    #[error("{message}")]
    InvalidPolicy {
        /// The kubelet's message.
        message: String,
    },
    /// A runtime call that failed, returned as it is (the kubelet returns ListImages',
    /// GetPods' and ImageFsStats' errors unwrapped: pkg/kubelet/images/image_gc_manager.go,
    /// detectImages and GarbageCollect), except ContainerStatus's, wrapped as the kubelet
    /// wraps it (see [`runtime_text`]); `op` names the call for logs.
    #[error("{}", runtime_text(op, source))]
    Runtime {
        /// The runtime call.
        op: &'static str,
        /// The runtime's error.
        #[source]
        source: CriError,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A CronJob schedule the CronJob controller would not read (`gc::CronSchedule::parse`).
    #[error("invalid schedule {schedule:?}: {reason}")]
    InvalidSchedule {
        /// The schedule as given.
        schedule: String,
        /// Why it was refused (robfig/cron's reasons).
        reason: String,
    },
    /// The image filesystem reported capacity 0 (the kubelet's InvalidDiskCapacity).
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    /// The store's records did not come in strictly increasing key order: detect merges them
    /// with the runtime's sorted list and would misjudge what is listed, so it stops.
    #[error(
        "the records were not read in key order ({previous} came before {next}): detect stopped"
    )]
    UnorderedRecords {
        /// The record read first.
        previous: RecordKey,
        /// The record read after it, not after it in key order.
        next: RecordKey,
    },
    #[error(
        "Insufficient free disk space on the node's image filesystem ({usage_percent}% of {} used). Failed to free sufficient space by deleting unused images (freed {freed} bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
        format_size(*capacity)
    )]
    /// The percentage rule's failure: the kubelet's InsufficientSpace (pkg/kubelet/images/image_gc_manager.go).
    InsufficientSpace {
        /// Percent of the filesystem used.
        usage_percent: i64,
        /// The filesystem's capacity in bytes.
        capacity: u64,
        /// Bytes freed.
        freed: i64,
    },
    /// The inode rule's failure: the kubelet's InsufficientSpace wording
    /// (pkg/kubelet/images/image_gc_manager.go), said of inodes.
    #[error(
        "Insufficient free inodes on the node's image filesystem ({usage_percent}% of {inodes} inodes used). Failed to free sufficient inodes by deleting unused images (freed {freed} inodes). Investigate inode usage, as it could be used by active images, logs, volumes, or other data."
    )]
    InsufficientInodes {
        /// Percent of the inodes used.
        usage_percent: i64,
        /// The filesystem's inodes.
        inodes: u64,
        /// Inodes freed.
        freed: u64,
    },
    /// The byte budget's failure, in the same wording.
    #[error(
        "Images on the node's image filesystem use {} ({total} bytes), over the budget of {} ({high} bytes). Failed to free down to {low} bytes by deleting unused images (freed {freed} bytes). Investigate image usage, as it could be used by active images.",
        format_size(*total),
        format_size(*high)
    )]
    InsufficientBudget {
        /// The images' total bytes.
        total: u64,
        /// The budget's high line.
        high: u64,
        /// The budget's low line.
        low: u64,
        /// Bytes freed.
        freed: i64,
    },
    #[error(
        "wanted to free {wanted} bytes, but freed {freed} bytes space with errors in image deletion: {}",
        aggregate(errors)
    )]
    /// Removals for space failed (the kubelet's freeSpace error).
    SpaceDeletion {
        /// Bytes the walk wanted to free.
        wanted: i64,
        /// Bytes freed.
        freed: i64,
        /// The removals' errors.
        errors: Vec<String>,
    },
    #[error(
        "wanted to free images older than {}, encountered errors in image deletion: {}",
        go_duration(*max_age),
        aggregate(errors)
    )]
    /// Removals for age failed (the kubelet's freeOldImages error).
    AgeDeletion {
        /// The maximum age.
        max_age: Duration,
        /// The removals' errors.
        errors: Vec<String>,
    },
}

impl GcError {
    /// The reason of the Event (and log line) the image GC manager gives this failure itself,
    /// at every one of them: kubelet master `pkg/kubelet/images/image_gc_manager.go`
    /// `GarbageCollect` says `InvalidDiskCapacity` for a capacity of 0 and
    /// `FreeDiskSpaceFailed` when the space pass freed less than it had to with no removal
    /// failing; a failed removal (`freeSpace`'s error) and every other error have none there
    /// (the kubelet's `StartGarbageCollection` says `ImageGCFailed` of a repeated failure).
    /// imagekeeper's own rules have names of their own: `FreeInodesFailed` (the inode
    /// threshold, which the kubelet's image GC does not have) and `ImageBudgetNotMet` (the byte
    /// budget).
    pub fn event_reason(&self) -> Option<&'static str> {
        match self {
            GcError::InsufficientSpace { .. } => Some("FreeDiskSpaceFailed"),
            GcError::InvalidCapacity => Some("InvalidDiskCapacity"),
            GcError::InsufficientInodes { .. } => Some("FreeInodesFailed"),
            GcError::InsufficientBudget { .. } => Some("ImageBudgetNotMet"),
            _ => None,
        }
    }
}

/// The `op` of a ContainerStatus call (detect's image volumes, a container-created mark).
pub(crate) const CONTAINER_STATUS_OP: &str = "get container status";

/// A failed runtime call's text. The kubelet returns most runtime errors as they are, but a
/// ContainerStatus failure twice wrapped: `handleImageVolumes` returns `get container
/// status: %w` around the runtime manager's `runtime container status: %w`
/// (pkg/kubelet/images/image_gc_manager.go, pkg/kubelet/kuberuntime/kuberuntime_manager.go,
/// kubelet v1.37.2), so an ImageGCFailed Event reads the same from either.
fn runtime_text(op: &str, source: &CriError) -> String {
    if op == CONTAINER_STATUS_OP {
        format!("{CONTAINER_STATUS_OP}: runtime container status: {source}")
    } else {
        source.to_string()
    }
}
