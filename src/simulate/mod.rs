//! `imagekeeper simulate`: what a GC policy costs a node in bytes pulled again. A workload
//! (`crate::workload`) drives the real [`ImageGcManager`] and a real [`Store`] (a redb
//! database held in memory: its commits cost no `fdatasync`, and nothing is left on disk
//! however the process ends) against the replay's [`ScriptedRuntime`], whose image set the
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
//! - time is event-driven ([`SimOptions::skip_idle_gc`], on by default): after a GC cycle
//!   that removed nothing, with nothing happening since, every later tick finds the same
//!   state until the next instant that can change it (an event, a workload line, an image
//!   passing MinAge under pressure or MaxAge; see `Sim::settled_until`), so those ticks are
//!   skipped; while a container runs, the last of them is run, since its detect writes the
//!   image's last use at its time. The output is the same byte for byte as stepping every
//!   cycle (a test compares them), and a year-long container costs a handful of cycles.
//! - work is bounded: a policy's simulation takes at most [`MAX_SIMULATED_STEPS`] steps, and
//!   reports its progress to a callback ([`simulate_reporting`]).
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
use std::path::Path;
use std::sync::Arc;

mod actions;
pub mod corpus;
mod online_orders;
mod signals;

use serde::Serialize;

use crate::gc::unused_since;
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
    /// `predictive` reading the workload's signal lines: what the cluster knew (`gc::signals`).
    Signals,
    /// SIEVE (NSDI 2024), an online reference order run by the driver (`online_orders.rs`).
    Sieve,
    /// S3-FIFO (SOSP 2023), an online reference order run by the driver.
    S3Fifo,
    /// The offline reference that knows the future.
    Clairvoyant,
}

impl SimPolicy {
    /// Every policy, in the default order of the output.
    pub const ALL: [SimPolicy; 8] = [
        SimPolicy::Kubelet,
        SimPolicy::Imagekeeper,
        SimPolicy::Adaptive,
        SimPolicy::Predictive,
        SimPolicy::Signals,
        SimPolicy::Sieve,
        SimPolicy::S3Fifo,
        SimPolicy::Clairvoyant,
    ];

    /// The policy's name in `simulate`'s output (`Outcome::policy`, the table's rows).
    pub fn as_str(self) -> &'static str {
        match self {
            SimPolicy::Kubelet => "kubelet",
            SimPolicy::Imagekeeper => "imagekeeper",
            SimPolicy::Adaptive => "adaptive",
            SimPolicy::Predictive => "predictive",
            SimPolicy::Signals => "signals",
            SimPolicy::Sieve => "sieve",
            SimPolicy::S3Fifo => "s3fifo",
            SimPolicy::Clairvoyant => "clairvoyant",
        }
    }
}

/// What one policy cost over the workload (`simulate -o json`'s object).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Outcome {
    /// The policy ([`SimPolicy::as_str`]).
    pub policy: &'static str,
    /// Container runs the workload asked for.
    pub runs: u64,
    /// Runs whose pull did not fit even after DeleteUnusedImages.
    pub failed_runs: u64,
    /// Pulls started (a run whose image is being pulled waits for that pull).
    pub pulls: u64,
    /// The bytes of those pulls.
    pub pulled_bytes: u64,
    /// Each image's first pull.
    pub first_pulls: u64,
    /// The bytes of the first pulls.
    pub first_pulled_bytes: u64,
    /// `pulls - first_pulls`.
    pub repulls: u64,
    /// The bytes of the repulls: what the policy cost (`pulled_bytes - first_pulled_bytes`).
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
    /// The scratch database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The GC manager failed.
    #[error(transparent)]
    Gc(#[from] GcError),
    /// An I/O error making a scratch database (none since the scratch databases live in
    /// memory).
    #[error("creating the simulation's database: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "policy {policy}: the simulation took more than {limit} steps (GC cycles run, pulls landing, containers ending, workload lines), the most one policy may take: simulate a shorter stretch of the workload"
    )]
    /// A policy took more than [`MAX_SIMULATED_STEPS`] steps.
    TooMuchWork {
        /// The policy ([`SimPolicy::as_str`]).
        policy: &'static str,
        /// The limit, [`MAX_SIMULATED_STEPS`].
        limit: u64,
    },
}

/// The most steps one policy's simulation takes (a GC cycle run, a pull landing, a container
/// ending, a workload line): a bound on its work whatever the workload. Time is event-driven
/// (see the module's rules), so a workload costs a few steps per line whatever the time it
/// spans; the largest workload read (`workload::MAX_WORKLOAD_BYTES`, about two million runs)
/// fits several times over unless its GC cycles keep removing images.
pub const MAX_SIMULATED_STEPS: u64 = 20_000_000;

/// How far a simulation is (handed to a progress callback now and then).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SimProgress {
    /// The policy being simulated.
    pub policy: SimPolicy,
    /// The policy's place in the run (0-based) and the number of policies.
    pub policy_index: usize,
    /// The number of policies in the run.
    pub policies: usize,
    /// Workload lines done, of `lines`.
    pub lines_done: usize,
    /// The workload's lines.
    pub lines: usize,
    /// The simulated time reached, in seconds from the workload's start.
    pub at_s: f64,
    /// The steps taken so far (see [`MAX_SIMULATED_STEPS`]).
    pub steps: u64,
}

/// How many steps pass between two progress reports.
const PROGRESS_EVERY_STEPS: u64 = 256;

/// How a simulation runs (not what it answers: every option gives the same output, or none
/// past `max_steps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimOptions {
    /// Skip the GC cycles that provably change nothing (event-driven time; see the module's
    /// rules). Off only to prove that skipping changes no output.
    pub skip_idle_gc: bool,
    /// The most steps a policy's simulation takes ([`MAX_SIMULATED_STEPS`]).
    pub max_steps: u64,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            skip_idle_gc: true,
            max_steps: MAX_SIMULATED_STEPS,
        }
    }
}

impl SimOptions {
    /// Every GC cycle run, none skipped.
    pub fn every_cycle() -> SimOptions {
        SimOptions {
            skip_idle_gc: false,
            ..SimOptions::default()
        }
    }

    /// Another bound on the steps (tests of the bound).
    pub fn with_max_steps(mut self, max_steps: u64) -> SimOptions {
        self.max_steps = max_steps;
        self
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
    /// Of those skipped, the ones skipped while a container ran or a pull was under way.
    pub gc_cycles_skipped_busy: u64,
    /// The steps taken (see [`MAX_SIMULATED_STEPS`]).
    pub steps: u64,
}

/// Runs `workload` under each of `policies`, in that order, each in a database of its own
/// held in memory (nothing is written to disk, so nothing is left behind however the process
/// ends).
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
    simulate_reporting(workload, policies, options, &mut |_| {}).await
}

/// [`simulate_with`], handing `progress` how far it is every few thousand steps and at
/// each policy's start.
pub async fn simulate_reporting(
    workload: &Workload,
    policies: &[SimPolicy],
    options: SimOptions,
    progress: &mut dyn FnMut(&SimProgress),
) -> Result<Vec<(Outcome, SimStats)>, SimulateError> {
    let mut out = Vec::new();
    for (i, policy) in policies.iter().enumerate() {
        let mut sim = Sim::new(workload, *policy, options, progress)?;
        sim.place = (i, policies.len());
        sim.report(0, at(workload.node.at));
        sim.run().await?;
        out.push((sim.outcome, sim.stats));
    }
    Ok(out)
}

/// A scratch database in memory for `policy`'s `restarts`-th store.
fn scratch_store(policy: SimPolicy, restarts: u64, now: UnixNanos) -> Result<Store, StoreError> {
    let label = format!("<simulate {} {restarts}>", policy.as_str());
    Store::open_in_memory(Path::new(&label), now)
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

/// A pull under way: its size, when it lands and the runs waiting for it (how long each
/// runs).
struct Pulling {
    size: u64,
    lands: UnixNanos,
    waiting: Vec<f64>,
}

/// The GC side of a simulation: the real manager, or the clairvoyant reference.
enum Gc {
    Manager {
        manager: Box<ImageGcManager<ScriptedRuntime>>,
        /// The restarts so far (the kubelet's store is a new one at each).
        restarts: u64,
    },
    /// A reference run by the driver: the clairvoyant one (`online: None`), or an online
    /// order (`online_orders.rs`).
    Reference {
        /// When each listed image landed (its MinAge counts from there).
        landed: BTreeMap<String, UnixNanos>,
        online: Option<Box<online_orders::OnlineOrder>>,
    },
}

struct Sim<'a> {
    workload: &'a Workload,
    policy: SimPolicy,
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
    /// Whether the last periodic GC removed nothing, and nothing (a run, an event, a
    /// restart, a DeleteUnusedImages) happened since.
    quiet: bool,
    /// When the last periodic GC ran.
    last_cycle: UnixNanos,
    /// Workload lines done.
    lines_done: usize,
    /// This policy's place among the policies run, and their number.
    place: (usize, usize),
    progress: &'a mut dyn FnMut(&SimProgress),
    /// Each image name's id, computed once (a SHA-256 of the name).
    ids: std::cell::RefCell<BTreeMap<String, ImageId>>,
    /// The marks and use intervals of pulls landing and containers starting since the store
    /// was last read, applied as one transaction right before the next read ([`Sim::flush`]):
    /// nothing reads the store in between, and a batch's operations apply in order inside
    /// its transaction as they would one transaction each, so the store each read sees is
    /// the same (issue 41: a commit per event was a third of a simulation).
    pending: Batch,
    /// What the cluster knows, fed from the workload's signal lines (the `signals` policy
    /// only; `None` for the others, which skip those lines).
    signals: Option<signals::SignalFeed>,
}

impl<'a> Sim<'a> {
    fn new(
        workload: &'a Workload,
        policy: SimPolicy,
        options: SimOptions,
        progress: &'a mut dyn FnMut(&SimProgress),
    ) -> Result<Sim<'a>, SimulateError> {
        let node = &workload.node;
        let start = at(node.at);
        let signals = (policy == SimPolicy::Signals)
            .then(|| signals::SignalFeed::new(node.start_unix_s - EPOCH_SECS));
        let runtime = ScriptedRuntime::new();
        runtime.state().fs = Some((node.capacity, node.capacity - node.other_used));
        let config = GcConfig {
            policy: node.policy,
            order: match policy {
                SimPolicy::Adaptive => GcOrder::Adaptive,
                SimPolicy::Predictive | SimPolicy::Signals => GcOrder::Predictive,
                _ => GcOrder::KubeletOrder,
            },
            ..GcConfig::default()
        };
        let gc = match policy {
            SimPolicy::Clairvoyant => Gc::Reference {
                landed: BTreeMap::new(),
                online: None,
            },
            SimPolicy::Sieve => Gc::Reference {
                landed: BTreeMap::new(),
                online: Some(Box::new(online_orders::OnlineOrder::Sieve(
                    Default::default(),
                ))),
            },
            SimPolicy::S3Fifo => Gc::Reference {
                landed: BTreeMap::new(),
                online: Some(Box::new(online_orders::OnlineOrder::S3Fifo(
                    Default::default(),
                ))),
            },
            _ => {
                let store = Arc::new(scratch_store(policy, 0, start)?);
                let manager = ImageGcManager::new(runtime.clone(), store, config.clone())?;
                Gc::Manager {
                    manager: Box::new(match &signals {
                        Some(feed) => feed.fed(manager),
                        None => manager,
                    }),
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
            last_cycle: start,
            lines_done: 0,
            place: (0, 1),
            progress,
            ids: std::cell::RefCell::new(BTreeMap::new()),
            pending: Batch::new(),
            signals,
        })
    }

    /// Counts one step, refusing one past [`MAX_SIMULATED_STEPS`], and reports progress
    /// every [`PROGRESS_EVERY_STEPS`].
    fn step(&mut self, now: UnixNanos) -> Result<(), SimulateError> {
        self.stats.steps += 1;
        if self.stats.steps > self.options.max_steps {
            return Err(SimulateError::TooMuchWork {
                policy: self.policy.as_str(),
                limit: self.options.max_steps,
            });
        }
        if self.stats.steps.is_multiple_of(PROGRESS_EVERY_STEPS) {
            self.report(self.lines_done, now);
        }
        Ok(())
    }

    /// [`image_id`], from the cache.
    fn id(&self, name: &str) -> ImageId {
        self.ids
            .borrow_mut()
            .entry(name.to_owned())
            .or_insert_with(|| image_id(name))
            .clone()
    }

    /// Applies the writes held in [`Sim::pending`]: called before anything reads the store
    /// (a GC cycle, DeleteUnusedImages, a restart, [`Sim::settled_until`]).
    fn flush(&mut self) -> Result<(), SimulateError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        if let Gc::Manager { manager, .. } = &self.gc {
            manager.store().apply(&batch)?;
        }
        Ok(())
    }

    fn report(&mut self, lines_done: usize, now: UnixNanos) {
        let progress = SimProgress {
            policy: self.policy,
            policy_index: self.place.0,
            policies: self.place.1,
            lines_done,
            lines: self.workload.ops.len(),
            at_s: (now.0 - at(0.0).0) as f64 / 1e9,
            steps: self.stats.steps,
        };
        (self.progress)(&progress);
    }

    async fn run(&mut self) -> Result<(), SimulateError> {
        let workload = self.workload;
        for line in &workload.ops {
            if line.op.is_signal() && self.signals.is_none() {
                // A policy that reads no signals runs as if the line were not there.
                self.lines_done += 1;
                continue;
            }
            let now = at(line.at);
            self.advance_to(now).await?;
            self.step(now)?;
            match &line.op {
                WorkloadOp::Run { image, size, for_s } => {
                    self.start_run(now, image, *size, *for_s).await?
                }
                WorkloadOp::Restart => self.restart(now).await?,
                op => self.signal(op),
            }
            self.lines_done += 1;
        }
        // The rest: pulls landing and containers ending, with the GCs meanwhile.
        while let Some(&(when, _)) = self.events.keys().next() {
            self.advance_to(when).await?;
        }
        // The store as it ends (nothing reads it after, but a simulation leaves it whole).
        self.flush()
    }

    /// Runs every internal event and GC up to and including `now`: at one instant, events
    /// first, then the GC. With [`SimOptions::skip_idle_gc`], time jumps over the cycles
    /// that cannot change anything (see [`Sim::settled_until`]).
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
                    self.step(key.0)?;
                    self.handle(key.0, event).await?;
                }
                _ if self.next_gc <= now => {
                    let when = self.next_gc;
                    let settled = if self.options.skip_idle_gc {
                        self.flush()?;
                        self.settled_until(now)?
                    } else {
                        None
                    };
                    if let Some(bound) = settled.filter(|b| *b > when) {
                        // The ticks from `when` up to (not including) `bound` all find the
                        // state the last cycle left.
                        let ticks = (bound.0 - 1 - when.0) / self.period + 1;
                        let busy = !self.events.is_empty();
                        let running = !self.runtime.state().containers.is_empty();
                        let skipped = if running { ticks - 1 } else { ticks };
                        self.stats.gc_cycles_skipped += skipped as u64;
                        if busy {
                            self.stats.gc_cycles_skipped_busy += skipped as u64;
                        }
                        self.next_gc = UnixNanos(when.0 + ticks * self.period);
                        if running {
                            // A detect with a container running writes its image's last use
                            // (and its use's last sighting) at the cycle's time, overwriting
                            // the previous cycle's: the last of these ticks runs, so the store
                            // ends as if every one had.
                            let last = UnixNanos(when.0 + (ticks - 1) * self.period);
                            self.periodic_gc(last).await?;
                        }
                        continue;
                    }
                    self.next_gc = UnixNanos(when.0 + self.period);
                    self.periodic_gc(when).await?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// Until when (exclusive) every periodic GC provably finds what the last one found, so
    /// removes nothing either: `None` unless the last cycle removed nothing and nothing
    /// happened since. Time alone changes what a cycle may remove only through these
    /// instants, the bound's candidates:
    /// - the next event (a pull landing, a container ending: before the tick at its time);
    /// - the workload's next line at `now` (after the tick at its time, which is included);
    /// - with the space walk running (usage at or above the high threshold; below it, usage
    ///   stays put until an event or a line), an image not in use becoming older than MinAge
    ///   (first detected, or landed for the clairvoyant reference, plus MinAge); an image not
    ///   in use whose last use is not before the last cycle makes no bound (the kubelet's
    ///   "used too recently" keeps it only for the cycle at that time): no skipping;
    /// - with MaxAge, an image not in use passing it (its unused time plus MaxAge).
    ///
    /// The rest of a cycle does not depend on time: the adaptive order only changes which
    /// eligible image goes first (a cycle that removed nothing had none), and the heartbeat a
    /// skipped detect would write counts nowhere here (the simulated manager has no watch
    /// period, so no stretch is found unwatched).
    fn settled_until(&self, now: UnixNanos) -> Result<Option<UnixNanos>, SimulateError> {
        if !self.quiet {
            return Ok(None);
        }
        let mut bound = UnixNanos(now.0.saturating_add(1));
        if let Some(&(t, _)) = self.events.keys().next() {
            bound = bound.min(t);
        }
        let policy = &self.workload.node.policy;
        let capacity = self.workload.node.capacity;
        let available = capacity - self.used().min(capacity);
        let space_walk = !matches!(
            SpaceNeed::compute(capacity, available, policy),
            Ok(SpaceNeed {
                amount_to_free: None,
                ..
            })
        );
        let max_age = !policy.max_age.is_zero() && matches!(self.gc, Gc::Manager { .. });
        if !space_walk && !max_age {
            return Ok(Some(bound));
        }
        let in_use: BTreeSet<ImageId> = self
            .runtime
            .state()
            .containers
            .iter()
            .map(|c| c.image_id.clone())
            .collect();
        let since_last = self.last_cycle;
        let mut deadline = |d: UnixNanos| {
            if d > since_last {
                bound = bound.min(d);
            }
        };
        let plus = |t: UnixNanos, d: std::time::Duration| {
            UnixNanos(t.0.saturating_add(d.as_nanos().min(i64::MAX as u128) as i64))
        };
        match &self.gc {
            Gc::Manager { manager, .. } => {
                for r in manager.store().records()? {
                    if in_use.contains(&r.key.image_id) {
                        continue;
                    }
                    if space_walk {
                        if r.record.last_used >= since_last {
                            return Ok(None);
                        }
                        deadline(plus(r.record.first_detected, policy.min_age));
                    }
                    if max_age {
                        deadline(plus(unused_since(&r.record), policy.max_age));
                    }
                }
            }
            Gc::Reference { landed, .. } => {
                for (name, landed_at) in landed {
                    if !in_use.contains(&self.id(name)) {
                        deadline(plus(*landed_at, policy.min_age));
                    }
                }
            }
        }
        Ok(Some(bound))
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
                    id: self.id(&image),
                    repo_tags: vec![image.clone()],
                    repo_digests: vec![format!("{image}@{}", self.id(&image).as_str())],
                    size: pulling.size,
                    ..RuntimeImage::default()
                };
                let key = listed.record_key();
                self.runtime.state().images.push(listed);
                match &mut self.gc {
                    Gc::Reference { landed, online } => {
                        landed.insert(image.clone(), now);
                        if let Some(online) = online {
                            online.landed(&image, pulling.size);
                        }
                    }
                    Gc::Manager { .. } => {
                        if self.policy != SimPolicy::Kubelet {
                            // The pull's mark (`pull::ImageManager` marks what it pulled).
                            // (Applied with the next read: `Sim::flush`.)
                            self.pending.mark_used(key, now, Some(pulling.size));
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
        let id = self.id(image);
        self.runtime.state().images.iter().any(|i| i.id == id)
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
