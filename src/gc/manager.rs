//! The image GC manager: kubelet's ImageGCManager over the persisted records.
//!
//! This file holds the manager itself (its state, construction, reconfiguration, the image
//! cache) and what its cycles share; one `impl ImageGcManager` block per part beside it:
//! `detect.rs` (detect and the container-created mark), `keeps.rs` (pulls in flight, warm set,
//! what detect found kept), `collect.rs` (GarbageCollect, DeleteUnusedImages, MaxAge),
//! `walk.rs` (the space walk), `measured.rs` (further image filesystems), `release.rs` (the
//! wait for the runtime to release MaxAge's removals), `last_look.rs` (the
//! last look and the removal), `dry_run.rs` (the plan); `config.rs` and `report.rs` hold the
//! configuration and the reports, `image_cache.rs` the image cache's list.
//!
//! Invariants: detect, GarbageCollect and DeleteUnusedImages never run at once (one async
//! lock); a record is deleted only after the runtime confirms the removal; no write
//! transaction is open across an await (each store call is synchronous and complete); the
//! eviction walk reads the store's index lazily, in chunks, resuming after the last entry it
//! saw, so it never loads every record to sort.
//!
//! What GC never removes: an image a container of any state uses, an image a running
//! container mounts as an image volume (seen in its ContainerStatus mounts: one call per
//! container while the runtime lists it, kept across cycles and last looks), a pinned image,
//! an image a pull through imagekeeper has in flight, an image used at or after the GC's
//! start. Pulls and containers are not under the cycle lock, so right before each RemoveImage
//! call the manager takes a last look (`rescue`): it lists the containers (again, when it had
//! to ask a new container's status after the list), then re-reads the victim's record and the
//! pulls in flight with no await before the call; a victim that gained a container, a newer
//! last_used or a pull, or whose image the cycle's detect did not list, is kept
//! (`gc_victims_rescued_total{why}`) and the walk goes on to the next candidate.
//!
//! Settings: the configuration ([`GcConfig`]) and the kubelet pull records reader it implies
//! are one immutable `Settings` value behind an `Arc`. A cycle takes it once, right after it
//! holds the cycle lock, and uses that one value to its end; [`ImageGcManager::reconfigure`]
//! (the agent's reload) swaps it while holding the cycle lock, so a new configuration applies
//! between cycles, never within one. A dry run takes it once at its start.
//!
//! Clock: a detect clamps stored stamps later than its `now` + `FUTURE_STAMP_TOLERANCE` to
//! `now` and notices a `last_detect` later than that (the clock went back); each committed
//! detect logs either once and counts it (`gc_future_stamps_clamped_total`,
//! `gc_clock_went_back_total`). See `detect`.
//!
//! Watched time: every detect writes the heartbeat (and a stretch it finds unwatched) in its
//! own batch, so every detect commits once; MaxAge counts an image's unused time only over
//! watched time (`watch.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};

use crate::clock::{Pause, TokioPause};
use crate::kubelet::PullRecordsReader;
use crate::model::{EvictionNote, FsUsage, ImageFsStats, RecordKey, RuntimeImage, UnixNanos};
use crate::pull::PullsInFlight;
use crate::runtime::ImageRuntime;
use crate::store::Store;

use super::GcError;
use super::attempt::STATS_OP;
use super::detect::ListedImages;
use super::kubelet::KubeletView;
use super::metrics::{GcMetrics, RemovalReason};
use super::protect::Protections;
use super::watch::WatchHistory;

mod collect;
mod config;
mod detect;
mod dry_run;
mod image_cache;
mod keeps;
mod last_look;
mod measured;
mod release;
mod walk;

pub use super::report::{DetectReport, GcPlan, GcReport, Removal};
pub use config::GcConfig;
use config::Settings;
use image_cache::ImageCache;
pub use release::{RELEASE_POLL_INTERVAL, RELEASE_WAIT_BOUND};

/// The runtime's images (sorted once by key), the keys in use (by a container, the sandbox
/// image or a kubelet pull intent), the running containers' image volumes, and the kubelet's
/// pull records resolved to keys.
type Observed = (
    ListedImages,
    BTreeSet<RecordKey>,
    ImageVolumes,
    KubeletView,
    Protections,
);

/// The images mounted as image volumes, by the id of the running container that mounts them
/// (as its ContainerStatus reported them; a container's mounts never change).
type ImageVolumes = BTreeMap<String, Vec<String>>;

/// What a GC cycle knows after its detect: the runtime's images by key and the keys it
/// protects (in use by a container, or a pull in flight), grown by the victims the last look
/// rescued so the walk does not choose them again.
struct CycleView {
    listed: ListedImages,
    /// The heartbeat and unwatched stretches after the cycle's detect: MaxAge counts only
    /// watched time.
    watch: WatchHistory,
    protected: BTreeSet<RecordKey>,
    /// Why each key a keep rule protects is kept, as the walk's verdict on it (the first rule
    /// in `cycle::Keeps`' order): KEP-6053's skip reason of a walk passing over it. A victim
    /// the last look rescued has no entry (the look counted it) and counts as in use after.
    kept_by: BTreeMap<RecordKey, super::evict::Verdict>,
    /// The image volumes detect saw, grown by those of containers the last look finds new, so
    /// a cycle asks ContainerStatus only of containers no detect has seen.
    volumes: ImageVolumes,
}

/// When a cycle runs: a fixed time (tests, replay, one-shot commands), or a clock read only
/// once the cycle lock is held, so a cycle that queued behind another (a detect behind a long
/// prune) runs at the time it starts, not at the time it was asked for: with the earlier time
/// an image the kubelet pulled meanwhile would get an old first-detected time (and MinAge
/// would not protect it), and marks written meanwhile would look like stamps from the future.
pub trait CycleTime: Send {
    /// The time this cycle runs at.
    fn read(self) -> UnixNanos;
}

impl CycleTime for UnixNanos {
    fn read(self) -> UnixNanos {
        self
    }
}

impl<C: crate::clock::Clock + ?Sized> CycleTime for &C {
    fn read(self) -> UnixNanos {
        self.now()
    }
}

/// kubelet's ImageGCManager with history in a [`Store`].
pub struct ImageGcManager<R> {
    runtime: R,
    store: Arc<Store>,
    settings: RwLock<Arc<Settings>>,
    cycle: tokio::sync::Mutex<()>,
    cache: RwLock<ImageCache>,
    metrics: Arc<GcMetrics>,
    in_flight: PullsInFlight,
    /// Removals whose record deletion failed after the runtime removed the image (e.g. a full
    /// disk): the next detect that finds the key unlisted journals it with this note, as
    /// imagekeeper's eviction, not as an external removal. Kept in memory only: after a
    /// restart such a removal is journaled as external.
    pending_evictions: Mutex<BTreeMap<RecordKey, EvictionNote>>,
    /// See [`ImageGcManager::with_watch_period`].
    watch_period: Option<std::time::Duration>,
    /// What the last detect found kept (pins, present warm entries, irreplaceable images),
    /// for the runtime pins; `None` before the first detect.
    last_keeps: Mutex<Option<Vec<super::KeptImage>>>,
    /// Each container's image volumes as its ContainerStatus gave them, for the containers the
    /// last detect listed and those a last look asked about since: a container's mounts are
    /// fixed when it is created, so a cycle asks only about containers not seen (`detect.rs`,
    /// `observe` and `read_image_volumes`).
    volumes_seen: Mutex<ImageVolumes>,
    /// The pins the last look read last, indexed (`last_look.rs`): rebuilt only when a read
    /// differs from it, so a cycle's looks parse the pins once, not once per removal.
    pin_index: Mutex<Arc<super::protect::PinIndex>>,
    /// The images the pods bound to this node name ([`ImageGcManager::bound_pods`]).
    bound_pods: super::BoundPods,
    /// What the cluster declared of the images' next uses ([`ImageGcManager::cluster_signals`]).
    cluster_signals: super::ClusterSignals,
    /// The KeepSets selecting this node ([`ImageGcManager::node_keep_sets`]).
    node_keep_sets: super::NodeKeepSets,
    /// How the cycle waits between readings while the runtime has not released MaxAge's
    /// removals ([`ImageGcManager::with_release_pause`]; `release.rs`).
    pause: Arc<dyn Pause>,
    /// The image filesystem's capacity at its last reading (0: not read yet), for the
    /// cluster signals' keep share (`keeps.rs`).
    image_fs_capacity: std::sync::atomic::AtomicU64,
}

impl<R: ImageRuntime> ImageGcManager<R> {
    /// A manager over `runtime` and `store`; refuses an invalid policy.
    pub fn new(runtime: R, store: Arc<Store>, config: GcConfig) -> Result<Self, GcError> {
        config.policy.validate()?;
        if let Some(retention) = config.journal_retention {
            store.set_journal_retention(retention);
        }
        Ok(ImageGcManager {
            runtime,
            store,
            settings: RwLock::new(Arc::new(Settings::new(config, None))),
            cycle: tokio::sync::Mutex::new(()),
            cache: RwLock::new(ImageCache::default()),
            metrics: Arc::new(GcMetrics::default()),
            in_flight: PullsInFlight::new(),
            pending_evictions: Mutex::new(BTreeMap::new()),
            watch_period: None,
            last_keeps: Mutex::new(None),
            volumes_seen: Mutex::new(ImageVolumes::new()),
            pin_index: Mutex::new(Arc::default()),
            bound_pods: super::BoundPods::default(),
            cluster_signals: super::ClusterSignals::default(),
            node_keep_sets: super::NodeKeepSets::default(),
            pause: Arc::new(TokioPause),
            image_fs_capacity: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Waits with `pause` between the readings of the image filesystem while the runtime has
    /// not yet released what the MaxAge pass removed (`release.rs`, at most
    /// [`RELEASE_WAIT_BOUND`] a cycle). The default is tokio's timer ([`TokioPause`]); the
    /// manager never sleeps by itself.
    pub fn with_release_pause(mut self, pause: Arc<dyn Pause>) -> Self {
        self.pause = pause;
        self
    }

    /// The longest time between two detects in normal operation (the agent's detect and GC
    /// periods; [`super::DEFAULT_WATCH_PERIOD`] for a one-shot command): heartbeats more than
    /// `watch::GAP_PERIODS` of them apart leave the stretch between them unwatched, and
    /// MaxAge does not count it. Without it (a manager driven by explicit times: tests,
    /// replay, the simulator) the heartbeat is still written at every detect but no stretch
    /// is found unwatched. A zero period is ignored.
    pub fn with_watch_period(mut self, period: std::time::Duration) -> Self {
        if !period.is_zero() {
            self.watch_period = Some(period);
        }
        self
    }

    /// The pods bound to this node, as the cluster's watch gives them: a handle the watch
    /// writes and each detect reads (empty, keeping nothing, with no watch).
    pub fn bound_pods(&self) -> super::BoundPods {
        self.bound_pods.clone()
    }

    /// Reads `pods` as the pods bound to this node (a handle another manager shares: the
    /// simulator's restart keeps the cluster's knowledge, as the agent's watch would).
    pub fn with_bound_pods(mut self, pods: super::BoundPods) -> Self {
        self.bound_pods = pods;
        self
    }

    /// The KeepSets selecting this node: a handle the cluster's watch writes and the agent's
    /// keep-set loop reads (empty, pinning nothing, with no watch).
    pub fn node_keep_sets(&self) -> super::NodeKeepSets {
        self.node_keep_sets.clone()
    }

    /// The cluster's declarations of the images' next uses (CronJobs, rollouts): a handle the
    /// writer fills and the predictive order's space walk reads (empty, changing nothing, with
    /// no writer).
    pub fn cluster_signals(&self) -> super::ClusterSignals {
        self.cluster_signals.clone()
    }

    /// Reads `signals` as the cluster's declarations (a shared handle, as for
    /// [`ImageGcManager::with_bound_pods`]).
    pub fn with_cluster_signals(mut self, signals: super::ClusterSignals) -> Self {
        self.cluster_signals = signals;
        self
    }

    /// Keeps the images of `in_flight`'s pulls (share it with the image manager).
    pub fn with_pulls_in_flight(mut self, in_flight: PullsInFlight) -> Self {
        self.in_flight = in_flight;
        self
    }

    /// The runtime the manager talks to.
    pub fn runtime(&self) -> &R {
        &self.runtime
    }

    /// The store the manager keeps its records in.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The configuration the next cycle runs with.
    pub fn config(&self) -> GcConfig {
        self.settings().config.clone()
    }

    /// The settings as they are now (a cycle takes them once it holds the cycle lock).
    fn pending_evictions(&self) -> std::sync::MutexGuard<'_, BTreeMap<RecordKey, EvictionNote>> {
        match self.pending_evictions.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn volumes_seen(&self) -> std::sync::MutexGuard<'_, ImageVolumes> {
        self.volumes_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn settings(&self) -> Arc<Settings> {
        match self.settings.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the configuration (the agent's reload): refuses an invalid policy and keeps
    /// the current one then; otherwise waits for the cycle in flight to end (it holds the
    /// cycle lock) and swaps, so the next cycle runs wholly with the new configuration and no
    /// cycle ever mixes the two. A dry run in flight ends with the configuration it started
    /// with.
    pub async fn reconfigure(&self, config: GcConfig) -> Result<(), GcError> {
        config.policy.validate()?;
        let _cycle = self.cycle.lock().await;
        if let Some(retention) = config.journal_retention {
            self.store.set_journal_retention(retention);
        }
        let next = Arc::new(Settings::new(config, Some(&self.settings())));
        match self.settings.write() {
            Ok(mut s) => *s = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(())
    }

    /// The manager's counters and the cycle in progress.
    pub fn metrics(&self) -> &Arc<GcMetrics> {
        &self.metrics
    }

    /// The images the kubelet is pulling at `now`: its pull intents (KEP-2535) not stale by
    /// the intent max age; empty when its records are not read. Reads the `pulling/`
    /// directory (a few files).
    pub fn kubelet_pulling(&self, now: UnixNanos) -> Vec<String> {
        let settings = self.settings();
        settings.kubelet().map_or_else(Vec::new, |reader| {
            reader
                .intents(settings.intent_age(now))
                .found
                .into_iter()
                .map(|intent| intent.image)
                .collect()
        })
    }

    /// How many kubelet pull intents the last read found older than the intent max age
    /// (`None` when the kubelet's records are not read).
    pub fn kubelet_stale_intents(&self) -> Option<u64> {
        self.settings()
            .kubelet()
            .map(PullRecordsReader::stale_intents)
    }

    /// Refreshes the image cache from the runtime: sorted by size descending, ties by id
    /// descending (kubelet's GetImageList order), held as the runtime's answer ([`ImageCache`]).
    pub async fn refresh_image_cache(&self) -> Result<(), GcError> {
        let listed = self
            .runtime
            .list_image_list()
            .await
            .map_err(runtime_error("list images"))?;
        let next = ImageCache::new(listed);
        let previous = match self.cache.write() {
            Ok(mut cache) => std::mem::replace(&mut *cache, next),
            Err(poisoned) => std::mem::replace(&mut *poisoned.into_inner(), next),
        };
        // Dropped outside the lock: a reader waits for the swap, not for the old list's frees.
        drop(previous);
        Ok(())
    }

    /// Reads the image filesystem (ImageFsInfo plus statvfs of its mountpoint) for the
    /// metrics; the GC's space pass records it too. The agent calls this with the image cache
    /// refresh, so the gauges exist even when the space pass is off.
    pub async fn observe_image_fs(&self) -> Result<ImageFsStats, GcError> {
        let stats = self
            .runtime
            .image_fs_stats()
            .await
            .map_err(runtime_error(STATS_OP))?;
        self.metrics
            .record_image_fs(stats.capacity, stats.available);
        self.image_fs_capacity
            .store(stats.capacity, std::sync::atomic::Ordering::Relaxed);
        self.metrics
            .record_image_fs_inodes(stats.inodes, stats.inodes_free, stats.inodes_used);
        Ok(stats)
    }

    /// The cached image list (kubelet's GetImageList), as owned images.
    pub fn image_list(&self) -> Vec<RuntimeImage> {
        self.read_cache(ImageCache::images)
    }

    /// How many images the cached list holds and their total size (saturating), without
    /// copying the list (the metrics' `imagekeeper_runtime_images` and its bytes).
    pub fn image_list_totals(&self) -> (u64, u64) {
        self.read_cache(|cache| (cache.len() as u64, cache.total_size()))
    }

    fn read_cache<T>(&self, read: impl FnOnce(&ImageCache) -> T) -> T {
        match self.cache.read() {
            Ok(cache) => read(&cache),
            Err(poisoned) => read(&poisoned.into_inner()),
        }
    }
}

/// Wraps a runtime failure of `op` ("list images", ...).
fn runtime_error(op: &'static str) -> impl FnOnce(crate::runtime::CriError) -> GcError {
    move |source| GcError::Runtime { op, source }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// How one of the cycle's removals is journaled: the cycle's time, why, and its rank.
fn note(at: UnixNanos, reason: RemovalReason, rank: usize, fs: Option<FsUsage>) -> EvictionNote {
    EvictionNote {
        removed_at: at,
        reason,
        rank: u32::try_from(rank).unwrap_or(u32::MAX),
        fs,
    }
}

#[cfg(test)]
mod pending_eviction_tests;
