//! The agent's loops: detect, the image cache and GC on their periods ([`run_schedule`], the
//! kubelet's wait.Until), one cycle of each ([`Agent::run_cycle`]), and what a cycle reports
//! to health, metrics, Node Events and the runtime pins.
//!
//! Invariants: a failed cycle keeps its loop's period; only a cycle that could not reach the
//! runtime is retried sooner (1 s doubling up to the period); the cycles read the clock once
//! they hold the cycle lock; a GC cycle compacts the database off the async workers; after
//! each cycle the heap's free pages go back to the system (`memory.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::admin::GcOutcome;
use crate::gc::{CycleTime, GcError, GcTrigger};
use crate::runtime::{CriError, RpcCode};

use super::*;

/// One of the agent's periodic loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Loop {
    Detect,
    ImageCache,
    Gc,
}

impl<R: AgentRuntime> Agent<R> {
    pub(super) async fn run_loops(self: Arc<Self>, stop: watch::Receiver<bool>) {
        let config = self.config();
        let periods = [
            (Loop::Detect, config.detect_period),
            (Loop::ImageCache, config.image_cache_period),
            (Loop::Gc, config.gc_period),
        ];
        let pins_task = {
            let agent = self.clone();
            let mut stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = agent.runtime_pins_wanted.notified() => {
                            agent.reconcile_runtime_pins_bounded().await;
                        }
                        changed = stop.changed() => {
                            if changed.is_err() || *stop.borrow() {
                                break;
                            }
                        }
                    }
                }
            })
        };
        // A change of the pods bound to this node (`clusterSignals`) detects at once,
        // so the runtime pins follow it (changes during a detect are one more detect); so
        // does a CronJob run entering (or leaving) the lead before it, when its images'
        // keep starts (or ends), for the CronJobs whose keep can change something here.
        let pods_task = {
            let agent = self.clone();
            let pods = self.gc.bound_pods();
            let signals = self.gc.cluster_signals();
            let mut stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    let now = agent.clock.now();
                    // Only the CronJobs whose keep can change here: an image of theirs on the
                    // node (one the warm loop pulls ahead is kept by the detect its pull
                    // starts, which finds it present).
                    let lead_change = signals
                        .next_lead_change(now, |name, _| signals.cronjob_present(name))
                        .map(|at| at.since(now));
                    let lead_change = async move {
                        match lead_change {
                            Some(wait) => tokio::time::sleep(wait).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        () = pods.changed() => {
                            agent.run_cycle(Loop::Detect).await;
                        }
                        () = signals.changed() => {
                            agent.run_cycle(Loop::Detect).await;
                        }
                        () = lead_change => {
                            agent.run_cycle(Loop::Detect).await;
                        }
                        // The detect found a CronJob's image (or lost the last): its timer
                        // is read again.
                        () = signals.present_changed() => {}
                        changed = stop.changed() => {
                            if changed.is_err() || *stop.borrow() {
                                break;
                            }
                        }
                    }
                }
            })
        };
        run_schedule(periods, stop, |which| {
            let agent = self.clone();
            async move {
                let outcome = agent.run_cycle(which).await;
                crate::memory::release_free_memory();
                outcome
            }
        })
        .await;
        pins_task.abort();
        pods_task.abort();
    }

    /// Runs one cycle; returns how it ended.
    pub(super) async fn run_cycle(&self, which: Loop) -> CycleOutcome {
        // The cycles read the clock once they hold the cycle lock (`CycleTime`).
        let now = &*self.clock;
        // A detect or image-cache cycle waits on the runtime: readiness sees how long.
        let _waiting = matches!(which, Loop::Detect | Loop::ImageCache)
            .then(|| self.health.waiting_for_runtime(self.clock.now()));
        match which {
            Loop::Detect => match self.gc.detect(now).await {
                Ok(report) => {
                    self.health.detect_succeeded();
                    info!(
                        records = report.records,
                        added = report.added,
                        removed = report.removed,
                        committed = report.committed,
                        "Detected images"
                    );
                    self.detect_state.send_if_modified(|state| {
                        let first = *state != DetectState::Done;
                        *state = DetectState::Done;
                        first
                    });
                    // The runtime pins' task reconciles; the cycle never waits on containerd's
                    // Images service (one that accepts and never answers stalled every cycle).
                    self.runtime_pins_wanted.notify_one();
                    // An image left the node: a warm set settled on the cluster's images
                    // checks it has them all (`warm.rs`).
                    if report.removed > 0 {
                        self.warm_wanted.notify_one();
                    }
                    self.say_keeps_over_share();
                    self.record_signals().await;
                    CycleOutcome::Done
                }
                Err(e) => {
                    error!(error = %e, "Image detection failed");
                    self.detect_state.send_if_modified(|state| {
                        if *state == DetectState::Done {
                            return false;
                        }
                        *state = DetectState::Failing(e.to_string());
                        true
                    });
                    self.failed_cycle(&e)
                }
            },
            Loop::ImageCache => match self.gc.refresh_image_cache().await {
                Ok(()) => {
                    self.metrics.image_cache_filled();
                    // The image filesystem gauges; a failure here (statvfs of a mountpoint
                    // the agent cannot see) is logged and fails nothing else.
                    if let Err(e) = self.gc.observe_image_fs().await {
                        warn!(error = %e, "Failed to read the image filesystem");
                    }
                    self.health.runtime_reached();
                    CycleOutcome::Done
                }
                Err(e) => {
                    warn!(error = %e, "Failed to update image list");
                    self.failed_cycle(&e)
                }
            },
            Loop::Gc => match self
                .garbage_collect_cycle(GcTrigger::Periodic, now)
                .await
                .error
            {
                None => CycleOutcome::Done,
                Some(_) => match self.gc_failure_unreachable() {
                    true => CycleOutcome::RuntimeUnreachable,
                    false => CycleOutcome::Failed,
                },
            },
        }
    }

    /// A reconcile of the runtime pins, given up after [`runtime_pins::RECONCILE_BOUND`]: a
    /// containerd Images service that accepts calls and never answers holds its caller (a GC
    /// cycle, `imagekeeper gc` or `pin` through the agent) that long at most, and is reported
    /// (`/readyz`'s `degraded:` line, `imagekeeper_runtime_pins_failing`).
    async fn reconcile_runtime_pins_bounded(&self) {
        let bound = runtime_pins::RECONCILE_BOUND;
        if tokio::time::timeout(bound, self.reconcile_runtime_pins())
            .await
            .is_err()
        {
            self.runtime_pins.gave_up(bound);
            if let Some(sample) = self.runtime_pins.sample() {
                self.metrics.record_runtime_pins(sample);
            }
        }
    }

    /// After a detect: `auto` decides (once the runtime answers Version) and, when on,
    /// containerd's labels are made to match what the detect found kept. A detect after the
    /// runtime came back reconciles too, so a restart of either side heals at its first cycle.
    async fn reconcile_runtime_pins(&self) {
        let _turn = self.runtime_pins_turn.lock().await;
        if self.runtime_pins.state() == crate::gc::runtime_pins::PinsState::Undecided {
            self.runtime_pins
                .decide(self.events_client.runtime_version().await);
        }
        if let Some(keeps) = self.gc.last_keeps() {
            self.runtime_pins
                .reconcile(&keeps, &self.store, self.clock.now())
                .await;
        }
        if let Some(sample) = self.runtime_pins.sample() {
            self.metrics.record_runtime_pins(sample);
        }
    }

    /// Carries the keeps to the runtime now, as the next detect cycle would: a detect (the
    /// pins, warm entries and irreplaceable images as the store holds them now), then the
    /// runtime pins' reconcile. An operator's pin or unpin reaches containerd's labels before
    /// the admin call answers, not minutes later at the next cycle (the kubelet's
    /// DeleteUnusedImages runs every 10 s under pressure). A failed detect is logged by the
    /// cycle; the caller's answer then says what the runtime lists.
    pub(super) async fn carry_keeps_now(&self) {
        let _ = self.run_cycle(Loop::Detect).await;
        self.reconcile_runtime_pins_bounded().await;
    }

    /// Where the runtime pins stand (`auto` undecided, on, or off and why).
    pub fn runtime_pins_state(&self) -> crate::gc::runtime_pins::PinsState {
        self.runtime_pins.state()
    }

    /// A detect or image-cache cycle failed: readiness learns whether the runtime was reached.
    fn failed_cycle(&self, e: &GcError) -> CycleOutcome {
        let outcome = CycleOutcome::failed(e);
        match outcome {
            CycleOutcome::RuntimeUnreachable => self.health.runtime_unreachable(e.to_string()),
            // The runtime answered (with an error): it is reachable.
            _ if matches!(e, GcError::Runtime { .. }) => self.health.runtime_reached(),
            _ => {}
        }
        outcome
    }

    /// A Warning Event when a detect turned the cluster signals' keeps over their share.
    fn say_keeps_over_share(&self) {
        if let Some(over) = self.gc.cluster_signals().take_over_share_news() {
            self.node_events.keeps_over_share(&over);
        }
    }

    /// Whether the last GC failed because the runtime could not be reached (the outcome of
    /// `garbage_collect_cycle` carries the error as text only).
    fn gc_failure_unreachable(&self) -> bool {
        *lock_ignoring_poison(&self.gc_last_unreachable)
    }

    /// One GarbageCollect asked for by `trigger` (the GC loop's: `periodic`; `imagekeeper gc`
    /// through the agent: `unknown`), timed for KEP-6053's duration histogram.
    pub(super) async fn garbage_collect_cycle(
        &self,
        trigger: GcTrigger,
        now: impl CycleTime,
    ) -> GcOutcome {
        let started = std::time::Instant::now();
        let report = self.gc.garbage_collect_for(trigger, now).await;
        self.metrics.observe_gc(&report, started.elapsed());
        // Between cycles: give churned space back to the file system (store::compact). It
        // blocks on disk for up to a fraction of a second, so it runs on tokio's blocking pool,
        // not on this worker; a failure is logged, never fatal.
        let store = Arc::clone(self.gc.store());
        match tokio::task::spawn_blocking(move || store.compact_if_needed()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!(error = %e, "Cannot compact the database"),
            Err(e) => warn!(error = %e, "The database compaction task failed"),
        }
        *lock_ignoring_poison(&self.gc_last_unreachable) =
            report.error.as_ref().is_some_and(runtime_unreachable);
        self.metrics.record_gc_cycle(report.error.is_none());
        // GC detected first: containerd's labels follow what it found kept (the GC loop's
        // cycle and `imagekeeper gc` through the agent alike; the latter returns after it).
        if report.error.is_none() {
            self.reconcile_runtime_pins_bounded().await;
        }
        self.node_events.gc_cycle(&report);
        self.node_events.store_health(self.store.is_healthy());
        self.say_keeps_over_share();
        let mut failed_before = lock_ignoring_poison(&self.gc_failed_before);
        match &report.error {
            Some(e) if *failed_before => {
                error!(error = %e, reason = "ImageGCFailed", "Image garbage collection failed multiple times in a row");
            }
            Some(e) => {
                error!(error = %e, "Image garbage collection failed once. Stats initialization may not have completed yet");
                *failed_before = true;
            }
            None => {
                info!(
                    removed = report.removed.len(),
                    freed = report.freed,
                    "Image garbage collection succeeded"
                );
                *failed_before = false;
            }
        }
        GcOutcome::from_report(report, false)
    }
}

/// How one cycle of a loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CycleOutcome {
    Done,
    /// Failed for a reason a quick retry does not fix (not enough space freed, a removal
    /// failed, a store error): the loop keeps its period, as the kubelet's wait.Until does.
    Failed,
    /// The runtime could not be reached: retried soon (1 s doubling up to the period).
    RuntimeUnreachable,
}

impl CycleOutcome {
    fn failed(e: &GcError) -> CycleOutcome {
        if runtime_unreachable(e) {
            CycleOutcome::RuntimeUnreachable
        } else {
            CycleOutcome::Failed
        }
    }
}

/// A runtime error that means the runtime is not there: a failed dial, or Unavailable.
fn runtime_unreachable(e: &GcError) -> bool {
    match e {
        GcError::Runtime { source, .. } => {
            matches!(source, CriError::Connect { .. })
                || source.code() == Some(RpcCode::Unavailable)
        }
        _ => false,
    }
}

/// The agent's loops: each runs once at start (in the order given, so detect comes first and
/// the first GC sees fresh records), then every period (the kubelet's wait.Until). A cycle
/// that failed keeps the period; only a runtime that cannot be reached is retried sooner, 1 s
/// doubling up to the period. Returns when `stop` turns true (the cycle in flight runs to its
/// end). Timers are tokio's, so tests drive the schedule with paused time.
pub(super) async fn run_schedule<F, Fut>(
    periods: [(Loop, Duration); 3],
    mut stop: watch::Receiver<bool>,
    mut run: F,
) where
    F: FnMut(Loop) -> Fut,
    Fut: Future<Output = CycleOutcome>,
{
    let start = Instant::now();
    let mut next = periods.map(|(which, period)| (which, start, Backoff::new(period)));
    loop {
        let Some(index) = (0..next.len()).min_by_key(|&i| next[i].1) else {
            return;
        };
        let (which, when, _) = next[index];
        tokio::select! {
            _ = tokio::time::sleep_until(when) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let outcome = run(which).await;
        if *stop.borrow() {
            return;
        }
        let backoff = &mut next[index].2;
        let delay = match outcome {
            CycleOutcome::Done | CycleOutcome::Failed => backoff.reset(),
            CycleOutcome::RuntimeUnreachable => backoff.next_delay(),
        };
        next[index].1 = Instant::now() + delay;
    }
}

/// The retry delay of one loop: its period after a cycle, 1 s doubling up to the period while
/// the runtime cannot be reached.
#[derive(Clone, Copy, Debug)]
pub(super) struct Backoff {
    period: Duration,
    current: Duration,
}

impl Backoff {
    pub(super) fn new(period: Duration) -> Backoff {
        Backoff {
            period,
            current: Duration::ZERO,
        }
    }

    pub(super) fn reset(&mut self) -> Duration {
        self.current = Duration::ZERO;
        self.period
    }

    pub(super) fn next_delay(&mut self) -> Duration {
        self.current = if self.current.is_zero() {
            Duration::from_secs(1)
        } else {
            self.current.saturating_mul(2)
        }
        .min(self.period);
        self.current
    }
}
