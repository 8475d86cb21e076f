//! The images the pods bound to this node name, as the cluster's watch last saw them
//! (`clusterSignals`: the `cluster` module, feature `kube`, writes them; each detect reads them). A
//! pod bound to the node needs every image it names now, whether or not its container exists yet:
//! an init container still running leaves the main container's image unused in the runtime's view
//! (kubernetes issue 123631), and the kubelet's GC may remove it. A pod a DaemonSet owns is
//! replaced by that DaemonSet's current template (a rollout's new revision, or the same): the
//! template's images are needed on this node too ([`BoundPods::daemonset_images`]; the
//! DaemonSets' watch writes them, `daemonsets.rs`).
//!
//! Invariants: a handle is shared (clones see one set); a pod is held with its images until
//! the watch says it is gone or a relist leaves it out; with no watch running the set is empty
//! and nothing is kept by it. A DaemonSet's template keeps its images only while a held pod
//! names that DaemonSet as its controller. Memory is bounded whatever the API server sends: at
//! most [`MAX_BOUND_PODS`] pods (a node runs a few hundred; the kubelet's default maxPods is
//! 110) and [`MAX_DAEMONSETS`] DaemonSets, [`MAX_IMAGES_PER_POD`] images a pod or template, each
//! name at most [`MAX_IMAGE_NAME_BYTES`]; a pod past the cap is not held, counted and logged
//! once (its images are then kept by nothing of this set).

mod daemonsets;
mod prefetch;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use tracing::warn;

use super::watch_health::{WatchHealth, WatchSample};
use daemonsets::DaemonSetTemplates;
pub use daemonsets::MAX_DAEMONSETS;
pub use prefetch::{
    MAX_PULL_SECRETS_PER_POD, NotPulledAhead, PREFETCH_PULL_SECRETS_SETTING, PodPullSecretSource,
};

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
    /// Told with `changed`, for the warm loop (a second waiter: `Notify` wakes one).
    changed_for_warm: Arc<tokio::sync::Notify>,
    /// Whether the watch has listed the pods once: until then the set is not the node's.
    synced: Arc<tokio::sync::watch::Sender<bool>>,
    /// The pods' watch's health, for the metrics (`refused`: pods not held because
    /// [`MAX_BOUND_PODS`] were).
    health: Arc<WatchHealth>,
    /// Each held pod's controller, when it is a DaemonSet: `namespace/name`.
    owners: Arc<RwLock<BTreeMap<String, String>>>,
    /// The DaemonSets' templates (written by their own watch).
    daemonsets: DaemonSetTemplates,
    /// Each held pod's controller, when it is a Job: `namespace/name` (which CronJobs ran
    /// here, [`BoundPods::ran_cronjob`]).
    jobs: Arc<RwLock<BTreeMap<String, String>>>,
    /// The held pods that name an `imagePullSecret`, with the Secrets' names: their images
    /// are pulled ahead only with those Secrets (`prefetch.rs`).
    secret_pods: Arc<RwLock<BTreeMap<String, Vec<String>>>>,
    /// The reader of the pods' pull Secrets, set only when the operator opts in
    /// (`clusterSignalsPrefetchPullSecrets`); `None`: a pod naming one gets nothing pulled
    /// ahead.
    pod_secrets: Arc<RwLock<Option<Arc<dyn prefetch::PodPullSecretSource>>>>,
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
    /// The DaemonSets' watch; `None` until it started.
    pub daemonsets: Option<DaemonSetsSample>,
    /// The CronJobs' watch ([`super::ClusterSignals`]); `None` until it started (filled by
    /// whoever holds both sets: the agent's admin backend).
    pub cronjobs: Option<WatchSample>,
    /// The ReplicaSets' watch; `None` until it started.
    pub replicasets: Option<WatchSample>,
    /// What the keep share left out at the last detect (`clusterSignalsKeepShare`); `None`:
    /// nothing.
    pub over_share: Option<crate::gc::OverShareSample>,
}

/// The DaemonSets' watch at one moment, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DaemonSetsSample {
    /// DaemonSets held (any node's).
    pub held: u64,
    /// DaemonSets not held because [`MAX_DAEMONSETS`] were.
    pub refused: u64,
    /// Distinct images the templates of the DaemonSets owning a pod bound to this node name.
    pub images: u64,
    /// How the watch fares.
    pub watch: WatchSample,
}

impl BoundPods {
    /// Sets the images `pod` names (a pod naming none is removed; see the module's bounds).
    pub fn set_pod(&self, pod: String, images: Vec<String>) {
        self.set_pod_owned(pod, images, None);
    }

    /// Sets the images `pod` names and its controller when a DaemonSet owns it
    /// (`namespace/name`): that DaemonSet's template is needed here too.
    pub fn set_pod_owned(&self, pod: String, images: Vec<String>, daemonset: Option<String>) {
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
                pods.insert(pod.clone(), images.clone()) != Some(images)
            }
        };
        let held = self.read().contains_key(&pod);
        let owner_changed = self.set_owner(&pod, daemonset.filter(|_| held));
        self.told(changed || owner_changed);
    }

    /// Sets or clears `pod`'s DaemonSet; returns whether that changes what is needed.
    fn set_owner(&self, pod: &str, daemonset: Option<String>) -> bool {
        let old = {
            let mut owners = self.owners_mut();
            match &daemonset {
                Some(ds) => owners.insert(pod.to_owned(), ds.clone()),
                None => owners.remove(pod),
            }
        };
        old != daemonset
            && old
                .iter()
                .chain(daemonset.iter())
                .any(|ds| self.daemonsets.images_of(ds).is_some())
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

    /// Sets or clears `pod`'s Job (`namespace/name`); nothing is needed by it, so nothing is
    /// told.
    pub fn set_pod_job(&self, pod: &str, job: Option<String>) {
        let mut jobs = self
            .jobs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match job {
            Some(job) if jobs.len() < MAX_BOUND_PODS || jobs.contains_key(pod) => {
                jobs.insert(pod.to_owned(), job);
            }
            _ => {
                jobs.remove(pod);
            }
        }
    }

    /// Replaces every pod's Job at once (a relist): the first [`MAX_BOUND_PODS`] by pod.
    pub fn replace_pod_jobs(&self, mut jobs: BTreeMap<String, String>) {
        while jobs.len() > MAX_BOUND_PODS {
            jobs.pop_last();
        }
        *self
            .jobs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = jobs;
    }

    /// Whether a pod bound here belongs to a Job of `cronjob` (`namespace/name`): a Job
    /// named `<cronjob>-<digits>` in its namespace (the CronJob controller's naming).
    pub fn ran_cronjob(&self, cronjob: &str) -> bool {
        let jobs = self
            .jobs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        jobs.values().any(|job| {
            job.strip_prefix(cronjob)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }

    /// Removes `pod`.
    pub fn remove_pod(&self, pod: &str) {
        self.owners_mut().remove(pod);
        self.set_pod_job(pod, None);
        self.set_pod_pull_secrets(pod, Vec::new());
        let changed = self.write().remove(pod).is_some();
        if changed {
            self.health.full.store(false, Ordering::Relaxed);
        }
        self.told(changed);
    }

    /// Replaces every pod at once (a relist): the first [`MAX_BOUND_PODS`] by name.
    pub fn replace_all(&self, pods: BTreeMap<String, Vec<String>>) {
        self.replace_all_owned(pods, BTreeMap::new());
    }

    /// [`BoundPods::replace_all`] with each pod's DaemonSet, when one owns it.
    pub fn replace_all_owned(
        &self,
        pods: BTreeMap<String, Vec<String>>,
        mut owners: BTreeMap<String, String>,
    ) {
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
        owners.retain(|pod, _| pods.contains_key(pod));
        let owners_changed = {
            let mut held = self.owners_mut();
            let changed = *held != owners;
            *held = owners;
            changed
        };
        let changed = {
            let mut held = self.write();
            let changed = *held != pods;
            *held = pods;
            changed
        };
        self.told(changed || owners_changed);
    }

    /// The DaemonSets' watch started.
    pub fn daemonset_watch_started(&self) {
        self.daemonsets.health.started();
    }

    /// Sets `daemonset`'s (`namespace/name`) template images (none: removes it).
    pub fn set_daemonset(&self, daemonset: String, images: Vec<String>) {
        let key = daemonset.clone();
        let changed = self.daemonsets.set(daemonset, bounded(images));
        self.told(changed && self.owns_a_pod(&key));
    }

    /// Removes `daemonset`.
    pub fn remove_daemonset(&self, daemonset: &str) {
        let changed = self.daemonsets.remove(daemonset);
        self.told(changed && self.owns_a_pod(daemonset));
    }

    /// Replaces every DaemonSet at once (a relist).
    pub fn replace_daemonsets(&self, daemonsets: BTreeMap<String, Vec<String>>) {
        let bounded = daemonsets
            .into_iter()
            .map(|(name, images)| (name, bounded(images)))
            .collect();
        let changed = self.daemonsets.replace_all(bounded);
        self.told(changed.iter().any(|ds| self.owns_a_pod(ds)));
    }

    fn owns_a_pod(&self, daemonset: &str) -> bool {
        self.owners_ref().values().any(|ds| ds == daemonset)
    }

    /// The images the templates of the DaemonSets owning a pod bound to this node name, each
    /// with its first DaemonSet (by name): what those pods run next, here.
    pub fn daemonset_images(&self) -> BTreeMap<String, String> {
        let owners: std::collections::BTreeSet<String> =
            self.owners_ref().values().cloned().collect();
        let mut images = BTreeMap::new();
        for ds in owners {
            for name in self.daemonsets.images_of(&ds).into_iter().flatten() {
                images.entry(name).or_insert_with(|| ds.clone());
            }
        }
        images
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

    /// The pods' watch's health, for its driver (`cluster`).
    pub fn watch_health(&self) -> Arc<WatchHealth> {
        Arc::clone(&self.health)
    }

    /// The DaemonSets' watch's health, for its driver (`cluster`).
    pub fn daemonset_watch_health(&self) -> Arc<WatchHealth> {
        Arc::clone(&self.daemonsets.health)
    }

    /// A watch now writes this set.
    pub fn watch_started(&self) {
        self.health.started();
    }

    /// The watch met an error (it retries; the set holds).
    pub fn watch_failed(&self) {
        self.health.failed();
    }

    /// The watch delivered an event again.
    pub fn watch_answered(&self) {
        self.health.answered();
    }

    /// The state now; `None` until a watch started (signals off, or no API server).
    pub fn sample(&self) -> Option<BoundPodsSample> {
        let watch = self.health.sample(self.is_synced())?;
        let (pods, images) = {
            let held = self.read();
            let images: std::collections::BTreeSet<&String> = held.values().flatten().collect();
            (held.len() as u64, images.len() as u64)
        };
        let (held, refused, synced) = self.daemonsets.counts();
        let daemonsets = self
            .daemonsets
            .health
            .sample(synced)
            .map(|watch| DaemonSetsSample {
                held,
                refused,
                images: self.daemonset_images().len() as u64,
                watch,
            });
        Some(BoundPodsSample {
            pods,
            images,
            synced: watch.synced,
            failing: watch.failing,
            errors: watch.errors,
            refused: self.health.refused.load(Ordering::Relaxed),
            daemonsets,
            cronjobs: None,
            replicasets: None,
            over_share: None,
        })
    }

    /// Resolves at the set's next change, as [`BoundPods::changed`] does, for a second waiter
    /// (the warm loop, which pulls a DaemonSet's new template ahead).
    pub async fn changed_for_warm(&self) {
        self.changed_for_warm.notified().await;
    }

    fn told(&self, changed: bool) {
        if changed {
            self.changed_for_warm.notify_one();
            self.changed.notify_one();
        }
    }

    /// Each image name with the first pod (by name) that names it, then each image a
    /// DaemonSet owning one of them runs next ([`BoundPods::daemonset_images`]) with
    /// `DaemonSet namespace/name`.
    pub fn images(&self) -> BTreeMap<String, String> {
        let mut images = BTreeMap::new();
        for (pod, names) in self.read().iter() {
            for name in names {
                images.entry(name.clone()).or_insert_with(|| pod.clone());
            }
        }
        for (name, ds) in self.daemonset_images() {
            images
                .entry(name)
                .or_insert_with(|| format!("DaemonSet {ds}"));
        }
        images
    }

    /// Each held pod with the images it names, by `namespace/name`; `None` until the watch
    /// listed the pods once (until then the set is not the node's).
    pub fn listed_pods(&self) -> Option<BTreeMap<String, Vec<String>>> {
        self.is_synced().then(|| self.read().clone())
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

    fn owners_ref(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, String>> {
        self.owners
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn owners_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, String>> {
        self.owners
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
            daemonsets: None,
            cronjobs: None,
            replicasets: None,
            over_share: None,
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
