//! The pod and container lifecycle calls of [`CriClient`] (their specs are `pod_specs.rs`),
//! tests and the `testing` feature: imagekeeper itself never runs a pod or a container, so
//! the shipped agent has none of these calls. Each call goes through the client's
//! `runtime_rpc` (deadline, one retry on a broken connection, error mapping) like every other.

use std::time::Duration;

use super::{CriClient, CriError, convert, proto};

use crate::cri::pod_specs::{ContainerSpec, ExecResult, PodSandboxSummary, SandboxSpec};

/// The pod and container lifecycle calls: only tests run pods (feature `testing`).
#[cfg(any(test, feature = "testing"))]
impl CriClient {
    /// Runs a pod sandbox; returns its id.
    pub async fn run_pod_sandbox(&self, spec: &SandboxSpec) -> Result<String, CriError> {
        let request = proto::RunPodSandboxRequest {
            config: Some(convert::sandbox_config(spec)),
            runtime_handler: String::new(),
        };
        let response = self
            .runtime_rpc(
                "RunPodSandbox",
                Some(self.call_timeout),
                request,
                |mut client, r| async move { client.run_pod_sandbox(r).await },
            )
            .await?;
        Ok(response.pod_sandbox_id)
    }

    /// Stops a pod sandbox and its containers.
    pub async fn stop_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = proto::StopPodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        self.runtime_rpc(
            "StopPodSandbox",
            Some(self.call_timeout),
            request,
            |mut client, r| async move { client.stop_pod_sandbox(r).await },
        )
        .await?;
        Ok(())
    }

    /// Removes a pod sandbox and its containers.
    pub async fn remove_pod_sandbox(&self, pod_sandbox_id: &str) -> Result<(), CriError> {
        let request = proto::RemovePodSandboxRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        };
        self.runtime_rpc(
            "RemovePodSandbox",
            Some(self.call_timeout),
            request,
            |mut client, r| async move { client.remove_pod_sandbox(r).await },
        )
        .await?;
        Ok(())
    }

    /// Every pod sandbox, ready or not.
    pub async fn list_pod_sandbox(&self) -> Result<Vec<PodSandboxSummary>, CriError> {
        let request = proto::ListPodSandboxRequest { filter: None };
        let response = self
            .runtime_rpc(
                "ListPodSandbox",
                Some(self.call_timeout),
                request,
                |mut client, r| async move { client.list_pod_sandbox(r).await },
            )
            .await?;
        Ok(response
            .items
            .into_iter()
            .map(convert::pod_sandbox_from_proto)
            .collect())
    }

    /// Creates a container in a sandbox that was run with `sandbox`; returns its id.
    pub async fn create_container(
        &self,
        pod_sandbox_id: &str,
        sandbox: &SandboxSpec,
        container: &ContainerSpec,
    ) -> Result<String, CriError> {
        let request = proto::CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            config: Some(convert::container_config(container, sandbox)),
            sandbox_config: Some(convert::sandbox_config(sandbox)),
        };
        let response = self
            .runtime_rpc(
                "CreateContainer",
                Some(self.call_timeout),
                request,
                |mut client, r| async move { client.create_container(r).await },
            )
            .await?;
        Ok(response.container_id)
    }

    /// Starts a created container.
    pub async fn start_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = proto::StartContainerRequest {
            container_id: container_id.to_string(),
        };
        self.runtime_rpc(
            "StartContainer",
            Some(self.call_timeout),
            request,
            |mut client, r| async move { client.start_container(r).await },
        )
        .await?;
        Ok(())
    }

    /// Stops a container, killing it after `grace` (whole seconds).
    pub async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), CriError> {
        let request = proto::StopContainerRequest {
            container_id: container_id.to_string(),
            timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
        };
        // The runtime may use the whole grace period before it answers.
        let deadline = self.call_timeout.saturating_add(grace);
        self.runtime_rpc(
            "StopContainer",
            Some(deadline),
            request,
            |mut client, r| async move { client.stop_container(r).await },
        )
        .await?;
        Ok(())
    }

    /// Runs `cmd` in a running container and waits for it (`timeout` whole seconds, 0 none).
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, CriError> {
        let request = proto::ExecSyncRequest {
            container_id: container_id.to_string(),
            cmd: cmd.to_vec(),
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        let deadline = self.call_timeout.saturating_add(timeout);
        let response = self
            .runtime_rpc(
                "ExecSync",
                Some(deadline),
                request,
                |mut client, r| async move { client.exec_sync(r).await },
            )
            .await?;
        Ok(ExecResult {
            exit_code: response.exit_code,
            stdout: response.stdout,
            stderr: response.stderr,
        })
    }

    /// Removes a container (a running one by force, as CRI says).
    pub async fn remove_container(&self, container_id: &str) -> Result<(), CriError> {
        let request = proto::RemoveContainerRequest {
            container_id: container_id.to_string(),
        };
        self.runtime_rpc(
            "RemoveContainer",
            Some(self.call_timeout),
            request,
            |mut client, r| async move { client.remove_container(r).await },
        )
        .await?;
        Ok(())
    }
}
