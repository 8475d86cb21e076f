//! [`FlagValues`]: the settings given as command-line flags, `None` (or empty) when not
//! given, and the `--set KEY=VALUE`s. Invariant: a flag given wins over `--set`, which wins
//! over the file ([`super::AgentConfig::resolve`]).

use std::path::PathBuf;

/// Values given as flags; `None` means not given.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FlagValues {
    /// `--db`: the record database file.
    pub db: Option<PathBuf>,
    /// `--image-gc-high-threshold` (key `imageGCHighThresholdPercent`): usage percent at or
    /// above which GC frees space.
    pub image_gc_high_threshold: Option<i64>,
    /// `--image-gc-low-threshold` (key `imageGCLowThresholdPercent`): usage percent GC frees
    /// down to.
    pub image_gc_low_threshold: Option<i64>,
    /// `--image-gc-high-inodes-threshold` (deprecated; key
    /// `imageGCHighInodesThresholdPercent`): inodes used percent at or above which GC frees inodes.
    pub image_gc_high_inodes_threshold: Option<i64>,
    /// `--image-gc-low-inodes-threshold` (deprecated; key `imageGCLowInodesThresholdPercent`):
    /// inodes used percent GC frees down to.
    pub image_gc_low_inodes_threshold: Option<i64>,
    /// `--image-gc-high-bytes` (deprecated; key `imageGCHighBytes`): the images' total size
    /// above which GC frees bytes, a Kubernetes quantity as given.
    pub image_gc_high_bytes: Option<String>,
    /// `--image-gc-low-bytes` (deprecated; key `imageGCLowBytes`): the images' total size GC
    /// frees down to, a quantity as given.
    pub image_gc_low_bytes: Option<String>,
    /// `--minimum-image-ttl-duration` (key `imageMinimumGCAge`): Go duration; younger images
    /// are not removed for space.
    pub minimum_image_ttl_duration: Option<String>,
    /// `--image-maximum-gc-age` (key `imageMaximumGCAge`): Go duration; images unused longer
    /// are removed whatever the usage (0: off).
    pub image_maximum_gc_age: Option<String>,
    /// `--serialize-image-pulls` (key `serializeImagePulls`): one pull at a time.
    pub serialize_image_pulls: Option<bool>,
    /// `--max-parallel-image-pulls` (key `maxParallelImagePulls`): the most pulls at once.
    pub max_parallel_image_pulls: Option<i32>,
    /// `--registry-qps` (key `registryPullQPS`): pulls per second (0: no limit).
    pub registry_qps: Option<f64>,
    /// `--registry-burst` (key `registryBurst`): the pull token bucket's burst.
    pub registry_burst: Option<i64>,
    /// `--pod-infra-container-image` (key `podInfraContainerImage`): the sandbox image,
    /// always in use.
    pub pod_infra_container_image: Option<String>,
    /// `--protect-irreplaceable` (deprecated; key `protectIrreplaceable`): keep the images that
    /// cannot be pulled back.
    pub protect_irreplaceable: Option<bool>,
    /// `--container-runtime-endpoint` (key `containerRuntimeEndpoint`): the CRI socket.
    pub container_runtime_endpoint: Option<String>,
    /// `--image-service-endpoint` (key `imageServiceEndpoint`): the CRI image socket, when
    /// apart.
    pub image_service_endpoint: Option<String>,
    /// `--kubelet-root-dir` (key `kubeletRootDir`): the kubelet's root directory; empty: none.
    pub kubelet_root_dir: Option<String>,
    /// `--kubelet-intent-max-age` (deprecated; key `kubeletIntentMaxAge`): Go duration, at
    /// least 1m.
    pub kubelet_intent_max_age: Option<String>,
    /// `--container-events` (deprecated; key `containerEvents`): `auto` or `off`.
    pub container_events: Option<String>,
    /// `--runtime-pins` (deprecated; key `runtimePins`): `auto` or `off`.
    pub runtime_pins: Option<String>,
    /// `--containerd-address` (deprecated; key `containerdAddress`): containerd's API socket.
    pub containerd_address: Option<String>,
    /// `--image-gc-policy` (deprecated; key `imageGCPolicy`): `kubelet-order`, `adaptive` or
    /// `predictive`.
    pub image_gc_policy: Option<String>,
    /// `--journal-max-age` (deprecated; key `journalMaxAge`): Go duration the eviction journal
    /// keeps a removal.
    pub journal_max_age: Option<String>,
    /// `--journal-max-entries` (deprecated; key `journalMaxEntries`): removals the journal
    /// keeps, at least 1.
    pub journal_max_entries: Option<i64>,
    /// `--pinned-image`s (deprecated; key `pinnedImages`): patterns GC never removes; empty:
    /// none given.
    pub pinned_images: Vec<String>,
    /// `--admin-socket`: the agent's admin socket.
    pub admin_socket: Option<PathBuf>,
    /// `run --metrics-address`: `HOST:PORT` of the metrics and health endpoint.
    pub metrics_address: Option<String>,
    /// `run --detect-period`: Go duration between detects, at least 1s.
    pub detect_period: Option<String>,
    /// `run --gc-period`: Go duration between GC cycles, at least 1s.
    pub gc_period: Option<String>,
    /// `run --image-cache-period`: Go duration between image cache refreshes, at least 1s.
    pub image_cache_period: Option<String>,
    /// `--image-credential-provider-config` (key `imageCredentialProviderConfig`): a
    /// CredentialProviderConfig file.
    pub image_credential_provider_config: Option<PathBuf>,
    /// `--image-credential-provider-bin-dir` (key `imageCredentialProviderBinDir`): the
    /// plugins' directory.
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// `--warm-set-dir` (deprecated; key `warmSetDir`): a directory of warm set files.
    pub warm_set_dir: Option<PathBuf>,
    /// `--warm-period` (deprecated; key `warmPeriod`): Go duration between warm cycles, at
    /// least 1s.
    pub warm_period: Option<String>,
    /// `--set KEY=VALUE`s, as a file holding just them ([`super::parse_set`]): over the
    /// file, under a flag that sets the same setting.
    pub set: super::FileConfig,
}
