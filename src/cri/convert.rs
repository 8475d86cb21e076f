//! Every conversion between the generated runtime.v1 types (and tonic's status) and imagekeeper's
//! own types lives here, in both directions: the client reads runtime answers with the
//! `*_from_proto` functions, and the fake server builds its answers with the `*_to_proto` ones,
//! so a fake round trip exercises each pair.
//!
//! Invariants: no field is silently reinterpreted (an unknown enum value becomes `Unknown`, a
//! missing optional message becomes the documented default); credentials are copied field by
//! field and the generated `AuthConfig` gets a `Debug` that never prints a secret.

use std::fmt;
use std::io;

use super::container_status::ContainerStatusReport;
#[cfg(any(test, feature = "testing"))]
use super::pod_specs::{ContainerSecurity, ContainerSpec, PodSandboxSummary, SandboxSpec};
use super::proto;
#[cfg(any(test, feature = "testing"))]
use crate::model::PodSandboxConfig;
use crate::model::{
    ContainerEvent, ContainerEventKind, ContainerState, ContainerUsage, ImageFsStats, ImageId,
    PullCredentials, PullSpec, RuntimeContainer, RuntimeImage,
};
use crate::runtime::{CriError, RpcCode, RuntimeVersion};

// ---------------------------------------------------------------- status codes and errors

pub(super) fn rpc_code_from_tonic(code: tonic::Code) -> RpcCode {
    match code {
        tonic::Code::Ok => RpcCode::Ok,
        tonic::Code::Cancelled => RpcCode::Canceled,
        tonic::Code::Unknown => RpcCode::Unknown,
        tonic::Code::InvalidArgument => RpcCode::InvalidArgument,
        tonic::Code::DeadlineExceeded => RpcCode::DeadlineExceeded,
        tonic::Code::NotFound => RpcCode::NotFound,
        tonic::Code::AlreadyExists => RpcCode::AlreadyExists,
        tonic::Code::PermissionDenied => RpcCode::PermissionDenied,
        tonic::Code::ResourceExhausted => RpcCode::ResourceExhausted,
        tonic::Code::FailedPrecondition => RpcCode::FailedPrecondition,
        tonic::Code::Aborted => RpcCode::Aborted,
        tonic::Code::OutOfRange => RpcCode::OutOfRange,
        tonic::Code::Unimplemented => RpcCode::Unimplemented,
        tonic::Code::Internal => RpcCode::Internal,
        tonic::Code::Unavailable => RpcCode::Unavailable,
        tonic::Code::DataLoss => RpcCode::DataLoss,
        tonic::Code::Unauthenticated => RpcCode::Unauthenticated,
    }
}

#[cfg(any(test, feature = "testing"))]
pub(super) fn rpc_code_to_tonic(code: RpcCode) -> tonic::Code {
    match code {
        RpcCode::Ok => tonic::Code::Ok,
        RpcCode::Canceled => tonic::Code::Cancelled,
        RpcCode::Unknown => tonic::Code::Unknown,
        RpcCode::InvalidArgument => tonic::Code::InvalidArgument,
        RpcCode::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        RpcCode::NotFound => tonic::Code::NotFound,
        RpcCode::AlreadyExists => tonic::Code::AlreadyExists,
        RpcCode::PermissionDenied => tonic::Code::PermissionDenied,
        RpcCode::ResourceExhausted => tonic::Code::ResourceExhausted,
        RpcCode::FailedPrecondition => tonic::Code::FailedPrecondition,
        RpcCode::Aborted => tonic::Code::Aborted,
        RpcCode::OutOfRange => tonic::Code::OutOfRange,
        RpcCode::Unimplemented => tonic::Code::Unimplemented,
        RpcCode::Internal => tonic::Code::Internal,
        RpcCode::Unavailable => tonic::Code::Unavailable,
        RpcCode::DataLoss => tonic::Code::DataLoss,
        RpcCode::Unauthenticated => tonic::Code::Unauthenticated,
    }
}

/// A failed call as a [`CriError`]: a dial failure (tonic's `ConnectError` somewhere in the
/// status's source chain) becomes `Connect` with the underlying io error; anything else keeps
/// the runtime's code and message as they are.
pub(super) fn error_from_status(
    method: &'static str,
    endpoint: &str,
    status: tonic::Status,
) -> CriError {
    if let Some(source) = dial_failure(&status) {
        return CriError::Connect {
            endpoint: endpoint.to_string(),
            source,
        };
    }
    if is_broken_connection(&status) {
        // grpc-go reports a connection lost mid-call as Unavailable; tonic says Unknown.
        return CriError::Rpc {
            method,
            code: RpcCode::Unavailable,
            message: format!("{}: {}", status.message(), source_chain(&status)),
        };
    }
    CriError::Rpc {
        method,
        code: rpc_code_from_tonic(status.code()),
        message: status.message().to_string(),
    }
}

/// True when the call failed in the client's transport (the connection broke or was closed)
/// rather than with a status the runtime sent; dial failures are not counted.
pub(super) fn is_broken_connection(status: &tonic::Status) -> bool {
    let mut transport = false;
    let mut next = std::error::Error::source(status);
    while let Some(err) = next {
        if err.downcast_ref::<tonic::ConnectError>().is_some() {
            return false;
        }
        transport |= err.downcast_ref::<tonic::transport::Error>().is_some();
        next = err.source();
    }
    transport
}

/// The messages of an error's sources, joined with ": ".
fn source_chain(status: &tonic::Status) -> String {
    let mut parts = Vec::new();
    let mut next = std::error::Error::source(status);
    while let Some(err) = next {
        parts.push(err.to_string());
        next = err.source();
    }
    parts.join(": ")
}

fn dial_failure(status: &tonic::Status) -> Option<io::Error> {
    let mut next = std::error::Error::source(status);
    let mut in_connect = false;
    let mut message = None;
    while let Some(err) = next {
        if err.downcast_ref::<tonic::ConnectError>().is_some() {
            in_connect = true;
            message.get_or_insert_with(|| err.to_string());
        }
        if in_connect && let Some(io_err) = err.downcast_ref::<io::Error>() {
            return Some(io::Error::new(io_err.kind(), io_err.to_string()));
        }
        next = err.source();
    }
    message.map(io::Error::other)
}

// ---------------------------------------------------------------- images

pub(super) fn image_spec(image: &str, runtime_handler: &str) -> proto::ImageSpec {
    proto::ImageSpec {
        image: image.to_string(),
        runtime_handler: runtime_handler.to_string(),
        ..Default::default()
    }
}

/// A PullImage request as the kubelet builds it: the pod's annotations on the ImageSpec
/// (`toRuntimeAPIImageSpec`), the credentials, and the pod's sandbox config.
pub(super) fn pull_request(
    spec: &PullSpec,
    credentials: Option<&PullCredentials>,
) -> proto::PullImageRequest {
    let mut image = image_spec(&spec.image, &spec.runtime_handler);
    image.annotations = spec
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    proto::PullImageRequest {
        image: Some(image),
        auth: credentials.map(auth_config_from_credentials),
        sandbox_config: spec.sandbox.as_ref().map(|pod| proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                attempt: pod.attempt,
            }),
            labels: pod
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            annotations: pod
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..Default::default()
        }),
    }
}

#[cfg(any(test, feature = "testing"))]
/// What a PullImage request carried (the fake runtime records it).
pub(super) fn pull_spec_from_request(request: &proto::PullImageRequest) -> PullSpec {
    let image = request.image.clone().unwrap_or_default();
    PullSpec {
        image: image.image,
        runtime_handler: image.runtime_handler,
        annotations: image.annotations.into_iter().collect(),
        sandbox: request.sandbox_config.as_ref().map(|c| {
            let metadata = c.metadata.clone().unwrap_or_default();
            PodSandboxConfig {
                name: metadata.name,
                uid: metadata.uid,
                namespace: metadata.namespace,
                attempt: metadata.attempt,
                labels: c.labels.clone().into_iter().collect(),
                annotations: c.annotations.clone().into_iter().collect(),
            }
        }),
    }
}

/// The runtime handler is read from the image's spec; a runtime that predates KEP-4216 sends
/// none, which means the default handler (empty).
pub(super) fn image_from_proto(image: proto::Image) -> RuntimeImage {
    RuntimeImage {
        id: ImageId::new(image.id),
        repo_tags: image.repo_tags,
        repo_digests: image.repo_digests,
        size: image.size,
        pinned: image.pinned,
        runtime_handler: image
            .spec
            .map(|spec| spec.runtime_handler)
            .unwrap_or_default(),
    }
}

#[cfg(any(test, feature = "testing"))]
pub(super) fn image_to_proto(image: &RuntimeImage) -> proto::Image {
    proto::Image {
        id: image.id.as_str().to_string(),
        repo_tags: image.repo_tags.clone(),
        repo_digests: image.repo_digests.clone(),
        size: image.size,
        pinned: image.pinned,
        // containerd's toCRIImage (internal/cri/server/images/image_status.go) sets no
        // spec; one is sent only for an image of a runtime handler, to carry it.
        spec: (!image.runtime_handler.is_empty())
            .then(|| image_spec(image.id.as_str(), &image.runtime_handler)),
        ..Default::default()
    }
}

// ---------------------------------------------------------------- credentials

pub(super) fn auth_config_from_credentials(credentials: &PullCredentials) -> proto::AuthConfig {
    proto::AuthConfig {
        username: credentials.username.clone(),
        password: credentials.password.clone(),
        auth: credentials.auth.clone(),
        server_address: credentials.server_address.clone(),
        identity_token: credentials.identity_token.clone(),
        registry_token: credentials.registry_token.clone(),
    }
}

pub(super) fn credentials_from_auth_config(auth: proto::AuthConfig) -> PullCredentials {
    PullCredentials {
        username: auth.username,
        password: auth.password,
        auth: auth.auth,
        server_address: auth.server_address,
        identity_token: auth.identity_token,
        registry_token: auth.registry_token,
    }
}

/// Secrets shown only as set or empty, by `PullCredentials`' own rule.
impl fmt::Debug for proto::AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        credentials_from_auth_config(self.clone()).fmt_redacted("AuthConfig", f)
    }
}

// ---------------------------------------------------------------- containers

pub(super) fn container_state_from_proto(state: i32) -> ContainerState {
    match proto::ContainerState::try_from(state) {
        Ok(proto::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(proto::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(proto::ContainerState::ContainerExited) => ContainerState::Exited,
        Ok(proto::ContainerState::ContainerUnknown) | Err(_) => ContainerState::Unknown,
    }
}

pub(super) fn container_state_to_proto(state: ContainerState) -> proto::ContainerState {
    match state {
        ContainerState::Created => proto::ContainerState::ContainerCreated,
        ContainerState::Running => proto::ContainerState::ContainerRunning,
        ContainerState::Exited => proto::ContainerState::ContainerExited,
        ContainerState::Unknown => proto::ContainerState::ContainerUnknown,
    }
}

/// The image id a container runs: the CRI `image_id` field when the runtime fills it (newer
/// runtimes, where `image_ref` may be a digest), else `image_ref` (containerd 1.6 puts the
/// image id there).
fn container_image_id(image_id: String, image_ref: String) -> ImageId {
    if image_id.is_empty() {
        ImageId::new(image_ref)
    } else {
        ImageId::new(image_id)
    }
}

pub(super) fn container_from_proto(container: proto::Container) -> RuntimeContainer {
    let spec = container.image.unwrap_or_default();
    RuntimeContainer {
        id: container.id,
        pod_sandbox_id: container.pod_sandbox_id,
        image: spec.image,
        image_id: container_image_id(container.image_id, container.image_ref),
        state: container_state_from_proto(container.state),
        runtime_handler: spec.runtime_handler,
    }
}

pub(super) fn container_to_proto(container: &RuntimeContainer) -> proto::Container {
    proto::Container {
        id: container.id.clone(),
        pod_sandbox_id: container.pod_sandbox_id.clone(),
        image: Some(image_spec(&container.image, &container.runtime_handler)),
        image_ref: container.image_id.as_str().to_string(),
        image_id: container.image_id.as_str().to_string(),
        state: container_state_to_proto(container.state).into(),
        ..Default::default()
    }
}

pub(super) fn container_status_from_proto(status: proto::ContainerStatus) -> ContainerStatusReport {
    let image_volumes = image_volumes_from_mounts(&status.mounts);
    let spec = status.image.unwrap_or_default();
    ContainerStatusReport {
        id: status.id,
        state: container_state_from_proto(status.state),
        image: spec.image,
        image_id: container_image_id(status.image_id, status.image_ref),
        runtime_handler: spec.runtime_handler,
        exit_code: status.exit_code,
        reason: status.reason,
        image_volumes,
    }
}

/// The images of a container's image volumes: each mount with `image` set names its image by
/// `image.image` (the image id the kubelet's PullImage returned) and, from runtimes that
/// report it (KEP-5365), by `image.image_ref` (a digest). Empty names are left out.
fn image_volumes_from_mounts(mounts: &[proto::Mount]) -> Vec<String> {
    let mut names = Vec::new();
    for spec in mounts.iter().filter_map(|m| m.image.as_ref()) {
        for name in [&spec.image, &spec.image_ref] {
            if !name.is_empty() && !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names
}

pub(super) fn container_usage_from_report(report: &ContainerStatusReport) -> ContainerUsage {
    ContainerUsage {
        state: report.state,
        image_id: report.image_id.clone(),
        runtime_handler: report.runtime_handler.clone(),
        image_volumes: report.image_volumes.clone(),
    }
}

#[cfg(any(test, feature = "testing"))]
/// The fake runtime's ContainerStatus answer: the container as listed, plus one read-only
/// image mount per image volume (named by `image.image`).
pub(super) fn container_status_to_proto(
    container: &RuntimeContainer,
    image_volumes: &[String],
) -> proto::ContainerStatus {
    proto::ContainerStatus {
        id: container.id.clone(),
        state: container_state_to_proto(container.state).into(),
        image: Some(image_spec(&container.image, &container.runtime_handler)),
        image_ref: container.image_id.as_str().to_string(),
        image_id: container.image_id.as_str().to_string(),
        mounts: image_volumes
            .iter()
            .enumerate()
            .map(|(n, image)| proto::Mount {
                container_path: format!("/volumes/{n}"),
                readonly: true,
                image: Some(image_spec(image, "")),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------- container events

pub(super) fn container_event_from_proto(event: proto::ContainerEventResponse) -> ContainerEvent {
    use proto::ContainerEventType as T;
    let kind = match T::try_from(event.container_event_type) {
        Ok(T::ContainerCreatedEvent) => ContainerEventKind::Created,
        Ok(T::ContainerStartedEvent) => ContainerEventKind::Started,
        Ok(T::ContainerStoppedEvent) => ContainerEventKind::Stopped,
        Ok(T::ContainerDeletedEvent) => ContainerEventKind::Deleted,
        Err(_) => ContainerEventKind::Unknown,
    };
    ContainerEvent {
        container_id: event.container_id,
        kind,
        created_at: event.created_at,
    }
}

#[cfg(any(test, feature = "testing"))]
pub(super) fn container_event_to_proto(event: &ContainerEvent) -> proto::ContainerEventResponse {
    use proto::ContainerEventType as T;
    let kind = match event.kind {
        ContainerEventKind::Created => T::ContainerCreatedEvent as i32,
        ContainerEventKind::Started => T::ContainerStartedEvent as i32,
        ContainerEventKind::Stopped => T::ContainerStoppedEvent as i32,
        ContainerEventKind::Deleted => T::ContainerDeletedEvent as i32,
        // A value no CRI version defines.
        ContainerEventKind::Unknown => 99,
    };
    proto::ContainerEventResponse {
        container_id: event.container_id.clone(),
        container_event_type: kind,
        created_at: event.created_at,
        containers_statuses: Vec::new(),
    }
}

// ---------------------------------------------------------------- pod sandboxes

#[cfg(any(test, feature = "testing"))]
/// A sandbox config; with `host_network` the pod shares the node's network namespace and has no
/// hostname of its own (a runtime cannot set one without a private UTS namespace).
pub(super) fn sandbox_config(spec: &SandboxSpec) -> proto::PodSandboxConfig {
    let network = if spec.host_network {
        proto::NamespaceMode::Node
    } else {
        proto::NamespaceMode::Pod
    };
    proto::PodSandboxConfig {
        metadata: Some(proto::PodSandboxMetadata {
            name: spec.name.clone(),
            uid: spec.uid.clone(),
            namespace: spec.namespace.clone(),
            attempt: 0,
        }),
        hostname: if spec.host_network {
            String::new()
        } else {
            spec.name.clone()
        },
        log_directory: spec.log_directory.clone(),
        linux: Some(proto::LinuxPodSandboxConfig {
            cgroup_parent: String::new(),
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(proto::NamespaceOption {
                    network: network.into(),
                    pid: proto::NamespaceMode::Container.into(),
                    ipc: proto::NamespaceMode::Pod.into(),
                }),
                run_as_user: spec.run_as_user.map(|value| proto::Int64Value { value }),
                seccomp: spec.seccomp_runtime_default.then(|| seccomp_profile(true)),
            }),
        }),
        ..Default::default()
    }
}

#[cfg(any(test, feature = "testing"))]
/// A container config, with the namespaces of its sandbox as the kubelet sets them
/// (`kuberuntime_container_linux.go` via `namespacesForPod`: network NODE for a host-network
/// pod, else POD; pid CONTAINER; ipc POD).
pub(super) fn container_config(
    spec: &ContainerSpec,
    sandbox: &SandboxSpec,
) -> proto::ContainerConfig {
    proto::ContainerConfig {
        metadata: Some(proto::ContainerMetadata {
            name: spec.name.clone(),
            attempt: 0,
        }),
        image: Some(image_spec(&spec.image, "")),
        command: spec.command.clone(),
        args: spec.args.clone(),
        envs: spec
            .env
            .iter()
            .map(|(key, value)| proto::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        mounts: spec
            .mounts
            .iter()
            .map(|m| proto::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.readonly,
                image: m.image.as_ref().map(|image| image_spec(image, "")),
                ..Default::default()
            })
            .collect(),
        log_path: format!("{}.log", spec.name),
        linux: Some(proto::LinuxContainerConfig {
            resources: Some(proto::LinuxContainerResources {
                cpu_shares: spec.cpu_shares,
                memory_limit_in_bytes: spec.memory_limit_bytes,
            }),
            security_context: Some(container_security(spec.security.as_ref(), sandbox)),
        }),
        ..Default::default()
    }
}

#[cfg(any(test, feature = "testing"))]
fn container_security(
    security: Option<&ContainerSecurity>,
    sandbox: &SandboxSpec,
) -> proto::LinuxContainerSecurityContext {
    let network = if sandbox.host_network {
        proto::NamespaceMode::Node
    } else {
        proto::NamespaceMode::Pod
    };
    let namespace_options = Some(proto::NamespaceOption {
        network: network.into(),
        pid: proto::NamespaceMode::Container.into(),
        ipc: proto::NamespaceMode::Pod.into(),
    });
    let Some(sec) = security else {
        return proto::LinuxContainerSecurityContext {
            namespace_options,
            ..Default::default()
        };
    };
    proto::LinuxContainerSecurityContext {
        capabilities: Some(proto::Capability {
            add_capabilities: sec.add_capabilities.clone(),
            drop_capabilities: sec.drop_capabilities.clone(),
        }),
        privileged: sec.privileged,
        namespace_options,
        run_as_user: sec.run_as_user.map(|value| proto::Int64Value { value }),
        readonly_rootfs: sec.readonly_rootfs,
        no_new_privs: sec.no_new_privs,
        run_as_group: sec.run_as_group.map(|value| proto::Int64Value { value }),
        masked_paths: sec.masked_paths.clone(),
        readonly_paths: sec.readonly_paths.clone(),
        seccomp: Some(seccomp_profile(sec.seccomp_runtime_default)),
    }
}

#[cfg(any(test, feature = "testing"))]
/// RuntimeDefault, or Unconfined (what an unset profile means to the runtime).
fn seccomp_profile(runtime_default: bool) -> proto::SecurityProfile {
    let profile_type = if runtime_default {
        proto::security_profile::ProfileType::RuntimeDefault
    } else {
        proto::security_profile::ProfileType::Unconfined
    };
    proto::SecurityProfile {
        profile_type: profile_type.into(),
        localhost_ref: String::new(),
    }
}

#[cfg(any(test, feature = "testing"))]
pub(super) fn pod_sandbox_from_proto(sandbox: proto::PodSandbox) -> PodSandboxSummary {
    let metadata = sandbox.metadata.unwrap_or_default();
    PodSandboxSummary {
        id: sandbox.id,
        name: metadata.name,
        uid: metadata.uid,
        namespace: metadata.namespace,
        ready: sandbox.state == i32::from(proto::PodSandboxState::SandboxReady),
    }
}

// ---------------------------------------------------------------- version and image filesystem

pub(super) fn version_from_proto(version: proto::VersionResponse) -> RuntimeVersion {
    RuntimeVersion {
        version: version.version,
        runtime_name: version.runtime_name,
        runtime_version: version.runtime_version,
        runtime_api_version: version.runtime_api_version,
    }
}

#[cfg(any(test, feature = "testing"))]
pub(super) fn version_to_proto(version: &RuntimeVersion) -> proto::VersionResponse {
    proto::VersionResponse {
        version: version.version.clone(),
        runtime_name: version.runtime_name.clone(),
        runtime_version: version.runtime_version.clone(),
        runtime_api_version: version.runtime_api_version.clone(),
    }
}

/// What ImageFsInfo says about the image filesystems: the first one's mountpoint and the
/// bytes and inodes images use there, and the mountpoints of the others and of the container
/// filesystems (KEP-4191). Capacity, available and the inode counts are left at 0 for the
/// caller to fill from statvfs.
pub(super) fn image_fs_from_proto(
    info: proto::ImageFsInfoResponse,
) -> Result<ImageFsStats, CriError> {
    let mountpoint = |fs: &proto::FilesystemUsage| {
        fs.fs_id
            .as_ref()
            .map(|id| id.mountpoint.clone())
            .unwrap_or_default()
    };
    let mut images = info.image_filesystems.into_iter();
    let first = images.next().ok_or(CriError::NoImageFilesystem)?;
    let mut stats = ImageFsStats::new(
        mountpoint(&first),
        first.used_bytes.map(|used| used.value).unwrap_or(0),
        0,
        0,
    );
    stats.inodes_used = first.inodes_used.map(|used| used.value);
    let others = images
        .map(|fs| {
            let mut other = ImageFsStats::new(
                mountpoint(&fs),
                fs.used_bytes.map(|used| used.value).unwrap_or(0),
                0,
                0,
            );
            other.inodes_used = fs.inodes_used.map(|used| used.value);
            other
        })
        .collect();
    let mut stats = stats.with_other_image_fs(others);
    stats.container_filesystems = info.container_filesystems.iter().map(mountpoint).collect();
    Ok(stats)
}

#[cfg(any(test, feature = "testing"))]
pub(super) fn image_fs_to_proto(
    stats: &ImageFsStats,
    timestamp: i64,
) -> proto::ImageFsInfoResponse {
    let usage =
        |mountpoint: &str, used_bytes: u64, inodes_used: Option<u64>| proto::FilesystemUsage {
            timestamp,
            fs_id: Some(proto::FilesystemIdentifier {
                mountpoint: mountpoint.to_string(),
            }),
            used_bytes: Some(proto::UInt64Value { value: used_bytes }),
            inodes_used: inodes_used.map(|value| proto::UInt64Value { value }),
        };
    let mut image_filesystems = vec![usage(
        &stats.mountpoint,
        stats.used_bytes,
        stats.inodes_used,
    )];
    // The further image filesystems' readings when given, else their mountpoints alone.
    if stats.other_image_fs.is_empty() {
        image_filesystems.extend(
            stats
                .other_image_filesystems
                .iter()
                .map(|m| usage(m, 0, None)),
        );
    } else {
        image_filesystems.extend(
            stats
                .other_image_fs
                .iter()
                .map(|fs| usage(&fs.mountpoint, fs.used_bytes, fs.inodes_used)),
        );
    }
    proto::ImageFsInfoResponse {
        image_filesystems,
        container_filesystems: stats
            .container_filesystems
            .iter()
            .map(|m| usage(m, 0, None))
            .collect(),
    }
}

#[cfg(test)]
mod tests;
