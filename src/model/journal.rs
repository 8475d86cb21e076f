//! The eviction journal's values: why and by whom an image was removed ([`RemovalReason`],
//! [`Remover`]), the disk usage a removal aimed for, the names an image had, what the journal
//! keeps of one removal, its retention, and a re-pull after a removal ([`Repull`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ImageLike, RecordKey, UnixNanos};

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
    /// `prune --orphans`: a containerd leftover nothing referenced (an orphaned snapshot or an
    /// unreferenced blob, not an image: the entry's key is a [`leftover_key`]).
    Orphan,
}

impl RemovalReason {
    /// Every reason, in declaration order.
    pub const ALL: [RemovalReason; 6] = [
        RemovalReason::Age,
        RemovalReason::Space,
        RemovalReason::Unused,
        RemovalReason::Inodes,
        RemovalReason::Budget,
        RemovalReason::Orphan,
    ];

    /// The reason's name as text.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::Age => "age",
            RemovalReason::Space => "space",
            RemovalReason::Unused => "unused",
            RemovalReason::Inodes => "inodes",
            RemovalReason::Budget => "budget",
            RemovalReason::Orphan => "orphan",
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
            RemovalReason::Orphan => "orphan",
        }
    }
}

/// The record key a leftover's journal entry is filed under ([`RemovalReason::Orphan`]): its
/// "image id" says what it was, `snapshot:<namespace>/<snapshotter>/<key>` or
/// `blob:<namespaces>/<digest>`, so it never equals an image's id (no re-pull marks it, no
/// image record or names row shares it); the runtime handler is empty.
pub fn leftover_key(
    kind: &str,
    namespace: &str,
    snapshotter: Option<&str>,
    name: &str,
) -> RecordKey {
    let id = match snapshotter {
        Some(sn) => format!("{kind}:{namespace}/{sn}/{name}"),
        None => format!("{kind}:{namespace}/{name}"),
    };
    RecordKey::new(id, "")
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
