//! `deploy/daemonset.yaml` read as the kubelet would read it, turned into the CRI calls that run
//! its pod ([`PodPlan`]), and checked for drift: the manifest is parsed into a typed subset of
//! the Pod API with unknown fields refused, so a field this test does not know how to run (and
//! therefore has not proved) fails it; the parts that make the agent work in a pod (the image
//! filesystem at its own path, read-only; the runtime socket's directory, not the file; /tmp
//! writable under a read-only root; HTTP probes on the named metrics port; RuntimeDefault
//! seccomp; NODE_NAME and HOST_IP from the downward API) are asserted. `lab.rs` runs the plan
//! against the lab's containerd.

mod chart;
mod lab;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use imagekeeper::telemetry::HttpLimits;
use serde::Deserialize;

pub const MANIFEST: &str = "deploy/daemonset.yaml";

/// The runtime's root on a node, whose paths ImageFsInfo reports as the host sees them.
pub const RUNTIME_ROOT: &str = "/var/lib/containerd";

pub fn manifest_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(MANIFEST);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------- the typed subset

// Some fields are parsed only so that the manifest is refused when they change shape.
#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DaemonSet {
    api_version: String,
    kind: String,
    metadata: serde_yaml_ng::Value,
    spec: DaemonSetSpec,
}

// Some fields are parsed only so that the manifest is refused when they change shape.
#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DaemonSetSpec {
    selector: serde_yaml_ng::Value,
    update_strategy: serde_yaml_ng::Value,
    template: PodTemplate,
}

// Some fields are parsed only so that the manifest is refused when they change shape.
#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodTemplate {
    metadata: serde_yaml_ng::Value,
    spec: PodSpec,
}

// Some fields are parsed only so that the manifest is refused when they change shape.
#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodSpec {
    priority_class_name: String,
    termination_grace_period_seconds: u64,
    tolerations: serde_yaml_ng::Value,
    #[serde(default)]
    host_network: bool,
    dns_policy: Option<String>,
    security_context: Option<PodSecurityContext>,
    /// The API server's: its token is what the Node Events and the cluster signals use; with
    /// none here (no API server), the agent runs on the node's own knowledge.
    service_account_name: Option<String>,
    containers: Vec<Container>,
    volumes: Vec<Volume>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodSecurityContext {
    seccomp_profile: Option<SeccompProfile>,
    run_as_user: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeccompProfile {
    #[serde(rename = "type")]
    profile_type: String,
}

// Some fields are parsed only so that the manifest is refused when they change shape.
#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Container {
    name: String,
    image: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    #[serde(default)]
    ports: Vec<ContainerPort>,
    resources: Resources,
    security_context: ContainerSecurityContext,
    startup_probe: Option<Probe>,
    liveness_probe: Option<Probe>,
    readiness_probe: Option<Probe>,
    volume_mounts: Vec<VolumeMount>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EnvVar {
    name: String,
    value: Option<String>,
    value_from: Option<EnvVarSource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EnvVarSource {
    field_ref: FieldRef,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FieldRef {
    field_path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ContainerPort {
    name: String,
    container_port: u16,
    protocol: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resources {
    requests: BTreeMap<String, String>,
    limits: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ContainerSecurityContext {
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    #[serde(default)]
    privileged: bool,
    allow_privilege_escalation: Option<bool>,
    #[serde(default)]
    read_only_root_filesystem: bool,
    capabilities: Option<Capabilities>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Capabilities {
    #[serde(default)]
    add: Vec<String>,
    #[serde(default)]
    drop: Vec<String>,
}

// Some fields are parsed only so that the manifest is refused when they change shape.
#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Probe {
    http_get: HttpGet,
    period_seconds: Option<u32>,
    timeout_seconds: Option<u32>,
    failure_threshold: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpGet {
    /// The address the kubelet connects to (default: the pod's IP, the node's with host
    /// networking).
    host: Option<String>,
    path: String,
    port: serde_yaml_ng::Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VolumeMount {
    name: String,
    mount_path: String,
    #[serde(default)]
    read_only: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Volume {
    name: String,
    host_path: Option<HostPathSource>,
    config_map: Option<ConfigMapSource>,
    empty_dir: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostPathSource {
    path: String,
    #[serde(rename = "type")]
    path_type: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigMapSource {
    name: String,
}

// ---------------------------------------------------------------- the plan

/// Where the lab puts what a node has at a path (the kubelet's hostPath volumes).
#[derive(Clone, Debug)]
pub struct NodePaths {
    /// hostPath on a node -> the lab's directory for it.
    pub host_paths: BTreeMap<String, PathBuf>,
    /// Where each emptyDir and configMap volume lives (by volume name).
    pub scratch: PathBuf,
    pub node_name: String,
    pub host_ip: String,
}

/// One bind mount of the pod's container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedMount {
    pub volume: String,
    pub container_path: String,
    pub host_path: PathBuf,
    pub readonly: bool,
}

/// What the kubelet would send through CRI for the DaemonSet's pod.
#[derive(Clone, Debug)]
pub struct PodPlan {
    pub host_network: bool,
    pub seccomp_runtime_default: bool,
    pub termination_grace_seconds: u64,
    pub image: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<PlannedMount>,
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub readonly_rootfs: bool,
    pub no_new_privs: bool,
    pub drop_capabilities: Vec<String>,
    pub memory_limit_bytes: i64,
    pub memory_request_bytes: i64,
    pub cpu_shares: i64,
    /// The metrics port (the container port the Service and PodMonitor name), on the host IP.
    pub metrics_port: u16,
    /// Where the kubelet sends the probes: `host:port` of their `httpGet`.
    pub probe_address: String,
    pub startup_path: String,
    pub liveness_path: String,
    pub readiness_path: String,
    /// The ConfigMap's files (name -> content), written where its volume is mounted from.
    pub config_files: BTreeMap<String, String>,
}

/// Reads the manifest's documents: the DaemonSet (typed, unknown fields refused), the
/// ConfigMap it mounts, and checks the Service's target port names the metrics port.
pub fn plan(text: &str, node: &NodePaths) -> Result<PodPlan, String> {
    let mut daemon_set = None;
    let mut config_maps: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut service_target_ports = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value =
            serde_yaml_ng::Value::deserialize(document).map_err(|e| format!("YAML: {e}"))?;
        match value.get("kind").and_then(|k| k.as_str()) {
            Some("DaemonSet") => {
                let ds: DaemonSet =
                    serde_yaml_ng::from_value(value).map_err(|e| format!("DaemonSet: {e}"))?;
                daemon_set = Some(ds);
            }
            Some("ConfigMap") => {
                let name = value["metadata"]["name"].as_str().unwrap_or("").to_owned();
                let data: BTreeMap<String, String> =
                    serde_yaml_ng::from_value(value["data"].clone())
                        .map_err(|e| format!("ConfigMap data: {e}"))?;
                config_maps.insert(name, data);
            }
            Some("Service") => {
                for port in value["spec"]["ports"].as_sequence().into_iter().flatten() {
                    service_target_ports.push(port["targetPort"].clone());
                }
            }
            Some("PodMonitor") => {
                for endpoint in value["spec"]["podMetricsEndpoints"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                {
                    service_target_ports.push(endpoint["port"].clone());
                }
            }
            // The API server's objects (the service account, its roles, the Lease's Role, the KeepSet
            // CRDs):
            // nothing the kubelet runs.
            Some(
                "ServiceAccount"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "Role"
                | "RoleBinding"
                | "CustomResourceDefinition",
            ) => {}
            other => return Err(format!("unexpected document kind {other:?}")),
        }
    }
    let ds = daemon_set.ok_or("no DaemonSet in the manifest")?;
    if (ds.api_version.as_str(), ds.kind.as_str()) != ("apps/v1", "DaemonSet") {
        return Err(format!("{} {}", ds.api_version, ds.kind));
    }
    let pod = ds.spec.template.spec;
    let [container] = <[Container; 1]>::try_from(pod.containers)
        .map_err(|c| format!("one container expected, found {}", c.len()))?;

    // The downward API, as the kubelet resolves it (pkg/kubelet/kubelet_pods.go,
    // podFieldSelectorRuntimeValue): spec.nodeName and status.hostIP.
    let mut env = Vec::new();
    for var in &container.env {
        let value = match (&var.value, &var.value_from) {
            (Some(v), None) => v.clone(),
            (None, Some(source)) => match source.field_ref.field_path.as_str() {
                "spec.nodeName" => node.node_name.clone(),
                "status.hostIP" => node.host_ip.clone(),
                other => return Err(format!("env {}: fieldPath {other} not run here", var.name)),
            },
            _ => return Err(format!("env {}: exactly one of value, valueFrom", var.name)),
        };
        env.push((var.name.clone(), value));
    }
    let env_map: BTreeMap<String, String> = env.iter().cloned().collect();
    if !env_map.contains_key("NODE_NAME") {
        return Err("env: NODE_NAME from the downward API is missing".to_owned());
    }
    let args: Vec<String> = container.args.iter().map(|a| expand(a, &env_map)).collect();

    // Volumes and mounts.
    let mut mounts = Vec::new();
    let mut config_files = BTreeMap::new();
    let volumes: BTreeMap<&str, &Volume> =
        pod.volumes.iter().map(|v| (v.name.as_str(), v)).collect();
    for mount in &container.volume_mounts {
        let volume = volumes
            .get(mount.name.as_str())
            .ok_or_else(|| format!("volumeMount {} names no volume", mount.name))?;
        let (host_path, container_path) = match (
            &volume.host_path,
            &volume.config_map,
            &volume.empty_dir,
        ) {
            (Some(hp), None, None) => {
                if hp.path.starts_with("/var/lib/kubelet") && hp.path_type != "Directory" {
                    return Err(format!(
                        "hostPath {} type {}: the kubelet's directories are mounted as Directory, never created",
                        hp.path, hp.path_type
                    ));
                }
                if !["Directory", "DirectoryOrCreate"].contains(&hp.path_type.as_str()) {
                    return Err(format!(
                        "hostPath {} type {}: only directories are mounted (a socket file goes stale when the runtime restarts)",
                        hp.path, hp.path_type
                    ));
                }
                let lab = node.host_paths.get(&hp.path).ok_or_else(|| {
                    format!(
                        "hostPath {} has no lab mapping (drift: add it to the test)",
                        hp.path
                    )
                })?;
                // The runtime names paths under its root by their host path (ImageFsInfo's
                // mountpoint): mounted at its own host path, it stays so in the lab.
                let container_path = if mount.mount_path == hp.path && hp.path == RUNTIME_ROOT {
                    lab.display().to_string()
                } else {
                    mount.mount_path.clone()
                };
                (lab.clone(), container_path)
            }
            (None, Some(cm), None) => {
                let data = config_maps
                    .get(&cm.name)
                    .ok_or_else(|| format!("configMap {} is not in the manifest", cm.name))?;
                config_files.extend(data.clone());
                (node.scratch.join(&volume.name), mount.mount_path.clone())
            }
            (None, None, Some(_)) => (node.scratch.join(&volume.name), mount.mount_path.clone()),
            _ => {
                return Err(format!(
                    "volume {}: one of hostPath, configMap, emptyDir",
                    volume.name
                ));
            }
        };
        mounts.push(PlannedMount {
            volume: mount.name.clone(),
            container_path,
            host_path,
            readonly: mount.read_only,
        });
    }

    let sc = &container.security_context;
    let caps = sc.capabilities.as_ref();
    if caps.is_some_and(|c| !c.add.is_empty()) {
        return Err("capabilities.add: the agent needs none".to_owned());
    }
    let port_of = |probe: &Option<Probe>, which: &str| -> Result<(String, String), String> {
        let probe = probe.as_ref().ok_or_else(|| format!("{which}: missing"))?;
        let port = match &probe.http_get.port {
            serde_yaml_ng::Value::String(name) => container
                .ports
                .iter()
                .find(|p| &p.name == name)
                .map(|p| p.container_port)
                .ok_or_else(|| format!("{which}: no container port named {name}"))?,
            serde_yaml_ng::Value::Number(n) => n
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| format!("{which}: bad port"))?,
            other => return Err(format!("{which}: port {other:?}")),
        };
        // The server gives every connection its head deadline: a probe behind a full set of
        // idle connections waits one deadline per round of them. More than 4 deadlines leave
        // room for 3 rounds queued ahead of it (deploy/daemonset.yaml says the arithmetic).
        // Kubernetes' default timeoutSeconds is 1.
        let timeout = Duration::from_secs(u64::from(probe.timeout_seconds.unwrap_or(1)));
        let head = HttpLimits::probes().head_timeout;
        if timeout <= head * 4 {
            return Err(format!(
                "{which}: timeoutSeconds {timeout:?} is not above 4 x the probe listener's head deadline {head:?}"
            ));
        }
        // The pod's IP, the node's with host networking (pkg/kubelet/prober/prober.go:
        // an empty host is the pod's IP).
        let host = probe
            .http_get
            .host
            .clone()
            .unwrap_or_else(|| node.host_ip.clone());
        Ok((format!("{host}:{port}"), probe.http_get.path.clone()))
    };
    let (startup_at, startup_path) = port_of(&container.startup_probe, "startupProbe")?;
    let (liveness_at, liveness_path) = port_of(&container.liveness_probe, "livenessProbe")?;
    let (readiness_at, readiness_path) = port_of(&container.readiness_probe, "readinessProbe")?;
    if startup_at != liveness_at || liveness_at != readiness_at {
        return Err("the probes use different addresses".to_owned());
    }
    let [metrics] = container.ports.as_slice() else {
        return Err("one container port expected: metrics".to_owned());
    };
    if metrics.protocol != "TCP" {
        return Err(format!("port {}: {}", metrics.name, metrics.protocol));
    }
    for target in &service_target_ports {
        if target.as_str() != Some(metrics.name.as_str()) {
            return Err(format!(
                "Service/PodMonitor port {target:?} is not the container port {}",
                metrics.name
            ));
        }
    }
    let plan = PodPlan {
        host_network: pod.host_network,
        seccomp_runtime_default: pod
            .security_context
            .as_ref()
            .and_then(|s| s.seccomp_profile.as_ref())
            .is_some_and(|p| p.profile_type == "RuntimeDefault"),
        termination_grace_seconds: pod.termination_grace_period_seconds,
        image: container.image.clone(),
        args,
        env,
        mounts,
        run_as_user: sc
            .run_as_user
            .or(pod.security_context.as_ref().and_then(|s| s.run_as_user)),
        run_as_group: sc.run_as_group,
        readonly_rootfs: sc.read_only_root_filesystem,
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        drop_capabilities: caps.map(|c| c.drop.clone()).unwrap_or_default(),
        memory_limit_bytes: quantity(container.resources.limits.get("memory"))?,
        memory_request_bytes: quantity(container.resources.requests.get("memory"))?,
        cpu_shares: milli_cpu_to_shares(container.resources.requests.get("cpu"))?,
        metrics_port: metrics.container_port,
        probe_address: readiness_at,
        startup_path,
        liveness_path,
        readiness_path,
        config_files,
    };
    if sc.privileged {
        return Err("privileged: the agent must not be".to_owned());
    }
    check_what_makes_it_work(&plan, node)?;
    Ok(plan)
}

/// The settings the agent needs in a pod, each a reason the old manifest could not work.
fn check_what_makes_it_work(plan: &PodPlan, node: &NodePaths) -> Result<(), String> {
    let mount_at = |host: &str| {
        let lab = node.host_paths.get(host)?;
        plan.mounts.iter().find(|m| &m.host_path == lab)
    };
    let image_fs = mount_at(RUNTIME_ROOT)
        .ok_or("the image filesystem (/var/lib/containerd) is not mounted")?;
    if !image_fs.readonly || image_fs.container_path != image_fs.host_path.display().to_string() {
        return Err(format!(
            "the image filesystem must be mounted read-only at its own path: {image_fs:?}"
        ));
    }
    let socket_dir = mount_at("/run/containerd").ok_or("/run/containerd is not mounted")?;
    if socket_dir.container_path != "/run/containerd" {
        return Err(format!("the runtime socket's directory: {socket_dir:?}"));
    }
    let endpoint = plan
        .args
        .iter()
        .find_map(|a| a.strip_prefix("--container-runtime-endpoint="))
        .ok_or("no --container-runtime-endpoint")?;
    if endpoint != "unix:///run/containerd/containerd.sock" {
        return Err(format!("--container-runtime-endpoint={endpoint}"));
    }
    let tmp = plan
        .mounts
        .iter()
        .find(|m| m.container_path == "/tmp")
        .ok_or("no writable /tmp")?;
    if tmp.readonly {
        return Err("/tmp is read-only".to_owned());
    }
    if !plan.readonly_rootfs || !plan.seccomp_runtime_default || !plan.no_new_privs {
        return Err(
            "readOnlyRootFilesystem, seccompProfile RuntimeDefault and allowPrivilegeEscalation false are required"
                .to_owned(),
        );
    }
    if plan.drop_capabilities != ["ALL"] {
        return Err(format!("capabilities.drop {:?}", plan.drop_capabilities));
    }
    let address = plan
        .args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-address="))
        .ok_or("no --metrics-address")?;
    if address != format!("{}:{}", node.host_ip, plan.metrics_port) || !plan.host_network {
        return Err(format!(
            "metrics must listen on the pod's (the node's) address and the probes' port: {address}"
        ));
    }
    // The probes on their own listener on loopback (a flood of the metrics port from the
    // pods starved them there), as `--healthz-address` binds it.
    let healthz = plan
        .args
        .iter()
        .find_map(|a| a.strip_prefix("--healthz-address="))
        .ok_or("no --healthz-address: the probes need their own listener")?;
    let loopback = healthz
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    if healthz != plan.probe_address || !loopback {
        return Err(format!(
            "the probes must go to --healthz-address on loopback ({healthz}), not {}",
            plan.probe_address
        ));
    }
    if plan.memory_request_bytes <= 0 || plan.memory_limit_bytes < plan.memory_request_bytes {
        return Err("memory request and limit".to_owned());
    }
    Ok(())
}

/// `$(VAR)` in args, as the kubelet expands them (third_party/forked/golang/expansion/expand.go:
/// a defined variable is replaced, `$$` is a literal `$`, anything else stays as written).
pub fn expand(input: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A memory quantity with a binary suffix (`32Mi`) in bytes.
fn quantity(value: Option<&String>) -> Result<i64, String> {
    let value = value.ok_or("a memory quantity is missing")?;
    let (number, unit) = value
        .find(|c: char| !c.is_ascii_digit())
        .map_or((value.as_str(), ""), |i| value.split_at(i));
    let n: i64 = number.parse().map_err(|_| format!("quantity {value}"))?;
    let scale = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(format!("quantity {value}: unit not read here")),
    };
    Ok(n * scale)
}

/// The kubelet's MilliCPUToShares (pkg/kubelet/cm/helpers_linux.go): shares = milli * 1024 /
/// 1000, at least 2.
fn milli_cpu_to_shares(value: Option<&String>) -> Result<i64, String> {
    let value = value.ok_or("a cpu request is missing")?;
    let milli: i64 = match value.strip_suffix('m') {
        Some(m) => m.parse().map_err(|_| format!("cpu {value}"))?,
        None => value.parse::<i64>().map_err(|_| format!("cpu {value}"))? * 1000,
    };
    Ok((milli * 1024 / 1000).max(2))
}

/// The kubelet's masked and read-only paths for a non-privileged container with the default
/// procMount (pkg/securitycontext/util.go, defaultMaskedPaths / defaultReadonlyPaths).
pub fn kubelet_masked_paths() -> (Vec<String>, Vec<String>) {
    let masked = [
        "/proc/asound",
        "/proc/acpi",
        "/proc/kcore",
        "/proc/keys",
        "/proc/latency_stats",
        "/proc/timer_list",
        "/proc/timer_stats",
        "/proc/sched_debug",
        "/proc/scsi",
        "/sys/firmware",
        "/sys/devices/virtual/powercap",
    ];
    let readonly = [
        "/proc/bus",
        "/proc/fs",
        "/proc/irq",
        "/proc/sys",
        "/proc/sysrq-trigger",
    ];
    (
        masked.map(str::to_owned).to_vec(),
        readonly.map(str::to_owned).to_vec(),
    )
}

#[cfg(test)]
pub fn test_node(root: &Path) -> NodePaths {
    let host_paths = [
        "/var/lib/imagekeeper",
        "/run/imagekeeper",
        "/run/containerd",
        "/var/lib/containerd",
        "/var/lib/kubelet/image_manager",
    ]
    .into_iter()
    .map(|p| {
        (
            p.to_owned(),
            root.join(p.trim_start_matches('/').replace('/', "-")),
        )
    })
    .collect();
    NodePaths {
        host_paths,
        scratch: root.join("scratch"),
        node_name: "node-a".to_owned(),
        host_ip: "127.0.0.1".to_owned(),
    }
}

#[test]
fn the_shipped_manifest_plans_a_pod_with_what_the_agent_needs() {
    let node = test_node(Path::new("/lab"));
    let plan = plan(&manifest_text(), &node).unwrap_or_else(|e| panic!("{MANIFEST}: {e}"));
    assert!(
        plan.args
            .contains(&"--metrics-address=127.0.0.1:9899".to_owned())
    );
    assert!(
        plan.env
            .contains(&("NODE_NAME".to_owned(), "node-a".to_owned()))
    );
    assert_eq!(plan.readiness_path, "/readyz");
    assert_eq!(plan.liveness_path, "/healthz");
    assert_eq!(plan.probe_address, "127.0.0.1:9898");
    assert_eq!(plan.metrics_port, 9899);
    assert!(plan.config_files.contains_key("imagekeeper.toml"));
    assert_eq!(plan.cpu_shares, 10);
}

/// Each edit makes the manifest one that does not work (or that the lab test has not run):
/// the plan must refuse it, naming why.
#[test]
fn a_drifted_manifest_is_refused() {
    let node = test_node(Path::new("/lab"));
    let text = manifest_text();
    let cases: [(&str, &str, &str); 15] = [
        (
            "          image: registry.example/imagekeeper:0.1.0\n",
            "          image: registry.example/imagekeeper:0.1.0\n          workingDir: /\n",
            "unknown field `workingDir`",
        ),
        (
            "            - name: containerd-root\n              mountPath: /var/lib/containerd\n              readOnly: true\n",
            "",
            "image filesystem (/var/lib/containerd) is not mounted",
        ),
        (
            "              mountPath: /var/lib/containerd\n              readOnly: true\n",
            "              mountPath: /host/containerd\n              readOnly: true\n",
            "read-only at its own path",
        ),
        (
            "            path: /run/containerd\n            type: Directory\n",
            "            path: /run/containerd/containerd.sock\n            type: Socket\n",
            "only directories are mounted",
        ),
        (
            "            - name: tmp\n              mountPath: /tmp\n",
            "",
            "no writable /tmp",
        ),
        (
            "            - --metrics-address=$(HOST_IP):9899\n",
            "            - --metrics-address=127.0.0.1:9898\n",
            "metrics must listen",
        ),
        (
            "              fieldPath: spec.nodeName\n",
            "              fieldPath: metadata.name\n",
            "fieldPath metadata.name not run here",
        ),
        (
            "            readOnlyRootFilesystem: true\n",
            "            readOnlyRootFilesystem: false\n",
            "readOnlyRootFilesystem",
        ),
        (
            "          type: RuntimeDefault\n",
            "          type: Unconfined\n",
            "RuntimeDefault",
        ),
        (
            "            periodSeconds: 30\n            timeoutSeconds: 5\n",
            "            periodSeconds: 30\n            timeoutSeconds: 4\n",
            "livenessProbe: timeoutSeconds 4s is not above 4 x the probe listener's head deadline",
        ),
        (
            "            path: /var/lib/kubelet/image_manager\n            type: Directory\n",
            "            path: /var/lib/kubelet/image_manager\n            type: DirectoryOrCreate\n",
            "the kubelet's directories are mounted as Directory, never created",
        ),
        (
            "            - --healthz-address=127.0.0.1:9898\n",
            "",
            "no --healthz-address",
        ),
        (
            "              host: 127.0.0.1\n              path: /healthz\n              port: 9898\n            periodSeconds: 30\n",
            "              host: 127.0.0.1\n              path: /healthz\n              port: metrics\n            periodSeconds: 30\n",
            "the probes use different addresses",
        ),
        (
            "            - --healthz-address=127.0.0.1:9898\n",
            "            - --healthz-address=0.0.0.0:9898\n",
            "the probes must go to --healthz-address on loopback",
        ),
        (
            "            periodSeconds: 2\n            timeoutSeconds: 5\n",
            "            periodSeconds: 2\n",
            "startupProbe: timeoutSeconds 1s is not above",
        ),
    ];
    for (from, to, why) in cases {
        assert!(text.contains(from), "the manifest no longer has {from:?}");
        let drifted = text.replacen(from, to, 1);
        let err = plan(&drifted, &node).expect_err(&format!("{from:?} -> {to:?} is refused"));
        assert!(err.contains(why), "{from:?} -> {to:?}: {err}");
    }
}

#[test]
fn args_expand_defined_variables_as_the_kubelet_does() {
    let env: BTreeMap<String, String> = [("HOST_IP".to_owned(), "10.0.0.5".to_owned())].into();
    let cases = [
        (
            "--metrics-address=$(HOST_IP):9899",
            "--metrics-address=10.0.0.5:9899",
        ),
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("$$(HOST_IP)", "$(HOST_IP)"),
        ("cost $5", "cost $5"),
        ("$(HOST_IP", "$(HOST_IP"),
    ];
    for (input, want) in cases {
        assert_eq!(expand(input, &env), want, "{input}");
    }
}
