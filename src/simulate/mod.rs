//! `imagekeeper simulate`: what a GC policy costs a node in bytes pulled again. A workload
//! (`crate::workload`) drives the real [`ImageGcManager`] and a real [`Store`] (a redb file in
//! a temporary directory) against the replay's [`ScriptedRuntime`], whose image set the
//! simulation owns: an image is listed from the end of its pull until GC removes it. Time is
//! the workload's, passed to every call (nothing sleeps or reads a clock), so the same input
//! gives the same output byte for byte.
//!
//! The rules (the book's `operators/simulate.md` and `reference/workload-trace.md`):
//! - a `run` whose image is absent pulls it first (`size / pull_bytes_per_s` seconds, its bytes
//!   counted as used from the pull's start) and its container starts when the pull lands; a
//!   run whose image is being pulled waits for that pull. The image is in use while pulled
//!   (it is not listed yet, so no GC can choose it) and while its container runs.
//! - a pull that does not fit (its size above the free bytes) runs DeleteUnusedImages first,
//!   as the kubelet's eviction manager does under image filesystem pressure; still not
//!   fitting, the run fails and is counted, not retried.
//! - GC runs every `gc_period_s` from the node line (GarbageCollect: detect first, MaxAge, the
//!   space pass), and a detect runs at each restart.
//! - at one instant: pulls landing and containers ending first, then the GC, then the
//!   workload's lines in order.
//! - a GC cycle that provably changes nothing is skipped ([`SimOptions::skip_idle_gc`], on
//!   by default): nothing pulling or running (no event pending), nothing happened since the
//!   previous cycle, which removed nothing and reported no error, usage below the high
//!   threshold, and MaxAge off (a detect's heartbeat only matters to MaxAge's watched time;
//!   see `gc::watch`). The state is then the same at every tick up to the next workload line,
//!   so the output is the same byte for byte with or without skipping (a test compares them)
//!   and an idle stretch of years costs no cycles.
//!
//! Policies ([`SimPolicy`]): `kubelet` records uses only at detect and loses its records at a
//! restart (a new store), as the kubelet's in-memory ImageGCManager does; `imagekeeper` also
//! marks at the pull and at the container's creation (the container event) and keeps its
//! store across restarts (the container event also opens the image's use interval, as
//! the agent's does); `adaptive` is `imagekeeper` with [`GcOrder::Adaptive`], `predictive`
//! with [`GcOrder::Predictive`];
//! `clairvoyant` is no manager at all but a reference run by this driver: knowing the future,
//! when space is needed it removes the unused image whose next use is farthest (never used
//! again first, ties larger first). It is a reference to measure against, not an optimum
//! (Belady's rule is optimal for equal sizes only; with sizes the optimum is NP-hard), and it
//! removes for space only (no MaxAge).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod corpus;

use serde::Serialize;

use crate::gc::{GcConfig, GcError, GcOrder, GcReport, ImageGcManager, SpaceNeed};
use crate::kubelet::sha256_hex;
use crate::model::{ContainerState, ImageId, RuntimeContainer, RuntimeImage, UnixNanos};
use crate::replay::ScriptedRuntime;
use crate::store::{Batch, Store, StoreError};
use crate::workload::{Workload, WorkloadOp};

/// The unix time a workload's second 0 is simulated at (2001-09-09): times stay positive
/// (0 is "never" in the store) and far from any overflow.
const EPOCH_SECS: i64 = 1_000_000_000;

/// A policy `simulate` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SimPolicy {
    /// The kubelet's order and rules with its in-memory history.
    Kubelet,
    /// The same order and rules with the persisted history (today's agent).
    Imagekeeper,
    /// imagekeeper's history with the adaptive order ([`GcOrder::Adaptive`]).
    Adaptive,
    /// imagekeeper's history with the predictive order ([`GcOrder::Predictive`]).
    Predictive,
    /// The offline reference that knows the future.
    Clairvoyant,
}

impl SimPolicy {
    /// Every policy, in the default order of the output.
    pub const ALL: [SimPolicy; 5] = [
        SimPolicy::Kubelet,
        SimPolicy::Imagekeeper,
        SimPolicy::Adaptive,
        SimPolicy::Predictive,
        SimPolicy::Clairvoyant,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SimPolicy::Kubelet => "kubelet",
            SimPolicy::Imagekeeper => "imagekeeper",
            SimPolicy::Adaptive => "adaptive",
            SimPolicy::Predictive => "predictive",
            SimPolicy::Clairvoyant => "clairvoyant",
        }
    }
}

/// What one policy cost over the workload (`simulate -o json`'s object).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Outcome {
    pub policy: &'static str,
    pub runs: u64,
    /// Runs whose pull did not fit even after DeleteUnusedImages.
    pub failed_runs: u64,
    pub pulls: u64,
    pub pulled_bytes: u64,
    /// Each image's first pull.
    pub first_pulls: u64,
    pub first_pulled_bytes: u64,
    /// `pulls - first_pulls`.
    pub repulls: u64,
    pub repulled_bytes: u64,
    /// Images GC removed (every reason).
    pub evictions: u64,
    /// The most bytes used on the image filesystem (other use, images, pulls under way).
    pub peak_used_bytes: u64,
    /// The seconds runs waited for pulls, in total.
    pub pull_wait_s: f64,
}

/// Why a simulation stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimulateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Gc(#[from] GcError),
    #[error("creating the simulation's database: {0}")]
    Io(#[from] std::io::Error),
}

/// How a simulation runs (not what it answers: every option gives the same output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimOptions {
    /// Skip the GC cycles that provably change nothing (see the module's rules). Off only to
    /// prove that skipping changes no output.
    pub skip_idle_gc: bool,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions { skip_idle_gc: true }
    }
}

impl SimOptions {
    /// Every GC cycle run, none skipped.
    pub fn every_cycle() -> SimOptions {
        SimOptions {
            skip_idle_gc: false,
        }
    }
}

/// What a simulation did to get its answer (not part of the output).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimStats {
    /// The periodic GC cycles run.
    pub gc_cycles: u64,
    /// The periodic GC cycles skipped as changing nothing.
    pub gc_cycles_skipped: u64,
}

/// Runs `workload` under each of `policies`, in that order, each in a database of its own
/// in a temporary directory removed at the end.
pub async fn simulate(
    workload: &Workload,
    policies: &[SimPolicy],
) -> Result<Vec<Outcome>, SimulateError> {
    Ok(simulate_with(workload, policies, SimOptions::default())
        .await?
        .into_iter()
        .map(|(outcome, _)| outcome)
        .collect())
}

/// [`simulate`] with `options`, each outcome with its run's [`SimStats`].
pub async fn simulate_with(
    workload: &Workload,
    policies: &[SimPolicy],
    options: SimOptions,
) -> Result<Vec<(Outcome, SimStats)>, SimulateError> {
    let dir = tempfile::tempdir()?;
    let mut out = Vec::new();
    for (i, policy) in policies.iter().enumerate() {
        let sub = dir.path().join(format!("{i}-{}", policy.as_str()));
        std::fs::create_dir(&sub)?;
        out.push(simulate_one_with(workload, *policy, &sub, options).await?);
    }
    Ok(out)
}

/// Runs `workload` under `policy` with its databases in `dir`.
pub async fn simulate_one(
    workload: &Workload,
    policy: SimPolicy,
    dir: &Path,
) -> Result<Outcome, SimulateError> {
    Ok(
        simulate_one_with(workload, policy, dir, SimOptions::default())
            .await?
            .0,
    )
}

/// [`simulate_one`] with `options`, and what the run did.
pub async fn simulate_one_with(
    workload: &Workload,
    policy: SimPolicy,
    dir: &Path,
    options: SimOptions,
) -> Result<(Outcome, SimStats), SimulateError> {
    let mut sim = Sim::new(workload, policy, dir, options)?;
    sim.run().await?;
    Ok((sim.outcome, sim.stats))
}

/// Seconds from the workload's start as a store time.
fn at(seconds: f64) -> UnixNanos {
    UnixNanos(EPOCH_SECS * 1_000_000_000 + (seconds * 1e9).round() as i64)
}

/// The image id the simulation gives an image name.
fn image_id(name: &str) -> ImageId {
    ImageId::new(format!("sha256:{}", sha256_hex(name.as_bytes())))
}

/// A simulation's internal events, ordered by time then by their sequence number.
#[derive(Clone, Debug)]
enum Event {
    /// A pull lands: the image is listed and the waiting runs start.
    PullDone { image: String },
    /// A container ends.
    ContainerEnd { id: String },
}

/// A pull under way: its size and the runs waiting for it (how long each runs).
struct Pulling {
    size: u64,
    waiting: Vec<f64>,
}

/// The GC side of a simulation: the real manager, or the clairvoyant reference.
enum Gc {
    Manager {
        manager: Box<ImageGcManager<ScriptedRuntime>>,
        /// The database file (a new one at each kubelet restart).
        db: PathBuf,
        restarts: u64,
    },
    Clairvoyant {
        /// When each listed image landed (its MinAge counts from there).
        landed: BTreeMap<String, UnixNanos>,
    },
}

struct Sim<'a> {
    workload: &'a Workload,
    policy: SimPolicy,
    dir: PathBuf,
    config: GcConfig,
    runtime: ScriptedRuntime,
    gc: Gc,
    events: BTreeMap<(UnixNanos, u64), Event>,
    seq: u64,
    next_gc: UnixNanos,
    period: i64,
    pulling: BTreeMap<String, Pulling>,
    /// Sizes of the images ever pulled, by name.
    sizes: BTreeMap<String, u64>,
    pulled_once: BTreeSet<String>,
    /// The times each image is run (clairvoyant's future), and how many of them have passed.
    future: BTreeMap<String, (Vec<UnixNanos>, usize)>,
    outcome: Outcome,
    options: SimOptions,
    stats: SimStats,
    /// Whether the last periodic GC removed nothing and reported no error, and nothing
    /// (a run, an event, a restart, a DeleteUnusedImages) happened since.
    quiet: bool,
}

impl<'a> Sim<'a> {
    fn new(
        workload: &'a Workload,
        policy: SimPolicy,
        dir: &Path,
        options: SimOptions,
    ) -> Result<Sim<'a>, SimulateError> {
        let node = &workload.node;
        let start = at(node.at);
        let runtime = ScriptedRuntime::new();
        runtime.state().fs = Some((node.capacity, node.capacity - node.other_used));
        let config = GcConfig {
            policy: node.policy,
            order: match policy {
                SimPolicy::Adaptive => GcOrder::Adaptive,
                SimPolicy::Predictive => GcOrder::Predictive,
                _ => GcOrder::KubeletOrder,
            },
            ..GcConfig::default()
        };
        let gc = match policy {
            SimPolicy::Clairvoyant => Gc::Clairvoyant {
                landed: BTreeMap::new(),
            },
            _ => {
                let db = dir.join("0.redb");
                let store = Arc::new(Store::open(&db, start)?);
                Gc::Manager {
                    manager: Box::new(ImageGcManager::new(runtime.clone(), store, config.clone())?),
                    db,
                    restarts: 0,
                }
            }
        };
        let mut future: BTreeMap<String, (Vec<UnixNanos>, usize)> = BTreeMap::new();
        if policy == SimPolicy::Clairvoyant {
            for line in &workload.ops {
                if let WorkloadOp::Run { image, .. } = &line.op {
                    future.entry(image.clone()).or_default().0.push(at(line.at));
                }
            }
        }
        let period = (node.gc_period_s * 1e9).round() as i64;
        Ok(Sim {
            workload,
            policy,
            dir: dir.to_owned(),
            config,
            runtime,
            gc,
            events: BTreeMap::new(),
            seq: 0,
            next_gc: UnixNanos(start.0 + period),
            period,
            pulling: BTreeMap::new(),
            sizes: BTreeMap::new(),
            pulled_once: BTreeSet::new(),
            future,
            outcome: Outcome {
                policy: policy.as_str(),
                peak_used_bytes: node.other_used,
                ..Outcome::default()
            },
            options,
            stats: SimStats::default(),
            quiet: false,
        })
    }

    async fn run(&mut self) -> Result<(), SimulateError> {
        let workload = self.workload;
        for line in &workload.ops {
            let now = at(line.at);
            self.advance_to(now).await?;
            match &line.op {
                WorkloadOp::Run { image, size, for_s } => {
                    self.start_run(now, image, *size, *for_s).await?
                }
                WorkloadOp::Restart => self.restart(now).await?,
            }
        }
        // The rest: pulls landing and containers ending, with the GCs meanwhile.
        while let Some(&(when, _)) = self.events.keys().next() {
            self.advance_to(when).await?;
        }
        Ok(())
    }

    /// Runs every internal event and GC up to and including `now`: at one instant, events
    /// first, then the GC.
    async fn advance_to(&mut self, now: UnixNanos) -> Result<(), SimulateError> {
        loop {
            let event = self
                .events
                .keys()
                .next()
                .copied()
                .filter(|(t, _)| *t <= now);
            match event {
                Some(key) if key.0 <= self.next_gc => {
                    let event = self.events.remove(&key).expect("the key was just read");
                    self.handle(key.0, event).await?;
                }
                _ if self.next_gc <= now => {
                    let when = self.next_gc;
                    if self.options.skip_idle_gc && self.idle() {
                        // No event is pending, so nothing changes before the workload's next
                        // line, at `now` or later (which comes after the GC at one instant):
                        // every tick up to and including `now` would find the same state.
                        let ticks = (now.0 - when.0) / self.period + 1;
                        self.next_gc = UnixNanos(when.0 + ticks * self.period);
                        self.stats.gc_cycles_skipped += ticks as u64;
                        continue;
                    }
                    self.next_gc = UnixNanos(when.0 + self.period);
                    self.periodic_gc(when).await?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// Whether a periodic GC now provably changes nothing: no pull or container pending, the
    /// last cycle quiet with nothing since, usage below the high threshold (at it, even an
    /// amount of 0 removes one image), MaxAge off (the
    /// heartbeats a skipped detect does not write count only in MaxAge's watched time).
    fn idle(&self) -> bool {
        if !self.quiet || !self.events.is_empty() || !self.pulling.is_empty() {
            return false;
        }
        let policy = &self.workload.node.policy;
        if !policy.max_age.is_zero() {
            return false;
        }
        let capacity = self.workload.node.capacity;
        let available = capacity - self.used().min(capacity);
        matches!(
            SpaceNeed::compute(capacity, available, policy),
            Ok(SpaceNeed {
                amount_to_free: None,
                ..
            })
        )
    }

    fn schedule(&mut self, when: UnixNanos, event: Event) {
        self.seq += 1;
        self.events.insert((when, self.seq), event);
    }

    async fn handle(&mut self, now: UnixNanos, event: Event) -> Result<(), SimulateError> {
        self.quiet = false;
        match event {
            Event::ContainerEnd { id } => {
                self.runtime.state().containers.retain(|c| c.id != id);
            }
            Event::PullDone { image } => {
                let Some(pulling) = self.pulling.remove(&image) else {
                    return Ok(());
                };
                let listed = RuntimeImage {
                    id: image_id(&image),
                    repo_tags: vec![image.clone()],
                    repo_digests: vec![format!("{image}@{}", image_id(&image).as_str())],
                    size: pulling.size,
                    ..RuntimeImage::default()
                };
                let key = listed.record_key();
                self.runtime.state().images.push(listed);
                match &mut self.gc {
                    Gc::Clairvoyant { landed } => {
                        landed.insert(image.clone(), now);
                    }
                    Gc::Manager { manager, .. } => {
                        if self.policy != SimPolicy::Kubelet {
                            // The pull's mark (`pull::ImageManager` marks what it pulled).
                            let mut batch = Batch::new();
                            batch.mark_used(key, now, Some(pulling.size));
                            manager.store().apply(&batch)?;
                        }
                    }
                }
                for for_s in pulling.waiting {
                    self.start_container(now, &image, for_s)?;
                }
            }
        }
        Ok(())
    }

    /// The bytes used on the image filesystem: other use, listed images, pulls under way.
    fn used(&self) -> u64 {
        let state = self.runtime.state();
        let images: u64 = state.images.iter().map(|i| i.size).sum();
        let pulling: u64 = self.pulling.values().map(|p| p.size).sum();
        self.workload.node.other_used + images + pulling
    }

    /// Sets the scripted filesystem's free bytes from what is used.
    fn sync_fs(&self) {
        let capacity = self.workload.node.capacity;
        let used = self.used().min(capacity);
        self.runtime.state().fs = Some((capacity, capacity - used));
    }

    fn listed(&self, image: &str) -> bool {
        let id = image_id(image);
        self.runtime.state().images.iter().any(|i| i.id == id)
    }

    async fn start_run(
        &mut self,
        now: UnixNanos,
        image: &str,
        size: u64,
        for_s: f64,
    ) -> Result<(), SimulateError> {
        self.quiet = false;
        self.outcome.runs += 1;
        if let Some((_, passed)) = self.future.get_mut(image) {
            *passed += 1;
        }
        if self.listed(image) {
            return self.start_container(now, image, for_s);
        }
        if let Some(pulling) = self.pulling.get_mut(image) {
            pulling.waiting.push(for_s);
            let lands = self
                .events
                .iter()
                .find(|(_, e)| matches!(e, Event::PullDone { image: i } if i == image))
                .map(|((t, _), _)| *t)
                .unwrap_or(now);
            self.outcome.pull_wait_s += lands.since(now).as_secs_f64();
            return Ok(());
        }
        // The size an image had when first pulled stays its size (a later run giving another
        // size means a new version: a workload names it by another tag).
        let size = *self.sizes.entry(image.to_owned()).or_insert(size);
        let capacity = self.workload.node.capacity;
        if self.used().saturating_add(size) > capacity {
            self.make_room(now, self.used().saturating_add(size) - capacity)
                .await?;
            if self.used().saturating_add(size) > capacity {
                self.outcome.failed_runs += 1;
                return Ok(());
            }
        }
        let nanos = (u128::from(size) * 1_000_000_000
            / u128::from(self.workload.node.pull_bytes_per_s))
        .min(i64::MAX as u128 / 4) as i64;
        let lands = UnixNanos(now.0.saturating_add(nanos));
        self.pulling.insert(
            image.to_owned(),
            Pulling {
                size,
                waiting: vec![for_s],
            },
        );
        self.schedule(
            lands,
            Event::PullDone {
                image: image.to_owned(),
            },
        );
        self.outcome.pulls += 1;
        self.outcome.pulled_bytes += size;
        if self.pulled_once.insert(image.to_owned()) {
            self.outcome.first_pulls += 1;
            self.outcome.first_pulled_bytes += size;
        } else {
            self.outcome.repulls += 1;
            self.outcome.repulled_bytes += size;
        }
        self.outcome.pull_wait_s += lands.since(now).as_secs_f64();
        self.outcome.peak_used_bytes = self.outcome.peak_used_bytes.max(self.used());
        self.sync_fs();
        Ok(())
    }

    fn start_container(
        &mut self,
        now: UnixNanos,
        image: &str,
        for_s: f64,
    ) -> Result<(), SimulateError> {
        self.seq += 1;
        let id = format!("c{}", self.seq);
        self.runtime.state().containers.push(RuntimeContainer {
            id: id.clone(),
            pod_sandbox_id: format!("p{}", self.seq),
            image: image.to_owned(),
            image_id: image_id(image),
            state: ContainerState::Running,
            runtime_handler: String::new(),
        });
        if let Gc::Manager { manager, .. } = &self.gc
            && self.policy != SimPolicy::Kubelet
        {
            // The container event's mark and use interval
            // (`ImageGcManager::mark_container_used`).
            let size = self.sizes.get(image).copied();
            let key = RuntimeImage {
                id: image_id(image),
                ..RuntimeImage::default()
            }
            .record_key();
            let mut batch = Batch::new();
            batch.mark_used(key.clone(), now, size);
            batch.open_use(key, now);
            manager.store().apply(&batch)?;
        }
        let end = UnixNanos(
            now.0
                .saturating_add(crate::workload::seconds(for_s).as_nanos() as i64),
        );
        self.schedule(end, Event::ContainerEnd { id });
        Ok(())
    }

    fn count(&mut self, report: &GcReport) {
        self.outcome.evictions += report.removed.len() as u64;
    }

    async fn periodic_gc(&mut self, now: UnixNanos) -> Result<(), SimulateError> {
        self.sync_fs();
        self.stats.gc_cycles += 1;
        let evictions = self.outcome.evictions;
        let mut failed = false;
        match &self.gc {
            Gc::Manager { manager, .. } => {
                let report = manager.garbage_collect(now).await;
                // A cycle that could not free enough (InsufficientSpace) still counts its
                // removals; anything else is the simulation's failure.
                if let Some(e) = &report.error
                    && !matches!(e, GcError::InsufficientSpace { .. })
                {
                    return Err(report.error.expect("matched just above").into());
                }
                failed = report.error.is_some();
                self.count(&report);
            }
            Gc::Clairvoyant { .. } => {
                let capacity = self.workload.node.capacity;
                let available = capacity - self.used().min(capacity);
                let need = SpaceNeed::compute(capacity, available, &self.workload.node.policy)?;
                if let Some(amount) = need.amount_to_free.filter(|a| *a > 0) {
                    self.clairvoyant_free(now, amount as u64);
                    // Space was needed: the next cycle runs (MinAge may let it free more).
                    failed = true;
                }
            }
        }
        self.quiet = !failed && self.outcome.evictions == evictions;
        self.sync_fs();
        Ok(())
    }

    /// A pull that does not fit: DeleteUnusedImages (the clairvoyant reference frees only the
    /// `need`ed bytes, farthest next use first).
    async fn make_room(&mut self, now: UnixNanos, need: u64) -> Result<(), SimulateError> {
        self.quiet = false;
        self.sync_fs();
        match &self.gc {
            Gc::Manager { manager, .. } => {
                let report = manager.delete_unused_images(now).await;
                if let Some(e) = report.error {
                    return Err(e.into());
                }
                self.count(&report);
            }
            Gc::Clairvoyant { .. } => self.clairvoyant_free(now, need),
        }
        self.sync_fs();
        Ok(())
    }

    /// The clairvoyant reference's walk: the listed images no container uses, first listed
    /// at least MinAge ago, never used again first, then farthest next use first; ties larger
    /// first, then by name. Removes until `amount` bytes are freed.
    fn clairvoyant_free(&mut self, now: UnixNanos, amount: u64) {
        let Gc::Clairvoyant { landed } = &mut self.gc else {
            return;
        };
        let min_age = self.workload.node.policy.min_age;
        let mut state = self.runtime.state();
        let in_use: BTreeSet<ImageId> = state
            .containers
            .iter()
            .map(|c| c.image_id.clone())
            .collect();
        let mut candidates: Vec<(std::cmp::Reverse<i64>, std::cmp::Reverse<u64>, String)> = state
            .images
            .iter()
            .filter(|i| !in_use.contains(&i.id))
            .filter_map(|i| {
                let name = i.repo_tags.first()?.clone();
                let landed_at = landed.get(&name).copied().unwrap_or(now);
                if now.since(landed_at) < min_age {
                    return None;
                }
                let next = self
                    .future
                    .get(&name)
                    .and_then(|(times, passed)| times.get(*passed))
                    .map_or(i64::MAX, |t| t.0);
                Some((std::cmp::Reverse(next), std::cmp::Reverse(i.size), name))
            })
            .collect();
        candidates.sort();
        let mut freed = 0u64;
        for (_, std::cmp::Reverse(size), name) in candidates {
            if freed >= amount {
                break;
            }
            let id = image_id(&name);
            state.images.retain(|i| i.id != id);
            landed.remove(&name);
            freed += size;
            self.outcome.evictions += 1;
        }
    }

    /// The agent restarts: the kubelet's history is lost (a new store), imagekeeper's kept
    /// (the same file opened again); either way a detect runs at once.
    async fn restart(&mut self, now: UnixNanos) -> Result<(), SimulateError> {
        self.quiet = false;
        self.sync_fs();
        let kubelet = self.policy == SimPolicy::Kubelet;
        let placeholder = Gc::Clairvoyant {
            landed: BTreeMap::new(),
        };
        match std::mem::replace(&mut self.gc, placeholder) {
            clairvoyant @ Gc::Clairvoyant { .. } => self.gc = clairvoyant,
            Gc::Manager {
                manager,
                db,
                restarts,
            } => {
                // The old manager and its store go first: a database is opened by one
                // process at a time.
                drop(manager);
                let restarts = restarts + 1;
                let db = if kubelet {
                    // The kubelet keeps its image records in memory only: every listed image
                    // is detected anew with no last use. Its MaxAge waits for uptime above
                    // MaxAge ("Wait until the MaxAge has passed since the Kubelet has
                    // started", freeOldImages in pkg/kubelet/images/image_gc_manager.go);
                    // with a new store an image's unused time counts from its first
                    // detection at the earliest, which is at or after the restart.
                    let _ = std::fs::remove_file(&db);
                    self.dir.join(format!("{restarts}.redb"))
                } else {
                    db
                };
                let store = Arc::new(Store::open(&db, now)?);
                let manager =
                    ImageGcManager::new(self.runtime.clone(), store, self.config.clone())?;
                manager.detect(now).await?;
                self.gc = Gc::Manager {
                    manager: Box::new(manager),
                    db,
                    restarts,
                };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_start_at_the_simulated_epoch() {
        assert_eq!(at(0.0), UnixNanos::from_secs(EPOCH_SECS));
        assert_eq!(at(1.5).0 - at(0.0).0, 1_500_000_000);
    }
}
