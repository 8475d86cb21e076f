//! The config file's values that need a type of their own ([`Quantity`], [`FromHistorySpec`]):
//! below the settings table, which names them, and `file.rs`, which reads the file.

use serde::Deserialize;

/// `[warmFromHistory]`: `usedWithin` (Go syntax, default 24h) and `maxBytes` (bytes or a
/// quantity such as `50Gi`; none: no budget).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FromHistorySpec {
    /// `usedWithin`: a Go duration; images used this recently are pulled back (default 24h).
    #[serde(rename = "usedWithin")]
    pub used_within: Option<String>,
    /// `maxBytes`: the most bytes pulled back; `None`: no budget.
    #[serde(rename = "maxBytes")]
    pub max_bytes: Option<crate::warm::SizeSpec>,
}

/// A size in a config file: a Kubernetes quantity string (`"500Gi"`) or a number of bytes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    /// A number of bytes (`500000000000`).
    Bytes(u64),
    /// A Kubernetes quantity (`"500Gi"`), checked when the setting is resolved.
    Text(String),
}

impl Quantity {
    pub(super) fn bytes(&self) -> Result<u64, String> {
        match self {
            Quantity::Bytes(n) => Ok(*n),
            Quantity::Text(t) => crate::format::parse_byte_quantity(t),
        }
    }
}
