//! The DaemonSets' pod templates: a watch of every namespace's DaemonSets turned into the image
//! names each template names ([`daemonset_images`]), written to [`BoundPods`] as events come
//! ([`DaemonSetWatch`]). Which of them matter to this node is the bound pods' business: a
//! DaemonSet owning a pod bound here runs its template here next, so during a rollout its new
//! revision's images are needed (kept, and pulled ahead by the warm loop) before the pod is
//! replaced.
//!
//! Invariants: only reads (list and watch); each DaemonSet is held as its template's image
//! names, never as the object; a relist replaces the set once complete; a watch error is
//! logged once per change of state and the watcher retries with kube-rs's default backoff.
//! DaemonSets whose pods would run on this node but have none here yet are not followed
//! (that needs the scheduler's node selection: selectors, affinity, taints).

use std::collections::BTreeMap;

use super::reach::ApiReach;
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::info;

use super::pods::spec_images;
use crate::gc::BoundPods;

/// Every image `daemonset`'s pod template names, sorted, each once.
pub fn daemonset_images(daemonset: &DaemonSet) -> Vec<String> {
    daemonset
        .spec
        .template
        .spec
        .as_ref()
        .map(spec_images)
        .unwrap_or_default()
}

/// `namespace/name` of a DaemonSet.
fn daemonset_key(daemonset: &DaemonSet) -> String {
    format!(
        "{}/{}",
        daemonset.metadata.namespace.as_deref().unwrap_or_default(),
        daemonset.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The watch's state: the set it writes and the relist in progress.
#[derive(Debug)]
pub struct DaemonSetWatch {
    pods: BoundPods,
    relist: Option<BTreeMap<String, Vec<String>>>,
}

impl DaemonSetWatch {
    /// A watch writing `pods`' DaemonSets.
    pub fn new(pods: BoundPods) -> DaemonSetWatch {
        DaemonSetWatch { pods, relist: None }
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: Event<DaemonSet>) {
        match event {
            Event::Apply(ds) => self
                .pods
                .set_daemonset(daemonset_key(&ds), daemonset_images(&ds)),
            Event::Delete(ds) => self.pods.remove_daemonset(&daemonset_key(&ds)),
            Event::Init => self.relist = Some(BTreeMap::new()),
            Event::InitApply(ds) => {
                if let Some(relist) = &mut self.relist {
                    relist.insert(daemonset_key(&ds), daemonset_images(&ds));
                }
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    let listed = relist.len();
                    self.pods.replace_daemonsets(relist);
                    info!(daemonsets = listed, "Listed the DaemonSets");
                }
            }
        }
    }
}

/// Watches every namespace's DaemonSets until the task is dropped, writing their templates'
/// images to `pods`.
pub async fn watch_daemonsets(client: Client, pods: BoundPods, reach: ApiReach) {
    let api: Api<super::slim::Slim<DaemonSet>> = Api::all(client);
    let mut watch = DaemonSetWatch::new(pods.clone());
    super::drive::drive(
        api,
        watcher::Config::default(),
        "the DaemonSets",
        pods.daemonset_watch_health(),
        reach,
        |event| watch.apply(super::slim::unslim(event)),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::super::test_specs::pod_spec;
    use super::*;
    use k8s_openapi::api::apps::v1::DaemonSetSpec;
    use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn daemonset(name: &str, images: &[&str]) -> DaemonSet {
        DaemonSet {
            metadata: ObjectMeta {
                namespace: Some("kube-system".into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: DaemonSetSpec {
                template: PodTemplateSpec {
                    spec: Some(pod_spec(images)),
                    ..PodTemplateSpec::default()
                },
                ..DaemonSetSpec::default()
            },
            ..DaemonSet::default()
        }
    }

    fn pod_of(name: &str, images: &[&str], owner: Option<(&str, &str, &str)>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("kube-system".into()),
                name: Some(name.into()),
                owner_references: owner.map(|(api_version, kind, owner)| {
                    vec![OwnerReference {
                        api_version: api_version.into(),
                        kind: kind.into(),
                        name: owner.into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            spec: Some(pod_spec(images)),
            ..Pod::default()
        }
    }

    #[test]
    fn a_pods_controller_daemonset_is_read_from_its_controller_owner_reference_only() {
        use crate::cluster::controller_daemonset;
        let cases = [
            (
                Some(("apps/v1", "DaemonSet", "agent")),
                Some("kube-system/agent"),
            ),
            (Some(("apps/v1", "ReplicaSet", "web-5d")), None),
            (Some(("example.com/v1", "DaemonSet", "other")), None),
            (None, None),
        ];
        for (owner, want) in cases {
            let pod = pod_of("p", &["a:1"], owner);
            assert_eq!(controller_daemonset(&pod).as_deref(), want, "{owner:?}");
        }
        let mut not_controller = pod_of("p", &["a:1"], Some(("apps/v1", "DaemonSet", "agent")));
        if let Some(refs) = not_controller.metadata.owner_references.as_mut() {
            refs[0].controller = Some(false);
        }
        assert_eq!(controller_daemonset(&not_controller), None);
    }

    /// A rollout: the DaemonSet owning a pod bound here changes its template; the new
    /// revision's image is needed here (with its source) while the old pod still runs the old
    /// one, and the change is told so a detect pins it at once. A DaemonSet with no pod here
    /// keeps nothing; the pod's deletion ends the template's need.
    #[tokio::test]
    async fn a_daemonset_owning_a_bound_pod_makes_its_templates_images_needed_here() {
        use crate::cluster::PodWatch;
        let pods = BoundPods::default();
        let mut pod_watch = PodWatch::new(pods.clone());
        let mut ds_watch = DaemonSetWatch::new(pods.clone());
        ds_watch.apply(Event::Init);
        ds_watch.apply(Event::InitApply(daemonset("agent", &["agent:1"])));
        ds_watch.apply(Event::InitApply(daemonset("elsewhere", &["gpu:1"])));
        ds_watch.apply(Event::InitDone);
        pod_watch.apply(Event::Apply(pod_of(
            "agent-x1",
            &["agent:1"],
            Some(("apps/v1", "DaemonSet", "agent")),
        )));
        pods.changed().await;
        assert_eq!(
            pods.daemonset_images(),
            [("agent:1".to_owned(), "kube-system/agent".to_owned())].into()
        );
        // The rollout's new template.
        ds_watch.apply(Event::Apply(daemonset("agent", &["agent:2", "sidecar:1"])));
        pods.changed().await;
        let images = pods.images();
        assert_eq!(images["agent:1"], "kube-system/agent-x1", "the pod runs it");
        assert_eq!(images["agent:2"], "DaemonSet kube-system/agent");
        assert_eq!(images["sidecar:1"], "DaemonSet kube-system/agent");
        assert!(!images.contains_key("gpu:1"), "no pod of it here");
        // A status update (same template) tells nothing.
        ds_watch.apply(Event::Apply(daemonset("agent", &["agent:2", "sidecar:1"])));
        ds_watch.apply(Event::Apply(daemonset("elsewhere", &["gpu:2"])));
        let told = tokio::time::timeout(std::time::Duration::ZERO, pods.changed()).await;
        assert!(told.is_err(), "no change this node needs");
        // The pod goes: nothing of the DaemonSet is needed any more.
        pod_watch.apply(Event::Delete(pod_of("agent-x1", &["agent:1"], None)));
        assert!(pods.images().is_empty());
        assert!(pods.daemonset_images().is_empty());
        // A relist of the pods keeps the owners it lists.
        pod_watch.apply(Event::Init);
        pod_watch.apply(Event::InitApply(pod_of(
            "agent-x2",
            &["agent:2"],
            Some(("apps/v1", "DaemonSet", "agent")),
        )));
        pod_watch.apply(Event::InitDone);
        assert_eq!(
            pods.daemonset_images().keys().collect::<Vec<_>>(),
            ["agent:2", "sidecar:1"]
        );
        ds_watch.apply(Event::Delete(daemonset("agent", &[])));
        assert!(pods.daemonset_images().is_empty());
    }

    #[test]
    fn the_daemonsets_held_are_bounded_and_refusals_counted() {
        let pods = BoundPods::default();
        pods.watch_started();
        pods.daemonset_watch_started();
        for i in 0..crate::gc::MAX_DAEMONSETS + 3 {
            pods.set_daemonset(format!("ns/d{i:05}"), vec![format!("img:{i}")]);
        }
        let sample = pods.sample().and_then(|s| s.daemonsets).expect("started");
        assert_eq!(sample.held, crate::gc::MAX_DAEMONSETS as u64);
        assert_eq!(sample.refused, 3);
        assert!(!sample.watch.synced);
    }
}
