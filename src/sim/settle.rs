//! After each pick: polling every operation until it is parked at a gate or done (`settle`),
//! judging what a finished operation did against the ground truth (`finish`, the oracle), the
//! power cut and the recovery of a new agent on the disk (`crash`), and the oracle's judgement
//! after every step (`judge`).
//!
//! Invariants: an operation waiting on a blocking store call is waited for, one waiting on the
//! cycle lock is not (its holder is parked); a power cut drops every operation, recovers the
//! disk with a seeded subset of its unsynced writes and checks the store before the new agent
//! starts.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use crate::clock::Clock;
use crate::gc::{GcError, GcReport, RemovalReason};
use crate::gc::{Verdict, space_verdict};
use crate::model::{RecordKey, UnixNanos};
use crate::store::Store;
use crate::store::power_loss::PowerLossDisk;

use super::oracle::{self, Ack};
use super::world::{ActorId, set_current_actor};

use super::{Actor, ActorWaker, Done, Kind, Phase, Sim, label, rescues, start_agent};

impl Sim {
    /// Polls until every operation is parked at a gate or done.
    pub(super) async fn settle(&mut self) {
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
                let age_removals = report
                    .removed
                    .iter()
                    .filter(|r| r.reason == RemovalReason::Age)
                    .count();
                let fs = self
                    .runtime
                    .world()
                    .fs_answers
                    .remove(&id)
                    .and_then(|cycle| cycle.planned(age_removals));
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
    pub(super) fn crash(&mut self) {
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
    pub(super) fn judge(&mut self) {
        let found = self.oracle.judge_step(&self.agent.store, &self.runtime);
        if let Some(message) = found {
            self.fail(message);
        }
    }
}
