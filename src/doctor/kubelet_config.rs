//! The kubelet's configuration file as `imagekeeper doctor` needs it: a KubeletConfiguration
//! (`kubelet.config.k8s.io/v1beta1`, YAML or JSON) decoded, defaulted and validated the way the
//! kubelet does for the fields the doctor compares with imagekeeper's settings.
//!
//! Invariants: unknown fields are ignored (a real kubelet file has dozens imagekeeper does not
//! read); a field the doctor reads that holds a value the kubelet would refuse is an error
//! naming the field, never a guess; defaults are master's (1.35+), each cited where it is set.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::cri::DEFAULT_RUNTIME_ENDPOINT;
use crate::format::parse_go_duration;
use crate::gc::GcPolicy;

/// The only group/version a KubeletConfiguration file is written in.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The kind a kubelet config file declares.
pub const KIND: &str = "KubeletConfiguration";
/// Where kubeadm and most installers put the kubelet's config file.
pub const DEFAULT_KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
/// A config file larger than this is refused unread (real ones are a few KiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The eviction signal for the filesystem the runtime keeps image layers on.
pub const SIGNAL_IMAGEFS_AVAILABLE: &str = "imagefs.available";
/// The eviction signal for the kubelet's root filesystem.
pub const SIGNAL_NODEFS_AVAILABLE: &str = "nodefs.available";

/// The feature gate behind imagePullCredentialsVerificationPolicy (KEP-2535): alpha in 1.33,
/// beta and on by default from 1.35 (pkg/features/kube_features.go).
pub const ENSURE_SECRET_PULLED_IMAGES_GATE: &str = "KubeletEnsureSecretPulledImages";
/// The feature gate behind imageMaximumGCAge: alpha in 1.29, beta and on by default from 1.30
/// (pkg/features/kube_features.go); with it off the kubelet removes no image for its age
/// (pkg/kubelet/kubelet.go, StartGarbageCollection).
pub const IMAGE_MAXIMUM_GC_AGE_GATE: &str = "ImageMaximumGCAge";

/// A kubelet config file that cannot be used: unreadable, not YAML, not a
/// KubeletConfiguration, or holding a value the kubelet would refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeletConfigError {
    #[error("cannot read the kubelet config {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the kubelet config {path} is {size} bytes; at most {MAX_FILE_BYTES} are read")]
    TooLarge { path: String, size: u64 },
    #[error("the kubelet config {path} is not valid YAML for a KubeletConfiguration: {message}")]
    Parse { path: String, message: String },
    #[error("the kubelet config {path}: {field}: {message}")]
    Invalid {
        path: String,
        field: String,
        message: String,
    },
}

/// An eviction threshold's value: the kubelet's `parseThresholdStatement`
/// (pkg/kubelet/eviction/helpers.go) takes a percentage of the filesystem or a quantity.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Threshold {
    /// Evict when less than this percent of the filesystem is available.
    Percent(f64),
    /// Evict when fewer than this many bytes are available; `text` is the value as written.
    Bytes { bytes: f64, text: String },
}

/// The imagePullCredentialsVerificationPolicy values (staging/src/k8s.io/kubelet/config/
/// v1beta1/types.go), or the gate being off, in which case the kubelet verifies nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialVerification {
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
    pub image_gc_high_threshold_percent: i64,
    pub image_gc_low_threshold_percent: i64,
    pub image_minimum_gc_age: Duration,
    /// Zero: off.
    pub image_maximum_gc_age: Duration,
    /// The hard eviction thresholds in force, by signal (defaults merged as the kubelet does).
    pub eviction_hard: BTreeMap<String, Threshold>,
    /// The soft eviction thresholds, by signal (no defaults).
    pub eviction_soft: BTreeMap<String, Threshold>,
    pub credential_verification: CredentialVerification,
    pub container_runtime_endpoint: String,
    /// `None`: the runtime endpoint serves images too.
    pub image_service_endpoint: Option<String>,
}

/// The fields read; everything else in the file is ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKubeletConfiguration {
    api_version: Option<String>,
    kind: Option<String>,
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
    feature_gates: Option<BTreeMap<String, bool>>,
    container_runtime_endpoint: Option<String>,
    image_service_endpoint: Option<String>,
}

/// The kubelet's default hard eviction thresholds for the two signals that reclaim images
/// (types.go's EvictionHard doc: `nodefs.available: "10%"`, `imagefs.available: "15%"`; the
/// memory and inode defaults do not concern images).
fn default_eviction_hard() -> BTreeMap<String, Threshold> {
    BTreeMap::from([
        (
            SIGNAL_IMAGEFS_AVAILABLE.to_owned(),
            Threshold::Percent(15.0),
        ),
        (SIGNAL_NODEFS_AVAILABLE.to_owned(), Threshold::Percent(10.0)),
    ])
}

impl KubeletConfig {
    /// Reads, decodes, defaults and validates the file at `path`.
    pub fn load(path: &Path) -> Result<KubeletConfig, KubeletConfigError> {
        let shown = path.display().to_string();
        let read_error = |source| KubeletConfigError::Read {
            path: shown.clone(),
            source,
        };
        // Opened without blocking (a FIFO would wait for a writer), then judged by what was
        // opened, so a file swapped in between is never read; at most MAX_FILE_BYTES + 1 read.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(read_error)?;
        let metadata = file.metadata().map_err(read_error)?;
        if !metadata.is_file() {
            return Err(read_error(std::io::Error::other(
                "not a regular file".to_owned(),
            )));
        }
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(KubeletConfigError::TooLarge {
                path: shown,
                size: metadata.len().max(bytes.len() as u64),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| KubeletConfigError::Parse {
            path: shown.clone(),
            message: "the file is not UTF-8 text".to_owned(),
        })?;
        KubeletConfig::parse(&text, &shown)
    }

    /// Decodes `text` (YAML or JSON); `path` names the file in errors.
    pub fn parse(text: &str, path: &str) -> Result<KubeletConfig, KubeletConfigError> {
        let parse_error = |message: String| KubeletConfigError::Parse {
            path: path.to_owned(),
            message,
        };
        let raw: Option<RawKubeletConfiguration> =
            serde_yaml_ng::from_str(text).map_err(|e| parse_error(e.to_string()))?;
        let raw = raw.ok_or_else(|| parse_error("the file is empty".to_owned()))?;
        let invalid = |field: &str, message: String| KubeletConfigError::Invalid {
            path: path.to_owned(),
            field: field.to_owned(),
            message,
        };

        // The kubelet decodes its file through its scheme, which needs both.
        match raw.kind.as_deref() {
            Some(KIND) => {}
            Some(other) => return Err(invalid("kind", format!("{other:?} is not {KIND}"))),
            None => return Err(invalid("kind", format!("missing (want {KIND})"))),
        }
        match raw.api_version.as_deref() {
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

        // SetDefaults_KubeletConfiguration (pkg/kubelet/apis/config/v1beta1/defaults.go):
        // thresholds 85/80 when unset, imageMinimumGCAge 2m when zero, imageMaximumGCAge 0.
        let duration = |field: &str, value: &Option<String>| -> Result<Duration, _> {
            match value {
                None => Ok(Duration::ZERO),
                Some(v) => parse_go_duration(v).map_err(|e| invalid(field, e.to_string())),
            }
        };
        let mut min_age = duration("imageMinimumGCAge", &raw.image_minimum_gc_age)?;
        if min_age.is_zero() {
            min_age = Duration::from_secs(120);
        }
        let policy = GcPolicy {
            high_threshold_percent: raw.image_gc_high_threshold_percent.unwrap_or(85),
            low_threshold_percent: raw.image_gc_low_threshold_percent.unwrap_or(80),
            min_age,
            max_age: duration("imageMaximumGCAge", &raw.image_maximum_gc_age)?,
        };
        // The kubelet's own validation (ValidateKubeletConfiguration), with its messages.
        policy.validate().map_err(|e| {
            let field = if !(0..=100).contains(&policy.high_threshold_percent) {
                "imageGCHighThresholdPercent"
            } else if !(0..=100).contains(&policy.low_threshold_percent) {
                "imageGCLowThresholdPercent"
            } else if policy.low_threshold_percent >= policy.high_threshold_percent {
                "imageGCLowThresholdPercent and imageGCHighThresholdPercent"
            } else {
                "imageMaximumGCAge"
            };
            invalid(field, e.to_string())
        })?;

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

        let gate = |name: &str| {
            raw.feature_gates
                .as_ref()
                .and_then(|gates| gates.get(name).copied())
                .unwrap_or(true)
        };
        // defaults.go: with the gate on, an empty policy becomes NeverVerifyPreloadedImages.
        let gate_on = gate(ENSURE_SECRET_PULLED_IMAGES_GATE);
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
            image_maximum_gc_age: if gate(IMAGE_MAXIMUM_GC_AGE_GATE) {
                policy.max_age
            } else {
                Duration::ZERO
            },
            eviction_hard,
            eviction_soft,
            credential_verification,
            container_runtime_endpoint,
            image_service_endpoint,
        })
    }
}

/// The disk signals of one eviction map, parsed; `None` for a threshold the kubelet ignores
/// ("0%" and "100%"). Signals that do not concern the disk are not read.
fn parse_thresholds(
    field: &str,
    given: &BTreeMap<String, String>,
    invalid: &dyn Fn(&str, String) -> KubeletConfigError,
) -> Result<Vec<(String, Option<Threshold>)>, KubeletConfigError> {
    let mut out = Vec::new();
    for signal in [SIGNAL_IMAGEFS_AVAILABLE, SIGNAL_NODEFS_AVAILABLE] {
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
pub fn parse_threshold(value: &str) -> Result<Option<Threshold>, String> {
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

/// A Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity): a signed decimal
/// number and an optional suffix, binary (Ki..Ei), decimal (n, u, m, k, M..E) or an exponent
/// (e3, E-2). Returns its value.
pub fn parse_quantity(text: &str) -> Result<f64, String> {
    let bad = || format!("{text:?} is not a quantity (for example 10Gi or 500M) or a percentage");
    let number_end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(text.len(), |(i, _)| i);
    let (number, suffix) = text.split_at(number_end);
    if !number.chars().any(|c| c.is_ascii_digit()) || number.matches('.').count() > 1 {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    if !value.is_finite() {
        return Err(bad());
    }
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent => {
            let digits = exponent
                .strip_prefix('e')
                .or_else(|| exponent.strip_prefix('E'))
                .ok_or_else(bad)?;
            let power: i32 = digits.parse().map_err(|_| bad())?;
            if !(-30..=30).contains(&power) {
                return Err(bad());
            }
            10f64.powi(power)
        }
    };
    Ok(value * multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn parse(body: &str) -> Result<KubeletConfig, KubeletConfigError> {
        KubeletConfig::parse(&format!("{HEADER}{body}"), "/etc/kubelet.yaml")
    }

    #[test]
    fn an_empty_configuration_takes_the_kubelets_defaults() {
        let c = parse("").expect("valid");
        assert_eq!(c.image_gc_high_threshold_percent, 85);
        assert_eq!(c.image_gc_low_threshold_percent, 80);
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(c.image_maximum_gc_age, Duration::ZERO);
        assert_eq!(c.eviction_hard, default_eviction_hard());
        assert!(c.eviction_soft.is_empty());
        assert_eq!(
            c.credential_verification,
            CredentialVerification::NeverVerifyPreloadedImages
        );
        assert_eq!(c.container_runtime_endpoint, DEFAULT_RUNTIME_ENDPOINT);
        assert_eq!(c.image_service_endpoint, None);
    }

    #[test]
    fn eviction_hard_replaces_the_defaults_unless_merged() {
        let c = parse("evictionHard:\n  memory.available: 200Mi\n").expect("valid");
        assert!(c.eviction_hard.is_empty(), "{:?}", c.eviction_hard);

        let c =
            parse("evictionHard:\n  imagefs.available: 10%\nmergeDefaultEvictionSettings: true\n")
                .expect("valid");
        assert_eq!(
            c.eviction_hard.get(SIGNAL_IMAGEFS_AVAILABLE),
            Some(&Threshold::Percent(10.0))
        );
        assert_eq!(
            c.eviction_hard.get(SIGNAL_NODEFS_AVAILABLE),
            Some(&Threshold::Percent(10.0)),
            "merged default"
        );

        let c =
            parse("evictionHard:\n  imagefs.available: 0%\nmergeDefaultEvictionSettings: true\n")
                .expect("valid");
        assert_eq!(
            c.eviction_hard.get(SIGNAL_IMAGEFS_AVAILABLE),
            None,
            "0% is off"
        );
    }

    #[test]
    fn thresholds_are_percentages_or_quantities_as_the_kubelet_parses_them() {
        let cases: &[(&str, Result<Option<Threshold>, ()>)] = &[
            ("15%", Ok(Some(Threshold::Percent(15.0)))),
            ("7.5%", Ok(Some(Threshold::Percent(7.5)))),
            ("0%", Ok(None)),
            ("100%", Ok(None)),
            ("101%", Err(())),
            ("-1%", Err(())),
            ("abc%", Err(())),
            ("0", Err(())),
            ("-5Gi", Err(())),
            ("ten", Err(())),
            ("10Gb", Err(())),
            ("", Err(())),
            ("1.2.3", Err(())),
            ("1e99", Err(())),
        ];
        for (text, want) in cases {
            let got = parse_threshold(text).map_err(|_| ());
            assert_eq!(&got, want, "{text}");
        }
        for (text, bytes) in [
            ("10Gi", 10.0 * 1024f64.powi(3)),
            ("500M", 5e8),
            ("1.5Ki", 1536.0),
            ("2e3", 2000.0),
            ("1E6", 1e6),
            ("+100", 100.0),
        ] {
            assert_eq!(parse_quantity(text), Ok(bytes), "{text}");
        }
        let overflowing = format!("1{}", "0".repeat(400));
        assert_eq!(
            parse_quantity(&overflowing),
            Err(format!(
                "{overflowing:?} is not a quantity (for example 10Gi or 500M) or a percentage"
            )),
            "not finite"
        );
    }

    #[test]
    fn values_the_kubelet_refuses_are_errors_naming_the_field() {
        let cases = [
            (
                "imageGCHighThresholdPercent: 101\n",
                "imageGCHighThresholdPercent",
            ),
            (
                "imageGCHighThresholdPercent: 80\nimageGCLowThresholdPercent: 80\n",
                "must be less than",
            ),
            ("imageMinimumGCAge: two minutes\n", "imageMinimumGCAge"),
            (
                "imageMaximumGCAge: 1m\n",
                "must be greater than imageMinimumGCAge",
            ),
            (
                "evictionHard:\n  imagefs.available: 150%\n",
                "evictionHard.imagefs.available",
            ),
            (
                "evictionSoft:\n  nodefs.available: lots\n",
                "evictionSoft.nodefs.available",
            ),
            (
                "imagePullCredentialsVerificationPolicy: Sometimes\n",
                "imagePullCredentialsVerificationPolicy",
            ),
            ("imageGCHighThresholdPercent: \"85\"\n", "not valid YAML"),
            ("evictionHard: [1, 2]\n", "not valid YAML"),
        ];
        for (body, want) in cases {
            let err = parse(body).expect_err(body).to_string();
            assert!(err.contains(want), "{body}: {err}");
        }
        for (text, want) in [
            ("", "is empty"),
            ("kind: KubeletConfiguration\n", "apiVersion: missing"),
            (
                "apiVersion: v1\nkind: Pod\n",
                "kind: \"Pod\" is not KubeletConfiguration",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
                "is not kubelet.config.k8s.io/v1beta1",
            ),
            ("{ not yaml", "not valid YAML"),
        ] {
            let err = KubeletConfig::parse(text, "/k.yaml")
                .expect_err(text)
                .to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics_the_reader(
            text in "\\PC{0,200}",
            value in "[-+0-9.eEkKMGTPi%mun ]{0,12}",
        ) {
            let _ = KubeletConfig::parse(&text, "/k.yaml");
            let _ = parse_threshold(&value);
            let body = format!(
                "evictionHard:\n  imagefs.available: {value:?}\nimageMaximumGCAge: {value:?}\n"
            );
            let _ = parse(&body);
        }
    }

    #[test]
    fn the_verification_policy_and_the_max_age_follow_their_gates() {
        let c = parse("featureGates:\n  KubeletEnsureSecretPulledImages: false\nimagePullCredentialsVerificationPolicy: AlwaysVerify\n")
            .expect("valid");
        assert_eq!(c.credential_verification, CredentialVerification::GateOff);
        let c = parse("imageMaximumGCAge: 24h\n").expect("valid");
        assert_eq!(c.image_maximum_gc_age, Duration::from_secs(86400));
        let c = parse("featureGates:\n  ImageMaximumGCAge: false\nimageMaximumGCAge: 24h\n")
            .expect("valid");
        assert_eq!(
            c.image_maximum_gc_age,
            Duration::ZERO,
            "the gate is off: no age GC"
        );
        let c = parse("imagePullCredentialsVerificationPolicy: AlwaysVerify\nsomeFieldImagekeeperDoesNotRead: 3\n")
            .expect("unknown fields are ignored");
        assert_eq!(
            c.credential_verification,
            CredentialVerification::AlwaysVerify
        );
    }
}
