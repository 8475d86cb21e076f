//! `imagekeeper run`, `gc` and `prune` as processes, against the in-process fake CRI server
//! (the real-containerd versions live in the lab modules and the demo): configuration errors,
//! the admin socket, the metrics endpoint, a second agent, SIGTERM mid-cycle, a dead runtime.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use std::sync::Arc;

use imagekeeper::admin::{
    self, AdminBackend, AdminClient, AdminError, AdminLimits, EnsureImageError, EnsureRequest,
    GcOutcome,
};
use imagekeeper::model::ImageId;
use imagekeeper::store::Store;

use crate::support::agent::{AgentChild, AgentFixture, image, next_notify};
use crate::support::{http_get, wait_for};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
}

fn output(args: &[&str]) -> Output {
    bin().args(args).output().expect("run imagekeeper")
}

/// A running agent process with the service manager's side of its NOTIFY_SOCKET, killed on
/// drop if still alive.
struct AgentProcess {
    agent: AgentChild,
    /// The service manager's side of the agent's NOTIFY_SOCKET (its directory kept alive).
    notify_socket: (tempfile::TempDir, std::os::unix::net::UnixDatagram),
    /// Whether the first notify message was READY=1 (the first detect succeeded) rather
    /// than the status of a failed first detect.
    ready: bool,
}

impl AgentProcess {
    fn signal(&self, signal: i32) {
        self.agent.signal(signal);
    }

    /// The metrics address the agent bound (started with `--metrics-address 127.0.0.1:0`), from
    /// its "Serving metrics" log line; its stderr is drained from then on.
    async fn metrics_address(&mut self) -> String {
        self.agent.metrics_address().await
    }

    /// The agent's next message to the service manager (a blocking recv on the NOTIFY_SOCKET;
    /// the 60 s read timeout only guards against a hang).
    fn next_notify(&self) -> String {
        tokio::task::block_in_place(|| next_notify(&self.notify_socket.1))
    }

    /// Waits for the agent's exit (a blocking wait(2), no polling); a watchdog kills it after
    /// `deadline`, only against a hang, and the test then fails.
    async fn wait_exit(&mut self, deadline: Duration) -> std::process::ExitStatus {
        tokio::task::block_in_place(|| self.agent.wait_within(deadline))
    }
}

/// Starts an agent and returns once it has bound its admin socket: its first message to the
/// service manager (READY=1 after the first detect, or the status of a failed one) comes
/// only after that, so the test waits on that signal, not on polling the path.
async fn start_agent(endpoint: &str, db: &Path, socket: &Path, extra: &[&str]) -> AgentProcess {
    let notify_dir = tempfile::tempdir().expect("temp dir");
    let notify_path = notify_dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("bind notify");
    // The fake's image filesystem is the host's temp dir, statvfs'd for real: with the
    // default 85 % a nearly full host disk would make the agent's own GC at start take the
    // test's images. 100 turns the space pass off; these tests drive prune
    // (DeleteUnusedImages), which no threshold gates.
    let mut args = vec!["--image-gc-high-threshold", "100"];
    args.extend_from_slice(extra);
    let agent = AgentChild::spawn(
        endpoint,
        db,
        socket,
        notify_path.to_str().expect("utf8"),
        &args,
    );
    let (notify, ready) = tokio::task::spawn_blocking(move || {
        let first = next_notify(&notify);
        assert!(
            first.starts_with("READY=1") || first.contains("First detect failed"),
            "{first}"
        );
        (notify, first.starts_with("READY=1"))
    })
    .await
    .expect("join");
    assert!(
        socket.exists(),
        "the admin socket is bound before the first detect ends"
    );
    AgentProcess {
        agent,
        notify_socket: (notify_dir, notify),
        ready,
    }
}

#[test]
fn bad_configuration_exits_2_naming_the_flag_or_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad_toml = dir.path().join("bad.toml");
    std::fs::write(&bad_toml, "imageGCHighThresholdPercent = \"high\"\n").expect("write");
    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, "imageGCHighThreshold = 90\n").expect("write");
    let low_high = dir.path().join("lowhigh.toml");
    std::fs::write(&low_high, "imageGCLowThresholdPercent = 95\n").expect("write");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--image-gc-high-threshold=101".into()],
            "--image-gc-high-threshold: invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
        ),
        (
            vec!["--image-gc-low-threshold=-2".into()],
            "--image-gc-low-threshold: invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) -2 must be between 0 and 100, inclusive",
        ),
        (
            vec!["--minimum-image-ttl-duration=2x".into()],
            "--minimum-image-ttl-duration",
        ),
        (
            vec!["--image-maximum-gc-age=1m".into()],
            "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
        ),
        (vec!["--registry-qps=-1".into()], "--registry-qps"),
        (vec!["--registry-burst=ten".into()], "--registry-burst"),
        (
            vec!["--serialize-image-pulls=maybe".into()],
            "--serialize-image-pulls",
        ),
        (
            vec!["--max-parallel-image-pulls=3".into()],
            "maxParallelImagePulls cannot be larger than 1",
        ),
        (
            vec!["--metrics-address=localhost".into()],
            "--metrics-address",
        ),
        (
            vec!["--container-runtime-endpoint=tcp://10.0.0.1:1".into()],
            "--container-runtime-endpoint",
        ),
        (
            vec!["--gc-period=0s".into()],
            "--gc-period: must be at least 1s",
        ),
        (
            vec![format!(
                "--config={}",
                dir.path().join("missing.toml").display()
            )],
            "missing.toml",
        ),
        (vec![format!("--config={}", bad_toml.display())], "bad.toml"),
        (
            vec![format!("--config={}", unknown.display())],
            "imageGCHighThreshold",
        ),
        (
            vec![format!("--config={}", low_high.display())],
            "imageGCLowThresholdPercent in",
        ),
        (
            vec!["--image-credential-provider-config=/etc/providers.yaml".into()],
            "--image-credential-provider-config: needs --image-credential-provider-bin-dir",
        ),
        (
            vec![
                "--image-credential-provider-config=/etc/providers.yaml".into(),
                format!(
                    "--image-credential-provider-bin-dir={}",
                    dir.path().join("no-bin-dir").display()
                ),
            ],
            "plugin binary directory",
        ),
        (
            vec![
                format!(
                    "--image-credential-provider-config={}",
                    dir.path().join("missing.yaml").display()
                ),
                format!(
                    "--image-credential-provider-bin-dir={}",
                    dir.path().display()
                ),
            ],
            "missing.yaml",
        ),
    ];
    for (args, want) in cases {
        let db = dir.path().join("never-created.redb");
        let out = bin()
            .arg("run")
            .args(&args)
            .arg(format!("--db={}", db.display()))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(
            !db.exists(),
            "{args:?}: nothing is created on a bad configuration"
        );
    }
}

/// Issue 31: `--config` naming a FIFO made `run`, `gc` and `doctor` hang in open(2), waiting
/// for a writer, with no message; a character device was read for gigabytes. Each now exits 2
/// at once with a message naming the file. (A hang is turned into a failure by the runner's
/// guard.)
#[test]
fn run_gc_and_doctor_refuse_a_config_that_is_not_a_regular_file_with_exit_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("cfg.toml");
    mkfifo(&fifo);
    let device = dir.path().join("zero.toml");
    // SAFETY: mknod(2) on a path in the test's temp dir: a character device like /dev/zero.
    let made = unsafe {
        libc::mknod(
            c_path(&device).as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 5),
        )
    };
    assert_eq!(made, 0, "mknod (the tests run as root)");
    let db = dir.path().join("never-created.redb");
    let socket = dir.path().join("admin.sock");
    for (path, kind) in [(&fifo, "a FIFO"), (&device, "a character device")] {
        let config = format!("--config={}", path.display());
        let db_flag = format!("--db={}", db.display());
        let socket_flag = format!("--admin-socket={}", socket.display());
        let commands: [&[&str]; 3] = [
            &["run", &config, &db_flag, &socket_flag],
            &["gc", &config, &db_flag, &socket_flag],
            &["doctor", &config, &db_flag, &socket_flag],
        ];
        for args in commands {
            let out = crate::support::bin::run(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            let want = format!(
                "config file {}: not a regular file ({kind})",
                path.display()
            );
            assert!(stderr.contains(&want), "{args:?}: {stderr}");
            assert!(!db.exists(), "{args:?}: nothing is created");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_serves_admin_socket_0600_metrics_and_gc_through_it() {
    let AgentFixture {
        fake,
        dir,
        db,
        socket,
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image("sha256:bbb", "registry.example/pause:1", 2000)
        .image_fs_used(3000)
        .db("db/records.redb")
        .socket("run/admin.sock")
        .start()
        .await;
    // Port 0: the agent binds a port the kernel chooses and logs it (a port picked here and
    // passed on could be taken by anyone in between).
    let mut agent = start_agent(
        &fake.endpoint(),
        &db,
        &socket,
        &[
            "--metrics-address",
            "127.0.0.1:0",
            "--minimum-image-ttl-duration=0s",
            "--pod-infra-container-image=registry.example/pause:1",
        ],
    )
    .await;
    let metrics = agent.metrics_address().await;
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "admin socket is 0600");
    assert_eq!(
        std::fs::metadata(&db).expect("db").permissions().mode() & 0o777,
        0o600
    );

    // The first detect ran at start: `start_agent` returned on READY=1, which the agent sends
    // only once that detect has committed, so the records are there now (read beside the agent).
    assert!(agent.ready, "READY=1 from an agent on a live runtime");
    let db_arg = db.to_str().expect("utf8").to_owned();
    let out = output(&["inspect", "--db", &db_arg, "--output", "json", "export"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        2,
        "both images recorded by the first detect: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A second agent on the same database is refused and leaves the first one's socket alone.
    let second_socket = dir.path().join("run/second.sock");
    let out = bin()
        .args([
            "run",
            "--container-runtime-endpoint",
            &fake.endpoint(),
            "--db",
            &db_arg,
        ])
        .args(["--admin-socket", second_socket.to_str().expect("utf8")])
        .output()
        .expect("second agent");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already open by another process"));
    assert!(socket.exists() && !second_socket.exists());

    // gc --dry-run through the agent: plans, changes nothing. prune removes the unused image
    // but not the sandbox image.
    let socket_arg = socket.to_str().expect("utf8");
    let out = output(&[
        "prune",
        "--dry-run",
        "--admin-socket",
        socket_arg,
        "--output",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["removed"][0]["key"]["image_id"], "sha256:aaa");
    assert_eq!(fake.images().len(), 2, "a dry run removes nothing");
    let out = output(&["prune", "--admin-socket", socket_arg, "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("the running agent"));
    let ids: Vec<String> = fake.images().into_iter().map(|i| i.id.0).collect();
    assert_eq!(ids, ["sha256:bbb"]);

    // Metrics on loopback.
    let body = http_get(&metrics, "/metrics");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains("\nimagekeeper_image_garbage_collected_total{reason=\"space\"} 1\n"),
        "{body}"
    );
    // KEP-6053: the prune is a delete_unused_images attempt of trigger unknown (an operator's,
    // not an eviction manager's), timed by the agent; the GC loop's deletion series exist at
    // 0 from the start (MaxAge is off: its error series stays 0).
    for line in [
        "imagekeeper_image_gc_attempts_total{operation=\"delete_unused_images\",trigger=\"unknown\",result=\"success\",reason=\"all_unused\"} 1",
        "imagekeeper_image_gc_image_deletions_total{operation=\"delete_unused_images\",trigger=\"unknown\",reason=\"all_unused\",result=\"success\"} 1",
        "imagekeeper_image_gc_duration_seconds_count{operation=\"delete_unused_images\",trigger=\"unknown\",result=\"success\"} 1",
        "imagekeeper_image_gc_image_deletions_total{operation=\"garbage_collect\",trigger=\"periodic\",reason=\"age\",result=\"error\"} 0",
    ] {
        assert!(body.contains(&format!("\n{line}\n")), "{line} in {body}");
    }
    assert!(body.contains("\nimagekeeper_image_records 1\n"), "{body}");
    assert!(
        body.contains("\nimagekeeper_gc_future_stamps_clamped_total 0\n"),
        "{body}"
    );
    assert!(
        body.contains("\nimagekeeper_gc_clock_went_back_total 0\n"),
        "{body}"
    );
    assert!(
        body.contains("\nimagekeeper_gc_release_wait_timeouts_total 0\n"),
        "{body}"
    );
    // The kubelet's pull records are read (the default root dir): the stale intents' gauge.
    assert!(
        body.contains("\nimagekeeper_kubelet_stale_pull_intents "),
        "{body}"
    );
    assert!(
        body.contains("\nimagekeeper_store_commit_duration_seconds_count "),
        "{body}"
    );
    assert!(http_get(&metrics, "/nope").starts_with("HTTP/1.1 404"));
    assert!(
        body.contains(&format!(
            "\nimagekeeper_build_info{{version=\"{}\",revision=\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"), "OpenMetrics text: {body}");
    // The image filesystem as the image cache loop read it (statvfs of the fake's directory).
    // Polled: the image cache cycle runs after the first detect (READY=1) and the agent
    // signals nothing when it ends.
    let body = wait_for("the image fs metrics", Duration::from_secs(30), || {
        let body = http_get(&metrics, "/metrics");
        async move {
            body.contains("\nimagekeeper_image_fs_capacity_bytes ")
                .then_some(body)
        }
    })
    .await;
    // The GC loop's first cycle (at start) is KEP-6053's trigger periodic, timed by the agent.
    // Polled: the loop runs beside the first detect and signals nothing when it ends.
    wait_for("the GC loop's periodic attempt", Duration::from_secs(30), || {
        let body = http_get(&metrics, "/metrics");
        async move {
            (body.contains(
                "\nimagekeeper_image_gc_attempts_total{operation=\"garbage_collect\",trigger=\"periodic\",",
            ) && body.contains(
                "\nimagekeeper_image_gc_duration_seconds_count{operation=\"garbage_collect\",trigger=\"periodic\",",
            ))
            .then_some(())
        }
    })
    .await;
    let gauge = |name: &str| -> u64 {
        let line = body
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {body}"));
        line[name.len() + 1..].parse().expect("a number")
    };
    assert!(gauge("imagekeeper_image_fs_capacity_bytes") > 0);
    assert!(
        gauge("imagekeeper_image_fs_available_bytes")
            <= gauge("imagekeeper_image_fs_capacity_bytes")
    );
    // Its inodes (statvfs f_files, f_ffree), and the removal reasons of the inode and budget
    // rules (issue 28).
    let inodes = gauge("imagekeeper_image_fs_inodes{kind=\"capacity\"}");
    assert!(inodes > 0, "{body}");
    assert!(gauge("imagekeeper_image_fs_inodes{kind=\"free\"}") <= inodes);
    for reason in ["inodes", "budget"] {
        assert_eq!(
            gauge(&format!(
                "imagekeeper_image_garbage_collected_total{{reason=\"{reason}\"}}"
            )),
            0,
            "{body}"
        );
    }
    // Every sample is ours, and no label carries an image name.
    let exposition = body.split_once("\r\n\r\n").expect("a body").1;
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("imagekeeper_"), "{line}");
        assert!(!line.contains("registry.example"), "{line}");
    }
    let healthz = http_get(&metrics, "/healthz");
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    assert!(healthz.contains("database"), "{healthz}");
    // Ready since READY=1: the first detect succeeded and reached the runtime.
    let readyz = http_get(&metrics, "/readyz");
    assert!(readyz.starts_with("HTTP/1.1 200"), "{readyz}");
    assert!(readyz.contains("ok: runtime reachable"), "{readyz}");

    // pull goes through the agent (the database is the agent's) and records the image at once.
    fake.add_pullable(
        "registry.example/c:1",
        image("sha256:ccc", "registry.example/c:1", 500),
    );
    let out = output(&["pull", "registry.example/c:1", "--admin-socket", socket_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sha256:ccc");
    let out = output(&["pull", "FAILED_IMAGE", "--admin-socket", socket_arg]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = output(&["inspect", "--db", &db_arg, "--output", "json", "export"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("sha256:ccc"));

    let body = http_get(&metrics, "/metrics");
    assert!(
        body.contains("imagekeeper_ensure_image_requests_total{pull_policy=\"ifnotpresent\",present_locally=\"false\",pull_required=\"true\"} 1"),
        "{body}"
    );

    agent.signal(libc::SIGTERM);
    let status = agent.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0));
    assert!(!socket.exists(), "the socket is removed on shutdown");
    let mut store = Store::open(&db, imagekeeper::model::UnixNanos(1)).expect("reopen");
    assert!(store.check().expect("check").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_gc_cycle_exits_0_and_leaves_a_sound_database() {
    let AgentFixture {
        fake,
        dir: _dir,
        db,
        socket,
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image("sha256:bbb", "registry.example/b:1", 1000)
        .image_fs_used(3000)
        .start()
        .await;
    let mut agent = start_agent(
        &fake.endpoint(),
        &db,
        &socket,
        &[
            "--minimum-image-ttl-duration=0s",
            "--shutdown-grace-seconds=2",
        ],
    )
    .await;
    // RemoveImage never answers: a prune started now is stuck inside its cycle.
    fake.hang("RemoveImage");
    assert!(agent.ready, "READY=1 from an agent on a live runtime");
    let mut prune = bin()
        .args(["prune", "--admin-socket", socket.to_str().expect("utf8")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prune");
    // Polled: the fake counts calls but signals none, and the prune is another process.
    wait_for(
        "the prune to reach RemoveImage",
        Duration::from_secs(30),
        || {
            let n = fake.calls("RemoveImage");
            async move { (n > 0).then_some(()) }
        },
    )
    .await;
    agent.signal(libc::SIGTERM);
    let status = agent.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "graceful exit after abandoning the stuck cycle"
    );
    let _ = prune.kill();
    let _ = prune.wait();
    let out = output(&["inspect", "--db", db.to_str().expect("utf8"), "check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let store = Store::open(&db, imagekeeper::model::UnixNanos(1)).expect("reopen");
    assert_eq!(
        store.len().expect("len"),
        2,
        "nothing removed: the runtime never confirmed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_survives_a_dead_runtime_and_gc_without_agent_says_why() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let socket = dir.path().join("admin.sock");
    let dead = format!("unix://{}", dir.path().join("no-runtime.sock").display());
    let mut agent = start_agent(&dead, &db, &socket, &["--metrics-address", "127.0.0.1:0"]).await;
    let metrics = agent.metrics_address().await;
    // Alive (the database is open) but not ready, saying why, with a 503. `start_agent`
    // returned on the first "First detect failed" status; the next one comes from a later
    // detect, which starts only after the first failed cycle has recorded the runtime as
    // unreachable, so /readyz names it from then on.
    assert!(!agent.ready, "no READY=1 without a runtime");
    let next = agent.next_notify();
    assert!(next.contains("First detect failed"), "{next}");
    let readyz = http_get(&metrics, "/readyz");
    assert!(readyz.starts_with("HTTP/1.1 503"), "{readyz}");
    assert!(readyz.contains("cannot be reached"), "{readyz}");
    assert!(readyz.contains("no-runtime.sock"), "{readyz}");
    assert!(
        readyz.contains("not ready: no image detect has completed yet"),
        "{readyz}"
    );
    let healthz = http_get(&metrics, "/healthz");
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    // The agent keeps running and answers while the runtime is gone.
    let out = output(&[
        "gc",
        "--dry-run",
        "--admin-socket",
        socket.to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-runtime.sock"), "{stderr}");
    assert!(
        agent.agent.child.try_wait().expect("try_wait").is_none(),
        "agent still running"
    );
    agent.signal(libc::SIGINT);
    assert_eq!(
        agent.wait_exit(Duration::from_secs(30)).await.code(),
        Some(0)
    );

    // With no agent, gc opens the database itself and reports the dead runtime.
    let out = output(&[
        "gc",
        "--db",
        db.to_str().expect("utf8"),
        "--admin-socket",
        socket.to_str().expect("utf8"),
        "--container-runtime-endpoint",
        &dead,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the database directly"), "{stderr}");
    assert!(stderr.contains("no-runtime.sock"), "{stderr}");
}

fn c_path(path: &Path) -> std::ffi::CString {
    std::ffi::CString::new(path.to_str().expect("utf8")).expect("no NUL")
}

/// A unix socket listening at `path` with a queue of one connection, already taken, that
/// nothing accepts: a blocking connect to it waits for ever.
fn listener_that_never_accepts(
    path: &Path,
) -> (std::os::fd::OwnedFd, std::os::unix::net::UnixStream) {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2) takes no pointers; the new fd is owned by the OwnedFd at once.
    let fd = unsafe {
        std::os::fd::OwnedFd::from_raw_fd(libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0))
    };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: sockaddr_un is plain data; zeroes are valid.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = c_path(path);
    for (to, from) in address.sun_path.iter_mut().zip(bytes.as_bytes()) {
        *to = *from as libc::c_char;
    }
    let length = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: a valid sockaddr_un for the call; listen(2) with a backlog of 0.
    unsafe {
        assert_eq!(
            libc::bind(raw, (&raw const address).cast::<libc::sockaddr>(), length),
            0,
            "bind"
        );
        assert_eq!(libc::listen(raw, 0), 0, "listen");
    }
    // The one queued connection (a backlog of 0 holds one): the next connect waits.
    let queued = std::os::unix::net::UnixStream::connect(path).expect("the queued connection");
    (fd, queued)
}

fn mkfifo(path: &Path) {
    // SAFETY: mkfifo(3) on a path in the test's temp dir.
    assert_eq!(
        unsafe { libc::mkfifo(c_path(path).as_ptr(), 0o600) },
        0,
        "mkfifo"
    );
}

fn mknod_null(path: &Path) {
    // SAFETY: mknod(2) on a path in the test's temp dir: a character device like /dev/null.
    let made = unsafe {
        libc::mknod(
            c_path(path).as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 3),
        )
    };
    assert_eq!(made, 0, "mknod (the tests run as root)");
}

/// What is at a path, to compare before and after: its type, inode and (for a regular file)
/// its bytes.
fn snapshot(path: &Path) -> Option<(std::fs::FileType, u64, Option<Vec<u8>>)> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let bytes = meta
        .is_file()
        .then(|| std::fs::read(path).expect("read a regular file"));
    Some((
        meta.file_type(),
        std::os::unix::fs::MetadataExt::ino(&meta),
        bytes,
    ))
}

#[test]
fn run_refuses_bad_paths_and_addresses_with_exit_2_before_creating_anything() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = |name: &str| dir.path().join(name);
    let fifo = d("fifo");
    mkfifo(&fifo);
    let device = d("null-device");
    mknod_null(&device);
    let existing_db = d("existing.redb");
    drop(Store::open(&existing_db, imagekeeper::model::UnixNanos(1)).expect("a database"));
    let regular = d("notes.txt");
    std::fs::write(&regular, b"an operator's file\n").expect("write");
    // A live socket: something answers there (another agent, or the runtime).
    let live = d("live.sock");
    let _live_listener = std::os::unix::net::UnixListener::bind(&live).expect("bind");
    // A socket that never accepts, its queue full (issue 41: `run` hung on it silently).
    let never = d("never.sock");
    let (_never_listener, _queued) = listener_that_never_accepts(&never);
    let runtime = d("runtime.sock");
    let _runtime_listener = std::os::unix::net::UnixListener::bind(&runtime).expect("bind");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("a busy port");
    let busy_address = busy.local_addr().expect("addr").to_string();
    let long_socket = format!("/tmp/{}.sock", "s".repeat(120));
    let fresh_db = d("fresh.redb");
    let fresh_socket = d("fresh.sock");
    let s = |p: &Path| p.to_str().expect("utf8").to_owned();
    // (db, admin socket, extra flags, what stderr says)
    let cases: Vec<(PathBuf, String, Vec<String>, &str)> = vec![
        (
            fifo.clone(),
            s(&fresh_socket),
            vec![],
            "is a FIFO (named pipe), not a regular file",
        ),
        (
            device.clone(),
            s(&fresh_socket),
            vec![],
            "is a character device, not a regular file",
        ),
        (
            existing_db.clone(),
            s(&existing_db),
            vec![],
            "is the database (--db); the admin socket needs its own path",
        ),
        (
            fresh_db.clone(),
            s(&runtime),
            vec![format!(
                "--container-runtime-endpoint=unix://{}",
                runtime.display()
            )],
            "is the runtime's socket (--container-runtime-endpoint)",
        ),
        (
            fresh_db.clone(),
            s(&regular),
            vec![],
            "is a regular file, not a socket; refusing to remove it",
        ),
        (
            fresh_db.clone(),
            s(&live),
            vec![],
            "something answers there",
        ),
        (
            fresh_db.clone(),
            s(&never),
            vec![],
            "something answers there",
        ),
        (
            fresh_db.clone(),
            long_socket.clone(),
            vec![],
            "bytes long; a unix socket path is at most 107 bytes",
        ),
        (
            fresh_db.clone(),
            s(&fresh_socket),
            vec![format!("--metrics-address={busy_address}")],
            "--metrics-address: cannot listen on",
        ),
        (
            fresh_db.clone(),
            s(&fresh_socket),
            // TEST-NET-1: no interface here has this address.
            vec!["--metrics-address=192.0.2.1:9100".into()],
            "--metrics-address: cannot listen on 192.0.2.1:9100",
        ),
        (
            fresh_db.clone(),
            s(&fresh_socket),
            vec![format!("--healthz-address={busy_address}")],
            "--healthz-address: cannot listen on",
        ),
        (
            fresh_db.clone(),
            s(&fresh_socket),
            vec!["--healthz-address=localhost:9898".into()],
            "--healthz-address: \"localhost:9898\" is not HOST:PORT with an IP host",
        ),
        (
            fresh_db.clone(),
            s(&fresh_socket),
            vec!["--detect-period=500ms".into()],
            "--detect-period: must be at least 1s",
        ),
        (
            fresh_db.clone(),
            s(&fresh_socket),
            vec!["--image-cache-period=0s".into()],
            "--image-cache-period: must be at least 1s",
        ),
    ];
    // Every case runs; the failures are reported together.
    let mut failures = Vec::new();
    for (db, socket, extra, want) in cases {
        let before = (snapshot(&db), snapshot(Path::new(&socket)));
        let child = bin()
            .arg("run")
            .arg(format!("--db={}", db.display()))
            .arg(format!("--admin-socket={socket}"))
            .args(&extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run");
        // A refused case exits by itself: a blocking wait for it. A case that is not refused
        // starts an agent, which a watchdog kills after 60 s, only against that hang (the
        // case then fails on its exit status).
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        let (exited, exited_rx) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if exited_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                // SAFETY: kill(2) on our own child, not reaped yet (the wait below reaps it).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        let out = child.wait_with_output().expect("wait");
        let _ = exited.send(());
        watchdog.join().expect("watchdog");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let after = (snapshot(&db), snapshot(Path::new(&socket)));
        let mut problems = Vec::new();
        if out.status.code() != Some(2) {
            problems.push(format!("exit {:?}", out.status.code()));
        }
        if !stderr.contains(want) {
            problems.push("message".to_owned());
        }
        if before != after {
            problems.push("the database or socket path changed".to_owned());
        }
        if fresh_db.exists() {
            problems.push("a database was created".to_owned());
        }
        if fresh_socket.exists() {
            problems.push("a socket was created".to_owned());
        }
        if !problems.is_empty() {
            failures.push(format!("{want}: {problems:?}: {stderr}"));
        }
        let _ = std::fs::remove_file(&fresh_db);
        let _ = std::fs::remove_file(&fresh_socket);
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        std::os::unix::net::UnixStream::connect(&live).is_ok(),
        "the live socket still answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_admin_socket_is_replaced_and_the_agent_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let socket = dir.path().join("admin.sock");
    // A socket nobody answers on: a crashed agent's.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(std::os::unix::net::UnixStream::connect(&socket).is_err());
    let dead = format!("unix://{}", dir.path().join("no-runtime.sock").display());
    let mut agent = start_agent(&dead, &db, &socket, &[]).await;
    // Bound before the agent's first notify message, on which `start_agent` returned.
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        "the agent answers on the replaced socket"
    );
    agent.signal(libc::SIGTERM);
    assert_eq!(
        agent.wait_exit(Duration::from_secs(30)).await.code(),
        Some(0)
    );
    assert!(!socket.exists(), "the agent removes its socket on exit");
}

/// `gc --dry-run` and `prune --dry-run` (no agent) note a candidate that was removed before
/// and pulled back: an image removed outside imagekeeper (seen gone by `gc`'s detect) and back
/// at the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_note_a_candidate_removed_before_and_pulled_back() {
    let a = image("sha256:aaa", "registry.example/a:1", 1000);
    let b = image("sha256:bbb", "registry.example/b:1", 2000);
    let AgentFixture {
        fake,
        dir: _dir,
        db,
        socket,
    } = AgentFixture::builder()
        .images([a.clone(), b.clone()])
        .image_fs_used(3000)
        .socket("no-agent.sock")
        .start()
        .await;
    let endpoint = fake.endpoint();
    let run = |args: &[&str]| {
        let out = bin()
            .args(args)
            .arg(format!("--db={}", db.display()))
            .arg(format!("--admin-socket={}", socket.display()))
            .arg(format!("--container-runtime-endpoint={endpoint}"))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Space pass off: the fake's image filesystem is the host's disk.
    let real = [
        "gc",
        "--minimum-image-ttl-duration=1h",
        "--image-gc-high-threshold=100",
    ];
    run(&real);
    fake.set_images(vec![b.clone()]);
    run(&real);
    fake.set_images(vec![a, b]);
    run(&real);
    let stdout = run(&["prune", "--dry-run", "--minimum-image-ttl-duration=0s"]);
    assert!(
        stdout.contains("note: aaa was removed before (outside imagekeeper, at ")
            && stdout.contains("and pulled back "),
        "{stdout}"
    );
    assert!(!stdout.contains("note: bbb"), "{stdout}");
    let json = run(&[
        "prune",
        "--dry-run",
        "--minimum-image-ttl-duration=0s",
        "--output",
        "json",
    ]);
    assert!(json.contains("\"evicted_before\""), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_create_nothing_and_change_no_byte() {
    let AgentFixture {
        fake, dir, socket, ..
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image("sha256:bbb", "registry.example/b:1", 2000)
        .image_fs_used(3000)
        .socket("no-agent.sock")
        .start()
        .await;
    let missing = dir.path().join("missing/records.redb");
    let endpoint = fake.endpoint();
    let run = |command: &str, db: &Path| {
        bin()
            .args([command, "--dry-run", "--minimum-image-ttl-duration=0s"])
            .arg(format!("--db={}", db.display()))
            .arg(format!("--admin-socket={}", socket.display()))
            .arg(format!("--container-runtime-endpoint={endpoint}"))
            .output()
            .expect("run")
    };
    for command in ["gc", "prune"] {
        let out = run(command, &missing);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(stderr.contains("a dry run creates nothing"), "{stderr}");
        assert!(out.stdout.is_empty(), "no plan printed before the error");
        assert!(
            !missing.parent().expect("dir").exists(),
            "{command}: neither the database nor its directory is created"
        );
    }
    // An existing database with records, closed cleanly: a dry run leaves every byte.
    let db = dir.path().join("records.redb");
    // (Space pass off: the fake's image filesystem is the host's disk, however full it is.)
    let out = bin()
        .args([
            "gc",
            "--minimum-image-ttl-duration=1h",
            "--image-gc-high-threshold=100",
        ])
        .arg(format!("--db={}", db.display()))
        .arg(format!("--admin-socket={}", socket.display()))
        .arg(format!("--container-runtime-endpoint={endpoint}"))
        .output()
        .expect("a real gc records the images");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = std::fs::read(&db).expect("read");
    for command in ["gc", "prune"] {
        let out = run(command, &db);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("would remove"), "{stdout}");
        assert!(
            std::fs::read(&db).expect("read") == before,
            "{command} --dry-run changed the database's bytes"
        );
    }
    // Its table printed into a pipe whose reader is gone (`| head`): no error, exit 0.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = bin()
        .args(["prune", "--dry-run", "--minimum-image-ttl-duration=0s"])
        .arg(format!("--db={}", db.display()))
        .arg(format!("--admin-socket={}", socket.display()))
        .arg(format!("--container-runtime-endpoint={endpoint}"))
        .stdout(writer)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{stderr}"
    );
    // A dry run that fails prints the error alone, not an empty plan above it.
    let dead = format!("unix://{}", dir.path().join("no-runtime.sock").display());
    let out = bin()
        .args(["gc", "--dry-run"])
        .arg(format!("--db={}", db.display()))
        .arg(format!("--admin-socket={}", socket.display()))
        .arg(format!("--container-runtime-endpoint={dead}"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(std::fs::read(&db).expect("read") == before);
}

/// An admin backend whose GarbageCollect parks until released; the rest answers at once.
#[derive(Default)]
struct ParkedBackend {
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl AdminBackend for ParkedBackend {
    async fn ensure_image(&self, request: EnsureRequest) -> Result<String, EnsureImageError> {
        Err(EnsureImageError::InvalidPullPolicy(request.pull_policy))
    }

    async fn garbage_collect(&self, dry_run: bool) -> GcOutcome {
        self.entered.notify_one();
        self.release.notified().await;
        GcOutcome {
            dry_run,
            ..GcOutcome::default()
        }
    }

    async fn delete_unused(&self, dry_run: bool) -> GcOutcome {
        GcOutcome {
            dry_run,
            ..GcOutcome::default()
        }
    }
}

async fn serve_parked(socket: &Path, limits: AdminLimits) -> Arc<ParkedBackend> {
    let backend = Arc::new(ParkedBackend::default());
    admin::serve_with_limits(socket, backend.clone(), std::future::pending(), limits)
        .await
        .expect("serve");
    backend
}

/// Reads until the server closes the connection (end of file or a reset), within `deadline`.
async fn closed_by_server(stream: &mut tokio::net::UnixStream, deadline: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut sink = Vec::new();
    tokio::time::timeout(deadline, stream.read_to_end(&mut sink))
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_server_closes_connections_beyond_its_limit_at_once() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let limits = AdminLimits {
        max_connections: 8,
        idle_timeout: Duration::from_secs(600),
    };
    let _backend = serve_parked(&socket, limits).await;
    // Fill every slot: each connection is served (the server's HTTP/2 SETTINGS arrive).
    let mut held = Vec::new();
    for _ in 0..limits.max_connections {
        let mut stream = tokio::net::UnixStream::connect(&socket)
            .await
            .expect("connect");
        let mut first = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut first))
            .await
            .expect("the server speaks first on a served connection")
            .expect("read");
        assert!(n > 0);
        held.push(stream);
    }
    // 5,000 more idle clients at once: each is closed as soon as it is accepted, long before
    // the idle timeout, so they cannot pile up in the agent.
    let mut extra = Vec::new();
    for _ in 0..5_000 {
        extra.push(
            tokio::net::UnixStream::connect(&socket)
                .await
                .expect("connect"),
        );
    }
    let mut still_open = 0;
    for stream in &mut extra {
        if !closed_by_server(stream, Duration::from_secs(30)).await {
            still_open += 1;
            break;
        }
    }
    assert_eq!(
        still_open, 0,
        "connections beyond the limit are closed at once"
    );
    drop(extra);
    // The held ones are still served.
    for stream in &held {
        let mut buf = [0u8; 256];
        assert!(
            !matches!(stream.try_read(&mut buf), Ok(0)),
            "a connection within the limit stays open"
        );
    }
    // Once they go, a real client gets a slot again.
    drop(held);
    let path = socket.clone();
    // Polled: the agent frees a slot when it sees the close, and signals nothing.
    wait_for(
        "a free admin connection slot",
        Duration::from_secs(30),
        || {
            let path = path.clone();
            async move {
                let mut client = AdminClient::connect(&path).await.ok()?;
                client.delete_unused(true).await.ok()
            }
        },
    )
    .await;
}

/// Issue 31: an agent at its admin connection limit accepts a connection and closes it at
/// once; the client said only "transport error". It now says the agent is busy, and so does
/// the CLI (exit 1, a failure, not bad input); a served client is never taken for busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_beyond_the_admin_connection_limit_is_told_the_agent_is_busy() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let limits = AdminLimits {
        max_connections: 2,
        idle_timeout: Duration::from_secs(600),
    };
    let _backend = serve_parked(&socket, limits).await;
    let mut served = AdminClient::connect(&socket).await.expect("connect");
    served.delete_unused(true).await.expect("a served call");
    // The second slot, held by a connection the server has spoken on (so it was served).
    let mut held = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    let mut first = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(30), held.read(&mut first))
        .await
        .expect("the server speaks first on a served connection")
        .expect("read");
    assert!(n > 0);

    // Refused at the connect (the HTTP/2 preface meets the closed connection) or, when the
    // preface went out before the close, at the first call: busy either way.
    let err = match AdminClient::connect(&socket).await {
        Err(e) => e,
        Ok(mut client) => client.delete_unused(true).await.expect_err("busy"),
    };
    assert!(matches!(err, AdminError::Busy { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "admin socket {}: the agent is busy: it accepted the connection and closed it without a word, as it does beyond its limit of admin connections; try again shortly",
            socket.display()
        )
    );
    let out = tokio::task::spawn_blocking({
        let socket = socket.clone();
        move || {
            crate::support::bin::run(&[
                "prune",
                "--dry-run",
                &format!("--admin-socket={}", socket.display()),
            ])
        }
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the agent is busy"), "{stderr}");
    assert!(!stderr.contains("transport error"), "{stderr}");
    // `pull` too says so, and does not go around the agent to the runtime (here: none).
    let db = dir.path().join("unused.redb");
    let out = tokio::task::spawn_blocking({
        let socket = socket.clone();
        let db = db.clone();
        move || {
            crate::support::bin::run(&[
                "pull",
                "registry.example/a:1",
                &format!("--admin-socket={}", socket.display()),
                &format!("--db={}", db.display()),
            ])
        }
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the agent is busy"), "{stderr}");
    assert!(!db.exists(), "no pull around the agent");
    // The served client's connection is still served.
    served.delete_unused(true).await.expect("still served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_server_closes_idle_connections_but_keeps_a_live_client_in_a_long_call() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let limits = AdminLimits {
        max_connections: 64,
        idle_timeout: Duration::from_secs(3),
    };
    let backend = serve_parked(&socket, limits).await;
    // A real client whose call the backend parks.
    let mut client = AdminClient::connect(&socket).await.expect("connect");
    let call = tokio::spawn(async move { client.garbage_collect(false).await });
    tokio::time::timeout(Duration::from_secs(30), backend.entered.notified())
        .await
        .expect("the call reaches the backend");
    // Idle clients, connected after the call started, are closed after the idle timeout.
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(
            tokio::net::UnixStream::connect(&socket)
                .await
                .expect("connect"),
        );
    }
    for stream in &mut idle {
        assert!(
            closed_by_server(stream, Duration::from_secs(60)).await,
            "an idle connection is closed"
        );
    }
    // The parked call has now lasted longer than the idle timeout; its client answered the
    // server's pings, so it was not cut.
    backend.release.notify_one();
    let outcome = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the call returns")
        .expect("join")
        .expect("the live client's call succeeds");
    assert!(!outcome.dry_run);
}

/// Equal thresholds are refused everywhere a policy is given, with the kubelet's config
/// validation message (ValidateKubeletConfiguration), exit 2, before anything is created;
/// replay keeps NewImageGCManager's message for low above high.
#[test]
fn equal_gc_thresholds_are_refused_by_every_command_with_the_kubelets_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("never-created.redb");
    let db_flag = format!("--db={}", db.display());
    let existing = dir.path().join("existing.redb");
    drop(Store::open(&existing, imagekeeper::model::UnixNanos(1)).expect("a database"));
    let equal = |low: &str| {
        format!(
            "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80"
        )
    };
    let trace = |high: i64, low: i64| {
        let path = dir.path().join(format!("trace-{high}-{low}.jsonl"));
        std::fs::write(
            &path,
            format!(
                "{{\"at\": 1000, \"policy\": {{\"high\": {high}, \"low\": {low}, \"min_age_s\": 0, \"max_age_s\": 0}}}}\n"
            ),
        )
        .expect("write trace");
        path.to_str().expect("utf8").to_owned()
    };
    let thresholds = [
        "--image-gc-high-threshold=80",
        "--image-gc-low-threshold=80",
    ];
    let existing_flag = format!("--db={}", existing.display());
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            [&["run"], &thresholds[..], &[db_flag.as_str()]]
                .concat()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            equal("80"),
        ),
        (
            [&["gc"], &thresholds[..], &[db_flag.as_str()]]
                .concat()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            equal("80"),
        ),
        (
            [&["prune"], &thresholds[..], &[db_flag.as_str()]]
                .concat()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            equal("80"),
        ),
        (
            [
                "inspect",
                "explain",
                "--high",
                "80",
                "--low",
                "80",
                existing_flag.as_str(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            equal("80"),
        ),
        (vec!["replay".into(), trace(80, 80)], equal("80")),
        (
            vec!["replay".into(), trace(80, 85)],
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 85 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80".into(),
        ),
    ];
    for (args, want) in cases {
        let out = bin().args(&args).output().expect("run imagekeeper");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(&want), "{args:?}: {stderr}");
        assert!(!db.exists(), "{args:?}: nothing is created");
    }
}

/// A GC through the agent that outlasts `--timeout` ends the command with a clear message
/// (exit 1); the agent goes on with the cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_through_an_agent_that_does_not_answer_in_time_says_so_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let backend = serve_parked(&socket, AdminLimits::default()).await;
    let out = tokio::task::spawn_blocking({
        let socket = socket.clone();
        move || {
            bin()
                .args(["gc", "--timeout=1s"])
                .arg(format!("--admin-socket={}", socket.display()))
                .arg(format!("--db={}", socket.with_extension("redb").display()))
                .output()
                .expect("run imagekeeper gc")
        }
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the agent did not answer GarbageCollect within 1s"),
        "{stderr}"
    );
    backend.release.notify_one();
    // A zero or malformed deadline is bad usage.
    for bad in ["--timeout=0s", "--timeout=soon"] {
        let out = bin().args(["gc", bad]).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}

/// Regression (issue 12, item 5), the CLI path: `imagekeeper gc` and `prune` without an agent,
/// on a database whose filesystem is full, exit 1 saying the filesystem is full and naming the
/// database; `pull` pulls and logs that it could not record the image; once space is back the
/// same commands work, with the records of before intact and the pulled image recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_without_agent_on_a_full_disk_says_so_and_works_once_space_is_back() {
    let Some(fs) = crate::support::Tmpfs::mount(
        "gc_without_agent_on_a_full_disk_says_so_and_works_once_space_is_back",
        "2m",
    ) else {
        return;
    };
    let AgentFixture {
        fake,
        dir: _dir,
        socket,
        ..
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .socket("no-agent.sock")
        .start()
        .await;
    let db = fs.path().join("records.redb");
    let db_arg = db.to_str().expect("utf8").to_owned();
    let endpoint = fake.endpoint();
    let command = |first: &[&str]| {
        let mut args = first.to_vec();
        args.extend([
            "--db",
            &db_arg,
            "--admin-socket",
            socket.to_str().expect("utf8"),
            "--container-runtime-endpoint",
            &endpoint,
        ]);
        output(&args)
    };
    // The host's own disk may be over any default threshold: only detect matters.
    let gc = || {
        command(&[
            "gc",
            "--image-gc-high-threshold=100",
            "--image-gc-low-threshold=99",
        ])
    };
    fake.add_pullable(
        "registry.example/c:1",
        image("sha256:ccc", "registry.example/c:1", 1000),
    );
    let out = gc();
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // Fill the filesystem and the database's free pages, then let the runtime list a new image:
    // recording it needs a commit.
    let filler = fs.path().join("filler");
    fs.fill(&filler);
    {
        let store = Store::open(&db, imagekeeper::model::UnixNanos::from_secs(1)).expect("open");
        crate::gc::exhaust(&store);
    }
    fake.set_images(vec![
        image("sha256:aaa", "registry.example/a:1", 1000),
        image("sha256:bbb", "registry.example/b:1", 1000),
    ]);
    let out = gc();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("filesystem is full"), "{stderr}");
    assert!(stderr.contains(&db_arg), "{stderr}");
    let out = command(&["prune"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("filesystem is full"), "{stderr}");
    // A pull is done once the runtime has the image: its mark cannot be recorded, which is
    // logged as an error, and the next detect records the image.
    let out = command(&["pull", "registry.example/c:1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Recording the pulled image failed")
            && stderr.contains("filesystem is full"),
        "{stderr}"
    );

    std::fs::remove_file(&filler).expect("delete the filler");
    let out = gc();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let store = Store::open_read_only(&db).expect("open read-only");
    let ids: Vec<String> = store
        .records()
        .expect("records")
        .into_iter()
        .map(|r| r.key.image_id.0)
        .collect();
    assert_eq!(ids, ["sha256:aaa", "sha256:bbb", "sha256:ccc"]);
    drop(store);
    let out = command(&["prune"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// Regression (issue 12, item 5), the agent: its database's filesystem fills up. The GC cycle
/// whose detect cannot commit fails saying the filesystem is full, the agent is not ready
/// (`Agent::ready`, `store_healthy 0`) while the process and the runtime are fine; once space
/// is back the next cycle on the same agent reopens the store and records what it could not,
/// and the agent is ready again (`store_healthy 1`, `store_reopens_total` counted), with no
/// restart. Before the fix every later commit failed with redb's "Previous I/O error".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_on_a_full_disk_is_not_ready_and_recovers_without_restart_once_space_is_back() {
    use imagekeeper::agent::Agent;
    use imagekeeper::config::{AgentConfig, FileConfig, FlagValues};
    let Some(fs) = crate::support::Tmpfs::mount(
        "agent_on_a_full_disk_is_not_ready_and_recovers_without_restart_once_space_is_back",
        "2m",
    ) else {
        return;
    };
    let AgentFixture { fake, dir, .. } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let flags = FlagValues {
        db: Some(fs.path().join("records.redb")),
        container_runtime_endpoint: Some(fake.endpoint()),
        admin_socket: Some(dir.path().join("admin.sock")),
        // The host's own disk may be over any default threshold: only detect matters here.
        image_gc_high_threshold: Some(100),
        image_gc_low_threshold: Some(99),
        ..FlagValues::default()
    };
    let config = AgentConfig::resolve(&FileConfig::default(), None, &flags).expect("config");
    let clock = Arc::new(imagekeeper::clock::ManualClock::new(
        imagekeeper::model::UnixNanos::from_secs(1_800_000_000),
    ));
    let agent = Agent::start(config, clock).await.expect("agent starts");
    let first = agent.garbage_collect(false).await;
    assert_eq!(first.error, None);
    assert!(agent.ready());

    let filler = fs.path().join("filler");
    fs.fill(&filler);
    crate::gc::exhaust(agent.store());
    fake.set_images(vec![
        image("sha256:aaa", "registry.example/a:1", 1000),
        image("sha256:bbb", "registry.example/b:1", 1000),
    ]);
    let failed = agent.garbage_collect(false).await;
    let error = failed.error.expect("the detect cannot commit");
    assert!(error.contains("filesystem is full"), "{error}");
    assert!(!agent.ready(), "not ready after the failed commit");
    // Before the scrape, whose read of the store reopens it.
    let why = agent.readiness().expect_err("/readyz is 503");
    assert!(why.contains("has not reopened yet"), "{why}");
    assert!(
        agent.liveness().is_ok(),
        "a full disk is not a reason to restart"
    );
    let metrics = agent.render_metrics();
    assert!(
        metrics.contains("\nimagekeeper_store_healthy 0\n"),
        "{metrics}"
    );

    std::fs::remove_file(&filler).expect("delete the filler");
    let recovered = agent.garbage_collect(false).await;
    assert_eq!(recovered.error, None);
    assert!(agent.ready());
    let metrics = agent.render_metrics();
    assert!(
        metrics.contains("\nimagekeeper_store_healthy 1\n"),
        "{metrics}"
    );
    let reopens = agent.store().reopens();
    assert!(reopens >= 1);
    assert!(
        metrics.contains(&format!("\nimagekeeper_store_reopens_total {reopens}\n")),
        "{metrics}"
    );
    let ids: Vec<String> = agent
        .store()
        .eviction_order()
        .expect("records")
        .map(|r| r.expect("record"))
        .map(|r| r.key.image_id.0)
        .collect();
    assert_eq!(ids, ["sha256:aaa", "sha256:bbb"]);
}

/// The agent runs the container events watcher: a container the kubelet creates after the
/// first detect has its image marked used at CONTAINER_CREATED_EVENT, long before the next
/// detect (5 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_marks_a_created_containers_image_used_from_the_event_stream() {
    let AgentFixture {
        fake,
        dir: _dir,
        db,
        socket,
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/a:1", 1000)
        .image_fs_used(1000)
        .start()
        .await;
    let agent = start_agent(&fake.endpoint(), &db, &socket, &[]).await;
    let db_arg = db.to_str().expect("utf8").to_owned();
    let last_used = || {
        let out = output(&["inspect", "--db", &db_arg, "--output", "json", "export"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|v| v.to_string().contains("sha256:aaa"))
            .and_then(|v| find_key(&v, "last_used_unix_nanos"))
    };
    // `start_agent` returned on READY=1, sent once the first detect has committed.
    assert!(agent.ready, "READY=1 from an agent on a live runtime");
    assert_eq!(last_used(), Some(0), "unused at the first detect");
    // The start's detect and GC have listed the containers, and the stream is open. Polled:
    // the start's GC cycle and the watcher's subscription follow READY=1 with no signal.
    wait_for(
        "the start's cycles and the event stream",
        Duration::from_secs(30),
        || {
            let ready = fake.calls("ListContainers") == 2 && fake.open_event_streams() == 1;
            async move { ready.then_some(()) }
        },
    )
    .await;
    fake.set_containers(vec![imagekeeper::model::RuntimeContainer {
        id: "c1".into(),
        pod_sandbox_id: "pod".into(),
        image: "registry.example/a:1".into(),
        image_id: ImageId::new("sha256:aaa"),
        state: imagekeeper::model::ContainerState::Created,
        runtime_handler: String::new(),
    }]);
    fake.push_event(&imagekeeper::model::ContainerEvent {
        container_id: "c1".into(),
        kind: imagekeeper::model::ContainerEventKind::Created,
        created_at: 0,
    });
    // Polled: the mark is the agent's write on an event, and nothing signals it to this
    // process; the database is read beside the agent until it shows.
    let marked = wait_for("the mark", Duration::from_secs(30), || {
        let used = last_used().filter(|&n| n > 0);
        async move { used }
    })
    .await;
    assert!(marked > 0);
    assert_eq!(
        fake.calls("ListContainers"),
        2,
        "no detect since the start's: the event did it"
    );
}

/// The first integer under `key` anywhere in `value`.
fn find_key(value: &serde_json::Value, key: &str) -> Option<i64> {
    match value {
        serde_json::Value::Object(map) => map
            .get(key)
            .and_then(serde_json::Value::as_i64)
            .or_else(|| map.values().find_map(|v| find_key(v, key))),
        serde_json::Value::Array(items) => items.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

/// A failure to bind the admin socket once the agent has started names the step as it always
/// did ("starting the admin socket: ...", not a generic "serving: ..."), exits 1, and the
/// agent never says it started. /proc takes no new file: the path passes the checks made
/// before start (nothing is there) and the bind fails.
#[test]
fn admin_socket_bind_failure_after_start_names_the_step_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let endpoint = format!("unix://{}", dir.path().join("no-runtime.sock").display());
    let out = bin()
        .args([
            "run",
            "--container-runtime-endpoint",
            &endpoint,
            "--db",
            db.to_str().expect("utf8"),
            "--admin-socket",
            "/proc/imagekeeper-cannot-bind-here.sock",
        ])
        // Info logs: "agent started" would show.
        .env_remove("IMAGEKEEPER_LOG")
        .output()
        .expect("run imagekeeper");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "imagekeeper: starting the admin socket: admin socket \
             /proc/imagekeeper-cannot-bind-here.sock: "
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("serving:"), "{stderr}");
    assert!(!stderr.contains("imagekeeper agent started"), "{stderr}");
}

/// A call the agent fails without a reason (here the server's 4 MiB message limit, hit by
/// five pull secrets of about 1 MB each, each under the 1 MiB operator-file cap) prints the
/// message alone, as `imagekeeper pull` always did, not "admin call EnsureImage: ...", and
/// exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_through_the_agent_prints_a_reasonless_failure_as_the_message_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    admin::serve(&socket, Arc::new(FailingEnsure), std::future::pending())
        .await
        .expect("serve");
    let padding = "x".repeat(1_000_000);
    let mut args = vec!["pull".to_owned(), "pull/x".to_owned()];
    for i in 0..5 {
        let secret = dir.path().join(format!("big-secret-{i}.json"));
        std::fs::write(
            &secret,
            format!(r#"{{"auths":{{}},"padding":"{padding}"}}"#),
        )
        .expect("write");
        args.push("--pull-secret".to_owned());
        args.push(secret.to_str().expect("utf8").to_owned());
    }
    args.extend([
        "--admin-socket".to_owned(),
        socket.to_str().expect("utf8").to_owned(),
        "--db".to_owned(),
        dir.path()
            .join("unused.redb")
            .to_str()
            .expect("utf8")
            .to_owned(),
    ]);
    let out = tokio::task::spawn_blocking(move || bin().args(args).output().expect("run"))
        .await
        .expect("join");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("imagekeeper: Error, decoded message length too large: "),
        "{err}"
    );
}

/// At shutdown the agent removes only the socket file it bound: another agent's socket, put
/// at the same path meanwhile, stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_removes_only_the_socket_the_agent_bound() {
    let AgentFixture {
        fake,
        dir: _dir,
        db,
        socket,
    } = AgentFixture::builder().start().await;
    let mut agent = start_agent(&fake.endpoint(), &db, &socket, &[]).await;
    std::fs::remove_file(&socket).expect("remove the agent's socket file");
    let _other = std::os::unix::net::UnixListener::bind(&socket).expect("another socket");
    agent.signal(libc::SIGTERM);
    let status = agent.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0));
    assert!(socket.exists(), "the other socket is left alone");
}

/// An admin backend whose EnsureImage fails as the image name says (`reason/...`).
struct FailingEnsure;

impl AdminBackend for FailingEnsure {
    async fn ensure_image(&self, request: EnsureRequest) -> Result<String, EnsureImageError> {
        use imagekeeper::pull::PullError;
        let (reason, _) = request.image.split_once('/').expect("reason/...");
        let message = format!("message for {}", request.image);
        Err(match reason {
            "invalid" => EnsureImageError::Pull(PullError::ErrInvalidImageName(message)),
            "backoff" => EnsureImageError::Pull(PullError::ErrImagePullBackOff(message)),
            "never" => EnsureImageError::Pull(PullError::ErrImageNeverPull(message)),
            "pull" => EnsureImageError::Pull(PullError::ErrImagePull {
                message,
                cause: None,
            }),
            "secret" => EnsureImageError::InvalidPullSecret(
                imagekeeper::pull::parse_pull_secret("pull secret 1", b"\xff")
                    .expect_err("not UTF-8"),
            ),
            other => panic!("unscripted {other}"),
        })
    }

    async fn garbage_collect(&self, dry_run: bool) -> GcOutcome {
        GcOutcome {
            dry_run,
            ..GcOutcome::default()
        }
    }

    async fn delete_unused(&self, dry_run: bool) -> GcOutcome {
        GcOutcome {
            dry_run,
            ..GcOutcome::default()
        }
    }
}

/// The agent's EnsureImage failures reach the client as a typed reason (metadata, beside the
/// message prefix kept for older clients):
/// the client sees `AdminError::Rejected` with the kubelet's reason, and `imagekeeper pull`
/// through the agent prints "<reason>: <message>" and exits 2 for bad input, 1 otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_through_the_agent_maps_typed_reasons_to_messages_and_exit_codes() {
    use imagekeeper::admin::{AdminError, AdminReason};
    use imagekeeper::pull::PullReason;
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    admin::serve(&socket, Arc::new(FailingEnsure), std::future::pending())
        .await
        .expect("serve");
    let cases = [
        (
            "invalid/x",
            AdminReason::Pull(PullReason::InvalidImageName),
            "InvalidImageName",
            2,
        ),
        (
            "backoff/x",
            AdminReason::Pull(PullReason::ImagePullBackOff),
            "ImagePullBackOff",
            1,
        ),
        (
            "never/x",
            AdminReason::Pull(PullReason::ErrImageNeverPull),
            "ErrImageNeverPull",
            1,
        ),
        (
            "pull/x",
            AdminReason::Pull(PullReason::ErrImagePull),
            "ErrImagePull",
            1,
        ),
        (
            "secret/x",
            AdminReason::InvalidPullSecret,
            "InvalidPullSecret",
            2,
        ),
    ];
    let mut client = AdminClient::connect(&socket).await.expect("connect");
    for (image, want_reason, name, want_code) in cases {
        let request = EnsureRequest {
            image: image.to_owned(),
            ..EnsureRequest::default()
        };
        match client.ensure_image(request).await {
            Err(AdminError::Rejected {
                reason, message, ..
            }) => {
                assert_eq!(reason, want_reason, "{image}");
                assert_eq!(reason.as_str(), name);
                assert!(!message.starts_with(name), "{image}: {message}");
            }
            other => panic!("{image}: {other:?}"),
        }
        let args = [
            "pull".to_owned(),
            image.to_owned(),
            "--admin-socket".to_owned(),
            socket.to_str().expect("utf8").to_owned(),
            "--db".to_owned(),
            dir.path()
                .join("unused.redb")
                .to_str()
                .expect("utf8")
                .to_owned(),
        ];
        let out = tokio::task::spawn_blocking(move || bin().args(args).output().expect("run"))
            .await
            .expect("join");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(want_code), "{image}: {err}");
        assert!(
            err.starts_with(&format!("imagekeeper: {name}: ")),
            "{image}: {err}"
        );
        // The agent sends the reason as metadata and as the message's prefix: printed once.
        assert!(!err.contains(&format!("{name}: {name}")), "{image}: {err}");
        if name != "InvalidPullSecret" {
            assert!(err.contains(&format!("message for {image}")), "{err}");
        }
    }
    assert!(
        !dir.path().join("unused.redb").exists(),
        "the agent did the pulls"
    );
}

/// A FIFO at the node's credentials path (`<kubelet root>/config.json`) once blocked one of the
/// agent's two async workers per pull, for good: two pulls through the agent stopped GC,
/// `/healthz` and the admin socket, and SIGTERM. A spawned agent now completes four such pulls
/// (anonymously, the FIFO skipped), answers `/healthz` after them, and ends on SIGTERM within
/// its grace period. Each pull is bounded by the runner's hang guard, the exit by a watchdog:
/// without the fix the test fails at one of them instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_at_the_node_credentials_path_stops_no_pull_probe_or_shutdown() {
    let AgentFixture {
        fake,
        dir,
        db,
        socket,
    } = AgentFixture::builder().image_fs_used(40).start().await;
    for i in 0..4 {
        let reference = format!("registry.example/app{i}:1");
        fake.add_pullable(
            reference.clone(),
            image(&format!("sha256:{i:04}"), &reference, 10),
        );
    }
    let root = dir.path().join("kubelet");
    std::fs::create_dir(&root).expect("kubelet root");
    mkfifo(&root.join("config.json"));
    let root_flag = format!("--kubelet-root-dir={}", root.display());
    let grace = Duration::from_secs(5);
    let grace_flag = format!("--shutdown-grace-seconds={}", grace.as_secs());
    let mut agent = start_agent(
        &fake.endpoint(),
        &db,
        &socket,
        &["--metrics-address", "127.0.0.1:0", &root_flag, &grace_flag],
    )
    .await;
    let metrics = agent.metrics_address().await;
    for i in 0..4 {
        let socket = socket.clone();
        let out = tokio::task::spawn_blocking(move || {
            crate::support::bin::run(&[
                "pull",
                &format!("registry.example/app{i}:1"),
                &format!("--admin-socket={}", socket.display()),
            ])
        })
        .await
        .expect("join");
        assert!(
            out.status.success(),
            "pull {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(fake.pulls().len(), 4);
    let health = tokio::task::spawn_blocking(move || http_get(&metrics, "/healthz"))
        .await
        .expect("join");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    agent.signal(libc::SIGTERM);
    // Within the grace period; past it the watchdog kills the agent and the test fails.
    let status = agent.wait_exit(grace).await;
    assert!(status.success(), "{status:?}");
}

/// An admin backend whose Restore answers a fixed outcome (or an error), recording what it was
/// asked.
#[derive(Default)]
struct RestoreBackend {
    asked: std::sync::Mutex<Vec<imagekeeper::warm::RestoreOptions>>,
}

impl AdminBackend for RestoreBackend {
    async fn ensure_image(&self, request: EnsureRequest) -> Result<String, EnsureImageError> {
        Err(EnsureImageError::InvalidPullPolicy(request.pull_policy))
    }

    async fn garbage_collect(&self, dry_run: bool) -> GcOutcome {
        GcOutcome {
            dry_run,
            ..GcOutcome::default()
        }
    }

    async fn delete_unused(&self, dry_run: bool) -> GcOutcome {
        GcOutcome {
            dry_run,
            ..GcOutcome::default()
        }
    }

    async fn restore(
        &self,
        options: imagekeeper::warm::RestoreOptions,
    ) -> Result<imagekeeper::warm::RestoreOutcome, String> {
        self.asked.lock().expect("asked").push(options);
        if options.used_within == Duration::from_secs(1) {
            return Err("the runtime is down".to_owned());
        }
        Ok(imagekeeper::warm::RestoreOutcome {
            items: vec![imagekeeper::warm::RestoreItem {
                image_id: "sha256:aaa".into(),
                runtime_handler: "gpu".into(),
                image: "registry.example/a@sha256:bbb".into(),
                size: 123,
                last_used: imagekeeper::model::UnixNanos(5),
                removed_at: imagekeeper::model::UnixNanos(7),
                state: imagekeeper::warm::RestoreState::DoesNotFit,
                detail: "needs 123 B".into(),
            }],
            dry_run: options.dry_run,
            omitted: 0,
        })
    }
}

/// Restore through the admin socket: the options reach the agent and its outcome comes back
/// field for field; an agent's failure comes back as the call's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_through_the_admin_socket_carries_the_options_and_the_outcome() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("admin.sock");
    let backend = Arc::new(RestoreBackend::default());
    admin::serve(&socket, backend.clone(), std::future::pending())
        .await
        .expect("serve");
    let mut client = admin::AdminClient::connect(&socket).await.expect("connect");
    let options = imagekeeper::warm::RestoreOptions {
        used_within: Duration::from_secs(3600),
        max_bytes: Some(1 << 30),
        dry_run: true,
    };
    let outcome = client.restore(options).await.expect("restore");
    assert_eq!(backend.asked.lock().expect("asked").as_slice(), [options]);
    assert!(outcome.dry_run);
    let item = &outcome.items[0];
    assert_eq!(
        (
            item.image_id.as_str(),
            item.runtime_handler.as_str(),
            item.image.as_str(),
            item.size,
            item.last_used.0,
            item.removed_at.0,
            item.state,
            item.detail.as_str()
        ),
        (
            "sha256:aaa",
            "gpu",
            "registry.example/a@sha256:bbb",
            123,
            5,
            7,
            imagekeeper::warm::RestoreState::DoesNotFit,
            "needs 123 B"
        )
    );
    let unbudgeted = imagekeeper::warm::RestoreOptions {
        max_bytes: None,
        ..options
    };
    client.restore(unbudgeted).await.expect("restore");
    assert_eq!(backend.asked.lock().expect("asked")[1].max_bytes, None);
    let err = client
        .restore(imagekeeper::warm::RestoreOptions {
            used_within: Duration::from_secs(1),
            ..options
        })
        .await
        .expect_err("the agent's failure");
    assert!(err.to_string().contains("the runtime is down"), "{err}");
}

/// `pin`, `pins` and `unpin` go through the running agent's admin socket (the database is the
/// agent's, locked); the pin is resolved against the agent's image list, keeps its image
/// through a `prune` through the agent, and `unpin` of a name with no pin exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_go_through_the_running_agent_and_keep_their_image_through_its_prune() {
    let AgentFixture {
        fake,
        dir: _dir,
        db,
        socket,
    } = AgentFixture::builder()
        .image("sha256:aaa", "registry.example/model:1", 1000)
        .image("sha256:bbb", "registry.example/web:1", 2000)
        .image_fs_used(3000)
        .db("db/records.redb")
        .socket("run/admin.sock")
        .start()
        .await;
    let _agent = start_agent(
        &fake.endpoint(),
        &db,
        &socket,
        &["--minimum-image-ttl-duration=0s"],
    )
    .await;
    let (db_arg, socket_arg) = (
        db.to_str().expect("utf8").to_owned(),
        socket.to_str().expect("utf8").to_owned(),
    );
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&["--db", &db_arg, "--admin-socket", &socket_arg]);
        output(&all)
    };
    let out = run(&[
        "pin",
        "registry.example/model:1",
        "--for",
        "1h",
        "--reason",
        "rollout",
        "-o",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("ran through the running agent"), "{stderr}");
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        view["image_ids"],
        serde_json::json!(["sha256:aaa"]),
        "{view}"
    );
    assert_eq!(view["active"], true);
    let out = run(&["pins", "--no-headers"]);
    assert!(out.status.success());
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("registry.example/model:1") && listing.contains("rollout"),
        "{listing}"
    );
    let out = run(&["prune", "--container-runtime-endpoint", &fake.endpoint()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<String> = fake.images().into_iter().map(|i| i.id.0).collect();
    assert_eq!(
        ids,
        ["sha256:aaa"],
        "the pinned image stays, the other goes"
    );
    let out = run(&["unpin", "registry.example/nothing:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no pin of"));
    let out = run(&["unpin", "registry.example/model:1"]);
    assert!(out.status.success());
    let out = run(&["pins", "-o", "json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}
