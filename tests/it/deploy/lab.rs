//! The DaemonSet's pod run for real (named `deploy::lab::...`, one at a time with the other lab
//! tests): `deploy/daemonset.yaml` is planned as in `mod.rs` and sent through CRI to the lab's
//! containerd as the kubelet would send it — RunPodSandbox (host network, RuntimeDefault
//! seccomp), CreateContainer (the manifest's args with `$(HOST_IP)` expanded, env from the
//! downward API, the hostPath mounts, uid/gid, read-only root, no_new_privs, every capability
//! dropped, the kubelet's masked paths, memory limit and CPU shares), StartContainer,
//! ExecSync for `kubectl exec`, and StopContainer with the pod's grace period. The image is the
//! one `scripts/image` pushed to the lab registry (`IMAGEKEEPER_IMAGE`, exported by
//! `scripts/test`); it replaces the manifest's placeholder image name.
//!
//! Node paths in the lab (the hostPath volumes): `/run/containerd` is the lab containerd's
//! socket directory (`<lab>/containerd`), `/var/lib/containerd` its root
//! (`<lab>/containerd/root`), mounted at that same path as the manifest mounts the real one at
//! its own; `/var/lib/imagekeeper`, `/run/imagekeeper` and `/var/lib/kubelet/image_manager` are
//! fresh directories of the test; emptyDir and configMap volumes are directories the test
//! makes (0777 for emptyDir, as the kubelet's); `spec.nodeName` is a name unique to the run
//! and `status.hostIP` is 127.0.0.1 (the lab's node has no other address to offer).
//! The ConfigMap's `imageMinimumGCAge` is set to 0s here, so that `imagekeeper prune` may take
//! an image pulled a moment before (the manifest keeps the kubelet's 2m), and its thresholds to
//! 100 / 99 with no MaxAge, which turns the agent's own GC off as the kubelet's rule does (a run
//! on the host's disk at 87 % once saw the agent's GC at start take the victim first; the lab's
//! image filesystem is now a tmpfs of its own, but the test does not lean on its usage), so the
//! removal is the operator's `kubectl exec ... imagekeeper prune`.
//!
//! The real kubelet runs the same pod template as a static pod in `kubelet::lab::daemonset`
//! (its prober, its mounts, its downward API, its stop, on containerd 2.1). What stays here,
//! because the kubelet lab cannot show it: the pod on every containerd release of the lab
//! suite (1.6 in the first pass; the kubelet lab runs 2.1 only), a containerd restart under the
//! running pod (the kubelet would react to it on its own: here the agent alone is observed
//! going on through the socket directory), and a pod deliberately changed against the manifest
//! (the bind-mounted socket file going stale). Also only here: `kubectl exec ... prune`
//! through the admin socket and the agent's peak RSS against the manifest's limit.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use imagekeeper::cri::{
    ContainerSecurity, ContainerSpec, CriClient, ImageRuntime, MountSpec, SandboxSpec,
};
use imagekeeper::model::ContainerState;
use imagekeeper::store::Store;

use super::{NodePaths, PodPlan, kubelet_masked_paths, manifest_text, plan};
use crate::support::{self, Lab, PodGuard, http_status, wait_for};

const BINARY: &str = "/usr/local/bin/imagekeeper";

/// The image `scripts/image` pushed (IMAGEKEEPER_IMAGE); the test fails without it.
fn pushed_image(test: &str) -> String {
    support::lab_var(
        test,
        "IMAGEKEEPER_IMAGE",
        "run `scripts/image` (with the lab's CRI_LAB_REGISTRY_PORT) and export \
         IMAGEKEEPER_IMAGE=<the reference it prints>",
    )
}

/// The pod, running.
struct RunningPod {
    client: CriClient,
    container_id: String,
    node: NodePaths,
    plan: PodPlan,
    base: String,
    /// Where the kubelet sends the probes (`--healthz-address`, loopback).
    probes: String,
    log: PathBuf,
    // Dropped in this order: the pod, then its image (the gc::lab tests expect containerd to
    // hold the lab's images only), then the node's directories.
    _guard: PodGuard,
    _image: ImageGuard,
    _dir: tempfile::TempDir,
}

/// Removes the pushed image from the lab's containerd when dropped.
struct ImageGuard {
    endpoint: String,
    image: String,
}

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let (endpoint, image) = (self.endpoint.clone(), self.image.clone());
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime can be built");
            runtime.block_on(async {
                let client = CriClient::connect(support::lab_config(&endpoint))
                    .await
                    .expect("valid endpoint");
                if let Err(err) = client.remove_image(&image, "").await {
                    eprintln!("cleanup: RemoveImage {image}: {err}");
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// How the test changes the planned pod before running it (the socket-file experiment).
type Tweak = fn(&mut ContainerSpec, &Lab);

async fn run_daemonset_pod(lab: &Lab, image: &str, tweak: Option<Tweak>) -> RunningPod {
    let dir = tempfile::Builder::new()
        .prefix("daemonset-")
        .tempdir_in(&lab.dir)
        .expect("a temp dir in the lab");
    let root = dir.path();
    let containerd_dir = lab.dir.join("containerd");
    let mut host_paths: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (node_path, name) in [
        ("/var/lib/imagekeeper", "var-lib-imagekeeper"),
        ("/run/imagekeeper", "run-imagekeeper"),
        ("/var/lib/kubelet/image_manager", "kubelet-image_manager"),
    ] {
        let path = root.join(name);
        std::fs::create_dir_all(&path).expect("mkdir");
        host_paths.insert(node_path.to_owned(), path);
    }
    host_paths.insert("/run/containerd".to_owned(), containerd_dir.clone());
    host_paths.insert(super::RUNTIME_ROOT.to_owned(), containerd_dir.join("root"));
    let node = NodePaths {
        host_paths,
        scratch: root.join("volumes"),
        node_name: format!("lab-node-{}-{}", std::process::id(), unique()),
        host_ip: "127.0.0.1".to_owned(),
    };
    let plan = plan(&manifest_text(), &node).unwrap_or_else(|e| panic!("{}: {e}", super::MANIFEST));
    assert!(
        lab.imagefs_mountpoint.starts_with(
            &plan
                .mounts
                .iter()
                .find(|m| m.readonly && m.host_path == containerd_dir.join("root"))
                .expect("the image fs mount")
                .container_path
        ),
        "ImageFsInfo's mountpoint {} lies under the image fs mount",
        lab.imagefs_mountpoint
    );

    // The manifest names a placeholder of the same repository; the lab runs the pushed build.
    assert!(
        plan.image.contains("/imagekeeper:") && image.contains("/imagekeeper:"),
        "{} / {image}",
        plan.image
    );

    // The volumes the kubelet would make: emptyDir 0777, the ConfigMap's files.
    let mut mounts = Vec::new();
    for m in &plan.mounts {
        if m.host_path.starts_with(&node.scratch) {
            std::fs::create_dir_all(&m.host_path).expect("mkdir volume");
            std::fs::set_permissions(&m.host_path, std::fs::Permissions::from_mode(0o777))
                .expect("chmod");
        }
        mounts.push(MountSpec {
            container_path: m.container_path.clone(),
            host_path: m.host_path.display().to_string(),
            readonly: m.readonly,
            image: None,
        });
    }
    let config_dir = plan
        .mounts
        .iter()
        .find(|m| m.volume == "config")
        .expect("the config volume")
        .host_path
        .clone();
    for (name, content) in &plan.config_files {
        let content = content
            .replace("imageMinimumGCAge = \"2m\"", "imageMinimumGCAge = \"0s\"")
            .replace(
                "imageGCHighThresholdPercent = 80",
                "imageGCHighThresholdPercent = 100",
            )
            .replace(
                "imageGCLowThresholdPercent = 70",
                "imageGCLowThresholdPercent = 99",
            );
        assert!(
            name != "imagekeeper.toml"
                || [
                    "MinimumGCAge = \"0s\"",
                    "HighThresholdPercent = 100",
                    "LowThresholdPercent = 99"
                ]
                .iter()
                .all(|setting| content.contains(setting)),
            "the lab's settings were not applied to {name}: {content}"
        );
        std::fs::write(config_dir.join(name), content).expect("write config");
    }

    let client = lab.client().await;
    client
        .pull_image(image, "", None)
        .await
        .unwrap_or_else(|e| panic!("pull {image} (pushed by scripts/image?): {e}"));
    let image_guard = ImageGuard {
        endpoint: lab.endpoint.clone(),
        image: image.to_owned(),
    };
    let uid = format!("imagekeeper-{}", unique());
    let log_directory = lab.pod_log_dir.join(&uid);
    std::fs::create_dir_all(&log_directory).expect("log dir");
    let sandbox = SandboxSpec {
        name: "imagekeeper".to_owned(),
        uid,
        namespace: "kube-system".to_owned(),
        log_directory: log_directory.display().to_string(),
        host_network: plan.host_network,
        run_as_user: None,
        seccomp_runtime_default: plan.seccomp_runtime_default,
    };
    let sandbox_id = client
        .run_pod_sandbox(&sandbox)
        .await
        .expect("RunPodSandbox of the DaemonSet's pod");
    let guard = PodGuard {
        endpoint: lab.endpoint.clone(),
        sandbox_id: sandbox_id.clone(),
    };
    let (masked_paths, readonly_paths) = kubelet_masked_paths();
    let container = ContainerSpec {
        name: "imagekeeper".to_owned(),
        image: image.to_owned(),
        command: Vec::new(),
        args: plan.args.clone(),
        env: plan.env.clone(),
        mounts,
        security: Some(ContainerSecurity {
            run_as_user: plan.run_as_user,
            run_as_group: plan.run_as_group,
            privileged: false,
            readonly_rootfs: plan.readonly_rootfs,
            no_new_privs: plan.no_new_privs,
            drop_capabilities: plan.drop_capabilities.clone(),
            add_capabilities: Vec::new(),
            seccomp_runtime_default: plan.seccomp_runtime_default,
            masked_paths,
            readonly_paths,
        }),
        memory_limit_bytes: plan.memory_limit_bytes,
        cpu_shares: plan.cpu_shares,
    };
    let mut container = container;
    if let Some(tweak) = tweak {
        tweak(&mut container, lab);
    }
    let container_id = client
        .create_container(&sandbox_id, &sandbox, &container)
        .await
        .expect("CreateContainer of the manifest's container");
    client
        .start_container(&container_id)
        .await
        .expect("StartContainer");
    let base = format!("{}:{}", node.host_ip, plan.metrics_port);
    let probes = plan.probe_address.clone();
    RunningPod {
        client,
        container_id,
        node,
        plan,
        base,
        probes,
        log: log_directory.join("imagekeeper.log"),
        _guard: guard,
        _image: image_guard,
        _dir: dir,
    }
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn gauge(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

impl RunningPod {
    /// Polls `path` on the probes' listener, as the kubelet probes it.
    async fn wait_status(&self, path: &str, status: u16, deadline: Duration) -> String {
        let base = self.probes.clone();
        wait_for(&format!("{path} to answer {status}"), deadline, || {
            let base = base.clone();
            let path = path.to_owned();
            async move {
                http_status(&base, &path)
                    .await
                    .and_then(|(code, body)| (code == status).then_some(body))
            }
        })
        .await
    }

    async fn exec(&self, args: &[&str]) -> (i32, String) {
        let cmd: Vec<String> = std::iter::once(BINARY)
            .chain(args.iter().copied())
            .map(str::to_owned)
            .collect();
        let result = self
            .client
            .exec_sync(&self.container_id, &cmd, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("ExecSync {cmd:?}: {e}"));
        let output = format!(
            "stdout: {}\nstderr: {}",
            String::from_utf8_lossy(&result.stdout),
            String::from_utf8_lossy(&result.stderr)
        );
        (result.exit_code, output)
    }

    /// The agent's process on the host, found by its unique NODE_NAME.
    fn agent_pid(&self) -> Option<u32> {
        let needle = format!("NODE_NAME={}", self.node.node_name);
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let environ = std::fs::read(entry.path().join("environ")).ok()?;
                environ
                    .split(|b| *b == 0)
                    .any(|var| var == needle.as_bytes())
                    .then_some(pid)
            })
    }

    fn db_host_path(&self) -> PathBuf {
        self.node.host_paths["/var/lib/imagekeeper"].join("records.redb")
    }
}

fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

async fn image_listed(client: &CriClient, id: &str) -> bool {
    client
        .list_images()
        .await
        .expect("ListImages")
        .iter()
        .any(|i| i.id.as_str() == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the cri lab and the image: scripts/cri-lab up, scripts/image, IMAGEKEEPER_LAB_ENV, IMAGEKEEPER_IMAGE (scripts/test runs it)"]
async fn the_daemonset_pod_serves_health_and_metrics_collects_survives_a_runtime_restart_and_stops_cleanly()
 {
    const TEST: &str = "deploy::lab::the_daemonset_pod_serves_health_and_metrics_collects_survives_a_runtime_restart_and_stops_cleanly";
    let lab = support::lab(TEST).await;
    let image = pushed_image(TEST);
    let started = Instant::now();
    let victim = lab.image("data:5mb").clone();
    let client = lab.client().await;
    client
        .pull_image(&victim.reference, "", None)
        .await
        .expect("pull the victim");
    let pod = run_daemonset_pod(&lab, &image, None).await;

    // Started, alive, ready (one detect done, runtime reached), on the probes' paths and port.
    let healthz = pod
        .wait_status(&pod.plan.startup_path, 200, Duration::from_secs(60))
        .await;
    assert!(
        healthz.contains("database /var/lib/imagekeeper/records.redb open"),
        "{healthz}"
    );
    assert_eq!(pod.plan.liveness_path, "/healthz");
    // NODE_NAME from the downward API, in the start line (the runtime copies the log on).
    let node_field = format!("\"node\":\"{}\"", pod.node.node_name);
    wait_for(
        "the start line naming the node",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&pod.log).unwrap_or_default();
            let found = log.contains(&node_field);
            async move { found.then_some(()) }
        },
    )
    .await;
    let readyz = pod
        .wait_status(&pod.plan.readiness_path, 200, Duration::from_secs(60))
        .await;
    println!(
        "ready {:?} after the start; /readyz: {readyz}",
        started.elapsed()
    );
    // statvfs of the image filesystem works inside the pod: the gauges exist and are > 0.
    let base = pod.base.clone();
    let metrics = wait_for("the image fs gauges", Duration::from_secs(60), || {
        let base = base.clone();
        async move {
            let (_, body) = http_status(&base, "/metrics").await?;
            gauge(&body, "imagekeeper_image_fs_capacity_bytes").map(|_| body)
        }
    })
    .await;
    let capacity = gauge(&metrics, "imagekeeper_image_fs_capacity_bytes").expect("capacity");
    let available = gauge(&metrics, "imagekeeper_image_fs_available_bytes").expect("available");
    assert!(
        capacity > 0.0 && available > 0.0 && available <= capacity,
        "{metrics}"
    );
    assert!(gauge(&metrics, "imagekeeper_image_records").is_some_and(|n| n > 0.0));

    // kubectl exec ... imagekeeper prune: through the admin socket, the agent removes the
    // unused images, the victim among them.
    let (code, output) = pod
        .exec(&[
            "prune",
            "--admin-socket",
            "/run/imagekeeper/admin.sock",
            "--output",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "{output}");
    assert!(output.contains(&victim.image_id), "{output}");
    assert!(
        !image_listed(&pod.client, &victim.image_id).await,
        "the victim is gone"
    );
    let (_, metrics) = http_status(&pod.base, "/metrics").await.expect("scrape");
    assert!(
        gauge(
            &metrics,
            "imagekeeper_image_garbage_collected_total{reason=\"space\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    // kubectl exec ... imagekeeper inspect check: works under the read-only root (/tmp).
    let (code, output) = pod
        .exec(&[
            "inspect",
            "--db",
            "/var/lib/imagekeeper/records.redb",
            "check",
        ])
        .await;
    assert_eq!(code, 0, "{output}");

    // containerd restarts: the socket directory is mounted, so the agent's next call dials the
    // new socket. A second victim is pruned through the restarted runtime.
    lab.run_lab_script("restart-containerd");
    let restarted = Instant::now();
    let client = lab.client().await;
    let second = lab.image("data:1mb").clone();
    wait_for("the restarted containerd", Duration::from_secs(60), || {
        let client = client.clone();
        let reference = second.reference.clone();
        async move { client.pull_image(&reference, "", None).await.ok() }
    })
    .await;
    let (code, output) = pod
        .exec(&[
            "prune",
            "--admin-socket",
            "/run/imagekeeper/admin.sock",
            "--output",
            "json",
        ])
        .await;
    assert_eq!(code, 0, "prune after the restart: {output}");
    assert!(output.contains(&second.image_id), "{output}");
    assert!(!image_listed(&client, &second.image_id).await);
    println!(
        "pruned through the restarted containerd {:?} after the restart",
        restarted.elapsed()
    );
    pod.wait_status("/readyz", 200, Duration::from_secs(60))
        .await;

    // Memory: the agent's peak RSS fits the manifest's request and limit.
    let pid = pod.agent_pid().expect("the agent's process");
    let peak = peak_rss_bytes(pid);
    println!(
        "agent peak RSS {peak} bytes ({:.1} MiB); request {} limit {}",
        peak as f64 / 1048576.0,
        pod.plan.memory_request_bytes,
        pod.plan.memory_limit_bytes
    );
    assert!(
        peak < pod.plan.memory_limit_bytes.unsigned_abs(),
        "peak {peak}"
    );

    // StopContainer (SIGTERM, the pod's grace period): exit 0, the socket removed, the
    // database sound.
    let stop = Instant::now();
    pod.client
        .stop_container(
            &pod.container_id,
            Duration::from_secs(pod.plan.termination_grace_seconds),
        )
        .await
        .expect("StopContainer");
    let status = pod
        .client
        .container_status(&pod.container_id)
        .await
        .expect("ContainerStatus");
    println!("stopped in {:?}: {status:?}", stop.elapsed());
    assert_eq!(status.state, ContainerState::Exited);
    assert_eq!(status.exit_code, 0, "{status:?}");
    assert!(
        !pod.node.host_paths["/run/imagekeeper"]
            .join("admin.sock")
            .exists(),
        "the admin socket is removed at shutdown"
    );
    let mut store = Store::open(&pod.db_host_path(), imagekeeper::model::UnixNanos(1))
        .expect("the database opens");
    assert!(
        store.check().expect("check").is_empty(),
        "inspect check is clean"
    );
    assert!(store.len().expect("records") > 0);
}

/// The old manifest's mount, shown stale: with the socket FILE bind-mounted, the agent keeps
/// the old inode when containerd restarts and recreates its socket, so every later call fails
/// with "connection refused" and the pod never becomes ready again (the same pod with the
/// directory mount goes on: the test above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the cri lab and the image: scripts/cri-lab up, scripts/image, IMAGEKEEPER_LAB_ENV, IMAGEKEEPER_IMAGE (scripts/test runs it)"]
async fn a_bind_mounted_socket_file_goes_stale_when_containerd_restarts() {
    const TEST: &str =
        "deploy::lab::a_bind_mounted_socket_file_goes_stale_when_containerd_restarts";
    let lab = support::lab(TEST).await;
    let image = pushed_image(TEST);
    /// The socket file mounted instead of its directory; the image cache refreshed every
    /// second, so that readiness notices within seconds (the manifest keeps the 30 s default).
    fn socket_file_instead_of_directory(container: &mut ContainerSpec, lab: &Lab) {
        let dir = container
            .mounts
            .iter_mut()
            .find(|m| m.container_path == "/run/containerd")
            .expect("the socket directory mount");
        dir.container_path = "/run/containerd/containerd.sock".to_owned();
        dir.host_path = lab
            .dir
            .join("containerd/containerd.sock")
            .display()
            .to_string();
        container.args.push("--image-cache-period=1s".to_owned());
    }
    let pod = run_daemonset_pod(&lab, &image, Some(socket_file_instead_of_directory)).await;
    pod.wait_status("/readyz", 200, Duration::from_secs(60))
        .await;
    let (code, output) = pod
        .exec(&[
            "prune",
            "--dry-run",
            "--admin-socket",
            "/run/imagekeeper/admin.sock",
        ])
        .await;
    assert_eq!(code, 0, "before the restart the file mount works: {output}");

    lab.run_lab_script("restart-containerd");
    let restarted = Instant::now();
    let client = lab.client().await;
    wait_for("the restarted containerd", Duration::from_secs(60), || {
        let client = client.clone();
        async move { client.version().await.ok() }
    })
    .await;
    let (code, output) = pod
        .exec(&[
            "prune",
            "--dry-run",
            "--admin-socket",
            "/run/imagekeeper/admin.sock",
        ])
        .await;
    assert_eq!(
        code, 1,
        "after the restart the agent cannot reach containerd: {output}"
    );
    assert!(output.contains("onnection refused"), "{output}");
    // Not ready from the next image-cache cycle on, and it stays so.
    let readyz = pod
        .wait_status("/readyz", 503, Duration::from_secs(90))
        .await;
    println!(
        "not ready {:?} after the restart: {readyz}",
        restarted.elapsed()
    );
    assert!(readyz.contains("cannot be reached"), "{readyz}");
    let (code, _) = pod
        .exec(&[
            "prune",
            "--dry-run",
            "--admin-socket",
            "/run/imagekeeper/admin.sock",
        ])
        .await;
    assert_eq!(code, 1, "still stale");
}
