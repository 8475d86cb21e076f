//! The simulator's driver: building a run from its options (`Sim::new`: world, disk, store,
//! agent), the step loop (`run`, `one_step`: the seed picks what happens next) and the agent's
//! operations it starts (detect, GC, DeleteUnusedImages, the image cache, a warm cycle, pulls),
//! each a future the driver polls itself.
//!
//! Invariants: every choice is drawn from the run's one seeded generator, so a run is a function
//! of its seed and options; the first violation stops the run (`fail`) with the last steps' trace.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::{Clock, ManualClock};
use crate::gc::{ByteBudget, GcConfig, GcPolicy, ImageGcManager, InodeThresholds};
use crate::model::UnixNanos;
use crate::store::power_loss::PowerLossDisk;
use crate::store::{CommitMode, Store};
use crate::warm::{PlanInput, WarmEntry, WarmSet, plan};

use super::oracle::Oracle;
use super::world::{ActorId, Release, SimRuntime, World};

use super::{
    Actor, ActorWaker, Done, Kind, Mutant, RecordingTime, START, Sim, SimError, SimOptions,
    SimOutcome, TRACE_STEPS, Violation, catalog, drawn_order, label, rescues, start_agent,
};

impl Sim {
    pub(super) fn new(options: SimOptions) -> Result<Sim, SimError> {
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

    pub(super) fn outcome(&self) -> SimOutcome {
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

    pub(super) fn pick(&mut self, n: usize) -> usize {
        self.rng.usize(..n.max(1))
    }

    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.rng.u64(..100) < percent
    }

    pub(super) fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_STEPS {
            self.trace.pop_front();
        }
        let now = self.clock.now().0.saturating_sub(START.0) / 1_000_000_000;
        self.trace
            .push_back(format!("step {} t=+{now}s {line}", self.step));
    }

    pub(super) fn fail(&mut self, message: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                step: self.step,
                message,
                trace: self.trace.iter().cloned().collect(),
            });
        }
    }

    pub(super) async fn run(&mut self) {
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

    pub(super) fn spawn(
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
