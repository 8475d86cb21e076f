//! What the agent needs of its container runtime: the CRI image calls ([`ImageRuntime`]) and a
//! container event stream ([`AgentRuntime::container_events`]). The real one is the CRI
//! client (`cri::CriClient`, which implements it in `cri`); the replay's scripted runtime
//! (`replay::ScriptedRuntime`, which implements it in `replay`) serves in-process tests of the
//! whole agent (no socket, so tokio's paused time drives every loop), and answers the event
//! stream as containerd 1.6 does (Unimplemented: the watcher ends and detect alone applies).

use std::collections::BTreeMap;
use std::future::Future;

use super::{CriError, ImageRuntime, RpcCode};
use crate::model::ContainerEvent;

/// Name and version of the runtime (RuntimeService.Version).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RuntimeVersion {
    /// VersionResponse.version: the kubelet runtime API version the runtime reports.
    pub version: String,
    /// The runtime's name (e.g. `containerd`).
    pub runtime_name: String,
    /// The runtime's own version.
    pub runtime_version: String,
    /// The CRI API version the runtime speaks (e.g. `v1`).
    pub runtime_api_version: String,
}

/// One image name in containerd's image store, with its labels and the content it names.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LabelledImage {
    /// The name, as containerd stores it (a CRI pull stores two: the tag and
    /// `repo@sha256:<manifest digest>`).
    pub name: String,
    /// Its labels (`io.cri-containerd.pinned=pinned` makes containerd 1.7.10 and later list it
    /// as pinned, whenever the label is set).
    pub labels: BTreeMap<String, String>,
    /// The target descriptor's media type, sent back unchanged with an Update (containerd's
    /// service converts the target whatever the mask says), as are its digest and size.
    pub target_media_type: String,
    /// The target descriptor's digest.
    pub target_digest: String,
    /// The target descriptor's size in bytes.
    pub target_size: i64,
}

/// The first containerd release the runtime pins trust: its CRI lists an image as pinned
/// whenever one of its names carries the pinned label, including a label added to or removed
/// from an image already present. containerd 1.7.3 to 1.7.9 set the CRI's `pinned` flag only
/// from the labels an image had when the CRI first saw it (at a pull or a containerd start):
/// containerd issue 9328, fixed on main by PR 9338 and in 1.7 by PR 9381, released in 1.7.10.
/// The 1.6 branch has pinned images too (PR 8720, in 1.6.22) and the same fix (PR 9382,
/// merged November 2023); imagekeeper does not turn pins on for 1.6, whose release carrying
/// that fix it has not checked.
pub const FIRST_PINNING_CONTAINERD: (u64, u64, u64) = (1, 7, 10);

/// Whether a runtime (CRI Version's name and version) lists labelled images as pinned as
/// soon as they are labelled: containerd 1.7.10 and later. `Err` says why not.
pub fn runtime_carries_pins(version: &RuntimeVersion) -> Result<(), String> {
    let name = version.runtime_name.as_str();
    if name != "containerd" {
        return Err(format!(
            "the runtime is {name:?}, not containerd (CRI-O's pinned_images is not built)"
        ));
    }
    let text = version.runtime_version.trim_start_matches('v');
    let mut parts = text
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse::<u64>().ok());
    let parsed = (
        parts.next().flatten(),
        parts.next().flatten(),
        parts.next().flatten(),
    );
    match parsed {
        (Some(major), Some(minor), Some(patch))
            if (major, minor, patch) >= FIRST_PINNING_CONTAINERD =>
        {
            Ok(())
        }
        (Some(_), Some(_), Some(_)) => Err(format!(
            "containerd {} does not carry a label added to an image already present into CRI ListImages' pinned flag (1.7.10 and later do: containerd issue 9328)",
            version.runtime_version
        )),
        _ => Err(format!(
            "containerd's version {:?} is not major.minor.patch",
            version.runtime_version
        )),
    }
}

/// A runtime the agent can run against.
pub trait AgentRuntime: ImageRuntime + Clone + Send + Sync + 'static {
    /// The stream [`AgentRuntime::container_events`] opens.
    type Events: EventStream;

    /// Opens the CRI GetContainerEvents stream.
    fn container_events(&self) -> impl Future<Output = Result<Self::Events, CriError>> + Send;

    /// CRI Version (the runtime pins' `auto` reads the runtime's name and version); by
    /// default Unimplemented, so `auto` turns itself off.
    fn runtime_version(&self) -> impl Future<Output = Result<RuntimeVersion, CriError>> + Send {
        async {
            Err(CriError::Rpc {
                method: "Version",
                code: RpcCode::Unimplemented,
                message: "this runtime does not say its version".to_owned(),
            })
        }
    }
}

/// A stream of container events.
pub trait EventStream: Send {
    /// The next event; `None` when the runtime ended the stream, an error when it broke.
    fn next(&mut self) -> impl Future<Output = Option<Result<ContainerEvent, CriError>>> + Send;
}

/// A runtime with no event stream: opening one fails as Unimplemented.
#[derive(Debug)]
pub enum NoEvents {}

impl EventStream for NoEvents {
    async fn next(&mut self) -> Option<Result<ContainerEvent, CriError>> {
        match *self {}
    }
}
