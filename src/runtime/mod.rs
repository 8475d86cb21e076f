//! What imagekeeper needs of a container runtime, as traits and plain types: the CRI image
//! calls ([`ImageRuntime`]), the agent's runtime ([`AgentRuntime`]: those plus a container
//! event stream, [`EventStream`], and the runtime's [`RuntimeVersion`]), and the error every
//! runtime call returns ([`CriError`], with [`RpcCode`], our mirror of the gRPC status codes),
//! and whether a runtime's version lists labelled images as pinned ([`runtime_carries_pins`],
//! which the agent's runtime pins and the doctor both read), with containerd's image names and
//! their labels as the runtime pins read them ([`LabelledImage`]).
//!
//! Invariants: this is a leaf below everything that talks to a runtime: it imports only
//! `model`, never tonic, prost or the generated runtime.v1 code (the tonic client that
//! implements these traits is `cri`, above it). [`ScriptedRuntime`] implements them in memory
//! (images, containers and filesystems as a script sets them), for the replay, tests and
//! embedders that have no runtime socket. An image the runtime does not have is `Ok(None)`,
//! not an error. A test wrapper around a runtime gets its `ImageRuntime` impl from
//! [`forward_image_runtime!`](crate::forward_image_runtime) (`forward`, feature `testing`).

use std::future::Future;

use crate::model::{
    ContainerUsage, ImageFsStats, ImageList, PullCredentials, PullSpec, RuntimeContainer,
    RuntimeImage,
};

mod agent_runtime;
mod error;
#[cfg(any(test, feature = "testing"))]
pub mod forward;
mod scripted;

pub use agent_runtime::{
    AgentRuntime, EventStream, FIRST_PINNING_CONTAINERD, LabelledImage, NoEvents, RuntimeVersion,
    runtime_carries_pins,
};
pub use error::{CriError, RpcCode};
pub use scripted::{ScriptState, ScriptedRuntime};

/// What imagekeeper needs from a container runtime's image service (and ListContainers, to know
/// which images are in use).
pub trait ImageRuntime: Send + Sync {
    /// ListImages: every image the runtime holds.
    fn list_images(&self) -> impl Future<Output = Result<Vec<RuntimeImage>, CriError>> + Send;
    /// ListImages as the list detect holds ([`ImageList`]): the CRI client keeps the
    /// response's bytes and reads the images out of them; by default, the images
    /// [`ImageRuntime::list_images`] returns. A runtime that wraps another forwards it.
    fn list_image_list(&self) -> impl Future<Output = Result<ImageList, CriError>> + Send {
        async { self.list_images().await.map(ImageList::from) }
    }
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
    /// RemoveImage of `image` (an id or a name) for `runtime_handler`; removing an image the runtime does not have is not an error.
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
    /// The sandbox (pause) image the runtime itself uses, if it says: containerd answers it in
    /// the verbose CRI Status (the CRI client reads it with
    /// `cri::sandbox_image_of_status_info`). The default (a runtime
    /// that does not say, such as a replay's) is `None`.
    fn sandbox_image(&self) -> impl Future<Output = Result<Option<String>, CriError>> + Send {
        std::future::ready(Ok(None))
    }
}
