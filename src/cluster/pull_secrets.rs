//! The readers of pull Secrets: those KeepSets name (`spec.pullSecrets`), a `get` of one Secret
//! in the agent's own namespace (the chart's), through the Role `keepSets.pullSecrets`
//! renders; and, only when the operator opts in (`clusterSignalsPrefetchPullSecrets`, the
//! chart's `clusterSignals.prefetchPullSecrets` and its ClusterRole rule), those a pod bound
//! to this node names, a `get` in that pod's namespace, for the prefetch of its images. The
//! Secret goes back to the agent as its manifest's JSON, which the agent parses as any pull
//! Secret (`pull::parse_pull_secret`).
//!
//! Invariants: nothing of a Secret's content is logged or kept here; an error names the Secret
//! and the API server's refusal, never the content; each read is one `get`, when a pull is
//! about to happen.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::gc::{PodPullSecretSource, PullSecretRead, PullSecretSource};

/// Reads pull Secrets in one namespace.
#[derive(Clone)]
pub struct PullSecretReader {
    api: Api<Secret>,
    namespace: String,
}

impl std::fmt::Debug for PullSecretReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSecretReader")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl PullSecretReader {
    /// A reader of `client`'s default namespace (in a pod: its own).
    pub fn new(client: Client) -> PullSecretReader {
        let namespace = client.default_namespace().to_owned();
        PullSecretReader {
            api: Api::namespaced(client, &namespace),
            namespace,
        }
    }
}

impl PullSecretSource for PullSecretReader {
    fn read(&self, name: &str) -> PullSecretRead {
        get_secret(self.api.clone(), &self.namespace, name)
    }
}

/// Reads pull Secrets in any namespace: a bound pod's, for the prefetch (opt-in).
#[derive(Clone)]
pub struct PodPullSecretReader {
    client: Client,
}

impl std::fmt::Debug for PodPullSecretReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodPullSecretReader")
            .finish_non_exhaustive()
    }
}

impl PodPullSecretReader {
    /// A reader through `client`.
    pub fn new(client: Client) -> PodPullSecretReader {
        PodPullSecretReader { client }
    }
}

impl PodPullSecretSource for PodPullSecretReader {
    fn read_in(&self, namespace: &str, name: &str) -> PullSecretRead {
        get_secret(
            Api::namespaced(self.client.clone(), namespace),
            namespace,
            name,
        )
    }
}

/// One `get` of the Secret `name` through `api` (of `namespace`), as its manifest's JSON.
fn get_secret(api: Api<Secret>, namespace: &str, name: &str) -> PullSecretRead {
    let what = format!("Secret {namespace}/{name}");
    let name = name.to_owned();
    Box::pin(async move {
        match api.get_opt(&name).await {
            Ok(Some(secret)) => serde_json::to_vec(&secret)
                .map_err(|_| format!("{what}: cannot be written as JSON")),
            Ok(None) => Err(format!("{what} not found")),
            Err(e) => Err(format!("{what}: {}", super::client::api_failure(&e))),
        }
    })
}
