//! The agent's configuration: kubelet's flag names and KubeletConfiguration's field names, a
//! TOML file (`file`), flags over the file (`flags`), the field list (`fields`), one
//! resolver per area (`gc`, `pull`, `runtime`, `warm`, `process`) and validation whose every
//! error names the flag or field that holds the bad value ([`ConfigError`]). This module holds
//! the resolved [`AgentConfig`] and the plain types it is made of.
//!
//! Layer: `config` sits above the logic (`gc`, `pull`, `warm`) and the data (`store`,
//! `kubelet`), and below the edge (`cri` aside, whose plain `CriConfig` it names), `doctor`
//! and `agent`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cri::CriConfig;
use crate::gc::GcConfig;
use crate::pull::PullConfig;
use crate::warm::WarmConfig;

mod error;
mod fields;
mod file;
mod flags;
mod gc;
mod origin;
mod process;
mod pull;
mod resolve;
mod runtime;
mod settings;
mod validate;
mod values;
mod warm;

pub use error::ConfigError;
pub use fields::{ConfigField, FlagStatus, OnReload};
pub use flags::FlagValues;
pub use settings::{CONFIG_FIELDS, FileConfig, flag_help, parse_set};
pub use values::{FromHistorySpec, Quantity};

/// The default record database.
pub const DEFAULT_DB: &str = "/var/lib/imagekeeper/records.redb";
/// The default admin socket.
pub const DEFAULT_ADMIN_SOCKET: &str = "/run/imagekeeper/admin.sock";
/// How often the agent detects images without `--detect-period`.
pub const DEFAULT_DETECT_PERIOD: Duration = Duration::from_secs(300);
/// How often the agent runs image GC without `--gc-period`.
pub const DEFAULT_GC_PERIOD: Duration = Duration::from_secs(300);
/// How often the agent refreshes its image cache without `--image-cache-period`.
pub const DEFAULT_IMAGE_CACHE_PERIOD: Duration = Duration::from_secs(30);

/// The credential provider plugins' config file and bin dir (both or neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialProviders {
    /// The CredentialProviderConfig file (`--image-credential-provider-config`).
    pub config: PathBuf,
    /// The directory holding the plugins (`--image-credential-provider-bin-dir`).
    pub bin_dir: PathBuf,
}

/// Whether the agent watches the runtime's container events (`containerEvents`).
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
    /// The setting's value as written: `auto` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerEvents::Auto => "auto",
            ContainerEvents::Off => "off",
        }
    }
}

/// Whether the agent labels the images it keeps as pinned in containerd (`runtimePins`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuntimePins {
    /// On where the runtime can carry pins (containerd 1.7.10 and later); off, with one log
    /// line, a metric and a doctor finding, on containerd 1.6 or another runtime.
    #[default]
    Auto,
    /// Never write a label.
    Off,
}

impl RuntimePins {
    /// The setting's value as written: `auto` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimePins::Auto => "auto",
            RuntimePins::Off => "off",
        }
    }
}

/// The shortest `kubeletIntentMaxAge`: an intent younger than a minute is a pull that
/// has barely started.
pub(crate) const MIN_INTENT_MAX_AGE: Duration = Duration::from_secs(60);

/// Everything the agent runs with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The record database file.
    pub db: PathBuf,
    /// Where the CRI runtime is and its deadlines.
    pub cri: CriConfig,
    /// The GC manager's settings: thresholds, ages, pins, the warm set, the removal order.
    pub gc: GcConfig,
    /// The image manager's settings: parallel pulls, the registry rate limit, the backoff.
    pub pull: PullConfig,
    /// The admin socket the agent binds.
    pub admin_socket: PathBuf,
    /// The metrics and health endpoint; `None`: not served.
    pub metrics_address: Option<SocketAddr>,
    /// Time between two detects.
    pub detect_period: Duration,
    /// Time between two GC cycles.
    pub gc_period: Duration,
    /// Time between two refreshes of the image cache.
    pub image_cache_period: Duration,
    /// Keyring pulls (the admin EnsureImage) look for node credentials on the kubelet's docker
    /// config search path from `gc.kubelet_root_dir`, and ask these plugins.
    pub credential_providers: Option<CredentialProviders>,
    /// Whether the container events watcher runs.
    pub container_events: ContainerEvents,
    /// Whether the runtime pins' labels are written.
    pub runtime_pins: RuntimePins,
    /// Whether the agent watches the pods bound to this node (`clusterSignals`).
    pub cluster_signals: bool,
    /// Whether the agent watches the KeepSets selecting this node and pins them (`keepSets`).
    pub keep_sets: bool,
    /// containerd's API socket for the runtime pins (default: the CRI runtime endpoint).
    pub containerd_address: String,
    /// How often the disk accounting runs (`diskAccountingPeriod`); `None`: off.
    pub disk_accounting_period: Option<Duration>,
    /// After each disk accounting, remove the CRI namespace's orphaned snapshots and
    /// unreferenced blobs at least this old (`diskPruneOrphans`); `None`: off.
    pub disk_prune_orphans: Option<Duration>,
    /// How long before a CronJob's next run its images are kept and pulled ahead
    /// (`clusterSignalsCronJobLead`); zero: not.
    pub cluster_signals_cronjob_lead: Duration,
    /// The share of the image filesystem the cluster signals' keeps may hold, in percent
    /// (`clusterSignalsKeepShare`, 1 to 100; 100: no limit).
    pub cluster_signals_keep_share: u8,
    /// With `clusterSignals`: whether the prefetch reads the pull Secrets a bound pod names,
    /// in its namespace, to pull its images ahead (`clusterSignalsPrefetchPullSecrets`).
    pub cluster_signals_prefetch_pull_secrets: bool,
    /// The warm loop's settings (the warm set itself is `gc.warm`).
    pub warm: WarmConfig,
}

/// The shortest loop period (`--detect-period`, `--gc-period`, `--image-cache-period`): a
/// smaller one would spin the loops against the runtime and the disk.
pub(crate) const MIN_LOOP_PERIOD: Duration = Duration::from_secs(1);

/// The longest path a unix socket can be bound at: `sun_path` is 108 bytes on Linux, with
/// its terminating NUL.
pub(crate) const MAX_SOCKET_PATH_BYTES: usize = 107;

#[cfg(test)]
mod tests;
