//! Helpers shared by the integration tests: the lab (`scripts/cri-lab`) as the tests see it,
//! waiting on a condition with a deadline, running the binary ([`bin`]), the agent as a
//! process ([`agent`]) and the lab's password registry ([`registry`]).
//!
//! Invariants: a lab test is `#[ignore = "needs the <which> lab: ..."]`, so a plain
//! `cargo nextest run` lists it as ignored with that reason and `scripts/test` runs it
//! (`--run-ignored all`, with the labs up). It calls [`lab`] first, which fails the test, naming
//! what to start, when `IMAGEKEEPER_LAB_ENV` is not set: a lab test run without its lab fails,
//! never passes. Lab tests also hold the lab's lock so that they run one at a time even under
//! plain `cargo test` (nextest runs them one at a time anyway).

pub mod agent;
pub mod bin;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use imagekeeper::cri::{ContainerSpec, CriClient, CriConfig, ImageRuntime, SandboxSpec};
use imagekeeper::store::Store;

/// A containerd release the lab runs (`scripts/cri-lab up --containerd 2.3|2.4|1.7|2.1|1.6`),
/// with the facts the lab tests assert of it (each checked on this machine kind, see
/// ../shared/README.md and the lab tests that assert them). `scripts/test` runs 2.3 (the
/// long-term release), 2.4 and 1.7 (the last 1.x); 2.1 and 1.6, past their end of life, run by
/// name (`IMAGEKEEPER_LAB_RELEASES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerdRelease {
    /// 1.6.20 (Debian 12): no GetContainerEvents, never `pinned`, no image volumes.
    V1_6,
    /// 1.7.24 (Debian 13): events stream, sandbox image and labelled images pinned.
    V1_7,
    /// 2.1.9 (Debian unstable): as 1.7, plus image volumes (CRI Mount `image`).
    V2_1,
    /// 2.3.7, built from containerd's Go module: as 2.1.
    V2_3,
    /// 2.4.2, built from containerd's Go module: as 2.1.
    V2_4,
}

impl ContainerdRelease {
    /// The release as `scripts/cri-lab` names it ("1.6", "1.7", "2.1", "2.3", "2.4").
    pub fn name(self) -> &'static str {
        match self {
            ContainerdRelease::V1_6 => "1.6",
            ContainerdRelease::V1_7 => "1.7",
            ContainerdRelease::V2_1 => "2.1",
            ContainerdRelease::V2_3 => "2.3",
            ContainerdRelease::V2_4 => "2.4",
        }
    }

    /// Whether the release is a 2.x one (image volumes; no sandbox image in the verbose
    /// Status).
    pub fn is_v2(self) -> bool {
        matches!(
            self,
            ContainerdRelease::V2_1 | ContainerdRelease::V2_3 | ContainerdRelease::V2_4
        )
    }

    /// Whether the release serves CRI GetContainerEvents (all but 1.6, which answers
    /// Unimplemented).
    pub fn serves_container_events(self) -> bool {
        self != ContainerdRelease::V1_6
    }

    /// Whether the release lists its sandbox image and images labelled
    /// `io.cri-containerd.pinned=pinned` as `pinned: true` (all but 1.6, which never pins).
    pub fn pins(self) -> bool {
        self != ContainerdRelease::V1_6
    }
}

/// One row of the lab's images.tsv.
#[derive(Clone, Debug)]
pub struct LabImage {
    pub reference: String,
    pub manifest_digest: String,
    pub image_id: String,
    pub size: u64,
    pub build_tag: String,
}

impl LabImage {
    /// `<repository>@<manifest digest>`.
    pub fn by_digest(&self) -> String {
        let repository = self
            .reference
            .rsplit_once(':')
            .map_or(self.reference.as_str(), |(repo, _)| repo);
        format!("{repository}@{}", self.manifest_digest)
    }
}

/// The running lab, from lab.env and images.tsv.
#[derive(Debug)]
pub struct Lab {
    pub dir: PathBuf,
    pub endpoint: String,
    pub image_prefix: String,
    pub imagefs_mountpoint: String,
    pub pod_log_dir: PathBuf,
    /// The sandbox (pause) image containerd runs pods with (CRI_LAB_SANDBOX_IMAGE).
    pub sandbox_image: String,
    pub images: Vec<LabImage>,
    /// Every `KEY=value` of lab.env (read with [`Lab::env`]).
    env: HashMap<String, String>,
    /// An image of 3000 small files, pushed but not in images.tsv (CRI_LAB_FILES_IMAGE; `None`
    /// in a lab started before it existed).
    pub files_image: Option<String>,
    /// The tmpfs mounted at containerd's root (CRI_LAB_IMAGEFS_ROOT; `None` likewise).
    pub imagefs_root: Option<PathBuf>,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

static LAB_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Lab {
    /// The images.tsv row of `reference` (e.g. "busybox:1.35", without the registry prefix).
    pub fn image(&self, short_reference: &str) -> &LabImage {
        let reference = format!("{}/{short_reference}", self.image_prefix);
        self.images
            .iter()
            .find(|image| image.reference == reference)
            .unwrap_or_else(|| panic!("images.tsv has no row for {reference}"))
    }

    /// The value of `key` in lab.env; panics naming the key when the lab's lab.env lacks it
    /// (a lab started by an older `scripts/cri-lab`: start it again).
    pub fn env(&self, key: &str) -> String {
        self.env
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("lab.env has no {key}: run scripts/cri-lab up again"))
    }

    /// The lab release's `ctr` (its bin dir from lab.env, else the system's) on the lab's
    /// socket, in the CRI's namespace (`k8s.io`). The system's `ctr` may be of another release
    /// than the lab's containerd.
    pub fn ctr(&self) -> std::process::Command {
        let bin = self.env_or("CRI_LAB_CONTAINERD_BIN", "/usr/bin");
        let mut command = std::process::Command::new(Path::new(&bin).join("ctr"));
        command
            .arg("--address")
            .arg(self.dir.join("containerd/containerd.sock"))
            .args(["-n", "k8s.io"]);
        command
    }

    /// The value of `key` in lab.env, or `default` when a lab started by an older
    /// `scripts/cri-lab` lacks it.
    pub fn env_or(&self, key: &str, default: &str) -> String {
        self.env
            .get(key)
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    }

    /// The containerd release the lab runs (`CRI_LAB_CONTAINERD` in lab.env, written by
    /// `scripts/cri-lab up --containerd R`; a lab.env without it is 1.6's, the default). Lab
    /// tests whose facts differ by release assert that release's facts, each named.
    pub fn containerd_release(&self) -> ContainerdRelease {
        match self.env_or("CRI_LAB_CONTAINERD", "1.6").as_str() {
            "1.6" => ContainerdRelease::V1_6,
            "1.7" => ContainerdRelease::V1_7,
            "2.1" => ContainerdRelease::V2_1,
            "2.3" => ContainerdRelease::V2_3,
            "2.4" => ContainerdRelease::V2_4,
            other => {
                panic!("lab.env names containerd release {other:?}: not 1.6, 1.7, 2.1, 2.3 or 2.4")
            }
        }
    }

    /// Removes `image` from the lab's containerd (absent is fine), so that a later success
    /// means a real pull.
    pub async fn remove_image(&self, image: &str) {
        self.client()
            .await
            .remove_image(image, "")
            .await
            .expect("RemoveImage (absent is fine)");
    }

    /// containerd's log (written by `scripts/cri-lab`, info level: one line per PullImage).
    pub fn containerd_log(&self) -> PathBuf {
        self.dir.join("containerd/containerd.log")
    }

    /// A client of the lab's containerd with deadlines generous for a slow machine.
    pub async fn client(&self) -> CriClient {
        CriClient::connect(lab_config(&self.endpoint))
            .await
            .expect("the lab's endpoint is a valid unix:// endpoint")
    }

    /// Runs `scripts/cri-lab <command>` against this lab.
    pub fn run_lab_script(&self, command: &str) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cri-lab");
        let status = std::process::Command::new(&script)
            .arg(command)
            .env("CRI_LAB_DIR", &self.dir)
            .status()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", script.display()));
        assert!(
            status.success(),
            "scripts/cri-lab {command} failed: {status}"
        );
    }
}

/// A scratch store: a new `records.redb` in a temp dir of its own, opened at `now`. The
/// `TempDir` removes the directory when dropped: keep it as long as the store.
pub fn temp_store(now: imagekeeper::model::UnixNanos) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("records.redb"), now).expect("open the scratch store");
    (dir, store)
}

/// A table the CLI printed, as rows of cells (columns are at least three spaces apart).
pub fn table_rows(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .map(|l| {
            l.split("   ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect()
}

pub fn lab_config(endpoint: &str) -> CriConfig {
    CriConfig {
        runtime_endpoint: endpoint.to_string(),
        image_endpoint: None,
        connect_timeout: Duration::from_secs(5),
        call_timeout: Duration::from_secs(60),
        pull_timeout: None,
    }
}

/// Whether a missing tool of the lab suite (helm, promtool, prometheus: [`tool`]) fails a
/// test rather than skipping it: `IMAGEKEEPER_REQUIRE_LAB=1`, as `scripts/test` sets. A lab
/// test needs no such switch: it runs only when asked (`--run-ignored`) and fails without
/// its lab.
pub fn lab_required() -> bool {
    std::env::var("IMAGEKEEPER_REQUIRE_LAB").is_ok_and(|v| v == "1")
}

/// How to run the lab tests, for the failure of one that was run without its lab.
pub const RUN_THE_LAB_TESTS: &str = "lab tests are #[ignore]d in a plain run; scripts/test \
     starts the labs and runs them with `cargo nextest run --run-ignored all`";

/// The lab (`IMAGEKEEPER_LAB_ENV`), held so that its tests run one at a time. Panics, failing
/// the test `test`, when `IMAGEKEEPER_LAB_ENV` is not set: the test was run (its `#[ignore]`
/// overridden) without the lab.
pub async fn lab(test: &str) -> Lab {
    let Some(env_file) = std::env::var_os("IMAGEKEEPER_LAB_ENV") else {
        panic!(
            "{test} needs the lab and IMAGEKEEPER_LAB_ENV is not set: start the lab with \
             `scripts/cri-lab up` and export IMAGEKEEPER_LAB_ENV=<lab dir>/lab.env ({RUN_THE_LAB_TESTS})"
        );
    };
    let serial = LAB_LOCK.lock().await;
    load_lab(Path::new(&env_file), serial)
}

/// The environment variable `var` a lab test needs beside its lab (an image `scripts/test`
/// pushed), non-empty; panics naming how to set it, failing the test `test`, when it is not.
pub fn lab_var(test: &str, var: &str, how: &str) -> String {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!("{test} needs {var}, which is not set: {how} ({RUN_THE_LAB_TESTS})"),
    }
}

/// The lab described by the lab.env at `env_file` (and its images.tsv), held with `serial`
/// (the lock that keeps the tests of that lab one at a time).
pub fn load_lab(env_file: &Path, serial: tokio::sync::MutexGuard<'static, ()>) -> Lab {
    let text = std::fs::read_to_string(env_file).unwrap_or_else(|err| {
        panic!(
            "cannot read IMAGEKEEPER_LAB_ENV={}: {err} (is the lab up? scripts/cri-lab up)",
            env_file.display()
        )
    });
    let env: HashMap<String, String> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
        .collect();
    let get = |key: &str| {
        env.get(key)
            .cloned()
            .unwrap_or_else(|| panic!("lab.env has no {key}"))
    };
    let tsv = get("CRI_LAB_IMAGES_TSV");
    let images = std::fs::read_to_string(&tsv)
        .unwrap_or_else(|err| panic!("cannot read {tsv}: {err}"))
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(parse_image_row)
        .collect();
    Lab {
        dir: PathBuf::from(get("CRI_LAB_DIR")),
        endpoint: get("CRI_ENDPOINT"),
        image_prefix: get("CRI_LAB_IMAGE_PREFIX"),
        imagefs_mountpoint: get("CRI_LAB_IMAGEFS_MOUNTPOINT"),
        pod_log_dir: PathBuf::from(get("CRI_LAB_POD_LOG_DIR")),
        sandbox_image: get("CRI_LAB_SANDBOX_IMAGE"),
        images,
        files_image: env.get("CRI_LAB_FILES_IMAGE").cloned(),
        imagefs_root: env.get("CRI_LAB_IMAGEFS_ROOT").map(PathBuf::from),
        env,
        _serial: serial,
    }
}

fn parse_image_row(line: &str) -> LabImage {
    let fields: Vec<&str> = line.split('\t').collect();
    assert_eq!(
        fields.len(),
        5,
        "images.tsv rows have 5 tab-separated fields: {line:?}"
    );
    LabImage {
        reference: fields[0].to_string(),
        manifest_digest: fields[1].to_string(),
        image_id: fields[2].to_string(),
        size: fields[3]
            .parse()
            .unwrap_or_else(|err| panic!("bad size in images.tsv row {line:?}: {err}")),
        build_tag: fields[4].to_string(),
    }
}

/// Polls `check` until it returns `Some`, at most until `deadline` has passed; panics then,
/// naming `what`.
///
/// Only for a state that no signal announces (another process's write, a call counted by the
/// fake runtime, a cycle the agent does not report): where one exists (the agent's READY=1 on
/// its NOTIFY_SOCKET, a child's exit, a channel), wait on it and assert once. A caller says in
/// a comment why it polls. The deadline guards only against a hang.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    try_wait_for(deadline, check)
        .await
        .unwrap_or_else(|| panic!("timed out after {deadline:?} waiting for {what}"))
}

/// As [`wait_for`], but `None` once `deadline` has passed, for a caller that says more than
/// `wait_for`'s message when it panics.
pub async fn try_wait_for<T, F, Fut>(deadline: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
/// One blocking HTTP/1.1 GET to the agent's metrics and health server: the whole response,
/// head and body (the request asks the server to close the connection after it).
pub fn http_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(address).expect("connect metrics");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    conn.read_to_string(&mut out).expect("read");
    out
}

/// (status code, body) of an HTTP/1.1 GET of `path` at `address` from async code, or `None`
/// when nothing answers (yet) or the answer is not HTTP: for polling a server that is starting.
pub async fn http_status(address: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(address).await.ok()?;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: node\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut out))
        .await
        .ok()?
        .ok()?;
    let status = out.get(9..12)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// The address in an agent's "Serving metrics" log line (text format), if `log` has one.
///
/// Tests start the agent with `--metrics-address 127.0.0.1:0` and learn the port the kernel
/// chose from this line: choosing a free port first and passing it on races with anything
/// else on the machine taking it in between.
pub fn metrics_address_in_log(log: &str) -> Option<String> {
    log.lines()
        .filter(|line| line.contains("Serving metrics"))
        .find_map(|line| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
        })
        .map(str::to_owned)
}

/// Reads a running agent's stderr (text logs, no ANSI since it is a pipe) until its
/// "Serving metrics" line and returns that address; the rest of the stream is drained on a
/// thread so the agent never blocks on a full pipe. Panics if the agent's stderr ends first
/// (it exited), or after `deadline` (only against a hang).
pub async fn metrics_address_from_stderr(
    stderr: std::process::ChildStderr,
    deadline: Duration,
) -> String {
    use std::io::BufRead;
    let (found_tx, found_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut found_tx = Some(found_tx);
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if found_tx.is_some() {
                seen.push_str(&line);
                seen.push('\n');
                if let Some(address) = metrics_address_in_log(&line)
                    && let Some(tx) = found_tx.take()
                {
                    let _ = tx.send(Ok(address));
                }
            }
        }
        if let Some(tx) = found_tx {
            let _ = tx.send(Err(seen));
        }
    });
    match tokio::time::timeout(deadline, found_rx).await {
        Ok(Ok(Ok(address))) => address,
        Ok(Ok(Err(log))) => panic!("the agent's stderr ended before \"Serving metrics\": {log}"),
        Ok(Err(_)) => panic!("the stderr reader thread ended without an answer"),
        Err(_) => panic!("no \"Serving metrics\" line within {deadline:?}"),
    }
}

/// Stops and removes a pod sandbox (and so its containers) when dropped, even after a failed
/// assertion: on its own thread and runtime, since the test's runtime may be unwinding.
pub struct PodGuard {
    pub endpoint: String,
    pub sandbox_id: String,
}

impl Drop for PodGuard {
    fn drop(&mut self) {
        let endpoint = self.endpoint.clone();
        let sandbox_id = self.sandbox_id.clone();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime can be built");
            runtime.block_on(async {
                let client = CriClient::connect(lab_config(&endpoint))
                    .await
                    .expect("valid endpoint");
                if let Err(err) = client.stop_pod_sandbox(&sandbox_id).await {
                    eprintln!("cleanup: StopPodSandbox {sandbox_id}: {err}");
                }
                if let Err(err) = client.remove_pod_sandbox(&sandbox_id).await {
                    eprintln!("cleanup: RemovePodSandbox {sandbox_id}: {err}");
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// A host-network pod sandbox named `name` with its log directory under the lab's pod logs.
pub fn sandbox_spec(lab: &Lab, name: &str) -> SandboxSpec {
    let uid = format!("{name}-{}", std::process::id());
    let log_directory: PathBuf = lab.pod_log_dir.join(&uid);
    std::fs::create_dir_all(&log_directory).expect("the lab's pod log dir is writable");
    SandboxSpec {
        name: name.to_string(),
        uid,
        namespace: "imagekeeper-test".to_string(),
        log_directory: log_directory.display().to_string(),
        host_network: true,
        ..SandboxSpec::default()
    }
}

/// Runs `container` in a new host-network pod named `pod` (RunPodSandbox, CreateContainer,
/// StartContainer) and returns the pod's guard (it removes the pod and its containers) and the
/// container's id. Panics naming the call that failed.
pub async fn run_in_new_pod(
    lab: &Lab,
    client: &CriClient,
    pod: &str,
    container: &ContainerSpec,
) -> (PodGuard, String) {
    let sandbox = sandbox_spec(lab, pod);
    let sandbox_id = client
        .run_pod_sandbox(&sandbox)
        .await
        .unwrap_or_else(|err| panic!("RunPodSandbox of {pod}: {err}"));
    let guard = PodGuard {
        endpoint: lab.endpoint.clone(),
        sandbox_id: sandbox_id.clone(),
    };
    let container_id = client
        .create_container(&sandbox_id, &sandbox, container)
        .await
        .unwrap_or_else(|err| panic!("CreateContainer {} in {pod}: {err}", container.name));
    client
        .start_container(&container_id)
        .await
        .unwrap_or_else(|err| panic!("StartContainer {} in {pod}: {err}", container.name));
    (guard, container_id)
}

/// A container of `image` that sleeps for an hour.
pub fn sleeper(name: &str, image: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.to_owned(),
        image: image.to_owned(),
        command: vec!["/bin/sleep".to_owned(), "3600".to_owned()],
        ..ContainerSpec::default()
    }
}

/// A small tmpfs mounted on a temp dir, unmounted (lazily) when dropped: a real filesystem that
/// fills up. Mounting needs root (CAP_SYS_ADMIN); without it [`Tmpfs::mount`] says the test
/// is skipped and returns `None`. Any other mount failure is a panic.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(test: &str, size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes())
            .expect("temp dir path has no NUL");
        let options =
            std::ffi::CString::new(format!("size={size},mode=0700")).expect("no NUL in options");
        // SAFETY: mount(2) with valid NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EPERM) {
                eprintln!("SKIPPED {test}: mounting a tmpfs needs root (CAP_SYS_ADMIN): {err}");
                return None;
            }
            panic!(
                "mount -t tmpfs -o size={size} on {}: {err}",
                dir.path().display()
            );
        }
        Some(Tmpfs { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem with `filler`, written until the disk is full (ENOSPC).
    pub fn fill(&self, filler: &Path) {
        Tmpfs::fill_at(self.path(), filler);
    }

    /// [`Tmpfs::fill`] for a filler under `root`, without the guard at hand.
    pub fn fill_at(root: &Path, filler: &Path) {
        assert!(filler.starts_with(root), "the filler lives on the tmpfs");
        use std::io::Write as _;
        let mut file = std::fs::File::create(filler).expect("create the filler file");
        let chunk = vec![0x5a_u8; 4096];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("writing the filler: {e}"),
            }
        }
        // Single bytes until not even one fits.
        while let Ok(1) = file.write(&[0x5a]) {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let Ok(target) = std::ffi::CString::new(self.dir.path().as_os_str().as_encoded_bytes())
        else {
            return;
        };
        // SAFETY: umount2(2) on the directory this guard mounted.
        let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        if rc != 0 {
            eprintln!(
                "cleanup: umount {}: {}",
                self.dir.path().display(),
                std::io::Error::last_os_error()
            );
        }
    }
}

/// An external tool the deploy and monitoring tests run (`helm`, `promtool`, `prometheus`):
/// the path in `env_var` (scripts/tools prints them and scripts/test exports them), else the
/// name on PATH. `None` (after a skip line) when neither runs and the lab is not required;
/// with `IMAGEKEEPER_REQUIRE_LAB=1` a missing tool fails the test.
pub fn tool(test: &str, name: &str, env_var: &str) -> Option<PathBuf> {
    if let Some(candidate) = runnable_tool(name, env_var) {
        return Some(candidate);
    }
    let required = lab_required();
    assert!(
        !required,
        "IMAGEKEEPER_REQUIRE_LAB=1 but {name} does not run ({env_var}={:?}): run scripts/tools \
         and export what it prints, or run scripts/test",
        std::env::var_os(env_var)
    );
    println!("SKIPPED {test}: {name} is not installed (scripts/tools installs it)");
    None
}

/// [`tool`] for a lab test (run only when asked, with the lab suite's tools installed): the
/// tool, or a panic naming how to install it.
pub fn lab_tool(test: &str, name: &str, env_var: &str) -> PathBuf {
    runnable_tool(name, env_var).unwrap_or_else(|| {
        panic!(
            "{test} needs {name}, which does not run ({env_var}={:?}): run scripts/tools and \
             export what it prints ({RUN_THE_LAB_TESTS})",
            std::env::var_os(env_var)
        )
    })
}

/// The tool's path in `env_var`, else `name` on PATH, if it runs (`--help`).
fn runnable_tool(name: &str, env_var: &str) -> Option<PathBuf> {
    let candidate = std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(name));
    std::process::Command::new(&candidate)
        .arg("--help")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
        .then_some(candidate)
}

/// The ids of the images the runtime lists now.
pub async fn listed_image_ids(client: &CriClient) -> BTreeSet<String> {
    client
        .list_images()
        .await
        .expect("ListImages answers")
        .into_iter()
        .map(|image| image.id.0)
        .collect()
}

/// A log sink for one test's tracing events, installed as the thread's default subscriber by
/// [`CapturedLog::install`] (a current-thread runtime's spawned tasks log to it too).
#[derive(Clone, Default)]
pub struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    /// A sink, and the guard that keeps it the thread's subscriber (plain text, no colours).
    pub fn install() -> (CapturedLog, tracing::subscriber::DefaultGuard) {
        let log = CapturedLog::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let log = log.clone();
                move || log.clone()
            })
            .with_ansi(false)
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (log, guard)
    }

    /// The log lines written since the last call.
    pub fn take(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.0.lock().expect("log buffer"));
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// A kubelet config drop-in's fields (after its apiVersion and kind) that put the kubelet under
/// imagefs pressure: the eviction manager evicts below 99 % free on the image filesystem (so
/// its DeleteUnusedImages runs every 10 s) and any image older than 1 s may go; the node
/// filesystem's line as the labs' base configs have it (the kubelet and cluster labs).
pub fn imagefs_pressure_fields() -> String {
    format!(
        "imageMinimumGCAge: 1s\nevictionHard:\n  imagefs.available: \"99%\"\n  {}\n",
        crate::kubelet::NODEFS_LINE
    )
}

/// A pod manifest (namespace `default`, host network, never restarted) whose init container
/// `wait` (image `init`) runs until the file `open` exists in `gate` (a hostPath directory),
/// and whose main container (image `main`) then runs `true`: a main image in no container
/// while the init container runs, as long as the test wants (issue 55's bound-pod cases in
/// the cluster and kubelet labs).
pub fn init_gated_pod_manifest(name: &str, gate: &Path, init: &str, main: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
         spec:\n  hostNetwork: true\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n\
         \x20 volumes:\n  - {{name: gate, hostPath: {{path: {gate}, type: Directory}}}}\n\
         \x20 initContainers:\n  - name: wait\n    image: {init}\n    imagePullPolicy: IfNotPresent\n\
         \x20   command: [sh, -c, \"until [ -e /gate/open ]; do sleep 1; done\"]\n\
         \x20   volumeMounts: [{{name: gate, mountPath: /gate}}]\n\
         \x20 containers:\n  - {{name: main, image: {main}, imagePullPolicy: IfNotPresent, \
         command: [\"true\"]}}\n",
        gate = gate.display()
    )
}
