//! The CRI client as the agent's runtime: [`AgentRuntime`] for [`CriClient`] (its
//! GetContainerEvents stream and Version) and [`EventStream`] for [`ContainerEventStream`].
//!
//! Invariants: each method forwards to the client's own call unchanged.

use super::client::{ContainerEventStream, CriClient};
use crate::model::ContainerEvent;
use crate::runtime::{AgentRuntime, CriError, EventStream, RuntimeVersion};

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
