//! Which of the bound pods' images the warm loop pulls ahead (issue 55's prefetch): a pod
//! bound to this node needs every image it names now, and the kubelet pulls a container's
//! image only when it starts that container (a main container's after every init container
//! has run). Pulled ahead with the node's own credentials; a pod naming an `imagePullSecret`
//! is left out unless the operator opts in to the agent reading pods' pull Secrets
//! (`clusterSignalsPrefetchPullSecrets`, off by default: a DaemonSet that can read every
//! Secret is the risk the kubelet's node authorizer avoids): then its images are pulled with
//! those Secrets, read in the pod's namespace at the pull ([`PodPullSecretSource`]). What is
//! left out is said, with why ([`BoundPods::not_pulled_ahead`]: `gc --dry-run`, the log).
//!
//! Invariants: without the opt-in, what a pod with pull Secrets names is never offered here,
//! even when another pod without them names the same image (that pod's pull would go with the
//! node's credentials, so it is offered under that pod); with it, a pod without pull Secrets
//! is still preferred for an image both name. The pods with pull Secrets hold only held pods
//! (at most [`super::MAX_BOUND_PODS`]), each with at most [`MAX_PULL_SECRETS_PER_POD`] names;
//! only the Secrets' names are held here, never their content.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::BoundPods;
use crate::gc::PullSecretRead;

/// The most pull Secret names held for one pod (the first, as the pod lists them).
pub const MAX_PULL_SECRETS_PER_POD: usize = 16;

/// The setting that lets the agent read pods' pull Secrets for the prefetch.
pub const PREFETCH_PULL_SECRETS_SETTING: &str = "clusterSignalsPrefetchPullSecrets";

/// Reads a pull Secret in a pod's namespace (the cluster's `get`, with the RBAC the chart's
/// `clusterSignals.prefetchPullSecrets` grants).
pub trait PodPullSecretSource: Send + Sync + std::fmt::Debug {
    /// Reads the Secret `name` in `namespace`: its manifest's JSON, or why not.
    fn read_in(&self, namespace: &str, name: &str) -> PullSecretRead;
}

/// A bound pod's image that is not pulled ahead, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NotPulledAhead {
    /// The image reference.
    pub image: String,
    /// The pod that names it (`namespace/name`).
    pub pod: String,
    /// Why, for people.
    pub reason: String,
}

impl BoundPods {
    /// Sets the pull Secrets `pod` names (empty: none).
    pub fn set_pod_pull_secrets(&self, pod: &str, mut names: Vec<String>) {
        names.truncate(MAX_PULL_SECRETS_PER_POD);
        let mut secret_pods = self
            .secret_pods
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !names.is_empty() && self.read().contains_key(pod) {
            secret_pods.insert(pod.to_owned(), names);
        } else {
            secret_pods.remove(pod);
        }
    }

    /// Replaces the pods that name pull Secrets at once (a relist), held pods only.
    pub fn replace_pod_pull_secrets(&self, mut pods: BTreeMap<String, Vec<String>>) {
        {
            let held = self.read();
            pods.retain(|pod, names| {
                names.truncate(MAX_PULL_SECRETS_PER_POD);
                !names.is_empty() && held.contains_key(pod)
            });
        }
        *self
            .secret_pods
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = pods;
    }

    /// Lets the prefetch pull the images of pods naming pull Secrets, with those Secrets read
    /// through `source` (`clusterSignalsPrefetchPullSecrets`).
    pub fn set_pod_secret_source(&self, source: Arc<dyn PodPullSecretSource>) {
        *self
            .pod_secrets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(source);
    }

    /// The reader of pods' pull Secrets, when the operator opted in.
    pub fn pod_secret_source(&self) -> Option<Arc<dyn PodPullSecretSource>> {
        self.pod_secrets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The images to pull ahead for the pods bound here, each with the pod it is pulled for:
    /// a pod naming no `imagePullSecret` first (by name), then, with the opt-in, a pod naming
    /// some (its pull then reads them: [`BoundPods::pod_pull_secrets`]).
    pub fn prefetch_images(&self) -> BTreeMap<String, String> {
        let with_secrets = self.pod_secret_source().is_some();
        let secret_pods = self
            .secret_pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut images = BTreeMap::new();
        let pods = self.read();
        for (pod, names) in pods
            .iter()
            .filter(|(pod, _)| !secret_pods.contains_key(*pod))
        {
            for name in names {
                images.entry(name.clone()).or_insert_with(|| pod.clone());
            }
        }
        if with_secrets {
            for (pod, names) in pods
                .iter()
                .filter(|(pod, _)| secret_pods.contains_key(*pod))
            {
                for name in names {
                    images.entry(name.clone()).or_insert_with(|| pod.clone());
                }
            }
        }
        images
    }

    /// The images the prefetch leaves out and why: without the opt-in, each image only pods
    /// naming pull Secrets name (with the first such pod). Empty with the opt-in.
    pub fn not_pulled_ahead(&self) -> Vec<NotPulledAhead> {
        if self.pod_secret_source().is_some() {
            return Vec::new();
        }
        let offered = self.prefetch_images();
        let secret_pods = self
            .secret_pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: BTreeMap<String, NotPulledAhead> = BTreeMap::new();
        for (pod, secrets) in secret_pods.iter() {
            for image in self.read().get(pod).into_iter().flatten() {
                if offered.contains_key(image) || out.contains_key(image) {
                    continue;
                }
                out.insert(
                    image.clone(),
                    NotPulledAhead {
                        image: image.clone(),
                        pod: pod.clone(),
                        reason: format!(
                            "not pulled ahead: pod {pod} names the imagePullSecret(s) {}, and \
                             the agent reads pods' pull Secrets only with \
                             {PREFETCH_PULL_SECRETS_SETTING} (off); the kubelet pulls it with \
                             them when it starts the container",
                            secrets.join(", ")
                        ),
                    },
                );
            }
        }
        out.into_values().collect()
    }

    /// The pull Secrets `pod` names (empty: none, or the pod is not held).
    pub fn pod_pull_secrets(&self, pod: &str) -> Vec<String> {
        self.secret_pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(pod)
            .cloned()
            .unwrap_or_default()
    }

    /// The pods bound here that name an `imagePullSecret`, by name.
    pub fn pods_with_pull_secrets(&self) -> Vec<String> {
        self.secret_pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
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
        pods.set_pod_pull_secrets("ns/b", vec!["regcred".into()]);
        // A pod not held is not recorded.
        pods.set_pod_pull_secrets("ns/gone", vec!["regcred".into()]);
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
        pods.replace_pod_pull_secrets(
            [
                ("ns/a".to_owned(), vec!["s".to_owned()]),
                ("ns/x".to_owned(), vec!["s".to_owned()]),
            ]
            .into(),
        );
        assert_eq!(pods.pods_with_pull_secrets(), ["ns/a"]);
        assert_eq!(
            pods.prefetch_images().into_keys().collect::<Vec<_>>(),
            ["c:1"]
        );
        pods.set_pod_pull_secrets("ns/a", Vec::new());
        assert_eq!(pods.prefetch_images().len(), 3);
    }

    #[derive(Debug)]
    struct NoSecrets;

    impl PodPullSecretSource for NoSecrets {
        fn read_in(&self, namespace: &str, name: &str) -> PullSecretRead {
            let what = format!("{namespace}/{name}");
            Box::pin(async move { Err(what) })
        }
    }

    #[test]
    fn without_the_opt_in_a_secret_pods_own_images_are_said_not_pulled_ahead_with_why() {
        let pods = BoundPods::default();
        pods.set_pod("ns/open".into(), vec!["shared:1".into()]);
        pods.set_pod(
            "ns/private".into(),
            vec!["shared:1".into(), "private:1".into()],
        );
        pods.set_pod_pull_secrets("ns/private", vec!["regcred".into(), "other".into()]);
        let left_out = pods.not_pulled_ahead();
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert_eq!(left_out[0].image, "private:1");
        assert_eq!(left_out[0].pod, "ns/private");
        assert!(
            left_out[0].reason.contains("regcred, other")
                && left_out[0].reason.contains(PREFETCH_PULL_SECRETS_SETTING),
            "{}",
            left_out[0].reason
        );
        assert_eq!(pods.pod_pull_secrets("ns/private"), ["regcred", "other"]);
        assert!(pods.pod_pull_secrets("ns/open").is_empty());
    }

    #[test]
    fn with_the_opt_in_a_secret_pods_images_are_offered_under_it_after_pods_without() {
        let pods = BoundPods::default();
        pods.set_pod(
            "ns/a-private".into(),
            vec!["shared:1".into(), "private:1".into()],
        );
        pods.set_pod("ns/b-open".into(), vec!["shared:1".into()]);
        pods.set_pod_pull_secrets("ns/a-private", vec!["regcred".into()]);
        pods.set_pod_secret_source(Arc::new(NoSecrets));
        assert_eq!(
            pods.prefetch_images().into_iter().collect::<Vec<_>>(),
            [
                ("private:1".to_owned(), "ns/a-private".to_owned()),
                // ns/a-private sorts first, yet the pod with no Secret pulls the shared image.
                ("shared:1".to_owned(), "ns/b-open".to_owned()),
            ]
        );
        assert!(pods.not_pulled_ahead().is_empty());
    }

    #[test]
    fn a_pods_pull_secret_names_are_capped() {
        let pods = BoundPods::default();
        pods.set_pod("ns/a".into(), vec!["a:1".into()]);
        let many: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
        pods.set_pod_pull_secrets("ns/a", many.clone());
        assert_eq!(
            pods.pod_pull_secrets("ns/a").len(),
            MAX_PULL_SECRETS_PER_POD
        );
        pods.replace_pod_pull_secrets([("ns/a".to_owned(), many)].into());
        assert_eq!(
            pods.pod_pull_secrets("ns/a").len(),
            MAX_PULL_SECRETS_PER_POD
        );
    }
}
