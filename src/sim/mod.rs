//! Deterministic simulation (feature `simulation`): seeded interleavings of the real
//! `ImageGcManager`, the real `ImageManager` and a real `Store` on the power-loss disk,
//! against a runtime that holds the ground truth ([`world`]) and parks every CRI call until a
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

pub mod oracle;
pub mod world;

#[cfg(feature = "sim-mutants")]
pub mod mutants;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use crate::clock::{Clock, ManualClock};
use crate::gc::{
    ByteBudget, CycleTime, DetectReport, GcConfig, GcError, GcOrder, GcPolicy, GcReport,
    ImageGcManager, InodeThresholds,
};
use crate::gc::{Verdict, space_verdict};
use crate::model::{ContainerState, ImageId, RecordKey, UnixNanos};
use crate::pull::{ImageManager, PodRef, PullConfig, PullError, PullPolicy, PullsInFlight};
use crate::store::power_loss::PowerLossDisk;
use crate::store::{CommitMode, Store, StoreError};
use crate::warm::{PlanInput, WarmEntry, WarmSet, plan};

use oracle::{Ack, Oracle};
use world::{ActorId, CatalogEntry, Release, SimContainer, SimRuntime, World, set_current_actor};

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
    pub const ALL: [Mutant; 7] = [
        Mutant::BlindDetect,
        Mutant::NoLastLook,
        Mutant::NonDurable,
        Mutant::NoWarmKeep,
        Mutant::NoProtections,
        Mutant::OverFree,
        Mutant::SpacePassOffAtHigh100,
    ];

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

    pub fn parse(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// One run's settings.
#[derive(Clone, Copy, Debug)]
pub struct SimOptions {
    pub seed: u64,
    pub steps: u64,
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
    pub step: u64,
    pub message: String,
    /// The steps before it, oldest first.
    pub trace: Vec<String>,
}

/// What one run did.
#[derive(Clone, Debug)]
pub struct SimOutcome {
    pub seed: u64,
    pub steps: u64,
    pub crashes: u64,
    /// RemoveImage calls imagekeeper issued.
    pub removals: u64,
    /// GarbageCollect cycles over the high threshold, judged for liveness.
    pub over_threshold: u64,
    /// Uses acknowledged, and acknowledged uses checked against the store.
    pub acknowledged: u64,
    pub ack_checks: u64,
    /// GC and DeleteUnusedImages cycles judged for the eligible images they left.
    pub quiet_cycles: u64,
    /// Removals a GC made for the inode rule and for the byte budget (issue 28).
    pub inode_removals: u64,
    pub budget_removals: u64,
    pub violation: Option<Violation>,
}

/// A run that could not be set up (not a finding of the oracle).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("building the runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("opening the store: {0}")]
    Store(#[from] StoreError),
    #[error("setting up the agent: {0}")]
    Setup(String),
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

impl Sim {
    fn new(options: SimOptions) -> Result<Sim, SimError> {
        let mut rng = fastrand::Rng::with_seed(options.seed);
        let catalog = catalog();
        let mut world = World {
            sandbox_image_id: catalog[0].id.clone(),
            capacity: 1 << 30,
            other_used: rng.u64(..400) << 20,
            // One inode per 64 KiB of images: 16384 for the whole disk's worth, more than
            // the filesystem has, so the inode rule runs on its own in some runs.
            inodes: 12_000,
            other_inodes: rng.u64(..5_000),
            latest: START,
            protect_irreplaceable: true,
            ..World::default()
        };
        world.catalog = catalog.clone();
        // The node starts with the sandbox image and a few others.
        for entry in &catalog {
            if entry.pinned || rng.bool() {
                world.add_image(entry);
            }
        }
        let runtime = SimRuntime::new(world);
        let mode = if options.mutant == Some(Mutant::NonDurable) {
            CommitMode::NonDurableForTests
        } else {
            CommitMode::Durable
        };
        let policy = GcPolicy {
            high_threshold_percent: 70 + i64::try_from(rng.u64(..20)).unwrap_or(0),
            low_threshold_percent: 50 + i64::try_from(rng.u64(..15)).unwrap_or(0),
            min_age: Duration::from_secs(rng.u64(..3) * 60),
            max_age: if rng.bool() {
                Duration::ZERO
            } else {
                Duration::from_secs(3600 + rng.u64(..3600))
            },
            // The inode rule and the byte budget, each in a third of the runs.
            inodes: (rng.u64(..3) == 0).then(|| InodeThresholds {
                high: 60 + i64::try_from(rng.u64(..20)).unwrap_or(0),
                low: 40 + i64::try_from(rng.u64(..15)).unwrap_or(0),
            }),
            bytes: (rng.u64(..3) == 0).then(|| {
                let high = (300 + rng.u64(..300)) << 20;
                ByteBudget {
                    high,
                    low: high - ((50 + rng.u64(..150)) << 20),
                }
            }),
        };
        // The warm set: one or two of the registry's images, from a generator of its own so
        // the rest of a seed's choices stay as they were.
        let mut warm_rng = fastrand::Rng::with_seed(options.seed ^ 0x5741_524d);
        let mut warm_entries = Vec::new();
        for _ in 0..1 + warm_rng.usize(..2) {
            let entry = &catalog[1 + warm_rng.usize(..catalog.len() - 1)];
            if !warm_entries
                .iter()
                .any(|e: &WarmEntry| e.image == entry.name)
            {
                warm_entries.push(WarmEntry {
                    image: entry.name.clone(),
                    runtime_handler: String::new(),
                    until: None,
                    lifetime: None,
                    size_hint: Some(entry.size),
                    origin: "sim".to_owned(),
                });
                runtime.world().warm.insert(entry.id.clone());
            }
        }
        let order = drawn_order(options.seed);
        let config = GcConfig {
            policy,
            order,
            sandbox_image: Some(catalog[0].name.clone()),
            warm: WarmSet::new(warm_entries),
            protect_irreplaceable: true,
            ..GcConfig::default()
        };
        let clock = Arc::new(ManualClock::new(START));
        let disk = PowerLossDisk::new(Vec::new(), None);
        let store = Store::open_with_backend(disk.backend(), label(), START, mode)?;
        let agent = start_agent(Arc::new(store), &runtime, &config, &clock)?;
        Ok(Sim {
            options,
            rng,
            step: 0,
            runtime,
            clock,
            latest: START,
            disk,
            mode,
            config,
            agent,
            actors: BTreeMap::new(),
            next_actor: 1,
            pods: Vec::new(),
            next_uid: 0,
            next_container: 0,
            oracle: Oracle::default(),
            trace: VecDeque::new(),
            crashes: 0,
            quiet_cycles: 0,
            violation: None,
            driver: Arc::new(Mutex::new(None)),
        })
    }

    fn outcome(&self) -> SimOutcome {
        SimOutcome {
            seed: self.options.seed,
            steps: self.step,
            crashes: self.crashes,
            removals: self.oracle.removals,
            over_threshold: self.oracle.over_threshold,
            acknowledged: self.oracle.acknowledged,
            ack_checks: self.oracle.ack_checks,
            quiet_cycles: self.quiet_cycles,
            inode_removals: self.oracle.inode_removals,
            budget_removals: self.oracle.budget_removals,
            violation: self.violation.clone(),
        }
    }

    fn pick(&mut self, n: usize) -> usize {
        self.rng.usize(..n.max(1))
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.u64(..100) < percent
    }

    fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_STEPS {
            self.trace.pop_front();
        }
        let now = self.clock.now().0.saturating_sub(START.0) / 1_000_000_000;
        self.trace
            .push_back(format!("step {} t=+{now}s {line}", self.step));
    }

    fn fail(&mut self, message: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                step: self.step,
                message,
                trace: self.trace.iter().cloned().collect(),
            });
        }
    }

    async fn run(&mut self) {
        while self.step < self.options.steps && self.violation.is_none() {
            self.step += 1;
            self.one_step();
            self.settle().await;
            if self.violation.is_none() && self.disk.is_cut() {
                self.crash();
            }
            if self.violation.is_none() {
                self.judge();
            }
        }
    }

    /// Picks and does one thing.
    fn one_step(&mut self) {
        // Time passes a little at most steps.
        if self.chance(60) {
            let by = Duration::from_secs(self.rng.u64(..20));
            self.clock.advance(by);
            self.latest = self.latest.max(self.clock.now());
        }
        let latest = self.latest;
        self.runtime.world().latest = latest;
        let parked = self.runtime.world().parked();
        let roll = self.rng.u64(..100);
        match roll {
            0..=44 if !parked.is_empty() => {
                let id = parked[self.pick(parked.len())];
                let fail = self.chance(4);
                let late = self.chance(30);
                let label = self
                    .runtime
                    .world()
                    .calls
                    .get(&id)
                    .map(|c| {
                        let kind = self
                            .actors
                            .get(&c.actor)
                            .map(|a| format!("{:?}", a.kind))
                            .unwrap_or_default();
                        format!("actor {} ({kind}) {}", c.actor, c.label)
                    })
                    .unwrap_or_default();
                self.note(format!(
                    "release {label}{}{}",
                    if fail { " (fails)" } else { "" },
                    if late && label.contains("ListImages") && !label.contains("answer") {
                        " (answered late)"
                    } else {
                        ""
                    }
                ));
                self.runtime.world().release(id, Release { fail, late });
            }
            0..=59 => self.start_operation(),
            60..=84 => self.workload(),
            85..=88 => self.external_removal(),
            89..=90 => self.disk_usage(),
            91..=92 => self.pin_or_unpin(),
            93..=96 => self.clock_jump(),
            97 => {
                self.note("power cut".to_owned());
                self.disk.cut_now();
            }
            _ => {
                let n = self.rng.u64(..40);
                self.note(format!("power cut armed in {n} disk operations"));
                self.disk.cut_after(n);
            }
        }
    }

    fn spawn(
        &mut self,
        kind: Kind,
        future: Pin<Box<dyn Future<Output = Done>>>,
        cycle_now: Arc<Mutex<Option<UnixNanos>>>,
    ) -> ActorId {
        let id = self.next_actor;
        self.next_actor += 1;
        let waker = Arc::new(ActorWaker {
            woken: AtomicBool::new(true),
            driver: self.driver.clone(),
        });
        let churn_at_start = self.runtime.world().churn;
        let rescues_at_start = rescues(&self.agent);
        self.actors.insert(
            id,
            Actor {
                kind,
                churn_at_start,
                rescues_at_start,
                future,
                waker,
                cycle_now,
            },
        );
        id
    }

    fn running(&self, kind: &Kind) -> bool {
        self.actors.values().any(|a| &a.kind == kind)
    }

    fn start_operation(&mut self) {
        let kind = match self.rng.u64(..10) {
            0..=3 => Kind::Detect,
            4..=6 => Kind::Gc,
            7 => Kind::DeleteUnused,
            8 => Kind::Cache,
            _ => Kind::Warm,
        };
        // One loop of each kind, as the agent runs them.
        if self.running(&kind) {
            return;
        }
        let gc = self.agent.gc.clone();
        let read = Arc::new(Mutex::new(None));
        let time = RecordingTime {
            clock: self.clock.clone(),
            read: read.clone(),
        };
        let future: Pin<Box<dyn Future<Output = Done>>> = match kind {
            Kind::Detect => Box::pin(async move { Done::Detect(gc.detect(time).await) }),
            Kind::Gc => Box::pin(async move { Done::Gc(gc.garbage_collect(time).await) }),
            Kind::DeleteUnused => {
                Box::pin(async move { Done::Gc(gc.delete_unused_images(time).await) })
            }
            Kind::Warm => {
                let entries = self.config.warm.entries().to_vec();
                let policy = self.config.policy;
                let now = self.clock.now();
                Box::pin(async move { Done::Warm(warm_cycle(&gc, &entries, &policy, now).await) })
            }
            _ => Box::pin(async move {
                let _ = gc.refresh_image_cache().await;
                Done::Cache
            }),
        };
        let id = self.spawn(kind.clone(), future, read);
        self.note(format!("start {kind:?} as actor {id}"));
    }

    /// The kubelet-like workload: keeps [`PODS`] pods, each pulling its image through
    /// imagekeeper, then creating, starting, stopping and removing its container.
    fn workload(&mut self) {
        if self.pods.len() < PODS {
            // Neither the sandbox image (first) nor the side-loaded one (last).
            let catalog_len = self.runtime.world().catalog.len();
            let entry = 1 + self.pick(catalog_len - 2);
            let image = self.runtime.world().catalog[entry].name.clone();
            self.next_uid += 1;
            let policy = if self.chance(30) {
                PullPolicy::Always
            } else {
                PullPolicy::IfNotPresent
            };
            self.pods.push(Pod {
                uid: format!("pod-{}", self.next_uid),
                image,
                policy,
                phase: Phase::NeedsImage,
            });
        }
        let index = self.pick(self.pods.len());
        let pod = self.pods[index].clone();
        match pod.phase {
            Phase::NeedsImage => self.start_pull(index),
            Phase::Pulling => {}
            Phase::Pulled(id) => {
                let present = self.runtime.world().images.contains_key(&id);
                if present {
                    self.next_container += 1;
                    let cid = format!("c{}", self.next_container);
                    self.runtime.world().containers.insert(
                        cid.clone(),
                        SimContainer {
                            image_id: ImageId::new(id.clone()),
                            state: ContainerState::Created,
                        },
                    );
                    self.runtime.world().churn += 1;
                    self.note(format!("{} creates container {cid} of {id}", pod.uid));
                    self.pods[index].phase = Phase::Container(cid.clone());
                    self.container_event(cid);
                } else {
                    self.note(format!("{} finds {id} gone; pulls again", pod.uid));
                    self.pods[index].phase = Phase::NeedsImage;
                }
            }
            Phase::Container(cid) => {
                let mut world = self.runtime.world();
                let state = world.containers.get(&cid).map(|c| c.state);
                let what = match state {
                    Some(ContainerState::Created) => {
                        if let Some(c) = world.containers.get_mut(&cid) {
                            c.state = ContainerState::Running;
                        }
                        "starts"
                    }
                    Some(ContainerState::Running) => {
                        if let Some(c) = world.containers.get_mut(&cid) {
                            c.state = ContainerState::Exited;
                        }
                        "exits"
                    }
                    _ => {
                        world.containers.remove(&cid);
                        "is removed"
                    }
                };
                world.churn += 1;
                drop(world);
                self.note(format!("{} container {cid} {what}", pod.uid));
                if what == "is removed" {
                    self.pods.remove(index);
                }
            }
        }
    }

    /// The runtime's CONTAINER_CREATED_EVENT reaches the agent's watcher, which marks the
    /// container's images at once (one event at a time, as the watcher does; an event that
    /// finds the watcher busy is lost, as the watcher is only an accelerator).
    fn container_event(&mut self, container: String) {
        let busy = self
            .actors
            .values()
            .any(|a| matches!(a.kind, Kind::Event { .. }));
        if busy || !self.chance(70) {
            return;
        }
        let gc = self.agent.gc.clone();
        let now = self.clock.now();
        let id = container.clone();
        let future: Pin<Box<dyn Future<Output = Done>>> =
            Box::pin(async move { Done::Event(gc.mark_container_used(&id, now).await, now) });
        let actor = self.spawn(
            Kind::Event {
                container: container.clone(),
            },
            future,
            Arc::new(Mutex::new(None)),
        );
        self.note(format!(
            "the events watcher marks {container} as actor {actor}"
        ));
    }

    fn start_pull(&mut self, index: usize) {
        let pod = self.pods[index].clone();
        let pulls = self.agent.pulls.clone();
        let pod_ref = PodRef {
            uid: pod.uid.clone(),
            namespace: "sim".to_owned(),
            name: pod.uid.clone(),
            ..PodRef::default()
        };
        let image = pod.image.clone();
        let policy = pod.policy;
        let future: Pin<Box<dyn Future<Output = Done>>> = Box::pin(async move {
            Done::Pull(
                pulls
                    .ensure_image_exists(&pod_ref, &image, policy, &[], "")
                    .await,
            )
        });
        let kind = Kind::Pull {
            uid: pod.uid.clone(),
        };
        let id = self.spawn(kind, future, Arc::new(Mutex::new(None)));
        self.pods[index].phase = Phase::Pulling;
        self.note(format!(
            "{} pulls {} ({:?}) as actor {id}",
            pod.uid, pod.image, pod.policy
        ));
    }

    fn external_removal(&mut self) {
        let world = self.runtime.world();
        let candidates: Vec<String> = world
            .images
            .keys()
            .filter(|id| {
                **id != world.sandbox_image_id
                    && !world
                        .containers
                        .values()
                        .any(|c| c.image_id.as_str() == *id)
            })
            .cloned()
            .collect();
        if candidates.is_empty() {
            return;
        }
        drop(world);
        let id = candidates[self.pick(candidates.len())].clone();
        let mut world = self.runtime.world();
        world.images.remove(&id);
        world.churn += 1;
        drop(world);
        self.note(format!("{id} removed behind imagekeeper's back"));
    }

    /// An operator pins a catalog image (by tag or id; no expiry, a lifetime past any run, or
    /// one already over) or unpins one, straight on the store (as `imagekeeper pin` does
    /// without an agent, or the agent does for the admin socket).
    fn pin_or_unpin(&mut self) {
        let pins = self.runtime.world().pins.clone();
        if !pins.is_empty() && self.chance(40) {
            let (name, _) = pins[self.pick(pins.len())].clone();
            // Out of the ground truth first: the world's pins stay a subset of the store's. A
            // pin change is a change of what is eligible: a cycle in flight read the pins
            // before it, so it is not judged as quiet (invariant 4).
            self.runtime.world().pins.retain(|(n, _)| *n != name);
            self.runtime.world().churn += 1;
            let mut batch = crate::store::Batch::new();
            batch.remove_pin(crate::model::PinKey::new(name.clone(), ""));
            let outcome = self.agent.store.apply(&batch);
            if outcome.is_err() {
                // It may still be there: the liveness checks count it as pinned.
                self.runtime.world().uncertain_pins.push(name.clone());
            }
            self.note(format!(
                "unpin {name}: {:?}",
                outcome.map_err(|e| e.to_string())
            ));
            return;
        }
        let catalog = self.runtime.world().catalog.clone();
        let entry = catalog[self.pick(catalog.len())].clone();
        let name = if self.rng.bool() {
            entry.name
        } else {
            entry.id
        };
        let until = match self.rng.u8(..3) {
            0 => UnixNanos::NEVER,
            // Ten years on: past any run, whatever the clock does.
            1 => START.saturating_add(Duration::from_secs(10 * 365 * 86_400)),
            // Over already: protects nothing.
            _ => UnixNanos(1),
        };
        let mut batch = crate::store::Batch::new();
        batch.put_pin(
            crate::model::PinKey::new(name.clone(), ""),
            crate::model::ImagePin {
                created_at: self.clock.now(),
                until,
                reason: "sim".to_owned(),
            },
        );
        let outcome = self.agent.store.apply(&batch);
        let mut world = self.runtime.world();
        if outcome.is_ok() {
            world.pins.retain(|(n, _)| *n != name);
            world.pins.push((name.clone(), until));
        } else {
            // The commit may have landed or not: the store holds this pin or the one it would
            // have replaced, so neither is ground truth (a pin already over that replaced one
            // in force left nothing in force). The liveness checks count the name as pinned
            // if either protects.
            let latest = world.latest;
            let in_force = |until: UnixNanos| until == UnixNanos::NEVER || until > latest;
            let before_in_force = world
                .pins
                .iter()
                .any(|(n, before)| *n == name && in_force(*before));
            world.pins.retain(|(n, _)| *n != name);
            if before_in_force || until != UnixNanos(1) {
                world.uncertain_pins.push(name.clone());
            }
        }
        drop(world);
        self.note(format!(
            "pin {name} until {}: {:?}",
            until.0,
            outcome.map_err(|e| e.to_string())
        ));
    }

    fn disk_usage(&mut self) {
        let mb = self.rng.u64(..200) << 20;
        let mut world = self.runtime.world();
        if self.rng.bool() {
            world.other_used = world.other_used.saturating_add(mb).min(700 << 20);
        } else {
            world.other_used = world.other_used.saturating_sub(mb);
        }
        let used = world.other_used >> 20;
        drop(world);
        self.note(format!("other data on the image filesystem now {used} MiB"));
    }

    fn clock_jump(&mut self) {
        let now = self.clock.now();
        if self.chance(60) {
            let by = Duration::from_secs(self.rng.u64(..7200));
            self.clock.advance(by);
            self.latest = self.latest.max(self.clock.now());
            self.note(format!("clock jumps forward {}s", by.as_secs()));
        } else {
            let floor = self.latest.saturating_sub(CLOCK_BACK_LIMIT);
            let span = u64::try_from(now.0.saturating_sub(floor.0)).unwrap_or(0);
            let back = if span == 0 { 0 } else { self.rng.u64(..span) };
            let to = UnixNanos(now.0.saturating_sub(i64::try_from(back).unwrap_or(0)));
            self.clock.set(to);
            self.note(format!("clock jumps back {}s", back / 1_000_000_000));
        }
    }

    /// Polls until every operation is parked at a gate or done.
    async fn settle(&mut self) {
        loop {
            let mut progressed = false;
            let ids: Vec<ActorId> = self.actors.keys().copied().collect();
            for id in ids {
                let polled = match self.actors.get_mut(&id) {
                    Some(actor) if actor.waker.woken.swap(false, Ordering::SeqCst) => {
                        let waker = Waker::from(actor.waker.clone());
                        let mut cx = Context::from_waker(&waker);
                        set_current_actor(id);
                        let polled = actor.future.as_mut().poll(&mut cx);
                        set_current_actor(0);
                        polled
                    }
                    _ => continue,
                };
                progressed = true;
                if let Poll::Ready(done) = polled
                    && let Some(actor) = self.actors.remove(&id)
                {
                    self.finish(id, actor, done);
                }
            }
            if progressed {
                continue;
            }
            // A pull that is neither parked nor done waits on a blocking store call: wait for
            // it (nothing else moves meanwhile). Anything else unparked waits on a lock whose
            // holder is parked.
            let blocked = {
                let world = self.runtime.world();
                self.actors
                    .iter()
                    .any(|(id, a)| matches!(a.kind, Kind::Pull { .. }) && !world.is_parked(*id))
            };
            if !blocked {
                return;
            }
            let wakers: Vec<Arc<ActorWaker>> =
                self.actors.values().map(|a| a.waker.clone()).collect();
            let driver = self.driver.clone();
            std::future::poll_fn(|cx| {
                let woken = || wakers.iter().any(|w| w.woken.load(Ordering::SeqCst));
                if woken() {
                    return Poll::Ready(());
                }
                *driver.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
                if woken() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }

    /// An operation returned.
    fn finish(&mut self, id: ActorId, actor: Actor, done: Done) {
        let cut = self.disk.is_cut();
        let cycle_now = *actor.cycle_now.lock().unwrap_or_else(|p| p.into_inner());
        match done {
            Done::Pull(result) => {
                let Kind::Pull { .. } = actor.kind else {
                    return;
                };
                let Some(index) = self.pod_of_actor(&actor) else {
                    return;
                };
                let uid = self.pods[index].uid.clone();
                let pulled = {
                    let mut world = self.runtime.world();
                    world.churn += 1;
                    world.pulls.remove(&uid).is_some()
                };
                match result {
                    Ok(image_ref) if !cut => {
                        self.note(format!("actor {id}: {uid} pull returned {image_ref}"));
                        let generation = self.runtime.world().generation(&image_ref);
                        if let (true, Some(generation)) = (pulled, generation) {
                            self.oracle.acknowledge(
                                RecordKey::new(image_ref.clone(), ""),
                                Ack {
                                    at: self.clock.now(),
                                    generation,
                                    what: format!("pull by {uid} (actor {id})"),
                                },
                            );
                        }
                        self.pods[index].phase = Phase::Pulled(image_ref);
                    }
                    Ok(_) => self.pods[index].phase = Phase::NeedsImage,
                    Err(e) => {
                        self.note(format!("actor {id}: {uid} pull failed: {}", e.reason()));
                        self.pods[index].phase = Phase::NeedsImage;
                    }
                }
            }
            Done::Detect(result) => {
                let seen = self.runtime.world().seen.remove(&id);
                match (result, cycle_now, seen) {
                    (Ok(report), Some(now), Some(seen)) if !cut && report.committed => {
                        self.note(format!("actor {id}: detect committed"));
                        let world = self.runtime.world();
                        let mut acks = Vec::new();
                        for image in seen.in_use() {
                            if let Some(generation) = world.generation(&image) {
                                acks.push((image, generation));
                            }
                        }
                        drop(world);
                        for (image, generation) in acks {
                            self.oracle.acknowledge(
                                RecordKey::new(image, ""),
                                Ack {
                                    at: now,
                                    generation,
                                    what: format!("detect (actor {id}) saw it in use"),
                                },
                            );
                        }
                    }
                    (Ok(_), _, _) => self.note(format!("actor {id}: detect done")),
                    (Err(e), _, _) => self.note(format!("actor {id}: detect failed: {e}")),
                }
            }
            Done::Gc(report) => {
                self.runtime.world().seen.remove(&id);
                let fs = self.runtime.world().fs_answers.remove(&id);
                self.runtime.world().last_inodes.remove(&id);
                self.note(format!(
                    "actor {id}: {:?} removed {} ({} bytes){}",
                    actor.kind,
                    report.removed.len(),
                    report.freed,
                    report
                        .error
                        .as_ref()
                        .map(|e| format!(", error: {e}"))
                        .unwrap_or_default()
                ));
                if !cut {
                    if let Some(message) = self.oracle.judge_cycle(
                        id,
                        &report,
                        fs,
                        cycle_now,
                        &self.config.policy,
                        self.config.order,
                    ) {
                        self.fail(message);
                    } else if let Some(message) = self.judge_leftovers(&actor, &report, cycle_now) {
                        self.fail(message);
                    }
                } else {
                    self.oracle.forget_cycle(id);
                }
            }
            Done::Event(Ok(keys), now) if !cut => {
                let acks: Vec<(RecordKey, u64)> = {
                    let world = self.runtime.world();
                    keys.into_iter()
                        .filter_map(|k| {
                            let g = world.generation(k.image_id.as_str())?;
                            Some((k, g))
                        })
                        .collect()
                };
                for (key, generation) in acks {
                    self.oracle.acknowledge(
                        key,
                        Ack {
                            at: now,
                            generation,
                            what: format!("container event (actor {id})"),
                        },
                    );
                }
            }
            Done::Warm(pulled) => {
                let looped = {
                    let mut world = self.runtime.world();
                    world.churn += 1;
                    world.pulls.remove("");
                    pulled
                        .iter()
                        .find(|id| world.removed_by_imagekeeper.contains(*id))
                        .cloned()
                };
                self.note(format!("actor {id}: warm cycle pulled {pulled:?}"));
                if let Some(image) = looped {
                    self.fail(format!(
                        "invariant 7: the warm cycle pulled {image} again after imagekeeper removed it (a pull/remove loop)"
                    ));
                }
            }
            Done::Event(..) | Done::Cache => {}
        }
    }

    /// What a cycle that saw no change of the ground truth (no container, pull or image came
    /// or went, no victim rescued) and no removal failure left behind: a GC that gave up
    /// (`InsufficientSpace`) or a DeleteUnusedImages must leave no eligible image (4), and a
    /// walk must leave none that comes before its last removal (5).
    fn judge_leftovers(
        &mut self,
        actor: &Actor,
        report: &GcReport,
        cycle_now: Option<UnixNanos>,
    ) -> Option<String> {
        let now = cycle_now?;
        let quiet = self.runtime.world().churn == actor.churn_at_start
            && rescues(&self.agent) == actor.rescues_at_start;
        let judged = matches!(report.error, None | Some(GcError::InsufficientSpace { .. }));
        if !quiet || !judged {
            return None;
        }
        self.quiet_cycles += 1;
        let first = self.eligible_left(now).into_iter().min()?;
        match (&report.error, &actor.kind, &self.oracle.last_walk_order) {
            (Some(_), _, _) => Some(format!(
                "invariant 4: GC gave up short of the low threshold with an eligible image left: {}",
                first.2
            )),
            (None, Kind::DeleteUnused, _) => Some(format!(
                "invariant 4: DeleteUnusedImages left an eligible image: {}",
                first.2
            )),
            (None, _, Some(last)) if first < *last => Some(format!(
                "invariant 5: {} was eligible and comes before {}, which the walk removed, but was left",
                first.2, last.2
            )),
            _ => None,
        }
    }

    /// The images the store and the ground truth say a space walk at `free_time` may remove,
    /// with their place in the eviction order.
    fn eligible_left(&self, free_time: UnixNanos) -> Vec<oracle::Order> {
        let Ok(records) = self.agent.store.records() else {
            return Vec::new();
        };
        let world = self.runtime.world();
        let mut in_use: std::collections::BTreeSet<RecordKey> = world
            .containers
            .values()
            .map(|c| RecordKey::new(c.image_id.as_str(), ""))
            .collect();
        in_use.insert(RecordKey::new(world.sandbox_image_id.clone(), ""));
        in_use.extend(
            world
                .pulls
                .values()
                .map(|id| RecordKey::new(id.clone(), "")),
        );
        // The warm set's images are kept as in use.
        in_use.extend(world.warm.iter().map(|id| RecordKey::new(id.clone(), "")));
        records
            .into_iter()
            .filter(|r| world.images.contains_key(r.key.image_id.as_str()))
            // Pinned (surely or maybe) and irreplaceable images are never eligible.
            .filter(|r| world.protected_because(r.key.image_id.as_str()).is_none())
            .filter(|r| !world.maybe_pinned(r.key.image_id.as_str()))
            .filter(|r| {
                space_verdict(
                    &r.key,
                    &r.record,
                    &in_use,
                    free_time,
                    self.config.policy.min_age,
                ) == Verdict::Eligible
            })
            .map(|r| (r.record.last_used, r.record.first_detected, r.key))
            .collect()
    }

    fn pod_of_actor(&self, actor: &Actor) -> Option<usize> {
        match &actor.kind {
            Kind::Pull { uid } => self.pods.iter().position(|p| &p.uid == uid),
            _ => None,
        }
    }

    /// The power went off: the process dies with every operation, the disk keeps what it
    /// synced plus a seeded share of the rest, and a new agent starts on it.
    fn crash(&mut self) {
        self.crashes += 1;
        self.note("the agent dies with the power; restart on the recovered disk".to_owned());
        self.disk.cut_now();
        let actors = std::mem::take(&mut self.actors);
        for (id, actor) in actors {
            if let Some(index) = self.pod_of_actor(&actor) {
                let uid = self.pods[index].uid.clone();
                self.runtime.world().pulls.remove(&uid);
                self.pods[index].phase = Phase::NeedsImage;
            }
            self.runtime.world().seen.remove(&id);
            self.runtime.world().fs_answers.remove(&id);
            self.runtime.world().last_inodes.remove(&id);
            self.oracle.forget_cycle(id);
            drop(actor);
        }
        let image = self.disk.crash_image(self.rng.u64(..));
        self.disk = PowerLossDisk::new(image, None);
        let now = self.clock.now();
        let mut store = match Store::open_with_backend(self.disk.backend(), label(), now, self.mode)
        {
            Ok(store) => store,
            Err(e) => {
                self.fail(format!(
                    "invariant 3: the store does not open after the power cut: {e}"
                ));
                return;
            }
        };
        match store.check() {
            Ok(v) if v.is_empty() => {}
            Ok(v) => {
                self.fail(format!("invariant 3: Store::check after recovery: {v:?}"));
                return;
            }
            Err(e) => {
                self.fail(format!(
                    "invariant 3: Store::check failed after recovery: {e}"
                ));
                return;
            }
        }
        match start_agent(Arc::new(store), &self.runtime, &self.config, &self.clock) {
            Ok(agent) => self.agent = agent,
            Err(e) => self.fail(format!("restart failed: {e}")),
        }
        self.oracle.restarted();
    }

    /// The oracle's look after a step.
    fn judge(&mut self) {
        let found = self.oracle.judge_step(&self.agent.store, &self.runtime);
        if let Some(message) = found {
            self.fail(message);
        }
    }
}

/// The last looks that kept a victim, over the agent's life.
fn rescues(agent: &Agent) -> u64 {
    agent.gc.metrics().rescued().iter().map(|(_, n)| n).sum()
}

/// One warm cycle as the agent runs it (`crate::agent`'s warm loop): the plan, then its pulls,
/// one at a time. The pulls go to the runtime directly, not through the image manager (the
/// pods' pulls exercise it; a warm pull through it made runs of one seed differ). Returns the
/// ids pulled.
async fn warm_cycle(
    gc: &ImageGcManager<SimRuntime>,
    entries: &[WarmEntry],
    policy: &crate::gc::GcPolicy,
    now: UnixNanos,
) -> Vec<String> {
    use crate::runtime::ImageRuntime;
    let runtime = gc.runtime();
    let Ok(images) = runtime.list_images().await else {
        return Vec::new();
    };
    let stats = runtime.image_fs_stats().await.ok();
    let fs = stats.as_ref().map(|s| (s.capacity, s.available));
    let planned = plan(&PlanInput {
        entries,
        now,
        images: &images,
        fs,
        low_threshold_percent: policy.low_threshold_percent,
        bytes_low: policy.bytes.map(|b| b.low),
        inodes_at_or_above_low: stats
            .as_ref()
            .is_some_and(|s| crate::warm::inodes_at_or_above_low(policy.inodes.map(|t| t.low), s)),
        max_pulls: 1,
        known_size: &|_| None,
    });
    let mut pulled = Vec::new();
    for status in planned.pulls() {
        if let Ok(id) = runtime.pull_image(&status.entry.image, "", None).await {
            pulled.push(id);
        }
    }
    pulled
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
        .with_pulls_in_flight(in_flight.clone());
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
