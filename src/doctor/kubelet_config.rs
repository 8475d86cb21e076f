//! The kubelet's configuration file as `imagekeeper doctor` needs it: a KubeletConfiguration
//! (`kubelet.config.k8s.io/v1beta1`, YAML or JSON) decoded, defaulted and validated the way the
//! kubelet does for the fields the doctor compares with imagekeeper's settings.
//!
//! Invariants: unknown fields are ignored (a real kubelet file has dozens imagekeeper does not
//! read); a field the doctor reads that holds a value the kubelet would refuse is an error
//! naming the field, never a guess; defaults are master's (1.35+), each cited where it is set.
//! With `--config-dir`, the drop-in files are merged over the file as the kubelet merges them
//! (cmd/kubelet/app/server.go, `mergeKubeletConfigurations`: every `*.conf` file under the
//! directory, walked in lexical order, applied as a JSON merge patch) before anything is
//! defaulted or checked. Every file is read through [`crate::operator_file`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cri::DEFAULT_RUNTIME_ENDPOINT;
use crate::format::parse_go_duration;
use crate::gc::{GcPolicy, SignedAge};

/// The only group/version a KubeletConfiguration file is written in.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The kind a kubelet config file declares.
pub const KIND: &str = "KubeletConfiguration";
/// Where kubeadm and most installers put the kubelet's config file.
pub const DEFAULT_KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
/// The extension of the kubelet's `--config-dir` drop-in files.
pub const DROP_IN_EXTENSION: &str = "conf";
/// The most drop-in files read from one `--config-dir` (real ones hold a handful).
pub const MAX_DROP_INS: usize = 1000;

/// The eviction signal for the filesystem the runtime keeps image layers on.
pub const SIGNAL_IMAGEFS_AVAILABLE: &str = "imagefs.available";
/// The eviction signal for the kubelet's root filesystem.
pub const SIGNAL_NODEFS_AVAILABLE: &str = "nodefs.available";
/// The eviction signal for the free inodes of the image filesystem.
pub const SIGNAL_IMAGEFS_INODES_FREE: &str = "imagefs.inodesFree";
/// The eviction signal for the free inodes of the kubelet's root filesystem.
pub const SIGNAL_NODEFS_INODES_FREE: &str = "nodefs.inodesFree";
/// The disk signals whose reclaim runs DeleteUnusedImages (pkg/kubelet/eviction/helpers.go,
/// buildSignalToNodeReclaimFuncs), in the order the doctor reports them.
pub const DISK_SIGNALS: [&str; 4] = [
    SIGNAL_IMAGEFS_AVAILABLE,
    SIGNAL_NODEFS_AVAILABLE,
    SIGNAL_IMAGEFS_INODES_FREE,
    SIGNAL_NODEFS_INODES_FREE,
];

/// The feature gate behind imagePullCredentialsVerificationPolicy (KEP-2535): alpha in 1.33,
/// beta and on by default from 1.35 (pkg/features/kube_features.go).
pub const ENSURE_SECRET_PULLED_IMAGES_GATE: &str = "KubeletEnsureSecretPulledImages";
/// The feature gate behind imageMaximumGCAge: alpha in 1.29, beta and on by default from 1.30
/// (pkg/features/kube_features.go); with it off the kubelet removes no image for its age
/// (pkg/kubelet/kubelet.go, StartGarbageCollection).
pub const IMAGE_MAXIMUM_GC_AGE_GATE: &str = "ImageMaximumGCAge";
/// The feature gate of evented PLEG (KEP-3386): alpha, off by default
/// (pkg/features/kube_features.go). On, the kubelet subscribes to the runtime's container
/// events.
pub const EVENTED_PLEG_GATE: &str = "EventedPLEG";

/// A kubelet config file that cannot be used: unreadable, not YAML, not a
/// KubeletConfiguration, or holding a value the kubelet would refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeletConfigError {
    /// The file (or a drop-in) could not be read.
    #[error("cannot read the kubelet config: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why it could not be read.
        #[source]
        source: crate::operator_file::OperatorFileError,
    },
    /// The `--config-dir` could not be listed.
    #[error("cannot list the kubelet's config dir {path}: {source}")]
    ReadDir {
        /// The directory.
        path: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a KubeletConfiguration in YAML or JSON.
    #[error("the kubelet config {path} is not valid YAML for a KubeletConfiguration: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The decoder's message.
        message: String,
    },
    /// A field holds a value the kubelet would refuse.
    #[error("the kubelet config {path}: {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The field, as the KubeletConfiguration spells it.
        field: String,
        /// What is wrong with its value.
        message: String,
    },
}

/// An eviction threshold's value: the kubelet's `parseThresholdStatement`
/// (pkg/kubelet/eviction/helpers.go) takes a percentage of the filesystem or a quantity.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub(crate) enum Threshold {
    /// Evict when less than this percent of the filesystem is available.
    Percent(f64),
    /// Evict when fewer than this many bytes are available; `text` is the value as written.
    Bytes { bytes: f64, text: String },
}

/// The imagePullCredentialsVerificationPolicy values (staging/src/k8s.io/kubelet/config/
/// v1beta1/types.go), or the gate being off, in which case the kubelet verifies nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum CredentialVerification {
    GateOff,
    NeverVerify,
    NeverVerifyPreloadedImages,
    NeverVerifyAllowlistedImages,
    AlwaysVerify,
}

impl CredentialVerification {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialVerification::GateOff => "(gate KubeletEnsureSecretPulledImages off)",
            CredentialVerification::NeverVerify => "NeverVerify",
            CredentialVerification::NeverVerifyPreloadedImages => "NeverVerifyPreloadedImages",
            CredentialVerification::NeverVerifyAllowlistedImages => "NeverVerifyAllowlistedImages",
            CredentialVerification::AlwaysVerify => "AlwaysVerify",
        }
    }
}

/// The kubelet's settings the doctor compares, after the kubelet's defaulting.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletConfig {
    pub(crate) image_gc_high_threshold_percent: i64,
    pub(crate) image_gc_low_threshold_percent: i64,
    pub(crate) image_minimum_gc_age: Duration,
    /// Zero: off.
    pub(crate) image_maximum_gc_age: Duration,
    /// The hard eviction thresholds in force, by signal (defaults merged as the kubelet does).
    pub(crate) eviction_hard: BTreeMap<String, Threshold>,
    /// The soft eviction thresholds, by signal (no defaults).
    pub(crate) eviction_soft: BTreeMap<String, Threshold>,
    pub(crate) credential_verification: CredentialVerification,
    pub(crate) container_runtime_endpoint: String,
    /// `None`: the runtime endpoint serves images too.
    pub(crate) image_service_endpoint: Option<String>,
    /// `featureGates.EventedPLEG` (off by default).
    pub(crate) evented_pleg: bool,
    /// The drop-in files merged over the file, in the order applied.
    pub(crate) drop_ins: Vec<PathBuf>,
}

/// The fields read; everything else in the file is ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKubeletConfiguration {
    #[serde(rename = "imageGCHighThresholdPercent")]
    image_gc_high_threshold_percent: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    image_gc_low_threshold_percent: Option<i64>,
    #[serde(rename = "imageMinimumGCAge")]
    image_minimum_gc_age: Option<String>,
    #[serde(rename = "imageMaximumGCAge")]
    image_maximum_gc_age: Option<String>,
    eviction_hard: Option<BTreeMap<String, String>>,
    eviction_soft: Option<BTreeMap<String, String>>,
    merge_default_eviction_settings: Option<bool>,
    image_pull_credentials_verification_policy: Option<String>,
    preloaded_images_verification_allowlist: Option<Vec<String>>,
    feature_gates: Option<BTreeMap<String, bool>>,
    container_runtime_endpoint: Option<String>,
    image_service_endpoint: Option<String>,
}

/// Checks one `preloadedImagesVerificationAllowlist` pattern as the kubelet does, with its
/// messages (kubelet master pkg/kubelet/images/pullmanager/image_pull_policies.go,
/// getAllowlistImagePattern): no surrounding spaces; a wildcard only as a trailing `/*` after
/// at least a registry host; otherwise an image name in its normalized form, with neither
/// tag nor digest (`docker.io/library/nginx`, not `nginx` nor `nginx:1`).
pub(crate) fn allowlist_image_pattern(pattern: &str) -> Result<(), String> {
    if pattern != pattern.trim() {
        return Err(format!(
            "leading/trailing spaces are not allowed: {pattern}"
        ));
    }
    let (trimmed, wildcard) = match pattern.strip_suffix('*') {
        Some(rest) if pattern.ends_with("/*") => (rest, true),
        _ => (pattern, false),
    };
    if trimmed.is_empty() {
        return Err(format!("the supplied pattern is too short: {pattern}"));
    }
    if trimmed.contains('*') {
        return Err(format!(
            "not a valid wildcard pattern, only patterns ending with '/*' are allowed: {pattern}"
        ));
    }
    if wildcard {
        if trimmed.len() == 1 {
            return Err("at least registry hostname is required".to_owned());
        }
        return Ok(());
    }
    let image = crate::pull::ImageReference::parse_normalized(trimmed)
        .map_err(|e| format!("failed to parse as an image name: {e}"))?;
    if trimmed != image.name() {
        return Err(format!(
            "neither tag nor digest is accepted in an image reference: {pattern}"
        ));
    }
    Ok(())
}

/// The kubelet's default hard eviction thresholds for the disk signals that reclaim images
/// (pkg/kubelet/eviction/defaults_linux.go, DefaultEvictionHard: `nodefs.available: "10%"`,
/// `nodefs.inodesFree: "5%"`, `imagefs.available: "15%"`, `imagefs.inodesFree: "5%"`; the
/// memory default does not concern images).
fn default_eviction_hard() -> BTreeMap<String, Threshold> {
    BTreeMap::from([
        (
            SIGNAL_IMAGEFS_AVAILABLE.to_owned(),
            Threshold::Percent(15.0),
        ),
        (SIGNAL_NODEFS_AVAILABLE.to_owned(), Threshold::Percent(10.0)),
        (
            SIGNAL_IMAGEFS_INODES_FREE.to_owned(),
            Threshold::Percent(5.0),
        ),
        (
            SIGNAL_NODEFS_INODES_FREE.to_owned(),
            Threshold::Percent(5.0),
        ),
    ])
}

/// `patch` applied to `target` as a JSON merge patch (RFC 7386, what the kubelet's
/// `jsonpatch.MergePatch` does): mappings merge key by key, `null` removes a key, any other
/// value replaces.
fn merge_patch(target: &mut serde_yaml_ng::Value, patch: serde_yaml_ng::Value) {
    use serde_yaml_ng::Value;
    match patch {
        Value::Mapping(fields) => {
            if !target.is_mapping() {
                *target = Value::Mapping(serde_yaml_ng::Mapping::new());
            }
            if let Value::Mapping(into) = target {
                for (key, value) in fields {
                    if value.is_null() {
                        into.remove(&key);
                    } else {
                        let slot = into.entry(key).or_insert(Value::Null);
                        merge_patch(slot, value);
                    }
                }
            }
        }
        other => *target = other,
    }
}

/// The `*.conf` files under `dir`, in the order the kubelet's `filepath.WalkDir` visits them:
/// lexical by name at each level, a subdirectory's files where its name sorts, symlinks to
/// directories not entered.
fn drop_in_files(dir: &Path) -> Result<Vec<PathBuf>, KubeletConfigError> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), KubeletConfigError> {
        let list_error = |source| KubeletConfigError::ReadDir {
            path: dir.display().to_string(),
            source,
        };
        let mut entries: Vec<(PathBuf, bool)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            let is_dir = entry.file_type().map_err(list_error)?.is_dir();
            entries.push((entry.path(), is_dir));
        }
        entries.sort();
        for (path, is_dir) in entries {
            if is_dir {
                walk(&path, found)?;
            } else if path.extension().is_some_and(|e| e == DROP_IN_EXTENSION) {
                found.push(path);
            }
            if found.len() > MAX_DROP_INS {
                return Err(list_error(std::io::Error::other(format!(
                    "more than {MAX_DROP_INS} *.{DROP_IN_EXTENSION} files"
                ))));
            }
        }
        Ok(())
    }
    let mut found = Vec::new();
    walk(dir, &mut found)?;
    Ok(found)
}

impl KubeletConfig {
    /// Reads, decodes, defaults and validates the file at `path`, with the drop-ins of
    /// `config_dir` (the kubelet's `--config-dir`) merged over it first.
    pub fn load(
        path: &Path,
        config_dir: Option<&Path>,
    ) -> Result<KubeletConfig, KubeletConfigError> {
        let shown = path.display().to_string();
        let text = read_file(path)?;
        let drop_ins = match config_dir {
            None => Vec::new(),
            Some(dir) => drop_in_files(dir)?,
        };
        let (Some(dir), false) = (config_dir, drop_ins.is_empty()) else {
            return KubeletConfig::parse(&text, &shown);
        };
        let mut merged = parse_document(&text, &shown)?;
        // The kubelet defaults the file before it merges the drop-ins over it
        // (cmd/kubelet/app/server.go: loadConfigFile, then mergeKubeletConfigurations): a
        // drop-in naming one eviction signal adds it to the defaulted map, it does not replace
        // the defaults. (Only evictionHard is a defaulted map the doctor reads; a scalar's
        // default applies after the merge all the same.)
        if let Some(fields) = merged.as_mapping_mut()
            && fields
                .get("evictionHard")
                .is_none_or(serde_yaml_ng::Value::is_null)
        {
            let defaults: serde_yaml_ng::Mapping = default_eviction_hard()
                .into_iter()
                .filter_map(|(signal, threshold)| match threshold {
                    Threshold::Percent(p) => Some((signal.into(), format!("{p}%").into())),
                    _ => None,
                })
                .collect();
            fields.insert("evictionHard".into(), defaults.into());
        }
        for file in &drop_ins {
            let patch = parse_document(&read_file(file)?, &file.display().to_string())?;
            merge_patch(&mut merged, patch);
        }
        let origin = format!("{shown} (with the drop-ins of {})", dir.display());
        // Decoded from YAML text again, so a merged document reads exactly as one file would.
        let merged = serde_yaml_ng::to_string(&merged).map_err(|e| KubeletConfigError::Parse {
            path: origin.clone(),
            message: e.to_string(),
        })?;
        let mut config = KubeletConfig::from_text(&merged, &origin)?;
        config.drop_ins = drop_ins;
        Ok(config)
    }

    /// Decodes `text` (YAML or JSON); `path` names the file in errors.
    pub fn parse(text: &str, path: &str) -> Result<KubeletConfig, KubeletConfigError> {
        parse_document(text, path)?;
        KubeletConfig::from_text(text, path)
    }

    /// Decodes, defaults and validates a document already known to be a
    /// KubeletConfiguration; `path` names it in errors.
    fn from_text(text: &str, path: &str) -> Result<KubeletConfig, KubeletConfigError> {
        let raw: RawKubeletConfiguration =
            serde_yaml_ng::from_str(text).map_err(|e| KubeletConfigError::Parse {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        let invalid = |field: &str, message: String| KubeletConfigError::Invalid {
            path: path.to_owned(),
            field: field.to_owned(),
            message,
        };

        // SetDefaults_KubeletConfiguration (pkg/kubelet/apis/config/v1beta1/defaults.go):
        // thresholds 85/80 when unset, imageMinimumGCAge 2m when zero, imageMaximumGCAge 0.
        // A Go duration, which may be negative (ValidateKubeletConfiguration refuses that).
        let duration = |field: &str, value: &Option<String>| -> Result<SignedAge, _> {
            let Some(v) = value else {
                return Ok(SignedAge::positive(Duration::ZERO));
            };
            let (negative, magnitude) = match v.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, v.as_str()),
            };
            parse_go_duration(magnitude)
                .map(|magnitude| SignedAge {
                    negative,
                    magnitude,
                })
                .map_err(|e| invalid(field, e.to_string()))
        };
        let mut min_age = duration("imageMinimumGCAge", &raw.image_minimum_gc_age)?;
        if min_age.magnitude.is_zero() {
            min_age = SignedAge::positive(Duration::from_secs(120));
        }
        let max_age = duration("imageMaximumGCAge", &raw.image_maximum_gc_age)?;
        let policy = GcPolicy {
            high_threshold_percent: raw.image_gc_high_threshold_percent.unwrap_or(85),
            low_threshold_percent: raw.image_gc_low_threshold_percent.unwrap_or(80),
            min_age: min_age.magnitude,
            max_age: max_age.magnitude,
            ..GcPolicy::default()
        };
        // The kubelet's own validation (ValidateKubeletConfiguration,
        // pkg/kubelet/apis/config/validation/validation.go): every image GC rule it breaks,
        // with its texts, aggregated as utilerrors.NewAggregate prints them.
        let errors = crate::gc::kubelet_validation_errors(
            policy.high_threshold_percent,
            policy.low_threshold_percent,
            min_age,
            max_age,
        );
        if !errors.is_empty() {
            let field = if !(0..=100).contains(&policy.high_threshold_percent) {
                "imageGCHighThresholdPercent"
            } else if !(0..=100).contains(&policy.low_threshold_percent) {
                "imageGCLowThresholdPercent"
            } else if policy.low_threshold_percent >= policy.high_threshold_percent {
                "imageGCLowThresholdPercent and imageGCHighThresholdPercent"
            } else if min_age.negative {
                "imageMinimumGCAge"
            } else {
                "imageMaximumGCAge"
            };
            return Err(invalid(field, crate::format::aggregate(&errors)));
        }

        // types.go, mergeDefaultEvictionSettings: with evictionHard unset the defaults apply;
        // with it set, a signal it does not name is off unless mergeDefaultEvictionSettings
        // (default false) merges the defaults in.
        let eviction_hard = match &raw.eviction_hard {
            None => default_eviction_hard(),
            Some(given) => {
                let mut thresholds = if raw.merge_default_eviction_settings.unwrap_or(false) {
                    default_eviction_hard()
                } else {
                    BTreeMap::new()
                };
                for (signal, value) in parse_thresholds("evictionHard", given, &invalid)? {
                    match value {
                        Some(t) => thresholds.insert(signal, t),
                        None => thresholds.remove(&signal),
                    };
                }
                thresholds
            }
        };
        let mut eviction_soft = BTreeMap::new();
        if let Some(given) = &raw.eviction_soft {
            for (signal, value) in parse_thresholds("evictionSoft", given, &invalid)? {
                if let Some(t) = value {
                    eviction_soft.insert(signal, t);
                }
            }
        }

        let gate = |name: &str, default: bool| {
            raw.feature_gates
                .as_ref()
                .and_then(|gates| gates.get(name).copied())
                .unwrap_or(default)
        };
        // ImageMaximumGCAge is GA and locked to true from 1.35 (pkg/features/
        // kube_features.go, LockToDefault): the kubelet refuses to start with it set false
        // (k8s.io/component-base/featuregate, whose message this is).
        if !gate(IMAGE_MAXIMUM_GC_AGE_GATE, true) {
            return Err(invalid(
                &format!("featureGates.{IMAGE_MAXIMUM_GC_AGE_GATE}"),
                format!(
                    "cannot set feature gate {IMAGE_MAXIMUM_GC_AGE_GATE} to false, feature is \
                     locked to true"
                ),
            ));
        }
        // defaults.go: with the gate on, an empty policy becomes NeverVerifyPreloadedImages.
        let gate_on = gate(ENSURE_SECRET_PULLED_IMAGES_GATE, true);
        let field = "imagePullCredentialsVerificationPolicy";
        let credential_verification =
            match raw.image_pull_credentials_verification_policy.as_deref() {
                _ if !gate_on => CredentialVerification::GateOff,
                None | Some("") | Some("NeverVerifyPreloadedImages") => {
                    CredentialVerification::NeverVerifyPreloadedImages
                }
                Some("NeverVerify") => CredentialVerification::NeverVerify,
                Some("NeverVerifyAllowlistedImages") => {
                    CredentialVerification::NeverVerifyAllowlistedImages
                }
                Some("AlwaysVerify") => CredentialVerification::AlwaysVerify,
                Some(other) => {
                    return Err(invalid(
                        field,
                        format!(
                            "{other:?} is not one of NeverVerify, NeverVerifyPreloadedImages, \
                         NeverVerifyAllowlistedImages, AlwaysVerify"
                        ),
                    ));
                }
            };

        // The kubelet refuses to start when NeverVerifyAllowlistedImages has a pattern it
        // cannot use (pkg/kubelet/images/pullmanager/image_pull_policies.go,
        // NewNeverVerifyAllowListedPullPolicy), with that pattern's message.
        if credential_verification == CredentialVerification::NeverVerifyAllowlistedImages {
            for pattern in raw.preloaded_images_verification_allowlist.iter().flatten() {
                allowlist_image_pattern(pattern)
                    .map_err(|e| invalid("preloadedImagesVerificationAllowlist", e))?;
            }
        }

        // defaults.go: containerRuntimeEndpoint defaults to containerd's socket; an empty
        // imageServiceEndpoint means the runtime endpoint.
        let container_runtime_endpoint = raw
            .container_runtime_endpoint
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| DEFAULT_RUNTIME_ENDPOINT.to_owned());
        let image_service_endpoint = raw.image_service_endpoint.filter(|e| !e.is_empty());

        Ok(KubeletConfig {
            image_gc_high_threshold_percent: policy.high_threshold_percent,
            image_gc_low_threshold_percent: policy.low_threshold_percent,
            image_minimum_gc_age: policy.min_age,
            image_maximum_gc_age: policy.max_age,
            eviction_hard,
            eviction_soft,
            credential_verification,
            container_runtime_endpoint,
            image_service_endpoint,
            evented_pleg: gate(EVENTED_PLEG_GATE, false),
            drop_ins: Vec::new(),
        })
    }
}

/// Reads one kubelet config file (the file or a drop-in) through the operator-file reader
/// (a symlink is followed: installers link these files).
fn read_file(path: &Path) -> Result<String, KubeletConfigError> {
    crate::operator_file::read_text(path, crate::operator_file::Follow::Yes).map_err(|source| {
        KubeletConfigError::Read {
            path: path.display().to_string(),
            source,
        }
    })
}

/// Decodes one file's text (YAML or JSON) to a document and checks that it is a
/// KubeletConfiguration: the kubelet decodes the file and each drop-in through its scheme,
/// which needs both `kind` and `apiVersion`.
fn parse_document(text: &str, path: &str) -> Result<serde_yaml_ng::Value, KubeletConfigError> {
    let parse_error = |message: String| KubeletConfigError::Parse {
        path: path.to_owned(),
        message,
    };
    let invalid = |field: &str, message: String| KubeletConfigError::Invalid {
        path: path.to_owned(),
        field: field.to_owned(),
        message,
    };
    let document: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| parse_error(e.to_string()))?;
    if document.is_null() {
        return Err(parse_error("the file is empty".to_owned()));
    }
    if !document.is_mapping() {
        return Err(parse_error(
            "the file is not a mapping of KubeletConfiguration fields".to_owned(),
        ));
    }
    let text_field = |name: &str| document.get(name).map(|v| v.as_str().unwrap_or_default());
    match text_field("kind") {
        Some(KIND) => {}
        Some(other) => return Err(invalid("kind", format!("{other:?} is not {KIND}"))),
        None => return Err(invalid("kind", format!("missing (want {KIND})"))),
    }
    match text_field("apiVersion") {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(invalid(
                "apiVersion",
                format!("{other:?} is not {API_VERSION}"),
            ));
        }
        None => {
            return Err(invalid(
                "apiVersion",
                format!("missing (want {API_VERSION})"),
            ));
        }
    }
    Ok(document)
}

/// The disk signals of one eviction map, parsed; `None` for a threshold the kubelet ignores
/// ("0%" and "100%"). Signals that do not concern the disk are not read.
fn parse_thresholds(
    field: &str,
    given: &BTreeMap<String, String>,
    invalid: &dyn Fn(&str, String) -> KubeletConfigError,
) -> Result<Vec<(String, Option<Threshold>)>, KubeletConfigError> {
    let mut out = Vec::new();
    for signal in DISK_SIGNALS {
        if let Some(value) = given.get(signal) {
            let threshold = parse_threshold(value)
                .map_err(|message| invalid(&format!("{field}.{signal}"), message))?;
            out.push((signal.to_owned(), threshold));
        }
    }
    Ok(out)
}

/// One threshold value, as the kubelet's `parseThresholdStatement`
/// (pkg/kubelet/eviction/helpers.go): "0%" and "100%" are ignored, another percentage must be
/// within [0, 100], and a quantity must be positive.
pub(crate) fn parse_threshold(value: &str) -> Result<Option<Threshold>, String> {
    if let Some(number) = value.strip_suffix('%') {
        if value == "0%" || value == "100%" {
            return Ok(None);
        }
        let percent: f64 = number
            .parse()
            .map_err(|_| format!("{value:?} is not a percentage"))?;
        if !percent.is_finite() || !(0.0..=100.0).contains(&percent) {
            return Err(format!("{value:?} must be within 0% and 100%"));
        }
        return Ok(Some(Threshold::Percent(percent)));
    }
    let bytes = parse_quantity(value)?;
    if bytes <= 0.0 {
        return Err(format!("{value:?} must be positive"));
    }
    Ok(Some(Threshold::Bytes {
        bytes,
        text: value.to_owned(),
    }))
}

/// A Kubernetes resource quantity ([`crate::format::parse_quantity`]), with this module's
/// message (a threshold may also be a percentage).
pub(crate) fn parse_quantity(text: &str) -> Result<f64, String> {
    crate::format::parse_quantity(text).map_err(|e| format!("{e} or a percentage"))
}

#[cfg(test)]
mod tests;
