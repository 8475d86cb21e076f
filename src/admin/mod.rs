//! The agent's admin service (`proto/imagekeeper/v1/admin.proto`) on a unix socket: the server
//! side over an [`AdminBackend`] (the agent) and a client for the CLI. This module and `cri/`
//! are the only ones that import tonic and generated code; conversions live here.
//!
//! Invariants: the socket is created 0600 (in a directory created 0700); it serves only local
//! processes; nothing it returns carries pull credentials. EnsureImage takes pull secrets (the
//! only secrets on the socket): they go to the agent's image manager and nowhere else, and
//! `Debug` of the request types shows only how many there are.
//! Only a socket nobody answers on is ever removed from the socket path (`remove_stale_socket`);
//! the server holds at most [`AdminLimits::max_connections`] connections and closes one that
//! has had no call in flight for [`AdminLimits::idle_timeout`] (bytes trickled do not keep
//! it; a long call is not cut). A `Pin` is checked as the CLI checks it
//! ([`crate::gc::check_pin_request`]); an answer is at most [`MAX_ANSWER_BYTES`], its list
//! cut at the end with the count left out.

mod client;
mod server;

use std::future::Future;
use std::path::{Path, PathBuf};

use crate::format::is_zero;
use crate::gc::{GcError, GcPlan, GcReport, PinView, Removal};
use crate::model::{PinKey, UnixNanos};
use crate::pull::credentials::CredentialsError;
use crate::pull::{PullError, PullReason};

pub use client::AdminClient;
pub use server::{AdminLimits, serve, serve_with_limits};

#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
mod proto {
    tonic::include_proto!("imagekeeper.v1");
}

/// An EnsureImage request.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnsureRequest {
    /// The image reference as a pod spec names it (`nginx`, `registry.example/app:1`).
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never`; empty: `IfNotPresent`.
    pub pull_policy: String,
    /// The pod the image is for (its UID), as the kubelet's pull records name it; may be empty.
    pub pod_uid: String,
    /// The pod's namespace; may be empty.
    pub pod_namespace: String,
    /// The pod's name; may be empty.
    pub pod_name: String,
    /// The runtime handler (RuntimeClass) the image is pulled for; empty: the default.
    pub runtime_handler: String,
    /// Pull secret files' contents (see [`crate::pull::credentials::parse_pull_secret`]).
    pub pull_secrets: Vec<Vec<u8>>,
}

/// Shows every field but the pull secrets, which are only counted.
fn fmt_ensure(
    name: &str,
    f: &mut std::fmt::Formatter<'_>,
    fields: [(&str, &str); 6],
    pull_secrets: usize,
) -> std::fmt::Result {
    let mut d = f.debug_struct(name);
    for (field, value) in fields {
        d.field(field, &value);
    }
    d.field("pull_secrets", &format_args!("<{pull_secrets} redacted>"))
        .finish()
}

impl std::fmt::Debug for EnsureRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_ensure(
            "EnsureRequest",
            f,
            [
                ("image", &self.image),
                ("pull_policy", &self.pull_policy),
                ("pod_uid", &self.pod_uid),
                ("pod_namespace", &self.pod_namespace),
                ("pod_name", &self.pod_name),
                ("runtime_handler", &self.runtime_handler),
            ],
            self.pull_secrets.len(),
        )
    }
}

impl std::fmt::Debug for proto::EnsureImageRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_ensure(
            "EnsureImageRequest",
            f,
            [
                ("image", &self.image),
                ("pull_policy", &self.pull_policy),
                ("pod_uid", &self.pod_uid),
                ("pod_namespace", &self.pod_namespace),
                ("pod_name", &self.pod_name),
                ("runtime_handler", &self.runtime_handler),
            ],
            self.pull_secrets.len(),
        )
    }
}

/// What a GC or delete-unused call did, or with `dry_run` would do.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcOutcome {
    /// The images removed (or, dry, that would be), in the order removed.
    pub removed: Vec<Removal>,
    /// Bytes freed: the removed images' sizes.
    pub freed: u64,
    /// Why the run stopped short or could not start, if it did.
    pub error: Option<String>,
    /// Whether this is a plan only: nothing was removed.
    pub dry_run: bool,
    /// A dry run through the running agent: the warm entries that do not fit, as its last
    /// warm cycle judged them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warm_does_not_fit: Vec<WarmDoesNotFit>,
    /// Removals left out at the end of `removed` to keep the agent's answer within
    /// [`MAX_ANSWER_BYTES`] (`freed` still counts them).
    #[serde(skip_serializing_if = "is_zero")]
    pub removed_omitted: u64,
    /// Entries left out at the end of `warm_does_not_fit`, likewise.
    #[serde(skip_serializing_if = "is_zero")]
    pub warm_does_not_fit_omitted: u64,
    /// A dry run through the running agent: the absent images of the pods bound to this node
    /// that its prefetch does not pull ahead, and why (`clusterSignals`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_pulled_ahead: Vec<crate::gc::NotPulledAhead>,
    /// Entries left out at the end of `not_pulled_ahead`, likewise.
    #[serde(skip_serializing_if = "is_zero")]
    pub not_pulled_ahead_omitted: u64,
}

/// The largest answer the agent sends on the admin socket (its lists are cut at the end, with
/// the count left out, to fit) and, with 1 MiB of slack, the most the client reads:
/// gRPC's default 4 MiB failed `pins` with 1,000 long pins (5.1 MB) and `gc --dry-run` with a
/// 20,000-entry warm set that does not fit (5.9 MB) with "decoded message length too large".
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// What the client reads past [`MAX_ANSWER_BYTES`]: the counts of what was left out and
/// the answer's other fields (an error message is at most a few KiB).
pub(crate) const ANSWER_SLACK_BYTES: usize = 1 << 20;

/// In an answer's metadata: how many items the agent left out at the end of its list
/// (`ListPins`' pins, `Restore`'s items) to keep the answer within [`MAX_ANSWER_BYTES`]; absent
/// when nothing was cut. Metadata rather than new message fields, as the reason is.
pub(crate) const OMITTED_METADATA_KEY: &str = "imagekeeper-omitted";
/// A GC answer's removals left out, likewise.
pub(crate) const REMOVED_OMITTED_METADATA_KEY: &str = "imagekeeper-removed-omitted";
/// A GC answer's warm entries that do not fit left out, likewise.
pub(crate) const WARM_OMITTED_METADATA_KEY: &str = "imagekeeper-warm-omitted";
/// A GC answer's images not pulled ahead left out, likewise.
pub(crate) const PREFETCH_OMITTED_METADATA_KEY: &str = "imagekeeper-prefetch-omitted";

/// A warm set entry the warm cycle does not pull: it does not fit under the GC's low lines.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WarmDoesNotFit {
    /// The entry's image reference.
    pub image: String,
    /// The entry's runtime handler; empty: the default.
    pub runtime_handler: String,
    /// The size the plan judged with, when known.
    pub size: Option<u64>,
    /// Why, in the plan's words.
    pub detail: String,
}

impl WarmDoesNotFit {
    /// The entries of `plan` that do not fit.
    // The agent's alone (a `cri` build without it has no caller).
    #[cfg_attr(not(feature = "agent"), allow(dead_code))]
    pub(crate) fn of_plan(plan: &crate::warm::WarmPlan) -> Vec<WarmDoesNotFit> {
        plan.statuses
            .iter()
            .filter(|s| s.state == crate::warm::WarmState::DoesNotFit)
            .map(|s| WarmDoesNotFit {
                image: s.entry.image.clone(),
                runtime_handler: s.entry.runtime_handler.clone(),
                size: s.size,
                detail: s.detail.clone(),
            })
            .collect()
    }
}

impl GcOutcome {
    /// A run's report as the answer (`dry_run` as given).
    pub fn from_report(report: GcReport, dry_run: bool) -> GcOutcome {
        GcOutcome {
            removed: report.removed,
            freed: report.freed,
            error: report.error.map(|e| e.to_string()),
            dry_run,
            ..GcOutcome::default()
        }
    }

    /// A plan (a dry run) as the answer: what it would remove and free, or why there is none.
    pub fn from_plan(plan: Result<GcPlan, GcError>) -> GcOutcome {
        match plan {
            Ok(plan) => GcOutcome {
                freed: crate::model::saturating_total(plan.removals.iter().map(|r| r.size)),
                removed: plan.removals,
                error: None,
                dry_run: true,
                ..GcOutcome::default()
            },
            Err(e) => GcOutcome {
                error: Some(e.to_string()),
                dry_run: true,
                ..GcOutcome::default()
            },
        }
    }
}

/// The runtime pins as the agent's last reconcile found them (the RuntimePins call).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimePinsReport {
    /// Empty when runtime pins are on; else why nothing is known.
    pub note: String,
    /// The agent's database file.
    pub db: PathBuf,
    /// Each image kept at the last reconcile, why, whether CRI ListImages listed it pinned at
    /// the last detect and whether containerd's pinned label was on it (runtime pins off or
    /// undecided: the last detect's keeps, none carried, none labelled).
    pub keeps: Vec<(
        crate::model::RecordKey,
        crate::gc::runtime_pins::CarriedKeep,
    )>,
}

/// What the admin service calls into (the agent).
pub trait AdminBackend: Send + Sync + 'static {
    /// The image ref, or why not.
    fn ensure_image(
        &self,
        request: EnsureRequest,
    ) -> impl Future<Output = Result<String, EnsureImageError>> + Send;
    /// One GC cycle now, as the GC loop runs it (dry: the plan only).
    fn garbage_collect(&self, dry_run: bool) -> impl Future<Output = GcOutcome> + Send;
    /// Removes every unused image, as the kubelet's DeleteUnusedImages (dry: the plan only).
    fn delete_unused(&self, dry_run: bool) -> impl Future<Output = GcOutcome> + Send;
    /// `imagekeeper restore`: what was (or, dry, would be) pulled back, or why it could not
    /// run. A backend without it answers that it does not serve it.
    fn restore(
        &self,
        _options: crate::warm::RestoreOptions,
    ) -> impl Future<Output = Result<crate::warm::RestoreOutcome, String>> + Send {
        async { Err("this agent does not serve restore".to_owned()) }
    }
    /// The time a request is judged at (a pin's expiry must be after it): the backend's
    /// clock; the wall clock by default.
    fn now(&self) -> UnixNanos {
        use crate::clock::Clock;
        crate::clock::SystemClock.now()
    }
    /// Writes (or replaces) the pin of `key` until `until` (`NEVER`: no expiry). The default
    /// (a backend without pins) refuses.
    fn pin(
        &self,
        key: PinKey,
        until: UnixNanos,
        reason: String,
    ) -> impl Future<Output = Result<PinView, String>> + Send {
        let _ = (key, until, reason);
        std::future::ready(Err("this agent does not keep pins".to_owned()))
    }
    /// Deletes the pin of `key`; whether there was one.
    fn unpin(&self, key: PinKey) -> impl Future<Output = Result<bool, String>> + Send {
        let _ = key;
        std::future::ready(Err("this agent does not keep pins".to_owned()))
    }
    /// Every pin, with its state now and the images it names.
    fn pins(&self) -> impl Future<Output = Result<Vec<PinView>, String>> + Send {
        std::future::ready(Err("this agent does not keep pins".to_owned()))
    }
    /// The runtime pins' last reconcile. The default (a backend without runtime pins) refuses.
    fn runtime_pins(&self) -> impl Future<Output = Result<RuntimePinsReport, String>> + Send {
        std::future::ready(Err("this agent does not keep runtime pins".to_owned()))
    }
    /// `prune --orphans` in the agent: the report as JSON (`disk::PruneReport`) and the read's
    /// warnings. The default (a backend without containerd) refuses.
    fn prune_orphans(
        &self,
        min_age: std::time::Duration,
        namespaces: Vec<String>,
        dry_run: bool,
    ) -> impl Future<Output = Result<(String, Vec<String>), String>> + Send {
        let _ = (min_age, namespaces, dry_run);
        std::future::ready(Err("this agent does not serve prune --orphans".to_owned()))
    }
    /// `inspect disk` in the agent: an accounting now, as JSON (`disk::DiskReport`). The
    /// default (a backend without containerd) refuses.
    fn inspect_disk(&self) -> impl Future<Output = Result<String, String>> + Send {
        std::future::ready(Err("this agent does not serve inspect disk".to_owned()))
    }
    /// The cluster signals' watches now; `None` when none runs. The default (a backend with no
    /// cluster signals) has none.
    fn cluster_signals(&self) -> Option<crate::gc::BoundPodsSample> {
        None
    }
}

/// Why the agent did not ensure an image (the server side of EnsureImage's failure).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnsureImageError {
    /// The kubelet's failure, with its reason and message.
    #[error("{}: {}", .0.reason(), .0.message())]
    Pull(#[source] PullError),
    /// A pull secret that does not parse (`what` names it: "pull secret 2").
    #[error("InvalidPullSecret: {0}")]
    InvalidPullSecret(#[source] CredentialsError),
    /// A pull policy that is not Always, IfNotPresent or Never.
    #[error("InvalidPullPolicy: unknown pull policy {0:?}: Always, IfNotPresent or Never")]
    InvalidPullPolicy(String),
}

impl From<PullError> for EnsureImageError {
    fn from(e: PullError) -> EnsureImageError {
        EnsureImageError::Pull(e)
    }
}

impl EnsureImageError {
    /// The structured reason sent with the status.
    pub fn reason(&self) -> AdminReason {
        match self {
            EnsureImageError::Pull(e) => AdminReason::Pull(e.kind()),
            EnsureImageError::InvalidPullSecret(_) => AdminReason::InvalidPullSecret,
            EnsureImageError::InvalidPullPolicy(_) => AdminReason::InvalidPullPolicy,
        }
    }

    /// The message without its reason.
    pub fn message(&self) -> String {
        match self {
            EnsureImageError::Pull(e) => e.message().to_owned(),
            EnsureImageError::InvalidPullSecret(e) => e.to_string(),
            EnsureImageError::InvalidPullPolicy(policy) => {
                format!("unknown pull policy {policy:?}: Always, IfNotPresent or Never")
            }
        }
    }
}

/// The structured reason of a failed admin call: sent in the status's
/// `imagekeeper-reason` metadata as [`AdminReason::as_str`], beside the status code
/// (InvalidArgument for the caller's bad input, FailedPrecondition for a failed pull).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdminReason {
    /// The kubelet's pull failure (ErrImagePull, ImagePullBackOff, InvalidImageName ...).
    Pull(PullReason),
    /// A pull secret in the request does not parse.
    InvalidPullSecret,
    /// The request's pull policy is not Always, IfNotPresent or Never.
    InvalidPullPolicy,
}

/// The metadata key of a failed call's [`AdminReason`].
pub(crate) const REASON_METADATA_KEY: &str = "imagekeeper-reason";

impl AdminReason {
    /// The reason's name on the wire and in messages (the kubelet's reason for a pull).
    pub fn as_str(self) -> &'static str {
        match self {
            AdminReason::Pull(reason) => reason.as_str(),
            AdminReason::InvalidPullSecret => "InvalidPullSecret",
            AdminReason::InvalidPullPolicy => "InvalidPullPolicy",
        }
    }

    /// The reason named `s`.
    pub fn parse(s: &str) -> Option<AdminReason> {
        match s {
            "InvalidPullSecret" => Some(AdminReason::InvalidPullSecret),
            "InvalidPullPolicy" => Some(AdminReason::InvalidPullPolicy),
            other => PullReason::parse(other).map(AdminReason::Pull),
        }
    }

    /// Whether the call failed on the caller's input (the CLI exits 2), not in the agent.
    pub fn is_invalid_input(self) -> bool {
        match self {
            AdminReason::Pull(reason) => reason.is_invalid_input(),
            AdminReason::InvalidPullSecret | AdminReason::InvalidPullPolicy => true,
        }
    }
}

/// What is at the admin socket path before the agent binds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketPath {
    /// Nothing: the path is free.
    Free,
    /// A socket nobody answers on (an agent's leftover): it may be removed.
    Stale,
}

/// Looks at `path` without changing anything: free, a stale socket (a connect to it was
/// refused), or an error — a live socket (something answers: another agent, the runtime) is
/// [`AdminError::InUse`], anything that is not a socket is [`AdminError::NotASocket`].
pub fn check_socket_path(path: &Path) -> Result<SocketPath, AdminError> {
    use std::os::unix::fs::FileTypeExt;
    let bind_err = |source| AdminError::Bind {
        path: path.to_owned(),
        source,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SocketPath::Free),
        Err(e) => return Err(bind_err(e)),
    };
    let kind = meta.file_type();
    if !kind.is_socket() {
        let what = if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_file() {
            "a regular file"
        } else if kind.is_fifo() {
            "a FIFO (named pipe)"
        } else {
            "a device"
        };
        return Err(AdminError::NotASocket {
            path: path.to_owned(),
            kind: what,
        });
    }
    match connect_without_waiting(path) {
        // A listener there, accepting or with its queue full (it never accepts: a blocking
        // connect waited for ever, and `run` hung silently).
        Ok(()) => Err(AdminError::InUse {
            path: path.to_owned(),
        }),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Err(AdminError::InUse {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(SocketPath::Stale),
        Err(e) => Err(bind_err(e)),
    }
}

/// A non-blocking connect to the unix socket `path`: `Ok` when it connected, `EAGAIN` when a
/// listener is there with its queue full, `ECONNREFUSED` when nothing listens.
fn connect_without_waiting(path: &Path) -> std::io::Result<()> {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= address.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the socket path is too long (or holds a NUL byte)",
        ));
    }
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (to, from) in address.sun_path.iter_mut().zip(bytes) {
        *to = *from as libc::c_char;
    }
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor this function owns; OwnedFd closes it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let length = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `address` is a valid sockaddr_un of `length` bytes, alive for the call.
    let connected = unsafe {
        libc::connect(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            (&raw const address).cast::<libc::sockaddr>(),
            length,
        )
    };
    if connected == 0 {
        return Ok(());
    }
    Err(std::io::Error::last_os_error())
}

/// Removes the socket at `path` if, and only if, it is a stale socket: checked again right
/// before the removal (see [`check_socket_path`]).
// The agent's alone (a `cri` build without it has no caller).
#[cfg_attr(not(feature = "agent"), allow(dead_code))]
pub(crate) fn remove_stale_socket(path: &Path) -> Result<(), AdminError> {
    match check_socket_path(path)? {
        SocketPath::Free => Ok(()),
        SocketPath::Stale => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(AdminError::Bind {
                path: path.to_owned(),
                source: e,
            }),
            _ => Ok(()),
        },
    }
}

/// Admin socket failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// Something answers at the socket path: the agent does not take it over.
    #[error(
        "admin socket {path}: something answers there (another imagekeeper agent, or another \
         program's socket, if only by queueing the connection); refusing to take it over"
    )]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket path holds something else than a socket: it is left alone.
    #[error("admin socket {path} is {kind}, not a socket; refusing to remove it")]
    NotASocket {
        /// The socket path.
        path: PathBuf,
        /// What is there ("a regular file", "a directory", ...).
        kind: &'static str,
    },
    /// The caller may not connect to the socket (it is root-only).
    #[error(
        "admin socket {path}: permission denied; the agent's admin socket is root-only \
         (mode 0600): run this command as root"
    )]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket could not be checked, removed, created or bound.
    #[error("admin socket {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The client could not connect (no agent listens there, or another I/O error).
    #[error("admin socket {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The agent answered with a failure it gave a reason for (see [`AdminReason`]); the
    /// message is the agent's, without the reason.
    #[error("{}: {message}", reason.as_str())]
    Rejected {
        /// The admin call (`EnsureImage`, `Pin`, ...).
        method: &'static str,
        /// The agent's reason.
        reason: AdminReason,
        /// The agent's message.
        message: String,
    },
    /// The call failed without a reason (a transport failure, or an agent of another version).
    #[error("admin call {method}: {message}")]
    Call {
        /// The admin call.
        method: &'static str,
        /// The status message.
        message: String,
    },
    /// The agent accepted the connection and closed it without a byte, as it does with a
    /// connection beyond its limit of admin connections (it holds that many already).
    #[error(
        "admin socket {path}: the agent is busy: it accepted the connection and closed it \
         without a word, as it does beyond its limit of admin connections; try again shortly"
    )]
    Busy {
        /// The socket path.
        path: PathBuf,
    },
    /// The call passed its deadline; the agent goes on with the work.
    #[error(
        "the agent did not answer {method} within {}: it goes on with the work (see its log and the image_gc_progress_* metrics); give --timeout to wait longer",
        crate::format::go_duration(*after)
    )]
    Timeout {
        /// The admin call.
        method: &'static str,
        /// The deadline that passed.
        after: std::time::Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::RemovalReason;

    /// A GC outcome crosses the admin socket whole: every removal reason (the inode and budget
    /// reasons came back as `space` before), a dry run's warm entries that do not fit and the
    /// bound pods' images not pulled ahead.
    #[test]
    fn a_gc_outcome_round_trips_through_the_wire_with_its_reasons_and_warm_misfits() {
        let removed: Vec<Removal> = [
            RemovalReason::Age,
            RemovalReason::Space,
            RemovalReason::Unused,
            RemovalReason::Inodes,
            RemovalReason::Budget,
        ]
        .into_iter()
        .enumerate()
        .map(|(n, reason)| Removal {
            key: crate::model::RecordKey::new(format!("sha256:{n:064x}"), ""),
            size: 1,
            reason,
            evicted_before: None,
        })
        .collect();
        let sent = GcOutcome {
            freed: 5,
            removed,
            error: Some("x".into()),
            dry_run: true,
            warm_does_not_fit: vec![WarmDoesNotFit {
                image: "b:1".into(),
                runtime_handler: "h".into(),
                size: Some(500),
                detail: "why".into(),
            }],
            removed_omitted: 7,
            warm_does_not_fit_omitted: 9,
            not_pulled_ahead: vec![crate::gc::NotPulledAhead {
                image: "private:1".into(),
                pod: "ns/p".into(),
                reason: "not pulled ahead: why".into(),
            }],
            not_pulled_ahead_omitted: 3,
        };
        let received = client::outcome(server::gc_response(sent.clone()));
        assert_eq!(received, sent);
    }

    /// The requests that carry pull secrets print how many there are, never their bytes.
    #[test]
    fn ensure_requests_debug_counts_pull_secrets_and_never_shows_them() {
        let secret = br#"{"auths":{"r.example.com":{"username":"alice","password":"hunter2"}}}"#;
        let request = EnsureRequest {
            image: "r.example.com/app:1".into(),
            pull_secrets: vec![secret.to_vec()],
            ..EnsureRequest::default()
        };
        let wire = proto::EnsureImageRequest {
            image: request.image.clone(),
            pull_secrets: request.pull_secrets.clone(),
            ..proto::EnsureImageRequest::default()
        };
        for shown in [format!("{request:?}"), format!("{wire:?}")] {
            assert!(shown.contains("r.example.com/app:1"), "{shown}");
            assert!(shown.contains("<1 redacted>"), "{shown}");
            assert!(
                !shown.contains("hunter2") && !shown.contains("alice"),
                "{shown}"
            );
            // Nor as the bytes' decimal values (the derived Debug of Vec<u8>).
            assert!(!shown.contains("123, 34"), "{shown}");
        }
    }
}
