//! The specs and answers of the pod and container lifecycle calls only tests make
//! (`client/pods.rs`; feature `testing`): a type of their own file, below both the client and
//! `convert.rs`, which turns them into the runtime.v1 messages.

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
