//! What moves the world between the agent's operations: the kubelet-like workload (a pod's
//! pull, its container created, started, exited, removed, and the container-created event), a
//! removal behind imagekeeper's back, a pin or unpin, the disk usage and the clock.
//!
//! Invariants: each event changes the ground truth (`world`) only, never the store; the clock
//! goes back by at most `CLOCK_BACK_LIMIT` below the latest time it showed.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;
use crate::model::{ContainerState, ImageId, UnixNanos};
use crate::pull::{PodRef, PullPolicy};

use super::world::SimContainer;

use super::{CLOCK_BACK_LIMIT, Done, Kind, PODS, Phase, Pod, START, Sim};

impl Sim {
    /// The kubelet-like workload: keeps [`PODS`] pods, each pulling its image through
    /// imagekeeper, then creating, starting, stopping and removing its container.
    pub(super) fn workload(&mut self) {
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

    pub(super) fn external_removal(&mut self) {
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
    pub(super) fn pin_or_unpin(&mut self) {
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

    pub(super) fn disk_usage(&mut self) {
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

    pub(super) fn clock_jump(&mut self) {
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
}
