//! The pods bound to this node: a watch of `spec.nodeName=<node>` turned into the image names
//! each pod needs ([`pod_images`]), written to [`BoundPods`] as events come ([`PodWatch`]).
//!
//! Invariants: a pod is needed in any phase (a finished pod's images are what its next run, a
//! Job retry or a CronJob, pulls; the pod's removal ends the need); an `Init` starts a relist
//! buffered until `InitDone`, which replaces the set whole; a watch error is logged once per
//! change of state and the watcher retries with kube-rs's default backoff.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::{info, warn};

use crate::gc::BoundPods;

/// Every image `pod` names: its init, regular and ephemeral containers' and its image
/// volumes' (`spec.volumes[].image.reference`), sorted, each once.
pub fn pod_images(pod: &Pod) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
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
    relist: Option<BTreeMap<String, Vec<String>>>,
}

impl PodWatch {
    /// A watch writing `pods`.
    pub fn new(pods: BoundPods) -> PodWatch {
        PodWatch { pods, relist: None }
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: Event<Pod>) {
        match event {
            Event::Apply(pod) => self.pods.set_pod(pod_key(&pod), pod_images(&pod)),
            Event::Delete(pod) => self.pods.remove_pod(&pod_key(&pod)),
            Event::Init => self.relist = Some(BTreeMap::new()),
            Event::InitApply(pod) => {
                if let Some(relist) = &mut self.relist {
                    relist.insert(pod_key(&pod), pod_images(&pod));
                }
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.pods.replace_all(relist);
                    self.pods.mark_synced();
                    info!(pods = self.pods.len(), "Listed the pods bound to this node");
                }
            }
        }
    }
}

/// Watches the pods bound to `node` until the task is dropped, writing their images to `pods`.
pub async fn watch_bound_pods(client: Client, node: String, pods: BoundPods) {
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    pods.watch_started();
    let mut watch = PodWatch::new(pods.clone());
    let mut failing = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                pods.watch_answered();
                if failing {
                    info!(node, "Watching the pods bound to this node again");
                    failing = false;
                }
                watch.apply(event);
            }
            Err(e) => {
                pods.watch_failed();
                if !failing {
                    warn!(node, error = %e, "The watch of the pods bound to this node failed: the last set holds, retrying");
                    failing = true;
                }
            }
        }
    }
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
