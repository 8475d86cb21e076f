//! The warm set's state as the store keeps it between the agent's warm cycles.

use serde::{Deserialize, Serialize};

use super::UnixNanos;

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
