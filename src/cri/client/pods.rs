//! The pod and container lifecycle calls of [`CriClient`] and their specs, compiled only for
//! tests and the `testing` feature: imagekeeper itself never runs a pod or a container, so
//! the shipped agent has none of these calls. Each call goes through the client's
//! `runtime_rpc` (deadline, one retry on a broken connection, error mapping) like every other.

use std::time::Duration;

use super::{CriClient, CriError, convert, proto};

#[cfg(any(test, feature = "testing"))]
/// A pod sandbox to run (tests and tools only: imagekeeper itself never runs pods).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxSpec {
    /// The pod's name (the sandbox metadata's `name`).
    pub name: String,
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// Absolute directory for the containers' logs.
    pub log_directory: String,
    /// Share the node's network namespace (and have no hostname).
    pub host_network: bool,
    /// The pod's `securityContext.runAsUser`.
    pub run_as_user: Option<i64>,
    /// The pod's seccomp profile is RuntimeDefault (else unconfined, CRI's default).
    pub seccomp_runtime_default: bool,
}

#[cfg(any(test, feature = "testing"))]
/// A container to create in a sandbox; its log goes to `<log_directory>/<name>.log`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The container's name (also its log file's name).
    pub name: String,
    /// The image reference to run; the runtime must already hold it.
    pub image: String,
    /// The entrypoint; empty: the image's.
    pub command: Vec<String>,
    /// The entrypoint's arguments; empty: the image's.
    pub args: Vec<String>,
    /// Environment variables, in order.
    pub env: Vec<(String, String)>,
    /// Bind mounts and image volumes.
    pub mounts: Vec<MountSpec>,
    /// The container's Linux security context; None leaves everything to the runtime.
    pub security: Option<ContainerSecurity>,
    /// Memory limit in bytes; 0 is none.
    pub memory_limit_bytes: i64,
    /// CPU shares (the kubelet's conversion of the CPU request); 0 is the runtime's default.
    pub cpu_shares: i64,
}

#[cfg(any(test, feature = "testing"))]
/// A mount into a container: a bind mount of `host_path`, or with `image` set an image volume
/// (CRI Mount field 9 `image`, an ImageSpec naming the image, as the kubelet sends the image
/// id its PullImage returned; `host_path` is then empty, and containerd 2.1 refuses it unless
/// `readonly`: "readonly must be true while mount image").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountSpec {
    /// Where it appears in the container.
    pub container_path: String,
    /// The node's path bind-mounted; empty for an image volume.
    pub host_path: String,
    /// Mounted read-only.
    pub readonly: bool,
    /// The image mounted as a volume; `None` for a bind mount.
    pub image: Option<String>,
}

#[cfg(any(test, feature = "testing"))]
/// The parts of a container's Linux security context the kubelet sets from a pod spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSecurity {
    /// `runAsUser`; `None`: the image's user.
    pub run_as_user: Option<i64>,
    /// `runAsGroup`; `None`: the image's group.
    pub run_as_group: Option<i64>,
    /// `privileged: true`.
    pub privileged: bool,
    /// `readOnlyRootFilesystem: true`.
    pub readonly_rootfs: bool,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privs: bool,
    /// Capabilities to drop, as the kubelet passes them (`ALL`, or names without `CAP_`).
    pub drop_capabilities: Vec<String>,
    /// Capabilities to add, named likewise.
    pub add_capabilities: Vec<String>,
    /// The seccomp profile is RuntimeDefault (else unconfined).
    pub seccomp_runtime_default: bool,
    /// Paths masked and made read-only (the kubelet's defaults for a non-privileged
    /// container with the default procMount).
    pub masked_paths: Vec<String>,
    /// Paths made read-only (likewise the kubelet's defaults).
    pub readonly_paths: Vec<String>,
}

#[cfg(any(test, feature = "testing"))]
/// What ExecSync returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecResult {
    /// The command's exit code.
    pub exit_code: i32,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
}

#[cfg(any(test, feature = "testing"))]
/// One pod sandbox as ListPodSandbox reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSandboxSummary {
    /// The sandbox's id.
    pub id: String,
    /// The pod's name.
    pub name: String,
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The sandbox is ready (not stopped).
    pub ready: bool,
}

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
