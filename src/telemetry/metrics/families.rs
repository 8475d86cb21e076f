//! The metric families the agent exports: [`MetricFamily`] (name, type, unit, labels, help),
//! one constant per family, and [`METRICS`], the single list the encoder (`encode.rs`) and the
//! generated reference page (`docs/src/reference/metrics.md`, `scripts/docs`) read.
//!
//! Invariants: a family's name, type, unit and help are written here once and nowhere else;
//! [`METRICS`] is in the order a scrape encodes the families (a unit test compares the two).

use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::METRIC_PREFIX;

/// What kind of metric a family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up; its samples end with `_total`.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Observations counted into buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

impl MetricKind {
    /// The OpenMetrics type name (`# TYPE` line).
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }

    pub(super) fn metric_type(self) -> MetricType {
        match self {
            MetricKind::Counter => MetricType::Counter,
            MetricKind::Gauge => MetricType::Gauge,
            MetricKind::Histogram => MetricType::Histogram,
        }
    }
}

/// The unit a family's name ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricUnit {
    Bytes,
    Seconds,
}

impl MetricUnit {
    pub(super) fn unit(self) -> &'static Unit {
        static BYTES: Unit = Unit::Bytes;
        static SECONDS: Unit = Unit::Seconds;
        match self {
            MetricUnit::Bytes => &BYTES,
            MetricUnit::Seconds => &SECONDS,
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            MetricUnit::Bytes => "bytes",
            MetricUnit::Seconds => "seconds",
        }
    }
}

/// One metric family the agent exports. [`METRICS`] lists them all: the exporter encodes each
/// family's name, type, unit and help from its entry (never from a second string), and the
/// reference page `docs/src/reference/metrics.md` is generated from the same list
/// (`scripts/docs`), so the two cannot drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricFamily {
    /// The name after `imagekeeper_`, without the unit suffix or the `_total` the encoder adds.
    pub name: &'static str,
    /// Counter, gauge or histogram (the `# TYPE` line).
    pub kind: MetricKind,
    /// The unit the name ends with, if any.
    pub(crate) unit: Option<MetricUnit>,
    /// The label names of every sample, in order (a unit test checks them against a scrape).
    pub labels: &'static [&'static str],
    /// The `# HELP` line's text.
    pub help: &'static str,
    /// When the family is left out of a scrape; `None`: always there.
    pub absent_when: Option<&'static str>,
}

impl MetricFamily {
    /// The family's name on the wire: `imagekeeper_<name>[_<unit>]`; a counter's samples add
    /// `_total`, a histogram's `_bucket`, `_sum` and `_count`.
    pub fn exposed_name(&self) -> String {
        let mut name = format!("{METRIC_PREFIX}_{}", self.name);
        if let Some(unit) = self.unit {
            name.push('_');
            name.push_str(unit.suffix());
        }
        name
    }
}

const fn family(
    name: &'static str,
    kind: MetricKind,
    unit: Option<MetricUnit>,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricFamily {
    MetricFamily {
        name,
        kind,
        unit,
        labels,
        help,
        absent_when: None,
    }
}

const fn absent_when(family: MetricFamily, when: &'static str) -> MetricFamily {
    MetricFamily {
        absent_when: Some(when),
        ..family
    }
}

use MetricKind::{Counter as C, Gauge as G, Histogram as H};
use MetricUnit::{Bytes as B, Seconds as S};

pub(super) const BUILD_INFO: MetricFamily = family(
    "build_info",
    G,
    None,
    &["version", "revision"],
    "The imagekeeper version and the git revision it was built from; always 1.",
);
pub(super) const IMAGE_GARBAGE_COLLECTED: MetricFamily = family(
    "image_garbage_collected",
    C,
    None,
    &["reason"],
    "Images removed by GC, by reason.",
);
pub(super) const GC_VICTIMS_RESCUED: MetricFamily = family(
    "gc_victims_rescued",
    C,
    None,
    &["why"],
    "Images GC chose but kept at its last look before removing them, by why.",
);
pub(super) const IMAGE_GC_PROGRESS_RUNNING: MetricFamily = family(
    "image_gc_progress_running",
    G,
    None,
    &[],
    "Whether a GC cycle is running now.",
);
pub(super) const IMAGE_GC_PROGRESS_REMOVED: MetricFamily = family(
    "image_gc_progress_removed",
    G,
    None,
    &[],
    "Images removed by the running (else the last) GC cycle.",
);
pub(super) const IMAGE_GC_PROGRESS_FREED: MetricFamily = family(
    "image_gc_progress_freed",
    G,
    Some(B),
    &[],
    "Bytes freed by the running (else the last) GC cycle.",
);
pub(super) const IMAGE_GC_REMOVE_FAILURES: MetricFamily = family(
    "image_gc_remove_failures",
    C,
    None,
    &[],
    "RemoveImage calls of GC that failed.",
);
pub(super) const RUNTIME_IMAGES: MetricFamily = absent_when(
    family(
        "runtime_images",
        G,
        None,
        &[],
        "Images the runtime lists, as the image cache last saw them.",
    ),
    "until the image cache has been filled once",
);
pub(super) const RUNTIME_IMAGES_SIZE: MetricFamily = absent_when(
    family(
        "runtime_images_size",
        G,
        Some(B),
        &[],
        "Total size of the images the runtime lists, as the image cache last saw them.",
    ),
    "until the image cache has been filled once",
);
pub(super) const GC_FUTURE_STAMPS_CLAMPED: MetricFamily = family(
    "gc_future_stamps_clamped",
    C,
    None,
    &[],
    "Image records whose first_detected or last_used lay in the future (beyond the tolerance) and that detect clamped to its time.",
);
pub(super) const GC_CLOCK_WENT_BACK: MetricFamily = family(
    "gc_clock_went_back",
    C,
    None,
    &[],
    "Detects that found the stored last_detect later than their own time (beyond the tolerance): the clock went back.",
);
pub(super) const GC_RELEASE_WAIT_TIMEOUTS: MetricFamily = family(
    "gc_release_wait_timeouts",
    C,
    None,
    &[],
    "GC cycles that waited the bound (15 s) for the runtime to show the MaxAge pass's removals released and then planned the space pass against the last reading.",
);
pub(super) const KUBELET_STALE_PULL_INTENTS: MetricFamily = absent_when(
    family(
        "kubelet_stale_pull_intents",
        G,
        None,
        &[],
        "Kubelet pull intents older than kubeletIntentMaxAge at the last read: they keep no image.",
    ),
    "until the kubelet's pull records have been read (never with --kubelet-root-dir \"\")",
);
pub(super) const IMAGE_FS_CAPACITY: MetricFamily = absent_when(
    family(
        "image_fs_capacity",
        G,
        Some(B),
        &[],
        "Size of the image filesystem (statvfs of the mountpoint ImageFsInfo reports), as the last GC read it.",
    ),
    "until a GC has read the image filesystem",
);
pub(super) const IMAGE_FS_INODES: MetricFamily = absent_when(
    family(
        "image_fs_inodes",
        G,
        None,
        &["kind"],
        "Inodes of the image filesystem as the last GC read them: capacity and free (statvfs f_files, f_ffree of the mountpoint ImageFsInfo reports) and, when the runtime reports it, those images use (ImageFsInfo inodes_used).",
    ),
    "until a GC has read the image filesystem's inodes",
);
pub(super) const IMAGE_FS_AVAILABLE: MetricFamily = absent_when(
    family(
        "image_fs_available",
        G,
        Some(B),
        &[],
        "Bytes available to unprivileged users on the image filesystem, as the last GC read them.",
    ),
    "until a GC has read the image filesystem",
);
pub(super) const IMAGE_REPULLS_AFTER_EVICTION: MetricFamily = family(
    "image_repulls_after_eviction",
    C,
    None,
    &["reason"],
    "Images pulled (or detected) again while the eviction journal held their removal, by the removal's reason (external: not removed by imagekeeper).",
);
pub(super) const IMAGE_REPULL_DELAY: MetricFamily = family(
    "image_repull_delay",
    H,
    Some(S),
    &[],
    "Seconds from an image's removal to its re-pull.",
);
pub(super) const IMAGE_GC_DURATION: MetricFamily = family(
    "image_gc_duration",
    H,
    Some(S),
    &["operation", "trigger", "result"],
    "Duration of image GC attempts the agent ran (its GC loop, gc and prune through it), by operation, trigger and result (KEP-6053).",
);
pub(super) const IMAGE_PULL_DURATION: MetricFamily = family(
    "image_pull_duration",
    H,
    Some(S),
    &["image_size_in_bytes"],
    "Duration of image pulls, by image size bucket (the kubelet's: N/A when the size is unknown).",
);
pub(super) const ENSURE_IMAGE_REQUESTS: MetricFamily = family(
    "ensure_image_requests",
    C,
    None,
    &["pull_policy", "present_locally", "pull_required"],
    "EnsureImageExists requests by pull policy (always, ifnotpresent, never), presence and whether a pull was required (unknown: not determined), as the kubelet counts them.",
);
pub(super) const STORE_HEALTHY: MetricFamily = family(
    "store_healthy",
    G,
    None,
    &[],
    "Whether the record store is usable (1), or failed an I/O operation (a full disk) and has not reopened yet (0).",
);
pub(super) const STORE_REOPENS: MetricFamily = family(
    "store_reopens",
    C,
    None,
    &[],
    "Times the record store reopened its file after an I/O failure.",
);
pub(super) const IMAGE_RECORDS: MetricFamily = absent_when(
    family("image_records", G, None, &[], "Image records in the store."),
    "when the scrape cannot count the records (the store failed)",
);
pub(super) const IMAGE_PINS: MetricFamily = absent_when(
    family(
        "image_pins",
        G,
        None,
        &[],
        "Operator pins (`imagekeeper pin`) in force: names whose images GC never removes while the pin lasts (the config's pinnedImages patterns are not counted).",
    ),
    "when the scrape cannot read the pins (the store failed), or from `AgentMetrics::render` (no time given)",
);
pub(super) const STORE_COMMIT_DURATION: MetricFamily = family(
    "store_commit_duration",
    H,
    Some(S),
    &[],
    "Durable commits of the record store.",
);
pub(super) const CONFIG_RELOADS: MetricFamily = family(
    "config_reloads",
    C,
    None,
    &["result"],
    "Configuration reloads (SIGHUP), by result.",
);
pub(super) const IMAGE_GC_CYCLES: MetricFamily = family(
    "image_gc_cycles",
    C,
    None,
    &["result"],
    "Image GC cycles the agent ran, by result (failure: the cycle ended with an error, as the kubelet's ImageGCFailed).",
);
pub(super) const IMAGE_GC_HIGH_THRESHOLD_PERCENT: MetricFamily = family(
    "image_gc_high_threshold_percent",
    G,
    None,
    &[],
    "The imageGCHighThresholdPercent in force: GC starts when image filesystem use is above it.",
);
pub(super) const IMAGE_GC_LOW_THRESHOLD_PERCENT: MetricFamily = family(
    "image_gc_low_threshold_percent",
    G,
    None,
    &[],
    "The imageGCLowThresholdPercent in force: GC frees down to it.",
);
pub(super) const WARM_IMAGES: MetricFamily = absent_when(
    family(
        "warm_images",
        G,
        None,
        &["state"],
        "Warm set entries by state at the last warm cycle (does_not_fit: pulling it would take the image filesystem above the GC's low threshold).",
    ),
    "until the first warm cycle has run",
);
pub(super) const WARM_PREFETCH_YIELDS: MetricFamily = absent_when(
    family(
        "warm_prefetch_yields",
        C,
        None,
        &[],
        "Warm cycles that pulled no image ahead for the pods bound to this node because the kubelet was pulling (a pull intent, KEP-2535, not stale): the prefetch yields to the kubelet's own pulls and tries again at the next cycle.",
    ),
    "until the first warm cycle has run",
);
pub(super) const RUNTIME_PINS_ENABLED: MetricFamily = absent_when(
    family(
        "runtime_pins_enabled",
        G,
        None,
        &[],
        "1 while the images imagekeeper keeps are labelled io.cri-containerd.pinned in containerd (runtimePins = auto on containerd 1.7.10 and later); 0 when off (set off, or auto on containerd before 1.7.10 or another runtime: the kubelet's image GC and eviction cannot see imagekeeper's keeps).",
    ),
    "until runtimePins = auto has read the runtime's version",
);
pub(super) const RUNTIME_PINNED_IMAGES: MetricFamily = absent_when(
    family(
        "runtime_pinned_images",
        G,
        None,
        &[],
        "Images imagekeeper keeps that the runtime carries as pinned: CRI ListImages listed them pinned: true at the last detect (what the kubelet's image GC reads, whatever containerd's labels say).",
    ),
    "until runtimePins = auto has read the runtime's version",
);
pub(super) const RUNTIME_PIN_DISAGREEMENTS: MetricFamily = absent_when(
    family(
        "runtime_pin_label_disagreements",
        G,
        None,
        &[],
        "Images imagekeeper keeps whose io.cri-containerd.pinned label (read right after the last detect) and CRI ListImages pinned flag (at that detect) disagree: above 0 past one detect after a write, containerd does not carry the label (before 1.7.10: containerd issue 9328).",
    ),
    "until runtimePins = auto has read the runtime's version",
);
pub(super) const RUNTIME_PIN_OTHER_INSTANCES: MetricFamily = absent_when(
    family(
        "runtime_pin_names_of_other_instances",
        G,
        None,
        &[],
        "containerd image names that carry another imagekeeper instance's runtime pin labels (io.imagekeeper.instance names another database's agent) at the last reconcile: left alone by this agent; above 0, two agents share this containerd (doctor's runtime-pin-instances check names them).",
    ),
    "until runtimePins = auto has read the runtime's version",
);
pub(super) const RUNTIME_PIN_LABELS: MetricFamily = absent_when(
    family(
        "runtime_pin_labels",
        G,
        None,
        &["state"],
        "containerd image names at the last reconcile whose runtime pin labels and this agent's record of what it labelled disagree, by state: orphaned, a name the agent labelled whose io.imagekeeper.pinned another client stripped, leaving io.cri-containerd.pinned (the agent still clears it once the image is no longer kept); foreign, a name carrying this agent's labels (its instance, or none) that it never wrote: forged, or the record lost, left alone (doctor's runtime-pin-record check names them).",
    ),
    "until runtimePins = auto has read the runtime's version",
);
pub(super) const RUNTIME_PINS_FAILING: MetricFamily = absent_when(
    family(
        "runtime_pins_failing",
        G,
        None,
        &[],
        "1 while the last reconcile of the runtime pins did not carry every keep to containerd: its Images service could not list the images, a label write failed, or it did not answer within 10 s (the reconcile is given up; /readyz says degraded); 0 after one that did.",
    ),
    "until runtimePins = auto has read the runtime's version",
);
pub(super) const RUNTIME_PIN_WRITES: MetricFamily = absent_when(
    family(
        "runtime_pin_label_writes",
        C,
        None,
        &["result"],
        "Label writes of the runtime pins (containerd Images.Update), by result; a failed write is retried at the next cycle.",
    ),
    "until runtimePins = auto has read the runtime's version",
);
pub(super) const WARM_PULLS: MetricFamily = absent_when(
    family(
        "warm_pulls",
        C,
        None,
        &["result"],
        "Pulls of warm set entries and of restore, by result.",
    ),
    "until the first warm cycle has run",
);

pub(super) const IMAGE_GC_ATTEMPTS: MetricFamily = family(
    "image_gc_attempts",
    C,
    None,
    &["operation", "trigger", "result", "reason"],
    "Image GC attempts by operation, trigger, result and reason (KEP-6053).",
);
pub(super) const IMAGE_GC_FREED: MetricFamily = family(
    "image_gc_freed",
    H,
    Some(B),
    &["operation", "trigger", "result", "reason"],
    "Bytes an image GC attempt freed, as the sizes the runtime listed for the images it removed (an estimate from image metadata, not a filesystem measurement) (KEP-6053).",
);
pub(super) const IMAGE_GC_TARGET: MetricFamily = family(
    "image_gc_target",
    H,
    Some(B),
    &["operation", "trigger"],
    "Bytes an image GC attempt set out to free: garbage_collect's byte rules' amount to free, delete_unused_images' total size of the images it found eligible (KEP-6053).",
);
pub(super) const IMAGE_GC_IMAGE_DELETIONS: MetricFamily = family(
    "image_gc_image_deletions",
    C,
    None,
    &["operation", "trigger", "reason", "result"],
    "RemoveImage calls of image GC by operation, trigger, reason (space, age, all_unused) and result (success, error); each success also counts in image_garbage_collected_total (KEP-6053).",
);
pub(super) const IMAGE_GC_SKIPPED_IMAGES: MetricFamily = family(
    "image_gc_skipped_images",
    C,
    None,
    &["operation", "trigger", "reason"],
    "Images an image GC walk read but did not remove, by operation, trigger and reason (in_use, min_age, pinned, other) (KEP-6053).",
);
pub(super) const IMAGE_GC_IMAGE_FS_USAGE_PERCENT: MetricFamily = absent_when(
    family(
        "image_gc_image_fs_usage_percent",
        G,
        None,
        &["phase"],
        "Image filesystem usage in percent before the threshold-based pass of the last garbage_collect (phase before) (KEP-6053).",
    ),
    "until a garbage_collect has read the image filesystem's usage",
);
pub(super) const CLUSTER_SIGNAL_PODS: MetricFamily = absent_when(
    family(
        "cluster_signal_pods",
        G,
        None,
        &[],
        "Pods bound to this node that the cluster signals' watch holds (any phase; a pod naming no image is not held).",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);
pub(super) const CLUSTER_SIGNAL_IMAGES: MetricFamily = absent_when(
    family(
        "cluster_signal_images",
        G,
        None,
        &["kind"],
        "Distinct images the cluster says are needed, by signal kind (bound_pod: named by a pod bound to this node; daemonset: named by the template of a DaemonSet owning such a pod, which that pod runs next; cronjob: named by a CronJob whose next run is within clusterSignalsCronJobLead): kept, and runtime-pinned where runtime pins are on; rollback: named by a Deployment's previous revision (kubectl rollout undo's), which the predictive order removes after the images expected no sooner.",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);
pub(super) const CLUSTER_SIGNAL_KEEPS_OVER_SHARE: MetricFamily = absent_when(
    family(
        "cluster_signal_keeps_over_share",
        G,
        None,
        &[],
        "Images the cluster signals need kept (pods bound to this node, their DaemonSets' templates, CronJob runs within the lead) that did not fit clusterSignalsKeepShare at the last detect: left to the GC's order. 0: everything fit.",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);
pub(super) const CLUSTER_SIGNAL_KEEPS_OVER_SHARE_BYTES: MetricFamily = absent_when(
    family(
        "cluster_signal_keeps_over_share_bytes",
        G,
        None,
        &[],
        "The bytes of the images imagekeeper_cluster_signal_keeps_over_share counts.",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);
pub(super) const CLUSTER_SIGNAL_PODS_REFUSED: MetricFamily = absent_when(
    family(
        "cluster_signal_pods_refused",
        C,
        None,
        &[],
        "Pods bound to this node the cluster signals did not hold because they already held their cap of 4,096 (each refusal counted): those pods' images are not kept by the signals.",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);
pub(super) const CLUSTER_SIGNAL_OBJECTS_REFUSED: MetricFamily = absent_when(
    family(
        "cluster_signal_objects_refused",
        C,
        None,
        &[],
        "CronJobs and Deployments the cluster signals did not hold: a cap reached (4,096 each), or a CronJob whose schedule or timeZone they do not read (a zone the IANA database does not know; each CronJob counted once until it changes): their images get no known next use.",
    ),
    "until the watch of the CronJobs or the ReplicaSets started (clusterSignals on, with the API server's credentials)",
);

pub(super) const CLUSTER_WATCH_SYNCED: MetricFamily = absent_when(
    family(
        "cluster_watch_synced",
        G,
        None,
        &["resource"],
        "1 once the watch has listed its resource (pods: the pods bound to this node; daemonsets, cronjobs, replicasets: every namespace's) at least once; 0 before: the agent does not yet know the cluster's needs.",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);
pub(super) const CLUSTER_WATCH_FAILING: MetricFamily = absent_when(
    family(
        "cluster_watch_failing",
        G,
        None,
        &["resource"],
        "1 while the watch's last answer was an error (the API server away, RBAC denied, an expired list) or the API server has not answered the agent's probe (GET /livez every 10 s, two in a row): it retries with backoff and the last set it saw holds; 0 once it answers again.",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);
pub(super) const CLUSTER_WATCH_ERRORS: MetricFamily = absent_when(
    family(
        "cluster_watch_errors",
        C,
        None,
        &["resource"],
        "Errors the cluster signals' watch met, by resource; each is retried with backoff.",
    ),
    "until the cluster signals' watch started (clusterSignals on, with the API server's credentials)",
);

pub(super) const DISK_BYTES: MetricFamily = absent_when(
    family(
        "disk_bytes",
        G,
        None,
        &["owner"],
        "The image filesystem's bytes by owner kind at the last disk accounting (inspect disk's totals: criImage, criContainer, image, container, lease, orphanSnapshot, unreferencedBlob, ingest, containerdMetadata), each byte counted once; owner unexplained: what the filesystem has in use beyond them (0 when the stores count more).",
    ),
    "until a disk accounting succeeded (diskAccountingPeriod, on containerd)",
);
pub(super) const DISK_INODES: MetricFamily = absent_when(
    family(
        "disk_inodes",
        G,
        None,
        &["owner"],
        "The image filesystem's inodes by owner kind at the last disk accounting.",
    ),
    "until a disk accounting succeeded (diskAccountingPeriod, on containerd)",
);
pub(super) const DISK_ACCOUNTINGS: MetricFamily = family(
    "disk_accountings",
    C,
    None,
    &["result"],
    "Disk accountings run (diskAccountingPeriod): success, or failure (containerd's API or the filesystem unreadable; the last accounting's figures stay).",
);

pub(super) const DISK_ORPHANS_PRUNED: MetricFamily = family(
    "disk_orphans_pruned",
    C,
    None,
    &["result"],
    "Orphaned snapshots and unreferenced blobs the agent's own prune (diskPruneOrphans, after a disk accounting) planned, by result: removed, failed (containerd refused; retried next accounting), skipped (its re-check found it held or gone). prune --orphans through the admin socket is not counted here.",
);
pub(super) const DISK_ORPHANS_PRUNED_BYTES: MetricFamily = family(
    "disk_orphans_pruned_bytes",
    C,
    None,
    &[],
    "The bytes of what the agent's own prune (diskPruneOrphans) removed, as the disk accounting counted them.",
);

/// Every metric family the agent exports, in the order a scrape encodes them. To add a
/// metric: add its entry here, encode it in `Snapshot::encode` with that entry, and run
/// `scripts/docs` to regenerate the reference page.
pub const METRICS: &[MetricFamily] = &[
    BUILD_INFO,
    IMAGE_GARBAGE_COLLECTED,
    GC_VICTIMS_RESCUED,
    IMAGE_GC_PROGRESS_RUNNING,
    IMAGE_GC_PROGRESS_REMOVED,
    IMAGE_GC_PROGRESS_FREED,
    IMAGE_GC_REMOVE_FAILURES,
    RUNTIME_IMAGES,
    RUNTIME_IMAGES_SIZE,
    GC_FUTURE_STAMPS_CLAMPED,
    GC_CLOCK_WENT_BACK,
    GC_RELEASE_WAIT_TIMEOUTS,
    KUBELET_STALE_PULL_INTENTS,
    IMAGE_FS_CAPACITY,
    IMAGE_FS_AVAILABLE,
    IMAGE_FS_INODES,
    IMAGE_REPULLS_AFTER_EVICTION,
    IMAGE_REPULL_DELAY,
    IMAGE_GC_DURATION,
    IMAGE_PULL_DURATION,
    ENSURE_IMAGE_REQUESTS,
    STORE_HEALTHY,
    STORE_REOPENS,
    IMAGE_RECORDS,
    IMAGE_PINS,
    STORE_COMMIT_DURATION,
    CONFIG_RELOADS,
    WARM_IMAGES,
    WARM_PULLS,
    WARM_PREFETCH_YIELDS,
    RUNTIME_PINS_ENABLED,
    RUNTIME_PINNED_IMAGES,
    RUNTIME_PIN_DISAGREEMENTS,
    RUNTIME_PIN_OTHER_INSTANCES,
    RUNTIME_PIN_LABELS,
    RUNTIME_PINS_FAILING,
    RUNTIME_PIN_WRITES,
    CLUSTER_SIGNAL_PODS,
    CLUSTER_SIGNAL_PODS_REFUSED,
    CLUSTER_SIGNAL_OBJECTS_REFUSED,
    CLUSTER_SIGNAL_IMAGES,
    CLUSTER_SIGNAL_KEEPS_OVER_SHARE,
    CLUSTER_SIGNAL_KEEPS_OVER_SHARE_BYTES,
    CLUSTER_WATCH_SYNCED,
    CLUSTER_WATCH_FAILING,
    CLUSTER_WATCH_ERRORS,
    DISK_BYTES,
    DISK_INODES,
    DISK_ACCOUNTINGS,
    DISK_ORPHANS_PRUNED,
    DISK_ORPHANS_PRUNED_BYTES,
    IMAGE_GC_CYCLES,
    IMAGE_GC_HIGH_THRESHOLD_PERCENT,
    IMAGE_GC_LOW_THRESHOLD_PERCENT,
    IMAGE_GC_ATTEMPTS,
    IMAGE_GC_FREED,
    IMAGE_GC_TARGET,
    IMAGE_GC_IMAGE_DELETIONS,
    IMAGE_GC_SKIPPED_IMAGES,
    IMAGE_GC_IMAGE_FS_USAGE_PERCENT,
];
