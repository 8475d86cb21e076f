//! The agent's configuration: kubelet's flag names and KubeletConfiguration's field names, a
//! TOML file, flags over the file, and validation whose every error names the flag or field
//! that holds the bad value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cri::{CriConfig, DEFAULT_RUNTIME_ENDPOINT};
use crate::format::parse_go_duration;
use crate::gc::{ByteBudget, GcConfig, GcOrder, GcPolicy, InodeThresholds, PinPatterns};
use crate::kubelet::DEFAULT_KUBELET_ROOT_DIR;
use crate::model::JournalRetention;
use crate::pull::{PullConfig, PullConfigError};
use crate::warm::{
    DEFAULT_USED_WITHIN, DEFAULT_WARM_PERIOD, FromHistory, MAX_WARM_ENTRIES, SizeSpec, WarmConfig,
    WarmSet, parse_size, read_warm_dir, resolve_specs,
};

/// The default record database.
pub const DEFAULT_DB: &str = "/var/lib/imagekeeper/records.redb";
/// The default admin socket.
pub const DEFAULT_ADMIN_SOCKET: &str = "/run/imagekeeper/admin.sock";

/// A bad setting: `origin` is the flag (`--registry-qps`) or the file field
/// (`registryPullQPS in /etc/imagekeeper.toml`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    /// The pull settings break kubelet's validation; `origin` is the flag or field set last
    /// (`pull settings` when none was set).
    #[error("{origin}: {source}")]
    Pull {
        origin: String,
        #[source]
        source: PullConfigError,
    },
}

impl From<PullConfigError> for ConfigError {
    /// Pull settings that did not come through [`AgentConfig::resolve`]'s flags or file.
    fn from(source: PullConfigError) -> ConfigError {
        ConfigError::Pull {
            origin: "pull settings".to_owned(),
            source,
        }
    }
}

impl ConfigError {
    /// The message on one line, for a log line or a status: the TOML parser's source excerpt
    /// (the `|` lines) is left out, its position and message kept.
    pub fn one_line(&self) -> String {
        let text = self.to_string();
        let mut parts = text.lines().map(str::trim).filter(|line| {
            let excerpt = line.starts_with('|')
                || line
                    .split_once(" |")
                    .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()));
            !line.is_empty() && !excerpt
        });
        let mut out = parts.next().unwrap_or_default().to_owned();
        for part in parts {
            out.push_str(": ");
            out.push_str(part);
        }
        out
    }
}

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

/// When a changed field takes effect on a reload (SIGHUP or `--config-watch-period`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReload {
    /// Swapped in between cycles: the next detect or GC runs with it.
    Applied,
    /// Kept at its running value and named in a warning until the next start.
    NeedsRestart,
}

/// One field of the config file, for the reference page `docs/src/reference/config.md`
/// (generated from [`CONFIG_FIELDS`] by `scripts/docs`). A unit test checks that the list's
/// keys are exactly the fields [`FileConfig`] accepts, so a new field without an entry fails.
#[derive(Debug, Clone, Copy)]
pub struct ConfigField {
    /// The TOML key (KubeletConfiguration's field name where the kubelet has one).
    pub key: &'static str,
    /// The `imagekeeper run` flag that overrides it (a flag wins over the file); `(none)` for
    /// a field no flag sets (`warm`, `warmParallelPulls`, `warmFromHistory`).
    pub flag: &'static str,
    /// The kubelet's setting it matches, or `None` when the field is imagekeeper's own.
    pub kubelet: Option<&'static str>,
    /// The value in force when neither the file nor the flag sets it, read from the
    /// configuration [`AgentConfig::resolve`] makes out of nothing.
    pub default: fn(&AgentConfig) -> String,
    pub on_reload: OnReload,
    pub help: &'static str,
}

fn duration_text(d: Duration) -> String {
    crate::format::go_duration(d)
}

/// Every config file field, in the order of [`FileConfig`].
pub const CONFIG_FIELDS: &[ConfigField] = &[
    ConfigField {
        key: "imageGCHighThresholdPercent",
        flag: "--image-gc-high-threshold",
        kubelet: Some("KubeletConfiguration imageGCHighThresholdPercent"),
        default: |c| c.gc.policy.high_threshold_percent.to_string(),
        on_reload: OnReload::Applied,
        help: "Image filesystem usage percent at or above which GC frees space.",
    },
    ConfigField {
        key: "imageGCLowThresholdPercent",
        flag: "--image-gc-low-threshold",
        kubelet: Some("KubeletConfiguration imageGCLowThresholdPercent"),
        default: |c| c.gc.policy.low_threshold_percent.to_string(),
        on_reload: OnReload::Applied,
        help: "Usage percent GC frees down to; not above the high threshold.",
    },
    ConfigField {
        key: "imageGCHighInodesThresholdPercent",
        flag: "--image-gc-high-inodes-threshold",
        kubelet: None,
        default: |c| match c.gc.policy.inodes {
            Some(t) => t.high.to_string(),
            None => "off".to_owned(),
        },
        on_reload: OnReload::Applied,
        help: "Percent of the image filesystem's inodes used at or above which GC frees inodes; set with the low one.",
    },
    ConfigField {
        key: "imageGCLowInodesThresholdPercent",
        flag: "--image-gc-low-inodes-threshold",
        kubelet: None,
        default: |c| match c.gc.policy.inodes {
            Some(t) => t.low.to_string(),
            None => "off".to_owned(),
        },
        on_reload: OnReload::Applied,
        help: "Percent of inodes used that GC frees down to; below the high one.",
    },
    ConfigField {
        key: "imageGCHighBytes",
        flag: "--image-gc-high-bytes",
        kubelet: None,
        default: |c| match c.gc.policy.bytes {
            Some(b) => b.high.to_string(),
            None => "off".to_owned(),
        },
        on_reload: OnReload::Applied,
        help: "The images' total size above which GC frees bytes, whatever the percentage (a quantity such as \"500Gi\", or bytes); set with the low one.",
    },
    ConfigField {
        key: "imageGCLowBytes",
        flag: "--image-gc-low-bytes",
        kubelet: None,
        default: |c| match c.gc.policy.bytes {
            Some(b) => b.low.to_string(),
            None => "off".to_owned(),
        },
        on_reload: OnReload::Applied,
        help: "The images' total size GC frees down to; not above the high one.",
    },
    ConfigField {
        key: "imageMinimumGCAge",
        flag: "--minimum-image-ttl-duration",
        kubelet: Some("KubeletConfiguration imageMinimumGCAge"),
        default: |c| duration_text(c.gc.policy.min_age),
        on_reload: OnReload::Applied,
        help: "Images first detected more recently than this are not removed for space (Go duration).",
    },
    ConfigField {
        key: "imageMaximumGCAge",
        flag: "--image-maximum-gc-age",
        kubelet: Some("KubeletConfiguration imageMaximumGCAge"),
        default: |c| duration_text(c.gc.policy.max_age),
        on_reload: OnReload::Applied,
        help: "Images unused for longer than this are removed whatever the disk usage; 0 turns it off.",
    },
    ConfigField {
        key: "serializeImagePulls",
        flag: "--serialize-image-pulls",
        kubelet: Some("KubeletConfiguration serializeImagePulls"),
        default: |c| c.pull.serialize_image_pulls.to_string(),
        on_reload: OnReload::NeedsRestart,
        help: "One pull at a time; a file setting maxParallelImagePulls >= 2 and leaving this unset pulls in parallel, as the kubelet's defaulting does.",
    },
    ConfigField {
        key: "maxParallelImagePulls",
        flag: "--max-parallel-image-pulls",
        kubelet: Some("KubeletConfiguration maxParallelImagePulls"),
        default: |c| match c.pull.max_parallel_image_pulls {
            Some(n) => n.to_string(),
            None => "unlimited".to_owned(),
        },
        on_reload: OnReload::NeedsRestart,
        help: "The most pulls at once when pulls are not serialized.",
    },
    ConfigField {
        key: "registryPullQPS",
        flag: "--registry-qps",
        kubelet: Some("KubeletConfiguration registryPullQPS"),
        default: |c| c.pull.registry_pull_qps.to_string(),
        on_reload: OnReload::NeedsRestart,
        help: "Pulls per second allowed (a token bucket); 0 is no limit.",
    },
    ConfigField {
        key: "registryBurst",
        flag: "--registry-burst",
        kubelet: Some("KubeletConfiguration registryBurst"),
        default: |c| c.pull.registry_burst.to_string(),
        on_reload: OnReload::NeedsRestart,
        help: "The token bucket's burst for registryPullQPS.",
    },
    ConfigField {
        key: "pinnedImages",
        flag: "--pinned-image (repeatable)",
        kubelet: None,
        default: |c| format!("{:?}", c.gc.pins.patterns()),
        on_reload: OnReload::Applied,
        help: "Patterns of images GC never removes: an exact name, or a prefix ending in `*` (CRI-O's pinned_images; containerd 1.6 never reports pinned).",
    },
    ConfigField {
        key: "podInfraContainerImage",
        flag: "--pod-infra-container-image",
        kubelet: Some("kubelet --pod-infra-container-image"),
        default: |c| {
            c.gc.sandbox_image
                .clone()
                .unwrap_or_else(|| "none".to_owned())
        },
        on_reload: OnReload::Applied,
        help: "The sandbox (pause) image, always treated as in use.",
    },
    ConfigField {
        key: "protectIrreplaceable",
        flag: "--protect-irreplaceable",
        kubelet: None,
        default: |c| c.gc.protect_irreplaceable.to_string(),
        on_reload: OnReload::Applied,
        help: "Keep the images that cannot come back: the runtime's sandbox image (its verbose CRI Status, else podInfraContainerImage) and images with no repo digest (imported or side-loaded).",
    },
    ConfigField {
        key: "containerRuntimeEndpoint",
        flag: "--container-runtime-endpoint",
        kubelet: Some("KubeletConfiguration containerRuntimeEndpoint"),
        default: |c| c.cri.runtime_endpoint.clone(),
        on_reload: OnReload::NeedsRestart,
        help: "The CRI runtime's socket.",
    },
    ConfigField {
        key: "imageServiceEndpoint",
        flag: "--image-service-endpoint",
        kubelet: Some("KubeletConfiguration imageServiceEndpoint"),
        default: |c| {
            c.cri
                .image_endpoint
                .clone()
                .unwrap_or_else(|| "the runtime endpoint".to_owned())
        },
        on_reload: OnReload::NeedsRestart,
        help: "The CRI image service's socket, when it is not the runtime's.",
    },
    ConfigField {
        key: "kubeletRootDir",
        flag: "--kubelet-root-dir",
        kubelet: Some("kubelet --root-dir"),
        default: |c| match &c.gc.kubelet_root_dir {
            Some(dir) => dir.display().to_string(),
            None => "\"\"".to_owned(),
        },
        on_reload: OnReload::Applied,
        help: "The kubelet's root directory, whose image pull records are read (never written); an absolute path, or empty to read none. A reload applies it to GC at once; the node credentials' search path keeps the directory of the start.",
    },
    ConfigField {
        key: "kubeletIntentMaxAge",
        flag: "--kubelet-intent-max-age",
        kubelet: None,
        default: |c| {
            duration_text(
                c.gc.kubelet_intent_max_age
                    .unwrap_or(crate::kubelet::DEFAULT_INTENT_MAX_AGE),
            )
        },
        on_reload: OnReload::Applied,
        help: "How old (file mtime) a kubelet pull intent may be and still keep its image; at least 1m.",
    },
    ConfigField {
        key: "containerEvents",
        flag: "--container-events",
        kubelet: None,
        default: |c| c.container_events.as_str().to_owned(),
        on_reload: OnReload::NeedsRestart,
        help: "`auto` watches the runtime's container events (falling back when it has none); `off` never subscribes.",
    },
    ConfigField {
        key: "runtimePins",
        flag: "--runtime-pins",
        kubelet: None,
        default: |c| c.runtime_pins.as_str().to_owned(),
        on_reload: OnReload::NeedsRestart,
        help: "`auto` labels every image imagekeeper keeps `io.cri-containerd.pinned=pinned` in containerd (1.7.3 and later), so the kubelet's image GC and eviction spare it; it turns itself off on containerd 1.6 and other runtimes; `off` writes no label.",
    },
    ConfigField {
        key: "containerdAddress",
        flag: "--containerd-address",
        kubelet: None,
        default: |c| c.containerd_address.clone(),
        on_reload: OnReload::NeedsRestart,
        help: "containerd's own API socket, where the runtime pins' labels are written (namespace `k8s.io`); default: the CRI runtime endpoint.",
    },
    ConfigField {
        key: "imageGCPolicy",
        flag: "--image-gc-policy",
        kubelet: None,
        default: |c| c.gc.order.as_str().to_owned(),
        on_reload: OnReload::Applied,
        help: "The order the space pass removes images in: `kubelet-order` (least recently used first, as the kubelet), `adaptive` (one-off images first, then images by how likely they are to come back) or `predictive` (the furthest estimated next use first, from each image's own use and pull history); see the GC quality section of the design chapter.",
    },
    ConfigField {
        key: "journalMaxAge",
        flag: "--journal-max-age",
        kubelet: None,
        default: |c| duration_text(c.gc.journal_retention.unwrap_or_default().max_age),
        on_reload: OnReload::Applied,
        help: "How long the eviction journal keeps a removal.",
    },
    ConfigField {
        key: "journalMaxEntries",
        flag: "--journal-max-entries",
        kubelet: None,
        default: |c| {
            c.gc.journal_retention
                .unwrap_or_default()
                .max_entries
                .to_string()
        },
        on_reload: OnReload::Applied,
        help: "How many removals the eviction journal keeps; at least 1.",
    },
    ConfigField {
        key: "imageCredentialProviderConfig",
        flag: "--image-credential-provider-config",
        kubelet: Some("kubelet --image-credential-provider-config"),
        default: |c| match &c.credential_providers {
            Some(p) => p.config.display().to_string(),
            None => "none".to_owned(),
        },
        on_reload: OnReload::NeedsRestart,
        help: "A CredentialProviderConfig file: the plugins asked for registry credentials; set with imageCredentialProviderBinDir or not at all.",
    },
    ConfigField {
        key: "imageCredentialProviderBinDir",
        flag: "--image-credential-provider-bin-dir",
        kubelet: Some("kubelet --image-credential-provider-bin-dir"),
        default: |c| match &c.credential_providers {
            Some(p) => p.bin_dir.display().to_string(),
            None => "none".to_owned(),
        },
        on_reload: OnReload::NeedsRestart,
        help: "The directory holding the credential provider plugins.",
    },
    ConfigField {
        key: "warm",
        flag: "(none)",
        kubelet: None,
        default: |c| c.gc.warm.entries().len().to_string() + " entries",
        on_reload: OnReload::Applied,
        help: "[[warm]] tables: images the node keeps present ahead of use, in priority order; fields image, runtimeHandler, for (Go duration) or until (RFC 3339), size (bytes or a quantity). See Warm sets.",
    },
    ConfigField {
        key: "warmSetDir",
        flag: "--warm-set-dir",
        kubelet: None,
        default: |c| match &c.warm.dir {
            Some(d) => d.display().to_string(),
            None => "none".to_owned(),
        },
        on_reload: OnReload::Applied,
        help: "A directory of warm set files (YAML or JSON `warm:` lists; a mounted ConfigMap), read again at each reload.",
    },
    ConfigField {
        key: "warmPeriod",
        flag: "--warm-period",
        kubelet: None,
        default: |c| duration_text(c.warm.period),
        on_reload: OnReload::Applied,
        help: "How often the warm cycle pulls missing warm images; at least 1s.",
    },
    ConfigField {
        key: "warmParallelPulls",
        flag: "(none)",
        kubelet: None,
        default: |c| c.warm.parallel_pulls.to_string(),
        on_reload: OnReload::Applied,
        help: "At most this many warm pulls at once, 1 to 64.",
    },
    ConfigField {
        key: "warmFromHistory",
        flag: "(none)",
        kubelet: None,
        default: |c| match c.warm.from_history {
            Some(_) => "set".to_owned(),
            None => "none".to_owned(),
        },
        on_reload: OnReload::Applied,
        help: "[warmFromHistory] usedWithin (Go duration, default 24h), maxBytes (bytes or a quantity): images removed externally and used within the window, pulled back as warm entries.",
    },
];

impl AgentConfig {
    /// The configuration when no file and no flag sets anything: the defaults
    /// [`CONFIG_FIELDS`] shows.
    pub fn defaults() -> Result<AgentConfig, ConfigError> {
        AgentConfig::resolve(&FileConfig::default(), None, &FlagValues::default())
    }
}

/// A size in a config file: a Kubernetes quantity string (`"500Gi"`) or a number of bytes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    Bytes(u64),
    Text(String),
}

impl Quantity {
    fn bytes(&self) -> Result<u64, String> {
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

/// Values given as flags; `None` means not given.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FlagValues {
    pub db: Option<PathBuf>,
    pub image_gc_high_threshold: Option<i64>,
    pub image_gc_low_threshold: Option<i64>,
    pub image_gc_high_inodes_threshold: Option<i64>,
    pub image_gc_low_inodes_threshold: Option<i64>,
    /// Kubernetes quantities, as given.
    pub image_gc_high_bytes: Option<String>,
    pub image_gc_low_bytes: Option<String>,
    pub minimum_image_ttl_duration: Option<String>,
    pub image_maximum_gc_age: Option<String>,
    pub serialize_image_pulls: Option<bool>,
    pub max_parallel_image_pulls: Option<i32>,
    pub registry_qps: Option<f64>,
    pub registry_burst: Option<i64>,
    pub pod_infra_container_image: Option<String>,
    pub protect_irreplaceable: Option<bool>,
    pub container_runtime_endpoint: Option<String>,
    pub image_service_endpoint: Option<String>,
    pub kubelet_root_dir: Option<String>,
    pub kubelet_intent_max_age: Option<String>,
    pub container_events: Option<String>,
    pub runtime_pins: Option<String>,
    pub containerd_address: Option<String>,
    pub image_gc_policy: Option<String>,
    pub journal_max_age: Option<String>,
    pub journal_max_entries: Option<i64>,
    pub pinned_images: Vec<String>,
    pub admin_socket: Option<PathBuf>,
    pub metrics_address: Option<String>,
    pub detect_period: Option<String>,
    pub gc_period: Option<String>,
    pub image_cache_period: Option<String>,
    pub image_credential_provider_config: Option<PathBuf>,
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    pub warm_set_dir: Option<PathBuf>,
    pub warm_period: Option<String>,
}

/// The credential provider plugins' config file and bin dir (both or neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialProviders {
    pub config: PathBuf,
    pub bin_dir: PathBuf,
}

/// Whether the agent watches the runtime's container events (`--container-events`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContainerEvents {
    /// Watch them when the runtime serves GetContainerEvents (the default).
    #[default]
    Auto,
    /// Never subscribe: on containerd 1.7 and CRI-O 1.26-1.27 the events go to one subscriber,
    /// so beside a kubelet running evented PLEG the agent would take the kubelet's events.
    Off,
}

impl ContainerEvents {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerEvents::Auto => "auto",
            ContainerEvents::Off => "off",
        }
    }
}

/// Whether the agent labels the images it keeps as pinned in containerd (`--runtime-pins`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuntimePins {
    /// On where the runtime can carry pins (containerd 1.7.3 and later); off, with one log
    /// line, a metric and a doctor finding, on containerd 1.6 or another runtime.
    #[default]
    Auto,
    /// Never write a label.
    Off,
}

impl RuntimePins {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimePins::Auto => "auto",
            RuntimePins::Off => "off",
        }
    }
}

/// The shortest `--kubelet-intent-max-age`: an intent younger than a minute is a pull that
/// has barely started.
pub const MIN_INTENT_MAX_AGE: Duration = Duration::from_secs(60);

/// Everything the agent runs with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentConfig {
    pub db: PathBuf,
    pub cri: CriConfig,
    pub gc: GcConfig,
    pub pull: PullConfig,
    pub admin_socket: PathBuf,
    pub metrics_address: Option<SocketAddr>,
    pub detect_period: Duration,
    pub gc_period: Duration,
    pub image_cache_period: Duration,
    /// Keyring pulls (the admin EnsureImage) look for node credentials on the kubelet's docker
    /// config search path from `gc.kubelet_root_dir`, and ask these plugins.
    pub credential_providers: Option<CredentialProviders>,
    /// Whether the container events watcher runs.
    pub container_events: ContainerEvents,
    /// Whether the runtime pins' labels are written.
    pub runtime_pins: RuntimePins,
    /// containerd's API socket for the runtime pins (default: the CRI runtime endpoint).
    pub containerd_address: String,
    /// The warm loop's settings (the warm set itself is `gc.warm`).
    pub warm: WarmConfig,
}

/// The shortest loop period (`--detect-period`, `--gc-period`, `--image-cache-period`): a
/// smaller one would spin the loops against the runtime and the disk.
pub const MIN_LOOP_PERIOD: Duration = Duration::from_secs(1);

/// The longest path a unix socket can be bound at: `sun_path` is 108 bytes on Linux, with
/// its terminating NUL.
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Where a value came from, for error messages.
struct Origin<'a> {
    file: Option<&'a Path>,
}

impl Origin<'_> {
    fn field(&self, field: &str) -> String {
        match self.file {
            Some(path) => format!("{field} in {}", path.display()),
            None => field.to_owned(),
        }
    }
}

/// Picks the flag value over the file value, remembering which one won.
fn pick<T: Clone>(
    flag: &Option<T>,
    flag_name: &str,
    file: &Option<T>,
    field: String,
) -> Option<(T, String)> {
    match (flag, file) {
        (Some(v), _) => Some((v.clone(), flag_name.to_owned())),
        (None, Some(v)) => Some((v.clone(), field)),
        (None, None) => None,
    }
}

fn invalid(origin: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        origin,
        message: message.into(),
    }
}

fn duration(value: &str, origin: &str) -> Result<Duration, ConfigError> {
    parse_go_duration(value).map_err(|e| invalid(origin.to_owned(), e.to_string()))
}

impl AgentConfig {
    /// Defaults, then the file, then the flags; then validation. Each part is resolved by
    /// its own function below, which names the flag or field a bad value came from.
    pub fn resolve(
        file: &FileConfig,
        file_path: Option<&Path>,
        flags: &FlagValues,
    ) -> Result<AgentConfig, ConfigError> {
        let o = Origin { file: file_path };
        let policy = resolve_gc_policy(file, flags, &o)?;
        let pull = resolve_pull(file, flags, &o)?;
        let pins = resolve_pins(file, flags, &o)?;
        let cri = resolve_cri(file, flags, &o)?;
        let sandbox_image = pick(
            &flags.pod_infra_container_image,
            "--pod-infra-container-image",
            &file.pod_infra_container_image,
            o.field("podInfraContainerImage"),
        )
        .map(|(v, _)| v)
        .filter(|v| !v.is_empty());
        if let Some(sandbox) = &sandbox_image {
            let origin = if flags.pod_infra_container_image.is_some() {
                "--pod-infra-container-image".to_owned()
            } else {
                o.field("podInfraContainerImage")
            };
            crate::pull::refuse_credentials(sandbox).map_err(|e| invalid(origin, e.to_string()))?;
        }
        let protect_irreplaceable = pick(
            &flags.protect_irreplaceable,
            "--protect-irreplaceable",
            &file.protect_irreplaceable,
            o.field("protectIrreplaceable"),
        )
        .is_none_or(|(v, _)| v);

        let kubelet_root_dir = resolve_kubelet_root_dir(file, flags, &o)?;
        let kubelet_intent_max_age = resolve_intent_max_age(file, flags, &o)?;
        let container_events = resolve_container_events(file, flags, &o)?;
        let runtime_pins = resolve_runtime_pins(file, flags, &o)?;
        let containerd_address = match pick(
            &flags.containerd_address,
            "--containerd-address",
            &file.containerd_address,
            o.field("containerdAddress"),
        ) {
            Some((v, from)) if !v.is_empty() => {
                crate::cri::socket_path(&v).map_err(|e| invalid(from, e.to_string()))?;
                v
            }
            _ => cri.runtime_endpoint.clone(),
        };
        let order = resolve_gc_order(file, flags, &o)?;
        let journal_retention = resolve_journal_retention(file, flags, &o)?;
        let metrics_address = resolve_metrics_address(flags)?;
        let credential_providers = resolve_credential_providers(file, flags, &o)?;
        let (warm_set, warm) = resolve_warm(file, flags, &o)?;
        let db = flags
            .db
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
        let admin_socket = flags
            .admin_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ADMIN_SOCKET));
        check_admin_socket(&admin_socket, &db, &cri)?;

        Ok(AgentConfig {
            db,
            cri,
            gc: GcConfig {
                policy,
                order,
                sandbox_image,
                protect_irreplaceable,
                pins: PinPatterns::new(pins),
                kubelet_root_dir,
                kubelet_intent_max_age,
                journal_retention,
                warm: warm_set,
            },
            pull,
            admin_socket,
            metrics_address,
            detect_period: period(
                &flags.detect_period,
                "--detect-period",
                Duration::from_secs(300),
            )?,
            gc_period: period(&flags.gc_period, "--gc-period", Duration::from_secs(300))?,
            image_cache_period: period(
                &flags.image_cache_period,
                "--image-cache-period",
                Duration::from_secs(30),
            )?,
            credential_providers,
            container_events,
            runtime_pins,
            containerd_address,
            warm,
        })
    }

    /// Where keyring pulls find credentials besides the pull secrets: the node's docker
    /// config on the kubelet's search path, and the plugins (whose config is validated and
    /// whose binaries must exist).
    pub fn credential_sources(
        &self,
    ) -> Result<crate::pull::CredentialSources, crate::pull::credentials::ProviderConfigError> {
        let plugins = match &self.credential_providers {
            None => None,
            Some(p) => Some(crate::pull::credentials::PluginProviders::load(
                &p.config, &p.bin_dir,
            )?),
        };
        Ok(crate::pull::CredentialSources {
            node: Some(
                crate::pull::credentials::NodeCredentials::kubelet_search_path(
                    self.gc.kubelet_root_dir.as_deref(),
                ),
            ),
            plugins,
        })
    }
}

/// The GC thresholds and ages, validated as the kubelet does.
fn resolve_gc_policy(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<GcPolicy, ConfigError> {
    let mut policy = GcPolicy::default();
    let mut origins = PolicyOrigins::default();

    if let Some((v, from)) = pick(
        &flags.image_gc_high_threshold,
        "--image-gc-high-threshold",
        &file.image_gc_high_threshold_percent,
        o.field("imageGCHighThresholdPercent"),
    ) {
        policy.high_threshold_percent = v;
        origins.high = from;
    }
    if let Some((v, from)) = pick(
        &flags.image_gc_low_threshold,
        "--image-gc-low-threshold",
        &file.image_gc_low_threshold_percent,
        o.field("imageGCLowThresholdPercent"),
    ) {
        policy.low_threshold_percent = v;
        origins.low = from;
    }
    if let Some((v, from)) = pick(
        &flags.minimum_image_ttl_duration,
        "--minimum-image-ttl-duration",
        &file.image_minimum_gc_age,
        o.field("imageMinimumGCAge"),
    ) {
        policy.min_age = duration(&v, &from)?;
        origins.min_age = from;
    }
    if let Some((v, from)) = pick(
        &flags.image_maximum_gc_age,
        "--image-maximum-gc-age",
        &file.image_maximum_gc_age,
        o.field("imageMaximumGCAge"),
    ) {
        policy.max_age = duration(&v, &from)?;
        origins.max_age = from;
    }
    validate_policy(&policy, &origins)?;
    policy.inodes = resolve_pair(
        [
            (
                &flags.image_gc_high_inodes_threshold,
                "--image-gc-high-inodes-threshold",
                &file.image_gc_high_inodes_threshold_percent,
                o.field("imageGCHighInodesThresholdPercent"),
            ),
            (
                &flags.image_gc_low_inodes_threshold,
                "--image-gc-low-inodes-threshold",
                &file.image_gc_low_inodes_threshold_percent,
                o.field("imageGCLowInodesThresholdPercent"),
            ),
        ],
        |v: i64, _| Ok(v),
        |high, low| GcPolicy {
            inodes: Some(InodeThresholds { high, low }),
            ..GcPolicy::default()
        },
        |(high, low)| InodeThresholds { high, low },
    )?;
    let file_bytes = |q: &Option<Quantity>| q.clone();
    let flag_bytes = |f: &Option<String>| f.clone().map(Quantity::Text);
    policy.bytes = resolve_pair(
        [
            (
                &flag_bytes(&flags.image_gc_high_bytes),
                "--image-gc-high-bytes",
                &file_bytes(&file.image_gc_high_bytes),
                o.field("imageGCHighBytes"),
            ),
            (
                &flag_bytes(&flags.image_gc_low_bytes),
                "--image-gc-low-bytes",
                &file_bytes(&file.image_gc_low_bytes),
                o.field("imageGCLowBytes"),
            ),
        ],
        |q: Quantity, from: &str| q.bytes().map_err(|e| invalid(from.to_owned(), e)),
        |high, low| GcPolicy {
            bytes: Some(ByteBudget { high, low }),
            ..GcPolicy::default()
        },
        |(high, low)| ByteBudget { high, low },
    )?;
    Ok(policy)
}

/// One of imagekeeper's threshold pairs (inodes, bytes): off when neither is given, refused
/// when one is given without the other, each value converted by `value` (naming its flag or
/// field), the pair validated alone by the policy's rules (`policy` builds a policy holding
/// just it) with the error naming both origins.
type PairSource<'a, T> = (&'a Option<T>, &'a str, &'a Option<T>, String);

fn resolve_pair<T: Clone, V: Copy, P>(
    [high, low]: [PairSource<'_, T>; 2],
    value: impl Fn(T, &str) -> Result<V, ConfigError>,
    policy: impl Fn(V, V) -> GcPolicy,
    make: impl Fn((V, V)) -> P,
) -> Result<Option<P>, ConfigError> {
    let high_name = high.1.to_owned();
    let low_name = low.1.to_owned();
    let high = pick(high.0, high.1, high.2, high.3);
    let low = pick(low.0, low.1, low.2, low.3);
    let ((h, high_from), (l, low_from)) = match (high, low) {
        (None, None) => return Ok(None),
        (Some(h), Some(l)) => (h, l),
        (Some((_, from)), None) => {
            return Err(invalid(
                from,
                format!("set without {low_name} (give both, or neither to leave the rule off)"),
            ));
        }
        (None, Some((_, from))) => {
            return Err(invalid(
                from,
                format!("set without {high_name} (give both, or neither to leave the rule off)"),
            ));
        }
    };
    let h = value(h, &high_from)?;
    let l = value(l, &low_from)?;
    if let Err(e) = policy(h, l).validate() {
        let message = e.to_string();
        let origin = if message.contains("invalid High") {
            high_from
        } else if message.contains("invalid Low") {
            low_from
        } else {
            format!("{low_from} and {high_from}")
        };
        return Err(invalid(origin, message));
    }
    Ok(Some(make((h, l))))
}

/// The pull settings, validated as the kubelet does.
fn resolve_pull(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<PullConfig, ConfigError> {
    let mut pull = PullConfig::default();
    let mut pull_origin = String::from("pull settings");
    // SetDefaults_KubeletConfiguration (pkg/kubelet/apis/config/v1beta1/defaults.go): a file
    // that leaves serializeImagePulls unset defaults it to false when its
    // maxParallelImagePulls is 2 or more, true otherwise. Flags are applied over the defaulted
    // file, so `--max-parallel-image-pulls 5` alone is still refused, as by the kubelet.
    let file_serialize = file
        .serialize_image_pulls
        .or(match file.max_parallel_image_pulls {
            Some(n) if n >= 2 => Some(false),
            _ => None,
        });
    let file_serialize_field = if file.serialize_image_pulls.is_some() {
        o.field("serializeImagePulls")
    } else {
        o.field("maxParallelImagePulls")
    };
    if let Some((v, from)) = pick(
        &flags.serialize_image_pulls,
        "--serialize-image-pulls",
        &file_serialize,
        file_serialize_field,
    ) {
        pull.serialize_image_pulls = v;
        pull_origin = from;
    }
    if let Some((v, from)) = pick(
        &flags.max_parallel_image_pulls,
        "--max-parallel-image-pulls",
        &file.max_parallel_image_pulls,
        o.field("maxParallelImagePulls"),
    ) {
        pull.max_parallel_image_pulls = Some(v);
        pull_origin = from;
    }
    if let Some((v, from)) = pick(
        &flags.registry_qps,
        "--registry-qps",
        &file.registry_pull_qps,
        o.field("registryPullQPS"),
    ) {
        if !v.is_finite() {
            return Err(invalid(
                from,
                format!("registryPullQPS {v} must be a finite number"),
            ));
        }
        if v < 0.0 {
            return Err(invalid(
                from,
                format!("registryPullQPS {v} must not be a negative number"),
            ));
        }
        pull.registry_pull_qps = v;
    }
    if let Some((v, from)) = pick(
        &flags.registry_burst,
        "--registry-burst",
        &file.registry_burst,
        o.field("registryBurst"),
    ) {
        pull.registry_burst = u32::try_from(v).map_err(|_| {
            let problem = if v < 0 {
                "must not be a negative number".to_owned()
            } else {
                format!("is too large (at most {})", u32::MAX)
            };
            invalid(from, format!("registryBurst {v} {problem}"))
        })?;
    }
    pull.validate().map_err(|source| ConfigError::Pull {
        origin: pull_origin,
        source,
    })?;
    Ok(pull)
}

/// The pinned image patterns: the flags', else the file's.
fn resolve_pins(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Vec<String>, ConfigError> {
    let mut pins = flags.pinned_images.clone();
    if pins.is_empty() {
        pins = file.pinned_images.clone().unwrap_or_default();
    }
    for pin in &pins {
        let origin = || {
            if flags.pinned_images.is_empty() {
                o.field("pinnedImages")
            } else {
                "--pinned-image".to_owned()
            }
        };
        // A pattern with `user:password@` is refused shown redacted.
        crate::pull::refuse_credentials(pin).map_err(|e| invalid(origin(), e.to_string()))?;
        if pin.is_empty() || pin.starts_with('*') {
            let origin = origin();
            return Err(invalid(
                origin,
                format!("pattern {pin:?} must name an image (a trailing * matches any suffix)"),
            ));
        }
    }
    Ok(pins)
}

/// The runtime and image service endpoints.
fn resolve_cri(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<CriConfig, ConfigError> {
    let runtime_endpoint = pick(
        &flags.container_runtime_endpoint,
        "--container-runtime-endpoint",
        &file.container_runtime_endpoint,
        o.field("containerRuntimeEndpoint"),
    );
    let image_endpoint = pick(
        &flags.image_service_endpoint,
        "--image-service-endpoint",
        &file.image_service_endpoint,
        o.field("imageServiceEndpoint"),
    );
    let mut cri = CriConfig::default();
    if let Some((endpoint, from)) = runtime_endpoint {
        check_endpoint(&endpoint, &from)?;
        cri.runtime_endpoint = endpoint;
    }
    if let Some((endpoint, from)) = image_endpoint {
        check_endpoint(&endpoint, &from)?;
        cri.image_endpoint = Some(endpoint);
    }
    if cri.runtime_endpoint.is_empty() {
        cri.runtime_endpoint = DEFAULT_RUNTIME_ENDPOINT.to_owned();
    }
    Ok(cri)
}

/// The kubelet's root directory (absolute), or none when set empty.
fn resolve_kubelet_root_dir(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<PathBuf>, ConfigError> {
    let kubelet_root_dir = match pick(
        &flags.kubelet_root_dir,
        "--kubelet-root-dir",
        &file.kubelet_root_dir,
        o.field("kubeletRootDir"),
    ) {
        None => Some(PathBuf::from(DEFAULT_KUBELET_ROOT_DIR)),
        Some((v, _)) if v.is_empty() => None,
        Some((v, from)) if !Path::new(&v).is_absolute() => {
            return Err(invalid(from, format!("{v:?} is not an absolute path")));
        }
        Some((v, _)) => Some(PathBuf::from(v)),
    };
    Ok(kubelet_root_dir)
}

/// The kubelet pull intents' max age when a flag or field sets it (at least
/// [`MIN_INTENT_MAX_AGE`]); `None` takes the default.
fn resolve_intent_max_age(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<Duration>, ConfigError> {
    let Some((v, from)) = pick(
        &flags.kubelet_intent_max_age,
        "--kubelet-intent-max-age",
        &file.kubelet_intent_max_age,
        o.field("kubeletIntentMaxAge"),
    ) else {
        return Ok(None);
    };
    let d = duration(&v, &from)?;
    if d < MIN_INTENT_MAX_AGE {
        return Err(invalid(from, format!("must be at least 1m0s (got {v:?})")));
    }
    Ok(Some(d))
}

/// Whether the container events watcher runs: `auto` (the default) or `off`.
fn resolve_container_events(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<ContainerEvents, ConfigError> {
    match pick(
        &flags.container_events,
        "--container-events",
        &file.container_events,
        o.field("containerEvents"),
    ) {
        None => Ok(ContainerEvents::Auto),
        Some((v, _)) if v == "auto" => Ok(ContainerEvents::Auto),
        Some((v, _)) if v == "off" => Ok(ContainerEvents::Off),
        Some((v, from)) => Err(invalid(from, format!("{v:?} is neither auto nor off"))),
    }
}

/// Whether the runtime pins run: `auto` (the default) or `off`.
fn resolve_runtime_pins(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<RuntimePins, ConfigError> {
    match pick(
        &flags.runtime_pins,
        "--runtime-pins",
        &file.runtime_pins,
        o.field("runtimePins"),
    ) {
        None => Ok(RuntimePins::Auto),
        Some((v, _)) if v == "auto" => Ok(RuntimePins::Auto),
        Some((v, _)) if v == "off" => Ok(RuntimePins::Off),
        Some((v, from)) => Err(invalid(from, format!("{v:?} is neither auto nor off"))),
    }
}

/// The space walk's order: `kubelet-order` (the default), `adaptive` or `predictive`.
fn resolve_gc_order(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<GcOrder, ConfigError> {
    match pick(
        &flags.image_gc_policy,
        "--image-gc-policy",
        &file.image_gc_policy,
        o.field("imageGCPolicy"),
    ) {
        None => Ok(GcOrder::KubeletOrder),
        Some((v, _)) if v == "kubelet-order" => Ok(GcOrder::KubeletOrder),
        Some((v, _)) if v == "adaptive" => Ok(GcOrder::Adaptive),
        Some((v, _)) if v == "predictive" => Ok(GcOrder::Predictive),
        Some((v, from)) => Err(invalid(
            from,
            format!("{v:?} is none of kubelet-order, adaptive, predictive"),
        )),
    }
}

/// The eviction journal's retention when a flag or field sets it.
fn resolve_journal_retention(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<JournalRetention>, ConfigError> {
    // None unless a flag or a file field sets it: the store then keeps the retention
    // the file records (a `gc` or `prune` without flags must not prune an agent's
    // longer journal to the defaults). One of the two set takes the default for the other.
    let mut journal_retention: Option<JournalRetention> = None;
    if let Some((v, from)) = pick(
        &flags.journal_max_age,
        "--journal-max-age",
        &file.journal_max_age,
        o.field("journalMaxAge"),
    ) {
        let d = duration(&v, &from)?;
        if d < Duration::from_secs(1) {
            return Err(invalid(from, format!("must be at least 1s (got {v:?})")));
        }
        journal_retention
            .get_or_insert_with(JournalRetention::default)
            .max_age = d;
    }
    if let Some((v, from)) = pick(
        &flags.journal_max_entries,
        "--journal-max-entries",
        &file.journal_max_entries,
        o.field("journalMaxEntries"),
    ) {
        journal_retention
            .get_or_insert_with(JournalRetention::default)
            .max_entries = u32::try_from(v).ok().filter(|n| *n >= 1).ok_or_else(|| {
            invalid(
                from,
                format!("must be between 1 and {} (got {v})", u32::MAX),
            )
        })?;
    }
    Ok(journal_retention)
}

/// The warm set (the file's `[[warm]]` entries, then the directory's files in name order)
/// and the warm loop's settings. The directory is read here (blocking I/O: a reload resolves
/// on the blocking pool); `for` lifetimes are stamped by the agent ([`WarmSet::stamped`]).
fn resolve_warm(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<(WarmSet, WarmConfig), ConfigError> {
    let dir = pick(
        &flags.warm_set_dir,
        "--warm-set-dir",
        &file.warm_set_dir,
        o.field("warmSetDir"),
    );
    // A bad entry names itself; a bad warm set file or directory is named under the flag or
    // field that gave the directory (it is not the config file).
    let dir_origin = dir
        .as_ref()
        .map_or_else(|| o.field("warmSetDir"), |(_, from)| from.clone());
    let warm_error = |e: crate::warm::WarmError| match e {
        crate::warm::WarmError::Invalid { origin, message } => invalid(origin, message),
        other => invalid(dir_origin.clone(), other.to_string()),
    };
    let mut entries = match &file.warm {
        None => Vec::new(),
        Some(specs) => {
            resolve_specs(specs, |i| o.field(&format!("warm[{i}]"))).map_err(warm_error)?
        }
    };
    let from_file = entries.len();
    if let Some((dir, _)) = &dir {
        entries.extend(read_warm_dir(dir).map_err(warm_error)?);
    }
    if entries.len() > MAX_WARM_ENTRIES {
        let origin = if dir.is_some() {
            dir_origin.clone()
        } else {
            o.field("warm")
        };
        return Err(invalid(
            origin,
            format!(
                "the warm set has {} entries ({from_file} [[warm]] tables, {} in the warm set \
                 directory), more than the {MAX_WARM_ENTRIES} a warm set may hold",
                entries.len(),
                entries.len() - from_file
            ),
        ));
    }
    let period = match pick(
        &flags.warm_period,
        "--warm-period",
        &file.warm_period,
        o.field("warmPeriod"),
    ) {
        None => DEFAULT_WARM_PERIOD,
        Some((v, from)) => period(&Some(v), &from, DEFAULT_WARM_PERIOD)?,
    };
    let parallel_pulls = match file.warm_parallel_pulls {
        None => 1,
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| {
                invalid(
                    o.field("warmParallelPulls"),
                    format!("must be between 1 and 64 (got {n})"),
                )
            })?,
    };
    let from_history = match &file.warm_from_history {
        None => None,
        Some(spec) => {
            let used_within = match &spec.used_within {
                None => DEFAULT_USED_WITHIN,
                Some(v) => duration(v, &o.field("warmFromHistory.usedWithin"))?,
            };
            let max_bytes = match &spec.max_bytes {
                None => None,
                Some(SizeSpec::Bytes(b)) => Some(*b),
                Some(SizeSpec::Text(t)) => Some(
                    parse_size(t).map_err(|m| invalid(o.field("warmFromHistory.maxBytes"), m))?,
                ),
            };
            Some(FromHistory {
                used_within,
                max_bytes,
            })
        }
    };
    Ok((
        WarmSet::new(entries).with_from_history(from_history),
        WarmConfig {
            dir: dir.map(|(d, _)| d),
            period,
            parallel_pulls,
            from_history,
        },
    ))
}

/// The credential provider plugins' config and binaries, both or neither.
fn resolve_credential_providers(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<CredentialProviders>, ConfigError> {
    let provider_config = pick(
        &flags.image_credential_provider_config,
        "--image-credential-provider-config",
        &file.image_credential_provider_config,
        o.field("imageCredentialProviderConfig"),
    );
    let provider_bin_dir = pick(
        &flags.image_credential_provider_bin_dir,
        "--image-credential-provider-bin-dir",
        &file.image_credential_provider_bin_dir,
        o.field("imageCredentialProviderBinDir"),
    );
    let credential_providers = match (provider_config, provider_bin_dir) {
        (None, None) => None,
        (Some((config, _)), Some((bin_dir, _))) => Some(CredentialProviders { config, bin_dir }),
        (Some((_, from)), None) => {
            return Err(invalid(
                from,
                "needs --image-credential-provider-bin-dir (imageCredentialProviderBinDir) too",
            ));
        }
        (None, Some((_, from))) => {
            return Err(invalid(
                from,
                "needs --image-credential-provider-config (imageCredentialProviderConfig) too",
            ));
        }
    };
    Ok(credential_providers)
}

/// The metrics endpoint's address (a flag only).
fn resolve_metrics_address(flags: &FlagValues) -> Result<Option<SocketAddr>, ConfigError> {
    let metrics_address = match &flags.metrics_address {
        None => None,
        Some(a) if a.is_empty() => None,
        Some(a) => Some(parse_host_port(a).map_err(|e| {
            invalid(
                "--metrics-address".to_owned(),
                format!("{a:?} is not HOST:PORT with an IP host: {e}"),
            )
        })?),
    };
    Ok(metrics_address)
}

/// `HOST:PORT` with an IP host: `127.0.0.1:9899`, `[fd00::1]:9899`, and also an IPv6 host
/// without brackets, `fd00::1:9899`, as the DaemonSet's `$(HOST_IP):9899` gives on an IPv6
/// node (the port is what follows the last colon).
pub fn parse_host_port(a: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    a.parse::<SocketAddr>().or_else(|e| {
        let (host, port) = a.rsplit_once(':').ok_or(e.clone())?;
        match (host.parse::<std::net::Ipv6Addr>(), port.parse::<u16>()) {
            (Ok(ip), Ok(port)) if !host.starts_with('[') => Ok(SocketAddr::from((ip, port))),
            _ => Err(e),
        }
    })
}

/// A loop's period from its flag (at least [`MIN_LOOP_PERIOD`]), else `default`.
fn period(flag: &Option<String>, name: &str, default: Duration) -> Result<Duration, ConfigError> {
    match flag {
        None => Ok(default),
        Some(v) => {
            let d = duration(v, name)?;
            if d < MIN_LOOP_PERIOD {
                Err(invalid(
                    name.to_owned(),
                    format!("must be at least 1s (got {v:?})"),
                ))
            } else {
                Ok(d)
            }
        }
    }
}

#[derive(Default)]
struct PolicyOrigins {
    high: String,
    low: String,
    min_age: String,
    max_age: String,
}

fn validate_policy(policy: &GcPolicy, origins: &PolicyOrigins) -> Result<(), ConfigError> {
    let Err(err) = policy.validate() else {
        return Ok(());
    };
    let named = |o: &str, fallback: &str| {
        if o.is_empty() {
            fallback.to_owned()
        } else {
            o.to_owned()
        }
    };
    let high = named(&origins.high, "--image-gc-high-threshold (default)");
    let low = named(&origins.low, "--image-gc-low-threshold (default)");
    let message = err.to_string();
    let origin = if !(0..=100).contains(&policy.high_threshold_percent) {
        high
    } else if !(0..=100).contains(&policy.low_threshold_percent) {
        low
    } else if policy.low_threshold_percent >= policy.high_threshold_percent {
        format!("{low} and {high}")
    } else {
        format!(
            "{} and {}",
            named(&origins.max_age, "--image-maximum-gc-age (default)"),
            named(&origins.min_age, "--minimum-image-ttl-duration (default)")
        )
    };
    Err(invalid(origin, message))
}

/// Refuses an admin socket path that cannot be bound (empty, longer than `sun_path`) or that
/// names the database or a runtime socket: binding there would first remove that file.
fn check_admin_socket(socket: &Path, db: &Path, cri: &CriConfig) -> Result<(), ConfigError> {
    let origin = || "--admin-socket".to_owned();
    let bytes = socket.as_os_str().len();
    if bytes == 0 {
        return Err(invalid(origin(), "the path is empty"));
    }
    if bytes > MAX_SOCKET_PATH_BYTES {
        return Err(invalid(
            origin(),
            format!(
                "{} is {bytes} bytes long; a unix socket path is at most \
                 {MAX_SOCKET_PATH_BYTES} bytes",
                socket.display()
            ),
        ));
    }
    let socket_id = comparable(socket);
    if socket_id == comparable(db) {
        return Err(invalid(
            origin(),
            format!(
                "{} is the database (--db); the admin socket needs its own path",
                socket.display()
            ),
        ));
    }
    let endpoints = std::iter::once(("--container-runtime-endpoint", &cri.runtime_endpoint)).chain(
        cri.image_endpoint
            .iter()
            .map(|e| ("--image-service-endpoint", e)),
    );
    for (flag, endpoint) in endpoints {
        let path = Path::new(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        if socket_id == comparable(path) {
            return Err(invalid(
                origin(),
                format!(
                    "{} is the runtime's socket ({flag}); the admin socket needs its own path",
                    socket.display()
                ),
            ));
        }
    }
    Ok(())
}

/// A path made comparable without creating anything: the file's (device, inode) when it
/// exists (so links and `..` compare equal), else its directory resolved plus its name.
#[derive(PartialEq, Eq)]
enum Comparable {
    Inode(u64, u64),
    Path(PathBuf),
}

fn comparable(path: &Path) -> Comparable {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(path) {
        return Comparable::Inode(m.dev(), m.ino());
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let resolved = match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| absolute.clone()),
        _ => absolute.clone(),
    };
    Comparable::Path(resolved)
}

fn check_endpoint(endpoint: &str, origin: &str) -> Result<(), ConfigError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(invalid(
            origin.to_owned(),
            format!("{endpoint:?} is not unix:///path/to/socket or an absolute socket path"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented fields are the file's fields: the key list serde gives for an unknown
    /// field is exactly [`CONFIG_FIELDS`]' keys, in order, and every default renders.
    #[test]
    fn config_fields_list_every_file_field_and_their_defaults() {
        let err = toml::from_str::<FileConfig>("notAField = 1")
            .expect_err("an unknown field is refused")
            .to_string();
        let expected = err
            .split_once("expected one of ")
            .map(|(_, rest)| rest.lines().next().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("serde names the fields: {err}"));
        let fields: Vec<&str> = expected
            .split(", ")
            .map(|f| f.trim().trim_matches('`'))
            .collect();
        let documented: Vec<&str> = CONFIG_FIELDS.iter().map(|f| f.key).collect();
        assert_eq!(
            fields, documented,
            "FileConfig's fields and CONFIG_FIELDS differ: add the field to CONFIG_FIELDS and run scripts/docs"
        );
        let defaults = AgentConfig::defaults().expect("the defaults are valid");
        for field in CONFIG_FIELDS {
            assert!(!(field.default)(&defaults).is_empty(), "{}", field.key);
            // A field with no flag (the warm set's tables) says "(none)".
            assert!(
                field.flag.starts_with("--") || field.flag == "(none)",
                "{}",
                field.key
            );
        }
    }

    fn resolve(file: &FileConfig, flags: &FlagValues) -> Result<AgentConfig, ConfigError> {
        AgentConfig::resolve(file, Some(Path::new("/etc/ik.toml")), flags)
    }

    /// Issue 31: the config file is read through the operator-file reader. A FIFO (the agent
    /// hung in open(2) waiting for a writer), a device (a zero device read gigabytes), a file
    /// over 1 MiB (1.5 GB of TOML made the lexer ask for 10.8 GB) and a file nested deeper
    /// than 64 brackets are each refused at once, the error naming the file and why.
    #[test]
    fn the_config_file_is_a_small_shallow_regular_file_or_refused_naming_it() {
        use crate::operator_file::{MAX_NESTING_DEPTH, MAX_OPERATOR_FILE_BYTES};
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("fifo.toml");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("no NUL");
        // SAFETY: mkfifo(3) on a NUL-terminated path in the test's temp dir.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let large = dir.path().join("large.toml");
        let line = "# a comment line of padding\n";
        let lines = usize::try_from(MAX_OPERATOR_FILE_BYTES).expect("1 MiB") / line.len() + 1;
        std::fs::write(&large, line.repeat(lines)).expect("write");
        let deep = dir.path().join("deep.toml");
        let depth = MAX_NESTING_DEPTH + 1;
        std::fs::write(
            &deep,
            format!(
                "pinnedImages = {}{}\n",
                "[".repeat(depth),
                "]".repeat(depth)
            ),
        )
        .expect("write");
        let shallow = dir.path().join("shallow.toml");
        std::fs::write(&shallow, "pinnedImages = [\"a\"]\n").expect("write");
        let zero = Path::new("/dev/zero");
        let cases: [(&Path, &str); 4] = [
            (&fifo, "not a regular file (a FIFO)"),
            (zero, "not a regular file (a character device)"),
            (&large, "the file is larger than 1048576 bytes"),
            (&deep, "nested more than 64 levels deep at line 1"),
        ];
        for (path, why) in cases {
            for load in [FileConfig::load, FileConfig::load_for_reload] {
                let err = load(path).expect_err(why).to_string();
                assert_eq!(
                    err,
                    format!("config file {}: {}", path.display(), err_tail(&err, path)),
                    "the file is named once"
                );
                assert!(err.contains(why), "{err} should say {why:?}");
            }
        }
        let loaded = FileConfig::load(&shallow).expect("a small regular file");
        assert_eq!(loaded.pinned_images, Some(vec!["a".to_owned()]));
    }

    /// What follows "config file PATH: ", checked to hold no second copy of the path.
    fn err_tail(err: &str, path: &Path) -> String {
        let head = format!("config file {}: ", path.display());
        let tail = err.strip_prefix(&head).unwrap_or(err).to_owned();
        assert!(!tail.contains(&path.display().to_string()), "{err}");
        tail
    }

    /// Issue 31: a reload refuses a file that sets nothing (empty, white space, comments only:
    /// an editor truncating it in place) unless it holds the line `# imagekeeper: empty`;
    /// any setting makes it a file like any other. At start such a file is the defaults, as
    /// before (nothing is running to keep).
    #[test]
    fn a_file_setting_nothing_is_refused_by_a_reload_unless_it_says_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("imagekeeper.toml");
        for text in [
            "",
            "\n  \n",
            "# pinnedImages = [\"a\"]\n# imagekeeper: emptied\n",
        ] {
            std::fs::write(&path, text).expect("write");
            let err = FileConfig::load_for_reload(&path)
                .expect_err(text)
                .to_string();
            assert!(
                err.contains("the file sets nothing") && err.contains(EMPTY_CONFIG_MARKER),
                "{text:?}: {err}"
            );
            assert_eq!(
                FileConfig::load(&path),
                Ok(FileConfig::default()),
                "{text:?}"
            );
        }
        for text in [
            "# imagekeeper: empty\n",
            "# reset on purpose\n  # imagekeeper: empty  \n",
        ] {
            std::fs::write(&path, text).expect("write");
            assert_eq!(
                FileConfig::load_for_reload(&path),
                Ok(FileConfig::default()),
                "{text:?}"
            );
        }
        std::fs::write(&path, "# only this\npinnedImages = []\n").expect("write");
        let loaded = FileConfig::load_for_reload(&path).expect("a key is set");
        assert_eq!(loaded.pinned_images, Some(Vec::new()));
    }

    /// `[[warm]]` tables, `[warmFromHistory]` and the warm loop's fields from the file; the
    /// flags win; every bad value names its field or flag.
    #[test]
    fn warm_settings_from_the_file_and_flags_and_bad_values_name_their_origin() {
        let path = Path::new("/etc/ik.toml");
        let parse = |text: &str| -> FileConfig { toml::from_str(text).expect("TOML") };
        let file = parse(
            "warmPeriod = \"30s\"\nwarmParallelPulls = 2\n\
             [[warm]]\nimage = \"vllm/vllm-openai:v0.6\"\nsize = \"20Gi\"\n\
             [[warm]]\nimage = \"busybox\"\nruntimeHandler = \"gpu\"\nfor = \"1h\"\n\
             [warmFromHistory]\nusedWithin = \"12h\"\nmaxBytes = 1000\n",
        );
        let c = AgentConfig::resolve(&file, Some(path), &FlagValues::default()).expect("valid");
        assert_eq!(c.warm.period, Duration::from_secs(30));
        assert_eq!(c.warm.parallel_pulls, 2);
        let from_history = c.warm.from_history.expect("set");
        assert_eq!(from_history.used_within, Duration::from_secs(12 * 3600));
        assert_eq!(from_history.max_bytes, Some(1000));
        let entries = c.gc.warm.entries();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].size_hint, Some(20 << 30));
        assert_eq!(entries[1].runtime_handler, "gpu");
        assert_eq!(entries[1].origin, "warm[1] in /etc/ik.toml");
        let defaults = AgentConfig::resolve(&FileConfig::default(), None, &FlagValues::default())
            .expect("valid");
        assert_eq!(defaults.warm.period, Duration::from_secs(60));
        assert_eq!(defaults.warm.parallel_pulls, 1);
        assert!(defaults.gc.warm.is_empty() && defaults.warm.from_history.is_none());
        let flags = FlagValues {
            warm_period: Some("5s".into()),
            ..FlagValues::default()
        };
        let c = AgentConfig::resolve(&file, Some(path), &flags).expect("valid");
        assert_eq!(c.warm.period, Duration::from_secs(5), "the flag wins");

        let err = |text: &str, flags: &FlagValues| {
            AgentConfig::resolve(&parse(text), Some(path), flags)
                .expect_err("invalid")
                .to_string()
        };
        let none = FlagValues::default();
        assert_eq!(
            err("warmPeriod = \"500ms\"", &none),
            "warmPeriod in /etc/ik.toml: must be at least 1s (got \"500ms\")"
        );
        assert_eq!(
            err(
                "",
                &FlagValues {
                    warm_period: Some("0s".into()),
                    ..FlagValues::default()
                }
            ),
            "--warm-period: must be at least 1s (got \"0s\")"
        );
        assert_eq!(
            err("warmParallelPulls = 65", &none),
            "warmParallelPulls in /etc/ik.toml: must be between 1 and 64 (got 65)"
        );
        assert!(
            err("[warmFromHistory]\nmaxBytes = \"lots\"", &none).starts_with(
                "warmFromHistory.maxBytes in /etc/ik.toml: \"lots\" is not a quantity"
            )
        );
        assert!(
            err("[[warm]]\nimage = \"\"", &none)
                .starts_with("warm[0] in /etc/ik.toml: image: must not be empty")
        );
        assert!(
            err(
                "",
                &FlagValues {
                    warm_set_dir: Some("/nonexistent/warm".into()),
                    ..FlagValues::default()
                }
            )
            .starts_with(
                "--warm-set-dir: warm set directory /nonexistent/warm: cannot read it: No such file"
            )
        );
    }

    /// Issue 41: a warm set holds at most MAX_WARM_ENTRIES entries (the file's tables and
    /// the directory's files together) from at most MAX_WARM_FILES files; more is refused
    /// naming the count, under the flag that gave the directory. Exactly the cap is accepted.
    #[test]
    fn a_warm_set_over_its_caps_is_refused_naming_the_count() {
        let dir = tempfile::tempdir().expect("temp dir");
        let flags = FlagValues {
            warm_set_dir: Some(dir.path().to_owned()),
            ..FlagValues::default()
        };
        let lines = |from: usize, to: usize| -> String {
            (from..to)
                .map(|i| format!("  - image: registry.example/warm-{i}:1\n"))
                .collect()
        };
        // Two tables in the file, the rest in the directory: the cap counts both.
        let file =
            toml::from_str::<FileConfig>("[[warm]]\nimage = \"a:1\"\n[[warm]]\nimage = \"b:1\"\n")
                .expect("toml");
        let half = MAX_WARM_ENTRIES / 2;
        std::fs::write(
            dir.path().join("a.yaml"),
            format!("warm:\n{}", lines(0, half)),
        )
        .expect("write");
        std::fs::write(
            dir.path().join("b.yaml"),
            format!("warm:\n{}", lines(half, MAX_WARM_ENTRIES - 2)),
        )
        .expect("write");
        let c = resolve(&file, &flags).expect("exactly the cap is a valid warm set");
        assert_eq!(c.gc.warm.entries().len(), MAX_WARM_ENTRIES);
        std::fs::write(
            dir.path().join("c.yaml"),
            "warm:\n  - image: c:1\n  - image: d:1\n",
        )
        .expect("write");
        let err = resolve(&file, &flags)
            .expect_err("over the cap")
            .to_string();
        assert_eq!(
            err,
            format!(
                "--warm-set-dir: the warm set has {} entries (2 [[warm]] tables, {} in the warm \
                 set directory), more than the {MAX_WARM_ENTRIES} a warm set may hold",
                MAX_WARM_ENTRIES + 2,
                MAX_WARM_ENTRIES
            )
        );
        // Too many files: refused before any is read (these are not even valid YAML).
        for i in 0..=crate::warm::MAX_WARM_FILES {
            std::fs::write(dir.path().join(format!("z{i:03}.yaml")), "{{{").expect("write");
        }
        let err = resolve(&FileConfig::default(), &flags)
            .expect_err("too many files")
            .to_string();
        assert_eq!(
            err,
            format!(
                "--warm-set-dir: warm set directory {}: it holds {} warm set files (*.yaml, \
                 *.yml, *.json), more than the {} a warm set directory may hold",
                dir.path().display(),
                crate::warm::MAX_WARM_FILES + 4,
                crate::warm::MAX_WARM_FILES
            )
        );
    }

    /// Issue 41's messages: a negative warm `size` says so (not serde's "did not match any
    /// variant of untagged enum SizeSpec"); an `until` past 2262 says the range (it is RFC
    /// 3339); a missing warm set directory is not called a config file.
    #[test]
    fn warm_messages_say_what_is_wrong() {
        let dir = tempfile::tempdir().expect("temp dir");
        let flags = FlagValues {
            warm_set_dir: Some(dir.path().to_owned()),
            ..FlagValues::default()
        };
        std::fs::write(
            dir.path().join("a.yaml"),
            "warm:\n  - image: a:1\n    size: -1\n",
        )
        .expect("write");
        let err = resolve(&FileConfig::default(), &flags)
            .expect_err("negative size")
            .to_string();
        assert!(
            err.contains("a size must not be negative (got -1)") && !err.contains("untagged"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("a.yaml"),
            "warm:\n  - image: a:1\n    size: 1.5\n",
        )
        .expect("write");
        let err = resolve(&FileConfig::default(), &flags)
            .expect_err("fractional size")
            .to_string();
        assert!(err.contains("must be a whole number (got 1.5)"), "{err}");
        std::fs::write(
            dir.path().join("a.yaml"),
            "warm:\n  - image: a:1\n    until: \"9999-12-31T23:59:59Z\"\n",
        )
        .expect("write");
        let err = resolve(&FileConfig::default(), &flags)
            .expect_err("out of range")
            .to_string();
        assert!(
            err.ends_with(
                "a.yaml: warm[0]: until: \"9999-12-31T23:59:59Z\" is outside the times \
                 imagekeeper stores (1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z); leave out \
                 `until` for an entry kept while it is in the set"
            ),
            "{err}"
        );
        let missing = FlagValues {
            warm_set_dir: Some(dir.path().join("gone")),
            ..FlagValues::default()
        };
        let err = resolve(&FileConfig::default(), &missing)
            .expect_err("missing dir")
            .to_string();
        assert!(
            err.starts_with(&format!(
                "--warm-set-dir: warm set directory {}: cannot read it: No such file",
                dir.path().join("gone").display()
            )) && !err.contains("config file"),
            "{err}"
        );
    }

    #[test]
    fn defaults_are_kubelets() {
        let c =
            resolve(&FileConfig::default(), &FlagValues::default()).expect("defaults are valid");
        assert_eq!(c.gc.policy, GcPolicy::default());
        assert_eq!(c.pull, PullConfig::default());
        assert_eq!(c.db, PathBuf::from(DEFAULT_DB));
        assert_eq!(c.cri.runtime_endpoint, DEFAULT_RUNTIME_ENDPOINT);
        assert_eq!(c.gc_period, Duration::from_secs(300));
        assert_eq!(c.image_cache_period, Duration::from_secs(30));
        assert!(c.metrics_address.is_none(), "metrics are off by default");
    }

    /// The journal's retention: 30 days and 10,000 entries by default, the file's fields, the
    /// flags over them, and a bad value refused naming where it came from.
    #[test]
    fn journal_retention_defaults_file_and_flags_and_bad_values_name_their_origin() {
        let file: FileConfig =
            toml::from_str("journalMaxAge = \"48h\"\njournalMaxEntries = 500\n").expect("toml");
        let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
        assert_eq!(
            c.gc.journal_retention, None,
            "no flag nor field: the store's"
        );
        let c = resolve(&file, &FlagValues::default()).expect("valid");
        assert_eq!(
            c.gc.journal_retention,
            Some(JournalRetention {
                max_age: Duration::from_secs(48 * 3600),
                max_entries: 500,
            })
        );
        let flags = FlagValues {
            journal_max_entries: Some(20),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("valid");
        assert_eq!(
            c.gc.journal_retention,
            Some(JournalRetention {
                max_age: Duration::from_secs(48 * 3600),
                max_entries: 20,
            })
        );
        let flags = FlagValues {
            journal_max_entries: Some(20),
            ..FlagValues::default()
        };
        let c = resolve(&FileConfig::default(), &flags).expect("valid");
        assert_eq!(
            c.gc.journal_retention,
            Some(JournalRetention {
                max_age: JournalRetention::default().max_age,
                max_entries: 20,
            })
        );
        let bad = [
            (
                FlagValues {
                    journal_max_entries: Some(0),
                    ..FlagValues::default()
                },
                "--journal-max-entries: must be between 1 and",
            ),
            (
                FlagValues {
                    journal_max_age: Some("0s".into()),
                    ..FlagValues::default()
                },
                "--journal-max-age: must be at least 1s",
            ),
            (
                FlagValues {
                    journal_max_age: Some("a week".into()),
                    ..FlagValues::default()
                },
                "--journal-max-age",
            ),
        ];
        for (flags, want) in bad {
            let err = resolve(&FileConfig::default(), &flags).expect_err("refused");
            assert!(err.to_string().starts_with(want), "{err}");
        }
    }

    #[test]
    fn kubelet_root_dir_defaults_to_the_kubelets_flag_wins_and_empty_disables() {
        let file: FileConfig = toml::from_str("kubeletRootDir = \"/srv/kubelet\"\n").expect("toml");
        let cases: [(&FileConfig, Option<&str>, Option<&str>); 4] = [
            (&FileConfig::default(), None, Some(DEFAULT_KUBELET_ROOT_DIR)),
            (&file, None, Some("/srv/kubelet")),
            (&file, Some("/data/kubelet"), Some("/data/kubelet")),
            (&file, Some(""), None),
        ];
        for (file, flag, want) in cases {
            let flags = FlagValues {
                kubelet_root_dir: flag.map(str::to_owned),
                ..FlagValues::default()
            };
            let c = resolve(file, &flags).expect("valid");
            assert_eq!(
                c.gc.kubelet_root_dir,
                want.map(PathBuf::from),
                "flag {flag:?}"
            );
        }
        let relative = FlagValues {
            kubelet_root_dir: Some("var/lib/kubelet".into()),
            ..FlagValues::default()
        };
        let err = resolve(&FileConfig::default(), &relative).expect_err("relative");
        assert_eq!(
            err.to_string(),
            "--kubelet-root-dir: \"var/lib/kubelet\" is not an absolute path"
        );
    }

    /// SetDefaults_KubeletConfiguration: a file's maxParallelImagePulls of 2 or more with
    /// serializeImagePulls unset defaults it to false; the flag alone is still refused.
    #[test]
    fn max_parallel_image_pulls_alone_in_the_file_gives_the_parallel_puller() {
        let file = |text: &str| -> FileConfig { toml::from_str(text).expect("toml") };
        let c =
            resolve(&file("maxParallelImagePulls = 5\n"), &FlagValues::default()).expect("valid");
        assert!(!c.pull.serialize_image_pulls);
        assert_eq!(c.pull.max_parallel_image_pulls, Some(5));
        let c =
            resolve(&file("maxParallelImagePulls = 1\n"), &FlagValues::default()).expect("valid");
        assert!(c.pull.serialize_image_pulls, "1 keeps the serial default");
        // The file's explicit value wins over the defaulting, and is refused as before.
        let err = resolve(
            &file("serializeImagePulls = true\nmaxParallelImagePulls = 5\n"),
            &FlagValues::default(),
        )
        .expect_err("refused");
        assert!(err.to_string().contains("maxParallelImagePulls"), "{err}");
        // A flag over the defaulted file: the file's default holds.
        let flags = FlagValues {
            max_parallel_image_pulls: Some(3),
            ..FlagValues::default()
        };
        let c = resolve(&file("maxParallelImagePulls = 5\n"), &flags).expect("valid");
        assert!(!c.pull.serialize_image_pulls);
        assert_eq!(c.pull.max_parallel_image_pulls, Some(3));
        // The flag alone: serializeImagePulls is already true, as in the kubelet.
        let err = resolve(&FileConfig::default(), &flags).expect_err("refused");
        assert!(
            err.to_string().contains("--max-parallel-image-pulls"),
            "{err}"
        );
        // --serialize-image-pulls over the file's maxParallelImagePulls is refused.
        let flags = FlagValues {
            serialize_image_pulls: Some(true),
            ..FlagValues::default()
        };
        assert!(resolve(&file("maxParallelImagePulls = 5\n"), &flags).is_err());
    }

    /// `imageGCPolicy` / `--image-gc-policy`: kubelet-order by default, adaptive or
    /// predictive when set,
    /// the flag over the file, anything else refused naming where it came from.
    #[test]
    fn image_gc_policy_from_flags_or_file() {
        let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
        assert_eq!(c.gc.order, GcOrder::KubeletOrder, "the default");
        let file: FileConfig = toml::from_str("imageGCPolicy = \"adaptive\"\n").expect("toml");
        let c = resolve(&file, &FlagValues::default()).expect("valid");
        assert_eq!(c.gc.order, GcOrder::Adaptive);
        let flags = FlagValues {
            image_gc_policy: Some("kubelet-order".into()),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("valid");
        assert_eq!(c.gc.order, GcOrder::KubeletOrder, "the flag wins");
        let file: FileConfig = toml::from_str("imageGCPolicy = \"predictive\"\n").expect("toml");
        let c = resolve(&file, &FlagValues::default()).expect("valid");
        assert_eq!(c.gc.order, GcOrder::Predictive);
        let flags = FlagValues {
            image_gc_policy: Some("lru".into()),
            ..FlagValues::default()
        };
        let err = resolve(&FileConfig::default(), &flags).expect_err("bad flag");
        assert!(
            err.to_string().contains(
                "--image-gc-policy: \"lru\" is none of kubelet-order, adaptive, predictive"
            ),
            "{err}"
        );
        let file: FileConfig = toml::from_str("imageGCPolicy = \"gdsf\"\n").expect("toml");
        let err = resolve(&file, &FlagValues::default()).expect_err("bad field");
        assert!(
            err.to_string().contains("imageGCPolicy in /etc/ik.toml"),
            "{err}"
        );
    }

    #[test]
    fn intent_max_age_and_container_events_from_flags_or_file() {
        let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
        assert_eq!(c.gc.kubelet_intent_max_age, None, "the default");
        assert_eq!(c.container_events, ContainerEvents::Auto);
        let file: FileConfig =
            toml::from_str("kubeletIntentMaxAge = \"6h\"\ncontainerEvents = \"off\"\n")
                .expect("toml");
        let c = resolve(&file, &FlagValues::default()).expect("valid");
        assert_eq!(
            c.gc.kubelet_intent_max_age,
            Some(Duration::from_secs(6 * 3600))
        );
        assert_eq!(c.container_events, ContainerEvents::Off);
        let flags = FlagValues {
            kubelet_intent_max_age: Some("2h".into()),
            container_events: Some("auto".into()),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("valid");
        assert_eq!(
            c.gc.kubelet_intent_max_age,
            Some(Duration::from_secs(2 * 3600))
        );
        assert_eq!(c.container_events, ContainerEvents::Auto);
        for (flags, want) in [
            (
                FlagValues {
                    kubelet_intent_max_age: Some("30s".into()),
                    ..FlagValues::default()
                },
                "--kubelet-intent-max-age: must be at least 1m0s",
            ),
            (
                FlagValues {
                    kubelet_intent_max_age: Some("soon".into()),
                    ..FlagValues::default()
                },
                "--kubelet-intent-max-age",
            ),
            (
                FlagValues {
                    container_events: Some("on".into()),
                    ..FlagValues::default()
                },
                "--container-events: \"on\" is neither auto nor off",
            ),
        ] {
            let err = resolve(&FileConfig::default(), &flags).expect_err(want);
            assert!(err.to_string().contains(want), "{err}");
        }
        let file: FileConfig = toml::from_str("containerEvents = \"maybe\"\n").expect("toml");
        let err = resolve(&file, &FlagValues::default()).expect_err("bad");
        assert!(
            err.to_string().contains("containerEvents in /etc/ik.toml"),
            "{err}"
        );
    }

    /// Issue 28: the inode thresholds and the byte budget, from flags or the file, off unless
    /// both of a pair are given, refused like the byte thresholds with the origins named.
    #[test]
    fn inode_thresholds_and_byte_budgets_resolve_and_refuse_with_their_names() {
        let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("defaults");
        assert_eq!((c.gc.policy.inodes, c.gc.policy.bytes), (None, None));
        let file: FileConfig = toml::from_str(
            "imageGCHighInodesThresholdPercent = 90\nimageGCLowInodesThresholdPercent = 70\nimageGCHighBytes = \"500Gi\"\nimageGCLowBytes = 1000\n",
        )
        .expect("toml");
        let c = resolve(&file, &FlagValues::default()).expect("valid");
        assert_eq!(
            c.gc.policy.inodes,
            Some(InodeThresholds { high: 90, low: 70 })
        );
        assert_eq!(
            c.gc.policy.bytes,
            Some(ByteBudget {
                high: 500 << 30,
                low: 1000
            })
        );
        let flags = FlagValues {
            image_gc_low_inodes_threshold: Some(80),
            image_gc_low_bytes: Some("400Gi".into()),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("flags win");
        assert_eq!(
            c.gc.policy.inodes,
            Some(InodeThresholds { high: 90, low: 80 })
        );
        assert_eq!(c.gc.policy.bytes.map(|b| b.low), Some(400 << 30));
        let cases = [
            (
                FlagValues {
                    image_gc_high_inodes_threshold: Some(90),
                    ..FlagValues::default()
                },
                "--image-gc-high-inodes-threshold: set without --image-gc-low-inodes-threshold (give both, or neither to leave the rule off)",
            ),
            (
                FlagValues {
                    image_gc_low_bytes: Some("1Gi".into()),
                    ..FlagValues::default()
                },
                "--image-gc-low-bytes: set without --image-gc-high-bytes (give both, or neither to leave the rule off)",
            ),
            (
                FlagValues {
                    image_gc_high_inodes_threshold: Some(101),
                    image_gc_low_inodes_threshold: Some(50),
                    ..FlagValues::default()
                },
                "--image-gc-high-inodes-threshold: invalid HighInodesThresholdPercent 101, must be in range [0-100]",
            ),
            (
                FlagValues {
                    image_gc_high_inodes_threshold: Some(80),
                    image_gc_low_inodes_threshold: Some(80),
                    ..FlagValues::default()
                },
                "--image-gc-low-inodes-threshold and --image-gc-high-inodes-threshold: invalid configuration: imageGCLowInodesThresholdPercent (--image-gc-low-inodes-threshold) 80 must be less than imageGCHighInodesThresholdPercent (--image-gc-high-inodes-threshold) 80",
            ),
            (
                FlagValues {
                    image_gc_high_bytes: Some("1Gi".into()),
                    image_gc_low_bytes: Some("2Gi".into()),
                    ..FlagValues::default()
                },
                "--image-gc-low-bytes and --image-gc-high-bytes: LowBytes 2147483648 can not be higher than HighBytes 1073741824",
            ),
            (
                FlagValues {
                    image_gc_high_bytes: Some("lots".into()),
                    image_gc_low_bytes: Some("2Gi".into()),
                    ..FlagValues::default()
                },
                "--image-gc-high-bytes: \"lots\" is not a quantity (for example 10Gi or 500M)",
            ),
        ];
        for (flags, want) in cases {
            let err = resolve(&FileConfig::default(), &flags).expect_err(want);
            assert_eq!(err.to_string(), want);
        }
        let file: FileConfig =
            toml::from_str("imageGCHighBytes = \"-1\"\nimageGCLowBytes = 0\n").expect("toml");
        let err = resolve(&file, &FlagValues::default()).expect_err("negative");
        assert_eq!(
            err.to_string(),
            "imageGCHighBytes in /etc/ik.toml: \"-1\" is negative; a size in bytes is 0 or more"
        );
    }

    #[test]
    fn flags_win_over_the_file() {
        let file: FileConfig = toml::from_str(
            "imageGCHighThresholdPercent = 90\nimageGCLowThresholdPercent = 70\nimageMinimumGCAge = \"5m\"\nregistryPullQPS = 2.5\npinnedImages = [\"a:1\"]\n",
        )
        .expect("toml");
        let flags = FlagValues {
            image_gc_high_threshold: Some(95),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("valid");
        assert_eq!(c.gc.policy.high_threshold_percent, 95);
        assert_eq!(c.gc.policy.low_threshold_percent, 70);
        assert_eq!(c.gc.policy.min_age, Duration::from_secs(300));
        assert_eq!(c.pull.registry_pull_qps, 2.5);
        assert_eq!(c.gc.pins.patterns(), ["a:1"]);
    }

    #[test]
    fn every_bad_value_names_its_flag_or_field() {
        let cases: Vec<(FileConfig, FlagValues, &str)> = vec![
            (
                FileConfig::default(),
                FlagValues {
                    image_gc_high_threshold: Some(101),
                    ..FlagValues::default()
                },
                "--image-gc-high-threshold: invalid HighThresholdPercent 101, must be in range [0-100]",
            ),
            (
                FileConfig {
                    image_gc_low_threshold_percent: Some(-1),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "imageGCLowThresholdPercent in /etc/ik.toml: invalid LowThresholdPercent -1, must be in range [0-100]",
            ),
            (
                FileConfig {
                    image_gc_low_threshold_percent: Some(90),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "imageGCLowThresholdPercent in /etc/ik.toml and --image-gc-high-threshold (default): LowThresholdPercent 90 can not be higher than HighThresholdPercent 85",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    minimum_image_ttl_duration: Some("2 minutes".into()),
                    ..FlagValues::default()
                },
                "--minimum-image-ttl-duration: ",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    image_maximum_gc_age: Some("1m".into()),
                    ..FlagValues::default()
                },
                "--image-maximum-gc-age and --minimum-image-ttl-duration (default): invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    registry_qps: Some(-1.0),
                    ..FlagValues::default()
                },
                "--registry-qps: registryPullQPS -1 must not be a negative number",
            ),
            (
                FileConfig {
                    registry_burst: Some(-3),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "registryBurst in /etc/ik.toml: registryBurst -3 must not be a negative number",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    max_parallel_image_pulls: Some(5),
                    ..FlagValues::default()
                },
                "--max-parallel-image-pulls: invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    container_runtime_endpoint: Some("tcp://1.2.3.4:5".into()),
                    ..FlagValues::default()
                },
                "--container-runtime-endpoint: \"tcp://1.2.3.4:5\" is not unix:///path/to/socket",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    metrics_address: Some("localhost".into()),
                    ..FlagValues::default()
                },
                "--metrics-address: \"localhost\" is not HOST:PORT",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    gc_period: Some("0s".into()),
                    ..FlagValues::default()
                },
                "--gc-period: must be at least 1s",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    detect_period: Some("999ms".into()),
                    ..FlagValues::default()
                },
                "--detect-period: must be at least 1s (got \"999ms\")",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    image_cache_period: Some("1ns".into()),
                    ..FlagValues::default()
                },
                "--image-cache-period: must be at least 1s",
            ),
            (
                FileConfig {
                    registry_burst: Some(i64::from(u32::MAX) + 1),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "registryBurst in /etc/ik.toml: registryBurst 4294967296 is too large (at most 4294967295)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    registry_qps: Some(f64::NAN),
                    ..FlagValues::default()
                },
                "--registry-qps: registryPullQPS NaN must be a finite number",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    admin_socket: Some(PathBuf::from(format!("/run/{}.sock", "s".repeat(100)))),
                    ..FlagValues::default()
                },
                "--admin-socket: /run/sss",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    db: Some("/var/lib/ik/records.redb".into()),
                    admin_socket: Some("/var/lib/ik/records.redb".into()),
                    ..FlagValues::default()
                },
                "--admin-socket: /var/lib/ik/records.redb is the database (--db)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    admin_socket: Some("/run/containerd/containerd.sock".into()),
                    ..FlagValues::default()
                },
                "--admin-socket: /run/containerd/containerd.sock is the runtime's socket (--container-runtime-endpoint)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    image_service_endpoint: Some("unix:///run/img.sock".into()),
                    admin_socket: Some("/run/img.sock".into()),
                    ..FlagValues::default()
                },
                "--admin-socket: /run/img.sock is the runtime's socket (--image-service-endpoint)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    pinned_images: vec!["*".into()],
                    ..FlagValues::default()
                },
                "--pinned-image: pattern \"*\" must name an image",
            ),
        ];
        for (file, flags, want) in cases {
            let err = resolve(&file, &flags).expect_err(want).to_string();
            assert!(err.starts_with(want), "got {err:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn a_broken_pull_rule_is_a_typed_pull_error_under_the_setting_that_broke_it() {
        use crate::pull::InvalidPullSetting;
        let file = FileConfig {
            max_parallel_image_pulls: Some(0),
            ..FileConfig::default()
        };
        let flags = FlagValues {
            serialize_image_pulls: Some(false),
            ..FlagValues::default()
        };
        let err = resolve(&file, &flags).expect_err("maxParallelImagePulls 0");
        let ConfigError::Pull { origin, source } = &err else {
            panic!("not a pull settings error: {err:?}");
        };
        assert_eq!(origin, "maxParallelImagePulls in /etc/ik.toml");
        assert_eq!(
            source.0,
            vec![InvalidPullSetting::MaxParallelImagePullsNotPositive(0)]
        );
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(
            cause.as_deref(),
            Some("invalid configuration: maxParallelImagePulls 0 must be a positive number")
        );
        assert_eq!(
            err.to_string(),
            "maxParallelImagePulls in /etc/ik.toml: invalid configuration: maxParallelImagePulls 0 must be a positive number"
        );
    }

    #[test]
    fn one_line_keeps_the_position_and_message_of_a_toml_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            "imageGCLowThresholdPercent = 50\nimageGCHighThreshold = 3\n",
        )
        .expect("write");
        let err = FileConfig::load(&path).expect_err("unknown field");
        let line = err.one_line();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with(&format!(
                "config file {}: TOML parse error at line 2, column 1: unknown field `imageGCHighThreshold`",
                path.display()
            )),
            "{line}"
        );
    }

    /// Each bad file is refused by `FileConfig::load` with an error naming the file and what
    /// is wrong in it (the field, the type, the line).
    #[test]
    fn unknown_or_mistyped_file_fields_are_errors_naming_the_file_and_the_problem() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("imagekeeper.toml");
        for (text, says) in [
            (
                "imageGCHighThreshold = 3\n",
                "unknown field `imageGCHighThreshold`",
            ),
            ("registryBurst = \"ten\"\n", "registryBurst"),
            ("not toml at all [", "line 1"),
        ] {
            std::fs::write(&path, text).expect("write");
            match FileConfig::load(&path) {
                Err(e @ ConfigError::File { .. }) => {
                    let message = e.to_string();
                    assert!(
                        message.starts_with(&format!("config file {}: ", path.display())),
                        "{message}"
                    );
                    assert!(message.contains(says), "{text}: {message}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_host_port_takes_an_ipv6_host_with_or_without_brackets() {
        let ok = [
            ("127.0.0.1:9899", "127.0.0.1:9899"),
            ("[fd00::1]:9899", "[fd00::1]:9899"),
            ("fd00::1:9899", "[fd00::1]:9899"),
            ("::1:9898", "[::1]:9898"),
        ];
        for (given, want) in ok {
            assert_eq!(
                parse_host_port(given).map(|a| a.to_string()).as_deref(),
                Ok(want),
                "{given}"
            );
        }
        for bad in [
            "localhost:9899",
            "fd00::1",
            "127.0.0.1",
            "[fd00::1:9899",
            "1.2.3.4:x",
        ] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
    }
}
