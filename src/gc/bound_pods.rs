//! The images the pods bound to this node name, as the cluster's watch last saw them
//! (`clusterSignals`: the `cluster` module, feature `kube`, writes them; each detect reads them). A
//! pod bound to the node needs every image it names now, whether or not its container exists yet:
//! an init container still running leaves the main container's image unused in the runtime's view
//! (kubernetes issue 123631), and the kubelet's GC may remove it.
//!
//! Invariants: a handle is shared (clones see one set); a pod is held with its images until
//! the watch says it is gone or a relist leaves it out; with no watch running the set is empty
//! and nothing is kept by it. Memory is bounded whatever the API server sends: at most
//! [`MAX_BOUND_PODS`] pods (a node runs a few hundred; the kubelet's default maxPods is 110),
//! [`MAX_IMAGES_PER_POD`] images a pod, each name at most [`MAX_IMAGE_NAME_BYTES`]; a pod past
//! the cap is not held, counted and logged once (its images are then kept by nothing of this
//! set).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tracing::warn;

/// The most pods a [`BoundPods`] holds.
pub const MAX_BOUND_PODS: usize = 4_096;
/// The most images held for one pod (the first, in name order).
pub const MAX_IMAGES_PER_POD: usize = 128;
/// The longest image name held (the limit of an image name the agent stores elsewhere).
pub const MAX_IMAGE_NAME_BYTES: usize = 4_096;

/// The pods bound to this node and the images each names, by `namespace/name`.
#[derive(Clone, Debug, Default)]
pub struct BoundPods {
    pods: Arc<RwLock<BTreeMap<String, Vec<String>>>>,
    /// Told when the set changes: the agent detects then, so the runtime pins follow a pod
    /// at once, not at the next detect period (changes while one detect runs are one).
    changed: Arc<tokio::sync::Notify>,
    /// Whether the watch has listed the pods once: until then the set is not the node's.
    synced: Arc<tokio::sync::watch::Sender<bool>>,
    /// The watch's health, for the metrics.
    health: Arc<WatchHealth>,
}

/// How the watch writing a [`BoundPods`] fares.
#[derive(Debug, Default)]
struct WatchHealth {
    /// A watch was started (`clusterSignals` on, with the API server's credentials).
    started: AtomicBool,
    /// Its last event was an error: the set is the last one seen, perhaps stale.
    failing: AtomicBool,
    /// Errors it met (each retried with kube-rs's backoff).
    errors: AtomicU64,
    /// Pods not held because [`MAX_BOUND_PODS`] were (each refusal counted).
    refused: AtomicU64,
    /// The set is at its cap and refused a pod since it last was not (logged once).
    full: AtomicBool,
}

/// The cluster signals' state at one moment, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundPodsSample {
    /// Pods bound to this node that name an image.
    pub pods: u64,
    /// Distinct images they name.
    pub images: u64,
    /// The watch has listed the pods once.
    pub synced: bool,
    /// The watch's last event was an error.
    pub failing: bool,
    /// Errors the watch met.
    pub errors: u64,
    /// Pods not held because the set was full ([`MAX_BOUND_PODS`]).
    pub refused: u64,
}

impl BoundPods {
    /// Sets the images `pod` names (a pod naming none is removed; see the module's bounds).
    pub fn set_pod(&self, pod: String, images: Vec<String>) {
        let images = bounded(images);
        let changed = {
            let mut pods = self.write();
            if images.is_empty() {
                pods.remove(&pod).is_some()
            } else if pods.len() >= MAX_BOUND_PODS && !pods.contains_key(&pod) {
                drop(pods);
                self.refuse(1);
                false
            } else {
                pods.insert(pod, images.clone()) != Some(images)
            }
        };
        self.told(changed);
    }

    /// Counts `n` pods refused for the cap; logs the first refusal since the set was last not
    /// full.
    fn refuse(&self, n: u64) {
        if n == 0 {
            self.health.full.store(false, Ordering::Relaxed);
            return;
        }
        self.health.refused.fetch_add(n, Ordering::Relaxed);
        if !self.health.full.swap(true, Ordering::Relaxed) {
            warn!(
                max_pods = MAX_BOUND_PODS,
                "The pods bound to this node are more than the cluster signals hold: the images of the pods past the cap are not kept by them"
            );
        }
    }

    /// Removes `pod`.
    pub fn remove_pod(&self, pod: &str) {
        let changed = self.write().remove(pod).is_some();
        if changed {
            self.health.full.store(false, Ordering::Relaxed);
        }
        self.told(changed);
    }

    /// Replaces every pod at once (a relist): the first [`MAX_BOUND_PODS`] by name.
    pub fn replace_all(&self, pods: BTreeMap<String, Vec<String>>) {
        let mut pods: BTreeMap<_, _> = pods
            .into_iter()
            .map(|(pod, images)| (pod, bounded(images)))
            .filter(|(_, i)| !i.is_empty())
            .collect();
        let mut refused = 0u64;
        while pods.len() > MAX_BOUND_PODS {
            pods.pop_last();
            refused += 1;
        }
        self.refuse(refused);
        let changed = {
            let mut held = self.write();
            let changed = *held != pods;
            *held = pods;
            changed
        };
        self.told(changed);
    }

    /// Resolves at the set's next change (at once when it changed since the last call
    /// resolved).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Marks the set complete: the watch listed the pods once.
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
    }

    /// Whether the watch has listed the pods once.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves once the watch has listed the pods (at once if it has).
    pub async fn synced(&self) {
        let mut synced = self.synced.subscribe();
        // The sender lives as long as `self`: the wait ends only with a list.
        let _ = synced.wait_for(|listed| *listed).await;
    }

    /// A watch now writes this set.
    pub fn watch_started(&self) {
        self.health.started.store(true, Ordering::Relaxed);
    }

    /// The watch met an error (it retries; the set holds).
    pub fn watch_failed(&self) {
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        self.health.failing.store(true, Ordering::Relaxed);
    }

    /// The watch delivered an event again.
    pub fn watch_answered(&self) {
        self.health.failing.store(false, Ordering::Relaxed);
    }

    /// The state now; `None` until a watch started (signals off, or no API server).
    pub fn sample(&self) -> Option<BoundPodsSample> {
        if !self.health.started.load(Ordering::Relaxed) {
            return None;
        }
        let (pods, images) = {
            let held = self.read();
            let images: std::collections::BTreeSet<&String> = held.values().flatten().collect();
            (held.len() as u64, images.len() as u64)
        };
        Some(BoundPodsSample {
            pods,
            images,
            synced: self.is_synced(),
            failing: self.health.failing.load(Ordering::Relaxed),
            errors: self.health.errors.load(Ordering::Relaxed),
            refused: self.health.refused.load(Ordering::Relaxed),
        })
    }

    fn told(&self, changed: bool) {
        if changed {
            self.changed.notify_one();
        }
    }

    /// Each image name with the first pod (by name) that names it.
    pub fn images(&self) -> BTreeMap<String, String> {
        let mut images = BTreeMap::new();
        for (pod, names) in self.read().iter() {
            for name in names {
                images.entry(name.clone()).or_insert_with(|| pod.clone());
            }
        }
        images
    }

    /// How many pods are held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no pod is held.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Vec<String>>> {
        self.pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Vec<String>>> {
        self.pods
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `images` within the module's bounds: names past [`MAX_IMAGE_NAME_BYTES`] dropped, the
/// first [`MAX_IMAGES_PER_POD`] kept.
fn bounded(mut images: Vec<String>) -> Vec<String> {
    images.retain(|name| name.len() <= MAX_IMAGE_NAME_BYTES);
    images.truncate(MAX_IMAGES_PER_POD);
    images
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change is told once however many come before the waiter looks; setting what is
    /// already held tells nothing.
    #[tokio::test]
    async fn the_first_list_is_awaited_once() {
        let pods = BoundPods::default();
        let waiting = tokio::time::timeout(std::time::Duration::ZERO, pods.synced()).await;
        assert!(waiting.is_err(), "not listed yet");
        assert!(!pods.is_synced());
        pods.clone().mark_synced();
        pods.synced().await;
        assert!(pods.is_synced());
    }

    #[tokio::test]
    async fn a_change_is_told_and_a_repeat_is_not() {
        let pods = BoundPods::default();
        pods.set_pod("a/one".into(), vec!["busybox:1".into()]);
        pods.set_pod("a/two".into(), vec!["nginx:1".into()]);
        pods.changed().await;
        pods.set_pod("a/one".into(), vec!["busybox:1".into()]);
        pods.remove_pod("a/gone");
        let told = tokio::time::timeout(std::time::Duration::ZERO, pods.changed()).await;
        assert!(told.is_err(), "no change since the last one told");
        pods.remove_pod("a/one");
        pods.changed().await;
    }

    #[test]
    fn a_pod_holds_its_images_until_it_is_removed_or_a_relist_leaves_it_out() {
        let pods = BoundPods::default();
        let seen = pods.clone();
        pods.set_pod("a/one".into(), vec!["busybox:1".into(), "nginx:1".into()]);
        pods.set_pod("b/two".into(), vec!["nginx:1".into()]);
        pods.set_pod("c/none".into(), Vec::new());
        assert_eq!(
            seen.len(),
            2,
            "a clone sees the same set; a pod naming none is not held"
        );
        let images = seen.images();
        assert_eq!(images.get("nginx:1").map(String::as_str), Some("a/one"));
        assert_eq!(images.len(), 2);
        pods.remove_pod("a/one");
        assert_eq!(
            seen.images().get("nginx:1").map(String::as_str),
            Some("b/two")
        );
        assert!(!seen.images().contains_key("busybox:1"));
        pods.replace_all([("d/three".to_owned(), vec!["redis:7".to_owned()])].into());
        assert_eq!(seen.images().keys().collect::<Vec<_>>(), ["redis:7"]);
    }

    #[test]
    fn the_sample_counts_pods_and_distinct_images_and_says_how_the_watch_fares() {
        let pods = BoundPods::default();
        pods.set_pod("a/one".into(), vec!["busybox:1".into(), "nginx:1".into()]);
        assert_eq!(pods.sample(), None, "no watch started: no sample");
        pods.watch_started();
        pods.set_pod("b/two".into(), vec!["nginx:1".into()]);
        let sample = |synced, failing, errors| BoundPodsSample {
            pods: 2,
            images: 2,
            synced,
            failing,
            errors,
            refused: 0,
        };
        assert_eq!(pods.sample(), Some(sample(false, false, 0)));
        pods.mark_synced();
        pods.watch_failed();
        pods.watch_failed();
        assert_eq!(pods.sample(), Some(sample(true, true, 2)));
        pods.watch_answered();
        assert_eq!(pods.sample(), Some(sample(true, false, 2)));
    }

    /// Whatever the API server sends, the set holds at most MAX_BOUND_PODS pods (more are
    /// refused and counted; a removal makes room), MAX_IMAGES_PER_POD images a pod and no
    /// name past MAX_IMAGE_NAME_BYTES; a relist keeps the first pods by name.
    #[test]
    fn the_set_is_bounded_in_pods_images_and_name_length_and_counts_what_it_refuses() {
        let pods = BoundPods::default();
        pods.watch_started();
        for i in 0..MAX_BOUND_PODS + 5 {
            pods.set_pod(format!("ns/p{i:05}"), vec![format!("img:{i}")]);
        }
        assert_eq!(pods.len(), MAX_BOUND_PODS);
        assert_eq!(pods.sample().map(|s| s.refused), Some(5));
        // A held pod may still change; a removal makes room for a new one.
        pods.set_pod("ns/p00000".into(), vec!["other:1".into()]);
        assert!(pods.images().contains_key("other:1"));
        pods.remove_pod("ns/p00001");
        pods.set_pod("ns/late".into(), vec!["late:1".into()]);
        assert!(pods.images().contains_key("late:1"));
        assert_eq!(pods.sample().map(|s| s.refused), Some(5));
        // One pod's images and names.
        let many: Vec<String> = (0..MAX_IMAGES_PER_POD + 10)
            .map(|i| format!("many:{i:04}"))
            .collect();
        let long = format!("reg/{}:1", "x".repeat(MAX_IMAGE_NAME_BYTES));
        pods.replace_all(
            [
                ("a/many".to_owned(), many),
                ("a/long".to_owned(), vec![long.clone(), "ok:1".into()]),
            ]
            .into(),
        );
        assert_eq!(pods.read()["a/many"].len(), MAX_IMAGES_PER_POD);
        assert_eq!(pods.read()["a/long"], ["ok:1"]);
        // A relist past the cap keeps the first pods by name.
        let relist: BTreeMap<String, Vec<String>> = (0..MAX_BOUND_PODS + 3)
            .map(|i| (format!("ns/r{i:05}"), vec!["busybox:1".to_owned()]))
            .collect();
        pods.replace_all(relist);
        assert_eq!(pods.len(), MAX_BOUND_PODS);
        assert!(pods.read().contains_key("ns/r00000"));
        assert!(
            !pods
                .read()
                .contains_key(&format!("ns/r{:05}", MAX_BOUND_PODS))
        );
        assert_eq!(pods.sample().map(|s| s.refused), Some(8));
    }
}
