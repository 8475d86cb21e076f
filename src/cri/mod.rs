//! The CRI layer: everything imagekeeper says to the container runtime goes through here. It
//! owns the runtime.v1 protocol (the generated code from `proto/runtime/v1/api.proto`), the
//! tonic client over unix sockets ([`CriClient`]), the conversions to and from the model types
//! (`convert`, the only place they happen), statvfs of the image filesystem, and an in-process
//! fake runtime for tests (`FakeRuntime`, only with cfg(test) or the `testing` feature).
//!
//! Invariants: this and `admin` are the only modules that import tonic, and this is the only one that
//! imports prost or the runtime.v1 generated code; other
//! layers see [`ImageRuntime`], model types and [`CriError`]. An image the runtime does not have
//! is `Ok(None)`, not an error. Every call has a deadline. Pull credentials pass through to the
//! runtime and are never logged. The submodules are private: what other layers and crates may
//! use is the list of re-exports below.

use std::future::Future;

use crate::model::{
    ContainerUsage, ImageFsStats, PullCredentials, PullSpec, RuntimeContainer, RuntimeImage,
};

mod client;
mod convert;
mod error;
#[cfg(any(test, feature = "testing"))]
mod fake;
mod statvfs;

pub use client::{
    ContainerEventStream, ContainerStatusReport, CriClient, CriConfig, DEFAULT_RUNTIME_ENDPOINT,
    RuntimeVersion,
};
/// The pod and container specs of the lifecycle calls only tests make.
#[cfg(any(test, feature = "testing"))]
pub use client::{
    ContainerSecurity, ContainerSpec, ExecResult, MountSpec, PodSandboxSummary, SandboxSpec,
};
pub use error::{CriError, RpcCode};
/// The in-process fake runtime (feature `testing`).
#[cfg(any(test, feature = "testing"))]
pub use fake::{FakeFailure, FakePull, FakeRuntime};

/// The code generated from `proto/runtime/v1/api.proto` (package `runtime.v1`).
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
mod proto {
    tonic::include_proto!("runtime.v1");
}

/// What imagekeeper needs from a container runtime's image service (and ListContainers, to know
/// which images are in use).
pub trait ImageRuntime: Send + Sync {
    fn list_images(&self) -> impl Future<Output = Result<Vec<RuntimeImage>, CriError>> + Send;
    /// Ok(None) when the runtime does not have the image ("absent" is not an error).
    fn image_status(
        &self,
        image: &str,
        runtime_handler: &str,
    ) -> impl Future<Output = Result<Option<RuntimeImage>, CriError>> + Send;
    /// Returns the image ref the runtime reports (containerd: the image id).
    fn pull_image(
        &self,
        image: &str,
        runtime_handler: &str,
        credentials: Option<&PullCredentials>,
    ) -> impl Future<Output = Result<String, CriError>> + Send;
    /// PullImage with the pod's context (ImageSpec annotations and the sandbox config). A
    /// runtime that does not look at the context pulls as [`ImageRuntime::pull_image`].
    fn pull_image_for(
        &self,
        spec: &PullSpec,
        credentials: Option<&PullCredentials>,
    ) -> impl Future<Output = Result<String, CriError>> + Send {
        self.pull_image(&spec.image, &spec.runtime_handler, credentials)
    }
    fn remove_image(
        &self,
        image: &str,
        runtime_handler: &str,
    ) -> impl Future<Output = Result<(), CriError>> + Send;
    /// ImageFsInfo plus statvfs of the reported mountpoint (the first image filesystem).
    fn image_fs_stats(&self) -> impl Future<Output = Result<ImageFsStats, CriError>> + Send;
    /// All containers, running and exited (no state filter).
    fn list_containers(
        &self,
    ) -> impl Future<Output = Result<Vec<RuntimeContainer>, CriError>> + Send;
    /// One ContainerStatus: the container's image and its image volumes. A container the
    /// runtime no longer knows is an error with code NotFound. The default (a runtime with no
    /// ContainerStatus of its own, such as a replay's) reports the container with no image
    /// and no image volumes.
    fn container_usage(
        &self,
        container_id: &str,
    ) -> impl Future<Output = Result<ContainerUsage, CriError>> + Send {
        let _ = container_id;
        std::future::ready(Ok(ContainerUsage::default()))
    }
}
