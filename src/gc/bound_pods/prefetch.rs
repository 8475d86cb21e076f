//! Which of the bound pods' images the warm loop pulls ahead (issue 55's prefetch): a pod
//! bound to this node needs every image it names now, and the kubelet pulls a container's
//! image only when it starts that container (a main container's after every init container
//! has run). Pulled ahead with the node's own credentials, so a pod naming an
//! `imagePullSecret` is left out: its images may need that Secret, which the agent does not
//! read (a DaemonSet that can read every Secret is the risk the kubelet's node authorizer
//! avoids); the kubelet pulls them with it.
//!
//! Invariants: what a pod with pull Secrets names is never offered here, even when another
//! pod without them names the same image (that pod's pull would go with the node's
//! credentials, so it is offered under that pod); the set of pods with pull Secrets holds only
//! held pods (at most [`super::MAX_BOUND_PODS`]).

use std::collections::{BTreeMap, BTreeSet};

use super::BoundPods;

impl BoundPods {
    /// Sets whether `pod` names an `imagePullSecret`.
    pub fn set_pod_pull_secrets(&self, pod: &str, named: bool) {
        let mut secret_pods = self
            .secret_pods
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if named && self.read().contains_key(pod) {
            secret_pods.insert(pod.to_owned());
        } else {
            secret_pods.remove(pod);
        }
    }

    /// Replaces the pods that name an `imagePullSecret` at once (a relist), held pods only.
    pub fn replace_pod_pull_secrets(&self, mut pods: BTreeSet<String>) {
        {
            let held = self.read();
            pods.retain(|pod| held.contains_key(pod));
        }
        *self
            .secret_pods
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = pods;
    }

    /// The images to pull ahead for the pods bound here: each image a pod naming no
    /// `imagePullSecret` names, with the first such pod (by name).
    pub fn prefetch_images(&self) -> BTreeMap<String, String> {
        let secret_pods = self
            .secret_pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut images = BTreeMap::new();
        for (pod, names) in self.read().iter() {
            if secret_pods.contains(pod) {
                continue;
            }
            for name in names {
                images.entry(name.clone()).or_insert_with(|| pod.clone());
            }
        }
        images
    }

    /// The pods bound here that name an `imagePullSecret` (their images are not pulled
    /// ahead), by name.
    pub fn pods_with_pull_secrets(&self) -> Vec<String> {
        self.secret_pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_images_of_pods_with_pull_secrets_are_not_offered_for_prefetch() {
        let pods = BoundPods::default();
        pods.set_pod("ns/a".into(), vec!["shared:1".into(), "a:1".into()]);
        pods.set_pod("ns/b".into(), vec!["shared:1".into(), "private:1".into()]);
        pods.set_pod_pull_secrets("ns/b", true);
        // A pod not held is not recorded.
        pods.set_pod_pull_secrets("ns/gone", true);
        let offered = pods.prefetch_images();
        assert_eq!(
            offered.into_iter().collect::<Vec<_>>(),
            [
                ("a:1".to_owned(), "ns/a".to_owned()),
                ("shared:1".to_owned(), "ns/a".to_owned()),
            ]
        );
        assert_eq!(pods.pods_with_pull_secrets(), ["ns/b"]);
        // The pod goes: so does its mark.
        pods.remove_pod("ns/b");
        assert!(pods.pods_with_pull_secrets().is_empty());
        // A relist.
        pods.set_pod("ns/c".into(), vec!["c:1".into()]);
        pods.replace_pod_pull_secrets(["ns/a".to_owned(), "ns/x".to_owned()].into());
        assert_eq!(pods.pods_with_pull_secrets(), ["ns/a"]);
        assert_eq!(
            pods.prefetch_images().into_keys().collect::<Vec<_>>(),
            ["c:1"]
        );
        pods.set_pod_pull_secrets("ns/a", false);
        assert_eq!(pods.prefetch_images().len(), 3);
    }
}
