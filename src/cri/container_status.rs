//! What ContainerStatus answers, as the client returns it and `convert` builds it: a type of
//! its own file so that the conversions and the client both sit above it.

use crate::model::{ContainerState, ImageId};

/// One container as ContainerStatus reports it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerStatusReport {
    /// The container's id.
    pub id: String,
    /// Created, running, exited or unknown.
    pub state: ContainerState,
    /// The image as the container's spec names it.
    pub image: String,
    /// The image's id (CRI `image_id`, else `image_ref` from older runtimes).
    pub image_id: ImageId,
    /// The runtime handler of the container's ImageSpec; empty for the default.
    pub runtime_handler: String,
    /// The exit code, once exited.
    pub exit_code: i32,
    /// Why the container is in its state (`Completed`, `Error`, ...), as the runtime says.
    pub reason: String,
    /// The images of the container's image volumes (see [`crate::model::ContainerUsage`]).
    pub image_volumes: Vec<String>,
}
