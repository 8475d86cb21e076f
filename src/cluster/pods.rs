//! The pods bound to this node: a watch of `spec.nodeName=<node>` turned into the image names
//! each pod needs ([`pod_images`]), written to [`BoundPods`] as events come ([`PodWatch`]).
//!
//! Invariants: a pod is needed in any phase (a finished pod's images are what its next run, a
//! Job retry or a CronJob, pulls; the pod's removal ends the need); an `Init` starts a relist
//! buffered until `InitDone`, which replaces the set whole; a watch error is logged once per
//! change of state and the watcher retries with kube-rs's default backoff.

use std::collections::BTreeMap;

use super::reach::ApiReach;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::api::ObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::info;

use crate::gc::BoundPods;

/// Every image `pod` names: its init, regular and ephemeral containers' and its image
/// volumes' (`spec.volumes[].image.reference`), sorted, each once.
pub fn pod_images(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().map(spec_images).unwrap_or_default()
}

/// The name of the object's controller (`ownerReferences[]` with `controller: true`) when it
/// is of `kind` in `api_version`.
pub(super) fn controller_named<'a>(
    meta: &'a ObjectMeta,
    api_version: &str,
    kind: &str,
) -> Option<&'a str> {
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    (owner.kind == kind && owner.api_version == api_version).then_some(owner.name.as_str())
}

/// `namespace/<the pod's controller>` when that controller is of `kind` in `api_version`.
fn pod_controller(pod: &Pod, api_version: &str, kind: &str) -> Option<String> {
    controller_named(&pod.metadata, api_version, kind).map(|name| {
        format!(
            "{}/{name}",
            pod.metadata.namespace.as_deref().unwrap_or_default()
        )
    })
}

/// The pod's controller when it is a DaemonSet (`ownerReferences[]` with `controller: true`,
/// kind `DaemonSet` of `apps/v1`), as `namespace/name` in the pod's namespace.
pub fn controller_daemonset(pod: &Pod) -> Option<String> {
    pod_controller(pod, "apps/v1", "DaemonSet")
}

/// The pod's controller when it is a Job (`batch/v1`), as `namespace/name`: a CronJob's Job
/// is named `<cronjob>-<scheduled minutes>` (kubernetes pkg/controller/cronjob/utils.go,
/// `getJobName`), so the pods bound here tell which CronJobs ran here
/// ([`crate::gc::BoundPods::ran_cronjob`]).
pub fn controller_job(pod: &Pod) -> Option<String> {
    pod_controller(pod, "batch/v1", "Job")
}

/// Every image a pod spec names (see [`pod_images`]), sorted, each once: a pod's, or a
/// workload's template's.
pub fn spec_images(spec: &PodSpec) -> Vec<String> {
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter_map(|c| c.image.clone());
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .filter_map(|c| c.image.clone());
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.image.as_ref().and_then(|i| i.reference.clone()));
    let mut images: Vec<String> = containers
        .chain(ephemeral)
        .chain(volumes)
        .filter(|name| !name.is_empty())
        .collect();
    images.sort();
    images.dedup();
    images
}

/// The `imagePullSecrets` `pod` names, by name (its images are then pulled ahead only with
/// them, when the operator opts in: `gc::BoundPods::prefetch_images`). A reference with no
/// name is the API's default and names nothing.
fn pull_secret_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| !r.name.is_empty())
        .map(|r| r.name.clone())
        .collect()
}

/// `namespace/name` of a pod.
fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The watch's state: the set it writes and the relist in progress.
#[derive(Debug)]
pub struct PodWatch {
    pods: BoundPods,
    relist: Option<Relist>,
}

/// A relist in progress: each pod's images, and its DaemonSet when one owns it.
#[derive(Debug, Default)]
struct Relist {
    images: BTreeMap<String, Vec<String>>,
    owners: BTreeMap<String, String>,
    jobs: BTreeMap<String, String>,
    pull_secrets: BTreeMap<String, Vec<String>>,
}

impl PodWatch {
    /// A watch writing `pods`.
    pub fn new(pods: BoundPods) -> PodWatch {
        PodWatch { pods, relist: None }
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: Event<Pod>) {
        match event {
            Event::Apply(pod) => {
                let key = pod_key(&pod);
                self.pods.set_pod_job(&key, controller_job(&pod));
                self.pods
                    .set_pod_owned(key.clone(), pod_images(&pod), controller_daemonset(&pod));
                self.pods
                    .set_pod_pull_secrets(&key, pull_secret_names(&pod));
            }
            Event::Delete(pod) => self.pods.remove_pod(&pod_key(&pod)),
            Event::Init => self.relist = Some(Relist::default()),
            Event::InitApply(pod) => {
                if let Some(relist) = &mut self.relist {
                    let key = pod_key(&pod);
                    if let Some(ds) = controller_daemonset(&pod) {
                        relist.owners.insert(key.clone(), ds);
                    }
                    if let Some(job) = controller_job(&pod) {
                        relist.jobs.insert(key.clone(), job);
                    }
                    let secrets = pull_secret_names(&pod);
                    if !secrets.is_empty() {
                        relist.pull_secrets.insert(key.clone(), secrets);
                    }
                    relist.images.insert(key, pod_images(&pod));
                }
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.pods.replace_pod_jobs(relist.jobs);
                    self.pods.replace_all_owned(relist.images, relist.owners);
                    self.pods.replace_pod_pull_secrets(relist.pull_secrets);
                    self.pods.mark_synced();
                    info!(pods = self.pods.len(), "Listed the pods bound to this node");
                }
            }
        }
    }
}

/// Watches the pods bound to `node` until the task is dropped, writing their images to `pods`.
pub async fn watch_bound_pods(client: Client, node: String, pods: BoundPods, reach: ApiReach) {
    let api: Api<super::slim::Slim<Pod>> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut watch = PodWatch::new(pods.clone());
    super::drive::drive(
        api,
        config,
        "the pods bound to this node",
        pods.watch_health(),
        reach,
        |event| watch.apply(super::slim::unslim(event)),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, EphemeralContainer, ImageVolumeSource, PodSpec, Volume,
    };
    use kube::api::ObjectMeta;

    fn container(image: &str) -> Container {
        Container {
            image: Some(image.to_owned()),
            ..Container::default()
        }
    }

    fn pod(name: &str, init: &[&str], main: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                init_containers: Some(init.iter().map(|i| container(i)).collect()),
                containers: main.iter().map(|i| container(i)).collect(),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn a_pod_needs_every_image_it_names_init_regular_ephemeral_and_volumes() {
        let mut p = pod("a", &["init:1"], &["main:1", "side:1", "main:1"]);
        let spec = p.spec.as_mut().expect("spec");
        spec.ephemeral_containers = Some(vec![EphemeralContainer {
            image: Some("debug:1".into()),
            ..EphemeralContainer::default()
        }]);
        spec.volumes = Some(vec![Volume {
            name: "model".into(),
            image: Some(ImageVolumeSource {
                reference: Some("model:7".into()),
                ..ImageVolumeSource::default()
            }),
            ..Volume::default()
        }]);
        assert_eq!(
            pod_images(&p),
            ["debug:1", "init:1", "main:1", "model:7", "side:1"]
        );
        assert!(pod_images(&Pod::default()).is_empty());
    }

    #[test]
    fn a_pod_naming_a_pull_secret_is_marked_by_the_watch_and_by_a_relist() {
        let with_secret = |name: &str, image: &str| {
            let mut p = pod(name, &[], &[image]);
            p.spec.as_mut().expect("spec").image_pull_secrets =
                Some(vec![k8s_openapi::api::core::v1::LocalObjectReference {
                    name: "regcred".into(),
                }]);
            p
        };
        let pods = BoundPods::default();
        let mut watch = PodWatch::new(pods.clone());
        watch.apply(Event::Apply(with_secret("a", "private:1")));
        watch.apply(Event::Apply(pod("b", &[], &["public:1"])));
        assert_eq!(pods.pods_with_pull_secrets(), ["ns/a"]);
        // An empty list names no Secret.
        let mut empty = pod("c", &[], &["public:2"]);
        empty.spec.as_mut().expect("spec").image_pull_secrets = Some(Vec::new());
        watch.apply(Event::Apply(empty));
        assert_eq!(pods.pods_with_pull_secrets(), ["ns/a"]);
        watch.apply(Event::Init);
        watch.apply(Event::InitApply(pod("a", &[], &["private:1"])));
        watch.apply(Event::InitApply(with_secret("d", "private:2")));
        watch.apply(Event::InitDone);
        assert_eq!(pods.pods_with_pull_secrets(), ["ns/d"]);
        assert_eq!(pods.pod_pull_secrets("ns/d"), ["regcred"]);
        assert_eq!(
            pods.prefetch_images().into_keys().collect::<Vec<_>>(),
            ["private:1"]
        );
    }

    #[test]
    fn a_relist_replaces_the_set_only_once_complete_and_deletes_end_a_need() {
        let pods = BoundPods::default();
        let mut watch = PodWatch::new(pods.clone());
        watch.apply(Event::Apply(pod("a", &["init:1"], &["main:1"])));
        watch.apply(Event::Apply(pod("b", &[], &["web:1"])));
        assert_eq!(pods.len(), 2);
        watch.apply(Event::Delete(pod("b", &[], &["web:1"])));
        assert!(!pods.images().contains_key("web:1"));
        // A relist: the old set holds until InitDone, then only what was listed is held.
        watch.apply(Event::Init);
        watch.apply(Event::InitApply(pod("c", &[], &["batch:2"])));
        assert!(
            pods.images().contains_key("main:1"),
            "held until the relist completes"
        );
        assert!(!pods.is_synced());
        watch.apply(Event::InitDone);
        assert!(pods.is_synced(), "a complete list marks the set synced");
        assert_eq!(pods.images().keys().collect::<Vec<_>>(), ["batch:2"]);
        assert_eq!(pods.images()["batch:2"], "ns/c");
    }
}
