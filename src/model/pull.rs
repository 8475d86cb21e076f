//! A pull's values: its bounds ([`MAX_POD_UID_BYTES`], [`MAX_IMAGE_NAME_BYTES`]), the backoff
//! state of one key, what one PullImage call sends ([`PullSpec`]), and the credentials that
//! pass through to the runtime and nowhere else ([`PullCredentials`], a redacting `Debug`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{PodSandboxConfig, UnixNanos};

/// The longest pod uid a pull accepts, in bytes (a Kubernetes uid is a 36-byte UUID); the
/// store refuses a backoff key whose uid part is longer.
pub const MAX_POD_UID_BYTES: usize = 128;
/// The longest image name a pull accepts, in bytes (a reference's name is at most 255 bytes;
/// a tag and a digest add under 200 more); with [`MAX_POD_UID_BYTES`] it bounds a backoff
/// key (`<pod uid>_<image>`).
pub const MAX_IMAGE_NAME_BYTES: usize = 4096;

/// The image-pull backoff state of one key (`<pod uid>_<image>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffEntry {
    /// The current backoff period.
    pub backoff: Duration,
    /// When the entry was last updated (the last failure).
    pub last_update: UnixNanos,
    /// The message of the failure that started this period.
    pub last_error: String,
}

/// One PullImage call's image and context, as the kubelet's `PullImage(ctx, ImageSpec, auth,
/// podSandboxConfig)` sends them: the image name and runtime handler, the pod's annotations as
/// the ImageSpec's annotations, and the pod's sandbox config.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullSpec {
    /// The image name to pull.
    pub image: String,
    /// The runtime handler to pull it for; empty for the default.
    pub runtime_handler: String,
    /// The ImageSpec's annotations (the pod's).
    pub annotations: BTreeMap<String, String>,
    /// The pod the pull is for, when known.
    pub sandbox: Option<PodSandboxConfig>,
}

impl PullSpec {
    /// A pull of `image` for `runtime_handler` with no pod context.
    pub fn new(image: impl Into<String>, runtime_handler: impl Into<String>) -> PullSpec {
        PullSpec {
            image: image.into(),
            runtime_handler: runtime_handler.into(),
            ..PullSpec::default()
        }
    }
}

/// Registry credentials for one pull. They pass through to the runtime and are never logged or
/// stored: `Debug` prints only which fields are set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PullCredentials {
    /// CRI AuthConfig `username`.
    pub username: String,
    /// CRI AuthConfig `password`.
    pub password: String,
    /// CRI AuthConfig `auth` (base64 of `user:password`).
    pub auth: String,
    /// CRI AuthConfig `server_address`.
    pub server_address: String,
    /// CRI AuthConfig `identity_token`.
    pub identity_token: String,
    /// CRI AuthConfig `registry_token`.
    pub registry_token: String,
}

impl PullCredentials {
    /// Writes the credentials as a struct named `name` with every secret shown only as set
    /// or empty: the one redaction rule for every type that carries them.
    pub fn fmt_redacted(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &str| {
            if s.is_empty() {
                "<empty>"
            } else {
                "<redacted>"
            }
        };
        f.debug_struct(name)
            .field("username", &set(&self.username))
            .field("password", &set(&self.password))
            .field("auth", &set(&self.auth))
            .field("server_address", &self.server_address)
            .field("identity_token", &set(&self.identity_token))
            .field("registry_token", &set(&self.registry_token))
            .finish()
    }
}

impl fmt::Debug for PullCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_redacted("PullCredentials", f)
    }
}
