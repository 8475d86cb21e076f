//! The CRI layer: everything imagekeeper says to the container runtime goes through here. It
//! owns the runtime.v1 protocol (the generated code from `proto/runtime/v1/api.proto`), the
//! tonic client over unix sockets ([`CriClient`], which implements `crate::runtime`'s
//! [`ImageRuntime`] and `AgentRuntime`), the conversions to and from the model types
//! (`convert`, the only place they happen), statvfs of the image filesystem, and an in-process
//! fake runtime for tests (`FakeRuntime`, a tonic server, only with cfg(test) or the `testing`
//! feature). Beside the CRI it talks containerd's own API on the same socket: its Images service
//! for the runtime pins (`containerd_images`), and the read-only calls `inspect disk` makes of
//! every namespace ([`ContainerdView`]: the calls in `containerd_view.rs`, the generated code in
//! `containerd_proto.rs`, every conversion to the model in `containerd_convert.rs`), and the
//! removals `prune --orphans` makes of containerd's leftovers ([`ContainerdPruner`]: snapshots,
//! blobs, and a synchronous garbage collection).
//!
//! Invariants: this and `admin` are the only modules that import tonic, and this is the only one
//! that imports prost or the runtime.v1 generated code; other layers see `crate::runtime`'s
//! traits and types (re-exported here too) and model types. An image the runtime does not have
//! is `Ok(None)`, not an error. Every call has a deadline. Pull credentials pass through to the
//! runtime and are never logged. The submodules are private: what other layers and crates may
//! use is the list of re-exports below.

mod agent_runtime;
mod client;
mod container_status;
mod containerd_convert;
mod containerd_images;
mod containerd_proto;
mod containerd_prune;
mod containerd_view;
mod containers_decode;
mod convert;
#[cfg(test)]
mod decode_test_support;
#[cfg(any(test, feature = "testing"))]
mod fake;
mod list_decode;
#[cfg(any(test, feature = "testing"))]
mod pod_specs;
mod statvfs;

pub use crate::runtime::LabelledImage;
/// The runtime traits and their plain types, which live in `crate::runtime` (no tonic there).
pub use crate::runtime::{CriError, ImageRuntime, RpcCode, RuntimeVersion};
pub use client::{
    ContainerEventStream, CriClient, CriConfig, DEFAULT_RUNTIME_ENDPOINT, socket_path,
};
pub use container_status::ContainerStatusReport;
// The limits page (a unit test) states it.
#[cfg(test)]
pub(crate) use client::MAX_MESSAGE_BYTES;
/// The pod and container specs of the lifecycle calls only tests make.
#[cfg(any(test, feature = "testing"))]
pub use client::{
    ContainerSecurity, ContainerSpec, ExecResult, MountSpec, PodSandboxSummary, SandboxSpec,
};
pub use containerd_images::{CONTAINERD_CRI_NAMESPACE, ContainerdImages};
pub use containerd_prune::ContainerdPruner;
pub use containerd_view::{ContainerdView, filesystem_usage};
/// The in-process fake runtime (feature `testing`).
#[cfg(any(test, feature = "testing"))]
pub use fake::{FakePull, FakeRuntime};

/// The code generated from `proto/runtime/v1/api.proto` (package `runtime.v1`).
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
mod proto {
    tonic::include_proto!("runtime.v1");
}

/// The sandbox image in a verbose CRI Status `info` map: the JSON under `config` (containerd's
/// CRI plugin config), field `sandboxImage` (containerd 1.x, `sandbox_image` in its TOML) or
/// `pinnedImages.sandbox` (containerd 2.x, `pinned_images.sandbox`). `None` when the runtime
/// says neither or the JSON does not parse: the caller falls back to the configured
/// `--pod-infra-container-image`.
pub(crate) fn sandbox_image_of_status_info<'a>(
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
