//! Exec credential provider plugins (KEP-2133; `pkg/credentialprovider/plugin/plugin.go` and
//! `config.go`): a `CredentialProviderConfig` names plugins in a bin dir and the images each
//! serves (`matchImages`, host globs as the keyring's); for a matching image the plugin runs
//! with a `CredentialProviderRequest` on stdin and answers a `CredentialProviderResponse` on
//! stdout, whose credentials are cached by image, registry or globally (`cacheKeyType`) for
//! `cacheDuration` (or the provider's `defaultCacheDuration`; 0 caches nothing).
//!
//! Differences from the kubelet, on purpose: a plugin that fails, hangs past the timeout or
//! answers garbage is an error for the pull (the kubelet logs it and pulls anonymously);
//! cache expiry is decided with the injected clock's `now`.
//!
//! Invariants: a plugin's stdout and stderr never reach a log or an error (they may hold
//! credentials); a plugin past its timeout is killed; one plugin runs at a time per provider
//! (the kubelet holds the provider's lock across the exec).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::{CredentialsError, DockerConfig, DockerConfigEntry, url_match};
use crate::model::UnixNanos;

/// The kubelet's catch-all exec timeout.
pub const DEFAULT_PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

const SUPPORTED_CONFIG_API_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];
const SUPPORTED_PLUGIN_API_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];
const GLOBAL_CACHE_KEY: &str = "global";

/// An invalid `--image-credential-provider-config` or bin dir.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderConfigError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Only the position: the parser's message may quote a value (an `env` value may be a
    /// secret).
    #[error(
        "{path}: not valid YAML or JSON, or a field of the wrong type (at line {line}, column {column})"
    )]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    #[error("failed to validate credential provider config {path}: {}", aggregate(.errors))]
    Invalid { path: PathBuf, errors: Vec<String> },
    #[error("plugin binary directory {0} did not exist")]
    NoBinDir(PathBuf),
    #[error("plugin binary executable {0} did not exist")]
    NoBinary(PathBuf),
}

fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    providers: Vec<ProviderFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderFile {
    #[serde(default)]
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
}

#[derive(Clone, Debug, Deserialize)]
struct EnvVar {
    name: String,
    #[serde(default)]
    value: String,
}

/// One configured plugin.
struct Provider {
    name: String,
    binary: PathBuf,
    match_images: Vec<String>,
    default_cache_duration: Duration,
    api_version: String,
    args: Vec<String>,
    env: Vec<EnvVar>,
    cache: tokio::sync::Mutex<BTreeMap<String, CacheEntry>>,
}

struct CacheEntry {
    config: DockerConfig,
    expires_at: UnixNanos,
}

/// The configured plugins, in the config file's order.
pub struct PluginProviders {
    providers: Vec<Provider>,
    timeout: Duration,
}

impl fmt::Debug for PluginProviders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.providers.iter().map(|p| p.name.as_str()).collect();
        f.debug_struct("PluginProviders")
            .field("providers", &names)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PluginProviders {
    /// `RegisterCredentialProviderPlugins`: the bin dir must exist, the config must be valid,
    /// and each provider's executable must be in the bin dir.
    pub fn load(config: &Path, bin_dir: &Path) -> Result<PluginProviders, ProviderConfigError> {
        if !bin_dir.exists() {
            return Err(ProviderConfigError::NoBinDir(bin_dir.to_owned()));
        }
        let text = std::fs::read_to_string(config).map_err(|source| ProviderConfigError::Io {
            path: config.to_owned(),
            source,
        })?;
        let file: ConfigFile = serde_yaml_ng::from_str(&text).map_err(|e| {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            ProviderConfigError::Syntax {
                path: config.to_owned(),
                line,
                column,
            }
        })?;
        let errors = validate(&file);
        if !errors.is_empty() {
            return Err(ProviderConfigError::Invalid {
                path: config.to_owned(),
                errors,
            });
        }
        let mut providers = Vec::new();
        for p in file.providers {
            let binary = bin_dir.join(&p.name);
            if !binary.exists() {
                return Err(ProviderConfigError::NoBinary(binary));
            }
            let default_cache_duration = p
                .default_cache_duration
                .as_deref()
                .and_then(|d| crate::format::parse_go_duration(d).ok())
                .unwrap_or_default();
            providers.push(Provider {
                name: p.name,
                binary,
                match_images: p.match_images,
                default_cache_duration,
                api_version: p.api_version,
                args: p.args,
                env: p.env,
                cache: tokio::sync::Mutex::new(BTreeMap::new()),
            });
        }
        Ok(PluginProviders {
            providers,
            timeout: DEFAULT_PLUGIN_TIMEOUT,
        })
    }

    /// Replaces the exec timeout (the kubelet's is fixed at one minute).
    pub fn with_timeout(mut self, timeout: Duration) -> PluginProviders {
        self.timeout = timeout;
        self
    }

    /// Every matching provider's credentials for `image` (the repo name, no tag), cached or
    /// from a run of its plugin.
    pub async fn provide(
        &self,
        image: &str,
        now: UnixNanos,
    ) -> Result<Vec<DockerConfig>, CredentialsError> {
        let mut configs = Vec::new();
        for provider in &self.providers {
            if provider
                .match_images
                .iter()
                .any(|m| url_match::urls_match_str(m, image))
            {
                configs.push(provider.provide(image, now, self.timeout).await?);
            }
        }
        Ok(configs)
    }
}

/// `parseRegistry`: the image name up to its first `/`.
fn registry_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

impl Provider {
    fn error(&self, reason: impl Into<String>) -> CredentialsError {
        CredentialsError::Plugin {
            provider: self.name.clone(),
            reason: reason.into(),
        }
    }

    async fn provide(
        &self,
        image: &str,
        now: UnixNanos,
        timeout: Duration,
    ) -> Result<DockerConfig, CredentialsError> {
        let mut cache = self.cache.lock().await;
        for key in [image, registry_of(image), GLOBAL_CACHE_KEY] {
            if let Some(entry) = cache.get(key) {
                // The kubelet's cacheExpirationPolicy: expired once now is after expiresAt.
                if now <= entry.expires_at {
                    return Ok(entry.config.clone());
                }
            }
        }
        let response = self.exec(image, timeout).await?;
        let key = match response.cache_key_type.as_str() {
            "Image" => image.to_owned(),
            "Registry" => registry_of(image).to_owned(),
            "Global" => GLOBAL_CACHE_KEY.to_owned(),
            other => {
                return Err(self.error(format!(
                    "the plugin did not return a valid cacheKeyType: {other:?} (want Image, \
                     Registry or Global)"
                )));
            }
        };
        let ttl = match response.cache_duration {
            Some(d) => d,
            None => self.default_cache_duration,
        };
        if !ttl.is_zero() {
            cache.retain(|_, e| now <= e.expires_at);
            cache.insert(
                key,
                CacheEntry {
                    config: response.config.clone(),
                    expires_at: now.saturating_add(ttl),
                },
            );
        }
        Ok(response.config)
    }

    /// `execPlugin.ExecPlugin`: the plugin with the provider's args, the agent's environment
    /// overlaid with the provider's env, the request on stdin; killed at the timeout.
    async fn exec(&self, image: &str, timeout: Duration) -> Result<Response, CredentialsError> {
        let request = serde_json::json!({
            "kind": "CredentialProviderRequest",
            "apiVersion": self.api_version,
            "image": image,
        });
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|e| (&e.name, &e.value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let failed = |e: &dyn fmt::Display| {
            self.error(format!(
                "error execing credential provider plugin {} for image {image}: {e}",
                self.name
            ))
        };
        let mut child = command.spawn().map_err(|e| failed(&e))?;
        let run = async {
            if let Some(mut stdin) = child.stdin.take() {
                // A plugin that exits without reading its request is judged by its answer.
                let _ = stdin.write_all(request.to_string().as_bytes()).await;
            }
            child.wait_with_output().await
        };
        let output = match tokio::time::timeout(timeout, run).await {
            Err(_) => {
                return Err(failed(&format!(
                    "no answer within {} (killed)",
                    crate::format::go_duration(timeout)
                )));
            }
            Ok(Err(e)) => return Err(failed(&e)),
            Ok(Ok(output)) => output,
        };
        if !output.status.success() {
            return Err(failed(&output.status));
        }
        self.decode(&output.stdout)
    }

    /// The response, checked as the kubelet checks it; no error quotes the output.
    fn decode(&self, stdout: &[u8]) -> Result<Response, CredentialsError> {
        let garbage =
            || self.error("error decoding credential provider plugin response from stdout");
        let value: Value = serde_json::from_slice(stdout).map_err(|_| {
            self.error("error reading GVK from response: the plugin's stdout is not JSON")
        })?;
        let field = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or("");
        if field("apiVersion") != self.api_version {
            return Err(self.error("apiVersion from credential plugin response did not match"));
        }
        if field("kind") != "CredentialProviderResponse" {
            return Err(self.error(format!(
                "failed to decode CredentialProviderResponse, unexpected Kind: {:?}",
                field("kind")
            )));
        }
        let cache_duration = match value.get("cacheDuration") {
            None | Some(Value::Null) => None,
            Some(Value::String(d)) => {
                Some(crate::format::parse_go_duration(d).map_err(|_| garbage())?)
            }
            Some(_) => return Err(garbage()),
        };
        let mut config = BTreeMap::new();
        if let Some(auth) = value.get("auth") {
            let Value::Object(auth) = auth else {
                return Err(garbage());
            };
            for (location, entry) in auth {
                let text = |name: &str| match entry.get(name) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(_) => Err(garbage()),
                };
                config.insert(
                    location.clone(),
                    DockerConfigEntry {
                        username: text("username")?,
                        password: text("password")?,
                        email: String::new(),
                    },
                );
            }
        }
        Ok(Response {
            cache_key_type: field("cacheKeyType").to_owned(),
            cache_duration,
            config: DockerConfig(config),
        })
    }
}

struct Response {
    cache_key_type: String,
    cache_duration: Option<Duration>,
    config: DockerConfig,
}

/// `validateCredentialProviderConfig` (`plugin/config.go`), its messages.
fn validate(file: &ConfigFile) -> Vec<String> {
    let mut errs = Vec::new();
    if !SUPPORTED_CONFIG_API_VERSIONS.contains(&file.api_version.as_str()) {
        errs.push(format!(
            "apiVersion: Unsupported value: {:?}: supported values: {}",
            file.api_version,
            SUPPORTED_CONFIG_API_VERSIONS.join(", ")
        ));
    }
    if file.kind != "CredentialProviderConfig" {
        errs.push(format!(
            "kind: Unsupported value: {:?}: supported values: \"CredentialProviderConfig\"",
            file.kind
        ));
    }
    if file.providers.is_empty() {
        errs.push("providers: Required value: at least 1 item in plugins is required".to_owned());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in file.providers.iter().enumerate() {
        let at = format!("providers[{i}]");
        if p.name.is_empty() {
            errs.push(format!("{at}.name: Required value: name is required"));
        }
        if p.name.contains('/') {
            errs.push(format!(
                "{at}.name: Invalid value: {:?}: provider name cannot contain '/'",
                p.name
            ));
        }
        if p.name.contains(' ') {
            errs.push(format!(
                "{at}.name: Invalid value: {:?}: provider name cannot contain spaces",
                p.name
            ));
        }
        if p.name == "." || p.name == ".." {
            errs.push(format!(
                "{at}.name: Invalid value: {:?}: provider name cannot be '.' or '..'",
                p.name
            ));
        }
        if !p.name.is_empty() && !seen.insert(p.name.clone()) {
            errs.push(format!("{at}.name: Duplicate value: {:?}", p.name));
        }
        if p.api_version.is_empty() {
            errs.push(format!(
                "{at}.apiVersion: Required value: apiVersion is required"
            ));
        } else if !SUPPORTED_PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
            errs.push(format!(
                "{at}.apiVersion: Unsupported value: {:?}: supported values: {}",
                p.api_version,
                SUPPORTED_PLUGIN_API_VERSIONS.join(", ")
            ));
        }
        if p.match_images.is_empty() {
            errs.push(format!(
                "{at}.matchImages: Required value: at least 1 item in matchImages is required"
            ));
        }
        for (j, m) in p.match_images.iter().enumerate() {
            if url_match::parse_schemeless(m).is_none() {
                errs.push(format!(
                    "{at}.matchImages[{j}]: Invalid value: {m:?}: match image is invalid"
                ));
            }
        }
        match p.default_cache_duration.as_deref() {
            None => errs.push(format!("{at}.defaultCacheDuration: Required value: defaultCacheDuration is required")),
            Some(d) => match crate::format::parse_go_duration(d) {
                Ok(_) => {}
                Err(_) if d.starts_with('-') => errs.push(format!(
                    "{at}.defaultCacheDuration: Invalid value: {d:?}: defaultCacheDuration must be greater than or equal to 0"
                )),
                Err(e) => errs.push(format!("{at}.defaultCacheDuration: Invalid value: {d:?}: {e}")),
            },
        }
        for (j, e) in p.env.iter().enumerate() {
            if e.name.is_empty() {
                errs.push(format!("{at}.env[{j}].name: Required value"));
            }
        }
    }
    errs
}
