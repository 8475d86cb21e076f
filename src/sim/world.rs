//! The simulated runtime and its ground truth: the images, containers (every state), pulls in
//! flight through imagekeeper and the image filesystem, as the simulator sets them; and the
//! gates at which every CRI call parks until the simulator's scheduler releases it.
//!
//! Invariants: a call's effect is computed from the ground truth at the moment the scheduler
//! releases it (ListImages may then deliver its answer late, through a second gate; the
//! container list never is: a late container list is the RPC window every runtime client has,
//! not a bug of the caller); a RemoveImage is judged against the ground truth at the moment
//! imagekeeper issues it (oracle invariant 1), before it parks; a pull through imagekeeper is
//! in flight, in the ground truth, from its PullImage call until the simulator sees the
//! manager's `ensure_image_exists` return. Nothing here awaits anything but its own gates; the
//! GC's pause while it waits for the runtime's release ([`SimPause`]) is one of them, so the
//! seed decides what happens while it waits.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::clock::Pause;

use crate::model::{
    ContainerState, ContainerUsage, ImageFsStats, ImageId, PullCredentials, PullSpec,
    RuntimeContainer, RuntimeImage, UnixNanos,
};
use crate::runtime::{CriError, ImageRuntime, RpcCode};

/// Who makes a call: the simulator's actor being polled.
pub type ActorId = u64;

thread_local! {
    /// The actor the driver is polling on this thread (0: none).
    static CURRENT: Cell<ActorId> = const { Cell::new(0) };
}

/// Sets the actor whose calls the runtime attributes from now on (the driver, before a poll).
pub fn set_current_actor(actor: ActorId) {
    CURRENT.with(|c| c.set(actor));
}

fn current_actor() -> ActorId {
    CURRENT.with(Cell::get)
}

/// One image the registry serves: pulling `name` yields this image.
#[derive(Clone, Debug)]
pub struct CatalogEntry {
    pub name: String,
    pub id: String,
    pub size: u64,
    pub pinned: bool,
    /// Side-loaded: present with no repo digest (irreplaceable), never pulled by a pod.
    pub imported: bool,
}

/// An image present in the runtime. `generation` changes each time the image appears anew
/// (pulled after a removal), so a promise about one presence is not judged on another.
#[derive(Clone, Debug)]
pub struct Present {
    pub image: RuntimeImage,
    pub generation: u64,
}

/// A container as the runtime holds it.
#[derive(Clone, Debug)]
pub struct SimContainer {
    pub image_id: ImageId,
    pub state: ContainerState,
}

/// How the scheduler lets a parked call go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// The call fails (the runtime is unavailable for it).
    pub fail: bool,
    /// A list answers late: its answer is taken now and delivered at a later step.
    pub late: bool,
}

/// A call parked at a gate.
#[derive(Debug)]
pub struct ParkedCall {
    pub actor: ActorId,
    pub label: String,
    release: Option<Release>,
    waker: Option<Waker>,
}

/// A RemoveImage imagekeeper issued, as the oracle judges it after the step.
#[derive(Clone, Debug)]
pub struct RemoveIssued {
    pub actor: ActorId,
    pub image_id: String,
    /// The (inodes, free inodes) of the last image filesystem answer this actor got before
    /// it issued the removal: what an inode removal was decided on.
    pub inodes_seen: Option<(u64, u64)>,
}

/// The image filesystem answers one actor got in its cycle, each with the number of
/// RemoveImage calls the actor had issued before it.
#[derive(Clone, Debug, Default)]
pub struct CycleFs {
    pub removes: usize,
    pub answers: Vec<(usize, FsAnswer)>,
}

impl CycleFs {
    /// The answer the byte rule decided on, in a cycle whose MaxAge pass issued
    /// `age_removals` RemoveImage calls (a failed one ends the cycle): the last answer taken
    /// after them and before any other removal (after the MaxAge pass, and after the wait
    /// for the runtime's release, `gc/manager/release.rs`; the inode walk reads the
    /// filesystem again after each of its removals).
    pub fn planned(&self, age_removals: usize) -> Option<FsAnswer> {
        self.answers
            .iter()
            .rev()
            .find(|(removes, _)| *removes == age_removals)
            .map(|(_, answer)| *answer)
    }
}

/// An image filesystem answer, for the liveness check of the cycle that asked.
#[derive(Clone, Copy, Debug)]
pub struct FsAnswer {
    pub capacity: u64,
    pub available: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// What one actor's lists showed: the images listed and the images of the containers listed.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub images: Vec<String>,
    pub container_images: Vec<String>,
    pub sandbox_image_id: String,
}

impl Seen {
    /// The listed images a detect counts as in use: a listed container's, or the sandbox's.
    pub fn in_use(&self) -> Vec<String> {
        self.images
            .iter()
            .filter(|i| self.container_images.contains(i) || **i == self.sandbox_image_id)
            .cloned()
            .collect()
    }
}

/// The inodes an image of `size` bytes holds in the simulated world: one per 64 KiB.
pub fn inodes_of(size: u64) -> u64 {
    size >> 16
}

/// The ground truth.
#[derive(Debug, Default)]
pub struct World {
    pub catalog: Vec<CatalogEntry>,
    pub images: BTreeMap<String, Present>,
    pub containers: BTreeMap<String, SimContainer>,
    /// Pulls in flight through imagekeeper: pod uid → the image id its name resolves to.
    pub pulls: BTreeMap<String, String>,
    pub sandbox_image_id: String,
    pub capacity: u64,
    /// Bytes of the image filesystem that are not images (logs, writable layers).
    pub other_used: u64,
    pub(super) next_generation: u64,
    pub(super) next_call: u64,
    pub calls: BTreeMap<u64, ParkedCall>,
    /// Invariant-1 violations found when a RemoveImage was issued.
    pub violations: Vec<String>,
    pub removes: Vec<RemoveIssued>,
    /// The image filesystem answers each actor got in its cycle ([`CycleFs::planned`] is
    /// the one the byte rule decided on).
    pub fs_answers: BTreeMap<ActorId, CycleFs>,
    /// The last image filesystem answer each actor got: (inodes, free inodes).
    pub last_inodes: BTreeMap<ActorId, (u64, u64)>,
    /// The filesystem's inodes, and those used by other things than images.
    pub inodes: u64,
    pub other_inodes: u64,
    /// What each actor's lists showed.
    pub seen: BTreeMap<ActorId, Seen>,
    /// Counts every change of what protects or frees an image (containers, pulls, images
    /// appearing or removed behind imagekeeper's back, an operator's unpin): a cycle that saw none is judged on
    /// the ground truth at its end.
    pub churn: u64,
    /// The ids of the warm set's images (the GC keeps them; the warm cycles pull them).
    pub warm: std::collections::BTreeSet<String>,
    /// The ids imagekeeper issued a RemoveImage for, over the run (the warm loop check).
    pub removed_by_imagekeeper: std::collections::BTreeSet<String>,
    /// The operators' pins the store surely holds (name or id, until; `NEVER`: no expiry):
    /// written to the world only after the store acknowledged them, removed from it before
    /// the store is asked, so the world's are a subset of the store's.
    pub pins: Vec<(String, UnixNanos)>,
    /// Pins whose write or removal failed (a power cut): the store may hold them or not, so
    /// liveness counts them as pinned and safety does not.
    pub uncertain_pins: Vec<String>,
    /// The latest time the clock has shown: a pin whose `until` is later protects at every
    /// `now` a cycle can have read.
    pub latest: UnixNanos,
    /// Whether images with no repo digest are protected (`protectIrreplaceable`).
    pub protect_irreplaceable: bool,
}

impl World {
    /// Bytes free on the image filesystem.
    pub fn available(&self) -> u64 {
        let images: u64 = self.images.values().map(|p| p.image.size).sum();
        self.capacity
            .saturating_sub(self.other_used)
            .saturating_sub(images)
    }

    /// Inodes free on the image filesystem: each image holds one inode per 64 KiB.
    pub fn inodes_free(&self) -> u64 {
        let images: u64 = self.images.values().map(|p| inodes_of(p.image.size)).sum();
        self.inodes
            .saturating_sub(self.other_inodes)
            .saturating_sub(images)
    }

    /// Makes `entry` present (a pull's effect); keeps the generation of an image already there.
    pub fn add_image(&mut self, entry: &CatalogEntry) {
        if self.images.contains_key(&entry.id) {
            return;
        }
        self.next_generation += 1;
        self.churn += 1;
        let image = RuntimeImage {
            id: ImageId::new(entry.id.clone()),
            repo_tags: vec![entry.name.clone()],
            // A pulled image has a repo digest; a side-loaded one has none.
            repo_digests: if entry.imported {
                Vec::new()
            } else {
                let repo = entry
                    .name
                    .rsplit_once(':')
                    .map_or(entry.name.as_str(), |(r, _)| r);
                vec![format!("{repo}@{}", entry.id)]
            },
            size: entry.size,
            pinned: entry.pinned,
            runtime_handler: String::new(),
        };
        self.images.insert(
            entry.id.clone(),
            Present {
                image,
                generation: self.next_generation,
            },
        );
    }

    /// The generation of the image with this id, if present.
    pub fn generation(&self, id: &str) -> Option<u64> {
        self.images.get(id).map(|p| p.generation)
    }

    /// Why imagekeeper may not remove `id` now, if it may not (oracle invariant 1).
    pub fn protected_because(&self, id: &str) -> Option<String> {
        if let Some((cid, c)) = self
            .containers
            .iter()
            .find(|(_, c)| c.image_id.as_str() == id)
        {
            return Some(format!("container {cid} ({:?}) uses it", c.state));
        }
        if self.images.get(id).is_some_and(|p| p.image.pinned) {
            return Some("it is pinned".to_owned());
        }
        if id == self.sandbox_image_id {
            return Some("it is the sandbox image".to_owned());
        }
        if self.warm.contains(id) {
            return Some("it is in the warm set".to_owned());
        }
        if let Some(present) = self.images.get(id) {
            let image = &present.image;
            if let Some((name, _)) = self.pins.iter().find(|(name, until)| {
                (*until == UnixNanos::NEVER || *until > self.latest)
                    && (image.id.as_str() == name || image.repo_tags.iter().any(|t| t == name))
            }) {
                return Some(format!("an active pin of {name} names it"));
            }
            if self.protect_irreplaceable && image.repo_digests.is_empty() {
                return Some("it is irreplaceable (no repo digest)".to_owned());
            }
        }
        if let Some((uid, _)) = self.pulls.iter().find(|(_, target)| *target == id) {
            return Some(format!("pod {uid} is pulling it through imagekeeper"));
        }
        None
    }

    /// Whether a pin the store may hold (see `uncertain_pins`) names image `id`.
    pub fn maybe_pinned(&self, id: &str) -> bool {
        self.images.get(id).is_some_and(|p| {
            self.uncertain_pins.iter().any(|name| {
                p.image.id.as_str() == name || p.image.repo_tags.iter().any(|t| t == name)
            })
        })
    }

    /// Releases parked call `id` and wakes its caller.
    pub fn release(&mut self, id: u64, release: Release) {
        if let Some(call) = self.calls.get_mut(&id) {
            call.release = Some(release);
            if let Some(w) = call.waker.take() {
                w.wake();
            }
        }
    }

    /// The calls parked and not yet released, oldest first.
    pub fn parked(&self) -> Vec<u64> {
        self.calls
            .iter()
            .filter(|(_, c)| c.release.is_none())
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `actor` has a call parked (not yet released).
    pub fn is_parked(&self, actor: ActorId) -> bool {
        self.calls
            .values()
            .any(|c| c.actor == actor && c.release.is_none())
    }

    fn catalog_entry(&self, name: &str) -> Option<CatalogEntry> {
        self.catalog.iter().find(|c| c.name == name).cloned()
    }

    fn find_image(&self, image: &str) -> Option<RuntimeImage> {
        self.images
            .values()
            .find(|p| p.image.id.as_str() == image || p.image.repo_tags.iter().any(|t| t == image))
            .map(|p| p.image.clone())
    }
}

/// The simulated runtime: every call parks at a gate. Cloning shares the world.
#[derive(Clone, Debug, Default)]
pub struct SimRuntime {
    world: Arc<Mutex<World>>,
}

/// A call waiting for the scheduler; dropping it (the agent crashed) forgets the call.
struct Gate {
    world: Arc<Mutex<World>>,
    id: u64,
}

impl Future for Gate {
    type Output = Release;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Release> {
        let mut world = lock(&self.world);
        let Some(call) = world.calls.get_mut(&self.id) else {
            // Forgotten: cannot happen while the gate lives; answer as a failure.
            return Poll::Ready(Release {
                fail: true,
                late: false,
            });
        };
        match call.release {
            Some(release) => {
                world.calls.remove(&self.id);
                Poll::Ready(release)
            }
            None => {
                call.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        lock(&self.world).calls.remove(&self.id);
    }
}

fn lock(world: &Arc<Mutex<World>>) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|p| p.into_inner())
}

fn unavailable(method: &'static str) -> CriError {
    CriError::Rpc {
        method,
        code: RpcCode::Unavailable,
        message: "simulated runtime failure".to_owned(),
    }
}

impl SimRuntime {
    pub fn new(world: World) -> SimRuntime {
        SimRuntime {
            world: Arc::new(Mutex::new(world)),
        }
    }

    /// The ground truth, to read or change.
    pub fn world(&self) -> MutexGuard<'_, World> {
        lock(&self.world)
    }

    fn gate(&self, label: String) -> Gate {
        let mut world = self.world();
        world.next_call += 1;
        let id = world.next_call;
        world.calls.insert(
            id,
            ParkedCall {
                actor: current_actor(),
                label,
                release: None,
                waker: None,
            },
        );
        Gate {
            world: self.world.clone(),
            id,
        }
    }

    /// Parks a call to `method`; fails it if the scheduler says so.
    async fn call(&self, method: &'static str, about: &str) -> Result<Release, CriError> {
        let release = self.gate(format!("{method} {about}")).await;
        if release.fail {
            Err(unavailable(method))
        } else {
            Ok(release)
        }
    }
}

impl ImageRuntime for SimRuntime {
    async fn list_images(&self) -> Result<Vec<RuntimeImage>, CriError> {
        let release = self.call("ListImages", "").await?;
        let images: Vec<RuntimeImage> = {
            let mut world = self.world();
            let images: Vec<RuntimeImage> =
                world.images.values().map(|p| p.image.clone()).collect();
            let sandbox = world.sandbox_image_id.clone();
            let seen = world.seen.entry(current_actor()).or_default();
            seen.images = images.iter().map(|i| i.id.as_str().to_owned()).collect();
            seen.sandbox_image_id = sandbox;
            images
        };
        if release.late {
            // The answer was taken at the release; it reaches the caller later.
            self.gate("ListImages (answer)".to_owned()).await;
        }
        Ok(images)
    }

    async fn image_status(
        &self,
        image: &str,
        _runtime_handler: &str,
    ) -> Result<Option<RuntimeImage>, CriError> {
        self.call("ImageStatus", image).await?;
        Ok(self.world().find_image(image))
    }

    async fn pull_image(
        &self,
        image: &str,
        runtime_handler: &str,
        credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        self.pull_image_for(&PullSpec::new(image, runtime_handler), credentials)
            .await
    }

    async fn pull_image_for(
        &self,
        spec: &PullSpec,
        _credentials: Option<&PullCredentials>,
    ) -> Result<String, CriError> {
        let uid = spec.sandbox.as_ref().map(|s| s.uid.clone());
        {
            let mut world = self.world();
            if let (Some(uid), Some(entry)) = (&uid, world.catalog_entry(&spec.image)) {
                world.pulls.insert(uid.clone(), entry.id);
                world.churn += 1;
            }
        }
        self.call("PullImage", &spec.image).await?;
        let mut world = self.world();
        match world.catalog_entry(&spec.image) {
            Some(entry) => {
                world.add_image(&entry);
                Ok(entry.id)
            }
            None => Err(CriError::Rpc {
                method: "PullImage",
                code: RpcCode::NotFound,
                message: format!(
                    "failed to pull and unpack image {:?}: not found",
                    spec.image
                ),
            }),
        }
    }

    async fn remove_image(&self, image: &str, _runtime_handler: &str) -> Result<(), CriError> {
        {
            let mut world = self.world();
            if let Some(why) = world.protected_because(image) {
                world.violations.push(format!(
                    "invariant 1: RemoveImage {image} issued while {why}"
                ));
            }
            let actor = current_actor();
            let inodes_seen = world.last_inodes.get(&actor).copied();
            world.fs_answers.entry(actor).or_default().removes += 1;
            world.removes.push(RemoveIssued {
                actor,
                image_id: image.to_owned(),
                inodes_seen,
            });
            world.removed_by_imagekeeper.insert(image.to_owned());
        }
        self.call("RemoveImage", image).await?;
        // containerd answers a removal of an absent image with success.
        self.world().images.remove(image);
        Ok(())
    }

    async fn image_fs_stats(&self) -> Result<ImageFsStats, CriError> {
        self.call("ImageFsInfo", "").await?;
        let mut world = self.world();
        let (capacity, available) = (world.capacity, world.available());
        let (inodes, inodes_free) = (world.inodes, world.inodes_free());
        let cycle = world.fs_answers.entry(current_actor()).or_default();
        cycle.answers.push((
            cycle.removes,
            FsAnswer {
                capacity,
                available,
                inodes,
                inodes_free,
            },
        ));
        world
            .last_inodes
            .insert(current_actor(), (inodes, inodes_free));
        Ok(ImageFsStats::new(
            "/sim",
            capacity.saturating_sub(available),
            capacity,
            available,
        )
        .with_inodes(inodes, inodes_free))
    }

    async fn list_containers(&self) -> Result<Vec<RuntimeContainer>, CriError> {
        self.call("ListContainers", "").await?;
        let mut world = self.world();
        let images = world
            .containers
            .values()
            .map(|c| c.image_id.as_str().to_owned())
            .collect();
        world
            .seen
            .entry(current_actor())
            .or_default()
            .container_images = images;
        Ok(world
            .containers
            .iter()
            .map(|(id, c)| RuntimeContainer {
                id: id.clone(),
                pod_sandbox_id: format!("sandbox-{id}"),
                image: c.image_id.as_str().to_owned(),
                image_id: c.image_id.clone(),
                state: c.state,
                runtime_handler: String::new(),
            })
            .collect())
    }

    async fn container_usage(&self, container_id: &str) -> Result<ContainerUsage, CriError> {
        self.call("ContainerStatus", container_id).await?;
        match self.world().containers.get(container_id) {
            Some(c) => Ok(ContainerUsage {
                state: c.state,
                image_id: c.image_id.clone(),
                runtime_handler: String::new(),
                image_volumes: Vec::new(),
            }),
            None => Err(CriError::Rpc {
                method: "ContainerStatus",
                code: RpcCode::NotFound,
                message: format!("container {container_id:?} not found"),
            }),
        }
    }
}

/// The GC's pause while it waits for the runtime to release MaxAge's removals: a gate the
/// scheduler releases like a CRI call (what it says of failure or lateness is ignored).
pub(crate) struct SimPause(pub SimRuntime);

impl Pause for SimPause {
    fn pause(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.0
                .gate(format!("Pause {}ms", duration.as_millis()))
                .await;
        })
    }
}
