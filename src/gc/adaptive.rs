//! The order the space walk removes images in: the kubelet's (least recently used first, the
//! store's eviction index read lazily; the default) or imagekeeper's opt-in `adaptive` order.

use serde::{Deserialize, Serialize};

/// `imageGCPolicy`: the order the space walk removes images in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum GcOrder {
    /// The kubelet's: least recently used first, then first detected, read from the index.
    #[default]
    KubeletOrder,
    /// imagekeeper's adaptive order (see the module's documentation).
    Adaptive,
}

impl GcOrder {
    pub fn as_str(self) -> &'static str {
        match self {
            GcOrder::KubeletOrder => "kubelet-order",
            GcOrder::Adaptive => "adaptive",
        }
    }
}
