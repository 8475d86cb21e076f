//! The runtime layer's error type (every runtime call's, the CRI client's included). Owns
//! [`CriError`] and [`RpcCode`], our mirror of the gRPC status codes, so that no other layer
//! needs tonic to tell "not found" from "unavailable".
//!
//! Invariants: a runtime's gRPC status keeps its code and message unchanged, and an error that is
//! not a gRPC status still has the code a Go client would report (`code()`): a dial failure is
//! `Unavailable`, a missed deadline is `DeadlineExceeded`. `Display` follows grpc-go
//! (`rpc error: code = NotFound desc = ...`) because the kubelet's messages embed that text.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A gRPC status code, named as grpc-go names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RpcCode {
    /// `OK` (0): not an error.
    Ok,
    /// `CANCELLED` (1).
    Canceled,
    /// `UNKNOWN` (2).
    Unknown,
    /// `INVALID_ARGUMENT` (3).
    InvalidArgument,
    /// `DEADLINE_EXCEEDED` (4).
    DeadlineExceeded,
    /// `NOT_FOUND` (5).
    NotFound,
    /// `ALREADY_EXISTS` (6).
    AlreadyExists,
    /// `PERMISSION_DENIED` (7).
    PermissionDenied,
    /// `RESOURCE_EXHAUSTED` (8).
    ResourceExhausted,
    /// `FAILED_PRECONDITION` (9).
    FailedPrecondition,
    /// `ABORTED` (10).
    Aborted,
    /// `OUT_OF_RANGE` (11).
    OutOfRange,
    /// `UNIMPLEMENTED` (12).
    Unimplemented,
    /// `INTERNAL` (13).
    Internal,
    /// `UNAVAILABLE` (14).
    Unavailable,
    /// `DATA_LOSS` (15).
    DataLoss,
    /// `UNAUTHENTICATED` (16).
    Unauthenticated,
}

impl RpcCode {
    /// The name grpc-go prints for this code.
    pub fn as_str(self) -> &'static str {
        match self {
            RpcCode::Ok => "OK",
            RpcCode::Canceled => "Canceled",
            RpcCode::Unknown => "Unknown",
            RpcCode::InvalidArgument => "InvalidArgument",
            RpcCode::DeadlineExceeded => "DeadlineExceeded",
            RpcCode::NotFound => "NotFound",
            RpcCode::AlreadyExists => "AlreadyExists",
            RpcCode::PermissionDenied => "PermissionDenied",
            RpcCode::ResourceExhausted => "ResourceExhausted",
            RpcCode::FailedPrecondition => "FailedPrecondition",
            RpcCode::Aborted => "Aborted",
            RpcCode::OutOfRange => "OutOfRange",
            RpcCode::Unimplemented => "Unimplemented",
            RpcCode::Internal => "Internal",
            RpcCode::Unavailable => "Unavailable",
            RpcCode::DataLoss => "DataLoss",
            RpcCode::Unauthenticated => "Unauthenticated",
        }
    }
}

impl fmt::Display for RpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can go wrong talking to the container runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CriError {
    /// The runtime answered with a gRPC error status.
    #[error("rpc error: code = {code} desc = {message}")]
    Rpc {
        /// The CRI method called.
        method: &'static str,
        /// The status code.
        code: RpcCode,
        /// The status message.
        message: String,
    },
    /// The runtime's socket could not be dialed (missing, refused, or the dial timed out).
    #[error(
        "rpc error: code = Unavailable desc = connection error: cannot connect to {endpoint}: {source}"
    )]
    Connect {
        /// The endpoint dialed.
        endpoint: String,
        /// Why the dial failed.
        #[source]
        source: std::io::Error,
    },
    /// No answer within the call's deadline.
    #[error("rpc error: code = DeadlineExceeded desc = {method}: no answer within {after:?}")]
    Timeout {
        /// The CRI method called.
        method: &'static str,
        /// The deadline that passed.
        after: Duration,
    },
    /// The runtime answered, but with a reply the kubelet refuses (an image with no id or
    /// size, a pull with no image ref); the message is the kubelet's.
    #[error("{message}")]
    InvalidReply {
        /// The CRI method called.
        method: &'static str,
        /// The kubelet's message for the reply.
        message: String,
    },
    /// The endpoint is not `unix:///<path>` or an absolute socket path.
    #[error("invalid CRI endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// ImageFsInfo listed no image filesystem.
    #[error("ImageFsInfo reported no image filesystem")]
    NoImageFilesystem,
    /// statvfs of the image filesystem's mountpoint failed.
    #[error("statvfs {}: {source}", path.display())]
    Statvfs {
        /// The mountpoint.
        path: PathBuf,
        /// Why statvfs failed.
        #[source]
        source: std::io::Error,
    },
}

impl CriError {
    /// The gRPC code this error carries or, for dial failures and missed deadlines, the code a
    /// gRPC client reports for them. `None` for errors that never reached the runtime.
    pub fn code(&self) -> Option<RpcCode> {
        match self {
            CriError::Rpc { code, .. } => Some(*code),
            CriError::Connect { .. } => Some(RpcCode::Unavailable),
            CriError::Timeout { .. } => Some(RpcCode::DeadlineExceeded),
            CriError::InvalidEndpoint { .. }
            | CriError::InvalidReply { .. }
            | CriError::NoImageFilesystem
            | CriError::Statvfs { .. } => None,
        }
    }

    /// True when the runtime said the thing does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(RpcCode::NotFound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_error_displays_like_grpc_go() {
        let err = CriError::Rpc {
            method: "PullImage",
            code: RpcCode::NotFound,
            message: "no such image".into(),
        };
        assert_eq!(
            err.to_string(),
            "rpc error: code = NotFound desc = no such image"
        );
        assert_eq!(err.code(), Some(RpcCode::NotFound));
        assert!(err.is_not_found());
    }

    #[test]
    fn dial_failure_and_timeout_carry_the_grpc_go_codes() {
        let connect = CriError::Connect {
            endpoint: "unix:///nope.sock".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(connect.code(), Some(RpcCode::Unavailable));
        assert!(connect.to_string().contains("code = Unavailable"));
        assert!(
            !connect.is_not_found(),
            "a missing socket is not a missing image"
        );
        let timeout = CriError::Timeout {
            method: "ListImages",
            after: Duration::from_secs(2),
        };
        assert_eq!(timeout.code(), Some(RpcCode::DeadlineExceeded));
        assert!(
            timeout
                .to_string()
                .starts_with("rpc error: code = DeadlineExceeded desc = ")
        );
    }

    #[test]
    fn code_names_are_grpc_go_names() {
        assert_eq!(RpcCode::Unavailable.to_string(), "Unavailable");
        assert_eq!(RpcCode::Ok.to_string(), "OK");
        assert_eq!(RpcCode::Canceled.to_string(), "Canceled");
    }
}
