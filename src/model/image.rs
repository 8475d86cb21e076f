//! An image's identity and record: [`ImageId`], [`RecordKey`] (image id and runtime handler),
//! [`ImageRecord`] (first detected, last used, size, pinned) and what a detect saw of it
//! ([`Sighting`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::UnixNanos;

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
    /// was ahead (see [`super::FUTURE_STAMP_TOLERANCE`]).
    pub fn clamped(self, limit: UnixNanos, now: UnixNanos) -> ImageRecord {
        let clamp = |t: UnixNanos| if t > limit { now } else { t };
        ImageRecord {
            first_detected: clamp(self.first_detected),
            last_used: clamp(self.last_used),
            ..self
        }
    }
}
