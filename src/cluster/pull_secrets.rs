//! The reader of the pull Secrets KeepSets name (`spec.pullSecrets`): a `get` of one Secret in
//! the agent's own namespace (the chart's), through the Role `keepSets.pullSecrets` renders;
//! the agent never reads a Secret elsewhere. The Secret goes back to the agent as its
//! manifest's JSON, which the agent parses as any pull Secret (`pull::parse_pull_secret`).
//!
//! Invariants: nothing of a Secret's content is logged or kept here; an error names the Secret
//! and the API server's refusal, never the content; each read is one `get`, when a pull is
//! about to happen.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::gc::{PullSecretRead, PullSecretSource};

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
        let api = self.api.clone();
        let what = format!("Secret {}/{name}", self.namespace);
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
}
