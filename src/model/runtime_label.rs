//! What the agent wrote on one containerd image name (schema 6's `runtime_labels` table): the
//! record the runtime pins' reconcile trusts instead of the labels themselves, so a label
//! another client forged is never taken for the agent's own and one it stripped is still known
//! to be the agent's (`gc::runtime_pin_record`).

use serde::{Deserialize, Serialize};

use super::UnixNanos;

/// The most bytes of a recorded `io.imagekeeper.pinned` value the store keeps (the agent
/// writes a keep reason's short name).
pub const MAX_RUNTIME_LABEL_VALUE_BYTES: usize = 256;

/// The agent's labels on one containerd image name: `io.cri-containerd.pinned=pinned`,
/// `io.imagekeeper.pinned=<value>` and `io.imagekeeper.instance=<this database's instance>`,
/// written (or adopted) at `written_at`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeLabel {
    /// When the record was written: just before the label write it stands for, or when an
    /// upgraded agent adopted a label already there.
    pub written_at: UnixNanos,
    /// The `io.imagekeeper.pinned` value written (why the image is kept).
    pub value: String,
}
