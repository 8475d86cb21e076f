//! The image GC manager: kubelet's ImageGCManager over the persisted records.
//!
//! Invariants: detect, GarbageCollect and DeleteUnusedImages never run at once (one async
//! lock); a record is deleted only after the runtime confirms the removal; no write
//! transaction is open across an await (each store call is synchronous and complete); the
//! eviction walk reads the store's index lazily, in chunks, resuming after the last entry it
//! saw, so it never loads every record to sort.
//!
//! What GC never removes: an image a container of any state uses, an image a running
//! container mounts as an image volume (seen in its ContainerStatus mounts: one call per
//! running container per cycle, the last looks reusing detect's answers), a pinned image, an image a
//! pull through imagekeeper has in flight, an image used at or after the GC's start. Pulls and
//! containers are not under the cycle lock, so right before each RemoveImage call the manager
//! takes a last look (`rescue`): it lists the containers (again, when it had to ask a new
//! container's status after the list), then re-reads the victim's record and the pulls in
//! flight with no await before the call; a victim that gained a container, a newer last_used
//! or a pull, or whose image the cycle's detect did not list, is kept
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
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;
use tracing::{debug, info, warn};

use crate::kubelet::{DEFAULT_INTENT_MAX_AGE, IntentAge, PullRecordsReader};
use crate::model::JournalEntry;
use crate::model::{
    ContainerState, EvictionNote, FUTURE_STAMP_TOLERANCE, FsUsage, ImageFsStats, ImageLike,
    ImageRecord, JournalRetention, RecordKey, Remover, Repull, RuntimeContainer, RuntimeImage,
    UnixNanos,
};
use crate::pull::PullsInFlight;
use crate::runtime::{ImageRuntime, RpcCode};
use crate::store::{Batch, EvictionKey, JournalKey, RecordScan, Store, StoredRecord, meta_keys};

use super::adaptive::{self, AdaptiveRank, ListedTags};
use super::detect::{
    DetectInput, DetectPlan, ListedImages, apply_to_copy, container_uses, images_in_use,
    plan_detect, volume_uses,
};
use super::evict::{Verdict, past_max_age};
use super::explain::{
    Decision, ExplainContext, Explanation, FsSpace, explain_in, note_adaptive_ranks,
    note_predictive_ranks, note_prior_evictions,
};
use super::kubelet::{KubeletView, intent_names, pulled_since};
use super::metrics::{GcMetrics, RemovalReason, RescueReason};
use super::pins::PinPatterns;
use super::plan::SpaceWalk;
use super::predictive::{self, PredictiveRank};
use super::protect::{Irreplaceable, Protections, pinned_at};
use super::space::{BudgetNeed, FsNeed, InodeNeed, SpaceNeed};
use super::watch::WatchHistory;
use super::{GcError, GcOrder, GcPolicy};
use crate::format::{format_rfc3339, go_duration};
use crate::warm::WarmSet;

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
    /// The image volumes detect saw, grown by those of containers the last look finds new, so
    /// each running container costs one ContainerStatus per cycle.
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

/// How many times the last look lists the containers again because new ones appeared while
/// it asked their status, before it keeps the victim instead.
const LAST_LOOK_ROUNDS: usize = 4;

/// How many eligible images one synchronous step of the walk picks before removing them.
const WALK_CHUNK: usize = 64;

/// A measured pass on a further image filesystem stops after this many removals in a row that
/// did not lower its reading (its usage is not the images the walk removes).
const UNLOWERED_REMOVALS: usize = 3;

/// A long cycle logs its progress every this many removals.
const PROGRESS_EVERY: u64 = 25;

/// Marks a cycle as running in the metrics for as long as it lives (also when the cycle's
/// future is dropped at shutdown).
struct ProgressGuard<'a>(&'a GcMetrics);

impl<'a> ProgressGuard<'a> {
    fn start(metrics: &'a GcMetrics) -> ProgressGuard<'a> {
        metrics.cycle_started();
        ProgressGuard(metrics)
    }
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        self.0.cycle_ended();
    }
}

/// Everything the GC manager is configured with.
// Not #[non_exhaustive]: tests/ and benches/ build it by struct update (`..GcConfig::default()`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcConfig {
    /// The thresholds, ages and budgets (the kubelet's ImageGCPolicy and imagekeeper's own).
    pub policy: GcPolicy,
    /// The space walk's order (`imageGCPolicy`): the kubelet's, or the adaptive one.
    pub order: GcOrder,
    /// The sandbox (pause) image name (`--pod-infra-container-image`); always in use. With
    /// `protect_irreplaceable`, the runtime's own answer (verbose CRI Status) comes first.
    pub sandbox_image: Option<String>,
    /// Keep the images that cannot come back: the runtime's sandbox image and images with
    /// no repo digest (`--protect-irreplaceable`; the agent's default is on, this struct's
    /// `Default` leaves it off so library users and tests opt in).
    pub protect_irreplaceable: bool,
    /// Image names and patterns GC never removes (`--pin`).
    pub pins: PinPatterns,
    /// The kubelet's root directory, whose `image_manager/` pull records are read (never
    /// written): intents keep the images they name, pulled records' times count as uses.
    /// `None` (or empty) reads nothing.
    pub kubelet_root_dir: Option<PathBuf>,
    /// How old (file mtime) a kubelet pull intent may be and still keep its image; `None`
    /// takes [`crate::kubelet::DEFAULT_INTENT_MAX_AGE`].
    pub kubelet_intent_max_age: Option<Duration>,
    /// How long and how many removals the eviction journal keeps, set on the store when
    /// `Some` (by `new` and `reconfigure`); `None` keeps the store's (the retention the file
    /// records, else the default).
    pub journal_retention: Option<JournalRetention>,
    /// The warm set: images GC, prune and DeleteUnusedImages keep while an entry in force
    /// names them (`crate::warm`).
    pub warm: WarmSet,
}

impl GcConfig {
    /// The age past which a kubelet pull intent read at `now` keeps nothing: the configured
    /// maximum, else [`DEFAULT_INTENT_MAX_AGE`] (the GC and `doctor` judge intents alike).
    pub fn intent_age(&self, now: UnixNanos) -> IntentAge {
        IntentAge::new(
            now,
            self.kubelet_intent_max_age
                .unwrap_or(DEFAULT_INTENT_MAX_AGE),
        )
    }
}

/// One image removed by GC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Removal {
    /// The removed image's record.
    pub key: RecordKey,
    /// Its size in bytes as the record had it.
    pub size: u64,
    /// Which rule removed it.
    pub reason: RemovalReason,
    /// A dry run's candidate that the journal shows was removed before and pulled back: what
    /// `gc --dry-run` says of it. Real removals leave it unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evicted_before: Option<String>,
}

/// What one detect cycle did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DetectReport {
    /// Records in the store after the detect.
    pub records: usize,
    /// Records this detect created (images new to the store).
    pub added: usize,
    /// Records this detect removed (images no longer listed).
    pub removed: usize,
    /// Images a container uses.
    pub in_use: usize,
    /// Whether the detect's batch committed (a batch that changes nothing commits nothing).
    pub committed: bool,
    /// Records of images gone from the runtime that imagekeeper did not remove, journaled as
    /// external removals by this detect's commit.
    #[serde(skip)]
    pub external_removals: Vec<(JournalKey, JournalEntry)>,
    /// Journal entries this detect's commit marked re-pulled.
    #[serde(skip)]
    pub repulls: Vec<Repull>,
}

/// What one GarbageCollect or DeleteUnusedImages did. `error` is set when the cycle failed;
/// the removals before the failure stand.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct GcReport {
    /// The cycle's detect, when it ran.
    pub detect: Option<DetectReport>,
    /// The images removed, in removal order.
    pub removed: Vec<Removal>,
    /// The bytes the cycle freed.
    pub freed: u64,
    /// The cycle's error, if any; removals made before it stay in `removed`.
    pub error: Option<GcError>,
    /// The byte walk's amount to free, when a byte rule needed room this cycle: the larger of
    /// the percentage rule's and the byte budget's needs (the one its removals' reason names).
    /// Each of the walk's byte removals after its first is made while less than this was
    /// freed, so the walk stops at most one image past the low line.
    pub bytes_to_free: Option<i64>,
}

/// A dry run: what a cycle would remove, and the full explanation.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GcPlan {
    /// Every image and why it would or would not be removed.
    pub explanation: Explanation,
    /// What the cycle would remove, in order.
    pub removals: Vec<Removal>,
}

/// What one cycle runs with: the configuration and the kubelet pull records reader of its
/// `kubelet_root_dir`. Immutable; replaced whole by [`ImageGcManager::reconfigure`].
#[derive(Debug)]
struct Settings {
    config: GcConfig,
    kubelet: Option<Arc<PullRecordsReader>>,
}

impl Settings {
    /// The settings of `config`, reusing `previous`'s reader when the directory is the same
    /// (so a file it warned about once is not warned about again after a reload).
    fn new(config: GcConfig, previous: Option<&Settings>) -> Settings {
        let root = config
            .kubelet_root_dir
            .clone()
            .filter(|p| !p.as_os_str().is_empty());
        let kubelet = match (previous, root) {
            (_, None) => None,
            (Some(previous), Some(root))
                if previous.config.kubelet_root_dir.as_deref() == Some(root.as_path()) =>
            {
                previous.kubelet.clone()
            }
            (_, Some(root)) => Some(Arc::new(PullRecordsReader::new(&root))),
        };
        Settings { config, kubelet }
    }

    fn kubelet(&self) -> Option<&PullRecordsReader> {
        self.kubelet.as_deref()
    }

    /// The age past which a kubelet pull intent read at `now` keeps nothing.
    fn intent_age(&self, now: UnixNanos) -> IntentAge {
        self.config.intent_age(now)
    }
}

/// kubelet's ImageGCManager with history in a [`Store`].
pub struct ImageGcManager<R> {
    runtime: R,
    store: Arc<Store>,
    settings: RwLock<Arc<Settings>>,
    cycle: tokio::sync::Mutex<()>,
    cache: RwLock<Vec<RuntimeImage>>,
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
            cache: RwLock::new(Vec::new()),
            metrics: Arc::new(GcMetrics::default()),
            in_flight: PullsInFlight::new(),
            pending_evictions: Mutex::new(BTreeMap::new()),
            watch_period: None,
            last_keeps: Mutex::new(None),
        })
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

    /// How many kubelet pull intents the last read found older than the intent max age
    /// (`None` when the kubelet's records are not read).
    pub fn kubelet_stale_intents(&self) -> Option<u64> {
        self.settings()
            .kubelet()
            .map(PullRecordsReader::stale_intents)
    }

    /// Lists images and containers and records what changed, in one write transaction (none
    /// when nothing changed). `now` is read once the cycle lock is held (see [`CycleTime`]).
    pub async fn detect(&self, now: impl CycleTime) -> Result<DetectReport, GcError> {
        let _cycle = self.cycle.lock().await;
        let now = now.read();
        let settings = self.settings();
        self.detect_locked(&settings, now)
            .await
            .map(|(report, _)| report)
    }

    /// What a detect starts from: the stored records (a lazy scan in key order, opened
    /// first), the runtime's images and the record keys in use. The records' snapshot is
    /// taken before the runtime is listed: a pull that marks an image while the runtime is
    /// listed is then absent from the snapshot or older in it, and detect's merge writes keep
    /// its mark (see `detect`). The scan's read transaction stays open until detect has
    /// merged it; it holds no lock a writer waits for.
    async fn observe(
        &self,
        settings: &Settings,
        now: UnixNanos,
    ) -> Result<(RecordScan, Observed, Vec<RecordKey>), GcError> {
        let records = self.store.records_in_key_order()?;
        let images = self
            .runtime
            .list_image_list()
            .await
            .map_err(runtime_error("list images"))?;
        let containers = self
            .runtime
            .list_containers()
            .await
            .map_err(runtime_error("list containers"))?;
        let mut volumes = ImageVolumes::new();
        self.read_image_volumes(&containers, &mut volumes).await?;
        let mounted: Vec<String> = volumes.values().flatten().cloned().collect();
        let sandbox = self.sandbox_image(settings).await;
        let mut in_use = images_in_use(&images, &containers, &mounted, sandbox.as_deref());
        // The use history (schema 5) records the images running containers use, their own
        // and their image volumes: a created or exited container keeps its image from GC, but
        // runs nothing.
        let running = || {
            containers
                .iter()
                .filter(|c| c.state == ContainerState::Running)
        };
        let running_volumes: Vec<String> = running()
            .filter_map(|c| volumes.get(&c.id))
            .flatten()
            .cloned()
            .collect();
        let running = images_in_use(&images, running(), &running_volumes, None)
            .into_iter()
            .collect();
        drop(containers);
        // The pins as they are now, resolved against this list (a tag that moved moves its
        // pin), and the images that cannot come back.
        let pins = self.store.pins()?;
        let irreplaceable = settings
            .config
            .protect_irreplaceable
            .then(|| Irreplaceable {
                sandbox_image: sandbox.clone(),
            });
        let protections = Protections::resolve(&images, &pins, irreplaceable.as_ref(), now);
        // Read after the runtime's lists: an intent the kubelet wrote before pulling an image
        // already listed is seen here; one written later is seen by the last look.
        let kubelet = KubeletView::read(settings.kubelet(), &images, settings.intent_age(now));
        in_use.extend(kubelet.pulling.iter().cloned());
        let listed = ListedImages::new(images);
        Ok((
            records,
            (listed, in_use, volumes, kubelet, protections),
            running,
        ))
    }

    /// The sandbox image name: with `protect_irreplaceable`, the runtime's own answer (a
    /// failed or empty answer is logged at debug and falls back), else the configured
    /// `--pod-infra-container-image`.
    async fn sandbox_image(&self, settings: &Settings) -> Option<String> {
        let configured = settings
            .config
            .sandbox_image
            .clone()
            .filter(|s| !s.is_empty());
        if !settings.config.protect_irreplaceable {
            return configured;
        }
        match self.runtime.sandbox_image().await {
            Ok(Some(name)) => Some(name),
            Ok(None) => configured,
            Err(e) => {
                debug!(error = %e, "The runtime's status does not say its sandbox image: using the configured one");
                configured
            }
        }
    }

    /// Adds to `known` the image volumes of each running container it does not have yet: one
    /// ContainerStatus per such container (image volumes are seen only in a container's
    /// status mounts, as the kubelet's detectImages reads them; ListContainers does not carry
    /// mounts). A container gone since the list (NotFound) is skipped; any other failure fails
    /// the cycle, as a failed list does: GC never removes without knowing what runs.
    async fn read_image_volumes(
        &self,
        containers: &[RuntimeContainer],
        known: &mut ImageVolumes,
    ) -> Result<usize, GcError> {
        let mut asked = 0;
        for container in containers {
            // Every container, whatever its state, as for a container's own image: an exited
            // container of a crash-looping pod restarts with the same image volumes.
            if known.contains_key(&container.id) {
                continue;
            }
            asked += 1;
            match self.runtime.container_usage(&container.id).await {
                Ok(usage) => {
                    known.insert(container.id.clone(), usage.image_volumes);
                }
                Err(e) if e.code() == Some(RpcCode::NotFound) => {}
                Err(e) => return Err(runtime_error("get container status")(e)),
            }
        }
        Ok(asked)
    }

    /// Observes the runtime and plans the detect at `now`: what a detect applies and a dry
    /// run applies to its copy, so both plan from the same rules. With `copy`, every record
    /// the merge reads is also put there (the dry run's copy; the simulator's mutant).
    async fn observe_and_plan(
        &self,
        settings: &Settings,
        now: UnixNanos,
        mut copy: Option<&mut BTreeMap<RecordKey, ImageRecord>>,
    ) -> Result<(Observed, DetectPlan), GcError> {
        let meta = self.store.meta_entries()?;
        let stored = |name: &str| meta.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let last_detect = stored(meta_keys::LAST_DETECT).map(UnixNanos);
        let watched = WatchHistory::from_meta(stored);
        let (records, (listed, in_use, volumes, mut kubelet, protections), running) =
            self.observe(settings, now).await?;
        kubelet.mark_just_pulled(now, settings.config.policy.min_age);
        let input = DetectInput {
            last_detect,
            in_use: &in_use,
            used_at: &kubelet.used_at,
            pins: &settings.config.pins,
            now,
        };
        let records = records.inspect(|r| {
            if let (Some(copy), Ok(r)) = (copy.as_deref_mut(), r) {
                copy.insert(r.key.clone(), r.record);
            }
        });
        let mut plan = plan_detect(records, &listed, &input)?;
        // Names are written at detect only when they change (the store compares again inside
        // the write transaction): each difference goes straight into the batch, with the
        // sighting of its key when there is one (a new image's: one operation and one key).
        let mut names_writer = plan.batch.names_in_key_order();
        self.store
            .for_names_that_differ_in_key_order(listed.iter(), |key, names| {
                names_writer.set(key, names);
            })?;
        // Pins expired for longer than the journal's max age go in the detect's transaction
        // (`migrations/0004_pins.md`).
        plan.batch.prune_expired_pins(now);
        // The use history: every image running containers use now, in the detect's
        // transaction (`migrations/0005_use_and_pull_history.md`).
        plan.batch.observe_uses(now, running);
        // The heartbeat (and a stretch found unwatched) in the detect's own transaction:
        // written every cycle, so every detect commits.
        let (watch, unwatched) = match self.watch_period {
            Some(period) => watched.after_detect(now, period),
            None => (
                WatchHistory {
                    heartbeat: Some(now),
                    ..watched
                },
                None,
            ),
        };
        watch.write(&mut plan.batch);
        plan.watch = watch;
        plan.unwatched = unwatched;
        Ok(((listed, in_use, volumes, kubelet, protections), plan))
    }

    async fn detect_locked(
        &self,
        settings: &Settings,
        now: UnixNanos,
    ) -> Result<(DetectReport, CycleView), GcError> {
        #[cfg(feature = "sim-mutants")]
        let mut existing = BTreeMap::new();
        #[cfg(feature = "sim-mutants")]
        let copy = Some(&mut existing);
        #[cfg(not(feature = "sim-mutants"))]
        let copy = None;
        let ((listed, in_use, volumes, kubelet, protections), plan) =
            self.observe_and_plan(settings, now, copy).await?;
        #[cfg(feature = "sim-mutants")]
        let plan = crate::sim::mutants::blind_detect(plan, &existing, now);
        let mut plan = plan;
        let pending: Vec<(RecordKey, EvictionNote)> = self
            .pending_evictions()
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        for (key, note) in pending {
            if plan.batch.attribute_unlisted(&key, note) {
                plan.removed = plan.removed.saturating_sub(1);
            }
        }
        let applied = self.store.apply_reporting(&plan.batch)?;
        let committed = applied.committed;
        // Committed: each note is spent. A key this detect did not find unlisted was listed
        // again (pulled back) or has no record left, so there is nothing to journal for it
        // (detect and GC share the cycle lock: no removal happens between them).
        self.pending_evictions().clear();
        self.report_clock(&plan, now);
        if let Some(gap) = plan.unwatched {
            info!(
                from = %format_rfc3339(gap.from),
                to = %format_rfc3339(gap.to),
                "No detect watched the node between these times: MaxAge does not count them as unused time"
            );
        }
        if committed && plan.removed > 0 {
            info!(
                count = plan.removed,
                "Images gone from the runtime that imagekeeper did not remove: journaled as external removals"
            );
        }
        self.report_repulls(&applied.repulls);
        let external_removals = applied
            .journaled
            .into_iter()
            .filter(|(_, e)| e.remover == Remover::External)
            .collect();
        let report = DetectReport {
            records: plan.records,
            added: plan.added,
            removed: plan.removed,
            in_use: in_use.len(),
            committed,
            external_removals,
            repulls: applied.repulls,
        };
        let mut protected = in_use;
        protected.extend(self.pulling(&listed));
        let warm = self.warm(settings, &listed, now)?;
        self.record_keeps(&listed, &protections, &warm);
        protected.extend(warm);
        protected.extend(kubelet.just_pulled);
        #[cfg(feature = "sim-mutants")]
        let protections = if crate::sim::mutants::ignore_protections() {
            Protections::default()
        } else {
            protections
        };
        protected.extend(protections.keys().cloned());
        Ok((
            report,
            CycleView {
                listed,
                watch: plan.watch,
                protected,
                volumes,
            },
        ))
    }

    /// Marks the images one container uses, its image and its image volumes, as used at
    /// `now`, without waiting for detect (the agent calls this at a container's
    /// CONTAINER_CREATED_EVENT). One ContainerStatus, then one ImageStatus per image name to
    /// find its record key; a record detect has not seen yet is created, as a pull's mark
    /// does, so a GC between the event and the next detect keeps the image. Takes no cycle
    /// lock: a GC walking meanwhile sees the newer last_used in its last look. A container
    /// already gone, or an image the runtime does not have, marks nothing. Returns the keys
    /// marked.
    pub async fn mark_container_used(
        &self,
        container_id: &str,
        now: UnixNanos,
    ) -> Result<Vec<RecordKey>, GcError> {
        let usage = match self.runtime.container_usage(container_id).await {
            Ok(usage) => usage,
            Err(e) if e.code() == Some(RpcCode::NotFound) => return Ok(Vec::new()),
            Err(e) => return Err(runtime_error("get container status")(e)),
        };
        // The container's image under its own runtime handler; image volumes under the
        // default one (a mount's ImageSpec names none).
        let image = (usage.image_id.as_str().to_string(), usage.runtime_handler);
        let volumes = usage.image_volumes.into_iter().map(|v| (v, String::new()));
        let names = std::iter::once(image)
            .chain(volumes)
            .filter(|(name, _)| !name.is_empty());
        let mut batch = Batch::new();
        let mut marked: Vec<RecordKey> = Vec::new();
        for (name, handler) in names {
            let found = self
                .runtime
                .image_status(&name, &handler)
                .await
                .map_err(runtime_error("get image status"))?;
            if let Some(image) = found {
                let key = image.record_key();
                if !marked.contains(&key) {
                    batch.mark_used(key.clone(), now, Some(image.size));
                    // The container starts: its use interval opens now, the next detect
                    // keeps it open or closes it.
                    batch.open_use(key.clone(), now);
                    marked.push(key);
                }
            }
        }
        self.store.apply(&batch)?;
        Ok(marked)
    }

    /// Logs (once per detect) and counts what a committed detect did about the clock: stamps
    /// in the future clamped to `now`, and a `last_detect` later than `now`.
    fn report_clock(&self, plan: &DetectPlan, now: UnixNanos) {
        if plan.clamped > 0 {
            warn!(
                count = plan.clamped,
                now = %format_rfc3339(now),
                tolerance = %go_duration(FUTURE_STAMP_TOLERANCE),
                "Clamped image records stamped in the future to now: the clock was ahead when they were written"
            );
            self.metrics.record_future_stamps_clamped(plan.clamped);
        }
        if let Some(from) = plan.clock_went_back_from {
            warn!(
                last_detect = %format_rfc3339(from),
                now = %format_rfc3339(now),
                "The clock went back since the last detect; last_detect follows it"
            );
            self.metrics.record_clock_went_back();
        }
    }

    /// Logs and counts the journal entries a commit marked re-pulled.
    fn report_repulls(&self, repulls: &[Repull]) {
        for repull in repulls {
            info!(
                image_id = repull.key.image_id.as_str(),
                removed_by = repull.remover.as_str(),
                reason = repull.reason_label(),
                delay_seconds = repull.delay.as_secs(),
                "An image came back after its removal"
            );
            self.metrics.repulls().record(repull);
        }
    }

    /// The listed images that a pull in flight protects.
    fn pulling(&self, listed: &ListedImages) -> BTreeSet<RecordKey> {
        if self.in_flight.is_empty() {
            return BTreeSet::new();
        }
        listed
            .iter()
            .filter(|image| self.in_flight.protects(image))
            .map(|image| image.record_key())
            .collect()
    }

    /// Records what this detect found kept, with every listed name of each image: an
    /// operator's pin or the irreplaceable rule (a pin first), else a present warm entry.
    fn record_keeps(
        &self,
        listed: &ListedImages,
        protections: &Protections,
        warm: &BTreeSet<RecordKey>,
    ) {
        let mut keeps = Vec::new();
        for image in listed.iter() {
            let key = image.record_key();
            let why = match protections.get(&key) {
                Some(p) => super::KeepReason::of(p),
                None if warm.contains(&key) => super::KeepReason::Warm,
                None => continue,
            };
            // containerd stores a CRI pull under its tag and its repo digest, and 2.x also under
            // the image id (`sha256:<config digest>`).
            let names = image
                .repo_tags()
                .chain(image.repo_digests())
                .chain(std::iter::once(image.id()))
                .map(str::to_owned)
                .collect();
            keeps.push(super::KeptImage { key, names, why });
        }
        *self
            .last_keeps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(keeps);
    }

    /// What the last detect found kept; `None` before the first detect.
    pub fn last_keeps(&self) -> Option<Vec<super::KeptImage>> {
        self.last_keeps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The listed images a warm set entry in force at `now` keeps: the set's entries and,
    /// with `[warmFromHistory]`, the history's (read from the journal now).
    fn warm(
        &self,
        settings: &Settings,
        listed: &ListedImages,
        now: UnixNanos,
    ) -> Result<BTreeSet<RecordKey>, GcError> {
        let warm = &settings.config.warm;
        #[cfg(feature = "sim-mutants")]
        if crate::sim::mutants::ignore_warm() {
            return Ok(BTreeSet::new());
        }
        let history = match warm.from_history {
            Some(window) => {
                let journal = self.store.journal()?;
                let stored_names = self
                    .store
                    .names_of_keys(journal.iter().map(|(k, _)| &k.key))?;
                let names = |key: &RecordKey| stored_names.get(key).cloned();
                crate::warm::history_entries(&journal, &names, now, window)
            }
            None => Vec::new(),
        };
        if warm.is_empty() && history.is_empty() {
            return Ok(BTreeSet::new());
        }
        // Lookups of each listed image's names in the set's index and in one of the
        // history's entries: no cost grows with entries times images (issue 41).
        let history_index = crate::pull::MatchIndex::of_names(
            history
                .iter()
                .map(|e| (e.image.as_str(), e.runtime_handler.as_str())),
        );
        Ok(listed
            .iter()
            .filter(|image| {
                warm.keeps(image, now).is_some()
                    || history_index
                        .naming(image)
                        .into_iter()
                        .filter_map(|at| history.get(at))
                        .any(|e| e.active(now))
            })
            .map(|image| image.record_key())
            .collect())
    }

    /// kubelet's GarbageCollect at `now`: detect, MaxAge, then free space down to the low
    /// threshold if usage is at or above the high one.
    pub async fn garbage_collect(&self, now: impl CycleTime) -> GcReport {
        let _cycle = self.cycle.lock().await;
        let now = now.read();
        let _progress = ProgressGuard::start(&self.metrics);
        let settings = self.settings();
        let mut report = GcReport::default();
        if let Err(e) = self
            .garbage_collect_locked(&settings, now, &mut report)
            .await
        {
            report.error = Some(e);
        }
        report
    }

    async fn garbage_collect_locked(
        &self,
        settings: &Settings,
        free_time: UnixNanos,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        let (detected, mut view) = self.detect_locked(settings, free_time).await?;
        report.detect = Some(detected);
        if settings.config.policy.disabled() {
            return Ok(());
        }
        self.free_old_images(settings, free_time, &mut view, report)
            .await?;

        let stats = self.observe_image_fs().await?;
        if stats.available > stats.capacity {
            info!(
                available = stats.available,
                capacity = stats.capacity,
                "Availability is larger than capacity"
            );
        }
        let policy = &settings.config.policy;
        // The kubelet's byte rule, unless HighThresholdPercent 100 with MaxAge 0 turns it off
        // (GC runs here only for the inode or budget rules then; with MaxAge set it runs at
        // 100 % usage, as the kubelet's: GcPolicy::space_pass_off). Capacity 0 fails the percentage rule alone,
        // with the kubelet's InvalidDiskCapacity (pkg/kubelet/images/image_gc_manager.go,
        // GarbageCollect: it checks capacity before its percentage, its only rule): the byte
        // budget needs no capacity and the inode rule reads inodes, so both still run, and the
        // cycle then reports the capacity error (as `explain` plans it).
        let mut capacity_error = None;
        let space = if policy.space_pass_off() {
            None
        } else {
            match SpaceNeed::compute(stats.capacity, stats.available, policy) {
                Ok(need) => Some(need),
                Err(err) => {
                    warn!(reason = "InvalidDiskCapacity", "{err}");
                    capacity_error = Some(err);
                    None
                }
            }
        };
        if let Some(SpaceNeed {
            usage_percent,
            amount_to_free: Some(amount_to_free),
            ..
        }) = space
        {
            info!(
                mountpoint = stats.mountpoint.as_str(),
                usage = usage_percent,
                high_threshold = policy.high_threshold_percent,
                amount_to_free,
                low_threshold = policy.low_threshold_percent,
                "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
            );
        }
        // The byte budget counts the images the cycle's detect listed, less what MaxAge freed.
        let total = view
            .listed
            .iter()
            .fold(0u64, |acc, i| acc.saturating_add(i.size()))
            .saturating_sub(report.freed);
        let budget = BudgetNeed::compute(total, policy.bytes);
        if let Some(BudgetNeed {
            amount_to_free: Some(amount_to_free),
            high,
            low,
            ..
        }) = budget
        {
            info!(
                total,
                high_bytes = high,
                amount_to_free,
                low_bytes = low,
                "Images are over the high byte budget, trying to free bytes down to the low budget"
            );
        }
        let inodes = InodeNeed::compute(&stats, policy.inodes).filter(|n| n.runs);
        if let (Some(need), Some(thresholds)) = (inodes, policy.inodes) {
            info!(
                mountpoint = stats.mountpoint.as_str(),
                usage = need.usage_percent,
                high_threshold = thresholds.high,
                inodes = need.inodes,
                inodes_free = need.inodes_free,
                low_threshold = thresholds.low,
                "Inode usage on image filesystem is over the high inode threshold, trying to free inodes down to the low inode threshold"
            );
        }
        // Each cycle frees the most any byte rule needs, under that rule's reason (the
        // kubelet's on a tie); the inode rule's goal is measured, not summed.
        let space_goal = space.and_then(|n| {
            n.amount_to_free
                .map(|a| (a, RemovalReason::Space, Some(n.fs_usage())))
        });
        let budget_goal = budget.and_then(|n| {
            n.amount_to_free
                .map(|a| (a, RemovalReason::Budget, Some(n.fs_usage())))
        });
        let bytes = match (space_goal, budget_goal) {
            (Some(s), Some(b)) if b.0 > s.0 => Some(b),
            (Some(s), _) => Some(s),
            (None, b) => b,
        };
        let first: Result<(), GcError> = async {
            if bytes.is_none() && inodes.is_none() {
                return capacity_error.map_or(Ok(()), Err);
            }
            report.bytes_to_free = bytes.map(|(amount, _, _)| amount);
            let walked = self
                .free_space(
                    settings,
                    Goal { bytes, inodes },
                    free_time,
                    &mut view,
                    report,
                )
                .await?;
            if let Some((amount_to_free, reason, _)) = bytes
                && walked.freed < amount_to_free
            {
                let err = match (reason, space, budget) {
                    (RemovalReason::Budget, _, Some(b)) => GcError::InsufficientBudget {
                        total: b.total,
                        high: b.high,
                        low: b.low,
                        freed: walked.freed,
                    },
                    (_, Some(need), _) => GcError::InsufficientSpace {
                        usage_percent: need.usage_percent,
                        capacity: need.capacity,
                        freed: walked.freed,
                    },
                    _ => unreachable!("a byte goal comes from the space or the budget rule"),
                };
                warn!(reason = "FreeDiskSpaceFailed", "{err}");
                return Err(err);
            }
            if let (Some(before), Some(after)) = (inodes, walked.inodes)
                && !after.met()
            {
                let err = GcError::InsufficientInodes {
                    usage_percent: after.usage_percent,
                    inodes: after.inodes,
                    freed: before.used().saturating_sub(after.used()),
                };
                warn!(reason = "FreeDiskSpaceFailed", "{err}");
                return Err(err);
            }
            capacity_error.map_or(Ok(()), Err)
        }
        .await;
        // Every further image filesystem, by a measured pass (issue 28).
        let others = self
            .free_other_filesystems(settings, &stats, free_time, &mut view, report)
            .await;
        first.and(others)
    }

    /// The thresholds on each image filesystem ImageFsInfo reports after the first (issue
    /// 28), never on a container filesystem. CRI does not say which filesystem an image is
    /// on, so a filesystem over a high line gets a measured pass ([`Self::free_measured`]).
    /// One not read (capacity 0) is not judged; one on the same device as the first or an
    /// earlier one is skipped (its reading is that filesystem's). Returns the first failure.
    async fn free_other_filesystems(
        &self,
        settings: &Settings,
        stats: &ImageFsStats,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        for fs in &stats.other_image_fs {
            if fs.capacity == 0 {
                debug!(
                    mountpoint = fs.mountpoint.as_str(),
                    "A further image filesystem reports capacity 0: not judged"
                );
            }
        }
        let mut result = Ok(());
        for (index, need) in FsNeed::others(stats, &settings.config.policy) {
            if let Some(first) = &need.same_filesystem_as {
                info!(
                    mountpoint = need.mountpoint.as_str(),
                    same_as = first.as_str(),
                    "A further image filesystem is the same filesystem as an earlier one: skipped"
                );
                continue;
            }
            if !need.runs() {
                continue;
            }
            let done = self
                .free_measured(settings, index, &need, free_time, view, report)
                .await;
            if result.is_ok() {
                result = done;
            }
        }
        result
    }

    /// The measured pass on further image filesystem `index` (judged `trigger` on the cycle's
    /// first reading): reads
    /// ImageFsInfo first (the walks before may have freed it already) and returns when that
    /// filesystem is at or below its low lines; otherwise removes eligible images in eviction
    /// order, reads ImageFsInfo again after each removal, and stops once it is at or below
    /// its low lines (bytes and inodes), once the images removed add up to what that first
    /// reading asked to free (a byte pass, counted by image sizes as the first walk counts),
    /// or after [`UNLOWERED_REMOVALS`] removals in a row that did not lower its reading (its
    /// usage is not images'); it fails with the kubelet's wording when no candidate is left.
    /// Removals carry reason `space` (bytes over the high threshold) or `inodes`, with that
    /// filesystem's usage in the journal.
    async fn free_measured(
        &self,
        settings: &Settings,
        index: usize,
        trigger: &FsNeed,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        let policy = &settings.config.policy;
        let mountpoint = trigger.mountpoint.as_str();
        let read = |stats: &ImageFsStats| {
            stats
                .other_image_fs
                .get(index)
                .filter(|fs| fs.mountpoint == mountpoint)
                .cloned()
        };
        let fresh = self
            .runtime
            .image_fs_stats()
            .await
            .map_err(runtime_error("get image filesystem stats"))?;
        let Some(fs) = read(&fresh) else {
            // The filesystem is gone from the answer: nothing left to judge.
            return Ok(());
        };
        let Some(first_need) = FsNeed::compute(&fs, policy) else {
            return Ok(());
        };
        if first_need.met() {
            debug!(
                mountpoint,
                "A further image filesystem is at or below the low thresholds after the walks before it: no pass"
            );
            return Ok(());
        }
        info!(
            mountpoint = first_need.mountpoint.as_str(),
            usage = first_need.usage_percent,
            high_threshold = policy.high_threshold_percent,
            low_threshold = policy.low_threshold_percent,
            inode_usage = first_need.inodes.map(|n| n.usage_percent),
            "A further image filesystem is over a high threshold, trying to free it down to the low thresholds (measured after each removal)"
        );
        let (reason, fs_usage) = if trigger.bytes_over_high && !first_need.bytes_at_or_below_low {
            let usage = SpaceNeed::compute(fs.capacity, fs.available, policy)
                .ok()
                .map(|n| n.fs_usage());
            (RemovalReason::Space, usage)
        } else {
            (
                RemovalReason::Inodes,
                first_need.inodes.map(|n| n.fs_usage()),
            )
        };
        // What the pass may free in bytes: down to the low threshold at its first reading
        // (no byte cap on an inode-only pass; the unlowered-removal stop bounds it).
        let wanted = match reason {
            RemovalReason::Space => {
                fs_usage.map_or(0, |u| to_i64(u.used_before.saturating_sub(u.target_used)))
            }
            _ => 0,
        };
        let cap = match reason {
            RemovalReason::Space => wanted,
            _ => i64::MAX,
        };
        let used =
            |fs: &ImageFsStats| (fs.capacity.saturating_sub(fs.available), fs.inodes_in_use());
        let mut last = used(&fs);
        let mut unlowered: usize = 0;
        let mut need = first_need.clone();
        let mut freed: i64 = 0;
        let mut walked: usize = 0;
        let mut errors = Vec::new();
        let mut resume: Option<EvictionKey> = None;
        'walk: loop {
            let walk = SpaceWalk {
                in_use: &view.protected,
                free_time,
                min_age: policy.min_age,
                bytes_to_free: cap,
            };
            let step = walk.step(&self.store, resume.as_ref(), freed, WALK_CHUNK)?;
            if step.resume.is_some() {
                resume = step.resume;
            }
            let before = walked;
            walked = walked.saturating_add(step.read);
            if step.victims.is_empty() {
                break;
            }
            for (victim, position) in step.victims.into_iter().zip(step.positions) {
                if self.rescue(settings, &victim, view, free_time).await? {
                    continue;
                }
                let note = note(free_time, reason, before + position, fs_usage);
                match self.remove(&victim, note, report).await {
                    Ok(()) => {
                        freed = freed.saturating_add(to_i64(victim.record.size));
                        // CRI does not say which filesystem the image was on: measure.
                        let reading = self
                            .runtime
                            .image_fs_stats()
                            .await
                            .map_err(runtime_error("get image filesystem stats"))?;
                        let Some(fs) = read(&reading) else {
                            // The filesystem is gone from the answer: nothing left to judge.
                            return Ok(());
                        };
                        match FsNeed::compute(&fs, policy) {
                            Some(now) => need = now,
                            None => return Ok(()),
                        }
                        if need.met() {
                            break 'walk;
                        }
                        let now_used = used(&fs);
                        if now_used.0 < last.0 || now_used.1 < last.1 {
                            unlowered = 0;
                        } else {
                            unlowered += 1;
                        }
                        last = now_used;
                        if unlowered >= UNLOWERED_REMOVALS {
                            warn!(
                                mountpoint,
                                removals = unlowered,
                                "Removals did not lower a further image filesystem's usage: it is not images' (or not these images'), stopping its measured pass"
                            );
                            break 'walk;
                        }
                        if freed >= cap {
                            info!(
                                mountpoint,
                                freed,
                                wanted,
                                "The measured pass removed images adding up to what the further image filesystem's first reading asked to free: stopping"
                            );
                            break 'walk;
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        if !errors.is_empty() {
            return Err(GcError::SpaceDeletion {
                wanted,
                freed,
                errors,
            });
        }
        // Met, or the images removed add up to what the first reading asked (the kubelet's
        // success, counted as its walk counts; the next cycle reads it again).
        if need.met() || (reason == RemovalReason::Space && freed >= cap) {
            return Ok(());
        }
        let err = match (need.bytes_at_or_below_low, need.inodes, need.usage_percent) {
            (false, _, Some(usage_percent)) => GcError::InsufficientSpace {
                usage_percent,
                capacity: fs_usage.map_or(0, |u| u.capacity),
                freed,
            },
            (_, Some(after), _) => GcError::InsufficientInodes {
                usage_percent: after.usage_percent,
                inodes: after.inodes,
                freed: first_need
                    .inodes
                    .map_or(0, |b| b.used().saturating_sub(after.used())),
            },
            _ => return Ok(()),
        };
        warn!(
            reason = "FreeDiskSpaceFailed",
            mountpoint = need.mountpoint.as_str(),
            "{err}"
        );
        Err(err)
    }

    /// kubelet's DeleteUnusedImages: the space walk with no byte limit.
    pub async fn delete_unused_images(&self, now: impl CycleTime) -> GcReport {
        let _cycle = self.cycle.lock().await;
        let now = now.read();
        let _progress = ProgressGuard::start(&self.metrics);
        let settings = self.settings();
        let mut report = GcReport::default();
        info!("Attempting to delete unused images");
        let result = async {
            let (detected, mut view) = self.detect_locked(&settings, now).await?;
            report.detect = Some(detected);
            let goal = Goal {
                bytes: Some((i64::MAX, RemovalReason::Unused, None)),
                inodes: None,
            };
            self.free_space(&settings, goal, now, &mut view, &mut report)
                .await
                .map(|_| ())
        }
        .await;
        if let Err(e) = result {
            report.error = Some(e);
        }
        report
    }

    /// Removes every image unused for longer than MaxAge, reading only the index range of
    /// last_used before `free_time - max_age`. Only watched time counts (`view.watch`): an
    /// image's watched unused time is never more than its time since last use, so the range
    /// holds every image MaxAge removes.
    async fn free_old_images(
        &self,
        settings: &Settings,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        let max_age = settings.config.policy.max_age;
        if max_age.is_zero() {
            return Ok(());
        }
        let bound = free_time.saturating_sub(max_age);
        let mut victims: Vec<(usize, StoredRecord)> = Vec::new();
        for (position, entry) in self.store.eviction_order_before(bound)?.enumerate() {
            let entry = entry?;
            if past_max_age(
                &entry.key,
                &entry.record,
                &view.protected,
                free_time,
                max_age,
                &view.watch,
            ) {
                victims.push((position + 1, entry));
            }
        }
        let mut errors = Vec::new();
        for (rank, victim) in victims {
            if self.rescue(settings, &victim, view, free_time).await? {
                continue;
            }
            let note = note(free_time, RemovalReason::Age, rank, None);
            if let Err(e) = self.remove(&victim, note, report).await {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(GcError::AgeDeletion { max_age, errors })
        }
    }

    /// kubelet's freeSpace: walks the eviction order, removing eligible images until the
    /// goal's bytes are freed (the first eligible image is always removed, as in the kubelet)
    /// and, with an inode goal, until the image filesystem, read again after each removal,
    /// has its inode use at or below the low inode threshold. A victim the last look keeps
    /// frees nothing, and the walk goes on to the next candidate. Each removal's reason is
    /// the byte goal's while bytes remain to free, then `inodes`.
    async fn free_space(
        &self,
        settings: &Settings,
        goal: Goal,
        free_time: UnixNanos,
        view: &mut CycleView,
        report: &mut GcReport,
    ) -> Result<Walked, GcError> {
        let min_age = settings.config.policy.min_age;
        let thresholds = settings.config.policy.inodes;
        let mut freed: i64 = 0;
        let mut bytes_done = goal.bytes.is_none();
        // The simulator's OverFree mutant: one byte removal past the goal.
        let mut over_freed = !mutant_over_frees();
        let mut inodes_now = goal.inodes;
        let inodes_done = |now: &Option<InodeNeed>| now.is_none_or(|n| n.met());
        // The walk's byte limit: with an inode goal it reads on, as far as inodes need.
        let bytes_to_free = match (goal.bytes, goal.inodes) {
            (_, Some(_)) => i64::MAX,
            // (The OverFree mutant reads on too, to take its one image more.)
            (Some(_), None) if mutant_over_frees() => i64::MAX,
            (Some((amount, _, _)), None) => amount,
            (None, None) => {
                return Ok(Walked {
                    freed: 0,
                    inodes: None,
                });
            }
        };
        // Index entries the walk read before this step: a victim's rank is its position in
        // the eviction order as the walk read it.
        let mut walked: usize = 0;
        let mut errors = Vec::new();
        let mut resume: Option<EvictionKey> = None;
        // The adaptive order ranks the listed images once per walk (see `adaptive.rs`); the
        // kubelet's reads the index lazily.
        // DeleteUnusedImages removes every eligible image: it keeps the index's order.
        let delete_unused = matches!(goal.bytes, Some((_, RemovalReason::Unused, _)));
        let ranked = match settings.config.order {
            GcOrder::Adaptive if !delete_unused => Some(
                self.adaptive_order(&view.listed)?
                    .into_iter()
                    .map(|(r, _)| r)
                    .collect::<Vec<_>>(),
            ),
            GcOrder::Predictive if !delete_unused => Some(
                self.predictive_order(&view.listed, free_time)?
                    .into_iter()
                    .map(|(r, _)| r)
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        'walk: loop {
            // One synchronous step: read the index from where the last step stopped and pick
            // the next eligible images. The read transaction ends before any await.
            let walk = SpaceWalk {
                in_use: &view.protected,
                free_time,
                min_age,
                bytes_to_free,
            };
            let step = match &ranked {
                None => walk.step(&self.store, resume.as_ref(), freed, WALK_CHUNK)?,
                Some(ranked) => walk.step_entries(
                    ranked.iter().skip(walked).map(|r| Ok(r.clone())),
                    freed,
                    WALK_CHUNK,
                )?,
            };
            if step.resume.is_some() {
                resume = step.resume;
            }
            let before = walked;
            walked = walked.saturating_add(step.read);
            let chunk = step.victims;
            if chunk.is_empty() {
                break;
            }
            for (victim, position) in chunk.into_iter().zip(step.positions) {
                if self.rescue(settings, &victim, view, free_time).await? {
                    continue;
                }
                let (reason, fs) = match goal.bytes {
                    Some((_, reason, fs)) if !bytes_done => (reason, fs),
                    _ => (RemovalReason::Inodes, goal.inodes.map(|n| n.fs_usage())),
                };
                let note = note(free_time, reason, before + position, fs);
                match self.remove(&victim, note, report).await {
                    Ok(()) => {
                        freed = freed.saturating_add(to_i64(victim.record.size));
                        if let Some((amount, _, _)) = goal.bytes
                            && freed >= amount
                        {
                            bytes_done = over_freed;
                            over_freed = true;
                        }
                        if !inodes_done(&inodes_now) {
                            // CRI does not say how many inodes an image holds: measure.
                            let stats = self.observe_image_fs().await?;
                            inodes_now = InodeNeed::compute(&stats, thresholds);
                        }
                        if bytes_done && inodes_done(&inodes_now) {
                            break 'walk;
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        if errors.is_empty() {
            Ok(Walked {
                freed,
                inodes: inodes_now,
            })
        } else {
            Err(GcError::SpaceDeletion {
                wanted: goal.bytes.map_or(0, |(amount, _, _)| amount),
                freed,
                errors,
            })
        }
    }

    /// The listed images that have a record, with their repo tags by position (borrowed from
    /// the list), looked up in one read transaction (`Store::get_many`).
    fn listed_records<'l>(
        &self,
        listed: &'l ListedImages,
    ) -> Result<(Vec<StoredRecord>, ListedTags<'l>), GcError> {
        let keys: Vec<RecordKey> = listed.iter().map(|image| image.record_key()).collect();
        let found = self.store.get_many(&keys)?;
        let mut records = Vec::with_capacity(keys.len());
        let mut tags = ListedTags::with_capacity(keys.len());
        for ((image, key), record) in listed.iter().zip(keys).zip(found) {
            if let Some(record) = record {
                tags.push(image.tags());
                records.push(StoredRecord { key, record });
            }
        }
        Ok((records, tags))
    }

    /// The listed images with a record, in the adaptive order (`adaptive.rs`).
    fn adaptive_order(
        &self,
        listed: &ListedImages,
    ) -> Result<Vec<(StoredRecord, AdaptiveRank)>, GcError> {
        // The returns count only re-pulled entries: the others are not decoded (issue 41).
        let journal = self.store.journal_repulled()?;
        let returns = adaptive::returns(&journal);
        let (records, tags) = self.listed_records(listed)?;
        Ok(adaptive::rank_listed(records, &returns, &tags))
    }

    /// The listed images with a record, in the predictive order at `now`
    /// (`predictive.rs`): the journal, the use and the pull histories read once each.
    fn predictive_order(
        &self,
        listed: &ListedImages,
        now: UnixNanos,
    ) -> Result<Vec<(StoredRecord, PredictiveRank)>, GcError> {
        let (records, tags) = self.listed_records(listed)?;
        // Only what the ranking reads is decoded: the re-pulled journal entries (the returns)
        // and the ranked images' histories; decoding every row of the three tables at every
        // walk was most of a simulated cycle once they held their 10,000 rows (issue 41).
        let keys: BTreeSet<&RecordKey> = records.iter().map(|r| &r.key).collect();
        let journal = self.store.journal_repulled()?;
        let uses = self.store.uses_of(&keys)?;
        let pulls = self.store.pulls_of(&keys)?;
        drop(keys);
        Ok(predictive::rank_listed(
            records, &tags, &journal, &uses, &pulls, now,
        ))
    }

    /// The last look at one victim, right before its RemoveImage: whether a container (the
    /// runtime's list, taken now, with the image volumes of its running containers: detect's,
    /// plus one ContainerStatus for each container started since), a pull in flight, a kubelet
    /// pull intent or a kubelet pulled record newer than its last use (both files read now), or
    /// a newer mark on its record keeps it; so does the absence of its image from the cycle's
    /// list. A kept victim is counted, logged, and protected for the rest of the cycle. A runtime
    /// that cannot list its containers fails the cycle: GC never removes without knowing
    /// what runs. (The list is taken per removal, not per batch: it costs a few milliseconds
    /// beside a RemoveImage, and closes the window of the batch's earlier removals.)
    async fn rescue(
        &self,
        settings: &Settings,
        victim: &StoredRecord,
        view: &mut CycleView,
        free_time: UnixNanos,
    ) -> Result<bool, GcError> {
        #[cfg(feature = "sim-mutants")]
        if crate::sim::mutants::skip_last_look() {
            return Ok(false);
        }
        // The victim's image as this cycle's detect listed it. A record the list did not
        // hold (a pull marked it after the list; the image may be gone or not yet landed) is
        // no candidate: its tags are unknown, so a pull in flight by name cannot be matched,
        // and the bytes it would free are not known to exist. (Found by the simulator.)
        let Some(image) = view.listed.get(&victim.key).map(|i| i.to_image()) else {
            return Ok(self.kept(victim, view, RescueReason::Gone));
        };
        // The containers, listed until a list shows no container whose image volumes are
        // unknown: asking a new container's status awaits, and a container created during
        // that call would be missed by the list before it. The decision below follows a list
        // with no await after it. (Found by the simulator.)
        let mut rounds = 0;
        let containers = loop {
            let containers = self
                .runtime
                .list_containers()
                .await
                .map_err(runtime_error("list containers"))?;
            if self
                .read_image_volumes(&containers, &mut view.volumes)
                .await?
                == 0
            {
                break containers;
            }
            rounds += 1;
            if rounds == LAST_LOOK_ROUNDS {
                // Containers keep appearing: keep the victim rather than decide on a list
                // that may be stale.
                return Ok(self.kept(victim, view, RescueReason::Container));
            }
        };
        // From here to the RemoveImage call nothing awaits: the record, the pulls in flight
        // and the kubelet's pull records are read at the last moment.
        let mounted = containers
            .iter()
            .filter_map(|c| view.volumes.get(&c.id))
            .flatten()
            .any(|name| volume_uses(name, &image));
        let why = if mounted || containers.iter().any(|c| container_uses(c, &image)) {
            Some(RescueReason::Container)
        } else if self.in_flight.protects(&image) {
            Some(RescueReason::Pulling)
        } else if settings.config.warm.keeps(&image, free_time).is_some() && !ignore_warm() {
            Some(RescueReason::Warm)
        } else if settings
            .kubelet()
            .is_some_and(|r| intent_names(r, &image, settings.intent_age(free_time)))
        {
            Some(RescueReason::KubeletPulling)
        } else if settings
            .kubelet()
            .is_some_and(|r| pulled_since(r, &image, victim.record.last_used, free_time))
        {
            Some(RescueReason::KubeletPulled)
        } else if !mutant_ignores_protections() && pinned_at(&self.store.pins()?, &image, free_time)
        {
            Some(RescueReason::Pinned)
        } else {
            match self.store.get(&victim.key)? {
                None => Some(RescueReason::Gone),
                Some(now) if now.last_used > victim.record.last_used => Some(RescueReason::Used),
                Some(_) => None,
            }
        };
        Ok(match why {
            Some(why) => self.kept(victim, view, why),
            None => false,
        })
    }

    /// Keeps a victim the last look rescued: logged, counted, and protected for the rest of
    /// the cycle. Returns true.
    fn kept(&self, victim: &StoredRecord, view: &mut CycleView, why: RescueReason) -> bool {
        info!(
            image_id = victim.key.image_id.as_str(),
            runtime_handler = victim.key.runtime_handler.as_str(),
            why = why.as_str(),
            "Kept an image GC had chosen: it is needed now"
        );
        self.metrics.record_rescue(why);
        view.protected.insert(victim.key.clone());
        true
    }

    /// Removes one image through the runtime, then its record, journaling the removal with
    /// `note` in the same transaction. A failure is logged and counted and returned as its
    /// message.
    async fn remove(
        &self,
        victim: &StoredRecord,
        note: EvictionNote,
        report: &mut GcReport,
    ) -> Result<(), String> {
        let reason = note.reason;
        let id = victim.key.image_id.as_str();
        let handler = victim.key.runtime_handler.as_str();
        info!(
            image_id = id,
            size = victim.record.size,
            runtime_handler = handler,
            reason = reason.as_str(),
            "Removing image to free bytes"
        );
        if let Err(e) = self.runtime.remove_image(id, handler).await {
            self.metrics.record_remove_failure();
            warn!(image_id = id, error = %e, "Failed to remove image");
            return Err(e.to_string());
        }
        let mut batch = Batch::new();
        batch.evict(victim.key.clone(), note);
        if let Err(e) = self.store.apply(&batch) {
            // The image is gone; the next detect removes its record and journals it with this
            // note (imagekeeper's removal, not an external one).
            warn!(image_id = id, error = %e, "Removed image but could not delete its record");
            self.pending_evictions().insert(victim.key.clone(), note);
        }
        self.metrics.record_removal(reason);
        let so_far = self.metrics.cycle_removed(victim.record.size);
        if so_far.is_multiple_of(PROGRESS_EVERY) {
            info!(
                removed = so_far,
                freed = report.freed.saturating_add(victim.record.size),
                "Image garbage collection in progress"
            );
        }
        report.freed = report.freed.saturating_add(victim.record.size);
        report.removed.push(Removal {
            key: victim.key.clone(),
            size: victim.record.size,
            reason,
            evicted_before: None,
        });
        Ok(())
    }

    /// What GarbageCollect (or, with `delete_unused`, DeleteUnusedImages) would do at `now`,
    /// changing nothing: the runtime's lists are folded into a copy of the records in memory
    /// and explained with the manager's own rules. The removals are in the order the real
    /// cycle would make them. It writes nothing, so it takes no cycle lock: a dry run answers
    /// while a long GC runs (from the records as they are at that moment).
    pub async fn plan(&self, now: UnixNanos, delete_unused: bool) -> Result<GcPlan, GcError> {
        // One configuration for the whole dry run, even if a reload swaps it meanwhile.
        let settings = self.settings();
        let mut records = BTreeMap::new();
        let ((listed, _, _, kubelet, protections), detect) = self
            .observe_and_plan(&settings, now, Some(&mut records))
            .await?;
        apply_to_copy(&mut records, &detect.batch);
        let pulling = self.pulling(&listed);
        let warm = self.warm(&settings, &listed, now)?;
        // A dry run only: the real cycle reads this order from the index (or, adaptive, ranks
        // the listed images).
        let mut ordered: Vec<StoredRecord> = records
            .into_iter()
            .map(|(key, record)| StoredRecord { key, record })
            .collect();
        let journal = self.store.journal()?;
        let mut ranks = BTreeMap::new();
        let mut predictive_ranks = BTreeMap::new();
        match settings.config.order {
            GcOrder::KubeletOrder => ordered.sort_by(|a, b| {
                (a.record.last_used, a.record.first_detected, &a.key).cmp(&(
                    b.record.last_used,
                    b.record.first_detected,
                    &b.key,
                ))
            }),
            GcOrder::Adaptive => {
                let tags = listed
                    .iter()
                    .map(|i| (i.record_key(), i.repo_tags().to_strings()))
                    .collect();
                let ranked = adaptive::rank(ordered, &adaptive::returns(&journal), &tags);
                ordered = Vec::with_capacity(ranked.len());
                for (record, rank) in ranked {
                    ranks.insert(record.key.clone(), rank);
                    ordered.push(record);
                }
            }
            GcOrder::Predictive => {
                let tags = listed
                    .iter()
                    .map(|i| (i.record_key(), i.repo_tags().to_strings()))
                    .collect();
                let ranked = predictive::rank_predictive(
                    ordered,
                    &journal,
                    &tags,
                    &self.store.uses()?,
                    &self.store.pulls()?,
                    now,
                );
                ordered = Vec::with_capacity(ranked.len());
                for (record, rank) in ranked {
                    predictive_ranks.insert(record.key.clone(), rank);
                    ordered.push(record);
                }
            }
        }
        let image_fs = if delete_unused {
            None
        } else {
            Some(
                self.runtime
                    .image_fs_stats()
                    .await
                    .map_err(runtime_error("get image filesystem stats"))?,
            )
        };
        let fs = image_fs.as_ref().map(|stats| FsSpace {
            capacity: stats.capacity,
            available: stats.available,
        });
        let mut explanation = explain_in(
            &ordered,
            Some(now),
            settings.config.policy,
            fs,
            now,
            &ExplainContext {
                pulling: &pulling,
                kubelet: &kubelet,
                watch: &detect.watch,
                image_fs: image_fs.as_ref(),
                warm: &warm,
                protections: &protections,
            },
        );
        note_prior_evictions(&mut explanation, &journal);
        note_adaptive_ranks(&mut explanation, &ranks);
        note_predictive_ranks(&mut explanation, &predictive_ranks);
        let removals = explanation
            .images
            .iter()
            .filter_map(|i| {
                let reason = if delete_unused {
                    (i.verdict == Verdict::Eligible).then_some(RemovalReason::Unused)
                } else {
                    match i.decision {
                        Decision::RemoveForAge => Some(RemovalReason::Age),
                        Decision::RemoveForSpace => Some(RemovalReason::Space),
                        Decision::RemoveForBudget => Some(RemovalReason::Budget),
                        _ => None,
                    }
                };
                reason.map(|reason| Removal {
                    key: i.key.clone(),
                    size: i.record.size,
                    reason,
                    evicted_before: i.evicted_before.map(|p| p.describe()),
                })
            })
            .collect::<Vec<_>>();
        let mut removals = removals;
        // The MaxAge pass runs before the space walk.
        removals.sort_by_key(|r| r.reason != RemovalReason::Age);
        Ok(GcPlan {
            explanation,
            removals,
        })
    }

    /// Refreshes the image cache from the runtime: sorted by size descending, ties by id
    /// descending (kubelet's GetImageList order).
    pub async fn refresh_image_cache(&self) -> Result<(), GcError> {
        let mut images = self
            .runtime
            .list_images()
            .await
            .map_err(runtime_error("list images"))?;
        images.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
        match self.cache.write() {
            Ok(mut cache) => *cache = images,
            Err(poisoned) => *poisoned.into_inner() = images,
        }
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
            .map_err(runtime_error("get image filesystem stats"))?;
        self.metrics
            .record_image_fs(stats.capacity, stats.available);
        self.metrics
            .record_image_fs_inodes(stats.inodes, stats.inodes_free, stats.inodes_used);
        Ok(stats)
    }

    /// The cached image list (kubelet's GetImageList).
    pub fn image_list(&self) -> Vec<RuntimeImage> {
        match self.cache.read() {
            Ok(cache) => cache.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Wraps a runtime failure of `op` ("list images", ...).
/// Whether the simulator's mutant that ignores the warm set is on (never without
/// `sim-mutants`).
fn ignore_warm() -> bool {
    #[cfg(feature = "sim-mutants")]
    return crate::sim::mutants::ignore_warm();
    #[cfg(not(feature = "sim-mutants"))]
    false
}

/// Whether the simulator's `OverFree` mutant is on (always false without the feature).
fn mutant_over_frees() -> bool {
    #[cfg(feature = "sim-mutants")]
    {
        crate::sim::mutants::over_free()
    }
    #[cfg(not(feature = "sim-mutants"))]
    {
        false
    }
}

/// Whether the simulator's `NoProtections` mutant is on (always false without the feature).
fn mutant_ignores_protections() -> bool {
    #[cfg(feature = "sim-mutants")]
    {
        crate::sim::mutants::ignore_protections()
    }
    #[cfg(not(feature = "sim-mutants"))]
    {
        false
    }
}

fn runtime_error(op: &'static str) -> impl FnOnce(crate::runtime::CriError) -> GcError {
    move |source| GcError::Runtime { op, source }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What a space walk is to free: bytes (the amount, the reason its removals carry and the
/// filesystem or budget their journal entries record), inodes (the reading that found them
/// over the high inode threshold), or both.
#[derive(Clone, Copy, Debug)]
struct Goal {
    bytes: Option<(i64, RemovalReason, Option<FsUsage>)>,
    inodes: Option<InodeNeed>,
}

/// What a space walk did: the bytes it freed and the last inode reading it took.
#[derive(Clone, Copy, Debug)]
struct Walked {
    freed: i64,
    inodes: Option<InodeNeed>,
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
mod pending_eviction_tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::model::{ContainerUsage, ImageId, PullCredentials};
    use crate::runtime::CriError;
    use crate::runtime::{ScriptState, ScriptedRuntime};
    use crate::store::power_loss::PowerLossDisk;
    use crate::store::{BatchOp, CommitMode};
    use std::collections::BTreeMap;

    /// The scripted runtime on a disk that fails every write from the moment an image is
    /// removed: GC's RemoveImage succeeds and its record deletion (`Evict`) fails, as on a
    /// full disk.
    struct FullAfterRemove {
        inner: ScriptedRuntime,
        disk: PowerLossDisk,
    }

    impl ImageRuntime for FullAfterRemove {
        async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
            self.inner.list_images().await
        }
        async fn image_status(
            &self,
            image: &str,
            runtime_handler: &str,
        ) -> Result<Option<RuntimeImage>, CriError> {
            self.inner.image_status(image, runtime_handler).await
        }
        async fn pull_image(
            &self,
            image: &str,
            runtime_handler: &str,
            credentials: Option<&PullCredentials>,
        ) -> Result<String, CriError> {
            self.inner
                .pull_image(image, runtime_handler, credentials)
                .await
        }
        async fn remove_image(&self, image: &str, runtime_handler: &str) -> Result<(), CriError> {
            let done = self.inner.remove_image(image, runtime_handler).await;
            self.disk.cut_now();
            done
        }
        async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
            self.inner.image_fs_stats().await
        }
        async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
            self.inner.list_containers().await
        }
        async fn container_usage(&self, container_id: &str) -> Result<ContainerUsage, CriError> {
            self.inner.container_usage(container_id).await
        }
    }

    /// A GC removal whose record deletion failed is journaled by the next detect as
    /// imagekeeper's removal with the cycle's note, not as an external one.
    #[tokio::test]
    async fn a_removal_whose_record_deletion_failed_is_journaled_as_imagekeepers() {
        let t0 = UnixNanos::from_secs(10_000);
        let t1 = UnixNanos::from_secs(20_000);
        let t2 = UnixNanos::from_secs(30_000);
        let disk = PowerLossDisk::new(Vec::new(), None);
        let store = Arc::new(
            Store::open_with_backend(
                disk.backend(),
                Path::new("simulated"),
                t0,
                CommitMode::Durable,
            )
            .expect("open"),
        );
        let inner = ScriptedRuntime::new();
        let image = RuntimeImage {
            id: ImageId::new(format!("sha256:{:064x}", 7)),
            size: 1000,
            ..RuntimeImage::default()
        };
        inner.state().images = vec![image.clone()].into();
        let runtime = FullAfterRemove {
            inner,
            disk: disk.clone(),
        };
        let config = GcConfig {
            policy: GcPolicy {
                min_age: Duration::ZERO,
                ..GcPolicy::default()
            },
            ..GcConfig::default()
        };
        let manager = ImageGcManager::new(runtime, store.clone(), config).expect("new");
        manager.detect(t0).await.expect("detect");
        let report = manager.delete_unused_images(t1).await;
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert!(disk.is_cut(), "RemoveImage ran and the disk then failed");
        disk.restore_power();
        assert!(
            store.get(&image.record_key()).expect("read").is_some(),
            "the record outlived its image"
        );

        let detect = manager.detect(t2).await.expect("detect");
        assert!(
            detect.external_removals.is_empty(),
            "{:?}",
            detect.external_removals
        );
        assert_eq!(detect.removed, 0);
        let journal = store.journal().expect("journal");
        assert_eq!(journal.len(), 1, "{journal:?}");
        let (key, entry) = &journal[0];
        assert_eq!(key.key, image.record_key());
        assert_eq!(entry.remover, Remover::Imagekeeper, "{entry:?}");
        assert_eq!(entry.reason, Some(RemovalReason::Unused), "{entry:?}");
        assert_eq!(key.removed_at, t1);
        assert_eq!(store.get(&image.record_key()).expect("read"), None);
        // The note is spent: nothing more to journal.
        manager.detect(t2).await.expect("detect");
        assert_eq!(store.journal().expect("journal").len(), 1);
    }

    /// Capacity 0 fails the percentage rule alone: the byte budget still frees down to its
    /// low line, the cycle reports the kubelet's InvalidDiskCapacity error, and the dry run
    /// (`explain`) plans exactly the removals the cycle makes.
    #[tokio::test]
    async fn capacity_zero_fails_the_percentage_rule_and_the_budget_still_runs_as_planned() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t0 = UnixNanos::from_secs(10_000);
        let t1 = UnixNanos::from_secs(20_000);
        let store = Arc::new(Store::open(&dir.path().join("db.redb"), t0).expect("open"));
        let runtime = ScriptedRuntime::new();
        runtime.state().images = [(1u8, 400u64), (2, 300), (3, 200), (4, 100)]
            .map(|(n, size)| RuntimeImage {
                id: ImageId::new(format!("sha256:{n:064x}")),
                size,
                ..RuntimeImage::default()
            })
            .to_vec()
            .into();
        // No filesystem scripted: ImageFsInfo reports capacity 0.
        let config = GcConfig {
            policy: GcPolicy {
                min_age: Duration::ZERO,
                bytes: Some(super::super::ByteBudget {
                    high: 800,
                    low: 500,
                }),
                ..GcPolicy::default()
            },
            ..GcConfig::default()
        };
        let manager = ImageGcManager::new(runtime.clone(), store, config).expect("new");
        manager.detect(t0).await.expect("detect");
        let plan = manager.plan(t1, false).await.expect("plan");
        assert_eq!(
            plan.explanation.space,
            super::super::SpacePass::InvalidCapacity
        );
        let planned: Vec<RecordKey> = plan.removals.iter().map(|r| r.key.clone()).collect();
        let report = manager.garbage_collect(t1).await;
        let removed: Vec<RecordKey> = report.removed.iter().map(|r| r.key.clone()).collect();
        assert_eq!(removed.len(), 2, "{report:?}");
        assert!(
            report
                .removed
                .iter()
                .all(|r| r.reason == RemovalReason::Budget),
            "{report:?}"
        );
        assert_eq!(removed, planned, "the cycle removes what explain plans");
        assert!(
            matches!(report.error, Some(GcError::InvalidCapacity)),
            "{report:?}"
        );
    }

    /// Several image filesystems (issue 28): the thresholds apply to each. The first is
    /// healthy; the second, 95 % used, gets a measured pass: in eviction order, ImageFsInfo
    /// read again after each removal, until it is at or below the low threshold (80 %) or the
    /// images removed add up to what its first reading asked (150 bytes). The first image
    /// lives on the first filesystem (its removal frees nothing there, so the walk goes on),
    /// the next two on the second; the cap stops the pass after the second (85 % used), and
    /// the next cycle removes the third; the fourth stays. The dry run names the filesystem
    /// and marks the candidates.
    #[tokio::test]
    async fn a_further_image_filesystem_over_high_is_freed_by_a_measured_pass_to_low() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t1 = UnixNanos::from_secs(20_000);
        let id = |n: u8| format!("sha256:{n:064x}");
        let (runtime, manager) = other_fs_fixture(dir.path(), 4, 100, |state| {
            state.fs = Some((100_000, 90_000));
            state.other_image_fs = vec![(1000, 50, None)];
            for n in 2u8..=4 {
                state.image_fs_of.insert(id(n), 1);
            }
        })
        .await;
        let plan = manager.plan(t1, false).await.expect("plan");
        let others = &plan.explanation.other_filesystems;
        assert_eq!(others.len(), 1, "{others:?}");
        assert_eq!(others[0].mountpoint, "/scripted-1");
        assert!(others[0].runs(), "{others:?}");
        let decisions: Vec<super::super::Decision> =
            plan.explanation.images.iter().map(|i| i.decision).collect();
        assert_eq!(decisions, [super::super::Decision::OtherFsCandidate; 4]);
        assert!(
            plan.explanation.images[0]
                .reason
                .contains("further image filesystem(s) /scripted-1"),
            "{}",
            plan.explanation.images[0].reason
        );

        let report = manager.garbage_collect(t1).await;
        assert!(report.error.is_none(), "{report:?}");
        let removed: Vec<String> = report
            .removed
            .iter()
            .map(|r| r.key.image_id.to_string())
            .collect();
        assert_eq!(removed, [id(1), id(2)], "{report:?}");
        assert!(
            report
                .removed
                .iter()
                .all(|r| r.reason == RemovalReason::Space)
        );
        assert_eq!(runtime.state().other_image_fs, vec![(1000, 150, None)]);

        // Still at the high threshold (85 %): the next cycle's pass goes on to low.
        let report = manager.garbage_collect(UnixNanos::from_secs(30_000)).await;
        assert!(report.error.is_none(), "{report:?}");
        let removed: Vec<String> = report
            .removed
            .iter()
            .map(|r| r.key.image_id.to_string())
            .collect();
        assert_eq!(removed, [id(3)], "{report:?}");
        assert_eq!(runtime.state().other_image_fs, vec![(1000, 250, None)]);

        // Nothing left to remove while it is still over low: the kubelet's failure.
        runtime.state().other_image_fs = vec![(1000, 0, None)];
        let report = manager.garbage_collect(UnixNanos::from_secs(40_000)).await;
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert!(
            matches!(
                report.error,
                Some(GcError::InsufficientSpace {
                    usage_percent: 90,
                    capacity: 1000,
                    freed: 100
                })
            ),
            "{report:?}"
        );
    }

    /// Issue 29: a first detect held two operations per new image (a `Sight`, then a
    /// `SetNames` with a second copy of the key); each new image's names now ride on its
    /// sighting, and an image whose names change later gets a `SetNames` of its own.
    #[tokio::test]
    async fn a_first_detect_holds_one_operation_per_new_image() {
        let dir = tempfile::tempdir().expect("temp dir");
        let t0 = UnixNanos::from_secs(10_000);
        let store = Arc::new(Store::open(&dir.path().join("db.redb"), t0).expect("open"));
        let runtime = ScriptedRuntime::new();
        runtime.state().images = (1..=50u32)
            .map(|n| RuntimeImage {
                id: ImageId::new(format!("sha256:{n:064x}")),
                repo_tags: vec![format!("app-{n}:v1")],
                size: 10,
                ..RuntimeImage::default()
            })
            .collect();
        let manager =
            ImageGcManager::new(runtime.clone(), store, GcConfig::default()).expect("new");
        let count = |ops: &[BatchOp]| {
            let sights = ops
                .iter()
                .filter(|op| matches!(op, BatchOp::Sight { .. }))
                .count();
            let named = ops
                .iter()
                .filter(|op| matches!(op, BatchOp::Sight { names: Some(_), .. }))
                .count();
            let set_names = ops
                .iter()
                .filter(|op| matches!(op, BatchOp::SetNames { .. }))
                .count();
            (sights, named, set_names)
        };
        let settings = manager.settings();
        let (_, plan) = manager
            .observe_and_plan(&settings, t0, None)
            .await
            .expect("plan");
        assert_eq!(count(plan.batch.ops()), (50, 50, 0));
        manager.detect(t0).await.expect("detect");
        let key = runtime.state().images[6].record_key();
        assert_eq!(
            manager
                .store()
                .names(&key)
                .expect("names")
                .expect("stored")
                .repo_tags,
            vec!["app-7:v1".to_owned()],
            "written with the sighting"
        );
        // A later detect: one image's names changed, no record did.
        runtime.state().images[6].repo_tags = vec!["app-7:v2".to_owned()];
        let (_, plan) = manager
            .observe_and_plan(&settings, t0, None)
            .await
            .expect("plan");
        assert_eq!(count(plan.batch.ops()), (0, 0, 1));
    }

    /// A manager over `images` (id n, `size` bytes each) on a scripted runtime, detected at
    /// 10 000 s, with MinAge 0; `script` sets the rest of the state.
    async fn other_fs_fixture(
        dir: &Path,
        images: u8,
        size: u64,
        script: impl FnOnce(&mut ScriptState),
    ) -> (ScriptedRuntime, ImageGcManager<ScriptedRuntime>) {
        let t0 = UnixNanos::from_secs(10_000);
        let store = Arc::new(Store::open(&dir.join("db.redb"), t0).expect("open"));
        let runtime = ScriptedRuntime::new();
        {
            let mut state = runtime.state();
            state.images = (1..=images)
                .map(|n| RuntimeImage {
                    id: ImageId::new(format!("sha256:{n:064x}")),
                    size,
                    ..RuntimeImage::default()
                })
                .collect();
            script(&mut state);
        }
        let config = GcConfig {
            policy: GcPolicy {
                min_age: Duration::ZERO,
                ..GcPolicy::default()
            },
            ..GcConfig::default()
        };
        let manager = ImageGcManager::new(runtime.clone(), store, config).expect("new");
        manager.detect(t0).await.expect("detect");
        (runtime, manager)
    }

    /// A further image filesystem full of data that is not images (none of the images is on
    /// it): the measured pass removes images adding up to what its first reading asked to
    /// free (100 % used, down to 80 %: 200 bytes, two images of 100), never every image.
    #[tokio::test]
    async fn a_further_image_filesystem_full_of_other_data_frees_at_most_what_its_reading_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (runtime, manager) = other_fs_fixture(dir.path(), 6, 100, |state| {
            state.fs = Some((100_000, 90_000));
            state.other_image_fs = vec![(1000, 0, None)];
        })
        .await;
        let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
        assert_eq!(report.removed.len(), 2, "{report:?}");
        assert!(report.error.is_none(), "{report:?}");
        assert_eq!(runtime.state().other_image_fs, vec![(1000, 0, None)]);
    }

    /// The same with small images (the cap allows twenty): the pass stops after three
    /// removals in a row that did not lower the filesystem's reading, and fails with the
    /// kubelet's wording.
    #[tokio::test]
    async fn a_further_image_filesystem_pass_stops_after_three_removals_that_did_not_lower_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (runtime, manager) = other_fs_fixture(dir.path(), 10, 10, |state| {
            state.fs = Some((100_000, 90_000));
            state.other_image_fs = vec![(1000, 0, None)];
        })
        .await;
        let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
        assert_eq!(report.removed.len(), UNLOWERED_REMOVALS, "{report:?}");
        assert!(
            matches!(
                report.error,
                Some(GcError::InsufficientSpace {
                    usage_percent: 100,
                    capacity: 1000,
                    freed: 30
                })
            ),
            "{report:?}"
        );
        assert_eq!(runtime.state().removed.len(), 3);
    }

    /// Further image filesystems on the device of the first or of an earlier further one
    /// (containerd's snapshotters under one root) are skipped, in the cycle and in the dry
    /// run: their readings are that filesystem's, which removals judged by them would never
    /// lower. /scripted-1 is /scripted's device and full; /scripted-2 is healthy; /scripted-3
    /// is /scripted-2's device and full. Nothing is removed.
    #[tokio::test]
    async fn a_further_image_filesystem_on_the_same_device_as_an_earlier_one_is_skipped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (runtime, manager) = other_fs_fixture(dir.path(), 4, 100, |state| {
            state.fs = Some((100_000, 90_000));
            state.other_image_fs = vec![(1000, 0, None), (1000, 900, None), (1000, 0, None)];
            state.fs_device = BTreeMap::from([(0, 7), (1, 7), (2, 8), (3, 8)]);
        })
        .await;
        let t1 = UnixNanos::from_secs(20_000);
        let plan = manager.plan(t1, false).await.expect("plan");
        let others = &plan.explanation.other_filesystems;
        let same: Vec<Option<&str>> = others
            .iter()
            .map(|o| o.same_filesystem_as.as_deref())
            .collect();
        assert_eq!(same, [Some("/scripted"), None, Some("/scripted-2")]);
        assert!(!others.iter().any(FsNeed::runs), "{others:?}");
        assert!(plan.removals.is_empty(), "{:?}", plan.removals);

        let report = manager.garbage_collect(t1).await;
        assert!(report.removed.is_empty(), "{report:?}");
        assert!(report.error.is_none(), "{report:?}");
        assert!(runtime.state().removed.is_empty());
    }

    /// The first filesystem's walk already brought a further one to its low threshold (the
    /// image it removed was there): the measured pass reads it again first and removes
    /// nothing more.
    #[tokio::test]
    async fn a_further_image_filesystem_freed_by_the_first_walk_gets_no_removal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (runtime, manager) = other_fs_fixture(dir.path(), 3, 100, |state| {
            // 90 % used: the first walk frees 100 bytes (down to 80 %), counted by sizes.
            state.fs = Some((1000, 100));
            state.other_image_fs = vec![(1000, 100, None)];
            for n in 1u8..=3 {
                state.image_fs_of.insert(format!("sha256:{n:064x}"), 1);
            }
        })
        .await;
        let report = manager.garbage_collect(UnixNanos::from_secs(20_000)).await;
        let removed: Vec<String> = report
            .removed
            .iter()
            .map(|r| r.key.image_id.to_string())
            .collect();
        assert_eq!(removed, [format!("sha256:{:064x}", 1)], "{report:?}");
        assert!(report.error.is_none(), "{report:?}");
        assert_eq!(runtime.state().other_image_fs, vec![(1000, 200, None)]);
    }
}
