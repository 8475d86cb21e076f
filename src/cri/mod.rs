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
    ContainerUsage, ImageFsStats, ImageList, PullCredentials, PullSpec, RuntimeContainer,
    RuntimeImage,
};

mod client;
mod containerd_images;
mod containers_decode;
mod convert;
#[cfg(test)]
mod decode_test_support;
mod error;
#[cfg(any(test, feature = "testing"))]
mod fake;
mod list_decode;
mod statvfs;

pub use client::{
    ContainerEventStream, ContainerStatusReport, CriClient, CriConfig, DEFAULT_RUNTIME_ENDPOINT,
    MAX_MESSAGE_BYTES, RuntimeVersion, socket_path,
};
/// The pod and container specs of the lifecycle calls only tests make.
#[cfg(any(test, feature = "testing"))]
pub use client::{
    ContainerSecurity, ContainerSpec, ExecResult, MountSpec, PodSandboxSummary, SandboxSpec,
};
pub use containerd_images::{CONTAINERD_CRI_NAMESPACE, ContainerdImages, LabelledImage};
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
    /// the verbose CRI Status (see [`sandbox_image_of_status_info`]). The default (a runtime
    /// that does not say, such as a replay's) is `None`.
    fn sandbox_image(&self) -> impl Future<Output = Result<Option<String>, CriError>> + Send {
        std::future::ready(Ok(None))
    }
}

/// The sandbox image in a verbose CRI Status `info` map: the JSON under `config` (containerd's
/// CRI plugin config), field `sandboxImage` (containerd 1.x, `sandbox_image` in its TOML) or
/// `pinnedImages.sandbox` (containerd 2.x, `pinned_images.sandbox`). `None` when the runtime
/// says neither or the JSON does not parse: the caller falls back to the configured
/// `--pod-infra-container-image`.
pub fn sandbox_image_of_status_info<'a>(
    info: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<String> {
    let (_, config) = info.into_iter().find(|(k, _)| *k == "config")?;
    let config: serde_json::Value = serde_json::from_str(config).ok()?;
    let direct = config.get("sandboxImage").and_then(|v| v.as_str());
    let pinned = config
        .get("pinnedImages")
        .and_then(|p| p.get("sandbox"))
        .and_then(|v| v.as_str());
    direct
        .or(pinned)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod status_tests {
    use super::sandbox_image_of_status_info;

    #[test]
    fn the_sandbox_image_is_read_from_containerd_1_and_2_status_configs() {
        let v1 = r#"{"sandboxImage":"registry.k8s.io/pause:3.6","enableSelinux":false}"#;
        assert_eq!(
            sandbox_image_of_status_info([("config", v1)]).as_deref(),
            Some("registry.k8s.io/pause:3.6")
        );
        let v2 = r#"{"pinnedImages":{"sandbox":"registry.k8s.io/pause:3.10"}}"#;
        assert_eq!(
            sandbox_image_of_status_info([("golang", "go1.22"), ("config", v2)]).as_deref(),
            Some("registry.k8s.io/pause:3.10")
        );
        for (info, why) in [
            (vec![], "no config"),
            (vec![("config", "{not json")], "bad JSON"),
            (vec![("config", r#"{"sandboxImage":""}"#)], "empty"),
            (vec![("config", r#"{"sandboxImage":3}"#)], "not a string"),
        ] {
            assert_eq!(sandbox_image_of_status_info(info), None, "{why}");
        }
    }
}
