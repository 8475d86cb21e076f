//! Schema 5's use and pull history: an image's use intervals and who pulled it, when.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{RecordKey, UnixNanos};

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
