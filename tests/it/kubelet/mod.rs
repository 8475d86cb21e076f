//! Tests beside a real kubelet: `scripts/kubelet-lab` runs kubelet v1.37.2 (standalone, no API
//! server) against the lab's containerd inside a network namespace, and these tests read what
//! happened through crictl and the kubelet's own log, not only through imagekeeper.
//!
//! Invariants: every test is `#[ignore = "needs the kubelet lab: ..."]` (a plain run lists it
//! as ignored; `scripts/test` runs it with the lab up) and calls [`kubelet_lab`] first, which
//! fails the test when `IMAGEKEEPER_KUBELET_LAB_ENV` (the kubelet.env `scripts/kubelet-lab up`
//! writes) is not set. The tests share one kubelet, so they hold [`KUBELET_LAB_LOCK`] (nextest runs them
//! one at a time anyway: `.config/nextest.toml`'s `kubelet-lab` group). What a test changes —
//! static pods, drop-ins, images it pulled — is undone when its [`KubeletLab`] is dropped; a
//! test that wrote a drop-in restarts the kubelet on drop so the next one meets the base
//! configuration.

mod lab;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, Lab, bin};

static KUBELET_LAB_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The containerd release the kubelet lab runs (the tests name it in their assertions):
/// scripts/kubelet-lab's default, the long-term release.
pub const CONTAINERD_RELEASE: &str = "2.3";

/// The node filesystem's hard eviction line a test's `evictionHard` drop-in repeats: the lab's
/// base config has it at 1 % (scripts/kubelet-lab: the kubelet's root dir is on this machine's
/// shared disk, whose free share builds move below the default 10 %), and a drop-in naming
/// `evictionHard` keeps it whether the kubelet merges the map key by key or takes it whole
/// with the defaults filled in.
pub const NODEFS_LINE: &str = "nodefs.available: \"1%\"";

/// The running kubelet lab, from kubelet.env and the cri-lab's lab.env beside it.
pub struct KubeletLab {
    pub lab: Lab,
    env_file: PathBuf,
    env: HashMap<String, String>,
    static_pods: Vec<PathBuf>,
    drop_ins: Vec<PathBuf>,
}

/// The kubelet lab, held so that its tests run one at a time; panics, failing the test
/// `test`, when `IMAGEKEEPER_KUBELET_LAB_ENV` is not set.
pub async fn kubelet_lab(test: &str) -> KubeletLab {
    let Some(env_file) = std::env::var_os("IMAGEKEEPER_KUBELET_LAB_ENV") else {
        panic!(
            "{test} needs the kubelet lab and IMAGEKEEPER_KUBELET_LAB_ENV is not set: start it \
             with `scripts/kubelet-lab up` and export IMAGEKEEPER_KUBELET_LAB_ENV=<lab dir>/kubelet.env ({})",
            support::RUN_THE_LAB_TESTS
        );
    };
    let serial = KUBELET_LAB_LOCK.lock().await;
    let env_file = PathBuf::from(env_file);
    let env = read_env(&env_file);
    let lab = support::load_lab(Path::new(&env["KUBELET_LAB_CRI_LAB_ENV"]), serial);
    KubeletLab {
        lab,
        env_file,
        env,
        static_pods: Vec::new(),
        drop_ins: Vec::new(),
    }
}

fn read_env(file: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|err| {
        panic!(
            "cannot read IMAGEKEEPER_KUBELET_LAB_ENV={}: {err} (scripts/kubelet-lab up)",
            file.display()
        )
    });
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect()
}

/// A static pod as the tests write them: host network (the lab's pods must), one container.
pub struct StaticPod<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub command: &'a [&'a str],
    /// `imagePullPolicy`: `Always` makes the kubelet pull (and write its pull record) even when
    /// the image is present.
    pub pull_policy: &'a str,
}

impl KubeletLab {
    /// The value of `key` in kubelet.env (as of the last start or restart).
    pub fn env(&self, key: &str) -> String {
        self.env
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("kubelet.env has no {key}: run scripts/kubelet-lab up again"))
    }

    pub fn root_dir(&self) -> PathBuf {
        PathBuf::from(self.env("KUBELET_LAB_ROOT_DIR"))
    }

    pub fn config_file(&self) -> PathBuf {
        PathBuf::from(self.env("KUBELET_LAB_CONFIG"))
    }

    pub fn config_dir(&self) -> PathBuf {
        PathBuf::from(self.env("KUBELET_LAB_CONFIG_DIR"))
    }

    /// The log of the kubelet now running (each start writes a new one).
    pub fn log_path(&self) -> PathBuf {
        PathBuf::from(self.env("KUBELET_LAB_LOG"))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).expect("the kubelet's log is readable")
    }

    /// Runs `scripts/kubelet-lab ARGS` against this lab; panics with its output on failure.
    pub fn script(&self, args: &[&str]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kubelet-lab");
        let out = Command::new(&script)
            .args(args)
            .env("CRI_LAB_DIR", &self.lab.dir)
            .output()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", script.display()));
        assert!(
            out.status.success(),
            "scripts/kubelet-lab {args:?} failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `scripts/kubelet-lab restart` (same root directory, config and drop-ins), then kubelet.env
    /// again: the new PID and log.
    pub fn restart(&mut self) {
        self.script(&["restart"]);
        self.env = read_env(&self.env_file);
    }

    /// `crictl ARGS` against the lab's containerd, run to its end.
    pub fn crictl_output(&self, args: &[&str]) -> std::process::Output {
        let endpoint = self.env("KUBELET_LAB_ENDPOINT");
        Command::new(self.env("KUBELET_LAB_CRICTL"))
            .args([
                "--runtime-endpoint",
                &endpoint,
                "--image-endpoint",
                &endpoint,
            ])
            .args(["--timeout", "30s"])
            .args(args)
            .output()
            .expect("crictl runs")
    }

    /// `crictl ARGS` against the lab's containerd; its stdout. Panics when crictl fails.
    pub fn crictl(&self, args: &[&str]) -> String {
        let out = self.crictl_output(args);
        assert!(
            out.status.success(),
            "crictl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The image ids `crictl images` lists now.
    pub fn crictl_image_ids(&self) -> Vec<String> {
        let json: serde_json::Value =
            serde_json::from_str(&self.crictl(&["images", "-o", "json"])).expect("crictl JSON");
        json["images"]
            .as_array()
            .expect("images array")
            .iter()
            .map(|image| image["id"].as_str().expect("id").to_owned())
            .collect()
    }

    /// Writes a static pod manifest; the kubelet (fileCheckFrequency 1s) starts it.
    pub fn add_static_pod(&mut self, pod: &StaticPod<'_>) {
        let dir = PathBuf::from(self.env("KUBELET_LAB_STATIC_POD_DIR"));
        let path = dir.join(format!("{}.yaml", pod.name));
        let command: Vec<String> = pod.command.iter().map(|c| format!("{c:?}")).collect();
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
             hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
             image: {image}\n    imagePullPolicy: {policy}\n    command: [{command}]\n",
            name = pod.name,
            image = pod.image,
            policy = pod.pull_policy,
            command = command.join(", ")
        );
        write_atomically(&path, &manifest);
        self.static_pods.push(path);
    }

    /// Registers a static pod manifest a test wrote itself, for removal on drop.
    pub fn own_static_pod(&mut self, path: PathBuf) {
        self.static_pods.push(path);
    }

    /// Deletes a static pod's manifest; the kubelet stops and removes the pod.
    pub fn remove_static_pod(&mut self, name: &str) {
        let dir = PathBuf::from(self.env("KUBELET_LAB_STATIC_POD_DIR"));
        let path = dir.join(format!("{name}.yaml"));
        std::fs::remove_file(&path).expect("remove the static pod manifest");
        self.static_pods.retain(|p| p != &path);
    }

    /// Writes a drop-in (`<config dir>/<name>.conf`) of KubeletConfiguration fields; it takes
    /// effect at the next [`KubeletLab::restart`].
    pub fn write_drop_in(&mut self, name: &str, fields: &str) -> PathBuf {
        let path = self.config_dir().join(format!("{name}.conf"));
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{fields}"
        );
        write_atomically(&path, &text);
        if !self.drop_ins.contains(&path) {
            self.drop_ins.push(path.clone());
        }
        path
    }

    /// The drop-in `70-imagefs-pressure`: the eviction manager evicts below 99 % free on the
    /// image filesystem (so its DeleteUnusedImages runs every 10 s) and any image older than
    /// 1 s may go; the node filesystem's line as the base config's. Takes effect at the next
    /// [`KubeletLab::restart`].
    pub fn write_imagefs_pressure_drop_in(&mut self) -> PathBuf {
        self.write_drop_in(
            "70-imagefs-pressure",
            &crate::support::imagefs_pressure_fields(),
        )
    }

    /// Removes a drop-in [`KubeletLab::write_drop_in`] wrote; the kubelet reads its config
    /// without it at the next [`KubeletLab::restart`].
    pub fn remove_drop_in(&mut self, path: &Path) {
        std::fs::remove_file(path).expect("remove the drop-in");
        self.drop_ins.retain(|p| p != path);
    }

    /// Writes a static pod manifest of the test's own (`<name>.yaml`, removed on drop).
    pub fn add_static_pod_manifest(&mut self, name: &str, manifest: &str) {
        let dir = PathBuf::from(self.env("KUBELET_LAB_STATIC_POD_DIR"));
        let path = dir.join(format!("{name}.yaml"));
        write_atomically(&path, manifest);
        self.static_pods.push(path);
    }

    /// The id of the running container of the static pod `name` (crictl), once there is one.
    pub async fn running_container(&self, name: &str, deadline: Duration) -> String {
        // Polled: the kubelet announces a started container in its log only at --v=4 wording
        // that is not a contract; crictl's answer is the observable.
        support::wait_for(
            &format!("a running container of static pod {name} (crictl ps)"),
            deadline,
            || async {
                let out = self.crictl(&[
                    "ps",
                    "-q",
                    "--state",
                    "running",
                    "--label",
                    &format!(
                        "io.kubernetes.pod.name={name}-{}",
                        self.env("KUBELET_LAB_NODE_NAME")
                    ),
                ]);
                out.lines().next().map(str::to_owned)
            },
        )
        .await
    }

    /// Waits until the kubelet has stopped static pod `name` (its sandbox NotReady, no
    /// container running, in crictl), then removes the stopped sandbox and its exited
    /// containers with `crictl rmp`: what the kubelet's container GC does for a deleted pod at
    /// its next pass (every minute), done at once so a test does not wait for it.
    pub async fn pod_gone(&self, name: &str, deadline: Duration) {
        let label = format!(
            "io.kubernetes.pod.name={name}-{}",
            self.env("KUBELET_LAB_NODE_NAME")
        );
        // Polled: crictl's list is the observable of the kubelet's pod teardown.
        let stopped = support::wait_for(
            &format!("static pod {name} to be stopped by the kubelet (crictl pods)"),
            deadline,
            || async {
                let ready = self.crictl(&["pods", "-q", "--state", "ready", "--label", &label]);
                let running = self.crictl(&["ps", "-q", "--state", "running", "--label", &label]);
                (ready.trim().is_empty() && running.trim().is_empty())
                    .then(|| self.crictl(&["pods", "-q", "--label", &label]))
            },
        )
        .await;
        for sandbox in stopped.lines() {
            self.crictl(&["rmp", sandbox]);
        }
    }

    /// Waits for a line of the current kubelet log that contains every one of `parts`, at or
    /// after byte `from`; returns (that line, when it was seen). On a timeout it panics with
    /// what the kubelet logged since `from` that explains a missing pass: its eviction
    /// manager's and image GC's lines, its warnings and errors, and the log's last lines (the
    /// lab's directory, and the log with it, is gone when CI prints the failure).
    pub async fn wait_for_log_line(
        &self,
        parts: &[&str],
        from: usize,
        deadline: Duration,
    ) -> (String, Instant) {
        // Polled: the kubelet's log is the observable of its GC and eviction passes.
        let found = support::try_wait_for(deadline, || async {
            self.log()
                .get(from..)
                .unwrap_or_default()
                .lines()
                .find(|line| parts.iter().all(|p| line.contains(p)))
                .map(|line| (line.to_owned(), Instant::now()))
        })
        .await;
        found.unwrap_or_else(|| {
            let log = self.log();
            panic!(
                "timed out after {deadline:?} waiting for a kubelet log line with {parts:?} in \
                 {}; since then the kubelet logged:\n{}",
                self.log_path().display(),
                log_excerpt(log.get(from..).unwrap_or_default())
            )
        })
    }

    /// `curl` inside the lab's network namespace (the kubelet listens on its loopback).
    pub fn curl_in_namespace(&self, url: &str) -> String {
        self.script(&["exec", "curl", "-sSk", "-m", "10", url])
    }
}

impl Drop for KubeletLab {
    fn drop(&mut self) {
        let had_pods = !self.static_pods.is_empty();
        for path in self.static_pods.drain(..) {
            let _ = std::fs::remove_file(path);
        }
        let had_drop_ins = !self.drop_ins.is_empty();
        for path in self.drop_ins.drain(..) {
            let _ = std::fs::remove_file(path);
        }
        if had_pods {
            // The kubelet stops the pods within its file check (1 s) and their grace (1 s);
            // their stopped sandboxes are then removed as `pod_gone` does.
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                let ready = self.crictl_output(&["pods", "-q", "--state", "ready"]);
                if ready.status.success() && ready.stdout.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let pods = self.crictl_output(&["pods", "-q", "--state", "notready"]);
            for sandbox in String::from_utf8_lossy(&pods.stdout).lines() {
                let _ = self.crictl_output(&["rmp", sandbox]);
            }
        }
        if had_drop_ins {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kubelet-lab");
            let status = Command::new(&script)
                .arg("restart")
                .env("CRI_LAB_DIR", &self.lab.dir)
                .status();
            if !status.is_ok_and(|s| s.success()) {
                eprintln!("cleanup: scripts/kubelet-lab restart failed");
            }
        }
    }
}

/// `imagekeeper run` beside the kubelet, as a process; its stderr goes to a file the test
/// reads. Killed and reaped on drop.
pub struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    pub fn spawn(kl: &KubeletLab, dir: &Path, db: &Path, extra: &[&str]) -> Agent {
        let log = dir.join("agent.log");
        let stderr = std::fs::File::create(&log).expect("agent log");
        let child = bin::imagekeeper()
            .args(["run", "--container-runtime-endpoint"])
            .arg(kl.env("KUBELET_LAB_ENDPOINT"))
            .arg("--db")
            .arg(db)
            .arg("--admin-socket")
            .arg(dir.join("admin.sock"))
            .arg("--kubelet-root-dir")
            .arg(kl.root_dir())
            .args(["--metrics-address", "127.0.0.1:0"])
            // Probes on the metrics listener: the default 127.0.0.1:9898 is the DaemonSet pod's
            // (deploy::lab runs it on the host network while this group runs beside it).
            .args(["--healthz-address", ""])
            .args(extra)
            .env("IMAGEKEEPER_LOG", "imagekeeper=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn imagekeeper run");
        Agent { child, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for a line of the agent's log containing every one of `parts`, after byte `from`.
    pub async fn wait_for_line(&self, parts: &[&str], from: usize) -> String {
        // Polled: the agent's log is the observable of its detects and marks.
        support::wait_for(
            &format!("an agent log line with {parts:?}"),
            Duration::from_secs(60),
            || async {
                self.log()
                    .get(from..)
                    .unwrap_or_default()
                    .lines()
                    .find(|line| parts.iter().all(|p| line.contains(p)))
                    .map(str::to_owned)
            },
        )
        .await
    }

    /// SIGTERM, then waits for the exit (the database is closed after it).
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait().expect("wait for the agent");
        assert!(
            status.success(),
            "the agent exited {status}: {}",
            self.log()
        );
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `text` to a hidden file beside `path` and renames it into place: the kubelet's static
/// pod source skips hidden files and reads only whole manifests.
fn write_atomically(path: &Path, text: &str) {
    let name = path.file_name().expect("a file name").to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The lines of a kubelet log that explain a pass that did not come: the eviction manager's
/// and the image GC's (their last 40), warnings and errors (their last 20), then the log's
/// last 15 lines.
fn log_excerpt(log: &str) -> String {
    fn last<'a>(lines: impl Iterator<Item = &'a str>, n: usize) -> Vec<&'a str> {
        let all: Vec<&str> = lines.collect();
        all[all.len().saturating_sub(n)..].to_vec()
    }
    let passes = last(
        log.lines()
            .filter(|l| l.contains("eviction_manager.go") || l.contains("image_gc_manager.go")),
        40,
    );
    let problems = last(
        log.lines()
            .filter(|l| l.starts_with('E') || l.starts_with('W')),
        20,
    );
    let tail = last(log.lines(), 15);
    format!(
        "-- eviction manager and image GC --\n{}\n-- warnings and errors --\n{}\n-- last lines --\n{}",
        passes.join("\n"),
        problems.join("\n"),
        tail.join("\n")
    )
}
