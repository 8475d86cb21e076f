//! What the agent needs of its container runtime: the CRI image calls ([`ImageRuntime`]) and a
//! container event stream ([`AgentRuntime::container_events`]). The real one is
//! [`CriClient`]; the replay's [`ScriptedRuntime`] serves in-process tests of the whole agent
//! (no socket, so tokio's paused time drives every loop), and answers the event stream as
//! containerd 1.6 does (Unimplemented: the watcher ends and detect alone applies).

use std::future::Future;

use crate::cri::{
    ContainerEventStream, CriClient, CriError, ImageRuntime, RpcCode, RuntimeVersion,
};
use crate::model::ContainerEvent;
use crate::replay::ScriptedRuntime;

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

impl AgentRuntime for CriClient {
    type Events = ContainerEventStream;

    async fn container_events(&self) -> Result<ContainerEventStream, CriError> {
        CriClient::container_events(self).await
    }

    async fn runtime_version(&self) -> Result<RuntimeVersion, CriError> {
        CriClient::version(self).await
    }
}

impl EventStream for ContainerEventStream {
    async fn next(&mut self) -> Option<Result<ContainerEvent, CriError>> {
        ContainerEventStream::next(self).await
    }
}

/// A runtime with no event stream: opening one fails as Unimplemented.
#[derive(Debug)]
pub enum NoEvents {}

impl EventStream for NoEvents {
    async fn next(&mut self) -> Option<Result<ContainerEvent, CriError>> {
        match *self {}
    }
}

impl AgentRuntime for ScriptedRuntime {
    type Events = NoEvents;

    async fn container_events(&self) -> Result<NoEvents, CriError> {
        Err(CriError::Rpc {
            method: "GetContainerEvents",
            code: RpcCode::Unimplemented,
            message: "method GetContainerEvents not implemented".to_owned(),
        })
    }
}
