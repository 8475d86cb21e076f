//! Deterministic simulation (feature `simulation`): seeded interleavings of the real
//! `ImageGcManager`, the real `ImageManager` and a real `Store` on the power-loss disk,
//! against a runtime that holds the ground truth (`world`) and parks every CRI call until a
//! seeded scheduler releases it. An oracle ([`oracle`]) judges the run after every step.
//!
//! How a run goes: the agent's operations (detect, GC, DeleteUnusedImages, the image cache,
//! pulls through the image manager) are futures the driver polls itself on one thread, inside
//! a current-thread tokio runtime with paused time. At each step the seed picks one thing to
//! happen: release one parked call (possibly failed, or a list answered late), start an
//! operation, move the kubelet-like workload on (a pod's pull, its container created,
//! started, exited, removed), remove an image behind imagekeeper's back, move the disk usage,
//! move the clock (forward, or back by at most [`CLOCK_BACK_LIMIT`] below the latest time, well
//! inside `FUTURE_STAMP_TOLERANCE`), cut the power now or arm a cut a few disk operations
//! ahead. After the pick the driver polls until every operation is parked at a gate or done
//! (a pull waiting on a blocking store call is waited for; an operation waiting on the cycle
//! lock is not: its holder is parked). A power cut drops every operation (the process dies),
//! recovers the disk with a seeded subset of its unsynced writes, checks the store and starts
//! a new agent on it.
//!
//! Invariants: a run is a function of its seed and options alone (no wall clock, no thread
//! timing decides anything: the only other thread is a blocking store call, and nothing else
//! moves while the driver waits for it); the first violation stops the run and carries the
//! last steps' trace.
//!
//! This file holds the run's types and the agent's start; beside it: `driver.rs` (a run's
//! set-up and step loop, the operations it starts), `workload.rs` (what moves the world),
//! `settle.rs` (polling to rest, judging finished operations, the power cut).

mod driver;
pub mod oracle;
mod settle;
mod workload;
pub(crate) mod world;

#[cfg(feature = "sim-mutants")]
pub mod mutants;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

use crate::clock::{Clock, ManualClock};
use crate::gc::{CycleTime, DetectReport, GcConfig, GcError, GcOrder, GcReport, ImageGcManager};
use crate::model::{RecordKey, UnixNanos};
use crate::pull::{ImageManager, PullConfig, PullError, PullPolicy, PullsInFlight};
use crate::store::power_loss::PowerLossDisk;
use crate::store::{CommitMode, Store, StoreError};

use oracle::Oracle;
use world::{ActorId, CatalogEntry, SimRuntime};

/// How far the clock may go back below the latest time it showed.
pub const CLOCK_BACK_LIMIT: Duration = Duration::from_secs(5 * 60);

/// The time a run starts at.
const START: UnixNanos = UnixNanos(1_800_000_000_000_000_000);

/// Pods the workload keeps alive at once.
const PODS: usize = 5;

/// Steps of trace a violation carries.
const TRACE_STEPS: usize = 24;

/// A known bug switched back on (feature `sim-mutants`), to prove the oracle can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// Detect writes blind upserts from its stale snapshot.
    BlindDetect,
    /// The GC walk removes without the last look before each RemoveImage.
    NoLastLook,
    /// Commits with `Durability::None`.
    NonDurable,
    /// The GC ignores the warm set.
    NoWarmKeep,
    /// GC ignores pins and irreplaceable images (the protections resolved at detect and the
    /// last look's read of the pins).
    NoProtections,
    /// The GC's byte walk removes one image more after it freed its amount (below the low
    /// line by more than one image's worth).
    OverFree,
    /// HighThresholdPercent 100 turns the byte-percentage pass off whatever MaxAge is (issue
    /// 37's regression); the kubelet turns it off only with MaxAge 0. The replay traces
    /// `high_100_*` catch it (tests/sim.rs).
    SpacePassOffAtHigh100,
}

impl Mutant {
    /// Every mutant, in the order `sim --mutant` lists them.
    pub const ALL: [Mutant; 7] = [
        Mutant::BlindDetect,
        Mutant::NoLastLook,
        Mutant::NonDurable,
        Mutant::NoWarmKeep,
        Mutant::NoProtections,
        Mutant::OverFree,
        Mutant::SpacePassOffAtHigh100,
    ];

    /// The mutant's name on the command line (`sim --mutant NAME`), kebab-case.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::BlindDetect => "blind-detect",
            Mutant::NoLastLook => "no-last-look",
            Mutant::NonDurable => "non-durable",
            Mutant::NoWarmKeep => "no-warm-keep",
            Mutant::NoProtections => "no-protections",
            Mutant::OverFree => "over-free",
            Mutant::SpacePassOffAtHigh100 => "space-pass-off-at-high-100",
        }
    }

    /// The mutant [`Mutant::name`] gives `name`, if any.
    pub fn parse(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// One run's settings.
#[derive(Clone, Copy, Debug)]
pub struct SimOptions {
    /// The seed: every choice of the run follows from it.
    pub seed: u64,
    /// Steps to run (fewer if a violation stops the run).
    pub steps: u64,
    /// The known bug to switch on for this run (needs feature `sim-mutants`).
    pub mutant: Option<Mutant>,
}

/// The space walk's order a seed runs under, from a generator of its own so the rest of a
/// seed's choices stay as they were: the kubelet's on half the seeds (issue 26: the oracle
/// holds under every order), `adaptive` or `predictive` (issue 39) on a quarter each (the
/// seeds that ran `adaptive` before `predictive` existed, split in two; the kubelet's seeds
/// are unchanged).
pub fn drawn_order(seed: u64) -> GcOrder {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x4f52_4445);
    if !rng.bool() {
        GcOrder::KubeletOrder
    } else if rng.bool() {
        GcOrder::Predictive
    } else {
        GcOrder::Adaptive
    }
}

/// The first invariant a run broke.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The step (from 1) after which the oracle found it.
    pub step: u64,
    /// Which invariant broke, and how.
    pub message: String,
    /// The steps before it, oldest first.
    pub trace: Vec<String>,
}

/// What one run did.
#[derive(Clone, Debug)]
pub struct SimOutcome {
    /// The run's seed.
    pub seed: u64,
    /// Steps run (the last is the violation's, if any).
    pub steps: u64,
    /// Power cuts the run went through.
    pub crashes: u64,
    /// RemoveImage calls imagekeeper issued.
    pub removals: u64,
    /// GarbageCollect cycles over the high threshold, judged for liveness.
    pub over_threshold: u64,
    /// Uses acknowledged, and acknowledged uses checked against the store.
    pub acknowledged: u64,
    /// Acknowledged uses checked against the store, summed over the steps.
    pub ack_checks: u64,
    /// GC and DeleteUnusedImages cycles judged for the eligible images they left.
    pub quiet_cycles: u64,
    /// Removals a GC made for the inode rule (issue 28).
    pub inode_removals: u64,
    /// Removals a GC made for the byte budget (issue 28).
    pub budget_removals: u64,
    /// The first invariant the run broke (`None`: the run kept them all).
    pub violation: Option<Violation>,
}

/// A run that could not be set up (not a finding of the oracle).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The current-thread tokio runtime could not be built.
    #[error("building the runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The store did not open on the power-loss disk.
    #[error("opening the store: {0}")]
    Store(#[from] StoreError),
    /// The GC manager or image manager refused the run's configuration.
    #[error("setting up the agent: {0}")]
    Setup(String),
    /// A mutant was asked for in a build without feature `sim-mutants` (its name).
    #[error("mutant {0} needs a build with the sim-mutants feature")]
    MutantsNotBuilt(&'static str),
}

/// Runs one seed.
pub fn run_seed(options: SimOptions) -> Result<SimOutcome, SimError> {
    #[cfg(feature = "sim-mutants")]
    mutants::set(options.mutant);
    #[cfg(not(feature = "sim-mutants"))]
    if let Some(m) = options.mutant {
        return Err(SimError::MutantsNotBuilt(m.name()));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    let result = rt.block_on(async {
        let mut sim = Sim::new(options)?;
        sim.run().await;
        Ok(sim.outcome())
    });
    #[cfg(feature = "sim-mutants")]
    mutants::set(None);
    result
}

/// A cycle time that tells the simulator what the cycle read.
struct RecordingTime {
    clock: Arc<ManualClock>,
    read: Arc<Mutex<Option<UnixNanos>>>,
}

impl CycleTime for RecordingTime {
    fn read(self) -> UnixNanos {
        let now = self.clock.now();
        *self.read.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        now
    }
}

/// Wakes one operation: sets its flag and wakes the driver if it waits.
struct ActorWaker {
    woken: AtomicBool,
    driver: Arc<Mutex<Option<Waker>>>,
}

impl Wake for ActorWaker {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        let waiting = self.driver.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = waiting {
            w.wake();
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Detect,
    Gc,
    DeleteUnused,
    Cache,
    Pull {
        uid: String,
    },
    /// A warm cycle: the warm plan, then its pulls through the image manager.
    Warm,
    /// The container events watcher marking a created container's images.
    Event {
        container: String,
    },
}

enum Done {
    Detect(Result<DetectReport, GcError>),
    Gc(GcReport),
    Cache,
    Pull(Result<String, PullError>),
    Event(Result<Vec<RecordKey>, GcError>, UnixNanos),
    /// The image ids a warm cycle pulled.
    Warm(Vec<String>),
}

struct Actor {
    kind: Kind,
    /// The world's churn and the GC's rescues when the operation started.
    churn_at_start: u64,
    rescues_at_start: u64,
    future: Pin<Box<dyn Future<Output = Done>>>,
    waker: Arc<ActorWaker>,
    cycle_now: Arc<Mutex<Option<UnixNanos>>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    NeedsImage,
    Pulling,
    Pulled(String),
    Container(String),
}

#[derive(Clone, Debug)]
struct Pod {
    uid: String,
    image: String,
    policy: PullPolicy,
    phase: Phase,
}

struct Agent {
    store: Arc<Store>,
    gc: Arc<ImageGcManager<SimRuntime>>,
    pulls: Arc<ImageManager<SimRuntime, Store>>,
}

struct Sim {
    options: SimOptions,
    /// The one source of randomness: a run is a function of its seed.
    rng: fastrand::Rng,
    step: u64,
    runtime: SimRuntime,
    clock: Arc<ManualClock>,
    latest: UnixNanos,
    disk: PowerLossDisk,
    mode: CommitMode,
    config: GcConfig,
    agent: Agent,
    actors: BTreeMap<ActorId, Actor>,
    next_actor: ActorId,
    pods: Vec<Pod>,
    next_uid: u64,
    next_container: u64,
    oracle: Oracle,
    trace: VecDeque<String>,
    crashes: u64,
    /// Cycles judged for what they left (see `judge_leftovers`).
    quiet_cycles: u64,
    violation: Option<Violation>,
    driver: Arc<Mutex<Option<Waker>>>,
}

/// The registry: ten images, the sandbox image pinned by the runtime.
fn catalog() -> Vec<CatalogEntry> {
    let mut entries = vec![CatalogEntry {
        name: "registry.k8s.io/pause:3.10".to_owned(),
        id: "sha256:pause".to_owned(),
        size: 1 << 20,
        pinned: true,
        imported: false,
    }];
    for i in 0..9u64 {
        entries.push(CatalogEntry {
            name: format!("docker.io/library/app{i}:1"),
            id: format!("sha256:app{i}"),
            size: (40 + 20 * (i % 5)) << 20,
            pinned: false,
            imported: false,
        });
    }
    // Side-loaded (`ctr images import`): no repo digest, irreplaceable.
    entries.push(CatalogEntry {
        name: "docker.io/airgap/tool:1".to_owned(),
        id: "sha256:airgap".to_owned(),
        size: 30 << 20,
        pinned: false,
        imported: true,
    });
    entries
}

/// The last looks that kept a victim, over the agent's life.
fn rescues(agent: &Agent) -> u64 {
    agent.gc.metrics().rescued().iter().map(|(_, n)| n).sum()
}

fn label() -> &'static std::path::Path {
    std::path::Path::new("sim.redb")
}

fn start_agent(
    store: Arc<Store>,
    runtime: &SimRuntime,
    config: &GcConfig,
    clock: &Arc<ManualClock>,
) -> Result<Agent, SimError> {
    let in_flight = PullsInFlight::new();
    let gc = ImageGcManager::new(runtime.clone(), store.clone(), config.clone())
        .map_err(|e| SimError::Setup(e.to_string()))?
        .with_pulls_in_flight(in_flight.clone())
        .with_release_pause(Arc::new(world::SimPause(runtime.clone())));
    let pull_config = PullConfig {
        serialize_image_pulls: false,
        max_parallel_image_pulls: None,
        registry_pull_qps: 0.0,
        ..PullConfig::default()
    };
    let clock: Arc<dyn Clock> = clock.clone();
    let pulls = ImageManager::new(
        &pull_config,
        Arc::new(runtime.clone()),
        store.clone(),
        clock,
    )
    .map_err(|e| SimError::Setup(e.to_string()))?
    .with_pulls_in_flight(in_flight);
    Ok(Agent {
        store,
        gc: Arc::new(gc),
        pulls: Arc::new(pulls),
    })
}
