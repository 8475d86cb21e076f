//! Operators' pins (`imagekeeper pin`): the key, the pin, and the bounds on its reason and on
//! the pins in force.

use serde::{Deserialize, Serialize};

use super::UnixNanos;

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
