//! The agent's configuration: kubelet's flag names and KubeletConfiguration's field names, a
//! TOML file, flags over the file, and validation whose every error names the flag or field
//! that holds the bad value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cri::{CriConfig, DEFAULT_RUNTIME_ENDPOINT};
use crate::format::parse_go_duration;
use crate::gc::{GcConfig, GcPolicy, PinPatterns};
use crate::kubelet::DEFAULT_KUBELET_ROOT_DIR;
use crate::model::JournalRetention;
use crate::pull::{PullConfig, PullConfigError};

/// The default record database.
pub const DEFAULT_DB: &str = "/var/lib/imagekeeper/records.redb";
/// The default admin socket.
pub const DEFAULT_ADMIN_SOCKET: &str = "/run/imagekeeper/admin.sock";

/// A bad setting: `origin` is the flag (`--registry-qps`) or the file field
/// (`registryPullQPS in /etc/imagekeeper.toml`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    /// The pull settings break kubelet's validation; `origin` is the flag or field set last
    /// (`pull settings` when none was set).
    #[error("{origin}: {source}")]
    Pull {
        origin: String,
        #[source]
        source: PullConfigError,
    },
}

impl From<PullConfigError> for ConfigError {
    /// Pull settings that did not come through [`AgentConfig::resolve`]'s flags or file.
    fn from(source: PullConfigError) -> ConfigError {
        ConfigError::Pull {
            origin: "pull settings".to_owned(),
            source,
        }
    }
}

impl ConfigError {
    /// The message on one line, for a log line or a status: the TOML parser's source excerpt
    /// (the `|` lines) is left out, its position and message kept.
    pub fn one_line(&self) -> String {
        let text = self.to_string();
        let mut parts = text.lines().map(str::trim).filter(|line| {
            let excerpt = line.starts_with('|')
                || line
                    .split_once(" |")
                    .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()));
            !line.is_empty() && !excerpt
        });
        let mut out = parts.next().unwrap_or_default().to_owned();
        for part in parts {
            out.push_str(": ");
            out.push_str(part);
        }
        out
    }
}

/// The config file: KubeletConfiguration's field names, all optional.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i64>,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Option<String>,
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: Option<String>,
    #[serde(rename = "serializeImagePulls")]
    pub serialize_image_pulls: Option<bool>,
    #[serde(rename = "maxParallelImagePulls")]
    pub max_parallel_image_pulls: Option<i32>,
    #[serde(rename = "registryPullQPS")]
    pub registry_pull_qps: Option<f64>,
    #[serde(rename = "registryBurst")]
    pub registry_burst: Option<i64>,
    #[serde(rename = "pinnedImages")]
    pub pinned_images: Option<Vec<String>>,
    #[serde(rename = "podInfraContainerImage")]
    pub pod_infra_container_image: Option<String>,
    /// Keep the images that cannot come back: the runtime's sandbox image and images with no
    /// repo digest (ours; default true).
    #[serde(rename = "protectIrreplaceable")]
    pub protect_irreplaceable: Option<bool>,
    #[serde(rename = "containerRuntimeEndpoint")]
    pub container_runtime_endpoint: Option<String>,
    #[serde(rename = "imageServiceEndpoint")]
    pub image_service_endpoint: Option<String>,
    /// The kubelet's root directory, whose image pull records are read (the kubelet's own
    /// setting is the `--root-dir` flag; this name is ours). Empty disables reading them.
    #[serde(rename = "kubeletRootDir")]
    pub kubelet_root_dir: Option<String>,
    /// How old (file mtime) a kubelet pull intent may be and still keep its image (ours), Go
    /// syntax.
    #[serde(rename = "kubeletIntentMaxAge")]
    pub kubelet_intent_max_age: Option<String>,
    /// Whether to watch the runtime's container events, `auto` or `off` (ours).
    #[serde(rename = "containerEvents")]
    pub container_events: Option<String>,
    /// How long the eviction journal keeps a removal (ours), Go syntax.
    #[serde(rename = "journalMaxAge")]
    pub journal_max_age: Option<String>,
    /// How many removals the eviction journal keeps (ours).
    #[serde(rename = "journalMaxEntries")]
    pub journal_max_entries: Option<i64>,
    /// The kubelet's `--image-credential-provider-config` (a CredentialProviderConfig file);
    /// this name is ours.
    #[serde(rename = "imageCredentialProviderConfig")]
    pub image_credential_provider_config: Option<PathBuf>,
    /// The kubelet's `--image-credential-provider-bin-dir`; this name is ours.
    #[serde(rename = "imageCredentialProviderBinDir")]
    pub image_credential_provider_bin_dir: Option<PathBuf>,
}

/// The line that makes a config file setting nothing a deliberate one: a reload refuses a file
/// with no setting (empty, white space, comments only: what an editor truncating the file in
/// place leaves for a moment) unless one of its lines is exactly this (surrounding white space
/// aside). Then every setting goes back to its default, as the file says.
pub const EMPTY_CONFIG_MARKER: &str = "# imagekeeper: empty";

impl FileConfig {
    /// Reads and parses a TOML file through the operator-file reader
    /// ([`crate::operator_file::read_text`]): a regular file only (a FIFO or device is refused
    /// at once, never waited on), at most [`crate::operator_file::MAX_OPERATOR_FILE_BYTES`],
    /// nested at most [`crate::operator_file::MAX_NESTING_DEPTH`] brackets deep. Blocking I/O.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        FileConfig::load_text(path).map(|(config, _)| config)
    }

    /// [`FileConfig::load`] for a reload: a file that sets nothing is refused unless it says
    /// so with [`EMPTY_CONFIG_MARKER`], so that a file caught empty does not silently put
    /// every setting (pinned images among them) back to its default.
    pub fn load_for_reload(path: &Path) -> Result<FileConfig, ConfigError> {
        let (config, text) = FileConfig::load_text(path)?;
        let sets_nothing = toml::from_str::<toml::Table>(&text).is_ok_and(|t| t.is_empty());
        if sets_nothing && !text.lines().any(|l| l.trim() == EMPTY_CONFIG_MARKER) {
            return Err(ConfigError::File {
                path: path.to_owned(),
                message: format!(
                    "the file sets nothing (it is empty, or holds only comments): refusing to \
                     reset every setting to its default; a file meant to be empty says so with \
                     a line \"{EMPTY_CONFIG_MARKER}\""
                ),
            });
        }
        Ok(config)
    }

    fn load_text(path: &Path) -> Result<(FileConfig, String), ConfigError> {
        use crate::operator_file::{Follow, read_text};
        let text = read_text(path, Follow::Yes).map_err(|e| {
            // The reader's message starts with the path, which ours already names.
            let full = e.to_string();
            let shown = format!("{}: ", e.path().display());
            ConfigError::File {
                path: path.to_owned(),
                message: full.strip_prefix(&shown).unwrap_or(&full).to_owned(),
            }
        })?;
        let config = toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        Ok((config, text))
    }
}

/// Values given as flags; `None` means not given.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FlagValues {
    pub db: Option<PathBuf>,
    pub image_gc_high_threshold: Option<i64>,
    pub image_gc_low_threshold: Option<i64>,
    pub minimum_image_ttl_duration: Option<String>,
    pub image_maximum_gc_age: Option<String>,
    pub serialize_image_pulls: Option<bool>,
    pub max_parallel_image_pulls: Option<i32>,
    pub registry_qps: Option<f64>,
    pub registry_burst: Option<i64>,
    pub pod_infra_container_image: Option<String>,
    pub protect_irreplaceable: Option<bool>,
    pub container_runtime_endpoint: Option<String>,
    pub image_service_endpoint: Option<String>,
    pub kubelet_root_dir: Option<String>,
    pub kubelet_intent_max_age: Option<String>,
    pub container_events: Option<String>,
    pub journal_max_age: Option<String>,
    pub journal_max_entries: Option<i64>,
    pub pinned_images: Vec<String>,
    pub admin_socket: Option<PathBuf>,
    pub metrics_address: Option<String>,
    pub detect_period: Option<String>,
    pub gc_period: Option<String>,
    pub image_cache_period: Option<String>,
    pub image_credential_provider_config: Option<PathBuf>,
    pub image_credential_provider_bin_dir: Option<PathBuf>,
}

/// The credential provider plugins' config file and bin dir (both or neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialProviders {
    pub config: PathBuf,
    pub bin_dir: PathBuf,
}

/// Whether the agent watches the runtime's container events (`--container-events`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContainerEvents {
    /// Watch them when the runtime serves GetContainerEvents (the default).
    #[default]
    Auto,
    /// Never subscribe: on containerd 1.7 and CRI-O 1.26-1.27 the events go to one subscriber,
    /// so beside a kubelet running evented PLEG the agent would take the kubelet's events.
    Off,
}

impl ContainerEvents {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerEvents::Auto => "auto",
            ContainerEvents::Off => "off",
        }
    }
}

/// The shortest `--kubelet-intent-max-age`: an intent younger than a minute is a pull that
/// has barely started.
pub const MIN_INTENT_MAX_AGE: Duration = Duration::from_secs(60);

/// Everything the agent runs with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentConfig {
    pub db: PathBuf,
    pub cri: CriConfig,
    pub gc: GcConfig,
    pub pull: PullConfig,
    pub admin_socket: PathBuf,
    pub metrics_address: Option<SocketAddr>,
    pub detect_period: Duration,
    pub gc_period: Duration,
    pub image_cache_period: Duration,
    /// Keyring pulls (the admin EnsureImage) look for node credentials on the kubelet's docker
    /// config search path from `gc.kubelet_root_dir`, and ask these plugins.
    pub credential_providers: Option<CredentialProviders>,
    /// Whether the container events watcher runs.
    pub container_events: ContainerEvents,
}

/// The shortest loop period (`--detect-period`, `--gc-period`, `--image-cache-period`): a
/// smaller one would spin the loops against the runtime and the disk.
pub const MIN_LOOP_PERIOD: Duration = Duration::from_secs(1);

/// The longest path a unix socket can be bound at: `sun_path` is 108 bytes on Linux, with
/// its terminating NUL.
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Where a value came from, for error messages.
struct Origin<'a> {
    file: Option<&'a Path>,
}

impl Origin<'_> {
    fn field(&self, field: &str) -> String {
        match self.file {
            Some(path) => format!("{field} in {}", path.display()),
            None => field.to_owned(),
        }
    }
}

/// Picks the flag value over the file value, remembering which one won.
fn pick<T: Clone>(
    flag: &Option<T>,
    flag_name: &str,
    file: &Option<T>,
    field: String,
) -> Option<(T, String)> {
    match (flag, file) {
        (Some(v), _) => Some((v.clone(), flag_name.to_owned())),
        (None, Some(v)) => Some((v.clone(), field)),
        (None, None) => None,
    }
}

fn invalid(origin: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        origin,
        message: message.into(),
    }
}

fn duration(value: &str, origin: &str) -> Result<Duration, ConfigError> {
    parse_go_duration(value).map_err(|e| invalid(origin.to_owned(), e.to_string()))
}

impl AgentConfig {
    /// Defaults, then the file, then the flags; then validation. Each part is resolved by
    /// its own function below, which names the flag or field a bad value came from.
    pub fn resolve(
        file: &FileConfig,
        file_path: Option<&Path>,
        flags: &FlagValues,
    ) -> Result<AgentConfig, ConfigError> {
        let o = Origin { file: file_path };
        let policy = resolve_gc_policy(file, flags, &o)?;
        let pull = resolve_pull(file, flags, &o)?;
        let pins = resolve_pins(file, flags, &o)?;
        let cri = resolve_cri(file, flags, &o)?;
        let sandbox_image = pick(
            &flags.pod_infra_container_image,
            "--pod-infra-container-image",
            &file.pod_infra_container_image,
            o.field("podInfraContainerImage"),
        )
        .map(|(v, _)| v)
        .filter(|v| !v.is_empty());
        let protect_irreplaceable = pick(
            &flags.protect_irreplaceable,
            "--protect-irreplaceable",
            &file.protect_irreplaceable,
            o.field("protectIrreplaceable"),
        )
        .is_none_or(|(v, _)| v);

        let kubelet_root_dir = resolve_kubelet_root_dir(file, flags, &o)?;
        let kubelet_intent_max_age = resolve_intent_max_age(file, flags, &o)?;
        let container_events = resolve_container_events(file, flags, &o)?;
        let journal_retention = resolve_journal_retention(file, flags, &o)?;
        let metrics_address = resolve_metrics_address(flags)?;
        let credential_providers = resolve_credential_providers(file, flags, &o)?;
        let db = flags
            .db
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
        let admin_socket = flags
            .admin_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ADMIN_SOCKET));
        check_admin_socket(&admin_socket, &db, &cri)?;

        Ok(AgentConfig {
            db,
            cri,
            gc: GcConfig {
                policy,
                sandbox_image,
                protect_irreplaceable,
                pins: PinPatterns::new(pins),
                kubelet_root_dir,
                kubelet_intent_max_age,
                journal_retention,
            },
            pull,
            admin_socket,
            metrics_address,
            detect_period: period(
                &flags.detect_period,
                "--detect-period",
                Duration::from_secs(300),
            )?,
            gc_period: period(&flags.gc_period, "--gc-period", Duration::from_secs(300))?,
            image_cache_period: period(
                &flags.image_cache_period,
                "--image-cache-period",
                Duration::from_secs(30),
            )?,
            credential_providers,
            container_events,
        })
    }

    /// Where keyring pulls find credentials besides the pull secrets: the node's docker
    /// config on the kubelet's search path, and the plugins (whose config is validated and
    /// whose binaries must exist).
    pub fn credential_sources(
        &self,
    ) -> Result<crate::pull::CredentialSources, crate::pull::credentials::ProviderConfigError> {
        let plugins = match &self.credential_providers {
            None => None,
            Some(p) => Some(crate::pull::credentials::PluginProviders::load(
                &p.config, &p.bin_dir,
            )?),
        };
        Ok(crate::pull::CredentialSources {
            node: Some(
                crate::pull::credentials::NodeCredentials::kubelet_search_path(
                    self.gc.kubelet_root_dir.as_deref(),
                ),
            ),
            plugins,
        })
    }
}

/// The GC thresholds and ages, validated as the kubelet does.
fn resolve_gc_policy(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<GcPolicy, ConfigError> {
    let mut policy = GcPolicy::default();
    let mut origins = PolicyOrigins::default();

    if let Some((v, from)) = pick(
        &flags.image_gc_high_threshold,
        "--image-gc-high-threshold",
        &file.image_gc_high_threshold_percent,
        o.field("imageGCHighThresholdPercent"),
    ) {
        policy.high_threshold_percent = v;
        origins.high = from;
    }
    if let Some((v, from)) = pick(
        &flags.image_gc_low_threshold,
        "--image-gc-low-threshold",
        &file.image_gc_low_threshold_percent,
        o.field("imageGCLowThresholdPercent"),
    ) {
        policy.low_threshold_percent = v;
        origins.low = from;
    }
    if let Some((v, from)) = pick(
        &flags.minimum_image_ttl_duration,
        "--minimum-image-ttl-duration",
        &file.image_minimum_gc_age,
        o.field("imageMinimumGCAge"),
    ) {
        policy.min_age = duration(&v, &from)?;
        origins.min_age = from;
    }
    if let Some((v, from)) = pick(
        &flags.image_maximum_gc_age,
        "--image-maximum-gc-age",
        &file.image_maximum_gc_age,
        o.field("imageMaximumGCAge"),
    ) {
        policy.max_age = duration(&v, &from)?;
        origins.max_age = from;
    }
    validate_policy(&policy, &origins)?;
    Ok(policy)
}

/// The pull settings, validated as the kubelet does.
fn resolve_pull(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<PullConfig, ConfigError> {
    let mut pull = PullConfig::default();
    let mut pull_origin = String::from("pull settings");
    // SetDefaults_KubeletConfiguration (pkg/kubelet/apis/config/v1beta1/defaults.go): a file
    // that leaves serializeImagePulls unset defaults it to false when its
    // maxParallelImagePulls is 2 or more, true otherwise. Flags are applied over the defaulted
    // file, so `--max-parallel-image-pulls 5` alone is still refused, as by the kubelet.
    let file_serialize = file
        .serialize_image_pulls
        .or(match file.max_parallel_image_pulls {
            Some(n) if n >= 2 => Some(false),
            _ => None,
        });
    let file_serialize_field = if file.serialize_image_pulls.is_some() {
        o.field("serializeImagePulls")
    } else {
        o.field("maxParallelImagePulls")
    };
    if let Some((v, from)) = pick(
        &flags.serialize_image_pulls,
        "--serialize-image-pulls",
        &file_serialize,
        file_serialize_field,
    ) {
        pull.serialize_image_pulls = v;
        pull_origin = from;
    }
    if let Some((v, from)) = pick(
        &flags.max_parallel_image_pulls,
        "--max-parallel-image-pulls",
        &file.max_parallel_image_pulls,
        o.field("maxParallelImagePulls"),
    ) {
        pull.max_parallel_image_pulls = Some(v);
        pull_origin = from;
    }
    if let Some((v, from)) = pick(
        &flags.registry_qps,
        "--registry-qps",
        &file.registry_pull_qps,
        o.field("registryPullQPS"),
    ) {
        if !v.is_finite() {
            return Err(invalid(
                from,
                format!("registryPullQPS {v} must be a finite number"),
            ));
        }
        if v < 0.0 {
            return Err(invalid(
                from,
                format!("registryPullQPS {v} must not be a negative number"),
            ));
        }
        pull.registry_pull_qps = v;
    }
    if let Some((v, from)) = pick(
        &flags.registry_burst,
        "--registry-burst",
        &file.registry_burst,
        o.field("registryBurst"),
    ) {
        pull.registry_burst = u32::try_from(v).map_err(|_| {
            let problem = if v < 0 {
                "must not be a negative number".to_owned()
            } else {
                format!("is too large (at most {})", u32::MAX)
            };
            invalid(from, format!("registryBurst {v} {problem}"))
        })?;
    }
    pull.validate().map_err(|source| ConfigError::Pull {
        origin: pull_origin,
        source,
    })?;
    Ok(pull)
}

/// The pinned image patterns: the flags', else the file's.
fn resolve_pins(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Vec<String>, ConfigError> {
    let mut pins = flags.pinned_images.clone();
    if pins.is_empty() {
        pins = file.pinned_images.clone().unwrap_or_default();
    }
    for pin in &pins {
        if pin.is_empty() || pin.starts_with('*') {
            let origin = if flags.pinned_images.is_empty() {
                o.field("pinnedImages")
            } else {
                "--pinned-image".to_owned()
            };
            return Err(invalid(
                origin,
                format!("pattern {pin:?} must name an image (a trailing * matches any suffix)"),
            ));
        }
    }
    Ok(pins)
}

/// The runtime and image service endpoints.
fn resolve_cri(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<CriConfig, ConfigError> {
    let runtime_endpoint = pick(
        &flags.container_runtime_endpoint,
        "--container-runtime-endpoint",
        &file.container_runtime_endpoint,
        o.field("containerRuntimeEndpoint"),
    );
    let image_endpoint = pick(
        &flags.image_service_endpoint,
        "--image-service-endpoint",
        &file.image_service_endpoint,
        o.field("imageServiceEndpoint"),
    );
    let mut cri = CriConfig::default();
    if let Some((endpoint, from)) = runtime_endpoint {
        check_endpoint(&endpoint, &from)?;
        cri.runtime_endpoint = endpoint;
    }
    if let Some((endpoint, from)) = image_endpoint {
        check_endpoint(&endpoint, &from)?;
        cri.image_endpoint = Some(endpoint);
    }
    if cri.runtime_endpoint.is_empty() {
        cri.runtime_endpoint = DEFAULT_RUNTIME_ENDPOINT.to_owned();
    }
    Ok(cri)
}

/// The kubelet's root directory (absolute), or none when set empty.
fn resolve_kubelet_root_dir(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<PathBuf>, ConfigError> {
    let kubelet_root_dir = match pick(
        &flags.kubelet_root_dir,
        "--kubelet-root-dir",
        &file.kubelet_root_dir,
        o.field("kubeletRootDir"),
    ) {
        None => Some(PathBuf::from(DEFAULT_KUBELET_ROOT_DIR)),
        Some((v, _)) if v.is_empty() => None,
        Some((v, from)) if !Path::new(&v).is_absolute() => {
            return Err(invalid(from, format!("{v:?} is not an absolute path")));
        }
        Some((v, _)) => Some(PathBuf::from(v)),
    };
    Ok(kubelet_root_dir)
}

/// The kubelet pull intents' max age when a flag or field sets it (at least
/// [`MIN_INTENT_MAX_AGE`]); `None` takes the default.
fn resolve_intent_max_age(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<Duration>, ConfigError> {
    let Some((v, from)) = pick(
        &flags.kubelet_intent_max_age,
        "--kubelet-intent-max-age",
        &file.kubelet_intent_max_age,
        o.field("kubeletIntentMaxAge"),
    ) else {
        return Ok(None);
    };
    let d = duration(&v, &from)?;
    if d < MIN_INTENT_MAX_AGE {
        return Err(invalid(from, format!("must be at least 1m0s (got {v:?})")));
    }
    Ok(Some(d))
}

/// Whether the container events watcher runs: `auto` (the default) or `off`.
fn resolve_container_events(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<ContainerEvents, ConfigError> {
    match pick(
        &flags.container_events,
        "--container-events",
        &file.container_events,
        o.field("containerEvents"),
    ) {
        None => Ok(ContainerEvents::Auto),
        Some((v, _)) if v == "auto" => Ok(ContainerEvents::Auto),
        Some((v, _)) if v == "off" => Ok(ContainerEvents::Off),
        Some((v, from)) => Err(invalid(from, format!("{v:?} is neither auto nor off"))),
    }
}

/// The eviction journal's retention when a flag or field sets it.
fn resolve_journal_retention(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<JournalRetention>, ConfigError> {
    // None unless a flag or a file field sets it: the store then keeps the retention
    // the file records (a `gc` or `prune` without flags must not prune an agent's
    // longer journal to the defaults). One of the two set takes the default for the other.
    let mut journal_retention: Option<JournalRetention> = None;
    if let Some((v, from)) = pick(
        &flags.journal_max_age,
        "--journal-max-age",
        &file.journal_max_age,
        o.field("journalMaxAge"),
    ) {
        let d = duration(&v, &from)?;
        if d < Duration::from_secs(1) {
            return Err(invalid(from, format!("must be at least 1s (got {v:?})")));
        }
        journal_retention
            .get_or_insert_with(JournalRetention::default)
            .max_age = d;
    }
    if let Some((v, from)) = pick(
        &flags.journal_max_entries,
        "--journal-max-entries",
        &file.journal_max_entries,
        o.field("journalMaxEntries"),
    ) {
        journal_retention
            .get_or_insert_with(JournalRetention::default)
            .max_entries = u32::try_from(v).ok().filter(|n| *n >= 1).ok_or_else(|| {
            invalid(
                from,
                format!("must be between 1 and {} (got {v})", u32::MAX),
            )
        })?;
    }
    Ok(journal_retention)
}

/// The credential provider plugins' config and binaries, both or neither.
fn resolve_credential_providers(
    file: &FileConfig,
    flags: &FlagValues,
    o: &Origin<'_>,
) -> Result<Option<CredentialProviders>, ConfigError> {
    let provider_config = pick(
        &flags.image_credential_provider_config,
        "--image-credential-provider-config",
        &file.image_credential_provider_config,
        o.field("imageCredentialProviderConfig"),
    );
    let provider_bin_dir = pick(
        &flags.image_credential_provider_bin_dir,
        "--image-credential-provider-bin-dir",
        &file.image_credential_provider_bin_dir,
        o.field("imageCredentialProviderBinDir"),
    );
    let credential_providers = match (provider_config, provider_bin_dir) {
        (None, None) => None,
        (Some((config, _)), Some((bin_dir, _))) => Some(CredentialProviders { config, bin_dir }),
        (Some((_, from)), None) => {
            return Err(invalid(
                from,
                "needs --image-credential-provider-bin-dir (imageCredentialProviderBinDir) too",
            ));
        }
        (None, Some((_, from))) => {
            return Err(invalid(
                from,
                "needs --image-credential-provider-config (imageCredentialProviderConfig) too",
            ));
        }
    };
    Ok(credential_providers)
}

/// The metrics endpoint's address (a flag only).
fn resolve_metrics_address(flags: &FlagValues) -> Result<Option<SocketAddr>, ConfigError> {
    let metrics_address = match &flags.metrics_address {
        None => None,
        Some(a) if a.is_empty() => None,
        Some(a) => Some(parse_host_port(a).map_err(|e| {
            invalid(
                "--metrics-address".to_owned(),
                format!("{a:?} is not HOST:PORT with an IP host: {e}"),
            )
        })?),
    };
    Ok(metrics_address)
}

/// `HOST:PORT` with an IP host: `127.0.0.1:9899`, `[fd00::1]:9899`, and also an IPv6 host
/// without brackets, `fd00::1:9899`, as the DaemonSet's `$(HOST_IP):9899` gives on an IPv6
/// node (the port is what follows the last colon).
pub fn parse_host_port(a: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    a.parse::<SocketAddr>().or_else(|e| {
        let (host, port) = a.rsplit_once(':').ok_or(e.clone())?;
        match (host.parse::<std::net::Ipv6Addr>(), port.parse::<u16>()) {
            (Ok(ip), Ok(port)) if !host.starts_with('[') => Ok(SocketAddr::from((ip, port))),
            _ => Err(e),
        }
    })
}

/// A loop's period from its flag (at least [`MIN_LOOP_PERIOD`]), else `default`.
fn period(flag: &Option<String>, name: &str, default: Duration) -> Result<Duration, ConfigError> {
    match flag {
        None => Ok(default),
        Some(v) => {
            let d = duration(v, name)?;
            if d < MIN_LOOP_PERIOD {
                Err(invalid(
                    name.to_owned(),
                    format!("must be at least 1s (got {v:?})"),
                ))
            } else {
                Ok(d)
            }
        }
    }
}

#[derive(Default)]
struct PolicyOrigins {
    high: String,
    low: String,
    min_age: String,
    max_age: String,
}

fn validate_policy(policy: &GcPolicy, origins: &PolicyOrigins) -> Result<(), ConfigError> {
    let Err(err) = policy.validate() else {
        return Ok(());
    };
    let named = |o: &str, fallback: &str| {
        if o.is_empty() {
            fallback.to_owned()
        } else {
            o.to_owned()
        }
    };
    let high = named(&origins.high, "--image-gc-high-threshold (default)");
    let low = named(&origins.low, "--image-gc-low-threshold (default)");
    let message = err.to_string();
    let origin = if !(0..=100).contains(&policy.high_threshold_percent) {
        high
    } else if !(0..=100).contains(&policy.low_threshold_percent) {
        low
    } else if policy.low_threshold_percent >= policy.high_threshold_percent {
        format!("{low} and {high}")
    } else {
        format!(
            "{} and {}",
            named(&origins.max_age, "--image-maximum-gc-age (default)"),
            named(&origins.min_age, "--minimum-image-ttl-duration (default)")
        )
    };
    Err(invalid(origin, message))
}

/// Refuses an admin socket path that cannot be bound (empty, longer than `sun_path`) or that
/// names the database or a runtime socket: binding there would first remove that file.
fn check_admin_socket(socket: &Path, db: &Path, cri: &CriConfig) -> Result<(), ConfigError> {
    let origin = || "--admin-socket".to_owned();
    let bytes = socket.as_os_str().len();
    if bytes == 0 {
        return Err(invalid(origin(), "the path is empty"));
    }
    if bytes > MAX_SOCKET_PATH_BYTES {
        return Err(invalid(
            origin(),
            format!(
                "{} is {bytes} bytes long; a unix socket path is at most \
                 {MAX_SOCKET_PATH_BYTES} bytes",
                socket.display()
            ),
        ));
    }
    let socket_id = comparable(socket);
    if socket_id == comparable(db) {
        return Err(invalid(
            origin(),
            format!(
                "{} is the database (--db); the admin socket needs its own path",
                socket.display()
            ),
        ));
    }
    let endpoints = std::iter::once(("--container-runtime-endpoint", &cri.runtime_endpoint)).chain(
        cri.image_endpoint
            .iter()
            .map(|e| ("--image-service-endpoint", e)),
    );
    for (flag, endpoint) in endpoints {
        let path = Path::new(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        if socket_id == comparable(path) {
            return Err(invalid(
                origin(),
                format!(
                    "{} is the runtime's socket ({flag}); the admin socket needs its own path",
                    socket.display()
                ),
            ));
        }
    }
    Ok(())
}

/// A path made comparable without creating anything: the file's (device, inode) when it
/// exists (so links and `..` compare equal), else its directory resolved plus its name.
#[derive(PartialEq, Eq)]
enum Comparable {
    Inode(u64, u64),
    Path(PathBuf),
}

fn comparable(path: &Path) -> Comparable {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(path) {
        return Comparable::Inode(m.dev(), m.ino());
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let resolved = match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| absolute.clone()),
        _ => absolute.clone(),
    };
    Comparable::Path(resolved)
}

fn check_endpoint(endpoint: &str, origin: &str) -> Result<(), ConfigError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(invalid(
            origin.to_owned(),
            format!("{endpoint:?} is not unix:///path/to/socket or an absolute socket path"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(file: &FileConfig, flags: &FlagValues) -> Result<AgentConfig, ConfigError> {
        AgentConfig::resolve(file, Some(Path::new("/etc/ik.toml")), flags)
    }

    /// Issue 31: the config file is read through the operator-file reader. A FIFO (the agent
    /// hung in open(2) waiting for a writer), a device (a zero device read gigabytes), a file
    /// over 1 MiB (1.5 GB of TOML made the lexer ask for 10.8 GB) and a file nested deeper
    /// than 64 brackets are each refused at once, the error naming the file and why.
    #[test]
    fn the_config_file_is_a_small_shallow_regular_file_or_refused_naming_it() {
        use crate::operator_file::{MAX_NESTING_DEPTH, MAX_OPERATOR_FILE_BYTES};
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("fifo.toml");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("no NUL");
        // SAFETY: mkfifo(3) on a NUL-terminated path in the test's temp dir.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let large = dir.path().join("large.toml");
        let line = "# a comment line of padding\n";
        let lines = usize::try_from(MAX_OPERATOR_FILE_BYTES).expect("1 MiB") / line.len() + 1;
        std::fs::write(&large, line.repeat(lines)).expect("write");
        let deep = dir.path().join("deep.toml");
        let depth = MAX_NESTING_DEPTH + 1;
        std::fs::write(
            &deep,
            format!(
                "pinnedImages = {}{}\n",
                "[".repeat(depth),
                "]".repeat(depth)
            ),
        )
        .expect("write");
        let shallow = dir.path().join("shallow.toml");
        std::fs::write(&shallow, "pinnedImages = [\"a\"]\n").expect("write");
        let zero = Path::new("/dev/zero");
        let cases: [(&Path, &str); 4] = [
            (&fifo, "not a regular file (a FIFO)"),
            (zero, "not a regular file (a character device)"),
            (&large, "the file is larger than 1048576 bytes"),
            (&deep, "nested more than 64 levels deep at line 1"),
        ];
        for (path, why) in cases {
            for load in [FileConfig::load, FileConfig::load_for_reload] {
                let err = load(path).expect_err(why).to_string();
                assert_eq!(
                    err,
                    format!("config file {}: {}", path.display(), err_tail(&err, path)),
                    "the file is named once"
                );
                assert!(err.contains(why), "{err} should say {why:?}");
            }
        }
        let loaded = FileConfig::load(&shallow).expect("a small regular file");
        assert_eq!(loaded.pinned_images, Some(vec!["a".to_owned()]));
    }

    /// What follows "config file PATH: ", checked to hold no second copy of the path.
    fn err_tail(err: &str, path: &Path) -> String {
        let head = format!("config file {}: ", path.display());
        let tail = err.strip_prefix(&head).unwrap_or(err).to_owned();
        assert!(!tail.contains(&path.display().to_string()), "{err}");
        tail
    }

    /// Issue 31: a reload refuses a file that sets nothing (empty, white space, comments only:
    /// an editor truncating it in place) unless it holds the line `# imagekeeper: empty`;
    /// any setting makes it a file like any other. At start such a file is the defaults, as
    /// before (nothing is running to keep).
    #[test]
    fn a_file_setting_nothing_is_refused_by_a_reload_unless_it_says_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("imagekeeper.toml");
        for text in [
            "",
            "\n  \n",
            "# pinnedImages = [\"a\"]\n# imagekeeper: emptied\n",
        ] {
            std::fs::write(&path, text).expect("write");
            let err = FileConfig::load_for_reload(&path)
                .expect_err(text)
                .to_string();
            assert!(
                err.contains("the file sets nothing") && err.contains(EMPTY_CONFIG_MARKER),
                "{text:?}: {err}"
            );
            assert_eq!(
                FileConfig::load(&path),
                Ok(FileConfig::default()),
                "{text:?}"
            );
        }
        for text in [
            "# imagekeeper: empty\n",
            "# reset on purpose\n  # imagekeeper: empty  \n",
        ] {
            std::fs::write(&path, text).expect("write");
            assert_eq!(
                FileConfig::load_for_reload(&path),
                Ok(FileConfig::default()),
                "{text:?}"
            );
        }
        std::fs::write(&path, "# only this\npinnedImages = []\n").expect("write");
        let loaded = FileConfig::load_for_reload(&path).expect("a key is set");
        assert_eq!(loaded.pinned_images, Some(Vec::new()));
    }

    #[test]
    fn defaults_are_kubelets() {
        let c =
            resolve(&FileConfig::default(), &FlagValues::default()).expect("defaults are valid");
        assert_eq!(c.gc.policy, GcPolicy::default());
        assert_eq!(c.pull, PullConfig::default());
        assert_eq!(c.db, PathBuf::from(DEFAULT_DB));
        assert_eq!(c.cri.runtime_endpoint, DEFAULT_RUNTIME_ENDPOINT);
        assert_eq!(c.gc_period, Duration::from_secs(300));
        assert_eq!(c.image_cache_period, Duration::from_secs(30));
        assert!(c.metrics_address.is_none(), "metrics are off by default");
    }

    /// The journal's retention: 30 days and 10,000 entries by default, the file's fields, the
    /// flags over them, and a bad value refused naming where it came from.
    #[test]
    fn journal_retention_defaults_file_and_flags_and_bad_values_name_their_origin() {
        let file: FileConfig =
            toml::from_str("journalMaxAge = \"48h\"\njournalMaxEntries = 500\n").expect("toml");
        let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
        assert_eq!(
            c.gc.journal_retention, None,
            "no flag nor field: the store's"
        );
        let c = resolve(&file, &FlagValues::default()).expect("valid");
        assert_eq!(
            c.gc.journal_retention,
            Some(JournalRetention {
                max_age: Duration::from_secs(48 * 3600),
                max_entries: 500,
            })
        );
        let flags = FlagValues {
            journal_max_entries: Some(20),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("valid");
        assert_eq!(
            c.gc.journal_retention,
            Some(JournalRetention {
                max_age: Duration::from_secs(48 * 3600),
                max_entries: 20,
            })
        );
        let flags = FlagValues {
            journal_max_entries: Some(20),
            ..FlagValues::default()
        };
        let c = resolve(&FileConfig::default(), &flags).expect("valid");
        assert_eq!(
            c.gc.journal_retention,
            Some(JournalRetention {
                max_age: JournalRetention::default().max_age,
                max_entries: 20,
            })
        );
        let bad = [
            (
                FlagValues {
                    journal_max_entries: Some(0),
                    ..FlagValues::default()
                },
                "--journal-max-entries: must be between 1 and",
            ),
            (
                FlagValues {
                    journal_max_age: Some("0s".into()),
                    ..FlagValues::default()
                },
                "--journal-max-age: must be at least 1s",
            ),
            (
                FlagValues {
                    journal_max_age: Some("a week".into()),
                    ..FlagValues::default()
                },
                "--journal-max-age",
            ),
        ];
        for (flags, want) in bad {
            let err = resolve(&FileConfig::default(), &flags).expect_err("refused");
            assert!(err.to_string().starts_with(want), "{err}");
        }
    }

    #[test]
    fn kubelet_root_dir_defaults_to_the_kubelets_flag_wins_and_empty_disables() {
        let file: FileConfig = toml::from_str("kubeletRootDir = \"/srv/kubelet\"\n").expect("toml");
        let cases: [(&FileConfig, Option<&str>, Option<&str>); 4] = [
            (&FileConfig::default(), None, Some(DEFAULT_KUBELET_ROOT_DIR)),
            (&file, None, Some("/srv/kubelet")),
            (&file, Some("/data/kubelet"), Some("/data/kubelet")),
            (&file, Some(""), None),
        ];
        for (file, flag, want) in cases {
            let flags = FlagValues {
                kubelet_root_dir: flag.map(str::to_owned),
                ..FlagValues::default()
            };
            let c = resolve(file, &flags).expect("valid");
            assert_eq!(
                c.gc.kubelet_root_dir,
                want.map(PathBuf::from),
                "flag {flag:?}"
            );
        }
        let relative = FlagValues {
            kubelet_root_dir: Some("var/lib/kubelet".into()),
            ..FlagValues::default()
        };
        let err = resolve(&FileConfig::default(), &relative).expect_err("relative");
        assert_eq!(
            err.to_string(),
            "--kubelet-root-dir: \"var/lib/kubelet\" is not an absolute path"
        );
    }

    /// SetDefaults_KubeletConfiguration: a file's maxParallelImagePulls of 2 or more with
    /// serializeImagePulls unset defaults it to false; the flag alone is still refused.
    #[test]
    fn max_parallel_image_pulls_alone_in_the_file_gives_the_parallel_puller() {
        let file = |text: &str| -> FileConfig { toml::from_str(text).expect("toml") };
        let c =
            resolve(&file("maxParallelImagePulls = 5\n"), &FlagValues::default()).expect("valid");
        assert!(!c.pull.serialize_image_pulls);
        assert_eq!(c.pull.max_parallel_image_pulls, Some(5));
        let c =
            resolve(&file("maxParallelImagePulls = 1\n"), &FlagValues::default()).expect("valid");
        assert!(c.pull.serialize_image_pulls, "1 keeps the serial default");
        // The file's explicit value wins over the defaulting, and is refused as before.
        let err = resolve(
            &file("serializeImagePulls = true\nmaxParallelImagePulls = 5\n"),
            &FlagValues::default(),
        )
        .expect_err("refused");
        assert!(err.to_string().contains("maxParallelImagePulls"), "{err}");
        // A flag over the defaulted file: the file's default holds.
        let flags = FlagValues {
            max_parallel_image_pulls: Some(3),
            ..FlagValues::default()
        };
        let c = resolve(&file("maxParallelImagePulls = 5\n"), &flags).expect("valid");
        assert!(!c.pull.serialize_image_pulls);
        assert_eq!(c.pull.max_parallel_image_pulls, Some(3));
        // The flag alone: serializeImagePulls is already true, as in the kubelet.
        let err = resolve(&FileConfig::default(), &flags).expect_err("refused");
        assert!(
            err.to_string().contains("--max-parallel-image-pulls"),
            "{err}"
        );
        // --serialize-image-pulls over the file's maxParallelImagePulls is refused.
        let flags = FlagValues {
            serialize_image_pulls: Some(true),
            ..FlagValues::default()
        };
        assert!(resolve(&file("maxParallelImagePulls = 5\n"), &flags).is_err());
    }

    #[test]
    fn intent_max_age_and_container_events_from_flags_or_file() {
        let c = resolve(&FileConfig::default(), &FlagValues::default()).expect("valid");
        assert_eq!(c.gc.kubelet_intent_max_age, None, "the default");
        assert_eq!(c.container_events, ContainerEvents::Auto);
        let file: FileConfig =
            toml::from_str("kubeletIntentMaxAge = \"6h\"\ncontainerEvents = \"off\"\n")
                .expect("toml");
        let c = resolve(&file, &FlagValues::default()).expect("valid");
        assert_eq!(
            c.gc.kubelet_intent_max_age,
            Some(Duration::from_secs(6 * 3600))
        );
        assert_eq!(c.container_events, ContainerEvents::Off);
        let flags = FlagValues {
            kubelet_intent_max_age: Some("2h".into()),
            container_events: Some("auto".into()),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("valid");
        assert_eq!(
            c.gc.kubelet_intent_max_age,
            Some(Duration::from_secs(2 * 3600))
        );
        assert_eq!(c.container_events, ContainerEvents::Auto);
        for (flags, want) in [
            (
                FlagValues {
                    kubelet_intent_max_age: Some("30s".into()),
                    ..FlagValues::default()
                },
                "--kubelet-intent-max-age: must be at least 1m0s",
            ),
            (
                FlagValues {
                    kubelet_intent_max_age: Some("soon".into()),
                    ..FlagValues::default()
                },
                "--kubelet-intent-max-age",
            ),
            (
                FlagValues {
                    container_events: Some("on".into()),
                    ..FlagValues::default()
                },
                "--container-events: \"on\" is neither auto nor off",
            ),
        ] {
            let err = resolve(&FileConfig::default(), &flags).expect_err(want);
            assert!(err.to_string().contains(want), "{err}");
        }
        let file: FileConfig = toml::from_str("containerEvents = \"maybe\"\n").expect("toml");
        let err = resolve(&file, &FlagValues::default()).expect_err("bad");
        assert!(
            err.to_string().contains("containerEvents in /etc/ik.toml"),
            "{err}"
        );
    }

    #[test]
    fn flags_win_over_the_file() {
        let file: FileConfig = toml::from_str(
            "imageGCHighThresholdPercent = 90\nimageGCLowThresholdPercent = 70\nimageMinimumGCAge = \"5m\"\nregistryPullQPS = 2.5\npinnedImages = [\"a:1\"]\n",
        )
        .expect("toml");
        let flags = FlagValues {
            image_gc_high_threshold: Some(95),
            ..FlagValues::default()
        };
        let c = resolve(&file, &flags).expect("valid");
        assert_eq!(c.gc.policy.high_threshold_percent, 95);
        assert_eq!(c.gc.policy.low_threshold_percent, 70);
        assert_eq!(c.gc.policy.min_age, Duration::from_secs(300));
        assert_eq!(c.pull.registry_pull_qps, 2.5);
        assert_eq!(c.gc.pins.patterns(), ["a:1"]);
    }

    #[test]
    fn every_bad_value_names_its_flag_or_field() {
        let cases: Vec<(FileConfig, FlagValues, &str)> = vec![
            (
                FileConfig::default(),
                FlagValues {
                    image_gc_high_threshold: Some(101),
                    ..FlagValues::default()
                },
                "--image-gc-high-threshold: invalid HighThresholdPercent 101, must be in range [0-100]",
            ),
            (
                FileConfig {
                    image_gc_low_threshold_percent: Some(-1),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "imageGCLowThresholdPercent in /etc/ik.toml: invalid LowThresholdPercent -1, must be in range [0-100]",
            ),
            (
                FileConfig {
                    image_gc_low_threshold_percent: Some(90),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "imageGCLowThresholdPercent in /etc/ik.toml and --image-gc-high-threshold (default): LowThresholdPercent 90 can not be higher than HighThresholdPercent 85",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    minimum_image_ttl_duration: Some("2 minutes".into()),
                    ..FlagValues::default()
                },
                "--minimum-image-ttl-duration: ",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    image_maximum_gc_age: Some("1m".into()),
                    ..FlagValues::default()
                },
                "--image-maximum-gc-age and --minimum-image-ttl-duration (default): invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    registry_qps: Some(-1.0),
                    ..FlagValues::default()
                },
                "--registry-qps: registryPullQPS -1 must not be a negative number",
            ),
            (
                FileConfig {
                    registry_burst: Some(-3),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "registryBurst in /etc/ik.toml: registryBurst -3 must not be a negative number",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    max_parallel_image_pulls: Some(5),
                    ..FlagValues::default()
                },
                "--max-parallel-image-pulls: invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    container_runtime_endpoint: Some("tcp://1.2.3.4:5".into()),
                    ..FlagValues::default()
                },
                "--container-runtime-endpoint: \"tcp://1.2.3.4:5\" is not unix:///path/to/socket",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    metrics_address: Some("localhost".into()),
                    ..FlagValues::default()
                },
                "--metrics-address: \"localhost\" is not HOST:PORT",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    gc_period: Some("0s".into()),
                    ..FlagValues::default()
                },
                "--gc-period: must be at least 1s",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    detect_period: Some("999ms".into()),
                    ..FlagValues::default()
                },
                "--detect-period: must be at least 1s (got \"999ms\")",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    image_cache_period: Some("1ns".into()),
                    ..FlagValues::default()
                },
                "--image-cache-period: must be at least 1s",
            ),
            (
                FileConfig {
                    registry_burst: Some(i64::from(u32::MAX) + 1),
                    ..FileConfig::default()
                },
                FlagValues::default(),
                "registryBurst in /etc/ik.toml: registryBurst 4294967296 is too large (at most 4294967295)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    registry_qps: Some(f64::NAN),
                    ..FlagValues::default()
                },
                "--registry-qps: registryPullQPS NaN must be a finite number",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    admin_socket: Some(PathBuf::from(format!("/run/{}.sock", "s".repeat(100)))),
                    ..FlagValues::default()
                },
                "--admin-socket: /run/sss",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    db: Some("/var/lib/ik/records.redb".into()),
                    admin_socket: Some("/var/lib/ik/records.redb".into()),
                    ..FlagValues::default()
                },
                "--admin-socket: /var/lib/ik/records.redb is the database (--db)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    admin_socket: Some("/run/containerd/containerd.sock".into()),
                    ..FlagValues::default()
                },
                "--admin-socket: /run/containerd/containerd.sock is the runtime's socket (--container-runtime-endpoint)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    image_service_endpoint: Some("unix:///run/img.sock".into()),
                    admin_socket: Some("/run/img.sock".into()),
                    ..FlagValues::default()
                },
                "--admin-socket: /run/img.sock is the runtime's socket (--image-service-endpoint)",
            ),
            (
                FileConfig::default(),
                FlagValues {
                    pinned_images: vec!["*".into()],
                    ..FlagValues::default()
                },
                "--pinned-image: pattern \"*\" must name an image",
            ),
        ];
        for (file, flags, want) in cases {
            let err = resolve(&file, &flags).expect_err(want).to_string();
            assert!(err.starts_with(want), "got {err:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn a_broken_pull_rule_is_a_typed_pull_error_under_the_setting_that_broke_it() {
        use crate::pull::InvalidPullSetting;
        let file = FileConfig {
            max_parallel_image_pulls: Some(0),
            ..FileConfig::default()
        };
        let flags = FlagValues {
            serialize_image_pulls: Some(false),
            ..FlagValues::default()
        };
        let err = resolve(&file, &flags).expect_err("maxParallelImagePulls 0");
        let ConfigError::Pull { origin, source } = &err else {
            panic!("not a pull settings error: {err:?}");
        };
        assert_eq!(origin, "maxParallelImagePulls in /etc/ik.toml");
        assert_eq!(
            source.0,
            vec![InvalidPullSetting::MaxParallelImagePullsNotPositive(0)]
        );
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(
            cause.as_deref(),
            Some("invalid configuration: maxParallelImagePulls 0 must be a positive number")
        );
        assert_eq!(
            err.to_string(),
            "maxParallelImagePulls in /etc/ik.toml: invalid configuration: maxParallelImagePulls 0 must be a positive number"
        );
    }

    #[test]
    fn one_line_keeps_the_position_and_message_of_a_toml_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            "imageGCLowThresholdPercent = 50\nimageGCHighThreshold = 3\n",
        )
        .expect("write");
        let err = FileConfig::load(&path).expect_err("unknown field");
        let line = err.one_line();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with(&format!(
                "config file {}: TOML parse error at line 2, column 1: unknown field `imageGCHighThreshold`",
                path.display()
            )),
            "{line}"
        );
    }

    /// Each bad file is refused by `FileConfig::load` with an error naming the file and what
    /// is wrong in it (the field, the type, the line).
    #[test]
    fn unknown_or_mistyped_file_fields_are_errors_naming_the_file_and_the_problem() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("imagekeeper.toml");
        for (text, says) in [
            (
                "imageGCHighThreshold = 3\n",
                "unknown field `imageGCHighThreshold`",
            ),
            ("registryBurst = \"ten\"\n", "registryBurst"),
            ("not toml at all [", "line 1"),
        ] {
            std::fs::write(&path, text).expect("write");
            match FileConfig::load(&path) {
                Err(e @ ConfigError::File { .. }) => {
                    let message = e.to_string();
                    assert!(
                        message.starts_with(&format!("config file {}: ", path.display())),
                        "{message}"
                    );
                    assert!(message.contains(says), "{text}: {message}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_host_port_takes_an_ipv6_host_with_or_without_brackets() {
        let ok = [
            ("127.0.0.1:9899", "127.0.0.1:9899"),
            ("[fd00::1]:9899", "[fd00::1]:9899"),
            ("fd00::1:9899", "[fd00::1]:9899"),
            ("::1:9898", "[::1]:9898"),
        ];
        for (given, want) in ok {
            assert_eq!(
                parse_host_port(given).map(|a| a.to_string()).as_deref(),
                Ok(want),
                "{given}"
            );
        }
        for bad in [
            "localhost:9899",
            "fd00::1",
            "127.0.0.1",
            "[fd00::1:9899",
            "1.2.3.4:x",
        ] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
    }
}
