//! Exec credential provider plugins (KEP-2133; `pkg/credentialprovider/plugin/plugin.go` and
//! `config.go`): a `CredentialProviderConfig` names plugins in a bin dir and the images each
//! serves (`matchImages`, host globs as the keyring's); for a matching image the plugin runs
//! with a `CredentialProviderRequest` on stdin and answers a `CredentialProviderResponse` on
//! stdout, whose credentials are cached by image, registry or globally (`cacheKeyType`) for
//! `cacheDuration` (or the provider's `defaultCacheDuration`; 0 caches nothing).
//!
//! The config may be a directory (kubelet 1.34): its `*.json`, `*.yaml` and `*.yml` files in
//! lexical order, their providers merged, a name given twice refused. A provider with
//! `tokenAttributes` (KEP-4412, service account token mode) is validated as the kubelet does;
//! imagekeeper's pulls have no service account, so such a provider is not run when it
//! requires one and runs without a token otherwise (`provide` with an empty name).
//!
//! Differences from the kubelet, on purpose: a plugin that fails, hangs past the timeout,
//! prints more than [`MAX_PLUGIN_STDOUT_BYTES`] or answers garbage is an error for the pull
//! (the kubelet logs it and pulls anonymously); cache expiry is decided with the injected
//! clock's `now`; one plugin runs at a time per provider (this module holds the provider's
//! cache lock across the run; the kubelet locks only its cache and runs one exec per image
//! at a time, `singleflight`).
//!
//! Invariants: a plugin's stdout and stderr never reach a log or an error (they may hold
//! credentials); at most [`MAX_PLUGIN_STDOUT_BYTES`] of stdout are kept; a plugin runs as the
//! leader of its own process group, and past its timeout, past the stdout cap or when its run
//! is dropped the whole group is SIGKILLed (children it forked included); once the plugin has
//! exited, only what is already in the pipe is read (a child holding stdout open is not waited
//! for); config files are read as operator files (`crate::operator_file`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{CredentialsError, DockerConfig, DockerConfigEntry, url_match};
use crate::model::UnixNanos;
use crate::operator_file::Follow;

mod validate;

use validate::validate;

/// The kubelet's catch-all exec timeout.
pub const DEFAULT_PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The most bytes read of a plugin's stdout: 4 MiB, far above any real response (a few
/// hundred bytes per registry); a plugin that prints more is killed and the pull fails.
pub const MAX_PLUGIN_STDOUT_BYTES: usize = 4 << 20;

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
    /// A config file cannot be read.
    Io {
        /// The config file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Only the position: the parser's message may quote a value (an `env` value may be a
    /// secret).
    #[error(
        "{path}: not valid {}, or a field of the wrong type (at line {line}, column {column})",
        crate::operator_file::YAML_OR_JSON
    )]
    Syntax {
        /// The config file.
        path: PathBuf,
        /// The 1-based line of the error (0: unknown).
        line: usize,
        /// The 1-based column of the error (0: unknown).
        column: usize,
    },
    /// The config does not validate.
    #[error("failed to validate credential provider config {path}: {}", crate::format::aggregate(.errors))]
    Invalid {
        /// The config file.
        path: PathBuf,
        /// Every validation error.
        errors: Vec<String>,
    },
    /// A config file that is not a regular file, too large, too deeply nested or unreadable.
    #[error(transparent)]
    File(#[from] crate::operator_file::OperatorFileError),
    /// A config directory with no `*.json`, `*.yaml` or `*.yml` file.
    #[error("no configuration files found in directory {0:?}")]
    NoConfigFiles(PathBuf),
    /// A provider named twice (in one file, or in two files of a config directory).
    #[error("{path}: duplicate provider name {name:?} found in configuration file(s)")]
    DuplicateProvider {
        /// The config file.
        path: PathBuf,
        /// The provider's name.
        name: String,
    },
    #[error("plugin binary directory {0} did not exist")]
    /// The plugin bin dir does not exist.
    NoBinDir(PathBuf),
    #[error("plugin binary executable {0} did not exist")]
    /// A provider's executable is not in the bin dir.
    NoBinary(PathBuf),
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
    token_attributes: Option<TokenAttributesFile>,
}

/// KEP-4412's `tokenAttributes`: the plugin wants the pod's service account token.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenAttributesFile {
    #[serde(default)]
    service_account_token_audience: String,
    require_service_account: Option<bool>,
    #[serde(default)]
    required_service_account_annotation_keys: Vec<String>,
    #[serde(default)]
    optional_service_account_annotation_keys: Vec<String>,
    #[serde(default)]
    cache_type: String,
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
    /// Set when the provider has `tokenAttributes` (service account token mode): its
    /// `requireServiceAccount`.
    require_service_account: Option<bool>,
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
    /// and each provider's executable must be in the bin dir. `config` is a file, or a
    /// directory whose `*.json`, `*.yaml` and `*.yml` files are read in lexical order and
    /// their providers merged (`readCredentialProviderConfig`, kubelet 1.34).
    pub fn load(config: &Path, bin_dir: &Path) -> Result<PluginProviders, ProviderConfigError> {
        if !bin_dir.exists() {
            return Err(ProviderConfigError::NoBinDir(bin_dir.to_owned()));
        }
        let mut files = Vec::new();
        for path in config_files(config)? {
            let text = crate::operator_file::read_text(&path, Follow::Yes)?;
            let file: ConfigFile =
                crate::operator_file::parse_yaml_or_json(&text).map_err(|e| {
                    ProviderConfigError::Syntax {
                        path: path.clone(),
                        line: e.line,
                        column: e.column,
                    }
                })?;
            files.push((path, file));
        }
        // The merge refuses a provider named twice, in one file or across files, before
        // anything is validated (`readCredentialProviderConfig`).
        let mut seen = std::collections::BTreeSet::new();
        for (path, file) in &files {
            for p in &file.providers {
                if !seen.insert(p.name.as_str()) {
                    return Err(ProviderConfigError::DuplicateProvider {
                        path: path.clone(),
                        name: p.name.clone(),
                    });
                }
            }
        }
        for (path, file) in &files {
            let errors = validate(file);
            if !errors.is_empty() {
                return Err(ProviderConfigError::Invalid {
                    path: path.clone(),
                    errors,
                });
            }
        }
        if files.iter().all(|(_, f)| f.providers.is_empty()) {
            return Err(ProviderConfigError::Invalid {
                path: config.to_owned(),
                errors: vec![
                    "providers: Required value: at least 1 item in plugins is required".to_owned(),
                ],
            });
        }
        let mut providers = Vec::new();
        for p in files.into_iter().flat_map(|(_, f)| f.providers) {
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
                require_service_account: p.token_attributes.and_then(|t| t.require_service_account),
                cache: tokio::sync::Mutex::new(BTreeMap::new()),
            });
        }
        Ok(PluginProviders {
            providers,
            timeout: DEFAULT_PLUGIN_TIMEOUT,
        })
    }

    /// [`Self::load`] on tokio's blocking pool (it reads files).
    pub async fn load_async(
        config: PathBuf,
        bin_dir: PathBuf,
    ) -> Result<PluginProviders, ProviderConfigError> {
        let shown = config.clone();
        tokio::task::spawn_blocking(move || PluginProviders::load(&config, &bin_dir))
            .await
            .map_err(|e| ProviderConfigError::Io {
                path: shown,
                source: std::io::Error::other(format!("loading did not complete: {e}")),
            })?
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
                // plugin.go `provide`: a provider in service account token mode, asked with no
                // service account (imagekeeper's pulls have none) while it requires one, gives
                // no credentials and its plugin is not run; one that does not require it runs
                // as any other, without a token.
                if provider.require_service_account == Some(true) {
                    tracing::debug!(
                        provider = provider.name.as_str(),
                        "Credential provider requires a service account and the pull has none; not running it"
                    );
                    continue;
                }
                configs.push(provider.provide(image, now, self.timeout).await?);
            }
        }
        Ok(configs)
    }
}

/// The files a `--image-credential-provider-config` names: itself, or a directory's
/// `*.json`, `*.yaml` and `*.yml` entries (not directories) in lexical order, at least one.
fn config_files(config: &Path) -> Result<Vec<PathBuf>, ProviderConfigError> {
    let io = |source| ProviderConfigError::Io {
        path: config.to_owned(),
        source,
    };
    let metadata = std::fs::metadata(config).map_err(io)?;
    if !metadata.is_dir() {
        return Ok(vec![config.to_owned()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(config).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        let wanted = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml" | "yml")
        );
        if wanted && !entry.file_type().map_err(io)?.is_dir() {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ProviderConfigError::NoConfigFiles(config.to_owned()));
    }
    Ok(files)
}

/// The provider config's bytes now, to tell whether it was edited since the agent loaded
/// it: every file [`PluginProviders::load`] reads (a directory's, with their names), each
/// read as an operator file (a FIFO or an oversized file is noted by its error, never read).
/// `None` when the config cannot be listed at all.
#[cfg_attr(not(feature = "agent"), allow(dead_code))]
pub fn config_snapshot(config: &Path) -> Option<Vec<u8>> {
    let files = config_files(config).ok()?;
    let mut snapshot = Vec::new();
    for path in files {
        let bytes = match crate::operator_file::read_bytes(&path, Follow::Yes) {
            Ok(bytes) => bytes,
            Err(e) => format!("unreadable: {e}").into_bytes(),
        };
        let name = path.as_os_str().as_encoded_bytes();
        snapshot.extend_from_slice(&(name.len() as u64).to_be_bytes());
        snapshot.extend_from_slice(name);
        snapshot.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        snapshot.extend_from_slice(&bytes);
    }
    Some(snapshot)
}

/// [`config_snapshot`] on tokio's blocking pool.
#[cfg_attr(not(feature = "agent"), allow(dead_code))]
pub async fn config_snapshot_async(config: PathBuf) -> Option<Vec<u8>> {
    tokio::task::spawn_blocking(move || config_snapshot(&config))
        .await
        .ok()
        .flatten()
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
                // The kubelet quotes the value; a plugin's answer may hold a secret (a token
                // in the wrong field), and this message reaches the pull error and the
                // backoff's last error in the database: only its length is said.
                return Err(self.error(format!(
                    "the plugin did not return a valid cacheKeyType (a value of {} bytes, \
                     not shown; want Image, Registry or Global)",
                    other.len()
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
    /// overlaid with the provider's env, the request on stdin. The plugin runs in a process
    /// group of its own: past the timeout, or once its stdout passes
    /// [`MAX_PLUGIN_STDOUT_BYTES`], the whole group is killed (a child it forked included).
    /// Once the plugin has exited, what it wrote is its answer: a background child that keeps
    /// stdout open is not waited for.
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
            .process_group(0)
            .kill_on_drop(true);
        let failed = |e: &dyn fmt::Display| {
            self.error(format!(
                "error execing credential provider plugin {} for image {image}: {e}",
                self.name
            ))
        };
        let mut child = command.spawn().map_err(|e| failed(&e))?;
        // Killed on every way out but a clean exit, a dropped future (a cancelled pull)
        // included.
        let mut group = ProcessGroup::of(&child);
        let run = run_plugin(&mut child, request.to_string().into_bytes());
        let reason = match tokio::time::timeout(timeout, run).await {
            Ok(Ok((status, stdout))) => {
                group.disarm();
                if !status.success() {
                    return Err(failed(&status));
                }
                return self.decode(&stdout);
            }
            Err(_) => format!(
                "no answer within {} (killed)",
                crate::format::go_duration(timeout)
            ),
            Ok(Err(RunError::TooLarge)) => format!(
                "the plugin's stdout is too large (more than {MAX_PLUGIN_STDOUT_BYTES} bytes; \
                 killed)"
            ),
            Ok(Err(RunError::Io(e))) => e.to_string(),
        };
        group.kill();
        // The group's leader is our child, just sent SIGKILL: reap it.
        let _ = child.wait().await;
        Err(failed(&reason))
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

/// Why a plugin run ended before the plugin answered.
enum RunError {
    /// Its stdout passed [`MAX_PLUGIN_STDOUT_BYTES`].
    TooLarge,
    Io(std::io::Error),
}

/// Writes the request, then reads stdout until the plugin exits (or stdout ends and then the
/// plugin exits). Once the plugin has exited, only what is already in the pipe is read: a
/// child it left behind holding stdout open is not waited for.
async fn run_plugin(
    child: &mut tokio::process::Child,
    request: Vec<u8>,
) -> Result<(std::process::ExitStatus, Vec<u8>), RunError> {
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that exits without reading its request is judged by its answer.
        let _ = stdin.write_all(&request).await;
    }
    let Some(mut stdout) = child.stdout.take() else {
        return Err(RunError::Io(std::io::Error::other(
            "the plugin's stdout is not piped",
        )));
    };
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            biased;
            read = stdout.read(&mut chunk) => {
                let n = read.map_err(RunError::Io)?;
                if n == 0 {
                    let status = child.wait().await.map_err(RunError::Io)?;
                    return Ok((status, out));
                }
                append(&mut out, &chunk[..n])?;
            }
            status = child.wait() => {
                let status = status.map_err(RunError::Io)?;
                drain(&stdout, &mut out, &mut chunk)?;
                return Ok((status, out));
            }
        }
    }
}

fn append(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), RunError> {
    if out.len() + bytes.len() > MAX_PLUGIN_STDOUT_BYTES {
        return Err(RunError::TooLarge);
    }
    out.extend_from_slice(bytes);
    Ok(())
}

/// Reads what is in the pipe now, without waiting for more: through a duplicate of the
/// descriptor, which shares tokio's non-blocking mode, so an empty pipe answers `WouldBlock`
/// at once (the plugin has exited: all it wrote is already there).
fn drain(
    stdout: &tokio::process::ChildStdout,
    out: &mut Vec<u8>,
    chunk: &mut [u8],
) -> Result<(), RunError> {
    use std::io::Read;
    use std::os::fd::AsFd;
    let fd = stdout.as_fd().try_clone_to_owned().map_err(RunError::Io)?;
    let mut pipe = std::fs::File::from(fd);
    loop {
        match pipe.read(chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => append(out, &chunk[..n])?,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(RunError::Io(e)),
        }
    }
}

/// A plugin's process group (it is spawned as the leader of a new one): SIGKILLed when
/// dropped armed, so a plugin and every child it forked die with a timed-out, oversized or
/// cancelled run.
struct ProcessGroup(Option<libc::pid_t>);

impl ProcessGroup {
    fn of(child: &tokio::process::Child) -> ProcessGroup {
        ProcessGroup(child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()))
    }

    /// The plugin answered and exited: whatever it left behind is left alone.
    fn disarm(&mut self) {
        self.0 = None;
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // SAFETY: kill(2) takes no pointers. The id is our child's pid, the leader of its
            // own group (`process_group(0)`), not yet reaped on every path but a read error
            // after its exit; the kernel hands out no pid while a group of that id has
            // members, so this reaches the plugin's group (or, at worst, no one).
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Response {
    cache_key_type: String,
    cache_duration: Option<Duration>,
    config: DockerConfig,
}
