//! [`FlagValues`]: the settings given as command-line flags, `None` (or empty) when not
//! given, and the `--set KEY=VALUE`s. Invariant: a flag given wins over `--set`, which wins
//! over the file ([`super::AgentConfig::resolve`]).

use std::path::PathBuf;

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
    /// `--set KEY=VALUE`s, as a file holding just them ([`super::parse_set`]): over the
    /// file, under a flag that sets the same setting.
    pub set: super::FileConfig,
}
