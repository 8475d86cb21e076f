//! Registry credentials as the kubelet finds them (`pkg/credentialprovider`): pull secrets
//! (`kubernetes.io/dockerconfigjson`, `kubernetes.io/dockercfg`, or a bare docker
//! `config.json`), the node's own docker config on the kubelet's search path, and exec
//! credential provider plugins (KEP-2133). A [`Keyring`] indexes credentials by registry
//! location and yields the ones matching an image, in reverse lexicographic order of location.
//!
//! [`CredentialSources::lookup`] is the kubelet's `MakeDockerKeyring(pullSecrets,
//! UnionDockerKeyring{nodeKeyring, pluginsKeyring}).Lookup(repoToPull)`: the pull secrets'
//! matches first, then the node's config file's, then the plugins'; the puller tries them in
//! turn, and pulls anonymously only when none matches (`kuberuntime_image.go`).
//!
//! Invariants: a credential is never written to a log, an error or a `Debug` output: every
//! error here names files, keys and line numbers only, never a value (parser messages, which
//! may quote the input, are dropped); `Debug` of every type that holds a secret redacts it.
//! The node's files are read at each lookup, so an edited file takes effect at the next pull;
//! every file is read through `crate::operator_file` (regular files only, 1 MiB, nesting
//! bounded), from async code on the blocking pool.

mod docker_config;
mod node;
pub mod plugin;
mod url_match;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use crate::model::{PullCredentials, UnixNanos};

#[cfg(test)]
use docker_config::parse_config_json;
pub use docker_config::parse_pull_secret;
pub use node::NodeCredentials;
pub use plugin::{PluginProviders, ProviderConfigError};

/// One registry location's credentials in a docker config (`DockerConfigEntry`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DockerConfigEntry {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
    /// The e-mail address.
    pub email: String,
}

impl fmt::Debug for DockerConfigEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.credentials().fmt_redacted("DockerConfigEntry", f)
    }
}

impl DockerConfigEntry {
    /// What goes to the runtime (the kubelet's `AuthConfig` from an entry: user and
    /// password only).
    pub fn credentials(&self) -> PullCredentials {
        PullCredentials {
            username: self.username.clone(),
            password: self.password.clone(),
            ..PullCredentials::default()
        }
    }
}

/// A docker config: registry location (`host[:port][/path]`, maybe with a scheme or
/// `/v1/`, host parts may be globs) to its credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DockerConfig(pub BTreeMap<String, DockerConfigEntry>);

/// Why credentials could not be read. Never carries a credential: values are not quoted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    #[error("{path}: {source}")]
    /// A credentials file cannot be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The input is not YAML/JSON; only the position is kept (a parser's message may
    /// quote the input).
    #[error("{what}: not valid {format} (at line {line}, column {column})")]
    Syntax {
        /// Which input.
        what: String,
        /// The formats it may be in.
        format: &'static str,
        /// The 1-based line of the error (0: unknown).
        line: usize,
        /// The 1-based column of the error (0: unknown).
        column: usize,
    },
    #[error("{what}: {reason}")]
    /// The input parses but is not a valid credentials document.
    Invalid {
        /// Which input.
        what: String,
        /// What is wrong.
        reason: String,
    },
    #[error("credential provider {provider}: {reason}")]
    /// A credential provider plugin failed.
    Plugin {
        /// The provider's name.
        provider: String,
        /// What is wrong.
        reason: String,
    },
}

/// The kubelet's `BasicDockerKeyring` (`keyring.go`): credentials by location key, the
/// index in reverse lexicographic order (so `quay.io/coreos` comes before `quay.io`, and
/// `b.example.com` before `*.example.com/team`: not "longer first"); the credentials of one
/// location in the order they were added.
#[derive(Clone, Default)]
pub struct Keyring {
    index: Vec<String>,
    creds: BTreeMap<String, Vec<PullCredentials>>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("locations", &self.index)
            .finish_non_exhaustive()
    }
}

/// `defaultRegistryHost`: where `https://index.docker.io/v1/` lands in the index.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

impl Keyring {
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// `BasicDockerKeyring.Add`: each location gets `https://` when it has no scheme, is
    /// parsed as a URL (an unparseable one is skipped, as the kubelet does), and is indexed
    /// as host plus path, with a leading `/v1/` or `/v2/` meaning the host alone.
    pub fn add(&mut self, config: &DockerConfig) {
        for (location, entry) in &config.0 {
            let Some(key) = location_key(location) else {
                tracing::warn!(
                    location = location.as_str(),
                    "Entry in docker config is not a valid URL; ignoring"
                );
                continue;
            };
            self.creds
                .entry(key.clone())
                .or_default()
                .push(entry.credentials());
            self.index.push(key);
        }
        self.index.sort();
        self.index.dedup();
        self.index.reverse();
    }

    /// `BasicDockerKeyring.Lookup(image)` for an image name without tag (the kubelet's
    /// `repoToPull`, e.g. `docker.io/library/busybox`): every location that matches, in index
    /// order; when none does and the image is on Docker Hub, the credentials for
    /// `index.docker.io` (or its alias `registry-1.docker.io`).
    pub fn lookup(&self, image: &str) -> Vec<PullCredentials> {
        let mut found = Vec::new();
        if let Some(target) = url_match::parse_schemeless(image) {
            for key in &self.index {
                let matched = url_match::parse_schemeless(key)
                    .is_some_and(|glob| url_match::urls_match(&glob, &target));
                if matched {
                    found.extend(self.creds[key].iter().cloned());
                }
            }
        }
        if found.is_empty() && is_default_registry_match(image) {
            // registry-1.docker.io is Docker Hub's API host: a config naming it means Hub.
            for alias in [DEFAULT_REGISTRY_HOST, "registry-1.docker.io"] {
                if let Some(creds) = self.creds.get(alias) {
                    return creds.clone();
                }
            }
        }
        found
    }
}

/// The index key of a docker config location (`BasicDockerKeyring.Add`).
fn location_key(location: &str) -> Option<String> {
    let schemeless = location
        .strip_prefix("https://")
        .or_else(|| location.strip_prefix("http://"))
        .unwrap_or(location);
    let parsed = url_match::parse_schemeless(schemeless)?;
    let mut path = parsed.path.as_str();
    if path.starts_with("/v2/") || path.starts_with("/v1/") {
        path = &path[3..];
    }
    Some(if path.is_empty() || path == "/" {
        parsed.host
    } else {
        format!("{}{path}", parsed.host)
    })
}

/// `isDefaultRegistryMatch`: whether an image name pulls from Docker Hub.
pub(crate) fn is_default_registry_match(image: &str) -> bool {
    let mut parts = image.splitn(2, '/');
    let first = parts.next().unwrap_or("");
    if first.is_empty() {
        return false;
    }
    if parts.next().is_none() {
        return true;
    }
    if first == "docker.io" || first == "index.docker.io" {
        return true;
    }
    !first.contains(['.', ':'])
}

/// The image name a lookup matches against (the kubelet's `repoToPull`,
/// `parsers.ParseImageName`): the normalized name without tag or digest. `None` for a name
/// that does not parse (the pull then fails on the name itself).
pub fn repo_to_pull(image: &str) -> Option<String> {
    crate::pull::ImageReference::parse_normalized(image)
        .ok()
        .map(|r| r.name())
}

/// Every source of credentials but the pull secrets, which come with each request: the
/// node's docker config files and the credential provider plugins.
#[derive(Debug, Default)]
pub struct CredentialSources {
    /// The node's docker config files, when configured.
    pub node: Option<NodeCredentials>,
    /// The credential provider plugins, when configured.
    pub plugins: Option<PluginProviders>,
}

impl CredentialSources {
    /// The kubelet's `MakeDockerKeyring(pullSecrets, UnionDockerKeyring{nodeKeyring,
    /// externalCredentialProviderKeyring}).Lookup(repo)` (`image_manager.go`,
    /// `secrets/secrets.go`, `keyring.go`): a union of three keyrings, tried in this order:
    /// the pull secrets' (all secrets in one keyring, as the kubelet merges them), the node's
    /// docker config file's, then the plugins' answers'. Each keyring orders its own matches
    /// and falls back to its own Docker Hub credentials. A plugin that fails is an error: no
    /// pull is attempted with partial credentials.
    pub async fn lookup(
        &self,
        repo: &str,
        pull_secrets: &[DockerConfig],
        now: UnixNanos,
    ) -> Result<Vec<PullCredentials>, CredentialsError> {
        let mut secrets = Keyring::new();
        for config in pull_secrets {
            secrets.add(config);
        }
        let mut found = secrets.lookup(repo);
        if let Some(files) = &self.node {
            let mut node = Keyring::new();
            node.add(&files.read_async().await);
            found.extend(node.lookup(repo));
        }
        if let Some(plugins) = &self.plugins {
            let mut answers = Keyring::new();
            for config in plugins.provide(repo, now).await? {
                answers.add(&config);
            }
            found.extend(answers.lookup(repo));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests;
