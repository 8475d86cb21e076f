//! One declaration per setting: [`imagekeeper_settings!`](crate::imagekeeper_settings) holds
//! the table of every config file setting (its TOML key, its [`FileConfig`] field and type,
//! the flag that also sets it if any, whether that flag is kept or deprecated, the older
//! `inspect` flag that duplicates it if any, the kubelet's counterpart, its default as read off
//! the resolved [`AgentConfig`], whether a reload applies it, its help). Everything else is
//! generated from it: [`FileConfig`], [`CONFIG_FIELDS`] (and from that the reference page and
//! every flag's `[default: ...]`), `--set KEY=VALUE` ([`parse_set`]), the flag's field of
//! [`FlagValues`](super::FlagValues) (`flags.rs`), and in the binary the clap flags, their
//! warnings and `inspect`'s older flags (`src/cli/agent_flags.rs`).
//!
//! Adding a setting: one entry here, its resolver (`config/<area>.rs`), a case in the
//! round-trip test (`src/cli/agent_flags.rs`) and a line in `inspect`'s scope test
//! (`src/cli/inspect/settings.rs`). Following the kubelet, a new policy setting gets no flag
//! (`flag: []`): the file and `--set` reach it. A callback (one more thing generated from the
//! table) matches the short form the table hands it (below), never an entry's named fields:
//! those are read in one place, the table's `@entries` rule.
//!
//! Invariants: the table's keys are exactly the file's fields, in order; a flag given wins over
//! `--set`, which wins over the file; a deprecated flag still works, hidden from `--help`, and
//! warns naming its key; an older `inspect` flag still works as the flag it duplicates, hidden,
//! warning, refused beside that flag.

use super::fields::FlagStatus;
use super::{AgentConfig, ConfigError};

/// The settings table. Each entry names its fields:
///
/// - `key`: the TOML key (KubeletConfiguration's name where the kubelet has one);
/// - `field`: the [`FileConfig`] field and its type (the field is an `Option` of it);
/// - `flag`: `[]`, or `[FlagValues field: its type = "flag-name", Kept|Deprecated, (clap
///   attributes)]`, optionally followed by `, inspect_old: field = "old-name", (clap
///   attributes)`: the older flag `inspect explain` and `inspect workload` still take for this
///   setting (hidden, warning, refused beside the flag; its type is the flag's);
/// - `kubelet`: `[]` (imagekeeper's own) or `["the kubelet's setting"]`;
/// - `default`: the value in force when nothing sets it, read off [`AgentConfig::defaults`];
/// - `reload`: [`OnReload`](super::OnReload)`::Applied` or `NeedsRestart`;
/// - `help`: one paragraph, for the file's reference page and the flag's `--help`.
///
/// `imagekeeper_settings!(callback)` reads the entries once (its `@entries` rule) and hands
/// `callback` (a macro generating what it needs: here [`FileConfig`] and [`CONFIG_FIELDS`], in
/// `flags.rs` [`FlagValues`](super::FlagValues), in the binary the clap flags) two lists in
/// short, positional form:
///
/// ```text
/// settings: [ (key, field: type, [flag-name, status], [kubelet], default, reload, help) ... ]
/// flags: [ (key, flag_field: type = flag-name, status, (attributes), help,
///           [old_field = old-name, (old attributes)]) ... ]
/// ```
///
/// `settings` has every entry (the brackets empty when it has no flag or no kubelet
/// counterpart); `flags` the entries with a flag (the last bracket empty without an older
/// `inspect` flag). A callback matches the list it needs and takes the other as one `tt`.
#[doc(hidden)]
#[macro_export]
macro_rules! imagekeeper_settings {
    ($callback:ident) => {
        $crate::imagekeeper_settings! { @entries $callback
            {
                key: "imageGCHighThresholdPercent",
                field: image_gc_high_threshold_percent: i64,
                flag: [image_gc_high_threshold: Option<i64> = "image-gc-high-threshold", Kept, (allow_negative_numbers = true, value_name = "PERCENT"),
                    inspect_old: high = "high", (value_name = "PERCENT", allow_negative_numbers = true)],
                kubelet: ["KubeletConfiguration imageGCHighThresholdPercent"],
                default: |c| c.gc.policy.high_threshold_percent.to_string(),
                reload: Applied,
                help: "Image filesystem usage percent at or above which GC frees space.",
            }
            {
                key: "imageGCLowThresholdPercent",
                field: image_gc_low_threshold_percent: i64,
                flag: [image_gc_low_threshold: Option<i64> = "image-gc-low-threshold", Kept, (allow_negative_numbers = true, value_name = "PERCENT"),
                    inspect_old: low = "low", (value_name = "PERCENT", allow_negative_numbers = true)],
                kubelet: ["KubeletConfiguration imageGCLowThresholdPercent"],
                default: |c| c.gc.policy.low_threshold_percent.to_string(),
                reload: Applied,
                help: "Usage percent GC frees down to; not above the high threshold.",
            }
            {
                key: "imageGCHighInodesThresholdPercent",
                field: image_gc_high_inodes_threshold_percent: i64,
                flag: [image_gc_high_inodes_threshold: Option<i64> = "image-gc-high-inodes-threshold", Deprecated, (allow_negative_numbers = true, value_name = "PERCENT")],
                kubelet: [],
                default: |c| match c.gc.policy.inodes {
                    Some(t) => t.high.to_string(),
                    None => "off".to_owned(),
                },
                reload: Applied,
                help: "Percent of the image filesystem's inodes used at or above which GC frees inodes; set with the low one.",
            }
            {
                key: "imageGCLowInodesThresholdPercent",
                field: image_gc_low_inodes_threshold_percent: i64,
                flag: [image_gc_low_inodes_threshold: Option<i64> = "image-gc-low-inodes-threshold", Deprecated, (allow_negative_numbers = true, value_name = "PERCENT")],
                kubelet: [],
                default: |c| match c.gc.policy.inodes {
                    Some(t) => t.low.to_string(),
                    None => "off".to_owned(),
                },
                reload: Applied,
                help: "Percent of inodes used that GC frees down to; below the high one.",
            }
            {
                key: "imageGCHighBytes",
                field: image_gc_high_bytes: $crate::config::Quantity,
                flag: [image_gc_high_bytes: Option<String> = "image-gc-high-bytes", Deprecated, (value_name = "SIZE")],
                kubelet: [],
                default: |c| match c.gc.policy.bytes {
                    Some(b) => b.high.to_string(),
                    None => "off".to_owned(),
                },
                reload: Applied,
                help: "The images' total size above which GC frees bytes, whatever the percentage (a quantity such as \"500Gi\", or bytes); set with the low one.",
            }
            {
                key: "imageGCLowBytes",
                field: image_gc_low_bytes: $crate::config::Quantity,
                flag: [image_gc_low_bytes: Option<String> = "image-gc-low-bytes", Deprecated, (value_name = "SIZE")],
                kubelet: [],
                default: |c| match c.gc.policy.bytes {
                    Some(b) => b.low.to_string(),
                    None => "off".to_owned(),
                },
                reload: Applied,
                help: "The images' total size GC frees down to; not above the high one.",
            }
            {
                key: "imageMinimumGCAge",
                field: image_minimum_gc_age: String,
                flag: [minimum_image_ttl_duration: Option<String> = "minimum-image-ttl-duration", Kept, (value_name = "DURATION"),
                    inspect_old: min_age = "min-age", (value_name = "DURATION", value_parser = $crate::format::canonical_go_duration)],
                kubelet: ["KubeletConfiguration imageMinimumGCAge"],
                default: |c| $crate::format::go_duration(c.gc.policy.min_age),
                reload: Applied,
                help: "Images first detected more recently than this are not removed for space (Go duration).",
            }
            {
                key: "imageMaximumGCAge",
                field: image_maximum_gc_age: String,
                flag: [image_maximum_gc_age: Option<String> = "image-maximum-gc-age", Kept, (value_name = "DURATION"),
                    inspect_old: max_age = "max-age", (value_name = "DURATION", value_parser = $crate::format::canonical_go_duration)],
                kubelet: ["KubeletConfiguration imageMaximumGCAge"],
                default: |c| $crate::format::go_duration(c.gc.policy.max_age),
                reload: Applied,
                help: "Images unused for longer than this are removed whatever the disk usage; 0 turns it off.",
            }
            {
                key: "serializeImagePulls",
                field: serialize_image_pulls: bool,
                flag: [serialize_image_pulls: Option<bool> = "serialize-image-pulls", Kept, (num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")],
                kubelet: ["KubeletConfiguration serializeImagePulls"],
                default: |c| c.pull.serialize_image_pulls.to_string(),
                reload: NeedsRestart,
                help: "One pull at a time; a file setting maxParallelImagePulls >= 2 and leaving this unset pulls in parallel, as the kubelet's defaulting does.",
            }
            {
                key: "maxParallelImagePulls",
                field: max_parallel_image_pulls: i32,
                flag: [max_parallel_image_pulls: Option<i32> = "max-parallel-image-pulls", Kept, (allow_negative_numbers = true, value_name = "N")],
                kubelet: ["KubeletConfiguration maxParallelImagePulls"],
                default: |c| match c.pull.max_parallel_image_pulls {
                    Some(n) => n.to_string(),
                    None => "unlimited".to_owned(),
                },
                reload: NeedsRestart,
                help: "The most pulls at once when pulls are not serialized.",
            }
            {
                key: "registryPullQPS",
                field: registry_pull_qps: f64,
                flag: [registry_qps: Option<f64> = "registry-qps", Kept, (allow_negative_numbers = true, value_name = "QPS")],
                kubelet: ["KubeletConfiguration registryPullQPS"],
                default: |c| c.pull.registry_pull_qps.to_string(),
                reload: NeedsRestart,
                help: "Pulls per second allowed (a token bucket); 0 is no limit.",
            }
            {
                key: "registryBurst",
                field: registry_burst: i64,
                flag: [registry_burst: Option<i64> = "registry-burst", Kept, (allow_negative_numbers = true, value_name = "N")],
                kubelet: ["KubeletConfiguration registryBurst"],
                default: |c| c.pull.registry_burst.to_string(),
                reload: NeedsRestart,
                help: "The token bucket's burst for registryPullQPS.",
            }
            {
                key: "pinnedImages",
                field: pinned_images: Vec<String>,
                flag: [pinned_images: Vec<String> = "pinned-image", Deprecated, (value_name = "PATTERN")],
                kubelet: [],
                default: |c| format!("{:?}", c.gc.pins.patterns()),
                reload: Applied,
                help: "Patterns of images GC never removes: an exact name, or a prefix ending in `*` (CRI-O's pinned_images; containerd 1.6 before 1.6.22 and 1.7 before 1.7.3 never reports pinned).",
            }
            {
                key: "podInfraContainerImage",
                field: pod_infra_container_image: String,
                flag: [pod_infra_container_image: Option<String> = "pod-infra-container-image", Kept, (value_name = "IMAGE")],
                kubelet: ["kubelet --pod-infra-container-image"],
                default: |c| {
                    c.gc.sandbox_image
                        .clone()
                        .unwrap_or_else(|| "none".to_owned())
                },
                reload: Applied,
                help: "The sandbox (pause) image, always treated as in use.",
            }
            {
                key: "protectIrreplaceable",
                field: protect_irreplaceable: bool,
                flag: [protect_irreplaceable: Option<bool> = "protect-irreplaceable", Deprecated, (num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")],
                kubelet: [],
                default: |c| c.gc.protect_irreplaceable.to_string(),
                reload: Applied,
                help: "Keep the images that cannot come back: the runtime's sandbox image (its verbose CRI Status, else podInfraContainerImage) and images with no repo digest (imported or side-loaded).",
            }
            {
                key: "containerRuntimeEndpoint",
                field: container_runtime_endpoint: String,
                flag: [container_runtime_endpoint: Option<String> = "container-runtime-endpoint", Kept, (value_name = "URL")],
                kubelet: ["KubeletConfiguration containerRuntimeEndpoint"],
                default: |c| c.cri.runtime_endpoint.clone(),
                reload: NeedsRestart,
                help: "The CRI runtime's socket.",
            }
            {
                key: "imageServiceEndpoint",
                field: image_service_endpoint: String,
                flag: [image_service_endpoint: Option<String> = "image-service-endpoint", Kept, (value_name = "URL")],
                kubelet: ["KubeletConfiguration imageServiceEndpoint"],
                default: |c| {
                    c.cri
                        .image_endpoint
                        .clone()
                        .unwrap_or_else(|| "the runtime endpoint".to_owned())
                },
                reload: NeedsRestart,
                help: "The CRI image service's socket, when it is not the runtime's.",
            }
            {
                key: "kubeletRootDir",
                field: kubelet_root_dir: String,
                flag: [kubelet_root_dir: Option<String> = "kubelet-root-dir", Kept, (value_name = "DIR")],
                kubelet: ["kubelet --root-dir"],
                default: |c| match &c.gc.kubelet_root_dir {
                    Some(dir) => dir.display().to_string(),
                    None => "\"\"".to_owned(),
                },
                reload: Applied,
                help: "The kubelet's root directory, whose image pull records are read (never written); an absolute path, or empty to read none. A reload applies it to GC at once; the node credentials' search path keeps the directory of the start.",
            }
            {
                key: "kubeletIntentMaxAge",
                field: kubelet_intent_max_age: String,
                flag: [kubelet_intent_max_age: Option<String> = "kubelet-intent-max-age", Deprecated, (value_name = "DURATION")],
                kubelet: [],
                default: |c| {
                    $crate::format::go_duration(
                        c.gc.kubelet_intent_max_age
                            .unwrap_or($crate::kubelet::DEFAULT_INTENT_MAX_AGE),
                    )
                },
                reload: Applied,
                help: "How old (file mtime) a kubelet pull intent may be and still keep its image; at least 1m.",
            }
            {
                key: "containerEvents",
                field: container_events: String,
                flag: [container_events: Option<String> = "container-events", Deprecated, (value_name = "auto|off")],
                kubelet: [],
                default: |c| c.container_events.as_str().to_owned(),
                reload: NeedsRestart,
                help: "`auto` watches the runtime's container events (falling back when it has none); `off` never subscribes.",
            }
            {
                key: "clusterSignals",
                field: cluster_signals: bool,
                flag: [],
                kubelet: [],
                default: |c| c.cluster_signals.to_string(),
                reload: NeedsRestart,
                help: "Watch the pods bound to this node through the API server (NODE_NAME, in-cluster credentials, a binary with the `kube` feature) and keep, runtime-pinned, every image they name, whether or not their containers exist yet; the DaemonSets owning them, whose templates' images are kept and pulled ahead (a rollout's next pod here); every CronJob (its next run: kept from clusterSignalsCronJobLead before it, and a known next use for the predictive order) and every ReplicaSet (a Deployment's previous revision: its rollback set, ranked by the predictive order).",
            }
            {
                key: "keepSets",
                field: keep_sets: bool,
                flag: [],
                kubelet: [],
                default: |c| c.keep_sets.to_string(),
                reload: NeedsRestart,
                help: "Watch the KeepSets (the cluster-scoped custom resource imagekeeper.io/v1alpha1 KeepSet, the chart's CRD) whose nodeSelector matches this node's labels (NODE_NAME, in-cluster credentials, a binary with the `kube` feature): pull each set's images and pin them (a pin whose reason is `KeepSet/<name>`, runtime-pinned) until the set's lifetime ends or it is deleted, and publish this node's KeepSetReport object (per set: present, pinned, failed with the reason, bytes).",
            }
            {
                key: "clusterSignalsCronJobLead",
                field: cluster_signals_cronjob_lead: String,
                flag: [],
                kubelet: [],
                default: |c| $crate::format::go_duration(c.cluster_signals_cronjob_lead),
                reload: NeedsRestart,
                help: "With clusterSignals: how long before a CronJob's next run its images are kept and runtime-pinned, and pulled ahead when its runs are this node's (its template names the node, or a pod of one of its Jobs is bound here); `0s` turns both off; at most 24h.",
            }
            {
                key: "clusterSignalsKeepShare",
                field: cluster_signals_keep_share: i64,
                flag: [],
                kubelet: [],
                default: |c| c.cluster_signals_keep_share.to_string(),
                reload: NeedsRestart,
                help: "With clusterSignals: the share of the image filesystem's capacity, in percent (1 to 100; 100: no limit), the images the signals keep (pods bound to this node, their DaemonSets' templates, CronJob runs within the lead) may hold. Those that do not fit (pods' and DaemonSets' first, then CronJobs', each in image order; an image in use is kept by its use) are left to the GC's order, said once in the log, a Warning Event KeepsOverShare on the Node, imagekeeper_cluster_signal_keeps_over_share and doctor.",
            }
            {
                key: "clusterSignalsPrefetchPullSecrets",
                field: cluster_signals_prefetch_pull_secrets: bool,
                flag: [],
                kubelet: [],
                default: |c| c.cluster_signals_prefetch_pull_secrets.to_string(),
                reload: NeedsRestart,
                help: "With clusterSignals: pull ahead the images of a bound pod that names imagePullSecrets too, with those Secrets, read (a get) in the pod's namespace at the pull; the agent then needs get on Secrets in every namespace (the chart's clusterSignals.prefetchPullSecrets). Off: such a pod's images are left to the kubelet, said in the log and by gc --dry-run.",
            }
            {
                key: "diskAccountingPeriod",
                field: disk_accounting_period: String,
                flag: [],
                kubelet: [],
                default: |c| match c.disk_accounting_period {
                    Some(period) => $crate::format::go_duration(period),
                    None => "0s".to_owned(),
                },
                reload: NeedsRestart,
                help: "How often the agent accounts the image filesystem's bytes by owner through containerd's API (`inspect disk`'s split, as the `imagekeeper_disk_*` metrics); `0s` turns it off; at least 1m otherwise.",
            }
            {
                key: "diskPruneOrphans",
                field: disk_prune_orphans: String,
                flag: [],
                kubelet: [],
                default: |c| match c.disk_prune_orphans {
                    Some(min_age) => $crate::format::go_duration(min_age),
                    None => "off".to_owned(),
                },
                reload: NeedsRestart,
                help: "`off`, or a minimum age (Go duration, e.g. `24h`): after each disk accounting the agent removes the CRI namespace's (`k8s.io`) orphaned snapshots and unreferenced blobs at least that old, as `prune --orphans --min-age` does (each re-checked right before its removal and journaled, reason orphan); other namespaces are never touched. Needs diskAccountingPeriod on.",
            }
            {
                key: "runtimePins",
                field: runtime_pins: String,
                flag: [runtime_pins: Option<String> = "runtime-pins", Deprecated, (value_name = "auto|off")],
                kubelet: [],
                default: |c| c.runtime_pins.as_str().to_owned(),
                reload: NeedsRestart,
                help: "`auto` labels every image imagekeeper keeps `io.cri-containerd.pinned=pinned` in containerd (1.7.10 and later), so the kubelet's image GC and eviction spare it; it turns itself off on containerd before 1.7.10 (which does not list a label added to an image already present as pinned: containerd issue 9328) and other runtimes; `off` writes no label.",
            }
            {
                key: "containerdAddress",
                field: containerd_address: String,
                flag: [containerd_address: Option<String> = "containerd-address", Deprecated, (value_name = "ENDPOINT")],
                kubelet: [],
                default: |c| c.containerd_address.clone(),
                reload: NeedsRestart,
                help: "containerd's own API socket, where the runtime pins' labels are written (namespace `k8s.io`); default: the CRI runtime endpoint.",
            }
            {
                key: "imageGCPolicy",
                field: image_gc_policy: String,
                flag: [image_gc_policy: Option<String> = "image-gc-policy", Deprecated, (value_name = "kubelet-order|adaptive|predictive")],
                kubelet: [],
                default: |c| c.gc.order.as_str().to_owned(),
                reload: Applied,
                help: "The order the space pass removes images in: `kubelet-order` (least recently used first, as the kubelet), `adaptive` (one-off images first, then images by how likely they are to come back) or `predictive` (the furthest estimated next use first, from each image's own use and pull history); see the GC quality section of the design chapter.",
            }
            {
                key: "journalMaxAge",
                field: journal_max_age: String,
                flag: [journal_max_age: Option<String> = "journal-max-age", Deprecated, (value_name = "DURATION")],
                kubelet: [],
                default: |c| $crate::format::go_duration(c.gc.journal_retention.unwrap_or_default().max_age),
                reload: Applied,
                help: "How long the eviction journal keeps a removal.",
            }
            {
                key: "journalMaxEntries",
                field: journal_max_entries: i64,
                flag: [journal_max_entries: Option<i64> = "journal-max-entries", Deprecated, (value_name = "N", allow_negative_numbers = true)],
                kubelet: [],
                default: |c| {
                    c.gc.journal_retention
                        .unwrap_or_default()
                        .max_entries
                        .to_string()
                },
                reload: Applied,
                help: "How many removals the eviction journal keeps; at least 1.",
            }
            {
                key: "imageCredentialProviderConfig",
                field: image_credential_provider_config: std::path::PathBuf,
                flag: [image_credential_provider_config: Option<std::path::PathBuf> = "image-credential-provider-config", Kept, (value_name = "FILE")],
                kubelet: ["kubelet --image-credential-provider-config"],
                default: |c| match &c.credential_providers {
                    Some(p) => p.config.display().to_string(),
                    None => "none".to_owned(),
                },
                reload: NeedsRestart,
                help: "A CredentialProviderConfig file: the plugins asked for registry credentials; set with imageCredentialProviderBinDir or not at all.",
            }
            {
                key: "imageCredentialProviderBinDir",
                field: image_credential_provider_bin_dir: std::path::PathBuf,
                flag: [image_credential_provider_bin_dir: Option<std::path::PathBuf> = "image-credential-provider-bin-dir", Kept, (value_name = "DIR")],
                kubelet: ["kubelet --image-credential-provider-bin-dir"],
                default: |c| match &c.credential_providers {
                    Some(p) => p.bin_dir.display().to_string(),
                    None => "none".to_owned(),
                },
                reload: NeedsRestart,
                help: "The directory holding the credential provider plugins.",
            }
            {
                key: "warm",
                field: warm: Vec<$crate::warm::WarmEntrySpec>,
                flag: [],
                kubelet: [],
                default: |c| c.gc.warm.entries().len().to_string() + " entries",
                reload: Applied,
                help: "[[warm]] tables: images the node keeps present ahead of use, in priority order; fields image, runtimeHandler, for (Go duration) or until (RFC 3339), size (bytes or a quantity). See Warm sets.",
            }
            {
                key: "warmSetDir",
                field: warm_set_dir: std::path::PathBuf,
                flag: [warm_set_dir: Option<std::path::PathBuf> = "warm-set-dir", Deprecated, (value_name = "DIR")],
                kubelet: [],
                default: |c| match &c.warm.dir {
                    Some(d) => d.display().to_string(),
                    None => "none".to_owned(),
                },
                reload: Applied,
                help: "A directory of warm set files (YAML or JSON `warm:` lists; a mounted ConfigMap), read again at each reload.",
            }
            {
                key: "warmPeriod",
                field: warm_period: String,
                flag: [warm_period: Option<String> = "warm-period", Deprecated, (value_name = "DURATION")],
                kubelet: [],
                default: |c| $crate::format::go_duration(c.warm.period),
                reload: Applied,
                help: "How often the warm cycle pulls missing warm images; at least 1s.",
            }
            {
                key: "warmParallelPulls",
                field: warm_parallel_pulls: i64,
                flag: [],
                kubelet: [],
                default: |c| c.warm.parallel_pulls.to_string(),
                reload: Applied,
                help: "At most this many warm pulls at once, 1 to 64.",
            }
            {
                key: "warmFromHistory",
                field: warm_from_history: $crate::config::FromHistorySpec,
                flag: [],
                kubelet: [],
                default: |c| match c.warm.from_history {
                    Some(_) => "set".to_owned(),
                    None => "none".to_owned(),
                },
                reload: Applied,
                help: "[warmFromHistory] usedWithin (Go duration, default 24h), maxBytes (bytes or a quantity): images removed externally and used within the window, pulled back as warm entries.",
            }
        }
    };
    // The one place an entry's shape is read: every entry, then every flag, in the short form
    // the callbacks match (see the doc above).
    (@entries $callback:ident $( {
        key: $key:literal,
        field: $field:ident : $ty:ty,
        flag: [ $(
            $ff:ident : $fty:ty = $fname:literal, $status:ident, ( $($fattr:tt)* )
            $( , inspect_old: $old:ident = $old_name:literal, ( $($old_attr:tt)* ) )?
        )? ],
        kubelet: [ $( $kubelet:literal )? ],
        default: $default:expr,
        reload: $reload:ident,
        help: $help:literal $(,)?
    } )*) => {
        $callback! {
            settings: [ $(
                ($key, $field: $ty, [$($fname, $status)?], [$($kubelet)?], $default, $reload, $help)
            )* ]
            flags: [ $( $(
                (
                    $key, $ff: $fty = $fname, $status, ($($fattr)*), $help,
                    [$($old = $old_name, ($($old_attr)*))?]
                )
            )? )* ]
        }
    };
}

/// The flag column of the reference page: the flag, or how `--set` reaches the key.
macro_rules! flag_text {
    ($key:literal) => {
        concat!("--set ", $key, "=…")
    };
    ($key:literal, $name:literal, Kept) => {
        concat!("--", $name)
    };
    ($key:literal, $name:literal, Deprecated) => {
        concat!("--set ", $key, "=… (deprecated: --", $name, ")")
    };
}

/// `Some` of the value an entry gives, else `None`.
macro_rules! optional {
    () => {
        None
    };
    ($value:expr) => {
        Some($value)
    };
}

/// The library's callback: [`FileConfig`], [`CONFIG_FIELDS`] and the overlay `--set` uses.
macro_rules! config_from_table {
    (
        settings: [ $( (
            $key:literal, $field:ident : $ty:ty, [$($fname:literal, $status:ident)?],
            [$($kubelet:literal)?], $default:expr, $reload:ident, $help:literal
        ) )* ]
        flags: $flags:tt
    ) => {
        /// The config file: KubeletConfiguration's field names, all optional (generated from
        /// the settings table, [`crate::imagekeeper_settings`]).
        #[derive(Debug, Default, Clone, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        // The fields' docs are the help texts, whose `[[warm]]` and `[warmFromHistory]` name
        // TOML tables, not items.
        #[allow(rustdoc::broken_intra_doc_links)]
        pub struct FileConfig {
            $(
                #[doc = $help]
                #[serde(rename = $key)]
                pub $field: Option<$ty>,
            )*
        }

        /// Every config file field, in the order of [`FileConfig`].
        pub const CONFIG_FIELDS: &[super::ConfigField] = &[
            $(
                super::ConfigField {
                    key: $key,
                    flag: flag_text!($key $(, $fname, $status)?),
                    flag_name: optional!($(concat!("--", $fname))?),
                    flag_status: optional!($(FlagStatus::$status)?),
                    kubelet: optional!($($kubelet)?),
                    default: $default,
                    on_reload: super::OnReload::$reload,
                    help: $help,
                },
            )*
        ];

        impl FileConfig {
            /// `over`'s settings over this file's: what `--set` does.
            pub fn overlay(&mut self, over: &FileConfig) {
                $(
                    if over.$field.is_some() {
                        self.$field = over.$field.clone();
                    }
                )*
            }

            /// The keys this file sets.
            pub fn keys_given(&self) -> Vec<&'static str> {
                let mut keys = Vec::new();
                $(
                    if self.$field.is_some() {
                        keys.push($key);
                    }
                )*
                keys
            }
        }
    };
}

imagekeeper_settings!(config_from_table);

/// `--set KEY=VALUE`: the file setting `KEY` to `VALUE`, read as the file reads it (a TOML
/// value: `85`, `true`, `["a", "b"]`, `{ usedWithin = "1h" }`), else as text (`2m`,
/// `registry.k8s.io/pause:3.10`), so a script need not quote. An unknown key or a value of the
/// wrong type is refused naming the key.
pub fn parse_set(arg: &str) -> Result<FileConfig, ConfigError> {
    let invalid = |origin: String, message: String| ConfigError::Invalid { origin, message };
    let Some((key, value)) = arg.split_once('=') else {
        return Err(invalid(
            "--set".to_owned(),
            format!("{arg:?} is not KEY=VALUE"),
        ));
    };
    let key = key.trim();
    if !CONFIG_FIELDS.iter().any(|f| f.key == key) {
        let keys: Vec<&str> = CONFIG_FIELDS.iter().map(|f| f.key).collect();
        return Err(invalid(
            "--set".to_owned(),
            format!(
                "unknown key {key:?}; the config file's keys are {}",
                keys.join(", ")
            ),
        ));
    }
    let read = |v: toml::Value| {
        let mut table = toml::Table::new();
        table.insert(key.to_owned(), v);
        toml::Value::Table(table).try_into::<FileConfig>()
    };
    let text = toml::Value::String(value.to_owned());
    // `"48h"` is the text 48h; `48h` (not TOML) is too.
    let typed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"));
    let parsed = match typed {
        Some(v) => read(v).or_else(|e| read(text).map_err(|_| e)),
        None => read(text),
    };
    parsed.map_err(|e| {
        invalid(
            format!("--set {key}"),
            format!("{value:?}: {}", e.to_string().trim_end().replace('\n', " ")),
        )
    })
}

/// A flag's help: the setting's help and its default, as [`CONFIG_FIELDS`] renders it
/// (`[default: 85]`): no default is typed by hand.
pub fn flag_help(key: &str) -> String {
    let Some(field) = CONFIG_FIELDS.iter().find(|f| f.key == key) else {
        return String::new();
    };
    match AgentConfig::defaults() {
        Ok(defaults) => format!(
            "{} [default: {}].",
            field.help.trim_end_matches('.'),
            (field.default)(&defaults)
        ),
        Err(_) => field.help.to_owned(),
    }
}
