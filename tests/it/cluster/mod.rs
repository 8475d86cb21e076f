//! Tests on a real single-node cluster: `scripts/cluster-lab` runs etcd v3.6.16, kube-apiserver,
//! kube-controller-manager, kube-scheduler and a kubelet v1.37.2 registered through the API
//! server, beside the lab's containerd 2.3, all inside a network namespace of the lab's own.
//! The tests install the chart with the real helm, read what happened with the real kubectl
//! (the API server's objects, the kubelet's probes, `kubectl exec` and `kubectl logs`), and
//! reach the cluster only through `nsenter --net` into that namespace.
//!
//! Invariants: every test is `#[ignore = "needs the cluster lab: ..."]` (a plain run lists it
//! as ignored; `scripts/test` runs it with the cluster up) and calls [`cluster_lab`] first,
//! which fails the test when `IMAGEKEEPER_CLUSTER_LAB_ENV` (the cluster.env
//! `scripts/cluster-lab up` writes) is not set. The tests share one cluster, so they hold [`CLUSTER_LAB_LOCK`] (nextest runs them one
//! at a time anyway: `.config/nextest.toml`'s `cluster-lab` group). What a test installs is
//! uninstalled when its [`Release`] is dropped, and the images it pulled are removed.

mod lab;
mod reach;
mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support;

static CLUSTER_LAB_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The namespace the chart is installed in, as the install docs do.
pub const NAMESPACE: &str = "kube-system";

/// The running cluster lab, from cluster.env.
pub struct ClusterLab {
    env: HashMap<String, String>,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// The cluster lab, held so that its tests run one at a time; panics, failing the test
/// `test`, when `IMAGEKEEPER_CLUSTER_LAB_ENV` is not set.
pub async fn cluster_lab(test: &str) -> ClusterLab {
    let Some(env_file) = std::env::var_os("IMAGEKEEPER_CLUSTER_LAB_ENV") else {
        panic!(
            "{test} needs the cluster lab and IMAGEKEEPER_CLUSTER_LAB_ENV is not set: start it \
             with `scripts/cluster-lab up` and export IMAGEKEEPER_CLUSTER_LAB_ENV=<lab dir>/cluster.env ({})",
            support::RUN_THE_LAB_TESTS
        );
    };
    let serial = CLUSTER_LAB_LOCK.lock().await;
    let text = std::fs::read_to_string(&env_file).unwrap_or_else(|err| {
        panic!(
            "cannot read IMAGEKEEPER_CLUSTER_LAB_ENV={}: {err} (scripts/cluster-lab up)",
            Path::new(&env_file).display()
        )
    });
    let env = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect();
    ClusterLab {
        env,
        _serial: serial,
    }
}

impl ClusterLab {
    /// The value of `key` in cluster.env.
    pub fn env(&self, key: &str) -> String {
        self.env
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("cluster.env has no {key}: run scripts/cluster-lab up again"))
    }

    pub fn node_name(&self) -> String {
        self.env("CLUSTER_LAB_NODE_NAME")
    }

    /// `scripts/cluster-lab restart-kubelet`: the kubelet stopped and started again with the
    /// drop-ins in `CLUSTER_LAB_KUBELET_CONFIG_DIR`, its pods left running; returns once the
    /// node is Ready. Panics when the script fails.
    pub fn restart_kubelet(&self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster-lab");
        let cri_lab_env = PathBuf::from(self.env("CLUSTER_LAB_CRI_LAB_ENV"));
        let lab_dir = cri_lab_env.parent().expect("lab.env is in the lab's dir");
        let out = Command::new(&script)
            .arg("restart-kubelet")
            .env("CRI_LAB_DIR", lab_dir)
            .env("CLUSTER_LAB_NETNS", self.env("CLUSTER_LAB_NETNS"))
            .env("KUBELET_LAB_NODE_IP", self.env("CLUSTER_LAB_NODE_IP"))
            .output()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", script.display()));
        assert!(
            out.status.success(),
            "scripts/cluster-lab restart-kubelet failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The first line of the kubelet's log past byte `from` that holds every one of `parts`,
    /// once there is one (read every second until `deadline`).
    pub async fn wait_for_kubelet_log_line(
        &self,
        parts: &[&str],
        from: u64,
        deadline: Duration,
    ) -> String {
        let log = PathBuf::from(self.env("CLUSTER_LAB_KUBELET_LOG"));
        // Polled: the kubelet's log file is its observable.
        support::wait_for(
            &format!("a kubelet log line with {parts:?} ({})", log.display()),
            deadline,
            || async {
                let text = std::fs::read(&log).unwrap_or_default();
                let start = usize::try_from(from).unwrap_or(usize::MAX).min(text.len());
                let found = String::from_utf8_lossy(&text[start..])
                    .lines()
                    .find(|line| parts.iter().all(|p| line.contains(p)))
                    .map(str::to_owned);
                if found.is_none() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                found
            },
        )
        .await
    }

    /// PROGRAM ARGS inside the lab's network namespace, KUBECONFIG set; run to its end.
    pub fn run_in_namespace(&self, program: &str, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net={}", self.env("CLUSTER_LAB_NETNS_PATH")))
            .arg(program)
            .args(args)
            .env("KUBECONFIG", self.env("CLUSTER_LAB_KUBECONFIG"))
            .env("HELM_CACHE_HOME", self.helm_home().join("cache"))
            .env("HELM_CONFIG_HOME", self.helm_home().join("config"))
            .env("HELM_DATA_HOME", self.helm_home().join("data"))
            .output()
            .unwrap_or_else(|err| panic!("cannot run nsenter {program}: {err}"))
    }

    fn helm_home(&self) -> PathBuf {
        PathBuf::from(self.env("CLUSTER_LAB_LOG_DIR")).join("helm")
    }

    /// `kubectl ARGS` (the cluster lab's kubectl), run to its end.
    pub fn kubectl_output(&self, args: &[&str]) -> Output {
        self.run_in_namespace(&self.env("CLUSTER_LAB_KUBECTL"), args)
    }

    /// `kubectl ARGS`; its stdout. Panics with its stderr when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        checked("kubectl", args, self.kubectl_output(args))
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn kubectl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all)).expect("kubectl's JSON")
    }

    /// `helm ARGS`; its stdout. Panics with its stderr when it fails.
    pub fn helm(&self, args: &[&str]) -> String {
        checked(
            "helm",
            args,
            self.run_in_namespace(&self.env("CLUSTER_LAB_HELM"), args),
        )
    }

    /// `kubectl apply -f` of this manifest text; kubectl's stdout.
    pub fn kubectl_apply(&self, manifest: &str) -> String {
        self.kubectl_file("apply", manifest)
    }

    /// `kubectl delete --wait -f` of this manifest text; kubectl's stdout.
    pub fn kubectl_delete(&self, manifest: &str) -> String {
        self.kubectl_file("delete", manifest)
    }

    fn kubectl_file(&self, verb: &str, manifest: &str) -> String {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("manifest.yaml");
        std::fs::write(&file, manifest).expect("write the manifest");
        self.kubectl(&[verb, "-f", &file.display().to_string()])
    }

    /// Waits until the runtime lists `image` (crictl).
    pub async fn wait_for_image(&self, image: &str, deadline: Duration) {
        // Polled: the runtime's image list is the observable of a pull (once a second).
        support::wait_for(
            &format!("{image} in the runtime (crictl inspecti)"),
            deadline,
            || async {
                let present = self
                    .crictl_output(&["inspecti", "-q", image])
                    .status
                    .success();
                if !present {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                present.then_some(())
            },
        )
        .await
    }

    /// Waits for a kubelet `Pulled` Event in `default` of a pod whose name starts with
    /// `pod_prefix` about `image`; returns its line, `<pod> <message>` (kubectl get events,
    /// every 2 s until `deadline`).
    pub async fn wait_for_pulled(
        &self,
        what: &str,
        pod_prefix: &str,
        image: &str,
        deadline: Duration,
    ) -> String {
        support::wait_for(what, deadline, || async {
            let events = self.kubectl(&[
                "-n",
                "default",
                "get",
                "events",
                "--field-selector",
                "reason=Pulled",
                "-o",
                "jsonpath={range .items[*]}{.involvedObject.name} {.message}{\"\\n\"}{end}",
            ]);
            let found = events
                .lines()
                .find(|line| line.starts_with(pod_prefix) && line.contains(image))
                .map(str::to_owned);
            if found.is_none() {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            found
        })
        .await
    }

    /// [`Self::wait_for_pulled`], whose line must be the kubelet's "already present on
    /// machine": the pod started with no pull. The line is printed.
    pub async fn wait_for_no_pull(
        &self,
        what: &str,
        pod_prefix: &str,
        image: &str,
        deadline: Duration,
    ) {
        let pulled = self
            .wait_for_pulled(what, pod_prefix, image, deadline)
            .await;
        println!("{pulled}");
        assert!(
            pulled.contains("already present on machine"),
            "{what}: the pod found {image} absent: {pulled}"
        );
    }

    /// Waits until no pod in `default` matches the label selector `selector` (kubectl get
    /// pods, every second until `deadline`).
    pub async fn wait_for_no_pods(&self, selector: &str, deadline: Duration) {
        support::wait_for(
            &format!("the pods {selector} gone (kubectl get pods)"),
            deadline,
            || async {
                let left =
                    self.kubectl(&["-n", "default", "get", "pods", "-l", selector, "-o", "name"]);
                if !left.trim().is_empty() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                left.trim().is_empty().then_some(())
            },
        )
        .await;
    }

    /// `crictl ARGS` against the lab's containerd, run to its end.
    pub fn crictl_output(&self, args: &[&str]) -> Output {
        let endpoint = self.env("CLUSTER_LAB_CRI_ENDPOINT");
        Command::new(self.env("CLUSTER_LAB_CRICTL"))
            .args([
                "--runtime-endpoint",
                &endpoint,
                "--image-endpoint",
                &endpoint,
            ])
            .args(["--timeout", "60s"])
            .args(args)
            .output()
            .expect("crictl runs")
    }

    /// `crictl ARGS` against the lab's containerd; its stdout.
    pub fn crictl(&self, args: &[&str]) -> String {
        checked("crictl", args, self.crictl_output(args))
    }

    /// Removes the sandboxes the runtime still holds of pods that stopped (crictl rmp), and
    /// with them their exited containers: the kubelet removes those of a deleted pod only at
    /// its next container GC (once a minute), and until then an exited container keeps its
    /// image in use (for imagekeeper's GC as for the kubelet's). A test that needs an image
    /// unused calls this after the pods that ran it are gone from the API. A sandbox the
    /// kubelet removed meanwhile (crictl's NotFound) is gone as asked.
    pub fn remove_stopped_pod_sandboxes(&self) {
        let listed: serde_json::Value =
            serde_json::from_str(&self.crictl(&["pods", "-o", "json"])).expect("crictl JSON");
        for pod in listed["items"].as_array().into_iter().flatten() {
            if pod["state"] != "SANDBOX_NOTREADY" {
                continue;
            }
            let id = pod["id"].as_str().expect("a sandbox id");
            println!(
                "removing the stopped sandbox of {}/{} ({id}), left by an earlier test",
                pod["metadata"]["namespace"].as_str().unwrap_or("?"),
                pod["metadata"]["name"].as_str().unwrap_or("?")
            );
            let out = self.crictl_output(&["rmp", id]);
            // The kubelet's own container GC may remove it between the list and the rmp (a
            // kubelet just restarted sweeps at once): gone either way.
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() || stderr.contains("NotFound"),
                "crictl rmp {id} failed ({}): {stderr}",
                out.status
            );
        }
    }

    /// `curl` inside the namespace (the node address and its loopback are there).
    pub fn curl(&self, url: &str) -> String {
        checked(
            "curl",
            &[url],
            self.run_in_namespace("curl", &["-sS", "-m", "10", url]),
        )
    }

    /// The image the cluster lab pushed (`scripts/image`'s build), as (repository, tag).
    pub fn image(&self) -> (String, String) {
        let image = self.env("CLUSTER_LAB_IMAGE");
        assert!(
            !image.is_empty(),
            "cluster.env has no CLUSTER_LAB_IMAGE: run scripts/image before scripts/cluster-lab \
             up (it pushes $CARGO_TARGET_DIR/image/oci), or scripts/test"
        );
        let (repository, tag) = image.rsplit_once(':').expect("a tagged reference");
        (repository.to_owned(), tag.to_owned())
    }

    /// A lab registry image's reference (`busybox:1.0` -> `<registry>/imagekeeper-lab/busybox:1.0`).
    pub fn lab_image(&self, short: &str) -> String {
        format!(
            "{}/imagekeeper-lab/{short}",
            self.env("CLUSTER_LAB_REGISTRY")
        )
    }

    /// `--set` values that point the chart at the lab's node: the pushed image, the lab
    /// containerd's socket, its directory and root, its sandbox image, the lab kubelet's root.
    pub fn chart_sets(&self) -> Vec<String> {
        let (repository, tag) = self.image();
        let socket = self
            .env("CLUSTER_LAB_CRI_ENDPOINT")
            .trim_start_matches("unix://")
            .to_owned();
        vec![
            format!("image.repository={repository}"),
            format!("image.tag={tag}"),
            "image.pullPolicy=IfNotPresent".to_owned(),
            format!("runtimes.containerd.socket={socket}"),
            format!(
                "runtimes.containerd.socketDir={}",
                self.env("CLUSTER_LAB_CONTAINERD_SOCKET_DIR")
            ),
            format!(
                "runtimes.containerd.root={}",
                self.env("CLUSTER_LAB_CONTAINERD_ROOT")
            ),
            format!("sandboxImage={}", self.env("CLUSTER_LAB_SANDBOX_IMAGE")),
            format!(
                "kubeletRootDir={}",
                self.env("CLUSTER_LAB_KUBELET_ROOT_DIR")
            ),
        ]
    }

    /// `helm install NAME deploy/helm/imagekeeper -n kube-system` with the lab's values, the
    /// config file `config` (the chart's `config` value) and `extra` `--set`s; waits until the
    /// DaemonSet's pod is Ready. Uninstalled on drop.
    pub fn install(&self, name: &str, config: &str, extra: &[String]) -> Release<'_> {
        let dir = tempfile::tempdir().expect("a temp dir");
        let values = dir.path().join("config.yaml");
        std::fs::write(
            &values,
            serde_yaml_ng::to_string(&serde_json::json!({ "config": config })).expect("YAML"),
        )
        .expect("write values");
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/imagekeeper");
        let mut args: Vec<String> = vec![
            "install".into(),
            name.into(),
            chart.display().to_string(),
            "--namespace".into(),
            NAMESPACE.into(),
            "-f".into(),
            values.display().to_string(),
        ];
        for set in self.chart_sets().iter().chain(extra) {
            args.push("--set".into());
            args.push(set.clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = Instant::now();
        let output = self.helm(&args);
        let release = Release {
            cluster: self,
            name: name.to_owned(),
            install_output: output,
            installed_at: started,
            _values: dir,
        };
        release.wait_ready(Duration::from_secs(180));
        release
    }

    /// The Events on the lab's node whose reporting controller is imagekeeper
    /// (`events.k8s.io/v1`, as the recorder writes them), oldest first.
    pub fn imagekeeper_node_events(&self) -> Vec<serde_json::Value> {
        let list = self.kubectl_json(&["get", "events.v1.events.k8s.io", "-n", "default"]);
        let node = self.node_name();
        let mut events: Vec<serde_json::Value> = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|e| {
                e["reportingController"] == "imagekeeper"
                    && e["regarding"]["kind"] == "Node"
                    && e["regarding"]["name"] == node.as_str()
            })
            .cloned()
            .collect();
        events.sort_by_key(|e| e["eventTime"].as_str().unwrap_or("").to_owned());
        events
    }

    /// Deletes every Event of imagekeeper's on the node (so a test sees only its own).
    pub fn delete_imagekeeper_node_events(&self) {
        for event in self.imagekeeper_node_events() {
            let name = event["metadata"]["name"].as_str().expect("name");
            self.kubectl(&[
                "delete",
                "events.v1.events.k8s.io",
                "-n",
                "default",
                name,
                "--ignore-not-found",
            ]);
        }
    }
}

/// One `helm install` of the chart; `helm uninstall` on drop (and waits for its pod to go).
pub struct Release<'a> {
    pub cluster: &'a ClusterLab,
    pub name: String,
    pub install_output: String,
    pub installed_at: Instant,
    _values: tempfile::TempDir,
}

impl Release<'_> {
    /// The DaemonSet's (and its objects') name: the release name when it says imagekeeper.
    pub fn fullname(&self) -> String {
        if self.name.contains("imagekeeper") {
            self.name.clone()
        } else {
            format!("{}-imagekeeper", self.name)
        }
    }

    pub fn selector(&self) -> String {
        format!(
            "app.kubernetes.io/name=imagekeeper,app.kubernetes.io/instance={}",
            self.name
        )
    }

    /// Waits until the DaemonSet has one pod, Ready (the kubelet's readiness prober set it).
    pub fn wait_ready(&self, deadline: Duration) {
        let out = self.cluster.kubectl_output(&[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            &format!("ds/{}", self.fullname()),
            &format!("--timeout={}s", deadline.as_secs()),
        ]);
        if !out.status.success() {
            let pods = self.cluster.kubectl_output(&[
                "-n",
                NAMESPACE,
                "describe",
                "pods",
                "-l",
                &self.selector(),
            ]);
            panic!(
                "the DaemonSet {} did not become ready: {}\n{}",
                self.fullname(),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&pods.stdout)
            );
        }
    }

    /// The DaemonSet's one pod.
    pub fn pod(&self) -> serde_json::Value {
        let list =
            self.cluster
                .kubectl_json(&["-n", NAMESPACE, "get", "pods", "-l", &self.selector()]);
        let items = list["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "one pod of {} on the one node", self.name);
        items[0].clone()
    }

    pub fn pod_name(&self) -> String {
        self.pod()["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned()
    }

    /// `kubectl exec` of `imagekeeper ARGS` in the DaemonSet's pod, against the agent's admin
    /// socket and database there.
    pub fn imagekeeper(&self, args: &[&str]) -> Output {
        let ds = format!("ds/{}", self.fullname());
        let mut all = vec!["-n", NAMESPACE, "exec", ds.as_str(), "--", "imagekeeper"];
        all.extend_from_slice(args);
        all.extend([
            "--admin-socket",
            "/run/imagekeeper/admin.sock",
            "--db",
            "/var/lib/imagekeeper/records.redb",
        ]);
        self.cluster.kubectl_output(&all)
    }

    /// [`Self::imagekeeper`], which must succeed; its stdout.
    pub fn imagekeeper_ok(&self, args: &[&str]) -> String {
        let out = self.imagekeeper(args);
        assert!(
            out.status.success(),
            "kubectl exec imagekeeper {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl logs` of the pod's agent (JSON lines).
    pub fn logs(&self) -> String {
        self.cluster
            .kubectl(&["-n", NAMESPACE, "logs", &self.pod_name()])
    }

    /// The lines of `logs` containing every one of `parts`.
    pub fn lines_with<'l>(logs: &'l str, parts: &[&str]) -> Vec<&'l str> {
        logs.lines()
            .filter(|line| parts.iter().all(|p| line.contains(p)))
            .collect()
    }

    /// Waits for a log line of the agent containing every one of `parts`; returns it.
    pub async fn wait_for_log_line(&self, parts: &[&str], deadline: Duration) -> String {
        // Polled: `kubectl logs` is the observable of the agent in the pod (once a second).
        support::wait_for(
            &format!("an agent log line with {parts:?} (kubectl logs)"),
            deadline,
            || async {
                let logs = self.logs();
                let found = Self::lines_with(&logs, parts)
                    .first()
                    .map(|l| (*l).to_owned());
                if found.is_none() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                found
            },
        )
        .await
    }

    /// `helm upgrade --reuse-values` with these `--set`s and, when given, a new config file.
    pub fn upgrade(&self, config: Option<&str>, sets: &[String]) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let values = dir.path().join("config.yaml");
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/imagekeeper");
        let mut args: Vec<String> = vec![
            "upgrade".into(),
            self.name.clone(),
            chart.display().to_string(),
            "--namespace".into(),
            NAMESPACE.into(),
            "--reuse-values".into(),
        ];
        if let Some(config) = config {
            std::fs::write(
                &values,
                serde_yaml_ng::to_string(&serde_json::json!({ "config": config })).expect("YAML"),
            )
            .expect("write values");
            args.push("-f".into());
            args.push(values.display().to_string());
        }
        for set in sets {
            args.push("--set".into());
            args.push(set.clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.cluster.helm(&args);
    }
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let out = self.cluster.run_in_namespace(
            &self.cluster.env("CLUSTER_LAB_HELM"),
            &[
                "uninstall",
                &self.name,
                "--namespace",
                NAMESPACE,
                "--wait",
                "--timeout",
                "120s",
                "--ignore-not-found",
            ],
        );
        if !out.status.success() {
            eprintln!(
                "cleanup: helm uninstall {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The pod's containers and sandbox go with it (its grace period is 45 s at most).
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(90) {
            let pods = self.cluster.kubectl_output(&[
                "-n",
                NAMESPACE,
                "get",
                "pods",
                "-l",
                &self.selector(),
                "-o",
                "name",
            ]);
            if pods.status.success() && pods.stdout.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

fn checked(program: &str, args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
