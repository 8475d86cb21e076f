//! The pull path's errors: [`PullError`], the kubelet's image errors with its messages
//! verbatim (`pkg/kubelet/images/types.go`), their reasons as values ([`PullReason`]), the
//! cause kept underneath ([`PullCause`]), and the kubelet's `evalCRIPullErr` that classifies
//! a runtime's pull error by its message's prefix. Invariants: a message never holds
//! credentials (an invalid image name keeps no source, which may show them); equality
//! compares reasons and messages, never causes.

use std::fmt;
use std::sync::Arc;

use super::RuntimeError;

/// crierrors.ErrRegistryUnavailable's text, the prefix kubelet looks for.
pub const CRI_REGISTRY_UNAVAILABLE: &str = "RegistryUnavailable";
/// crierrors.ErrSignatureValidationFailed's text.
pub const CRI_SIGNATURE_VALIDATION_FAILED: &str = "SignatureValidationFailed";

/// Why `ensure_image_exists` failed: kubelet's errors, each with its message (the kubelet's,
/// verbatim) and, where one failed underneath, the error it came from as its source (a runtime
/// call, a credential lookup). An invalid image name keeps no source: the reference error
/// may show credentials the message redacts. Equality compares reasons and messages.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// `ImagePullBackOff`: the image is in backoff after failed pulls.
    #[error("{0}")]
    ErrImagePullBackOff(String),
    /// `ImageInspectError`: the runtime could not say whether it has the image.
    #[error("{message}")]
    ErrImageInspect {
        /// The kubelet's message.
        message: String,
        /// What failed.
        #[source]
        cause: PullCause,
    },
    /// `ErrImagePull`: the pull failed.
    #[error("{message}")]
    ErrImagePull {
        /// The kubelet's message.
        message: String,
        /// What failed, when kept.
        #[source]
        cause: Option<PullCause>,
    },
    /// `ErrImageNeverPull`: the policy is Never and the image is not present.
    #[error("{0}")]
    ErrImageNeverPull(String),
    /// `RegistryUnavailable`.
    #[error("{message}")]
    RegistryUnavailable {
        /// The kubelet's message.
        message: String,
        /// What failed.
        #[source]
        cause: PullCause,
    },
    /// `SignatureValidationFailed`.
    #[error("{message}")]
    SignatureValidationFailed {
        /// The kubelet's message.
        message: String,
        /// What failed.
        #[source]
        cause: PullCause,
    },
    /// `InvalidImageName`: the name does not parse.
    #[error("{0}")]
    ErrInvalidImageName(String),
}

impl PartialEq for PullError {
    fn eq(&self, other: &PullError) -> bool {
        self.kind() == other.kind() && self.message() == other.message()
    }
}

impl Eq for PullError {}

/// The error a pull failure came from (shared, so [`PullError`] stays `Clone`). It shows as
/// the error it wraps, and its source is that error's source.
#[derive(Clone, Debug)]
pub struct PullCause(Arc<dyn std::error::Error + Send + Sync>);

impl PullCause {
    /// A cause holding `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> PullCause {
        PullCause(Arc::new(error))
    }

    /// The wrapped error.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for PullCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for PullCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The kind of a [`PullError`]: the kubelet reason, as a value that crosses the admin socket
/// (its [`PullReason::as_str`] is the reason string, [`PullReason::parse`] reads it back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PullReason {
    /// `ImagePullBackOff`.
    ImagePullBackOff,
    /// `ImageInspectError`.
    ImageInspectError,
    /// `ErrImagePull`.
    ErrImagePull,
    /// `ErrImageNeverPull`.
    ErrImageNeverPull,
    /// `RegistryUnavailable`.
    RegistryUnavailable,
    /// `SignatureValidationFailed`.
    SignatureValidationFailed,
    /// `InvalidImageName`.
    InvalidImageName,
}

impl PullReason {
    /// Every reason, in declaration order.
    pub const ALL: [PullReason; 7] = [
        PullReason::ImagePullBackOff,
        PullReason::ImageInspectError,
        PullReason::ErrImagePull,
        PullReason::ErrImageNeverPull,
        PullReason::RegistryUnavailable,
        PullReason::SignatureValidationFailed,
        PullReason::InvalidImageName,
    ];

    /// The kubelet's reason string (the Go error's text), as a container's waiting reason
    /// shows it (`pkg/kubelet/images/types.go`).
    pub fn as_str(self) -> &'static str {
        match self {
            PullReason::ImagePullBackOff => "ImagePullBackOff",
            PullReason::ImageInspectError => "ImageInspectError",
            PullReason::ErrImagePull => "ErrImagePull",
            PullReason::ErrImageNeverPull => "ErrImageNeverPull",
            PullReason::RegistryUnavailable => CRI_REGISTRY_UNAVAILABLE,
            PullReason::SignatureValidationFailed => CRI_SIGNATURE_VALIDATION_FAILED,
            PullReason::InvalidImageName => "InvalidImageName",
        }
    }

    /// The reason whose [`PullReason::as_str`] is `s`.
    pub fn parse(s: &str) -> Option<PullReason> {
        PullReason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether the failure is the caller's input (an invalid image name), not the pull's.
    pub fn is_invalid_input(self) -> bool {
        self == PullReason::InvalidImageName
    }
}

impl PullError {
    /// The kubelet reason as a value.
    pub fn kind(&self) -> PullReason {
        match self {
            PullError::ErrImagePullBackOff(_) => PullReason::ImagePullBackOff,
            PullError::ErrImageInspect { .. } => PullReason::ImageInspectError,
            PullError::ErrImagePull { .. } => PullReason::ErrImagePull,
            PullError::ErrImageNeverPull(_) => PullReason::ErrImageNeverPull,
            PullError::RegistryUnavailable { .. } => PullReason::RegistryUnavailable,
            PullError::SignatureValidationFailed { .. } => PullReason::SignatureValidationFailed,
            PullError::ErrInvalidImageName(_) => PullReason::InvalidImageName,
        }
    }

    /// The kubelet reason (the Go error's text), as a container's waiting reason shows it.
    pub fn reason(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The message (what kubelet puts in the container's waiting message).
    pub fn message(&self) -> &str {
        match self {
            PullError::ErrImagePullBackOff(m)
            | PullError::ErrImageNeverPull(m)
            | PullError::ErrInvalidImageName(m) => m,
            PullError::ErrImageInspect { message, .. }
            | PullError::ErrImagePull { message, .. }
            | PullError::RegistryUnavailable { message, .. }
            | PullError::SignatureValidationFailed { message, .. } => message,
        }
    }
}

/// Kubelet's `evalCRIPullErr`: classify a runtime pull error by the prefix of its message
/// (`pkg/kubelet/images/image_manager.go`); the runtime error is kept as the source.
pub fn eval_cri_pull_err(image: &str, err: &RuntimeError) -> PullError {
    let text = err.message();
    let cause = PullCause::new(err.clone());
    if let Some(rest) = text.strip_prefix(CRI_REGISTRY_UNAVAILABLE) {
        return PullError::RegistryUnavailable {
            message: format!(
                "image pull failed for {image} because the registry is unavailable{rest}"
            ),
            cause,
        };
    }
    if let Some(rest) = text.strip_prefix(CRI_SIGNATURE_VALIDATION_FAILED) {
        return PullError::SignatureValidationFailed {
            message: format!(
                "image pull failed for {image} because the signature validation failed{rest}"
            ),
            cause,
        };
    }
    PullError::ErrImagePull {
        message: text.to_owned(),
        cause: Some(cause),
    }
}
