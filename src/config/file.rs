//! The config file: [`FileConfig`] (KubeletConfiguration's field names, all optional), the
//! values it holds that need their own type ([`Quantity`], [`FromHistorySpec`]), and reading
//! it through the operator-file reader. Invariants: unknown fields are refused; a reload
//! refuses a file that sets nothing unless it carries [`EMPTY_CONFIG_MARKER`].

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;

/// The config file: KubeletConfiguration's field names, all optional.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i64>,
    /// Percent of the image filesystem's inodes used at or above which GC frees inodes (ours).
    #[serde(rename = "imageGCHighInodesThresholdPercent")]
    pub image_gc_high_inodes_threshold_percent: Option<i64>,
    /// Percent of inodes used GC frees down to (ours).
    #[serde(rename = "imageGCLowInodesThresholdPercent")]
    pub image_gc_low_inodes_threshold_percent: Option<i64>,
    /// The images' total size above which GC frees bytes (ours): a quantity (`"500Gi"`) or
    /// a number of bytes.
    #[serde(rename = "imageGCHighBytes")]
    pub image_gc_high_bytes: Option<Quantity>,
    /// The images' total size GC frees down to (ours).
    #[serde(rename = "imageGCLowBytes")]
    pub image_gc_low_bytes: Option<Quantity>,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Option<String>,
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: Option<String>,
    #[serde(rename = "serializeImagePulls")]
    pub serialize_image_pulls: Option<bool>,
    #[serde(rename = "maxParallelImagePulls")]
    pub max_parallel_image_pulls: Option<i32>,
    #[serde(rename = "registryPullQPS")]
    pub registry_pull_qps: Option<f64>,
    #[serde(rename = "registryBurst")]
    pub registry_burst: Option<i64>,
    #[serde(rename = "pinnedImages")]
    pub pinned_images: Option<Vec<String>>,
    #[serde(rename = "podInfraContainerImage")]
    pub pod_infra_container_image: Option<String>,
    /// Keep the images that cannot come back: the runtime's sandbox image and images with no
    /// repo digest (ours; default true).
    #[serde(rename = "protectIrreplaceable")]
    pub protect_irreplaceable: Option<bool>,
    #[serde(rename = "containerRuntimeEndpoint")]
    pub container_runtime_endpoint: Option<String>,
    #[serde(rename = "imageServiceEndpoint")]
    pub image_service_endpoint: Option<String>,
    /// The kubelet's root directory, whose image pull records are read (the kubelet's own
    /// setting is the `--root-dir` flag; this name is ours). Empty disables reading them.
    #[serde(rename = "kubeletRootDir")]
    pub kubelet_root_dir: Option<String>,
    /// How old (file mtime) a kubelet pull intent may be and still keep its image (ours), Go
    /// syntax.
    #[serde(rename = "kubeletIntentMaxAge")]
    pub kubelet_intent_max_age: Option<String>,
    /// Whether to watch the runtime's container events, `auto` or `off` (ours).
    #[serde(rename = "containerEvents")]
    pub container_events: Option<String>,
    /// Whether the runtime carries imagekeeper's keeps as pins (`io.cri-containerd.pinned`
    /// labels), `auto` or `off` (ours).
    #[serde(rename = "runtimePins")]
    pub runtime_pins: Option<String>,
    /// containerd's own API socket, for the runtime pins' labels (ours); default: the CRI
    /// runtime endpoint (containerd serves both on one socket).
    #[serde(rename = "containerdAddress")]
    pub containerd_address: Option<String>,
    /// The space walk's order, `kubelet-order` or `adaptive` (ours).
    #[serde(rename = "imageGCPolicy")]
    pub image_gc_policy: Option<String>,
    /// How long the eviction journal keeps a removal (ours), Go syntax.
    #[serde(rename = "journalMaxAge")]
    pub journal_max_age: Option<String>,
    /// How many removals the eviction journal keeps (ours).
    #[serde(rename = "journalMaxEntries")]
    pub journal_max_entries: Option<i64>,
    /// The kubelet's `--image-credential-provider-config` (a CredentialProviderConfig file);
    /// this name is ours.
    #[serde(rename = "imageCredentialProviderConfig")]
    pub image_credential_provider_config: Option<PathBuf>,
    /// The kubelet's `--image-credential-provider-bin-dir`; this name is ours.
    #[serde(rename = "imageCredentialProviderBinDir")]
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// `[[warm]]`: images kept present ahead of use, in priority order (ours).
    #[serde(rename = "warm")]
    pub warm: Option<Vec<crate::warm::WarmEntrySpec>>,
    /// A directory of warm set files, YAML or JSON (a mounted ConfigMap) (ours).
    #[serde(rename = "warmSetDir")]
    pub warm_set_dir: Option<PathBuf>,
    /// How often the warm cycle runs, Go syntax (ours).
    #[serde(rename = "warmPeriod")]
    pub warm_period: Option<String>,
    /// At most this many warm pulls at once (ours).
    #[serde(rename = "warmParallelPulls")]
    pub warm_parallel_pulls: Option<i64>,
    /// `[warmFromHistory]`: images removed externally and used recently, pulled back (ours).
    #[serde(rename = "warmFromHistory")]
    pub warm_from_history: Option<FromHistorySpec>,
}

/// `[warmFromHistory]`: `usedWithin` (Go syntax, default 24h) and `maxBytes` (bytes or a
/// quantity such as `50Gi`; none: no budget).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FromHistorySpec {
    #[serde(rename = "usedWithin")]
    pub used_within: Option<String>,
    #[serde(rename = "maxBytes")]
    pub max_bytes: Option<crate::warm::SizeSpec>,
}

/// A size in a config file: a Kubernetes quantity string (`"500Gi"`) or a number of bytes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    Bytes(u64),
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

/// The line that makes a config file setting nothing a deliberate one: a reload refuses a file
/// with no setting (empty, white space, comments only: what an editor truncating the file in
/// place leaves for a moment) unless one of its lines is exactly this (surrounding white space
/// aside). Then every setting goes back to its default, as the file says.
pub const EMPTY_CONFIG_MARKER: &str = "# imagekeeper: empty";

impl FileConfig {
    /// Reads and parses a TOML file through the operator-file reader
    /// ([`crate::operator_file::read_text`]): a regular file only (a FIFO or device is refused
    /// at once, never waited on), at most [`crate::operator_file::MAX_OPERATOR_FILE_BYTES`],
    /// nested at most [`crate::operator_file::MAX_NESTING_DEPTH`] brackets deep. Blocking I/O.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        FileConfig::load_text(path).map(|(config, _)| config)
    }

    /// [`FileConfig::load`] for a reload: a file that sets nothing is refused unless it says
    /// so with [`EMPTY_CONFIG_MARKER`], so that a file caught empty does not silently put
    /// every setting (pinned images among them) back to its default.
    pub fn load_for_reload(path: &Path) -> Result<FileConfig, ConfigError> {
        let (config, text) = FileConfig::load_text(path)?;
        let sets_nothing = toml::from_str::<toml::Table>(&text).is_ok_and(|t| t.is_empty());
        if sets_nothing && !text.lines().any(|l| l.trim() == EMPTY_CONFIG_MARKER) {
            return Err(ConfigError::File {
                path: path.to_owned(),
                message: format!(
                    "the file sets nothing (it is empty, or holds only comments): refusing to \
                     reset every setting to its default; a file meant to be empty says so with \
                     a line \"{EMPTY_CONFIG_MARKER}\""
                ),
            });
        }
        Ok(config)
    }

    fn load_text(path: &Path) -> Result<(FileConfig, String), ConfigError> {
        use crate::operator_file::{Follow, read_text};
        let text = read_text(path, Follow::Yes).map_err(|e| {
            // The reader's message starts with the path, which ours already names.
            let full = e.to_string();
            let shown = format!("{}: ", e.path().display());
            ConfigError::File {
                path: path.to_owned(),
                message: full.strip_prefix(&shown).unwrap_or(&full).to_owned(),
            }
        })?;
        let config = toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        Ok((config, text))
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
