//! The flags shared by `run`, `gc` and `prune`: kubelet's names and defaults, plus ours.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use imagekeeper::agent::{AgentConfig, ConfigSource, FileConfig, FlagValues};

use super::Failure;

#[derive(Args, Debug, Clone)]
pub struct AgentFlags {
    /// A TOML file with KubeletConfiguration's field names; flags win over it. `run` reads it
    /// again on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The record database [default: /var/lib/imagekeeper/records.redb].
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Disk usage percent at or above which GC frees space [default: 85].
    #[arg(long, allow_negative_numbers = true)]
    pub image_gc_high_threshold: Option<i64>,
    /// Disk usage percent GC frees down to [default: 80].
    #[arg(long, allow_negative_numbers = true)]
    pub image_gc_low_threshold: Option<i64>,
    /// Percent of the image filesystem's inodes used at or above which GC removes images
    /// until inode use is at or below the low inode threshold; with
    /// --image-gc-low-inodes-threshold [default: off].
    #[arg(long, allow_negative_numbers = true, value_name = "PERCENT")]
    pub image_gc_high_inodes_threshold: Option<i64>,
    /// Percent of inodes used GC frees down to [default: off].
    #[arg(long, allow_negative_numbers = true, value_name = "PERCENT")]
    pub image_gc_low_inodes_threshold: Option<i64>,
    /// When the images' total size is above this (a quantity: 500Gi), GC frees it down to
    /// --image-gc-low-bytes, whatever the percentage [default: off].
    #[arg(long, value_name = "SIZE")]
    pub image_gc_high_bytes: Option<String>,
    /// The images' total size GC frees down to (a quantity) [default: off].
    #[arg(long, value_name = "SIZE")]
    pub image_gc_low_bytes: Option<String>,
    /// Minimum age of an unused image before GC may remove it, Go syntax [default: 2m].
    #[arg(long, value_name = "DURATION")]
    pub minimum_image_ttl_duration: Option<String>,
    /// Remove images unused for longer than this, Go syntax; 0 disables [default: 0].
    #[arg(long, value_name = "DURATION")]
    pub image_maximum_gc_age: Option<String>,
    /// Pull one image at a time [default: true].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub serialize_image_pulls: Option<bool>,
    /// Maximum parallel pulls when not serialized [default: unlimited].
    #[arg(long, allow_negative_numbers = true)]
    pub max_parallel_image_pulls: Option<i32>,
    /// Registry pull QPS; 0 means no limit [default: 5].
    #[arg(long, allow_negative_numbers = true)]
    pub registry_qps: Option<f64>,
    /// Burst of registry pulls [default: 10].
    #[arg(long, allow_negative_numbers = true)]
    pub registry_burst: Option<i64>,
    /// The sandbox (pause) image; always treated as in use (the runtime's own answer first
    /// with --protect-irreplaceable).
    #[arg(long, value_name = "IMAGE")]
    pub pod_infra_container_image: Option<String>,
    /// Keep the images that cannot come back: the runtime's sandbox image (from its CRI
    /// status, else --pod-infra-container-image) and images with no repo digest (imported or
    /// side-loaded) [default: true].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub protect_irreplaceable: Option<bool>,
    /// The CRI runtime endpoint [default: unix:///run/containerd/containerd.sock].
    #[arg(long, value_name = "URL")]
    pub container_runtime_endpoint: Option<String>,
    /// A separate CRI image-service endpoint [default: the runtime endpoint].
    #[arg(long, value_name = "URL")]
    pub image_service_endpoint: Option<String>,
    /// Never collect images whose tags or digests match (exact, or ending in *); repeatable.
    #[arg(long = "pinned-image", value_name = "PATTERN")]
    pub pinned_images: Vec<String>,
    /// The kubelet's root directory: its image pull records (image_manager/) are read, never
    /// written; empty disables [default: /var/lib/kubelet].
    #[arg(long, value_name = "DIR")]
    pub kubelet_root_dir: Option<String>,
    /// How old (file mtime) a kubelet pull intent may be and still keep the images it names,
    /// Go syntax, at least 1m [default: 24h].
    #[arg(long, value_name = "DURATION")]
    pub kubelet_intent_max_age: Option<String>,
    /// Watch the runtime's container events (auto) or not (off: beside a kubelet with the
    /// EventedPLEG gate on, on runtimes that serve the events to one subscriber only)
    /// [default: auto].
    #[arg(long, value_name = "auto|off")]
    pub container_events: Option<String>,
    /// Label every image imagekeeper keeps (pins, present warm entries, irreplaceable images)
    /// io.cri-containerd.pinned=pinned in containerd, so the kubelet's image GC and eviction
    /// manager spare it (auto: on containerd 1.7.3 and later, off by itself elsewhere; off:
    /// never) [default: auto].
    #[arg(long, value_name = "auto|off")]
    pub runtime_pins: Option<String>,
    /// containerd's own API socket for the runtime pins' labels [default: the CRI runtime
    /// endpoint].
    #[arg(long, value_name = "ENDPOINT")]
    pub containerd_address: Option<String>,
    /// The order the space pass removes images in: kubelet-order (least recently used
    /// first, as the kubelet), adaptive (one-off images first, then by how likely each is
    /// to come back) or predictive (the furthest estimated next use first, from each image's
    /// history) [default: kubelet-order].
    #[arg(long, value_name = "kubelet-order|adaptive|predictive")]
    pub image_gc_policy: Option<String>,
    /// How long the eviction journal keeps a removal, Go syntax [default: 720h].
    #[arg(long, value_name = "DURATION")]
    pub journal_max_age: Option<String>,
    /// How many removals the eviction journal keeps [default: 10000].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub journal_max_entries: Option<i64>,
    /// The agent's admin socket [default: /run/imagekeeper/admin.sock].
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,
    /// A directory of warm set files (YAML or JSON, `warm:` lists; a mounted ConfigMap): the
    /// images the node keeps present ahead of use and GC keeps; `run` reads it again on SIGHUP
    /// and, with --config-watch-period, when a file changes.
    #[arg(long, value_name = "DIR")]
    pub warm_set_dir: Option<PathBuf>,
}

impl AgentFlags {
    pub fn values(&self) -> FlagValues {
        FlagValues {
            db: self.db.clone(),
            image_gc_high_threshold: self.image_gc_high_threshold,
            image_gc_low_threshold: self.image_gc_low_threshold,
            image_gc_high_inodes_threshold: self.image_gc_high_inodes_threshold,
            image_gc_low_inodes_threshold: self.image_gc_low_inodes_threshold,
            image_gc_high_bytes: self.image_gc_high_bytes.clone(),
            image_gc_low_bytes: self.image_gc_low_bytes.clone(),
            minimum_image_ttl_duration: self.minimum_image_ttl_duration.clone(),
            image_maximum_gc_age: self.image_maximum_gc_age.clone(),
            serialize_image_pulls: self.serialize_image_pulls,
            max_parallel_image_pulls: self.max_parallel_image_pulls,
            registry_qps: self.registry_qps,
            registry_burst: self.registry_burst,
            pod_infra_container_image: self.pod_infra_container_image.clone(),
            protect_irreplaceable: self.protect_irreplaceable,
            container_runtime_endpoint: self.container_runtime_endpoint.clone(),
            image_service_endpoint: self.image_service_endpoint.clone(),
            pinned_images: self.pinned_images.clone(),
            kubelet_root_dir: self.kubelet_root_dir.clone(),
            kubelet_intent_max_age: self.kubelet_intent_max_age.clone(),
            container_events: self.container_events.clone(),
            runtime_pins: self.runtime_pins.clone(),
            containerd_address: self.containerd_address.clone(),
            image_gc_policy: self.image_gc_policy.clone(),
            journal_max_age: self.journal_max_age.clone(),
            journal_max_entries: self.journal_max_entries,
            admin_socket: self.admin_socket.clone(),
            warm_set_dir: self.warm_set_dir.clone(),
            ..FlagValues::default()
        }
    }

    /// Where the configuration comes from: the file and the flags given (plus `extra`, the
    /// flags of `run` alone). A reload reads the same source again.
    pub fn source(&self, extra: FlagValues) -> ConfigSource {
        let mut flags = self.values();
        flags.metrics_address = extra.metrics_address;
        flags.detect_period = extra.detect_period;
        flags.gc_period = extra.gc_period;
        flags.image_cache_period = extra.image_cache_period;
        flags.image_credential_provider_config = extra.image_credential_provider_config;
        flags.image_credential_provider_bin_dir = extra.image_credential_provider_bin_dir;
        flags.warm_period = extra.warm_period;
        ConfigSource {
            file: self.config.clone(),
            flags,
        }
    }

    /// Loads the file (if any) and resolves the configuration; every error is a usage error.
    pub fn resolve(&self, extra: FlagValues) -> Result<AgentConfig, Failure> {
        resolve_source(&self.source(extra))
    }
}

/// Loads the source's file (if any) and resolves it; every error is a usage error.
pub fn resolve_source(source: &ConfigSource) -> Result<AgentConfig, Failure> {
    let file = match &source.file {
        Some(path) => FileConfig::load(path).map_err(Failure::usage)?,
        None => FileConfig::default(),
    };
    AgentConfig::resolve(&file, source.file.as_deref(), &source.flags)
        .context("invalid configuration")
        .map_err(Failure::usage)
}
