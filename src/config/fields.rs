//! The field list: one [`ConfigField`] per config file field (key, the flag that overrides
//! it, the kubelet's counterpart, its default, what a reload does with it, its help), from
//! which `scripts/docs` writes the reference page. Invariant: its keys are exactly the
//! fields [`super::FileConfig`] accepts, in order (a unit test checks it).

use std::time::Duration;

use super::AgentConfig;

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
