//! The pull path: kubelet's ImageManager (`pkg/kubelet/images/image_manager.go`, `puller.go`,
//! `types.go`) with its image-pull backoff persisted in the store.
//!
//! [`ImageManager::ensure_image_exists`] applies the default tag, prechecks presence by the
//! pull policy, refuses while the `<pod uid>_<image>` key is in backoff (no runtime call),
//! pulls through the serial or parallel puller behind the registry throttle, classifies
//! failures as kubelet does, and records the outcome in the store: a failure's next backoff
//! in the same transaction that records it, a success's record (`mark_used`) at once so GC
//! cannot evict the image before its container starts (kubelet #18140, #123631).
//!
//! Invariants: messages and reasons are kubelet's, verbatim; time comes only from the injected
//! [`Clock`]; credentials are passed to the runtime and never logged, stored or put in a
//! message. This module imports neither redb nor tonic: the store and the runtime are reached
//! through [`BackoffStore`] and [`PullRuntime`].

pub(crate) mod backoff;
pub(crate) mod credentials;
pub(crate) mod inflight;
pub(crate) mod metrics;
pub(crate) mod puller;
pub(crate) mod throttle;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;
use crate::model::{
    ImageNames, MAX_IMAGE_NAME_BYTES, MAX_POD_UID_BYTES, PodSandboxConfig, PullCredentials,
    PullSpec, RecordKey, UnixNanos,
};

use crate::format::{go_duration, go_quote};
pub use crate::reference::{
    CredentialsInName, ImageReference, MatchIndex, MatchKey, MatchPin, ReferenceError,
    apply_default_image_tag, credentials_in, image_matches, listed_keys, redact_credentials,
    redact_image_name, refuse_credentials, wanted_keys,
};
pub use backoff::{
    BackoffPolicy, BackoffStore, MemoryBackoffStore, PullWrite, PulledImage, StoreFailure,
};
pub use credentials::{
    CredentialSources, CredentialsError, DockerConfig, DockerConfigEntry, NodeCredentials,
    PluginProviders, ProviderConfigError, parse_pull_secret,
};
pub use inflight::{InFlightGuard, PullsInFlight};
pub use metrics::PullMetrics;
pub use puller::{PullRuntime, RuntimeError};

use puller::{PullRequest, Puller};

mod error;
mod outcome;

use error::eval_cri_pull_err;
pub use error::{PullCause, PullError, PullReason};

/// A container's image pull policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PullPolicy {
    /// Pull every time.
    Always,
    /// Pull when the image is not present.
    IfNotPresent,
    /// Never pull.
    Never,
}

impl PullPolicy {
    /// The `pull_policy` label of `ensure_image_requests_total`: the policy lower-cased
    /// (pkg/kubelet/images/metrics.go, `strings.ToLower(string(pullPolicy))`).
    pub fn label(self) -> &'static str {
        match self {
            PullPolicy::Always => "always",
            PullPolicy::IfNotPresent => "ifnotpresent",
            PullPolicy::Never => "never",
        }
    }
}

/// The pod a pull is for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodRef {
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's annotations.
    pub annotations: BTreeMap<String, String>,
    /// Who asks for the pull, as the pull history records it (default: `imagekeeper pull`
    /// or the admin socket's EnsureImage).
    pub origin: crate::model::PullOrigin,
}

/// Kubernetes event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// Kubelet's event reasons (pkg/kubelet/events).
pub mod reasons {
    /// `events.PullingImage`.
    pub const PULLING_IMAGE: &str = "Pulling";
    /// `events.PulledImage`.
    pub const PULLED_IMAGE: &str = "Pulled";
    /// `events.FailedToPullImage`.
    pub const FAILED_TO_PULL_IMAGE: &str = "Failed";
    /// `events.FailedToInspectImage`.
    pub const FAILED_TO_INSPECT_IMAGE: &str = "InspectFailed";
    /// `events.ErrImageNeverPullPolicy`.
    pub const ERR_IMAGE_NEVER_PULL_POLICY: &str = "ErrImageNeverPull";
    /// `events.BackOffPullImage`.
    pub const BACK_OFF_PULL_IMAGE: &str = "BackOff";
}

/// Where the manager reports events (kubelet's `record.EventRecorder`).
pub trait EventRecorder: Send + Sync {
    /// Records one event about `pod`.
    fn event(&self, pod: &PodRef, event_type: EventType, reason: &str, message: &str);
}

/// Reports events as tracing events (info for Normal, warn for Warning).
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingRecorder;

impl EventRecorder for TracingRecorder {
    fn event(&self, pod: &PodRef, event_type: EventType, reason: &str, message: &str) {
        let pod = format!("{}/{}", pod.namespace, pod.name);
        match event_type {
            EventType::Normal => tracing::info!(pod, reason, "{message}"),
            EventType::Warning => tracing::warn!(pod, reason, "{message}"),
        }
    }
}

/// The pull settings of the KubeletConfiguration.
#[derive(Clone, Debug, PartialEq)]
pub struct PullConfig {
    /// `serializeImagePulls` (kubelet default true).
    pub serialize_image_pulls: bool,
    /// `maxParallelImagePulls`; `None` is unlimited.
    pub max_parallel_image_pulls: Option<i32>,
    /// `registryPullQPS`; 0 is no throttle.
    pub registry_pull_qps: f64,
    /// `registryBurst`.
    pub registry_burst: u32,
    /// The pull backoff (the kubelet's 10 s doubling to 300 s by default).
    pub backoff: BackoffPolicy,
}

impl Default for PullConfig {
    fn default() -> PullConfig {
        PullConfig {
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            registry_pull_qps: 5.0,
            registry_burst: 10,
            backoff: BackoffPolicy::default(),
        }
    }
}

/// One pull setting that breaks a rule of kubelet's `ValidateKubeletConfiguration`
/// (`pkg/kubelet/apis/config/validation/validation.go`), with its message verbatim.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidPullSetting {
    /// `registryPullQPS` is negative (or NaN).
    #[error(
        "invalid configuration: registryPullQPS (--registry-qps) {0} must not be a negative number"
    )]
    NegativeRegistryPullQps(f64),
    /// `maxParallelImagePulls` is zero or negative.
    #[error("invalid configuration: maxParallelImagePulls {0} must be a positive number")]
    MaxParallelImagePullsNotPositive(i32),
    /// `maxParallelImagePulls` above 1 while `serializeImagePulls` is true.
    #[error(
        "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false"
    )]
    ParallelPullsWhileSerialized(i32),
}

/// Invalid pull settings: every rule [`PullConfig::validate`] found broken, in kubelet's
/// order. It is pull's own error: the configuration (a layer above, `config::ConfigError::Pull`)
/// wraps it, naming the flag or file field it came from.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct PullConfigError(pub Vec<InvalidPullSetting>);

impl fmt::Display for PullConfigError {
    /// As Go's `utilerrors.NewAggregate`: one message alone, several as `[a, b]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                let messages: Vec<String> = many.iter().map(ToString::to_string).collect();
                write!(f, "[{}]", messages.join(", "))
            }
        }
    }
}

impl PullConfig {
    /// Kubelet's `ValidateKubeletConfiguration` rules for these fields.
    pub fn validate(&self) -> Result<(), PullConfigError> {
        let mut errs = Vec::new();
        if self.registry_pull_qps < 0.0 || self.registry_pull_qps.is_nan() {
            errs.push(InvalidPullSetting::NegativeRegistryPullQps(
                self.registry_pull_qps,
            ));
        }
        if let Some(n) = self.max_parallel_image_pulls {
            if n < 1 {
                errs.push(InvalidPullSetting::MaxParallelImagePullsNotPositive(n));
            }
            if self.serialize_image_pulls && n > 1 {
                errs.push(InvalidPullSetting::ParallelPullsWhileSerialized(n));
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(PullConfigError(errs))
        }
    }
}

/// Kubelet's ImageManager over a runtime `R` and a store `S`.
pub struct ImageManager<R: PullRuntime, S: BackoffStore> {
    runtime: Arc<R>,
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    policy: BackoffPolicy,
    puller: Puller<R>,
    recorder: Arc<dyn EventRecorder>,
    metrics: Arc<PullMetrics>,
    /// Re-pulls of journaled removals (shared with the GC manager's detect).
    repulls: Arc<metrics::RepullMetrics>,
    /// Serializes backoff read-modify-write so two failures of one key both count.
    backoff_lock: Arc<Mutex<()>>,
    /// Where a pull registers its image until its mark is committed (shared with GC).
    in_flight: PullsInFlight,
    /// The node's credentials and the credential provider plugins, for keyring pulls.
    credential_sources: Arc<credentials::CredentialSources>,
}

/// What a pull authenticates with.
#[derive(Clone, Copy, Debug)]
pub enum PullAuth<'a> {
    /// Exactly these credentials, in turn (none: one anonymous pull).
    Credentials(&'a [PullCredentials]),
    /// The kubelet's keyring (`MakeDockerKeyring(pullSecrets, nodeKeyring).Lookup`): these pull
    /// secrets, then the manager's [`credentials::CredentialSources`], every match in turn,
    /// anonymous when none matches. Looked up only when a pull is about to happen.
    Keyring(&'a [credentials::DockerConfig]),
}

impl<R: PullRuntime, S: BackoffStore> ImageManager<R, S> {
    /// Validates `config` and builds the manager. Must run inside a tokio runtime (the serial
    /// puller spawns its worker there).
    pub fn new(
        config: &PullConfig,
        runtime: Arc<R>,
        store: Arc<S>,
        clock: Arc<dyn Clock>,
    ) -> Result<ImageManager<R, S>, PullConfigError> {
        config.validate()?;
        let throttle = (config.registry_pull_qps != 0.0)
            .then_some((config.registry_pull_qps, config.registry_burst));
        let max_parallel = config
            .max_parallel_image_pulls
            .and_then(|n| usize::try_from(n).ok());
        let puller = Puller::new(
            runtime.clone(),
            clock.clone(),
            throttle,
            config.serialize_image_pulls,
            max_parallel,
        );
        Ok(ImageManager {
            runtime,
            store,
            clock,
            policy: config.backoff,
            puller,
            recorder: Arc::new(TracingRecorder),
            metrics: Arc::new(PullMetrics::default()),
            repulls: Arc::new(metrics::RepullMetrics::default()),
            backoff_lock: Arc::new(Mutex::new(())),
            in_flight: PullsInFlight::new(),
            credential_sources: Arc::new(credentials::CredentialSources::default()),
        })
    }

    /// Where keyring pulls ([`PullAuth::Keyring`]) find the node's credentials and plugins.
    pub fn with_credential_sources(
        mut self,
        sources: Arc<credentials::CredentialSources>,
    ) -> ImageManager<R, S> {
        self.credential_sources = sources;
        self
    }

    /// Shares `in_flight` with the GC manager, so GC keeps the images this manager is pulling.
    pub fn with_pulls_in_flight(mut self, in_flight: PullsInFlight) -> ImageManager<R, S> {
        self.in_flight = in_flight;
        self
    }

    /// Counts re-pulls of journaled removals in `repulls` (share the GC manager's).
    pub fn with_repull_metrics(
        mut self,
        repulls: Arc<metrics::RepullMetrics>,
    ) -> ImageManager<R, S> {
        self.repulls = repulls;
        self
    }

    /// The pulls this manager has in flight.
    pub fn pulls_in_flight(&self) -> &PullsInFlight {
        &self.in_flight
    }

    /// Replaces the event recorder (tracing by default).
    pub fn with_recorder(mut self, recorder: Arc<dyn EventRecorder>) -> ImageManager<R, S> {
        self.recorder = recorder;
        self
    }

    /// The manager's pull counters.
    pub fn metrics(&self) -> &PullMetrics {
        &self.metrics
    }

    /// Kubelet's `EnsureImageExists`: the image ref once the image is present, or why not.
    /// `credentials` are tried in turn (none: an anonymous pull); the pod's annotations go
    /// to the runtime as the ImageSpec's annotations and the pod as the sandbox config
    /// (image_manager.go and kuberuntime_image.go).
    ///
    /// A pull protects its image from GC from before the PullImage call until its mark is
    /// committed (it is registered in [`PullsInFlight`]); from then on the record's last_used
    /// (the pull's end) does, as any use does.
    pub async fn ensure_image_exists(
        &self,
        pod: &PodRef,
        image: &str,
        pull_policy: PullPolicy,
        credentials: &[PullCredentials],
        runtime_handler: &str,
    ) -> Result<String, PullError> {
        self.ensure_image_exists_with(
            pod,
            image,
            pull_policy,
            PullAuth::Credentials(credentials),
            runtime_handler,
        )
        .await
    }

    /// [`Self::ensure_image_exists`] with the credentials given as `auth`. A keyring lookup
    /// that fails (a credential provider plugin failed, hung or answered garbage) fails the
    /// pull as ErrImagePull, with backoff, and no PullImage call.
    pub async fn ensure_image_exists_with(
        &self,
        pod: &PodRef,
        image: &str,
        pull_policy: PullPolicy,
        auth: PullAuth<'_>,
        runtime_handler: &str,
    ) -> Result<String, PullError> {
        let spec_image = self.default_tagged_image(pod, image, pull_policy)?;
        let q = go_quote(image);
        if let Some(present) = self
            .check_presence(pod, &q, &spec_image, pull_policy, runtime_handler)
            .await?
        {
            return Ok(present);
        }

        let key = format!("{}_{}", pod.uid, image);
        let now = self.clock.now();
        self.refuse_in_backoff(pod, &q, &key, now).await?;
        let credentials = self
            .pull_credentials(pod, &q, &spec_image, auth, now, &key)
            .await?;
        self.normal(pod, reasons::PULLING_IMAGE, &format!("Pulling image {q}"));
        let start = self.clock.now();
        let in_flight = self.in_flight.register(&spec_image);
        let result = self
            .puller
            .pull(PullRequest {
                spec: pull_spec(pod, spec_image, runtime_handler),
                credentials,
            })
            .await;
        match result {
            Err(e) => {
                self.warn(
                    pod,
                    reasons::FAILED_TO_PULL_IMAGE,
                    &format!("Failed to pull image {q}: {e}"),
                );
                let err = eval_cri_pull_err(image, &e);
                self.record_failure(key, &err).await;
                Err(err)
            }
            Ok(outcome) => Ok(self
                .pulled(pod, (&q, image), runtime_handler, start, outcome, in_flight)
                .await),
        }
    }

    /// `image` with the default tag applied: the name the runtime is asked for. An image name
    /// or pod uid over its limit, or a name that does not parse, is ErrInvalidImageName.
    fn default_tagged_image(
        &self,
        pod: &PodRef,
        image: &str,
        pull_policy: PullPolicy,
    ) -> Result<String, PullError> {
        // The kubelet counts every EnsureImageExists call, in a defer
        // (pkg/kubelet/images/image_manager.go, recordEnsureImageRequest): a call that fails
        // before the presence check counts as `<policy>`/`unknown`/`unknown`.
        if let Some(msg) = over_long(pod, image) {
            self.metrics
                .count_ensure((pull_policy.label(), "unknown", "unknown"));
            self.warn(pod, reasons::FAILED_TO_INSPECT_IMAGE, &msg);
            return Err(PullError::ErrInvalidImageName(msg));
        }
        apply_default_image_tag(image).map_err(|e| {
            let msg = format!("Failed to apply default image tag {}: {e}", go_quote(image));
            // An image name with `user:password@` never shows its credentials.
            let msg = crate::reference::redact_credentials(&msg, image);
            self.metrics
                .count_ensure((pull_policy.label(), "unknown", "unknown"));
            self.warn(pod, reasons::FAILED_TO_INSPECT_IMAGE, &msg);
            PullError::ErrInvalidImageName(msg)
        })
    }

    /// ErrImagePullBackOff when the pull backoff stored at `key` has not run out at `now`; a
    /// backoff that cannot be read lets the pull go ahead.
    async fn refuse_in_backoff(
        &self,
        pod: &PodRef,
        q: &str,
        key: &str,
        now: UnixNanos,
    ) -> Result<(), PullError> {
        let entry = match self
            .blocking({
                let store = self.store.clone();
                let key = key.to_owned();
                move || store.backoff(&key)
            })
            .await
        {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(key, error = %e, "Reading the image pull backoff failed; pulling");
                None
            }
        };
        if self.policy.is_in_backoff(entry.as_ref(), now) {
            let mut msg = format!("Back-off pulling image {q}");
            self.normal(pod, reasons::BACK_OFF_PULL_IMAGE, &msg);
            if let Some(e) = entry.filter(|e| !e.last_error.is_empty()) {
                msg = format!("{msg}: {}", e.last_error);
            }
            return Err(PullError::ErrImagePullBackOff(msg));
        }
        Ok(())
    }

    /// The credentials to pull `spec_image` with; a lookup that fails is ErrImagePull,
    /// recorded for backoff at `key`.
    async fn pull_credentials(
        &self,
        pod: &PodRef,
        q: &str,
        spec_image: &str,
        auth: PullAuth<'_>,
        now: UnixNanos,
        key: &str,
    ) -> Result<Vec<PullCredentials>, PullError> {
        match self.credentials_for(spec_image, auth, now).await {
            Ok(found) => Ok(found),
            Err(e) => {
                let msg = format!("Failed to pull image {q}: {e}");
                self.warn(pod, reasons::FAILED_TO_PULL_IMAGE, &msg);
                let err = PullError::ErrImagePull {
                    message: e.to_string(),
                    cause: Some(PullCause::new(e)),
                };
                self.record_failure(key.to_owned(), &err).await;
                Err(err)
            }
        }
    }

    /// The presence precheck by pull policy (image_manager.go, imagePullPrecheck and
    /// EnsureImageExists): `Some(image ref)` when the image is present and the policy lets it
    /// be used, `None` when it must be pulled. Counts `ensure_image_requests_total` with the
    /// kubelet's labels (images/metrics.go, recordEnsureImageRequest: the policy lower-cased,
    /// `unknown` for what was not determined).
    async fn check_presence(
        &self,
        pod: &PodRef,
        q: &str,
        spec_image: &str,
        pull_policy: PullPolicy,
        runtime_handler: &str,
    ) -> Result<Option<String>, PullError> {
        let policy_label = pull_policy.label();
        if pull_policy == PullPolicy::Always {
            self.metrics.count_ensure((policy_label, "unknown", "true"));
            return Ok(None);
        }
        match self.runtime.image_status(spec_image, runtime_handler).await {
            Err(e) => {
                // The kubelet prints the image ref GetImageRef returned, which is "" on error
                // (image_manager.go, imagePullPrecheck), not the requested name; neither
                // presence nor the need to pull was determined.
                let msg = format!("Failed to inspect image \"\": {e}");
                self.metrics
                    .count_ensure((policy_label, "unknown", "unknown"));
                self.warn(pod, reasons::FAILED_TO_INSPECT_IMAGE, &msg);
                Err(PullError::ErrImageInspect {
                    message: msg,
                    cause: PullCause::new(e),
                })
            }
            Ok(Some(present)) => {
                self.metrics.count_ensure((policy_label, "true", "false"));
                // Kubelet master's text with KubeletEnsureSecretPulledImages on (the default
                // from 1.35; image_manager.go, EnsureImageExists). imagekeeper checks no pull
                // credentials for a present image, which is what that kubelet does under
                // imagePullCredentialsVerificationPolicy NeverVerify, and it says this text
                // then too.
                let msg = format!(
                    "Container image {q} already present on machine and can be accessed by the pod"
                );
                self.normal(pod, reasons::PULLED_IMAGE, &msg);
                Ok(Some(present.id.0))
            }
            Ok(None) if pull_policy == PullPolicy::Never => {
                // imagePullPrecheck returns before pull_required is set: `unknown`.
                self.metrics
                    .count_ensure((policy_label, "false", "unknown"));
                let msg = format!("Container image {q} is not present with pull policy of Never");
                self.warn(pod, reasons::ERR_IMAGE_NEVER_PULL_POLICY, &msg);
                Err(PullError::ErrImageNeverPull(msg))
            }
            Ok(None) => {
                self.metrics.count_ensure((policy_label, "false", "true"));
                Ok(None)
            }
        }
    }

    /// The credentials a pull tries, in turn: given, or looked up in the keyring
    /// (`MakeDockerKeyring(pullSecrets, nodeKeyring).Lookup`).
    async fn credentials_for(
        &self,
        spec_image: &str,
        auth: PullAuth<'_>,
        now: UnixNanos,
    ) -> Result<Vec<PullCredentials>, credentials::CredentialsError> {
        match auth {
            PullAuth::Credentials(given) => Ok(given.to_vec()),
            PullAuth::Keyring(pull_secrets) => {
                let repo =
                    credentials::repo_to_pull(spec_image).unwrap_or_else(|| spec_image.to_owned());
                self.credential_sources
                    .lookup(&repo, pull_secrets, now)
                    .await
            }
        }
    }

    /// A successful pull: its event and metrics, and the record marked used under the key
    /// detect will use; the image stays registered in flight until the mark is committed.
    async fn pulled(
        &self,
        pod: &PodRef,
        (q, image): (&str, &str),
        runtime_handler: &str,
        start: UnixNanos,
        outcome: puller::PullOutcome,
        in_flight: InFlightGuard,
    ) -> String {
        let end = self.clock.now();
        let total = truncate_ms(end.since(start));
        let size = outcome.status.as_ref().map(|s| s.size);
        self.normal(
            pod,
            reasons::PULLED_IMAGE,
            &format!(
                "Successfully pulled image {q} in {} ({} including waiting). Image size: {} bytes.",
                go_duration(truncate_ms(outcome.pull_duration)),
                go_duration(total),
                size.unwrap_or(0)
            ),
        );
        self.metrics.observe_pull(size.unwrap_or(0), total);
        // The mark goes under the key detect will use: the runtime handler the
        // runtime lists the image under (none for containerd 1.6), not the request's.
        let key = match &outcome.status {
            Some(status) => status.record_key(),
            None => RecordKey::new(outcome.image_ref.clone(), runtime_handler),
        };
        // The runtime's names of the image go with the mark, in its transaction, so `inspect
        // list` shows them at once rather than `<none>` until the next detect.
        let names = outcome.status.as_ref().map(ImageNames::of);
        in_flight.pulled(&key.image_id);
        let pulled = PulledImage {
            origin: pod.origin,
            took: end.since(start),
            name: image.to_owned(),
        };
        self.record_success(key, names, end, size, pulled).await;
        drop(in_flight);
        outcome.image_ref
    }

    fn normal(&self, pod: &PodRef, reason: &str, msg: &str) {
        self.recorder.event(pod, EventType::Normal, reason, msg);
    }

    fn warn(&self, pod: &PodRef, reason: &str, msg: &str) {
        self.recorder.event(pod, EventType::Warning, reason, msg);
    }
}

/// The PullImage request for `image` on behalf of `pod`: its annotations on the ImageSpec
/// and, when the pod is named, its sandbox config (metadata and annotations).
fn pull_spec(pod: &PodRef, image: String, runtime_handler: &str) -> PullSpec {
    let named = !pod.uid.is_empty() || !pod.name.is_empty();
    PullSpec {
        image,
        runtime_handler: runtime_handler.to_owned(),
        annotations: pod.annotations.clone(),
        sandbox: named.then(|| PodSandboxConfig {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            attempt: 0,
            labels: Default::default(),
            annotations: pod.annotations.clone(),
        }),
    }
}

/// Why the backoff key `<pod uid>_<image>` would be too long, if it would: an image name over
/// [`MAX_IMAGE_NAME_BYTES`] or a pod uid over [`MAX_POD_UID_BYTES`] is refused before any
/// runtime call, as an invalid image name (bad input), naming neither (a long name may hold
/// credentials).
fn over_long(pod: &PodRef, image: &str) -> Option<String> {
    if image.len() > MAX_IMAGE_NAME_BYTES {
        Some(format!(
            "Failed to apply default image tag: the image name is {} bytes, longer than the \
             limit of {MAX_IMAGE_NAME_BYTES}",
            image.len()
        ))
    } else if pod.uid.len() > MAX_POD_UID_BYTES {
        Some(format!(
            "Invalid pod uid for the image pull backoff key: {} bytes, longer than the limit \
             of {MAX_POD_UID_BYTES}",
            pod.uid.len()
        ))
    } else {
        None
    }
}

/// Go's `Duration.Truncate(time.Millisecond)`.
fn truncate_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
